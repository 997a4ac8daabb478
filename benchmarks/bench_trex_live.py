#!/usr/bin/env python3
"""TRex live on a veth in software mode against the native engine and trafgen, in one run:
rate on the wire, CPU per core and per thread, and start-up time (seed 001, 5.1: TRex took
about 9 s to reach its rate in a 2-vCPU VM).

One veth pair (veth0 in namespace ntgbench-<random>-gen, veth1 in ...-peer; no addresses, deleted
at the end, also on failure: testbed.endpoints.netns.topology.VethPair). Every sender sends the
same 64-byte IPv4/UDP frame (198.18.0.1:40000 -> 198.18.0.2:9, 22 bytes of zeros) on veth0:

- native: `flowengine gen SESSION --iface veth0` under `taskset -c 0`; top speed: `--pace
  topspeed`, stopped with SIGINT after --seconds; fixed rate: `--pace realtime`, one instance
  with a packet every 1e9/RATE ns, RATE x --seconds packets.
- trafgen (netsniff-ng) with a packet configuration this script writes (its eth/ipv4/udp header
  functions, checksums computed by trafgen), `--cpus 1 --no-sock-mem` under `taskset -c 0`; top
  speed: stopped with SIGINT after --seconds; fixed rate: `-b RATEpps -n RATE x --seconds`.
- TRex v3.08 through the project's adapter (generators/trex: its server started in the gen
  namespace from $NTG_TREX_DIR, software mode, low_end; the worker with lbr-trex-client), pace
  topspeed at an explicit pps (`topspeed_pps`) for --seconds; at its highest explicit rate that
  works (a probe before the rounds: 3 s runs from 300 kpps up, the highest at which the peer saw
  >= 90 % of it, until two rates in a row fall short; or --trex-pps) and at the fixed target
  (--target-pps). TRex pins all its threads to core 0 (low_end_core: 0), hence the taskset of
  the other two.

Each case runs --repeat rounds, interleaved (native, trafgen, TRex at top rate, then the three at
the target rate). Counting is the same for all: the peer veth's kernel counters (rx_packets,
rx_bytes of veth1), read every 10 ms by a small process inside the peer namespace. From them
(`rate_profile`): the first packet's time; "pps on the wire", the median of the complete seconds
from the first packet; the rates in 100 ms bins (median, coefficient of variation: a bursty
sender has a large one); the time from which the next 100 ms carry >= 90 % of the rate. CPU:
testbed.parts.monitor.Sampler at 10 Hz (like top -H: the sender's processes and threads, and
every core's busy share), averaged over first to last packet; each core's user/system/softirq/
steal split from /proc/stat over the sending time; the sender's CPU per packet. Start-up is
measured from the launch: the process start (native, trafgen), and for TRex the adapter's
prepare() (profile build, server launch, client connect, streams added): server launch to its
RPC port listening, server launch to the worker ready, and start() (the "go") to the first
packet and to 90 % of the rate.

Results: benchmarks/out/trex_live.json and Markdown tables on stdout. Needs root, netsniff-ng,
lbr-trex-client and a TRex build:

    NTG_TREX_DIR=../shared/trex python benchmarks/bench_trex_live.py [--seconds 5] [--repeat 3]
        [--target-pps 100000] [--trex-pps N] [--bin PATH]
"""

from __future__ import annotations

import argparse
import bisect
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_engine import find_binary

from generators.trex import Trex, client_version
from generators.trex.server import server_binary
from ntgcore.errors import GeneratorError
from ntgcore.proc import Process
from ntgcore.scenario import parse_scenario
from testbed.endpoints.netns import NetnsEndpoint
from testbed.endpoints.netns.topology import VethPair, netns_argv
from testbed.parts.monitor import Sampler, read_samples

