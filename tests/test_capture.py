"""testbed.parts.tcpdump.Tcpdump on a real veth pair in test namespaces (testbed.topology.VethPair).

The native engine sends an exact number of frames from the `gen` namespace; tcpdump runs in the
`peer` namespace. Every run is bounded (a fixed packet count, timeouts on every process) and the
namespaces are deleted again, also when a test fails.
"""

import os
import shutil
import subprocess

import pytest

from testbed.parts.tcpdump import Tcpdump, TcpdumpError, parse_stats

LIVE = [
    pytest.mark.usefixtures("root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 (`ip netns`) is not installed"),
    pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed"),
]


def live(test):
    for mark in LIVE:
        test = mark(test)
    return test


SESSION = (
    "ntg-session 1\nseed 1\nflow af=4 proto=17 smac=02:00:00:00:00:01 "
    "dmac=02:00:00:00:00:02 src=198.18.0.1/32 src_mode=fixed dst=198.19.0.1/32 "
    "dst_mode=fixed sport=40000-40100 sport_mode=random dport=9-9 dport_mode=fixed "
    "start=0 period=1000 packets={n} size=22-22 payload=- reps=1 rep_period=0\n"
)


def send(engine, pair, tmp_path, n):
    sess = tmp_path / "s.ntg"
    sess.write_text(SESSION.format(n=n))
    p = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            pair.gen,
            str(engine),
            "gen",
            str(sess),
            "--iface",
            "veth0",
            "--pace",
            "topspeed",
            "--stats",
            os.devnull,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("immediate", [False, True])
@live
def test_captures_exactly_what_was_sent(flowengine_bin, pcaplib, pair, tmp_path, immediate):
    from analysis.capture import read_capture

    n = 3000
    before = pair.rx()
    cap = Tcpdump(
        ["ip", "netns", "exec", pair.peer], "veth1", tmp_path / "cap.pcap", immediate=immediate
    ).start()
    assert cap.running() and cap.pid == cap.record.pid
    send(flowengine_bin, pair, tmp_path, n)
    stats = cap.stop()
    assert pair.rx() - before == n
    assert stats["captured"] == n and stats["received_by_filter"] == n
    assert stats["dropped_by_kernel"] == 0
    assert stats["dropped_by_interface"] in (None, 0)
    c = read_capture(tmp_path / "cap.pcap")
    assert len(c.ts_ns) == n and c.problem is None
    assert c.ts_resolution == 10**9
    assert set(c.cap_len.tolist()) == {64} and set(c.dport.tolist()) == {9}
    assert cap.record.exit_code == 0 and cap.record.status == "exit status 0"
    assert "--time-stamp-precision=nano" in cap.record.argv and "-B" in cap.record.argv
    # Stopping twice is harmless and keeps the numbers.
    assert cap.stop() == stats and not cap.running()


@live
def test_filter_and_snaplen(flowengine_bin, pcaplib, pair, tmp_path):
    from analysis.capture import read_capture

    cap = Tcpdump(
        ["ip", "netns", "exec", pair.peer],
        "veth1",
        tmp_path / "cap.pcap",
        snaplen=40,
        bpf="udp and dst port 9",
        immediate=True,
    ).start()
    send(flowengine_bin, pair, tmp_path, 200)
    stats = cap.stop()
    assert stats["captured"] == 200
    c = read_capture(tmp_path / "cap.pcap")
    assert set(c.cap_len.tolist()) == {40} and set(c.wire_len.tolist()) == {64}

    none = Tcpdump(
        ["ip", "netns", "exec", pair.peer],
        "veth1",
        tmp_path / "none.pcap",
        bpf="tcp",
        immediate=True,
    ).start()
    send(flowengine_bin, pair, tmp_path, 100)
    assert none.stop()["captured"] == 0


@live
def test_bad_interface_is_a_clear_error(pair, tmp_path):
    cap = Tcpdump(["ip", "netns", "exec", pair.peer], "nope0", tmp_path / "x.pcap")
    with pytest.raises(TcpdumpError) as e:
        cap.start()
    msg = str(e.value)
    assert "nope0" in msg and "No such device" in msg and "ip -n NAMESPACE link" in msg
    assert cap.record.exit_code not in (None, 0) and not cap.running()
    assert cap.stop() == parse_stats("")  # harmless after a failed start


@live
def test_missing_namespace_is_a_clear_error(tmp_path):
    cap = Tcpdump(["ip", "netns", "exec", "ntgtest-does-not-exist"], "veth1", tmp_path / "x.pcap")
    with pytest.raises(TcpdumpError, match="namespace does not exist"):
        cap.start()


def test_invalid_arguments_rejected_before_running(tmp_path):
    for bad in ("", "a b", "x" * 16, "eth0;rm"):
        with pytest.raises(TcpdumpError, match="not a valid interface name"):
            Tcpdump([], bad, tmp_path / "x.pcap")
    with pytest.raises(TcpdumpError, match="positive"):
        Tcpdump([], "veth1", tmp_path / "x.pcap", snaplen=0)


def test_parse_stats():
    text = (
        "tcpdump: listening on veth1, link-type EN10MB (Ethernet), snapshot length 256 bytes\n"
        "1 packet captured\n12 packets received by filter\n3 packets dropped by kernel\n"
        "4 packets dropped by interface\n"
    )
    assert parse_stats(text) == {
        "captured": 1,
        "received_by_filter": 12,
        "dropped_by_kernel": 3,
        "dropped_by_interface": 4,
    }
    assert parse_stats("garbage") == dict.fromkeys(parse_stats(""), None)
