"""Every flow meter live, in one run (`testbed.duts`): each captures on the DUT's veth in its
namespace and exports to the real collector there; its records are scored against the exact
reference records of the wire capture at the same interface (analysis.flowmeter)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from analysis.flowmeter.records import MeterRules
from analysis.flowmeter.reference import reference_records
from analysis.flowmeter.score import score
from testbed.meters.live import meters

METERS = ("softflowd", "pmacct", "nfpcapd", "argus")

SCENARIO = """version: 1
name: meters-live
flows:
  - {protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000, dst_port: 9, rate: 20000,
     packets: 8000, payload: {size: 100}}
  - {protocol: udp, src: 198.18.0.3, dst: 198.18.0.2, src_port: 40001, dst_port: 53, rate: 1000,
     packets: 100, payload: {size: 30}}
  - {protocol: tcp, src: 198.18.0.4, dst: 198.18.0.2, src_port: 40002, dst_port: 80, rate: 1000,
     packets: 50, payload: {size: 500}}
testbed:
  capture: {at: "dut:dut0", snaplen: 128}
  duts:
    - {kind: softflowd, version: 9}
    - {kind: pmacct, version: ipfix}
    - {kind: nfpcapd}
    - {kind: argus}
"""


WIRE = 8000 + 100 + 50


@pytest.mark.usefixtures("root")
def test_every_meter_live_is_scored_and_its_loss_accounted_by_stage(
    tmp_path, run_scenario, flowengine_bin
):
    """Each meter's step: its records scored against the wire capture at its interface, and every
    packet on the wire either in its records or counted at a stage; what the meters are known to
    do shows (docs/flowmeters.md, "The meters"), whatever a loaded machine makes them lose."""
    assert set(METERS) <= set(meters())
    path = tmp_path / "meters.yaml"
    path.write_text(SCENARIO)
    run = run_scenario(path)
    assert run.status == "completed", run.messages
    steps = {s["name"]: s for s in run.manifest["steps"]}
    assert list(steps) == [f"{m}-run" for m in METERS]
    analysed = {s["name"]: s for s in run.metrics["steps"]}
    for name in METERS:
        step = steps[f"{name}-run"]
        folder = run.run_dir / step["dir"]
        dut = step["dut"]
        assert dut["kind"] == name and dut["meter"] is True and "died" not in dut, dut
        assert step["loss"]["sent"] == step["loss"]["wire"] == WIRE, step["loss"]
        reference = reference_records(folder / "capture.pcap", MeterRules(**dut["rules"]))
        assert reference.num_rows == 3 and sum(reference.column("packets").to_pylist()) == WIRE
        collected = pq.read_table(folder / "meter" / "records.parquet")
        result = score(reference, collected)
        meter = analysed[f"{name}-run"]["meter"]
        totals = json.loads(json.dumps(result.totals))
        assert {k: meter["totals"][k] for k in totals} == totals  # the analysis's score
        assert result.totals["spurious"] == 0, (name, result.totals)
        stages = meter["stages"]
        lost = [stages[s]["packets"] for s in ("capture", "processing", "export")]
        known = [p for p in lost if p is not None]
        assert stages["collected"]["packets"] + sum(known) == WIRE, (name, stages)
        assert all(p >= 0 for p in known), (name, stages)
        counters = json.loads((folder / "meter" / "counters.json").read_text())
        if meters()[name].exports:  # what the meter put on the wire, all collected
            assert counters["collector"]["export"]["records"] == collected.num_rows, counters
        flows = result.flows.to_pylist()
        if name == "argus":  # frame bytes (L2), every packet
            assert [(f["bytes_layer"], f["packet_error"]) for f in flows] == [("L2", 0)] * 3
        if name == "nfpcapd":  # one record per packet to port 53 (less what a loaded machine
            dns = [f for f in flows if f["dport"] == 53]  # made it lose: counted above)
            assert dns[0]["status"] == "split"
            records = [r for r in collected.to_pylist() if r["dport"] == 53]
            assert len(records) > 50 and all(r["packets"] == 1 for r in records)
