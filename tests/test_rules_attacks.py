"""The scenario `attacks:` section: validation with file:line, rule selection, the offline mix
(capture = benign + attack packets, exactly), Suricata on the mixed capture, and the live mix
(attack pcap replayed beside the benign generator into a Suricata DUT; needs root)."""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import LIVE_SURICATA, attack_scenario

from idsrules.semantics import analyze
from idsrules.syntax import parse_rule_text
from ntgcore.scenario import ScenarioError, load_scenario
from testbed.ids.coverage import extra_kind_of

ROOT = Path(__file__).resolve().parents[1]
DEMO_RULES = ROOT / "scenarios" / "rules" / "attacks-demo.rules"
needs_suricata = pytest.mark.usefixtures("suricata")


def write(tmp_path: Path, attacks: str, *, name: str = "mix", extra: str = "") -> Path:
    return attack_scenario(tmp_path, attacks, name=name, extra=extra, packets=400)


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    return info.value.problems


# --- validation -----------------------------------------------------------------------------------
def test_bad_attacks_fields_are_reported_with_file_and_line(tmp_path):
    path = write(
        tmp_path,
        """
        rules: [demo.rules]
        select: {msg: "(unclosed", colour: red}
        count: 0
        rate: -1
    """,
    )
    probs = problems_of(path)
    text = "\n".join(probs)
    assert f"{path}:13: attacks.select.msg: not a regular expression" in text
    assert f"{path}:13: attacks.select.colour: unknown key" in text
    assert f"{path}:14: attacks.count:" in text and f"{path}:15: attacks.rate:" in text


def test_missing_rule_file_and_unset_variable_name_the_line(tmp_path, monkeypatch):
    monkeypatch.delenv("NTG_NOT_SET_ANYWHERE", raising=False)
    path = write(
        tmp_path,
        """
        rules:
          - demo.rules
          - nowhere/none.rules
          - $NTG_NOT_SET_ANYWHERE/x.rules
    """,
    )
    probs = problems_of(path)
    assert probs[0].startswith(f"{path}:14: attacks.rules[1]: no such rule file")
    assert (
        probs[1].startswith(f"{path}:15: attacks.rules[2]:") and "environment variable" in probs[1]
    )
    monkeypatch.setenv("NTG_DEMO_DIR", str(tmp_path))
    ok = write(tmp_path, "rules: [$NTG_DEMO_DIR/demo.rules]", name="envok")
    assert load_scenario(ok).scenario.attacks.rules == ["$NTG_DEMO_DIR/demo.rules"]


