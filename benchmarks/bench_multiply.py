#!/usr/bin/env python3
"""Throughput of the traffic multiplier (`flowengine multiply`, seed 003) against tcprewrite.

Input: 64-byte frames (Ethernet + IPv4 + UDP + 22-byte payload) from 1,000 flows, written by
`flowengine gen`. Ours multiplies them with T=10 (every packet out 11 times, ten with shadow
addresses); the peer `tcprewrite --pnat` rewrites the same input once with an address map (one
copy: a T=10 multiplication with it takes ten runs). Both read from tmpfs and write to /dev/null,
then to a file on tmpfs; the null sink (`--null`) shows the rewrite core alone. A second peer,
`tcpreplay --unique-ip --loop T+1`, multiplies by looping with new addresses per loop; it only
sends (no file out), so it runs on a veth in a namespace of its own (root only).

Rates are frames out per second, two ways: per core (frames / the process's CPU time, user +
system: what one core delivers however busy the shared machine is) and by wall time. Median of
--repeat runs. Results go to benchmarks/out/multiply.json; a Markdown table goes to stdout.

    python benchmarks/bench_multiply.py [--packets N] [--copies T] [--repeat R] [--bin PATH] [--dir DIR]
                                        [--before OLD_PATH]

`--before OLD_PATH`: another flowengine build (the engine before a change) runs the same two
multiply cases (null sink, /dev/null) in the same run, right after ours; the JSON gets their
rates and the ratio after / before.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
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
    "start=0 period={period} packets={per_flow} size=22-22 payload=- reps=1000 rep_period=1000"
)
SHADOW = "10.0.0.0/8"  # the input's addresses are 198.18.0.0/15
NAMESPACE = "ntg-bench-mult"


def find_binary(explicit: str | None) -> Path:
    for c in (
        explicit,
        os.environ.get("NTG_FLOWENGINE"),
        shutil.which("flowengine"),
        str(Path(sysconfig.get_path("scripts")) / "flowengine"),
    ):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return Path(c)
    sys.exit(
        "flowengine not found: build it (cmake -S . -B build && cmake --build build) and set NTG_FLOWENGINE"
    )


def timed(argv: list[str]) -> dict:
    """Wall and CPU seconds (user + system) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "stdout": r.stdout, "stderr": r.stderr}


