#!/usr/bin/env python3
"""The engine's stream lines against its flow lines (generators/flowengine/README.md, "Stream lines").

Pairs two sessions of the same packet count and 64-byte frames: `gen`'s one flow line (IPv4/UDP,
22-byte payload, every header and checksum built per packet) and one stream line playing a
64-byte IPv4/UDP frame read from a pcap (a copy of the frame, the 4-byte sequence patched and the
UDP checksum updated incrementally per packet), and the same stream with `fcs=1` (a 64-byte frame
whose last 4 bytes are its FCS, kept right per packet). All run to the null sink and, as root, live at
top speed on a veth pair in a namespace made with the project's helper (VethPair, both ends in one
namespace, deleted at the end; NETWORK-SAFETY.md). Reports Mpps (the engine's summary: packets /
wall_seconds; live: sent / wall_seconds and the peer's rx counter over the process's wall time)
and the ratio stream / flow.

Results go to benchmarks/out/engine_stream.json; a Markdown table goes to stdout.

    python benchmarks/bench_engine_stream.py [--packets N] [--live-packets N] [--repeat R]
                                             [--bin PATH] [--no-live]
"""

import argparse
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_engine import find_binary

from ntgcore.packets import PcapWriter, addr, ether, ipv4, udp
from testbed.endpoints.netns.topology import VethPair

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"

SRC, DST = "198.18.0.1", "198.19.0.1"
FLOW = (
    "flow af=4 proto=17 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 "
    f"src={SRC}/32 src_mode=fixed dst={DST}/32 dst_mode=fixed "
    "sport=1024-65535 sport_mode=random dport=9-9 dport_mode=fixed "
    "start=0 period=1 packets={packets} size=22-22 payload=- reps=1 rep_period=0"
)
# The 12-byte signature (magic, flow index, sequence) at the start of the UDP payload.
SEQ_OFF, CSUM_OFF = 14 + 20 + 8 + 8, 14 + 20 + 6
STREAM = (
    "stream first=0 count=1 start=0 period=1 packets={packets} burst=0 burst_period=0 "
    f"seq_off={SEQ_OFF} csum_off={CSUM_OFF}"
)


KINDS = ("flow", "stream", "stream+fcs")


def frame64(fcs: bool) -> bytes:
    """A 64-byte IPv4/UDP frame; with `fcs` 60 bytes and its FCS."""
    payload = b"NTGO" + bytes(18 - 4 * fcs)
    f = ether(ipv4(addr(SRC), addr(DST), 17, udp(addr(SRC), addr(DST), 1024, 9, payload)), True)
    if fcs:
        f += struct.pack("<I", zlib.crc32(f))
    assert len(f) == 64, len(f)
    return f


def sessions(tmp: Path, packets: int) -> dict[str, Path]:
    frames = tmp / "frames.pcap"
    with open(frames, "wb") as fh:
        w = PcapWriter(fh, nanosecond=True)
        w.write(0, frame64(False))
        w.write(0, frame64(True))
    lines = {
        "flow": FLOW.format(packets=packets),
        "stream": STREAM.format(packets=packets),
        "stream+fcs": STREAM.format(packets=packets).replace("first=0", "first=1") + " fcs=1",
    }
    out = {}
    for name, line in lines.items():
        head = "ntg-session 1\nseed 1\n" + (f"frames {frames}\n" if name != "flow" else "")
        p = tmp / f"{name}-{packets}.ntg"
        p.write_text(head + line + "\n")
        out[name] = p
    return out


