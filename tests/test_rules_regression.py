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
    row = {
        "sid": sid,
        "where": f"a.rules:{sid}",
        "msg": "m",
        "state": state,
        "alerted": state == "alerted",
    }
    if extra:
        row["extra_sids"] = extra
    return row


# ---- the pure comparison ----


def test_a_sid_that_alerted_and_now_is_missed_is_newly_failing_and_blocking() -> None:
    cmp = compare_coverage(
        _doc(_row(1), _row(2)), _doc(_row(1), _row(2, "missed") | {"reason": "no alert"})
    )
    assert [e["sid"] for e in cmp["newly_failing"]] == [2]
    assert (
        cmp["newly_failing"][0]["before"] == "alerted"
        and cmp["newly_failing"][0]["now"] == "missed"
    )
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
    cmp = compare_coverage(
        _doc(_row(1, "missed"), _row(2, "silent")), _doc(_row(1, "missed"), _row(2, "silent"))
    )
    assert cmp["counts"] == {
        "newly_failing": 0,
        "newly_failing_allowed": 0,
        "blocking": 0,
        "newly_passing": 0,
        "extra_changed": 0,
        "added": 0,
        "removed": 0,
    }


def test_a_changed_set_of_other_sids_on_the_session_is_reported_with_what_came_and_went() -> None:
    cmp = compare_coverage(
        _doc(_row(1, extra=[7, 8]), _row(2, extra=[9])),
        _doc(_row(1, extra=[8, 10]), _row(2, extra=[9])),
    )
    assert cmp["extra_changed"] == [
        {
            "sid": 1,
            "where": "a.rules:1",
            "before": [7, 8],
            "now": [8, 10],
            "gained": [10],
            "lost": [7],
        }
    ]
    assert cmp["blocking_sids"] == []  # extra alerts are reported, they do not fail the gate


def test_an_allowed_regression_is_listed_as_allowed_and_does_not_block() -> None:
    cmp = compare_coverage(
        _doc(_row(1), _row(2)),
        _doc(_row(1, "missed"), _row(2, "missed")),
        {1: "upstream rule rewritten", 5: ""},
    )
    failing = {e["sid"]: e for e in cmp["newly_failing"]}
    assert failing[1]["allowed"] is True and failing[1]["allow_reason"] == "upstream rule rewritten"
    assert failing[2]["allowed"] is False
    assert cmp["blocking_sids"] == [2] and cmp["counts"]["newly_failing_allowed"] == 1
    assert cmp["allow_unused"] == [5]


def test_rules_only_in_one_run_are_listed_as_added_or_removed() -> None:
    cmp = compare_coverage(_doc(_row(1), _row(2, "missed")), _doc(_row(1), _row(3)))
    assert [e["sid"] for e in cmp["added"]] == [3] and cmp["added"][0]["now"] == "alerted"
    assert [e["sid"] for e in cmp["removed"]] == [2]
    assert cmp["newly_failing"] == []  # sid 2 did not alert before: its removal breaks nothing
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


@pytest.mark.parametrize(
    "text, what",
    [
        ("{not json", r":1: not JSON"),
        ('{"coverage": 0.5}', r"not a coverage.json \(no `rows`"),
        ("[1, 2]", r"not a coverage.json"),
        ('{"rows": [{"state": "alerted"}]}', r"rows\[0\]: no integer `sid`"),
        ('{"rows": [{"sid": 5}]}', r"rows\[0\]: neither `state` nor `alerted`"),
    ],
)
def test_a_baseline_that_is_no_coverage_json_is_bad_input(
    tmp_path: Path, text: str, what: str
) -> None:
    f = tmp_path / "old.json"
    f.write_text(text)
    with pytest.raises(BadInput, match=what):
        load_baseline(f)


# ---- through Suricata ----


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, suricata_in_ci) -> Path:
    out = tmp_path_factory.mktemp("baseline")
    assert main(["ids-coverage", str(CASE), "--out", str(out), "-q"]) == 0
    doc = json.loads((out / "coverage.json").read_text())
    assert doc["alerted"] == 4  # all four rules of the case alert: a real baseline
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
    "missed": (
        "distance:0; http.request_body;",
        'distance:0; content:!"run.cgi"; http.request_body;',
    ),
    "not loaded": ("startswith;", "startswith; urilen:<3;"),
}


