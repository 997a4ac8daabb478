#!/usr/bin/env python3
"""Live sending rate of flowengine (`gen --iface`) against trafgen and tcpreplay.

Creates a network namespace ntgbench-<random> holding a veth pair (veth0 -> veth1, both up,
IPv6 off, no addresses, no routes; NETWORK-SAFETY.md) and deletes it at the end, also on
failure. Every sender runs pinned to one core (`taskset -c 0`) and sends 64-byte IPv4/UDP
frames on veth0:

- flowengine `--pace topspeed`, once with `--tx ring` (TX ring, qdisc bypass) and once with
  `--tx sendmmsg`; each row is named by the back end the engine's summary says it used
  (`sink`), and a run whose back end is not the one asked for stops the benchmark (the engine's
  default is sendmmsg: a "ring" row without `--tx ring` measured sendmmsg),
- trafgen (netsniff-ng) with the same frame as its packet configuration, `--cpus 1`, `-n`,
- tcpreplay `--topspeed --preload-pcap` replaying a pcap of the same frames that flowengine
  wrote (`-o`), bounded by its length.

Mpps is reported twice per sender: from its own report and from the peer's rx counter
(/sys/class/net/veth1/statistics/rx_packets delta over the process's wall time). Results go
to benchmarks/out/live.json; a Markdown table goes to stdout. Needs root.

    python benchmarks/bench_live.py [--packets N] [--replay N] [--repeat R] [--bin PATH]
"""

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import find_binary

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testbed.endpoints.netns.topology import VethPair

FLOW = (
    "flow af=4 proto=17 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 "
    "src=198.18.0.1/32 src_mode=fixed dst=198.19.0.1/32 dst_mode=fixed "
    "sport=1024-65535 sport_mode=random dport=9-9 dport_mode=fixed "
    "start=0 period=1 packets={packets} size=22-22 payload=- reps=1 rep_period=0"
)


def sh(*args, timeout=30, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=check)


class Namespace(VethPair):
    """Both veth ends in one namespace, as the measured rates in ../shared were taken."""

    def __init__(self):
        super().__init__(prefix="ntgbench", split=False)

    def exec(self, *args, timeout=120, check=True):
        return self.run_in(self.gen, *args, timeout=timeout, check=check)


def timed(ns, argv, timeout=300):
    before = ns.rx()
    t0 = time.monotonic()
    p = ns.exec("taskset", "-c", "0", *argv, timeout=timeout, check=False)
    wall = time.monotonic() - t0
    rx = ns.rx() - before
    if p.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return p, rx, wall


def run_engine(ns, engine, session, extra=()):
    p, rx, wall = timed(
        ns,
        [
            str(engine),
            "gen",
            str(session),
            "--iface",
            "veth0",
            "--pace",
            "topspeed",
            "--stats",
            os.devnull,
            *extra,
        ],
    )
    s = json.loads(p.stderr.strip().splitlines()[-1])
    return {
        "own_mpps": s["sent"] / s["wall_seconds"] / 1e6,
        "rx_mpps": rx / wall / 1e6,
        "sent": s["sent"],
        "rx": rx,
        "wall": wall,
        "sink": s["sink"],
    }


def run_trafgen(ns, conf, packets):
    p, rx, wall = timed(
        ns,
        [
            "trafgen",
            "--dev",
            "veth0",
            "--conf",
            str(conf),
            "--cpus",
            "1",
            "-n",
            str(packets),
            "--no-sock-mem",
        ],
    )
    out = p.stdout + p.stderr
    m = re.search(
        r"(\d+)\s+packets outgoing.*?\n.*?(\d+)\s+bytes outgoing.*?\n\s*(\d+)\s+sec,\s*(\d+)\s+usec",
        out,
        re.S,
    )
    own = int(m.group(1)) / (int(m.group(3)) + int(m.group(4)) / 1e6) / 1e6 if m else None
    return {
        "own_mpps": own,
        "rx_mpps": rx / wall / 1e6,
        "sent": int(m.group(1)) if m else None,
        "rx": rx,
        "wall": wall,
    }