def run_null(binary: Path, session: Path) -> dict:
    r = subprocess.run(
        [str(binary), "gen", str(session), "--null", "--stats", os.devnull],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        raise RuntimeError(f"flowengine exited {r.returncode}: {r.stderr.strip()[-500:]}")
    s = json.loads(r.stderr.strip().splitlines()[-1])
    return {"mpps": s["mpps"], "packets": s["packets"], "bytes": s["bytes"]}


def run_live(binary: Path, ns: VethPair, session: Path) -> dict:
    before = ns.rx()
    t0 = time.monotonic()
    p = ns.run_in(
        ns.gen,
        "taskset",
        "-c",
        "0",
        str(binary),
        "gen",
        str(session),
        "--iface",
        "veth0",
        "--pace",
        "topspeed",
        "--stats",
        os.devnull,
        timeout=600,
        check=False,
    )
    wall = time.monotonic() - t0
    rx = ns.rx() - before
    if p.returncode != 0:
        raise RuntimeError(f"flowengine exited {p.returncode}: {p.stderr.strip()[-500:]}")
    s = json.loads(p.stderr.strip().splitlines()[-1])
    return {
        "mpps": s["sent"] / s["wall_seconds"] / 1e6,
        "rx_mpps": rx / wall / 1e6,
        "sent": s["sent"],
        "rx": rx,
        "sink": s["sink"],
    }


def median_of(runs: list[dict], key: str = "mpps") -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=20_000_000, help="packets per null-sink run")
    ap.add_argument("--live-packets", type=int, default=2_000_000, help="packets per live run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the median is reported")
    ap.add_argument("--bin", help="flowengine executable")
    ap.add_argument("--no-live", action="store_true", help="skip the veth runs")
    ap.add_argument("--out", default=str(OUT / "engine_stream.json"))
    a = ap.parse_args()

    binary = find_binary(a.bin)
    version = subprocess.run([str(binary), "version"], capture_output=True, text=True).stdout
    results: list[dict] = []
    live = not a.no_live and os.geteuid() == 0
    with tempfile.TemporaryDirectory() as tmp:
        null_s = sessions(Path(tmp), a.packets)
        # Alternate the two kinds so that the machine's drift hits both alike.
        runs: dict[str, list[dict]] = {k: [] for k in KINDS}
        for _ in range(a.repeat):
            for kind in KINDS:
                runs[kind].append(run_null(binary, null_s[kind]))
        for kind in KINDS:
            results.append({"sink": "null", "lines": kind, "runs": runs[kind]})
        if live:
            live_s = sessions(Path(tmp), a.live_packets)
            with VethPair(prefix="ntgbench", split=False) as ns:
                lruns: dict[str, list[dict]] = {k: [] for k in KINDS}
                for _ in range(a.repeat):
                    for kind in KINDS:
                        lruns[kind].append(run_live(binary, ns, live_s[kind]))
            for kind in KINDS:
                results.append({"sink": "veth", "lines": kind, "runs": lruns[kind]})
    for r in results:
        r["mpps_median"] = median_of(r["runs"])
        if r["sink"] == "veth":
            r["rx_mpps_median"] = median_of(r["runs"], "rx_mpps")
    ratios = {}
    for sink in ("null", "veth"):
        by = {r["lines"]: r["mpps_median"] for r in results if r["sink"] == sink}
        for kind in KINDS[1:]:
            if "flow" in by and kind in by:
                ratios[f"{kind} / flow, {sink}"] = by[kind] / by["flow"]

    report = {
        "flowengine": version.strip(),
        "binary": str(binary),
        "packets_per_null_run": a.packets,
        "packets_per_live_run": a.live_packets if live else None,
        "frame_bytes": 64,
        "repeat": a.repeat,
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "results": results,
        "stream_over_flow": ratios,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    print(f"{version.strip()}, 64-byte frames, median of {a.repeat}\n")
    print("| sink | lines | packets | Mpps (median) | peer rx Mpps |")
    print("|---|---|---:|---:|---:|")
    for r in results:
        n = a.packets if r["sink"] == "null" else a.live_packets
        rx = f"{r['rx_mpps_median']:.2f}" if "rx_mpps_median" in r else "–"
        print(f"| {r['sink']} | {r['lines']} | {n:,} | {r['mpps_median']:.2f} | {rx} |")
    print()
    for what, ratio in ratios.items():
        print(f"{what}: {ratio:.2f}")
    if not live:
        print("(live runs skipped: needs root, or --no-live given)")
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
