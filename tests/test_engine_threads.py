"""flowengine `gen --threads N` (generators/flowengine/README.md, "Threads").

Runs the real binary (fixture `flowengine_bin`). With the exact planner the output of N workers
must be the one-thread output: byte-identical pcap, identical per-second CSV and flow log, equal
summary counters; the stochastic planner keeps every instance's packet count; a SIGINT leaves a
valid pcap and exact counters; live sending with one socket per worker sends exactly what the peer
receives. The file runs in well under a minute.
"""

import collections
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_engine_cli import ICMP4, ICMP6, read_csv, read_pcap, run, walk_pcap, write_session

from testbed.endpoints.netns.topology import VethPair

THREADS = [2, 3]

SESSIONS = {
    # meta-flows of every kind, random and increment modes, random payload sizes
    "mixed": [
        dict(
            start=0,
            period=1_000_000,
            packets=40,
            reps=6,
            rep_period=3_000_000,
            size="0-100",
            src="10.1.0.0/16",
            src_mode="random",
            dst="192.0.2.0/24",
            dst_mode="increment",
            sport="1024-65535",
            sport_mode="random",
            dport="80-90",
            dport_mode="increment",
        ),
        dict(
            proto=6,
            start=5_000,
            period=250_000,
            packets=25,
            reps=7,
            rep_period=1_000_000,
            sport="2000-2999",
            sport_mode="increment",
            size="0-40",
        ),
        dict(start=0, period=1_500_000_000, packets=4, reps=2, rep_period=700_000_000),
        dict(ICMP4, start=10, period=1, packets=1, reps=50, rep_period=200_000),
        dict(ICMP6, start=0, period=333_333, packets=30, reps=5, rep_period=7),
        dict(
            af=6,
            proto=6,
            src="2001:db8::/64",
            src_mode="random",
            dst="2001:db8:1::/120",
            dst_mode="increment",
            start=3,
            period=400_000,
            packets=12,
            reps=9,
            rep_period=2_500_000,
            size="1-300",
            payload="deadbeef",
        ),
        dict(
            af=6,
            proto=17,
            src="2001:db8::1/128",
            dst="2001:db8::2/128",
            start=0,
            period=10,
            packets=500,
            reps=1,
            rep_period=0,
        ),
    ],
    # many distinct periods, seconds with gaps between them (CSV gap rows)
    "periods": [
        dict(
            dict(
                start=k * 37,
                period=10_000 + 997 * k,
                packets=20 + k,
                reps=1 + k % 5,
                rep_period=k * 113,
                sport="1000-60000",
                sport_mode="random",
                proto=(6, 17, 1)[k % 3],
            ),
            **({"sport": "0-0", "sport_mode": "fixed", "dport": "0-0"} if k % 3 == 2 else {}),
        )
        for k in range(40)
    ]
    + [
        dict(start=3_000_000_000, period=700_000_000, packets=6, reps=3, rep_period=4_100_000_000),
    ],
    # pauses of more than STATS_IDLE_ROWS (3600) idle seconds: cut to their first and last
    # second in the CSV; one flow stays active over the long pause (active_flows > 0 there)
    "long-pauses": [
        dict(start=0, period=400_000_000, packets=5, reps=1, rep_period=0),
        dict(start=1_500_000_000, period=9_000 * 10**9, packets=2, reps=1, rep_period=0),
        dict(start=5_000 * 10**9, period=1_000_000, packets=3, reps=2, rep_period=3_000 * 10**9),
        dict(start=20_000 * 10**9 + 7, period=1_000_000, packets=2, reps=1, rep_period=0),
    ],
}
IDLE_ROWS = 3600  # stats.h STATS_IDLE_ROWS


