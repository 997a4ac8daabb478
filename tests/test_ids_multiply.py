"""Rule-derived attack sessions multiplied T times into Suricata (seed 003's IDS use): every
session and its T shadow sessions alert alike, so the alerts are (T+1)x per sid.

Real Suricata, real rules (the protocol cases' and a threshold tracked by rule, which cannot
scale), the real multiplier; the alert counts are read from both runs' eve.json here, not taken
from the report, and the multiplied capture is checked by tshark (every checksum, every stream)."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from conftest import skip_or_fail

from analysis.multiply import shadow_addresses
from analysis.tables import SCHEMA_VERSION, read_table
from idsrules.variables import HOME_NET
from testbed.cli import main
from testbed.ids.multiplied import HOME_SHADOW_RANGES
from testbed.ids.suricata import run_offline
from tests.test_multiply import frame_count, frames_and_checksums

CASES = Path(__file__).parent / "rules_cases"
RULE_CASES = (
    "http_request",
    "flowbits_threshold",
    "dns_tls",
    "packet_keywords",
    "ipv6_rules",
    "smtp_dialogue",
)
BY_RULE_SID = 1009901
BY_RULE = (
    f'alert tcp $EXTERNAL_NET any -> $HOME_NET 7300 (msg:"limit by rule"; flow:established,to_server; '
    f'content:"once"; threshold:type limit, track by_rule, count 1, seconds 60; sid:{BY_RULE_SID}; rev:1;)\n'
)


@pytest.fixture(scope="module")
def coverage(tmp_path_factory, flowengine_bin, suricata_in_ci) -> Path:
    if shutil.which("tshark") is None:
        skip_or_fail("tshark not installed (./bootstrap.sh test)")
    out = tmp_path_factory.mktemp("idsmult")
    extra = out / "by_rule.rules"
    extra.write_text(BY_RULE)
    rules = [str(CASES / c / "rules.rules") for c in RULE_CASES] + [str(extra)]
    assert main(["ids-coverage", *rules, "--multiply", "3,2", "--out", str(out / "cov"), "-q"]) == 0
    return out / "cov"


def eve_sids(eve: Path) -> Counter:
    counts: Counter = Counter()
    for line in eve.read_text().splitlines():
        e = json.loads(line)
        if e.get("event_type") == "alert":
            counts[e["alert"]["signature_id"]] += 1
    return counts


@pytest.mark.parametrize("copies", [3, 2])
def test_every_sid_alerts_T_plus_1_times_as_often(coverage, copies):
    base = eve_sids(coverage / "suricata" / "eve.json")
    mult = eve_sids(coverage / f"multiply-{copies}" / "suricata" / "eve.json")
    assert len(base) >= 25 and BY_RULE_SID in base
    scaling = {sid: n for sid, n in base.items() if sid != BY_RULE_SID}
    assert {sid: mult[sid] for sid in scaling} == {
        sid: (copies + 1) * n for sid, n in scaling.items()
    }
    assert set(mult) == set(base)
    # a threshold tracked by rule has one counter for the original and every copy: it cannot scale
    assert mult[BY_RULE_SID] == base[BY_RULE_SID] == 1
    doc = json.loads((coverage / "coverage.json").read_text())["multiplied"][str(copies)]
    rows = {r["sid"]: r for r in doc["rows"]}
    assert doc["not_scaling"] == [BY_RULE_SID] and "by_rule" in rows[BY_RULE_SID]["reason"]
    assert all(
        r["per_copy"] == [base[sid]] * (copies + 1) for sid, r in rows.items() if sid != BY_RULE_SID
    )
    assert f"multiplied T={copies}" in (coverage / "coverage.md").read_text()


def flagged(capture: Path) -> int:
    """Frames tshark's TCP analysis flags (lost, out of order, retransmitted, ...)."""
    r = subprocess.run(
        [
            "tshark",
            "-n",
            "-r",
            str(capture),
            "-Y",
            "tcp.analysis.flags && !tcp.analysis.window_update",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return len(r.stdout.split())


def test_the_multiplied_attacks_are_whole_sessions_with_good_checksums(coverage):
    copies = 3  # T = 2 is the same rewrite: one T checked here
    src, out = coverage / "attacks.pcap", coverage / f"multiply-{copies}" / "attacks.pcap"
    frames, status = frames_and_checksums(out)
    assert frames == (copies + 1) * frame_count(src)
    assert not [k for k in status if k[1] == 0] and status[("tcp", 1)] > 0, status
    # each shadow stream is as whole as its original: no TCP analysis flag the original had not
    assert flagged(out) == (copies + 1) * flagged(src)


def test_shadow_sessions_alert_only_with_the_shadows_of_home_in_home_net(coverage, tmp_path):
    """Without the home side's shadow range in HOME_NET, the directional rules
    ($EXTERNAL_NET -> $HOME_NET) do not fire on the shadow sessions: the (T+1)x needs it."""
    rules = sorted(str(p) for p in (coverage.parent).glob("*.rules")) + [
        str(CASES / c / "rules.rules") for c in RULE_CASES
    ]
    home = "[198.18.0.0/17,2001:db8::/48]"  # the testbed's HOME_NET without the home side's shadow range
    assert (
        HOME_NET == "[198.18.0.0/16,2001:db8::/48]" and HOME_SHADOW_RANGES[0] == "198.18.128.0/17"
    )
    suri = run_offline(
        coverage / "multiply-3" / "attacks.pcap", rules, tmp_path / "suricata", home_net=home
    )
    plain = Counter(a.sid for a in suri.alerts)
    base = eve_sids(coverage / "suricata" / "eve.json")
    short = [sid for sid, n in base.items() if plain[sid] < 4 * n]
    assert len(short) >= 10, plain


def test_a_bad_number_of_copies_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "ids-coverage",
                str(CASES / "http_request" / "rules.rules"),
                "--multiply",
                "0",
                "--out",
                str(tmp_path),
            ]
        )
    assert exc.value.code == 2 and "1..64" in capsys.readouterr().err


