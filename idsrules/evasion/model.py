"""The contract of an evasion variant: how an attack session's bytes go on the wire.

A variant class (a module of this package) turns the plain session, a list of messages
`(from_client, bytes)`, into a `WirePlan`: the same messages, each client message cut into `Seg`s
(TCP segments or UDP datagrams) with the tricks of the class (segments out of order or
overlapping with other bytes, IP fragments, a TTL that expires before the host, a bad checksum,
urgent data, an old timestamp...). Positions are relative (`Seg.off` counts from the first byte
after the SYN), so one plan is rendered both offline, with fixed initial sequence numbers
(`render`), and live against a real host, with the sequence number its kernel chose
(`client_packets` with a `Conn` of that connection). Nothing here knows what a host does with
the tricks: that is measured (docs/ids-coverage.md, "Evasion variants").
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from ntgcore import packets as P

from .appview import TooLarge, meaning

MSS = 1400
TS_OPTION = 8  # TCP option kind: timestamps (RFC 7323)
IP6_EXT = (P.IP6_HOP_BY_HOP, P.IP6_DEST_OPTIONS, P.IP6_ROUTING)
T = TypeVar("T")


def evolve(obj: T, **changes: object) -> T:
    """A copy of the frozen plan object `obj` (a Frag, Seg, Step or WirePlan) with `changes`:
    `dataclasses.replace` without its work per field on every call (it was half the time of
    making the variants, which make millions of segments). None of these classes has an
    `__init__` of its own or a `__post_init__`; an unknown field is a TypeError, as there."""
    fields = obj.__dataclass_fields__  # type: ignore[attr-defined]
    if not changes.keys() <= fields.keys():
        raise TypeError(
            f"{type(obj).__name__} has no field {sorted(changes.keys() - fields.keys())}"
        )
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(changes)
    return new


@dataclass(frozen=True)
class Frag:
    """One IP fragment of a segment's IP payload (the transport header and its data): `length`
    bytes from `offset` (a multiple of 8). `fill` is sent in place of the true bytes (an overlap
    that carries other data), as long as `length`."""

    offset: int
    length: int
    fill: bytes | None = None


@dataclass(frozen=True)
class Seg:
    """One client packet: a TCP segment, or a UDP datagram (`off` unused)."""

    off: int  # stream offset of data[0]: 0 is the first byte after the SYN
    data: bytes
    flags: int = P.ACK | P.PSH
    hops: int = 64  # IPv4 TTL, IPv6 hop limit
    bad_checksum: bool = False  # the transport checksum made wrong
    urgent: int = 0  # urgent pointer; URG is set when > 0
    ts_back: int = 0  # TSval this much older than the connection's clock (PAWS)
    seq_shift: int = 0  # added to the sequence number (a segment outside the window)
    frags: tuple[Frag, ...] = ()  # the IP packet sent as these fragments, in this order
    ext: tuple[int, ...] = ()  # IPv6 extension headers ahead of the fragment/transport header
    atomic: bool = False  # IPv6: a fragment header with offset 0 and no more fragments


@dataclass(frozen=True)
class Step:
    """One message of the session: `data` as the session means it; for the client, `segs` say
    how it goes on the wire (empty: plain segments of at most MSS bytes)."""

    from_client: bool
    data: bytes
    segs: tuple[Seg, ...] = ()


@dataclass(frozen=True)
class WirePlan:
    """One variant of one session. `variant` names it in the results (`tcp-overlap-new`),
    `cls` is its class (`tcp-overlap`), `seed` what it was drawn from (the same seed, the same
    plan). With `timestamps` the client offers TCP timestamps in its SYN (PAWS needs them)."""

    variant: str
    cls: str
    seed: int
    proto: str  # tcp | udp
    steps: tuple[Step, ...]
    timestamps: bool = False
    note: str = ""
    family: int = 0  # 6: the session is sent over IPv6 whatever its rule's (IPv6 classes)
    # An application-level variant (other bytes, the same request: appview.py): the application
    # that reads them (http, smtp, ftp) and the plain client stream they stand for.
    app: str = ""
    meant: bytes = b""

    def client_stream(self) -> bytes:
        """The bytes the client means to deliver, in order: what a host that got the attack
        hands its application."""
        return b"".join(s.data for s in self.steps if s.from_client)


def reached(plan: WirePlan, received: bytes) -> bool:
    """Whether a host whose server application read `received` (a TCP stream) got the attack:
    the client's bytes arrived whole; for an application-level variant (`plan.app`), the
    application read the same request as from the plain session (`appview.meaning`; a body
    beyond appview.MAX_BODY is not the same)."""
    if not plan.app:
        return plan.client_stream() in received
    try:
        return meaning(plan.app, received) == meaning(plan.app, plan.meant)
    except TooLarge:
        return False


def wire_end(segs: tuple[Seg, ...] | list[Seg]) -> int:
    """The stream offset after the last byte these segments put in sequence space (segments
    moved out of it by `seq_shift` do not count); acknowledgements and the FIN follow it."""
    return max((s.off + len(s.data) for s in segs if not s.seq_shift), default=0)


def plain_plan(proto: str, messages: list[tuple[bool, bytes]], seed: int = 0) -> WirePlan:
    """The session as it is without a trick (the reference every variant is compared with)."""
    return WirePlan("plain", "plain", seed, proto, tuple(Step(fc, d) for fc, d in messages))


def plain_segs(data: bytes, off: int, mss: int = MSS) -> tuple[Seg, ...]:
    """`data` at stream offset `off` as segments of at most `mss` bytes (one empty: none)."""
    return tuple(Seg(off + i, data[i : i + mss]) for i in range(0, len(data), mss))


def client_segs(plan: WirePlan) -> Iterator[tuple[int, Step, tuple[Seg, ...]]]:
    """(stream offset, step, its segments) of each client step, the default segments filled in."""
    off = 0
    for step in plan.steps:
        if not step.from_client:
            continue
        segs = step.segs or (
            plain_segs(step.data, off) if plan.proto == "tcp" else (Seg(0, step.data),)
        )
        yield off, step, segs
        off += len(step.data)


# --- packets -------------------------------------------------------------------------------------


@dataclass
class Conn:
    """One connection as the client sees it: addresses, ports, its initial sequence number, what
    it acknowledges (the server's next sequence number) and its timestamp clock."""

    client: bytes
    server: bytes
    cport: int
    sport: int
    cisn: int = 0
    ack: int = 0
    timestamps: bool = False
    ts: int = 1
    ts_echo: int = 0
    ident: int = field(default=0)

    def next_ident(self) -> int:
        self.ident = (self.ident + 1) & 0xFFFFFFFF
        return self.ident


def ts_option(val: int, echo: int) -> bytes:
    """NOP, NOP, timestamps (10 bytes): 12 bytes, as stacks send it."""
    return struct.pack("!BBBBII", 1, 1, TS_OPTION, 10, val & 0xFFFFFFFF, echo & 0xFFFFFFFF)


def syn_options(timestamps: bool, ts: int = 1) -> bytes:
    """MSS, and with `timestamps` the timestamps option, of a SYN."""
    mss = struct.pack("!BBH", 2, 4, MSS)
    return mss + (ts_option(ts, 0) if timestamps else b"")


def _bad(segment: bytes, csum_at: int) -> bytes:
    (c,) = struct.unpack_from("!H", segment, csum_at)
    return segment[:csum_at] + struct.pack("!H", c ^ 0x5A5A) + segment[csum_at + 2 :]


def transport(seg: Seg, conn: Conn, proto: str, *, syn: bool = False) -> bytes:
    """The TCP segment or UDP datagram of `seg`, from the client."""
    c, s = conn.client, conn.server
    if proto == "udp":
        d = P.udp(c, s, conn.cport, conn.sport, seg.data)
        return _bad(d, 6) if seg.bad_checksum else d
    if syn:
        opts = syn_options(conn.timestamps, conn.ts)
    elif conn.timestamps:
        opts = ts_option(conn.ts - seg.ts_back, conn.ts_echo)
    else:
        opts = b""
    flags = seg.flags | (P.URG if seg.urgent else 0)
    seq = conn.cisn + (0 if syn else 1 + seg.off) + seg.seq_shift
    t = P.tcp(
        c,
        s,
        conn.cport,
        conn.sport,
        seq,
        conn.ack if flags & P.ACK else 0,
        flags,
        seg.data,
        urgent=seg.urgent,
        options=opts,
    )
    return _bad(t, 16) if seg.bad_checksum else t


def _ext_header(kind: int, nxt: int, dst: bytes) -> bytes:
    if kind == P.IP6_ROUTING:
        return P.ipv6_routing_header(nxt, dst)
    return P.ipv6_options_header(nxt)


def ip_packets(seg: Seg, conn: Conn, l4: bytes, proto_num: int) -> list[bytes]:
    """`l4` in IP packets from the client: whole, or as `seg.frags` (IPv6: with `seg.ext`
    ahead, and an atomic fragment header with `seg.atomic`)."""
    c, s = conn.client, conn.server
    if len(c) == 4:
        if not seg.frags:
            return [P.ipv4(c, s, proto_num, l4, conn.next_ident() & 0xFFFF, seg.hops)]
        ident = conn.next_ident() & 0xFFFF
        out = []
        for f in seg.frags:
            chunk = f.fill if f.fill is not None else l4[f.offset : f.offset + f.length]
            more = f.offset + f.length < len(l4)
            frag = P.ipv4_frag(f.offset, more)
            out.append(P.ipv4(c, s, proto_num, chunk, ident, seg.hops, frag))
        return out
    fragmented = bool(seg.frags) or seg.atomic
    chain = [*seg.ext, *([P.IP6_FRAGMENT] if fragmented else []), proto_num]
    ext = b"".join(_ext_header(k, chain[i + 1], s) for i, k in enumerate(seg.ext))
    first = chain[0]
    if not fragmented:
        return [P.ipv6(c, s, first, ext + l4, hops=seg.hops)]
    ident = conn.next_ident()
    if seg.atomic and not seg.frags:
        fh = P.ipv6_fragment_header(proto_num, 0, False, ident)
        return [P.ipv6(c, s, first, ext + fh + l4, hops=seg.hops)]
    out = []
    for f in seg.frags:
        chunk = f.fill if f.fill is not None else l4[f.offset : f.offset + f.length]
        more = f.offset + f.length < len(l4)
        fh = P.ipv6_fragment_header(proto_num, f.offset, more, ident)
        out.append(P.ipv6(c, s, first, ext + fh + chunk, hops=seg.hops))
    return out


def client_packets(seg: Seg, conn: Conn, proto: str, *, syn: bool = False) -> list[bytes]:
    """The IP packets of one client `Seg` on connection `conn`."""
    num = 17 if proto == "udp" else 6
    return ip_packets(seg, conn, transport(seg, conn, proto, syn=syn), num)


# --- offline rendering ----------------------------------------------------------------------------


def render(
    plan: WirePlan, client: str, server: str, cport: int, sport: int, seed: int
) -> Iterator[tuple[bool, bytes]]:
    """The plan as (from the client, Ethernet frame) of one session, offline: handshake (TCP),
    each client step's packets followed by the server's acknowledgement of the whole step (what a
    host that took the intended bytes acknowledges), each server step as segments the client
    acknowledges, FIN both ways. Initial sequence numbers come from `seed`. The definition of
    the offline frames: captures are laid out by the native renderer (`native.py`), which
    tests/test_wire_render.py holds equal to this, byte for byte."""
    conn = Conn(P.addr(client), P.addr(server), cport, sport, timestamps=plan.timestamps)
    conn.cisn = P.initial_seq(seed)
    sisn = (conn.cisn ^ 0x5A5A5A5A) & 0xFFFFFFFF
    if plan.proto == "udp":
        yield from _render_udp(plan, conn)
        return
    sseq, server_ack = sisn, conn.cisn + 1  # the server's next sequence number, what it acks

    def from_server(flags: int, data: bytes = b"", syn: bool = False) -> bytes:
        nonlocal sseq
        conn.ts_echo = conn.ts
        opts = (struct.pack("!BBH", 2, 4, MSS) if syn else b"") + (
            ts_option(conn.ts + 1000, conn.ts) if conn.timestamps else b""
        )
        t = P.tcp(
            conn.server,
            conn.client,
            sport,
            cport,
            sseq,
            server_ack,
            flags,
            data,
            options=opts,
        )
        sseq += len(data) + (1 if flags & (P.SYN | P.FIN) else 0)
        return P.ether(P.ip(conn.server, conn.client, 6, t, conn.next_ident() & 0xFFFF), False)

    def from_client(seg: Seg, syn: bool = False) -> Iterator[tuple[bool, bytes]]:
        conn.ts += 1
        for pkt in client_packets(seg, conn, "tcp", syn=syn):
            yield True, P.ether(pkt, True)

    yield from from_client(Seg(0, b"", P.SYN), syn=True)
    yield False, from_server(P.SYN | P.ACK, syn=True)
    conn.ack = sseq
    conn.ts_echo = conn.ts + 1000
    yield from from_client(Seg(0, b"", P.ACK))
    end = 0
    client_steps = client_segs(plan)  # in the order of the client's steps
    for step in plan.steps:
        if step.from_client:
            _off, _step, segs = next(client_steps)
            for seg in segs:
                yield from from_client(seg)
            end = max(end, wire_end(segs))
            server_ack = conn.cisn + 1 + end
            yield False, from_server(P.ACK)
        else:
            for i in range(0, len(step.data), MSS):
                yield False, from_server(P.ACK | P.PSH, step.data[i : i + MSS])
                conn.ack = sseq
                yield from from_client(Seg(end, b"", P.ACK))
    yield from from_client(Seg(end, b"", P.FIN | P.ACK))
    server_ack = conn.cisn + 2 + end
    yield False, from_server(P.FIN | P.ACK)
    conn.ack = sseq
    yield from from_client(Seg(end + 1, b"", P.ACK))


def _render_udp(plan: WirePlan, conn: Conn) -> Iterator[tuple[bool, bytes]]:
    segs_by_step = {id(step): segs for _off, step, segs in client_segs(plan)}
    for step in plan.steps:
        if step.from_client:
            for seg in segs_by_step[id(step)]:
                for pkt in client_packets(seg, conn, "udp"):
                    yield True, P.ether(pkt, True)
        else:
            d = P.udp(conn.server, conn.client, conn.sport, conn.cport, step.data)
            yield False, P.ether(P.ip(conn.server, conn.client, 17, d, conn.next_ident()), False)


def with_segs(plan: WirePlan, variant: str, cls: str, make, **kw) -> WirePlan:
    """`plan` with every client step's segments replaced by `make(off, data)`."""
    steps = []
    off = 0
    for step in plan.steps:
        if step.from_client:
            steps.append(evolve(step, segs=tuple(make(off, step.data))))
            off += len(step.data)
        else:
            steps.append(step)
    return evolve(plan, variant=variant, cls=cls, steps=tuple(steps), **kw)


# --- as JSON (a plan handed to another process) ---------------------------------------------------


def plan_to_dict(plan: WirePlan) -> dict:
    """The plan as JSON-ready data (bytes as hex)."""

    def seg(s: Seg) -> dict:
        d = dict(s.__dict__)
        d["data"] = s.data.hex()
        d["frags"] = [
            {
                "offset": f.offset,
                "length": f.length,
                "fill": None if f.fill is None else f.fill.hex(),
            }
            for f in s.frags
        ]
        d["ext"] = list(s.ext)
        return d

    return {
        "variant": plan.variant,
        "cls": plan.cls,
        "seed": plan.seed,
        "proto": plan.proto,
        "timestamps": plan.timestamps,
        "note": plan.note,
        "family": plan.family,
        "app": plan.app,
        "meant": plan.meant.hex(),
        "steps": [
            {
                "from_client": st.from_client,
                "data": st.data.hex(),
                "segs": [seg(s) for s in st.segs],
            }
            for st in plan.steps
        ],
    }


def plan_from_dict(d: dict) -> WirePlan:
    """The inverse of `plan_to_dict`."""

    def seg(x: dict) -> Seg:
        frags = tuple(
            Frag(f["offset"], f["length"], None if f["fill"] is None else bytes.fromhex(f["fill"]))
            for f in x["frags"]
        )
        fields = {k: v for k, v in x.items() if k not in ("data", "frags", "ext")}
        return Seg(data=bytes.fromhex(x["data"]), frags=frags, ext=tuple(x["ext"]), **fields)

    steps = tuple(
        Step(st["from_client"], bytes.fromhex(st["data"]), tuple(seg(s) for s in st["segs"]))
        for st in d["steps"]
    )
    return WirePlan(
        d["variant"],
        d["cls"],
        d["seed"],
        d["proto"],
        steps,
        d["timestamps"],
        d.get("note", ""),
        d.get("family", 0),
        d.get("app", ""),
        bytes.fromhex(d.get("meant", "")),
    )