def _broken_rules(tmp_path: Path, how: str = "missed") -> Path:
    text = CASE.read_text()
    old, new = BREAKS[how]
    assert text.count(old) == 1 and text.count(f"sid:{BROKEN_SID};") == 1
    assert (
        text.index(old) < text.index(f"sid:{BROKEN_SID};") < text.index("\n", text.index(old))
    )  # same rule
    f = tmp_path / "broken.rules"
    f.write_text(text.replace(old, new))
    return f


@pytest.mark.parametrize("how", list(BREAKS))
def test_a_rule_that_stops_alerting_fails_the_gate_naming_its_sid(
    baseline: Path, tmp_path: Path, capsys, how: str
) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "ids-coverage",
            str(_broken_rules(tmp_path, how)),
            "--out",
            str(out),
            "-q",
            "--baseline",
            str(baseline),
        ]
    )
    err = capsys.readouterr().err
    assert code == 3, err
    assert f"sid {BROKEN_SID} newly failing (alerted -> {how})" in err
    assert f"1 sids alerted in the baseline and do not now (sids {BROKEN_SID})" in err
    cmp = json.loads((out / "coverage.json").read_text())["baseline"]
    assert cmp["path"] == str(baseline)
    assert [e["sid"] for e in cmp["newly_failing"]] == [BROKEN_SID] and cmp["blocking_sids"] == [
        BROKEN_SID
    ]
    assert cmp["newly_failing"][0]["now"] == how
    assert cmp["same_rules"] is True and cmp["counts"]["newly_passing"] == 0
    md = (out / "coverage.md").read_text()
    assert "## Changes against the baseline" in md and "### Newly failing (1)" in md
    assert f"| {BROKEN_SID} |" in md
    page = (out / "coverage.html").read_text()
    assert "<h2>Changes against the baseline</h2>" in page and "<h3>Newly failing (1)</h3>" in page


def test_an_allowed_regression_passes_the_gate_and_is_reported_as_allowed(
    baseline: Path, tmp_path: Path, capsys
) -> None:
    allow = tmp_path / "allow.txt"
    allow.write_text(f"# accepted on purpose\n{BROKEN_SID} broken on purpose by the test\n")
    out = tmp_path / "out"
    code = main(
        [
            "ids-coverage",
            str(_broken_rules(tmp_path)),
            "--out",
            str(out),
            "-q",
            "--baseline",
            str(baseline),
            "--allow",
            str(allow),
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert (
        f"sid {BROKEN_SID} newly failing" in err
        and "[allowed: broken on purpose by the test]" in err
    )
    cmp = json.loads((out / "coverage.json").read_text())["baseline"]
    assert cmp["newly_failing"][0]["allowed"] is True and cmp["blocking_sids"] == []
    assert "| yes: broken on purpose by the test |" in (out / "coverage.md").read_text()


def test_a_reason_with_a_bar_stays_in_its_table_cell() -> None:
    cmp = compare_coverage(_doc(_row(1)), _doc(_row(1, "missed")), {1: "see a|b"})
    row = next(line for line in markdown_lines(cmp) if line.startswith("| 1 |"))
    assert row.count("|") == 7 and "yes: see a/b" in row


def test_the_same_rules_against_their_own_baseline_pass_with_no_change(
    baseline: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "out"
    code = main(["ids-coverage", str(CASE), "--out", str(out), "-q", "--baseline", str(baseline)])
    assert code == 0, capsys.readouterr().err
    counts = json.loads((out / "coverage.json").read_text())["baseline"]["counts"]
    assert set(counts.values()) == {0}


# ---- exit status 2, before any run ----


def test_a_bad_baseline_is_bad_input(tmp_path: Path, capsys) -> None:
    old = tmp_path / "old.json"
    old.write_text('{"coverage": 1.0}')
    assert (
        main(
            [
                "ids-coverage",
                str(CASE),
                "--out",
                str(tmp_path / "out"),
                "-q",
                "--baseline",
                str(old),
            ]
        )
        == 2
    )
    assert f"baseline {old}: not a coverage.json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert (
        main(
            [
                "ids-coverage",
                str(CASE),
                "--out",
                str(tmp_path / "out"),
                "-q",
                "--baseline",
                str(tmp_path / "missing.json"),
            ]
        )
        == 2
    )
    assert "cannot read it" in capsys.readouterr().err


def test_a_bad_allow_file_is_bad_input_with_file_and_line(tmp_path: Path, capsys) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_doc(_row(1))))
    allow = tmp_path / "allow.txt"
    allow.write_text("1000101 fine\nnot-a-sid\n")
    code = main(
        [
            "ids-coverage",
            str(CASE),
            "--out",
            str(tmp_path / "out"),
            "-q",
            "--baseline",
            str(old),
            "--allow",
            str(allow),
        ]
    )
    assert code == 2
    assert f"{allow}:2: 'not-a-sid' is not a sid" in capsys.readouterr().err


