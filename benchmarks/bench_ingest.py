"""Ingest benchmark: packets per second of analysis.read_capture against Scapy, dpkt and tshark.

Writes one synthetic nanosecond pcap of N packets (default 10 million; mixed 64..1500-byte
Ethernet frames, UDP and TCP over IPv4 and IPv6, simple-IMIX sizes) straight from numpy, times our
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.capture import read_capture  # noqa: E402

CHUNK = 250_000
# (ip version, L4 protocol, header bytes up to the payload)
KINDS = [(4, 17, 42), (4, 6, 54), (6, 17, 62), (6, 6, 74)]
KIND_WEIGHTS = [0.45, 0.25, 0.2, 0.1]


def _be(values: np.ndarray, dtype: str) -> np.ndarray:
    """Big-endian bytes of VALUES as a (n, width) uint8 matrix."""
    a = np.ascontiguousarray(values.astype(dtype))
    return a.view(np.uint8).reshape(len(a), -1)


def _headers(kind: int, n: int, length: np.ndarray, flow: np.ndarray, idx: np.ndarray) -> np.ndarray:
    ver, proto, hl = KINDS[kind]
    h = np.zeros((n, hl), np.uint8)
    h[:, 0:12] = np.frombuffer(bytes.fromhex("020000000002" "020000000001"), np.uint8)
    if ver == 4:
        h[:, 12:14] = (0x08, 0x00)
        h[:, 14] = 0x45
        h[:, 16:18] = _be(length - 14, ">u2")
        h[:, 18:20] = _be(idx & 0xFFFF, ">u2")
        h[:, 20] = 0x40
        h[:, 22] = 64
        h[:, 23] = proto
        h[:, 26:30] = _be(0xC6120000 + (flow & 0xFFFF), ">u4")     # 198.18.x.y
        h[:, 30:34] = _be(0xC6130000 + (flow >> 4 & 0xFFFF), ">u4")
        l4 = 34
    else:
        h[:, 12:14] = (0x86, 0xDD)
        h[:, 14] = 0x60
        h[:, 18:20] = _be(length - 54, ">u2")
        h[:, 20] = proto
        h[:, 21] = 64
        h[:, 22:26] = (0x20, 0x01, 0x0D, 0xB8)                    # 2001:db8::/32
        h[:, 30:38] = _be(flow, ">u8")
        h[:, 38:42] = (0x20, 0x01, 0x0D, 0xB8)
        h[:, 42] = 1
        h[:, 46:54] = _be(flow * 7, ">u8")
        l4 = 54
    h[:, l4:l4 + 2] = _be(1024 + flow % 60000, ">u2")
    h[:, l4 + 2:l4 + 4] = _be(np.full(n, 9), ">u2")                    # discard
    if proto == 17:
        h[:, l4 + 4:l4 + 6] = _be(length - l4, ">u2")
    else:
        h[:, l4 + 4:l4 + 8] = _be(idx * 1460, ">u4")
        h[:, l4 + 12] = 0x50
        h[:, l4 + 13] = 0x18
        h[:, l4 + 14:l4 + 16] = (0xFF, 0xFF)
    return h


def write_pcap(path: Path, packets: int, prefix_path: Path | None = None, prefix: int = 0,
               seed: int = 1) -> int:
    """Write PACKETS frames to PATH (and the first PREFIX of them to PREFIX_PATH); returns bytes."""
    rng = np.random.default_rng(seed)
    header = np.array([0xA1B23C4D], "<u4").tobytes() + np.array([2, 4], "<u2").tobytes() \
        + np.array([0, 0, 65535, 1], "<u4").tobytes()
    written = len(header)
    pre = open(prefix_path, "wb") if prefix_path else None
    with open(path, "wb") as out:
        out.write(header)
        if pre:
            pre.write(header)
        for start in range(0, packets, CHUNK):
            n = min(CHUNK, packets - start)
            idx = np.arange(start, start + n, dtype=np.int64)
            kind = rng.choice(4, n, p=KIND_WEIGHTS)
            imix = rng.choice(3, n, p=[7 / 12, 4 / 12, 1 / 12])
            length = np.choose(imix, [rng.integers(64, 128, n), rng.integers(128, 1024, n),
                                      rng.integers(1024, 1501, n)])
            length = np.maximum(length, np.array([k[2] for k in KINDS])[kind])
            flow = rng.integers(0, 20_000, n)
            rec = np.zeros((n, 4), "<u4")
            ts = 1_700_000_000_000_000_000 + idx * 1000 + rng.integers(0, 500, n)
            rec[:, 0] = ts // 1_000_000_000
            rec[:, 1] = ts % 1_000_000_000
            rec[:, 2] = length
            rec[:, 3] = length
            size = 16 + length
            ends = np.cumsum(size)
            offs = ends - size
            buf = np.zeros(int(ends[-1]), np.uint8)
            cols = offs[:, None] + np.arange(16)
            buf[cols] = rec.view(np.uint8).reshape(n, 16)
            for k in range(4):
                sel = np.flatnonzero(kind == k)
                h = _headers(k, len(sel), length[sel], flow[sel], idx[sel])
                buf[(offs[sel] + 16)[:, None] + np.arange(h.shape[1])] = h
            out.write(buf.data)
            written += len(buf)
            if pre and start < prefix:
                m = min(prefix - start, n)
                pre.write(buf[:int(ends[m - 1])].data)
    if pre:
        pre.close()
    return written


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
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.len"],
                         check=True, capture_output=True).stdout
    return out.count(b"\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=10_000_000)
    ap.add_argument("--prefix", type=int, default=100_000)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                    help="where to write the capture (default: the temporary directory; "
                         "/dev/shm works too, but maps more slowly than a disk file's page cache)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of our reader (best is kept)")
    ap.add_argument("--keep", action="store_true", help="keep the generated captures")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "ingest.json")
    args = ap.parse_args()

    base = args.dir
    need = 420 * args.packets
    if shutil.disk_usage(base).free < need:
        raise SystemExit(f"{base}: {shutil.disk_usage(base).free / 1e9:.1f} GB free, the capture "
                         f"needs about {need / 1e9:.1f} GB; choose another --dir or fewer --packets")
    work = Path(tempfile.mkdtemp(prefix="ntg-bench-ingest-", dir=base))
    full, prefix = work / "full.pcap", work / "prefix.pcap"
    try:
        t = time.perf_counter()
        size = write_pcap(full, args.packets, prefix, args.prefix)
        gen_s = time.perf_counter() - t
        print(f"wrote {args.packets:,} packets, {size / 1e9:.2f} GB to {full} in {gen_s:.1f} s",
              file=sys.stderr)

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
            rows.append({"reader": name, "file": path.name, "packets": packets,
                         "seconds": secs, "pps": packets / secs, "first_seconds": first,
                         "runs_seconds": runs})
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
        "packets": args.packets, "prefix_packets": args.prefix, "file_bytes": size,
        "mean_frame_bytes": (size - 24) / args.packets - 16, "generate_seconds": gen_s,
        "capture_dir": str(base), "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                                           "python": platform.python_version()},
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"\n{args.packets:,}-packet nanosecond pcap, {size / 1e9:.2f} GB, mean frame "
          f"{result['mean_frame_bytes']:.0f} B; others on the first {args.prefix:,} packets\n")
    print("| reader | packets | seconds (best) | packets/s | ours ÷ this |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['reader']} | {r['packets']:,} | {r['seconds']:.3f} | {r['pps']:,.0f} | "
              f"{r['ours_over_this']:.1f}× |")
    first = rows[0]["first_seconds"]
    print(f"\nours, first call in the process (fresh memory): {first:.3f} s, "
          f"{args.packets / first:,.0f} packets/s")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
