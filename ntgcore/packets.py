"""Struct-based packet builders (Ethernet, IPv4, IPv6, TCP, UDP, ICMP, ICMPv6) with correct
checksums, a TCP session as frames (`tcp_session`: handshake, MSS-sized data segments each ACKed,
FIN both ways) and a pcap writer (microsecond, or nanosecond). Used by the rule-derived attack
sessions (idsrules.synth) and TRex's ASTF offline expansion (generators/trex). Headers are declared as tables of (format, field) and
packed in one go. `ip(src, dst, proto, payload, ident)` picks IPv4 or IPv6 by the address length;
`tcp`/`udp` take 4- or 16-byte addresses: below 64 KiB the IPv6 pseudo header (length as 32 bits,
next header last) has the same 16-bit sum as the IPv4 one (RFC 8200, 8.1)."""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct
import sys
from array import array
from collections.abc import Iterator, Sequence
from typing import BinaryIO

ETH_HDR = struct.Struct("!6s6sH")  # dst, src, ethertype
IP4_HDR = struct.Struct(
    "!BBHHHBBH4s4s"
)  # ver/ihl, tos, total len, id, frag, ttl, proto, csum, src, dst
TCP_HDR = struct.Struct("!HHIIBBHHH")  # sport, dport, seq, ack, offset, flags, window, csum, urg
UDP_HDR = struct.Struct("!HHHH")  # sport, dport, length, csum
IP6_HDR = struct.Struct("!IHBB16s16s")  # ver/class/label, payload len, next header, hops, src, dst
ICMP_HDR = struct.Struct("!BBHHH")  # type, code, csum, id, seq
ICMPV6 = 58
ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
PCAP_GLOBAL = struct.Struct("<IHHiIII")
PCAP_REC = struct.Struct("<IIII")

FIN, SYN, RST, PSH, ACK, URG, ECE, CWR = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80
FLAG_BITS = {
    "F": FIN,
    "S": SYN,
    "R": RST,
    "P": PSH,
    "A": ACK,
    "U": URG,
    "E": ECE,
    "C": CWR,
    "1": CWR,
    "2": ECE,
    "0": 0,
}

MAC_CLIENT = bytes.fromhex("020000000001")
MAC_SERVER = bytes.fromhex("020000000002")
_LITTLE = sys.byteorder == "little"
# The only addresses live packets may carry (../shared/guide/NETWORK-SAFETY.md): the benchmarking
# range of RFC 2544 and the IPv6 documentation prefix. A pcap may hold any address.
BENCHMARK_NETWORKS = (ipaddress.ip_network("198.18.0.0/15"), ipaddress.ip_network("2001:db8::/32"))


def in_benchmark_networks(address: str) -> bool:
    """Whether `address` lies in BENCHMARK_NETWORKS (may be sent live)."""
    a = ipaddress.ip_address(address)
    return any(a.version == n.version and a in n for n in BENCHMARK_NETWORKS)


def checksum(data: bytes) -> int:
    """Internet checksum (RFC 1071) of `data`."""
    if len(data) % 2:
        data += b"\0"
    words = array("H", data)
    s = sum(words)
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    s = ~s & 0xFFFF
    if _LITTLE:
        s = ((s & 0xFF) << 8) | (s >> 8)
    return s


def ipv4(
    src: bytes,
    dst: bytes,
    proto: int,
    payload: bytes,
    ident: int = 0,
    ttl: int = 64,
    frag: int = 0x4000,
) -> bytes:
    """`frag`: the flags and fragment offset field (default DF; a fragment: `ipv4_frag`)."""
    hdr = IP4_HDR.pack(0x45, 0, 20 + len(payload), ident & 0xFFFF, frag, ttl, proto, 0, src, dst)
    c = checksum(hdr)
    return hdr[:10] + struct.pack("!H", c) + hdr[12:] + payload


def ipv6(
    src: bytes, dst: bytes, proto: int, payload: bytes, flow_label: int = 0, hops: int = 64
) -> bytes:
    return (
        IP6_HDR.pack((6 << 28) | (flow_label & 0xFFFFF), len(payload), proto, hops, src, dst)
        + payload
    )


def ip(src: bytes, dst: bytes, proto: int, payload: bytes, ident: int = 0) -> bytes:
    """IPv4 for 4-byte addresses (`ident` is the IP id), IPv6 for 16-byte ones (no id there)."""
    if len(src) == 16:
        return ipv6(src, dst, proto, payload)
    return ipv4(src, dst, proto, payload, ident)


def tcp(
    src: bytes,
    dst: bytes,
    sport: int,
    dport: int,
    seq: int,
    ack: int,
    flags: int,
    payload: bytes = b"",
    window: int = 65535,
    *,
    urgent: int = 0,
    options: bytes = b"",
) -> bytes:
    """A TCP segment with its checksum; `options` (padded here to 4-byte words) and the urgent
    pointer `urgent` (the caller sets URG in `flags`)."""
    options += b"\0" * (-len(options) % 4)
    hdr = TCP_HDR.pack(
        sport,
        dport,
        seq & 0xFFFFFFFF,
        ack & 0xFFFFFFFF,
        (5 + len(options) // 4) << 4,
        flags,
        window,
        0,
        urgent,
    )
    hdr += options
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(hdr) + len(payload))
    c = checksum(pseudo + hdr + payload)
    return hdr[:16] + struct.pack("!H", c) + hdr[18:] + payload


