"""Compile a scenario into the engine's session file (its format: README.md here, "Session")."""

from __future__ import annotations

from ntgcore.scenario import Address, Flow, Ports, Scenario

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


__all__ = ["compile_session", "flow_line"]
