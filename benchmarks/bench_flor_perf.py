#!/usr/bin/env python3
"""FLOR's performance tests 6.3.3, 6.3.4 and 6.3.7 replicated with the native engine.

- Payload length (FLOR Figures 6.6-6.9): one IPv4/UDP flow, payload 0..1472 bytes in 64-byte
  steps (plus 1472 itself), null sink, with and without `--csum-offload`; Mpps and the Gbit/s it
  means on the wire, next to the line rates of 10 and 40 Gbit/s Ethernet.
- Slow-flow scheduling (FLOR Figure 6.11): 2^16..2^24 flows of one packet per second, all
  starting at 0, paced in real time (`--pace realtime`, null sink) for a few seconds: the packet
  rate reached against the N packets/s asked for, and the lateness ("slack"). FLOR schedules 2^22
  such flows without visible slack.

Writes benchmarks/out/flor_perf.json, docs/img/engine-payload.png, and Markdown tables on stdout.

    python benchmarks/bench_flor_perf.py [--packets N] [--slow-seconds S] [--max-slow-log2 K]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generators.flowengine import engine_path

FLOW = (
    "flow af=4 proto=17 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 "
    "src={src} src_mode={src_mode} dst=198.19.0.1/32 dst_mode=fixed "
    "sport=1024-65535 sport_mode=increment dport=9-9 dport_mode=fixed "
    "start=0 period={period} packets={packets} size={size}-{size} payload=- "
    "reps={reps} rep_period={rep_period}"
)
WIRE_OVERHEAD = 4 + 8 + 12  # FCS, preamble + SFD, inter-frame gap


def engine(binary: Path, session: str, sink: str, *args: str) -> dict:
    """One engine run; `sink` is null or pcap (a file on /dev/shm, deleted afterwards)."""
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        path = Path(tmp) / "s.ntg"
        path.write_text(session)
        summary = Path(tmp) / "summary.json"
        out = ["--null"] if sink == "null" else ["-o", str(Path(shm) / "x.pcap")]
        t0 = time.perf_counter()
        r = subprocess.run(
            [
                str(binary),
                "gen",
                str(path),
                *out,
                "--summary",
                str(summary),
                "--stats",
                os.devnull,
                *args,
            ],
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"flowengine failed ({r.returncode}): {r.stderr.strip()}")
        s = json.loads(summary.read_text())
        s["process_wall_seconds"] = wall
        return s


def payload_sweep(binary: Path, packets: int, repeat: int) -> list[dict]:
    rows = []
    sizes = list(range(0, 1473, 64)) + [1472]
    for offload in (False, True):
        for size in sizes:
            for sink in ("null", "pcap"):
                n = packets if sink == "null" else packets // 4
                session = (
                    "ntg-session 1\nseed 1\n"
                    + FLOW.format(
                        src="198.18.0.1/32",
                        src_mode="fixed",
                        period=1,
                        packets=n,
                        size=size,
                        reps=1,
                        rep_period=0,
                    )
                    + "\n"
                )
                args = ["--csum-offload"] if offload else []
                runs = sorted(engine(binary, session, sink, *args)["mpps"] for _ in range(repeat))
                mpps = runs[len(runs) // 2]
                frame = 14 + 20 + 8 + size
                wire = (max(frame, 60) + WIRE_OVERHEAD) * 8
                rows.append(
                    {
                        "payload": size,
                        "frame": frame,
                        "offload": offload,
                        "sink": sink,
                        "packets": n,
                        "mpps": mpps,
                        "gbps_wire": mpps * 1e6 * wire / 1e9,
                        "line_rate_10g_mpps": 10e9 / wire / 1e6,
                        "line_rate_40g_mpps": 40e9 / wire / 1e6,
                    }
                )
                print(
                    f"payload {size:5} offload={offload!s:5} {sink:4} {mpps:7.2f} Mpps",
                    file=sys.stderr,
                )
    return rows


def slow_sweep(binary: Path, seconds: int, max_log2: int) -> list[dict]:
    """N flows of 1 pps, paced in real time: `together` all start at 0 (FLOR's test: every
    second N packets fall due at the same instant), `spread` starts are 1/N s apart."""
    rows = []
    for layout in ("together", "spread"):
        for k in range(16, max_log2 + 1, 2):
            n = 1 << k
            session = (
                "ntg-session 1\nseed 1\n"
                + FLOW.format(
                    src="198.18.0.0/15",
                    src_mode="increment",
                    period=1_000_000_000,
                    packets=seconds,
                    size=18,
                    reps=n,
                    rep_period=0 if layout == "together" else 1_000_000_000 // n,
                )
                + "\n"
            )
            s = engine(binary, session, "null", "--pace", "realtime")
            planned = (seconds - 1) + (
                0 if layout == "together" else (n - 1) * (1_000_000_000 // n) / 1e9
            )
            rows.append(
                {
                    "layout": layout,
                    "flows": n,
                    "log2": k,
                    "packets": s["packets"],
                    "wall_seconds": s["wall_seconds"],
                    "planned_seconds": planned,
                    "late": s.get("late"),
                    "late_share": (s.get("late") or 0) / s["packets"],
                    "max_late_ms": (s.get("max_late_ns") or 0) / 1e6,
                    "peak_rss_bytes": s.get("peak_rss_bytes"),
                }
            )
            print(
                f"{layout} 2^{k} slow flows: wall {s['wall_seconds']:.2f} s for {planned:.2f} s "
                f"planned, late {s.get('late')}, max late {(s.get('max_late_ns') or 0) / 1e6:.1f} ms",
                file=sys.stderr,
            )
    return rows


def plot(rows: list[dict], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.2), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for sink, offload, color, style, label in (
        ("null", False, "#1f77b4", "o-", "null sink"),
        ("null", True, "#1f77b4", "x--", "null sink, --csum-offload"),
        ("pcap", False, "#d9730d", "o-", "pcap on tmpfs"),
        ("pcap", True, "#d9730d", "x--", "pcap on tmpfs, --csum-offload"),
    ):
        pts = [r for r in rows if r["offload"] == offload and r["sink"] == sink]
        ax.plot(
            [r["payload"] for r in pts],
            [r["mpps"] for r in pts],
            style,
            ms=3,
            color=color,
            label=label,
        )
    pts = [r for r in rows if not r["offload"] and r["sink"] == "null"]
    for key, style, label in (
        ("line_rate_40g_mpps", "--", "40 Gbit/s line rate"),
        ("line_rate_10g_mpps", ":", "10 Gbit/s line rate"),
    ):
        ax.plot(
            [r["payload"] for r in pts], [r[key] for r in pts], style, color="#8c8c8c", label=label
        )
    ax.set_yscale("log")
    ax.set_title("Packet rate by UDP payload length (one flow, one core)", loc="left", fontsize=12)
    ax.set_xlabel("UDP payload (bytes)")
    ax.set_ylabel("million packets per second")
    ax.grid(True, color="#e5e5e5", linewidth=0.8)
    ax.legend(frameon=False, fontsize=9)
    fig.savefig(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=10_000_000, help="packets per payload point")
    ap.add_argument("--repeat", type=int, default=3, help="runs per point (median)")
    ap.add_argument("--slow-seconds", type=int, default=5, help="packets per slow flow")
    ap.add_argument("--max-slow-log2", type=int, default=24, help="largest slow-flow count, log2")
    a = ap.parse_args()
    binary = engine_path()

    payload = payload_sweep(binary, a.packets, a.repeat)
    slow = slow_sweep(binary, a.slow_seconds, a.max_slow_log2)
    out = ROOT / "benchmarks" / "out" / "flor_perf.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"payload": payload, "slow": slow}, indent=2) + "\n")
    img = ROOT / "docs" / "img" / "engine-payload.png"
    plot(payload, img)

    print(
        "| payload (B) | frame (B) | null Mpps | null, offload | pcap Mpps | pcap, offload "
        "| pcap Gbit/s on a wire | 10G line rate (Mpps) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    by = {(r["payload"], r["sink"], r["offload"]): r for r in payload}
    for size in sorted({r["payload"] for r in payload}):
        p = by[(size, "pcap", False)]
        print(
            f"| {size} | {p['frame']} | {by[(size, 'null', False)]['mpps']:.2f} | "
            f"{by[(size, 'null', True)]['mpps']:.2f} | {p['mpps']:.2f} | "
            f"{by[(size, 'pcap', True)]['mpps']:.2f} | {p['gbps_wire']:.1f} | "
            f"{p['line_rate_10g_mpps']:.2f} |"
        )
    print(
        "\n| slow flows (1 pps each) | starts | packets | wall s (planned) | late packets "
        "| largest lateness (ms) |"
    )
    print("|---:|---|---:|---:|---:|---:|")
    for r in slow:
        print(
            f"| 2^{r['log2']} | {r['layout']} | {r['packets']:,} | {r['wall_seconds']:.2f} "
            f"({r['planned_seconds']:.2f}) | "
            f"{r['late']:,} ({r['late_share']:.1%}) | {r['max_late_ms']:.1f} |"
        )
    print(f"\nwritten to {out} and {img}")


if __name__ == "__main__":
    main()
