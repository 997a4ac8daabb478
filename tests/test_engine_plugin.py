"""The flow engine as an ordinary generator plugin (issue 25, item 2): its scenario section, its
memory model as its own `fits` check, the one lookup of native programs, replay's dependency
declared in the import contracts."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from pydantic import Field

from generators.flowengine.options import FlowEngineOptions
from ntgcore.errors import GeneratorError
from ntgcore.generator import fit_problem, state_bytes
from ntgcore.native_tools import executable
from ntgcore.registry import GENERATORS
from ntgcore.scenario import Scenario, ScenarioError, ScenarioSection, json_schema, parse_scenario
from tests.plugins.countgen import PLUGIN as COUNTGEN

REPO = Path(__file__).resolve().parent.parent

FLOWS = """\
version: 1
name: huge
flows:
  - {protocol: udp, src: 198.18.0.0/15, dst: 198.19.0.1, dst_port: 9, rate: 1, packets: 10,
     repeat: {count: 100000000000, period: 0s}}
"""
LIVE = """\
testbed:
  generators:
    - {GEN}
"""


def huge(generator: str | None = None, live: str | None = None) -> str:
    """A scenario with more flows alive at once than any machine's engine memory holds."""
    text = (
        FLOWS
        if generator is None
        else FLOWS.replace("flows:\n", f"generator: {generator}\nflows:\n")
    )
    return text + (LIVE.replace("{GEN}", live) if live else "")


class CountOptions(ScenarioSection):
    """countgen's own top-level section (test only)."""

    burst: int = Field(1, ge=1, le=8, description="countgen: frames per write")


def test_a_generator_contributes_its_own_top_level_section(tmp_path):
    text = "version: 1\nname: s\ncountgen:\n  burst: 9\nflows:\n  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 1, packets: 1}\n"
    with pytest.raises(ScenarioError) as e:
        parse_scenario(text, "s.yaml")  # no generator declares `countgen:` yet
    assert e.value.problems[0].startswith("s.yaml:3: countgen")
    GENERATORS.register(
        "countgen", dataclasses.replace(COUNTGEN, section=("countgen", CountOptions))
    )
    try:
        with pytest.raises(ScenarioError) as e:
            parse_scenario(text, "s.yaml")
        assert e.value.problems == [
            "s.yaml:4: countgen.burst: Input should be less than or equal to 8 (got 9)"
        ]
        scenario = parse_scenario(text.replace("burst: 9", "burst: 2"), "s.yaml")
        assert scenario.countgen.burst == 2
        schema = json_schema()
        assert list(schema["properties"]).index("countgen") < list(schema["properties"]).index(
            "flows"
        )
        assert (
            parse_scenario(text.replace("countgen:\n  burst: 9\n", ""), "s.yaml").countgen.burst
            == 1
        )
    finally:
        GENERATORS.unregister("countgen")
    with pytest.raises(ScenarioError):
        parse_scenario(text.replace("burst: 9", "burst: 2"), "s.yaml")  # gone with its generator


def test_the_engine_section_is_the_engines_own():
    scenario = parse_scenario(
        FLOWS.replace("flows:\n", "flowengine: {planner: stochastic, threads: 2}\nflows:\n"),
        "s.yaml",
    )
    assert "flowengine" not in Scenario.__annotations__  # the core names no generator's section
    assert isinstance(scenario.flowengine, FlowEngineOptions)
    assert scenario.flowengine.threads == 2
    with pytest.raises(ScenarioError) as e:
        parse_scenario(FLOWS.replace("flows:\n", "flowengine: {threads: 0}\nflows:\n"), "s.yaml")
    assert e.value.problems == [
        "s.yaml:3: flowengine.threads: Input should be greater than or equal to 1 (got 0)"
    ]


def test_the_engines_memory_check_applies_to_the_runs_that_use_it():
    engine = parse_scenario(huge(), "s.yaml")
    assert "100,000,000,000 flows are alive at once" in (fit_problem(engine) or "")
    assert state_bytes(engine) == 64 * 100_000_000_000
    trex = parse_scenario(huge("trex"), "s.yaml")  # TRex and Ostinato hold no engine state
    ostinato = parse_scenario(huge(live="{name: ostinato}"), "s.yaml")
    for scenario in (trex, ostinato):
        assert fit_problem(scenario) is None and state_bytes(scenario) is None
    replayed = parse_scenario(huge(live="{name: tcpreplay}"), "s.yaml")  # compiled by the engine
    assert "flows are alive at once" in (fit_problem(replayed) or "")
    given = parse_scenario(huge(live="{name: tcpreplay, pcap: x.pcap}"), "s.yaml")
    assert fit_problem(given) is None
    both = parse_scenario(huge(live="{name: ostinato}\n    - {name: flowengine}"), "s.yaml")
    assert "flows are alive at once" in (fit_problem(both) or "")


def test_validate_warns_only_for_a_generator_that_does_not_fit(tmp_path):
    path = tmp_path / "trex.yaml"
    path.write_text(huge("trex"))
    r = subprocess.run(
        [sys.executable, "-m", "testbed", "validate", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        "at most 100,000,000,000 flows at once\n" in r.stdout
    )  # no engine state: not the engine's
    assert "warning" not in r.stderr


def test_native_programs_are_found_through_one_lookup(tmp_path, monkeypatch):
    monkeypatch.setenv("NTG_FLOWENGINE", str(tmp_path / "nosuch"))
    with pytest.raises(GeneratorError, match=r"NTG_FLOWENGINE=.*nosuch is not a file"):
        executable("flowengine")
    monkeypatch.delenv("NTG_FLOWENGINE")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        GeneratorError, match="the ntg-nosuch executable was not found.*NTG_NTG_NOSUCH"
    ):
        executable("ntg-nosuch")
    for module in ("matchsweep.py", "multiply.py", "parts/multiplier.py"):
        text = (REPO / "testbed" / module).read_text()
        assert 'GENERATORS.get("flowengine")' not in text and "adapter.executable" not in text


def test_every_generator_is_covered_by_the_import_contracts():
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
    covered = {m for c in contracts for m in c.get("modules", [])}
    covered |= {
        f"{container}.{layer}"
        for c in contracts
        for container in c.get("containers", [])
        for layer in c.get("layers", [])
    }
    plugins = {
        f"generators.{p.name}"
        for p in (REPO / "generators").iterdir()
        if (p / "__init__.py").is_file()
    }
    assert plugins <= covered, plugins - covered


def test_spread_writes_sessions_only_for_a_generator_that_has_them(tmp_path, hashlib_path):
    text = (REPO / "scenarios/two-hosts.yaml").read_text()
    assert "generators: [{name: flowengine}]" in text
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("generators: [{name: flowengine}]", "generators: [{name: scapy}]"))
    r = subprocess.run(
        [sys.executable, "-m", "testbed", "spread", str(path), "--out", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "`scapy` has no session file for the hosts to run" in r.stderr
    assert not (tmp_path / "out").exists()


def test_a_trex_run_is_refused_by_trex_not_by_the_engines_memory(tmp_path):
    path = tmp_path / "trex.yaml"
    path.write_text(huge("trex"))
    r = subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(path), "--out", str(tmp_path / "runs")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "engine memory" not in r.stdout + r.stderr  # was: exit 2, the engine's memory model
    assert r.returncode == 1, r.stdout + r.stderr  # TRex's own limit, at prepare
    assert "at most 1000 of them, and it has 100000000000" in r.stdout + r.stderr
