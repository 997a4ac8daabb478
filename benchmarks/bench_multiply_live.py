#!/usr/bin/env python3
"""The inline multiplier's egress packet rate on veth against the engine's own live sender on
the same veth, in one run (issue 13's target: within 10 %).

Brings up the `multiply` topology under a random name (namespaces ntgbm<hex>-client, -mult,
-server, -dut; NETWORK-SAFETY.md) and removes it at the end, also on failure. 64-byte UDP frames:

- peer: `flowengine gen --iface m-dut --pace topspeed` in the multiplier's namespace, the
  frames counted by d0's rx counter in the DUT namespace;
- inline: `flowengine multiply --live m-in m-out m-dut -T T` in the multiplier's namespace, fed
  by `flowengine gen --iface cl0 --pace topspeed` from the client's namespace; the egress is
  the rx counters of sv0 (the originals) and d0 (the copies), over the time they kept rising.

Two measures of each: frames per second by wall time, and CPU time (user + system, the engine
process's own, which includes the kernel's sending and the receiving veth's softirq work done in
its context) per egress frame: the second does not depend on what else the machine runs. The
runs of peer and variants alternate (--repeat times). --baseline PATH adds an older build's
multiplier (rows "before: ...") to the same run; --seconds 0 skips the paced sweep.

Results: benchmarks/out/multiply_live.json and a Markdown table on stdout. Needs root.

    python benchmarks/bench_multiply_live.py [--packets N] [-T 10] [--repeat R] [--seconds S] [--bin PATH]
                                             [--baseline PATH] [--variants NAME,...]
"""

import argparse
import json
import os
import platform
import resource
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import find_binary  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
TOPOLOGY = REPO / "testbed" / "endpoints" / "netns" / "topologies" / "multiply.yaml"
FLOW = ("flow af=4 proto=17 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 "
        "src=198.18.3.1/32 src_mode=fixed dst=198.18.3.2/32 dst_mode=fixed "
        "sport=1024-1279 sport_mode=random dport=9-9 dport_mode=fixed "
        "start=0 period={period} packets={packets} size=22-22 payload=- reps=1 rep_period=0")
# paced ingress rates tried, as fractions of peer pps / (T+1): the egress they ask for vs the peer's
LOADS = (0.5, 0.7, 0.8, 0.9, 1.0, 1.1)


def sh(*args, timeout=120, check=True):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=check)


def rx(ns: str, iface: str) -> int:
    return int(sh("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{iface}/statistics/rx_packets").stdout)


def settle(count, start: float, quiet: float = 0.5) -> tuple[int, float]:
    """Polls count() until it stops rising for `quiet` s; returns its last value and when it last rose."""
    last, when = count(), time.monotonic()
    while time.monotonic() - when < quiet:
        time.sleep(0.02)
        now = count()
        if now != last:
            last, when = now, time.monotonic()
    return last, when - start


def child_cpu() -> float:
    """CPU seconds (user + system) of the waited-for children so far: `ip netns exec` and
    `taskset` exec the engine in place, so each run's delta is the engine's own time."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def on_cpu(pid: int) -> float:
    """Seconds process pid has run so far (/proc/PID/schedstat, nanoseconds)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def peer(name, engine, sess):
    before = rx(f"{name}-dut", "d0")
    t0, c0 = time.monotonic(), child_cpu()
    sh("ip", "netns", "exec", f"{name}-mult", "taskset", "-c", "1", engine, "gen", sess, "--iface", "m-dut",
       "--pace", "topspeed",
       "--stats", os.devnull)
    cpu = child_cpu() - c0
    got, wall = settle(lambda: rx(f"{name}-dut", "d0") - before, t0)
    return {"egress": got, "seconds": wall, "pps": got / wall, "cpu_s": cpu, "ns_per_frame": cpu / got * 1e9}


VARIANTS = {"sendmmsg (default)": [], "sendmmsg --spfo-scope batch": ["--spfo-scope", "batch"],
            "sendmmsg --qdisc-bypass": ["--qdisc-bypass"],
            "ring": ["--tx", "ring"], "ring --spfo-scope batch": ["--tx", "ring", "--spfo-scope", "batch"]}
