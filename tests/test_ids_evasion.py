"""`testbed ids-coverage --evasions`: the variants of every alerting rule through Suricata in two
reassembly configurations, labelled by a Linux host live, the matrix and the gate
(docs/ids-coverage.md, "Evasion variants").

The variants themselves: tests/test_evasion_variants.py; the live lab: tests/test_ids_hostlabel.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from idsrules.semantics import analyze, load_rules
from idsrules.syntax import parse_rule_text
from testbed.cli import main
from testbed.ids.evasion import (
    MAX_VARIED_BYTES,
    OUTCOMES,
    SERVER_SLOTS4,
    EvasionCapture,
    VariantSession,
    client_address,
    compare_evasions,
    outcome,
    plain_plans,
    server_address,
    session_index,
    write_variants,
)
from testbed.ids.suricata import parse_eve, run_offline, write_config

REPO = Path(__file__).resolve().parent.parent
CASES = [REPO / "tests/rules_cases/http_request/rules.rules"]
CASES += [REPO / "tests/rules_cases/content_positions/rules.rules"]


def test_an_outcome_comes_from_the_host_and_the_ids_together():
    assert outcome(True, True, True) == "detected"
    assert outcome(True, False, True) == "evaded"
    assert outcome(False, True, True) == "false alert"
    assert outcome(False, False, True) == "harmless"
    assert outcome(None, True, True) == "unlabelled"
    assert outcome(True, True, False) == "not comparable"  # the plain session did not alert


def test_newly_evaded_is_what_the_baseline_measured_and_did_not_see_evaded():
    old = {"varied_sids": [1, 2], "variants": ["a", "b"], "evaded": [[1, "a", "default"]]}
    new = {
        "varied_sids": [1, 2, 3],
        "variants": ["a", "b", "c"],
        "evaded": [[1, "b", "default"], [2, "a", "linux"], [3, "a", "default"], [1, "c", "x"]],
    }
    cmp = compare_evasions(old, new, {2: "known"})
    assert [(r["sid"], r["variant"], r["allowed"]) for r in cmp["newly_evaded"]] == [
        (1, "b", False),
        (2, "a", True),
    ]
    assert cmp["no_longer_evaded"] == [{"sid": 1, "variant": "a", "config": "default"}]
    assert cmp["not_compared"] == 2 and cmp["blocking_sids"] == [1]


@pytest.mark.parametrize("v6", [False, True])
def test_no_server_address_is_a_client_address_on_either_side(v6):
    """A rule whose client is external (client 198.19.x.y, server 198.18.x.y) next to one whose
    client is at home: were a server address also a client address, two sessions could share an
    address pair the other way round, and their alerts would be counted for one (measured: ET
    Open's 2018021 `ins-bad-checksum` scored evaded, its alert given to 2017440's plain
    session)."""
    for side in ("home", "external"):
        clients = {client_address(n, side, v6) for n in range(62_500)}
        servers = {server_address(k, side, v6) for k in range(SERVER_SLOTS4)}
        assert len(clients) == 62_500 and len(servers) == SERVER_SLOTS4
        assert not clients & servers, side


def test_two_sessions_on_one_address_pair_are_refused():
    one = VariantSession(1, "plain", "plain", "tcp", "198.18.1.5", 50000, "198.19.251.3", 80, False)
    back = VariantSession(
        2, "plain", "plain", "tcp", "198.19.251.3", 50001, "198.18.1.5", 80, False
    )
    assert len(session_index(EvasionCapture(Path("."), sessions=[one]))) == 2
    with pytest.raises(ValueError, match="share the address pair"):
        session_index(EvasionCapture(Path("."), sessions=[one, back]))


def test_a_session_too_big_to_vary_is_left_out_with_its_reason_and_the_others_are_kept():
    big = MAX_VARIED_BYTES + 1
    rules = [
        f'alert tcp any any -> any 80 (msg:"big"; flow:to_server,established; dsize:{big}; '
        'content:"x"; sid:1; rev:1;)',
        'alert tcp any any -> any 80 (msg:"small"; flow:to_server,established; content:"evil"; '
        "sid:2; rev:1;)",
    ]
    models = [analyze(parse_rule_text(r)) for r in rules]
    plans, skipped = plain_plans(models, {1, 2})
    assert list(plans) == [2] and f"more than the {MAX_VARIED_BYTES:,}" in skipped[1]


def test_an_unknown_class_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["ids-coverage", str(CASES[0]), "--evasions", "tcp-sge", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "unknown evasion class 'tcp-sge'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def evasion_run(tmp_path_factory, suricata_in_ci, root_in_ci) -> Path:
    out = tmp_path_factory.mktemp("evasions")
    args = ["ids-coverage", *map(str, CASES), "--evasions", "insertion,ip4-frag"]
    assert main([*args, "--out", str(out), "-q"]) == 0
    return out


def test_every_alerting_rule_gets_every_variant_in_both_configurations(evasion_run: Path):
    cov = json.loads((evasion_run / "coverage.json").read_text())
    ev = cov["evasions"]
    alerted = sorted(r["sid"] for r in cov["rows"] if r["state"] == "alerted")
    assert ev["classes"] == ["ip4-frag", "insertion"] and ev["varied_sids"] == alerted
    rows = pq.read_table(evasion_run / "tables/coverage_evasion.parquet").to_pylist()
    tcp = {r["sid"] for r in rows if r["proto"] == "tcp"}
    per_sid = 6 + (6 if tcp else 0)  # ip4-frag's six, and insertion's six on TCP rules
    assert len(rows) == sum(per_sid if s in tcp else 6 for s in alerted) * 2
    assert {r["config"] for r in rows} == {"default", "linux"}
    assert {r["outcome"] for r in rows} <= set(OUTCOMES) - {"unlabelled"}
    # the labels were measured live: the plain probes reached the host, and a junk segment with
    # a TTL of 1 died at the router while the real one behind it arrived
    live = json.loads((evasion_run / "evasions/host/host.json").read_text())["rows"]
    assert all(r["reached"] for r in live if r["variant"] == "plain")
    reached = {(r["variant"], r["proto"]): r["reached"] for r in live}
    assert reached[("ins-ttl", "tcp")] is True and reached[("ins-bad-checksum", "tcp")] is True
    for r in rows:
        assert r["host_reached"] == reached[(r["variant"], r["proto"])]
    md = (evasion_run / "evasion.md").read_text()
    assert "## Live: the probes" in md and "| ins-ttl | http | 4 | yes |" in md
    assert "evasions (default reassembly)" in (evasion_run / "coverage.md").read_text()


def evaded_baseline(run: Path, tmp_path: Path) -> tuple[Path, int]:
    """The run's coverage.json with one evaded (sid, variant, config) taken out: a baseline in
    which that variant of that sid was not evaded."""
    doc = json.loads((run / "coverage.json").read_text())
    evaded = doc["evasions"]["evaded"]
    assert evaded, "no variant evaded Suricata on the cases: nothing for the gate to find"
    sid = evaded[0][0]
    doc["evasions"]["evaded"] = [e for e in evaded if e[0] != sid]
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(doc))
    return path, sid


def test_a_newly_evaded_sid_fails_the_gate_and_an_allowed_one_passes(
    evasion_run: Path, tmp_path: Path, capsys
):
    base, sid = evaded_baseline(evasion_run, tmp_path)
    args = ["ids-coverage", *map(str, CASES), "--evasions", "insertion,ip4-frag", "-q"]
    code = main([*args, "--out", str(tmp_path / "now"), "--baseline", str(base)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert f"have a variant evaded now that was not in the baseline (sids {sid};" in err
    cmp = json.loads((tmp_path / "now/coverage.json").read_text())["evasions"]["baseline"]
    assert cmp["blocking_sids"] == [sid] and all(r["sid"] == sid for r in cmp["newly_evaded"])
    assert "## Against the baseline" in (tmp_path / "now/evasion.md").read_text()
    allow = tmp_path / "allow.txt"
    allow.write_text(f"{sid} evaded on purpose in this test\n")
    code = main(
        [*args, "--out", str(tmp_path / "allowed"), "--baseline", str(base), "--allow", str(allow)]
    )
    assert code == 0, capsys.readouterr().err


def test_the_hosts_reassembly_policy_reaches_a_users_suricata_yaml_too(tmp_path, suricata_in_ci):
    """With a suricata.yaml of the user's, the linux policy goes in as an --include (a --set of
    the list was silently ignored: the run equalled the default one)."""
    models, _ = load_rules(CASES)
    cap = write_variants(models, {m.sid for m in models}, ["ip4-frag"], tmp_path / "pcaps")
    mine = write_config(tmp_path / "user", rule_files=CASES)

    def alerts(name: str, **kw) -> set:
        res = run_offline(cap.pcap, CASES, tmp_path / name, runmode="single", **kw)
        return {(a.sid, a.src, a.dst) for a in parse_eve(res.eve or tmp_path / name / "eve.json")}

    ours, users, default = (
        alerts("ours", host_os="linux"),
        alerts("users", host_os="linux", config=mine),
        alerts("default"),
    )
    assert ours == users != default  # frag4-overlap-old/-new alert the other way round


def test_eve_alerts_read_whole_equal_those_read_a_line_at_a_time(tmp_path, suricata_in_ci):
    """parse_eve reads a whole eve.json with pyarrow; a file it cannot read so (a cut last line,
    a field of another type) is read a line at a time: the same alerts, the broken line left out."""
    models, _ = load_rules(CASES)
    cap = write_variants(models, {m.sid for m in models}, ["tcp-seg"], tmp_path / "pcaps")
    res = run_offline(cap.pcap, CASES, tmp_path / "suri", runmode="single")
    eve = res.eve or tmp_path / "suri" / "eve.json"
    lines = eve.read_text().splitlines(keepends=True)
    whole = parse_eve(eve)
    assert len(whole) > 10 and whole == res.alerts
    assert {a.sid for a in whole} <= {m.sid for m in models}
    assert all(":" not in a.src or "::" in a.src for a in whole)  # IPv6 in its short form
    cut = tmp_path / "cut.json"
    cut.write_text("".join(lines) + lines[-1][: len(lines[-1]) // 2])
    assert parse_eve(cut) == whole
    odd = tmp_path / "odd.json"  # a port that is text: pyarrow refuses the file, not the line
    odd.write_text('{"event_type":"alert","src_port":"x"}\n' + "".join(lines))
    first, *rest = parse_eve(odd)
    assert rest == whole and (first.sid, first.sport) == (0, 0)
    assert parse_eve(tmp_path / "missing.json") == [] and parse_eve(_empty(tmp_path)) == []


def _empty(tmp_path: Path) -> Path:
    p = tmp_path / "empty.json"
    p.write_text("")
    return p
