"""`testbed learn`: sessions and fits from captures the engine made (so every fitted number is
known exactly), from nfdump files and Parquet flow tables of the same traffic, and from the real
captures of NTG_SHARED_DATA (no real address may survive); hostile captures; the native reader's
`l4_payload` column against tshark."""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import skip_or_fail

from analysis.capture import COLUMNS, Capture, address_text, read_capture
from analysis.export import export_captures
from analysis.fidelity import (
    FidelityResult,
    Trace,
    compare_traces,
    metric_names,
    pool_traces,
    read_trace,
)
from analysis.learn import LearnError, LearnOptions, learn_capture
from analysis.learn.fit import (
    Extras,
    FitOptions,
    close_mix,
    dist_of,
    effective_starts,
    fit_sessions,
    fit_timeline,
    map_addresses,
    time_dist,
)
from analysis.learn.sessions import PacketSessions, SessionTable
from generators.flowengine.session import compile_session
from ntgcore.scenario import json_schema, parse_scenario
from testbed.cli import main
from testbed.commands.learn import tie_of, worse_than_baseline
from testbed.meters.collector.nfdump import read_file

NS = 1_000_000_000
SYNTHETIC = """\
version: 1
name: learn-synthetic
flows:
  - {protocol: udp, src: 10.1.1.5, dst: 10.2.2.9, src_port: {range: 20000-20999, mode: increment},
     dst_port: 53, packets: 1, period: 1ms, payload: {size: 60}, repeat: {count: 1000, period: 1ms}}
  - {protocol: udp, src: 10.2.2.9, dst: 10.1.1.5, src_port: 53,
     dst_port: {range: 20000-20999, mode: increment}, start: 100us, packets: 1, period: 1ms,
     payload: {size: 300}, repeat: {count: 1000, period: 1ms}}
  - {protocol: tcp, src: 'fd00:1:2:3::7', dst: 'fd00:9:9:9::3', src_port: 40000, dst_port: 443,
     packets: 4, period: 100us, payload: {size: 100}, repeat: {count: 200, period: 5ms}}
  - {protocol: tcp, src: 'fd00:9:9:9::3', dst: 'fd00:1:2:3::7', src_port: 443, dst_port: 40000,
     start: 50us, packets: 3, period: 100us, payload: {size: 200}, repeat: {count: 200, period: 5ms}}
"""
# the real addresses of SYNTHETIC
SYNTHETIC_ADDRESSES = ["10.1.1.5", "10.2.2.9", "fd00:1:2:3::7", "fd00:9:9:9::3"]


def engine_pcap(flowengine_bin: Path, text: str, out: Path) -> Path:
    sess = out.with_suffix(".sess")
    sess.write_text(compile_session(parse_scenario(text)))
    subprocess.run(
        [str(flowengine_bin), "gen", str(sess), "-o", str(out)], check=True, capture_output=True
    )
    return out


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory, flowengine_bin, pcaplib) -> Path:
    return engine_pcap(flowengine_bin, SYNTHETIC, tmp_path_factory.mktemp("learn") / "s.pcap")


@functools.cache
def schema() -> dict:
    return json_schema()


def learned(paths, **kw):
    r = learn_capture([str(p) for p in paths], LearnOptions(**kw))
    parse_scenario(r.yaml_text, "learned.yaml")  # it validates
    jsonschema.validate(yaml.safe_load(r.yaml_text), schema())  # and editors accept it
    return r


def entry(result, name: str) -> dict:
    [e] = [e for e in result.scenario["sessions"] if e["name"] == name]
    return e


def assert_no_address(text: str, addresses) -> None:
    for a in addresses:
        assert a not in text, f"the real address {a} is in the learned scenario"


# ---- exact fits ---------------------------------------------------------------------------


def test_engine_capture_fits_exactly(synthetic):
    r = learned([synthetic])
    assert r.report["sessions"] == 1200
    udp = entry(r, "udp-53")
    assert udp["protocol"] == "udp" and udp["server_port"] == 53
    assert udp["count"] == 1000 and udp["arrival"] == "1ms"
    assert udp["request_bytes"] == 60 and udp["response_bytes"] == 300 and udp["rounds"] == 1
    assert udp["rtt"] == "200us"  # the response 100 us after the request: h = rtt / 2
    assert udp["mss"] == 300
    assert udp["client"] == "198.18.0.5" and udp["server"] == "198.18.1.9"  # /24s by first use
    ports = list(range(20000, 21000))  # each once: exactly these (as many instances as ports)
    assert udp["client_port"] == {
        "empirical": {"values": ports, "weights": [1] * 1000},
        "cycle": True,
    }
    tcp = entry(r, "tcp-443-v6")
    # client 0 100 200 300 us, server 50 150 250: c s c s c s c -> 4 rounds of the client's
    # 400 bytes and the server's 600
    assert tcp["count"] == 200 and tcp["arrival"] == "5ms" and tcp["rounds"] == 4
    assert tcp["request_bytes"] == 100 and tcp["response_bytes"] == 150
    assert tcp["client_port"] == 40000 and tcp["close"] == "fin" and tcp["mss"] == 200
    assert tcp["client"] == "2001:db8::7" and tcp["server"] == "2001:db8::1:0:0:3"
    assert_no_address(r.yaml_text, SYNTHETIC_ADDRESSES)
    assert r.yaml_text.startswith("# Learned by `testbed learn`")
    assert "s.pcap (pcap," in r.yaml_text and "sha256" in r.yaml_text