def test_the_multiplied_home_net_is_a_few_cidrs_holding_every_home_shadow(coverage):
    """The sided plan: every shadow of a home address lies in the home side's shadow range, every
    other shadow outside HOME_NET; HOME_NET of the multiplied run is the CIDRs, not a host list."""
    doc = json.loads((coverage / "coverage.json").read_text())
    plan = shadow_addresses(coverage / "multiply-3" / "shadow_plan.csv")
    config = (coverage / "multiply-3" / "suricata" / "suricata.yaml").read_text()
    home_net = json.loads(
        next(ln for ln in config.splitlines() if ln.strip().startswith("HOME_NET:")).split(":", 1)[
            1
        ]
    )
    assert home_net == "[198.18.0.0/16,2001:db8::/48,2001:db8:100::/48]"
    home = [ipaddress.ip_network(n) for n in home_net.strip("[]").split(",")]
    shadows = [
        (ipaddress.ip_address(a), ipaddress.ip_address(o)) for a, (o, c) in plan.items() if c
    ]
    inside = lambda a, nets: any(a.version == n.version and a in n for n in nets)
    assert len(shadows) >= 20 and doc["multiplied"]["3"]["sids_scaling"] >= 20
    assert {inside(a, home) for a, o in shadows} == {True, False}
    assert all(
        inside(a, home)
        == inside(o, [ipaddress.ip_network(n) for n in HOME_NET.strip("[]").split(",")])
        for a, o in shadows
    )
    assert all(
        inside(a, [ipaddress.ip_network(r) for r in HOME_SHADOW_RANGES])
        for a, o in shadows
        if inside(a, home)
    )


def test_the_multiplied_counts_are_a_run_table_duckdb_reads(coverage):
    """tables/coverage_multiplied.parquet: a row per T and sid, the counts of both runs' eve.json."""
    con = duckdb.connect()
    rows = con.sql(
        f"SELECT copies, sid, alerts, alerts_multiplied, expected, per_copy, scales, reason FROM "
        f"read_parquet('{coverage / 'tables' / 'coverage_multiplied.parquet'}') ORDER BY copies, sid"
    ).fetchall()
    base = eve_sids(coverage / "suricata" / "eve.json")
    for copies in (2, 3):
        mult = eve_sids(coverage / f"multiply-{copies}" / "suricata" / "eve.json")
        mine = [r for r in rows if r[0] == copies]
        assert [r[1] for r in mine] == sorted(set(base) | set(mult))
        for _, sid, alerts, alerts_m, expected, per_copy, scales, reason in mine:
            assert (alerts, alerts_m, expected) == (base[sid], mult[sid], (copies + 1) * base[sid])
            assert len(per_copy) == copies + 1 and sum(per_copy) == mult[sid]
            assert scales == (sid != BY_RULE_SID) and (reason is None) == scales
    meta = read_table(coverage, "coverage_multiplied").schema.metadata
    assert meta[b"ntg.schema_version"] == SCHEMA_VERSION.encode() and SCHEMA_VERSION >= "1.1"
