"""The engine's memory model: whether a scenario's flows fit this machine (the plugin's `fits`
check, applied to the runs that use the engine) and the state `testbed validate` reports."""

from __future__ import annotations

from ntgcore.expected import peak_concurrent_flows
from ntgcore.scenario import Scenario

# Engine state per live flow instance (README.md here: 48-byte instance plus a 4-byte FIFO slot,
# plus 16 bytes of tree with the stochastic planner), rounded up for headroom.
ENGINE_BYTES_PER_FLOW = 64
# A two-way session instance adds its 160-byte state (README.md here, "Session lines"): 212 bytes
# in all, rounded up. Session instances are counted at their number (each line's reps), an upper
# bound: how many overlap follows the drawn sizes.
ENGINE_BYTES_PER_SESSION = 224


def _session_instances(scenario: Scenario) -> int:
    return sum(s.instances for s in scenario.sessions)


def state_bytes(scenario: Scenario) -> int:
    """About how much engine memory the scenario's flows alive at once take."""
    sessions = _session_instances(scenario)
    flows = peak_concurrent_flows(scenario) - sessions
    return flows * ENGINE_BYTES_PER_FLOW + sessions * ENGINE_BYTES_PER_SESSION


def available_memory() -> int | None:
    """MemAvailable of this machine in bytes, or None where /proc/meminfo does not say."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(scenario: Scenario) -> str | None:
    """Why the engine could not hold the scenario's flows in memory, or None if it can."""
    peak = peak_concurrent_flows(scenario)
    need = state_bytes(scenario)
    have = available_memory()
    if have is not None and need > have:
        return (
            f"up to {peak:,} flows are alive at once, which needs about {need / 2**30:,.1f} GiB "
            f"of engine memory; this machine has {have / 2**30:,.1f} GiB available. Lower "
            f"repeat.count, shorten the flows (packets, period) or space the repetitions "
            f"(repeat.period)" + (", or lower sessions' count" if scenario.sessions else "")
        )
    return None


__all__ = [
    "ENGINE_BYTES_PER_FLOW",
    "ENGINE_BYTES_PER_SESSION",
    "available_memory",
    "check_memory",
    "state_bytes",
]