def test_validate_counts_the_selected_rules(tmp_path):
    path = write(
        tmp_path,
        """
        rules: [demo.rules]
        select: {classtypes: [trojan-activity, web-application-attack], keywords: [content]}
    """,
    )
    r = subprocess.run(
        [sys.executable, "-m", "testbed", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "attacks: 4 of 6 rules selected" in r.stdout


def test_selection_is_the_and_of_the_given_selectors():
    from idsrules.attacks import load_selection, schedule
    from ntgcore.scenario import AttackSelect

    def sids(**kw):
        return [m.sid for m in load_selection([DEMO_RULES], AttackSelect(**kw))[0]]

    assert sids() == [9100001, 9100002, 9100003, 9100004, 9100005, 9100006]
    assert sids(classtypes=["trojan-activity"]) == [9100002, 9100005]
    assert sids(classtypes=["trojan-activity"], msg="UDP") == [9100005]
    assert sids(keywords=["pcre"]) == [9100003]
    assert sids(sids=[9100004, 9100006], keywords=["within"]) == [9100004]
    assert sids(msg="^nothing") == []
    picked = load_selection([DEMO_RULES], AttackSelect(sids=[9100002, 9100005]))[0]
    assert [m.sid for m in schedule(picked, 5)] == [9100002, 9100005, 9100002, 9100005, 9100002]


# --- offline mix --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory, flowengine_bin):
    if shutil.which("mergecap") is None:
        pytest.skip("mergecap is not installed (apt-get install wireshark-common)")
    tmp = tmp_path_factory.mktemp("attacks")
    ids = "suricata" if shutil.which("suricata") else "none"
    path = write(
        tmp,
        f"""
        rules: [demo.rules]
        count: 9
        rate: 20
        start: 50ms
        ids: {ids}
    """,
    )
    r = subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(path), "--out", str(tmp / "runs"), "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (run_dir,) = [p for p in (tmp / "runs").iterdir() if p.is_dir()]
    return run_dir


def test_capture_holds_benign_and_attack_packets_exactly(mixed_run):
    from analysis.capture import read_capture
    from analysis.metrics import flow_table

    manifest = json.loads((mixed_run / "manifest.json").read_text())
    attacks = json.loads((mixed_run / "attacks.json").read_text())
    engine = manifest["generators"]["flowengine"]["packets_sent"]
    assert engine == 400
    assert attacks["packets"] == sum(s["packets"] for s in attacks["sessions"]) > 0
    assert len(attacks["sessions"]) == 9
    cap = read_capture(mixed_run / "capture.pcap")
    assert len(cap.ts_ns) == engine + attacks["packets"]
    assert len(read_capture(mixed_run / "benign.pcap").ts_ns) == engine
    assert bool((cap.ts_ns[1:] >= cap.ts_ns[:-1]).all())  # merged by time
    # every attack session is in the capture with its packet count, at its scheduled time
    flows = flow_table(cap)
    per_pair = collections.Counter()
    for row in flows.itertuples():
        per_pair[frozenset((row.src, row.dst))] += row.packets
    for k, s in enumerate(attacks["sessions"]):
        assert per_pair[frozenset((s["client"], s["server"]))] == s["packets"], s
        assert s["start_ns"] >= 50_000_000 + k * 50_000_000
    assert attacks["sessions"][0]["start_ns"] == 50_000_000
    metrics = json.loads((mixed_run / "metrics.json").read_text())
    assert metrics["packets"] == engine + attacks["packets"]
    names = {c["name"]: c for c in metrics["checks"]}
    assert names["capture packets = benign + attack packets"]["ok"]
    assert names["benign part: packets"]["measured"] == 400 and all(
        c["ok"] for c in metrics["checks"]
    )


@needs_suricata
def test_suricata_alerts_for_the_attack_sids_in_the_mixed_capture(mixed_run):
    cov = json.loads((mixed_run / "coverage.json").read_text())
    manifest = json.loads((mixed_run / "manifest.json").read_text())
    attacks = json.loads((mixed_run / "attacks.json").read_text())
    sent = {s["sid"] for s in attacks["sessions"]}
    alerted = {r["sid"] for r in cov["rows"] if r["alerted"]}
    assert sent == {9100001, 9100002, 9100003, 9100004, 9100005, 9100006}
    assert alerted == sent
    assert manifest["attacks"]["alerted_sids"] == sorted(sent)
    eve = [
        json.loads(line) for line in (mixed_run / "suricata" / "eve.json").read_text().splitlines()
    ]
    fired = collections.Counter(
        e["alert"]["signature_id"] for e in eve if e.get("event_type") == "alert"
    )
    assert (
        set(fired) == sent and fired[9100001] >= 2
    )  # scheduled 2 of 9 times: one alert per session


def test_every_extra_alert_kind_is_counted_and_the_raw_number_kept():
    def model(text):
        return analyze(parse_rule_text(text, "t.rules", 1))

    own = model(
        'alert http any any -> any any (msg:"a"; http.uri; content:"/x/admin.php?cmd=1"; sid:1;)'
    )
    port = model('alert tcp any any -> any 80 (msg:"b"; flags:S; sid:2;)')
    part = model(
        'alert http any any -> any any (msg:"c"; http.method; content:"GET"; http.uri; content:"admin.php"; sid:3;)'
    )
    other = model('alert http any any -> any any (msg:"d"; http.uri; content:"/y/"; sid:4;)')
    generic = {2}
    assert extra_kind_of(own, port, generic) == "header_only"
    assert extra_kind_of(own, part, generic) == "overlapping"
    assert extra_kind_of(own, other, generic) == "unrelated"


# (the rule's session, the rule that also fired, the kind): contents the layout puts side by side
# (within: 3 lets it) hold the string another rule names; filler between two contents is no
# byte of the rule's; a pcre's literal bytes (a whitespace class as the blank written) and, on
# a line protocol, the run that ends the pattern ending the command line are the rule's
OWN_BYTES = [
    (
        'tcp any any -> any 25 (msg:"a"; flow:to_server; content:"QWER"; content:"T"; within:3; '
        'content:"Y"; within:3;',
        'tcp any any -> any 25 (msg:"b"; flow:to_server; content:"RTY";',
        "overlapping",
    ),
    (
        'tcp any any -> any 25 (msg:"c"; flow:to_server; content:"ab"; content:"cd"; distance:3;',
        'tcp any any -> any 25 (msg:"d"; flow:to_server; content:"baaac";',
        "unrelated",
    ),
    (
        'ftp any any -> any any (msg:"e"; flow:to_server; content:"XMKD"; '
        'pcre:"/^XMKD\\s[^\\n]{100}/smi";',
        'ftp any any -> any any (msg:"f"; flow:to_server; content:"MKD ";',
        "overlapping",
    ),
    (
        'tcp any any -> any 21 (msg:"g"; flow:to_server; content:"CWD"; pcre:"/^CWD\\s+~/smi";',
        'ftp any any -> any any (msg:"h"; flow:to_server; content:"CWD "; content:" ~|0d 0a|";',
        "overlapping",
    ),
    (
        'ftp any any -> any any (msg:"e"; flow:to_server; content:"XMKD"; '
        'pcre:"/^XMKD\\s[^\\n]{100}/smi";',
        'ftp any any -> any any (msg:"i"; content:"MKD |0d 0a|";',
        "unrelated",
    ),
]


@pytest.mark.parametrize(("own", "other", "kind"), OWN_BYTES)
def test_an_extra_alert_on_bytes_the_rules_own_matches_write_is_overlapping(own, other, kind):
    def model(body):
        return analyze(parse_rule_text(f"alert {body} sid:{abs(hash(body)) % 10**6 + 1};)"))

    assert extra_kind_of(model(own), model(other), set()) == kind


# --- live mix (root) ----------------------------------------------------------------------------
@pytest.mark.ntg_live
@pytest.mark.usefixtures("root")
@needs_suricata
def test_live_attack_replay_reaches_the_suricata_dut(tmp_path, run_scenario, flowengine_bin):
    if shutil.which("tcpreplay") is None:
        pytest.skip("tcpreplay is not installed")
    path = write(
        tmp_path,
        """
        rules: [demo.rules]
        select: {sids: [9100001, 9100004, 9100005]}
        count: 6
        rate: 20
    """,
        name="livemix",
        extra=LIVE_SURICATA,
    )
    run = run_scenario(path)
    assert run.ok, run.messages
    step = run.manifest["steps"][0]
    attacks = json.loads((run.run_dir / "attacks" / "attacks.json").read_text())
    gens = step["generators"]
    assert gens["attacks"]["packets_sent"] == attacks["packets"]
    assert step["loss"]["wire"] == 400 + attacks["packets"] == step["loss"]["sent"]
    eve = run.run_dir / "dut" / "eve.json"
    if not eve.is_file():
        eve = next(run.run_dir.rglob("eve.json"))
    fired = {
        json.loads(line)["alert"]["signature_id"]
        for line in eve.read_text().splitlines()
        if '"event_type":"alert"' in line
    }
    assert {9100001, 9100004, 9100005} <= fired


@pytest.mark.ntg_live
@pytest.mark.usefixtures("root")
def test_live_attacks_begin_start_after_the_generators(tmp_path, run_scenario, flowengine_bin):
    """`attacks.start` live: the replay is started that long after the benign generators, so the
    first attack packet on the wire is at least `start` after them (the pcap's own first time
    stamp means nothing to tcpreplay, which sends its first packet at once)."""
    from analysis.capture import address_text, read_capture

    if shutil.which("tcpreplay") is None:
        pytest.skip("tcpreplay is not installed")
    path = write(
        tmp_path,
        """
        rules: [demo.rules]
        select: {sids: [9100001, 9100004]}
        count: 2
        rate: 20
        start: 2s
    """,
        name="livestart",
        extra="testbed:\n  monitor: {hz: 2}\n",
    )
    run = run_scenario(path, analyze=False)
    assert run.ok, run.messages
    step = run.manifest["steps"][0]
    began = datetime.strptime(step["generators_started_utc"], "%Y-%m-%dT%H:%M:%S.%fZ")
    began_ns = round(began.replace(tzinfo=UTC).timestamp() * 1e6) * 1000
    attacks = json.loads((run.run_dir / "attacks" / "attacks.json").read_text())
    hosts = {a for s in attacks["sessions"] for a in (s["client"], s["server"])}
    cap = read_capture(run.run_dir / "capture.pcap")
    src = address_text(cap.ip_version, cap.src_hi, cap.src_lo)
    times = [int(t) for t, a in zip(cap.ts_ns, src) if a in hosts]
    benign = [int(t) for t, a in zip(cap.ts_ns, src) if a == "198.18.200.1"]
    assert len(times) == attacks["packets"] and len(benign) == 400
    assert min(times) >= began_ns + 2_000_000_000, (min(times) - began_ns) / 1e9
    assert min(benign) < began_ns + 1_000_000_000  # the benign flow did not wait


def test_a_generator_started_later_extends_the_step_deadline(tmp_path):
    from ntgcore.scenario import generator_spec
    from testbed.runner import plan_steps

    path = write(tmp_path, "rules: [demo.rules]\nstart: 30s", name="later", extra="testbed: {}\n")
    (step,) = plan_steps(load_scenario(path).scenario)
    before = step.deadline_s()
    step.generators = [
        *step.generators,
        generator_spec({"name": "tcpreplay", "label": "attacks", "start": "30s"}),
    ]
    assert step.deadline_s() == pytest.approx(before + 30)


@needs_suricata
def test_attacks_over_ipv6_alert_in_the_mixed_capture(tmp_path, flowengine_bin):
    if shutil.which("mergecap") is None:
        pytest.skip("mergecap is not installed (apt-get install wireshark-common)")
    path = write(
        tmp_path,
        """
        rules: [demo.rules]
        count: 6
        rate: 20
        ip_version: 6
        ids: suricata
    """,
        name="mix6",
    )
    r = subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(path), "--out", str(tmp_path / "runs"), "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    sessions = json.loads((run_dir / "attacks.json").read_text())["sessions"]
    cov = json.loads((run_dir / "coverage.json").read_text())
    assert len(sessions) == 6 and all(s["client"].startswith("2001:db8:") for s in sessions)
    assert {r["sid"] for r in cov["rows"] if r["alerted"]} == {s["sid"] for s in sessions}
