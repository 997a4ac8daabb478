"""The pure arithmetic of benchmarks/bench_trex_live.py on made-up counter polls (no timing)."""

from __future__ import annotations

from collections import namedtuple

import pytest

from benchmarks.bench_trex_live import core_split, rate_profile


def polls(rate_at, t_end: float, step: float = 0.01) -> list[tuple[float, int, int]]:
    """(time, rx_packets, rx_bytes) every `step` s from 100.0, packets arriving at rate_at(t)."""
    out, n, t = [], 0.0, 100.0
    while t <= 100.0 + t_end + 1e-9:
        out.append((round(t, 6), int(n), int(n) * 64))
        n += rate_at(t - 100.0) * step
        t += step
    return out


def test_a_sender_at_its_rate_at_once():
    s = polls(lambda t: 100_000 if 1.0 <= t < 4.0 else 0, 5.0)
    r = rate_profile(s, t_launch=100.5)
    assert r["packets"] == pytest.approx(300_000, rel=0.01) and r["bytes_per_packet"] == 64
    assert r["first_packet_s"] == pytest.approx(0.51, abs=0.011)
    assert r["pps"] == pytest.approx(100_000, rel=0.01) and r["steady_pps"] == pytest.approx(
        100_000, rel=0.01
    )
    assert r["t90_s"] == pytest.approx(r["first_packet_s"], abs=0.011) and r["cv"] < 0.05


def test_a_slow_start_is_seen_as_late_90_percent():
    # the seed's TRex: a tenth of the rate for 2 s, then the rate
    s = polls(lambda t: 0 if t < 1.0 else 10_000 if t < 3.0 else 100_000 if t < 8.0 else 0, 9.0)
    r = rate_profile(s, t_launch=100.0, t_go=100.5)
    assert r["first_packet_s"] == pytest.approx(1.01, abs=0.011)
    assert r["pps"] == pytest.approx(100_000, rel=0.01)
    assert r["t90_s"] == pytest.approx(2.99, abs=0.02) and r["go_t90_s"] == pytest.approx(
        r["t90_s"] - 0.5
    )


def test_bursts_keep_the_per_second_rate_and_show_in_the_spread():
    # trafgen -b: 100,000 packets at 740 kpps at the start of every second
    s = polls(lambda t: 740_000 if t >= 1.0 and (t - 1.0) % 1.0 < 100_000 / 740_000 else 0, 4.0)
    r = rate_profile(s, t_launch=100.0)
    assert r["pps"] == pytest.approx(100_000, rel=0.05)
    assert r["cv"] > 1.0 and r["span_pps"] > 1.2 * r["pps"]


def test_nothing_received():
    r = rate_profile(polls(lambda t: 0, 1.0), t_launch=100.2)
    assert r["packets"] == 0 and r["first_packet_s"] is None and r["t90_s"] is None


def test_core_split_is_a_share_of_the_wall_time():
    T = namedtuple("T", "user nice system idle iowait irq softirq steal guest guest_nice")
    a = [T(10, 0, 5, 100, 0, 0, 1, 0, 0, 0)]
    b = [T(30, 0, 35, 120, 0, 0, 21, 0, 0, 0)]  # +20 user, +30 system, +20 idle, +20 softirq
    assert core_split(a, b) == {
        "cpu0": {"user": 22.2, "system": 33.3, "softirq": 22.2, "steal": 0.0, "busy": 77.8}
    }
