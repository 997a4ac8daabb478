"""Ingest benchmark: packets per second of analysis.read_capture against Scapy, dpkt and tshark.

Writes one synthetic nanosecond pcap of N packets (default 10 million; mixed 64..1500-byte
Ethernet frames, UDP and TCP over IPv4 and IPv6, simple-IMIX sizes) straight from numpy
(benchmarks/pcapgen.py), times our
reader on the whole file and the other readers on a prefix (default 100,000 packets), prints a
Markdown table and writes benchmarks/out/ingest.json. Results are written, not asserted.

    python benchmarks/bench_ingest.py [--packets N] [--prefix N] [--dir DIR] [--keep]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.capture import read_capture
from benchmarks.pcapgen import write_pcap


def _times(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def run_ours(path: Path) -> int:
    return len(read_capture(path))


def run_scapy(path: Path) -> int:
    from scapy.all import rdpcap  # scapy.all loads the layers: rdpcap then dissects each packet

    return len(rdpcap(str(path)))


def run_dpkt_records(path: Path) -> int:
    import dpkt

    n = 0
    with open(path, "rb") as f:
        for _ts, _buf in dpkt.pcap.Reader(f):
            n += 1
    return n


def run_dpkt_dissect(path: Path) -> int:
    """Records plus what our reader extracts: addresses, protocol, ports, TCP flags."""
    import dpkt

    n = 0
    with open(path, "rb") as f:
        for _ts, buf in dpkt.pcap.Reader(f):
            eth = dpkt.ethernet.Ethernet(buf)
            ip = eth.data
            if isinstance(ip, (dpkt.ip.IP, dpkt.ip6.IP6)):
                l4 = ip.data
                _ = (ip.src, ip.dst, ip.p if isinstance(ip, dpkt.ip.IP) else ip.nxt)
                if isinstance(l4, (dpkt.tcp.TCP, dpkt.udp.UDP)):
                    _ = (l4.sport, l4.dport, getattr(l4, "flags", 0))
            n += 1
    return n


def run_tshark(path: Path) -> int:
    out = subprocess.run(
        ["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.len"],
        check=True,
        capture_output=True,
    ).stdout
    return out.count(b"\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=10_000_000)
    ap.add_argument("--prefix", type=int, default=100_000)
    ap.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where to write the capture (default: the temporary directory; "
        "/dev/shm works too, but maps more slowly than a disk file's page cache)",
    )
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of our reader (best is kept)")
    ap.add_argument("--keep", action="store_true", help="keep the generated captures")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "ingest.json")
    args = ap.parse_args()

    base = args.dir
    need = 420 * args.packets
    if shutil.disk_usage(base).free < need:
        raise SystemExit(
            f"{base}: {shutil.disk_usage(base).free / 1e9:.1f} GB free, the capture "
            f"needs about {need / 1e9:.1f} GB; choose another --dir or fewer --packets"
        )
    work = Path(tempfile.mkdtemp(prefix="ntg-bench-ingest-", dir=base))
    full, prefix = work / "full.pcap", work / "prefix.pcap"
    try:
        t = time.perf_counter()
        size = write_pcap(full, args.packets, prefix, args.prefix)
        gen_s = time.perf_counter() - t
        print(
            f"wrote {args.packets:,} packets, {size / 1e9:.2f} GB to {full} in {gen_s:.1f} s",
            file=sys.stderr,
        )

        rows = []

        def measure(name: str, fn, path: Path, packets: int, repeat: int) -> None:
            """Best of REPEAT timed runs after one untimed run that also checks the count (the
            first call in a process pays for fresh memory; `first_seconds` keeps it)."""
            t = time.perf_counter()
            got = fn(path)
            first = time.perf_counter() - t
            if got != packets:
                raise SystemExit(f"{name} read {got} packets from {path}, expected {packets}")
            runs = _times(lambda: fn(path), repeat)
            secs = min(runs)
            rows.append(
                {
                    "reader": name,
                    "file": path.name,
                    "packets": packets,
                    "seconds": secs,
                    "pps": packets / secs,
                    "first_seconds": first,
                    "runs_seconds": runs,
                }
            )
            print(f"{name}: {packets / secs:,.0f} packets/s", file=sys.stderr)

        measure("ours (read_capture)", run_ours, full, args.packets, args.repeat)
        measure("ours (read_capture), prefix", run_ours, prefix, args.prefix, max(args.repeat, 5))
        measure("dpkt (records only)", run_dpkt_records, prefix, args.prefix, 1)
        measure("dpkt (+ Ethernet/IP/L4)", run_dpkt_dissect, prefix, args.prefix, 1)
        measure("scapy rdpcap", run_scapy, prefix, args.prefix, 1)
        if shutil.which("tshark"):
            measure("tshark -T fields -e frame.len", run_tshark, prefix, args.prefix, 1)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    ours = rows[0]["pps"]
    for r in rows:
        r["ours_over_this"] = ours / r["pps"]
    result = {
        "packets": args.packets,
        "prefix_packets": args.prefix,
        "file_bytes": size,
        "mean_frame_bytes": (size - 24) / args.packets - 16,
        "generate_seconds": gen_s,
        "capture_dir": str(base),
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
        f"\n{args.packets:,}-packet nanosecond pcap, {size / 1e9:.2f} GB, mean frame "
        f"{result['mean_frame_bytes']:.0f} B; others on the first {args.prefix:,} packets\n"
    )
    print("| reader | packets | seconds (best) | packets/s | ours ÷ this |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['reader']} | {r['packets']:,} | {r['seconds']:.3f} | {r['pps']:,.0f} | "
            f"{r['ours_over_this']:.1f}× |"
        )
    first = rows[0]["first_seconds"]
    print(
        f"\nours, first call in the process (fresh memory): {first:.3f} s, "
        f"{args.packets / first:,.0f} packets/s"
    )
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
