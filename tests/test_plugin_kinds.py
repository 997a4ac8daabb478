"""A DUT kind and a method are plugins like generators: each test-only one is its own folder
(tests/plugins/countdut, tests/plugins/twostep) plus one registration, and a scenario can use it
at once: its options join the scenario model (JSON Schema, `file:line` errors) and a live run
starts its part / plans its steps through the same protocol as the built-in ones."""

from __future__ import annotations

import textwrap
from pathlib import Path

import jsonschema
import pytest

from ntgcore.registry import DUT_KINDS, METHODS
from ntgcore.scenario import ScenarioError, json_schema, load_scenario, parse_scenario
from testbed.runner import plan_steps, required_tools
from tests.plugins.countdut import DUT_KIND as COUNTDUT
from tests.plugins.twostep import METHOD as TWOSTEP

REPO = Path(__file__).resolve().parent.parent
FLOW = (
    "{protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000, dst_port: 9, "
    "rate: 2000, packets: 400, payload: {size: 18}}"
)


def scenario_text(testbed: str) -> str:
    return (
        f"version: 1\nname: plugkinds\nflows:\n  - {FLOW}\ntestbed:\n"
        + textwrap.indent(textwrap.dedent(testbed).strip(), "  ")
        + "\n"
    )


@pytest.fixture
def countdut():
    DUT_KINDS.register("countdut", COUNTDUT)
    yield COUNTDUT
    DUT_KINDS.unregister("countdut")


@pytest.fixture
def twostep():
    METHODS.register("twostep", TWOSTEP)
    yield TWOSTEP
    METHODS.unregister("twostep")


def test_a_dut_kind_registered_from_its_folder_joins_the_schema_and_the_errors(countdut):
    schema = json_schema()
    assert "CountDutSpec" in schema["$defs"]
    assert schema["$defs"]["CountDutSpec"]["properties"]["counter"]["enum"] == [
        "rx_packets",
        "rx_bytes",
    ]
    doc = {
        "version": 1,
        "name": "x",
        "flows": [{"src": "198.18.0.1", "dst": "198.18.0.2", "protocol": "icmp", "packets": 1}],
        "testbed": {"dut": {"kind": "countdut", "counter": "rx_bytes"}},
    }
    jsonschema.validate(doc, schema)
    ok = parse_scenario(scenario_text('dut: {kind: countdut, counter: rx_bytes, at: "dut:dut0"}'))
    assert type(ok.testbed.dut).__name__ == "CountDutSpec" and ok.testbed.dut.counter == "rx_bytes"
    assert "cat" in [t.command for t in required_tools(ok)]
    with pytest.raises(ScenarioError) as e:
        parse_scenario(scenario_text("dut:\n  kind: countdut\n  counter: tx_bogus"), "s.yaml")
    assert e.value.problems == [
        "s.yaml:8: testbed.dut.counter: Input should be 'rx_packets' or 'rx_bytes' (got 'tx_bogus')"
    ]
    with pytest.raises(ScenarioError) as e:
        parse_scenario(scenario_text("dut:\n  kind: tcpdump\n  counter: rx_bytes"), "s.yaml")
    assert e.value.problems == [
        "s.yaml:8: testbed.dut.counter: `counter` is an option of countdut, not of tcpdump"
    ]
    with pytest.raises(ScenarioError) as e:
        parse_scenario(scenario_text("dut: {kind: countdu}"), "s.yaml")
    assert e.value.problems == [
        "s.yaml:6: testbed.dut.kind: Input should be 'none', 'tcpdump', 'suricata', "
        "'softflowd', 'pmacct', 'nfpcapd', 'argus' or 'countdut' (got 'countdu')"
    ]


def test_an_unregistered_dut_kind_is_gone_from_the_model():
    with pytest.raises(ScenarioError) as e:
        parse_scenario(scenario_text("dut: {kind: countdut}"), "s.yaml")
    assert e.value.problems == [
        "s.yaml:6: testbed.dut.kind: Input should be 'none', 'tcpdump', 'suricata', "
        "'softflowd', 'pmacct', 'nfpcapd' or 'argus' (got 'countdut')"
    ]
    assert "CountDutSpec" not in json_schema()["$defs"]


def test_a_method_registered_from_its_folder_joins_the_schema_and_plans_its_steps(twostep):
    schema = json_schema()
    tb = schema["$defs"]["TestbedSpec"]["properties"]
    assert "twostep" in tb["method"]["enum"] and "twostep" in tb
    assert "TwoStepSpec" in schema["$defs"]
    loaded = parse_scenario(scenario_text("method: twostep\ntwostep: {names: [warm, measure]}"))
    steps = plan_steps(loaded)
    assert [(s.name, s.params.as_dict(), s.parts) for s in steps] == [
        ("warm", {"index": 1, "warmup": True}, ["monitor"]),
        ("measure", {"index": 2, "warmup": False}, ["capture", "monitor"]),
    ]
    with pytest.raises(ScenarioError) as e:
        parse_scenario(scenario_text("method: twostep\ntwostep:\n  names: [Warm, m]"), "s.yaml")
    assert e.value.problems == [
        "s.yaml:8: testbed.twostep.names[0]: String should match pattern "
        "'^[a-z][a-z0-9-]{0,15}$' (got 'Warm')"
    ]
    with pytest.raises(ScenarioError) as e:
        parse_scenario(scenario_text("twostep: {names: [a, b]}"), "s.yaml")
    assert e.value.problems == ["s.yaml:6: testbed: `twostep` belongs to method `twostep`"]


