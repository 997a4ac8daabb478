#!/usr/bin/env python3
"""The engine's two-way session lines against one-way flow lines, and its alias-table draws
(generators/flowengine/README.md, "Session lines", "Dist lines").

Part 1, null sink, one core (one engine thread): TCP sessions of 64-byte data segments (IPv4,
mss 10: 14 + 20 + 20 + 10 bytes; their pure ACKs are 54 bytes) and UDP sessions of 64-byte
datagrams (mss 22), against one-way flow lines (IPv4 TCP, 10-byte payloads: 64-byte frames) with
the same number of packets and instances, in the same run, alternated; plus the TCP sessions
with the optional keys in use (`think`, `linger` and client ports dealt from a deck of 1,000,
`P:ID`: the same packets, a little later). Reports Mpps (the
engine's summary) and the ratio session / flow. `--compare-bin OLD` adds the flow session run
with another build (e.g. the one before session lines) for the one-way path's before/after.

Part 2: draws per second of `dist` alias tables of 256 and 65,536 bins (unequal weights, bins
of several values: two SplitMix64 outputs per draw) against a uniform draw (one output and a
modulo, as flow lines draw), measured by a small C program compiled here from the engine's own
dist.c / dist.h (the engine draws per instance, never per packet, so this is the table's own
speed).

Results go to benchmarks/out/engine_sessions.json; a Markdown table goes to stdout.

    python benchmarks/bench_engine_sessions.py [--packets N] [--repeat R] [--bin PATH]
                                               [--compare-bin PATH] [--draws N]
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import find_binary

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
SRC = REPO / "generators" / "flowengine" / "src"

MACS = "cmac=02:00:00:00:00:01 smac=02:00:00:00:00:02"
# Each instance: handshake, ROUNDS x (request + response of BYTES each) in flights of 10
# segments with 5 ACKs each, FIN close. 1,000 instances alive at once, spaced 1 us apart.
SESSION = (
    "session af=4 proto={proto} " + MACS + " client=198.18.0.0/16 server=198.19.0.1/32 "
    "client_mode=random server_mode=fixed cport=1024-65535 sport=80-80 cport_mode=random "
    "sport_mode=fixed start=0 reps={reps} arrival=1000 rtt=2000 gap=10 mss={mss} win=10 "
    "rounds={rounds} req={bytes} resp={bytes} close=fin"
)
FLOW = (
    "flow af=4 proto=6 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 src=198.18.0.0/16 "
    "src_mode=random dst=198.19.0.1/32 dst_mode=fixed sport=1024-65535 sport_mode=random "
    "dport=80-80 dport_mode=fixed start=0 period={period} packets={packets} size=10-10 payload=- "
    "reps={reps} rep_period=1000"
)
# The TCP sessions with think (before rounds 1 on), linger (before the FIN) and client ports
# dealt from a deck of 1,000 ports (P:0): the same packets, a few us later.
EXTRAS = "think=3000 linger=5000"
DECK = "dist 0 " + " ".join(f"{p}-{p}:1" for p in range(20000, 21000))
KINDS = ("flow", "tcp-session", "tcp-session think/linger/P:", "udp-session")

HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dist.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static struct fe_dist make(uint32_t n)
{
    uint64_t *lo = malloc(n * sizeof *lo), *hi = malloc(n * sizeof *hi);
    uint32_t *w = malloc(n * sizeof *w);
    for (uint32_t i = 0; i < n; i++) {
        lo[i] = (uint64_t)i * 1000;
        hi[i] = lo[i] + 999;
        w[i] = 1 + (uint32_t)((i * 2654435761u) % 1000); /* unequal: aliases everywhere */
    }
    struct fe_dist d;
    if (dist_build(&d, n, lo, hi, w))
        exit(1);
    free(lo);
    free(hi);
    free(w);
    return d;
}

int main(int argc, char **argv)
{
    /* The uniform draw's range comes from the command line, as a flow line's does from its
     * session: a real division, not a multiplication by a constant's inverse. */
    uint64_t n = strtoull(argv[1], NULL, 10), top = strtoull(argv[2], NULL, 10), sum = 0, st = 42;
    struct fe_dist a = make(256), b = make(65536);
    double t0 = now();
    for (uint64_t i = 0; i < n; i++)
        sum += rng_range(&st, 0, top);
    double t1 = now();
    for (uint64_t i = 0; i < n; i++)
        sum += dist_draw(&a, &st);
    double t2 = now();
    for (uint64_t i = 0; i < n; i++)
        sum += dist_draw(&b, &st);
    double t3 = now();
    printf("{\"uniform\": %.1f, \"alias_256\": %.1f, \"alias_65536\": %.1f, \"sum\": %llu}\n",
           n / (t1 - t0), n / (t2 - t1), n / (t3 - t2), (unsigned long long)sum);
    return 0;
}
"""


