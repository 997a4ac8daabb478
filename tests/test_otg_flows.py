"""The OTG flow compiler (testbed/otg/flows.py): configs built with snappi's own classes, frames
decoded with Scapy (every checksum recomputed by Scapy, every field as configured, packet j of the
cycle carrying the j-th value of every pattern), the engine session read as text, refusals naming
the field, the address mapping undone byte for byte."""

from __future__ import annotations

import ipaddress
import math
import struct
import time
import zlib

import numpy as np
import pytest
import snappi
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.layers.l2 import GRE, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw

from testbed.otg.flows import (
    CONTINUOUS,
    MAX_CYCLE,
    FlowPlan,
    Plan,
    PortInfo,
    compile_config,
    restore_frame,
    session_text,
    signature,
)
from testbed.otg.refusal import OtgRefusal

PORTS = {"p1": PortInfo(mtu=9000, speed_bps=10**9), "p2": PortInfo(mtu=9000, speed_bps=10**9)}
GBPS = 10**9


def config(packets: int = 100, size: int = 128, metrics: bool = True):
    """A snappi config with ports p1, p2 and one flow f1 from p1 to p2 (no headers yet)."""
    c = snappi.Config()
    c.ports.add(name="p1", location="p1")
    c.ports.add(name="p2", location="p2")
    f = c.flows.add(name="f1")
    f.tx_rx.port.tx_name = "p1"
    f.tx_rx.port.rx_names = ["p2"]
    f.duration.fixed_packets.packets = packets
    f.rate.pps = 1000
    f.size.fixed = size
    f.metrics.enable = metrics
    return c, f


def compile_(c, ports=PORTS) -> Plan:
    return compile_config(c.serialize(encoding="dict"), ports)


def refusal(c, ports=PORTS) -> OtgRefusal:
    with pytest.raises(OtgRefusal) as e:
        compile_(c, ports)
    return e.value


def fcs_ok(frame: bytes) -> bool:
    return struct.unpack("<I", frame[-4:])[0] == zlib.crc32(frame[:-4])


def decode(frame: bytes) -> Ether:
    """The frame without its FCS, decoded; asserts the FCS and every checksum Scapy knows."""
    assert fcs_ok(frame), "the FCS is not the frame's CRC-32"
    body = frame[:-4]
    p = Ether(body)
    q = Ether(body)
    for layer in q.layers():
        lay = q[layer]
        for name in ("chksum", "cksum"):
            if name in lay.fields and not (layer is GRE and not lay.chksum_present):
                delattr(lay, name)
    assert bytes(q) == body, "a checksum differs from the one Scapy computes"
    return p


def pat(p, kind: str, **kw):
    """Set a snappi pattern: pat(ip.src, "increment", start=..., step=..., count=...)."""
    if kind == "value":
        p.value = kw["v"]
    elif kind == "values":
        p.values = kw["v"]
    else:
        node = getattr(p, kind)
        for k, v in kw.items():
            setattr(node, k, v)


# --------------------------------------------------------------------------------------------
# The conformance suite's TCP flow


def conformance_flow():
    c, f = config(packets=100, size=128)
    c.layer1.add(name="ly", port_names=["p1", "p2"]).speed = "speed_1_gbps"
    c.captures.add(name="ca", port_names=["p1", "p2"]).format = "pcap"
    f.rate.pps = 50
    eth, ip, tcp = f.packet.ethernet().ipv4().tcp()
    eth.src.value, eth.dst.value = "00:00:01:01:01:01", "00:00:01:01:01:02"
    ip.src.value, ip.dst.value = "1.1.1.1", "1.1.1.2"
    pat(tcp.src_port, "decrement", start=5000, step=2, count=10)
    pat(tcp.dst_port, "increment", start=6000, step=2, count=10)
    return c


def test_the_conformance_tcp_flow_has_the_suite_s_bytes_after_restore():
    plan = compile_(conformance_flow())
    (fp,) = plan.flows
    assert (fp.name, fp.index, fp.tx_port, fp.rx_ports) == ("f1", 0, "p1", ("p2",))
    assert len(fp.frames) == 10 and fp.packets == 100 and fp.period_ns == 20_000_000
    assert (fp.sig_off, fp.seq_off, fp.csum_off) == (54, 62, 50)
    assert plan.wire_of == {"1.1.1.1": "198.18.128.0", "1.1.1.2": "198.18.128.1"}
    assert len(plan.warnings) == 1 and "1.1.1.1 -> 198.18.128.0" in plan.warnings[0]
    for j, wire in enumerate(fp.frames):
        assert len(wire) == 128
        w = decode(wire)
        assert (w[IP].src, w[IP].dst) == ("198.18.128.0", "198.18.128.1")
        assert signature(wire) == (0, j)
        d = restore_frame(wire, plan)
        p = decode(d)  # the checksums are right for the config's addresses too
        assert d[0:6] == bytes.fromhex("000001010102") and d[6:12] == bytes.fromhex("000001010101")
        assert d[12:14] == b"\x08\x00" and d[16:18] == (128 - 14 - 4).to_bytes(2, "big")
        assert d[23] == 6 and d[26:30] == bytes([1, 1, 1, 1]) and d[30:34] == bytes([1, 1, 1, 2])
        assert int.from_bytes(d[34:36], "big") == 5000 - (j % 10) * 2
        assert int.from_bytes(d[36:38], "big") == 6000 + (j % 10) * 2
        assert d[46] == 0x50
        assert p[TCP].flags == 0 and p[TCP].window == 0 and p[IP].ttl == 64
        assert p[Raw].load[:12] == b"NTGO" + struct.pack("!II", 0, j)


