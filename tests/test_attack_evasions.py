"""Evasion variants in a scenario's `attacks:` section (`attacks.evasions`, `attacks.plain`):
validation at file:line, the variant sessions written on their own addresses in schedule slots and
listed in attacks.json, the refusal of a generator that plays the attacks over its own TCP stack,
and an offline run with `ids: suricata` scored against the live lab's labels (real Suricata,
real namespaces: the scored run needs root).

Quick: two or three demonstration rules (scenarios/rules/attacks-demo.rules) and one or two
classes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import LIVE_SURICATA, attack_scenario

from generators.trex import PLUGIN
from idsrules.attacks import AttackError, write_attacks
from idsrules.evasion import CLASSES
from ntgcore.errors import RunSetupError
from ntgcore.registry import GENERATORS
from ntgcore.scenario import (
    EVASION_CLASSES,
    ScenarioError,
    attack_rule_paths,
    json_schema,
    load_scenario,
)
from testbed.ids.attack_evasions import write_varied_attacks
from testbed.ids.runhooks import HOOKS, played_attacks_problem
from testbed.runner import Run

ROOT = Path(__file__).resolve().parents[1]
DEMO_RULES = ROOT / "scenarios" / "rules" / "attacks-demo.rules"
HTTP_SID, RAW_TCP_SID, UDP_SID = 9100001, 9100004, 9100005
ASTF = (
    "testbed:\n  topology: astf\n  generators: [{name: trex, at: 'gen:gen0', mode: astf,"
    " server_iface: gen1, response_bytes: 112}]\n"
    "  capture: {at: 'gen:gen1', also_at: ['gen:gen0'], snaplen: 2048}\n"
)


def write(tmp_path: Path, attacks: str, *, name: str = "ev", extra: str = "") -> Path:
    return attack_scenario(tmp_path, attacks, name=name, extra=extra, packets=200)


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    return info.value.problems


# --- validation -----------------------------------------------------------------------------------
def test_the_scenario_knows_the_evasion_classes_of_the_rule_library():
    assert EVASION_CLASSES == tuple(CLASSES)


def test_an_unknown_class_is_named_at_its_line_with_the_known_ones(tmp_path):
    path = write(tmp_path, "rules: [demo.rules]\nevasions: [insertion, tcp-segs]")
    (problem,) = problems_of(path)
    line = line_of(path, "evasions:")
    assert problem.startswith(f"{path}:{line}: attacks.evasions: unknown evasion class 'tcp-segs'")
    assert "did you mean 'tcp-seg'?" in problem
    assert "use all or some of " + ", ".join(CLASSES) in problem
    bad = write(tmp_path, "rules: [demo.rules]\nevasions: 7\nplain: maybe", name="bad")
    assert [p.split(": ")[1] for p in problems_of(bad)] == ["attacks.evasions", "attacks.plain"]


def test_all_and_a_list_give_the_classes_in_the_library_order(tmp_path):
    every = load_scenario(write(tmp_path, "rules: [demo.rules]\nevasions: all")).scenario.attacks
    assert every is not None and every.evasions == list(CLASSES) and every.plain
    some = write(tmp_path, "rules: [demo.rules]\nevasions: [urgent, insertion]\nplain: false")
    spec = load_scenario(some).scenario.attacks
    assert spec is not None and spec.evasions == ["insertion", "urgent"] and not spec.plain
    none = load_scenario(write(tmp_path, "rules: [demo.rules]")).scenario.attacks
    assert none is not None and none.evasions == [] and none.plain


def test_the_json_schema_takes_all_or_a_list_of_known_classes(tmp_path):
    schema = json_schema()
    for good in ("evasions: all", "evasions: [insertion, urgent]\nplain: false"):
        jsonschema.validate(
            yaml.safe_load(write(tmp_path, "rules: [x]\n" + good).read_text()), schema
        )
    for bad in ("evasions: [insertions]", "evasions: some", "plain: 3"):
        doc = yaml.safe_load(write(tmp_path, "rules: [x]\n" + bad).read_text())
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, schema)


def test_a_generator_that_plays_the_attacks_itself_cannot_send_variants(tmp_path):
    if "trex" not in GENERATORS:
        GENERATORS.register("trex", PLUGIN)
    text = "rules: [demo.rules]\ncount: 4\nevasions: [insertion]"
    path = write(tmp_path, text, extra=ASTF)
    loaded = load_scenario(path)
    assert "attacks.evasions: trex plays the attack sessions" in str(
        played_attacks_problem(loaded.scenario)
    )
    with pytest.raises(
        RunSetupError, match=rf"^{path}:{line_of(path, 'evasions:')}: attacks.evasions: trex plays"
    ):
        HOOKS.check(loaded, {})
    with pytest.raises(RunSetupError, match="cannot send evasion variants"):
        Run(loaded, tmp_path / "runs")
    plain = load_scenario(write(tmp_path, "rules: [demo.rules]", extra=ASTF, name="plain"))
    assert played_attacks_problem(plain.scenario) is None


# --- writing --------------------------------------------------------------------------------------
def varied(tmp_path: Path, attacks: str, out: str = "out", seed: int = 1):
    loaded = load_scenario(write(tmp_path, attacks))
    spec = loaded.scenario.attacks
    assert spec is not None
    rules = attack_rule_paths(spec, loaded.path)
    return spec, rules, write_varied_attacks(spec, rules, tmp_path / out, seed=seed)


@pytest.fixture(scope="module")
def mergecap():
    if shutil.which("mergecap") is None:
        pytest.skip("mergecap is not installed (apt-get install wireshark-common)")


@pytest.mark.usefixtures("mergecap")
def test_every_variant_is_a_session_of_its_own_in_a_slot_of_the_schedule(tmp_path):
    sids = f"[{HTTP_SID}, {RAW_TCP_SID}, {UDP_SID}]"
    attacks = f"rules: [demo.rules]\nselect: {{sids: {sids}}}\ncount: 4\nrate: 100\nstart: 10ms"
    _spec, _rules, res = varied(tmp_path, attacks + "\nevasions: [insertion, urgent]")
    doc = json.loads(res.manifest.read_text())
    plain, var = doc["sessions"], doc["variant_sessions"]
    # instances 0..3: 9100001, 9100004, 9100005, 9100001; 7 variants per TCP instance
    assert [(s["sid"], s["instance"], s["variant"]) for s in plain] == [
        (HTTP_SID, 0, "plain"),
        (RAW_TCP_SID, 1, "plain"),
        (UDP_SID, 2, "plain"),
        (HTTP_SID, 3, "plain"),
    ]
    assert [v["instance"] for v in var] == [0] * 7 + [1] * 7 + [3] * 7
    assert {v["variant"] for v in var} == {
        "ins-bad-checksum",
        "ins-ttl",
        "ins-no-ack",
        "ins-outside-window",
        "ins-rst-outside-window",
        "ins-syn-established",
        "urgent-byte",
    }
    assert {v["class"] for v in var} == {"insertion", "urgent"}
    assert doc["attacks"]["no_variants"] == {
        str(UDP_SID): "no variant of a udp session in insertion, urgent"
    }
    every = plain + var
    pairs = {frozenset((s["client"], s["server"])) for s in every}
    assert len(pairs) == len(every) == 25  # an address pair per session
    # slot j is due 10 ms + j x 10 ms; a session starts then or after the one before
    order = sorted(every, key=lambda s: s["start_ns"])
    assert order[0]["start_ns"] == 10_000_000
    for j, (a, b) in enumerate(zip(order, order[1:]), start=1):
        assert b["start_ns"] >= max(a["end_ns"], 10_000_000 + j * 10_000_000)
    assert sum(s["packets"] for s in every) == doc["packets"] == res.summary()["packets"]
    # the merged capture holds every packet, in time order
    r = subprocess.run(
        ["capinfos", "-c", "-o", "-M", str(res.pcap)], capture_output=True, text=True, check=True
    )
    assert f"Number of packets:   {doc['packets']}" in r.stdout
    assert "Strict time order:   True" in r.stdout


@pytest.mark.usefixtures("mergecap")
def test_the_same_seed_gives_the_same_capture_and_plain_false_sends_variants_only(tmp_path):
    attacks = f"rules: [demo.rules]\nselect: {{sids: [{HTTP_SID}, {UDP_SID}]}}\ncount: 2\n"
    _s, _r, a = varied(tmp_path, attacks + "evasions: [tcp-seg]", out="a")
    _s, _r, b = varied(tmp_path, attacks + "evasions: [tcp-seg]", out="b")
    _s, _r, c = varied(tmp_path, attacks + "evasions: [tcp-seg]", out="c", seed=2)
    assert a.pcap.read_bytes() == b.pcap.read_bytes()
    assert a.pcap.read_bytes() != c.pcap.read_bytes()  # tcp-seg-random draws from the seed
    _s, _r, d = varied(tmp_path, attacks + "evasions: [tcp-seg]\nplain: false", out="d")
    doc = json.loads(d.manifest.read_text())
    # the UDP rule has no tcp-seg variant: it goes plain whatever `plain` says
    assert [(s["sid"], s["variant"]) for s in doc["sessions"]] == [(UDP_SID, "plain")]
    assert {v["sid"] for v in doc["variant_sessions"]} == {HTTP_SID}
    assert d.synth.failed[HTTP_SID] == "sent only as evasion variants (attacks.plain: false)"


@pytest.mark.usefixtures("mergecap")
def test_without_evasions_the_attack_capture_is_unchanged(tmp_path):
    attacks = "rules: [demo.rules]\ncount: 6\nrate: 50"
    loaded = load_scenario(write(tmp_path, attacks))
    spec = loaded.scenario.attacks
    assert spec is not None
    rules = attack_rule_paths(spec, loaded.path)
    before = write_attacks(spec, rules, tmp_path / "a").pcap.read_bytes()
    again = load_scenario(write(tmp_path, attacks + "\nevasions: []\nplain: true")).scenario
    assert again.attacks is not None
    assert write_attacks(again.attacks, rules, tmp_path / "b").pcap.read_bytes() == before


# --- an offline run scored with Suricata and the live lab ----------------------------------------
@pytest.fixture(scope="module")
def scored_run(tmp_path_factory, flowengine_bin, suricata, root):
    if shutil.which("mergecap") is None:
        pytest.skip("mergecap is not installed (apt-get install wireshark-common)")
    tmp = tmp_path_factory.mktemp("attack-evasions")
    path = write(
        tmp,
        f"""
        rules: [demo.rules]
        select: {{sids: [{HTTP_SID}, {RAW_TCP_SID}]}}
        count: 2
        rate: 50
        start: 20ms
        ids: suricata
        evasions: [insertion]
        """,
    )
    r = subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(path), "--out", str(tmp / "runs")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (run_dir,) = [p for p in (tmp / "runs").iterdir() if p.is_dir()]
    return run_dir, r.stdout + r.stderr


def test_the_variants_are_scored_against_the_hosts_labels(scored_run):
    run_dir, stdout = scored_run
    rows = pq.read_table(run_dir / "tables" / "coverage_evasion.parquet").to_pylist()
    assert len(rows) == 12  # 6 insertion variants of each of the two instances
    assert {(r["run_id"], r["step"], r["config"]) for r in rows} == {
        (run_dir.name, "attacks", "default")
    }
    outcome = {(r["sid"], r["variant"]): r["outcome"] for r in rows}
    # docs/evasion-matrix.md, Suricata 7.0.10: the host reads an HTTP request whose TTL-limited
    # junk Suricata took instead; a bad checksum Suricata drops as the host does
    assert outcome[(HTTP_SID, "ins-ttl")] == "evaded"
    assert outcome[(HTTP_SID, "ins-bad-checksum")] == "detected"
    assert all(r["host_reached"] is not None for r in rows)
    assert all(r["outcome"] in ("detected", "evaded") for r in rows)
    ev = json.loads((run_dir / "evasion.json").read_text())
    assert ev["classes"] == ["insertion"] and ev["unlabelled"] is None
    assert HTTP_SID in ev["summary"]["evaded"]["default"]["ins-ttl"]
    md = (run_dir / "evasion.md").read_text()
    assert "| ins-ttl | 1 | 1 |" in md or "| ins-ttl | 0 | 2 |" in md
    manifest = json.loads((run_dir / "manifest.json").read_text())
    summary = manifest["attacks"]["evasions"]
    assert summary["variant_sessions"] == 12 and HTTP_SID in summary["evaded"]["ins-ttl"]
    assert sum(summary["outcomes"].values()) == 12
    assert (
        f"attacks: evasions: 12 variant sessions: {summary['outcomes']['detected']} detected"
        in ("\n".join(manifest.get("messages", [])) + stdout)
    )
    # the plain coverage is today's: both rules alert on their plain sessions
    assert manifest["attacks"]["coverage"]["alerted"] == 2
    attacks = json.loads((run_dir / "attacks.json").read_text())
    assert len(attacks["variant_sessions"]) == 12 and attacks["attacks"]["evasions"] == [
        "insertion"
    ]


def test_more_sessions_than_address_pairs_is_refused_before_writing(tmp_path):
    with pytest.raises(AttackError, match=r"lower attacks.count \(now 1,000,000\)"):
        varied(tmp_path, "rules: [demo.rules]\ncount: 1000000\nevasions: all")
    assert not (tmp_path / "out").exists()


# --- live: the variants are replayed with the attack pcap -----------------------------------------
@pytest.mark.ntg_live
@pytest.mark.usefixtures("root", "suricata")
def test_live_the_variants_are_replayed_with_the_attack_pcap(
    tmp_path, run_scenario, flowengine_bin
):
    if shutil.which("tcpreplay") is None:
        pytest.skip("tcpreplay is not installed")
    path = write(
        tmp_path,
        f"""
        rules: [demo.rules]
        select: {{sids: [{HTTP_SID}]}}
        count: 2
        rate: 20
        evasions: [insertion]
        """,
        name="liveev",
        extra=LIVE_SURICATA,
    )
    run = run_scenario(path)
    assert run.ok, run.messages
    attacks = json.loads((run.run_dir / "attacks" / "attacks.json").read_text())
    assert len(attacks["sessions"]) == 2 and len(attacks["variant_sessions"]) == 12
    step = run.manifest["steps"][0]
    assert step["generators"]["attacks"]["packets_sent"] == attacks["packets"]
    info = run.manifest["attacks"]
    assert info["variant_sessions"] == 12 and info["plain_sessions"] == 2
    eve = next(run.run_dir.rglob("eve.json"))
    pairs = {
        frozenset((e["src_ip"], e["dest_ip"]))
        for e in map(json.loads, eve.read_text().splitlines())
        if e.get("event_type") == "alert" and e["alert"]["signature_id"] == HTTP_SID
    }
    plain = {frozenset((s["client"], s["server"])) for s in attacks["sessions"]}
    variant = {frozenset((s["client"], s["server"])) for s in attacks["variant_sessions"]}
    assert plain <= pairs and pairs & variant  # the DUT saw the variants too
