"""The analysis of a multiplied capture (analysis/multiply.py): from the captures and the plan,
on real captures (NTG_SHARED_DATA), checked against capinfos's frame counts (their checksums are
test_multiply.py's test_real_captures_keep_their_checksums, on the same captures);
a damaged output is found and named; `testbed analyze` of a multiplied run folder reports it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import skip_or_fail

from analysis.multiply import multiplied_report, read_plan
from testbed.cli import main
from tests.test_multiply import frame_count

RANGES = "198.18.0.0/15,2001:db8:100::/40"


def shared_captures() -> list[Path]:
    data = os.environ.get("NTG_SHARED_DATA")
    if not data or not (Path(data) / "pcaps").is_dir():
        skip_or_fail("NTG_SHARED_DATA (with pcaps/) is not set")
    captures = sorted((Path(data) / "pcaps").glob("*.pcap"))
    assert captures
    return captures


def test_real_captures_are_multiplied_as_planned(flowengine_bin, tmp_path, capsys):
    for cap in shared_captures():
        out = tmp_path / (cap.stem + ".out.pcap")
        assert (
            main(
                ["multiply", str(cap), "-o", str(out), "-T", "3", "--ranges", RANGES, "--seed", "4"]
            )
            == 0
        )
        assert "as planned" in capsys.readouterr().out
        doc = json.loads((tmp_path / (cap.stem + ".out.report.json")).read_text())
        n_in, n_out = frame_count(cap), frame_count(out)
        assert (doc["ingress_packets"], doc["egress_packets"]) == (n_in, n_out), cap
        assert doc["packet_ratio"] == pytest.approx(n_out / n_in)
        assert (
            doc["ok"]
            and n_out == 4 * doc["ingress_rewritable_packets"] + doc["passed_through_packets"]
        ), cap
        originals = len({v[0] for v in read_plan(tmp_path / (cap.stem + ".out.plan.csv")).values()})
        assert (
            doc["shadow_flows_per_original"] == {"3": originals} == {"3": doc["original_flows"]}
        ), cap
        assert (
            doc["shadow_directions_equal"]
            == doc["shadow_directions"]
            == 3 * doc["original_directions"]
        )
        for suffix in (".md", ".png"):
            assert (tmp_path / (cap.stem + ".out.report" + suffix)).stat().st_size > 0


def test_a_shadow_flow_missing_a_packet_is_found_and_named(flowengine_bin, tmp_path):
    cap = next(c for c in shared_captures() if "http_bro" in c.name)
    out = tmp_path / "out.pcap"
    assert main(["multiply", str(cap), "-o", str(out), "-T", "2", "--ranges", RANGES]) == 0
    # SPFO: the frames of ingress packet k are 3k+1 (copy 1), 3k+2 (copy 2), 3k+3 (the original)
    cut = tmp_path / "cut.pcap"
    subprocess.run(
        ["editcap", str(out), str(cut), "101"], check=True, capture_output=True
    )  # copy 2 of packet 34
    doc = multiplied_report(cap, cut, tmp_path / "out.plan.csv", 2)
    assert not doc["ok"] and doc["shadow_directions_differ"] == 1
    (d,) = doc["differences"]
    assert d["copy"] == 2 and d["packets"] == d["original_packets"] - 1
    assert doc["egress_packets"] == doc["expected_egress_packets"] - 1


def test_testbed_analyze_reports_a_multiplied_run_folder(flowengine_bin, tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("""version: 1
name: mult-analysis
seed: 3
flows:
  - protocol: tcp
    src: {cidr: 10.0.0.0/30, mode: increment}
    dst: 10.0.1.1
    dst_port: 80
    packets: 6
    period: 1ms
    repeat: {count: 4, period: 1ms}
multiply:
  copies: 5
  ranges: [198.18.0.0/16]
""")
    assert main(["run", str(scenario), "--out", str(tmp_path / "runs"), "-q"]) == 0
    (folder,) = (tmp_path / "runs").iterdir()
    capsys.readouterr()
    assert main(["multiply", str(folder)]) == 0
    assert "egress/ingress 6.0000" in capsys.readouterr().out
    manifest = json.loads((folder / "manifest.json").read_text())["multiply"]
    assert manifest["as_planned"] and manifest["report"]["md"] == "multiply_report.md"
    (folder / "multiply_report.md").unlink()
    assert main(["analyze", str(folder), "-q"]) == 0
    assert "shadow flows per original: 5 x 4" in capsys.readouterr().out
    table = (folder / "multiply_report.md").read_text()
    assert "| egress / ingress (packets) | 6.0000 |" in table and "as planned" in table


def test_substituted_urls_are_compared_by_packets_only(flowengine_bin, tmp_path, capsys):
    cap = next(c for c in shared_captures() if "http_bro" in c.name)
    urls = tmp_path / "urls.txt"
    urls.write_text("/x\n/a-longer-target/y?z=1\n")
    out = tmp_path / "out.pcap"
    assert (
        main(
            [
                "multiply",
                str(cap),
                "-o",
                str(out),
                "-T",
                "2",
                "--ranges",
                RANGES,
                "--urls",
                str(urls),
            ]
        )
        == 0
    )
    doc = json.loads((tmp_path / "out.report.json").read_text())
    assert (
        doc["ok"] and not doc["bytes_compared"] and doc["egress_bytes"] != 3 * doc["ingress_bytes"]
    )
    assert (
        doc["packet_ratio"] == 3.0
        and "URLs substituted" in (tmp_path / "out.report.md").read_text()
    )