# --------------------------------------------------------------------------------------------
# Headers


def test_ethernet_vlan_ipv4_tcp_every_field_as_configured():
    c, f = config(size=100)
    eth, vlan, ip, tcp = f.packet.ethernet().vlan().ipv4().tcp()
    eth.src.value, eth.dst.value = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
    vlan.priority.value, vlan.cfi.value, vlan.id.value = 5, 1, 300
    ip.priority.raw.value = 0xB8
    ip.identification.value = 4321
    ip.dont_fragment.value, ip.more_fragments.value, ip.fragment_offset.value = 1, 0, 0
    ip.time_to_live.value = 9
    ip.src.value, ip.dst.value = "198.18.0.1", "198.18.0.2"
    tcp.src_port.value, tcp.dst_port.value = 1234, 80
    tcp.seq_num.value, tcp.ack_num.value, tcp.window.value = 0xDEADBEEF, 77, 512
    tcp.ctl_syn.value, tcp.ctl_ack.value, tcp.ecn_ns.value, tcp.ecn_cwr.value = 1, 1, 1, 1
    plan = compile_(c)
    assert plan.wire_of == {} and plan.warnings == ()
    (fr,) = plan.flows[0].frames
    p = decode(fr)
    assert p[Ether].type == 0x8100 and p[Dot1Q].type == 0x0800
    assert (p[Dot1Q].prio, p[Dot1Q].dei, p[Dot1Q].vlan) == (5, 1, 300)
    assert (p[IP].tos, p[IP].id, int(p[IP].flags), p[IP].ttl, p[IP].len) == (0xB8, 4321, 2, 9, 78)
    assert (p[IP].src, p[IP].dst, p[IP].proto, p[IP].ihl) == ("198.18.0.1", "198.18.0.2", 6, 5)
    t = p[TCP]
    assert (t.sport, t.dport, t.seq, t.ack, t.window, t.dataofs) == (
        1234,
        80,
        0xDEADBEEF,
        77,
        512,
        5,
    )
    assert t.flags == "SACN" and t.reserved == 0  # Scapy: 9 flag bits, NS (N) first


def test_ipv4_dscp_and_tos_priorities():
    c, f = config()
    _, ip, _ = f.packet.ethernet().ipv4().udp()
    ip.priority.dscp.phb.value, ip.priority.dscp.ecn.value = 46, 1
    c2, f2 = config()
    _, ip2, _ = f2.packet.ethernet().ipv4().udp()
    tos = ip2.priority.tos
    tos.precedence.value, tos.delay.value, tos.monetary.value = 5, 1, 1
    assert decode(compile_(c).flows[0].frames[0])[IP].tos == (46 << 2) | 1
    assert decode(compile_(c2).flows[0].frames[0])[IP].tos == (5 << 5) | (1 << 4) | (1 << 1)


def test_ipv6_udp_defaults_come_from_the_model():
    c, f = config(size=200)
    eth, ip6, udp = f.packet.ethernet().ipv6().udp()
    ip6.src.value, ip6.dst.value = "2001:db8::1", "2001:db8::2"
    ip6.traffic_class.value, ip6.flow_label.value, ip6.hop_limit.value = 0x20, 0xABCDE, 3
    (fr,) = compile_(c).flows[0].frames
    p = decode(fr)
    # defaults: the model's (ethernet src 00:..:00, dst auto 00:..:00, udp ports 0)
    m = snappi.Config().flows.add().packet.ethernet()[-1]
    assert p[Ether].src == m.src.value and p[Ether].dst == m.dst.auto and p[Ether].type == 0x86DD
    assert (p[IPv6].tc, p[IPv6].fl, p[IPv6].hlim, p[IPv6].nh) == (0x20, 0xABCDE, 3, 17)
    assert p[IPv6].plen == 200 - 14 - 4 - 40 and p[UDP].len == 200 - 14 - 4 - 40
    assert (p[UDP].sport, p[UDP].dport) == (0, 0)


def test_icmp_and_icmpv6_echo():
    c, f = config()
    _, ip, icmp = f.packet.ethernet().ipv4().icmp()
    ip.src.value, ip.dst.value = "198.18.0.1", "198.18.0.2"
    pat(icmp.echo.identifier, "value", v=7)
    pat(icmp.echo.sequence_number, "increment", start=1, step=1, count=3)
    plan = compile_(c)
    fp = plan.flows[0]
    assert fp.csum_off == 36 and fp.sig_off == 42
    for j, fr in enumerate(fp.frames):
        p = decode(fr)
        assert (p[IP].proto, p[ICMP].type, p[ICMP].code, p[ICMP].id) == (1, 8, 0, 7)
        assert p[ICMP].seq == 1 + j
    c6, f6 = config()
    _, ip6, ic6 = f6.packet.ethernet().ipv6().icmpv6()
    ip6.src.value, ip6.dst.value = "2001:db8::1", "2001:db8::2"
    ic6.echo.identifier.value = 9
    (fr6,) = compile_(c6).flows[0].frames
    p6 = decode(fr6)
    assert p6[IPv6].nh == 58 and p6[ICMPv6EchoRequest].id == 9 and p6[ICMPv6EchoRequest].type == 128


