#!/usr/bin/env python3
"""The inline multiplier's egress packet rate on veth against the engine's own live sender on
the same veth, in one run (issue 13's target: within 10 %).

Brings up the `multiply` topology under a random name (namespaces ntgbm<hex>-client, -mult,
-server, -dut; NETWORK-SAFETY.md) and removes it at the end, also on failure. 64-byte UDP frames:

- peer: `flowengine gen --iface m-dut --pace topspeed` in the multiplier's namespace (core 1),
  the frames counted by d0's rx counter in the DUT namespace;
- inline: `flowengine multiply --live m-in m-out m-dut -T T` in the multiplier's namespace
  (core 1), fed by `flowengine gen --iface cl0` from the client's namespace (core 0), at top
  speed (it overdrives the multiplier: the RX ring drops what it cannot take) for about as long
  as the peer sends; the egress is the rx counters of sv0 (the originals) and d0 (the copies).

Both are measured the same way, in the same run, alternating (--repeat times): the counters
are sampled every few ms (read from /proc/PID/net/dev of a sleeping process in each namespace,
no process started per sample), with the time the measured process (the peer, the multiplier)
has been on a CPU (/proc/PID/schedstat: its own work, the kernel's sending and the receiving
veths' softirq work done in its context). Over the steady part of the egress (its middle 80 %,
between the first and the last frame):

- rate: egress frames per second of wall time;
- CPU: the process's time on the CPU per egress frame;
- on-CPU share: its time on the CPU / the wall time (1 = it had its core to itself); rate =
  share / CPU per frame, so the wall ratio to the peer is the CPU ratio times the share ratio.

--nice N runs the peer, the multiplier and the feeder alike at that nice value, and their
scheduling (auto)groups too (the default, -20: other work on the machine gets little of their
cores, so the rate measures them more than the machine's other load; 0: the share any work
gets). --baseline PATH adds an older build's multiplier (rows "before: ...") to the same run.
The paced sweep (--seconds 0 skips it): the feeder paced at fractions of the peer's rate /
(T+1), the peer run before each rate; the highest
egress rate below the first rate at which an ingress frame was lost or egress was not exactly
(T+1) x ingress, against the median of the peer's runs in the sweep (--sweep: the variants
swept, in turn at each rate).

Results: benchmarks/out/multiply_live.json and a Markdown table on stdout. Needs root.

    python benchmarks/bench_multiply_live.py [--packets N] [-T 10] [--repeat R] [--seconds S] [--bin PATH]
                                             [--baseline PATH] [--variants NAME,...] [--sweep NAME,...]
                                             [--nice N]
"""

import argparse
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))
from bench_engine import find_binary

from ntgcore.proc import Process

OUT = REPO / "benchmarks" / "out"
TOPOLOGY = REPO / "testbed" / "endpoints" / "netns" / "topologies" / "multiply.yaml"
FLOW = (
    "flow af=4 proto=17 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 "
    "src=198.18.3.1/32 src_mode=fixed dst=198.18.3.2/32 dst_mode=fixed "
    "sport=1024-1279 sport_mode=random dport=9-9 dport_mode=fixed "
    "start=0 period={period} packets={packets} size=22-22 payload=- reps=1 rep_period=0"
)
# paced ingress rates tried, as fractions of peer pps / (T+1): the egress they ask for vs the peer's
LOADS = (0.7, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15, 1.2)
TICK = 0.004  # s between two samples
QUIET = 0.3  # s without a new egress frame: the run is over
STEADY = 0.1  # the first and the last 10 % of the egress span are left out

VARIANTS = {
    "sendmmsg (default)": [],
    "sendmmsg --spfo-scope batch": ["--spfo-scope", "batch"],
    "sendmmsg --qdisc-bypass": ["--qdisc-bypass"],
    "ring": ["--tx", "ring"],
    "ring --spfo-scope batch": ["--tx", "ring", "--spfo-scope", "batch"],
}
# what --baseline runs (an older binary's options)
BASELINE = {"sendmmsg (its default)": []}


