"""The flow meters' conformance patterns (testbed/meters/conformance): each pattern's capture, its
hand-checked expected records against the reference records (analysis.flowmeter.reference) and
against the capture itself, a bad pattern file's one-line error, and the meter x pattern matrix
on the real meters (pcap mode, root)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from analysis.capture import read_capture
from analysis.flowmeter.reference import reference_records
from testbed.meters.argus import METER as ARGUS
from testbed.meters.conformance.matrix import (
    FIGURE_FILE,
    INTERNAL,
    MATRIX_FILE,
    MATRIX_SCHEMA,
    REPORT_FILE,
    run_matrix,
)
from testbed.meters.conformance.patterns import (
    PatternError,
    expected_records,
    load_pattern,
    packet_count,
    pattern_folders,
    write_pcap,
)
from testbed.meters.nfpcapd import METER as NFPCAPD
from testbed.meters.pmacct import METER as PMACCT
from testbed.meters.softflowd import METER as SOFTFLOWD

FOLDERS = pattern_folders()
NAMES = [d.name for d in FOLDERS]
ORDER = ["src", "dst", "proto", "sport", "dport", "vlan", "first_ns"]


def _sorted(table: pa.Table) -> list[dict]:
    return table.sort_by([(c, "ascending") for c in ORDER]).to_pylist()


@pytest.fixture(scope="module")
def pcaps(tmp_path_factory, pcaplib) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("patterns")
    return {d.name: write_pcap(load_pattern(d), out / f"{d.name}.pcap") for d in FOLDERS}


def test_the_issue_patterns_are_there():
    want = {
        "idle-under",
        "idle-over",
        "active-timeout",
        "tcp-fin-rst",
        "tcp-after-fin",
        "one-packet",
        "ipv6-ext",
        "vlan-qinq",
        "fragments",
        "icmp-types",
        "counter-4gib",
        "table-overflow",
        "out-of-order",
    }
    assert want <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_expected_accounts_for_every_packet(name, pcaps):
    """The hand-written records count every packet of the capture once, with its IP bytes, its
    first and last times among the capture's, and eof at the capture's last packet."""
    cap = read_capture(pcaps[name])
    exp = expected_records(pattern_folders([name])[0])
    assert len(cap) == packet_count(load_pattern(pattern_folders([name])[0]))
    assert pc.sum(exp["packets"]).as_py() == len(cap)
    assert pc.sum(exp["bytes"]).as_py() == int(cap.l3_len.astype("int64").sum())
    times = set(cap.ts_ns.tolist())
    assert set(exp["first_ns"].to_pylist()) <= times
    assert set(exp["last_ns"].to_pylist()) <= times
    eof = [r for r in exp.to_pylist() if r["end"] == "eof"]
    assert all(r["expire_ns"] == int(cap.ts_ns[-1]) for r in eof)


@pytest.mark.parametrize("name", NAMES)
def test_reference_equals_hand_checked_expectation(name, pcaps):
    folder = pattern_folders([name])[0]
    ref = reference_records(pcaps[name], load_pattern(folder).meter_rules())
    assert _sorted(ref) == _sorted(expected_records(folder))


def test_capture_is_the_same_each_time(tmp_path):
    p = load_pattern(pattern_folders(["tcp-fin-rst"])[0])
    a, b = write_pcap(p, tmp_path / "a.pcap"), write_pcap(p, tmp_path / "b.pcap")
    assert a.read_bytes() == b.read_bytes()


def test_cut_frames_keep_their_wire_length(pcaps):
    cap = read_capture(pcaps["counter-4gib"])
    assert set(cap.cap_len.tolist()) == {64}
    assert set(cap.wire_len.tolist()) == {14 + 65535}
    assert int(cap.l3_len.astype("int64").sum()) > 2**32


def _bad(tmp_path: Path, text: str) -> str:
    folder = tmp_path / "bad"
    folder.mkdir(exist_ok=True)
    (folder / "pattern.yaml").write_text(text)
    with pytest.raises(PatternError) as info:
        load_pattern(folder)
    assert info.value.exit_status == 2
    return str(info.value)


GOOD = """\
name: bad
artifact: a test
exposes: nothing
rules: {idle_timeout: 10s, active_timeout: 60s}
flows:
  a: {proto: udp, src: 198.18.0.1, dst: 198.19.0.1, sport: 1, dport: 2}
packets:
  - {flow: a, at: 0s, size: 100}
