"""Compile a scenario into the flow engine's session file, and say what the run must produce.

The session format is specified in generators/flowengine/README.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .scenario import Address, Flow, Ports, Scenario

_PROTO = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58}


def _address(a: Address) -> tuple[str, str]:
    iface = a.interface
    mode = "fixed" if a.is_single else a.mode
    return f"{iface.ip}/{iface.network.prefixlen}", mode


def _ports(p: Ports | None, default: str) -> tuple[str, str]:
    if p is None:
        p = Ports.model_validate(default)
    lo, hi = p.bounds
    return f"{lo}-{hi}", "fixed" if lo == hi else p.mode


def flow_line(flow: Flow, scenario: Scenario) -> str:
    src, src_mode = _address(flow.src)
    dst, dst_mode = _address(flow.dst)
    has_ports = flow.protocol in ("tcp", "udp")
    sport, sport_mode = _ports(flow.src_port, "random" if has_ports else "0")
    dport, dport_mode = _ports(flow.dst_port, "0")
    lo, hi = flow.payload.sizes
    content = flow.payload.content.hex() or "-"
    fields = [
        f"af={flow.ip_version}",
        f"proto={_PROTO[flow.protocol]}",
        f"smac={scenario.ethernet.src}",
        f"dmac={scenario.ethernet.dst}",
        f"src={src}",
        f"src_mode={src_mode}",
        f"dst={dst}",
        f"dst_mode={dst_mode}",
        f"sport={sport}",
        f"sport_mode={sport_mode}",
        f"dport={dport}",
        f"dport_mode={dport_mode}",
        f"start={flow.start}",
        f"period={flow.period_ns}",
        f"packets={flow.packet_count}",
        f"size={lo}-{hi}",
        f"payload={content}",
        f"reps={flow.repetitions}",
        f"rep_period={flow.repeat_period_ns}",
    ]
    return "flow " + " ".join(fields)


def compile_session(scenario: Scenario, seed: int | None = None) -> str:
    lines = [
        "ntg-session 1",
        f"# scenario {scenario.name}",
        f"seed {scenario.seed if seed is None else seed}",
    ]
    for i, flow in enumerate(scenario.flows):
        lines.append(f"# flows[{i}] {flow.name or ''}".rstrip())
        lines.append(flow_line(flow, scenario))
    return "\n".join(lines) + "\n"


# Engine state per live flow instance (generators/flowengine/README.md: 48-byte instance plus a
# 4-byte FIFO slot, plus 16 bytes of tree with the stochastic planner), rounded up for headroom.
ENGINE_BYTES_PER_FLOW = 64


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


@dataclass(frozen=True)
class Expected:
    """What a complete run of the scenario must contain, computed from the scenario alone."""

    packets: int
    flows: int
    bytes: int | None  # None when a payload size is random
    first_ns: int | None  # None when the planner does not keep due times (stochastic)
    last_ns: int | None

    def as_dict(self) -> dict:
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
    if scenario.flowengine.planner != "exact":
        return Expected(packets, flows, total_bytes, None, None)
    return Expected(packets, flows, total_bytes, first or 0, last or 0)
