"""Golden cases (tests/rules_cases/*/rules.rules + expect.yaml) run through the real Suricata:
every expected sid must alert on its own synthesized session, and nothing else may fire there."""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from testbed.ids.rules.semantics import analyze
from testbed.ids.rules.synth import synthesize
from testbed.ids.rules.syntax import read_rules

CASES = sorted(p for p in (Path(__file__).parent / "rules_cases").iterdir() if (p / "rules.rules").is_file())
pytestmark = pytest.mark.skipif(shutil.which("suricata") is None, reason="suricata not installed (./bootstrap.sh test)")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_case(case: Path, tmp_path: Path) -> None:
    from testbed.ids.suricata import run_offline

    expect = yaml.safe_load((case / "expect.yaml").read_text())
    rules, problems = read_rules(case / "rules.rules")
    assert problems == []
    models = [analyze(r) for r in rules]
    for m in models:
        if m.sid in expect["alerts"]:
            assert m.supported, (m.sid, m.reasons)
    res = synthesize(models, tmp_path / "a.pcap", tmp_path / "a.json")
    suri = run_offline(tmp_path / "a.pcap", [case / "rules.rules"], tmp_path / "suri")
    assert suri.load_errors == [], suri.errors
    fired: dict[frozenset, set[int]] = defaultdict(set)
    for a in suri.alerts:
        fired[frozenset((a.src, a.dst))].add(a.sid)
    own = {}
    for s in res.sessions:
        own.setdefault(s.sid, set()).update(fired.get(frozenset((s.client, s.server)), set()))
    for sid in expect["alerts"]:
        assert sid in own.get(sid, set()), f"sid {sid} did not alert on its session; fired: {dict(own)}"
        assert own[sid] - {sid} - set(expect.get("silent", [])) == set(), f"extra alerts on sid {sid}'s session"
    for sid in expect.get("silent", []):
        assert sid not in {a.sid for a in suri.alerts}
