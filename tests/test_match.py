"""`flowengine match`: every flow table against a reference dictionary, the adversarial feed,
the analysis package's flow table for real pcaps, and the refusals of bad input.

The reference (`reference_records`) is the specification of the counters: a flow is keyed by
(ip_version, proto, src, dst, sport, dport); packets and bytes add up, first and last are the min
and max time stamps; a flow is over when now - last >= idle or now - first >= active, and its next
packet starts a new flow. The binary's --dump lists every flow it closed (by its sweep or on a hit)
and every flow live at the end: as a multiset it must equal the reference's records, whatever the
structure, its size and the expiry budget."""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from struct import Struct

import numpy as np
import pytest

from analysis import hashing
from analysis.capture import address_text
from analysis.stream import flow_table_of
from tests.conftest import skip_or_fail

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - the venv has it; the property test then skips
    given = None

STRUCTS = ["chain", "tree", "linear", "robin", "cuckoo", "linear16"]
IPV4_ONLY = {"linear16"}  # keys packed in 16 bytes: IPv6 refused
FEED_HEADER = "ip_version,proto,src_hi,src_lo,dst_hi,dst_lo,sport,dport,len,ts_ns"
KEY = ("ip_version", "proto", "src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport")
T0 = 1_700_000_000_000_000_000


@pytest.fixture(scope="module")
def match_bin(flowengine_bin):
    """The flowengine under test, if it has the match subcommand (an older installed one has not:
    build this tree and point NTG_FLOWENGINE at it)."""
    probe = subprocess.run([str(flowengine_bin), "match", "--help"], capture_output=True, text=True)
    if probe.returncode != 0:
        skip_or_fail(
            f"{flowengine_bin} has no `match` subcommand; set NTG_FLOWENGINE to a build of "
            "this tree"
        )
    return str(flowengine_bin)


