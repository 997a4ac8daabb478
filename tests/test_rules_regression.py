"""Coverage against a baseline (`testbed ids-coverage --baseline OLD.json --allow FILE`): the pure
per-sid comparison on small documents, then the gate end to end through Suricata, then the exit
status 2 for a baseline or allow file that cannot be used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import skip_or_fail
from ntgcore.errors import BadInput
from testbed.cli import main
from testbed.ids.regression import compare_coverage, load_allow, load_baseline, markdown_lines

CASE = Path(__file__).parent / "rules_cases" / "http_request" / "rules.rules"
BROKEN_SID = 1000101


def _doc(*rows: dict) -> dict:
    return {"rule_files": ["a.rules"], "coverage": 0.0, "rows": list(rows)}


def _row(sid: int, state: str = "alerted", extra: list[int] | None = None) -> dict:
    row = {"sid": sid, "where": f"a.rules:{sid}", "msg": "m", "state": state, "alerted": state == "alerted"}
    if extra:
        row["extra_sids"] = extra
    return row


# ---- the pure comparison ----

def test_a_sid_that_alerted_and_now_is_missed_is_newly_failing_and_blocking() -> None:
    cmp = compare_coverage(_doc(_row(1), _row(2)), _doc(_row(1), _row(2, "missed") | {"reason": "no alert"}))
    assert [e["sid"] for e in cmp["newly_failing"]] == [2]
    assert cmp["newly_failing"][0]["before"] == "alerted" and cmp["newly_failing"][0]["now"] == "missed"
    assert cmp["newly_failing"][0]["reason"] == "no alert"
    assert cmp["blocking_sids"] == [2] and cmp["counts"]["blocking"] == 1
    assert cmp["same_rules"] is True


def test_a_rule_that_became_unloadable_or_disappeared_is_newly_failing() -> None:
    cmp = compare_coverage(_doc(_row(1), _row(2), _row(3)), _doc(_row(1), _row(2, "not loaded")))
    assert {e["sid"]: e["now"] for e in cmp["newly_failing"]} == {2: "not loaded", 3: "removed"}
    assert [e["sid"] for e in cmp["removed"]] == [3]
    assert cmp["same_rules"] is False


def test_a_sid_that_was_missed_and_now_alerts_is_newly_passing_and_blocks_nothing() -> None:
    cmp = compare_coverage(_doc(_row(1, "missed"), _row(2, "not loaded")), _doc(_row(1), _row(2)))
    assert [e["sid"] for e in cmp["newly_passing"]] == [1, 2]
    assert cmp["newly_failing"] == [] and cmp["blocking_sids"] == []


def test_a_rule_that_stays_missed_or_silent_is_no_change() -> None:
    cmp = compare_coverage(_doc(_row(1, "missed"), _row(2, "silent")), _doc(_row(1, "missed"), _row(2, "silent")))
    assert cmp["counts"] == {"newly_failing": 0, "newly_failing_allowed": 0, "blocking": 0, "newly_passing": 0,
                             "extra_changed": 0, "added": 0, "removed": 0}


def test_a_changed_set_of_other_sids_on_the_session_is_reported_with_what_came_and_went() -> None:
    cmp = compare_coverage(_doc(_row(1, extra=[7, 8]), _row(2, extra=[9])),
                           _doc(_row(1, extra=[8, 10]), _row(2, extra=[9])))
    assert cmp["extra_changed"] == [{"sid": 1, "where": "a.rules:1", "before": [7, 8], "now": [8, 10],
                                     "gained": [10], "lost": [7]}]
    assert cmp["blocking_sids"] == []      # extra alerts are reported, they do not fail the gate


def test_an_allowed_regression_is_listed_as_allowed_and_does_not_block() -> None:
    cmp = compare_coverage(_doc(_row(1), _row(2)), _doc(_row(1, "missed"), _row(2, "missed")),
                           {1: "upstream rule rewritten", 5: ""})
    failing = {e["sid"]: e for e in cmp["newly_failing"]}
    assert failing[1]["allowed"] is True and failing[1]["allow_reason"] == "upstream rule rewritten"
    assert failing[2]["allowed"] is False
    assert cmp["blocking_sids"] == [2] and cmp["counts"]["newly_failing_allowed"] == 1
    assert cmp["allow_unused"] == [5]


def test_rules_only_in_one_run_are_listed_as_added_or_removed() -> None:
    cmp = compare_coverage(_doc(_row(1), _row(2, "missed")), _doc(_row(1), _row(3)))
    assert [e["sid"] for e in cmp["added"]] == [3] and cmp["added"][0]["now"] == "alerted"
    assert [e["sid"] for e in cmp["removed"]] == [2]
    assert cmp["newly_failing"] == []       # sid 2 did not alert before: its removal breaks nothing
    assert cmp["same_rules"] is False
    assert any("another rule set" in line for line in markdown_lines(cmp))


def test_the_allow_file_takes_sids_reasons_and_comments(tmp_path: Path) -> None:
    f = tmp_path / "allow.txt"
    f.write_text("# known regressions\n\n1000101 rewritten upstream  # ticket 12\n  2000002\t\n")
    assert load_allow(f) == {1000101: "rewritten upstream", 2000002: ""}


@pytest.mark.parametrize("line", ["sid-7", "12a reason", "0", "-3"])
def test_a_bad_allow_line_is_bad_input_with_file_and_line(tmp_path: Path, line: str) -> None:
    f = tmp_path / "allow.txt"
    f.write_text(f"# header\n1000101\n{line}\n")
    with pytest.raises(BadInput, match=rf"^{f}:3: .* is not a sid"):
        load_allow(f)


@pytest.mark.parametrize("text, what", [
    ("{not json", r":1: not JSON"),
    ('{"coverage": 0.5}', r"not a coverage.json \(no `rows`"),
    ('[1, 2]', r"not a coverage.json"),
    ('{"rows": [{"state": "alerted"}]}', r"rows\[0\]: no integer `sid`"),
    ('{"rows": [{"sid": 5}]}', r"rows\[0\]: neither `state` nor `alerted`"),
])
def test_a_baseline_that_is_no_coverage_json_is_bad_input(tmp_path: Path, text: str, what: str) -> None:
    f = tmp_path / "old.json"
    f.write_text(text)
    with pytest.raises(BadInput, match=what):
        load_baseline(f)


# ---- through Suricata ----

@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    if shutil.which("suricata") is None:
        skip_or_fail("suricata not installed (./bootstrap.sh test)")
    out = tmp_path_factory.mktemp("baseline")
    assert main(["ids-coverage", str(CASE), "--out", str(out), "-q"]) == 0
    doc = json.loads((out / "coverage.json").read_text())
    assert doc["alerted"] == 4                      # all four rules of the case alert: a real baseline
    return out / "coverage.json"


# Two ways to make sid 1000101 of the case unable to alert, its sid and the other rules kept.
# Synthesis writes what a rule asks for, so changing a content alone would not break the rule:
# the new content would be synthesized too. Instead each adds a condition that no request can meet
# together with the rule's 16-byte `http.uri` content "/cgi-bin/run.cgi" (checked by Suricata 7.0.10):
#   missed: `content:!"run.cgi"` in the same URI; Suricata loads the rule, but no URI both holds
#     and lacks those bytes (our layout finds none and writes no session, and any session we wrote
#     would not match);
#   not loaded: `urilen:<3`; Suricata refuses the rule (a URI shorter than its content).
BREAKS = {
    "missed": ('distance:0; http.request_body;', 'distance:0; content:!"run.cgi"; http.request_body;'),
    "not loaded": ('startswith;', 'startswith; urilen:<3;'),
}


def _broken_rules(tmp_path: Path, how: str = "missed") -> Path:
    text = CASE.read_text()
    old, new = BREAKS[how]
    assert text.count(old) == 1 and text.count(f"sid:{BROKEN_SID};") == 1
    assert text.index(old) < text.index(f"sid:{BROKEN_SID};") < text.index("\n", text.index(old))  # same rule
    f = tmp_path / "broken.rules"
    f.write_text(text.replace(old, new))
    return f


@pytest.mark.parametrize("how", list(BREAKS))
def test_a_rule_that_stops_alerting_fails_the_gate_naming_its_sid(baseline: Path, tmp_path: Path, capsys,
                                                                  how: str) -> None:
    out = tmp_path / "out"
    code = main(["ids-coverage", str(_broken_rules(tmp_path, how)), "--out", str(out), "-q",
                 "--baseline", str(baseline)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert f"sid {BROKEN_SID} newly failing (alerted -> {how})" in err
    assert f"1 sids alerted in the baseline and do not now (sids {BROKEN_SID})" in err
    cmp = json.loads((out / "coverage.json").read_text())["baseline"]
    assert cmp["path"] == str(baseline)
    assert [e["sid"] for e in cmp["newly_failing"]] == [BROKEN_SID] and cmp["blocking_sids"] == [BROKEN_SID]
    assert cmp["newly_failing"][0]["now"] == how
    assert cmp["same_rules"] is True and cmp["counts"]["newly_passing"] == 0
    md = (out / "coverage.md").read_text()
    assert "## Changes against the baseline" in md and "### Newly failing (1)" in md
    assert f"| {BROKEN_SID} |" in md
    page = (out / "coverage.html").read_text()
    assert "<h2>Changes against the baseline</h2>" in page and "<h3>Newly failing (1)</h3>" in page


def test_an_allowed_regression_passes_the_gate_and_is_reported_as_allowed(baseline: Path, tmp_path: Path,
                                                                         capsys) -> None:
    allow = tmp_path / "allow.txt"
    allow.write_text(f"# accepted on purpose\n{BROKEN_SID} broken on purpose by the test\n")
    out = tmp_path / "out"
    code = main(["ids-coverage", str(_broken_rules(tmp_path)), "--out", str(out), "-q",
                 "--baseline", str(baseline), "--allow", str(allow)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"sid {BROKEN_SID} newly failing" in err and "[allowed: broken on purpose by the test]" in err
    cmp = json.loads((out / "coverage.json").read_text())["baseline"]
    assert cmp["newly_failing"][0]["allowed"] is True and cmp["blocking_sids"] == []
    assert "| yes: broken on purpose by the test |" in (out / "coverage.md").read_text()


def test_a_reason_with_a_bar_stays_in_its_table_cell() -> None:
    cmp = compare_coverage(_doc(_row(1)), _doc(_row(1, "missed")), {1: "see a|b"})
    row = next(line for line in markdown_lines(cmp) if line.startswith("| 1 |"))
    assert row.count("|") == 7 and "yes: see a/b" in row


def test_the_same_rules_against_their_own_baseline_pass_with_no_change(baseline: Path, tmp_path: Path,
                                                                      capsys) -> None:
    out = tmp_path / "out"
    code = main(["ids-coverage", str(CASE), "--out", str(out), "-q", "--baseline", str(baseline)])
    assert code == 0, capsys.readouterr().err
    counts = json.loads((out / "coverage.json").read_text())["baseline"]["counts"]
    assert set(counts.values()) == {0}


# ---- exit status 2, before any run ----

def test_a_bad_baseline_is_bad_input(tmp_path: Path, capsys) -> None:
    old = tmp_path / "old.json"
    old.write_text('{"coverage": 1.0}')
    assert main(["ids-coverage", str(CASE), "--out", str(tmp_path / "out"), "-q", "--baseline", str(old)]) == 2
    assert f"baseline {old}: not a coverage.json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert main(["ids-coverage", str(CASE), "--out", str(tmp_path / "out"), "-q",
                 "--baseline", str(tmp_path / "missing.json")]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_a_bad_allow_file_is_bad_input_with_file_and_line(tmp_path: Path, capsys) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_doc(_row(1))))
    allow = tmp_path / "allow.txt"
    allow.write_text("1000101 fine\nnot-a-sid\n")
    code = main(["ids-coverage", str(CASE), "--out", str(tmp_path / "out"), "-q",
                 "--baseline", str(old), "--allow", str(allow)])
    assert code == 2
    assert f"{allow}:2: 'not-a-sid' is not a sid" in capsys.readouterr().err


def test_allow_without_baseline_is_bad_input(tmp_path: Path, capsys) -> None:
    allow = tmp_path / "allow.txt"
    allow.write_text("1\n")
    assert main(["ids-coverage", str(CASE), "--out", str(tmp_path / "out"), "-q", "--allow", str(allow)]) == 2
    assert "--allow needs --baseline" in capsys.readouterr().err
