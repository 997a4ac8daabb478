"""Method `run`: the generators send the scenario together, in one step; with `testbed.spread`,
one generator per host, each sending its share of the flows, all started at one agreed time."""

from __future__ import annotations

from dataclasses import dataclass

from ntgcore.scenario import Scenario, TestbedSpec

from .. import NS, UNSET, Method, Step, StepParams, spread_shares
from . import analysis


@dataclass
class RunParams(StepParams):
    spread: dict = UNSET  # several hosts (testbed.spread): the split, as the manifest states it


def rules(tb: TestbedSpec) -> str | None:
    if tb.spread is not None and tb.method != "run":
        return "`spread` (several generator hosts) belongs to method `run`"
    if tb.spread is not None and len(tb.generators) > 1:
        return "with `spread`, `generators` holds one entry: the generator every host runs"
    return None


def plan(scenario: Scenario) -> list[Step]:
    tb = scenario.testbed
    if tb is None or tb.spread is None:
        return [Step("run", scenario, scenario.live_generators())]
    shares, info = spread_shares(scenario)
    also = [h.capture for h in tb.spread.hosts if h.capture]
    if also and tb.capture is not None:  # every host's own capture, beside the step's
        also_at = [p for p in dict.fromkeys([*tb.capture.also_at, *also]) if p != tb.capture.at]
        capture = tb.capture.model_copy(update={"also_at": also_at})
        scenario = scenario.model_copy(
            update={"testbed": tb.model_copy(update={"capture": capture})}
        )
    params = RunParams(start_lead_s=tb.spread.start_lead / NS, spread=info)
    return [Step("run", scenario, scenario.live_generators(), params=params, shares=shares)]


METHOD = Method(
    "run",
    plan,
    analysis,
    summary="the generators send the scenario together (on one or several hosts)",
    sections=("spread",),
    rules=rules,
)