SESSIONS = """\
version: 1
name: learn-loop
sessions:
  - {name: web, protocol: tcp, server: 198.18.1.10, server_port: 8080, count: 300, arrival: 2ms,
     client: {network: 198.18.0.0/24, hosts: {empirical: {values: [5, 9], weights: [3, 1]}}},
     rtt: 10ms, gap: 20us, mss: 1000, window: 4, rounds: 2, request_bytes: 500,
     response_bytes: 3000, close: fin}
  - {name: reset, protocol: tcp, client: 198.18.4.1, server: 198.18.5.1, server_port: 25,
     count: 100, arrival: 3ms, rtt: 4ms, request_bytes: 20, response_bytes: 60, close: rst}
  - {name: bulk, protocol: tcp, client: 198.18.6.1, server: 198.18.7.1, server_port: 9000,
     count: 50, arrival: 1ms, rtt: 2ms, mss: 1000, window: 64, request_bytes: 100,
     response_bytes: 40000}
  - {name: dns, protocol: udp, client: {network: 198.18.2.0/24, hosts: {uniform: {min: 1, max: 250}}},
     server: 198.18.3.53, server_port: 53, count: 500, arrival: 1ms, rtt: 2ms,
     request_bytes: 80, response_bytes: 400}
"""


@pytest.fixture(scope="module")
def loop(tmp_path_factory, flowengine_bin, pcaplib) -> Path:
    return engine_pcap(flowengine_bin, SESSIONS, tmp_path_factory.mktemp("learn") / "loop.pcap")


def test_the_engines_sessions_are_learned_back(loop):
    """Two-way sessions the engine made with known parameters: what learn fits is what made
    them (the flight: the largest one the messages filled; the UDP mss: the largest datagram)."""
    r = learned([loop])
    web = entry(r, "tcp-8080")
    assert (web["count"], web["arrival"], web["rtt"], web["mss"]) == (300, "2ms", "10ms", 1000)
    assert (web["rounds"], web["request_bytes"], web["response_bytes"]) == (2, 500, 3000)
    assert web["close"] == "fin" and web["window"] == 3  # 3000 bytes: flights of 3 of 1000
    assert web["gap"] == "20us"
    assert web["client"]["hosts"]["empirical"]["values"] == [5, 9]
    assert web["server"] == "198.18.1.10" and web["server_port"] == 8080
    reset = entry(r, "tcp-25")
    assert (reset["count"], reset["rtt"], reset["close"]) == (100, "4ms", "rst")
    assert (reset["request_bytes"], reset["response_bytes"]) == (20, 60)
    dns = entry(r, "udp-53")
    assert (dns["count"], dns["rtt"], dns["request_bytes"], dns["response_bytes"]) == (
        500,
        "2ms",
        80,
        400,
    )
    assert dns["rounds"] == 1 and dns["mss"] == 400
    bulk = entry(r, "tcp-9000")
    assert (bulk["count"], bulk["window"], bulk["response_bytes"]) == (50, 40, 40000)


@pytest.mark.parametrize("capture", ["synthetic", "loop"])
def test_chunks_do_not_change_the_sessions(capture, request):
    path = request.getfixturevalue(capture)
    one_r = learn_capture([str(path)], LearnOptions())
    small_r = learn_capture([str(path)], LearnOptions(memory_limit=1))  # 1024 a chunk
    assert one_r.extras.datagrams.equals(small_r.extras.datagrams)
    one, small = one_r.sessions, small_r.sessions
    if capture == "loop":  # flights of 40 segments, some cut by the 1024-packet chunks
        assert (one.max_flight == 40).sum() == 50
    for name, col in vars(one).items():
        assert np.array_equal(col, getattr(small, name)), name


def test_a_trace_in_several_files_is_one_trace(synthetic, tmp_path):
    if not shutil.which("editcap"):
        skip_or_fail("editcap is not installed (apt-get install wireshark-common)")
    subprocess.run(
        ["editcap", "-c", "1500", str(synthetic), str(tmp_path / "part.pcap")],
        check=True,
        capture_output=True,
    )
    parts = sorted(tmp_path.glob("part*.pcap"))
    assert len(parts) == 3
    whole = learn_capture([str(synthetic)], LearnOptions()).sessions
    pieces = learn_capture([str(p) for p in parts], LearnOptions()).sessions
    for name, col in vars(whole).items():  # sessions go on across the files
        if name != "first_packet":
            assert np.array_equal(col, getattr(pieces, name)), name


def test_a_reused_tcp_port_starts_a_new_session(tmp_path, flowengine_bin, pcaplib):
    text = """\
version: 1
name: reuse
flows:
  - {protocol: tcp, src: 10.9.0.1, dst: 10.9.0.2, src_port: 5000, dst_port: 80, packets: 3,
     period: 10us, payload: {size: 10}, repeat: {count: 50, period: 1ms}}
"""
    r = learned([engine_pcap(flowengine_bin, text, tmp_path / "r.pcap")])
    e = entry(r, "tcp-80")
    assert e["count"] == 50 and e["request_bytes"] == 30 and e["response_bytes"] == 0


def test_scaling_options(synthetic):
    base = entry(learned([synthetic]), "udp-53")
    fast = entry(learned([synthetic], rate_scale=4), "udp-53")
    assert fast["count"] == 4 * base["count"] and fast["arrival"] == "250us"
    # 4 instances a port seen: the range of the ports seen, not each port 4 times over
    assert fast["client_port"] == {"histogram": {"edges": [20000, 20999], "counts": [1000]}}
    longer = learned([synthetic], duration_ns=10 * NS)
    assert abs(entry(longer, "udp-53")["count"] - 10_000) <= 10  # 1000 a second for 10 s
    more = entry(learned([synthetic], hosts_scale=3), "udp-53")
    assert len(more["client"]["hosts"]["empirical"]["values"]) == 3
    one = learned([synthetic], classes=1)
    assert [e["name"] for e in one.scenario["sessions"]] == ["udp-53", "tcp-other-v6"]
    assert entry(one, "tcp-other-v6")["server_port"] == 443


def test_baseline_is_one_class_per_family(synthetic):
    r = learned([synthetic], baseline=True)
    names = [e["name"] for e in r.scenario["sessions"]]
    assert names == ["baseline", "baseline-v6"]
    assert r.scenario["name"].endswith("-baseline")
    b = learn_capture([str(synthetic)], LearnOptions()).baseline()
    assert b.scenario["sessions"] == r.scenario["sessions"]


# ---- flow records ---------------------------------------------------------------------------


