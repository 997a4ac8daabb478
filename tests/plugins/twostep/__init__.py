"""A test-only method: the whole of what adding a method takes (docs/architecture.md, "How to add
a method").

`twostep` sends the scenario twice, in two steps named by its own section `testbed.twostep`
(`names`); the first is a warm-up that runs only the monitor (no capture, no DUT: the method plans
the parts of its steps itself), the second every part the scenario asks for. It is one folder:
its options model, its step parameters, its planner and its METHOD, registered with one call (or
one entry point)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from ntgcore.scenario import Scenario
from testbed.methods import UNSET, Method, Step, StepParams, planned_parts


class TwoStepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    names: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,15}$")]] = Field(
        ["first", "second"],
        min_length=2,
        max_length=2,
        description="twostep: the names of its two steps (their folders).",
    )


@dataclass
class TwoStepParams(StepParams):
    index: int = UNSET  # 1 or 2
    warmup: bool = UNSET


def plan(scenario: Scenario) -> list[Step]:
    tb = scenario.testbed
    assert tb is not None
    spec = getattr(tb, "twostep", None) or TwoStepSpec()
    gens = scenario.live_generators()
    return [
        Step(
            spec.names[0], scenario, gens, "run", TwoStepParams(index=1, warmup=True), ["monitor"]
        ),
        Step(
            spec.names[1],
            scenario,
            gens,
            "run",
            TwoStepParams(index=2, warmup=False),
            planned_parts(scenario, METHOD),
        ),
    ]


METHOD = Method(
    "twostep",
    plan,
    summary="the scenario twice: a warm-up step, then a measured one",
    options={"twostep": TwoStepSpec},
)