def test_an_unregistered_method_and_its_section_are_gone_from_the_model():
    with pytest.raises(ScenarioError) as e:
        parse_scenario(scenario_text("twostep: {names: [a, b]}"), "s.yaml")
    assert e.value.problems[0].startswith("s.yaml:6: testbed.twostep: unknown key `twostep`")
    assert "twostep" not in json_schema()["$defs"]["TestbedSpec"]["properties"]


def test_the_built_in_methods_plan_their_parts_in_the_order_they_start():
    parts = {
        f: [s.parts for s in plan_steps(load_scenario(REPO / "scenarios" / f).scenario)]
        for f in ("seed002-failover.yaml", "seed002-loss-sweep.yaml", "seed003-inline.yaml")
    }
    assert parts["seed002-failover.yaml"][0] == ["capture", "vrrp", "monitor", "faults"]
    assert {tuple(p) for p in parts["seed002-loss-sweep.yaml"]} == {("dut", "monitor")}
    assert parts["seed003-inline.yaml"][0] == ["capture", "multiplier", "monitor"]
    (step,) = plan_steps(
        parse_scenario(scenario_text("faults: [{kind: kill, process: x, start: 1s}]"))
    )
    assert step.parts == ["capture", "monitor", "faults"]


@pytest.mark.usefixtures("root")
def test_the_test_dut_kind_counts_live_what_the_wire_delivered(
    countdut, tmp_path, run_scenario, flowengine_bin
):
    path = tmp_path / "countdut.yaml"
    path.write_text(scenario_text('dut: {kind: countdut, at: "dut:dut0"}'))
    run = run_scenario(path, analyze=False)
    assert run.status == "completed", run.messages
    step = run.manifest["steps"][0]
    assert step["dut"] == {"kind": "countdut", "counter": "rx_packets", "received": 400}
    assert step["loss"]["sent"] == step["loss"]["wire"] == step["loss"]["dut"] == 400
    assert [c["name"] for c in run.manifest["commands"]].count("countdut") == 2


@pytest.mark.usefixtures("root")
def test_the_test_method_runs_its_two_steps_live_with_the_parts_it_planned(
    twostep, tmp_path, run_scenario, flowengine_bin
):
    path = tmp_path / "twostep.yaml"
    path.write_text(
        scenario_text(
            'method: twostep\ntwostep: {names: [warm, measure]}\ndut: {kind: tcpdump, at: "dut:dut0"}'
        )
    )
    run = run_scenario(path, analyze=False)
    assert run.status == "completed", run.messages
    assert run.manifest["method"] == "twostep"
    warm, measure = run.manifest["steps"]
    assert (warm["name"], warm["params"], measure["params"]) == (
        "warm",
        {"index": 1, "warmup": True},
        {"index": 2, "warmup": False},
    )
    assert "capture" not in warm and "dut" not in warm and "monitor" in warm
    assert measure["capture"]["captured"] == measure["dut"]["captured"] == 400
    assert (run.run_dir / "measure" / "capture.pcap").is_file()
    assert not (run.run_dir / "warm" / "capture.pcap").exists()
    assert warm["generators"]["flowengine"]["packets_sent"] == 400


def test_several_duts_run_every_step_once_each_and_are_checked_one_by_one():
    """`testbed.duts`: the method's steps once per DUT, named after it; each DUT checked by the
    method's rules as if it were `dut`; `dut` and `duts` together, or two DUTs of one name, refused."""
    sweep = "method: loss-sweep\nsweep: {packet_rates: [1000, 2000], step: 1s}\n"
    loaded = parse_scenario(
        scenario_text(
            sweep + "duts: [{kind: tcpdump}, {kind: tcpdump, name: big, buffer_kib: 8192}]"
        )
    )
    steps = plan_steps(loaded)
    assert [(s.name, s.scenario.testbed.dut.label) for s in steps] == [
        ("tcpdump-rate-1000pps", "tcpdump"),
        ("tcpdump-rate-2000pps", "tcpdump"),
        ("big-rate-1000pps", "big"),
        ("big-rate-2000pps", "big"),
    ]
    assert [s.scenario.testbed.dut.buffer_kib for s in steps] == [2048, 2048, 8192, 8192]
    assert all(
        s.scenario.testbed.duts == [] and s.parts == ["capture", "dut", "monitor"] for s in steps
    )
    bad = {
        "dut: {kind: tcpdump}\nduts: [{kind: tcpdump}]": "give `dut` or `duts`, not both",
        "duts: [{kind: tcpdump}, {kind: tcpdump}]": "two DUTs named tcpdump in `duts`",
        "duts: [{kind: tcpdump}, {kind: none}]": "method `loss-sweep` needs a device under test",
        "duts: [{kind: tcpdump, buffer_kib: 0}]": "s.yaml:8: testbed.duts[0].buffer_kib: Input should be greater than or equal to 1",
    }
    for text, words in bad.items():
        with pytest.raises(ScenarioError) as e:
            parse_scenario(scenario_text(sweep + text), "s.yaml")
        assert words in e.value.problems[0], e.value.problems
