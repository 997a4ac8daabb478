"""The raw client of live host labelling: `python -m testbed.ids.hostclient PLANS.json OUT.json`,
run inside the client namespace by `testbed.ids.hostlabel`.

The client's address is configured nowhere, so no kernel answers for it: this process is the
client's TCP. It plays each `WirePlan` as whole Ethernet frames on an AF_PACKET socket: SYN (with
the timestamps option when the plan asks), the server's SYN-ACK gives the server's initial
sequence number and clock, then each client step as the plan's segments (`client_packets`, in
order, a short gap between frames so that the veth keeps that order), each server step awaited
and acknowledged, and FIN both ways (a RST at the server's own sequence point when the server
never closes: a host that missed bytes waits for them forever). A second AF_PACKET socket sees
every frame of the interface, both directions, and writes them to the capture: the traffic the
host got, its real replies included.

PLANS.json: {"iface", "mac", "gw_mac", "client", "server", "capture", "gap_s",
"sessions": [{"cport", "sport", "plan": plan_to_dict(...)}]}. OUT.json: {"sessions": [{"cport",
"status", "server_data" (hex), "datagrams" (hex list), "fin", "detail"}], "frames"}.
"""

from __future__ import annotations

import json
import secrets
import select
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from idsrules.evasion.model import Conn, Seg, WirePlan, client_packets, client_segs, plan_from_dict
from ntgcore import packets as P

ETH_P_ALL = 3
SO_TIMESTAMPNS = 35  # linux/asm-generic/socket.h (SO_TIMESTAMPNS_OLD)
SYNACK_WAIT_S = 1.0  # the server's SYN-ACK
SERVER_QUIET_S = 0.5  # a server step: this long without new data ends the wait (the peer: 0.2)
FIN_WAIT_S = 0.5  # the server's FIN after ours
STUCK_S = 0.05  # after ours, the host's acknowledgement at rest this long short of it: no FIN
UDP_WAIT_S = 0.3  # a server datagram
TCP_OPT_TS = 8


@dataclass
class Packet:
    """One frame from the server, parsed: transport protocol, ports and the segment's fields."""

    proto: int
    sport: int
    dport: int
    seq: int = 0
    ack: int = 0
    flags: int = 0
    tsval: int | None = None
    payload: bytes = b""


def parse(frame: bytes, server: bytes, client: bytes) -> Packet | None:
    """A frame from `server` to `client` (TCP or UDP, not a fragment), or None."""
    if len(frame) < 14:
        return None
    (etype,) = struct.unpack_from("!H", frame, 12)
    ip = frame[14:]
    if etype == P.ETH_IPV4 and len(ip) >= 20 and len(server) == 4:
        ihl = (ip[0] & 0x0F) * 4
        (total, frag) = struct.unpack_from("!H2xH", ip, 2)
        if frag & 0x3FFF or ip[12:16] != server or ip[16:20] != client:
            return None
        proto, l4 = ip[9], ip[ihl:total]
    elif etype == P.ETH_IPV6 and len(ip) >= 40 and len(server) == 16:
        (plen,) = struct.unpack_from("!H", ip, 4)
        if ip[8:24] != server or ip[24:40] != client:
            return None
        proto, l4 = ip[6], ip[40 : 40 + plen]
    else:
        return None
    if proto == 17 and len(l4) >= 8:
        sport, dport = struct.unpack_from("!HH", l4)
        return Packet(17, sport, dport, payload=l4[8:])
    if proto != 6 or len(l4) < 20:
        return None
    sport, dport, seq, ack, off, flags = struct.unpack_from("!HHIIBB", l4)
    hlen = (off >> 4) * 4
    return Packet(6, sport, dport, seq, ack, flags, _tsval(l4[20:hlen]), l4[hlen:])


