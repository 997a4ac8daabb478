"""The architecture's promises, as tests: plugins in one folder, layers kept, pure planners."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ntgcore import runfolder
from ntgcore.errors import PluginError
from ntgcore.generator import Capabilities, get_generator
from ntgcore.registry import GENERATORS, METHODS
from ntgcore.scenario import ScenarioError, load_scenario, parse_scenario
from testbed.runner import plan_steps, run_scenario
from tests.plugins.countgen import PLUGIN as COUNTGEN

REPO = Path(__file__).resolve().parent.parent

OFFLINE = """\
version: 1
name: plug
generator: countgen
flows:
  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 10, packets: 3}
"""
LIVE = """\
version: 1
name: plug
flows:
  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 10, packets: 3}
testbed:
  generators:
    - {name: countgen, frames: 5}
    - {name: tcpreplay, label: replay, frames: 5}
"""


@pytest.fixture
def countgen():
    GENERATORS.register("countgen", COUNTGEN)
    yield COUNTGEN
    GENERATORS.unregister("countgen")


def test_a_generator_registered_from_its_own_folder_runs_offline(countgen, tmp_path):
    loaded = load_scenario_text(OFFLINE, tmp_path)
    result = run_scenario(loaded, tmp_path / "out", analyze=True, show_progress=False)
    assert result.status == "completed"  # (its 3 blank frames fail the flow checks: exit 3)
    assert "countgen" in result.manifest["generators"] and result.manifest["tools"]["countgen"]
    assert result.metrics["packets"] == 3  # the analysis read the plugin's capture


def test_its_options_join_the_scenario_model_and_errors_name_the_owner(countgen):
    with pytest.raises(ScenarioError) as e:
        parse_scenario(LIVE, "s.yaml")
    assert e.value.problems == [
        "s.yaml:8: testbed.generators[1].frames: `frames` is an option of "
        "countgen, not of tcpreplay"
    ]
    ok = parse_scenario(LIVE.replace("label: replay, frames: 5", "label: replay"), "s.yaml")
    assert [g.name for g in ok.testbed.generators] == ["countgen", "tcpreplay"]
    assert ok.testbed.generators[0].frames == 5


def test_an_unknown_generator_lists_the_registered_ones():
    with pytest.raises(ScenarioError) as e:
        parse_scenario(OFFLINE.replace("countgen", "nosuch"), "s.yaml")
    assert "s.yaml:3: generator: unknown generator 'nosuch'" in e.value.problems[0]
    with pytest.raises(
        PluginError, match="available: flowengine, ostinato, probe, scapy, tcpreplay"
    ):
        get_generator("nosuch")


def test_once_unregistered_the_generator_is_gone_again(countgen):
    GENERATORS.unregister("countgen")
    with pytest.raises(ScenarioError):
        parse_scenario(OFFLINE, "s.yaml")
    GENERATORS.register("countgen", COUNTGEN)


def test_methods_are_registered_and_plan_without_root():
    assert METHODS.names() == ["comparison", "failover", "loss-sweep", "multiply", "run"]
    comparison = plan_steps(load_scenario(REPO / "scenarios/seed001-comparison.yaml").scenario)
    assert [s.kind for s in comparison].count("topspeed") == 4
    assert all(s.kind == "load" for s in comparison[4:]) and len(comparison) == 4 + 4 * 3
    five = plan_steps(load_scenario(REPO / "scenarios/seed001-comparison-trex.yaml").scenario)
    assert [s.params["generator"] for s in five[:5]] == [
        "native",
        "tcpreplay",
        "ostinato",
        "scapy",
        "trex",
    ]
    assert len(five) == 5 + 5 * 3
    sweep = plan_steps(load_scenario(REPO / "scenarios/seed002-loss-sweep.yaml").scenario)
    assert [s.name for s in sweep][:2] == ["rate-1000pps", "rate-5000pps"]
    assert sweep[-1].kind == "hosts" and sweep[-1].params["hosts"] == len(sweep[-1].scenario.flows)
    failover = plan_steps(load_scenario(REPO / "scenarios/seed002-failover.yaml").scenario)
    assert len(failover) == 2 * 3 * 3 and {s.kind for s in failover} == {"failover"}


@pytest.mark.skipif(
    not shutil.which("lint-imports", path=str(Path(sys.executable).parent)),
    reason="import-linter is not installed (pip install '.[test]')",
)
def test_the_layer_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    p = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "BROKEN" not in p.stdout and " 0 broken" in p.stdout


def load_scenario_text(text: str, folder: Path):
    path = folder / "s.yaml"
    path.write_text(text)
    return load_scenario(path)


def test_version_is_known():
    assert runfolder.testbed_version()


def test_a_generator_registered_after_the_first_parse_joins_the_model():
    parse_scenario(
        LIVE.replace("{name: countgen, frames: 5}", "{name: flowengine}").replace(
            "label: replay, frames: 5", "label: replay"
        ),
        "s.yaml",
    )
    GENERATORS.register("countgen", COUNTGEN)
    try:
        scenario = parse_scenario(
            LIVE.replace("label: replay, frames: 5", "label: replay"), "s.yaml"
        )
        assert scenario.testbed.generators[0].frames == 5
    finally:
        GENERATORS.unregister("countgen")


def test_a_generator_that_cannot_send_live_is_refused_in_a_live_scenario():
    offline_only = dataclasses.replace(
        COUNTGEN, capabilities=Capabilities(offline=True, live=False)
    )
    GENERATORS.register("countgen", offline_only)
    try:
        with pytest.raises(ScenarioError) as e:
            parse_scenario(LIVE.replace("label: replay, frames: 5", "label: replay"), "s.yaml")
        assert "generator `countgen` cannot send live" in e.value.problems[0]
    finally:
        GENERATORS.unregister("countgen")
