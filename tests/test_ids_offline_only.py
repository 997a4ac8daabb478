"""Rules that list their own addresses (IP-reputation lists: `alert ip [203.0.113.0/24,...] any ->
$HOME_NET any`): their sessions take an address of the list, which may lie outside the test ranges
(198.18.0.0/15, 2001:db8::/32). Writing such an address into a pcap is fine, sending it is not
(the network-safety rules): the offline coverage run scores them, and every path that puts
rule-derived sessions on a wire leaves them out and says why. Real code paths: the live run's
set-up writes the pcap its tcpreplay generator would send, and the test reads that pcap."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.utils import rdpcap

from idsrules.attacks import tcp_dialogues, write_attacks
from idsrules.semantics import analyze, load_rules
from idsrules.syntax import parse_rule_text
from ntgcore.packets import in_benchmark_networks
from ntgcore.scenario import attack_rule_paths, load_scenario
from testbed.ids.evasion import plain_plans
from testbed.ids.peers import peer_items
from testbed.runner import Run

LISTED = (
    'alert ip [203.0.113.0/24,198.51.100.0/24] any -> $HOME_NET any (msg:"listed source"; '
    "threshold: type limit, track by_src, seconds 3600, count 1; sid:9300001; rev:1;)\n"
)
PLAIN = (
    'alert tcp $EXTERNAL_NET any -> $HOME_NET 7400 (msg:"plain"; flow:established,to_server; '
    'content:"OFFLINE-ONLY-TEST"; sid:9300002; rev:1;)\n'
)
IN_RANGE = (
    'alert tcp [198.19.9.9] any -> $HOME_NET 7401 (msg:"listed in range"; '
    'flow:established,to_server; content:"IN-RANGE"; sid:9300003; rev:1;)\n'
)
FLOW = (
    "flows:\n  - {protocol: udp, src: 198.18.200.1, dst: 198.19.200.1, dst_port: 9000, "
    "rate: 1000, packets: 50, payload: {size: 100}}\n"
)


def scenario(tmp_path: Path, rules: str, *, live: bool) -> Path:
    (tmp_path / "r.rules").write_text(rules)
    testbed = "testbed:\n  generators: [{name: flowengine}]\n" if live else ""
    path = tmp_path / "s.yaml"
    path.write_text(
        f"version: 1\nname: listed\n{FLOW}attacks: {{rules: [r.rules], count: 6, rate: 100}}\n"
        + testbed
    )
    return path


def addresses(pcap: Path) -> set[str]:
    out = set()
    for pkt in rdpcap(str(pcap)):
        layer = pkt.getlayer(IP) or pkt.getlayer(IPv6)
        if layer is not None:
            out |= {layer.src, layer.dst}
    return out


def test_a_listed_address_is_chosen_from_the_list_and_marks_the_rule_offline_only():
    m = analyze(parse_rule_text(LISTED))
    assert m.supported and m.src_host == "203.0.113.1" and m.dst_host is None
    assert m.offline_only.startswith("offline only: the rule's own address 203.0.113.1")
    negated = analyze(
        parse_rule_text(
            "alert tcp [192.0.2.0/24,!192.0.2.0/25] any -> ![203.0.113.0/24] 80 (sid:9300009;)"
        )
    )
    assert negated.src_host == "192.0.2.128" and negated.dst_host is None  # past the negated half
    inside = analyze(parse_rule_text(IN_RANGE))
    assert inside.supported and inside.src_host == "198.19.9.9" and not inside.offline_only


def test_a_live_run_never_sends_an_offline_only_session(tmp_path):
    loaded = load_scenario(scenario(tmp_path, LISTED + PLAIN + IN_RANGE, live=True))
    run = Run(loaded, tmp_path / "runs")
    (step,) = run.steps
    (replay,) = [g for g in step.generators if g.title == "attacks"]
    sent = addresses(Path(replay.pcap))
    assert sent and all(in_benchmark_networks(a) for a in sent), sent
    info = run.manifest["attacks"]
    assert set(info["sids"]) == {9300002, 9300003}  # the plain rule and the in-range list
    assert info["not_sent_live"]["9300001"].startswith("offline only: the rule's own address")
    assert any("not sent live" in m and "9300001" in m for m in run.messages)
    listing = json.loads((run.run_dir / "attacks" / "attacks.json").read_text())
    assert "9300001" in listing["attacks"]["not_sent_live"]
    assert not any(s["offline_only"] for s in listing["sessions"])


def test_a_live_run_whose_only_rule_is_offline_only_is_refused(tmp_path):
    loaded = load_scenario(scenario(tmp_path, LISTED, live=True))
    with pytest.raises(Exception, match=r"no selected rule can be synthesized and sent live"):
        Run(loaded, tmp_path / "runs")


def test_offline_the_same_rules_are_written_with_their_own_addresses(tmp_path):
    loaded = load_scenario(scenario(tmp_path, LISTED + PLAIN, live=False))
    spec = loaded.scenario.attacks
    assert spec is not None
    attacks = write_attacks(spec, attack_rule_paths(spec, loaded.path), tmp_path / "out")
    assert "203.0.113.1" in addresses(attacks.pcap) and not attacks.not_live
    listed = [s for s in attacks.synth.sessions if s.sid == 9300001]
    assert listed and all(s.offline_only and s.client == "203.0.113.1" for s in listed)
    assert ipaddress.ip_address(listed[0].server) in ipaddress.ip_network("198.18.0.0/16")


def test_the_other_live_paths_leave_offline_only_rules_out_and_say_why(tmp_path):
    loaded = load_scenario(scenario(tmp_path, LISTED + PLAIN, live=False))
    spec = loaded.scenario.attacks
    assert spec is not None
    rules = attack_rule_paths(spec, loaded.path)
    # a generator that plays the dialogues over its own TCP stack (TRex ASTF)
    sessions, skipped = tcp_dialogues(spec, rules)
    assert [d["sid"] for d in sessions] == [9300002]
    assert any(s.startswith("sid 9300001 (offline only:") for s in skipped)
    models, _problems = load_rules(rules)
    # replays against real peers, and the evasion variants (labelled by the live lab)
    items, why = peer_items(models)
    assert [it.model.sid for it in items] == [9300002] and why[9300001].startswith("offline only")
    plans, why = plain_plans(models, {9300001, 9300002})
    assert set(plans) == {9300002} and why[9300001].startswith("offline only")