def test_custom_bytes_and_the_signature_after_them():
    c, f = config(size=80)
    eth, ip, custom = f.packet.ethernet().ipv4().custom()
    ip.src.value, ip.dst.value = "198.18.0.1", "198.18.0.2"
    custom.bytes = "0xde:ad be ef01"
    fp = compile_(c).flows[0]
    (fr,) = fp.frames
    p = decode(fr)
    assert p[IP].proto == 61  # the model's auto default when no known header follows
    assert bytes(p[IP].payload)[:5] == bytes.fromhex("deadbeef01")
    assert fp.sig_off == 14 + 20 + 5 and fp.csum_off is None
    assert fr[fp.sig_off : fp.sig_off + 4] == b"NTGO"


def test_vxlan_and_gre_carry_their_inner_frames():
    c, f = config(size=160, metrics=False)
    _, ip, udp, vx, ieth, iip, iudp = (
        f.packet.ethernet().ipv4().udp().vxlan().ethernet().ipv4().udp()
    )
    ip.src.value, ip.dst.value = "198.18.0.1", "198.18.0.2"
    vx.vni.value = 4242
    iip.src.value, iip.dst.value = "198.18.1.1", "198.18.1.2"
    iudp.src_port.value = 53
    (fr,) = compile_(c).flows[0].frames
    p = decode(fr)
    assert p[UDP].dport == 4789 and p[VXLAN].vni == 4242 and p[VXLAN].flags == 0x08
    inner = p[VXLAN].payload
    assert inner[IP].src == "198.18.1.1" and inner[UDP].sport == 53
    assert inner[UDP].len == 160 - 4 - 14 - 20 - 8 - 8 - 14 - 20
    c2, f2 = config(size=120)
    _, ip2, gre, iip2, tcp2 = f2.packet.ethernet().ipv4().gre().ipv4().tcp()
    ip2.src.value, ip2.dst.value = "198.18.0.1", "198.18.0.2"
    gre.checksum_present.value = 1
    iip2.src.value, iip2.dst.value = "198.18.2.1", "198.18.2.2"
    # two checksums would cover the signature's sequence number (GRE's and TCP's)
    r = refusal(c2)
    assert r.code == 501 and r.errors[0].startswith("flows[0].packet[2].gre.checksum:")
    f2.metrics.enable = False
    p2 = decode(compile_(c2).flows[0].frames[0])
    assert p2[IP].proto == 47 and p2[GRE].proto == 0x0800 and p2[GRE].chksum_present == 1
    assert p2[GRE].payload[IP].src == "198.18.2.1" and p2[GRE].payload[IP].proto == 6


# --------------------------------------------------------------------------------------------
# Patterns


def test_every_pattern_kind_packet_j_carries_value_j_of_each():
    c, f = config(size=100)
    eth, ip, udp = f.packet.ethernet().ipv4().udp()
    pat(eth.src, "increment", start="02:00:00:00:00:fe", step="00:00:00:00:00:01", count=3)
    pat(eth.dst, "values", v=["02:00:00:00:00:01", "02:00:00:00:00:02"])
    pat(ip.src, "decrement", start="198.18.0.10", step="0.0.0.3", count=4)
    pat(ip.dst, "value", v="198.18.9.9")
    pat(ip.identification, "increment", start=65534, step=1, count=4)  # wraps at 2^16
    pat(ip.time_to_live, "values", v=[1, 2, 3, 4, 5, 6])
    pat(udp.src_port, "random", min=100, max=200, seed=7, count=5)
    pat(udp.dst_port, "random", min=1, max=65535, seed=3, count=2)
    fp = compile_(c).flows[0]
    n = math.lcm(3, 2, 4, 5, 6, 4, 2)
    assert len(fp.frames) == n == 60
    pkts = [decode(fr) for fr in fp.frames]
    ids = [p[UDP].sport for p in pkts[:5]]
    dports = [p[UDP].dport for p in pkts[:2]]
    assert all(100 <= v <= 200 for v in ids) and len(set(ids)) > 1
    assert all(1 <= v <= 65535 for v in dports)
    for j, p in enumerate(pkts):
        src_mac = 0x0200000000FE + j % 3
        assert p[Ether].src == ":".join(f"{b:02x}" for b in src_mac.to_bytes(6, "big"))
        assert p[Ether].dst == ["02:00:00:00:00:01", "02:00:00:00:00:02"][j % 2]
        assert p[IP].src == str(
            ipaddress.IPv4Address(int(ipaddress.IPv4Address("198.18.0.10")) - 3 * (j % 4))
        )
        assert p[IP].dst == "198.18.9.9"
        assert p[UDP].sport == ids[j % 5] and p[IP].ttl == 1 + j % 6
        assert p[IP].id == (65534 + j % 4) % 65536 and p[UDP].dport == dports[j % 2]
        assert p[IP].proto == 17 and p[Ether].type == 0x0800  # auto: the computed value
    # random: the same seed, the same values; another seed, others
    again = compile_(c).flows[0].frames
    assert again == fp.frames
    pat(udp.src_port, "random", min=100, max=200, seed=8, count=5)
    other = [decode(fr)[UDP].sport for fr in compile_(c).flows[0].frames[:5]]
    assert other != ids


