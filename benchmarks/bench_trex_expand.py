#!/usr/bin/env python3
"""Our offline expansion of a TRex profile (generators/trex/expand.py) against TRex's own
simulator bp-sim-64 on the same profile, in one run.

Profiles (scenario flows mapped by generators/trex/stl_profile.py, seed 3):
- `random-trim`: one UDP meta-flow of one-packet instances, random source in a /16, destination
  incremented in a /24, destination port incremented over 100 ports, random payload 18..100 bytes
  (trim, IPv4 total length and UDP length rewritten, checksums fixed): every kind of instruction.
- `inc-fixed`: the same with the source incremented and a fixed 64-byte frame (no random, no trim).

For each: our expansion into frames in memory (`expand`, all chunks; the field-engine target of
issue 11 is >= 10 M packets/s), the same into a pcap file (`write_pcap`), and the simulator
(`worker.py sim`'s call, with its packet limit raised, on the dumped trex-profile.py; process start and TRex's client import
included, reported separately as the time for a 1-packet profile) on --sim-packets (default: as
many as ours) of the same profile; the ratio is ours / the simulator's in packets per second, in
memory against its pcap, and pcap against pcap. Checksums: `offload` for the
comparison with the simulator (it leaves them to the NIC), `wire` (complete) for the target.

Results: benchmarks/out/trex_expand.json and a Markdown table on stdout.

    python benchmarks/bench_trex_expand.py [--packets 10000000] [--sim-packets N] [--repeat 3]
                                           [--pcap-dir /dev/shm]
"""

from __future__ import annotations

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

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
sys.path.insert(0, str(REPO))

from generators.trex import Trex
from generators.trex.expand import expand, write_pcap
from generators.trex.stl_profile import build_profile
from ntgcore.scenario import parse_scenario

HEAD = "version: 1\nname: bench\nseed: 3\nflows:\n"
PROFILES = {
    "random-trim": (
        "  - {{protocol: udp, src: 198.18.0.0/16, dst: {{cidr: 198.19.0.10/24, mode: increment}},"
        " src_port: 4000, dst_port: {{range: 1000-1099, mode: increment}}, rate: 1000000, packets: 1,"
        " repeat: {{count: {n}, period: 1us}}, payload: {{size: 18-100}}}}\n"
    ),
    "inc-fixed": (
        "  - {{protocol: udp, src: {{cidr: 198.18.0.0/16, mode: increment}}, dst: {{cidr: 198.19.0.10/24,"
        " mode: increment}}, src_port: 4000, dst_port: {{range: 1000-1099, mode: increment}}, rate: 1000000,"
        " packets: 1, repeat: {{count: {n}, period: 1us}}, payload: {{size: 22}}}}\n"
    ),
}


# worker.py's `sim`, with the simulator's packet limit (5000 by default) raised to the profile's
SIM = (
    "import lbr_trex_client, sys\nfrom trex.stl import trex_stl_sim\n"
    "trex_stl_sim.STLSim.verify_json = lambda self, streams: None\n"
    "sys.exit(trex_stl_sim.main({argv!r}))"
)


def profile(name: str, n: int):
    return build_profile(parse_scenario(HEAD + PROFILES[name].format(n=n)), 3)


CPU: dict = {}  # the CPU seconds of the last measurement (ours: this process; the simulator: its processes)


def ours_in_memory(prof, checksums: str) -> float:
    t, c0 = time.perf_counter(), time.process_time()
    n = 0
    for c in expand(prof, checksums=checksums):
        n += len(c.lengths)
    CPU["last"] = time.process_time() - c0
    return time.perf_counter() - t


def ours_pcap(prof, path: Path, checksums: str) -> tuple[float, int]:
    t = time.perf_counter()
    info = write_pcap(prof, path, checksums=checksums)
    assert info["packets"] == prof.packets
    return time.perf_counter() - t, path.stat().st_size


