#!/usr/bin/env python3
"""Throughput of the native flow engine (generators/flowengine).

Generates sessions of 64-byte frames (IPv4/UDP, 22-byte payload) with 1, 1,000
and 1,000,000 concurrent flows, runs `flowengine gen` on each to the null sink
and to a pcap on tmpfs (/dev/shm, deleted afterwards), and reports Mpps as the
engine measured it (summary JSON) next to the process's wall time. A fourth
case, 1,000,000 flows spread over 1,000 distinct periods, shows the planner
when its per-period FIFOs no longer collapse the heap.

Results go to benchmarks/out/engine.json; a Markdown table goes to stdout.

    python benchmarks/bench_engine.py [--packets N] [--repeat R] [--bin PATH]
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"

FLOW = (
    "flow af=4 proto=17 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 "
    "src=198.18.0.0/15 src_mode=increment dst=198.19.0.1/32 dst_mode=fixed "
    "sport=1024-65535 sport_mode=random dport=9-9 dport_mode=fixed "
    "start={start} period={period} packets={packets} size=22-22 payload=- "
    "reps={reps} rep_period={rep_period}"
)


def find_binary(explicit):
    for c in (
        explicit,
        os.environ.get("NTG_FLOWENGINE"),
        shutil.which("flowengine"),
        str(Path(sysconfig.get_path("scripts")) / "flowengine"),
    ):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return Path(c)
    build = OUT / "flowengine-build"
    print(f"flowengine not found; building it in {build}", file=sys.stderr)
    subprocess.run(
        [
            "cmake",
            "-S",
            str(REPO / "generators" / "flowengine"),
            "-B",
            str(build),
            "-DCMAKE_BUILD_TYPE=Release",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(["cmake", "--build", str(build), "-j"], check=True, stdout=subprocess.DEVNULL)
    return build / "flowengine"


def sessions(total):
    """name -> (concurrent flows, session text); every flow of a case is live at once."""

    def text(lines):
        return "ntg-session 1\nseed 1\n" + "\n".join(lines) + "\n"

    cases = {}
    for flows in (1, 1_000, 1_000_000):
        per = max(2, total // flows)
        # Repetitions start 1 ns apart and each lasts far longer than all the
        # starts together, so all `flows` instances overlap.
        period = max(1, flows)
        cases[f"{flows:,} flow{'s' if flows > 1 else ''}"] = (
            flows,
            text([FLOW.format(start=0, period=period, packets=per, reps=flows, rep_period=1)]),
        )
    lines, classes, reps = [], 1_000, 1_000
    per = max(2, total // (classes * reps))
    for k in range(classes):
        lines.append(
            FLOW.format(
                start=k, period=1_000_000 + 997 * k, packets=per, reps=reps, rep_period=1_000
            )
        )
    cases["1,000,000 flows, 1,000 periods"] = (classes * reps, text(lines))
    return cases


def run_once(binary, session, sink, shm):
    summary = Path(tempfile.mkstemp(prefix="fe-bench-", suffix=".json")[1])
    pcap = Path(shm) / f"fe-bench-{os.getpid()}.pcap"
    args = [str(binary), "gen", str(session), "--summary", str(summary), "--stats", os.devnull]
    args += ["--null"] if sink == "null" else ["-o", str(pcap)]
    try:
        t0 = time.perf_counter()
        r = subprocess.run(args, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"flowengine exited {r.returncode}: {r.stderr.strip()}")
        s = json.loads(summary.read_text())
        s["process_wall_seconds"] = wall
        s["pcap_bytes"] = pcap.stat().st_size if sink == "pcap" else 0
        return s
    finally:
        summary.unlink(missing_ok=True)
        pcap.unlink(missing_ok=True)


def scapy_peer(shm, packets=100_000):
    """The usual Python way to make the same pcap: Scapy builds each frame and writes it."""
    try:
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        from scapy.utils import PcapWriter
    except ImportError:
        return None
    pcap = Path(shm) / f"fe-bench-scapy-{os.getpid()}.pcap"
    payload = bytes(22)
    t0 = time.perf_counter()
    with PcapWriter(str(pcap), nano=True, sync=False) as w:
        for i in range(packets):
            frame = (
                Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                / IP(src=f"198.18.{(i >> 8) & 255}.{i & 255}", dst="198.19.0.1")
                / UDP(sport=1024 + i % 60000, dport=9)
                / payload
            )
            frame.time = i * 1e-6
            w.write(frame)
    wall = time.perf_counter() - t0
    pcap.unlink(missing_ok=True)
    return {"packets": packets, "seconds": wall, "mpps": packets / wall / 1e6}


def write_ceiling(shm, nbytes):
    """How fast this machine writes the same number of bytes to the same file system (dd, 1 MiB
    blocks): the pcap sink can get close to this but not past it."""
    target = Path(shm) / f"fe-bench-dd-{os.getpid()}"
    blocks = max(1, nbytes >> 20)
    t0 = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={blocks}"],
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - t0
    target.unlink(missing_ok=True)
    return {"bytes": blocks << 20, "seconds": wall, "bytes_per_second": (blocks << 20) / wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=20_000_000, help="packets per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the median is reported")
    ap.add_argument("--bin", help="flowengine executable")
    ap.add_argument("--shm", default="/dev/shm", help="tmpfs directory for the pcap runs")
    ap.add_argument("--out", default=str(OUT / "engine.json"))
    a = ap.parse_args()

    binary = find_binary(a.bin)
    version = subprocess.run(
        [str(binary), "version"], capture_output=True, text=True
    ).stdout.strip()
    if not os.access(a.shm, os.W_OK):
        sys.exit(f"{a.shm} is not writable (needed for the pcap runs)")

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (flows, text) in sessions(a.packets).items():
            session = Path(tmp) / "bench.ntg"
            session.write_text(text)
            for sink in ("null", "pcap"):
                runs = [run_once(binary, session, sink, a.shm) for _ in range(a.repeat)]
                mpps = [r["mpps"] for r in runs]
                med = sorted(runs, key=lambda r: r["mpps"])[len(runs) // 2]
                results.append(
                    {
                        "case": name,
                        "concurrent_flows": flows,
                        "sink": sink,
                        "packets": med["packets"],
                        "frame_bytes": med["bytes"] // med["packets"],
                        "mpps_median": statistics.median(mpps),
                        "mpps_min": min(mpps),
                        "mpps_max": max(mpps),
                        "engine_wall_seconds": med["wall_seconds"],
                        "process_wall_seconds": med["process_wall_seconds"],
                        "pcap_bytes": med["pcap_bytes"],
                        "runs": runs,
                    }
                )
                print(f"{name:32} {sink:5} {statistics.median(mpps):7.2f} Mpps", file=sys.stderr)

    pcap_rows = [r for r in results if r["sink"] == "pcap"]
    ceiling = write_ceiling(a.shm, max(r["pcap_bytes"] for r in pcap_rows))
    per_record = pcap_rows[0]["pcap_bytes"] / pcap_rows[0]["packets"]
    ceiling["equivalent_mpps"] = ceiling["bytes_per_second"] / per_record / 1e6
    scapy = scapy_peer(a.shm)
    report = {
        "flowengine": version,
        "binary": str(binary),
        "packets_per_run": a.packets,
        "repeat": a.repeat,
        "pcap_dir": a.shm,
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "targets_mpps": {"null": 10, "pcap": 5},
        "results": results,
        "peers": {"scapy_pcapwriter": scapy, "dd_write_ceiling": ceiling},
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    print(f"{version}, {a.packets:,} packets of 64 bytes per run, median of {a.repeat}\n")
    print("| case | sink | Mpps (median) | min–max | engine s | process s |")
    print("|---|---|---:|---:|---:|---:|")
    for r in results:
        sink = "null" if r["sink"] == "null" else f"pcap ({a.shm})"
        print(
            f"| {r['case']} | {sink} | {r['mpps_median']:.2f} | "
            f"{r['mpps_min']:.2f}–{r['mpps_max']:.2f} | {r['engine_wall_seconds']:.3f} | "
            f"{r['process_wall_seconds']:.3f} |"
        )
    best_pcap = max(r["mpps_median"] for r in pcap_rows)
    print(
        f"\nPeers in the same run: `dd` writes {a.shm} at {ceiling['bytes_per_second'] / 1e9:.2f} GB/s, "
        f"the equivalent of {ceiling['equivalent_mpps']:.1f} Mpps of these records (the engine's "
        f"best pcap case reaches {best_pcap / ceiling['equivalent_mpps']:.0%} of it)",
        end="",
    )
    if scapy:
        print(
            f"; Scapy builds and writes the same frames at {scapy['mpps'] * 1e3:.1f} kpps "
            f"({scapy['packets']:,} packets), so the engine's 1-flow pcap case is "
            f"{pcap_rows[0]['mpps_median'] / scapy['mpps']:,.0f}x Scapy."
        )
    else:
        print("; Scapy is not installed, so its row is missing.")
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