SMAC, DMAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
SRC, DST, SPORT, DPORT, PAYLOAD = "198.18.0.1", "198.18.0.2", 40000, 9, 22  # 64-byte frames
FRAME_BYTES = 14 + 20 + 8 + PAYLOAD
FLOW = (
    f"flow af=4 proto=17 smac={SMAC} dmac={DMAC} src={SRC}/32 src_mode=fixed dst={DST}/32 "
    f"dst_mode=fixed sport={SPORT}-{SPORT} sport_mode=fixed dport={DPORT}-{DPORT} dport_mode=fixed "
    "start=0 period={period} packets={packets} size={size}-{size} payload=- reps=1 rep_period=0"
)
# TRex: a continuous flow; pace topspeed sends it at `topspeed_pps` for the endpoint's duration
SCENARIO = (
    "version: 1\nname: bench-trex-live\nseed: 1\n"
    f"ethernet: {{src: '{SMAC}', dst: '{DMAC}'}}\nflows:\n"
    f"  - {{protocol: udp, src: {SRC}, dst: {DST}, src_port: {SPORT}, dst_port: {DPORT},"
    f" rate: 10Mpps, duration: 1000s, payload: {{size: {PAYLOAD}}}}}\n"
)
# trafgen's own packet language: header functions fill in lengths and checksums
TRAFGEN_CONF = f"""# 64-byte IPv4/UDP frame for benchmarks/bench_trex_live.py
{{
  eth(da={DMAC}, sa={SMAC}),
  ipv4(sa={SRC}, da={DST}, ttl=64, df),
  udp(sp={SPORT}, dp={DPORT}),
  fill(0x00, {PAYLOAD})
}}
"""
# runs inside the peer namespace: "monotonic rx_packets rx_bytes" every INTERVAL s until killed
POLLER = (
    "import sys, time\n"
    "d = '/sys/class/net/' + sys.argv[1] + '/statistics/'\n"
    "iv = float(sys.argv[2])\n"
    "p, b = open(d + 'rx_packets', 'rb', 0), open(d + 'rx_bytes', 'rb', 0)\n"
    "out = sys.stdout\n"
    "while True:\n"
    "    p.seek(0); b.seek(0)\n"
    "    out.write(f'{time.monotonic():.6f} {int(p.read())} {int(b.read())}\\n'); out.flush()\n"
    "    time.sleep(iv)\n"
)
POLL_S = 0.01
BIN_S = 0.1
SETTLE_S = 0.3  # counters and samples before the launch and after the end
PROBE_PPS = (300_000, 400_000, 500_000, 600_000, 700_000, 800_000, 1_000_000)


# --------------------------------------------------------------------------------------------
# The numbers (pure functions of the polled counters)


def rate_profile(
    samples: list[tuple[float, int, int]],
    t_launch: float,
    t_go: float | None = None,
    window: float = BIN_S,
) -> dict:
    """From (monotonic time, rx_packets, rx_bytes) polls of the peer: what arrived after
    `t_launch`, and when. Times are seconds after `t_launch` (`go_*`: after `t_go`, the traffic
    start, when given); a poll sees a packet up to one poll interval after it arrived.

    - `pps`: packets per second in the complete seconds from the first packet (median; the
      seed's per-second view), or over first to last packet when there is no complete second;
    - `span_pps`: packets over the span from the first to the last packet;
    - `steady_pps`, `cv`: median and coefficient of variation of the rates in `window` bins
      over that span (a bursty sender has a large cv);
    - `t90_s`: the first poll from which the next `window` carries >= 90 % of `pps`."""
    base = max((s for s in samples if s[0] <= t_launch), key=lambda s: s[0], default=samples[0])
    after = [s for s in samples if s[0] > base[0]]
    total = samples[-1][1] - base[1]
    out: dict = {
        "packets": total,
        "bytes": samples[-1][2] - base[2],
        "bytes_per_packet": (samples[-1][2] - base[2]) / total if total else None,
    }
    if not total:
        return out | {"first_packet_s": None, "pps": 0.0, "steady_pps": 0.0, "t90_s": None}
    k0 = next(k for k, s in enumerate(after) if s[1] > base[1])
    first, last = after[k0], next(s for s in after if s[1] == samples[-1][1])
    start = after[k0 - 1] if k0 else base  # the last poll without the first packet
    times = [s[0] for s in after]

    def rates(width: float) -> list[float]:
        out, t = [], start[0]
        while t + width <= last[0] + POLL_S:
            i = max(bisect.bisect_right(times, t) - 1, 0)
            j = bisect.bisect_left(times, t + width)
            if j < len(after) and after[j][0] > after[i][0]:
                out.append((after[j][1] - after[i][1]) / (after[j][0] - after[i][0]))
            t += width
        return out

    span = last[0] - start[0]
    seconds, bins = rates(1.0), rates(window)
    pps = statistics.median(seconds) if seconds else total / span
    steady = statistics.median(bins) if bins else pps
    mean = statistics.mean(bins) if bins else 0.0
    t90 = None
    for k in range(max(k0 - 1, 0), len(after)):  # the window that starts at each poll
        j = bisect.bisect_left(times, after[k][0] + window)
        if j >= len(after):
            break
        if (after[j][1] - after[k][1]) / (after[j][0] - after[k][0]) >= 0.9 * pps:
            t90 = max(after[k][0], first[0])
            break
    out |= {
        "first_packet_s": first[0] - t_launch,
        "last_packet_s": last[0] - t_launch,
        "pps": pps,
        "span_pps": total / span,
        "steady_pps": steady,
        "cv": statistics.pstdev(bins) / mean if len(bins) > 1 and mean else None,
        "t90_s": t90 - t_launch if t90 is not None else None,
        "seconds_pps": [round(r) for r in seconds],
        "bins_pps": [round(b) for b in bins],
    }
    if t_go is not None:
        out |= {
            "go_first_packet_s": first[0] - t_go,
            "go_t90_s": t90 - t_go if t90 is not None else None,
        }
    return out


