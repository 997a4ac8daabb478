"""Monitor benchmark: the CPU cost of testbed.parts.monitor.Sampler at 1 Hz and 10 Hz.

Starts ~20 processes through ntgcore.proc.Process (16 sleeping ones, 2 with 8 threads each that
mostly sleep, 2 that spin on a quarter of the time), samples them with the Sampler for a few
seconds at each rate, and reports the sampler's own CPU time over wall time (its thread's CPU
time, as the Sampler's summary gives it), the CPU time per tick and the rows written. Prints a
Markdown table and writes benchmarks/out/monitor.json. Results are written, not asserted.

    python benchmarks/bench_monitor.py [--seconds S] [--procs N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ntgcore.proc import Process
from testbed.parts.monitor import Sampler

SLEEPER = "import time; time.sleep(3600)"
THREADED = (
    "import threading, time\n"
    "def idle():\n    while True: time.sleep(0.05)\n"
    "for _ in range(7): threading.Thread(target=idle, daemon=True).start()\n"
    "time.sleep(3600)\n"
)
DUTY = (
    "import time\n"
    "while True:\n    t = time.monotonic()\n    while time.monotonic() - t < 0.025: pass\n"
    "    time.sleep(0.075)\n"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="sampling time per rate")
    ap.add_argument("--procs", type=int, default=20, help="processes sampled (at least 4)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "monitor.json")
    args = ap.parse_args()
    kinds = [("threaded", THREADED)] * 2 + [("duty", DUTY)] * 2
    kinds += [("sleeper", SLEEPER)] * max(0, args.procs - len(kinds))
    procs = [
        Process(f"{k}{i}", [sys.executable, "-c", code]).start()
        for i, (k, code) in enumerate(kinds)
    ]
    results = []
    try:
        time.sleep(1.0)  # let the interpreters start and their threads run
        pids = {p.name: p.pid for p in procs}
        with tempfile.TemporaryDirectory() as tmp:
            for hz in (1.0, 10.0):
                s = Sampler(Path(tmp) / f"samples-{hz:g}.csv", hz=hz, pids=lambda: pids).start()
                time.sleep(args.seconds)
                summary = s.stop()
                threads = sum(1 for line in open(summary["csv"]) if ",thread," in line)
                results.append(
                    {
                        "hz": hz,
                        "processes": len(procs),
                        "threads_sampled": threads // summary["ticks"],
                        "seconds": summary["wall_s"],
                        "ticks": summary["ticks"],
                        "late_ticks": summary["late_ticks"],
                        "rows": summary["rows"],
                        "sampler_cpu_s": summary["sampler_cpu_s"],
                        "overhead_percent_of_one_core": summary["overhead_percent"],
                        "cpu_ms_per_tick": round(
                            summary["sampler_cpu_s"] / summary["ticks"] * 1e3, 3
                        ),
                    }
                )
    finally:
        for p in procs:
            p.stop(grace=2)
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "kernel": platform.release(),
        },
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print("| rate | processes (threads) | ticks (late) | CPU per tick | overhead (% of one core) |")
    print("|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['hz']:g} Hz | {r['processes']} ({r['threads_sampled']}) | {r['ticks']} "
            f"({r['late_ticks']}) | {r['cpu_ms_per_tick']:.2f} ms | "
            f"{r['overhead_percent_of_one_core']:.2f} % |"
        )
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
