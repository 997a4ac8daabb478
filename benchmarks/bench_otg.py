#!/usr/bin/env python3
"""The OTG front end's cost: a flow sent through `testbed otg serve` against `flowengine gen
--iface` on the same veth, and the time from `set_control_state(start)` to the first frame.

Starts `testbed otg serve` (HTTPS on a free loopback port, the default otg-b2b site: namespaces
<site>-p1 and <site>-p2 joined by one veth pair) and drives it with snappi, the real client:

- rate: one IPv4/UDP flow of N 64-byte frames (60 bytes of frame + the 4-byte FCS OTG counts) at
  100 % of a 400 Gbps layer1, i.e. as fast as the engine sends, metrics off; against it, in the
  same run and alternating, `flowengine gen --iface p1` in the site's own namespace with N 60-byte
  frames at period 1 ns (the same bytes on the wire, the engine's default live back end). Both
  rates are sent frames over the engine's wall time (its summary), and the peer's rx counter;
- start latency: a flow of 1,000 frames at 1,000 pps with a capture on the rx port; the time from
  just before `set_control_state(start)` to the first frame's capture time stamp (same clock).

Results go to benchmarks/out/otg.json; a Markdown table to stdout. Needs root.

    python benchmarks/bench_otg.py [--packets N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
sys.path.insert(0, str(REPO))

import snappi  # noqa: E402

from analysis.capture import iter_frames  # noqa: E402
from ntgcore.native_tools import executable  # noqa: E402

SESSION = (
    "ntg-session 1\n"
    "flow af=4 proto=17 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 "
    "src=198.18.0.1/32 src_mode=fixed dst=198.19.0.1/32 dst_mode=fixed "
    "sport=5000-5000 sport_mode=fixed dport=6000-6000 dport_mode=fixed "
    "start=0 period=1 packets={packets} size=18-18 payload=- reps=1 rep_period=0\n"
)


def sh(*args: str, check: bool = True) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, check=check).stdout


def rx_packets(ns: str, iface: str) -> int:
    out = sh("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{iface}/statistics/rx_packets")
    return int(out.strip())


class Server:
    def __init__(self, results: Path) -> None:
        self.proc = subprocess.Popen(
            [
                str(REPO / ".venv/bin/python"),
                "-m",
                "testbed",
                "otg",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--results",
                str(results),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.search(r"(https://[0-9.]+:\d+)", line)
        if not m:
            self.proc.kill()
            raise SystemExit(f"testbed otg serve did not start: {line!r}")
        self.url = m.group(1)
        mark = json.loads(
            next(Path("/run/ntg-testbed/runs").glob(f"*.{self.proc.pid}.json")).read_text()
        )
        self.ns = {n.rsplit("-", 1)[1]: n for n in mark["locations"]}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def udp_config(api, packets: int, rate: dict, capture: bool, speed: str = "speed_400_gbps"):
    c = api.config()
    c.ports.add(name="p1", location="p1")
    c.ports.add(name="p2", location="p2")
    ly = c.layer1.add(name="ly", port_names=["p1", "p2"])
    ly.speed = speed
    if capture:
        c.captures.add(name="ca", port_names=["p2"])
    f = c.flows.add(name="f1")
    f.tx_rx.port.tx_name = "p1"
    f.tx_rx.port.rx_names = ["p2"]
    f.duration.fixed_packets.packets = packets
    f.duration.fixed_packets.gap = 0
    f.size.fixed = 64
    if "pps" in rate:
        f.rate.pps = rate["pps"]
    else:
        f.rate.percentage = rate["percentage"]
    eth, ip, udp = f.packet.ethernet().ipv4().udp()
    eth.src.value, eth.dst.value = "02:00:00:00:00:01", "02:00:00:00:00:02"
    ip.src.value, ip.dst.value = "198.18.0.1", "198.19.0.1"
    udp.src_port.value, udp.dst_port.value = 5000, 6000
    return c


def state(api, what: str, value: str) -> None:
    cs = api.control_state()
    if what == "traffic":
        cs.traffic.flow_transmit.state = value
    else:
        cs.port.capture.state = value
    api.set_control_state(cs)


def wait_stopped(api, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        req = api.metrics_request()
        req.flow.flow_names = []
        if api.get_metrics(req).flow_metrics[0].transmit == "stopped":
            return
        time.sleep(0.2)
    raise SystemExit("the OTG flow did not stop in time")


def latest_start(results: Path) -> Path:
    return max(results.glob("*otg*/start-*"), key=lambda p: p.stat().st_mtime)


def otg_rate(api, srv: Server, results: Path, packets: int) -> dict:
    api.set_config(udp_config(api, packets, {"percentage": 100}, capture=False))
    before = rx_packets(srv.ns["p2"], "p2")
    state(api, "traffic", "start")
    wait_stopped(api)
    got = rx_packets(srv.ns["p2"], "p2") - before
    s = json.loads((latest_start(results) / "p1.summary.json").read_text())
    return {
        "sent": s["sent"],
        "wall_s": s["wall_seconds"],
        "mpps": s["sent"] / s["wall_seconds"] / 1e6,
        "rx": got,
        "sink": s["sink"],
    }


def engine_rate(srv: Server, packets: int, tmp: Path) -> dict:
    session = tmp / "bench.session"
    session.write_text(SESSION.format(packets=packets))
    summary = tmp / "summary.json"
    before = rx_packets(srv.ns["p2"], "p2")
    sh(
        "ip",
        "netns",
        "exec",
        srv.ns["p1"],
        str(executable("flowengine")),
        "gen",
        str(session),
        "--iface",
        "p1",
        "--stats",
        "/dev/null",
        "--summary",
        str(summary),
    )
    got = rx_packets(srv.ns["p2"], "p2") - before
    s = json.loads(summary.read_text())
    return {
        "sent": s["sent"],
        "wall_s": s["wall_seconds"],
        "mpps": s["sent"] / s["wall_seconds"] / 1e6,
        "rx": got,
        "sink": s["sink"],
    }


def start_latency(api, srv: Server, results: Path) -> float:
    api.set_config(udp_config(api, 1000, {"pps": 1000}, capture=True, speed="speed_1_gbps"))
    state(api, "capture", "start")
    t0 = time.clock_gettime_ns(time.CLOCK_REALTIME)
    state(api, "traffic", "start")
    wait_stopped(api)
    state(api, "capture", "stop")
    cap = max(results.glob("*otg*/capture-p2-*.pcap"), key=lambda p: p.stat().st_mtime)
    first = next(ts for ts, _, _ in iter_frames(cap))
    return (first - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_otg needs root (network namespaces)")
    with tempfile.TemporaryDirectory(prefix="ntg-bench-otg-") as t:
        tmp = Path(t)
        results = tmp / "results"
        srv = Server(results)
        try:
            api = snappi.api(location=srv.url, verify=False)
            otg, eng, lat = [], [], []
            for _ in range(args.repeat):
                otg.append(otg_rate(api, srv, results, args.packets))
                eng.append(engine_rate(srv, args.packets, tmp))
                lat.append(start_latency(api, srv, results))
        finally:
            srv.stop()
    med = {k: statistics.median(r["mpps"] for r in v) for k, v in (("otg", otg), ("engine", eng))}
    doc = {
        "benchmark": "bench_otg",
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "packets": args.packets,
        "repeat": args.repeat,
        "otg": otg,
        "engine": eng,
        "median_mpps": med,
        "ratio_otg_to_engine": med["otg"] / med["engine"],
        "start_to_first_frame_s": lat,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "otg.json").write_text(json.dumps(doc, indent=1) + "\n")
    print("| sender | median Mpps (sent / wall) | runs | rx == sent |")
    print("|---|---:|---|---|")
    for name, rows in (
        ("testbed otg serve (snappi, 64-byte frames)", otg),
        ("flowengine gen --iface (same veth, same bytes)", eng),
    ):
        runs = ", ".join(format(r["mpps"], ".3f") for r in rows)
        print(
            f"| {name} | {statistics.median(r['mpps'] for r in rows):.3f} | {runs} | "
            f"{all(r['rx'] == r['sent'] for r in rows)} |"
        )
    print(
        f"\nratio otg / engine: {doc['ratio_otg_to_engine']:.3f}; start -> first frame: "
        f"{', '.join(f'{x:.3f}' for x in lat)} s; load average {doc['load_average'][0]:.2f}"
    )


if __name__ == "__main__":
    main()
