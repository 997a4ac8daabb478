"""`generator: trex` with `mode: astf` offline (no `testbed:` section): the ASTF profile's TCP
connections written as packets into `capture.pcap`, as TRex would play them, by our own TCP
session writer (ntgcore.packets.tcp_session, the one the attack sessions use); no server.

Per template (astf_profile.TemplateSpec): `limit` connections, the k-th opened at k/cps
(TRex opens them at random times, `cps` a second on average: ours is that mean schedule,
deterministic); client and server addresses taken in turn over their ranges (TRex's `seq`
distribution); the client port CLIENT_PORT_FIRST + (how many connections that client address
opened before, in this template and in the earlier templates of the same client range: the
dialogues of one `sessions:` entry share it), wrapping after 65535 (TRex's stack picks its own: 10942-63162 seen for 49
connections); each connection a full session: handshake, the template's messages in order cut
into MSS-sized segments, each ACKed, FIN both ways. Within a session the segments follow each
other SEGMENT_GAP_NS apart; sessions overlap in time and their packets are merged in time order. Streaming: a heap holds the sessions open at the current time and one next
start per template, never all connections (a template may have MAX_CONNECTIONS)."""

from __future__ import annotations

import heapq
import ipaddress
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

from ntgcore import packets as P
from ntgcore.generator import Counters, Progress

from .astf_profile import NS, AstfProfile, TemplateSpec

MSS = 1460  # TRex's default tcp.mss
SEGMENT_GAP_NS = 20_000  # 20 µs between the segments of one connection
CLIENT_PORT_FIRST = 1025  # the client ports: 1025-65535 per client address, in turn
CLIENT_PORTS = 65535 - CLIENT_PORT_FIRST + 1
PROGRESS_EVERY = 8192
HEADERS = 14 + 20 + 20  # Ethernet, IPv4, TCP without options


def connection_start_ns(t: TemplateSpec, k: int) -> int:
    return round(k * NS / t.cps)


def connection_seed(seed: int, template: int, k: int) -> int:
    """The seed of connection k of a template (its ISNs and IPv4 ids): the scenario's seed mixed in."""
    return ((seed * 1_000_003 + template) * 10_000_019 + k + 1) & 0xFFFFFFFFFFFF


