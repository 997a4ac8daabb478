"""Metrics of the seed's method on captures with a known shape: rates, variance, warm-up, flows."""

import struct
from pathlib import Path

import numpy as np
import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from analysis import detect_warmup, flow_table, read_capture, traffic_metrics
from analysis.metrics import PER_SECOND_MAX_S, TrafficAccumulator, per_second

pytestmark = pytest.mark.usefixtures("pcaplib")

NS = 1_000_000_000
T0 = 1_700_000_000 * NS


def udp_frame(sport: int, payload: int) -> bytes:
    """Ethernet/IPv4/UDP 198.18.0.1:SPORT -> 198.19.0.1:9 with PAYLOAD zero bytes."""
    ip_len = 28 + payload
    eth = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
    ip = struct.pack(
        ">BBHHHBBH4s4s",
        0x45,
        0,
        ip_len,
        0,
        0x4000,
        64,
        17,
        0,
        bytes([198, 18, 0, 1]),
        bytes([198, 19, 0, 1]),
    )
    return eth + ip + struct.pack(">HHHH", sport, 9, 8 + payload, 0) + bytes(payload)


def write_pcap(path: Path, times_ns: list[int], frames: list[bytes]) -> Path:
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)]
    for t, f in zip(times_ns, frames):
        out.append(struct.pack("<IIII", t // NS, t % NS, len(f), len(f)) + f)
    path.write_bytes(b"".join(out))
    return path


def rate_pattern(counts: list[int], last_fraction: float = 1.0) -> list[int]:
    """Times of COUNTS[s] evenly spaced packets in each second s; the last second is cut to
    LAST_FRACTION of its packets (the capture stops early)."""
    times = []
    for s, c in enumerate(counts):
        keep = c if s < len(counts) - 1 else int(c * last_fraction)
        times += [T0 + s * NS + k * NS // c for k in range(keep)]
    return times


RAMP = [100, 300, 500, 700, 850]
STEADY = [
    1000 + d for d in (0, 12, -7, 25, -18, 3, 9, -30, 14, 0, -5, 21, -11, 6, -2, 17, -9, 4, -23, 8)
]


@pytest.fixture
def ramp_capture(tmp_path):
    counts = RAMP + STEADY
    times = rate_pattern(counts)
    frames = [udp_frame(1000 + i % 50, 18 + i % 100) for i in range(len(times))]
    return read_capture(write_pcap(tmp_path / "ramp.pcap", times, frames)), counts, frames


def test_per_second_counts_are_exact(ramp_capture):
    cap, counts, frames = ramp_capture
    bins = per_second(cap)
    assert bins["packets"].tolist() == counts
    sizes = np.array([len(f) for f in frames])
    edges = np.cumsum([0] + counts)
    assert bins["bytes"].tolist() == [int(sizes[a:b].sum()) for a, b in zip(edges, edges[1:])]
    assert not bins["partial"].any()


def test_warmup_detected_at_the_end_of_the_ramp(ramp_capture):
    cap, counts, _ = ramp_capture
    m = traffic_metrics(cap)
    assert m["warmup"]["found"] and m["warmup"]["seconds"] == len(RAMP)
    assert m["steady"]["from_second"] == len(RAMP)


def test_variance_is_std_over_mean_as_numpy_computes_it(ramp_capture):
    cap, counts, _ = ramp_capture
    m = traffic_metrics(cap)
    allc, steady = np.array(counts), np.array(STEADY)
    assert m["mean_pps"] == np.mean(allc)
    assert m["std_pps"] == np.std(allc)
    assert m["variance_pct"] == np.std(allc) / np.mean(allc) * 100
    assert m["steady"]["mean_pps"] == np.mean(steady)
    assert m["steady"]["std_pps"] == np.std(steady)
    assert m["steady"]["variance_pct"] == np.std(steady) / np.mean(steady) * 100
    assert m["steady"]["variance_pct"] < m["variance_pct"] / 5


def test_throughput_measured_and_by_the_seed_formula(ramp_capture):
    cap, counts, frames = ramp_capture
    m = traffic_metrics(cap)
    sizes = np.array([len(f) for f in frames])
    assert m["packets"] == len(frames) and m["bytes"] == sizes.sum()
    assert m["average_packet_size"] == sizes.sum() / len(sizes)
    per_sec = per_second(cap)["bytes"].to_numpy()
    assert m["throughput_Bps"] == np.mean(per_sec)
    assert m["throughput_bps"] == np.mean(per_sec) * 8
    assert m["throughput_formula_Bps"] == m["average_packet_size"] * m["mean_pps"]


def test_partial_last_second_is_flagged_and_left_out(tmp_path):
    counts = [1000] * 6 + [1000]
    times = rate_pattern(counts, last_fraction=0.4)
    cap = read_capture(write_pcap(tmp_path / "cut.pcap", times, [udp_frame(1, 10)] * len(times)))
    m = traffic_metrics(cap)
    assert m["per_second"]["packets"] == [1000] * 6 + [400]
    assert m["per_second"]["last_partial"] is True
    assert m["seconds"] == 6 and m["mean_pps"] == 1000.0 and m["std_pps"] == 0.0
    assert m["min_pps"] == 1000


def test_last_second_filled_to_its_end_is_complete(tmp_path):
    times = rate_pattern([500, 500, 500])
    cap = read_capture(write_pcap(tmp_path / "full.pcap", times, [udp_frame(1, 10)] * len(times)))
    m = traffic_metrics(cap)
    assert m["per_second"]["last_partial"] is False and m["seconds"] == 3


def test_empty_seconds_count_as_zero(tmp_path):
    times = rate_pattern([200]) + [t + 2 * NS for t in rate_pattern([200, 200])]
    cap = read_capture(write_pcap(tmp_path / "gap.pcap", times, [udp_frame(1, 10)] * len(times)))
    m = traffic_metrics(cap)
    assert m["per_second"]["packets"] == [200, 0, 200, 200]
    assert m["mean_pps"] == 150.0


def test_detect_warmup_on_the_seed_trex_shape():
    """TRex in the seed: a slow start up to ~11k pps at 8 s, ~104k at 9 s, then ~110k with two
    spikes to 140k; the seed drops its first 9 seconds."""
    rng = np.random.default_rng(7)
    start = [800, 1500, 2500, 3500, 5000, 6500, 8000, 9500, 10929]
    steady = 110_000 + rng.integers(-2500, 2500, 51)
    steady[0] = 104_180
    steady[41], steady[44] = 140_141, 139_000
    w = detect_warmup(np.concatenate([start, steady]))
    assert w["found"] and w["seconds"] == 9


def test_detect_warmup_none_for_a_noisy_but_steady_series():
    """Ostinato-like: starts high, varies a lot (cv ~19 %), but never ramps."""
    rng = np.random.default_rng(3)
    series = 127_000 + 24_000 * rng.standard_normal(60)
    series[0] = 121_369
    assert detect_warmup(series)["seconds"] == 0


def test_detect_warmup_needs_four_seconds():
    assert detect_warmup(np.array([1, 100, 100]))["found"] is False


def test_flow_table_counts_packets_bytes_and_times(tmp_path):
    e = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    a = e / IP(src="198.18.0.1", dst="198.19.0.1") / TCP(sport=1111, dport=80) / Raw(b"a" * 10)
    b = e / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=53, dport=5353) / Raw(b"b" * 3)
    c = e / IP(src="198.18.0.9", dst="198.19.0.9") / ICMP(type=8, id=4242)
    arp = e / ARP()
    plan = [a, b, a, arp, c, a, b, c, arp, a]
    for i, p in enumerate(plan):
        p = p.copy()
        plan[i] = p
        p.time = 1_700_000_000 + i * 0.25
    path = tmp_path / "flows.pcap"
    wrpcap(str(path), plan)
    cap = read_capture(path)
    flows = flow_table(cap)
    assert len(flows) == 3  # ARP is not a flow
    rows = {(r.src, r.sport): r for r in flows.itertuples(index=False)}
    ra, rb, rc = rows[("198.18.0.1", 1111)], rows[("2001:db8::1", 53)], rows[("198.18.0.9", 4242)]
    assert (ra.packets, ra.bytes, ra.proto, ra.dst, ra.dport) == (
        4,
        4 * len(a),
        6,
        "198.19.0.1",
        80,
    )
    assert (rb.packets, rb.bytes, rb.ip_version, rb.dst) == (2, 2 * len(b), 6, "2001:db8::2")
    assert (rc.packets, rc.proto, rc.dport) == (2, 1, 0)
    assert ra.first_ns == T0 and ra.last_ns == T0 + 9 * NS // 4
    assert ra.duration_ns == ra.last_ns - ra.first_ns
    assert flows["src"].tolist()[0] == "198.18.0.1"  # order of first appearance
    m = traffic_metrics(cap, flows)
    assert m["flows"]["count"] == 3 and m["ip_packets"] == 8
    assert m["per_second"]["flows_started"] == [2, 1, 0]


def test_many_flows_group_like_pandas(tmp_path):
    """The hashed grouping gives the same table as an exact pandas groupby."""
    rng = np.random.default_rng(1)
    n = 20_000
    ports = rng.integers(1, 3000, n)
    times = sorted(T0 + rng.integers(0, 3 * NS, n))
    cap = read_capture(
        write_pcap(tmp_path / "many.pcap", times, [udp_frame(int(p), int(p) % 64) for p in ports])
    )
    flows = flow_table(cap)
    ref = (
        cap.to_frame()
        .groupby("sport")
        .agg(
            packets=("ts_ns", "size"),
            bytes=("wire_len", "sum"),
            first_ns=("ts_ns", "min"),
            last_ns=("ts_ns", "max"),
        )
    )
    got = flows.set_index("sport")[["packets", "bytes", "first_ns", "last_ns"]].sort_index()
    assert len(flows) == len(ref)
    assert (got.to_numpy() == ref.sort_index().to_numpy()).all()


def test_empty_capture_has_no_rates(tmp_path):
    cap = read_capture(write_pcap(tmp_path / "none.pcap", [], []))
    m = traffic_metrics(cap)
    assert m["packets"] == 0 and m["mean_pps"] is None and m["flows"]["count"] == 0
    assert m["per_second"]["packets"] == []


@pytest.mark.parametrize("chunked", [False, True])
def test_a_capture_spanning_months_has_no_bins_but_every_other_number(tmp_path, chunked):
    """Two seconds of traffic, a clock jump of 2^31 s, two more: no 16 GiB of bins (the
    hostile case), the reason stated, rates None; packets, flows and sizes still counted.
    Chunked: the jump falls between two chunks, after bins were counted."""
    times = rate_pattern([100, 100])
    times += [t + 2**31 * NS for t in rate_pattern([100, 100])]
    frames = [udp_frame(1 + i // 100, 10) for i in range(len(times))]
    cap = read_capture(write_pcap(tmp_path / "jump.pcap", times, frames))
    if chunked:
        acc = TrafficAccumulator()
        for i, part in enumerate((slice(0, 200), slice(200, 400))):
            acc.add(read_capture(write_pcap(tmp_path / f"{i}.pcap", times[part], frames[part])))
        m = acc.metrics()
    else:
        m = traffic_metrics(cap)
    assert m["per_second"]["packets"] == [] and m["per_second"]["second"] == []
    assert "more than 31 days" in m["per_second"]["left_out"]
    assert m["mean_pps"] is None and m["steady"]["mean_pps"] is None
    assert m["packets"] == 400 and m["flows"]["count"] == 4
    assert m["duration_s"] == pytest.approx(2**31 + 2 - 0.01)


def test_a_capture_within_the_bin_limit_keeps_its_bins(tmp_path):
    last = (PER_SECOND_MAX_S - 1) * NS
    cap = read_capture(write_pcap(tmp_path / "month.pcap", [T0, T0 + last], [udp_frame(1, 10)] * 2))
    m = traffic_metrics(cap)
    assert m["per_second"]["left_out"] is None
    assert len(m["per_second"]["packets"]) == PER_SECOND_MAX_S
    assert sum(m["per_second"]["packets"]) == 2


def test_detect_warmup_ignores_a_higher_start_and_a_lone_early_spike():
    assert detect_warmup(np.array([2000] * 3 + [1000] * 10))["seconds"] == 0
    ramp_with_spike = [100, 1000, 200, 300, 1000, 1000, 990, 1010, 1000, 1000]
    assert detect_warmup(np.array(ramp_with_spike))["seconds"] == 4