def cpu_profile(csv: Path, t0: float, start: float, end: float, top: int = 4) -> dict:
    """The Sampler's rows between `start` and `end` (monotonic; the sampler started at `t0`):
    every core's mean busy %, the whole machine's, each label's processes (summed) and its
    busiest threads (mean % of one core while they were seen)."""
    df = read_samples(csv)
    df = df[(df["t"] > start - t0 + 0.05) & (df["t"] <= end - t0 + 0.05)]
    cores = df[df["kind"] == "cpu"].groupby("name")["cpu_percent"].mean()
    system = df[df["kind"] == "system"]["cpu_percent"].mean()
    procs = (
        df[df["kind"] == "process"]
        .groupby(["label", "t"])["cpu_percent"]
        .sum()
        .groupby("label")
        .mean()
    )
    threads = df[df["kind"] == "thread"].dropna(subset=["cpu_percent"])
    by_thread = (
        threads.groupby(["label", "name", "tid"])["cpu_percent"].mean().sort_values(ascending=False)
    )
    return {
        "per_core": {k: round(float(v), 1) for k, v in sorted(cores.items())},
        "system": round(float(system), 1) if system == system else None,
        "process": {k: round(float(v), 1) for k, v in procs.items()},
        "threads": [
            {"label": lb, "name": nm, "tid": int(tid), "cpu_percent": round(float(v), 1)}
            for (lb, nm, tid), v in by_thread.head(top).items()
        ],
        "samples": int((df["kind"] == "system").sum()),
    }


def core_split(before, after) -> dict:
    """Each core's user, system, softirq (+irq), steal (the VM's host ran something else) and
    busy time in % of the wall time between two
    psutil.cpu_times(percpu=True) snapshots (busy as testbed.parts.monitor counts it)."""
    out = {}
    for i, (a, b) in enumerate(zip(before, after)):
        d = {f: getattr(b, f) - getattr(a, f) for f in a._fields}
        total = sum(d.values()) - d.get("guest", 0.0) - d.get("guest_nice", 0.0)
        idle = d["idle"] + d.get("iowait", 0.0)
        if total > 0:
            out[f"cpu{i}"] = {
                "user": round((d["user"] + d["nice"]) / total * 100, 1),
                "system": round(d["system"] / total * 100, 1),
                "softirq": round((d.get("softirq", 0.0) + d.get("irq", 0.0)) / total * 100, 1),
                "steal": round(d.get("steal", 0.0) / total * 100, 1),
                "busy": round((total - idle) / total * 100, 1),
            }
    return out


# --------------------------------------------------------------------------------------------
# One measured run