def run_tcpreplay(ns, pcap):
    p, rx, wall = timed(ns, ["tcpreplay", "-i", "veth0", "--topspeed", "--preload-pcap", str(pcap)])
    out = p.stdout + p.stderr
    m = re.search(r"Actual:\s+(\d+) packets.*?in ([\d.]+) seconds", out)
    own = int(m.group(1)) / float(m.group(2)) / 1e6 if m else None
    return {
        "own_mpps": own,
        "rx_mpps": rx / wall / 1e6,
        "sent": int(m.group(1)) if m else None,
        "rx": rx,
        "wall": wall,
    }


def trafgen_conf(frame: bytes) -> str:
    return (
        "{\n  "
        + ",\n  ".join(
            ", ".join(f"0x{b:02x}" for b in frame[i : i + 16]) for i in range(0, len(frame), 16)
        )
        + "\n}\n"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=5_000_000)
    ap.add_argument("--replay", type=int, default=2_000_000, help="frames in tcpreplay's pcap")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bin")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_live.py needs root (ip netns add)")
    for tool in ("trafgen", "tcpreplay", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing (apt-get install -y netsniff-ng tcpreplay util-linux)")
    engine = find_binary(args.bin)

    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        tmp = Path(tmp)
        sess = tmp / "s.txt"
        sess.write_text(f"ntg-session 1\nseed 1\n{FLOW.format(packets=args.packets)}\n")
        rsess = tmp / "r.txt"
        rsess.write_text(f"ntg-session 1\nseed 1\n{FLOW.format(packets=args.replay)}\n")
        pcap = tmp / "frames.pcap"
        sh(str(engine), "gen", str(rsess), "-o", str(pcap), "--stats", os.devnull, timeout=120)
        data = pcap.read_bytes()
        conf = tmp / "udp64.cfg"
        conf.write_text(trafgen_conf(data[24 + 16 : 24 + 16 + 64]))

        runs = {
            "flowengine (afpacket-ring)": [],
            "flowengine (afpacket-sendmmsg)": [],
            "trafgen": [],
            "tcpreplay --preload-pcap": [],
        }
        with Namespace() as ns:
            for _ in range(args.repeat):  # interleaved, so drift hits every sender alike
                for tx in ("ring", "sendmmsg"):
                    r = run_engine(ns, engine, sess, ("--tx", tx))
                    if r["sink"] != f"afpacket-{tx}":
                        sys.exit(f"flowengine --tx {tx} ran {r['sink']}: the row would lie")
                    runs[f"flowengine (afpacket-{tx})"].append(r)
                runs["trafgen"].append(run_trafgen(ns, conf, args.packets))
                runs["tcpreplay --preload-pcap"].append(run_tcpreplay(ns, pcap))

    def med(rs, k):
        vals = [r[k] for r in rs if r[k] is not None]
        return statistics.median(vals) if vals else None

    ours = med(runs["flowengine (afpacket-ring)"], "rx_mpps")
    table = {}
    for name, rs in runs.items():
        table[name] = {"own_mpps": med(rs, "own_mpps"), "rx_mpps": med(rs, "rx_mpps"), "runs": rs}
        r = table[name]["rx_mpps"]
        table[name]["ours_vs_this"] = ours / r if r else None

    result = {
        "packets": args.packets,
        "replay_packets": args.replay,
        "repeat": args.repeat,
        "frame_bytes": 64,
        "cpu": "taskset -c 0",
        "kernel": platform.release(),
        "engine": str(engine),
        "results": table,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "live.json").write_text(json.dumps(result, indent=2) + "\n")

    print(f"64-byte UDP frames on a veth pair, one core, median of {args.repeat}\n")
    print("| sender | Mpps (own report) | Mpps (peer rx) | flowengine afpacket-ring ÷ this |")
    print("|---|---|---|---|")
    for name, t in table.items():
        own = f"{t['own_mpps']:.3f}" if t["own_mpps"] else "n/a"
        print(f"| {name} | {own} | {t['rx_mpps']:.3f} | {t['ours_vs_this']:.2f}× |")


if __name__ == "__main__":
    main()