def sh(*args, timeout=120, check=True):
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=check
    )


def rx_packets(pid: int, iface: str) -> int:
    """rx frames of iface in the network namespace of process pid."""
    for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]:
        name, counters = line.split(":", 1)
        if name.strip() == iface:
            return int(counters.split()[1])
    raise LookupError(f"no {iface} in the namespace of process {pid}")


def on_cpu_ns(pid: int) -> int | None:
    """Nanoseconds process pid has run so far (None once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cores() -> dict:
    """Per-core jiffies from /proc/stat: user, nice, system, idle, iowait, irq, softirq, steal."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3].isdigit():
            f = line.split()
            out[f[0]] = [int(x) for x in f[1:9]]
    return out


def core_shares(a: dict, b: dict) -> dict:
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    out = {}
    for cpu in a:
        d = [y - x for x, y in zip(a[cpu], b[cpu])]
        total = sum(d) or 1
        out[cpu] = {n: round(v / total, 3) for n, v in zip(names, d) if v}
    return out


class Egress:
    """Counts egress: rx of sv0 (server) and d0 (DUT), read through a sleeping process in each
    namespace."""

    def __init__(self, name: str):
        self.sleepers = {
            ns: Process(
                f"sleep-{ns}",
                ["ip", "netns", "exec", f"{name}-{ns}", "sleep", "3600"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ).start()
            for ns in ("server", "dut")
        }
        deadline = time.monotonic() + 5
        while True:  # `ip netns exec` has switched namespace once its exec'd sleep is there
            try:
                self()
                break
            except (LookupError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def __call__(self) -> int:
        return rx_packets(self.sleepers["server"].pid, "sv0") + rx_packets(
            self.sleepers["dut"].pid, "d0"
        )

    def close(self):
        for p in self.sleepers.values():
            p.stop(signal.SIGKILL, grace=1)


def watch(egress: Egress, pid: int, running) -> dict:
    """Samples egress and pid's CPU time until running() is false and egress has stopped rising;
    the steady part's rate, CPU per frame and on-CPU share."""
    base, c0, k0 = egress(), on_cpu_ns(pid) or 0, cores()
    samples, cpu = [(time.monotonic(), 0, 0)], 0
    last_rise = time.monotonic()
    while True:
        time.sleep(TICK)
        now, got = time.monotonic(), egress() - base
        c = on_cpu_ns(pid)
        if c is not None:
            cpu = c - c0
        if got != samples[-1][1]:
            last_rise = now
        samples.append((now, got, cpu))
        if now - last_rise > QUIET and not running():
            break
    first = next((i for i, s in enumerate(samples) if s[1] > 0), None)
    if first is None:
        return {"egress": 0, "base": base, "pps": 0.0, "ns_per_frame": None, "on_cpu_share": None}
    last = next(i for i, s in enumerate(samples) if s[1] == samples[-1][1])
    t_first, t_last = samples[first - 1][0], samples[last][0]
    span = t_last - t_first
    lo = next(i for i in range(first, last + 1) if samples[i][0] >= t_first + STEADY * span)
    hi = max(i for i in range(lo, last + 1) if samples[i][0] <= t_last - STEADY * span)
    a, b = samples[lo], samples[hi]
    dt, frames, oncpu = b[0] - a[0], b[1] - a[1], (b[2] - a[2]) / 1e9
    return {
        "egress": samples[-1][1],
        "base": base,
        "span_s": span,
        "span_pps": samples[-1][1] / span if span else 0.0,
        "steady_s": dt,
        "steady_frames": frames,
        "pps": frames / dt if dt else 0.0,
        "ns_per_frame": oncpu / frames * 1e9 if frames else None,
        "on_cpu_share": oncpu / dt if dt else None,
        "cores": core_shares(k0, cores()),
        "load_avg": os.getloadavg()[0],
    }


def nice_prefix(nice):
    return ["nice", "-n", str(nice)]


def autogroup(proc: Process, nice) -> Process:
    """The nice value of proc's autogroup too: Process starts each child in a session of its own,
    hence (kernel.sched_autogroup_enabled) a scheduling group of its own, and the CPU is shared
    between groups before the nice values inside a group count."""
    ag = Path(f"/proc/{proc.pid}/autogroup")
    if ag.exists():
        ag.write_text(str(nice))
    return proc


def peer(name, engine, sess, egress, nice):
    p = Process(
        "peer",
        [
            "ip",
            "netns",
            "exec",
            f"{name}-mult",
            *nice_prefix(nice),
            "taskset",
            "-c",
            "1",
            engine,
            "gen",
            sess,
            "--iface",
            "m-dut",
            "--pace",
            "topspeed",
            "--stats",
            os.devnull,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ).start()
    autogroup(p, nice)
    try:  # ip netns exec, nice and taskset exec in place: the pid is the engine's
        r = watch(egress, p.pid, lambda: p.poll() is None)
    finally:
        p.stop()
    return r


def inline(name, engine, sess, copies, tmp, egress, nice, pace="topspeed", variant=()):
    summary = tmp / "mult.json"
    summary.unlink(missing_ok=True)
    pre = nice_prefix(nice)
    mult = Process(
        "multiplier",
        [
            "ip",
            "netns",
            "exec",
            f"{name}-mult",
            *pre,
            "taskset",
            "-c",
            "1",
            engine,
            "multiply",
            "--live",
            "m-in",
            "m-out",
            "m-dut",
            "-T",
            str(copies),
            "--ranges",
            "198.19.0.0/16",
            "--original",
            "198.18.3.0/24",
            "--summary",
            str(summary),
            *variant,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ).start()
    autogroup(mult, nice)
    feeder = None
    try:
        line = mult.popen.stdout.readline().decode()
        assert line.startswith("ready"), mult.popen.stderr.read().decode()
        feeder = Process(
            "feeder",
            [
                "ip",
                "netns",
                "exec",
                f"{name}-client",
                *pre,
                "taskset",
                "-c",
                "0",
                engine,
                "gen",
                sess,
                "--iface",
                "cl0",
                "--pace",
                pace,
                "--stats",
                os.devnull,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        ).start()
        autogroup(feeder, nice)
        r = watch(egress, mult.pid, lambda: feeder.poll() is None)
    finally:
        if feeder:
            feeder.stop()
        mult.stop()
    # a multiplier starved of its core for longer than QUIET may still hold frames when the
    # watch ends: it sends them before it exits, so the total is read after that
    time.sleep(0.05)
    r["egress"] = egress() - r["base"]
    doc = json.loads(summary.read_text())
    r.update(
        {
            "received": doc["forward"]["received"],
            "engine": doc["forward"],
            "dropped_by_socket": doc["ingress_dropped_by_socket"],
            "tx": doc["dut_tx"],
            "exact": r["egress"] == (copies + 1) * doc["forward"]["received"],
        }
    )
    return r


def paced(name, copies, tmp, egress, nice, peer_pps, seconds, variants, engine, psess):
    """Ingress paced at fractions of what the peer's rate (`peer_pps`) allows, each variant in
    turn at each rate, after a run of the peer (`engine`) whose rate is kept with each row."""
    rows = {k: [] for k in variants}
    for load in LOADS:
        p = peer(name, engine, psess, egress, nice)
        rate = load * peer_pps / (copies + 1)
        n = int(rate * seconds)
        sess = tmp / f"paced-{load}.txt"
        sess.write_text(
            f"ntg-session 1\nseed 1\n{FLOW.format(packets=n, period=int(1e9 / rate))}\n"
        )
        for k, (binary, variant) in variants.items():
            r = inline(
                name, binary, sess, copies, tmp, egress, nice, pace="realtime", variant=variant
            )
            rows[k].append(
                {
                    **r,
                    "load": load,
                    "ingress_pps": rate,
                    "sent": n,
                    "lost_in": n - r["received"],
                    "exact": r["exact"] and r["received"] == n,
                    "egress_pps_asked": rate * (copies + 1),
                    "peer_pps": p["pps"],
                    "of_peer": r["pps"] / p["pps"],
                }
            )
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--packets",
        type=int,
        default=2_000_000,
        help="frames the peer sends, and the feeder at top speed",
    )
    ap.add_argument("-T", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--seconds", type=float, default=2.0, help="length of each paced run (0: no sweep)"
    )
    ap.add_argument("--bin")
    ap.add_argument(
        "--baseline",
        help="an older flowengine whose multiply --live runs alongside (rows 'before: ...')",
    )
    ap.add_argument(
        "--variants", help="comma-separated subset of the variants to run (default: all)"
    )
    ap.add_argument(
        "--sweep",
        help="comma-separated variants for the paced sweep (default: this build's with "
        "the least CPU per egress frame)",
    )
    ap.add_argument(
        "--nice",
        type=int,
        default=-20,
        help="nice value of the peer, the multiplier and the feeder alike, and of their autogroups "
        "(default -20; 0: the share of the machine they get like any other work)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_multiply_live.py needs root (ip netns add)")
    engine = find_binary(args.bin)
    name = f"ntgbm{secrets.token_hex(2)}"
    variants = {
        k: (engine, v)
        for k, v in VARIANTS.items()
        if not args.variants or k in args.variants.split(",")
    }
    if args.baseline:
        variants.update({f"before: {k}": (Path(args.baseline), v) for k, v in BASELINE.items()})
    runs = {"peer": [], **{k: [] for k in variants}}
    sweep, best_variant = {}, None
    with tempfile.TemporaryDirectory(prefix="bench-mlive-") as tmp:
        tmp = Path(tmp)
        sess = tmp / "s.txt"
        sess.write_text(f"ntg-session 1\nseed 1\n{FLOW.format(packets=args.packets, period=1)}\n")
        sh(sys.executable, "-m", "testbed.topology", "up", TOPOLOGY, "--name", name)
        egress = None
        try:
            egress = Egress(name)
            for _ in range(args.repeat):  # interleaved, so drift hits both alike
                runs["peer"].append(peer(name, engine, sess, egress, args.nice))
                for k, (binary, v) in variants.items():
                    runs[k].append(
                        inline(name, binary, sess, args.T, tmp, egress, args.nice, variant=v)
                    )
            peer_pps = statistics.median(r["pps"] for r in runs["peer"])
            # the paced sweep runs this build's variant with the least CPU per egress frame
            best_variant = min(
                (k for k in variants if not k.startswith("before: ")),
                key=lambda k: statistics.median(r["ns_per_frame"] for r in runs[k]),
            )
            swept = args.sweep.split(",") if args.sweep else [best_variant]
            if args.seconds > 0:
                sweep = paced(
                    name,
                    args.T,
                    tmp,
                    egress,
                    args.nice,
                    peer_pps,
                    args.seconds,
                    {k: variants[k] for k in swept},
                    engine,
                    sess,
                )
            runs["peer_after"] = [
                peer(name, engine, sess, egress, args.nice)
            ]  # the peer again, at the end
        finally:
            if egress:
                egress.close()
            sh(
                sys.executable,
                "-m",
                "testbed.topology",
                "down",
                TOPOLOGY,
                "--name",
                name,
                check=False,
            )
    med = {k: statistics.median(r["pps"] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r["ns_per_frame"] for r in v) for k, v in runs.items()}
    share = {k: statistics.median(r["on_cpu_share"] for r in v) for k, v in runs.items()}
    # each repeat against the peer's run next to it (the load changes between repeats more than
    # within one): the median of those ratios
    paired = {
        k: {
            "wall": statistics.median(r["pps"] / p["pps"] for p, r in zip(runs["peer"], runs[k])),
            "cpu": statistics.median(
                p["ns_per_frame"] / r["ns_per_frame"] for p, r in zip(runs["peer"], runs[k])
            ),
            "share": statistics.median(
                r["on_cpu_share"] / p["on_cpu_share"] for p, r in zip(runs["peer"], runs[k])
            ),
        }
        for k in variants
    }
    # the highest rate below the first that lost or was not exact, against the median of the
    # peer's runs during the sweep (one peer run's rate moves with the machine more than a step)
    best = {}
    for k, rows in sweep.items():
        first_bad = next(
            (i for i, r in enumerate(rows) if r["lost_in"] or not r["exact"]), len(rows)
        )
        best[k] = rows[first_bad - 1] if first_bad else None
    sweep_peer = (
        statistics.median(r["peer_pps"] for rows in sweep.values() for r in rows) if sweep else None
    )
    doc = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "copies": args.T,
        "packets": args.packets,
        "nice": args.nice,
        "runs": runs,
        "median_pps": med,
        "median_cpu_ns_per_egress_frame": cpu,
        "median_on_cpu_share": share,
        "paired": paired,
        "best_variant": best_variant,
        "paced": sweep,
        "best_lossless_egress_pps": {k: b["pps"] if b else None for k, b in best.items()},
        "sweep_peer_median_pps": sweep_peer,
        "ratio_lossless_to_peer": {
            k: b["pps"] / sweep_peer if b else None for k, b in best.items()
        },
        "command": "python benchmarks/bench_multiply_live.py " + " ".join(sys.argv[1:]),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "multiply_live.json").write_text(json.dumps(doc, indent=1) + "\n")
    loads = ", ".join(f"{r['load_avg']:.1f}" for r in runs["peer"])
    print(
        f"nice {args.nice}, T={args.T}, {args.repeat} repeats; load average (1 min) at the peer's runs: {loads}\n"
    )
    print(
        "| egress on veth, 64-byte frames | frames/s (median) | of the peer (paired) | CPU ns per egress frame "
        "| peer's CPU per frame / this one's (paired) | on-CPU share | of the peer's (paired) |\n"
        "|---|---:|---:|---:|---:|---:|---:|"
    )
    print(
        f"| flowengine gen --iface (peer) | {med['peer']:,.0f} | 1 | {cpu['peer']:,.0f} | 1 | "
        f"{share['peer']:.2f} | 1 |"
    )
    for k in variants:
        print(
            f"| multiply --live {k} | {med[k]:,.0f} | {paired[k]['wall']:.2f} | {cpu[k]:,.0f} | "
            f"{paired[k]['cpu']:.2f} | {share[k]:.2f} | {paired[k]['share']:.2f} |"
        )
    print(
        f"| peer again at the end | {med['peer_after']:,.0f} | | {cpu['peer_after']:,.0f} | | "
        f"{share['peer_after']:.2f} | |"
    )
    for k, rows in sweep.items():
        print(
            f"\npaced, {k}:\n\n| paced ingress pps | received / sent | egress pps | CPU ns per egress frame "
            "| on-CPU share | exact (T+1)x | the peer's run before it | egress / the peer's |\n"
            "|---|---|---:|---:|---:|---|---:|---:|"
        )
        for r in rows:
            print(
                f"| {r['ingress_pps']:,.0f} | {r['received']:,} / {r['sent']:,} | {r['pps']:,.0f} | "
                f"{r['ns_per_frame'] or 0:,.0f} | {r['on_cpu_share'] or 0:.2f} | {r['exact']} | "
                f"{r['peer_pps']:,.0f} | {r['of_peer']:.2f} |"
            )
        if best[k]:
            print(
                f"\nhighest lossless egress (below the first rate with a loss): {best[k]['pps']:,.0f} frames/s = "
                f"{doc['ratio_lossless_to_peer'][k]:.2f} of the median of the peer's runs in the sweep "
                f"({sweep_peer:,.0f})"
            )


if __name__ == "__main__":
    main()
