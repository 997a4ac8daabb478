"""Golden cases (tests/rules_cases/*/rules.rules + expect.yaml) run through the real Suricata:
every expected sid must alert on its own synthesized session, and nothing else may fire there;
the same again with every session over IPv6 (2001:db8::/32)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from conftest import golden_cases

from idsrules.semantics import analyze
from idsrules.syntax import read_rules
from idsrules.synth import icmpv4_only, synthesize

CASES, IPV6_CASES = golden_cases()
pytestmark = pytest.mark.usefixtures("suricata")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_case(case: Path, tmp_path: Path) -> None:
    check_case(case, tmp_path, ip_version=4)


@pytest.mark.parametrize("case", IPV6_CASES, ids=[c.name for c in IPV6_CASES])
def test_golden_case_over_ipv6(case: Path, tmp_path: Path) -> None:
    res, models = check_case(case, tmp_path, ip_version=6)
    v4 = {m.sid for m in models if icmpv4_only(m)}  # `icmp` rules with an ICMPv4 itype
    assert res.sessions and all(
        ":" in s.client and ":" in s.server for s in res.sessions if s.sid not in v4
    )


def check_case(case: Path, tmp_path: Path, ip_version: int):
    from testbed.ids.suricata import run_offline

    expect = yaml.safe_load((case / "expect.yaml").read_text())
    rules, problems = read_rules(case / "rules.rules")
    assert problems == []
    models = [analyze(r) for r in rules]
    for m in models:
        if m.sid in expect["alerts"]:
            assert m.supported, (m.sid, m.reasons)
    res = synthesize(models, tmp_path / "a.pcap", tmp_path / "a.json", ip_version=ip_version)
    suri = run_offline(tmp_path / "a.pcap", [case / "rules.rules"], tmp_path / "suri")
    assert suri.load_errors == [], suri.errors
    fired: dict[frozenset, set[int]] = defaultdict(set)
    for a in suri.alerts:
        fired[frozenset((a.src, a.dst))].add(a.sid)
    own = {}
    for s in res.sessions:
        own.setdefault(s.sid, set()).update(fired.get(frozenset((s.client, s.server)), set()))
    for sid in expect["alerts"]:
        assert sid in own.get(sid, set()), (
            f"sid {sid} did not alert on its session; fired: {dict(own)}"
        )
        assert own[sid] - {sid} - set(expect.get("silent", [])) == set(), (
            f"extra alerts on sid {sid}'s session"
        )
    for sid in expect.get("silent", []):
        assert sid not in {a.sid for a in suri.alerts}
    return res, models


def test_rules_that_name_ipv6_get_ipv6_sessions_by_themselves(tmp_path: Path) -> None:
    case = Path(__file__).parent / "rules_cases" / "ipv6_rules"
    res, _ = check_case(case, tmp_path, ip_version=4)
    family = {s.sid: 6 if ":" in s.client + s.server else 4 for s in res.sessions}
    assert family == {1000920: 6, 1000921: 6, 1000922: 4}  # icmpv6 header, IPv6 address; plain udp
