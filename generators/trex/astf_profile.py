"""Scenario TCP flows, TCP sessions and rule-built attack sessions -> a TRex ASTF profile.

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
- a TCP `sessions:` entry (session_templates): K representative dialogues (a Latin hypercube of
  the stratum means of its rounds and request/response size distributions, dialogues()) per
  server port, `limit` = the entry's count split by the ports' weights and equally over the
  dialogues, `cps` = the entry's mean rate × the template's share; the dialogues of one port
  tagged in the first byte of the client's first message (TRex's `l7_map`). UDP entries, IPv6,
  port ranges, too many templates or bytes: refused naming the entry.
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

import numpy as np

from ntgcore.errors import GeneratorError

NS = 1_000_000_000
MAX_CONNECTIONS = 10_000_000
MAX_SESSION_BYTES = 1_000_000
MAX_TEMPLATES = 250
MAX_DIALOGUES = 8  # representative dialogues of one `sessions:` entry (README.md, "ASTF mode")
MAX_SERVER_PORTS = 16  # server ports of one entry kept (the rest's weight folded onto them)
MAX_MESSAGES = 2_000  # messages in one representative dialogue
STRATUM_POINTS = 512  # quantile points averaged per stratum (its conditional mean)


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
    # `sessions:` templates sharing a server port: the server tells them apart by the first
    # bytes of the client's first message at these offsets (TRex's `l7_map`)
    l7_map: list[int] | None = None

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


def _session_label(i: int, entry) -> str:
    return f"sessions[{i}]" + (f" ({entry.name})" if entry.name else "")


def _session_range(addr, what: str, label: str, notes: list[str]) -> tuple[str, str]:
    """A session's client or server as an address range: the block's host addresses, or with
    `hosts` the span of the host offsets the distribution can draw (TRex's `seq` over it)."""
    if addr.hosts is None:
        if addr.interface.network.num_addresses > 1 and addr.mode == "random":
            notes.append(
                f"{label}: {what}: a random host per session becomes TRex's sequential "
                f"distribution over the block"
            )
        return _range(addr, what, label)
    net = addr.interface.network
    if net.version != 4:
        _range(addr, what, label)  # the IPv6 refusal
    lo, hi = addr.hosts.bounds
    first, last = net.network_address + lo, net.network_address + hi
    notes.append(
        f"{label}: {what}.hosts: the drawn host offsets ({lo}..{hi}) become TRex's sequential "
        f"distribution over {first}-{last}: every host in that span equally often, not the "
        f"distribution's weights"
    )
    return str(first), str(last)


def _server_ports(entry, label: str, notes: list[str]) -> list[tuple[int, float]]:
    """(port, weight) of the entry's server ports: every value of the distribution, at most
    MAX_SERVER_PORTS of them (the heaviest; the others' weight spread over those)."""
    ports: dict[int, float] = {}
    for lo, hi, w in entry.server_port.to_bins():
        if hi - lo + 1 > MAX_SERVER_PORTS:
            raise GeneratorError(
                f"trex: {label}: server_port: the range {lo}-{hi}: an ASTF template serves one "
                f"port; give at most {MAX_SERVER_PORTS} ports (`{{choices: {{443: 70, 80: 30}}}}`)"
            )
        if lo == 0:
            raise GeneratorError(
                f"trex: {label}: server_port: port 0 cannot be served; give ports 1-65535"
            )
        for port in range(lo, hi + 1):
            ports[port] = ports.get(port, 0.0) + w / (hi - lo + 1)
    ranked = sorted(ports.items(), key=lambda pw: (-pw[1], pw[0]))
    if len(ranked) > MAX_SERVER_PORTS:
        kept, rest = ranked[:MAX_SERVER_PORTS], ranked[MAX_SERVER_PORTS:]
        share = sum(w for _p, w in rest) / sum(w for _p, w in ranked)
        notes.append(
            f"{label}: server_port: {len(ranked)} ports; the {MAX_SERVER_PORTS} most frequent "
            f"kept, the other {len(rest)} ({share:.1%} of the sessions) spread over them"
        )
        ranked = kept
    return ranked


def _largest_remainder(total: int, weights: list[float]) -> list[int]:
    raw = [total * w / sum(weights) for w in weights]
    counts = [int(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def stratum_means(dist, k: int) -> np.ndarray:
    """The mean of `dist` inside each of its k equal-probability strata (quantile p in
    [j/k, (j+1)/k)): k representatives whose average is the distribution's mean."""
    p = (np.arange(k)[:, None] + (np.arange(STRATUM_POINTS) + 0.5) / STRATUM_POINTS) / k
    means: np.ndarray = dist.quantile(p.ravel()).reshape(k, STRATUM_POINTS).mean(axis=1)
    return means


def dialogues(entry, k: int, seed: int) -> list[list[tuple[bool, int]]]:
    """k representative dialogues of a session entry, each a list of (from the client, bytes):
    a Latin hypercube over the entry's distributions. Rounds, and every round's request and
    response size, take the k stratum means of their distribution (stratum_means), each stratum
    in exactly one dialogue, assigned by a permutation of its own (drawn from `seed`), so that
    every field's values over the k dialogues have the distribution's mean and spread, and
    fields are not tied to each other. Zero-byte messages are left out; consecutive messages of
    one side are one message (one send on a byte stream)."""
    rng = np.random.default_rng(seed)
    rounds = np.maximum(1, np.rint(stratum_means(entry.rounds, k))).astype(np.int64)
    rounds = rounds[rng.permutation(k)]
    req, resp = (
        np.rint(stratum_means(d, k)).astype(np.int64)
        for d in (entry.request_bytes, entry.response_bytes)
    )
    most = int(rounds.max())
    if 2 * most > MAX_MESSAGES:
        raise ValueError(
            f"a representative dialogue of {most:,} rounds ({2 * most:,} messages), more than "
            f"{MAX_MESSAGES:,} messages in one connection"
        )
    per_round = [(req[rng.permutation(k)], resp[rng.permutation(k)]) for _r in range(most)]
    out = []
    for j in range(k):
        msgs: list[tuple[bool, int]] = []
        for r in range(int(rounds[j])):
            for from_client, size in (
                (True, int(per_round[r][0][j])),
                (False, int(per_round[r][1][j])),
            ):
                if size <= 0:
                    continue
                if msgs and msgs[-1][0] == from_client:
                    msgs[-1] = (from_client, msgs[-1][1] + size)
                else:
                    msgs.append((from_client, size))
        out.append(msgs)
    return out


def session_templates(i: int, entry, seed: int, notes: list[str]) -> list[TemplateSpec]:
    """A `sessions:` entry's TCP sessions as ASTF templates (README.md, "ASTF mode"): K
    representative dialogues (`dialogues`) per server port, `limit` = the count split by the
    ports' weights and then equally over the dialogues, `cps` = the entry's mean session rate
    times the template's share of the count."""
    label = _session_label(i, entry)
    parts = entry.parts()
    if any(p.protocol != "tcp" for p in parts):
        udp = sum(p.count for p in parts if p.protocol != "tcp")
        raise GeneratorError(
            f"trex: {label}: protocol: {udp:,} UDP sessions; ASTF mode maps TCP sessions only "
            f"(send UDP sessions with the flowengine, or give this entry `protocol: tcp`)"
        )
    client = _session_range(entry.client, "client", label, notes)
    server = _session_range(entry.server, "server", label, notes)
    count = sum(p.count for p in parts)
    if count > MAX_CONNECTIONS:
        raise GeneratorError(
            f"trex: {label}: count: {count:,} sessions, more than {MAX_CONNECTIONS:,} connections"
        )
    if len(parts) == 1:
        mean = parts[0].arrival.mean()
        if mean <= 0:
            raise GeneratorError(
                f"trex: {label}: arrival: a mean of 0 would open every connection at once; "
                f"give a mean arrival above 0"
            )
        rate = NS / mean
    else:  # a profile: its steps (and pauses) at their mean rate over the whole profile
        assert entry.profile is not None
        span = sum(length for length, _rate in entry.profile.rate_steps())
        rate = count * NS / span
        notes.append(
            f"{label}: profile: {len(parts)} steps opened at their mean rate over the profile "
            f"({rate:.6g} sessions/s): TRex's templates keep one rate"
        )
    if entry.arrival.form != "exponential":
        notes.append(
            f"{label}: arrival: TRex opens connections at random times at the mean rate "
            f"({rate:.6g}/s), not with this arrival distribution ({entry.arrival.form})"
        )
    if entry.start or any(p.start != parts[0].start for p in parts):
        notes.append(f"{label}: start: every ASTF template starts with the traffic")
    ports = _server_ports(entry, label, notes)
    varying = [
        d for d in (entry.rounds, entry.request_bytes, entry.response_bytes) if not d.is_fixed
    ]
    k = min(MAX_DIALOGUES, count) if varying else 1
    try:
        dialogue_list = dialogues(entry, k, seed * 1_000_003 + i)
    except ValueError as exc:
        raise GeneratorError(f"trex: {label}: rounds: {exc}; cap it (`max:`)") from None
    for msgs in dialogue_list:
        size = sum(b for _c, b in msgs)
        if size > MAX_SESSION_BYTES:
            raise GeneratorError(
                f"trex: {label}: rounds/request_bytes/response_bytes: a representative "
                f"dialogue of {size:,} bytes, more than {MAX_SESSION_BYTES:,} bytes in one "
                f"connection; cap the distributions (`max:`)"
            )
    if k > 1:
        notes.append(
            f"{label}: rounds, request_bytes, response_bytes: {k} representative dialogues "
            f"(a Latin hypercube of the distributions' stratum means), each 1/{k} of the "
            f"sessions, instead of a draw per session"
        )
    notes.append(
        f"{label}: rtt, gap, mss, window, think, linger: TRex's TCP stack paces and segments "
        f"the dialogue; client ports: TRex's"
        + (
            "; close rst or none: TRex closes with FIN"
            if set(entry.close.choices) - {"fin"}
            else ""
        )
        + ("; open none: TRex's connections open with a handshake" if entry.open == "none" else "")
    )
    out = []
    for (port, _w), n_port in zip(ports, _largest_remainder(count, [w for _p, w in ports])):
        for j, n in enumerate(_largest_remainder(n_port, [1.0] * k)):
            if not n:
                continue
            name = (entry.name or f"s{i}") + f"-{port}" + (f"-d{j}" if k > 1 else "")
            hexed = [(c, bytes(b).hex()) for c, b in dialogue_list[j]]
            out.append(
                TemplateSpec(
                    f"{label} port {port}" + (f" dialogue {j}" if k > 1 else ""),
                    name,
                    client,
                    server,
                    port,
                    rate * n / count,
                    n,
                    hexed,
                )
            )
    return out


def _tag_shared_ports(templates: list[TemplateSpec], notes: list[str]) -> None:
    """Session templates that share a server port: the first byte(s) of the client's first
    message carry the template's number on that port, and the server matches it (l7_map). A
    dialogue whose client does not speak first, or speaks fewer bytes than the tag, gets them."""
    by_port: dict[int, list[TemplateSpec]] = {}
    for t in templates:
        by_port.setdefault(t.port, []).append(t)
    for port, group in by_port.items():
        if len(group) < 2:
            continue
        width = 1 if len(group) <= 256 else 2
        grown = 0
        for n, t in enumerate(group):
            msgs = [(c, bytes.fromhex(h)) for c, h in t.messages]
            tag = n.to_bytes(width, "big")
            if not msgs or not msgs[0][0]:
                msgs.insert(0, (True, b""))
            if len(msgs[0][1]) < width:
                grown += 1
            msgs[0] = (True, tag + msgs[0][1][width:])
            t.messages = [(c, d.hex()) for c, d in msgs]
            t.l7_map = list(range(width))
        notes.append(
            f"sessions: port {port}: {len(group)} templates told apart by the first {width} "
            f"byte(s) of the client's first message (TRex's l7_map)"
            + (
                f"; {grown} dialogue(s) given a first client message of {width} byte(s)"
                if grown
                else ""
            )
        )


def build_astf_profile(
    scenario,
    *,
    response_bytes: int = 0,
    attack_sessions: tuple[list[dict], list[str]] | None = None,
) -> AstfProfile:
    """`attack_sessions`: the `attacks:` section's TCP dialogues and what was left out, as
    idsrules.attacks.tcp_dialogues gives them (the orchestration reads rules, not the
    adapters); without them an `attacks:` section is left to the run's attack pcap."""
    notes: list[str] = []
    templates = [flow_template(i, f, response_bytes, notes) for i, f in enumerate(scenario.flows)]
    sessions: list[TemplateSpec] = []
    for i, entry in enumerate(scenario.sessions):
        sessions += session_templates(i, entry, int(scenario.seed or 0), notes)
        if len(sessions) > MAX_TEMPLATES:
            raise GeneratorError(
                f"trex: {_session_label(i, entry)}: {len(sessions)} ASTF templates for the "
                f"sessions so far, more than {MAX_TEMPLATES}; give fewer server ports or entries"
            )
    _tag_shared_ports(sessions, notes)
    templates += sessions
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
    if len(templates) > 2 * MAX_TEMPLATES + len(scenario.flows):
        raise GeneratorError(f"trex: {len(templates)} ASTF templates, more than the adapter takes")
    for a in range(len(templates)):
        for b in range(a):
            ta, tb = templates[a], templates[b]
            tagged = ta.l7_map is not None and tb.l7_map is not None
            if ta.port == tb.port and _overlap(ta.server, tb.server) and not tagged:
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
            f"port={t.port}, cps={t.cps!r}, limit={t.limit}, l7_map={t.l7_map!r},"
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
        "                port=t['port'], ip_start=t['server'][0], ip_end=t['server'][1],",
        "                l7_map=t['l7_map']))",
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


__all__ = [
    "AstfProfile",
    "TemplateSpec",
    "build_astf_profile",
    "python_code",
    "attack_templates",
    "session_templates",
    "dialogues",
    "stratum_means",
]
