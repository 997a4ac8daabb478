"""The engine's memory model: whether a scenario's flows fit this machine (the plugin's `fits`
check, applied to the runs that use the engine) and the state `testbed validate` reports."""

from __future__ import annotations

from ntgcore.expected import peak_concurrent_flows
from ntgcore.scenario import Scenario

# Engine state per live flow instance (README.md here: 48-byte instance plus a 4-byte FIFO slot,
# plus 16 bytes of tree with the stochastic planner), rounded up for headroom.
ENGINE_BYTES_PER_FLOW = 64


def state_bytes(scenario: Scenario) -> int:
    """About how much engine memory the scenario's flows alive at once take."""
    return peak_concurrent_flows(scenario) * ENGINE_BYTES_PER_FLOW


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
    need = peak * ENGINE_BYTES_PER_FLOW
    have = available_memory()
    if have is not None and need > have:
        return (
            f"up to {peak:,} flows are alive at once, which needs about {need / 2**30:,.1f} GiB "
            f"of engine memory; this machine has {have / 2**30:,.1f} GiB available. Lower "
            f"repeat.count, shorten the flows (packets, period) or space the repetitions "
            f"(repeat.period)"
        )
    return None


__all__ = ["ENGINE_BYTES_PER_FLOW", "available_memory", "check_memory", "state_bytes"]