def test_allow_without_baseline_is_bad_input(tmp_path: Path, capsys) -> None:
    allow = tmp_path / "allow.txt"
    allow.write_text("1\n")
    assert (
        main(
            ["ids-coverage", str(CASE), "--out", str(tmp_path / "out"), "-q", "--allow", str(allow)]
        )
        == 2
    )
    assert "--allow needs --baseline" in capsys.readouterr().err


# ---- two DUTs in one command (the same sessions through each, compared per sid with the first) ----
#
# Only one Suricata is installed here, so the DUTs differ honestly in what they are given:
# two configurations, our own written by write_config and the same with the HTTP parser off
# (`app-layer.protocols.http.enabled: no`, Suricata loads the HTTP rules and they cannot match);
# and two binaries, /usr/bin/suricata and a wrapper script that execs it with the same setting
# on its command line (a build without the HTTP parser, as far as detection is concerned).

TWO = [CASE, Path(__file__).parent / "rules_cases" / "content_positions" / "rules.rules"]
HTTP_SIDS = [1000101, 1000102, 1000103, 1000104]  # the http_request case: need the HTTP parser
RAW_SIDS = [1000001, 1000002, 1000003, 1000004]  # content_positions: raw TCP/UDP payloads
NO_HTTP = "--set app-layer.protocols.http.enabled=no"


@pytest.fixture(scope="module")
def configs(tmp_path_factory, suricata_in_ci) -> tuple[Path, Path]:
    from testbed.ids.suricata import write_config

    folder = tmp_path_factory.mktemp("configs")
    text = write_config(folder, rule_files=[]).read_text()
    old = "    http:\n      enabled: yes"
    assert text.count(old) == 1
    prod, off = folder / "prod.yaml", folder / "no-http.yaml"
    prod.write_text(text)
    off.write_text(text.replace(old, "    http:\n      enabled: no"))
    return prod, off


@pytest.fixture(scope="module")
def wrapper(tmp_path_factory, suricata_in_ci) -> Path:
    script = tmp_path_factory.mktemp("bin") / "suricata-nohttp"
    script.write_text(f'#!/bin/sh\nexec {shutil.which("suricata")} "$@" {NO_HTTP}\n')
    script.chmod(0o755)
    return script


def test_the_rules_of_the_two_dut_tests_are_the_sids_they_name() -> None:
    from idsrules.semantics import load_rules

    models, problems = load_rules(TWO)
    assert not problems and [m.sid for m in models] == HTTP_SIDS + RAW_SIDS


