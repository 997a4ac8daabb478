#!/usr/bin/env python3
"""Ostinato's drone against the native engine, live on the same kind of veth, in one run.

Seed 001's Ostinato case: 64-byte TCP frames (60 bytes + FCS) at "packets/sec 0" for a fixed
time. drone runs through our adapter (scenarios/seed001-ostinato.yaml, pace topspeed,
`--seconds`); the engine runs `flowengine gen SESSION --iface veth0 --pace topspeed` with the same
frame for about as long. Both senders are pinned to core 0 (`taskset -c 0`), each in turn, in a
namespace ntgbench-<random> holding a veth pair (deleted at the end, also on failure). Rates come
from the peer veth's rx counter over the sender's transmit time; CPU (user+system seconds per
second of wall time) and peak RSS from /proc through psutil, sampled every 0.2 s.

Results: benchmarks/out/ostinato.json and a Markdown table on stdout. Needs root.

    python benchmarks/bench_ostinato.py [--seconds 5] [--repeat 3] [--bin PATH]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_engine import find_binary

from generators.ostinato import Ostinato
from generators.ostinato.drone import drone_version
from ntgcore.proc import Process
from ntgcore.scenario import load_scenario
from testbed.endpoints.netns import NetnsEndpoint as Endpoint
from testbed.endpoints.netns.topology import VethPair

FLOW = (
    "flow af=4 proto=6 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 "
    "src=198.18.0.1/32 src_mode=fixed dst=198.18.0.2/32 dst_mode=fixed "
    "sport=40000-40000 sport_mode=fixed dport=80-80 dport_mode=fixed "
    "start=0 period=1 packets={packets} size=6-6 payload=- reps=1 rep_period=0"
)


class Sampler:
    """CPU seconds and peak RSS of one process (and its threads), sampled until stop()."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.cpu0 = self._cpu()
        self.cpu = self.cpu0
        self.rss = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _cpu(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.cpu = self._cpu()
                self.rss = max(self.rss, self.proc.memory_info().rss)
            except psutil.Error:
                return

    def stop(self) -> tuple[float, int]:
        try:
            self.cpu = self._cpu()
            self.rss = max(self.rss, self.proc.memory_info().rss)
        except psutil.Error:
            pass
        self._stop.set()
        self._t.join()
        return self.cpu - self.cpu0, self.rss


def pin(pid: int) -> None:
    for t in psutil.Process(pid).threads():
        os.sched_setaffinity(t.id, {0})


def run_drone(ns: VethPair, scenario, seconds: float, run_dir: Path) -> dict:
    gen = Ostinato()
    gen.prepare(
        scenario, run_dir, 1, Endpoint(ns.gen, "veth0", pace="topspeed", duration_s=seconds)
    )
    before = ns.rx()
    gen.start()
    pid = gen.drone.proc.pid
    pin(pid)
    sampler = Sampler(pid)
    while gen.transmit_seconds is None and gen.status() == "running":
        time.sleep(0.05)
    cpu, rss = sampler.stop()
    gen.wait(60)
    wall = gen.transmit_seconds
    rx = ns.rx() - before
    tx = gen.port_stats()["veth0"]["tx_pkts"]
    return {
        "rx_mpps": rx / wall / 1e6,
        "own_mpps": tx / wall / 1e6,
        "rx": rx,
        "sent": tx,
        "wall": wall,
        "cpu_per_s": cpu / wall,
        "rss_mib": rss / 2**20,
    }


def run_engine(ns: VethPair, engine: Path, session: Path, tmp: Path) -> dict:
    summary = tmp / "summary.json"
    before = ns.rx()
    proc = Process(
        "flowengine",
        [
            "ip",
            "netns",
            "exec",
            ns.gen,
            "taskset",
            "-c",
            "0",
            str(engine),
            "gen",
            str(session),
            "--iface",
            "veth0",
            "--pace",
            "topspeed",
            "--stats",
            os.devnull,
            "--summary",
            str(summary),
        ],
        stderr=open(tmp / "engine.log", "wb"),
    )
    t0 = time.monotonic()
    proc.start()
    sampler = Sampler(proc.pid)
    code = proc.wait(600)
    wall = time.monotonic() - t0
    cpu, rss = sampler.stop()
    if code != 0:
        raise RuntimeError(f"flowengine failed ({code}): {(tmp / 'engine.log').read_text()[-500:]}")
    s = json.loads(summary.read_text())
    rx = ns.rx() - before
    return {
        "rx_mpps": rx / wall / 1e6,
        "own_mpps": s["sent"] / s["wall_seconds"] / 1e6,
        "rx": rx,
        "sent": s["sent"],
        "wall": wall,
        "cpu_per_s": cpu / wall,
        "rss_mib": rss / 2**20,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--engine-packets",
        type=int,
        default=3_500_000,
        help="frames the engine sends per run (about --seconds at ~0.7 Mpps)",
    )
    ap.add_argument("--bin")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_ostinato.py needs root (ip netns add)")
    engine = find_binary(args.bin)
    scenario = load_scenario(REPO / "scenarios" / "seed001-ostinato.yaml").scenario
    runs: dict[str, list] = {"ostinato (drone)": [], "flowengine": []}
    with tempfile.TemporaryDirectory(prefix="bench-ostinato-") as tmp:
        tmp = Path(tmp)
        session = tmp / "s.txt"
        session.write_text(f"ntg-session 1\nseed 1\n{FLOW.format(packets=args.engine_packets)}\n")
        with VethPair(prefix="ntgbench", split=False) as ns:
            for i in range(args.repeat):  # interleaved, so drift hits both alike
                runs["ostinato (drone)"].append(
                    run_drone(ns, scenario, args.seconds, tmp / f"d{i}")
                )
                runs["flowengine"].append(run_engine(ns, engine, session, tmp))

    def med(name, key):
        return statistics.median(r[key] for r in runs[name])

    table = {
        name: {k: med(name, k) for k in ("rx_mpps", "own_mpps", "cpu_per_s", "rss_mib", "wall")}
        | {"runs": rs}
        for name, rs in runs.items()
    }
    ratio = table["flowengine"]["rx_mpps"] / table["ostinato (drone)"]["rx_mpps"]
    result = {
        "seconds": args.seconds,
        "repeat": args.repeat,
        "frame_bytes": 64,
        "cpu": "core 0",
        "kernel": platform.release(),
        "drone": drone_version(),
        "engine": str(engine),
        "engine_vs_drone": ratio,
        "seed_ostinato_pps": 127_271,
        "results": table,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ostinato.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"64-byte TCP frames on a veth pair, core 0, ~{args.seconds:g} s each, median of {args.repeat}\n"
    )
    print("| sender | Mpps (peer rx) | Mpps (own count) | CPU (cores) | peak RSS (MiB) |")
    print("|---|---:|---:|---:|---:|")
    for name, t in table.items():
        print(
            f"| {name} | {t['rx_mpps']:.3f} | {t['own_mpps']:.3f} | {t['cpu_per_s']:.2f} | "
            f"{t['rss_mib']:.1f} |"
        )
    print(f"\nflowengine ÷ drone: {ratio:.2f}× (seed 001's VM: drone 0.127 Mpps)")


if __name__ == "__main__":
    main()