class Watch:
    """The peer's counters (a poller process in its namespace) and the Sampler, around one sender."""

    def __init__(self, ns: VethPair, tmp: Path, pids) -> None:
        self.tmp, self.csv = tmp, tmp / "samples.csv"
        self.poll_out = open(tmp / "rx.txt", "w")
        self.poller = Process(
            "rx-poller",
            netns_argv(ns.peer, sys.executable, "-c", POLLER, "veth1", str(POLL_S)),
            stdout=self.poll_out,
        )
        self.sampler = Sampler(self.csv, hz=10, pids=pids)

    def __enter__(self) -> Watch:
        self.poller.start()
        deadline = time.monotonic() + 10
        while (self.tmp / "rx.txt").stat().st_size == 0:
            if time.monotonic() > deadline or self.poller.poll() is not None:
                raise RuntimeError("the counter poller in the peer namespace did not start")
            time.sleep(0.02)
        self.t0 = time.monotonic()
        self.sampler.start()
        time.sleep(SETTLE_S)
        return self

    def __exit__(self, *exc) -> None:
        time.sleep(SETTLE_S)
        self.sampler_summary = self.sampler.stop()
        self.poller.stop(signal.SIGTERM, grace=2)
        self.poll_out.close()

    def samples(self) -> list[tuple[float, int, int]]:
        rows = []
        for line in (self.tmp / "rx.txt").read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                rows.append((float(parts[0]), int(parts[1]), int(parts[2])))
        return rows

    def mark(self) -> None:
        """Start (first call) and end (second call) of the window `core_split` covers."""
        self.marks = getattr(self, "marks", []) + [psutil.cpu_times(percpu=True)]

    def result(self, t_launch: float, end: float, t_go: float | None = None) -> dict:
        rx = rate_profile(self.samples(), t_launch, t_go)
        start = (
            t_launch + rx["first_packet_s"] if rx.get("first_packet_s") is not None else t_launch
        )
        stop = t_launch + rx["last_packet_s"] if rx.get("last_packet_s") is not None else end
        return {
            "rx": rx,
            "cpu": cpu_profile(self.csv, self.t0, start, stop),
            "core_split": core_split(*self.marks),
            "sampler_overhead_percent": self.sampler_summary.get("overhead_percent"),
        }


def run_process(
    ns: VethPair, tmp: Path, label: str, argv: list[str], stop_after: float | None, timeout: float
) -> tuple[dict, str]:
    """`argv` in the gen namespace under taskset -c 0; SIGINT after `stop_after` s, if given."""
    log = open(tmp / f"{label}.log", "wb")
    proc = Process(label, netns_argv(ns.gen, "taskset", "-c", "0", *argv), stdout=log, stderr=log)
    with Watch(ns, tmp, lambda: {label: proc.pid} if proc.pid else {}) as w:
        w.mark()
        t_launch = time.monotonic()
        proc.start()
        code = proc.wait(stop_after) if stop_after is not None else proc.wait(timeout)
        if code is None and stop_after is not None:
            code = proc.stop(signal.SIGINT, grace=10)
        elif code is None:
            code = proc.stop(signal.SIGTERM, grace=5)
            raise RuntimeError(f"{label} did not finish within {timeout:g}s")
        end = time.monotonic()
        w.mark()
    log.close()
    text = (tmp / f"{label}.log").read_text(errors="replace")
    if code not in (0, 130, -signal.SIGINT):
        raise RuntimeError(f"{label} failed ({proc.record.status}): {text.strip()[-500:]}")
    return w.result(t_launch, end), text


def run_native(ns: VethPair, tmp: Path, engine: Path, seconds: float, pps: int | None) -> dict:
    if pps is None:  # top speed, stopped after `seconds`
        flow, pace, stop = FLOW.format(period=1, packets=10**10, size=PAYLOAD), "topspeed", seconds
    else:
        flow = FLOW.format(period=round(1e9 / pps), packets=int(pps * seconds), size=PAYLOAD)
        pace, stop = "realtime", None
    session = tmp / "native.txt"
    session.write_text(f"ntg-session 1\nseed 1\n{flow}\n")
    summary = tmp / "native-summary.json"
    res, _ = run_process(
        ns,
        tmp,
        "flowengine",
        [
            str(engine),
            "gen",
            str(session),
            "--iface",
            "veth0",
            "--pace",
            pace,
            "--stats",
            os.devnull,
            "--summary",
            str(summary),
        ],
        stop,
        seconds * 3 + 30,
    )
    s = json.loads(summary.read_text())
    res["own"] = {
        "sent": s["sent"],
        "failed": s["failed"],
        "sink": s["sink"],
        "status": s["status"],
    }
    return res


def run_trafgen(ns: VethPair, tmp: Path, seconds: float, pps: int | None) -> dict:
    conf = tmp / "udp64.trafgen"
    conf.write_text(TRAFGEN_CONF)
    argv = ["trafgen", "--dev", "veth0", "--conf", str(conf), "--cpus", "1", "--no-sock-mem"]
    if pps is not None:
        argv += ["-b", f"{pps}pps", "-n", str(int(pps * seconds))]
    res, text = run_process(
        ns, tmp, "trafgen", argv, seconds if pps is None else None, seconds * 3 + 30
    )
    sent = re.search(r"(\d+) packets outgoing", text)
    res["own"] = {
        "sent": int(sent.group(1)) if sent else None,
        "output": " | ".join(ln.strip() for ln in text.splitlines() if ln.strip())[-400:],
    }
    return res