def _random_session(seed):
    rnd = random.Random(seed)
    flows = []
    for _ in range(25):
        base = rnd.choice(
            [
                ICMP4,
                ICMP6,
                {},
                {"proto": 6},
                {
                    "af": 6,
                    "proto": 6,
                    "src": "2001:db8::/96",
                    "src_mode": "random",
                    "dst": "2001:db8::2/128",
                },
            ]
        )
        flows.append(
            dict(
                base,
                start=rnd.randrange(0, 200),
                period=rnd.choice([1, 3, 7, 10, 50]),
                packets=rnd.randrange(1, 30),
                reps=rnd.randrange(1, 12),
                rep_period=rnd.choice([0, 1, 5, 20, 100]),
                size="0-20",
            )
        )
    return flows


SESSIONS["random-1"] = _random_session(1)
SESSIONS["random-2"] = _random_session(2)


def gen_files(bin_, tmp_path, flows, name, *extra, sink="pcap", seed=42):
    s = write_session(tmp_path, flows, seed=seed, name=f"{name}.ntg")
    out = {
        "pcap": tmp_path / f"{name}.pcap",
        "stats": tmp_path / f"{name}.csv",
        "flows": tmp_path / f"{name}.flows.csv",
        "summary": tmp_path / f"{name}.json",
    }
    sink_args = ["-o", out["pcap"]] if sink == "pcap" else ["--null"]
    run(
        bin_,
        "gen",
        s,
        *sink_args,
        "--stats",
        out["stats"],
        "--flows",
        out["flows"],
        "--summary",
        out["summary"],
        *map(str, extra),
    )
    out["sum"] = json.loads(out["summary"].read_text())
    return out


COUNTERS = (
    "status",
    "exit_code",
    "packets",
    "bytes",
    "flows_started",
    "flows_finished",
    "first_ns",
    "last_ns",
    "sent",
    "sent_bytes",
    "failed",
    "planner",
    "sink",
    "seed",
)


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_pcap_csv_flowlog_identical(flowengine_bin, tmp_path, name):
    flows = SESSIONS[name]
    one = gen_files(flowengine_bin, tmp_path, flows, "t1")
    assert one["sum"]["threads"] == 1 and one["sum"]["packets"] > 0
    for n in THREADS:
        got = gen_files(flowengine_bin, tmp_path, flows, f"t{n}", "--threads", n)
        assert got["sum"]["threads"] == n
        assert got["pcap"].read_bytes() == one["pcap"].read_bytes(), f"{n} threads"
        assert got["stats"].read_text() == one["stats"].read_text(), f"{n} threads"
        rows1, rowsn = read_csv(one["flows"]), read_csv(got["flows"])
        key = lambda r: int(r["serial"])
        assert sorted(rowsn, key=key) == sorted(rows1, key=key)
        assert rowsn == rows1  # the merge also keeps the one-thread row order
        assert {k: got["sum"][k] for k in COUNTERS} == {k: one["sum"][k] for k in COUNTERS}


def test_csv_has_gap_rows(flowengine_bin, tmp_path):
    got = gen_files(flowengine_bin, tmp_path, SESSIONS["periods"], "g", "--threads", 2)
    rows = read_csv(got["stats"])
    assert [int(r["second"]) for r in rows] == list(range(len(rows)))
    assert any(int(r["packets"]) == 0 for r in rows)
    assert sum(int(r["packets"]) for r in rows) == got["sum"]["packets"]
    assert int(rows[-1]["active_flows"]) == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_csv_cuts_long_pauses(flowengine_bin, tmp_path, threads):
    """Every second up to the last packet has a row, except inside a run of more than IDLE_ROWS
    idle seconds, which keeps only its first and last second; active_flows is carried over."""
    got = gen_files(flowengine_bin, tmp_path, SESSIONS["long-pauses"], "p", "--threads", threads)
    rows = read_csv(got["stats"])
    busy = {
        int(r["second"]): r
        for r in rows
        if int(r["packets"]) or int(r["flows_started"]) or int(r["flows_finished"])
    }
    want, s, last = [], 0, max(busy)
    while s <= last:
        if s in busy:
            want.append(s)
            s += 1
            continue
        end = s
        while end not in busy:
            end += 1
        want += list(range(s, end)) if end - s <= IDLE_ROWS else [s, end - 1]
        s = end
    assert [int(r["second"]) for r in rows] == want
    assert len(rows) < 2 * IDLE_ROWS + 100  # 20,000 s of scenario, far fewer rows
    assert sum(int(r["packets"]) for r in rows) == got["sum"]["packets"] == 5 + 2 + 6 + 2
    active = {int(r["second"]): int(r["active_flows"]) for r in rows}
    # seconds 2..4999 are idle: cut to 2 and 4999, the 9,000 s flow open over them
    assert 3 not in active and active[2] == active[4999] == 1
    assert int(rows[-1]["active_flows"]) == 0