def test_auto_fields_take_their_computed_values_and_explicit_values_win():
    c, f = config(size=90)
    eth, ip, udp = f.packet.ethernet().ipv4().udp()
    ip.src.value, ip.dst.value = "198.18.0.1", "198.18.0.2"
    ip.protocol.value = 253
    ip.total_length.value = 1000
    eth.ether_type.value = 0x0800
    udp.length.value = 9
    fr = compile_(c).flows[0].frames[0]
    assert fr[23] == 253 and fr[16:18] == (1000).to_bytes(2, "big") and fr[38:40] == b"\x00\x09"


# --------------------------------------------------------------------------------------------
# Sizes


def udp_flow(size_setter, metrics=True):
    c, f = config(metrics=metrics)
    _, ip, _ = f.packet.ethernet().ipv4().udp()
    ip.src.value, ip.dst.value = "198.18.0.1", "198.18.0.2"
    size_setter(f.size)
    return c


def test_size_increment_cycles_start_to_end_by_step():
    def inc(s):
        s.increment.start, s.increment.end, s.increment.step = 64, 100, 12

    fp = compile_(udp_flow(inc)).flows[0]
    assert [len(fr) for fr in fp.frames] == [64, 76, 88, 100]
    for fr in fp.frames:
        p = decode(fr)
        assert p[IP].len == len(fr) - 18 and p[UDP].len == len(fr) - 38


def test_size_random_is_a_cycle_of_1024_sizes_in_range():
    def rnd(s):
        s.random.min, s.random.max = 70, 90

    fp = compile_(udp_flow(rnd)).flows[0]
    sizes = [len(fr) for fr in fp.frames]
    assert len(sizes) == 1024 and min(sizes) >= 70 and max(sizes) <= 90 and len(set(sizes)) > 10
    for fr in fp.frames[:50]:
        decode(fr)


def test_size_weight_pairs_follow_the_weights_exactly():
    def imix(s):
        s.weight_pairs.predefined = "imix"

    sizes = [len(fr) for fr in compile_(udp_flow(imix)).flows[0].frames]
    assert len(sizes) == 12 and sorted(set(sizes)) == [64, 570, 1518]
    assert (sizes.count(64), sizes.count(570), sizes.count(1518)) == (7, 4, 1)

    def custom(s):
        s.weight_pairs.custom.add(size=100, weight=1.5)
        s.weight_pairs.custom.add(size=200, weight=0.5)

    sizes = [len(fr) for fr in compile_(udp_flow(custom)).flows[0].frames]
    assert sizes.count(100) == 3 * sizes.count(200) and len(sizes) == 4

    def std(s):
        s.weight_pairs.predefined = "standard_imix"

    # 58-byte frames: Ethernet, IPv4, UDP, the signature and the FCS just fit
    sizes = [len(fr) for fr in compile_(udp_flow(std)).flows[0].frames]
    assert len(sizes) == 10000 and sizes.count(58) == 5867 and sizes.count(1518) == 1567
    assert sizes.count(62) == 200 and sizes.count(594) == 2366
    # with TCP they do not: refused, naming the size
    c, f = config()
    f.packet.ethernet().ipv4().tcp()
    std(f.size)
    r = refusal(c)
    assert r.code == 400 and r.errors[0].startswith("flows[0].size.weight_pairs.predefined:")


# --------------------------------------------------------------------------------------------
# Rates and durations


@pytest.mark.parametrize(
    "unit,value,bits_per_s",
    [
        ("bps", 1_024_000, 1_024_000),
        ("kbps", 2048, 2_048_000),
        ("mbps", 3, 3_000_000),
        ("gbps", 1, 10**9),
    ],
)
def test_bit_rates_count_the_frame_with_its_fcs(unit, value, bits_per_s):
    c, f = config(size=128)
    f.packet.ethernet().ipv4().udp()
    setattr(f.rate, unit, value)
    fp = compile_(c, {"p1": PortInfo(9000, 10 * GBPS), "p2": PortInfo(9000, 10 * GBPS)}).flows[0]
    assert fp.period_ns == max(1, round(1e9 * 128 * 8 / bits_per_s))


def test_pps_and_percentage_of_the_port_s_layer1_speed():
    c, f = config(size=128)
    f.packet.ethernet().ipv4().udp()
    f.rate.pps = 3
    assert compile_(c).flows[0].period_ns == round(1e9 / 3)
    f.rate.percentage = 10
    # 10% of 1 Gb/s in frames of 128 bytes plus 20 of preamble and inter-frame gap
    assert compile_(c).flows[0].period_ns == round(1e9 / (0.1 * GBPS / ((128 + 20) * 8)))
    f.rate.percentage = 100
    fast = {"p1": PortInfo(9000, 100 * GBPS), "p2": PortInfo(9000, 100 * GBPS)}
    assert compile_(c, fast).flows[0].period_ns == round((128 + 20) * 8 / 100)


def test_a_rate_above_what_the_gap_allows_is_slowed_with_a_warning():
    c, f = config(size=1000)
    f.packet.ethernet().ipv4().udp()
    f.rate.pps = 10_000_000
    f.duration.fixed_packets.gap = 100
    plan = compile_(c)
    assert plan.flows[0].period_ns == math.ceil((1000 + 8 + 100) * 8)
    assert any(w.startswith("flows[0].duration.fixed_packets.gap:") for w in plan.warnings)


