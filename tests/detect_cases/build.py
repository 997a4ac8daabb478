"""Build the capture of each detect case (tests/detect_cases/<case>/) with scapy.

`build(case, path)` writes the case's capture to `path`; `python tests/detect_cases/build.py DIR`
writes every case's capture into DIR as <case>.pcap. The packets are fixed (no randomness, fixed
time stamps), so a case's capture is the same bytes on every run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
MAC = {"src": "02:00:00:00:00:01", "dst": "02:00:00:00:00:02"}


def tcp_session(
    ip,
    client: str,
    server: str,
    cport: int,
    sport: int,
    request: bytes,
    response: bytes,
    t: float,
    *,
    zero_checksum: bool = False,
) -> list:
    """A whole TCP conversation: handshake, one request and one response each ACKed, FIN close.
    `zero_checksum` writes 0 as every TCP checksum, as a capture taken before a NIC's checksum
    offload fills them in looks."""
    c, s = 1000, 5000
    steps = [
        (True, "S", c, 0, b""),
        (False, "SA", s, c + 1, b""),
        (True, "A", c + 1, s + 1, b""),
        (True, "PA", c + 1, s + 1, request),
        (False, "A", s + 1, c + 1 + len(request), b""),
        (False, "PA", s + 1, c + 1 + len(request), response),
        (True, "A", c + 1 + len(request), s + 1 + len(response), b""),
        (True, "FA", c + 1 + len(request), s + 1 + len(response), b""),
        (False, "FA", s + 1 + len(response), c + 2 + len(request), b""),
        (True, "A", c + 2 + len(request), s + 2 + len(response), b""),
    ]
    out = []
    for k, (to_server, flags, seq, ack, data) in enumerate(steps):
        src, dst, sp, dp = (
            (client, server, cport, sport) if to_server else (server, client, sport, cport)
        )
        seg = TCP(sport=sp, dport=dp, flags=flags, seq=seq, ack=ack, window=65535)
        if zero_checksum:
            seg.chksum = 0
        pkt = Ether(**MAC) / ip(src=src, dst=dst) / seg
        if data:
            pkt = pkt / data
        pkt.time = t + k * 0.001
        out.append(pkt)
    return out


def udp_exchange(
    ip, client: str, server: str, cport: int, sport: int, query: bytes, answer: bytes, t: float
) -> list:
    q = Ether(**MAC) / ip(src=client, dst=server) / UDP(sport=cport, dport=sport) / query
    a = Ether(**MAC) / ip(src=server, dst=client) / UDP(sport=sport, dport=cport) / answer
    q.time, a.time = t, t + 0.001
    return [q, a]


def home_net() -> list:
    """Clients in 192.0.2.0/24 ask a server in 203.0.113.0/24 for /admin twice, and another path once."""
    pkts = []
    for k, path in enumerate((b"/admin/login", b"/admin/users", b"/index.html")):
        req = b"GET " + path + b" HTTP/1.1\r\nHost: intranet.example\r\nUser-Agent: case\r\n\r\n"
        resp = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret"
        pkts += tcp_session(
            IP, f"192.0.2.{10 + k}", "203.0.113.80", 40000 + k, 8080, req, resp, T0 + k
        )
    return pkts


def checksum_offload() -> list:
    """1,200 packets whose TCP checksums are all zero (captured on the sending host before the NIC
    filled them in): 119 quiet sessions, then one that carries the rule's content. Suricata's
    checksum auto mode decides after its first 1,000 packets, so the attack comes after them."""
    pkts = []
    for k in range(119):
        pkts += tcp_session(
            IP,
            f"198.18.1.{1 + k}",
            "198.19.0.10",
            30000 + k,
            9000,
            b"HELLO " + str(k).encode(),
            b"OK",
            T0 + k * 0.01,
            zero_checksum=True,
        )
    pkts += tcp_session(
        IP,
        "198.18.2.1",
        "198.19.0.10",
        39999,
        9000,
        b"DROP TABLE users;",
        b"OK",
        T0 + 2.0,
        zero_checksum=True,
    )
    return pkts


def ipv6() -> list:
    """A TCP request and a UDP query from 2001:db8:2::/48 to a server in 2001:db8:1::/48."""
    req = b"GET /v6/secret HTTP/1.1\r\nHost: v6.example\r\n\r\n"
    pkts = tcp_session(
        IPv6,
        "2001:db8:2::20",
        "2001:db8:1::80",
        41000,
        80,
        req,
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        T0,
    )
    pkts += udp_exchange(
        IPv6, "2001:db8:2::20", "2001:db8:1::53", 41001, 7000, b"PING-V6", b"PONG-V6", T0 + 1
    )
    return pkts


def expect_mismatch() -> list:
    """One request with the rule's content, in 198.18.0.0/15."""
    return tcp_session(
        IP,
        "198.18.0.10",
        "198.19.0.20",
        42000,
        80,
        b"GET /etc/passwd HTTP/1.1\r\nHost: t\r\n\r\n",
        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
        T0,
    )


CASES = {
    "home_net": home_net,
    "checksum_offload": checksum_offload,
    "ipv6": ipv6,
    "expect_mismatch": expect_mismatch,
}


def build(case: str, path: str | Path) -> Path:
    path = Path(path)
    wrpcap(str(path), CASES[case]())
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        print(build(name, out / f"{name}.pcap"))