# what --baseline runs (an older binary's options)
BASELINE = {"ring (its default)": ["--tx", "ring"],
            "sendmmsg --spfo-scope batch": ["--tx", "sendmmsg", "--spfo-scope", "batch"]}


def inline(name, engine, sess, copies, tmp, pace="topspeed", variant=("--tx", "ring")):
    summary = tmp / "mult.json"
    mult = subprocess.Popen(["ip", "netns", "exec", f"{name}-mult", "taskset", "-c", "1", str(engine), "multiply", "--live", "m-in", "m-out",
                             "m-dut", "-T", str(copies), "--ranges", "198.19.0.0/16", "--original", "198.18.3.0/24",
                             "--summary", str(summary), *variant], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert mult.stdout.readline().startswith("ready"), mult.stderr.read()
        before = rx(f"{name}-server", "sv0") + rx(f"{name}-dut", "d0")
        t0, s0 = time.monotonic(), on_cpu(mult.pid)  # ip netns exec and taskset exec in place
        sh("ip", "netns", "exec", f"{name}-client", "taskset", "-c", "0", engine, "gen", sess, "--iface", "cl0",
           "--pace", pace, "--stats", os.devnull)
        got, wall = settle(lambda: rx(f"{name}-server", "sv0") + rx(f"{name}-dut", "d0") - before, t0)
        steady = on_cpu(mult.pid) - s0
    finally:
        c0 = child_cpu()
        mult.send_signal(signal.SIGTERM)
        mult.wait(timeout=10)
    cpu = child_cpu() - c0  # the multiplier's alone (the feeder was waited for before)
    doc = json.loads(summary.read_text())
    # per frame: its time on the CPU while the traffic ran (a long-running forwarder's steady
    # state); cpu_s also counts its start (rings, tables) and end
    return {"egress": got, "seconds": wall, "pps": got / wall, "cpu_s": cpu, "cpu_s_traffic": steady,
            "ns_per_frame": steady / max(got, 1) * 1e9,
            "received": doc["forward"]["received"],
            "engine": doc["forward"], "dropped_by_socket": doc["ingress_dropped_by_socket"], "tx": doc["dut_tx"]}


def paced(name, engine, copies, tmp, peer_pps, seconds, variant):
    """Ingress paced at fractions of what the peer's rate allows; the highest egress rate with
    every ingress frame received (none lost in the multiplier's socket buffer)."""
    rows = []
    for load in LOADS:
        rate = load * peer_pps / (copies + 1)
        n = int(rate * seconds)
        sess = tmp / f"paced-{load}.txt"
        sess.write_text(f"ntg-session 1\nseed 1\n{FLOW.format(packets=n, period=int(1e9 / rate))}\n")
        r = inline(name, engine, sess, copies, tmp, pace="realtime", variant=variant)
        egress_pps = r["egress"] / seconds  # the sender's pace sets the span
        rows.append({"load": load, "ingress_pps": rate, "sent": n, "received": r["received"],
                     "lost_in": n - r["received"], "egress": r["egress"], "egress_pps": egress_pps,
                     "exact": r["egress"] == (copies + 1) * n})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=2_000_000, help="frames the peer sends")
    ap.add_argument("-T", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each paced run")
    ap.add_argument("--bin")
    ap.add_argument("--baseline", help="an older flowengine whose multiply --live runs alongside (rows 'before: ...')")
    ap.add_argument("--variants", help="comma-separated subset of the variants to run (default: all)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_multiply_live.py needs root (ip netns add)")
    engine = find_binary(args.bin)
    name = f"ntgbm{secrets.token_hex(2)}"
    variants = {k: (engine, v) for k, v in VARIANTS.items()
                if not args.variants or k in args.variants.split(",")}
    if args.baseline:
        variants.update({f"before: {k}": (Path(args.baseline), v) for k, v in BASELINE.items()})
    runs = {"peer": [], **{k: [] for k in variants}}
    with tempfile.TemporaryDirectory(prefix="bench-mlive-") as tmp:
        tmp = Path(tmp)
        psess, isess = tmp / "p.txt", tmp / "i.txt"
        psess.write_text(f"ntg-session 1\nseed 1\n{FLOW.format(packets=args.packets, period=1)}\n")
        isess.write_text(f"ntg-session 1\nseed 1\n{FLOW.format(packets=args.packets // (args.T + 1), period=1)}\n")
        sh(sys.executable, "-m", "testbed.topology", "up", TOPOLOGY, "--name", name)
        try:
            for _ in range(args.repeat):  # interleaved, so drift hits both alike
                runs["peer"].append(peer(name, engine, psess))
                for k, (binary, v) in variants.items():
                    runs[k].append(inline(name, binary, isess, args.T, tmp, variant=v))
            peer_pps = statistics.median(r["pps"] for r in runs["peer"])
            # the paced sweep runs this build's variant with the least CPU per egress frame
            best_variant = min((k for k in variants if not k.startswith("before: ")),
                               key=lambda k: statistics.median(r["ns_per_frame"] for r in runs[k]))
            binary, v = variants[best_variant]
            sweep = paced(name, binary, args.T, tmp, peer_pps, args.seconds, v) if args.seconds > 0 else []
            runs["peer_after"] = [peer(name, engine, psess)]  # the peer again, after the sweep
        finally:
            sh(sys.executable, "-m", "testbed.topology", "down", TOPOLOGY,
               "--name", name, check=False)
    med = {k: statistics.median(r["pps"] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r["ns_per_frame"] for r in v) for k, v in runs.items()}
    # each repeat against the peer's run next to it (the load changes between repeats more than
    # within one): the median of those ratios
    paired_cpu = {k: statistics.median(p["ns_per_frame"] / r["ns_per_frame"] for p, r in zip(runs["peer"], runs[k]))
                  for k in variants}
    paired_wall = {k: statistics.median(r["pps"] / p["pps"] for p, r in zip(runs["peer"], runs[k])) for k in variants}
    clean = [r for r in sweep if r["lost_in"] == 0 and r["exact"]]
    best = max((r["egress_pps"] for r in clean), default=None)
    doc = {"host": platform.node(), "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "copies": args.T,
           "packets": args.packets, "runs": runs, "median_pps": med, "best_variant": best_variant,
           "ratio_inline_to_peer": {k: med[k] / med["peer"] for k in variants},
           "median_cpu_ns_per_egress_frame": cpu,
           "cpu_ratio_peer_to_inline": {k: cpu["peer"] / cpu[k] for k in variants},
           "paired_cpu_ratio": paired_cpu, "paired_wall_ratio": paired_wall, "paced": sweep,
           "best_lossless_egress_pps": best, "ratio_lossless_to_peer": best / med["peer"] if best else None,
           "command": "python benchmarks/bench_multiply_live.py " + " ".join(sys.argv[1:])}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "multiply_live.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"| egress on veth, 64-byte frames, T={args.T} | median pps | of the peer (paired) | CPU ns per egress "
          "frame | peer's CPU per frame / this one's (paired) |\n|---|---:|---:|---:|---:|")
    print(f"| flowengine gen --iface (peer) | {med['peer']:,.0f} | 1 | {cpu['peer']:,.0f} | 1 |")
    for k in variants:
        print(f"| multiply --live {k} | {med[k]:,.0f} | {paired_wall[k]:.2f} | {cpu[k]:,.0f} | {paired_cpu[k]:.2f} |")
    print(f"| peer again after the sweep | {med['peer_after']:,.0f} |")
    print(f"\npaced, {best_variant}:")
    print("\n| paced ingress pps | received / sent | egress pps | exact (T+1)x |\n|---|---|---|---|")
    for r in sweep:
        print(f"| {r['ingress_pps']:,.0f} | {r['received']:,} / {r['sent']:,} | {r['egress_pps']:,.0f} | {r['exact']} |")
    if best:
        print(f"\nhighest lossless egress: {best:,.0f} pps = {doc['ratio_lossless_to_peer']:.2f} of the peer")


if __name__ == "__main__":
    main()