@pytest.mark.parametrize("n", THREADS)
def test_null_summary_counts_equal(flowengine_bin, tmp_path, n):
    flows = SESSIONS["mixed"] + SESSIONS["random-1"]
    one = gen_files(flowengine_bin, tmp_path, flows, "n1", sink="null")
    got = gen_files(flowengine_bin, tmp_path, flows, f"n{n}", "--threads", n, sink="null")
    assert got["sum"]["sink"] == "null" and got["sum"]["threads"] == n
    assert {k: got["sum"][k] for k in COUNTERS} == {k: one["sum"][k] for k in COUNTERS}
    assert got["stats"].read_text() == one["stats"].read_text()


def test_stochastic_per_flow_counts_exact(flowengine_bin, tmp_path):
    flows = SESSIONS["mixed"]
    one = gen_files(flowengine_bin, tmp_path, flows, "s1", "--planner", "stochastic")
    two = gen_files(
        flowengine_bin, tmp_path, flows, "s2", "--planner", "stochastic", "--threads", 2
    )
    assert two["sum"]["planner"] == "stochastic" and two["sum"]["status"] == "completed"

    def per_serial(rows):
        return {int(r["serial"]): (int(r["packets"]), int(r["bytes"])) for r in rows}

    want, serial = {}, 0
    for d in flows:
        for r in range(d.get("reps", 1)):
            want[serial + r] = d.get("packets", 1)
        serial += d.get("reps", 1)
    got1, got2 = per_serial(read_csv(one["flows"])), per_serial(read_csv(two["flows"]))
    assert {k: v[0] for k, v in got2.items()} == want
    assert got2 == got1  # packet and byte counts of every instance
    recs = read_pcap(two["pcap"])
    assert len(recs) == two["sum"]["packets"] == sum(want.values())
    assert all(a[0] <= b[0] for a, b in zip(recs, recs[1:]))
    assert collections.Counter(len(f) for _, f in recs) == collections.Counter(
        len(f) for _, f in read_pcap(one["pcap"])
    )


@pytest.mark.parametrize("n", THREADS)
def test_max_packets_total(flowengine_bin, tmp_path, n):
    """The total is exact (which packets, is not: README, "Threads")."""
    total = gen_files(flowengine_bin, tmp_path, SESSIONS["mixed"], "all", sink="null")["sum"]
    for limit in (1, 1000, 1025, total["packets"] - 1):
        got = gen_files(
            flowengine_bin, tmp_path, SESSIONS["mixed"], "m", "--threads", n, "--max-packets", limit
        )
        s = got["sum"]
        assert s["status"] == "limited" and s["exit_code"] == 0 and s["packets"] == limit
        assert walk_pcap(got["pcap"]) == limit
        assert sum(int(r["packets"]) for r in read_csv(got["flows"])) == limit
        assert sum(int(r["packets"]) for r in read_csv(got["stats"])) == limit
    got = gen_files(
        flowengine_bin,
        tmp_path,
        SESSIONS["mixed"],
        "m",
        "--threads",
        n,
        "--max-packets",
        total["packets"],
    )
    assert got["sum"]["status"] == "completed" and got["sum"]["packets"] == total["packets"]


@pytest.mark.parametrize("value", ["0", "257", "-1", "two"])
def test_bad_thread_count_is_usage_error(flowengine_bin, tmp_path, value):
    s = write_session(tmp_path, [{}])
    r = run(flowengine_bin, "gen", s, "--null", "--threads", value, check=False)
    assert r.returncode == 2 and "--threads" in r.stderr


