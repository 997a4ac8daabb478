"""Export benchmark: packets per second of `testbed export --parquet` (analysis.export) against
read_capture on the same file, for each Parquet compression.

Writes one synthetic nanosecond pcap of N packets (default 10 million, bench_ingest's mix of
64..1500-byte frames, UDP and TCP over IPv4 and IPv6, 80,000 flows) straight from numpy, times
read_capture on it (the peer: reading alone), then the export with each compression (packets
and flows, or packets only with --no-flows), checks every export's packet count with DuckDB,
prints a Markdown table and writes benchmarks/out/export.json. Results are written, not asserted.

    python benchmarks/bench_export.py [--packets N] [--compression lz4,none,...] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb

from analysis.capture import read_capture
from analysis.export import COMPRESSIONS, export_captures
from benchmarks.pcapgen import write_pcap


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=10_000_000)
    ap.add_argument(
        "--compression",
        default="none,lz4,snappy,zstd",
        help=f"comma-separated, of {', '.join(COMPRESSIONS)}",
    )
    ap.add_argument("--repeat", type=int, default=2, help="timed runs of each (best is kept)")
    ap.add_argument("--no-flows", action="store_true", help="packets table only")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "export.json")
    args = ap.parse_args()

    need = 500 * args.packets
    if shutil.disk_usage(args.dir).free < need:
        raise SystemExit(f"{args.dir}: needs about {need / 1e9:.1f} GB free; choose another --dir")
    work = Path(tempfile.mkdtemp(prefix="ntg-bench-export-", dir=args.dir))
    pcap = work / "full.pcap"
    rows = []
    try:
        t = time.perf_counter()
        size = write_pcap(pcap, args.packets)
        print(
            f"wrote {args.packets:,} packets, {size / 1e9:.2f} GB in {time.perf_counter() - t:.1f} s",
            file=sys.stderr,
        )
        read_capture(pcap)  # warm the page cache and the allocator
        runs = []
        for _ in range(max(args.repeat, 2)):
            t = time.perf_counter()
            n = len(read_capture(pcap))
            runs.append(time.perf_counter() - t)
        assert n == args.packets
        read_s = min(runs)
        print(f"read_capture: {args.packets / read_s:,.0f} packets/s", file=sys.stderr)
        for comp in args.compression.split(","):
            runs = []
            for _ in range(args.repeat):
                out = work / f"export-{comp}"
                t = time.perf_counter()
                doc = export_captures(
                    [pcap], out, replace=True, compression=comp, flows=not args.no_flows
                )
                runs.append(time.perf_counter() - t)
            secs = min(runs)
            got = duckdb.sql(
                f"SELECT count(*) FROM read_parquet('{out}/packets/**/*.parquet', "
                "hive_partitioning=true)"
            ).fetchall()[0][0]
            if got != args.packets:
                raise SystemExit(
                    f"export {comp}: DuckDB counts {got} packets, expected {args.packets}"
                )
            rows.append(
                {
                    "compression": comp,
                    "flows": not args.no_flows,
                    "seconds": secs,
                    "runs_seconds": runs,
                    "pps": args.packets / secs,
                    "read_over_export": secs / read_s,
                    "bytes": _size(out),
                    "bytes_per_packet": _size(out) / args.packets,
                    "flow_rows": doc["captures"][0].get("flows"),
                }
            )
            print(
                f"export {comp}: {args.packets / secs:,.0f} packets/s, {_size(out) / 1e6:,.0f} MB",
                file=sys.stderr,
            )
            shutil.rmtree(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    result = {
        "packets": args.packets,
        "file_bytes": size,
        "capture_dir": str(args.dir),
        "read_capture": {"seconds": read_s, "pps": args.packets / read_s},
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"\n{args.packets:,}-packet nanosecond pcap, {size / 1e9:.2f} GB; read_capture "
        f"{args.packets / read_s / 1e6:,.1f} M packets/s ({read_s:.2f} s)\n"
    )
    print(
        "| compression | tables | seconds (best) | packets/s | export ÷ read time | on disk | bytes/packet |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['compression']} | {'packets + flows' if r['flows'] else 'packets'} | "
            f"{r['seconds']:.2f} | {r['pps'] / 1e6:,.1f} M | {r['read_over_export']:.1f}× | "
            f"{r['bytes'] / 1e6:,.0f} MB | {r['bytes_per_packet']:.1f} |"
        )
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