def test_fixed_packets_and_fixed_seconds_with_delays():
    c, f = config(packets=7, size=128)
    f.packet.ethernet().ipv4().udp()
    f.duration.fixed_packets.delay.nanoseconds = 1500
    fp = compile_(c).flows[0]
    assert (fp.packets, fp.start_ns, fp.burst) == (7, 1500, 0)
    f.duration.fixed_packets.delay.microseconds = 2.5
    assert compile_(c).flows[0].start_ns == 2500
    f.duration.fixed_packets.delay.bytes = 125
    assert compile_(c).flows[0].start_ns == 1000  # 125 bytes at 1 Gb/s
    f.duration.fixed_seconds.seconds = 2.5
    f.duration.fixed_seconds.delay.microseconds = 10
    f.rate.pps = 100
    fp = compile_(c).flows[0]
    assert (fp.packets, fp.start_ns, fp.period_ns) == (250, 10_000, 10_000_000)


def test_bursts_and_continuous():
    c, f = config(size=128)
    f.packet.ethernet().ipv4().udp()
    f.rate.pps = 1000
    b = f.duration.burst
    b.packets, b.bursts = 5, 3
    b.inter_burst_gap.nanoseconds = 40_000
    fp = compile_(c).flows[0]
    assert (fp.burst, fp.packets, fp.period_ns) == (5, 15, 1_000_000)
    assert fp.burst_period_ns == 5 * 1_000_000 + 40_000
    b.bursts = 0
    b.inter_burst_gap.bytes = 1250  # 10 us at 1 Gb/s
    fp = compile_(c).flows[0]
    assert fp.packets == CONTINUOUS and fp.burst_period_ns == 5_000_000 + 10_000
    text, _ = session_text([fp], "/x/f.pcap", 1)
    stream = dict(kv.split("=") for kv in text.splitlines()[3].split()[1:])
    n = int(stream["packets"])
    last = (n - 1) // 5 * fp.burst_period_ns + (n - 1) % 5 * fp.period_ns
    assert last < 2**32 * 10**9 <= n // 5 * fp.burst_period_ns + n % 5 * fp.period_ns
    f.duration.continuous.delay.nanoseconds = 77
    fp = compile_(c).flows[0]
    assert (fp.packets, fp.start_ns, fp.burst) == (CONTINUOUS, 77, 0)
    text, _ = session_text([fp], "/x/f.pcap", 1)
    n = int(dict(kv.split("=") for kv in text.splitlines()[3].split()[1:])["packets"])
    assert 77 + (n - 1) * fp.period_ns < 2**32 * 10**9 <= 77 + n * fp.period_ns


# --------------------------------------------------------------------------------------------
# The engine session


def test_session_text_gives_each_flow_its_stream_line_and_frames():
    c, f = config(packets=100, size=128)
    eth, ip, udp = f.packet.ethernet().ipv4().udp()
    ip.src.value, ip.dst.value = "198.18.0.1", "198.18.0.2"
    pat(udp.src_port, "values", v=[1, 2, 3])
    g = c.flows.add(name="f2")
    g.tx_rx.port.tx_name, g.tx_rx.port.rx_names = "p1", ["p2"]
    g.size.fixed, g.rate.pps, g.metrics.enable = 256, 100, False
    g.duration.fixed_packets.packets = 10
    g.packet.ethernet().ipv6().tcp()
    plan = compile_(c)
    text, frames = session_text(plan.flows, "/run/p1.frames.pcap", 7)
    assert text == (
        "ntg-session 1\nseed 7\nframes /run/p1.frames.pcap\n"
        "stream first=0 count=3 start=0 period=1000000 packets=100 burst=0 burst_period=0 "
        "seq_off=50 csum_off=40 fcs=1\n"
        "stream first=3 count=1 start=0 period=10000000 packets=10 burst=0 burst_period=0 "
        "seq_off=- csum_off=-\n"
    )
    assert frames == list(plan.flows[0].frames) + list(plan.flows[1].frames)
    assert plan.flows[1].sig_off is None and signature(frames[3]) is None
    other = FlowPlan(**{**plan.flows[1].__dict__, "tx_port": "p2"})
    with pytest.raises(OtgRefusal):
        session_text([plan.flows[0], other], "/run/x.pcap", 1)


def rfc1624(frame: bytearray, seq_off: int, csum_off: int, seq: int) -> None:
    """What the engine does per packet: seq into its field, the checksum updated (RFC 1624)."""
    old = frame[seq_off : seq_off + 4]
    new = struct.pack("!I", seq)
    hc = int.from_bytes(frame[csum_off : csum_off + 2], "big")
    acc = (~hc) & 0xFFFF
    for k in (0, 2):
        acc += (~int.from_bytes(old[k : k + 2], "big")) & 0xFFFF
        acc += int.from_bytes(new[k : k + 2], "big")
    while acc >> 16:
        acc = (acc & 0xFFFF) + (acc >> 16)
    res = (~acc) & 0xFFFF
    frame[csum_off : csum_off + 2] = struct.pack("!H", res or 0xFFFF)
    frame[seq_off : seq_off + 4] = new
    frame[-4:] = struct.pack("<I", zlib.crc32(bytes(frame[:-4])))


