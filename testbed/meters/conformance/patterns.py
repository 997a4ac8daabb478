"""The flow meters' conformance patterns: data folders `patterns/<name>/` with `pattern.yaml` (the
artifact the pattern exposes, the meter rules it is run with, its packets described compactly)
and `expected.yaml` (the records a conforming meter exports, worked out by hand from the rules of
docs/flowmeters.md, "Reference records"). `write_pcap` turns a pattern into its capture with the
builders of ntgcore.packets; `expected_records` reads the expectation as a record table.

pattern.yaml (times are durations from `start`, sizes are L3 bytes: the IP total length, IPv6
40 + payload length):

    name: idle-over
    artifact: Hofstede et al., PAM 2013, ...   # the artifact and where it is described
    exposes: what a meter that gets it wrong exports
    rules: {idle_timeout: 10s, active_timeout: 60s, tcp_end: true, max_flows: null, key_vlan: false}
    flows:                      # unidirectional: a TCP session is two flows
      a: {proto: udp, src: 198.18.0.1, dst: 198.19.0.1, sport: 40000, dport: 53,
          vlan: [100, 10], outer_tpid: 0x88a8, ext: [hop-by-hop, routing]}
    packets:                    # in file order (a time earlier than the one before is allowed)
      - {flow: a, at: 0s, size: 100, repeat: 3, every: 1s, flags: PA, snap: 64}
      - {flow: a, at: 5s, fragments: [1232, 768]}   # one datagram, its fragments `fragment_every` apart
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from analysis.flowmeter.records import REFERENCE_SCHEMA, MeterRules, records_table
from ntgcore import packets as pk
from ntgcore.errors import BadInput, InputProblems
from ntgcore.files import read_bounded, replacing
from ntgcore.packets import BENCHMARK_NETWORKS
from ntgcore.scenario import Duration, format_error
from ntgcore.units import NS_PER_S
from ntgcore.yamlread import MAX_BYTES, YamlProblem, read_yaml, where, yaml_lines

PATTERNS_DIR = Path(__file__).parent / "patterns"
DEFAULT_START_S = 1_767_225_600  # 2026-01-01T00:00:00Z: t = 0 of every pattern
PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58}
L4_HEADER = {"tcp": 20, "udp": 8, "icmp": 8, "icmpv6": 8}
EXT_HEADER = {"hop-by-hop": 8, "destination": 8, "routing": 24, "fragment": 8}
ICMP_ERRORS = (3, 4, 5, 11, 12)  # they quote the datagram in error (RFC 792)
ICMPV6_ERRORS = (1, 2, 3, 4)  # (RFC 4443)
ENDS = ("idle", "active", "fin", "rst", "evicted", "eof")


class PatternError(InputProblems):
    """A pattern or expectation file that cannot be used: one `FILE:LINE: field: message` each."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _whole_seconds(ns: int) -> int:
    if ns <= 0 or ns % NS_PER_S:
        raise ValueError("a meter sets its timeouts in whole seconds: write e.g. 10s")
    return ns


def _microseconds(ns: int) -> int:
    if ns < 0 or ns % 1000:
        raise ValueError("times are written to a microsecond pcap: a multiple of 1us, not negative")
    return ns


def _flags(text: str) -> int:
    bits = 0
    for ch in text:
        if ch not in pk.FLAG_BITS:
            raise ValueError(f"unknown TCP flag {ch!r}; use letters of FSRPAUEC")
        bits |= pk.FLAG_BITS[ch]
    return bits


class PatternRules(_Model):
    """The meter rules the pattern is run with (what helper A's MeterRules and a meter's spec
    take): timeouts in whole seconds, FIN/RST expiry, the table size, the VLAN in the key."""

    idle_timeout: Duration
    active_timeout: Duration
    tcp_end: bool = True
    max_flows: int | None = Field(None, ge=1, description="The flow table size; null: no limit.")
    key_vlan: bool = False

    _whole = field_validator("idle_timeout", "active_timeout")(_whole_seconds)


