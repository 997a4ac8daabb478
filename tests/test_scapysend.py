"""The Scapy adapter (generators.scapysend) sending into a real veth pair in test namespaces.

Bounded runs only (a fixed packet count, or a 2 s duration); namespaces are deleted again also on
failure. The adapter's counters are compared with the peer veth's rx counter and with what
tcpdump (testbed.parts.tcpdump) saw.
"""

import importlib.util
import json
import shutil
import time

import pytest

from ntgcore.errors import GeneratorError
from ntgcore.generator import get_generator
from ntgcore.scenario import parse_scenario
from testbed.endpoints.netns import NetnsEndpoint as Endpoint
from testbed.parts.tcpdump import Tcpdump

LIVE = [
    pytest.mark.usefixtures("root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 (`ip netns`) is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("scapy") is None, reason="scapy is not installed"),
]


def live(test):
    for mark in LIVE:
        test = mark(test)
    return test


def scenario(packets=100, rate=1000):
    return parse_scenario(f"""
version: 1
name: scapy-test
flows:
  - protocol: udp
    src: 198.18.0.0/24
    dst: 198.19.0.7
    src_port: 5000-6000
    dst_port: 53
    rate: {rate}
    packets: {packets}
    payload: {{size: 30-90, text: "hi"}}
  - protocol: tcp
    src: 2001:db8::1
    dst: 2001:db8::2
    dst_port: 80
    rate: {rate}
    packets: {packets}
    payload: {{size: 100}}
  - protocol: icmp
    src: 198.18.0.1
    dst: 198.19.0.1
    rate: {rate}
    packets: {packets}
""")


@live
def test_topspeed_bounded_count_matches_wire_and_capture(pair, pcaplib, tmp_path):
    from analysis.capture import read_capture

    gen = get_generator("scapy")
    gen.prepare(scenario(), tmp_path, 1, Endpoint(pair.gen, "veth0", pace="topspeed"))
    plan = json.loads((tmp_path / "scapy-plan.json").read_text())
    assert [f["src"] for f in plan["flows"]] == ["198.18.0.0", "2001:db8::1", "198.18.0.1"]
    assert plan["flows"][0]["sport"] == 5000 and plan["flows"][0]["size"] == 30
    cap = Tcpdump(
        ["ip", "netns", "exec", pair.peer], "veth1", tmp_path / "cap.pcap", immediate=True
    ).start()
    before = pair.rx()
    gen.start()
    assert gen.wait(60)
    rx = pair.rx() - before
    stats = cap.stop()
    c = gen.counters()
    assert gen.status() == "completed", (tmp_path / "scapy.log").read_text()
    assert c.packets_sent == rx == stats["captured"] == 300 and c.packets_failed == 0
    frames = read_capture(tmp_path / "cap.pcap")
    # Ether+IPv4+UDP+30, Ether+IPv6+TCP+100, Ether+IPv4+ICMP+0: the engine's frame lengths.
    sizes = sorted(set(frames.wire_len.tolist()))
    assert sizes == sorted({14 + 20 + 8 + 30, 14 + 40 + 20 + 100, 14 + 20 + 8})
    assert c.bytes_sent == int(frames.wire_len.sum())
    assert set(frames.proto.tolist()) == {1, 6, 17} and 53 in set(frames.dport.tolist())
    assert gen.version().startswith("scapy ")


@live
def test_realtime_follows_the_flow_rate(pair, tmp_path):
    gen = get_generator("scapy")
    gen.prepare(scenario(packets=20, rate=50), tmp_path, 1, Endpoint(pair.gen, "veth0"))
    before = pair.rx()
    gen.start()
    assert gen.wait(60)
    s = gen.summary()
    assert gen.status() == "completed"
    assert s["sent"] == pair.rx() - before == 60
    assert s["wall_seconds"] >= 19 / 50 * 0.95  # the last packets are due at 0.38 s


@live
def test_topspeed_duration_stops_by_itself(pair, tmp_path):
    gen = get_generator("scapy")
    gen.prepare(
        scenario(packets=10),
        tmp_path,
        1,
        Endpoint(pair.gen, "veth0", pace="topspeed", duration_s=2),
    )
    before = pair.rx()
    gen.start()
    assert gen.wait(30)
    s = gen.summary()
    assert gen.status() == "completed"
    assert 1.9 <= s["wall_seconds"] < 3
    assert gen.counters().packets_sent == pair.rx() - before > 30  # went round more than once


@live
def test_stopped_mid_run_still_writes_its_summary(pair, tmp_path):
    gen = get_generator("scapy")
    gen.prepare(scenario(packets=5000, rate=100), tmp_path, 1, Endpoint(pair.gen, "veth0"))
    before = pair.rx()
    gen.start()
    time.sleep(2)  # scapy's import takes a while
    gen.stop()
    s = gen.summary()
    assert gen.status() == "interrupted" and s["signal"] == "SIGTERM" and s["exit_code"] == 143
    assert 0 < s["sent"] < 15000
    assert gen.counters().packets_sent == pair.rx() - before
    gen.stop()  # again: harmless


@live
def test_missing_interface_fails_with_the_reason(pair, tmp_path):
    gen = get_generator("scapy")
    gen.prepare(scenario(packets=5), tmp_path, 1, Endpoint(pair.gen, "nope0", pace="topspeed"))
    gen.start()
    assert gen.wait(60)
    assert gen.status() == "failed"
    assert "nope0" in gen.commands()[0].note and gen.counters().packets_sent == 0


def test_needs_a_live_endpoint(tmp_path):
    with pytest.raises(GeneratorError, match="testbed:"):
        get_generator("scapy").prepare(scenario(), tmp_path, 1, None)
