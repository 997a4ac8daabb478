"""What a run of a scenario must produce, computed from the scenario alone: packets, flows, bytes,
first and last due time (`expected`, the manifest's `expected` and the analysis' checks), and the
flow instances alive at once (`peak_concurrent_flows`, what a generator's memory model weighs)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .scenario import Scenario, scenario_sections


def peak_concurrent_flows(scenario: Scenario) -> int:
    """An upper bound of the flow instances alive at once (each line's own peak, summed)."""
    total = 0
    for f in scenario.flows:
        reps = f.repetitions
        life = (f.packet_count - 1) * f.period_ns  # first to last packet of one instance
        if reps == 1:
            peak = 1
        elif f.repeat_period_ns == 0:
            peak = reps
        else:
            peak = min(reps, life // f.repeat_period_ns + 1)
        total += peak
    return total


@dataclass(frozen=True)
class Expected:
    """What a complete run of the scenario must contain, computed from the scenario alone."""

    packets: int
    flows: int
    bytes: int | None  # None when a payload size is random
    first_ns: int | None  # None when the packets do not leave at their due times (a section's
    last_ns: int | None  # ScenarioSection.keeps_due_times: the engine's stochastic planner)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def expected(scenario: Scenario) -> Expected:
    packets = flows = 0
    total_bytes: int | None = 0
    first = last = None
    for f in scenario.flows:
        n, reps = f.packet_count, f.repetitions
        packets += n * reps
        flows += reps
        lo, hi = f.payload.sizes
        if total_bytes is not None and lo == hi:
            total_bytes += n * reps * (f.header_bytes + lo)
        else:
            total_bytes = None
        end = f.last_due_ns
        first = f.start if first is None else min(first, f.start)
        last = end if last is None else max(last, end)
    if not all(s.keeps_due_times() for s in scenario_sections(scenario)):
        return Expected(packets, flows, total_bytes, None, None)
    return Expected(packets, flows, total_bytes, first or 0, last or 0)


__all__ = ["Expected", "expected", "peak_concurrent_flows"]