def session_files(tmp: Path, packets: int, bin_: Path) -> tuple[dict[str, Path], int]:
    """The three sessions, sized to about `packets` packets with the same packet count."""
    reps = 1000
    # TCP: per round 2 x (100 segments + 50 ACKs); the UDP rounds are 2 x 100 datagrams.
    tcp_rounds = max(1, packets // reps // 300)
    tcp = SESSION.format(proto=6, reps=reps, mss=10, rounds=tcp_rounds, bytes=1000)
    files = {"tcp-session": tmp / "tcp.ntg"}
    files["tcp-session"].write_text(f"ntg-session 1\nseed 1\n{tcp}\n")
    extra = tcp.replace("cport_mode=random", "cport_mode=P:0") + " " + EXTRAS
    files["tcp-session think/linger/P:"] = tmp / "tcp-extra.ntg"
    files["tcp-session think/linger/P:"].write_text(f"ntg-session 1\nseed 1\n{DECK}\n{extra}\n")
    first = run_null(bin_, files["tcp-session"])
    total = first["packets"]
    per = total // reps
    dur = max(1, first["last_ns"] - (reps - 1) * 1000)  # one instance's span
    udp_rounds = max(1, per // 200)
    udp = SESSION.format(proto=17, reps=reps, mss=22, rounds=udp_rounds, bytes=2200)
    files["udp-session"] = tmp / "udp.ntg"
    files["udp-session"].write_text(f"ntg-session 1\nseed 1\n{udp}\n")
    # One-way flows: the same instances, packets per instance and span (so as many alive).
    flow = FLOW.format(period=max(1, dur // per), packets=per, reps=reps)
    files["flow"] = tmp / "flow.ntg"
    files["flow"].write_text(f"ntg-session 1\nseed 1\n{flow}\n")
    return files, total


def run_null(binary: Path, session: Path) -> dict:
    r = subprocess.run(
        ["taskset", "-c", "0", str(binary), "gen", str(session), "--null", "--stats", os.devnull],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        raise RuntimeError(f"flowengine exited {r.returncode}: {r.stderr.strip()[-500:]}")
    s = json.loads(r.stderr.strip().splitlines()[-1])
    return {
        "mpps": s["mpps"],
        "packets": s["packets"],
        "bytes": s["bytes"],
        "last_ns": s["last_ns"],
    }


def draw_rates(tmp: Path, draws: int) -> dict:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return {"skipped": "no C compiler"}
    src = tmp / "harness.c"
    src.write_text(HARNESS)
    exe = tmp / "harness"
    subprocess.run(
        [
            cc,
            "-O2",
            "-std=c11",
            "-D_POSIX_C_SOURCE=200809L",
            f"-I{SRC / 'gen'}",
            f"-I{SRC / 'common'}",
            str(src),
            str(SRC / "gen" / "dist.c"),
            "-o",
            str(exe),
        ],
        check=True,
    )
    r = subprocess.run(
        ["taskset", "-c", "0", str(exe), str(draws), "255999"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=20_000_000, help="about this many per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the median is reported")
    ap.add_argument("--bin", help="flowengine executable")
    ap.add_argument("--compare-bin", help="another flowengine: its one-way flow run too")
    ap.add_argument("--draws", type=int, default=50_000_000, help="draws per alias/uniform case")
    ap.add_argument("--out", default=str(OUT / "engine_sessions.json"))
    a = ap.parse_args()

    binary = find_binary(a.bin)
    version = subprocess.run([str(binary), "version"], capture_output=True, text=True).stdout
    bins = {k: binary for k in KINDS}
    if a.compare_bin:
        bins["flow (compare-bin)"] = Path(a.compare_bin)
    with tempfile.TemporaryDirectory() as tmp:
        files, total = session_files(Path(tmp), a.packets, binary)
        files["flow (compare-bin)"] = files["flow"]
        runs: dict[str, list[dict]] = {k: [] for k in bins}
        for _ in range(a.repeat):  # alternated: the machine's drift hits all alike
            for kind in bins:
                runs[kind].append(run_null(bins[kind], files[kind]))
        draws = draw_rates(Path(tmp), a.draws)
    results = [
        {
            "lines": k,
            "binary": str(bins[k]),
            "runs": v,
            "mpps_median": statistics.median(r["mpps"] for r in v),
            "bytes_per_packet": v[0]["bytes"] / v[0]["packets"],
        }
        for k, v in runs.items()
    ]
    by = {r["lines"]: r["mpps_median"] for r in results}
    ratios = {f"{k} / flow": by[k] / by["flow"] for k in by if k != "flow"}
    report = {
        "flowengine": version.strip(),
        "binary": str(binary),
        "packets_per_run": total,
        "repeat": a.repeat,
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "results": results,
        "over_flow": ratios,
        "draws_per_second": draws,
        "draws": a.draws,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    print(f"{version.strip()}, null sink, one core, median of {a.repeat}\n")
    print("| lines | packets | mean frame bytes | Mpps (median) | / flow |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        ratio = ratios.get(f"{r['lines']} / flow", 1.0)
        print(
            f"| {r['lines']} | {r['runs'][0]['packets']:,} | {r['bytes_per_packet']:.1f} "
            f"| {r['mpps_median']:.2f} | {ratio:.2f} |"
        )
    if "uniform" in draws:
        print(f"\n| draw | M draws/s ({a.draws:,} each) | / uniform |")
        print("|---|---:|---:|")
        for k in ("uniform", "alias_256", "alias_65536"):
            print(f"| {k} | {draws[k] / 1e6:.1f} | {draws[k] / draws['uniform']:.2f} |")
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
