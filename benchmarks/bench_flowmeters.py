#!/usr/bin/env python3
"""Seed 002's loss method on every flow meter, in one run (`testbed.duts`): each meter's lossless
packet rate and lossless flow rate on this machine, beside ANGEL's figures (seed 002: more than
10 % loss above about 30,000 pps, figure 3, and above 10 concurrent hosts, figure 11).

One live run of a loss-sweep scenario written here: a packet-rate sweep (one UDP flow of 64-byte
frames, RATES) and a flow-rate sweep (HOSTS hosts, each running SESSIONS UDP sessions one after
another at HOST_RATE packets/s, so HOSTS * SESSIONS / STEP new flows per second), the meters one
after another on the same traffic, each step STEP long. Per step the analysis (analysis/flowmeter)
gives the meter's loss by stage against the exact reference records of the capture at its
interface. A meter's lossless rate is the highest step rate below which no step lost a packet
(`loss`), and the same counting only what the meter lost while it ran (`running_loss`: without
the packets a meter left unread in its capture buffer when it was stopped, which softflowd always
does: libpcap hands it whole blocks). The generator's own top speed (`max`) bounds every rate.
Results: benchmarks/out/flowmeters.json and a Markdown table on stdout. Root.

    python benchmarks/bench_flowmeters.py [--step 3s] [--meters softflowd,pmacct,nfpcapd,argus]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from ntgcore.scenario import load_scenario
from testbed.runner import run_scenario

OUT = REPO / "benchmarks" / "out"
RATES = [1000, 10000, 30000, 50000, 100000, 200000, 300000, "max"]
HOSTS = [3, 10, 30, 100, 300]
SESSIONS, HOST_RATE = 1000, 1000  # 3 packets per session in a 3 s step: 333 flows/s per host
METERS = ["softflowd", "pmacct", "nfpcapd", "argus"]
OPTIONS = {
    "softflowd": "version: 9, max_flows: 1000000",
    "pmacct": "version: ipfix, max_flows: 1000000",
    "nfpcapd": "{}",
    "argus": "{}",
}
SEED = {  # seed 002: ANGEL's loss, figure 3 (pps) and figure 11 (hosts at 2,000 pps each)
    "packet_rate_10pct_loss_above": 30000,
    "hosts_loss_above": 10,
}


def scenario(meters: list[str], step: str, rates: list, hosts: list[int]) -> str:
    duts = "\n".join(
        f"    - {{kind: {m}{', ' + OPTIONS[m] if OPTIONS[m] != '{}' else ''}}}" for m in meters
    )
    return f"""version: 1
name: bench-flowmeters
seed: 2
flows:
  - {{name: template, protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000,
     dst_port: 9, rate: 1000, packets: 1}}
testbed:
  method: loss-sweep
  duts:
{duts}
  capture: {{at: "dut:dut0", snaplen: 96}}
  monitor: {{hz: 2}}
  sweep:
    packet_rates: {json.dumps(rates)}
    hosts: {json.dumps(hosts)}
    sessions_per_host: {SESSIONS}
    host_rate: {HOST_RATE}
    frame_size: 60
    step: {step}
"""


def lossless(rows: list[dict], key: str, loss: str) -> float | None:
    """The highest rate below which (inclusive) no step lost a packet, by LOSS."""
    best = None
    for r in sorted(rows, key=lambda r: r[key] or 0):
        if r.get(loss) is None or r[loss] > 0:
            break
        best = r[key]
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", default="3s")
    ap.add_argument("--meters", default=",".join(METERS))
    ap.add_argument("--rates", default=",".join(map(str, RATES)), help="packet rates (and max)")
    ap.add_argument("--hosts", default=",".join(map(str, HOSTS)), help="host counts")
    args = ap.parse_args()
    meters = args.meters.split(",")
    rates = [r if r == "max" else int(r) for r in args.rates.split(",")]
    hosts = [int(h) for h in args.hosts.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench-flowmeters.yaml"
        path.write_text(scenario(meters, args.step, rates, hosts))
        result = run_scenario(load_scenario(path), Path(tmp), show_progress=False)
        metrics = result.metrics or {}
    steps = {s["name"]: s for s in metrics.get("steps", [])}
    out: dict = {"machine": platform.node(), "cpus": os.cpu_count(), "seed002": SEED, "meters": {}}
    for m in meters:
        rows = []
        for r in metrics.get("loss_sweep", []):
            if (r.get("dut_label") or r.get("dut_kind")) != m:
                continue
            stages = (steps.get(r["step"], {}).get("meter") or {}).get("stages") or {}
            wire = (stages.get("wire") or {}).get("packets") or 0
            unread = ((steps.get(r["step"], {}).get("meter") or {}).get("counters") or {}).get(
                "own", {}
            ).get("packets_unprocessed") or 0
            lost = (stages.get("total") or {}).get("packets")
            rows.append(
                {
                    "step": r["step"],
                    "kind": r["kind"],
                    "packet_rate": r.get("packet_rate"),
                    "flows_per_second": r.get("flows_per_second"),
                    "wire": wire,
                    "lost": lost,
                    "loss": r.get("meter_loss"),
                    "running_loss": None if lost is None or not wire else (lost - unread) / wire,
                    "capture": r.get("capture_loss"),
                    "processing": r.get("processing_loss"),
                    "export": r.get("export_loss"),
                    "cpu_mean": r.get("dut_cpu_mean"),
                    "rss_max": r.get("dut_rss_max"),
                }
            )
        rate = [r for r in rows if r["kind"] == "rate"]
        hosts = [r for r in rows if r["kind"] == "hosts"]
        top = max((r["packet_rate"] or 0 for r in rate), default=0)
        out["meters"][m] = {
            "steps": rows,
            "generator_max_pps": top,
            "lossless_pps": lossless(rate, "packet_rate", "loss"),
            "lossless_pps_running": lossless(rate, "packet_rate", "running_loss"),
            "lossless_flows_per_s": lossless(hosts, "flows_per_second", "loss"),
            "lossless_flows_per_s_running": lossless(hosts, "flows_per_second", "running_loss"),
        }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "flowmeters.json").write_text(json.dumps(out, indent=1) + "\n")
    print(
        "| meter | lossless pps | lossless pps while running | lossless flows/s | "
        "lossless flows/s while running |"
    )
    print("|---|---|---|---|---|")
    for m, r in out["meters"].items():
        texts = []
        for k in ("lossless_pps", "lossless_pps_running"):  # at the generator's top: a bound
            c = r[k]
            bound = "≥ " if c is not None and c >= r["generator_max_pps"] else ""
            texts.append("none" if c is None else f"{bound}{c:,.0f}")
        for k in ("lossless_flows_per_s", "lossless_flows_per_s_running"):
            texts.append("none" if r[k] is None else f"{r[k]:,.0f}")
        print(f"| {m} | " + " | ".join(texts) + " |")
    print(
        f"| ANGEL (seed 002) | > 10 % loss above {SEED['packet_rate_10pct_loss_above']:,} pps "
        f"| | loss above {SEED['hosts_loss_above']} hosts | |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
