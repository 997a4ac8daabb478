"""Scenario TCP flows and rule-built attack sessions -> a TRex advanced-stateful (ASTF) profile.

Like stl_profile.py this runs in the main process and never imports the TRex client: it makes
an `AstfProfile`, plain data with one template per TCP flow (and per attack rule), which
`python_code` writes as a runnable ASTF profile file (`trex-astf-profile.py`, loadable by
`trex-console`'s `start -f` on a server started with `--astf`) and the worker loads and sends.

A template is what TRex replays for every connection: a client address range and a server
address range (TRex's `ASTFIPGenDist`, distribution `seq` as in seed 001), the server port,
the connection rate (`cps`), how many connections at most (`limit`), and the dialogue as a list
of messages `(from_client, bytes)`, which becomes the client's program (its messages sent, the
server's received) and the server's mirror image. Every connection is a real TCP session of
TRex's own stack: handshake, data, FIN both ways.

The rules (README.md, "ASTF mode"):
- a TCP flow: one connection per instance (`repeat.count`, else 1), `cps` = 1/`repeat.period`
  (1 without repeat); client addresses = `src` (an address or the block's host addresses), server
  addresses = `dst` (the same), server port = `dst_port` (one port); the client sends `packets` payloads of the flow
  (its text/hex padded with zeros to its size) as one request, the server answers with
  `response_bytes` (the generator option; 0: no answer) and both close.
- an attack session (`attacks:`, TCP rules with a handshake, given to the adapter as plain
  dialogues by idsrules.attacks.tcp_dialogues: the same bytes the attack pcap carries,
  the server port the synthesis picks, the client range and the server address on the rule's
  sides, each rule its own server address); `attacks.count` connections cycled over the rules,
  at `attacks.rate` connections/s in all.
Refused, naming the flow: other protocols, IPv6, a `dst_port` range, flows sent for a duration
(no instance count), more than MAX_CONNECTIONS connections, more than MAX_SESSION_BYTES in one
connection, two templates on one server port with overlapping server addresses (TRex's server
side tells templates apart by port and address only). Approximations (listed in the run folder):
a `random` address mode (TRex: sequential), `src_port` (TRex chooses client ports), a `start`
offset (every template starts with the traffic), a payload size range (its maximum), the packet
boundaries (TRex's TCP stack segments the request by its MSS).
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import asdict, dataclass, field

from ntgcore.errors import GeneratorError

NS = 1_000_000_000
MAX_CONNECTIONS = 10_000_000
MAX_SESSION_BYTES = 1_000_000
MAX_TEMPLATES = 250


@dataclass
class TemplateSpec:
    label: str
    name: str
    client: tuple[str, str]  # first and last address
    server: tuple[str, str]
    port: int
    cps: float
    limit: int
    messages: list[tuple[bool, str]]  # (from the client, payload in hex)
    sid: int | None = None

    @property
    def request_bytes(self) -> int:
        return sum(len(h) // 2 for c, h in self.messages if c)

    @property
    def response_bytes(self) -> int:
        return sum(len(h) // 2 for c, h in self.messages if not c)


@dataclass
class AstfProfile:
    templates: list[TemplateSpec]
    approximations: list[str] = field(default_factory=list)

    @property
    def connections(self) -> int:
        return sum(t.limit for t in self.templates)

    @property
    def expected_seconds(self) -> float:
        """When the last connection is due, were they opened one every 1/cps."""
        return max(((t.limit - 1) / t.cps for t in self.templates), default=0.0)

    @property
    def open_seconds(self) -> float:
        """How long TRex is given to open every connection (its `duration`). TRex opens a
        template's connections at random times, `cps` a second on average, not one every 1/cps
        (measured: the 2 connections of a template at 2.5/s within 0.11 s, or the second after
        0.77 s), so opening `limit` of them takes as long as `limit` events of a Poisson process;
        (limit + 5·√limit + 12)/cps falls short with a probability below 1e-7 per template. The
        worker ends the traffic as soon as every connection has closed on both sides."""
        return max(
            ((t.limit + 5 * math.sqrt(t.limit) + 12) / t.cps for t in self.templates), default=0.0
        )

    def as_dict(self) -> dict:
        return {
            "mode": "astf",
            "connections": self.connections,
            "expected_seconds": self.expected_seconds,
            "open_seconds": self.open_seconds,
            "templates": [asdict(t) for t in self.templates],
            "approximations": self.approximations,
        }


def _label(i: int, flow) -> str:
    return f"flows[{i}]" + (f" ({flow.name})" if flow.name else "")


def _range(addr, what: str, label: str) -> tuple[str, str]:
    net = addr.interface.network
    if net.version != 4:
        raise GeneratorError(
            f"trex: {label}: {what}: ASTF mode maps IPv4 sessions only "
            f"(TRex's ASTF IPv6 is a global switch); use mode: stl"
        )
    if net.num_addresses <= 2:
        return str(net[0]), str(net[-1])
    return str(net[1]), str(net[-2])  # the block's host addresses


def _overlap(a: tuple[str, str], b: tuple[str, str]) -> bool:
    ip = ipaddress.IPv4Address  # ASTF maps IPv4 sessions only (above)
    return ip(a[0]) <= ip(b[1]) and ip(b[0]) <= ip(a[1])


def flow_template(i: int, flow, response_bytes: int, notes: list[str]) -> TemplateSpec:
    label = _label(i, flow)
    if flow.protocol != "tcp":
        raise GeneratorError(
            f"trex: {label}: protocol {flow.protocol}: ASTF mode carries TCP "
            f"sessions only; use mode: stl for other protocols"
        )
    client = _range(flow.src, "src", label)
    server = _range(flow.dst, "dst", label)
    lo, hi = flow.dst_port.bounds if flow.dst_port else (0, 0)
    if lo != hi:
        raise GeneratorError(
            f"trex: {label}: dst_port: an ASTF template serves one server port, "
            f"not the range {lo}-{hi}; give one port per flow"
        )
    if flow.packets is None:
        raise GeneratorError(
            f"trex: {label}: duration: an ASTF session carries a number of "
            f"payloads (`packets`), not a duration; give `packets` (per connection) "
            f"and `repeat.count` (connections)"
        )
    conns = flow.repetitions
    if conns > MAX_CONNECTIONS:
        raise GeneratorError(
            f"trex: {label}: repeat.count: {conns:,} connections, more than {MAX_CONNECTIONS:,}"
        )
    cps = NS / flow.repeat_period_ns if flow.repeat else 1.0
    if flow.repeat and flow.repeat_period_ns <= 0:
        raise GeneratorError(
            f"trex: {label}: repeat.period: 0 would open every connection at "
            f"once; give a period (1/cps)"
        )
    smin, smax = flow.payload.sizes
    content = flow.payload.content
    one = content + bytes(max(0, smax - len(content)))
    request = one * flow.packets
    if len(request) + response_bytes > MAX_SESSION_BYTES:
        raise GeneratorError(
            f"trex: {label}: packets × payload: {len(request) + response_bytes:,} "
            f"bytes in one connection, more than {MAX_SESSION_BYTES:,}"
        )
    if not request and not response_bytes:
        notes.append(f"{label}: no payload: every connection is a handshake and the closing FINs")
    for what, addr in (("src", flow.src), ("dst", flow.dst)):
        if not addr.is_single and addr.mode == "random":
            notes.append(
                f"{label}: {what}: `random` becomes TRex's sequential distribution over "
                f"the block (seed 001's `distribution: seq`)"
            )
    if flow.src_port is not None:
        notes.append(f"{label}: src_port: TRex's TCP stack chooses the client ports")
    if flow.start:
        notes.append(
            f"{label}: start: every ASTF template starts with the traffic "
            f"({flow.start / NS:g}s offset ignored)"
        )
    if smin != smax:
        notes.append(f"{label}: payload.size {smin}-{smax}: every payload has {smax} bytes")
    if flow.packets > 1:
        notes.append(
            f"{label}: packets: {flow.packets} payloads sent as one request of "
            f"{len(request)} bytes; TRex's stack cuts it into MSS-sized segments"
        )
    messages = ([(True, request.hex())] if request else []) + (
        [(False, bytes(response_bytes).hex())] if response_bytes else []
    )
    return TemplateSpec(label, flow.name or f"flow{i}", client, server, lo, cps, conns, messages)


def attack_templates(
    sessions: list[dict], rate: float, skipped: list[str], notes: list[str]
) -> list[TemplateSpec]:
    """One template per attack rule: `sessions` as idsrules.attacks.tcp_dialogues gives
    them ({sid, client: (first, last), server, server_port, messages: [(from_client, bytes)],
    count}), at `rate` sessions/s in all."""
    if skipped:
        notes.append("attacks: not TCP sessions, not played by TRex: " + "; ".join(skipped[:20]))
    if not sessions:
        raise GeneratorError(
            "trex: attacks: no selected rule is a TCP session with a handshake "
            "(what ASTF replays); widen attacks.select"
        )
    if len(sessions) > MAX_TEMPLATES:
        raise GeneratorError(
            f"trex: attacks: {len(sessions)} TCP rules selected, ASTF mode takes at "
            f"most {MAX_TEMPLATES} (one server address each)"
        )
    total = sum(x["count"] for x in sessions)
    out = []
    for x in sessions:
        size = sum(len(d) for _c, d in x["messages"])
        if size > MAX_SESSION_BYTES:
            raise GeneratorError(
                f"trex: attacks: sid {x['sid']}: {size:,} bytes in one session, "
                f"more than {MAX_SESSION_BYTES:,}"
            )
        out.append(
            TemplateSpec(
                f"attacks sid {x['sid']}",
                f"sid{x['sid']}",
                tuple(x["client"]),
                (x["server"], x["server"]),
                int(x["server_port"]),
                float(rate) * x["count"] / total,
                int(x["count"]),
                [(bool(c), bytes(d).hex()) for c, d in x["messages"]],
                sid=x["sid"],
            )
        )
    notes.append(
        f"attacks: {total} sessions of {len(out)} rule(s) at {float(rate):g}/s in all, each "
        f"rule's share at its own rate (TRex interleaves them; the attack pcap orders them "
        f"by rule); every rule served from its own address"
    )
    return out


def build_astf_profile(
    scenario,
    *,
    response_bytes: int = 0,
    attack_sessions: tuple[list[dict], list[str]] | None = None,
) -> AstfProfile:
    """`attack_sessions`: the `attacks:` section's TCP dialogues and what was left out, as
    idsrules.attacks.tcp_dialogues gives them (the orchestration reads rules, not the
    adapters); without them an `attacks:` section is left to the run's attack pcap."""
    if scenario.sessions:  # refused at validation for trex; a script may still ask
        raise GeneratorError(
            "sessions[0]: trex does not send two-way `sessions:`; the flowengine does"
        )
    notes: list[str] = []
    templates = [flow_template(i, f, response_bytes, notes) for i, f in enumerate(scenario.flows)]
    if scenario.attacks is not None:
        if attack_sessions is None:
            notes.append(
                "attacks: not part of the ASTF profile (no attack sessions given to the "
                "adapter); the run's attack pcap carries them"
            )
        else:
            if scenario.attacks.ip_version != 4:
                raise GeneratorError("trex: attacks.ip_version: ASTF mode maps IPv4 sessions only")
            templates += attack_templates(
                attack_sessions[0], float(scenario.attacks.rate), attack_sessions[1], notes
            )
            if scenario.attacks.start:
                notes.append("attacks: start: the attack templates start with the traffic")
    if len(templates) > MAX_TEMPLATES + len(scenario.flows):
        raise GeneratorError(f"trex: {len(templates)} ASTF templates, more than the adapter takes")
    for a in range(len(templates)):
        for b in range(a):
            ta, tb = templates[a], templates[b]
            if ta.port == tb.port and _overlap(ta.server, tb.server):
                raise GeneratorError(
                    f"trex: {ta.label}: dst/dst_port: serves port {ta.port} on addresses that "
                    f"{tb.label} serves too ({tb.server[0]}-{tb.server[1]}); TRex's server side "
                    f"tells ASTF templates apart by port and address: give them disjoint `dst`"
                )
    return AstfProfile(templates, notes)


