"""Method `comparison` (seed 001): each generator in turn at top speed, then at fixed loads."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from ntgcore.scenario import Scenario, TestbedSpec

from .. import UNSET, Method, Step, StepParams, derived_flow, template_flow, with_changes
from . import analysis


@dataclass
class ComparisonParams(StepParams):
    generator: str = UNSET  # the generator's title
    plugin: str = UNSET  # its plugin's name
    offered_kBps: int = UNSET  # a load step's offered load


def rules(tb: TestbedSpec) -> str | None:
    if tb.load_steps is not None and tb.method != "comparison":
        return "`load_steps` belongs to method `comparison`"
    if tb.method == "comparison" and tb.duration is None:
        return "method `comparison` needs `duration` (seed 001: 60s)"
    if tb.method == "comparison" and tb.capture is None:
        return "method `comparison` measures the rates in the capture: do not set `capture: null`"
    return None


def plan(scenario: Scenario) -> list[Step]:
    tb = scenario.testbed
    assert tb is not None
    gens = scenario.live_generators()
    steps = []
    for g in gens:
        fast = g.model_copy(update={"pace": "topspeed"})
        steps.append(
            Step(
                g.title,
                scenario,
                [fast],
                "topspeed",
                ComparisonParams(generator=g.title, plugin=g.name),
            )
        )
    if tb.load_steps:
        ls = tb.load_steps
        template = template_flow(scenario)
        frame = template.header_bytes + template.payload.sizes[0]
        for g in gens:
            slow = g.model_copy(update={"pace": "realtime"})
            for k in range(1, ls.count + 1):
                load = k * ls.step_kbps * 1000  # bytes per second
                rate = Decimal(load) / Decimal(frame)
                flow = derived_flow(template, start=0, rate=rate, duration=ls.duration)
                steps.append(
                    Step(
                        f"{g.title}-load-{k * ls.step_kbps}kBps",
                        with_changes(scenario, [flow]),
                        [slow],
                        "load",
                        ComparisonParams(
                            generator=g.title, plugin=g.name, offered_kBps=k * ls.step_kbps
                        ),
                    )
                )
    return steps


METHOD = Method(
    "comparison",
    plan,
    analysis,
    summary="seed 001: each generator in turn at top speed, then at fixed loads",
    sections=("load_steps",),
    rules=rules,
    shortened=lambda tb, ns: (
        {"load_steps": tb.load_steps.model_copy(update={"duration": ns})} if tb.load_steps else {}
    ),
)