@pytest.mark.parametrize("l4", ["udp", "tcp", "icmp", "icmpv6"])
def test_the_engine_s_seq_patch_keeps_the_checksum_right(l4):
    c, f = config(size=90)
    if l4 == "icmpv6":
        _, ip, _ = f.packet.ethernet().ipv6().icmpv6()
        ip.src.value, ip.dst.value = "2001:db8::1", "2001:db8::2"
    else:
        _, ip, _ = getattr(f.packet.ethernet().ipv4(), l4)()
        ip.src.value, ip.dst.value = "198.18.0.1", "198.18.0.2"
    fp = compile_(c).flows[0]
    assert fp.seq_off == fp.sig_off + 8 and fp.csum_off is not None
    for seq in (1, 0xFFFF, 0x12345678, 0xFFFFFFFF):
        fr = bytearray(fp.frames[0])
        rfc1624(fr, fp.seq_off, fp.csum_off, seq)
        decode(bytes(fr))
        assert signature(bytes(fr)) == (0, seq)


# --------------------------------------------------------------------------------------------
# Address mapping and restore_frame


def scapy_frame(src, dst, sport, size, seq, bad=False, custom=None) -> bytes:
    """The frame the config describes, built by Scapy (checksums, FCS)."""
    ip = IPv6(src=src, dst=dst) if ":" in src else IP(src=src, dst=dst, id=0, ttl=64, flags=0)
    pkt = Ether(src="00:00:00:00:00:00", dst="00:00:00:00:00:00") / ip / UDP(sport=sport, dport=0)
    pad = size - 4 - len(pkt)
    pkt = pkt / Raw(b"NTGO" + struct.pack("!II", 0, seq) + bytes(pad - 12))
    body = bytes(Ether(bytes(pkt)))
    if bad or custom is not None:
        p = Ether(body)
        p[UDP].chksum = custom if custom is not None else p[UDP].chksum ^ 1
        body = bytes(p)
    return body + struct.pack("<I", zlib.crc32(body))


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("how", ["good", "bad", "custom"])
def test_restore_frame_gives_back_the_config_s_bytes(family, how):
    c, f = config(size=100)
    _, ip, udp = (
        f.packet.ethernet().ipv4().udp() if family == 4 else f.packet.ethernet().ipv6().udp()
    )
    if family == 4:
        pat(ip.src, "increment", start="10.0.0.1", step="0.0.0.1", count=3)
        ip.dst.value = "198.18.128.0"  # inside the range, and the pool's first: the pool skips it
    else:
        pat(ip.src, "increment", start="fe80::1", step="::1", count=3)
        ip.dst.value = "2001:db8:ffff::1"
    pat(udp.src_port, "values", v=[7, 8])
    if how == "bad":
        udp.checksum.generated = "bad"
    elif how == "custom":
        udp.checksum.custom = 0x1234
    plan = compile_(c)
    fp = plan.flows[0]
    srcs = [str(ipaddress.ip_address(a)) for a in plan.wire_of]
    wires = list(plan.wire_of.values())
    if family == 4:
        assert srcs == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
        assert wires == ["198.18.128.1", "198.18.128.2", "198.18.128.3"]
    else:
        assert srcs == ["fe80::1", "fe80::2", "fe80::3"]
        assert wires == ["2001:db8:ffff::2", "2001:db8:ffff::3", "2001:db8:ffff::4"]
    assert fp.csum_off == (None if how == "custom" else fp.csum_off)
    for j, wire in enumerate(fp.frames):
        w = Ether(wire[:-4])
        assert (w[IP] if family == 4 else w[IPv6]).src == wires[j % 3]
        if how == "good":
            decode(wire)
        cfg_src = srcs[j % 3]
        dst = "198.18.128.0" if family == 4 else "2001:db8:ffff::1"
        want = scapy_frame(
            cfg_src, dst, [7, 8][j % 2], 100, j, how == "bad", 0x1234 if how == "custom" else None
        )
        assert restore_frame(wire, plan) == want


def test_restore_after_the_engine_s_seq_patch_and_of_foreign_frames():
    plan = compile_(conformance_flow())
    fp = plan.flows[0]
    fr = bytearray(fp.frames[3])
    rfc1624(fr, fp.seq_off, fp.csum_off, 1003)
    fr[-4:] = b"\0\0\0\0"  # the engine does not redo the FCS: restore does
    back = restore_frame(bytes(fr), plan)
    p = decode(back)
    assert p[IP].src == "1.1.1.1" and signature(back) == (0, 1003)
    foreign = bytes(Ether() / IP(src="198.18.0.99", dst="198.18.0.98") / UDP())
    assert restore_frame(foreign, plan) == foreign
    cut = bytes(fp.frames[0][:60])  # a capture cut by its snap length
    rc = restore_frame(cut, plan)
    assert rc[26:34] == bytes([1, 1, 1, 1, 1, 1, 1, 2])
    full = restore_frame(fp.frames[0], plan)
    assert rc[:60] == full[:60]  # the cut frame's checksums updated incrementally, the same