def udp(src: bytes, dst: bytes, sport: int, dport: int, payload: bytes) -> bytes:
    length = 8 + len(payload)
    hdr = UDP_HDR.pack(sport, dport, length, 0)
    pseudo = src + dst + struct.pack("!BBH", 0, 17, length)
    c = checksum(pseudo + hdr + payload) or 0xFFFF
    return hdr[:6] + struct.pack("!H", c) + payload


def icmp(itype: int, code: int, ident: int, seq: int, payload: bytes) -> bytes:
    hdr = ICMP_HDR.pack(itype, code, 0, ident, seq)
    c = checksum(hdr + payload)
    return hdr[:2] + struct.pack("!H", c) + hdr[4:] + payload


def icmpv6(
    src: bytes, dst: bytes, itype: int, code: int, ident: int, seq: int, payload: bytes
) -> bytes:
    """ICMPv6 (echo layout): unlike ICMPv4 its checksum covers the IPv6 pseudo header."""
    hdr = ICMP_HDR.pack(itype, code, 0, ident, seq)
    pseudo = src + dst + struct.pack("!IxxxB", len(hdr) + len(payload), ICMPV6)
    c = checksum(pseudo + hdr + payload)
    return hdr[:2] + struct.pack("!H", c) + hdr[4:] + payload


def ether(
    ip_packet: bytes, from_client: bool, macs: tuple[bytes, bytes] = (MAC_CLIENT, MAC_SERVER)
) -> bytes:
    """`ip_packet` in an Ethernet frame between `macs` (the client's, the server's)."""
    etype = ETH_IPV6 if ip_packet[0] >> 4 == 6 else ETH_IPV4
    client, server = macs
    if from_client:
        return ETH_HDR.pack(server, client, etype) + ip_packet
    return ETH_HDR.pack(client, server, etype) + ip_packet


def mac(text: str) -> bytes:
    """`02:00:00:00:00:01` -> its 6 bytes."""
    return bytes.fromhex(text.replace(":", "").replace("-", ""))


def initial_seq(seed: int) -> int:
    """The client's initial sequence number of a session made from `seed` (the server's is it
    XOR 0x5A5A5A5A): the same seed, the same numbers, in every writer of sessions."""
    return (seed * 2654435761) & 0xFFFFFFFF


def tcp_session(
    client: bytes,
    server: bytes,
    cport: int,
    sport: int,
    messages: Sequence[tuple[bool, bytes]],
    *,
    mss: int = 1400,
    seed: int = 0,
    handshake: bool = True,
    flags: int | None = None,
    window: int = 65535,
    macs: tuple[bytes, bytes] = (MAC_CLIENT, MAC_SERVER),
    server_closes: bool = False,
) -> Iterator[tuple[bool, bytes]]:
    """The frames of one TCP session, in order, as (from the client, Ethernet frame): SYN,
    SYN-ACK, ACK; each message `(from_client, data)` cut into segments of at most `mss` bytes
    (PSH|ACK), each answered by an ACK from the other side (an empty message: one empty
    segment); FIN|ACK from the client, FIN|ACK from the server, the client's last ACK (with
    `server_closes`, the server's FIN first, as an SMTP server closes after its 221).

    `client`/`server`: 4- or 16-byte addresses (IPv4 or IPv6). The initial sequence numbers
    and the IPv4 ids come from `seed` (the same seed, the same bytes). Without `handshake`
    each message is one segment with `flags` (default PSH|ACK) and no close: a packet with
    flags, no conversation. Nothing is timed: the caller stamps the frames."""
    cseq = initial_seq(seed)
    sseq = (cseq ^ 0x5A5A5A5A) & 0xFFFFFFFF
    ident = seed & 0xFFFF

    def seg(from_client: bool, fl: int, data: bytes = b"") -> tuple[bool, bytes]:
        nonlocal cseq, sseq, ident
        ident += 1
        if from_client:
            t = tcp(client, server, cport, sport, cseq, sseq if fl & ACK else 0, fl, data, window)
            frame = ether(ip(client, server, 6, t, ident), True, macs)
            cseq += len(data) + (1 if fl & (SYN | FIN) else 0)
        else:
            t = tcp(server, client, sport, cport, sseq, cseq if fl & ACK else 0, fl, data, window)
            frame = ether(ip(server, client, 6, t, ident), False, macs)
            sseq += len(data) + (1 if fl & (SYN | FIN) else 0)
        return from_client, frame

    if not handshake:
        for from_client, data in messages:
            yield seg(from_client, flags if flags is not None else ACK | PSH, data)
        return
    yield seg(True, SYN)
    yield seg(False, SYN | ACK)
    yield seg(True, ACK)
    for from_client, data in messages:
        for i in range(0, max(len(data), 1), mss):
            yield seg(from_client, ACK | PSH, data[i : i + mss])
            yield seg(not from_client, ACK)
    closer = not server_closes  # from the client
    yield seg(closer, FIN | ACK)
    yield seg(not closer, FIN | ACK)
    yield seg(closer, ACK)