def test_nfdump_records(synthetic, tmp_path):
    if not shutil.which("nfpcapd") or not shutil.which("nfdump"):
        skip_or_fail("nfdump is not installed (apt-get install nfdump)")
    out = tmp_path / "nf"
    out.mkdir()
    subprocess.run(
        ["nfpcapd", "-r", str(synthetic), "-w", str(out)], check=True, capture_output=True
    )
    files = sorted(out.glob("nfcapd.*"))
    assert files
    with pytest.raises(LearnError, match="an nfdump file; reading it needs nfdump"):
        learn_capture([str(f) for f in files], LearnOptions())  # the analysis runs no program
    r = learned(files, read_nfdump=read_file)
    udp = entry(r, "udp-53")
    assert udp["count"] == 1000 and udp["request_bytes"] == 60 and udp["response_bytes"] == 300
    assert udp["client"] == "198.18.0.5"
    # the 200 connections of one 5-tuple are one record a direction: one session of them all
    tcp = entry(r, "tcp-443-v6")
    assert tcp["count"] == 1 and tcp["request_bytes"] == 200 * 400
    assert_no_address(r.yaml_text, SYNTHETIC_ADDRESSES)


def test_parquet_flow_tables(synthetic, tmp_path):
    export_captures([synthetic], tmp_path / "exp")
    r = learned([tmp_path / "exp"])
    udp = entry(r, "udp-53")
    assert udp["count"] == 1000 and udp["request_bytes"] == 60 and udp["response_bytes"] == 300
    tcp = entry(r, "tcp-443-v6")  # one record a direction for the 200 connections of a 5-tuple
    assert tcp["count"] == 1 and tcp["request_bytes"] == 200 * 400
    assert tcp["response_bytes"] == 200 * 600
    assert_no_address(r.yaml_text, SYNTHETIC_ADDRESSES)


def test_run_table_with_text_addresses_and_damaged_rows(tmp_path):
    flows = pa.table(
        {
            "proto": pa.array([17, 17, 6, 17, 6], pa.uint8()),
            "src": ["10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.1", "::ffff:10.0.0.3"],
            "dst": ["10.0.0.2", "10.0.0.1", "10.0.0.9", "10.0.0.2", "10.0.0.9"],
            "sport": pa.array([3000, 53, 4000, 3001, 4001], pa.uint16()),
            "dport": pa.array([53, 3000, 80, 53, 80], pa.uint16()),
            "packets": pa.array([1, 1, 10, -5, 2**62], pa.int64()),
            "bytes": pa.array([88, 428, 5000, 10, 10], pa.int64()),
            "first_ns": pa.array([0, 1000, 5000, 0, 0], pa.int64()),
            "last_ns": pa.array([0, 1000, 9000, 0, 0], pa.int64()),
        }
    )
    (tmp_path / "tables").mkdir()
    pq.write_table(flows, tmp_path / "tables" / "flows.parquet")
    r = learned([tmp_path])  # a run folder: its tables/flows.parquet
    assert r.report["read"] == {"records": 5, "records_skipped": 2, "sessions": 2}
    udp = entry(r, "udp-53")  # 88 - 14 - 28 and 428 - 14 - 28
    assert (udp["request_bytes"], udp["response_bytes"]) == (46, 386)
    assert entry(r, "tcp-80")["request_bytes"] == 5000 - 10 * 54
    assert_no_address(r.yaml_text, ["10.0.0.1", "10.0.0.2", "10.0.0.9"])


# ---- the pieces of the fit -------------------------------------------------------------------


def test_arrival_kinds():
    rng = np.random.default_rng(7)
    assert time_dist(np.full(50, 1000.0)) == ("1us", "fixed")
    d, kind = time_dist(rng.exponential(1e6, 5000))
    assert kind == "exponential" and d["exponential"]["mean"].endswith("us")
    d, kind = time_dist(rng.lognormal(10, 2.0, 5000))  # far from Poisson: its quantiles
    assert kind == "empirical" and len(d["quantiles"]) == 65


def test_distribution_forms():
    assert dist_of(np.array([5, 5, 5])) == 5
    assert dist_of(np.array([1, 2, 2, 9])) == {
        "empirical": {"values": [1, 2, 9], "weights": [1, 2, 1]}
    }
    q = dist_of(np.arange(10_000))["quantiles"]
    assert q[0] == 0 and q[-1] == 9999 and q == sorted(q) and len(q) == 65


def test_clock_jumps_are_left_out():
    starts = np.array([0, 10, 20, 30, 3 * 365 * 86400 * NS, 3 * 365 * 86400 * NS + 10])
    eff, info = effective_starts(starts)
    assert eff.tolist() == [0, 10, 20, 30, 40, 50] and info["jumps"] == 1
    eff, info = effective_starts(np.array([0, 100 * 365 * 86400 * NS]))  # one gap: a century
    assert eff.tolist() == [0, NS] and info["jumps"] == 1


def test_more_prefixes_than_the_benchmark_range_fold_with_a_warning():
    n = 600  # clients in 600 /24s, one server
    z = np.zeros(n, np.int64)
    clients = (10 << 24) + (np.arange(n, dtype=np.int64) << 8) + 7
    t = SessionTable(
        ip_version=np.full(n, 4, np.uint8),
        proto=np.full(n, 17, np.uint8),
        client_hi=np.zeros(n, np.uint64),
        client_lo=clients.astype(np.uint64),
        server_hi=np.zeros(n, np.uint64),
        server_lo=np.full(n, (192 << 24) + 1, np.uint64),
        client_port=np.full(n, 5000, np.uint16),
        server_port=np.full(n, 53, np.uint16),
        start_ns=np.arange(n, dtype=np.int64) * 1000,
        end_ns=np.arange(n, dtype=np.int64) * 1000 + 10,
        client_packets=z + 1,
        server_packets=z + 1,
        client_bytes=z + 100,
        server_bytes=z + 200,
        client_payload=z + 58,
        server_payload=z + 158,
        rounds=z + 1,
        rtt_ns=z + 20,
        max_payload=z + 158,
        max_flight=z + 1,
        min_gap_ns=z - 1,
        close=np.zeros(n, np.int8),
        think_ns=z,
        think_count=z,
        linger_ns=z - 1,
        midstream=np.zeros(n, bool),
    )
    m = map_addresses(t)
    assert m.prefixes == {4: 601} and m.folded == {4: 89}
    assert m.client_offset[0] == 7 and m.server_offset[0] == 256 + 1  # first use: client, server
    assert m.client_offset[511] == (512 << 8 | 7) % (512 << 8)  # the 513th /24 folds onto the 1st
    entries, report = fit_sessions(t, Extras(), FitOptions())
    assert any("folded" in w for w in report["warnings"])
    assert entries[0]["client"]["network"] == "198.18.0.0/15"