class PatternFlow(_Model):
    """One unidirectional flow: its key and how its packets are framed."""

    proto: Literal["tcp", "udp", "icmp", "icmpv6"]
    src: str
    dst: str
    sport: int = Field(0, ge=0, le=65535)
    dport: int = Field(0, ge=0, le=65535)
    icmp_type: int = Field(8, ge=0, le=255, description="ICMP/ICMPv6 only.")
    icmp_code: int = Field(0, ge=0, le=255)
    vlan: list[int] = Field([], max_length=2, description="802.1Q ids, outer first.")
    outer_tpid: Literal[0x8100, 0x88A8] = 0x8100
    ext: list[Literal["hop-by-hop", "destination", "routing", "fragment"]] = Field(
        [], description="IPv6 extension headers before the upper layer, in order."
    )

    @field_validator("src", "dst")
    @classmethod
    def _address(cls, v: str) -> str:
        try:
            a = ipaddress.ip_address(v)
        except ValueError:
            raise ValueError("expected an IPv4 or IPv6 address") from None
        if not any(a in n for n in BENCHMARK_NETWORKS):
            raise ValueError("patterns use 198.18.0.0/15 and 2001:db8::/32 only")
        return a.compressed

    @field_validator("vlan")
    @classmethod
    def _vlan_ids(cls, v: list[int]) -> list[int]:
        if any(not 1 <= t <= 4094 for t in v):
            raise ValueError("a VLAN id is 1 to 4094")
        return v

    @property
    def ipv6(self) -> bool:
        return ":" in self.src


class PacketGroup(_Model):
    """`repeat` packets of `flow`, the first at `at`, then one every `every`."""

    flow: str
    at: Duration
    size: int | None = Field(None, ge=20, le=65535, description="L3 bytes of each packet.")
    repeat: int = Field(1, ge=1, le=1_000_000)
    every: Duration = 0
    flags: str = Field("", description="TCP flags, letters of FSRPAUEC.")
    snap: int | None = Field(None, ge=14, description="Bytes of each frame kept in the capture.")
    fragments: list[int] | None = Field(
        None,
        min_length=2,
        description="One datagram cut into fragments: each one's bytes after the IP header "
        "(IPv6: after the fragment header), all but the last a multiple of 8.",
    )
    fragment_every: Duration = 1_000_000

    _times = field_validator("at", "every", "fragment_every")(_microseconds)

    @field_validator("flags")
    @classmethod
    def _flag_letters(cls, v: str) -> str:
        _flags(v)
        return v


class Pattern(_Model):
    name: str
    artifact: str = Field(description="The artifact (Hofstede et al., PAM 2013) it exposes.")
    exposes: str = Field(description="What a non-conforming meter exports instead.")
    rules: PatternRules
    start: int = Field(DEFAULT_START_S, ge=0, description="t = 0, in seconds since the epoch.")
    order: Literal["time", "file"] = Field(
        "time",
        description="`time`: the packets sorted by time (stable); `file`: as listed, so a time "
        "may be earlier than the one before (out-of-order timestamps).",
    )
    flows: dict[str, PatternFlow] = Field(min_length=1)
    packets: list[PacketGroup] = Field(min_length=1)

    def meter_rules(self) -> MeterRules:
        """The rules as analysis.flowmeter's MeterRules (what the reference takes)."""
        r = self.rules
        return MeterRules(
            idle_timeout_ns=r.idle_timeout,
            active_timeout_ns=r.active_timeout,
            key_vlan=r.key_vlan,
            tcp_end=r.tcp_end,
            max_flows=r.max_flows,
        )