"""


def test_bad_pattern_unknown_flow(tmp_path):
    msg = _bad(tmp_path, GOOD + "  - {flow: b, at: 1s, size: 100}\n")
    assert msg == f"{tmp_path}/bad/pattern.yaml:9: packets[1].flow: no flow `b` (flows: a)"


def test_bad_pattern_field(tmp_path):
    msg = _bad(tmp_path, GOOD.replace("idle_timeout: 10s", "idle_timeout: 2.5s"))
    assert msg.splitlines() == [
        f"{tmp_path}/bad/pattern.yaml:4: rules.idle_timeout: a meter sets its timeouts in "
        "whole seconds: write e.g. 10s (got '2.5s')"
    ]
    msg = _bad(tmp_path, GOOD.replace("size: 100", "sise: 100"))
    assert msg.startswith(f"{tmp_path}/bad/pattern.yaml:8: packets[0].sise: unknown key `sise`")
    assert "\n" not in msg


def test_bad_pattern_size_below_headers(tmp_path):
    msg = _bad(tmp_path, GOOD.replace("size: 100", "size: 27"))
    assert msg == (
        f"{tmp_path}/bad/pattern.yaml:8: packets[0].size: at least 28 bytes: the IP and udp "
        "headers of flow `a`"
    )


def test_bad_pattern_yaml_and_outside_addresses(tmp_path):
    msg = _bad(tmp_path, GOOD.replace("dst: 198.19.0.1", "dst: 10.0.0.1"))
    assert msg.startswith(f"{tmp_path}/bad/pattern.yaml:6: flows.a.dst: patterns use 198.18")
    msg = _bad(tmp_path, GOOD + "  - {flow: a\n")
    assert msg.startswith(f"{tmp_path}/bad/pattern.yaml:") and "YAML syntax" in msg
    assert len(msg.splitlines()) == 1


def test_unknown_pattern_name():
    with pytest.raises(PatternError, match="unknown pattern nope \\(patterns: active-timeout"):
        pattern_folders(["nope"])


METERS = [SOFTFLOWD, PMACCT, NFPCAPD, ARGUS]


@pytest.fixture(scope="module")
def matrix(root, pcaplib, tmp_path_factory) -> tuple[Path, pa.Table]:
    folder = tmp_path_factory.mktemp("matrix")
    return folder, run_matrix(METERS, None, folder)


def test_matrix_has_a_row_per_meter_and_pattern(matrix):
    folder, table = matrix
    assert table.schema == MATRIX_SCHEMA
    cells = set(zip(table.column("meter").to_pylist(), table.column("pattern").to_pylist()))
    assert cells == {(m.name, p) for m in METERS for p in NAMES}
    assert table.num_rows == len(METERS) * len(NAMES)
    for r in table.to_pylist():
        assert r["result"] in ("pass", "differs", "error"), r
        if r["result"] == "pass":  # every record exact, nothing extra
            assert r["exact"] == r["reference"] and r["spurious"] == 0, r
        else:  # what differed, or the meter's error, is said
            assert r["detail"], r
        assert not r["detail"].startswith(INTERNAL), r
        if r["result"] != "error":  # the meter ran and was scored
            assert (
                r["exact"] + r["differs_records"] + r["missing"] + r["split"] + r["merged"]
                == r["reference"]
            ), r
    for m in METERS:  # a meter whose every run fails is a broken setup, not a result
        assert any(r["result"] != "error" for r in table.to_pylist() if r["meter"] == m.name), m
    print("\n" + (folder / REPORT_FILE).read_text())


def test_matrix_files(matrix):
    folder, table = matrix
    assert pq.read_table(folder / MATRIX_FILE).equals(table)
    report = (folder / REPORT_FILE).read_text()
    assert all(f"| {p} |" in report for p in NAMES)
    png = (folder / FIGURE_FILE).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    for m in METERS:
        assert (folder / m.name / "tcp-fin-rst" / "records.parquet").is_file()


def test_matrix_is_the_same_on_a_second_run(matrix, tmp_path):
    _, first = matrix
    again = run_matrix(METERS, None, tmp_path)
    assert again.to_pylist() == first.to_pylist()


def test_bad_expectation_file(tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "pattern.yaml").write_text(GOOD)
    (folder / "expected.yaml").write_text(
        "records:\n"
        "  - {src: 198.18.0.1, dst: 198.19.0.1, sport: 1, dport: 2, proto: 17, packets: 1,\n"
        "     bytes: 100, first: 0s, last: 0s, end: closed, expire: 0s}\n"
    )
    with pytest.raises(PatternError) as info:
        expected_records(folder)
    assert str(info.value).startswith(f"{folder}/expected.yaml:3: records[0].end: Input should be")
    assert "\n" not in str(info.value)
