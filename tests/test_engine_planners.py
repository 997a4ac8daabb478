"""flowengine's two planners (--planner exact|stochastic) and the engine at scale.

Runs the real binary (fixture `flowengine_bin`). The exact planner must keep the README's output
order (due, serial, packet index) also when its timing wheel spreads keys over many levels and
periods; the stochastic planner (FLOR's Distribution Tree) must send exactly the packets of every
instance, pick flows in proportion to their intensities, and be deterministic for a seed. Large
cases check the memory and time bounds of 2^24 concurrent flows and of a 2^32-repetition
meta-flow. The whole file runs in well under a minute.
"""

import collections
import json
import random
import subprocess
import time

import pytest
from test_engine_cli import (
    ICMP4,
    ICMP6,
    expected_schedule,
    flow,
    gen,
    icmp_id_seq,
    session_text,
)

PLANNERS = ["exact", "stochastic"]


def run_null(bin_, tmp_path, text, *extra, timeout=60):
    s = tmp_path / "n.ntg"
    s.write_text(text)
    summ = tmp_path / "n.json"
    t0 = time.monotonic()
    r = subprocess.run(
        [
            str(bin_),
            "gen",
            str(s),
            "--null",
            "--stats",
            "/dev/null",
            "--summary",
            str(summ),
            *map(str, extra),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(summ.read_text()), wall


MIXED = [
    # fast UDP meta-flow, random payload sizes
    dict(
        start=0,
        period=1_000_000,
        packets=40,
        reps=6,
        rep_period=3_000_000,
        size="0-100",
        sport="1024-65535",
        sport_mode="random",
    ),
    # fast TCP
    dict(
        proto=6,
        start=5_000,
        period=250_000,
        packets=25,
        reps=3,
        rep_period=1_000_000,
        sport="2000-2999",
        sport_mode="increment",
    ),
    # slower than 1 pps: the stochastic planner's slow-flow calendar
    dict(start=0, period=1_500_000_000, packets=4, reps=2, rep_period=700_000_000),
    # single-packet flows: the calendar too
    dict(ICMP4, start=10, period=1, packets=1, reps=50, rep_period=200_000),
    dict(ICMP6, start=0, period=333_333, packets=30, reps=2, rep_period=7),
]


@pytest.mark.parametrize("planner", PLANNERS)
def test_per_flow_packet_counts_exact(flowengine_bin, tmp_path, planner):
    res = gen(flowengine_bin, tmp_path, MIXED, extra=["--planner", planner])
    summ, rows, recs = res["summary"], res["flows"], res["records"]
    assert summ["planner"] == planner and summ["status"] == "completed"
    want = {}
    serial = 0
    for k, d in enumerate(MIXED):
        for r in range(d["reps"]):
            want[serial + r] = (k, r, d["packets"])
        serial += d["reps"]
    got = {int(r["serial"]): (int(r["flow"]), int(r["rep"]), int(r["packets"])) for r in rows}
    assert got == want
    assert len(recs) == sum(p for _, _, p in want.values()) == summ["packets"]
    assert sum(int(r["bytes"]) for r in rows) == summ["bytes"] == sum(len(f) for _, f in recs)
    ts = [t for t, _ in recs]
    assert ts == sorted(ts)  # a valid pcap: time never goes back
    assert summ["flows_started"] == summ["flows_finished"] == len(want)
    assert summ["peak_rss_bytes"] > 0


def test_exact_many_periods_all_levels(flowengine_bin, tmp_path):
    # 150 lines with distinct periods from 1 ns to ~10^11 ns and starts up to ~2^41 ns: keys
    # land on every level of the timing wheel and cascade; the order must stay exact.
    rnd = random.Random(7)
    flows = []
    for k in range(150):
        base = ICMP4 if k % 2 else ICMP6
        period = rnd.choice(
            [
                1,
                2,
                3,
                255,
                256,
                257,
                65_535,
                65_537,
                10**6 + k,
                2**24 + 3 * k,
                10**9 + 7 * k,
                123_456_789_012,
            ]
        )
        flows.append(
            dict(
                base,
                start=rnd.choice([0, 1, 255, 256, 2**16 + k, 2**33 + k, 2**41]),
                period=period,
                packets=rnd.randrange(1, 12),
                reps=rnd.randrange(1, 5),
                rep_period=rnd.choice([0, 1, 300, 2**20]),
            )
        )
    recs = gen(flowengine_bin, tmp_path, flows)["records"]
    got = [(ts, *icmp_id_seq(fr)) for ts, fr in recs]
    want = [(due, serial % 65536, i % 65536) for due, serial, i in expected_schedule(flows)]
    assert got == want


def test_exact_ties_across_many_periods(flowengine_bin, tmp_path):
    # Many classes whose heads collide on the same due times: ties go by serial.
    flows = [
        dict(ICMP4, start=0, period=p, packets=12, reps=3, rep_period=p)
        for p in (60, 30, 20, 15, 12, 10, 6, 5, 4, 3, 2, 1)
    ]
    recs = gen(flowengine_bin, tmp_path, flows)["records"]
    got = [(ts, *icmp_id_seq(fr)) for ts, fr in recs]
    want = [(due, serial % 65536, i % 65536) for due, serial, i in expected_schedule(flows)]
    assert got == want


def test_stochastic_shares_follow_intensities(flowengine_bin, tmp_path):
    # Three flows at 1,000 / 2,000 / 7,000 pps, all long enough: the first 100,000 packets
    # must split 10 / 20 / 70 % within +-1 percentage point (binomial sd is ~0.15 points).
    flows = [
        dict(start=0, period=10**9 // pps, packets=200_000, sport=f"{port}-{port}")
        for pps, port in ((1000, 1), (2000, 2), (7000, 3))
    ]
    res = gen(
        flowengine_bin,
        tmp_path,
        flows,
        seed=5,
        extra=["--planner", "stochastic", "--max-packets", "100000"],
    )
    recs = res["records"]
    assert len(recs) == 100_000
    counts = collections.Counter(int.from_bytes(fr[34:36], "big") for _, fr in recs)
    shares = [counts[p] / len(recs) for p in (1, 2, 3)]
    for got, want in zip(shares, (0.1, 0.2, 0.7)):
        assert abs(got - want) <= 0.01, shares
    # The aggregate rule: 10,000 pps in all, so packets are 100 us apart.
    ts = [t for t, _ in recs]
    assert ts[0] == 0 and ts[-1] == 99_999 * 100_000
    assert all(b - a == 100_000 for a, b in zip(ts[:1000], ts[1:1001]))


def test_stochastic_deterministic_for_seed(flowengine_bin, tmp_path):
    flows = MIXED
    a = gen(flowengine_bin, tmp_path, flows, seed=9, extra=["--planner", "stochastic"], name="a")
    b = gen(flowengine_bin, tmp_path, flows, seed=9, extra=["--planner", "stochastic"], name="b")
    c = gen(flowengine_bin, tmp_path, flows, seed=10, extra=["--planner", "stochastic"], name="c")
    assert (tmp_path / "a.pcap").read_bytes() == (tmp_path / "b.pcap").read_bytes()
    assert a["flows"] == b["flows"]
    assert [fr for _, fr in a["records"]] != [fr for _, fr in c["records"]]


def test_stochastic_immediate_insertion(flowengine_bin, tmp_path):
    # A second flow starting mid-way: the tree's next packet is due right at its start.
    flows = [
        dict(start=0, period=1_000_000, packets=1000, sport="1-1"),
        dict(start=10_500_000, period=1_000_000, packets=5, sport="2-2"),
    ]
    res = gen(flowengine_bin, tmp_path, flows, extra=["--planner", "stochastic"])
    ts = [t for t, _ in res["records"]]
    assert 10_500_000 in ts
    assert ts[:11] == [i * 1_000_000 for i in range(11)]
    rows = {int(r["flow"]): r for r in res["flows"]}
    assert int(rows[1]["packets"]) == 5 and int(rows[0]["packets"]) == 1000


@pytest.mark.parametrize("planner", PLANNERS)
def test_meta_flow_2_32_reps_constant_memory(flowengine_bin, tmp_path, planner):
    text = session_text([flow(start=0, period=1000, packets=3, reps=2**32, rep_period=1000)])
    summ, _ = run_null(
        flowengine_bin, tmp_path, text, "--planner", planner, "--max-packets", 3_000_000
    )
    assert summ["status"] == "limited" and summ["packets"] == 3_000_000
    assert summ["flows_started"] >= 999_000
    assert summ["peak_rss_bytes"] < 64 * 2**20, summ


def test_2_24_concurrent_flows(flowengine_bin, tmp_path):
    n = 2**24
    # All 2^24 repetitions start within 16.8 ms and each lasts 10 s: all are live at once.
    text = session_text(
        [
            flow(
                src="10.0.0.0/8",
                src_mode="increment",
                start=0,
                period=10**9,
                packets=10,
                reps=n,
                rep_period=1,
                size="22-22",
            )
        ]
    )
    summ, wall = run_null(flowengine_bin, tmp_path, text, "--max-packets", n + 1_000_000)
    assert summ["status"] == "limited"
    assert summ["flows_started"] == n
    assert summ["flows_finished"] == 0
    assert wall < 30
    # 48-byte instance + 4-byte FIFO slot; allow for the process's base and page rounding.
    assert summ["peak_rss_bytes"] < n * 64 + 64 * 2**20, summ
