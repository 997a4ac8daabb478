"""pytest plugin of ntg-testbed (registered through the `pytest11` entry point): a reproducible
benchmark written as a test.

    def test_tcpdump_keeps_up_at_50kpps(run_scenario):
        run = run_scenario("scenarios/seed002-loss-sweep.yaml", duration="2s")
        assert run.ok, run.messages
        assert run.metrics.loss_rate < 0.01

    def test_my_dut(topology):
        topo = topology("default")          # up now, always down after the test
        ...  topo.exec_argv("dut", "my-ids", "-i", "dut0") ...

`run_scenario(path, seed=None, duration=None, analyze=True)` runs a scenario (offline or live)
into the session's results folder (`--ntg-results DIR`, default a temporary folder) and returns
the run: `run_dir`, `status`, `exit_code`, `ok`, `manifest`, `messages` and `metrics`, whose keys
read as attributes (`run.metrics.loss_rate`, `run.metrics.steps[0].traffic.mean_pps`). Live
scenarios need root; without it the test is skipped with the reason.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import pytest

from ntgcore.errors import NtgError
from ntgcore.scenario import ScenarioError, load_scenario
from ntgcore.units import parse_duration_ns

from .endpoints.netns.topology import load_topology
from .runner import run_scenario as run


class Metrics(dict):
    """A metrics dict whose keys also read as attributes, nested dicts and lists included."""

    def __getattr__(self, key: str) -> Any:
        try:
            return _wrap(self[key])
        except KeyError:
            raise AttributeError(
                f"no metric {key!r}; there are: {', '.join(sorted(self))}"
            ) from None


def _wrap(value: Any) -> Any:
    if isinstance(value, dict) and not isinstance(value, Metrics):
        return Metrics(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


class ScenarioRun:
    def __init__(self, result) -> None:
        self.run_dir: Path = result.run_dir
        self.status: str = result.status
        self.exit_code: int = result.exit_code
        self.manifest: dict = result.manifest
        self.messages: list[str] = result.messages
        self.metrics = Metrics(result.metrics or {})

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def __repr__(self) -> str:
        return f"<ScenarioRun {self.run_dir.name} {self.status} exit {self.exit_code}>"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ntg-testbed")
    group.addoption(
        "--ntg-results",
        metavar="DIR",
        default=None,
        help="ntg-testbed: keep the run folders of run_scenario here",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ntg_live: needs root for network namespaces (skipped without)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="live testbed: network namespaces need root")
    for item in items:
        if "ntg_live" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ntg_results(request: pytest.FixtureRequest, tmp_path_factory) -> Path:
    """Where run_scenario writes run folders."""
    chosen = request.config.getoption("--ntg-results")
    return Path(chosen) if chosen else tmp_path_factory.mktemp("ntg-results")


@pytest.fixture
def run_scenario(ntg_results: Path):
    """Run a scenario file; returns a ScenarioRun (see the module docstring)."""

    def go(
        path: str | Path,
        seed: int | None = None,
        duration: str | int | None = None,
        analyze: bool = True,
    ) -> ScenarioRun:
        try:
            loaded = load_scenario(path)
        except ScenarioError as exc:
            pytest.fail("scenario does not load:\n" + "\n".join(exc.problems), pytrace=False)
        if loaded.scenario.testbed is not None and os.geteuid() != 0:
            pytest.skip("live scenario: network namespaces need root")
        ns = parse_duration_ns(duration) if duration is not None else None
        try:
            result = run(
                loaded, ntg_results, seed=seed, analyze=analyze, show_progress=False, duration_ns=ns
            )
        except NtgError as exc:
            pytest.fail(f"run cannot start: {exc}", pytrace=False)
        return ScenarioRun(result)

    return go


@pytest.fixture
def topology():
    """`topology(ref)` brings a topology up under a random name; all are removed after the test."""
    if os.geteuid() != 0:
        pytest.skip("topology: network namespaces need root")
    made = []

    def up(ref: str | Path | dict = "default"):
        topo = load_topology(ref).renamed(f"ntgt{secrets.token_hex(3)}")
        made.append(topo)
        topo.apply()
        return topo

    yield up
    failures = []
    for topo in reversed(made):  # every one is removed, even if one removal fails
        try:
            topo.remove()
        except Exception as exc:
            failures.append(f"{topo.name}: {exc}")
    if failures:
        pytest.fail("topology teardown failed: " + "; ".join(failures), pytrace=False)