def run_trex(ns: VethPair, tmp: Path, seconds: float, pps: int) -> dict:
    gen = Trex(topspeed_pps=pps)

    def pids() -> dict:
        out = {}
        if gen.server is not None and gen.server.proc.pid:
            out["trex-server"] = gen.server.proc.pid
        if gen.worker is not None and gen.worker.pid:
            out["trex-worker"] = gen.worker.pid
        return out

    scenario = parse_scenario(SCENARIO)
    endpoint = NetnsEndpoint(ns.gen, "veth0", pace="topspeed", duration_s=seconds)
    with Watch(ns, tmp, pids) as w:
        try:
            t_launch = time.monotonic()
            gen.prepare(scenario, tmp / f"trex-{pps}", 1, endpoint)
            t_ready = time.monotonic()
            # the server's launch, from its process start time (clock ticks), on the monotonic clock
            server_launch = psutil.Process(gen.server.proc.pid).create_time() - (
                time.time() - time.monotonic()
            )
            w.mark()
            t_go = time.monotonic()
            gen.start()
            t_started = time.monotonic()
            gen.wait(seconds + 60)
            end = time.monotonic()
            w.mark()
        finally:
            gen.stop()
    if gen.status() != "completed":
        raise RuntimeError(f"TRex at {pps} pps: {gen.status()}: {gen.error()}")
    res = w.result(t_launch, end, t_go)
    c = gen.counters()
    res["own"] = {"sent": c.packets_sent, "failed": c.packets_failed, "asked_pps": pps}
    res["trex"] = {
        "prepare_s": t_ready - t_launch,
        "build_s": server_launch - t_launch,
        "server_rpc_s": gen.server.started_s,
        "server_to_ready_s": t_ready - server_launch,
        "start_call_s": t_started - t_go,
        "server_version": gen.port_stats().get("trex", {}).get("server_version"),
    }
    return res


# --------------------------------------------------------------------------------------------


def probe_trex(ns: VethPair, tmp: Path, rates, seconds: float = 3.0) -> tuple[int, list]:
    """The highest of `rates` at which the peer saw >= 90 % of it (per second) in a `seconds`
    run; it goes up until two rates in a row fall short. None works (a busy machine): the rate
    that brought the most."""
    tried, short = [], 0
    for pps in rates:
        r = run_trex(ns, tmp, seconds, pps)
        ok = (r["rx"]["pps"] or 0) >= 0.9 * pps
        tried.append({"asked_pps": pps, "pps": r["rx"]["pps"], "ok": ok})
        print(
            f"  probe TRex {pps} pps: {r['rx']['pps']:.0f} on the wire -> {'ok' if ok else 'short'}",
            file=sys.stderr,
        )
        short = 0 if ok else short + 1
        if short == 2:
            break
    good = [t["asked_pps"] for t in tried if t["ok"]]
    return (max(good) if good else max(tried, key=lambda t: t["pps"] or 0)["asked_pps"]), tried


def cpu_per_packet(run: dict) -> float | None:
    """µs of the sender's own CPU (its processes, summed; TRex: server and worker) per packet
    on the wire; kernel work in softirq context is not in it (it is in the cores' busy share)."""
    own = sum(run["cpu"]["process"].values())
    return own / 100 / run["rx"]["pps"] * 1e6 if run["rx"]["pps"] else None