def addr(text: str) -> bytes:
    """4 bytes for an IPv4 address, 16 for an IPv6 one."""
    return socket.inet_pton(socket.AF_INET6 if ":" in text else socket.AF_INET, text)


def short_address(text: str | None) -> str:
    """An address in the short text form our sessions use (`2001:0db8:0000:...:0001` ->
    `2001:db8::1`; Suricata's eve.json and tshark spell IPv6 out in full); anything that is not
    an address unchanged ("" for None)."""
    if text is None:
        return ""
    if ":" not in text:  # IPv4 or no address: the text is its own short form either way
        return text
    return _short_ipv6(text)


@functools.lru_cache(maxsize=1 << 16)
def _short_ipv6(text: str) -> str:
    try:  # the C conversion, five times faster; the dotted forms are ipaddress's to spell
        short = socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, text))
        if "." not in short:
            return short
    except OSError:
        pass
    try:
        return ipaddress.ip_address(text).compressed
    except ValueError:
        return text


class PcapWriter:
    """Microsecond pcap (nanosecond with `nanosecond`), Ethernet link type."""

    def __init__(self, f: BinaryIO, snaplen: int = 262144, nanosecond: bool = False) -> None:
        self.f = f
        self.packets = 0
        self.bytes = 0
        self.unit = 1 if nanosecond else 1000
        f.write(PCAP_GLOBAL.pack(0xA1B23C4D if nanosecond else 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1))

    def write(self, ts_ns: int, frame: bytes, orig_len: int | None = None) -> None:
        """One record; `orig_len`: the frame's length on the wire when `frame` is only its first
        bytes (a record cut at a snap length: a large flow without writing its bytes)."""
        sec, rem = divmod(ts_ns, 1_000_000_000)
        n = len(frame)
        wire = n if orig_len is None else max(orig_len, n)
        self.f.write(PCAP_REC.pack(sec, rem // self.unit, n, wire))
        self.f.write(frame)
        self.packets += 1
        self.bytes += n

    def write_records(self, records: bytes, packets: int) -> None:
        """`packets` records already laid out (a header and a frame each, in this file's
        timestamp unit: the native renderer's output)."""
        self.f.write(records)
        self.packets += packets
        self.bytes += len(records) - PCAP_REC.size * packets


# --------------------------------------------------------------------------------------------
# Tags, IPv6 extension headers and fragments (the flow meters' conformance patterns)

ETH_VLAN, ETH_QINQ = 0x8100, 0x88A8  # 802.1Q customer tag, 802.1ad service tag
IP6_HOP_BY_HOP, IP6_ROUTING, IP6_FRAGMENT, IP6_DEST_OPTIONS = 0, 43, 44, 60


def vlan_tagged(frame: bytes, tags: Sequence[int], outer_tpid: int = ETH_VLAN) -> bytes:
    """`frame` with 802.1Q tags after its MAC addresses, `tags` outer first (priority 0): the
    outer one with `outer_tpid` (ETH_QINQ: an 802.1ad service tag), the inner ones 0x8100."""
    out = b"".join(
        struct.pack("!HH", outer_tpid if i == 0 else ETH_VLAN, t & 0x0FFF)
        for i, t in enumerate(tags)
    )
    return frame[:12] + out + frame[12:]


def ipv6_options_header(next_header: int) -> bytes:
    """A hop-by-hop or destination options header of 8 bytes: one PadN option (RFC 8200, 4.2)."""
    return struct.pack("!BBBB4x", next_header, 0, 1, 4)


def ipv6_routing_header(next_header: int, segment: bytes) -> bytes:
    """A segment routing header (routing type 4, RFC 8754) with one segment and segments left
    0: a header a node passes over to the upper layer; 24 bytes."""
    return struct.pack("!BBBBBBH", next_header, 2, 4, 0, 0, 0, 0) + segment


def ipv6_fragment_header(next_header: int, offset: int, more: bool, ident: int) -> bytes:
    """A fragment header (RFC 8200, 4.5): `offset` in bytes (a multiple of 8); offset 0 without
    `more` is an atomic fragment (RFC 6946)."""
    return struct.pack("!BBHI", next_header, 0, (offset & ~7) | int(more), ident & 0xFFFFFFFF)


def ipv4_frag(offset: int, more: bool) -> int:
    """The IPv4 flags and fragment offset field of a fragment at `offset` bytes (a multiple
    of 8), `more` fragments following; for `ipv4(..., frag=...)`."""
    return (0x2000 if more else 0) | (offset >> 3)
