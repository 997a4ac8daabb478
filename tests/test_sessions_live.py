"""Two-way sessions sent live by the engine through the namespace testbed (issue 28): the
example scenario's sessions on a veth, every frame on the wire and at the DUT, and the captured
sessions equal to the engine's flow log (both directions of every instance)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.stream import flow_table_of

REPO = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.ntg_live, pytest.mark.usefixtures("root")]


def test_the_example_sessions_go_live_and_arrive_whole(tmp_path, run_scenario, flowengine_bin):
    text = (REPO / "scenarios" / "learned-web.yaml").read_text()
    text = text.replace("name: learned-web", "name: learned-web-live")
    text += 'testbed:\n  dut: {kind: tcpdump, write: true}\n  capture: {at: "tap:tap0"}\n'
    path = tmp_path / "learned-web-live.yaml"
    path.write_text(text)
    run = run_scenario(path)
    assert run.ok, run.messages
    loss = run.manifest["steps"][0]["loss"]
    assert loss["sent"] == loss["wire"] == loss["dut"] == loss["captured"] > 5000
    assert all(c["ok"] for c in run.metrics.checks)
    # every session instance of the flow log is in the DUT's capture, both directions whole
    (log,) = (run.run_dir / "gen-flowengine").rglob("engine-flows.csv")
    header, *lines = log.read_text().splitlines()
    rows = [dict(zip(header.split(","), r.split(","))) for r in lines]
    assert len(rows) == 500
    directions = sum(
        (int(r["packets"]) > int(r["s_packets"])) + (int(r["s_packets"]) > 0) for r in rows
    )
    flows = flow_table_of([run.run_dir / "dut.pcap"])
    assert int(flows["packets"].sum()) == loss["sent"] == sum(int(r["packets"]) for r in rows)
    assert len(flows) == directions > 500  # each session's directions, no two on one 5-tuple