def tg_name(k: int, t: TemplateSpec) -> str:
    """The template's group name in TRex (unique, at most 20 characters): its per-template counters."""
    return f"{k}-{t.name}"[:20]


def python_code(profile: AstfProfile) -> str:
    """A runnable ASTF profile file (the `register()` trex-console and ASTFProfile.load_py use)."""
    lines = [
        "# ASTF profile written by ntg-testbed (generators/trex/astf_profile.py); load it with",
        "# `start -f trex-astf-profile.py` in trex-console on a server started with --astf.",
        "from trex.astf.api import (ASTFAssociationRule, ASTFIPGen, ASTFIPGenDist, ASTFProfile,",
        "                           ASTFProgram, ASTFTCPClientTemplate, ASTFTCPServerTemplate,",
        "                           ASTFTemplate)",
        "",
        "",
        "def _programs(messages):",
        "    client, server = ASTFProgram(side='c'), ASTFProgram(side='s')",
        "    for from_client, data in messages:",
        "        data = bytes.fromhex(data)",
        "        sender, receiver = (client, server) if from_client else (server, client)",
        "        sender.send(data)",
        "        receiver.recv(len(data), clear=True)",
        "    return client, server",
        "",
        "",
        "TEMPLATES = [",
    ]
    for k, t in enumerate(profile.templates):
        lines.append(
            f"    dict(name={tg_name(k, t)!r}, client={list(t.client)!r}, server={list(t.server)!r}, "
            f"port={t.port}, cps={t.cps!r}, limit={t.limit},"
        )
        lines.append(f"         messages={[list(m) for m in t.messages]!r}),")
    lines += [
        "]",
        "",
        "",
        "class Profile:",
        "    def get_profile(self, **kwargs):",
        "        templates = []",
        "        for t in TEMPLATES:",
        "            client, server = _programs(t['messages'])",
        "            ip_gen = ASTFIPGen(dist_client=ASTFIPGenDist(ip_range=t['client'], distribution='seq'),",
        "                               dist_server=ASTFIPGenDist(ip_range=t['server'], distribution='seq'))",
        "            c = ASTFTCPClientTemplate(program=client, ip_gen=ip_gen, port=t['port'], cps=t['cps'],",
        "                                      limit=t['limit'])",
        "            s = ASTFTCPServerTemplate(program=server, assoc=ASTFAssociationRule(",
        "                port=t['port'], ip_start=t['server'][0], ip_end=t['server'][1]))",
        "            templates.append(ASTFTemplate(client_template=c, server_template=s, tg_name=t['name']))",
        "        default = ASTFIPGen(dist_client=ASTFIPGenDist(ip_range=TEMPLATES[0]['client']),",
        "                            dist_server=ASTFIPGenDist(ip_range=TEMPLATES[0]['server']))",
        "        return ASTFProfile(default_ip_gen=default, templates=templates)",
        "",
        "",
        "def register():",
        "    return Profile()",
        "",
    ]
    return "\n".join(lines)


__all__ = ["AstfProfile", "TemplateSpec", "build_astf_profile", "python_code", "attack_templates"]