class ExpectedRecord(_Model):
    """One record a conforming meter exports; times are durations from the pattern's start."""

    src: str
    dst: str
    sport: int = Field(0, ge=0, le=65535)
    dport: int = Field(0, ge=0, le=65535)
    proto: int = Field(ge=0, le=255)
    vlan: int = Field(0, ge=0, le=4095)
    packets: int = Field(ge=1)
    bytes: int = Field(ge=0)
    first: Duration
    last: Duration
    flags: str = ""
    end: Literal["idle", "active", "fin", "rst", "evicted", "eof"]
    expire: Duration

    @field_validator("flags")
    @classmethod
    def _flag_letters(cls, v: str) -> str:
        _flags(v)
        return v


class Expected(_Model):
    records: list[ExpectedRecord] = Field(min_length=1)


# --------------------------------------------------------------------------------------------
# Reading, with FILE:LINE problems


def _read(path: Path, what: str) -> tuple[Any, str]:
    try:
        text = read_bounded(path, MAX_BYTES, what, "describe repeated packets with `repeat`")
        return read_yaml(text, str(path)), text
    except YamlProblem as exc:
        raise PatternError(exc.problems) from None
    except BadInput as exc:  # read_bounded's: one line naming the path
        raise PatternError([str(exc)]) from None


def _validate(model: type[_Model], data: Any, text: str, file: str) -> Any:
    if not isinstance(data, dict):
        raise PatternError([f"{file}:1: (top level): expected a mapping"])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = yaml_lines(text)
        problems = [format_error(e, file, lines, model) for e in exc.errors(include_url=False)]
        problems.sort(key=lambda p: int(p[len(file) + 1 :].split(":", 1)[0]))
        raise PatternError(problems) from None


def _line(lines: dict[tuple[Any, ...], int], loc: tuple[Any, ...]) -> int:
    probe = loc
    while probe and probe not in lines:
        probe = probe[:-1]
    return lines.get(probe + ("__value__",)) or lines.get(probe, 1)


def _cross_problems(p: Pattern) -> list[tuple[tuple[Any, ...], str]]:
    """What the field checks cannot see: flows named, headers fitting the sizes."""
    out: list[tuple[tuple[Any, ...], str]] = []
    for name, f in p.flows.items():
        loc: tuple[Any, ...] = ("flows", name)
        if f.ipv6 != (":" in f.dst):
            out.append((loc + ("dst",), "src and dst must both be IPv4 or both IPv6"))
        if f.proto == "icmp" and f.ipv6 or f.proto == "icmpv6" and not f.ipv6:
            out.append((loc + ("proto",), "icmp is IPv4's, icmpv6 IPv6's"))
        if f.ext and not f.ipv6:
            out.append((loc + ("ext",), "extension headers are IPv6's"))
        if f.proto in ("icmp", "icmpv6") and (f.sport or f.dport):
            out.append((loc + ("dport",), "ICMP has no ports: give icmp_type and icmp_code"))
    for i, g in enumerate(p.packets):
        loc = ("packets", i)
        if g.flow not in p.flows:
            out.append((loc + ("flow",), f"no flow `{g.flow}` (flows: {', '.join(p.flows)})"))
            continue
        f = p.flows[g.flow]
        if g.flags and f.proto != "tcp":
            out.append((loc + ("flags",), f"flags are TCP's; flow `{g.flow}` is {f.proto}"))
        head = (40 if f.ipv6 else 20) + sum(EXT_HEADER[e] for e in f.ext)
        if g.fragments is None:
            if g.size is None:
                out.append((loc, "give `size` (L3 bytes) or `fragments`"))
            elif g.size < head + L4_HEADER[f.proto]:
                out.append(
                    (
                        loc + ("size",),
                        f"at least {head + L4_HEADER[f.proto]} bytes: the IP and "
                        f"{f.proto} headers of flow `{g.flow}`",
                    )
                )
        else:
            if g.size is not None:
                out.append((loc + ("size",), "a fragmented datagram's size is its `fragments`"))
            if f.ext:
                out.append((loc + ("fragments",), "fragments of a flow with `ext` are not made"))
            if any(x % 8 for x in g.fragments[:-1]) or min(g.fragments) < 8:
                out.append(
                    (loc + ("fragments",), "each fragment but the last: a multiple of 8 bytes")
                )
            elif g.fragments[0] < L4_HEADER[f.proto]:
                out.append((loc + ("fragments",), "the first fragment holds the whole L4 header"))
            elif sum(g.fragments) + head > 65535:
                out.append((loc + ("fragments",), "the datagram is over 65535 bytes"))
    return out


