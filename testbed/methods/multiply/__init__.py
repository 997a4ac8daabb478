"""Method `multiply` (seed 003, Fig. 6; docs/multiplier.md): real HTTP sessions through the inline
multiplier (testbed.parts.multiplier), one step per T of `inline.copies`. The steps run no
generator: the part's client makes the traffic, the step waits until it has fetched every page.
analysis.py measures ingress, egress, loss and the original's added latency from the captures at
the multiplier's interfaces (`capture.at` its ingress, `capture.also_at` its egress and DUT side)."""

from __future__ import annotations

from dataclasses import dataclass

from ntgcore.scenario import Scenario, TestbedSpec

from .. import UNSET, Method, Step, StepParams
from . import analysis

# the step's deadline: a fixed allowance plus a slow rate for the pages (a veth is far faster)
STEP_BASE_S = 30.0
SLOW_BYTES_PER_S = 2e6
SLOW_FETCHES_PER_S = 5.0


@dataclass
class InlineParams(StepParams):
    copies: int = UNSET  # T of the step
    both: bool = UNSET
    order: str = UNSET
    at: str = UNSET  # the multiplier's interfaces (the captures' places)
    out: str = UNSET
    dut: str = UNSET


def rules(tb: TestbedSpec) -> str | None:
    if (tb.method == "multiply") != (tb.inline is not None):
        return (
            "method `multiply` needs an `inline` section, and `inline` belongs to method `multiply`"
        )
    if tb.inline is not None and (
        tb.capture is None
        or tb.capture.at != tb.inline.at
        or not {tb.inline.out, tb.inline.dut} <= set(tb.capture.also_at)
    ):
        return (
            f"method `multiply` measures from the captures at the multiplier: set "
            f'`capture: {{at: "{tb.inline.at}", also_at: ["{tb.inline.out}", '
            f'"{tb.inline.dut}"]}}`'
        )
    return None


def plan(scenario: Scenario) -> list[Step]:
    tb = scenario.testbed
    assert tb is not None and tb.inline is not None
    spec = tb.inline
    fetches = spec.rounds * len(spec.pages)
    deadline = (
        STEP_BASE_S
        + fetches / SLOW_FETCHES_PER_S / spec.parallel
        + spec.rounds * sum(spec.pages) / SLOW_BYTES_PER_S
    )
    return [
        Step(
            f"T{t}",
            scenario,
            [],
            "multiply",
            InlineParams(
                copies=t,
                both=spec.both,
                order=spec.order,
                deadline_s=deadline,
                at=spec.at,
                out=spec.out,
                dut=spec.dut,
            ),
        )
        for t in spec.copies
    ]


METHOD = Method(
    "multiply",
    plan,
    analysis,
    summary="seed 003: real sessions through the inline multiplier, T copies to the DUT side",
    sections=("inline",),
    rules=rules,
    parts=("multiplier",),
    sends=False,
)
