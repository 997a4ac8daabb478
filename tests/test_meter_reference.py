"""The reference records (analysis/flowmeter/reference.py): hand-checked expectations on small
captures written here with ntgcore/packets.py, a naive per-packet model written here against
the vectorised cut (Hypothesis), and the reader's columns it stands on against Scapy."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6, IPv6ExtHdrFragment
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from analysis.capture import CaptureError, read_capture
from analysis.flowmeter import MeterRules, reference_records, reference_records_with_stats
from ntgcore.packets import (
    ACK,
    ETH_QINQ,
    FIN,
    IP6_DEST_OPTIONS,
    IP6_HOP_BY_HOP,
    PSH,
    RST,
    SYN,
    PcapWriter,
    addr,
    ether,
    icmp,
    icmpv6,
    ipv4,
    ipv4_frag,
    ipv6,
    ipv6_fragment_header,
    ipv6_options_header,
    tcp,
    udp,
    vlan_tagged,
)

pytestmark = pytest.mark.usefixtures("pcaplib")

S = 1_000_000_000
MS = 1_000_000
T0 = 1_700_000_000 * S
IDLE, ACTIVE = 10 * S, 30 * S
RULES = MeterRules(idle_timeout_ns=IDLE, active_timeout_ns=ACTIVE, tcp_end=True)
A, B, C = addr("198.18.0.1"), addr("198.18.0.2"), addr("198.18.0.3")
A6, B6 = addr("2001:db8::1"), addr("2001:db8::2")


def write(path: Path, packets: list[tuple[int, bytes] | tuple[int, bytes, int]]) -> Path:
    """Nanosecond pcap of (time after T0, frame[, original length])."""
    with path.open("wb") as f:
        w = PcapWriter(f, nanosecond=True)
        for p in packets:
            w.write(T0 + p[0], p[1], *p[2:])
    return path


def u4(sport: int = 1000, dport: int = 53, size: int = 10, src: bytes = A, dst: bytes = B) -> bytes:
    """An Ethernet/IPv4/UDP frame; its L3 length is 28 + size."""
    return ether(ipv4(src, dst, 17, udp(src, dst, sport, dport, b"x" * size)), True)


def t4(flags: int, sport: int = 40000, dport: int = 80, size: int = 0) -> bytes:
    """An Ethernet/IPv4/TCP frame; its L3 length is 40 + size."""
    return ether(ipv4(A, B, 6, tcp(A, B, sport, dport, 1, 1, flags, b"y" * size)), True)


def rows(table) -> list[tuple]:
    """(sport, dport, proto, vlan, packets, bytes, first, last, flags, end, expire) per record,
    times relative to T0."""
    out = []
    for r in table.to_pylist():
        out.append(
            (
                r["sport"],
                r["dport"],
                r["proto"],
                r["vlan"],
                r["packets"],
                r["bytes"],
                r["first_ns"] - T0,
                r["last_ns"] - T0,
                r["tcp_flags"],
                r["end"],
                r["expire_ns"] - T0,
            )
        )
    return out


# ---- timeouts -------------------------------------------------------------------------------


def test_idle_split_just_over_the_timeout_and_none_just_under(tmp_path):
    pcap = write(
        tmp_path / "idle.pcap",
        [(0, u4()), (IDLE - 1, u4()), (2 * IDLE, u4()), (3 * IDLE + 1, u4())],
    )
    # gaps: IDLE - 1 (same record), IDLE + 1 (new), IDLE + 1 (new)
    assert rows(reference_records(pcap, RULES)) == [
        (1000, 53, 17, 0, 2, 76, 0, IDLE - 1, 0, "idle", 2 * IDLE - 1),
        (1000, 53, 17, 0, 1, 38, 2 * IDLE, 2 * IDLE, 0, "idle", 3 * IDLE),
        (1000, 53, 17, 0, 1, 38, 3 * IDLE + 1, 3 * IDLE + 1, 0, "eof", 3 * IDLE + 1),
    ]


def test_a_gap_of_exactly_the_idle_timeout_does_not_split(tmp_path):
    pcap = write(tmp_path / "exact.pcap", [(0, u4()), (IDLE, u4())])
    assert rows(reference_records(pcap, RULES)) == [
        (1000, 53, 17, 0, 2, 76, 0, IDLE, 0, "eof", IDLE)
    ]


def test_active_timeout_splits_a_long_flow(tmp_path):
    pcap = write(tmp_path / "long.pcap", [(t * S, u4()) for t in range(0, 71, 5)])
    # 0..25 (30 - 0 >= 30 starts anew), 30..55, 60..70
    assert rows(reference_records(pcap, RULES)) == [
        (1000, 53, 17, 0, 6, 6 * 38, 0, 25 * S, 0, "active", 30 * S),
        (1000, 53, 17, 0, 6, 6 * 38, 30 * S, 55 * S, 0, "active", 60 * S),
        (1000, 53, 17, 0, 3, 3 * 38, 60 * S, 70 * S, 0, "eof", 70 * S),
    ]


def test_the_earlier_deadline_names_the_end(tmp_path):
    """Packets at 0, 8, 16, 24, then 35: the gap 11 s > idle, but the active timeout (0 + 30)
    came before the idle one (24 + 10): the record ended `active`."""
    pcap = write(tmp_path / "both.pcap", [(t * S, u4()) for t in (0, 8, 16, 24, 35)])
    assert rows(reference_records(pcap, RULES))[0] == (
        1000,
        53,
        17,
        0,
        4,
        4 * 38,
        0,
        24 * S,
        0,
        "active",
        30 * S,
    )


def test_records_whose_timeout_fell_inside_the_capture_end_by_it(tmp_path):
    pcap = write(tmp_path / "end.pcap", [(0, u4(sport=1)), (5 * S, u4(sport=2)), (40 * S, u4())])
    got = rows(reference_records(pcap, RULES))
    assert got[0][9:] == ("idle", 10 * S)  # 0 + idle < 40: over before the capture ended
    assert got[1][9:] == ("idle", 15 * S)
    assert got[2][9:] == ("eof", 40 * S)


# ---- TCP ------------------------------------------------------------------------------------


def test_fin_and_rst_end_their_record_and_a_packet_after_fin_starts_one(tmp_path):
    pcap = write(
        tmp_path / "fin.pcap",
        [
            (0, t4(SYN)),
            (1 * MS, t4(ACK | PSH, size=100)),
            (2 * MS, t4(FIN | ACK)),
            (3 * MS, t4(ACK)),  # after FIN: a record of its own
            (4 * MS, t4(SYN, sport=40001)),
            (5 * MS, t4(RST | ACK, sport=40001)),
        ],
    )
    assert rows(reference_records(pcap, RULES)) == [
        (40000, 80, 6, 0, 3, 40 + 140 + 40, 0, 2 * MS, SYN | ACK | PSH | FIN, "fin", 2 * MS),
        (40000, 80, 6, 0, 1, 40, 3 * MS, 3 * MS, ACK, "eof", 5 * MS),
        (40001, 80, 6, 0, 2, 80, 4 * MS, 5 * MS, SYN | RST | ACK, "rst", 5 * MS),
    ]
    off = MeterRules(idle_timeout_ns=IDLE, active_timeout_ns=ACTIVE, tcp_end=False)
    assert [(r[0], r[4], r[9]) for r in rows(reference_records(pcap, off))] == [
        (40000, 4, "eof"),
        (40001, 2, "eof"),
    ]


def test_one_packet_flows(tmp_path):
    pcap = write(tmp_path / "one.pcap", [(i * MS, u4(sport=2000 + i)) for i in range(3)])
    got = rows(reference_records(pcap, RULES))
    assert [(r[0], r[4], r[6], r[7]) for r in got] == [
        (2000, 1, 0, 0),
        (2001, 1, MS, MS),
        (2002, 1, 2 * MS, 2 * MS),
    ]


# ---- time order -----------------------------------------------------------------------------


def test_out_of_order_timestamps_are_counted_without_moving_last_back(tmp_path):
    pcap = write(
        tmp_path / "ooo.pcap",
        [
            (5 * S, u4()),
            (2 * S, u4()),  # earlier than the record's first: first becomes 2 s
            (6 * S, u4()),
            (4 * S, u4()),  # earlier than last: last stays 6 s
            (30 * S, u4(sport=7)),
            (18 * S, u4(sport=7)),  # 18 - 30 < 0: joins; first 18 s
            (29 * S, u4(sport=7)),
        ],
    )
    table, stats = reference_records_with_stats(pcap, RULES)
    assert rows(table) == [
        (1000, 53, 17, 0, 4, 4 * 38, 2 * S, 6 * S, 0, "idle", 16 * S),
        (7, 53, 17, 0, 3, 3 * 38, 18 * S, 30 * S, 0, "eof", 30 * S),
    ]
    assert stats.looped_packets == 7  # both keys went back in time: the per-packet loop


# ---- keys -----------------------------------------------------------------------------------


def test_vlan_in_and_out_of_the_key(tmp_path):
    pcap = write(
        tmp_path / "vlan.pcap",
        [
            (0, vlan_tagged(u4(), [10])),
            (1 * MS, vlan_tagged(u4(), [20])),
            (2 * MS, vlan_tagged(u4(), [10])),
            (3 * MS, u4()),
        ],
    )
    keyed = MeterRules(idle_timeout_ns=IDLE, active_timeout_ns=ACTIVE, key_vlan=True)
    assert [(r[3], r[4], r[6]) for r in rows(reference_records(pcap, keyed))] == [
        (10, 2, 0),
        (20, 1, MS),
        (0, 1, 3 * MS),
    ]
    # Out of the key: one record, with its first packet's VLAN.
    assert [(r[3], r[4], r[5]) for r in rows(reference_records(pcap, RULES))] == [(10, 4, 152)]


def test_qinq_gives_the_outer_vlan(tmp_path):
    pcap = write(tmp_path / "qinq.pcap", [(0, vlan_tagged(u4(), [100, 200], ETH_QINQ))])
    got = rows(reference_records(pcap, RULES))
    assert [(r[0], r[1], r[3], r[5]) for r in got] == [(1000, 53, 100, 38)]


def test_ipv6_with_extension_headers(tmp_path):
    inner = udp(A6, B6, 5000, 6000, b"z" * 20)
    ext = ipv6_options_header(IP6_DEST_OPTIONS) + ipv6_options_header(17)
    pcap = write(
        tmp_path / "v6.pcap",
        [
            (0, ether(ipv6(A6, B6, 17, inner), True)),
            (MS, ether(ipv6(A6, B6, IP6_HOP_BY_HOP, ext + inner), True)),
        ],
    )
    table = reference_records(pcap, RULES)
    assert table.column("src").to_pylist() == ["2001:db8::1"]
    assert table.column("dst").to_pylist() == ["2001:db8::2"]
    # 40 + 28, and 40 + 16 of extension headers + 28
    assert [(r[0], r[1], r[2], r[4], r[5]) for r in rows(table)] == [(5000, 6000, 17, 2, 68 + 84)]


def test_fragments_first_has_ports_later_ones_do_not(tmp_path):
    datagram = udp(A, B, 7000, 8000, b"f" * 40)  # 48 bytes: 24 + 24
    v6 = udp(A6, B6, 7000, 8000, b"g" * 40)
    pcap = write(
        tmp_path / "frag.pcap",
        [
            (0, ether(ipv4(A, B, 17, datagram[:24], 9, frag=ipv4_frag(0, True)), True)),
            (MS, ether(ipv4(A, B, 17, datagram[24:], 9, frag=ipv4_frag(24, False)), True)),
            (2 * MS, ether(ipv6(A6, B6, 44, ipv6_fragment_header(17, 0, True, 5) + v6[:24]), True)),
            (
                3 * MS,
                ether(ipv6(A6, B6, 44, ipv6_fragment_header(17, 24, False, 5) + v6[24:]), True),
            ),
        ],
    )
    table = reference_records(pcap, RULES)
    got = sorted(zip(table.column("src").to_pylist(), rows(table), strict=True))
    assert [(src, r[0], r[1], r[2], r[4], r[5]) for src, r in got] == [
        ("198.18.0.1", 0, 0, 17, 1, 44),  # later fragment: no ports
        ("198.18.0.1", 7000, 8000, 17, 1, 44),
        ("2001:db8::1", 0, 0, 17, 1, 40 + 8 + 24),
        ("2001:db8::1", 7000, 8000, 17, 1, 40 + 8 + 24),
    ]


def test_icmp_and_icmpv6_type_and_code_in_dport(tmp_path):
    pcap = write(
        tmp_path / "icmp.pcap",
        [
            (0, ether(ipv4(A, B, 1, icmp(8, 0, 77, 1, b"p" * 8)), True)),
            (MS, ether(ipv4(B, A, 1, icmp(0, 0, 77, 1, b"p" * 8)), True)),
            (2 * MS, ether(ipv4(C, A, 1, icmp(3, 1, 0, 0, b"q" * 28)), True)),
            (3 * MS, ether(ipv6(A6, B6, 58, icmpv6(A6, B6, 128, 0, 9, 1, b"r")), True)),
            (4 * MS, ether(ipv6(B6, A6, 58, icmpv6(B6, A6, 129, 0, 9, 1, b"r")), True)),
        ],
    )
    assert [(r[0], r[1], r[2], r[5]) for r in rows(reference_records(pcap, RULES))] == [
        (0, 8 * 256, 1, 36),
        (0, 0, 1, 36),  # echo reply: type 0 code 0
        (0, 3 * 256 + 1, 1, 56),
        (0, 128 * 256, 58, 49),
        (0, 129 * 256, 58, 49),
    ]


def test_packets_without_ip_are_not_counted(tmp_path):
    arp = bytes.fromhex("ffffffffffff0200000000010806") + bytes(28)
    pcap = write(tmp_path / "arp.pcap", [(0, arp), (MS, u4())])
    table, stats = reference_records_with_stats(pcap, RULES)
    assert table.num_rows == 1 and (stats.packets, stats.ip_packets) == (2, 1)


# ---- the table ------------------------------------------------------------------------------


def test_a_full_table_evicts_the_least_recently_used_record(tmp_path):
    two = MeterRules(idle_timeout_ns=IDLE, active_timeout_ns=ACTIVE, max_flows=2)
    pcap = write(
        tmp_path / "lru.pcap",
        [
            (0, u4(sport=1)),  # A
            (1 * S, u4(sport=2)),  # B
            (1 * S + S // 2, u4(sport=1)),  # A again: B is now the least recently used
            (2 * S, u4(sport=3)),  # C: full, evicts B
            (3 * S, u4(sport=2)),  # B: full (A, C), evicts A
        ],
    )
    table, stats = reference_records_with_stats(pcap, two)
    assert stats.overflowed
    assert [(r[0], r[4], r[6], r[7], r[9], r[10]) for r in rows(table)] == [
        (1, 2, 0, S + S // 2, "evicted", 3 * S),
        (2, 1, S, S, "evicted", 2 * S),
        (3, 1, 2 * S, 2 * S, "eof", 3 * S),
        (2, 1, 3 * S, 3 * S, "eof", 3 * S),
    ]


def test_a_record_that_timed_out_frees_its_slot_without_eviction(tmp_path):
    one = MeterRules(idle_timeout_ns=IDLE, active_timeout_ns=ACTIVE, max_flows=1)
    pcap = write(
        tmp_path / "free.pcap",
        [(0, u4(sport=1)), (1 * S, u4(sport=2)), (15 * S, u4(sport=3))],
    )
    # B evicts A at 1 s; at 15 s B (last 1 s) has been idle for 14 s: it ended idle at 11 s.
    table, stats = reference_records_with_stats(pcap, one)
    assert stats.overflowed
    assert [(r[0], r[9], r[10]) for r in rows(table)] == [
        (1, "evicted", 1 * S),
        (2, "idle", 11 * S),
        (3, "eof", 15 * S),
    ]
    # Two flows never live at once: no overflow, no loop.
    pcap = write(tmp_path / "apart.pcap", [(0, u4(sport=1)), (20 * S, u4(sport=2))])
    table, stats = reference_records_with_stats(pcap, one)
    assert not stats.overflowed and stats.looped_packets == 0
    assert [(r[0], r[9]) for r in rows(table)] == [(1, "idle"), (2, "eof")]


# ---- counters -------------------------------------------------------------------------------


def test_a_flow_past_2_to_the_32_bytes_from_records_cut_short(tmp_path):
    """65,600 IPv4 packets whose total length field says 65,535, each record holding only its
    first 64 bytes (orig_len: the length on the wire): 4,299,096,000 bytes > 2^32."""
    big = ether(ipv4(A, B, 17, udp(A, B, 9000, 9001, b"\0" * (65535 - 28))), True)
    n = 65_600
    path = tmp_path / "big.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f, nanosecond=True)
        for i in range(n):
            w.write(T0 + i * MS, big[:64], len(big))
    cap = read_capture(path)
    assert int(cap.cap_len.max()) == 64 and int(cap.l3_len.min()) == 65535
    rules = MeterRules(idle_timeout_ns=IDLE, active_timeout_ns=600 * S)
    assert rows(reference_records(path, rules, chunk_packets=10_000)) == [
        (9000, 9001, 17, 0, n, n * 65535, 0, (n - 1) * MS, 0, "eof", (n - 1) * MS)
    ]
    assert n * 65535 > 2**32


# ---- files ----------------------------------------------------------------------------------


def test_a_damaged_capture_gives_the_records_before_the_damage(tmp_path):
    pcap = write(tmp_path / "cut.pcap", [(0, u4()), (MS, u4()), (2 * MS, u4())])
    data = pcap.read_bytes()
    pcap.write_bytes(data[:-10])
    table, stats = reference_records_with_stats(pcap, RULES)
    assert rows(table)[0][4] == 2 and "truncated" in (stats.problem or "")


def test_not_a_capture_is_a_capture_error(tmp_path):
    bad = tmp_path / "x.pcap"
    bad.write_text("not a capture\n")
    with pytest.raises(CaptureError, match="x.pcap"):
        reference_records(bad, RULES)


def test_an_empty_capture_has_no_records(tmp_path):
    table = reference_records(write(tmp_path / "empty.pcap", []), RULES)
    assert table.num_rows == 0 and table.schema.names[-2:] == ["end", "expire_ns"]


def test_rules_refuse_nonsense():
    with pytest.raises(ValueError, match="idle_timeout_ns"):
        MeterRules(idle_timeout_ns=0)
    with pytest.raises(ValueError, match="max_flows"):
        MeterRules(max_flows=0)


# ---- the reader's columns the reference stands on ------------------------------------------


def test_reader_columns_match_scapy(tmp_path):
    e = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    pkts = [
        e / Dot1Q(vlan=42) / IP(src="198.18.0.1", dst="198.18.0.2") / UDP() / Raw(b"x" * 10),
        e / Dot1AD(vlan=7) / Dot1Q(vlan=9) / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(),
        e / IP(src="198.18.0.1", dst="198.18.0.2", flags="MF", proto=17) / Raw(b"a" * 16),
        e / IP(src="198.18.0.1", dst="198.18.0.2", frag=2, proto=17) / Raw(b"b" * 8),
        e / IP(src="198.18.0.1", dst="198.18.0.2") / ICMP(type=3, code=1) / Raw(b"c" * 28),
        e / IPv6(src="2001:db8::1", dst="2001:db8::2") / ICMPv6EchoRequest(),
        e / IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrFragment(m=1, nh=17) / UDP(),
        e / IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrFragment(offset=3, nh=17),
        e / IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrFragment(nh=17) / UDP(),
        e / Raw(b"\x00" * 30),
    ]
    path = tmp_path / "cols.pcap"
    wrpcap(str(path), pkts)
    cap = read_capture(path)
    pkts = [Ether(bytes(p)) for p in pkts]  # built: lengths filled in
    want = []
    for p in pkts:
        vlan = p[Dot1AD].vlan if Dot1AD in p else p[Dot1Q].vlan if Dot1Q in p else 0
        if IP in p:
            ip = p[IP]
            l3 = ip.len
            frag = 2 if ip.frag else 1 if ip.flags.MF else 0
            code = ip[ICMP].type * 256 + ip[ICMP].code if ICMP in ip else 0
        elif IPv6 in p:
            l3 = 40 + p[IPv6].plen
            fh = p[IPv6ExtHdrFragment] if IPv6ExtHdrFragment in p else None
            frag = 0 if fh is None else 2 if fh.offset else 1 if fh.m else 0
            code = 128 * 256 if ICMPv6EchoRequest in p else 0
        else:
            vlan, l3, frag, code = 0, 0, 0, 0
        want.append((vlan, l3, frag, code))
    got = list(
        zip(
            cap.vlan.tolist(),
            cap.l3_len.tolist(),
            cap.frag.tolist(),
            cap.icmp_type.tolist(),
            strict=True,
        )
    )
    assert got == want
    assert want[1][0] == 7 and want[6][2] == 1 and want[8][2] == 0  # outer tag; atomic: 0


# ---- the vectorised cut against a naive model -----------------------------------------------


def naive(packets: list[tuple[int, int, int]], rules: MeterRules) -> list[tuple]:
    """The rules of docs/flowmeters.md read literally, one packet at a time: packets are
    (time, sport, tcp flags) of TCP flows A -> B:sport/80 with 40-byte packets."""
    table: dict[int, list] = {}
    out = []
    end_ns = max(t for t, _, _ in packets)

    def close(key: int, r: list, reason: str, at: int) -> None:
        out.append((key, r[0], r[1], r[2], r[3], reason, at))

    def by_timeout(key: int, r: list) -> None:
        a, i = r[0] + rules.active_timeout_ns, r[1] + rules.idle_timeout_ns
        close(key, r, "active" if a <= i else "idle", a if a <= i else i)

    for t, key, flags in packets:
        r = table.get(key)
        if r and (t - r[1] > rules.idle_timeout_ns or t - r[0] >= rules.active_timeout_ns):
            by_timeout(key, table.pop(key))
            r = None
        if r is None:
            r = table[key] = [t, t, 0, 0]
        r[0], r[1], r[2], r[3] = min(r[0], t), max(r[1], t), r[2] + 1, r[3] | flags
        if rules.tcp_end and flags & (FIN | RST):
            close(key, table.pop(key), "rst" if flags & RST else "fin", t)
    for key, r in table.items():
        a, i = r[0] + rules.active_timeout_ns, r[1] + rules.idle_timeout_ns
        if a <= end_ns or i < end_ns:
            by_timeout(key, r)
        else:
            close(key, r, "eof", end_ns)
    return sorted(out)


packet_lists = st.lists(
    st.tuples(
        st.integers(0, 100),  # time in seconds: gaps of exactly the timeouts are common
        st.integers(1, 3),  # flow
        st.sampled_from([ACK, ACK, ACK, SYN, FIN | ACK, RST]),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(packets=packet_lists, ordered=st.booleans(), tcp_end=st.booleans(), chunk=st.integers(1, 7))
def test_vectorised_cut_equals_the_naive_model(tmp_path, packets, ordered, tcp_end, chunk):
    if ordered:
        packets = sorted(packets, key=lambda p: p[0])
    packets = [(t * S, k, f) for t, k, f in packets]
    rules = MeterRules(idle_timeout_ns=IDLE, active_timeout_ns=ACTIVE, tcp_end=tcp_end)
    pcap = write(tmp_path / "h.pcap", [(t, t4(f, sport=k)) for t, k, f in packets])
    got = sorted(
        (r[0], r[6], r[7], r[4], r[8], r[9], r[10])
        for r in rows(reference_records(pcap, rules, chunk_packets=chunk))
    )
    assert got == naive(packets, rules)
