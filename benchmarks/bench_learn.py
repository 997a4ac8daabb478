"""`testbed learn`'s speed: packets per second of learning from a capture, against the analysis'
own streaming read (`read_stream`: metrics and flow table) of the same file, in one run.

The capture is made by the engine (`flowengine gen`) from a scenario of two-way exchanges, each
with its own 5-tuple: DNS-like UDP (one 60-byte request, two 500-byte responses) and TCP (six
100-byte segments from the client, six 1000-byte ones from the server); --sessions N of them
(default 600,000: 3.6 million packets, 1.9 GB). Measured, best of --repeat after one untimed run:

- learn: `learn_capture` as `testbed learn` runs it (reading, sessions, fit, YAML; without
  hashing the input or validating the YAML, which are reported apart);
- sessions: only the reading and the sessions (PacketSessions over iter_capture);
- read_stream: analysis.stream.read_stream with the flow table (what `testbed analyze` reads).

Prints a Markdown table and writes benchmarks/out/learn.json. Results are written, not asserted.

    python benchmarks/bench_learn.py [--sessions N] [--repeat K] [--dir DIR] [--keep]
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

from analysis.capture import iter_capture
from analysis.learn import LearnOptions, chunk_size, learn_capture
from analysis.learn.sessions import PacketSessions
from analysis.stream import read_stream
from generators.flowengine import engine_path
from generators.flowengine.session import compile_session
from ntgcore.scenario import parse_scenario

SCENARIO = """\
version: 1
name: learn-bench
flows:
  - {{protocol: udp, src: {{cidr: 10.1.0.0/16, mode: increment}}, dst: 10.2.0.1,
     src_port: {{range: 1024-65535, mode: increment}}, dst_port: 53, packets: 1, period: 1us,
     payload: {{size: 60}}, repeat: {{count: {udp}, period: 2us}}}}
  - {{protocol: udp, src: 10.2.0.1, dst: {{cidr: 10.1.0.0/16, mode: increment}}, src_port: 53,
     dst_port: {{range: 1024-65535, mode: increment}}, start: 1us, packets: 2, period: 100ns,
     payload: {{size: 500}}, repeat: {{count: {udp}, period: 2us}}}}
  - {{protocol: tcp, src: {{cidr: 10.3.0.0/16, mode: increment}}, dst: 10.4.0.1,
     src_port: {{range: 1024-65535, mode: increment}}, dst_port: 443, packets: 6, period: 1us,
     payload: {{size: 100}}, repeat: {{count: {tcp}, period: 4us}}}}
  - {{protocol: tcp, src: 10.4.0.1, dst: {{cidr: 10.3.0.0/16, mode: increment}}, src_port: 443,
     dst_port: {{range: 1024-65535, mode: increment}}, start: 500ns, packets: 6, period: 1us,
     payload: {{size: 1000}}, repeat: {{count: {tcp}, period: 4us}}}}
"""


def best(fn, repeat: int) -> tuple[float, list[float], object]:
    result = fn()  # untimed: the first call pays for fresh memory and the page cache
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return min(runs), runs, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=600_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, help="where the capture is written (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the capture")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "learn.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ntg-bench-learn-", dir=args.dir))
    try:
        udp, tcp = args.sessions * 2 // 3, args.sessions // 3
        text = SCENARIO.format(udp=udp, tcp=tcp)
        session = work / "bench.sess"
        session.write_text(compile_session(parse_scenario(text)))
        pcap = work / "bench.pcap"
        subprocess.run(
            [str(engine_path()), "gen", str(session), "-o", str(pcap)],
            check=True,
            capture_output=True,
        )
        opts = LearnOptions(hash_inputs=False, validate=False)

        def sessions_only() -> int:
            acc = PacketSessions()
            for cap in iter_capture(pcap, chunk_size(None), reuse=True):
                acc.add(cap)
            return len(acc.table())

        def stream() -> int:
            s = read_stream([pcap])
            assert s.totals.flows is not None
            return len(s.totals.flows)

        learn_s, learn_runs, result = best(lambda: learn_capture([pcap], opts), args.repeat)
        packets = result.report["read"]["packets"]  # type: ignore[attr-defined]
        sess_s, sess_runs, n_sessions = best(sessions_only, args.repeat)
        stream_s, stream_runs, flows = best(stream, args.repeat)
        t = time.perf_counter()
        learn_capture([pcap], LearnOptions())
        full_s = time.perf_counter() - t
        rows = {
            "learn": (learn_s, learn_runs),
            "sessions (read + sessionize)": (sess_s, sess_runs),
            "read_stream (analysis)": (stream_s, stream_runs),
        }
        print(
            f"{packets:,} packets, {n_sessions:,} sessions, {flows:,} flows, "
            f"{pcap.stat().st_size / 1e9:.2f} GB\n"
        )
        print("| what | seconds | M packets/s |")
        print("|---|---:|---:|")
        for name, (sec, _) in rows.items():
            print(f"| {name} | {sec:.3f} | {packets / sec / 1e6:.2f} |")
        print(
            f"| learn with hashing and validation (one run) | {full_s:.3f} | "
            f"{packets / full_s / 1e6:.2f} |"
        )
        print(f"\nlearn / read_stream time: {learn_s / stream_s:.2f}")
        doc = {
            "benchmark": "learn",
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "packets": packets,
            "sessions": n_sessions,
            "flows": flows,
            "file_bytes": pcap.stat().st_size,
            "repeat": args.repeat,
            "results": {
                name: {"seconds": sec, "runs_seconds": runs, "mpps": packets / sec / 1e6}
                for name, (sec, runs) in rows.items()
            },
            "learn_full_seconds": full_s,
            "learn_over_read_stream": learn_s / stream_s,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"written: {args.out}")
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