def run_match(binary: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([binary, "match", *args], capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def read_records(path: Path) -> Counter:
    with open(path, newline="") as f:
        return Counter(tuple(int(v) for v in row.values()) for row in csv.DictReader(f))


def read_feed(path: Path) -> list[tuple[int, ...]]:
    with open(path, newline="") as f:
        return [tuple(int(v) for v in row.values()) for row in csv.DictReader(f)]


def write_feed(path: Path, packets: list[tuple[int, ...]]) -> None:
    path.write_text(FEED_HEADER + "\n" + "".join(",".join(map(str, p)) + "\n" for p in packets))


def reference_records(packets, idle_ns: int = 0, active_ns: int = 0) -> Counter:
    """The flow records of PACKETS (rows of the feed CSV) by a dictionary."""
    live: dict[tuple[int, ...], list[int]] = {}
    closed: list[tuple[int, ...]] = []
    for *key, length, ts in packets:
        key = tuple(key)
        f = live.get(key)
        if f is not None and (
            (idle_ns and ts - f[3] >= idle_ns) or (active_ns and ts - f[2] >= active_ns)
        ):
            closed.append(key + tuple(f))
            f = None
        if f is None:
            f = live[key] = [0, 0, ts, ts]
        f[0] += 1
        f[1] += length
        f[2] = min(f[2], ts)
        f[3] = max(f[3], ts)
    return Counter(closed + [k + tuple(f) for k, f in live.items()])


def random_packets(
    rng: random.Random, n_packets: int, n_keys: int, ipv6: bool = True
) -> list[tuple[int, ...]]:
    """Packets over N_KEYS keys (IPv4 and IPv6 mixed, or IPv4 only), time going forward by gaps
    from 0 to 3 s so that flows go idle, outlive the active timeout and come back."""
    keys = []
    for _ in range(n_keys):
        if not ipv6 or rng.random() < 0.5:
            keys.append(
                (
                    4,
                    rng.choice([6, 17, 1]),
                    0,
                    rng.getrandbits(32),
                    0,
                    rng.getrandbits(32),
                    rng.getrandbits(16),
                    rng.getrandbits(16),
                )
            )
        else:
            keys.append(
                (
                    6,
                    rng.choice([6, 17, 58]),
                    rng.getrandbits(64),
                    rng.getrandbits(64),
                    rng.getrandbits(64),
                    rng.getrandbits(64),
                    rng.getrandbits(16),
                    443,
                )
            )
    keys = list(dict.fromkeys(keys))
    ts, packets = T0, []
    for _ in range(n_packets):
        ts += rng.choice([0, 1000, 10_000_000, 300_000_000, 3_000_000_000])
        packets.append(keys[rng.randrange(len(keys))] + (rng.randint(40, 1500), ts))
    return packets


def room(struct: str, size: int, keys: int) -> int:
    """SIZE, or for the open tables just room for every key (full: the longest clusters, the most
    moves on removal); cuckoo gets a tenth more (its random walk may fail when nearly full)."""
    if struct in ("linear", "robin", "linear16"):
        return keys
    if struct == "cuckoo":
        return keys + keys // 10 + 8
    return size


@pytest.mark.parametrize("struct", STRUCTS)
@pytest.mark.parametrize("size,budget", [(7, 1), (1000003, 8)])
def test_every_structure_counts_as_the_reference_dictionary_with_expiry(
    match_bin, tmp_path, struct, size, budget
):
    packets = random_packets(
        random.Random(f"{struct}{size}"), 4000, 300, ipv6=struct not in IPV4_ONLY
    )
    size = room(struct, size, len({p[:8] for p in packets}))
    write_feed(tmp_path / "feed.csv", packets)
    out = run_match(
        match_bin,
        "--struct",
        struct,
        "--size",
        str(size),
        "--feed",
        f"file:{tmp_path / 'feed.csv'}",
        "--timeout-idle",
        "1",
        "--timeout-active",
        "4",
        "--expire-budget",
        str(budget),
        "--dump",
        str(tmp_path / "dump.csv"),
        "--json",
        str(tmp_path / "out.json"),
    )
    report = json.loads((tmp_path / "out.json").read_text())
    want = reference_records(packets, idle_ns=1_000_000_000, active_ns=4_000_000_000)
    assert read_records(tmp_path / "dump.csv") == want, out.stdout
    assert report["refused"] == 0
    assert report["packets"] == len(packets)
    assert report["expiries"] > 0 and report["expired_sweep"] > 0
    assert report["worst_packet"]["expiry_steps"] <= budget
    assert report["inserts"] + report["expired_on_hit"] == sum(want.values())
    assert report["flows_end"] == sum(want.values()) - report["expiries"]


@pytest.mark.parametrize("struct", STRUCTS)
def test_without_timeouts_every_flow_stays_and_counts_every_packet(match_bin, tmp_path, struct):
    packets = random_packets(random.Random(struct), 3000, 1000, ipv6=struct not in IPV4_ONLY)
    write_feed(tmp_path / "feed.csv", packets)
    run_match(
        match_bin,
        "--struct",
        struct,
        "--size",
        "2^11",
        "--feed",
        f"file:{tmp_path / 'feed.csv'}",
        "--dump",
        str(tmp_path / "dump.csv"),
        "--json",
        str(tmp_path / "out.json"),
    )
    report = json.loads((tmp_path / "out.json").read_text())
    want = reference_records(packets)
    assert read_records(tmp_path / "dump.csv") == want
    assert report["flows_end"] == report["inserts"] == sum(want.values())
    assert sum(report["probe_hist"]) == len(packets)


@pytest.mark.parametrize("n_packets", [1, 15, 17, 40, 2000])
def test_the_staged_bulk_lookup_counts_and_probes_as_the_one_packet_path(
    match_bin, tmp_path, n_packets
):
    """linear16 without timeouts takes the staged bulk lookup (blocks hashed and prefetched ahead,
    misses inserted one by one); with a timeout nothing reaches it takes the packet-by-packet
    pipeline. Same feed (repeats, collisions in a full table, feeds shorter than a block or two):
    the same flows and the same probe histogram, and the reference's counters."""
    packets = random_packets(
        random.Random(n_packets), n_packets, max(1, n_packets // 3), ipv6=False
    )
    write_feed(tmp_path / "feed.csv", packets)
    size = str(len({p[:8] for p in packets}))
    out = {}
    for name, extra in (("staged", []), ("rolling", ["--timeout-idle", "1e6"])):
        run_match(
            match_bin,
            "--struct",
            "linear16",
            "--size",
            size,
            "--feed",
            f"file:{tmp_path / 'feed.csv'}",
            "--dump",
            str(tmp_path / f"{name}.csv"),
            "--json",
            str(tmp_path / f"{name}.json"),
            *extra,
        )
        out[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert (
        read_records(tmp_path / "staged.csv")
        == read_records(tmp_path / "rolling.csv")
        == reference_records(packets)
    )
    assert out["staged"]["probe_hist"] == out["rolling"]["probe_hist"]
    assert sum(out["staged"]["probe_hist"]) == n_packets


if given is not None:

    @settings(
        max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        struct=st.sampled_from(STRUCTS),
        seed=st.integers(0, 2**32),
        n_keys=st.integers(1, 60),
        size=st.integers(1, 200),
        idle=st.sampled_from([0, 0.2, 1.5]),
        active=st.sampled_from([0, 0.5, 5]),
        budget=st.integers(1, 4),
    )
    def test_property_any_table_any_size_equals_the_reference(
        match_bin, tmp_path_factory, struct, seed, n_keys, size, idle, active, budget
    ):
        tmp = tmp_path_factory.mktemp("prop")
        packets = random_packets(random.Random(seed), 300, n_keys, ipv6=struct not in IPV4_ONLY)
        size = room(struct, size, len({p[:8] for p in packets}))
        write_feed(tmp / "feed.csv", packets)
        run_match(
            match_bin,
            "--struct",
            struct,
            "--size",
            str(size),
            "--feed",
            f"file:{tmp / 'feed.csv'}",
            "--timeout-idle",
            str(idle),
            "--timeout-active",
            str(active),
            "--expire-budget",
            str(budget),
            "--dump",
            str(tmp / "dump.csv"),
        )
        assert read_records(tmp / "dump.csv") == reference_records(
            packets, int(idle * 1e9), int(active * 1e9)
        )
        shutil.rmtree(tmp)


@pytest.mark.parametrize("struct", STRUCTS)
def test_adversarial_feed_puts_every_flow_in_one_line_and_counts_right(match_bin, tmp_path, struct):
    run_match(
        match_bin,
        "--struct",
        struct,
        "--size",
        "1000",
        "--feed",
        "adversarial:200",
        "--packets",
        "2000",
        "--save-feed",
        str(tmp_path / "feed.csv"),
        "--dump",
        str(tmp_path / "dump.csv"),
        "--json",
        str(tmp_path / "out.json"),
    )
    report = json.loads((tmp_path / "out.json").read_text())
    packets = read_feed(tmp_path / "feed.csv")
    assert len({p[:8] for p in packets}) == 200
    assert read_records(tmp_path / "dump.csv") == reference_records(packets)
    if struct == "chain":
        assert report["used_lines"] == 1 and report["probe_max"] == 200  # a list of 200
    elif struct == "tree":
        assert report["used_lines"] == 1 and report["probe_max"] <= 12  # AVL: <= 1.44 log2(201)
    elif struct in ("linear", "robin", "linear16"):
        assert report["probe_max"] >= 200  # one cluster from line 0
    else:
        assert report["probe_max"] <= 2  # cuckoo: spills into the alternative buckets


@pytest.mark.parametrize(
    "hash_name",
    [
        "coralreef",
        "lookup3",
        "murmur3_32",
        "superfasthash",
        "fnv1a_64",
        "crc32c",
        "toeplitz",
        "toeplitz_ms",
        "wyhash",
        "xxh3",
    ],
)
def test_any_hash_of_the_registry_plugs_in(match_bin, tmp_path, hash_name):
    packets = random_packets(random.Random(hash_name), 2000, 400)
    write_feed(tmp_path / "feed.csv", packets)
    for struct in ("chain", "cuckoo"):
        run_match(
            match_bin,
            "--struct",
            struct,
            "--hash",
            hash_name,
            "--size",
            "997",
            "--feed",
            f"file:{tmp_path / 'feed.csv'}",
            "--timeout-idle",
            "1",
            "--dump",
            str(tmp_path / "dump.csv"),
            "--json",
            str(tmp_path / "out.json"),
        )
        assert read_records(tmp_path / "dump.csv") == reference_records(
            packets, idle_ns=1_000_000_000
        )
        assert json.loads((tmp_path / "out.json").read_text())["hash"] == hash_name


@pytest.mark.parametrize(
    "kind", ["det", "uniform:5000", "zipf:5000:1.1", "netscan:300", "portscan:300"]
)
def test_synthetic_feeds_have_their_flows(match_bin, tmp_path, kind):
    run_match(
        match_bin,
        "--struct",
        "chain",
        "--size",
        "1000003",
        "--feed",
        kind,
        "--packets",
        "20000",
        "--save-feed",
        str(tmp_path / "feed.csv"),
        "--dump",
        str(tmp_path / "dump.csv"),
        "--json",
        str(tmp_path / "out.json"),
    )
    packets = read_feed(tmp_path / "feed.csv")
    distinct = len({p[:8] for p in packets})
    report = json.loads((tmp_path / "out.json").read_text())
    assert read_records(tmp_path / "dump.csv") == reference_records(packets)
    assert report["flows_end"] == distinct
    expected = {"det": 1, "netscan:300": 300, "portscan:300": 300}
    if kind in expected:
        assert distinct == expected[kind]
    else:
        assert 1000 < distinct <= 5000


@pytest.mark.parametrize("struct", STRUCTS)
def test_runs_of_one_key_are_counted_as_lookups(match_bin, tmp_path, struct):
    """A packet with the key of the one before is counted without a lookup (no timeout set): the
    counters still equal the reference, and the probe histogram still has one entry a packet."""
    run_match(
        match_bin,
        "--struct",
        struct,
        "--size",
        "64",
        "--feed",
        "zipf:40:2",
        "--packets",
        "20000",
        "--save-feed",
        str(tmp_path / "feed.csv"),
        "--dump",
        str(tmp_path / "dump.csv"),
        "--json",
        str(tmp_path / "out.json"),
    )
    packets = read_feed(tmp_path / "feed.csv")
    assert sum(a[:8] == b[:8] for a, b in zip(packets, packets[1:])) > 1000  # the feed has runs
    report = json.loads((tmp_path / "out.json").read_text())
    assert read_records(tmp_path / "dump.csv") == reference_records(packets)
    assert sum(report["probe_hist"]) == report["packets"] == len(packets)
    assert report["inserts"] == len({p[:8] for p in packets})


def pcaps() -> list[Path]:
    root = os.environ.get("NTG_SHARED_DATA")
    if not root or not (Path(root) / "pcaps").is_dir():
        return []
    return sorted((Path(root) / "pcaps").glob("*.pcap"))


def dump_flows(path: Path) -> list[tuple]:
    """The flows of a --dump CSV as the analysis flow table has them: (ip_version, proto, src, dst,
    sport, dport, packets, bytes, first_ns, last_ns), addresses as text."""
    with open(path, newline="") as f:
        rows = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(f)]
    ver = np.array([r["ip_version"] for r in rows], np.uint8)
    src = address_text(
        ver,
        np.array([r["src_hi"] for r in rows], np.uint64),
        np.array([r["src_lo"] for r in rows], np.uint64),
    )
    dst = address_text(
        ver,
        np.array([r["dst_hi"] for r in rows], np.uint64),
        np.array([r["dst_lo"] for r in rows], np.uint64),
    )
    return [
        (
            r["ip_version"],
            r["proto"],
            s,
            d,
            r["sport"],
            r["dport"],
            r["packets"],
            r["bytes"],
            r["first_ns"],
            r["last_ns"],
        )
        for r, s, d in zip(rows, src, dst)
    ]


@pytest.mark.parametrize("struct", ["chain", "cuckoo"])
def test_pcap_counters_equal_the_analysis_flow_table(match_bin, tmp_path, struct):
    files = pcaps()
    if not files:
        skip_or_fail("NTG_SHARED_DATA/pcaps has no pcap (set NTG_SHARED_DATA)")
    for pcap in files:
        run_match(
            match_bin,
            "--struct",
            struct,
            "--size",
            "10007",
            "--feed",
            "pcap",
            "--pcap",
            str(pcap),
            "--dump",
            str(tmp_path / "dump.csv"),
            "--json",
            str(tmp_path / "out.json"),
        )
        table = flow_table_of([pcap])
        want = Counter(
            zip(
                table.ip_version.astype(int),
                table.proto.astype(int),
                table.src,
                table.dst,
                table.sport.astype(int),
                table.dport.astype(int),
                table.packets.astype(int),
                table.bytes.astype(int),
                table.first_ns.astype(int),
                table.last_ns.astype(int),
            )
        )
        assert Counter(dump_flows(tmp_path / "dump.csv")) == want, pcap.name
        report = json.loads((tmp_path / "out.json").read_text())
        assert report["flows_end"] == len(table)
        assert report["pcap"]["damaged"] is False


def test_a_pcap_replayed_to_packets_counts_every_pass(match_bin, tmp_path):
    """--packets of 3 passes + 5: against the analysis flow table of the pcap, each flow counts 3
    times its packets and bytes plus those of its packets among the first 5, keeps its first time
    stamp, and (if none of its packets is among the first 5) ends 2 passes' time shift after its
    last; every pass's time stamps come after the pass before."""
    files = pcaps()
    if not files:
        skip_or_fail("NTG_SHARED_DATA/pcaps has no pcap (set NTG_SHARED_DATA)")
    pcap = next(p for p in files if p.name == "zeek__http_bro.org.pcap")
    table = flow_table_of([pcap])
    one = int(table.packets.sum())
    run_match(
        match_bin,
        "--struct",
        "robin",
        "--size",
        "4096",
        "--feed",
        "pcap",
        "--pcap",
        str(pcap),
        "--packets",
        str(3 * one + 5),
        "--save-feed",
        str(tmp_path / "feed.csv"),
        "--dump",
        str(tmp_path / "dump.csv"),
        "--json",
        str(tmp_path / "out.json"),
    )
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["packets"] == 3 * one + 5 and report["pcap"]["pass_packets"] == one
    step = report["pcap"]["pass_step_ns"]
    feed = read_feed(tmp_path / "feed.csv")
    assert [p[:9] for p in feed[one:]] == [p[:9] for p in feed[: 2 * one + 5]]
    assert min(p[9] for p in feed[one : 2 * one]) > max(p[9] for p in feed[:one])
    assert [b[9] - a[9] for a, b in zip(feed, feed[one:])] == [step] * (2 * one + 5)
    head = [p[:8] for p in feed[:5]]
    got = {f[:6]: f[6:] for f in dump_flows(tmp_path / "dump.csv")}
    assert len(got) == len(table)
    heads = 0
    for row in table.itertuples():
        key = (
            int(row.ip_version),
            int(row.proto),
            row.src,
            row.dst,
            int(row.sport),
            int(row.dport),
        )
        packets, nbytes, first, last = got[key]
        extra = [p for p in feed[:5] if address_key(p) == key]
        heads += len(extra)
        assert packets == 3 * int(row.packets) + len(extra)
        assert nbytes == 3 * int(row.bytes) + sum(p[8] for p in extra)
        assert first == int(row.first_ns)
        if not extra:
            assert last == int(row.last_ns) + 2 * step
    assert heads == len(head) == 5


def address_key(p: tuple[int, ...]) -> tuple:
    """A feed packet's flow key with text addresses, as the analysis flow table keys a flow."""
    ver = np.array([p[0]], np.uint8)
    src = address_text(ver, np.array([p[2]], np.uint64), np.array([p[3]], np.uint64))[0]
    dst = address_text(ver, np.array([p[4]], np.uint64), np.array([p[5]], np.uint64))[0]
    return (p[0], p[1], src, dst, p[6], p[7])


def test_damaged_pcap_is_analysed_up_to_the_damage_with_its_offset(match_bin, tmp_path):
    files = pcaps()
    if not files:
        skip_or_fail("NTG_SHARED_DATA/pcaps has no pcap (set NTG_SHARED_DATA)")
    whole = next(p for p in files if p.name == "zeek__http_bro.org.pcap")
    data = whole.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) // 2])
    done = run_match(
        match_bin,
        "--struct",
        "robin",
        "--size",
        "4096",
        "--feed",
        "pcap",
        "--pcap",
        str(cut),
        "--json",
        str(tmp_path / "out.json"),
        check=False,
    )
    assert done.returncode == 2
    report = json.loads((tmp_path / "out.json").read_text())
    offset = report["pcap"]["offset"]
    assert report["pcap"]["damaged"] is True and 24 < offset < len(data) // 2
    assert f"damaged at byte {offset}" in done.stderr
    assert 0 < report["packets"] < 751


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--struct", "list", "--size", "10", "--feed", "det"],
            "unknown structure (known: chain, tree, linear, robin, cuckoo, linear16)",
        ),
        (
            ["--struct", "linear16", "--size", "10", "--feed", "det", "--ipv6"],
            "keeps IPv4 keys only",
        ),
        (
            ["--struct", "chain", "--hash", "md5", "--size", "10", "--feed", "det"],
            "unknown hash (known: coralreef, lookup3, ",
        ),
        (
            ["--struct", "chain", "--size", "0", "--feed", "det"],
            "--size 0: expected a number of lines >= 1",
        ),
        (["--struct", "chain", "--size", "10", "--feed", "zipf:100:0"], "needs ALPHA > 0 (got 0)"),
        (
            ["--struct", "chain", "--size", "10", "--feed", "zipf:100:-1.5"],
            "needs ALPHA > 0 (got -1.5)",
        ),
        (["--struct", "chain", "--size", "10", "--feed", "lognormal:3"], "unknown kind"),
        (
            ["--struct", "linear", "--size", "2^30", "--feed", "det", "--memory", "1G"],
            "the linear table needs 80.000 GiB (80.0 bytes a line)",
        ),
        (
            ["--struct", "cuckoo", "--size", "2^20", "--feed", "det", "--memory", "50M"],
            "over the 0.049 GiB",
        ),
        (["--struct", "chain", "--size", "2^24", "--feed", "adversarial:5000"], "over the limit"),
        (["--struct", "chain", "--size", "10", "--feed", "pcap"], "--feed pcap needs --pcap FILE"),
    ],
)
def test_bad_input_is_refused_with_exit_2_and_nothing_written(match_bin, tmp_path, args, message):
    out = tmp_path / "out.json"
    done = run_match(
        match_bin, *args, "--json", str(out), "--dump", str(tmp_path / "d.csv"), check=False
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_sizes_need_not_be_powers_of_two(match_bin, tmp_path):
    for struct in STRUCTS:
        run_match(
            match_bin,
            "--struct",
            struct,
            "--size",
            "1000003",
            "--feed",
            "uniform:100000",
            "--packets",
            "200000",
            "--json",
            str(tmp_path / "out.json"),
        )
        report = json.loads((tmp_path / "out.json").read_text())
        assert report["size"] == 1000003 and report["refused"] == 0
        assert report["flows_end"] == report["inserts"] > 80000  # 1 - e^-2 of 100000
        assert report["bytes_per_flow"] > 0


MATCH_KEY = Struct("<QQQQHHBB2x")  # struct match_key (match_table.h) on this little-endian machine
MATCH_KEY16 = Struct("<IIHHBB2x")  # struct match_key16


def match_key_bytes(packet: tuple[int, ...], key_bytes: int = 40) -> bytes:
    """The bytes of struct match_key (or match_key16) of a feed row, as the tables hash them."""
    ipv, proto, sh, sl, dh, dl, sport, dport = packet[:8]
    if key_bytes == 16:
        return MATCH_KEY16.pack(sl, dl, sport, dport, proto, ipv)
    return MATCH_KEY.pack(sh, sl, dh, dl, sport, dport, proto, ipv)


@pytest.mark.parametrize(
    "struct,hash_name,size",
    [
        ("chain", "crc32c", 1000003),
        ("chain", "coralreef", 1000003),
        ("chain", "lookup3", 65537),
        ("chain", "murmur3_32", 2**16),
        ("chain", "wyhash", 999983),
        ("linear16", "crc32c", 1000003),
    ],
)
def test_the_line_of_a_hash_is_its_low_32_bits_modulo_the_size(
    match_bin, tmp_path, struct, hash_name, size
):
    """The adversarial feed keeps the keys whose line is 0; hashed here by the project's hash
    library, each of their hashes' low 32 bits must be 0 modulo the size (an exact modulo; powers
    of two and not, 32- and 64-bit hashes; linear16 hashes the 16 packed bytes)."""
    run_match(
        match_bin,
        "--struct",
        struct,
        "--size",
        str(size),
        "--hash",
        hash_name,
        "--feed",
        "adversarial:12",
        "--packets",
        "12",
        "--save-feed",
        str(tmp_path / "feed.csv"),
        "--json",
        str(tmp_path / "out.json"),
    )
    keys = {p[:8] for p in read_feed(tmp_path / "feed.csv")}
    assert len(keys) == 12
    key_bytes = 16 if struct == "linear16" else 40
    if struct == "chain":
        assert json.loads((tmp_path / "out.json").read_text())["used_lines"] == 1
    lines = [
        (hashing.hash_bytes(hash_name, match_key_bytes(k, key_bytes)) & 0xFFFFFFFF) % size
        for k in keys
    ]
    assert lines == [0] * 12


def test_a_weak_hash_of_keys_that_differ_in_low_bits_spreads_under_the_modulo(match_bin, tmp_path):
    """CoralReef's XOR fold of synthetic keys that differ in their low bits: reduced modulo the size
    (seed 000's line), almost every lookup takes one probe; the earlier multiply-shift, which took
    the high bits, put them in two lines (P(L=1) = 0.00006)."""
    run_match(
        match_bin,
        "--struct",
        "chain",
        "--hash",
        "coralreef",
        "--size",
        "2^16",
        "--feed",
        "uniform:20000",
        "--packets",
        "20000",
        "--json",
        str(tmp_path / "out.json"),
    )
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["p_l1"] > 0.5 and report["used_lines"] > 10000


def test_the_16_byte_table_refuses_a_feed_with_ipv6_packets_before_it_runs(match_bin, tmp_path):
    packets = random_packets(random.Random(6), 50, 20, ipv6=False)
    v6 = next(p for p in random_packets(random.Random(7), 50, 20) if p[0] == 6)
    write_feed(tmp_path / "feed.csv", packets[:30] + [v6] + packets[30:])
    done = run_match(
        match_bin,
        "--struct",
        "linear16",
        "--size",
        "64",
        "--feed",
        f"file:{tmp_path / 'feed.csv'}",
        "--json",
        str(tmp_path / "out.json"),
        "--dump",
        str(tmp_path / "d.csv"),
        check=False,
    )
    assert done.returncode == 2
    assert "keeps IPv4 keys only (16 bytes a key), but packet 31 of the feed is IPv6" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feed.csv"]