def load_pattern(folder: str | Path) -> Pattern:
    """The pattern of `folder/pattern.yaml`; PatternError with `FILE:LINE: field: message`."""
    path = Path(folder) / "pattern.yaml"
    data, text = _read(path, "pattern file")
    p = _validate(Pattern, data, text, str(path))
    problems = _cross_problems(p)
    if problems:
        lines = yaml_lines(text)
        raise PatternError(
            [f"{path}:{_line(lines, loc)}: {where(loc)}: {msg}" for loc, msg in problems]
        )
    return p


def load_expected(folder: str | Path) -> Expected:
    path = Path(folder) / "expected.yaml"
    data, text = _read(path, "expectation file")
    return _validate(Expected, data, text, str(path))


def pattern_folders(names: list[str] | None = None) -> list[Path]:
    """The shipped pattern folders (sorted), or those named; PatternError for an unknown name."""
    known = sorted(d for d in PATTERNS_DIR.iterdir() if (d / "pattern.yaml").is_file())
    if names is None:
        return known
    by_name = {d.name: d for d in known}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise PatternError(
            [f"unknown pattern {', '.join(missing)} (patterns: {', '.join(by_name)})"]
        )
    return [by_name[n] for n in names]


# --------------------------------------------------------------------------------------------
# The record table of an expectation


def expected_records(folder: str | Path, start: int | None = None) -> pa.Table:
    """`folder/expected.yaml` as a reference record table (the columns of
    docs/flowmeters.md: record columns + `end` + `expire_ns`), times in ns since the epoch."""
    if start is None:
        start = load_pattern(folder).start
    base = start * NS_PER_S
    rows = [
        {
            "src": r.src,
            "dst": r.dst,
            "sport": r.sport,
            "dport": r.dport,
            "proto": r.proto,
            "vlan": r.vlan,
            "packets": r.packets,
            "bytes": r.bytes,
            "first_ns": base + r.first,
            "last_ns": base + r.last,
            "tcp_flags": _flags(r.flags),
            "end": r.end,
            "expire_ns": base + r.expire,
        }
        for r in load_expected(folder).records
    ]
    return records_table(rows, REFERENCE_SCHEMA)


# --------------------------------------------------------------------------------------------
# The capture


@dataclass
class _FlowState:
    ident: int
    seq: int


def _l4(f: PatternFlow, s: bytes, d: bytes, st: _FlowState, flags: int, data: bytes) -> bytes:
    if f.proto == "tcp":
        ack = 0x10000 if flags & pk.ACK else 0
        seg = pk.tcp(s, d, f.sport, f.dport, st.seq, ack, flags, data)
        st.seq += len(data) + (1 if flags & (pk.SYN | pk.FIN) else 0)
        return seg
    if f.proto == "udp":
        return pk.udp(s, d, f.sport, f.dport, data)
    if f.icmp_type in (ICMP_ERRORS if f.proto == "icmp" else ICMPV6_ERRORS):
        # an error quotes the packet that caused it: one from the receiver, to some port
        quoted = pk.ip(d, s, 17, pk.udp(d, s, 40000, 33434, bytes(8)))
        data = (quoted + data)[: len(data)]
        ident = 0
    else:
        ident = st.ident & 0xFFFF
    if f.proto == "icmp":
        return pk.icmp(f.icmp_type, f.icmp_code, ident, 0, data)
    return pk.icmpv6(s, d, f.icmp_type, f.icmp_code, ident, 0, data)


