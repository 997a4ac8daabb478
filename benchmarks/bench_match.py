#!/usr/bin/env python3
"""Issue 12 / seed 000: packets matched to flows per second by `flowengine match`, per structure.

Cases (one core, the timed loop of the emulator only: the feed is built before it):
- random: uniform over 4M flows (2^22), all lookups hit (--warmup inserts every flow first);
  tables sized for it: chain and tree 2^22 lines, linear, linear16 and Robin Hood 2^23 slots (half
  full), cuckoo 5,242,880 entries (80 % full). "odd": the same a little over, not a power of two.
- deterministic: one 5-tuple over and over (seed 000's upper bound: 58.1 Mpps lists, 44.6 trees).
- trace: the largest real pcap of $NTG_SHARED_DATA/pcaps (751 packets, 26 flows here) replayed in
  order to --trace-packets lookups (default 2M), a 2^16-line table; a structure that cannot take
  the pcap (linear16 and IPv6 packets) is skipped with the engine's reason. Seed 000's 14.6/19.7
  Mpps came from 150M packets of a CAIDA trace with millions of flows, which we do not have.
- churn: every packet a new flow at 1 M packets/s of feed time with a 1 s idle timeout, so about
  1 M inserts and 1 M expiries a second of feed time; reports inserts and expiries per second of
  wall time and the worst packet's cost (probes of its lookup and expiry steps).
The median of --repeat runs. --compare BIN runs another flowengine (e.g. a build of the commit before)
on the random and deterministic cases too, alternating with ours run by run, and reports ours / it.
The DPDK rte_hash peer on the random case is
benchmarks/bench_match_rte.py (see docs/flow-match.md).

Results go to benchmarks/out/match.json; a Markdown table goes to stdout.

    python benchmarks/bench_match.py [--repeat R] [--packets N] [--hash NAME] [--bin PATH] [--compare PATH]
                                     [--structs a,b] [--cases random,odd,det,churn,trace]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import OUT, find_binary

RANDOM_FLOWS = 1 << 22
RANDOM_SIZES = {
    "chain": "2^22",
    "tree": "2^22",
    "linear": "2^23",
    "robin": "2^23",
    "cuckoo": "5242880",
    "linear16": "2^23",
}
# the same tables a little over those sizes, not powers of two: the line is then the exact modulo by a
# reciprocal (two multiplies), not a mask (cuckoo's 655,360 buckets are not a power of two either)
ODD_SIZES = {
    "chain": "4194319",
    "tree": "4194319",
    "linear": "8388617",
    "robin": "8388617",
    "linear16": "8388617",
}
IPV4_ONLY = {
    "linear16"
}  # keys packed in 16 bytes: a pcap with IPv6 packets is refused (then skipped)
STRUCTS = list(RANDOM_SIZES)


def run(binary, args, pin=None):
    """`flowengine match ARGS --json`, its JSON; PIN: the core to run it on (taskset -c)."""
    with tempfile.NamedTemporaryFile(prefix="fe-match-", suffix=".json", delete=False) as f:
        path = Path(f.name)
    try:
        prefix = ["taskset", "-c", str(pin)] if pin is not None else []
        r = subprocess.run(
            [*prefix, str(binary), "match", *args, "--json", str(path)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise RuntimeError(
                f"flowengine match {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}"
            )
        return json.loads(path.read_text())
    finally:
        path.unlink(missing_ok=True)


def median_of(runs):
    runs = sorted(runs, key=lambda r: r["mpps"])
    best = runs[len(runs) // 2]
    best["mpps_runs"] = [r["mpps"] for r in runs]
    return best


def median_run(binary, args, repeat, pin=None):
    return median_of([run(binary, args, pin) for _ in range(repeat)])


def median_pair(binary, other, args, repeat, pin=None):
    """The medians of REPEAT runs of BINARY and of OTHER, alternating run by run."""
    ours, theirs = [], []
    for _ in range(repeat):
        ours.append(run(binary, args, pin))
        theirs.append(run(other, args, pin))
    return median_of(ours), median_of(theirs)


def refusal(binary, args):
    """None if `flowengine match ARGS` (one pass of its feed) runs, else the engine's reason."""
    r = subprocess.run([str(binary), "match", *args], capture_output=True, text=True)
    return None if r.returncode == 0 else r.stderr.strip().removeprefix("flowengine match: ")


