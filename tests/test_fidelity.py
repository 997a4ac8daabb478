"""The fidelity report (analysis/fidelity.py, `testbed compare-traffic`, docs/fidelity.md): NetShare's
JSD and normalized EMD, worked out by hand on tiny captures, their bounds, hostile inputs, the
report folder, flow tables, Suricata's app-layer counts and the real captures."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import skip_or_fail
from scapy.all import ARP, IP, TCP, Ether, Raw, wrpcap

from analysis.capture import CaptureError
from analysis.fidelity import (
    EMD_FIELDS,
    FLOW_IDLE_NS,
    JSD_FIELDS,
    compare_traffic,
    emd,
    jsd,
    metric_names,
    normalized_emd,
    read_trace,
    spearman,
    write_report,
)
from analysis.stream import flow_table_of
from ntgcore.errors import BadInput
from testbed.cli import main
from testbed.commands.compare_traffic import compare_with_suricata

SHARED_SKIP = "NTG_SHARED_DATA not set: real captures live outside the repo"


def tiny(path: Path, shift: int = 0, payload: int = 10) -> Path:
    """Four TCP flows from 10.0.0.1..4 to 10.0.1.1: flow i (0..3) has i + 1 packets, source port
    1000 + i + SHIFT, destination port 80 + SHIFT, PAYLOAD bytes each (a 54 + PAYLOAD byte
    frame), one packet every 0.5 s."""
    packets, t = [], 1.0
    for i in range(4):
        for _ in range(i + 1):
            p = (
                Ether()
                / IP(src=f"10.0.0.{i + 1}", dst="10.0.1.1")
                / TCP(sport=1000 + i + shift, dport=80 + shift)
                / Raw(b"x" * payload)
            )
            p.time = t
            t += 0.5
            packets.append(p)
    wrpcap(str(path), packets)
    return path


@pytest.fixture
def pair(tmp_path, pcaplib):
    """The tiny capture and its transform: ports shifted by one, payloads doubled (10 -> 20)."""
    return tiny(tmp_path / "a.pcap"), tiny(tmp_path / "b.pcap", shift=1, payload=20)


def test_a_five_tuple_met_again_after_a_long_pause_is_two_flows(tmp_path, pcaplib):
    """One 5-tuple, two packets, then two more FLOW_IDLE_NS + 1 s later (a clock jump, a port
    drawn again): two flow records of 0.5 s, not one of half an hour; a pause just under the
    idle timeout keeps one record. Bytes are frame bytes (64 a packet)."""

    def capture(path: Path, pause_s: float) -> Path:
        packets = []
        for t in (1.0, 1.5, 1.5 + pause_s, 2.0 + pause_s):
            p = Ether() / IP(src="10.0.0.1", dst="10.0.1.1") / TCP(sport=1000, dport=80)
            p = p / Raw(b"x" * 10)
            p.time = t
            packets.append(p)
        wrpcap(str(path), packets)
        return path

    cut = read_trace(capture(tmp_path / "cut.pcap", FLOW_IDLE_NS / 1e9 + 1))
    assert len(cut.flows) == 2
    assert cut.flows["duration_ns"].tolist() == [500_000_000] * 2
    assert cut.flows["packets"].tolist() == [2, 2] and cut.flows["bytes"].tolist() == [128, 128]
    kept = read_trace(capture(tmp_path / "kept.pcap", FLOW_IDLE_NS / 1e9 - 1))
    assert len(kept.flows) == 1 and kept.flows["packets"].tolist() == [4]


def test_identical_captures_give_zero_everywhere(pair):
    a, _ = pair
    r = compare_traffic(a, a)
    assert list(r.metrics) == metric_names()
    for name in metric_names():
        if name.startswith(("jsd_", "nemd_")):
            assert r.metrics[name] == 0.0, name
    assert r.metrics["spearman_talkers"] == pytest.approx(1.0)
    assert r.missed() == []
    assert r.downstream["flows"] == {"original": 4, "generated": 4}


def test_shifted_ports_and_doubled_payloads_give_the_values_worked_out_by_hand(pair):
    a, b = pair
    r = compare_traffic(a, b)
    m = r.metrics
    # addresses and protocol unchanged (ranks: 4 sources with one flow each; one destination)
    assert m["jsd_src_addr"] == m["jsd_dst_addr"] == m["jsd_protocol"] == 0.0
    # source ports {1000..1003} against {1001..1004}, a quarter each: 1000 and 1004 sit alone,
    # m = 1/8 there; JSD = 1/2 (1/4 log2 2) + 1/2 (1/4 log2 2) = 1/4
    assert m["jsd_src_port"] == pytest.approx(0.25)
    assert m["jsd_dst_port"] == pytest.approx(1.0)  # 80 against 81: disjoint
    # frames of 64 and 74 bytes: flow bytes 64k against 74k (k = 1..4): EMD = mean(10k) = 25,
    # over the original's range 256 - 64 = 192
    assert m["nemd_flow_bytes"] == pytest.approx(25 / 192)
    # every packet 64 against 74: EMD 10; the original's range is 0: over its value, 64
    assert m["nemd_packet_size"] == pytest.approx(10 / 64)
    assert m["nemd_flow_packets"] == m["nemd_flow_duration"] == m["nemd_flow_start"] == 0.0
    # the same talkers, volumes in the same order; ports: 80 only in A, 81 only in B
    assert m["spearman_talkers"] == pytest.approx(1.0)
    assert m["spearman_ports"] == pytest.approx(-1.0)
    assert set(r.missed()) == {
        "jsd_src_port",
        "jsd_dst_port",
        "nemd_flow_bytes",
        "nemd_packet_size",
    }


def test_jsd_is_bounded_and_symmetric():
    rng = np.random.default_rng(28)
    for _ in range(200):
        n = int(rng.integers(1, 50))
        p, q = rng.integers(0, 20, n), rng.integers(0, 20, n)
        p[0] += 1
        q[-1] += 1
        d = jsd(p, q)
        assert 0.0 <= d <= 1.0
        assert d == pytest.approx(jsd(q, p))
    assert jsd([1, 0], [0, 1]) == 1.0  # disjoint: the upper bound, exactly
    assert jsd([3, 1], [6, 2]) == 0.0  # counts are normalised
    with pytest.raises(ValueError):
        jsd([0, 0], [1, 0])


def test_emd_and_its_normalisation():
    assert emd([0, 1], [1, 2]) == pytest.approx(1.0)
    assert emd([0, 0, 1], [0, 1, 1]) == pytest.approx(1 / 3)
    # a histogram (values, weights) is the sample it stands for
    assert emd([1, 5], [2], [3, 1], [4]) == pytest.approx(emd([1, 1, 1, 5], [2, 2, 2, 2]))
    assert normalized_emd([0, 10], [10, 20]) == pytest.approx(1.0)  # shifted by the range
    assert normalized_emd([5, 5], [6, 6]) == pytest.approx(1 / 5)  # no range: over the value
    assert math.isnan(spearman([1], [2]))
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)


def test_hostile_inputs_give_clear_errors(tmp_path, pcaplib):
    empty = tmp_path / "empty.pcap"
    wrpcap(str(empty), [])
    arp = tmp_path / "arp.pcap"
    wrpcap(str(arp), [Ether() / ARP(pdst="10.0.0.1") for _ in range(3)])
    with pytest.raises(BadInput, match="no IP flow in 0 packets"):
        read_trace(empty)
    with pytest.raises(BadInput, match="no IP flow in 3 packets"):
        read_trace(arp)
    with pytest.raises(CaptureError, match="no-such-file"):
        read_trace(tmp_path / "no-such-file.pcap")
    with pytest.raises(BadInput, match="is a folder"):
        read_trace(tmp_path)
    not_flows = tmp_path / "not-flows.parquet"
    pd.DataFrame({"x": [1]}).to_parquet(not_flows)
    with pytest.raises(BadInput, match="without the flow table column"):
        read_trace(not_flows)
    good = flow_table_of([tiny(tmp_path / "t.pcap")])
    for column, value, said in (
        ("bytes", math.nan, "column bytes, row 1: nan is not a byte count"),
        ("sport", 70000, "column sport, row 1: 70000 is not a port"),
        ("packets", -1, "column packets, row 1: -1 is not a packet count"),
        ("last_ns", 2**63 - 1, "is not a time stamp in ns"),
    ):
        bad = good.copy()
        bad[column] = bad[column].astype(object)
        bad.loc[1, column] = value
        bad.to_parquet(tmp_path / "bad.parquet")
        with pytest.raises(BadInput, match=said):
            read_trace(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="app_protocols"):
        compare_traffic(arp, arp, suricata=True)


def test_a_flow_table_compares_like_its_capture(pair, tmp_path):
    a, b = pair
    table = tmp_path / "flows.parquet"
    flow_table_of([b]).to_parquet(table)
    from_capture, from_table = compare_traffic(a, b), compare_traffic(a, table)
    for name in metric_names():
        if name == "nemd_packet_size":  # a flow table has no packets
            assert math.isnan(from_table.metrics[name])
        else:
            assert from_table.metrics[name] == pytest.approx(from_capture.metrics[name]), name


def test_the_command_writes_the_report_and_says_the_missed_targets(pair, tmp_path, capsys):
    a, b = pair
    assert main(["compare-traffic", str(a), str(a), "-o", str(tmp_path / "same"), "-q"]) == 0
    assert "jsd_dst_port" in capsys.readouterr().out  # the table
    out = tmp_path / "diff"
    assert main(["compare-traffic", str(a), str(b), "-o", str(out), "-q", "--json"]) == 3
    said = capsys.readouterr()
    doc = json.loads(said.out)
    assert doc["metrics"]["jsd_dst_port"] == pytest.approx(1.0)
    assert "misses the target on: jsd_src_port, jsd_dst_port" in said.err
    for name in ("report.md", "report.html", "metrics.parquet", "metrics.json"):
        assert (out / name).stat().st_size > 0, name
    pngs = {p.stem for p in (out / "plots").glob("*.png")}
    assert pngs == {"summary", *JSD_FIELDS, *EMD_FIELDS}
    rows = pd.read_parquet(out / "metrics.parquet")
    assert len(rows) == len(metric_names())
    assert rows.set_index("metric").loc["jsd_dst_port", "ok"] == False  # noqa: E712
    md = (out / "report.md").read_text()
    assert "| JSD destination port | <= 0.1 | 1.0000 MISSED |" in md
    assert "data:image/png;base64," in (out / "report.html").read_text()


def test_write_report_has_one_column_per_compared_trace(pair, tmp_path):
    a, b = pair
    files = write_report(
        tmp_path / "r", {"learned": compare_traffic(a, a), "baseline": compare_traffic(a, b)}
    )
    md = files["report.md"].read_text()
    assert "| metric | target | learned | baseline |" in md
    assert "| JSD source port | <= 0.1 | 0.0000 ok | 0.2500 MISSED |" in md
    assert set(pd.read_parquet(files["metrics.parquet"])["trace"]) == {"learned", "baseline"}


def _shared() -> list[Path]:
    root = os.environ.get("NTG_SHARED_DATA")
    if not root:
        skip_or_fail(SHARED_SKIP)
    files = sorted(Path(root, "pcaps").glob("*.pcap"))
    assert files, f"no pcaps/*.pcap under NTG_SHARED_DATA={root}"
    return files


def test_real_captures(pcaplib):
    files = _shared()
    for f in files:
        r = compare_traffic(f, f)
        assert all(r.metrics[m] == 0.0 for m in metric_names() if m[:4] in ("jsd_", "nemd")), f
    r = compare_traffic(files[0], files[-1])
    assert all(0.0 <= r.metrics[f"jsd_{f}"] <= 1.0 for f in JSD_FIELDS)
    assert r.metrics["jsd_dst_port"] > 0 and r.metrics["nemd_packet_size"] > 0


def test_suricata_app_layer_counts(suricata, pcaplib, tmp_path):
    http = [f for f in _shared() if "http" in f.name]
    assert http, "a shared capture with HTTP"
    r = compare_with_suricata(http[0], http[0], suricata=True)
    apps = r.downstream["app_proto"]
    assert apps["original"] == apps["generated"] and apps["original"].get("http", 0) > 0
    files = write_report(tmp_path / "r", {"same": r})
    assert "Suricata app-layer protocols" in files["report.md"].read_text()