def _ipv6_chain(f: PatternFlow, d: bytes, upper: int) -> tuple[int, bytes]:
    """(first next-header value, the extension headers) in front of the upper layer."""
    nxt, out = upper, b""
    for e in reversed(f.ext):
        if e == "routing":
            out = pk.ipv6_routing_header(nxt, d) + out
            nxt = pk.IP6_ROUTING
        elif e == "fragment":
            out = pk.ipv6_fragment_header(nxt, 0, False, 0x1234) + out
            nxt = pk.IP6_FRAGMENT
        else:
            out = pk.ipv6_options_header(nxt) + out
            nxt = pk.IP6_HOP_BY_HOP if e == "hop-by-hop" else pk.IP6_DEST_OPTIONS
    return nxt, out


def _frame(f: PatternFlow, ip_packet: bytes) -> bytes:
    frame = pk.ether(ip_packet, True)
    return pk.vlan_tagged(frame, f.vlan, f.outer_tpid) if f.vlan else frame


def frames(p: Pattern) -> list[tuple[int, bytes, int]] | Iterator[tuple[int, bytes, int]]:
    """(time ns since the epoch, captured bytes, length on the wire) of every packet, in the
    capture's order (`order`: by time, or as listed)."""
    if p.order == "time":
        return sorted(_listed(p), key=lambda x: x[0])
    return _listed(p)


def _listed(p: Pattern) -> Iterator[tuple[int, bytes, int]]:
    base = p.start * NS_PER_S
    states = {
        name: _FlowState(ident=(i + 1) * 1000, seq=(i + 1) * 100_000)
        for i, name in enumerate(p.flows)
    }
    for g in p.packets:
        f = p.flows[g.flow]
        st = states[g.flow]
        s, d = pk.addr(f.src), pk.addr(f.dst)
        upper = PROTOCOLS[f.proto]
        flags = _flags(g.flags)
        head = (40 if f.ipv6 else 20) + sum(EXT_HEADER[e] for e in f.ext)
        cached: bytes | None = None
        for r in range(g.repeat):
            t = base + g.at + r * g.every
            st.ident += 1
            if g.fragments is not None:
                seg = _l4(f, s, d, st, flags, bytes(sum(g.fragments) - L4_HEADER[f.proto]))
                off = 0
                for k, n in enumerate(g.fragments):
                    piece, more = seg[off : off + n], k < len(g.fragments) - 1
                    if f.ipv6:
                        fh = pk.ipv6_fragment_header(upper, off, more, st.ident)
                        packet = pk.ipv6(s, d, pk.IP6_FRAGMENT, fh + piece)
                    else:
                        packet = pk.ipv4(s, d, upper, piece, st.ident, frag=pk.ipv4_frag(off, more))
                    frame = _frame(f, packet)
                    yield t + k * g.fragment_every, frame, len(frame)
                    off += n
                continue
            assert g.size is not None
            if cached is None or f.proto == "tcp":
                seg = _l4(f, s, d, st, flags, bytes(g.size - head - L4_HEADER[f.proto]))
                if f.proto != "tcp":
                    cached = seg
            else:
                seg = cached
            if f.ipv6:
                nxt, chain = _ipv6_chain(f, d, upper)
                packet = pk.ipv6(s, d, nxt, chain + seg)
            else:
                packet = pk.ipv4(s, d, upper, seg, st.ident)
            frame = _frame(f, packet)
            if g.snap is not None and g.snap < len(frame):
                yield t, frame[: g.snap], len(frame)
            else:
                yield t, frame, len(frame)


def write_pcap(pattern: Pattern, path: str | Path) -> Path:
    """The pattern's capture (microsecond pcap, Ethernet), written whole or not at all; its path."""
    path = Path(path)
    with replacing(path) as tmp, open(tmp, "wb") as fh:
        w = pk.PcapWriter(fh, snaplen=65535 + 14 + 8)
        for t, frame, wire in frames(pattern):
            w.write(t, frame, wire)
    return path


def packet_count(pattern: Pattern) -> int:
    return sum(g.repeat * (len(g.fragments) if g.fragments else 1) for g in pattern.packets)
