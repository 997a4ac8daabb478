#!/usr/bin/env python3
"""The flow engine at scale: FLOR's chapter 6.3 performance tests on this machine.

1. Flow count (FLOR Figure 6.4): Mpps versus concurrent flows 2^0, 2^4, ..., 2^24 for both
   planners (--planner exact|stochastic), null sink, 64-byte IPv4/UDP frames, one core. One
   meta-flow whose repetitions all start within the first n ns and never end, like FLOR's
   (start 0, 2^32 - 1 packets). `mpps` is the steady state: packets over wall time between
   per-second CSV rows after the first (see flow_count), so the start of the n flows is left out;
   `mpps_total` is the summary's figure for the whole run. Memory per flow = (peak RSS - peak RSS
   with 1 flow) / n.
2. Flow insertion (FLOR 6.3.5 / 6.3.6): single-packet flows, flows started per second of the
   engine's wall time, from many standalone flow lines (start k ns) and from one meta-flow of 2^32
   repetitions (stopped by --max-packets).

Writes benchmarks/out/scale.json, prints Markdown tables and saves docs/img/engine-scale.png.

    python benchmarks/bench_engine_scale.py [--bin PATH] [--max-log2 24] [--seconds S]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import find_binary

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
IMG = REPO / "docs" / "img" / "engine-scale.png"

FLOW = (
    "flow af=4 proto=17 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 "
    "src=10.0.0.0/8 src_mode=increment dst=198.19.0.1/32 dst_mode=fixed "
    "sport=1024-65535 sport_mode=random dport=9-9 dport_mode=fixed "
    "start={start} period={period} packets={packets} size=22-22 payload=- "
    "reps={reps} rep_period={rep_period}"
)


def session(lines):
    return "ntg-session 1\nseed 1\n" + "\n".join(lines) + "\n"


def run(binary, path, planner, max_packets=None):
    args = [str(binary), "gen", str(path), "--null", "--stats", os.devnull, "--planner", planner]
    if max_packets is not None:
        args += ["--max-packets", str(max_packets)]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"flowengine exited {r.returncode}: {r.stderr.strip()[-500:]}")
    return json.loads(r.stderr.strip().splitlines()[-1])


def flow_count(binary, tmp, planner, n, seconds):
    """One run: n flows of one meta-flow, all started within n ns and never ending, sending
    R = max(5 * 10^6, n) packets per virtual second in all (period 10^9 * n / R ns, so every flow
    has at least 1 pps and stays in the stochastic planner's tree). The engine flushes the CSV row
    of a virtual second as soon as it passes it; the steady-state rate is the packets of seconds
    1..seconds over the wall time between the arrival of row 0 (start-up included) and that of
    row `seconds`."""
    rate = max(5_000_000, n)
    path = Path(tmp) / "fc.ntg"
    summ = Path(tmp) / "fc.json"
    path.write_text(
        session(
            [
                FLOW.format(
                    start=0, period=10**9 * n // rate, packets=2**32 - 1, reps=n, rep_period=1
                )
            ]
        )
    )
    limit = n + rate * (seconds + 1) + 1
    args = [
        str(binary),
        "gen",
        str(path),
        "--null",
        "--planner",
        planner,
        "--summary",
        str(summ),
        "--max-packets",
        str(limit),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rows = []
    proc.stdout.readline()  # header
    for line in proc.stdout:
        rows.append((time.perf_counter(), [int(x) for x in line.split(",")[:2]]))
    if proc.wait() != 0:
        raise RuntimeError(f"flowengine exited {proc.returncode}")
    s = json.loads(summ.read_text())
    assert s["flows_started"] == n
    t0 = rows[0][0]
    t1, _ = rows[seconds]
    pk = sum(r[1][1] for r in rows[1 : seconds + 1])
    return {
        "planner": planner,
        "flows": n,
        "log2_flows": n.bit_length() - 1,
        "mpps": pk / (t1 - t0) / 1e6,
        "mpps_total": s["mpps"],
        "packets": s["packets"],
        "virtual_pps": rate,
        "wall_seconds": s["wall_seconds"],
        "peak_rss_bytes": s["peak_rss_bytes"],
    }


def insertion(binary, tmp, planner, standalone):
    path = Path(tmp) / "ins.ntg"
    if standalone:
        path.write_text(
            session(
                FLOW.format(start=k, period=1000, packets=1, reps=1, rep_period=0)
                for k in range(standalone)
            )
        )
        s = run(binary, path, planner)
        kind, n = f"{standalone:,} standalone flow lines", standalone
    else:
        n = 20_000_000
        path.write_text(
            session([FLOW.format(start=0, period=1000, packets=1, reps=2**32, rep_period=1)])
        )
        s = run(binary, path, planner, n)
        kind = "one meta-flow of 2^32 repetitions"
    assert s["flows_started"] == n
    return {
        "planner": planner,
        "case": kind,
        "flows": n,
        "wall_seconds": s["wall_seconds"],
        "flows_per_second": n / s["wall_seconds"],
        "peak_rss_bytes": s["peak_rss_bytes"],
    }


def plot(points, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for planner, marker in (("exact", "o"), ("stochastic", "s")):
        pts = [p for p in points if p["planner"] == planner]
        ax.plot(
            [p["flows"] for p in pts],
            [p["mpps"] for p in pts],
            marker=marker,
            label=f"{planner} planner",
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent flows")
    ax.set_ylabel("Mpps (null sink, 64-byte frames, one core)")
    ax.set_title("flowengine: packet rate versus flow count (cf. FLOR Fig. 6.4)")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", help="flowengine executable")
    ap.add_argument("--max-log2", type=int, default=24, help="largest flow count, as log2")
    ap.add_argument(
        "--seconds",
        type=int,
        default=4,
        help="virtual seconds measured per point (2 for the stochastic planner from 2^20 flows on)",
    )
    ap.add_argument("--standalone", type=int, default=2**20, help="flow lines, insertion test")
    ap.add_argument("--out", default=str(OUT / "scale.json"))
    ap.add_argument("--png", default=str(IMG))
    a = ap.parse_args()

    binary = find_binary(a.bin)
    version = subprocess.run(
        [str(binary), "version"], capture_output=True, text=True
    ).stdout.strip()
    points, inserts = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for planner in ("exact", "stochastic"):
            for lg in range(0, a.max_log2 + 1, 4):
                n = 2**lg
                secs = a.seconds if planner == "exact" or lg < 20 else 2
                p = flow_count(binary, tmp, planner, n, secs)
                points.append(p)
                print(
                    f"{planner:10} 2^{lg:<2} flows {p['mpps']:7.2f} Mpps "
                    f"rss {p['peak_rss_bytes'] / 2**20:8.1f} MiB",
                    file=sys.stderr,
                )
            base = next(p for p in points if p["planner"] == planner and p["flows"] == 1)
            for p in points:
                if p["planner"] == planner:
                    # Below 2^12 flows the difference drowns in page-size noise.
                    p["bytes_per_flow"] = (
                        (p["peak_rss_bytes"] - base["peak_rss_bytes"]) / p["flows"]
                        if p["flows"] >= 2**12
                        else None
                    )
        for planner in ("exact", "stochastic"):
            for standalone in (a.standalone, 0):
                r = insertion(binary, tmp, planner, standalone)
                inserts.append(r)
                print(
                    f"{planner:10} {r['case']}: {r['flows_per_second'] / 1e6:.2f} M flows/s",
                    file=sys.stderr,
                )

    report = {
        "flowengine": version,
        "binary": str(binary),
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "frame_bytes": 64,
        "sink": "null",
        "targets": {"mpps_at_2^20_flows": 20, "bytes_per_flow": 64, "flows_per_second": 10_000_000},
        "flor": {"standalone_flows_per_second": 1.1e6, "meta_flows_per_second": 2.1e6},
        "flow_count": points,
        "insertion": inserts,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    plot(points, Path(a.png))

    print(f"{version}; null sink, 64-byte frames, one core; steady-state Mpps\n")
    print("| flows | exact Mpps | exact B/flow | stochastic Mpps | stochastic B/flow |")
    print("|---:|---:|---:|---:|---:|")
    by = {(p["planner"], p["flows"]): p for p in points}
    for lg in range(0, a.max_log2 + 1, 4):
        e, s = by[("exact", 2**lg)], by[("stochastic", 2**lg)]

        def bpf(p):
            return "–" if p["bytes_per_flow"] is None else f"{p['bytes_per_flow']:.1f}"

        print(f"| 2^{lg} | {e['mpps']:.2f} | {bpf(e)} | {s['mpps']:.2f} | {bpf(s)} |")
    print("\n| planner | flows from | flows | M flows/s (FLOR: 1.1 standalone, 2.1 meta) |")
    print("|---|---|---:|---:|")
    for r in inserts:
        print(
            f"| {r['planner']} | {r['case']} | {r['flows']:,} | {r['flows_per_second'] / 1e6:.2f} |"
        )
    print(f"\nwritten to {out} and {a.png}")


if __name__ == "__main__":
    main()