def test_address_map_keeps_prefixes_and_host_bytes(synthetic):
    t = learn_capture([str(synthetic)], LearnOptions()).sessions
    m = map_addresses(t)
    v4 = t.ip_version == 4
    assert set(m.client_offset[v4].tolist()) == {5}
    assert set(m.server_offset[v4].tolist()) == {256 + 9}


# ---- hostile input ---------------------------------------------------------------------------

PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)


def test_an_empty_capture_is_refused(tmp_path, pcaplib):
    p = tmp_path / "empty.pcap"
    p.write_bytes(PCAP_HEADER)
    with pytest.raises(LearnError, match="no TCP or UDP session in 0 packets"):
        learn_capture([str(p)], LearnOptions())


def test_non_ip_frames_only_are_refused(tmp_path, pcaplib):
    arp = bytes.fromhex("ffffffffffff0200000000010806") + bytes(28)
    rec = struct.pack("<IIII", 1, 0, len(arp), len(arp)) + arp
    p = tmp_path / "arp.pcap"
    p.write_bytes(PCAP_HEADER + rec * 10)
    with pytest.raises(LearnError, match=r"10 packets \(not IP: 10"):
        learn_capture([str(p)], LearnOptions())


def test_a_truncated_capture_gives_a_scenario_and_a_warning(synthetic, tmp_path):
    data = synthetic.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) // 2 + 7])
    r = learned([cut])
    assert any("damaged at byte offset" in w for w in r.report["warnings"])
    assert "# warning: cut.pcap: damaged" in r.yaml_text
    assert 0 < r.report["sessions"] < 1200


def test_a_clock_jump_is_kept_as_a_pause(tmp_path, flowengine_bin, pcaplib):
    text = """\
version: 1
name: jump
flows:
  - {protocol: udp, src: 10.7.0.1, dst: 10.7.0.2, src_port: {range: 1000-1099, mode: increment},
     dst_port: 53, packets: 1, period: 1ms, payload: {size: 40}, repeat: {count: 100, period: 10ms}}
  - {protocol: udp, src: 10.7.0.1, dst: 10.7.0.2, src_port: {range: 2000-2099, mode: increment},
     dst_port: 53, start: 5000s, packets: 1, period: 1ms, payload: {size: 40},
     repeat: {count: 100, period: 10ms}}
"""
    r = learned([engine_pcap(flowengine_bin, text, tmp_path / "j.pcap")])
    assert r.report["clock_jumps"]["jumps"] == 1 and r.report["clock_jumps"]["kept"]
    e = entry(r, "udp-53")
    assert e["count"] == 200 and e["arrival"] == "10ms"  # the jump is not an inter-arrival
    # the capture spans under a week: the jump is a pause of the profile, 5000 s in all
    assert [x["rate"] for x in e["profile"]["steps"]] == [1.0, 0.0, 1.0]
    assert e["profile"]["steps"][0]["for"] == "1s" and e["profile"]["steps"][1]["for"] == "4999s"


def test_time_stamps_at_the_ends_of_int64_do_not_overflow():
    """pcapng time stamps can be anything an int64 holds: clipped, they are clock jumps."""
    n = 6
    cols = {name: np.zeros(n, dtype) for name, dtype in COLUMNS.items()}
    cols["ts_ns"][:] = [-(2**63), 0, 10, 20, 2**63 - 1, 2**63 - 2]
    cols["ip_version"][:] = 4
    cols["proto"][:] = 17
    cols["src_lo"][:] = [1, 1, 1, 1, 1, 1]
    cols["dst_lo"][:] = [2, 2, 2, 2, 2, 2]
    cols["sport"][:] = [1000, 1001, 1002, 1003, 1004, 1005]
    cols["dport"][:] = 53
    cols["wire_len"][:] = 60
    acc = PacketSessions()
    acc.add(Capture(Path("x.pcapng"), "pcapng", 1, 10**9, **cols))
    t = acc.table()
    assert len(t) == n and t.start_ns.min() == -(2**62) + 1 and t.start_ns.max() == 2**62 - 1
    entries, report = fit_sessions(t, Extras(), FitOptions())
    assert report["clock_jumps"]["jumps"] == 2 and entries[0]["count"] == n
    assert report["span_ns"] < 10**6  # gaps 10 10 0 and the jumps as 10


