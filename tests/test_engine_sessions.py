"""flowengine's `dist` and `session` lines: two-way TCP and UDP sessions
(generators/flowengine/README.md, "Dist lines", "Session lines").

Runs the real binary (fixture `flowengine_bin`) on session files written here by hand and reads
its pcap back with tshark (TCP analysis and checksum validation on) and with the project's pcap
reader; the flow log's per-direction columns are checked against the packets and against the
README's draw rules, re-computed here in numpy (SplitMix64, the integer alias table).
"""

from __future__ import annotations

import csv
import json
import shutil
import struct
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from analysis.capture import iter_frames
from ntgcore.packets import PcapWriter, addr, ether, ipv4, udp

GAMMA = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1
CMAC, SMAC = "02:00:00:00:00:01", "02:00:00:00:00:02"

needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")


# ---- the README's draw rules, in numpy ------------------------------------------------------


def mix(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def stream_start(seed: int, serials: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return mix(np.uint64(seed) ^ mix(serials.astype(np.uint64) + np.uint64(GAMMA)))


def draw(rng0: np.ndarray, j: int) -> np.ndarray:
    """Draw j (1-based) of the instance streams starting at rng0."""
    with np.errstate(over="ignore"):
        return mix(rng0 + np.uint64((j * GAMMA) & M64))


def alias_table(weights: list[int]) -> tuple[list[int], list[int]]:
    """The README's integer Vose table: thresholds and aliases."""
    n, t = len(weights), sum(weights)
    s = [w * n for w in weights]
    thr, alias = [0xFFFFFFFF] * n, list(range(n))
    small = [i for i in range(n) if s[i] < t]
    large = [i for i in range(n) if s[i] >= t]
    while small and large:
        lo, g = small.pop(), large[-1]
        thr[lo] = (s[lo] << 32) // t
        alias[lo] = g
        s[g] -= t - s[lo]
        if s[g] < t:
            large.pop()
            small.append(g)
    return thr, alias


def dist_values(bins: list[tuple[int, int, int]], r: np.ndarray, r2: np.ndarray) -> np.ndarray:
    """Values of a dist from its two draws per value (r: the bin, r2: inside it)."""
    thr, alias = alias_table([w for _, _, w in bins])
    n = len(bins)
    col = ((r >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32)
    low = r & np.uint64(0xFFFFFFFF)
    ok = low < np.array(thr, dtype=np.uint64)[col]
    b = np.where(ok, col, np.array(alias, dtype=np.uint64)[col]).astype(np.int64)
    lo = np.array([a for a, _, _ in bins], dtype=np.uint64)[b]
    span = np.array([h - a for a, h, _ in bins], dtype=np.uint64)[b]
    return (lo + np.where(span > 0, r2 % (span + np.uint64(1)), np.uint64(0))).astype(np.int64)


def dist_line(i: int, bins: list[tuple[int, int, int]]) -> str:
    return f"dist {i} " + " ".join(f"{a}-{b}:{w}" for a, b, w in bins)


# ---- sessions -------------------------------------------------------------------------------


def sess_line(**kw) -> str:
    d = dict(
        af=4,
        proto=6,
        cmac=CMAC,
        smac=SMAC,
        client="198.18.0.0/24",
        server="198.19.0.1/32",
        client_mode="increment",
        server_mode="fixed",
        cport="1024-65535",
        sport="80-80",
        cport_mode="increment",
        sport_mode="fixed",
        start=0,
        reps=1,
        arrival=1_000_000,
        rtt=20_000,
        gap=1_000,
        mss=1000,
        win=2,
        rounds=1,
        req=100,
        resp=2500,
        close="fin",
    )
    d.update(kw)
    return "session " + " ".join(f"{k}={v}" for k, v in d.items())


FLOW = (
    "flow af=4 proto=17 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 src=198.18.9.1/32 "
    "src_mode=fixed dst=198.19.9.0/24 dst_mode=increment sport=1024-65535 sport_mode=random "
    "dport=53-53 dport_mode=fixed start=0 period=3000 packets=20 size=20-100 payload=- reps=40 "
    "rep_period=2000"
)


def write(tmp_path: Path, *lines: str, seed: int = 3, name: str = "s.ntg") -> Path:
    p = tmp_path / name
    p.write_text(f"ntg-session 1\nseed {seed}\n" + "\n".join(lines) + "\n")
    return p


def gen(bin_, sess: Path, *args, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_), "gen", str(sess), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run(bin_, tmp_path: Path, sess: Path, *args, tag: str = "") -> tuple[Path, list[dict], dict]:
    """Runs to a pcap; returns it, the flow log rows and the summary."""
    out, flows, summ = (tmp_path / f"out{tag}.{x}" for x in ("pcap", "csv", "json"))
    r = gen(
        bin_,
        sess,
        "-o",
        out,
        "--flows",
        flows,
        "--summary",
        summ,
        "--stats",
        tmp_path / f"stats{tag}.csv",
        *args,
    )
    assert r.returncode == 0, r.stderr
    with open(flows) as f:
        rows = list(csv.DictReader(f))
    return out, rows, json.loads(summ.read_text())


TSHARK_FIELDS = (
    "frame.time_epoch",
    "ip.src",
    "ipv6.src",
    "tcp.stream",
    "udp.stream",
    "tcp.flags",
    "tcp.seq_raw",
    "tcp.ack_raw",
    "tcp.len",
    "udp.length",
    "tcp.analysis.flags",
    "tcp.checksum.status",
    "udp.checksum.status",
    "ip.checksum.status",
)


def tshark(pcap: Path) -> list[dict[str, str]]:
    r = subprocess.run(
        [
            "tshark",
            "-r",
            str(pcap),
            "-o",
            "tcp.check_checksum:TRUE",
            "-o",
            "udp.check_checksum:TRUE",
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "tcp.analyze_sequence_numbers:TRUE",
            "-T",
            "fields",
            "-E",
            "separator=|",
            *[a for f in TSHARK_FIELDS for a in ("-e", f)],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return [dict(zip(TSHARK_FIELDS, ln.split("|"))) for ln in r.stdout.splitlines()]


SYN, FIN, RST, PSH, ACK = 0x02, 0x01, 0x04, 0x08, 0x10


# ---- dist lines -----------------------------------------------------------------------------


def test_dist_draws_follow_the_readme_and_the_weights(flowengine_bin, tmp_path):
    """100,000 UDP instances, one request each whose size is a dist draw: the flow log's
    request bytes are exactly the README's alias draws, and their frequencies match the
    weights (chi-square with a deterministic seed)."""
    bins = [(100, 100, 1), (200, 200, 2), (300, 300, 3), (1000, 1999, 10), (5000, 5000, 4)]
    n = 100_000
    sess = write(
        tmp_path,
        dist_line(7, bins),
        sess_line(
            proto=17,
            reps=n,
            arrival=10,
            rtt=2,
            gap=1,
            mss=65000,
            req="D:7",
            resp=0,
            client_mode="fixed",
            client="198.18.0.1/32",
            cport="4000-4000",
            cport_mode="fixed",
        ),
        seed=11,
    )
    flows = tmp_path / "f.csv"
    r = gen(flowengine_bin, sess, "--null", "--flows", flows, "--stats", "/dev/null")
    assert r.returncode == 0, r.stderr
    got = np.loadtxt(flows, delimiter=",", skiprows=1, usecols=(0, 15), dtype=np.int64)
    got = got[np.argsort(got[:, 0])]
    assert len(got) == n
    # UDP, fixed endpoints and rounds: no draw at activation, round 0's request at draws 1, 2.
    rng0 = stream_start(11, got[:, 0])
    want = dist_values(bins, draw(rng0, 1), draw(rng0, 2))
    assert np.array_equal(got[:, 1], want)
    # Frequencies against the weights.
    w = np.array([b[2] for b in bins], dtype=float)
    expect = n * w / w.sum()
    counts = np.array(
        [np.count_nonzero((got[:, 1] >= a) & (got[:, 1] <= b)) for a, b, _ in bins], dtype=float
    )
    chi2 = float(((counts - expect) ** 2 / expect).sum())
    assert chi2 < 25, (counts, expect)  # 4 degrees of freedom: p < 1e-4
    inside = got[:, 1][(got[:, 1] >= 1000) & (got[:, 1] <= 1999)]
    assert abs(inside.mean() - 1499.5) < 10 and inside.min() < 1010 and inside.max() > 1990


# ---- TCP ------------------------------------------------------------------------------------


def expected_tcp(
    h: int,
    gap: int,
    mss: int,
    win: int,
    req: int,
    resp: int,
    close: str,
    *,
    rounds: int = 1,
    think: int = 0,
    linger: int = 0,
):
    """The README's packet sequence of one instance: (t, dir, flags, payload bytes)."""
    out: list[tuple[int, int, int, int]] = []

    def add(d: int, flags: int, n: int = 0, delay: int = 0) -> None:
        if not out:
            t = 0
        elif delay:
            t = out[-1][0] + delay
        else:
            t = out[-1][0] + (gap if out[-1][1] == d else h)
        out.append((t, d, flags, n))

    add(0, SYN)
    add(1, SYN | ACK)
    add(0, ACK)
    for r in range(rounds):
        first = r > 0  # think: before the first data segment of rounds 1 on
        for d, size in ((0, req), (1, resp)):
            left = size
            while left:
                segs = 0
                while left and segs < win:
                    n = min(mss, left)
                    left -= n
                    segs += 1
                    add(d, ACK | (0 if left else PSH), n, think if first else 0)
                    first = False
                for _ in range((segs + 1) // 2):
                    add(1 - d, ACK)
    if close == "fin":
        add(0, FIN | ACK, delay=linger)
        add(1, FIN | ACK)
        add(0, ACK)
    elif close == "rst":
        add(0, RST | ACK, delay=linger)
    return out  # close "none": the last exchange ends the instance


@needs_tshark
@pytest.mark.parametrize("close", ["fin", "rst", "none"])
def test_tcp_session_sequence_and_tshark_analysis(flowengine_bin, tmp_path, close):
    """One TCP instance: handshake, request, response in flights with ACKs, FIN, RST or no close,
    exactly as the README times them; tshark finds no analysis flag, every checksum good and
    sequence/ACK numbers that chain."""
    h, gap = 10_000, 1_000
    sess = write(
        tmp_path, sess_line(rtt=2 * h, gap=gap, mss=1000, win=2, req=2500, resp=4100, close=close)
    )
    pcap, rows, summ = run(flowengine_bin, tmp_path, sess)
    pk = tshark(pcap)
    want = expected_tcp(h, gap, 1000, 2, 2500, 4100, close)
    t0 = float(pk[0]["frame.time_epoch"])
    got = [
        (
            round((float(p["frame.time_epoch"]) - t0) * 1e9),
            0 if p["ip.src"] == "198.18.0.0" else 1,
            int(p["tcp.flags"], 16),
            int(p["tcp.len"]),
        )
        for p in pk
    ]
    assert got == want
    assert all(p["tcp.analysis.flags"] == "" for p in pk), [p["tcp.analysis.flags"] for p in pk]
    assert {p["tcp.checksum.status"] for p in pk} == {"1"}
    assert {p["ip.checksum.status"] for p in pk} == {"1"}
    # SEQ/ACK as a stack sends them: a side's sequence numbers follow its bytes (SYN and FIN
    # take one); data, SYN|ACK, FIN and RST acknowledge all the other side sent; a pure ACK
    # answering a flight acknowledges two more segments than the one before it (the last: all).
    nxt: dict[int, int] = {}
    last_ack: dict[int, int] = {}
    prev_pure: dict[int, bool] = {}
    for p, (_, d, flags, n) in zip(pk, want):
        seq, ack = int(p["tcp.seq_raw"]), int(p["tcp.ack_raw"])
        if flags & SYN:
            nxt[d] = seq
        assert seq == nxt[d]
        nxt[d] = (seq + n + (1 if flags & (SYN | FIN) else 0)) & 0xFFFFFFFF
        if not flags & ACK:
            continue
        if n or flags & (SYN | FIN | RST):
            assert ack == nxt[1 - d]
        else:
            # Never ahead of what the other side sent, never behind this side's last ACK, and
            # two pure ACKs in a row move on (no duplicate ACK).
            assert (nxt[1 - d] - ack) & 0xFFFFFFFF < 2**31
            if d in last_ack:
                moved = (ack - last_ack[d]) & 0xFFFFFFFF
                assert moved < 2**31 and (moved > 0 or prev_pure.get(d) is False)
        prev_pure[d] = not n and flags == ACK
        last_ack[d] = ack
    (row,) = rows
    assert int(row["c_payload"]) == 2500 and int(row["s_payload"]) == 4100
    assert int(row["packets"]) == len(want) == summ["packets"]
    assert int(row["s_packets"]) == sum(1 for w in want if w[1] == 1)
    assert int(row["first_ns"]) == 0 and int(row["last_ns"]) == want[-1][0]
    assert (row["src"], row["dst"], row["sport"], row["dport"]) == (
        "198.18.0.0",
        "198.19.0.1",
        "1024",
        "80",
    )


@needs_tshark
def test_tcp_sessions_drawn_bytes_match_streams_and_readme(flowengine_bin, tmp_path):
    """Many TCP instances with drawn rounds, request and response sizes, random client hosts
    and a drawn server port: per tshark stream, the bytes of each direction equal the flow
    log's, which equal the README's draws; no analysis flag anywhere."""
    req = [(0, 0, 2), (1, 700, 3), (1460, 1460, 2), (3000, 9000, 1)]
    resp = [(1, 1, 1), (2000, 30000, 3)]
    ports = [(80, 80, 7), (443, 443, 3)]
    sess = write(
        tmp_path,
        dist_line(0, req),
        dist_line(1, resp),
        dist_line(2, ports),
        dist_line(3, [(300, 3000, 1)]),
        sess_line(
            client="198.18.0.0/16",
            client_mode="random",
            sport_mode="D:2",
            reps=150,
            arrival="D:3",
            rtt=4000,
            gap=100,
            mss=1460,
            win=4,
            req="D:0",
            resp="D:1",
        ),
        seed=5,
    )
    pcap, rows, summ = run(flowengine_bin, tmp_path, sess)
    pk = tshark(pcap)
    assert pk and all(p["tcp.analysis.flags"] == "" for p in pk)
    assert {p["tcp.checksum.status"] for p in pk} == {"1"}
    per: dict[tuple[str, int], int] = defaultdict(int)
    client: dict[str, str] = {}
    for p in pk:
        s = p["tcp.stream"]
        client.setdefault(s, p["ip.src"])  # the SYN's sender
        per[s, 0 if p["ip.src"] == client[s] else 1] += int(p["tcp.len"])
    rows.sort(key=lambda r: int(r["serial"]))
    assert len(client) == len(rows) == 150 == summ["flows_finished"]
    streams = sorted(client, key=int)  # tshark numbers streams in order of their first packet
    starts = [int(r["first_ns"]) for r in rows]
    assert starts == sorted(starts)
    for s, r in zip(streams, rows):
        assert (per[s, 0], per[s, 1]) == (int(r["c_payload"]), int(r["s_payload"]))
    # The README's draws: client host 1, server port 2-3, ISNs 4 and 5, then round 0's request
    # at 6-7 and response at 8-9 (rounds fixed).
    serial = np.array([int(r["serial"]) for r in rows], dtype=np.uint64)
    rng0 = stream_start(5, serial)
    assert [int(r["c_payload"]) for r in rows] == dist_values(
        req, draw(rng0, 6), draw(rng0, 7)
    ).tolist()
    assert [int(r["s_payload"]) for r in rows] == dist_values(
        resp, draw(rng0, 8), draw(rng0, 9)
    ).tolist()
    assert [int(r["dport"]) for r in rows] == dist_values(
        ports, draw(rng0, 2), draw(rng0, 3)
    ).tolist()
    host = (draw(rng0, 1) & np.uint64(0xFFFF)).astype(np.int64)
    assert [r["src"] for r in rows] == [f"198.18.{x >> 8}.{x & 255}" for x in host.tolist()]
    # Arrivals: the line's own stream, rep r+1 at start_r + a draw of dist 3.
    state = int(
        mix(np.array([5 ^ int(mix(np.array([0x3C6EF372FE94F82B], np.uint64))[0])], np.uint64))[0]
    )
    t, want = 0, [0]
    for _ in range(149):
        outs = []
        for _ in range(2):
            state = (state + GAMMA) & M64
            outs.append(int(mix(np.array([state], np.uint64))[0]))
        t += int(
            dist_values(
                [(300, 3000, 1)], np.array([outs[0]], np.uint64), np.array([outs[1]], np.uint64)
            )[0]
        )
        want.append(t)
    assert starts == want


# ---- UDP ------------------------------------------------------------------------------------


def test_udp_rounds_and_the_empty_instance(flowengine_bin, tmp_path):
    """UDP: per round the request datagrams spaced by gap, the response h after the request,
    the next round h after it; an instance with nothing to send sends one empty request."""
    h, gap = 5_000, 100
    sess = write(
        tmp_path,
        sess_line(
            proto=17, rounds=3, req=150, resp=2100, mss=1000, rtt=2 * h, gap=gap, sport="53-53"
        ),
        sess_line(
            proto=17, rounds=4, req=0, resp=0, start=10**9, sport="53-53", client="198.18.5.0/24"
        ),
        sess_line(
            af=6,
            proto=17,
            rounds=2,
            req=0,
            resp=10,
            start=2 * 10**9,
            sport="53-53",
            client="2001:db8::/64",
            server="2001:db8:1::1/128",
            rtt=2 * h,
            gap=gap,
        ),
    )
    pcap, rows, summ = run(flowengine_bin, tmp_path, sess)
    frames = list(iter_frames(pcap))
    ts = [t for t, _, _ in frames]
    lens = [len(b) for _, _, b in frames]
    # Instance 0: 3 rounds of 150 out, 1000 + 1000 + 100 back.
    one = [0, h, h + gap, h + 2 * gap]
    want_t: list[int] = []
    t = 0
    for _ in range(3):
        want_t += [t + x for x in one]
        t += h + 2 * gap + h
    assert ts[:12] == want_t
    assert lens[:12] == [42 + 150, 42 + 1000, 42 + 1000, 42 + 100] * 3
    # Instance 1: all rounds empty -> one empty request.
    assert ts[12] == 10**9 and lens[12] == 42
    # Instance 2 (IPv6): only responses, h apart between the rounds.
    assert ts[13:] == [2 * 10**9, 2 * 10**9 + h] and lens[13:] == [62 + 10, 62 + 10]
    assert [(r["c_payload"], r["s_payload"], r["packets"], r["s_packets"]) for r in rows] == [
        ("450", "6300", "12", "9"),
        ("0", "0", "1", "0"),
        ("0", "20", "2", "2"),
    ]
    assert summ["packets"] == 15 and summ["flows_finished"] == 3
    if shutil.which("tshark"):
        pk = tshark(pcap)
        assert {p["udp.checksum.status"] for p in pk} == {"1"}


# ---- think, linger ---------------------------------------------------------------------------


@needs_tshark
@pytest.mark.parametrize("close,req", [("fin", 300), ("rst", 0)])
def test_tcp_think_and_linger_timing(flowengine_bin, tmp_path, close, req):
    """think replaces the rule before the first data segment of rounds 1 on (the client's, or
    the server's when the request is empty), linger before the close's first packet; tshark
    reads the times back and still finds no analysis flag and good checksums."""
    h, gap, think, linger = 10_000, 1_000, 7_000_000, 50_000_000
    kw = dict(rtt=2 * h, gap=gap, mss=1000, win=2, req=req, resp=2500, close=close, rounds=3)
    sess = write(tmp_path, sess_line(**kw, think=think, linger=linger))
    pcap, rows, _ = run(flowengine_bin, tmp_path, sess)
    pk = tshark(pcap)
    want = expected_tcp(h, gap, 1000, 2, req, 2500, close, rounds=3, think=think, linger=linger)
    got = [
        (
            round(float(p["frame.time_epoch"]) * 1e9),
            0 if p["ip.src"] == "198.18.0.0" else 1,
            int(p["tcp.flags"], 16),
            int(p["tcp.len"]),
        )
        for p in pk
    ]
    assert got == want
    # The rule's own timing without the keys, for contrast: the same packets, earlier.
    plain = expected_tcp(h, gap, 1000, 2, req, 2500, close, rounds=3)
    assert [w[1:] for w in plain] == [w[1:] for w in want] and plain[-1][0] < want[-1][0]
    assert all(p["tcp.analysis.flags"] == "" for p in pk), [p["tcp.analysis.flags"] for p in pk]
    assert {p["tcp.checksum.status"] for p in pk} == {"1"}
    (row,) = rows
    assert int(row["c_payload"]) == 3 * req and int(row["s_payload"]) == 3 * 2500
    assert int(row["last_ns"]) == want[-1][0]


def test_udp_think_and_ignored_linger(flowengine_bin, tmp_path):
    """UDP: think before each round's first datagram from round 1 on; linger is accepted and
    ignored. Leaving both out or giving 0 is the same pcap as before the keys."""
    h, gap, think = 5_000, 100, 1_000_000
    kw = dict(proto=17, rounds=3, req=150, resp=2100, mss=1000, rtt=2 * h, gap=gap, sport="53-53")
    sess = write(tmp_path, sess_line(**kw, think=think, linger=123_456))
    pcap, rows, _ = run(flowengine_bin, tmp_path, sess)
    ts = [t for t, _, _ in iter_frames(pcap)]
    want: list[int] = []
    t = 0
    for r in range(3):
        t += think if r else 0
        want += [t, t + h, t + h + gap, t + h + 2 * gap]
        t = want[-1]
    assert ts == want
    assert int(rows[0]["last_ns"]) == want[-1]
    a, _, _ = run(flowengine_bin, tmp_path, write(tmp_path, sess_line(**kw), name="a"), tag="a")
    b, _, _ = run(
        flowengine_bin,
        tmp_path,
        write(tmp_path, sess_line(**kw, think=0, linger=0), name="b"),
        tag="b",
    )
    assert a.read_bytes() == b.read_bytes()
    assert [t for t, _, _ in iter_frames(a)][4] == want[3] + h  # round 1 after h, not think


# ---- think and linger drawn from a dist (D:ID) ----------------------------------------------

PAUSE_C = 4 * (1 << 20)  # think / linger draws: base + 4 * SESS_MAX_ROUNDS (+ r for round r)
THINK_BINS = [(10_000, 10_000, 1), (3_000_000, 3_000_000, 2), (20_000_000, 20_000_000, 5)]
LINGER_BINS = [(40_000, 40_000, 3), (3_000_000, 3_000_000, 1), (500_000, 500_000, 1)]


def point_values(bins: list[tuple[int, int, int]], r: np.ndarray) -> np.ndarray:
    """Values of a dist of one-value bins from its one draw per value."""
    return dist_values(bins, r, np.zeros_like(r))


def chi2(vals: np.ndarray, bins: list[tuple[int, int, int]]) -> float:
    w = np.array([b[2] for b in bins], dtype=float)
    expect = len(vals) * w / w.sum()
    counts = np.array([np.count_nonzero(vals == a) for a, _, _ in bins], dtype=float)
    return float(((counts - expect) ** 2 / expect).sum())


def tcp_pauses(pcap: Path) -> tuple[np.ndarray, dict[int, list[int]], dict[int, int]]:
    """Per instance (its client port; IPv4 TCP, client 198.18.0.x): the delays before the
    client's data segments of rounds 1 on and before its FIN, read back from the pcap."""
    last: dict[int, int] = {}
    seen_data: Counter[int] = Counter()
    think: dict[int, list[int]] = defaultdict(list)
    linger: dict[int, int] = {}
    for t, _, f in iter_frames(pcap):
        client = f[26:29] == bytes([198, 18, 0])
        cport = struct.unpack_from("!H", f, 34 if client else 36)[0]
        flags, plen = f[47], len(f) - 54
        if client and plen:
            if seen_data[cport]:
                think[cport].append(t - last[cport])
            seen_data[cport] += 1
        if client and flags & FIN:
            linger[cport] = t - last[cport]
        last[cport] = t
    ports = np.array(sorted(think), dtype=np.int64)
    return ports, think, linger


def test_think_and_linger_from_dists(flowengine_bin, tmp_path):
    """think=D: and linger=D: (three values each, one of them h, one shared by both): every
    pause read back from the pcap is one of the values, exactly the README's draw (round r's
    think at base + 4 * 2^20 + r, the linger at base + 4 * 2^20), their frequencies match the
    weights, and --threads 2 writes the same bytes."""
    n, h = 2000, 10_000
    sess = write(
        tmp_path,
        dist_line(1, THINK_BINS),
        dist_line(2, LINGER_BINS),
        sess_line(
            reps=n,
            client="198.18.0.0/24",
            arrival=100_000,
            rtt=2 * h,
            rounds=3,
            req=100,
            resp=2500,
            think="D:1",
            linger="D:2",
        ),
        seed=5,
    )
    pcap, rows, summ = run(flowengine_bin, tmp_path, sess)
    assert summ["flows_finished"] == n
    ports, think, linger = tcp_pauses(pcap)
    assert len(ports) == n and all(len(think[p]) == 2 for p in ports)
    got_t = np.array([think[p] for p in ports], dtype=np.int64)  # [instance, round 1 / 2]
    got_l = np.array([linger[p] for p in ports], dtype=np.int64)
    # Increment ports from 1024: the instance's serial; TCP: ISNs at draws 1, 2, base 3.
    rng0 = stream_start(5, ports - 1024)
    base = 3 + PAUSE_C
    for r in (1, 2):
        assert np.array_equal(got_t[:, r - 1], point_values(THINK_BINS, draw(rng0, base + r)))
    assert np.array_equal(got_l, point_values(LINGER_BINS, draw(rng0, base)))
    assert set(np.unique(got_t)) <= {a for a, _, _ in THINK_BINS}
    assert chi2(got_t.ravel(), THINK_BINS) < 18.4  # 2 degrees of freedom: p < 1e-4
    assert chi2(got_l, LINGER_BINS) < 18.4
    # A round's two thinks are independent draws (not one per instance).
    assert np.count_nonzero(got_t[:, 0] != got_t[:, 1]) > n // 4
    two, _, _ = run(flowengine_bin, tmp_path, sess, "--threads", 2, tag="2")
    assert two.read_bytes() == pcap.read_bytes()
    assert (tmp_path / "out2.csv").read_bytes() == (tmp_path / "out.csv").read_bytes()


def test_udp_think_from_a_dist(flowengine_bin, tmp_path):
    """UDP: the think before each later round's first datagram is the round's own draw;
    linger=D: is checked and ignored."""
    n, h = 600, 5_000
    sess = write(
        tmp_path,
        dist_line(1, THINK_BINS),
        dist_line(2, LINGER_BINS),
        sess_line(
            proto=17,
            reps=n,
            arrival=50_000,
            rtt=2 * h,
            gap=100,
            rounds=4,
            req=150,
            resp=300,
            mss=1000,
            sport="53-53",
            think="D:1",
            linger="D:2",
        ),
        seed=8,
    )
    pcap, _, _ = run(flowengine_bin, tmp_path, sess)
    times: dict[int, list[int]] = defaultdict(list)
    for t, _, f in iter_frames(pcap):
        client = f[26:29] == bytes([198, 18, 0])
        times[struct.unpack_from("!H", f, 34 if client else 36)[0]].append(t)
    ports = np.array(sorted(times), dtype=np.int64)
    ts = np.array([times[p] for p in ports], dtype=np.int64)  # 4 rounds x (request, response)
    assert ts.shape == (n, 8)
    assert np.all(ts[:, 1::2] - ts[:, 0::2] == h)  # each response h after its request
    got = ts[:, 2::2] - ts[:, 1:-1:2]  # before the requests of rounds 1..3
    # UDP, increment client and port, fixed rounds: no activation draw, base 1.
    rng0 = stream_start(8, ports - 1024)
    want = np.stack([point_values(THINK_BINS, draw(rng0, 1 + PAUSE_C + r)) for r in (1, 2, 3)])
    assert np.array_equal(got, want.T)
    assert chi2(got.ravel(), THINK_BINS) < 18.4


# ---- decks (P:ID) --------------------------------------------------------------------------

DECK_C = 0xA54FF53A5F1D36F1


def mix1(z: int) -> int:
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def deck_pos(seed: int, index: int, side: int, rep: int, n: int) -> int:
    """The README's bijection pi_q(rep mod n), q = rep // n: a 4-round Feistel network on the
    smallest 2^b >= n, cycle-walked into [0, n)."""
    x, b = rep % n, (n - 1).bit_length()
    if b == 0:
        return 0
    line = mix1(seed ^ mix1((index << 1 | side) + DECK_C))
    cyc = mix1(line + (rep // n) * GAMMA)
    keys = [mix1(cyc + (i + 1) * GAMMA) for i in range(4)]
    while True:
        wh, wl = b - b // 2, b // 2
        for k in keys:
            left, right = x >> wl, x & ((1 << wl) - 1)
            x = right << wh | ((left ^ mix1(k ^ right)) & ((1 << wh) - 1))
            wh, wl = wl, wh
        if x < n:
            return x


def deck(bins: list[tuple[int, int, int]]) -> list[int]:
    return [lo for lo, _, w in bins for _ in range(w)]


def test_deck_ports_are_permutations_per_cycle(flowengine_bin, tmp_path):
    """P:ID: every cycle of N instances takes each deck value exactly its weight times, in an
    order that differs per cycle; the ports are the README's Feistel positions (re-computed
    here), the other draws keep their indices (as with D:ID), and --threads 1 and 2 agree."""
    small = [(1000, 1000, 3), (2000, 2000, 1), (3000, 3000, 5), (4000, 4000, 2)]  # N = 11
    wide = [(40000 + i, 40000 + i, 1) for i in range(1000)]  # N = 1000: no port twice
    one = [(53, 53, 1)]
    req = [(1, 5000, 1)]
    lines = [
        dist_line(0, small),
        dist_line(1, wide),
        dist_line(2, req),
        dist_line(3, one),
        sess_line(
            proto=17,
            client="198.18.0.1/32",
            client_mode="fixed",
            cport_mode="P:1",
            sport_mode="P:0",
            reps=3000,
            arrival=100,
            rtt=2,
            gap=1,
            mss=65000,
            req="D:2",
            resp=0,
        ),
        sess_line(cport_mode="P:0", sport_mode="P:3", reps=33, arrival=5000, req="D:2", resp=10),
    ]
    sess = write(tmp_path, *lines, seed=21)
    outs = {}
    for n in (1, 2):
        pcap, rows, summ = run(flowengine_bin, tmp_path, sess, "--threads", n, tag=str(n))
        outs[n] = (pcap.read_bytes(), (tmp_path / f"out{n}.csv").read_bytes())
        assert summ["flows_finished"] == 3033
    assert outs[1] == outs[2]
    rows.sort(key=lambda r: int(r["serial"]))
    udp = [r for r in rows if r["flow"] == "0"]
    tcp = [r for r in rows if r["flow"] == "1"]
    assert [int(r["rep"]) for r in udp] == list(range(3000))
    cports = [int(r["sport"]) for r in udp]
    sports = [int(r["dport"]) for r in udp]
    assert cports == [deck(wide)[deck_pos(21, 0, 0, r, 1000)] for r in range(3000)]
    assert sports == [deck(small)[deck_pos(21, 0, 1, r, 11)] for r in range(3000)]
    cycles = [cports[i : i + 1000] for i in range(0, 3000, 1000)]
    assert all(sorted(c) == deck(wide) for c in cycles)  # 1000 instances: no port twice
    assert len({tuple(c) for c in cycles}) == 3
    for q in range(3000 // 11):
        assert Counter(sports[11 * q : 11 * q + 11]) == {1000: 3, 2000: 1, 3000: 5, 4000: 2}
    assert len({tuple(sports[11 * q : 11 * q + 11]) for q in range(3)}) == 3
    assert [int(r["sport"]) for r in tcp] == [
        deck(small)[deck_pos(21, 1, 0, r, 11)] for r in range(33)
    ]
    assert {r["dport"] for r in tcp} == {"53"}
    # Draw indices as with D:ID: UDP, fixed hosts: ports 1-2 and 3-4, request 5-6; TCP: ports
    # 1-4, ISNs 5 and 6, request 7-8.
    for rs, j in ((udp, 5), (tcp, 7)):
        rng0 = stream_start(21, np.array([int(r["serial"]) for r in rs], dtype=np.uint64))
        assert [int(r["c_payload"]) for r in rs] == dist_values(
            req, draw(rng0, j), draw(rng0, j + 1)
        ).tolist()


def test_lines_sharing_one_deck_deal_disjoint_cards(flowengine_bin, tmp_path):
    """deck=LINE:OFFSET: a line's P: ports continue the deck of an earlier line from OFFSET, so
    the lines of one scenario entry (its closes, protocols, steps) never repeat each other's
    cards; the positions are the README's, keyed by LINE."""
    wide = [(40000 + i, 40000 + i, 1) for i in range(50)]
    common = dict(client="198.18.0.1/32", client_mode="fixed", cport_mode="P:0", arrival=1000)
    lines = [
        dist_line(0, wide),
        sess_line(reps=20, **common),
        sess_line(reps=12, close="none", deck="0:20", **common),
        sess_line(reps=18, close="rst", deck="0:32", **common),
    ]
    sess = write(tmp_path, *lines, seed=5)
    _, rows, summ = run(flowengine_bin, tmp_path, sess)
    assert summ["flows_finished"] == 50
    rows.sort(key=lambda r: int(r["serial"]))
    ports = [int(r["sport"]) for r in rows]
    assert sorted(ports) == deck(wide)  # 50 sessions, 50 cards: no 5-tuple twice
    assert ports == [deck(wide)[deck_pos(5, 0, 0, r, 50)] for r in range(50)]
    for bad, msg in (("1:0", "deck: LINE must be"), ("0", "deck: expected LINE:OFFSET")):
        r = gen(flowengine_bin, write(tmp_path, lines[0], sess_line(deck=bad)), "--null")
        assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_deck_of_two_to_the_twenty(flowengine_bin, tmp_path):
    """The largest deck (2^20 cards in 16 bins) builds and draws the README's positions."""
    bins = [(100 + i, 100 + i, 1 << 16) for i in range(16)]
    sess = write(
        tmp_path,
        dist_line(0, bins),
        sess_line(proto=17, cport_mode="P:0", reps=50, arrival=10, rtt=2, gap=1, resp=0),
        seed=4,
    )
    _, rows, _ = run(flowengine_bin, tmp_path, sess)
    rows.sort(key=lambda r: int(r["serial"]))
    assert [int(r["sport"]) for r in rows] == [
        100 + deck_pos(4, 0, 0, r, 1 << 20) // (1 << 16) for r in range(50)
    ]


# ---- threads, flows and sessions together ----------------------------------------------------


def test_threads_give_byte_identical_outputs(flowengine_bin, tmp_path):
    """Flow lines and TCP/UDP, IPv4/IPv6 session lines with drawn values everywhere (and think,
    linger, a deck): the pcap, the flow log and the per-second CSV are the same bytes with
    --threads 1, 2 and 3."""
    lines = [
        dist_line(0, [(0, 0, 5), (100, 900, 3), (1460, 1460, 2)]),
        dist_line(1, [(1000, 5000, 1), (20000, 30000, 1)]),
        dist_line(2, [(500, 1500, 4), (5000, 20000, 1)]),
        dist_line(3, [(1, 3, 1)]),
        dist_line(4, [(80, 80, 7), (443, 443, 3)]),
        dist_line(5, [(0, 9, 9), (200, 255, 1)]),
        FLOW,
        sess_line(
            client_mode="D:5",
            server="198.19.0.0/24",
            server_mode="random",
            cport_mode="random",
            sport_mode="D:4",
            start=500,
            reps=120,
            arrival="D:2",
            rtt=3000,
            gap=100,
            mss=1460,
            win=4,
            rounds="D:3",
            req="D:0",
            resp="D:1",
        ),
        sess_line(
            af=6,
            client="2001:db8::/64",
            server="2001:db8:1::/64",
            server_mode="D:5",
            reps=60,
            arrival=7000,
            rtt=2000,
            gap=50,
            mss=500,
            win=3,
            rounds=2,
            req="D:0",
            resp="D:1",
            close="rst",
            think=1500,  # the first line's h: one FIFO class for both
            linger=40_000,
        ),
        sess_line(
            proto=17,
            client="198.18.1.0/24",
            client_mode="random",
            sport="53-53",
            start=100,
            reps=90,
            arrival="D:2",
            rtt=1000,
            gap=10,
            mss=512,
            rounds="D:3",
            req="D:0",
            resp="D:0",
            think=777,
            cport_mode="P:4",
        ),
    ]
    sess = write(tmp_path, *lines, seed=9)
    outs = {}
    for n in (1, 2, 3):
        pcap, rows, summ = run(flowengine_bin, tmp_path, sess, "--threads", n, tag=str(n))
        outs[n] = (
            pcap.read_bytes(),
            (tmp_path / f"out{n}.csv").read_bytes(),
            (tmp_path / f"stats{n}.csv").read_bytes(),
        )
        assert summ["flows_finished"] == 40 + 120 + 60 + 90
        assert summ["packets"] == sum(int(r["packets"]) for r in rows)
        assert summ["bytes"] == sum(int(r["bytes"]) for r in rows)
    assert outs[1] == outs[2] == outs[3]
    assert len(outs[1][0]) > 100_000


def test_planner_stochastic_keeps_sessions_exact(flowengine_bin, tmp_path):
    """Sessions keep their exact due times with the stochastic planner."""
    sess = write(tmp_path, FLOW, sess_line(reps=5, arrival=3000, rtt=2000, gap=10))
    a, _, _ = run(flowengine_bin, tmp_path, sess, tag="e")
    b, _, _ = run(flowengine_bin, tmp_path, sess, "--planner", "stochastic", tag="s")

    def sess_frames(p: Path) -> list[tuple[int, bytes]]:
        return [(t, f) for t, _, f in iter_frames(p) if f[23] == 6]  # IPv4 proto TCP

    one = expected_tcp(1000, 10, 1000, 2, 100, 2500, "fin")
    want = sorted(r * 3000 + t for r in range(5) for t, _, _, _ in one)
    assert [t for t, _ in sess_frames(a)] == want
    assert sess_frames(a) == sess_frames(b)


# ---- errors ---------------------------------------------------------------------------------

ERRORS = [
    (sess_line(mss=0), "mss: must be >= 1"),
    (sess_line(mss=65482), "mss: must be 1..65481"),
    (sess_line(req="D:9"), "req: dist 9 is not defined"),
    (sess_line(rtt=1), "rtt: must be >= 2"),
    (sess_line(gap=0), "gap: must be >= 1"),
    (sess_line(win=0), "win: must be >= 1"),
    (sess_line(win=65536), "win: must be 1..65535"),
    (sess_line(rounds=0), "rounds: must be 1..1048576"),
    (sess_line(close="abort"), "close: must be fin, rst or none"),
    (sess_line(proto=1), "proto: must be 6 (TCP) or 17 (UDP)"),
    (sess_line(client_mode="sometimes"), "client_mode: must be fixed, random, increment or D:ID"),
    (sess_line(reps=2**64 - 1), "reps: the last packet could be due after 2^32 s"),
    (sess_line(reps=2**64), "reps: expected a non-negative integer"),
    (sess_line(req=2**64 - 1, mss=1), "reps: the last packet could be due after 2^32 s"),
    (sess_line() + " extra=1", "extra: unknown key"),
    (sess_line().replace(" win=2", ""), "win: missing"),
    ("dist 1 0-100:4294967296", "dist 1: bin 0: weight must be 1..4294967295"),
    ("dist 1 0-100:0", "dist 1: bin 0: weight must be 1..4294967295"),
    ("dist 1 5-4:1", "dist 1: bin 0: need LO <= HI < 2^63"),
    ("dist 1 0-9223372036854775808:1", "dist 1: bin 0: need LO <= HI < 2^63"),
    ("dist 65536 1-1:1", "dist: ID must be 0..65535"),
    ("dist", "dist: expected `dist ID LO-HI:W ...`"),
    ("dist 1", "dist 1: needs at least one bin LO-HI:W"),
    ("dist 1 1-1:1 7", "dist 1: bin 1: expected LO-HI:W"),
    ("dist 1 1-1:1\ndist 1 2-2:1", "dist: ID 1 defined twice"),
    ("dist 1 0-256:1\n" + sess_line(client_mode="D:1"), "client_mode: dist values must be host"),
    ("dist 1 0-65536:1\n" + sess_line(sport_mode="D:1"), "sport_mode: dist values must be ports"),
    ("dist 1 1-2000000:1\n" + sess_line(rounds="D:1"), "rounds: dist values must be at most"),
    (
        "dist 1 80-80:3 81-90:1\n" + sess_line(cport_mode="P:1"),
        "cport_mode: P: needs bins of one value (LO-LO:W); bin 1 of the dist is 81-90",
    ),
    (
        "dist 1 80-80:1048576 81-81:1\n" + sess_line(sport_mode="P:1"),
        "sport_mode: P: needs a deck of at most 1048576 values, the dist's weights sum to 1048577",
    ),
    (sess_line(cport_mode="P:9"), "cport_mode: dist 9 is not defined"),
    (sess_line(cport_mode="P:x"), "cport_mode: expected P:ID with ID 0..65535"),
    ("dist 1 5-5:1\n" + sess_line(client_mode="P:1"), "client_mode: P:ID (a deck) is for ports"),
    ("dist 1 70000-70000:1\n" + sess_line(cport_mode="P:1"), "cport_mode: dist values must be"),
    (sess_line(sport_mode="deck"), "sport_mode: must be fixed, random, increment or D:ID or P:ID"),
    (sess_line(think="-1"), "think: expected a non-negative integer"),
    (sess_line(linger=2**64), "linger: expected a non-negative integer"),
    (sess_line(think=2**62), "think: must be below 2^32 s"),
    (sess_line(linger=2**32 * 10**9), "linger: must be below 2^32 s"),
    (sess_line(rounds=1000, think=10**16), "reps: the last packet could be due after 2^32 s"),
    (sess_line(think=1) + " think=2", "think: given twice"),
    (
        "dist 1 1000-1000:1 2000-2999:1\n" + sess_line(think="D:1"),
        "think: D: needs bins of one value (LO-LO:W); bin 1 of the dist is 2000-2999",
    ),
    (
        "dist 1 " + " ".join(f"{i}-{i}:1" for i in range(1, 66)) + "\n" + sess_line(linger="D:1"),
        "linger: D: needs a dist of at most 64 bins (one FIFO class each), it has 65",
    ),
    ("dist 1 0-0:1 5-5:1\n" + sess_line(think="D:1"), "think: dist values must be at least 1 ns"),
    ("dist 1 0-0:1\n" + sess_line(linger="D:1"), "linger: dist values must be at least 1 ns"),
    (
        "dist 1 1-1:1 4294967296000000000-4294967296000000000:1\n" + sess_line(linger="D:1"),
        "linger: dist values must be below 2^32 s, the pcap limit",
    ),
    (sess_line(think="D:4"), "think: dist 4 is not defined"),
    (sess_line(linger="D:x"), "linger: expected N or D:ID with ID 0..65535"),
    (
        "dist 1 5-5:1 10000000000000000-10000000000000000:1\n"
        + sess_line(rounds=1000, think="D:1"),
        "reps: the last packet could be due after 2^32 s",
    ),
]


@pytest.mark.parametrize(
    "text,msg", ERRORS, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(ERRORS)]
)
def test_errors_name_line_and_key(flowengine_bin, tmp_path, text, msg):
    sess = write(tmp_path, text)
    r = gen(flowengine_bin, sess, "--null", timeout=20)
    assert r.returncode == 2, r.stderr
    line = 3 + text.count("\n")
    assert f"s.ntg:{line}: {msg}" in r.stderr, r.stderr


def test_hostile_dists_too_many_bins_and_the_largest(flowengine_bin, tmp_path):
    """65,537 bins are refused; 65,536 bins of the largest weight build and draw."""
    too = write(tmp_path, "dist 1 " + " ".join(f"{i}-{i}:1" for i in range(65537)), name="a.ntg")
    r = gen(flowengine_bin, too, "--null", timeout=20)
    assert r.returncode == 2 and "a.ntg:3: dist 1: more than 65536 bins" in r.stderr
    big = write(
        tmp_path,
        "dist 1 " + " ".join(f"{i}-{i}:4294967295" for i in range(65536)),
        sess_line(proto=17, reps=1000, arrival=1, req="D:1", resp=0, rtt=2, gap=1, mss=65000),
        name="b.ntg",
    )
    flows = tmp_path / "f.csv"
    r = gen(flowengine_bin, big, "--null", "--flows", flows, "--stats", "/dev/null", timeout=20)
    assert r.returncode == 0, r.stderr
    vals = [int(row["c_payload"]) for row in csv.DictReader(open(flows))]
    # Equal weights: close to uniform over 0..65535 (instance 0's may be 0: one empty request).
    assert len(set(vals)) > 950 and max(vals) < 65536
    assert Counter(v < 32768 for v in vals)[True] in range(430, 570)


def test_limited_run_counters_and_unfinished_rows(flowengine_bin, tmp_path):
    """--max-packets stops sessions mid-way: the flow log still has every started instance (the
    unfinished ones at the end, in serial order) and its packets sum to the summary's, which
    the counters file's session line agrees with."""
    sess = write(tmp_path, FLOW, sess_line(reps=50, arrival=2000, rtt=4000, gap=100))
    cnt = tmp_path / "c.bin"
    _, rows, summ = run(flowengine_bin, tmp_path, sess, "--max-packets", 300, "--counters", cnt)
    assert summ["status"] == "limited" and summ["packets"] == 300
    assert sum(int(r["packets"]) for r in rows) == 300
    assert sum(int(r["bytes"]) for r in rows) == summ["bytes"]
    data = cnt.read_bytes()
    magic, n, state = struct.unpack_from("=8sQQ", data, 0)
    assert (magic, n, state) == (b"NTGCNT01", 2, 2)
    per_line = struct.unpack_from("=4Q", data, 24)
    assert per_line[0] + per_line[2] == 300 and per_line[1] + per_line[3] == summ["bytes"]
    sess_rows = [r for r in rows if r["flow"] == "1"]
    assert sum(int(r["packets"]) for r in sess_rows) == per_line[2]
    done = [r for r in sess_rows if int(r["packets"]) == 13]  # 13: a whole default session
    assert done and len(done) < len(sess_rows)
    unfinished = [int(r["serial"]) for r in rows[summ["flows_finished"] :]]
    assert unfinished and unfinished == sorted(unfinished)


def test_sessions_beside_a_stream_line_and_with_checksum_offload(flowengine_bin, tmp_path):
    """A stream line and a session line in one session (one thread): both play, numbered in
    session order; --csum-offload leaves the session's TCP checksum as the folded pseudo-header
    sum (addresses, protocol, TCP length) and its IPv4 header checksum 0."""
    frame = ether(
        ipv4(
            addr("198.18.7.1"),
            addr("198.19.7.1"),
            17,
            udp(addr("198.18.7.1"), addr("198.19.7.1"), 5, 6, bytes(22)),
        ),
        True,
    )
    frames = tmp_path / "frames.pcap"
    with open(frames, "wb") as fh:
        PcapWriter(fh, nanosecond=True).write(0, frame)
    stream = (
        "stream first=0 count=1 start=0 period=500 packets=7 burst=0 burst_period=0 "
        "seq_off=- csum_off=-"
    )
    sess = write(tmp_path, f"frames {frames}", stream, sess_line(reps=2, arrival=50_000))
    pcap, rows, summ = run(flowengine_bin, tmp_path, sess, "--csum-offload")
    assert sorted((r["flow"], r["packets"]) for r in rows) == [("0", "7"), ("1", "13"), ("1", "13")]
    assert summ["packets"] == 7 + 26
    tcp_frames = [f for _, _, f in iter_frames(pcap) if f[23] == 6]
    assert len(tcp_frames) == 26
    for f in tcp_frames:
        seg = f[34:]
        pseudo = f[26:34] + bytes([0, 6]) + struct.pack("!H", len(seg))
        s = sum(struct.unpack(f"!{len(pseudo) // 2}H", pseudo))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        assert struct.unpack_from("!H", seg, 16)[0] == s and f[24:26] == b"\0\0"


@needs_tshark
@pytest.mark.parametrize("close", ["fin", "none"])
def test_tcp_session_without_a_handshake(flowengine_bin, tmp_path, close):
    """`open=none`: the instance is a session's packets after its handshake, the first data
    segment at the instance's start (a connection opened before a capture began): no SYN, the
    same packets and spacings as with the handshake otherwise, every checksum good; an instance
    with nothing to send and no close is one ACK of the client."""
    h, gap = 10_000, 1_000
    line = sess_line(rtt=2 * h, gap=gap, mss=1000, win=2, req=0, resp=4100, close=close)
    pcap, rows, summ = run(flowengine_bin, tmp_path, write(tmp_path, line + " open=none"))
    pk = tshark(pcap)
    full = expected_tcp(h, gap, 1000, 2, 0, 4100, close)[3:]  # without SYN, SYN|ACK, ACK
    want = [(t - full[0][0], d, flags, n) for t, d, flags, n in full]
    t0 = float(pk[0]["frame.time_epoch"])
    got = [
        (
            round((float(p["frame.time_epoch"]) - t0) * 1e9),
            0 if p["ip.src"] == "198.18.0.0" else 1,
            int(p["tcp.flags"], 16),
            int(p["tcp.len"]),
        )
        for p in pk
    ]
    assert got == want and not any(flags & SYN for _, _, flags, _ in got)
    assert {p["tcp.checksum.status"] for p in pk} == {"1"}
    (row,) = rows
    assert int(row["first_ns"]) == 0 and int(row["packets"]) == len(want) == summ["packets"]
    empty = sess_line(req=0, resp=0, close="none") + " open=none"
    pcap, _, summ = run(flowengine_bin, tmp_path, write(tmp_path, empty), tag="e")
    assert [(int(p["tcp.flags"], 16), int(p["tcp.len"])) for p in tshark(pcap)] == [(ACK, 0)]
    # a line without the key after one with it keeps its handshake
    two = write(tmp_path, empty, sess_line(start=5000) + " open=syn", sess_line(start=9000))
    pcap, _, _ = run(flowengine_bin, tmp_path, two, tag="t")
    assert sum(1 for p in tshark(pcap) if int(p["tcp.flags"], 16) == SYN) == 2
    bad = gen(flowengine_bin, write(tmp_path, sess_line() + " open=maybe", name="b.ntg"), "--null")
    assert bad.returncode == 2 and "open: must be syn or none (got maybe)" in bad.stderr