def test_two_configurations_one_without_http_fail_the_gate_naming_the_http_sids(
    configs, tmp_path: Path, capsys
) -> None:
    import hashlib

    from analysis.tables import read_table

    prod, off = configs
    out = tmp_path / "two"
    code = main(
        [
            "ids-coverage",
            *map(str, TWO),
            "--out",
            str(out),
            "-q",
            "--suricata-config",
            str(prod),
            "--suricata-config",
            str(off),
        ]
    )
    captured = capsys.readouterr()
    assert code == 3, captured.err
    for sid in HTTP_SIDS:
        assert f"no-http against prod: sid {sid} newly failing (alerted -> missed)" in captured.err
    assert not any(f"sid {sid} newly failing" in captured.err for sid in RAW_SIDS)
    assert (
        "no-http against prod: 4 sids newly failing (sids 1000101, 1000102, 1000103, 1000104)"
        in captured.err
    )
    assert "== prod ==" in captured.out and "== no-http ==" in captured.out
    # one synthesis, each DUT its own coverage.json with its version and configuration hash
    assert (out / "attacks.pcap").is_file() and not (out / "coverage.json").exists()
    docs = {n: json.loads((out / n / "coverage.json").read_text()) for n in ("prod", "no-http")}
    assert docs["prod"]["alerted"] == 8 and docs["no-http"]["alerted"] == 4
    for name, cfg in (("prod", prod), ("no-http", off)):
        dut = docs[name]["dut"]
        assert dut["name"] == name and dut["config"] == str(cfg)
        assert dut["config_sha256"] == hashlib.sha256(cfg.read_bytes()).hexdigest()
        assert dut["version"] == docs[name]["ids_version"] and dut["version"] in dut["version_line"]
        assert dut["binary"] == shutil.which("suricata")
    versus = docs["no-http"]["versus"]
    assert (
        versus["dut"] == "prod"
        and versus["blocking_sids"] == HTTP_SIDS
        and "versus" not in docs["prod"]
    )
    assert "## Changes against DUT prod" in (out / "no-http" / "coverage.md").read_text()
    cmp = json.loads((out / "comparison.json").read_text())
    assert [d["name"] for d in cmp["duts"]] == ["prod", "no-http"]
    assert cmp["blocking"] == [{"what": "no-http against prod", "sids": HTTP_SIDS}]
    md = (out / "comparison.md").read_text()
    assert "- gate: failed: no-http against prod: sids 1000101, 1000102, 1000103, 1000104" in md
    assert "## no-http: changes against DUT prod" in md
    assert "<h2>no-http: changes against DUT prod</h2>" in (out / "comparison.html").read_text()
    # the Parquet run table: every DUT's rows, step = the DUT
    table = read_table(out, "coverage").to_pandas()
    assert set(table["run_id"]) == {"two"} and table["mix"].isna().all()
    alerted = table.groupby("step")["alerted"].sum().to_dict()
    assert alerted == {"prod": 8, "no-http": 4} and len(table) == 16
    assert set(table[table.step == "no-http"]["config_sha256"]) == {
        docs["no-http"]["dut"]["config_sha256"]
    }

    allow = tmp_path / "allow.txt"
    allow.write_text(
        "".join(f"{sid} the candidate configuration has no HTTP parser\n" for sid in HTTP_SIDS)
    )
    code = main(
        [
            "ids-coverage",
            *map(str, TWO),
            "--out",
            str(tmp_path / "allowed"),
            "-q",
            "--suricata-config",
            str(prod),
            "--suricata-config",
            str(off),
            "--allow",
            str(allow),
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "[allowed: the candidate configuration has no HTTP parser]" in err


def test_two_binaries_compare_the_same_sessions_and_record_each_binary(
    wrapper: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "bins"
    code = main(
        [
            "ids-coverage",
            *map(str, TWO),
            "--out",
            str(out),
            "-q",
            "--suricata",
            shutil.which("suricata"),
            "--suricata",
            str(wrapper),
        ]
    )
    err = capsys.readouterr().err
    assert code == 3, err
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "suricata",
        "suricata-nohttp",
        "tables",
    ]
    doc = json.loads((out / "suricata-nohttp" / "coverage.json").read_text())
    assert doc["dut"]["binary"] == str(wrapper) and doc["dut"]["config"] is None
    assert doc["versus"]["blocking_sids"] == HTTP_SIDS
    first = json.loads((out / "suricata" / "coverage.json").read_text())["dut"]
    # our own configuration, written into each DUT's folder, hashes the same without its folder
    assert first["config_sha256"] == doc["dut"]["config_sha256"]
    assert (
        f"suricata-nohttp against suricata: sid {HTTP_SIDS[0]} newly failing (alerted -> missed)"
        in err
    )
    # NAME=PATH names the DUTs (their folders and the comparison's words)
    named = tmp_path / "named"
    code = main(
        [
            "ids-coverage",
            *map(str, TWO),
            "--out",
            str(named),
            "-q",
            "--suricata",
            f"old={shutil.which('suricata')}",
            "--suricata",
            f"new={wrapper}",
        ]
    )
    assert code == 3 and "new against old: 4 sids newly failing" in capsys.readouterr().err
    assert (named / "old" / "coverage.json").is_file() and (
        named / "new" / "coverage.json"
    ).is_file()


def test_duts_pair_up_and_are_named_after_what_differs(tmp_path: Path) -> None:
    from testbed.ids.suricata import make_duts

    a, b, c = (tmp_path / n for n in ("a.yaml", "b.yaml", "tables.yaml"))
    for f in (a, b, c):
        f.write_text("%YAML 1.1\n---\n")
    exe = tmp_path / "opt" / "suricata-8" / "bin" / "suricata"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    other = tmp_path / "suricata"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    assert [(d.name, d.config) for d in make_duts(None, [str(a), str(b)])] == [
        ("a", str(a)),
        ("b", str(b)),
    ]
    # two binaries of the same name: with their folder (the one above bin/)
    assert [d.name for d in make_duts([str(other), str(exe)], None)] == [
        f"{tmp_path.name}-suricata",
        "suricata-8-suricata",
    ]
    duts = make_duts([str(exe)], [str(a), str(b)])  # one binary goes with every configuration
    assert [(d.binary, d.config) for d in duts] == [(str(exe), str(a)), (str(exe), str(b))]
    assert [d.name for d in make_duts(None, [f"prod={a}", f"candidate={b}"])] == [
        "prod",
        "candidate",
    ]
    assert [d.name for d in make_duts(None, [str(a), str(c)])] == [
        "a",
        "dut-tables",
    ]  # not the table folder
    assert (
        make_duts(None, None) == [make_duts(None, None)[0]]
        and make_duts(None, None)[0].config is None
    )
    with pytest.raises(BadInput, match="do not pair up"):
        make_duts([str(exe), str(other)], [str(a), str(b), str(c)])
    with pytest.raises(BadInput, match="DUT 2 is DUT 1 again"):
        make_duts(None, [str(a), str(a)])
    with pytest.raises(BadInput, match="no such executable"):
        make_duts([str(tmp_path / "nope")], None)


def test_bad_duts_are_bad_input_before_any_work(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert (
        main(
            [
                "ids-coverage",
                str(CASE),
                "--out",
                str(out),
                "-q",
                "--suricata",
                str(tmp_path / "nope"),
            ]
        )
        == 2
    )
    assert "no such executable" in capsys.readouterr().err
    assert (
        main(
            [
                "ids-coverage",
                str(CASE),
                "--out",
                str(out),
                "-q",
                "--suricata-config",
                str(tmp_path / "x.yaml"),
            ]
        )
        == 2
    )
    assert "x.yaml: no such Suricata configuration file" in capsys.readouterr().err
    assert not out.exists()


# ---- the per-sid comparison of --mix, and the Parquet table ----


def test_mixes_are_compared_per_sid_when_both_documents_have_their_rows() -> None:
    from testbed.ids.coverage import blocking, compare_docs

    old = _doc(_row(1), _row(2)) | {
        "mixes": {"0.1": _doc(_row(1), _row(2)), "0.5": {"coverage": 1.0}}
    }
    new = _doc(_row(1), _row(2)) | {
        "mixes": {
            "0.1": _doc(_row(1), _row(2, "missed")),
            "0.5": _doc(_row(1)),
            "0.9": _doc(_row(1)),
        }
    }
    cmp = compare_docs(old, new, {}, path="old.json", allow_path=None)
    assert cmp["blocking_sids"] == []
    assert cmp["mixes"]["0.1"]["compared"] and cmp["mixes"]["0.1"]["blocking_sids"] == [2]
    assert cmp["mixes"]["0.5"] == {
        "compared": False,
        "why": "its mix has no per-sid rows (written before they were kept)",
    }
    assert cmp["mixes"]["0.9"]["why"] == "it was not mixed at this fraction"
    assert blocking([new | {"baseline": cmp}]) == [("the baseline, mixed at 0.1", [2])]
    allowed = compare_docs(
        old, new, {2: "flaky under load"}, path="old.json", allow_path="allow.txt"
    )
    assert (
        allowed["mixes"]["0.1"]["blocking_sids"] == []
        and allowed["mixes"]["0.1"]["newly_failing"][0]["allowed"]
    )


def test_a_mix_baseline_catches_a_sid_that_fails_only_under_load(
    configs, flowengine_bin, tmp_path: Path, capsys
) -> None:
    if shutil.which("mergecap") is None:
        skip_or_fail("mergecap is not installed (apt-get install wireshark-common)")
    prod, off = configs
    base = tmp_path / "base"
    assert (
        main(
            [
                "ids-coverage",
                str(CASE),
                "--out",
                str(base),
                "-q",
                "--mix",
                "0.5",
                "--suricata-config",
                str(prod),
            ]
        )
        == 0
    )
    doc = json.loads((base / "coverage.json").read_text())
    assert [r["state"] for r in doc["mixes"]["0.5"]["rows"]] == ["alerted"] * 4
    capsys.readouterr()
    out = tmp_path / "now"
    code = main(
        [
            "ids-coverage",
            str(CASE),
            "--out",
            str(out),
            "-q",
            "--mix",
            "0.5,0.25",
            "--suricata-config",
            str(off),
            "--baseline",
            str(base / "coverage.json"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 3, err
    cmp = json.loads((out / "coverage.json").read_text())["baseline"]
    assert cmp["blocking_sids"] == HTTP_SIDS and cmp["mixes"]["0.5"]["blocking_sids"] == HTTP_SIDS
    assert cmp["mixes"]["0.25"] == {"compared": False, "why": "it was not mixed at this fraction"}
    assert "baseline, mixed at 0.5: sid" not in err  # the same sids as unmixed: not listed twice
    assert (
        f"baseline {base / 'coverage.json'}, mixed at 0.5 (4 of them also unmixed, not listed again)"
        in err
    )
    assert "mixed at 0.25: not compared: it was not mixed at this fraction" in err
    from analysis.tables import read_table

    table = read_table(out, "coverage").to_pandas()
    assert sorted(table["mix"].dropna().unique()) == [0.25, 0.5] and set(table["step"]) == {"run"}
    assert len(table) == 12 and table[table["mix"] == 0.5]["alerted"].sum() == 0


def test_one_dut_writes_the_coverage_run_table(baseline: Path) -> None:
    from analysis.tables import read_table

    table = read_table(baseline.parent, "coverage").to_pandas()
    assert list(table["sid"]) == HTTP_SIDS and table["alerted"].all()
    assert set(table["run_id"]) == {baseline.parent.name} and set(table["step"]) == {"run"}
    doc = json.loads(baseline.read_text())
    assert set(table["ids_version"]) == {doc["ids_version"]} and doc["dut"]["config"] is None


# ---- a scenario's attack coverage against a baseline (`testbed run --coverage-baseline`) ----

SCENARIO = """\
version: 1
name: gate
flows:
  - {protocol: udp, src: 198.18.200.1, dst: 198.19.200.1, dst_port: 9000, rate: 1000, packets: 200,
     payload: {size: 100}}
attacks:
  rules: [demo.rules]
  count: 6
  rate: 20
  ids: suricata
"""
DEMO_RULES = Path(__file__).resolve().parents[1] / "scenarios" / "rules" / "attacks-demo.rules"
DEMO_HTTP_SIDS = [9100001, 9100002, 9100003]  # its HTTP rules; 9100004-6 are TCP, UDP, DNS


def _run(scenario: Path, out: Path, *extra: str, path_first: Path | None = None):
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    if path_first is not None:  # `suricata` on PATH is the DUT of a scenario run
        env["PATH"] = f"{path_first}:{env['PATH']}"
    return subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(scenario), "--out", str(out), "-q", *extra],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        timeout=600,
    )


def test_a_scenario_run_against_a_coverage_baseline_fails_when_the_dut_loses_sids(
    wrapper: Path, flowengine_bin, tmp_path: Path
) -> None:
    from analysis.tables import read_table

    if shutil.which("mergecap") is None:
        skip_or_fail("mergecap is not installed (apt-get install wireshark-common)")
    shutil.copy(DEMO_RULES, tmp_path / "demo.rules")
    scenario = tmp_path / "gate.yaml"
    scenario.write_text(SCENARIO)
    first = _run(scenario, tmp_path / "base")
    assert first.returncode == 0, first.stderr
    (run_dir,) = (tmp_path / "base").iterdir()
    old = run_dir / "coverage.json"
    assert json.loads(old.read_text())["alerted"] == 6
    table = read_table(run_dir, "coverage").to_pandas()  # the run's own coverage table
    assert set(table["run_id"]) == {run_dir.name} and table["alerted"].sum() == 6
    # the same scenario, the DUT now a Suricata without its HTTP parser (the wrapper as `suricata`)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "suricata").symlink_to(wrapper)
    same = _run(scenario, tmp_path / "same", "--coverage-baseline", str(old))
    assert same.returncode == 0, same.stderr
    broken = _run(
        scenario, tmp_path / "broken", "--coverage-baseline", str(old), path_first=bin_dir
    )
    assert broken.returncode == 3, broken.stdout + broken.stderr
    for sid in DEMO_HTTP_SIDS:
        assert f"attacks: baseline: sid {sid} newly failing (alerted -> missed)" in broken.stderr
    assert (
        "attacks: coverage gate: 3 sids alerted in the baseline and do not now (sids 9100001, 9100002, "
        "9100003)" in broken.stderr
    )
    (run_dir,) = (tmp_path / "broken").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["attacks"]["baseline"]["blocking"] == [
        {"what": "the baseline", "sids": DEMO_HTTP_SIDS}
    ]
    assert (
        json.loads((run_dir / "coverage.json").read_text())["baseline"]["blocking_sids"]
        == DEMO_HTTP_SIDS
    )
    allow = tmp_path / "allow.txt"
    allow.write_text("".join(f"{sid} no HTTP parser in this build\n" for sid in DEMO_HTTP_SIDS))
    allowed = _run(
        scenario,
        tmp_path / "allowed",
        "--coverage-baseline",
        str(old),
        "--coverage-allow",
        str(allow),
        path_first=bin_dir,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert "[allowed: no HTTP parser in this build]" in allowed.stderr


def test_a_coverage_baseline_for_a_scenario_without_coverage_is_bad_input(tmp_path: Path) -> None:
    shutil.copy(DEMO_RULES, tmp_path / "demo.rules")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_doc(_row(1))))
    plain = tmp_path / "plain.yaml"
    plain.write_text(SCENARIO.replace("  ids: suricata\n", ""))
    r = _run(plain, tmp_path / "out", "--coverage-baseline", str(old))
    assert (
        r.returncode == 2
        and "--coverage-baseline needs coverage: a scenario with an `attacks:` section "
        "with `ids: suricata`"
        in r.stderr
    )
    r = _run(plain, tmp_path / "out", "--coverage-allow", str(old))
    assert r.returncode == 2 and "--coverage-allow needs --coverage-baseline" in r.stderr
    with_ids = tmp_path / "ids.yaml"
    with_ids.write_text(SCENARIO)
    r = _run(with_ids, tmp_path / "out", "--coverage-baseline", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "cannot read it" in r.stderr
    assert not (tmp_path / "out").exists()