def test_address_mapping_refuses_more_addresses_than_the_pool_holds():
    c, f = config(size=100, metrics=False)
    _, ip, _ = f.packet.ethernet().ipv4().udp()
    pat(ip.src, "increment", start="10.0.0.0", step="0.0.0.1", count=100_000)
    r = refusal(c)
    assert r.code == 501 and r.errors[0].startswith("flows[0].packet[1].ipv4.src:")


# --------------------------------------------------------------------------------------------
# Refusals, each naming its field


def test_the_cycle_cap_names_the_fields_that_make_it():
    c, f = config(size=64, metrics=False)
    _, _, udp = f.packet.ethernet().ipv4().udp()
    pat(udp.src_port, "increment", start=0, step=1, count=1024)
    pat(udp.dst_port, "increment", start=0, step=1, count=1025)
    r = refusal(c)
    assert r.code == 501 and r.kind == "unimplemented"
    assert r.errors[0].startswith("flows[0]: a cycle of 1049600 frames")
    assert "flows[0].packet[2].udp.src_port (1024)" in r.errors[0]
    assert "flows[0].packet[2].udp.dst_port (1025)" in r.errors[0]
    # OTG 1.58's Error.kind knows only validation and internal: 501 tells "unimplemented" apart
    assert r.body() == {"code": 501, "kind": "validation", "errors": r.errors}
    pat(udp.dst_port, "increment", start=0, step=1, count=1024)  # lcm 1024: fine
    assert len(compile_(c).flows[0].frames) == 1024


def test_a_header_without_room_for_the_signature_is_refused_naming_size():
    c, f = config(size=57)  # Ethernet, IPv4, UDP (42) + signature (12) + FCS (4) = 58
    f.packet.ethernet().ipv4().udp()
    r = refusal(c)
    assert r.code == 400 and r.errors[0].startswith("flows[0].size.fixed: a 57-byte frame")
    f.size.fixed = 58
    fp = compile_(c).flows[0]
    assert fp.sig_off == 42 and len(fp.frames[0]) == 58 and signature(fp.frames[0]) == (0, 0)
    f.size.fixed, f.metrics.enable = 46, False
    assert len(compile_(c).flows[0].frames[0]) == 46
    f.size.fixed = 9015
    r = refusal(c)
    assert r.code == 400 and "does not fit port p1" in r.errors[0]


def refuse_with(build, ports=PORTS) -> OtgRefusal:
    c, f = config()
    build(c, f)
    return refusal(c, ports)


REFUSALS = [
    ("arp", lambda c, f: f.packet.ethernet().ipv4().arp(), 501, "flows[0].packet[2].arp:"),
    ("mpls", lambda c, f: f.packet.ethernet().mpls(), 501, "flows[0].packet[1].mpls:"),
    (
        "device",
        lambda c, f: f.tx_rx.device.set(tx_names=["d1"], rx_names=["d2"]),
        501,
        "flows[0].tx_rx.device:",
    ),
    (
        "tx port",
        lambda c, f: setattr(f.tx_rx.port, "tx_name", "p9"),
        400,
        "flows[0].tx_rx.port.tx_name:",
    ),
    (
        "rx port",
        lambda c, f: setattr(f.tx_rx.port, "rx_names", ["p2", "p7"]),
        400,
        "flows[0].tx_rx.port.rx_names[1]:",
    ),
    ("first", lambda c, f: f.packet.ipv4().udp(), 501, "flows[0].packet[0].ipv4:"),
    ("no l3", lambda c, f: f.packet.ethernet().tcp(), 400, "flows[0].packet[1].tcp:"),
    (
        "dhcp",
        lambda c, f: setattr(f.packet.ethernet().ipv4()[-1].src.auto, "choice", "dhcp"),
        501,
        "flows[0].packet[1].ipv4.src.auto:",
    ),
    (
        "tags",
        lambda c, f: f.packet.ethernet()[-1].src.metric_tags.add(name="t"),
        501,
        "flows[0].packet[0].ethernet.src.metric_tags:",
    ),
    (
        "pfc",
        lambda c, f: setattr(f.packet.ethernet()[-1].pfc_queue, "value", 3),
        501,
        "flows[0].packet[0].ethernet.pfc_queue:",
    ),
    (
        "egress",
        lambda c, f: (f.packet.ethernet(), f.egress_packet.ethernet()),
        501,
        "flows[0].egress_packet:",
    ),
    ("empty", lambda c, f: None, 400, "flows[0].packet:"),
    (
        "seconds",
        lambda c, f: (
            f.packet.ethernet().ipv4().udp(),
            setattr(f.duration.fixed_seconds, "seconds", 0),
        ),
        400,
        "flows[0].duration.fixed_seconds.seconds:",
    ),
    (
        "vxlan sums",
        lambda c, f: f.packet.ethernet().ipv4().udp().vxlan().ethernet().ipv4().udp(),
        501,
        "flows[0].packet[2].udp.checksum:",
    ),
]


