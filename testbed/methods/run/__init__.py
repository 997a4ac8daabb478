"""Method `run`: the generators send the scenario together, in one step."""

from __future__ import annotations

from ntgcore.scenario import Scenario

from .. import Method, Step


def plan(scenario: Scenario) -> list[Step]:
    return [Step("run", scenario, scenario.live_generators())]


METHOD = Method("run", plan, summary="the generators send the scenario together")
