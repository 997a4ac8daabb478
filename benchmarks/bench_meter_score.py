"""Flow-meter scoring benchmark: analysis.flowmeter's score on N collected records (default
1 million), beside two peers reading the same number of records in the same run.

Writes a nanosecond pcap of N one-packet IPv4/UDP flows (numpy, distinct keys, 1 us apart) and:

- `reference`: reference_records(pcap) -> N records (the capture read in chunks, cut by numpy);
- `score`: score(reference, collected), collected being the reference as a meter with
  millisecond times reports it (times cut to the ms, received 5 ms after expiry): every key is
  settled by the fast path, as for a meter that exports what it should;
- `score_full_match`: the same with every collected first time 2 ms early (beyond the
  tolerance): no key is settled by the fast path, all go through the full matching in DuckDB
  (each record then `differs`; the worst case);
- peers: `nfdump -r FILE -o csv` printing the records of an nfcapd file that nfpcapd made from
  the same pcap (nfdump reading back what a collector stored: the step before the score), and
  pyarrow.csv reading the collected records from a CSV file.

Best of --repeat after one untimed run. Prints a Markdown table and writes
benchmarks/out/meter_score.json. Results are written, not asserted.

    python benchmarks/bench_meter_score.py [--records N] [--repeat K] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.flowmeter import COLLECTED_SCHEMA, MeterRules, conform, reference_records
from analysis.flowmeter.score import score

T0 = 1_700_000_000_000_000_000
S, MS = 1_000_000_000, 1_000_000
FRAME = 60  # Ethernet 14 + IPv4 20 + UDP 8 + 18 bytes of payload


def write_flows(path: Path, n: int) -> None:
    """N one-packet flows 198.18.a.b:sport -> 198.19.0.1:53, 1 us apart (every key distinct)."""
    i = np.arange(n, dtype=np.int64)
    rec = np.zeros((n, 16 + FRAME), np.uint8)
    t = T0 + i * 1000
    head = np.stack([t // S, (t % S), np.full(n, FRAME), np.full(n, FRAME)], axis=1).astype("<u4")
    rec[:, :16] = head.view(np.uint8).reshape(n, 16)
    f = rec[:, 16:]
    f[:, 0:12] = np.frombuffer(bytes.fromhex("020000000002020000000001"), np.uint8)
    f[:, 12:14] = (0x08, 0x00)
    f[:, 14] = 0x45
    f[:, 16:18] = (0, FRAME - 14)
    f[:, 22] = 64
    f[:, 23] = 17
    host = i // 50_000
    f[:, 26:28] = (198, 18)
    f[:, 28] = host >> 8
    f[:, 29] = host & 0xFF
    f[:, 30:34] = (198, 19, 0, 1)
    sport = 1024 + i % 50_000
    f[:, 34] = sport >> 8
    f[:, 35] = sport & 0xFF
    f[:, 36:38] = (0, 53)
    f[:, 38:40] = (0, FRAME - 34)
    with path.open("wb") as out:
        out.write(np.array([0xA1B23C4D, 0x00040002, 0, 0, 262144, 1], "<u4").tobytes())
        rec.tofile(out)


def best(fn: Callable[[], Any], repeat: int) -> dict:
    fn()
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return {"seconds": min(runs), "runs_seconds": runs}


def collected_from(reference: pa.Table, early_ns: int) -> pa.Table:
    """The reference as a meter reports it: times cut to the millisecond, the first EARLY_NS
    earlier still."""
    cols = {name: reference.column(name) for name in reference.column_names}
    for name, shift in (("first_ns", early_ns), ("last_ns", 0)):
        v = reference.column(name).to_numpy()
        cols[name] = pa.array(v // MS * MS - shift)
    cols["received_ns"] = pc.add(reference.column("expire_ns"), 5 * MS)
    return conform(pa.table(cols), COLLECTED_SCHEMA)


def nfdump_peer(pcap: Path, work: Path, repeat: int) -> dict:
    """nfdump printing (CSV) the records of the nfcapd file nfpcapd writes for PCAP."""
    if not (shutil.which("nfpcapd") and shutil.which("nfdump")):
        return {"skipped": "nfpcapd/nfdump not installed (Debian package nfdump)"}
    flows = work / "flows"
    flows.mkdir(exist_ok=True)
    t = time.perf_counter()
    made = subprocess.run(
        ["nfpcapd", "-r", str(pcap), "-w", str(flows), "-e", "300,60", "-B", "2097152"],
        capture_output=True,
        text=True,
    )
    build = time.perf_counter() - t
    files = sorted(p for p in flows.rglob("nfcapd.*") if p.is_file())
    if made.returncode or not files:
        return {"skipped": f"nfpcapd made no file: {made.stderr[-300:]}"}
    read = ["nfdump", "-q", "-o", "csv"]
    for f in files:
        read += ["-r", str(f)] if len(files) == 1 else []
    if len(files) > 1:
        read += ["-R", str(flows)]

    def run() -> int:
        p = subprocess.run(read, capture_output=True, check=True)
        return p.stdout.count(b"\n")

    lines = run()
    out = best(run, repeat)
    out.update(lines=lines, nfpcapd_seconds=build, files=len(files))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--keep", action="store_true", help="keep the pcap and the nfcapd files")
    args = ap.parse_args()
    n = args.records
    work = Path(tempfile.mkdtemp(prefix="ntg-bench-meter-score-", dir=args.dir))
    try:
        pcap = work / "flows.pcap"
        write_flows(pcap, n)
        rules = MeterRules(idle_timeout_ns=15 * S, active_timeout_ns=60 * S)
        ref_box: list[pa.Table] = []
        reference_run = best(lambda: ref_box.append(reference_records(pcap, rules)), 1)
        ref = ref_box[-1]
        assert ref.num_rows == n, (ref.num_rows, n)
        collected = collected_from(ref, 0)
        late = collected_from(ref, 2 * MS)
        result: dict = {}
        fast = best(lambda: result.update(score=score(ref, collected)), args.repeat)
        totals = result["score"].totals
        assert totals["exact"] == n, totals
        full = best(lambda: result.update(full=score(ref, late)), max(1, args.repeat - 2))
        assert result["full"].totals["differs"] == n, result["full"].totals
        csv_path = work / "collected.csv"
        pacsv.write_csv(collected, csv_path)
        csv_read = best(lambda: pacsv.read_csv(csv_path), args.repeat)
        nfdump = nfdump_peer(pcap, work, args.repeat)
        doc = {
            "benchmark": "meter_score",
            "machine": {
                "platform": platform.platform(),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
            },
            "records": n,
            "pcap_bytes": pcap.stat().st_size,
            "reference": reference_run | {"packets_per_second": n / reference_run["seconds"]},
            "score": fast | {"records_per_second": n / fast["seconds"]},
            "score_full_match": full | {"records_per_second": n / full["seconds"]},
            "peer_pyarrow_csv_read": csv_read | {"records_per_second": n / csv_read["seconds"]},
            "peer_nfdump_csv": nfdump
            | (
                {"records_per_second": nfdump["lines"] / nfdump["seconds"]}
                if "seconds" in nfdump
                else {}
            ),
        }
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    out = ROOT / "benchmarks" / "out" / "meter_score.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"| what ({n:,} records) | seconds | records/s |\n|---|---|---|")
    for key in (
        "reference",
        "score",
        "score_full_match",
        "peer_pyarrow_csv_read",
        "peer_nfdump_csv",
    ):
        d = doc[key]
        if "seconds" in d:
            rate = d.get("records_per_second", d.get("packets_per_second"))
            print(f"| {key} | {d['seconds']:.3f} | {rate:,.0f} |")
        else:
            print(f"| {key} | {d.get('skipped')} | |")
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
