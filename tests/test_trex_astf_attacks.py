"""`attacks:` played by TRex in ASTF mode through `testbed run`: the orchestration hands the rules'
TCP dialogues to the generator that plays them (GeneratorSpec.plays_attacks), TRex plays them
over its own TCP stack (real handshakes) instead of the attack pcap being replayed, the capture
keeps both directions (capture.pcap on gen1: the client side's segments; capture-gen-gen0.pcap
on gen0: the server side's), and with `ids: suricata` Suricata reads both, merged, and scores the
played sessions per sid as the pcap path does.

The planning and the refusals run without root; the live test needs root, the TRex build
($NTG_TREX_DIR), Suricata and the ET Open web-server rules ($NTG_SHARED_DATA); network safety:
one namespace with one veth pair made by the run (the packaged `astf` topology), addresses in
198.18.0.0/15, everything torn down by the run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import skip_or_fail
from test_trex_astf import needs_client, registered

from generators.trex import PLUGIN, Trex
from idsrules.attacks import tcp_dialogues
from ntgcore.errors import GeneratorError, RunSetupError
from ntgcore.registry import GENERATORS
from ntgcore.scenario import load_scenario, parse_scenario
from testbed.cli import main as cli_main
from testbed.executor import wire_points
from testbed.ids.coverage import run_coverage
from testbed.ids.detect import resolve_inputs
from testbed.ids.suricata import run_offline
from testbed.runner import Run, check_places, coverage_baseline_problem, open_site, required_tools

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "scenarios" / "rules" / "attacks-demo.rules"
# ET Open web-server rules with HTTP sessions: URI (distance, pcre), user agent, request body,
# a raw content, and one on the server's answer (to_client: its bytes are in the server side's
# segments, captured on gen0 only)
ET_WEB = [2101071, 2011035, 2023535, 2010621, 2020102, 2029885]
TO_CLIENT = 2029885
FLOW = (
    "flows:\n  - {name: web, protocol: tcp, src: 198.18.0.0/24, dst: 198.19.0.1, dst_port: 80,"
    " rate: 1000, packets: 1, payload: {text: 'GET / HTTP/1.1', size: 77},"
    " repeat: {count: 50, period: 10ms}}\n"
)
ASTF = (
    "testbed:\n  topology: astf\n  generators: [{name: trex, at: 'gen:gen0', mode: astf,"
    " server_iface: gen1, response_bytes: 112}]\n"
)
BOTH = "  capture: {at: 'gen:gen1', also_at: ['gen:gen0'], snaplen: 2048}\n"


def scenario(tmp_path: Path, attacks: str, testbed: str = ASTF + BOTH) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        f"version: 1\nname: astf-attacks\nseed: 3\ngenerator: trex\n{FLOW}"
        f"attacks: {attacks}\n{testbed}"
    )
    return path


DEMO_ATTACKS = f"{{rules: ['{DEMO}'], count: 12, rate: 20, ids: suricata}}"


# ---- planning, without root -----------------------------------------------------------------


def test_dialogues_are_on_the_rules_sides_one_server_address_per_rule(tmp_path):
    rules = tmp_path / "sides.rules"
    rules.write_text(
        'alert http $EXTERNAL_NET any -> $HOME_NET any (msg:"in"; flow:established,to_server; '
        'http.uri; content:"/ntg-in"; sid:9200001; rev:1;)\n'
        'alert http $HOME_NET any -> $EXTERNAL_NET any (msg:"out"; flow:established,to_server; '
        'http.uri; content:"/ntg-out"; sid:9200002; rev:1;)\n'
        'alert http $HOME_NET any -> $EXTERNAL_NET any (msg:"answer"; flow:established,to_client; '
        'file_data; content:"ntg-answer"; sid:9200003; rev:1;)\n'
        'alert udp $EXTERNAL_NET any -> $HOME_NET 53 (msg:"udp"; content:"x"; sid:9200004; rev:1;)\n'
    )
    s = parse_scenario(f"version: 1\nname: t\n{FLOW}attacks: {{rules: ['{rules}'], count: 7}}\n")
    sessions, skipped = tcp_dialogues(s.attacks, [rules])
    got = [(d["sid"], d["client"], d["server"], d["server_port"], d["count"]) for d in sessions]
    # $HOME_NET is 198.18/16 and $EXTERNAL_NET 198.19/16 (Suricata's configuration): clients on
    # x.x.254.1-254 of the client's side, rule k served from x.x.255.k of the server's side
    assert got == [
        (9200001, ("198.19.254.1", "198.19.254.254"), "198.18.255.1", 80, 3),
        (9200002, ("198.18.254.1", "198.18.254.254"), "198.19.255.2", 80, 2),
        (9200003, ("198.19.254.1", "198.19.254.254"), "198.18.255.3", 80, 2),
    ]
    assert skipped == ["sid 9200004 (udp)"]
    answer = sessions[2]["messages"]
    assert answer[0][0] is True and answer[-1][0] is False and b"ntg-answer" in answer[-1][1]


def test_a_live_run_hands_the_dialogues_to_the_generator_that_plays_them(tmp_path):
    loaded = load_scenario(scenario(tmp_path, DEMO_ATTACKS))
    tools = [t.command for t in required_tools(loaded.scenario)]
    assert "tcpreplay" not in tools and "suricata" in tools and "mergecap" in tools
    run = Run(loaded, tmp_path / "runs")
    (step,) = run.steps
    assert [g.title for g in step.generators] == ["trex"]  # no tcpreplay of the attack pcap
    sessions, skipped = step.attack_sessions["trex"]
    assert [d["sid"] for d in sessions] == [9100001, 9100002, 9100003, 9100004]
    assert skipped == ["sid 9100005 (udp)", "sid 9100006 (udp)"]
    info = run.manifest["attacks"]
    assert info["played_by"] == "trex" and info["played"]["sessions"] == 12
    assert info["played"]["servers"]["9100004"] == "198.18.255.4:7777"
    assert info["not_played"] == skipped and "not replayed" in info["pcap_note"]
    assert (run.run_dir / "attacks" / "attacks.pcap").is_file()  # written for reference
    assert step.params["attacks_last_s"] == 12 / 20
    assert wire_points(step, loaded.scenario.testbed) == ["gen:gen0", "gen:gen1"]
    assert coverage_baseline_problem(loaded.scenario) is None  # a live ASTF run measures coverage
    # without a generator that plays them, the attack pcap is replayed as before
    stl = load_scenario(
        scenario(
            tmp_path,
            f"{{rules: ['{DEMO}'], count: 4}}",
            testbed=("testbed:\n  topology: astf\n  generators: [{name: trex, at: 'gen:gen0'}]\n"),
        )
    )
    (plain,) = Run(stl, tmp_path / "runs").steps
    assert [g.title for g in plain.generators] == ["trex", "attacks"] and not plain.attack_sessions
    assert "live run measures no per-sid coverage" in coverage_baseline_problem(
        load_scenario(
            scenario(
                tmp_path,
                f"{{rules: ['{DEMO}'], ids: suricata}}",
                testbed=(
                    "testbed:\n  topology: astf\n  generators: [{name: trex, at: 'gen:gen0'}]\n"
                ),
            )
        ).scenario
    )


@pytest.mark.parametrize(
    "capture, message",
    [
        ("", r"reads the capture of both directions: give `testbed.capture.also_at`"),
        (
            "  capture: {at: 'gen:gen1', also_at: ['gen:gen0']}\n",
            r"testbed.capture.snaplen 128 cuts them; give at least 1514",
        ),
    ],
)
def test_scoring_played_attacks_needs_both_directions_whole(tmp_path, capture, message):
    loaded = load_scenario(scenario(tmp_path, DEMO_ATTACKS, testbed=ASTF + capture))
    with pytest.raises(RunSetupError, match=message):
        Run(loaded, tmp_path / "runs")


def test_validate_says_who_plays_the_attacks_and_what_is_missing(tmp_path, capsys):
    assert cli_main(["validate", str(scenario(tmp_path, DEMO_ATTACKS))]) == 0
    out = capsys.readouterr().out
    assert (
        "attacks: played by trex over its own TCP stack: 4 TCP rule(s); not played: sid 9100005 "
        "(udp), sid 9100006 (udp)"
    ) in out
    # what the run would refuse, validate refuses: an error on stderr, exit 2, no "ok"
    one_side = ASTF + "  capture: {at: 'gen:gen1'}\n"
    path = scenario(tmp_path, DEMO_ATTACKS, testbed=one_side)
    assert cli_main(["validate", str(path)]) == 2
    got = capsys.readouterr()
    assert f"{path}: attacks.ids: suricata with a generator that plays" in got.err
    assert "ok:" not in got.out


def test_a_capture_place_that_is_not_in_the_topology_is_named(tmp_path):
    loaded = load_scenario(
        scenario(tmp_path, DEMO_ATTACKS, testbed=ASTF + BOTH.replace("gen:gen0", "gen:gen7"))
    )
    assert check_places(loaded.scenario, open_site(loaded, unique=False)).startswith(
        "testbed.capture.also_at: `gen:gen7` is not an interface of topology ntg-astf"
    )


def test_only_astf_plays_attack_sessions():
    with pytest.raises(GeneratorError, match="trex: attack sessions are played in mode astf only"):
        Trex().give_attack_sessions([], [])
    assert PLUGIN.options(mode="astf").plays_attacks() and not PLUGIN.options().plays_attacks()
    with pytest.raises(GeneratorError, match="tcpreplay does not play attack sessions"):
        GENERATORS.get("tcpreplay").create(None).give_attack_sessions([], [])


# ---- live -----------------------------------------------------------------------------------


@needs_client
def test_web_attacks_played_by_trex_astf_are_detected_by_suricata(
    tmp_path, run_scenario, root, trex_dir, suricata_in_ci
):
    et = (
        Path(os.environ.get("NTG_SHARED_DATA", "/nonexistent"))
        / "rules"
        / "et-open"
        / "emerging-web_server.rules"
    )
    if not et.is_file():
        skip_or_fail(
            "NTG_SHARED_DATA has no rules/et-open/emerging-web_server.rules (../shared/data)"
        )
    sids = [9100001, 9100005, *ET_WEB]
    attacks = (
        f"{{rules: ['{DEMO}', '$NTG_SHARED_DATA/rules/et-open/emerging-web_server.rules'], "
        f"select: {{sids: {sids}}}, count: 16, rate: 20, ids: suricata}}"
    )
    run = run_scenario(scenario(tmp_path, attacks))
    assert run.ok, run.messages
    m, step = run.manifest, run.manifest["steps"][0]
    info = m["attacks"]
    played = [9100001, *ET_WEB]  # the UDP rule is not played
    assert info["played_by"] == "trex" and info["not_played"] == ["sid 9100005 (udp)"]
    assert sorted(int(s) for s in info["played"]["servers"]) == sorted(played)
    assert list(step["generators"]) == ["trex"]  # the attack pcap was not replayed
    # TRex's TCP counters: every attack connection attempted, established and closed
    g = step["generators"]["trex"]
    a = g["port_stats"]["astf"]
    total = 50 + 16
    assert (
        a["connections_attempted"],
        a["connections_established"],
        a["connections_closed"],
        a["server_accepted"],
        a["server_closed"],
    ) == (total,) * 5, a
    assert a["drops"] == a["connection_drops"] == a["server_drops"] == 0 and not a["errors"], a
    groups = {k.split("-", 1)[1]: v for k, v in a["templates"].items()}
    for sid in played:  # 16 sessions cycled over the 7 TCP rules in file order: the first two get 3
        n = 3 if sid in (9100001, 2101071) else 2
        c = groups[f"sid{sid}"]["client"]
        assert (c["tcps_connattempt"], c["tcps_connects"], c["tcps_closed"]) == (n, n, n), (sid, c)
    # both captures, which is which, each direction once: the rates count capture.pcap only
    caps = {c["file"]: c for c in step["captures"]}
    assert set(caps) == {"capture.pcap", "capture-gen-gen0.pcap"}
    assert (caps["capture.pcap"]["at"], caps["capture.pcap"]["counted"]) == ("gen:gen1", True)
    assert (caps["capture-gen-gen0.pcap"]["at"], caps["capture-gen-gen0.pcap"]["counted"]) == (
        "gen:gen0",
        False,
    )
    assert all((run.run_dir / f).is_file() and c["dropped_by_kernel"] == 0 for f, c in caps.items())
    client, server = g["port_stats"]["gen0"]["opackets"], g["port_stats"]["gen1"]["opackets"]
    assert (
        caps["capture.pcap"]["captured"]
        == step["wire"]["gen:gen1"]["rx_packets"]
        == client
        == g["packets_sent"]
    )
    assert (
        caps["capture-gen-gen0.pcap"]["captured"]
        == step["wire"]["gen:gen0"]["rx_packets"]
        == server
    )
    assert (
        run.metrics["packets"] == client and step["loss"]["loss_rate"] == 0
    )  # not client + server
    # Suricata on both directions merged: every played session found, the sids the pcap path alerts on
    assert info["ids_capture"]["file"] == "attacks/both-sides.pcap"
    assert info["played"]["sessions_seen"] == 16
    reference = run_coverage([DEMO, et], tmp_path / "pcap-path")
    expected = sorted(r["sid"] for r in reference["rows"] if r["alerted"] and r["sid"] in played)
    assert expected == sorted(played)  # the pcap path alerts on all of them
    assert info["alerted_sids"] == expected and info["coverage"]["coverage"] == 1.0, info[
        "coverage"
    ]
    assert info["coverage"]["extra_unrelated_sessions"] == 0
    assert (run.run_dir / "coverage.json").is_file() and (
        run.run_dir / "tables" / "coverage.parquet"
    ).is_file()
    # the server side's capture matters: the client side's segments alone make no session for Suricata
    one_side = run_offline(
        run.run_dir / "capture.pcap", [str(DEMO), str(et)], tmp_path / "one-side"
    )
    assert TO_CLIENT not in {x.sid for x in one_side.alerts}
    # `testbed detect RUN` reads both captures too
    assert resolve_inputs([run.run_dir], None).captures == [run.run_dir / f for f in caps]