def simulate(name: str, n: int, work: Path, sim_dir: Path) -> float:
    d = work / f"sim-{name}-{n}"
    d.mkdir(parents=True, exist_ok=True)
    Trex(server={"host": "127.0.0.1"}).write_profile(
        parse_scenario(HEAD + PROFILES[name].format(n=n)), d, 3
    )
    t, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-c",
            SIM.format(
                argv=[
                    "-p",
                    str(sim_dir),
                    "-r",
                    "-s",
                    "-l",
                    str(n),
                    "-f",
                    str(d / "trex-profile.py"),
                    "-o",
                    str(d / "sim.pcap"),
                ]
            ),
        ],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["last"] = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    if res.returncode != 0 or not (d / "sim.pcap").is_file():
        raise SystemExit(f"bp-sim-64 failed: {res.stdout[-500:]} {res.stderr[-500:]}")
    (d / "sim.pcap").unlink()
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--packets", type=int, default=10_000_000)
    ap.add_argument(
        "--sim-packets", type=int, default=None, help="default: --packets (the same profile)"
    )
    ap.add_argument(
        "--pcap-dir",
        default="/dev/shm" if Path("/dev/shm").is_dir() else None,
        help="where both pcaps are written (default /dev/shm: memory, so the disk is not measured)",
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trex-dir", default=os.environ.get("NTG_TREX_DIR"))
    ap.add_argument("--out", type=Path, default=OUT / "trex_expand.json")
    args = ap.parse_args()
    if args.sim_packets is None:
        args.sim_packets = args.packets
    sim_dir = Path(args.trex_dir) / "sim" if args.trex_dir else None
    if sim_dir is None or not (sim_dir / "bp-sim-64").is_file():
        raise SystemExit("set NTG_TREX_DIR (or --trex-dir) to a TRex build with sim/bp-sim-64")
    results = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": os.getloadavg()[0],
        },
        "pcap_dir": args.pcap_dir,
        "packets": args.packets,
        "sim_packets": args.sim_packets,
        "repeat": args.repeat,
        "profiles": {},
    }
    rows, cpu_rows = [], []
    with tempfile.TemporaryDirectory(prefix="ntg-expand-", dir=args.pcap_dir) as tmp:
        work = Path(tmp)
        starts, cpu = [], []
        for _ in range(args.repeat):
            starts.append(simulate("inc-fixed", 1, work, sim_dir))
            cpu.append(CPU["last"])
        sim_start = statistics.median(starts)
        results["sim_start_s"], results["sim_start_cpu_s"] = sim_start, statistics.median(cpu)
        for name in PROFILES:
            big = profile(name, args.packets)
            small = big if args.sim_packets == args.packets else profile(name, args.sim_packets)
            r: dict = {}
            runs, cpu = [], []
            for _ in range(args.repeat):
                runs.append(ours_in_memory(big, "wire"))
                cpu.append(CPU["last"])
            r["ours_memory_wire_s"] = statistics.median(runs)
            r["ours_memory_wire_best_s"] = min(runs)
            r["ours_memory_wire_cpu_s"] = statistics.median(cpu)
            r["ours_memory_offload_s"] = statistics.median(
                ours_in_memory(big, "offload") for _ in range(args.repeat)
            )
            pc = [ours_pcap(big, work / "ours.pcap", "wire") for _ in range(args.repeat)]
            r["ours_pcap_wire_s"] = statistics.median(p[0] for p in pc)
            r["pcap_bytes"] = pc[0][1]
            (work / "ours.pcap").unlink()
            r["ours_small_offload_s"] = (
                r["ours_memory_offload_s"]
                if args.sim_packets == args.packets
                else statistics.median(ours_in_memory(small, "offload") for _ in range(args.repeat))
            )
            runs, cpu = [], []
            for _ in range(args.repeat):
                runs.append(simulate(name, args.sim_packets, work, sim_dir))
                cpu.append(CPU["last"])
            r["sim_s"], r["sim_cpu_s"] = statistics.median(runs), statistics.median(cpu)
            r["mpps_memory_wire"] = args.packets / r["ours_memory_wire_s"] / 1e6
            r["mpps_memory_wire_best"] = args.packets / r["ours_memory_wire_best_s"] / 1e6
            r["mpps_memory_offload"] = args.packets / r["ours_memory_offload_s"] / 1e6
            r["mpps_pcap_wire"] = args.packets / r["ours_pcap_wire_s"] / 1e6
            r["pcap_mb_per_s"] = r["pcap_bytes"] / r["ours_pcap_wire_s"] / 1e6
            r["sim_mpps"] = args.sim_packets / r["sim_s"] / 1e6
            r["sim_mpps_without_start"] = args.sim_packets / max(1e-9, r["sim_s"] - sim_start) / 1e6
            r["ours_small_mpps"] = args.sim_packets / r["ours_small_offload_s"] / 1e6
            r["ratio_same_profile"] = r["ours_small_mpps"] / r["sim_mpps"]
            r["ratio_without_sim_start"] = r["ours_small_mpps"] / r["sim_mpps_without_start"]
            r["ratio_pcap_to_pcap"] = r["mpps_pcap_wire"] / r["sim_mpps"]  # both write a pcap file
            # CPU time (not disturbed by the other jobs of a shared machine)
            r["mpps_memory_wire_cpu"] = args.packets / r["ours_memory_wire_cpu_s"] / 1e6
            r["sim_mpps_cpu"] = args.sim_packets / r["sim_cpu_s"] / 1e6
            r["sim_mpps_cpu_without_start"] = (
                args.sim_packets / max(1e-9, r["sim_cpu_s"] - results["sim_start_cpu_s"]) / 1e6
            )
            r["ratio_pcap_to_pcap_without_sim_start"] = (
                r["mpps_pcap_wire"] / r["sim_mpps_without_start"]
            )
            results["profiles"][name] = r
            cpu_rows.append(
                f"| {name} | {r['mpps_memory_wire_cpu']:.1f} | {r['sim_mpps_cpu']:.2f} | "
                f"{r['sim_mpps_cpu_without_start']:.2f} | "
                f"{r['mpps_memory_wire_cpu'] / r['sim_mpps_cpu']:.0f}x "
                f"({r['mpps_memory_wire_cpu'] / r['sim_mpps_cpu_without_start']:.1f}x) |"
            )
            rows.append(
                f"| {name} | {r['mpps_memory_wire']:.1f} ({r['mpps_memory_wire_best']:.1f}) | "
                f"{r['mpps_memory_offload']:.1f} | "
                f"{r['mpps_pcap_wire']:.1f} ({r['pcap_mb_per_s']:.0f} MB/s) | {r['sim_s']:.2f} | "
                f"{r['sim_mpps']:.2f} | {r['ours_small_mpps']:.1f} | {r['ratio_same_profile']:.0f}x "
                f"({r['ratio_without_sim_start']:.0f}x) |"
            )
    results["machine"]["load_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(
        f"{args.packets:,} packets ours, {args.sim_packets:,} the simulator's (start-up {sim_start:.2f} s), "
        f"median of {args.repeat}"
    )
    print(
        "| profile | ours in memory, wire Mpps (best) | offload Mpps | ours to pcap Mpps | sim s | sim Mpps | "
        "ours same profile Mpps | ratio (without sim start) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(
        "\nBy CPU time | ours in memory, wire Mpps | sim Mpps | sim without its start | ratio (without sim start) |"
    )
    print("|---|---:|---:|---:|---:|")
    print("\n".join(cpu_rows))
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