def test_sigint_two_threads_valid_pcap(flowengine_bin, tmp_path):
    s = write_session(
        tmp_path,
        [
            dict(packets=10**9, period=1, size="22-22"),
            dict(
                packets=10**6,
                period=1000,
                reps=1000,
                rep_period=1,
                sport="1000-2000",
                sport_mode="increment",
            ),
        ],
    )
    outdir = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp_path
    pcap = outdir / f"flowengine-threads-test-{os.getpid()}.pcap"
    summ, flows_csv, stats = tmp_path / "sum.json", tmp_path / "flows.csv", tmp_path / "st.csv"
    try:
        proc = subprocess.Popen(
            [
                str(flowengine_bin),
                "gen",
                str(s),
                "-o",
                str(pcap),
                "--threads",
                "2",
                "--summary",
                str(summ),
                "--flows",
                str(flows_csv),
                "--stats",
                str(stats),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)
        assert proc.poll() is None, "finished before the signal"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        sm = json.loads(summ.read_text())
        assert sm["status"] == "interrupted" and sm["signal"] == "SIGINT"
        assert sm["exit_code"] == 130 and sm["threads"] == 2
        assert walk_pcap(pcap) == sm["packets"] > 0  # complete records, time never goes back
        rows = read_csv(flows_csv)
        assert sum(int(r["packets"]) for r in rows) == sm["packets"]
        assert len(rows) == sm["flows_started"]
        assert sum(int(r["packets"]) for r in read_csv(stats)) == sm["packets"]
    finally:
        pcap.unlink(missing_ok=True)


@pytest.mark.usefixtures("root")
@pytest.mark.parametrize("tx", ["sendmmsg", "ring"])
def test_live_two_threads_sent_equals_peer_rx(flowengine_bin, tmp_path, tx):
    import shutil

    if shutil.which("ip") is None:
        pytest.skip("iproute2 (`ip netns`) is not installed")
    import test_engine_live as live

    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10)
    if probe.returncode != 0:
        pytest.skip("`ip netns` is not usable here")
    pair = VethPair(prefix="ntgtest")
    try:
        pair.setup()
        text = live.session_text({"packets": 5_000, "period": 1000, "reps": 4, "rep_period": 1})
        before = pair.rx()
        p, s, _ = live.run(
            flowengine_bin,
            pair,
            tmp_path,
            text,
            "--iface",
            "veth0",
            "--pace",
            "topspeed",
            "--tx",
            tx,
            "--threads",
            "2",
        )
        assert p.returncode == 0, p.stderr
        assert s["status"] == "completed" and s["threads"] == 2
        assert s["sink"] == f"afpacket-{tx}"
        assert s["sent"] == s["packets"] == 20_000 and s["failed"] == 0
        assert s["sent_bytes"] == s["bytes"] == 20_000 * 64
        assert pair.rx() - before == s["sent"]
        rows = read_csv(tmp_path / "stats.csv")
        assert sum(int(r["packets"]) for r in rows) == 20_000
    finally:
        pair.teardown()


@pytest.mark.usefixtures("root")
def test_live_two_threads_realtime_common_start(flowengine_bin, tmp_path):
    """Paced from one start: two workers' flows of 0.5 s take 0.5 s together, not more."""
    import shutil

    if shutil.which("ip") is None:
        pytest.skip("iproute2 (`ip netns`) is not installed")
    import test_engine_live as live

    pair = VethPair(prefix="ntgtest")
    try:
        pair.setup()
        text = live.session_text({"packets": 500, "period": 1_000_000, "reps": 2, "rep_period": 0})
        before = pair.rx()
        p, s, wall = live.run(
            flowengine_bin, pair, tmp_path, text, "--iface", "veth0", "--threads", "2"
        )
        assert p.returncode == 0, p.stderr
        assert s["pace"] == "realtime" and s["sent"] == s["packets"] == 1000
        assert pair.rx() - before == 1000
        assert 0.45 <= s["wall_seconds"] < 1.5, s
        header = (tmp_path / "stats.csv").read_text().splitlines()[0]
        assert header.endswith(",late")
    finally:
        pair.teardown()
