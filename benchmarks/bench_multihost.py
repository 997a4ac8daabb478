#!/usr/bin/env python3
"""Two generator hosts against one (testbed.spread, docs/multihost.md): where the wire allows,
two hosts each sending R give the receiver 2R.

In the same run, alternating, REPEAT times each, on the two-hosts topology (namespaces h0, h1, a
receiver rx whose ports rx0/rx1 face the hosts, and a tap that sees both ports):
- one host: `spread.hosts: [h0]`, K UDP flows of r packets/s (R = K*r),
- two hosts: `spread.hosts: [h0, h1]`, 2K flows of r packets/s, chosen among candidates so that
  the split by flow hash gives each host exactly K (each host sends R).
The receiver's rate is the tap capture's packets over its first-to-last time span; the ratio
two/one is the scaling (2.0: perfect). Per-host rates, the exact merged-count check and the start
skew are recorded too (the start held by the engine's `--start-at` when the build has it, else by
the ntgcore.startat waiter: `held_by`). Results: benchmarks/out/multihost.json; a Markdown table on stdout. Root.

    python benchmarks/bench_multihost.py [--flows K] [--rate r] [--seconds S] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from analysis.capture import read_capture
from generators.flowengine import engine_options, engine_path
from ntgcore.scenario import load_scenario, parse_scenario
from testbed.methods import flow_key_hash
from testbed.runner import run_scenario

OUT = REPO / "benchmarks" / "out"
HOST = '{{at: "h{i}:eth0", capture: "rx:rx{i}"}}'


def flow_line(n: int, rate: int, seconds: float) -> str:
    return (
        f"  - {{name: f{n}, protocol: udp, src: 198.18.{30 + n // 250}.{n % 250 + 1}, dst: 198.19.30.1, "
        f"src_port: {20000 + n}, dst_port: 5000, rate: {rate}, duration: {seconds}s, payload: {{size: 60}}}}"
    )


def text(flows: list[str], hosts: int) -> str:
    return "\n".join(
        [
            "version: 1",
            f"name: bench-multihost-{hosts}",
            "flows:",
            *flows,
            "testbed:",
            "  topology: two-hosts",
            "  generators: [{name: flowengine}]",
            f"  spread: {{hash: murmur3_32, start_lead: 1s, hosts: [{', '.join(HOST.format(i=i) for i in range(hosts))}]}}",
            '  capture: {at: "tap:tap0", snaplen: 64}',
            "",
        ]
    )


def balanced_flows(k: int, rate: int, seconds: float) -> tuple[list[str], list[str]]:
    """K flow lines the split gives host 0 and K it gives host 1 (of 2), by the project's hash."""
    by_host: list[list[str]] = [[], []]
    n = 0
    while min(map(len, by_host)) < k:
        line = flow_line(n, rate, seconds)
        flow = parse_scenario(text([line], 1), "candidate").flows[0]
        owner = flow_key_hash(flow, "murmur3_32") % 2
        if len(by_host[owner]) < k:
            by_host[owner].append(line)
        n += 1
    return by_host[0], by_host[1]


def measure(path: Path, out: Path) -> dict:
    result = run_scenario(load_scenario(path), out, analyze=False, show_progress=False)
    step = result.manifest["steps"][0]
    tap = read_capture(Path(result.run_dir) / "capture.pcap")
    span = (int(tap.ts_ns[-1]) - int(tap.ts_ns[0])) / 1e9 if len(tap) > 1 else 0.0
    spread = step["spread"]
    return {
        "status": result.manifest["status"],
        "receiver_packets": len(tap),
        "receiver_pps": (len(tap) - 1) / span if span else None,
        "sent": spread["packets_sent"],
        "merged": (spread.get("merged") or {}).get("packets"),
        "checks_ok": all(c["ok"] for c in spread.get("checks", [])),
        "start_skew_ms": spread["start_skew_ms"],
        "hosts": [
            {
                "name": h["name"],
                "flows": h["flow_count"],
                "sent": h["packets_sent"],
                "captured": h.get("captured"),
                "pps": h.get("rate_pps"),
                "start_offset_ms": h.get("start_offset_ms"),
            }
            for h in spread["hosts"]
        ],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flows", type=int, default=10, help="K: flows per host")
    ap.add_argument("--rate", type=int, default=2000, help="r: packets/s per flow")
    ap.add_argument("--seconds", type=float, default=3.0, help="how long every flow sends")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    h0, h1 = balanced_flows(args.flows, args.rate, args.seconds)
    rows: dict[str, list[dict]] = {"one": [], "two": []}
    with tempfile.TemporaryDirectory(prefix="ntg-bench-mh-") as tmp:
        one, two = Path(tmp) / "one.yaml", Path(tmp) / "two.yaml"
        one.write_text(text(h0, 1))
        two.write_text(text(h0 + h1, 2))
        for _ in range(args.repeat):  # alternating, so that drift of the machine hits both alike
            rows["one"].append(measure(one, Path(tmp) / "runs"))
            rows["two"].append(measure(two, Path(tmp) / "runs"))
    med = {k: statistics.median(r["receiver_pps"] for r in v) for k, v in rows.items()}
    ratios = [t["receiver_pps"] / o["receiver_pps"] for o, t in zip(rows["one"], rows["two"])]
    engine = engine_path()
    held_by = (
        "flowengine --start-at" if "--start-at" in engine_options(engine) else "ntgcore.startat"
    )
    result = {
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "engine": str(engine),
        "held_by": held_by,
        "flows_per_host": args.flows,
        "rate_per_flow": args.rate,
        "per_host_pps": args.flows * args.rate,
        "seconds": args.seconds,
        "repeat": args.repeat,
        "runs": rows,
        "median_receiver_pps": med,
        "ratio_two_over_one": ratios,
        "median_ratio": statistics.median(ratios),
        "skew_ms_two_hosts": [r["start_skew_ms"] for r in rows["two"]],
        "exact_counts": all(
            r["checks_ok"] and r["merged"] == r["sent"] for v in rows.values() for r in v
        ),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "multihost.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"| hosts | offered pps | receiver pps (median of {args.repeat}) | start skew ms |")
    print("|---|---|---|---|")
    print(f"| 1 | {args.flows * args.rate:,} | {med['one']:,.0f} | - |")
    skews = ", ".join(f"{s:.2f}" for s in result["skew_ms_two_hosts"])
    print(f"| 2 | {2 * args.flows * args.rate:,} | {med['two']:,.0f} | {skews} |")
    print(
        f"\nratio two/one: {result['median_ratio']:.3f} (runs: {', '.join(f'{r:.3f}' for r in ratios)}); "
        f"merged counts exact in every run: {result['exact_counts']}; start held by {held_by}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
