"""`testbed detect`: a capture and rules through the real Suricata, alerts per sid, expect checks.

The cases are folders of data (tests/detect_cases/<case>/: rules.rules, case.yaml with the runs,
expect files); their captures are built by tests/detect_cases/build.py. Every run's per-sid counts
are compared with plain `suricata -r PCAP -S RULES` (Suricata's own default configuration) under
the same HOME_NET, EXTERNAL_NET and checksum mode, run here on its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from conftest import skip_or_fail
from detect_cases.build import CASES as BUILDERS
from detect_cases.build import build

from testbed.cli import main

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = ROOT / "tests" / "detect_cases"
CASES = sorted(p.name for p in CASES_DIR.iterdir() if (p / "case.yaml").is_file())
RUNS = [
    (c, i)
    for c in CASES
    for i in range(len(yaml.safe_load((CASES_DIR / c / "case.yaml").read_text())["runs"]))
]

pytestmark = pytest.mark.usefixtures("suricata")


@pytest.fixture(scope="module")
def captures(tmp_path_factory, pcaplib) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("detect-captures")
    return {name: build(name, out / f"{name}.pcap") for name in BUILDERS}


def plain_suricata_counts(
    pcap: Path, rules: list[Path], home: str, external: str, checksum: str, out: Path
) -> dict[int, int]:
    """Per-sid alert counts of Suricata run by hand with its own default configuration: the
    rule files joined (-S takes one), HOME_NET/EXTERNAL_NET with --set, and the checksum mode as
    Suricata spells it: `-k all` (with pcap-file checksum checks on, since -k all alone leaves the
    auto mode of the default configuration on), `-k none`, or nothing for auto (with one packet
    thread, so that the auto mode's decision does not depend on thread timing)."""
    out.mkdir(parents=True)
    joined = out / "all.rules"
    joined.write_text("".join(Path(r).read_text() + "\n" for r in rules))
    argv = [
        "suricata",
        "-r",
        str(pcap),
        "-S",
        str(joined),
        "-l",
        str(out),
        "--set",
        f"vars.address-groups.HOME_NET={home}",
        "--set",
        f"vars.address-groups.EXTERNAL_NET={external}",
    ]
    argv += {
        "all": ["-k", "all", "--set", "pcap-file.checksum-checks=yes"],
        "none": ["-k", "none"],
        "auto": ["--runmode", "single"],
    }[checksum]
    subprocess.run(argv, check=True, capture_output=True, timeout=600)
    counts: Counter = Counter()
    with open(out / "eve.json") as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("event_type") == "alert":
                counts[ev["alert"]["signature_id"]] += 1
    return dict(counts)


def detect_counts(out: Path) -> tuple[dict, dict[int, int]]:
    doc = json.loads((out / "detect.json").read_text())
    return doc, {r["sid"]: r["alerts"] for r in doc["sids"]}


@pytest.mark.parametrize("case,run", RUNS, ids=[f"{c}-{i}" for c, i in RUNS])
def test_case_meets_its_expect_file_and_matches_plain_suricata(
    case, run, captures, tmp_path, capsys
):
    folder = CASES_DIR / case
    spec = yaml.safe_load((folder / "case.yaml").read_text())["runs"][run]
    out = tmp_path / "detect"
    code = main(
        [
            "detect",
            str(captures[case]),
            "--rules",
            str(folder / "rules.rules"),
            "--expect",
            str(folder / spec["expect"]),
            "--out",
            str(out),
            "-q",
            *spec["args"],
        ]
    )
    printed = capsys.readouterr()
    assert code == spec["exit"], printed.out + printed.err
    doc, mine = detect_counts(out)
    assert (
        (out / "eve.json").is_file()
        and (out / "detect.md").is_file()
        and (out / "detect.html").is_file()
    )
    plain = plain_suricata_counts(
        captures[case],
        [folder / "rules.rules"],
        doc["home_net"],
        doc["external_net"],
        doc["checksum_validation"],
        tmp_path / "plain",
    )
    assert mine == plain


def test_home_net_decides_inbound_rule_and_the_report_says_which_was_used(
    captures, tmp_path, capsys
):
    rules = CASES_DIR / "home_net" / "rules.rules"
    counts = {}
    for name, args in {
        "server": ["--home-net", "203.0.113.0/24"],
        "client": ["--home-net", "192.0.2.0/24"],
        "default": [],
    }.items():
        main(
            [
                "detect",
                str(captures["home_net"]),
                "--rules",
                str(rules),
                "--out",
                str(tmp_path / name),
                "-q",
                *args,
            ]
        )
        _, counts[name] = detect_counts(tmp_path / name)
    capsys.readouterr()
    assert counts["server"].get(1000001) == 2 and 1000001 not in counts["client"]
    assert counts["default"].get(1000001) == 2  # any: never lost for an address
    doc = json.loads((tmp_path / "default" / "detect.json").read_text())
    assert (
        doc["home_net"] == "any"
        and doc["external_net"] == "any"
        and "not given" in doc["home_net_reason"]
    )
    assert "HOME_NET any" in (tmp_path / "default" / "detect.md").read_text()


def test_alert_rows_have_times_msg_and_flows(captures, tmp_path, capsys):
    out = tmp_path / "d"
    main(
        [
            "detect",
            str(captures["home_net"]),
            "--rules",
            str(CASES_DIR / "home_net" / "rules.rules"),
            "--home-net",
            "203.0.113.0/24",
            "--out",
            str(out),
            "-q",
            "--top",
            "1",
        ]
    )
    capsys.readouterr()
    doc = json.loads((out / "detect.json").read_text())
    row = next(r for r in doc["sids"] if r["sid"] == 1000002)
    assert row["msg"] == "NTG HTTP GET" and row["alerts"] == 3 and row["flows"] == 3
    assert len(row["top_flows"]) == 1  # --top 1, the count says there were 3
    assert (
        row["top_flows"][0]["dest_ip"] == "203.0.113.80"
        and row["top_flows"][0]["dest_port"] == 8080
    )
    # the sessions start 1 s apart at T0 (build.py); Suricata (IDS mode) inspects a request once the
    # server has acknowledged it: the response, 6 ms into the session
    assert row["first_epoch"] == pytest.approx(1_700_000_000.006, abs=1e-6)
    assert row["last_epoch"] == pytest.approx(1_700_000_002.006, abs=1e-6)
    assert row["first_utc"] == "2023-11-14T22:13:20.006000Z"
    md = (out / "detect.md").read_text()
    assert "... and 2 more flows" in md and "TCP 192.0.2.10:40000 -> 203.0.113.80:8080" in md


def test_expect_mismatch_exits_3_and_prints_and_records_each_failed_check(
    captures, tmp_path, capsys
):
    folder = CASES_DIR / "expect_mismatch"
    out = tmp_path / "d"
    code = main(
        [
            "detect",
            str(captures["expect_mismatch"]),
            "--rules",
            str(folder / "rules.rules"),
            "--expect",
            str(folder / "expect.yaml"),
            "--out",
            str(out),
            "-q",
        ]
    )
    err = capsys.readouterr().err
    assert code == 3
    assert (
        "check 1 (wrong count on purpose): expected exactly 2 event(s)" in err and "found 1" in err
    )
    assert "check 2 (wrong client on purpose): expected at least 1" in err
    assert "src_ip was 198.18.0.10" in err  # what excluded the events
    assert "check 0" not in err
    doc = json.loads((out / "detect.json").read_text())
    assert doc["expect"]["passed"] == 1 and doc["expect"]["failed"] == 2
    assert [c["ok"] for c in doc["expect"]["checks"]] == [True, False, False]
    assert (out / "detect.md").read_text().count("| FAIL |") == 2


def test_refused_rules_are_reported_with_file_line_and_reason(captures, tmp_path, capsys):
    good = tmp_path / "good.rules"
    good.write_text((CASES_DIR / "expect_mismatch" / "rules.rules").read_text())
    bad = tmp_path / "bad.rules"
    bad.write_text(
        '# a comment\nalert http any any -> any any (msg:"typo"; contnt:"x"; sid:1000040; rev:1;)\n'
    )
    for config in ([], ["--suricata-config", "/etc/suricata/suricata.yaml"]):
        out = tmp_path / f"d{len(config)}"
        if config and not Path(config[1]).is_file():
            continue
        code = main(
            [
                "detect",
                str(captures["expect_mismatch"]),
                "--rules",
                str(good),
                str(bad),
                "--out",
                str(out),
                "-q",
                *config,
            ]
        )
        err = capsys.readouterr().err
        assert code == 0
        doc = json.loads((out / "detect.json").read_text())
        assert [(e["file"], e["line"], e["sid"]) for e in doc["load_errors"]] == [
            (str(bad), 2, 1000040)
        ]
        assert "contnt" in doc["load_errors"][0]["reason"]
        assert f"{bad}:2: suricata refused sid 1000040" in err
        assert {r["sid"] for r in doc["sids"]} == {1000030}  # the good rule still ran


@pytest.fixture(scope="module")
def attack_run(tmp_path_factory, flowengine_bin) -> Path:
    """A real offline run of scenarios/attacks-mixed.yaml: benign load plus 18 attack sessions."""
    if shutil.which("mergecap") is None:
        pytest.skip("mergecap is not installed (apt-get install wireshark-common)")
    runs = tmp_path_factory.mktemp("runs")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed",
            "run",
            "scenarios/attacks-mixed.yaml",
            "--out",
            str(runs),
            "-q",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    return run_dir


def test_run_folder_uses_its_capture_and_attack_rules_and_agrees_with_the_run(
    attack_run, monkeypatch, capsys, tmp_path
):
    monkeypatch.chdir(tmp_path)  # anywhere: the run names its rule files by absolute path
    assert main(["detect", str(attack_run), "-q"]) == 0
    capsys.readouterr()
    doc, mine = detect_counts(attack_run / "detect")
    assert doc["rule_files"] == [str(ROOT / "scenarios/rules/attacks-demo.rules")]
    assert doc["capture"] == str(attack_run / "capture.pcap")
    assert (
        doc["home_net"].startswith("[198.18.0.0/16") and "testbed's own" in doc["home_net_reason"]
    )
    # the run's own Suricata pass (coverage, -k all) on the same capture counted the same per sid
    run_eve = [
        json.loads(line) for line in (attack_run / "suricata" / "eve.json").read_text().splitlines()
    ]
    theirs = Counter(e["alert"]["signature_id"] for e in run_eve if e.get("event_type") == "alert")
    assert mine == dict(theirs) and set(mine) == {
        9100001,
        9100002,
        9100003,
        9100004,
        9100005,
        9100006,
    }


def test_several_captures_are_merged_by_time_into_one_run(captures, tmp_path, capsys):
    rules = tmp_path / "both.rules"
    rules.write_text(
        (CASES_DIR / "home_net" / "rules.rules").read_text()
        + (CASES_DIR / "ipv6" / "rules.rules").read_text()
    )
    separate: Counter = Counter()
    for case in ("home_net", "ipv6"):
        main(
            [
                "detect",
                str(captures[case]),
                "--rules",
                str(rules),
                "--out",
                str(tmp_path / case),
                "-q",
            ]
        )
        separate.update(detect_counts(tmp_path / case)[1])
    assert (
        main(
            [
                "detect",
                str(captures["home_net"]),
                str(captures["ipv6"]),
                "--rules",
                str(rules),
                "--out",
                str(tmp_path / "both"),
                "-q",
                "--format",
                "json",
            ]
        )
        == 0
    )
    capsys.readouterr()
    doc, together = detect_counts(tmp_path / "both")
    assert together == dict(separate) and set(together) == {1000001, 1000002, 1000020, 1000021}
    assert doc["capture"] == str(tmp_path / "both" / "merged.pcap") and len(doc["captures"]) == 2
    assert not (tmp_path / "both" / "detect.md").exists()  # --format json


BAD_INPUTS = {
    "missing capture": (["nowhere.pcap"], "nowhere.pcap: no such capture file"),
    "not a capture": (["{text}"], "not a pcap or pcapng file"),
    "bad CIDR": (
        ["{pcap}", "--home-net", "192.0.2.0/33"],
        "--home-net: '192.0.2.0/33' is not an address or CIDR block",
    ),
    "bad address": (
        ["{pcap}", "--external-net", "192.0.2.0/24,nowhere"],
        "'nowhere' is not an address",
    ),
    "missing rules": (["{pcap}", "--rules", "nowhere.rules"], "nowhere.rules: no such rule file"),
    "no rules": (["{pcap}", "--rules"], "expected at least one argument"),
    "folder without capture": (["{dir}"], "a folder without capture.pcap"),
    "run without attacks": (["{run}"], "the run had no attacks"),
    "missing config": (
        ["{pcap}", "--suricata-config", "nowhere.yaml"],
        "nowhere.yaml: no such Suricata configuration",
    ),
    "bad format": (["{pcap}", "--format", "md,pdf"], "formats are md, html and json"),
    "negative top": (["{pcap}", "--top", "-1"], "must be >= 0"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_exits_2_with_a_message_and_no_traceback(name, captures, tmp_path, capsys):
    args, message = BAD_INPUTS[name]
    text = tmp_path / "notes.pcap"
    text.write_text("not a capture\n")
    (tmp_path / "empty").mkdir()
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(captures["expect_mismatch"], run / "capture.pcap")
    fill = {
        "text": str(text),
        "pcap": str(captures["expect_mismatch"]),
        "dir": str(tmp_path / "empty"),
        "run": str(run),
    }
    args = [a.format(**fill) for a in args]
    if "--rules" not in args and name not in ("run without attacks", "folder without capture"):
        args += ["--rules", str(CASES_DIR / "expect_mismatch" / "rules.rules")]
    try:
        code = main(["detect", *args, "--out", str(tmp_path / "out"), "-q"])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    "text,where",
    [
        (
            "checks:\n  - filter:\n      cout: 1\n      match: {event_type: alert}\n",
            ":3: checks[0].filter.cout: unknown key `cout`; did you mean `count`?",
        ),
        (
            "checks:\n  - filter:\n      count: -1\n      match: {event_type: alert}\n",
            ":3: checks[0].filter.count: Input should be greater than or equal to 0",
        ),
        (
            "checks:\n  - filter:\n      match: {event_type: alert}\n",
            ":3: checks[0].filter: give the expected number of events",
        ),
        (
            "checks:\n  - filter:\n      count: 1\n",
            ":2: checks[0].filter.match: required field is missing",
        ),
        ("checks:\n  - filter: {count: 1, match: {a: 1}\n", ":3: YAML syntax"),
        ("- 1\n", ":1: (top level): expected a mapping with `checks:`"),
    ],
)
def test_bad_expect_file_exits_2_with_file_line_and_field(text, where, captures, tmp_path, capsys):
    expect = tmp_path / "expect.yaml"
    expect.write_text(text)
    code = main(
        [
            "detect",
            str(captures["expect_mismatch"]),
            "--rules",
            str(CASES_DIR / "expect_mismatch" / "rules.rules"),
            "--expect",
            str(expect),
            "--out",
            str(tmp_path / "out"),
            "-q",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert f"{expect}{where}" in err, err
    assert not (tmp_path / "out" / "eve.json").exists()  # checked before Suricata runs


def _real_pcaps() -> list[Path]:
    base = os.environ.get("NTG_SHARED_DATA")
    return sorted(Path(base, "pcaps").glob("*.pcap")) if base else []


REAL = [(p.name, "auto", []) for p in _real_pcaps()] + [
    ("tcpreplay__test.pcap", mode, ["--home-net", "192.168.0.0/16,10.0.0.0/8,172.16.0.0/12"])
    for mode in ("all", "none")
]


@pytest.mark.parametrize(
    "name,mode,args",
    REAL or [("none", "auto", [])],
    ids=[f"{n}-{m}" for n, m, _ in REAL] or ["none"],
)
def test_real_captures_with_et_open_match_plain_suricata(
    name, mode, args, tmp_path, capsys, pcaplib
):
    base = os.environ.get("NTG_SHARED_DATA")
    if not base:
        skip_or_fail("NTG_SHARED_DATA is not set (.ci/run sets it to /work/shared/data)")
    pcap = Path(base, "pcaps", name)
    et = sorted(Path(base, "rules", "et-open").glob("*.rules"))
    if not pcap.is_file() or not et:
        skip_or_fail(f"{pcap} or the ET Open rules are missing under {base}")
    rules = [*et, CASES_DIR / "real_pcaps" / "rules.rules"]
    out = tmp_path / "detect"
    assert (
        main(
            [
                "detect",
                str(pcap),
                "--rules",
                *map(str, rules),
                "--checksum-validation",
                mode,
                "--out",
                str(out),
                "-q",
                *args,
            ]
        )
        == 0
    )
    print(capsys.readouterr().out)
    doc, mine = detect_counts(out)
    plain = plain_suricata_counts(
        pcap, rules, doc["home_net"], doc["external_net"], mode, tmp_path / "plain"
    )
    assert mine == plain
    assert (
        sum(mine.values()) > 0
    )  # the generic rules alert on every capture: the comparison is not 0 == 0