def case(
    name: str,
    argv: list[str],
    frames_out: int,
    repeat: int,
    cleanup: Path | None = None,
    engine: bool = False,
) -> dict:
    runs = []
    for _ in range(repeat):
        t = timed(argv)
        run = {"wall_s": t["wall_s"], "cpu_s": t["cpu_s"]}
        if engine:
            summary = json.loads(t["stdout"])
            assert summary["packets_out"] == frames_out, summary
            run["rewrite_s"] = summary["rewrite_seconds"]
        runs.append(run)
        if cleanup is not None:
            cleanup.unlink(missing_ok=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    res = {
        "case": name,
        "argv": argv,
        "frames_out": frames_out,
        "runs": runs,
        "mpps_per_core": frames_out / med["cpu_s"] / 1e6,
        "mpps_wall": frames_out / med["wall_s"] / 1e6,
    }
    if engine:
        res["mpps_rewrite_loop"] = frames_out / med["rewrite_s"] / 1e6
    print(
        f"  {name}: {res['mpps_per_core']:.2f} Mpps per core, {res['mpps_wall']:.2f} Mpps wall",
        file=sys.stderr,
    )
    return res


def tcpreplay_peer(pcap: Path, loops: int, packets: int) -> dict:
    """tcpreplay --unique-ip --loop on a veth pair in a namespace made here (nothing leaves it)."""
    if os.geteuid() != 0 or not shutil.which("tcpreplay"):
        return {"case": "tcpreplay --unique-ip", "skipped": "needs root and tcpreplay"}
    subprocess.run(["ip", "netns", "del", NAMESPACE], capture_output=True)
    try:
        for cmd in (
            ["ip", "netns", "add", NAMESPACE],
            ["ip", "-n", NAMESPACE, "link", "add", "m0", "type", "veth", "peer", "name", "m1"],
            ["ip", "-n", NAMESPACE, "link", "set", "m0", "up"],
            ["ip", "-n", NAMESPACE, "link", "set", "m1", "up"],
        ):
            subprocess.run(cmd, check=True, capture_output=True)
        argv = [
            "ip",
            "netns",
            "exec",
            NAMESPACE,
            "tcpreplay",
            "-i",
            "m0",
            "--topspeed",
            "--loop",
            str(loops),
            "--unique-ip",
            str(pcap),
        ]
        t = timed(argv)
        m = re.search(r"Rated: .*?([\d.]+) pps", t["stdout"])
        frames = loops * packets
        return {
            "case": "tcpreplay --unique-ip",
            "argv": argv,
            "frames_out": frames,
            "runs": [{"wall_s": t["wall_s"], "cpu_s": t["cpu_s"]}],
            "mpps_per_core": frames / t["cpu_s"] / 1e6,
            "mpps_wall": frames / t["wall_s"] / 1e6,
            "tcpreplay_rated_pps": float(m.group(1)) if m else None,
        }
    finally:
        subprocess.run(["ip", "netns", "del", NAMESPACE], capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--packets", type=int, default=1_000_000, help="input packets (a multiple of 1,000)"
    )
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bin")
    ap.add_argument(
        "--before", metavar="OLD_PATH", help="a flowengine before a change: same cases, same run"
    )
    ap.add_argument(
        "--dir",
        default="/dev/shm" if Path("/dev/shm").is_dir() else None,
        help="where the input and the file outputs go (default tmpfs /dev/shm)",
    )
    args = ap.parse_args()
    engine = find_binary(args.bin)
    if not shutil.which("tcprewrite"):
        sys.exit("tcprewrite not found: apt-get install tcpreplay (the peer runs in the same run)")
    n, t = args.packets, args.copies
    work = Path(tempfile.mkdtemp(prefix="bench-mult-", dir=args.dir))
    try:
        session, pcap = work / "in.ntg", work / "in.pcap"
        session.write_text(
            "ntg-session 1\nseed 1\n" + FLOW.format(period=1_000_000, per_flow=n // 1000) + "\n"
        )
        subprocess.run(
            [str(engine), "gen", str(session), "-o", str(pcap)], check=True, capture_output=True
        )
        out_file, peer_file = work / "out.pcap", work / "peer.pcap"
        ours = [str(engine), "multiply", str(pcap), "-T", str(t), "--ranges", SHADOW, "--seed", "1"]
        peer = ["tcprewrite", f"--pnat=198.18.0.0/15:{SHADOW.split('/')[0]}/15", "-i", str(pcap)]
        print(
            f"{n:,} packets of 64 bytes, T={t}, {args.repeat} runs each, files in {work}",
            file=sys.stderr,
        )
        cases = [
            case("multiply, null sink", ours + ["--null"], (t + 1) * n, args.repeat, engine=True),
            case(
                "multiply -o /dev/null",
                ours + ["-o", "/dev/null"],
                (t + 1) * n,
                args.repeat,
                engine=True,
            ),
        ]
        if args.before:
            old = [args.before] + ours[1:]
            cases += [
                case(
                    "before: multiply, null sink",
                    old + ["--null"],
                    (t + 1) * n,
                    args.repeat,
                    engine=True,
                ),
                case(
                    "before: multiply -o /dev/null",
                    old + ["-o", "/dev/null"],
                    (t + 1) * n,
                    args.repeat,
                    engine=True,
                ),
            ]
        cases += [
            case(
                "multiply -o tmpfs file",
                ours + ["-o", str(out_file)],
                (t + 1) * n,
                args.repeat,
                out_file,
                engine=True,
            ),
            case("tcprewrite --pnat -o /dev/null", peer + ["-o", "/dev/null"], n, args.repeat),
            case(
                "tcprewrite --pnat -o tmpfs file",
                peer + ["-o", str(peer_file)],
                n,
                args.repeat,
                peer_file,
            ),
        ]
        small = min(n, 200_000)
        if small < n:
            subprocess.run(
                [str(engine), "gen", str(session), "-o", str(pcap), "--max-packets", str(small)],
                check=True,
                capture_output=True,
            )
        cases.append(tcpreplay_peer(pcap, t + 1, small))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    by = {c["case"]: c for c in cases}
    ours_null, peer_null = by["multiply -o /dev/null"], by["tcprewrite --pnat -o /dev/null"]
    ours_file, peer_file_c = by["multiply -o tmpfs file"], by["tcprewrite --pnat -o tmpfs file"]
    result = {
        "benchmark": "multiply",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "packets_in": n,
        "copies": t,
        "frame_bytes": 64,
        "cases": cases,
        "ratio_vs_tcprewrite_per_core": ours_null["mpps_per_core"] / peer_null["mpps_per_core"],
        "ratio_vs_tcprewrite_wall": ours_null["mpps_wall"] / peer_null["mpps_wall"],
        "ratio_vs_tcprewrite_file_per_core": ours_file["mpps_per_core"]
        / peer_file_c["mpps_per_core"],
        "targets": {"mpps_per_core": 20, "ratio_vs_tcprewrite": 5},
    }
    if args.before:
        result["before"] = args.before
        result["ratio_vs_before_per_core"] = {
            k: by[k]["mpps_per_core"] / by["before: " + k]["mpps_per_core"]
            for k in ("multiply, null sink", "multiply -o /dev/null")
        }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "multiply.json").write_text(json.dumps(result, indent=2) + "\n")
    print("| case | frames out | Mpps per core (CPU time) | Mpps (wall) |\n|---|---:|---:|---:|")
    for c in cases:
        if "skipped" in c:
            print(f"| {c['case']} | – | skipped: {c['skipped']} | |")
            continue
        extra = (
            f" (loop timer, wall: {c['mpps_rewrite_loop']:.1f})" if "mpps_rewrite_loop" in c else ""
        )
        print(
            f"| {c['case']} | {c['frames_out']:,} | {c['mpps_per_core']:.2f}{extra} | {c['mpps_wall']:.2f} |"
        )
    print(
        f"\nours / tcprewrite, both to /dev/null: {result['ratio_vs_tcprewrite_per_core']:.1f}x per core, "
        f"{result['ratio_vs_tcprewrite_wall']:.1f}x by wall time; to tmpfs files "
        f"{result['ratio_vs_tcprewrite_file_per_core']:.1f}x per core (load average {result['load_avg'][0]:.1f})"
    )
    if args.before:
        print(
            "after / before, per core: "
            + ", ".join(f"{k} {v:.3f}x" for k, v in result["ratio_vs_before_per_core"].items())
        )


if __name__ == "__main__":
    main()