@pytest.mark.parametrize("name,build,code,path", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_field(name, build, code, path):
    r = refuse_with(build)
    assert r.code == code, r.errors
    assert r.errors[0].startswith(path), r.errors
    assert r.kind == ("unimplemented" if code == 501 else "validation")


def test_refusals_of_several_flows_come_together():
    c, f = config()
    f.packet.ethernet().arp()
    g = c.flows.add(name="f2")
    g.tx_rx.port.tx_name = "nope"
    g.packet.ethernet()
    r = refusal(c)
    assert r.code == 400 and len(r.errors) == 2
    assert r.errors[0].startswith("flows[0].packet[1].arp:")
    assert r.errors[1].startswith("flows[1].tx_rx.port.tx_name:")


# --------------------------------------------------------------------------------------------
# Speed


def test_a_large_increment_cycle_is_built_quickly_and_right():
    n = 65_536
    c, f = config(size=64)
    _, ip, udp = f.packet.ethernet().ipv4().udp()
    ip.src.value, ip.dst.value = "198.18.0.1", "198.18.0.2"
    pat(ip.identification, "increment", start=0, step=1, count=n)
    t0 = time.perf_counter()
    fp = compile_(c).flows[0]
    took = time.perf_counter() - t0
    assert len(fp.frames) == n and took < 10, took
    arr = np.frombuffer(b"".join(fp.frames), np.uint8).reshape(n, 64)
    assert (arr[:, 18].astype(int) * 256 + arr[:, 19] == np.arange(n)).all()
    assert (arr[:, 50:54].view(">u4")[:, 0] == np.arange(n)).all()  # the signature's seq
    for j in (0, 1, 255, 256, n - 1):
        p = decode(fp.frames[j])
        assert p[IP].id == j and signature(fp.frames[j]) == (0, j)
    assert n <= MAX_CYCLE


def test_fields_sharing_a_byte_vary_independently():
    c, f = config(size=100)
    _, vlan, ip, tcp = f.packet.ethernet().vlan().ipv4().tcp()
    ip.src.value, ip.dst.value = "198.18.0.1", "198.18.0.2"
    pat(vlan.priority, "increment", start=6, step=1, count=3)  # 6, 7, 0 (3 bits wrap)
    pat(vlan.cfi, "values", v=[1, 0])
    pat(vlan.id, "decrement", start=2, step=1, count=5)  # 2, 1, 0, 4095, 4094
    pat(ip.priority.dscp.phb, "increment", start=10, step=10, count=4)
    pat(ip.priority.dscp.ecn, "values", v=[3, 0, 1])
    pat(tcp.ctl_syn, "values", v=[1, 0])
    pat(tcp.ctl_fin, "increment", start=0, step=1, count=2)
    pat(tcp.ecn_ns, "values", v=[0, 0, 1])
    ip.dont_fragment.value = 1
    pat(ip.more_fragments, "values", v=[0, 1])
    pat(ip.fragment_offset, "increment", start=0, step=1, count=5)
    fp = compile_(c).flows[0]
    assert len(fp.frames) == math.lcm(3, 2, 5, 4, 3, 2, 2, 3, 2, 5)
    for j, fr in enumerate(fp.frames):
        p = decode(fr)
        assert p[Dot1Q].prio == (6 + j % 3) % 8 and p[Dot1Q].dei == [1, 0][j % 2]
        assert p[Dot1Q].vlan == (2 - j % 5) % 4096
        assert p[IP].tos == ((10 + 10 * (j % 4)) << 2) | [3, 0, 1][j % 3]
        assert int(p[IP].flags) == 2 | [0, 1][j % 2] and p[IP].frag == j % 5
        t = TCP(bytes(p[IP].payload))  # a fragment: Scapy leaves its bytes raw
        assert t.flags.S == [1, 0][j % 2] and t.flags.F == j % 2 and t.flags.N == [0, 0, 1][j % 3]
        assert t.dataofs == 5 and t.sport == 0 and p[IP].ttl == 64


def test_bad_and_custom_checksums_and_payload_patterns():
    c, f = config(size=80, metrics=False)
    _, ip, tcp = f.packet.ethernet().ipv4().tcp()
    ip.src.value, ip.dst.value = "198.18.0.1", "198.18.0.2"
    ip.header_checksum.generated = "bad"
    tcp.checksum.custom = 0xBEEF
    f.payload.choice = "increment_byte"
    (fr,) = compile_(c).flows[0].frames
    assert fcs_ok(fr)
    p = Ether(fr[:-4])
    good = Ether(fr[:-4])
    del good[IP].chksum
    good = Ether(bytes(good))
    assert p[IP].chksum == good[IP].chksum ^ 1 and p[TCP].chksum == 0xBEEF
    assert bytes(p[TCP].payload) == bytes(range(80 - 4 - 54))


def test_the_byte_cap_of_a_cycle_and_of_all_cycles_together():
    c, f = config(size=9000, metrics=False)
    _, _, udp = f.packet.ethernet().ipv4().udp()
    pat(udp.src_port, "increment", start=0, step=1, count=30_000)  # 270 MB
    r = refusal(c)
    assert r.code == 501 and r.errors[0].startswith("flows[0]: a cycle of 30000 frames")
    assert "flows[0].packet[2].udp.src_port (30000)" in r.errors[0]
    pat(udp.src_port, "increment", start=0, step=1, count=17_000)  # 153 MB: fine alone
    g = c.flows.add(name="f2")
    g.tx_rx.port.tx_name, g.size.fixed = "p2", 9000
    _, _, udp2 = g.packet.ethernet().ipv4().udp()
    pat(udp2.dst_port, "increment", start=0, step=1, count=17_000)  # twice: too much
    r = refusal(c)
    assert r.code == 501 and r.errors[0].startswith("flows: the flows' cycles hold 306000000")
