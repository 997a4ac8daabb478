#!/usr/bin/env python3
"""Live host labelling rate (testbed.ids.hostlabel.label_live): sessions labelled per second.

One lab per row (client, router and server namespaces, made and removed by `label_live`), N
sessions each: a plain TCP dialogue (request, response, a second request: handshake, 3
messages, FIN both ways) or a UDP request and answer, IPv4 or IPv6. The time includes building
and removing the lab; the setup alone is measured with one session. Results go to
benchmarks/out/hostlabel.json, a Markdown table to stdout. Needs root.

    python benchmarks/bench_hostlabel.py [--sessions N]
"""

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
sys.path.insert(0, str(REPO))

from idsrules.evasion.model import plain_plan  # noqa: E402
from testbed.ids.hostlabel import label_live  # noqa: E402

REQ = b"GET /index.html HTTP/1.1\r\nHost: bench.example\r\n\r\n"
RESP = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def items(proto: str, n: int):
    if proto == "tcp":
        return [
            (plain_plan("tcp", [(True, REQ), (False, RESP), (True, REQ)], i), 8080)
            for i in range(n)
        ]
    return [(plain_plan("udp", [(True, REQ), (False, RESP)], i), 5353) for i in range(n)]


def run(proto: str, version: int, n: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="ntg-bench-hostlabel-") as tmp:
        t0 = time.perf_counter()
        result = label_live(items(proto, n), Path(tmp), ip_version=version)
        wall = time.perf_counter() - t0
    reached = sum(o.reached for o in result.outcomes)
    return {"proto": proto, "ip": version, "sessions": n, "reached": reached, "wall_s": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=300)
    args = ap.parse_args()
    rows = [run("tcp", 4, 1)]  # the lab's setup and removal
    for proto, version in (("tcp", 4), ("tcp", 6), ("udp", 4)):
        rows.append(run(proto, version, args.sessions))
    setup = rows[0]["wall_s"]
    print("| sessions | proto | IP | reached | wall s | sessions/s (setup excluded) |")
    print("|---:|---|---|---:|---:|---:|")
    for r in rows:
        rate = (r["sessions"] - 1) / max(r["wall_s"] - setup, 1e-9) if r["sessions"] > 1 else 0
        r["rate_per_s"] = rate
        print(
            f"| {r['sessions']} | {r['proto']} | v{r['ip']} | {r['reached']} | "
            f"{r['wall_s']:.2f} | {rate:.0f} |"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    doc = {"machine": platform.node(), "kernel": platform.release(), "rows": rows}
    (OUT / "hostlabel.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if all(r["reached"] == r["sessions"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