def test_unknown_input_is_refused(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello")
    with pytest.raises(LearnError, match="not a pcap/pcapng capture, an nfdump file or a Parquet"):
        learn_capture([str(p)], LearnOptions())
    with pytest.raises(LearnError, match="no such file"):
        learn_capture([str(tmp_path / "missing.pcap")], LearnOptions())


# ---- the command -------------------------------------------------------------------------------


def test_the_command_writes_a_scenario_that_validates(synthetic, tmp_path, capsys):
    out = tmp_path / "learned.yaml"
    argv = ["learn", str(synthetic), "-o", str(out), "-q", "--name", "mine", "--seed", "9"]
    assert main(argv) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["name"] == "mine" and doc["seed"] == 9
    parse_scenario(out.read_text(), str(out))
    said = capsys.readouterr().out
    assert "learned 1,200 sessions" in said and "udp-53" in said
    assert main(["learn", str(tmp_path / "nope.pcap"), "-o", str(out)]) == 2
    assert main(["learn", str(synthetic), "-o", str(out), "--classes", "0"]) == 2
    assert main(["learn", str(synthetic), "-o", str(out), "--tiers", "0"]) == 2
    assert main(["learn", str(synthetic), "-o", str(out), "--tiers", "1", "--drop-jumps"]) == 0


# ---- what round 2 of the issue fixed (docs/learn.md) ------------------------------------------

PAUSES = """\
version: 1
name: learn-pauses
sessions:
  - {name: keep, protocol: tcp, client: 198.18.0.5, server: 198.18.1.10, server_port: 8080,
     count: 40, arrival: 10ms, rtt: 2ms, gap: 10us, mss: 1000, window: 4, rounds: 3,
     request_bytes: 300, response_bytes: 2500, think: 40ms, linger: 1500ms, close: fin}
  - {name: poll, protocol: udp, client: 198.18.2.7, server: 198.18.3.9, server_port: 9999,
     count: 30, arrival: 20ms, rtt: 1ms, rounds: 4, request_bytes: 50, response_bytes: 70,
     think: 25ms}
"""


def test_think_and_linger_are_learned_back(tmp_path, flowengine_bin, pcaplib):
    """Sessions that pause 40 ms before every later round and 1.5 s before their close (UDP: 25
    ms before every later round): learn finds exactly these pauses."""
    r = learned([engine_pcap(flowengine_bin, PAUSES, tmp_path / "pauses.pcap")])
    keep, poll = entry(r, "tcp-8080"), entry(r, "udp-9999")
    assert (keep["rounds"], keep["think"], keep["linger"]) == (3, "40ms", "1.5s")
    assert (keep["request_bytes"], keep["response_bytes"]) == (300, 2500)
    # UDP: a round is a datagram a side; the answer (at +rtt/2) is not a pause of the client
    assert (poll["rounds"], poll["think"], poll["request_bytes"]) == (4, "25ms", 50)
    assert "linger" not in poll
    [t_keep, t_poll] = parse_scenario(r.yaml_text).sessions
    pauses = (t_keep.think.bounds, t_keep.linger.bounds, t_poll.think.bounds)
    assert pauses == ((40_000_000,) * 2, (1_500_000_000,) * 2, (25_000_000,) * 2)


def test_no_pause_is_no_key(synthetic):
    udp = entry(learned([synthetic]), "udp-53")  # one exchange a session, no close
    assert "think" not in udp and "linger" not in udp


ANTI = """\
version: 1
name: learn-anti
sessions:
  - {name: big, protocol: tcp, client: 198.18.0.5, server: 198.18.1.10, server_port: 7000,
     count: 100, arrival: 1ms, rtt: 200us, mss: 1400, window: 16, rounds: 1, request_bytes: 200,
     response_bytes: 20000}
  - {name: chat, protocol: tcp, client: 198.18.0.6, server: 198.18.1.10, server_port: 7000,
     start: 500us, count: 100, arrival: 1ms, rtt: 200us, rounds: 5, request_bytes: 40,
     response_bytes: 60}
"""


def test_bytes_per_round_keep_the_bytes_per_session(tmp_path, flowengine_bin, pcaplib):
    """One class, half its sessions one round of 20,000 bytes, half five rounds of 60: the
    per-round sample of a session counts once per round, so rounds x bytes a round is the mean
    a session (10,150 bytes; one sample a session would make it 3 x 10,030)."""
    r = learned([engine_pcap(flowengine_bin, ANTI, tmp_path / "anti.pcap")], tiers=1)
    e = entry(r, "tcp-7000")
    assert e["rounds"] == {"empirical": {"values": [1, 5], "weights": [100, 100]}}
    assert e["response_bytes"] == {"empirical": {"values": [60, 20000], "weights": [500, 100]}}
    assert e["request_bytes"] == {"empirical": {"values": [40, 200], "weights": [500, 100]}}
    [model] = parse_scenario(r.yaml_text).sessions
    t = r.sessions
    per_round = model.rounds.mean()
    assert per_round * model.response_bytes.mean() == pytest.approx(t.server_payload.mean())
    assert per_round * model.request_bytes.mean() == pytest.approx(t.client_payload.mean())


UDP_ROUNDS = """\
version: 1
name: learn-udp-rounds
sessions:
  - {name: push, protocol: udp, client: 198.18.0.5, server: 198.18.1.10, server_port: 6000,
     count: 60, arrival: 2ms, rtt: 1ms, mss: 1000, rounds: 3, request_bytes: 400,
     response_bytes: 0}
  - {name: ask, protocol: udp, client: 198.18.0.6, server: 198.18.1.10, server_port: 6000,
     start: 1ms, count: 60, arrival: 2ms, rtt: 1ms, mss: 1000, rounds: 1, request_bytes: 80,
     response_bytes: 900}
"""


def test_udp_rounds_are_datagrams(tmp_path, flowengine_bin, pcaplib):
    """A UDP class whose sessions are one-way flows of three datagrams or one question and one
    answer: rounds are the busier side's datagrams, a round's bytes one datagram (0: that side
    sends none), so the learned class makes the same datagrams (a session's whole payload in one
    message would be split by the mss instead). Flow records of the same capture give the same
    model (their datagrams all have their side's mean size here)."""
    capture = engine_pcap(flowengine_bin, UDP_ROUNDS, tmp_path / "udp.pcap")
    export_captures([capture], tmp_path / "exp")
    for r in (learned([capture]), learned([tmp_path / "exp"])):
        e = entry(r, "udp-6000")
        assert e["rounds"] == {"empirical": {"values": [1, 3], "weights": [60, 60]}}
        assert e["request_bytes"] == {"empirical": {"values": [80, 400], "weights": [60, 180]}}
        assert e["response_bytes"] == {"empirical": {"values": [0, 900], "weights": [180, 60]}}
        assert e["mss"] == 900


def test_seen_client_ports_are_dealt_as_a_deck(synthetic, tmp_path, flowengine_bin):
    """udp-53 of SYNTHETIC: one client host, 1,000 sessions on 1,000 ports. The learned class
    deals them as a deck: its 1,000 instances get 1,000 different 5-tuples (drawn with
    replacement, about 632 would be distinct, and a meter would merge the rest)."""
    r = learned([synthetic])
    assert entry(r, "udp-53")["client_port"]["cycle"] is True
    played = engine_pcap(flowengine_bin, r.yaml_text, tmp_path / "played.pcap")
    flows = read_trace(played).flows
    dns = flows[flows["dport"] == 53]
    assert len(dns) == 1000 and dns["sport"].nunique() == 1000 and (dns["packets"] == 1).all()
    # three times as many instances as ports seen: the range they came from instead (no deck)
    more = entry(learned([synthetic], rate_scale=3.0), "udp-53")["client_port"]
    assert more == {"histogram": {"edges": [20000, 20999], "counts": [1000]}}


def test_pooled_replicas_keep_their_own_start_shares():
    """Two replicas of one model, one lasting twice as long: each flow's start is a share of its
    own replica's span, so the pool has the same start distribution as either replica."""

    def trace(first: int, scale: int) -> Trace:
        starts = first + scale * np.array([0, 10, 20, 30, 100])
        flows = pd.DataFrame(
            {
                "proto": 17,
                "src": "198.18.0.1",
                "dst": "198.18.0.2",
                "sport": np.arange(1000, 1005),
                "dport": 53,
                "packets": 1,
                "bytes": 100,
                "first_ns": starts,
                "last_ns": starts,
            }
        )
        return Trace("t", flows, None, int(starts[0]), int(starts[-1]), 5)

    one = trace(0, 1)
    pooled = pool_traces([trace(0, 1), trace(5_000, 2)], "pool")
    assert compare_traces(one, pooled).metrics["nemd_flow_start"] == 0
    assert pooled.flows["start_frac"].tolist() == [0, 0.1, 0.2, 0.3, 1] * 2


CHECKED = """\
version: 1
name: learn-checked
sessions:
  - {name: web, protocol: tcp, client: {network: 198.18.0.0/24, hosts: {uniform: {min: 1,
     max: 40}}}, server: 198.18.1.10, server_port: 8080, start: 600ms, count: 5000,
     arrival: {exponential: {mean: 120us}}, rtt: 4ms, gap: 20us, mss: 1000, window: 4,
     rounds: {empirical: {values: [1, 2, 3], weights: [5, 3, 2]}}, think: 30ms, linger: 200ms,
     request_bytes: {uniform: {min: 200, max: 600}}, response_bytes: {lognormal: {median: 3000,
     sigma: 1.0, max: 60000}}, close: fin}
  - {name: dns, protocol: udp, client: {network: 198.18.2.0/24, hosts: {uniform: {min: 1,
     max: 40}}}, server: 198.18.3.53, server_port: 53, count: 15000,
     client_port: {empirical: {values: PORTS}, cycle: true},
     arrival: {exponential: {mean: 80us}}, rtt: 2ms, request_bytes: {uniform: {min: 30,
     max: 60}}, response_bytes: {uniform: {min: 60, max: 400}}}
""".replace("PORTS", str(list(range(10000, 25000))))  # a port each: no two DNS on one 5-tuple


def test_learn_check_end_to_end(tmp_path, flowengine_bin, pcaplib, capsys):
    """`testbed learn --check` on a capture the engine made from a model learn can express (web
    sessions in the second half only, DNS throughout): the learned traffic meets every target
    and is not farther from the input than the baseline (exit 0); the report folder has both
    columns; the baseline is far behind where the classes differ. 20,000 sessions: one replica,
    and the original's own sampling noise (about 0.5 / sqrt(sessions) on the flow start) below
    --check's tie of 0.01. (Deterministic: the capture, the fit and the replica follow fixed
    seeds.)"""
    capture = engine_pcap(flowengine_bin, CHECKED, tmp_path / "checked.pcap")
    out = tmp_path / "learned.yaml"
    assert main(["learn", str(capture), "-o", str(out), "-q", "--check"]) == 0
    said = capsys.readouterr().out
    assert "nemd_flow_duration" in said and "baseline" in said
    report = tmp_path / "learned.yaml.fidelity"
    for name in ("report.md", "report.html", "metrics.parquet", "metrics.json"):
        assert (report / name).stat().st_size > 0, name
    assert (report / "plots" / "summary.png").is_file()
    doc = json.loads((report / "metrics.json").read_text())
    assert set(doc) == {"learned", "baseline"} and doc["learned"]["missed"] == []
    # the baseline mixes the two classes' fields: far from the input where the classes differ
    learned, baseline = doc["learned"]["metrics"], doc["baseline"]["metrics"]
    for m in ("nemd_flow_duration", "nemd_packet_size", "nemd_flow_packets"):
        assert learned[m] * 5 < baseline[m], (m, learned[m], baseline[m])
    assert learned["spearman_ports"] > baseline["spearman_ports"]


# ---- the reader's l4_payload --------------------------------------------------------------------


def tshark_payloads(path: Path) -> list[tuple[str, str]]:
    cmd = ["tshark", "-n", "-r", str(path), "-T", "fields", "-E", "occurrence=f"]
    cmd += ["-e", "tcp.len", "-e", "udp.length"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [tuple(line.split("\t")[:2]) for line in out.splitlines()]


def check_payloads(path: Path) -> int:
    cap = read_capture(path)
    checked = 0
    for i, (tcp_len, udp_len) in enumerate(tshark_payloads(path)):
        if cap.frag[i] or cap.ip_version[i] == 0:
            continue
        if tcp_len and cap.proto[i] == 6:
            assert cap.l4_payload[i] == int(tcp_len), (path, i)
            checked += 1
        elif udp_len and cap.proto[i] == 17:
            assert cap.l4_payload[i] == int(udp_len) - 8, (path, i)
            checked += 1
        elif cap.proto[i] not in (6, 17):
            assert cap.l4_payload[i] == 0, (path, i)
    return checked


def test_l4_payload_matches_tshark(synthetic):
    if not shutil.which("tshark"):
        skip_or_fail("tshark is not installed")
    assert check_payloads(synthetic) == 3400


# ---- real captures ------------------------------------------------------------------------------


@pytest.fixture
def shared_pcaps(pcaplib) -> list[Path]:
    root = os.environ.get("NTG_SHARED_DATA")
    if not root:
        skip_or_fail("NTG_SHARED_DATA not set: real captures live outside the repo")
    files = sorted(Path(root, "pcaps").glob("*.pcap"))
    assert files, f"no pcaps/*.pcap under NTG_SHARED_DATA={root}"
    return files


def real_addresses(path: Path) -> set[str]:
    cap = read_capture(path)
    ip = cap.ip_version > 0
    found = set(address_text(cap.ip_version[ip], cap.src_hi[ip], cap.src_lo[ip]))
    found |= set(address_text(cap.ip_version[ip], cap.dst_hi[ip], cap.dst_lo[ip]))
    # also the exploded IPv6 forms and every IPv4 address as it might be written
    return found | {ipaddress.ip_address(a).exploded for a in found if a}


def test_real_captures_learn_without_their_addresses(shared_pcaps):
    for path in shared_pcaps:
        for baseline in (False, True):
            r = learned([path], baseline=baseline)
            assert r.report["sessions"] > 0, path
            assert_no_address(r.yaml_text, real_addresses(path) - {""})


def test_real_captures_l4_payload_matches_tshark(shared_pcaps):
    if not shutil.which("tshark"):
        pytest.skip("tshark is not installed")
    assert sum(check_payloads(p) for p in shared_pcaps) > 500


def test_three_years_of_dns_keep_their_clock_jumps_unless_dropped(shared_pcaps):
    [path] = [p for p in shared_pcaps if p.name == "zeek__dns-edns-ecs.pcap"]
    kept = learned([path])  # three years, the jumps pauses in the profiles, and a warning
    assert kept.report["clock_jumps"]["kept"] and kept.report["span_ns"] > 3 * 10**7 * NS
    assert kept.report["timeline"]["idle"] >= kept.report["clock_jumps"]["jumps"]
    assert any("a live run lasts as long" in w for w in kept.report["warnings"])
    r = learned([path], drop_jumps=True)
    assert r.report["clock_jumps"]["jumps"] >= 1 and not r.report["clock_jumps"]["kept"]
    assert r.report["span_ns"] < 3600 * NS  # the jumps are left out of the span
    assert any("left out (--drop-jumps)" in w for w in r.report["warnings"])


ENDS = """\
version: 1
name: learn-ends
sessions:
  - {name: web, protocol: tcp, client: 198.18.0.0/24, server: 198.18.1.10, server_port: 8000,
     count: 40, arrival: 1ms, rtt: 200us, request_bytes: 300, response_bytes: 900,
     close: {choices: {fin: 20, rst: 5, none: 15}}}
"""


def test_how_sessions_end_is_learned_as_a_close_choice(tmp_path, flowengine_bin, pcaplib):
    """Sessions closed with FIN, with RST, and not at all (still open when the capture ends):
    one entry each (a session's close goes with its length), with their counts; with one
    entry for the class (--tiers 1 does not merge them: closes are split first), the same."""
    r = learned([engine_pcap(flowengine_bin, ENDS, tmp_path / "ends.pcap")])
    got = [(e["name"], e["close"], e["count"]) for e in r.scenario["sessions"]]
    assert got == [
        ("tcp-8000", "fin", 20),
        ("tcp-8000-rst", "rst", 5),
        ("tcp-8000-none", "none", 15),
    ]
    played = [(p.close, p.count) for s in parse_scenario(r.yaml_text).sessions for p in s.parts()]
    assert played == [("fin", 20), ("rst", 5), ("none", 15)]
    assert close_mix(np.array([1] * 20 + [2] * 5 + [0] * 15), packets=True) == {
        "choices": {"fin": 20, "rst": 5, "none": 15}
    }  # the baseline's close: one choice of the three


TIERS_TEXT = """\
version: 1
name: learn-tiers
sessions:
  - {name: slow, protocol: tcp, client: 198.18.0.5, server: 198.18.1.10, server_port: 8080,
     count: 40, arrival: 20ms, rtt: 2ms, rounds: 4, request_bytes: 300, response_bytes: 2000,
     think: 300ms, linger: 2s}
  - {name: quick, protocol: tcp, client: 198.18.0.5, server: 198.18.1.10, server_port: 8080,
     start: 10ms, count: 40, arrival: 20ms, rtt: 2ms, rounds: 4, request_bytes: 300,
     response_bytes: 2000, think: 1ms, linger: 10ms}
"""


def test_tiers_keep_a_sessions_pauses_together(tmp_path, flowengine_bin, pcaplib):
    """One class, half its sessions slow (think 300 ms, linger 2 s), half quick (1 ms, 10 ms):
    drawn independently, a think and a linger would pair across the halves (sessions of 0.9 s
    + 10 ms, 3 ms + 2 s that the input never had); tiers by duration keep each pair in its
    entry. With --tiers 1, one entry draws both from the mixed class."""
    path = engine_pcap(flowengine_bin, TIERS_TEXT, tmp_path / "tiers.pcap")
    pairs = {(e["think"], e["linger"]) for e in learned([path]).scenario["sessions"]}
    assert pairs == {("300ms", "2s"), ("1ms", "10ms")}
    [one] = learned([path], tiers=1).scenario["sessions"]
    assert one["think"] == {
        "empirical": {"values": [1_000_000, 300_000_000], "weights": [120, 120]}
    }


BURSTS = """\
version: 1
name: learn-bursts
sessions:
  - {name: a, protocol: udp, client: 198.18.0.5, server: 198.18.1.53, server_port: 53,
     count: 5, arrival: 1ms, rtt: 1ms, request_bytes: 40, response_bytes: 100}
  - {name: b, protocol: udp, client: 198.18.0.5, server: 198.18.1.53, server_port: 53,
     start: 3s, count: 3, arrival: 2ms, rtt: 1ms, request_bytes: 40, response_bytes: 100}
  - {name: c, protocol: udp, client: 198.18.0.5, server: 198.18.1.53, server_port: 53,
     start: 3500ms, count: 4, arrival: 1ms, rtt: 1ms, request_bytes: 40, response_bytes: 100}
"""


def test_bursts_and_idle_gaps_are_the_arrival_profile(tmp_path, flowengine_bin, pcaplib):
    """Sessions in three bursts with idle gaps between them (a page load's connections, a
    capture pieced together): the profile's steps start where the bursts start, hold their
    sessions, and pause between them; the arrivals spread each burst's sessions over its
    step. Without the steps the 12 sessions would spread over the whole 3.5 s."""
    r = learned([engine_pcap(flowengine_bin, BURSTS, tmp_path / "bursts.pcap")])
    e = entry(r, "udp-53")
    steps = [(x["for"], x["rate"] > 0) for x in e["profile"]["steps"]]
    assert steps == [("5ms", True), ("2.995s", False), ("6ms", True), ("494ms", False),
                     ("4ms", True)]  # fmt: skip
    parts = parse_scenario(r.yaml_text).sessions[0].parts()
    assert [(p.start, p.count) for p in parts] == [(0, 5), (3 * NS, 3), (3_500_000_000, 4)]
    assert e["arrival"] == "1ms"  # the gaps inside the bursts, at the busiest step's rate
    # twice the rate: twice the sessions in the same steps (the input's time), not in half
    fast = entry(learned([tmp_path / "bursts.pcap"], rate_scale=2.0), "udp-53")
    assert fast["count"] == 24 and fast["profile"]["steps"] == e["profile"]["steps"]


def test_a_steady_rate_is_one_step():
    """Poisson starts at a constant rate: no idle gap, and steps of 100 sessions whose rates
    differ only by chance (relative spread about 0.1): one step, no profile."""
    starts = np.cumsum(np.random.default_rng(1).exponential(1e6, 5000)).astype(np.int64)
    tl = fit_timeline(starts - starts[0])
    assert len(tl.edges) == 1 and not tl.idle.any()
    bursty = np.r_[starts[:2000], starts[2000:] + 10**12]  # a pause of 1000 s in the middle
    tl = fit_timeline(bursty - bursty[0])
    assert tl.idle.tolist() == [False, True, False]
    assert tl.edges[2] == bursty[2000] - bursty[0]


def test_the_check_calls_a_model_worse_only_beyond_the_inputs_noise():
    """learn --check: a learned metric counts as worse than the baseline's only by more than
    max(0.01, 0.5 / sqrt(flows of the input)); Spearman is better when higher."""
    assert tie_of(10_000) == 0.01 and tie_of(25) == pytest.approx(0.1)

    def result(**m):
        metrics = dict.fromkeys(metric_names(), 0.0)
        metrics.update(m)
        return FidelityResult("a", "b", metrics, {}, {}, [])

    learned_r = result(nemd_flow_start=0.05, jsd_src_port=0.02, spearman_ports=0.5)
    baseline_r = result(nemd_flow_start=0.02, jsd_src_port=0.015, spearman_ports=0.9)
    assert worse_than_baseline(learned_r, baseline_r, 0.01) == [
        "nemd_flow_start",
        "spearman_ports",
    ]
    assert worse_than_baseline(learned_r, baseline_r, 0.5) == []


MIDSTREAM = """\
version: 1
name: learn-midstream
sessions:
  - {name: cut, protocol: tcp, client: 198.18.0.5, server: 198.18.1.53, server_port: 53,
     count: 9, arrival: 5ms, rtt: 2ms, request_bytes: 0, response_bytes: 700, close: none,
     open: none}
  - {name: whole, protocol: tcp, client: 198.18.0.6, server: 198.18.1.53, server_port: 53,
     start: 2ms, count: 9, arrival: 5ms, rtt: 2ms, request_bytes: 40, response_bytes: 700}
"""


def test_sessions_without_a_handshake_are_played_without_one(tmp_path, flowengine_bin, pcaplib):
    """Single answers without their handshake (a capture of selected packets, connections begun
    before the capture) are an entry of their own with `open: none`: played again they are two
    packets each (the answer and its ACK), not a session of nine; the whole sessions beside
    them keep their handshake."""
    r = learned([engine_pcap(flowengine_bin, MIDSTREAM, tmp_path / "mid.pcap")])
    assert int(r.sessions.midstream.sum()) == 9
    whole, cut = entry(r, "tcp-53"), entry(r, "tcp-53-mid")
    assert cut["open"] == "none" and cut["close"] == "none" and cut["count"] == 9
    assert "open" not in whole and whole["close"] == "fin"
    played = engine_pcap(flowengine_bin, r.yaml_text, tmp_path / "played.pcap")
    again = learned([played])
    assert int(again.sessions.midstream.sum()) == 9
    mid = again.sessions.midstream
    assert (again.sessions.client_packets[mid] + again.sessions.server_packets[mid] == 2).all()


def shared_pcap_names() -> list[str]:
    """The shipped captures' names at collection time (one test each, spread over the workers);
    without NTG_SHARED_DATA one placeholder, which the `shared_pcaps` fixture skips or fails."""
    root = os.environ.get("NTG_SHARED_DATA")
    return sorted(p.name for p in Path(root, "pcaps").glob("*.pcap")) if root else ["(none)"]


@pytest.mark.parametrize("name", shared_pcap_names())
def test_every_shipped_capture_passes_its_check(
    name, shared_pcaps, tmp_path, flowengine_bin, capsys
):
    """The issue's target on every real capture here: `learn --check` exits 0, i.e. JSD <= 0.1
    and normalized EMD <= 0.1 on every field, and never behind the Harpoon-style baseline by
    more than the input's own noise. zeek__dns-edns-ecs keeps its clock jumps (three years) and
    its replicas' flows are cut at the idle timeout, so it takes seconds like the others."""
    [path] = [p for p in shared_pcaps if p.name == name]
    out = tmp_path / f"{path.stem}.yaml"
    assert main(["learn", str(path), "-o", str(out), "-q", "--check"]) == 0, path.name
    doc = json.loads((tmp_path / f"{path.stem}.yaml.fidelity" / "metrics.json").read_text())
    assert doc["learned"]["missed"] == [], path.name
    capsys.readouterr()