class TemplatePlan:
    """One template's connections: addresses, ports, start times, payloads (decoded once)."""

    def __init__(self, index: int, t: TemplateSpec, port_offset: int = 0) -> None:
        self.index, self.t, self.port_offset = index, t, port_offset
        self.client0 = int(ipaddress.IPv4Address(t.client[0]))
        self.nclients = int(ipaddress.IPv4Address(t.client[1])) - self.client0 + 1
        self.server0 = int(ipaddress.IPv4Address(t.server[0]))
        self.nservers = int(ipaddress.IPv4Address(t.server[1])) - self.server0 + 1
        self.messages = [(bool(c), bytes.fromhex(h)) for c, h in t.messages]

    def session(self, k: int, seed: int, macs: tuple[bytes, bytes]) -> Iterator[tuple[bool, bytes]]:
        client = (self.client0 + k % self.nclients).to_bytes(4, "big")
        server = (self.server0 + k % self.nservers).to_bytes(4, "big")
        cport = CLIENT_PORT_FIRST + (self.port_offset + k // self.nclients) % CLIENT_PORTS
        return P.tcp_session(
            client,
            server,
            cport,
            self.t.port,
            self.messages,
            mss=MSS,
            seed=connection_seed(seed, self.index, k),
            macs=macs,
        )


def astf_frames(
    profile: AstfProfile, seed: int, macs: tuple[bytes, bytes]
) -> Iterator[tuple[int, bytes]]:
    """(time in ns from 0, Ethernet frame) of every connection of `profile`, in time order (ties:
    the order they were scheduled in)."""
    plans = []
    used: dict[tuple[str, str], int] = {}  # client ports taken per client range so far
    for i, t in enumerate(profile.templates):
        offset = used.get(t.client, 0)
        plan = TemplatePlan(i, t, offset)
        used[t.client] = offset + -(-t.limit // plan.nclients)
        plans.append(plan)
    order = itertools.count()
    # (time, order, plan, k, None): connection k of plan opens; (time, order, None, 0, frames):
    # the next frame of an open connection
    heap: list = [(0, next(order), p, 0, None) for p in plans if p.t.limit > 0]
    heapq.heapify(heap)
    while heap:
        t, _o, plan, k, frames = heapq.heappop(heap)
        if plan is not None:
            if k + 1 < plan.t.limit:
                heapq.heappush(
                    heap, (connection_start_ns(plan.t, k + 1), next(order), plan, k + 1, None)
                )
            frames = plan.session(k, seed, macs)
        frame = next(frames, None)
        if frame is None:
            continue
        yield t, frame[1]
        heapq.heappush(heap, (t + SEGMENT_GAP_NS, next(order), None, 0, frames))


class AstfOfflineExpansion:
    """Writes the capture (nanosecond pcap, stamped from 0 like the stateless expansion's)."""

    def __init__(
        self, profile: AstfProfile, run_dir: Path, seed: int, macs: tuple[str, str]
    ) -> None:
        self.profile = profile
        self.path = Path(run_dir) / "capture.pcap"
        self.seed = seed
        self.macs = (P.mac(macs[0]), P.mac(macs[1]))
        self.packets = 0
        self.bytes = 0

    def run(self, on_progress: Callable[[Progress], None] | None = None) -> str:
        total = self.profile.expected_seconds
        with open(self.path, "wb") as out:
            w = P.PcapWriter(out, nanosecond=True)
            for t, frame in astf_frames(self.profile, self.seed, self.macs):
                w.write(t, frame)
                if on_progress is not None and w.packets % PROGRESS_EVERY == 0:
                    on_progress(Progress(t / 1e9, total, w.packets))
                    self.packets, self.bytes = w.packets, w.bytes
            self.packets, self.bytes = w.packets, w.bytes
        if on_progress is not None:
            on_progress(Progress(total, total, self.packets))
        return "completed"

    def counters(self) -> Counters:
        return Counters(self.packets, self.packets, 0, self.bytes, self.bytes, 0)


def packets_per_connection(t: TemplateSpec) -> int:
    """What tcp_session writes for one connection of `t`: 3 + 2 per segment + 3."""
    segments = sum(max(1, (len(h) // 2 + MSS - 1) // MSS) for _c, h in t.messages)
    return 6 + 2 * segments


def expected_capture(profile: AstfProfile) -> dict:
    """The capture's counts (ntgcore.expected.expected's keys; a flow: one direction of a
    connection) and `what`, `testbed validate`'s line."""
    packets = sum(t.limit * packets_per_connection(t) for t in profile.templates)
    payload = sum(t.limit * (t.request_bytes + t.response_bytes) for t in profile.templates)
    last = max(
        (
            connection_start_ns(t, t.limit - 1) + (packets_per_connection(t) - 1) * SEGMENT_GAP_NS
            for t in profile.templates
            if t.limit
        ),
        default=0,
    )
    what = (
        f"  offline (trex, mode astf): capture.pcap with {profile.connections:,} TCP connection(s) "
        f"of {len(profile.templates)} template(s), {packets:,} packets over {last / NS:g} s "
        f"(handshake, segments of at most {MSS} bytes each ACKed, FIN both ways; "
        f"generators/trex/README.md)"
    )
    return {
        "packets": packets,
        "bytes": HEADERS * packets + payload,
        "flows": 2 * profile.connections,
        "first_ns": 0,
        "last_ns": last,
        "what": what,
    }


__all__ = [
    "AstfOfflineExpansion",
    "astf_frames",
    "expected_capture",
    "packets_per_connection",
    "MSS",
    "CLIENT_PORT_FIRST",
    "SEGMENT_GAP_NS",
]
