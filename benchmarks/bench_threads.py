#!/usr/bin/env python3
"""FLOR 6.5: throughput of the native flow engine against `gen --threads N`.

Sessions of 64-byte frames (IPv4/UDP, 22-byte payload) with 2^10 and 2^20 concurrent flows, built
like benchmarks/bench_engine.py builds them (one meta-flow whose repetitions all overlap), run with
1..T threads (default: up to the machine's CPU count) to the null sink and to a pcap on tmpfs
(/dev/shm, deleted afterwards). Mpps as the engine measured it (summary JSON), the median of
--repeat runs, next to the process's wall time and CPU time (user + system).

Results go to benchmarks/out/threads.json; a Markdown table goes to stdout.

    python benchmarks/bench_threads.py [--packets N] [--repeat R] [--max-threads T] [--bin PATH]
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import FLOW, OUT, find_binary


def sessions(total):
    cases = {}
    for exp in (10, 20):
        flows = 1 << exp
        per = max(2, total // flows)
        text = (
            "ntg-session 1\nseed 1\n"
            + FLOW.format(start=0, period=flows, packets=per, reps=flows, rep_period=1)
            + "\n"
        )
        cases[f"2^{exp} flows"] = (flows, text)
    return cases


def run_once(binary, session, sink, threads, shm):
    summary = Path(tempfile.mkstemp(prefix="fe-bench-", suffix=".json")[1])
    pcap = Path(shm) / f"fe-bench-threads-{os.getpid()}.pcap"
    args = [
        str(binary),
        "gen",
        str(session),
        "--summary",
        str(summary),
        "--stats",
        os.devnull,
        "--threads",
        str(threads),
    ]
    args += ["--null"] if sink == "null" else ["-o", str(pcap)]
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run(args, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            raise RuntimeError(f"flowengine exited {r.returncode}: {r.stderr.strip()}")
        s = json.loads(summary.read_text())
        s["process_wall_seconds"] = wall
        s["cpu_seconds"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        s["pcap_bytes"] = pcap.stat().st_size if sink == "pcap" else 0
        return s
    finally:
        summary.unlink(missing_ok=True)
        pcap.unlink(missing_ok=True)


def parallel_ceiling(binary, session, n, repeat):
    """Aggregate Mpps of n independent one-thread processes on the null sink at the same time:
    what this host can give n workers at best (no shared state at all)."""
    best = []
    for _ in range(repeat):
        procs, t0 = [], time.perf_counter()
        for _ in range(n):
            procs.append(
                subprocess.Popen(
                    [str(binary), "gen", str(session), "--null", "--stats", os.devnull],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        packets = 0
        for p in procs:
            _, err = p.communicate()
            packets += json.loads(err.strip().splitlines()[-1])["packets"]
        best.append(packets / (time.perf_counter() - t0) / 1e6)
    return statistics.median(best)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=20_000_000, help="packets per run")
    ap.add_argument("--repeat", type=int, default=5, help="runs per case; the median is reported")
    ap.add_argument("--max-threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--bin", help="flowengine executable")
    ap.add_argument("--shm", default="/dev/shm", help="tmpfs directory for the pcap runs")
    ap.add_argument("--out", default=str(OUT / "threads.json"))
    a = ap.parse_args()

    binary = find_binary(a.bin)
    version = subprocess.run(
        [str(binary), "version"], capture_output=True, text=True
    ).stdout.strip()
    if not os.access(a.shm, os.W_OK):
        sys.exit(f"{a.shm} is not writable (needed for the pcap runs)")
    threads = list(range(1, max(1, a.max_threads) + 1))

    results, ceiling = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (flows, text) in sessions(a.packets).items():
            session = Path(tmp) / "bench.ntg"
            session.write_text(text)
            for sink in ("null", "pcap"):
                for n in threads:
                    runs = [run_once(binary, session, sink, n, a.shm) for _ in range(a.repeat)]
                    mpps = [r["mpps"] for r in runs]
                    med = sorted(runs, key=lambda r: r["mpps"])[len(runs) // 2]
                    results.append(
                        {
                            "case": name,
                            "concurrent_flows": flows,
                            "sink": sink,
                            "threads": n,
                            "packets": med["packets"],
                            "frame_bytes": med["bytes"] // med["packets"],
                            "mpps_median": statistics.median(mpps),
                            "mpps_min": min(mpps),
                            "mpps_max": max(mpps),
                            "engine_wall_seconds": med["wall_seconds"],
                            "process_wall_seconds": med["process_wall_seconds"],
                            "cpu_seconds": med["cpu_seconds"],
                            "peak_rss_bytes": med["peak_rss_bytes"],
                            "runs": runs,
                        }
                    )
                    print(
                        f"{name:14} {sink:5} {n:2} threads {statistics.median(mpps):7.2f} Mpps",
                        file=sys.stderr,
                    )

            ceiling[name] = {n: parallel_ceiling(binary, session, n, a.repeat) for n in threads}
            print(f"{name:14} ceiling {ceiling[name]}", file=sys.stderr)

    base = {(r["case"], r["sink"]): r["mpps_median"] for r in results if r["threads"] == 1}
    for r in results:
        r["speedup"] = r["mpps_median"] / base[(r["case"], r["sink"])]
    report = {
        "flowengine": version,
        "binary": str(binary),
        "packets_per_run": a.packets,
        "repeat": a.repeat,
        "pcap_dir": a.shm,
        "threads": threads,
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "results": results,
        "independent_processes_null_mpps": ceiling,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    print(
        f"{version}, {a.packets:,} packets of 64 bytes per run, median of {a.repeat}, "
        f"{os.cpu_count()} CPUs\n"
    )
    print("| case | sink | threads | Mpps (median) | min–max | speedup | engine s | CPU s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        sink = "null" if r["sink"] == "null" else f"pcap ({a.shm})"
        print(
            f"| {r['case']} | {sink} | {r['threads']} | {r['mpps_median']:.2f} | "
            f"{r['mpps_min']:.2f}–{r['mpps_max']:.2f} | {r['speedup']:.2f}x | "
            f"{r['engine_wall_seconds']:.3f} | {r['cpu_seconds']:.2f} |"
        )
    print(
        "\nHost ceiling: n independent one-thread processes on the null sink at once, aggregate "
        "Mpps (process wall time, so a little below the engine's own figure):\n"
    )
    print("| case | " + " | ".join(f"{n} process{'es' if n > 1 else ''}" for n in threads) + " |")
    print("|---|" + "---:|" * len(threads))
    for name, c in ceiling.items():
        print(f"| {name} | " + " | ".join(f"{c[n]:.2f}" for n in threads) + " |")
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
