"""The tcpreplay adapter (generators.replay) sending into a real veth pair in test namespaces.

Every run is bounded in packets or seconds; namespaces are deleted again also on failure. The
adapter's counters are compared with the peer veth's rx counter, which nothing else touches.
"""

import shutil
import time
from pathlib import Path

import pytest

from generators.replay import ReplaySpec as GeneratorSpec
from generators.replay import parse_stats
from ntgcore.errors import GeneratorError
from ntgcore.generator import get_generator
from ntgcore.scenario import parse_scenario
from testbed.endpoints.netns import NetnsEndpoint as Endpoint

LIVE = [
    pytest.mark.usefixtures("root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 (`ip netns`) is not installed"),
    pytest.mark.skipif(
        shutil.which("tcpreplay") is None,
        reason="tcpreplay is not installed (apt-get install tcpreplay)",
    ),
]


def live(test):
    for mark in LIVE:
        test = mark(test)
    return test


def scenario(packets=500, rate="10kpps"):
    return parse_scenario(f"""
version: 1
name: replay-test
flows:
  - protocol: udp
    src: 198.18.0.1
    dst: 198.19.0.0/24
    dst_port: 9
    rate: {rate}
    packets: {packets}
    payload: {{size: 18-200}}
  - protocol: tcp
    src: 2001:db8::1
    dst: 2001:db8::2
    dst_port: 80
    rate: 1000
    packets: 20
""")


def run(gen, pair, timeout=30):
    before = pair.rx()
    gen.start()
    assert gen.wait(timeout), "tcpreplay did not finish in time"
    return pair.rx() - before


@live
def test_replays_the_scenario_compiled_by_the_engine(flowengine_bin, pair, tmp_path):
    gen = get_generator("tcpreplay")
    gen.prepare(scenario(), tmp_path, 7, Endpoint(pair.gen, "veth0"))
    assert (tmp_path / "tcpreplay-input" / "capture.pcap").is_file()
    assert [c.name for c in gen.commands()] == ["flowengine", "tcpreplay"]
    rx = run(gen, pair)
    c = gen.counters()
    assert gen.status() == "completed"
    assert c.packets_sent == rx == 520 and c.packets_failed == 0
    assert c.packets_attempted == 520 and c.bytes_sent == c.bytes_attempted > 520 * 60
    assert "--topspeed" not in gen.commands()[-1].argv  # realtime: the pcap's time stamps
    assert gen.version().startswith("tcpreplay version")


@live
def test_given_pcap_looped_and_preloaded(flowengine_bin, pair, tmp_path):
    (tmp_path / "a").mkdir()  # a pcap of 320 frames, compiled by the adapter itself
    get_generator("tcpreplay").prepare(
        scenario(packets=300), tmp_path / "a", 1, Endpoint(pair.gen, "veth0")
    )
    pcap = tmp_path / "a" / "tcpreplay-input" / "capture.pcap"
    spec = GeneratorSpec(name="tcpreplay", pcap=str(pcap), loop=3, preload=True)
    gen = get_generator("tcpreplay", spec)
    gen.prepare(scenario(), tmp_path, 1, Endpoint(pair.gen, "veth0", pace="topspeed"))
    argv = gen.commands()[-1].argv
    assert "--topspeed" in argv and "--loop=3" in argv and "--preload-pcap" in argv
    assert len(gen.commands()) == 1  # nothing compiled: the pcap was given
    rx = run(gen, pair)
    assert gen.counters().packets_sent == rx == 3 * 320


@live
def test_topspeed_duration_stops_by_itself(flowengine_bin, pair, tmp_path):
    gen = get_generator("tcpreplay")
    gen.prepare(
        scenario(packets=2000),
        tmp_path,
        1,
        Endpoint(pair.gen, "veth0", pace="topspeed", duration_s=2),
    )
    assert "--duration=2" in gen.commands()[-1].argv and "--loop=0" in gen.commands()[-1].argv
    t0 = time.monotonic()
    rx = run(gen, pair, timeout=20)
    took = time.monotonic() - t0
    c = gen.counters()
    assert gen.status() == "completed" and 1.5 < took < 15
    assert c.packets_sent == rx > 2020  # looped: more than one pass of the file


@live
def test_interrupted_counters_still_parsed(flowengine_bin, pair, tmp_path):
    gen = get_generator("tcpreplay")
    gen.prepare(scenario(packets=20_000, rate=2000), tmp_path, 1, Endpoint(pair.gen, "veth0"))
    before = pair.rx()
    gen.start()
    assert not gen.wait(0.8)
    gen.stop(interrupt=True)
    rx = pair.rx() - before
    c = gen.counters()
    assert gen.status() == "interrupted"
    assert 100 < c.packets_sent < 20_000
    assert c.packets_sent == rx
    gen.stop()  # again: harmless


def test_needs_a_live_endpoint(tmp_path):
    with pytest.raises(GeneratorError, match="testbed:"):
        get_generator("tcpreplay").prepare(scenario(), tmp_path, 1, None)


@live
def test_missing_pcap(tmp_path):
    gen = get_generator(
        "tcpreplay", GeneratorSpec(name="tcpreplay", pcap=str(tmp_path / "no.pcap"))
    )
    with pytest.raises(GeneratorError, match="no.pcap does not exist"):
        gen.prepare(scenario(), tmp_path, 1, Endpoint("ntgtest-x", "veth0"))


def test_parse_stats():
    text = (
        "Warning: x\nActual: 12 packets (840 bytes) sent in 0.01 seconds\nRated: 1 Bps\n"
        "Statistics for network device: veth0\n\tSuccessful packets:        11\n"
        "\tFailed packets:            1\n\tTruncated packets:         0\n"
    )
    assert parse_stats(text) == {
        "actual_packets": 12,
        "actual_bytes": 840,
        "successful": 11,
        "failed": 1,
        "truncated": 0,
    }
    assert parse_stats("tcpreplay: fatal error") is None


@live
def test_replays_two_way_sessions_compiled_by_the_engine(flowengine_bin, pair, tmp_path):
    """tcpreplay has the `sessions` capability: it replays what the engine writes for them."""
    s = parse_scenario(
        (Path(__file__).resolve().parent.parent / "scenarios" / "learned-web.yaml").read_text()
    )
    gen = get_generator("tcpreplay")
    gen.prepare(s, tmp_path, 7, Endpoint(pair.gen, "veth0"))
    rx = run(gen, pair, timeout=60)
    c = gen.counters()
    assert gen.status() == "completed"
    assert c.packets_sent == rx == 5749 and c.packets_failed == 0  # the capture hash's packets
