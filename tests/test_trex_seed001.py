"""Seed 001's comparison with TRex (issue 11, item 7), the short CI variant: scenarios/seed001-
comparison-trex.yaml as shipped, its generators cut to the native engine and TRex, 2 s at top speed
each, no load steps (with them the test took 27 s here; all five generators with the load
steps: `testbed run scenarios/seed001-comparison-trex.yaml --duration 2s`, 2 min 25 s here). The real
TRex v3.08 server ($NTG_TREX_DIR) is started in the run's generator namespace (the default
topology, tcpdump on the tap)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from ntgcore.registry import GENERATORS
from generators.trex import PLUGIN

from conftest import skip_or_fail

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.ntg_live,
    pytest.mark.skipif(os.geteuid() != 0, reason="live tests create network namespaces: need root"),
]


def test_seed001_comparison_with_trex_beside_the_native_engine(tmp_path, run_scenario, flowengine_bin):
    d = os.environ.get("NTG_TREX_DIR")
    if not d or not (Path(d) / "server" / "_t-rex-64-o").is_file():
        skip_or_fail("NTG_TREX_DIR does not point at a TRex build (.ci/run sets it to ../shared/trex)")
    if "trex" not in GENERATORS:
        GENERATORS.register("trex", PLUGIN)
    doc = yaml.safe_load((ROOT / "scenarios" / "seed001-comparison-trex.yaml").read_text())
    shipped = [g["label"] if "label" in g else g["name"] for g in doc["testbed"]["generators"]]
    assert shipped == ["native", "tcpreplay", "ostinato", "scapy", "trex"]
    doc["testbed"]["generators"] = [g for g in doc["testbed"]["generators"] if g["name"] in ("flowengine", "trex")]
    doc["testbed"].update(duration="2s", load_steps=None)  # CI: the top-speed steps only (2 s: a full second)
    path = tmp_path / "seed001-comparison.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = run_scenario(path)
    assert run.ok, run.messages
    rows = {r["generator"]: r for r in run.metrics["comparison"]}
    assert set(rows) == {"native", "trex"}
    assert rows["native"]["packets"] > 100_000 and rows["native"]["mean_pps"] > 50_000
    trex = rows["trex"]
    assert trex["packets"] > 100_000 and trex["average_packet_size"] == 60  # 2 s at up to 300 kpps
    assert trex["throughput_Bps"] == pytest.approx(60 * trex["mean_pps"])
    steps = {s["name"]: s for s in run.manifest["steps"]}
    top = steps["trex"]["generators"]["trex"]
    assert top["status"] == "completed" and top["port_stats"]["trex"]["server_version"] == "v3.08"
    assert steps["trex"]["loss"]["wire"] == top["packets_sent"]  # every TRex packet on the tap
    assert list(steps) == ["native", "trex"]
    print("\nseed 001 (CI variant): " + ", ".join(
        f"{g}: {r['mean_pps']} pps mean, steady {r['steady_mean_pps']}, cpu {r['cpu_mean']}"
        for g, r in rows.items()))
