"""Coverage runs through Suricata: the ET web_server floor (CI gate), Suricata errors surfaced,
the `testbed ids-coverage` exit status below --min."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import skip_or_fail
from testbed.cli import main

@pytest.fixture(autouse=True)
def _suricata_present() -> None:
    if shutil.which("suricata") is None:
        skip_or_fail("suricata not installed (./bootstrap.sh test)")
WEB_SERVER_FLOOR = 0.90


def _shared() -> Path:
    root = os.environ.get("NTG_SHARED_DATA")
    if not root:
        skip_or_fail("NTG_SHARED_DATA is not set (.ci/run sets it to /work/shared/data)")
    return Path(root)


def test_et_web_server_coverage_floor(tmp_path: Path, capsys) -> None:
    rules = _shared() / "rules" / "et-open" / "emerging-web_server.rules"
    if not rules.is_file():
        pytest.skip(f"{rules} is missing")
    code = main(["ids-coverage", str(rules), "--out", str(tmp_path), "--min", str(WEB_SERVER_FLOOR), "-q"])
    doc = json.loads((tmp_path / "coverage.json").read_text())
    assert code == 0, capsys.readouterr()
    assert doc["rules"] == 643 and doc["problems"] == []
    assert doc["coverage"] >= WEB_SERVER_FLOOR
    for name in ("coverage.md", "coverage.html", "attacks.pcap", "attacks.json"):
        assert (tmp_path / name).stat().st_size > 0


def test_suricata_rule_errors_are_surfaced_and_min_gates(tmp_path: Path, capsys) -> None:
    f = tmp_path / "mixed.rules"
    f.write_text(
        'alert tcp $EXTERNAL_NET any -> $HOME_NET 7000 (msg:"good"; flow:to_server,established; content:"hello"; sid:2000001; rev:1;)\n'
        'alert tcp $EXTERNAL_NET any -> $HOME_NET 7001 (msg:"suricata rejects"; content:"x"; depth:0; sid:2000002; rev:1;)\n'
        'alert tcp $EXTERNAL_NET any -> $HOME_NET 7002 (msg:"never matches"; content:"a"; content:!"a"; sid:2000003; rev:1;)\n'
        'alert tcp $EXTERNAL_NET any -> (msg:"malformed"; sid:2000004;)\n'
    )
    out = tmp_path / "out"
    code = main(["ids-coverage", str(f), "--out", str(out), "--min", "0.9", "-q"])
    err = capsys.readouterr().err
    doc = json.loads((out / "coverage.json").read_text())
    assert code == 3                                   # 1 of 2 loaded rules alerted: below 0.9
    assert f"{f}:4:" in err                            # the malformed rule, with file:line
    assert "2000002" in err and "suricata: " in err    # Suricata's own error line
    rows = {r["sid"]: r for r in doc["rows"]}
    assert rows[2000001]["state"] == "alerted"
    assert rows[2000002]["state"] == "not loaded"
    assert rows[2000003]["state"] == "missed"
    assert doc["coverage"] == pytest.approx(0.5)


def test_missing_rule_file_is_bad_input(tmp_path: Path, capsys) -> None:
    assert main(["ids-coverage", str(tmp_path / "nope.rules"), "--out", str(tmp_path)]) == 2
    assert "no such rule file" in capsys.readouterr().err


SNORT3_COMMUNITY_FLOOR = 0.90    # measured 92.0% (Suricata 7.0.10); docs/ids-coverage.md


def test_snort3_community_translated_coverage_floor(tmp_path: Path, capsys) -> None:
    """The Snort 3 community rules, translated to Suricata 7 syntax, alert for their own sid on
    at least SNORT3_COMMUNITY_FLOOR of the rules Suricata loads (CI gate, ~10 s)."""
    src = _shared() / "rules" / "snort3-community.rules"
    if not src.is_file():
        pytest.skip(f"{src} is missing")
    translated = tmp_path / "s3.rules"
    assert main(["translate-rules", str(src), "-o", str(translated), "--no-check"]) == 0
    out = tmp_path / "cov"
    code = main(["ids-coverage", str(translated), "--out", str(out), "--min", str(SNORT3_COMMUNITY_FLOOR), "-q"])
    doc = json.loads((out / "coverage.json").read_text())
    assert code == 0, capsys.readouterr()
    assert doc["rules"] >= 4000 and doc["suricata_errors"] == []
    assert doc["coverage"] >= SNORT3_COMMUNITY_FLOOR
    assert doc["extra_unrelated_fraction"] <= 0.01