def largest_pcap():
    root = os.environ.get("NTG_SHARED_DATA")
    pcaps = (
        sorted((Path(root) / "pcaps").glob("*.pcap"), key=lambda p: p.stat().st_size)
        if root
        else []
    )
    return pcaps[-1] if pcaps else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--packets", type=int, default=8_000_000, help="packets of the random and churn cases"
    )
    ap.add_argument("--det-packets", type=int, default=16_000_000)
    ap.add_argument(
        "--trace-packets",
        type=int,
        default=2_000_000,
        help="lookups of the trace case (the pcap replayed in order)",
    )
    ap.add_argument("--hash", default="crc32c")
    ap.add_argument("--bin")
    ap.add_argument(
        "--compare", help="another flowengine binary, run alternately on the random and det cases"
    )
    ap.add_argument("--structs", default=",".join(STRUCTS))
    ap.add_argument("--cpu", type=int, help="the core to run on (taskset -c; default: any)")
    ap.add_argument("--cases", default="random,odd,det,churn,trace")
    a = ap.parse_args()
    binary = find_binary(a.bin)
    wanted = set(a.cases.split(","))
    results = {
        "machine": platform.node(),
        "cpu": platform.processor(),
        "hash": a.hash,
        "repeat": a.repeat,
        "binary": str(binary),
        "compare": a.compare,
        "cases": [],
    }
    pcap = largest_pcap()
    for struct in a.structs.split(","):
        common = ["--struct", struct, "--hash", a.hash]
        cases = {
            "random 4M flows, hits": common
            + [
                "--size",
                RANDOM_SIZES[struct],
                "--feed",
                f"uniform:{RANDOM_FLOWS}",
                "--packets",
                str(a.packets),
                "--warmup",
            ],
            "random 4M flows, hits, size not a power of two": common
            + [
                "--size",
                ODD_SIZES.get(struct, RANDOM_SIZES[struct]),
                "--feed",
                f"uniform:{RANDOM_FLOWS}",
                "--packets",
                str(a.packets),
                "--warmup",
            ],
            "deterministic": common
            + ["--size", "2^20", "--feed", "det", "--packets", str(a.det_packets)],
            "churn 1M new flows/s, idle 1 s": common
            + [
                "--size",
                "2^22" if struct in ("chain", "tree") else "4194304",
                "--feed",
                f"netscan:{a.packets}",
                "--packets",
                str(a.packets),
                "--rate",
                "1e6",
                "--timeout-idle",
                "1",
            ],
        }
        if pcap and "trace" in wanted:
            trace = common + ["--size", "2^16", "--feed", "pcap", "--pcap", str(pcap)]
            why = refusal(binary, trace) if struct in IPV4_ONLY else None
            if why:
                print(f"{struct:7} trace {pcap.name}: skipped: {why}", file=sys.stderr)
            else:
                cases[f"trace {pcap.name}"] = trace + ["--packets", str(a.trace_packets)]
        kinds = {
            "random 4M flows, hits": "random",
            "random 4M flows, hits, size not a power of two": "odd",
            "deterministic": "det",
            "churn 1M new flows/s, idle 1 s": "churn",
        }
        for name, args in cases.items():
            kind = kinds.get(name, "trace")
            if kind not in wanted or (kind == "odd" and struct not in ODD_SIZES):
                continue
            if a.compare and kind in ("random", "odd", "det"):
                r, other = median_pair(binary, a.compare, args, a.repeat, a.cpu)
                r["compare_mpps"], r["compare_mpps_runs"] = other["mpps"], other["mpps_runs"]
                r["compare_p_l1"] = other["p_l1"]
            else:
                r = median_run(binary, args, a.repeat, a.cpu)
            r["case"] = name
            r["args"] = args
            results["cases"].append(r)
            vs = (
                f" (compare {r['compare_mpps']:.2f}: x{r['mpps'] / r['compare_mpps']:.2f})"
                if "compare_mpps" in r
                else ""
            )
            print(f"{struct:7} {name:32} {r['mpps']:8.2f} Mpps{vs}", file=sys.stderr)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "match.json").write_text(json.dumps(results, indent=1) + "\n")
    cmp_head, cmp_rule = (
        (" compare Mpps | ours / compare | compare P(L=1) |", "---|---|---|")
        if a.compare
        else ("", "")
    )
    print(
        f"| structure | case | size | Mpps (median of {a.repeat}) |{cmp_head} P(L=1) | mean probes | bytes/flow | "
        "inserts/s | expiries/s | worst packet (probes, expiry steps) |"
    )
    print("|---|---|---|---|" + cmp_rule + "---|---|---|---|---|---|")
    for r in results["cases"]:
        cmp = (
            f" {r['compare_mpps']:.1f} | {r['mpps'] / r['compare_mpps']:.2f} | {r['compare_p_l1']:.3f} |"
            if "compare_mpps" in r
            else (" | | |" if a.compare else "")
        )
        print(
            f"| {r['struct']} | {r['case']} | {r['size']} | {r['mpps']:.1f} |{cmp} {r['p_l1']:.3f} | "
            f"{r['probe_mean']:.2f} | {r['bytes_per_flow']:.0f} | {r['inserts_per_s']:.3g} | "
            f"{r['expiries_per_s']:.3g} | {r['worst_packet']['probes']}, {r['worst_packet']['expiry_steps']} |"
        )


if __name__ == "__main__":
    main()