def summarise(runs: list[dict]) -> dict:
    def stat(get):
        vals = [v for v in (get(r) for r in runs) if v is not None]
        return (
            {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
            if vals
            else None
        )

    out = {
        "pps": stat(lambda r: r["rx"]["pps"]),
        "steady_pps": stat(lambda r: r["rx"]["steady_pps"]),
        "span_pps": stat(lambda r: r["rx"].get("span_pps")),
        "cv": stat(lambda r: r["rx"].get("cv")),
        "first_packet_s": stat(lambda r: r["rx"]["first_packet_s"]),
        "t90_s": stat(lambda r: r["rx"]["t90_s"]),
        "system_cpu": stat(lambda r: r["cpu"]["system"]),
    }
    cores = sorted({c for r in runs for c in r["cpu"]["per_core"]})
    out["per_core"] = {c: stat(lambda r, c=c: r["cpu"]["per_core"].get(c)) for c in cores}
    out["core_split"] = {
        c: {
            k: stat(lambda r, c=c, k=k: r["core_split"].get(c, {}).get(k))
            for k in ("user", "system", "softirq", "steal", "busy")
        }
        for c in sorted({c for r in runs for c in r["core_split"]})
    }
    labels = sorted({lb for r in runs for lb in r["cpu"]["process"]})
    out["process_cpu"] = {lb: stat(lambda r, lb=lb: r["cpu"]["process"].get(lb)) for lb in labels}
    out["cpu_us_per_packet"] = stat(cpu_per_packet)
    if "trex" in runs[0]:
        for k in ("prepare_s", "build_s", "server_rpc_s", "server_to_ready_s"):
            out[k] = stat(lambda r, k=k: r["trex"][k])
        out["go_first_packet_s"] = stat(lambda r: r["rx"].get("go_first_packet_s"))
        out["go_t90_s"] = stat(lambda r: r["rx"].get("go_t90_s"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="traffic time per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--target-pps", type=int, default=100_000, help="the fixed rate all three send at"
    )
    ap.add_argument("--trex-pps", type=int, help="TRex's top explicit rate (default: probed)")
    ap.add_argument("--bin")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_trex_live.py needs root (ip netns add)")
    for tool in ("trafgen", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing (apt-get install -y netsniff-ng util-linux)")
    try:
        trex_bin = server_binary(None)  # $NTG_TREX_DIR
    except GeneratorError as exc:
        sys.exit(str(exc))
    if importlib.util.find_spec("lbr_trex_client") is None:
        sys.exit(
            f"the TRex client is missing: {sys.executable} -m pip install lbr-trex-client==3.4.0"
        )
    engine = find_binary(args.bin)
    load_before = os.getloadavg()
    cases = [
        "native top",
        "trafgen top",
        "trex top",
        "native target",
        "trafgen target",
        "trex target",
    ]
    runs: dict[str, list] = {c: [] for c in cases}
    with tempfile.TemporaryDirectory(prefix="bench-trex-live-") as tmp:
        tmp = Path(tmp)
        with VethPair(prefix="ntgbench") as ns:
            probe = []
            trex_pps = args.trex_pps
            if trex_pps is None:
                trex_pps, probe = probe_trex(ns, tmp, PROBE_PPS)
            for i in range(args.repeat):  # interleaved, so drift and the other jobs hit all alike
                print(f"round {i + 1}/{args.repeat}", file=sys.stderr)
                runs["native top"].append(run_native(ns, tmp, engine, args.seconds, None))
                runs["trafgen top"].append(run_trafgen(ns, tmp, args.seconds, None))
                runs["trex top"].append(run_trex(ns, tmp, args.seconds, trex_pps))
                runs["native target"].append(
                    run_native(ns, tmp, engine, args.seconds, args.target_pps)
                )
                runs["trafgen target"].append(run_trafgen(ns, tmp, args.seconds, args.target_pps))
                runs["trex target"].append(run_trex(ns, tmp, args.seconds, args.target_pps))
    load_after = os.getloadavg()
    table = {c: summarise(rs) | {"runs": rs} for c, rs in runs.items()}

    def med(case, key):
        s = table[case][key]
        return s["median"] if s else None

    def ratio(a, b):
        return a / b if a and b else None

    ratios = {
        "trex_vs_native_pps_top": ratio(med("trex top", "pps"), med("native top", "pps")),
        "trafgen_vs_native_pps_top": ratio(med("trafgen top", "pps"), med("native top", "pps")),
        "trex_vs_native_cpu_per_packet_top": ratio(
            med("trex top", "cpu_us_per_packet"), med("native top", "cpu_us_per_packet")
        ),
        "trafgen_vs_native_cpu_per_packet_top": ratio(
            med("trafgen top", "cpu_us_per_packet"), med("native top", "cpu_us_per_packet")
        ),
        "trex_vs_native_cpu_per_packet_target": ratio(
            med("trex target", "cpu_us_per_packet"), med("native target", "cpu_us_per_packet")
        ),
        "trafgen_vs_native_cpu_per_packet_target": ratio(
            med("trafgen target", "cpu_us_per_packet"), med("native target", "cpu_us_per_packet")
        ),
        "trex_vs_native_t90_target": ratio(
            med("trex target", "t90_s"), med("native target", "t90_s")
        ),
    }
    result = {
        "seconds": args.seconds,
        "repeat": args.repeat,
        "target_pps": args.target_pps,
        "trex_top_pps": trex_pps,
        "trex_probe": probe,
        "frame_bytes": FRAME_BYTES,
        "pinning": "native and trafgen: taskset -c 0; TRex: its config (low_end, low_end_core 0)",
        "load_before": load_before,
        "load_after": load_after,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "engine": str(engine),
        "trex_server": str(trex_bin),
        "trex_client": client_version(),
        "trafgen": subprocess.run(["trafgen", "-v"], capture_output=True, text=True).stdout.split(
            "\n"
        )[0],
        "ratios": ratios,
        "results": table,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "trex_live.json").write_text(json.dumps(result, indent=2) + "\n")
    print_tables(result)


def print_tables(result: dict) -> None:
    def f(s, scale=1.0, fmt="{:.0f}"):
        if not s:
            return "n/a"
        return (
            f"{fmt.format(s['median'] * scale)} ({fmt.format(s['min'] * scale)}–"
            f"{fmt.format(s['max'] * scale)})"
        )

    t = result["results"]
    lb = result["load_before"]
    la = result["load_after"]
    print(
        f"64-byte UDP frames on one veth pair, {result['seconds']:g} s each, median (min–max) of "
        f"{result['repeat']}; TRex top rate {result['trex_top_pps']} pps; load average "
        f"{lb[0]:.2f} before, {la[0]:.2f} after\n"
    )
    print(
        "| sender | kpps on the wire (per s) | 100-ms bins cv | cpu0 busy % | cpu1 busy % | "
        "cpu0 user/sys/softirq/steal % | sender's processes, % of a core | sender CPU µs/packet | "
        "launch → first packet (ms) | launch → 90 % of rate (ms) |"
    )
    print("|---|---:|---:|---:|---:|---|---|---:|---:|---:|")
    for case, s in t.items():
        procs = ", ".join(f"{k} {v['median']:.0f}" for k, v in s["process_cpu"].items() if v)
        pc, sp = s["per_core"], s["core_split"].get("cpu0", {})
        split = "/".join(
            f"{sp[k]['median']:.0f}" if sp.get(k) else "-"
            for k in ("user", "system", "softirq", "steal")
        )
        print(
            f"| {case} | {f(s['pps'], 1e-3, '{:.1f}')} | {f(s['cv'], 1, '{:.2f}')} | {f(pc.get('cpu0'))} | "
            f"{f(pc.get('cpu1'))} | {split} | {procs} | {f(s['cpu_us_per_packet'], 1, '{:.2f}')} | "
            f"{f(s['first_packet_s'], 1e3)} | {f(s['t90_s'], 1e3)} |"
        )
    print(
        "\nTRex start-up (ms):\n\n| case | prepare() | profile build | server launch → RPC listening | "
        "server launch → worker ready | start() → first packet | start() → 90 % |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for case in ("trex top", "trex target"):
        s = t[case]
        print(
            f"| {case} | {f(s['prepare_s'], 1e3)} | {f(s['build_s'], 1e3)} | {f(s['server_rpc_s'], 1e3)} | "
            f"{f(s['server_to_ready_s'], 1e3)} | {f(s['go_first_packet_s'], 1e3)} | {f(s['go_t90_s'], 1e3)} |"
        )
    print("\nThreads (busiest, % of a core, first round):")
    for case, s in t.items():
        th = ", ".join(
            f"{x['name']} {x['cpu_percent']:.0f}" for x in s["runs"][0]["cpu"]["threads"]
        )
        print(f"- {case}: {th}")
    print("\nThe sender's own count against the peer's (all rounds):")
    for case, s in t.items():
        pairs = [(r["own"].get("sent"), r["rx"]["packets"]) for r in s["runs"]]
        same = sum(1 for own, rx in pairs if own == rx)
        print(
            f"- {case}: {same} of {len(pairs)} equal" + ("" if same == len(pairs) else f" {pairs}")
        )
    print(
        "\nRatios: "
        + ", ".join(f"{k} {v:.2f}" for k, v in result["ratios"].items() if v is not None)
    )


if __name__ == "__main__":
    main()
