"""What a run of a scenario must produce, computed from the scenario alone: packets, flows, bytes,
first and last due time (`expected`, the manifest's `expected` and the analysis' checks), and the
flow instances alive at once (`peak_concurrent_flows`, what a generator's memory model weighs).

Two-way sessions (`sessions:`) give their instance counts exactly (each session line's `reps`),
their first due time (instance 0 of a line starts at its `start`), but not their packets, bytes
or last time: those follow the drawn sizes, and the exact numbers are the engine's (its summary
and flow log, one row per session instance with both directions' packets and bytes); they are
not computed again here."""

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
    for s in scenario.sessions:  # bounded by their instances (each line's reps)
        total += s.instances
    return total


@dataclass(frozen=True)
class Expected:
    """What a complete run of the scenario must contain, computed from the scenario alone."""

    packets: int | None  # None with sessions (their packets follow the drawn sizes)
    flows: int  # flow instances plus session instances (the engine's flow log rows)
    bytes: int | None  # None when a payload size is random, or with sessions
    first_ns: int | None  # None when the packets do not leave at their due times (a section's
    last_ns: int | None  # ScenarioSection.keeps_due_times: the engine's stochastic planner);
    # last_ns also None with sessions
    sessions: int = 0  # session instances (exact), included in `flows`

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
    sessions = 0
    for s in scenario.sessions:
        sessions += s.instances
        first = s.start if first is None else min(first, s.start)
    if sessions:
        flows += sessions
        return Expected(
            None,
            flows,
            None,
            first if all(x.keeps_due_times() for x in scenario_sections(scenario)) else None,
            None,
            sessions,
        )
    if not all(s.keeps_due_times() for s in scenario_sections(scenario)):
        return Expected(packets, flows, total_bytes, None, None)
    return Expected(packets, flows, total_bytes, first or 0, last or 0)


__all__ = ["Expected", "expected", "peak_concurrent_flows"]