def _tsval(opts: bytes) -> int | None:
    i = 0
    while i < len(opts):
        kind = opts[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= len(opts) or opts[i + 1] < 2:
            break
        if kind == TCP_OPT_TS and opts[i + 1] == 10 and i + 10 <= len(opts):
            return int(struct.unpack_from("!I", opts, i + 2)[0])
        i += opts[i + 1]
    return None


class Wire:
    """The two packet sockets on the client's interface and the capture they feed."""

    def __init__(self, iface: str, capture: Path, macs: tuple[bytes, bytes]) -> None:
        self.macs = macs  # (client, gateway)
        self.tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        self.tx.bind((iface, 0))
        self.rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.rx.bind((iface, ETH_P_ALL))
        self.rx.setblocking(False)
        self.file = open(capture, "wb")
        self.pcap = P.PcapWriter(self.file, nanosecond=True)
        self.handler: Callable[[Packet], None] | None = None
        self.peer: tuple[bytes, bytes] = (b"", b"")  # (server, client) the handler wants

    def send(self, ip_packet: bytes) -> None:
        self.tx.send(P.ether(ip_packet, True, self.macs))

    def pump(self, timeout: float) -> int:
        """Read what arrives within `timeout` s (then all that is queued): capture every frame,
        hand the server's to the handler. Returns how many the handler got."""
        handled = 0
        ready, _, _ = select.select([self.rx], [], [], max(timeout, 0))
        while ready:
            try:
                data, anc, _flags, address = self.rx.recvmsg(65600, 64)
            except BlockingIOError:
                break
            ts = time.time_ns()
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                    sec, nsec = struct.unpack_from("qq", raw)
                    ts = sec * 1_000_000_000 + nsec
            self.pcap.write(ts, data)
            if address[2] != socket.PACKET_OUTGOING and self.handler is not None:
                pkt = parse(data, *self.peer)
                if pkt is not None:
                    self.handler(pkt)
                    handled += 1
        return handled

    def wait(self, done: Callable[[], bool], timeout: float, quiet: float | None = None) -> bool:
        """Pump until `done()`, `timeout` s, or `quiet` s without a frame for the handler."""
        start = last = time.monotonic()
        while not done():
            now = time.monotonic()
            if now - start >= timeout or (quiet is not None and now - last >= quiet):
                return False
            if self.pump(min(0.02, timeout - (now - start))):
                last = time.monotonic()
        return True

    def close(self) -> None:
        self.file.close()
        self.tx.close()
        self.rx.close()


@dataclass
class TcpState:
    synack: bool = False
    sisn: int = 0
    srv_ack: int | None = None  # the server's latest acknowledgement: its receive point
    data: bytearray = field(default_factory=bytearray)
    fin: bool = False
    rst: bool = False
    seen: int = 0  # the server's segments so far
    last: float = 0.0  # when the last came
    want: int = 0  # the server bytes the plan's server steps so far add up to


class Clock:
    """TCP timestamps in milliseconds, starting high enough for any `ts_back`."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self) -> int:
        return 1_000_000 + int((time.monotonic() - self.t0) * 1000)


def play_tcp(wire: Wire, plan: WirePlan, conn: Conn, gap: float, clock: Clock) -> dict:
    st = TcpState()

    def send(seg: Seg, syn: bool = False) -> None:
        conn.ts = clock()
        for i, pkt in enumerate(client_packets(seg, conn, "tcp", syn=syn)):
            if i:
                time.sleep(gap)
            wire.send(pkt)

    def stuck(end: int, seen_at_fin: int) -> bool:
        """The host answered our FIN, at rest since, at a point that is not our FIN's: it
        misses bytes before it (or took others), so it will not close."""
        return (
            st.seen > seen_at_fin
            and ack_point() not in (end, end + 1)
            and time.monotonic() - st.last >= STUCK_S
        )

    def ack_point() -> int:
        """The stream offset an acknowledgement carries: where the server is."""
        if st.srv_ack is None:
            return 0
        return (st.srv_ack - conn.cisn - 1) & 0xFFFFFFFF

    def on_packet(pkt: Packet) -> None:
        if pkt.proto != 6 or pkt.sport != conn.sport or pkt.dport != conn.cport:
            return
        st.seen += 1
        st.last = time.monotonic()
        if pkt.flags & P.RST:
            st.rst = True
            return
        if pkt.tsval is not None:
            conn.ts_echo = pkt.tsval
        if pkt.flags & P.ACK:
            st.srv_ack = pkt.ack
        if pkt.flags & P.SYN:
            if pkt.flags & P.ACK and not st.synack:
                st.synack, st.sisn = True, pkt.seq
            return
        if not st.synack:
            return
        if pkt.seq == conn.ack and (pkt.payload or pkt.flags & P.FIN):
            st.data += pkt.payload
            conn.ack = (conn.ack + len(pkt.payload)) & 0xFFFFFFFF
            if pkt.flags & P.FIN:
                conn.ack = (conn.ack + 1) & 0xFFFFFFFF
                st.fin = True
            send(Seg(ack_point(), b"", P.ACK))
        elif pkt.payload and ((conn.ack - pkt.seq) & 0xFFFFFFFF) < 0x80000000:
            send(Seg(ack_point(), b"", P.ACK))  # a retransmission: say again where we are

    wire.handler, wire.peer = on_packet, (conn.server, conn.client)
    send(Seg(0, b"", P.SYN), syn=True)
    if not wire.wait(lambda: st.synack or st.rst, SYNACK_WAIT_S) or st.rst:
        return {"status": "no-synack", "detail": "the server did not accept the connection"}
    conn.ack = (st.sisn + 1) & 0xFFFFFFFF
    send(Seg(0, b"", P.ACK))
    end = 0
    notes = []
    for off, step, segs in _steps(plan):
        if step.from_client:
            for i, seg in enumerate(segs):
                if i:
                    time.sleep(gap)
                send(seg)
                wire.pump(0)
            end = off + len(step.data)
        else:
            st.want += len(step.data)
            if not wire.wait(lambda: len(st.data) >= st.want or st.rst, 5.0, SERVER_QUIET_S):
                notes.append(f"server sent {len(st.data)} of {st.want} bytes")
    at_fin = st.seen
    send(Seg(end, b"", P.FIN | P.ACK))
    if wire.wait(lambda: st.fin or st.rst or stuck(end, at_fin), FIN_WAIT_S) and st.fin:
        status = "fin"  # its FIN was acknowledged as it came
    elif st.rst:
        status = "rst-by-server"
    else:  # the host's stream differs from ours before our FIN: end it where the host is
        send(Seg(ack_point(), b"", P.RST | P.ACK))
        status = "reset"
        where = ack_point() - end
        notes.append(
            f"the host acknowledged {abs(where)} byte(s) {'less' if where < 0 else 'more'} "
            "than the client stream: reset"
            if where
            else "no FIN from the server: reset"
        )
    wire.pump(0)
    return {
        "status": status,
        "server_data": bytes(st.data).hex(),
        "fin": st.fin,
        "detail": "; ".join(notes),
    }


def play_udp(wire: Wire, plan: WirePlan, conn: Conn, gap: float) -> dict:
    got: list[bytes] = []

    def on_packet(pkt: Packet) -> None:
        if pkt.proto == 17 and pkt.sport == conn.sport and pkt.dport == conn.cport:
            got.append(pkt.payload)

    wire.handler, wire.peer = on_packet, (conn.server, conn.client)
    want = [0]  # the server datagrams the plan's server steps so far add up to
    for _off, step, segs in _steps(plan):
        if step.from_client:
            for seg in segs:
                for pkt in client_packets(seg, conn, "udp"):
                    wire.send(pkt)
                    time.sleep(gap)
        else:
            want[0] += 1
            wire.wait(lambda: len(got) >= want[0], UDP_WAIT_S)
    wire.pump(0)
    return {"status": "sent", "datagrams": [d.hex() for d in got], "detail": ""}


def _steps(plan: WirePlan):
    """(offset, step, segments) of every step, server steps included (no segments)."""
    client = {id(step): (off, segs) for off, step, segs in client_segs(plan)}
    off = 0
    for step in plan.steps:
        if step.from_client:
            off, segs = client[id(step)]
            yield off, step, segs
            off += len(step.data)
        else:
            yield off, step, ()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m testbed.ids.hostclient PLANS.json OUT.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    client, server = P.addr(spec["client"]), P.addr(spec["server"])
    gap = float(spec.get("gap_s", 0.0005))
    wire = Wire(spec["iface"], Path(spec["capture"]), (P.mac(spec["mac"]), P.mac(spec["gw_mac"])))
    clock = Clock()
    out = []
    sessions = spec["sessions"]
    # IP ids (fragment ids) go on from one session to the next: every session has the same two
    # addresses, so ids drawn per session met again, and a session's fragments joined an
    # incomplete datagram an earlier one left in the host's reassembly queue (a label flapped)
    ident = secrets.randbits(16)
    try:
        for n, s in enumerate(sessions, 1):
            plan = plan_from_dict(s["plan"])
            conn = Conn(client, server, s["cport"], s["sport"], timestamps=plan.timestamps)
            conn.cisn = secrets.randbits(32)
            conn.ident = ident
            try:
                if plan.proto == "tcp":
                    result = play_tcp(wire, plan, conn, gap, clock)
                else:
                    result = play_udp(wire, plan, conn, gap)
            except OSError as exc:  # a frame the interface refuses: this session only
                result = {"status": "error", "detail": f"sending failed: {exc}"}
            ident = conn.ident + 1
            out.append({"cport": s["cport"], **result})
            if len(sessions) >= 200 and n % 200 == 0:
                print(f"host labelling: {n}/{len(sessions)} sessions", file=sys.stderr)
        wire.handler = None
        wire.pump(0.05)  # the last replies into the capture
        frames = wire.pcap.packets
    finally:
        wire.close()
    Path(argv[1]).write_text(json.dumps({"sessions": out, "frames": frames}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
