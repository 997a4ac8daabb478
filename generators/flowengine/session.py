"""Compile a scenario into the engine's session file (its format: README.md here, "Session")."""

from __future__ import annotations

from ntgcore.distributions import MAX_BINS, MAX_WEIGHT, Bin, Distribution
from ntgcore.errors import BadInput
from ntgcore.scenario import Address, Flow, Ports, Scenario, Session, SessionAddress, SessionPart

_PROTO = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58}
MAX_PAUSES = 64  # values of a drawn think or linger (the engine: one schedule each)


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


MAX_DISTS = 65536  # `dist` IDs are 0..65535


class Dists:
    """The `dist` lines of a session file: one per distinct bin list, numbered in order of
    first use, each written before the first line that uses it."""

    def __init__(self) -> None:
        self.ids: dict[tuple[Bin, ...], int] = {}
        self.pending: list[str] = []

    def ref(self, d: Distribution) -> str:
        """`D:ID` of `d`'s bins (a new `dist` line queued if they are new)."""
        return self.ref_bins(d.to_bins())

    def ref_bins(self, bins_list: list[Bin]) -> str:
        """`D:ID` of these bins (a new `dist` line queued if they are new)."""
        bins = tuple(bins_list)
        found = self.ids.get(bins)
        if found is None:
            if len(self.ids) >= MAX_DISTS:
                raise BadInput(
                    f"the scenario needs more than {MAX_DISTS} distinct distributions; use "
                    f"fewer session entries or profile steps"
                )
            found = self.ids[bins] = len(self.ids)
            assert len(bins) <= MAX_BINS
            self.pending.append(f"dist {found} " + " ".join(f"{a}-{b}:{w}" for a, b, w in bins))
        return f"D:{found}"

    def value(self, d: Distribution) -> str:
        """A fixed value as its number, else `D:ID`."""
        lo, hi = d.bounds
        return str(lo) if lo == hi else self.ref(d)

    def take(self) -> list[str]:
        out, self.pending = self.pending, []
        return out


def _session_address(a: SessionAddress, dists: Dists) -> tuple[str, str]:
    iface = a.interface
    if a.hosts is not None:
        return f"{iface.network.network_address}/{iface.network.prefixlen}", dists.ref(a.hosts)
    mode = "fixed" if iface.network.num_addresses == 1 else a.mode
    return f"{iface.ip}/{iface.network.prefixlen}", mode


def _session_port(d: Distribution, dists: Dists) -> tuple[str, str]:
    lo, hi = d.bounds
    if lo == hi:
        return f"{lo}-{hi}", "fixed"
    if d.uniform is not None and d.cap is None and d.to_bins() == [(lo, hi, 1)]:
        return f"{lo}-{hi}", "random"  # the engine's own uniform port draw
    if d.cycle:
        return f"{lo}-{hi}", "P:" + dists.ref(d)[2:]  # a deck: drawn without replacement
    return f"{lo}-{hi}", dists.ref(d)


def session_line(session: Session, part: SessionPart, scenario: Scenario, dists: Dists) -> str:
    """One engine `session` line (README here, "Session lines"); its `dist` lines go to
    `dists`."""
    client, client_mode = _session_address(session.client, dists)
    server, server_mode = _session_address(session.server, dists)
    cport, cport_mode = _session_port(session.client_port, dists)
    sport, sport_mode = _session_port(session.server_port, dists)
    fields = [
        f"af={session.ip_version}",
        f"proto={_PROTO[part.protocol]}",
        f"cmac={scenario.ethernet.src}",
        f"smac={scenario.ethernet.dst}",
        f"client={client}",
        f"server={server}",
        f"client_mode={client_mode}",
        f"server_mode={server_mode}",
        f"cport={cport}",
        f"sport={sport}",
        f"cport_mode={cport_mode}",
        f"sport_mode={sport_mode}",
        f"start={part.start}",
        f"reps={part.count}",
        f"arrival={dists.value(part.arrival)}",
        f"rtt={session.rtt}",
        f"gap={session.gap}",
        f"mss={session.mss}",
        f"win={session.window}",
        f"rounds={dists.value(session.rounds)}",
        f"req={dists.value(session.request_bytes)}",
        f"resp={dists.value(session.response_bytes)}",
        f"close={part.close}",
    ]
    for key, d in (("think", session.think), ("linger", session.linger)):
        value = _pause(d, dists)
        if value is not None:  # optional keys: a line without them is as before they existed
            fields.append(f"{key}={value}")
    if session.open == "none" and part.protocol == "tcp":
        fields.append("open=none")
    return "session " + " ".join(fields)


def _pause(d: Distribution, dists: Dists) -> str | None:
    """A think or linger key's value: None for 0 (no key), a number, or `D:ID` of at most
    MAX_PAUSES single values (each its own schedule in the engine; a 0 drawn is 1 ns)."""
    lo, hi = d.bounds
    if hi == 0:
        return None
    if lo == hi:
        return str(lo)
    points = [(max(v, 1), max(v, 1), w) for v, _, w in d.to_points(MAX_PAUSES)]
    merged: dict[int, int] = {}
    for v, _, w in points:
        merged[v] = min(merged.get(v, 0) + w, MAX_WEIGHT)
    if len(merged) == 1:
        return str(next(iter(merged)))
    return dists.ref_bins([(v, v, w) for v, w in sorted(merged.items())])


def compile_session(scenario: Scenario, seed: int | None = None) -> str:
    """The scenario as the engine's session file: its flows as `flow` lines, then its sessions
    as `dist` and `session` lines (one per protocol and profile step: Session.parts)."""
    lines = [
        "ntg-session 1",
        f"# scenario {scenario.name}",
        f"seed {scenario.seed if seed is None else seed}",
    ]
    for i, flow in enumerate(scenario.flows):
        lines.append(f"# flows[{i}] {flow.name or ''}".rstrip())
        lines.append(flow_line(flow, scenario))
    dists = Dists()
    index = len(scenario.flows)  # flow and session lines are numbered together
    for i, session in enumerate(scenario.sessions):
        parts = session.parts()
        # ports dealt from a deck: every line of the entry from the entry's one deck, each from
        # where the lines before it stopped (none repeats a card another line of it used)
        shared = len(parts) > 1 and (session.client_port.cycle or session.server_port.cycle)
        first, dealt = index, 0
        for part in parts:
            text = session_line(session, part, scenario, dists)
            if shared:
                text += f" deck={first}:{dealt}"
            lines.append(f"# sessions[{i}] {session.name or ''} {part.protocol}".replace("  ", " "))
            lines.extend(dists.take())
            lines.append(text)
            index += 1
            dealt += part.count
    return "\n".join(lines) + "\n"


__all__ = ["Dists", "compile_session", "flow_line", "session_line"]
