"""The Ostinato adapter against the real drone (Debian's `ostinato` package) on test veths.

Network safety (../shared/guide/NETWORK-SAFETY.md): every test makes its own namespaces with
VethPair (veth0 in `gen`, veth1 in `peer`, or both in one), starts drone inside with a generated
drone.ini (RPC on that namespace's 127.0.0.1, only the test's veths), and tears everything down,
also on failure. Addresses are in 198.18.0.0/15; every run is bounded in packets and time.
Counts are checked three ways: drone's getStats, the peer veth's rx counter, a tcpdump capture.
"""

import ipaddress
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from generators.ostinato import Ostinato
from generators.ostinato.drone import Drone, drone_version
from generators.ostinato.rpc import DroneError, msg
from ntgcore.errors import GeneratorError
from ntgcore.proc import Process
from ntgcore.scenario import parse_scenario
from testbed.endpoints.netns import NetnsEndpoint as Endpoint
from testbed.endpoints.netns.topology import VethPair

pytestmark = [
    pytest.mark.usefixtures("root"),
    pytest.mark.skipif(
        shutil.which("drone") is None, reason="drone is not installed (apt-get install ostinato)"
    ),
    pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed"),
]

HEAD = "version: 1\nname: t\nseed: 3\nflows:\n"


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


@pytest.fixture(autouse=True)
def no_drone_left(tmp_path):
    """After each test: no drone of this test may still run (one that does is killed, by pid)."""
    import psutil

    yield
    left = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if "drone" in " ".join(p.info["cmdline"] or []) and str(tmp_path) in str(p.environ()):
                left.append(p)
        except psutil.Error:
            continue
    for p in left:
        p.kill()
    assert not left, f"drone left running: {[p.pid for p in left]}"


@pytest.fixture
def single():
    p = VethPair(prefix="ntgtest", split=False)
    try:
        yield p.setup()
    finally:
        p.teardown()


class Tcpdump:
    """tcpdump on veth1 in the peer namespace, until stop()."""

    def __init__(self, pair, path):
        self.path = path
        self.err = path.with_suffix(".log")
        self.log = open(self.err, "wb")
        self.proc = Process(
            "tcpdump",
            [
                "ip",
                "netns",
                "exec",
                pair.peer,
                "tcpdump",
                "-i",
                "veth1",
                "-n",
                "-B",
                "16384",
                "-s",
                "256",
                "-U",
                "--immediate-mode",
                "-w",
                str(path),
            ],
            stderr=self.log,
        ).start()
        deadline = time.monotonic() + 10
        while b"listening on" not in self.err.read_bytes():
            assert time.monotonic() < deadline and self.proc.poll() is None, self.err.read_text()
            time.sleep(0.05)

    def stop(self):
        time.sleep(0.3)
        self.proc.stop(signal.SIGINT, grace=5)
        self.log.close()
        return self.err.read_text()


def run_adapter(gen, text, run_dir, endpoint, timeout=30):
    s = parse_scenario(HEAD + text)
    gen.prepare(s, run_dir, 3, endpoint)
    gen.start()
    assert gen.wait(timeout), "the adapter did not finish in time"
    return gen


def test_version_accepted_and_refused(pair, tmp_path):
    with Drone(Endpoint(pair.gen, "veth0"), ["veth0"], tmp_path) as drone:
        with drone.client() as client:  # "1.2.0"
            assert client.ports() == {"veth0": 0}
        with pytest.raises(DroneError) as err:
            drone.client(version="9.9.0")
        text = str(err.value)
        assert "Drone needs controller version 1.2.x" in text  # drone's own words
        assert "9.9.0" in text and "1.2.0" in text
        assert f"the drone here is version {drone_version()}" in text  # both sides named
    assert drone.proc.record.exit_code is not None


def test_drone_error_reply_becomes_our_exception(pair, tmp_path):
    with Drone(Endpoint(pair.gen, "veth0"), ["veth0"], tmp_path) as drone, drone.client() as client:
        with pytest.raises(DroneError, match="invalid port"):
            client.call("getStreamIdList", msg.PortId(id=99))
        with pytest.raises(DroneError, match="startTransmit failed: Port 99"):
            client.ack("startTransmit", client.port_list(99))
        assert client.ports() == {"veth0": 0}  # the connection is still usable


def test_n_packets_arrive_exactly_n_times(pair, tmp_path):
    n = 3000
    cap = Tcpdump(pair, tmp_path / "peer.pcap")
    before = pair.rx()
    gen = run_adapter(
        Ostinato(),
        "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, "
        f"src_port: 4000, dst_port: 9, rate: 30kpps, packets: {n}, payload: {{size: 22}}}}\n",
        tmp_path / "run",
        Endpoint(pair.gen, "veth0"),
    )
    log = cap.stop()
    assert gen.status() == "completed"
    stats = gen.port_stats()["veth0"]
    assert stats["tx_pkts"] == n and stats["tx_bytes"] == n * 64
    assert gen.counters().packets_sent == n
    assert pair.rx() - before == n
    assert f"\n{n} packets captured" in log and "\n0 packets dropped by kernel" in log
    assert gen.commands()[0].exit_code is not None  # drone stopped
    assert (tmp_path / "run" / "ostinato-approximations.txt").is_file()


def test_address_and_port_modes_and_stats_match_the_capture(pair, tmp_path, pcaplib):
    from analysis.capture import read_capture

    n = 300
    cap = Tcpdump(pair, tmp_path / "peer.pcap")
    gen = run_adapter(
        Ostinato(),
        (
            "  - protocol: tcp\n"
            "    src: {cidr: 198.18.0.250/24, mode: increment}\n"
            "    dst: 198.19.7.0/28\n"
            "    src_port: 49152-65535\n"
            "    dst_port: {range: 1000-1009, mode: increment}\n"
            "    rate: 1000\n    packets: 1\n"
            f"    repeat: {{count: {n}, period: 50us}}\n"
            "    payload: {size: 10-40}\n"
        ),
        tmp_path / "run",
        Endpoint(pair.gen, "veth0"),
    )
    cap.stop()
    c = read_capture(tmp_path / "peer.pcap")
    assert len(c) == n
    src = [ipaddress.ip_address(int(x)) for x in c.src_lo]
    want = [ipaddress.ip_address(f"198.18.0.{(250 + i) % 256}") for i in range(n)]
    assert src == want  # increment from .250, wrapping inside the /24
    dst = {ipaddress.ip_address(int(x)) for x in c.dst_lo}
    assert dst <= set(ipaddress.ip_network("198.19.7.0/28")) and len(dst) > 8  # random host
    assert list(c.dport) == [1000 + i % 10 for i in range(n)]
    assert all(49152 <= p <= 65535 for p in c.sport) and len(set(c.sport.tolist())) > n // 2
    assert set(c.tcp_flags.tolist()) == {0x03}  # one-packet instances: SYN|FIN, as the engine
    assert {int(x) for x in c.wire_len} <= set(range(54 + 10, 54 + 41))
    stats = gen.port_stats()["veth0"]
    assert stats["tx_pkts"] == len(c) and stats["tx_bytes"] == int(c.wire_len.sum())


def test_drone_capture_buffer_instead_of_tcpdump(single, tmp_path, pcaplib):
    from analysis.capture import read_capture

    gen = run_adapter(
        Ostinato(capture_port="veth1"),
        "  - {protocol: icmp, src: 198.18.0.1, dst: 198.18.0.2, rate: 5000, packets: 200}\n",
        tmp_path / "run",
        Endpoint(single.gen, "veth0"),
    )
    assert gen.capture_path == tmp_path / "run" / "drone-capture.pcap"
    c = read_capture(gen.capture_path)
    assert len(c) == 200 and set(c.proto.tolist()) == {1}
    both = gen.port_stats()
    assert both["veth0"]["tx_pkts"] == 200 and both["veth1"]["rx_pkts"] == 200
    assert both["veth1"]["rx_bytes"] == int(c.wire_len.sum())


def test_drone_killed_mid_run_fails_cleanly(pair, tmp_path):
    gen = Ostinato()
    s = parse_scenario(
        HEAD + "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9,"
        " rate: 500, duration: 20s}\n"
    )
    gen.prepare(s, tmp_path, 3, Endpoint(pair.gen, "veth0"))
    gen.start()
    time.sleep(0.5)
    pid = gen.drone.proc.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(GeneratorError, match="drone exited during the run.*SIGKILL"):
        gen.wait(15)
    assert gen.status() == "failed"
    assert gen.commands()[0].status == "killed by SIGKILL"
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert gen.wait(1) is True  # raised once; finished
    names = {pair.gen, pair.peer}
    pair.teardown()
    assert not names & netns_names()


def test_a_port_drone_does_not_offer_lists_the_ports_it_has(pair, tmp_path):
    gen = Ostinato()
    s = parse_scenario(
        HEAD + "  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.1, rate: 10, packets: 1}\n"
    )
    gen.prepare(s, tmp_path, 3, Endpoint(pair.gen, "eth7"))
    with pytest.raises(GeneratorError, match=r"does not offer port 'eth7'.*it offers: veth0"):
        gen.start()
    assert gen.status() == "failed" and gen.commands()[0].exit_code is not None


def test_seed001_topspeed_for_a_duration(pair, tmp_path):
    text = (
        Path(__file__).resolve().parent.parent / "scenarios" / "seed001-ostinato.yaml"
    ).read_text()
    s = parse_scenario(text, "seed001-ostinato.yaml")
    before = pair.rx()
    gen = Ostinato()
    gen.prepare(s, tmp_path, 1, Endpoint(pair.gen, "veth0", pace="topspeed", duration_s=1.0))
    gen.start()
    assert gen.wait(30)
    tx = gen.port_stats()["veth0"]["tx_pkts"]
    assert gen.status() == "completed" and tx > 10_000  # far above the 1-pps default of a stream
    assert pair.rx() - before == tx
    assert gen.port_stats()["veth0"]["tx_bytes"] == 60 * tx


def test_stop_on_request_leaves_consistent_counters(pair, tmp_path):
    gen = Ostinato()
    s = parse_scenario(
        HEAD + "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9,"
        " rate: 2000, packets: 40000}\n"
    )
    before = pair.rx()
    gen.prepare(s, tmp_path, 3, Endpoint(pair.gen, "veth0"))
    gen.start()
    time.sleep(0.5)
    gen.stop(interrupt=True)
    assert gen.wait(1) and gen.status() == "interrupted"
    tx = gen.counters().packets_sent
    assert 0 < tx < 40000 and pair.rx() - before == tx
    assert gen.commands()[0].exit_code is not None


def test_chained_and_concurrent_flows(pair, tmp_path, pcaplib):
    from analysis.capture import read_capture

    flow = "  - {{protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: {port}, rate: {rate}, {extra}}}\n"
    # Chained: the second flow starts when the first ends -> all of A, then all of B.
    cap = Tcpdump(pair, tmp_path / "chain.pcap")
    gen = run_adapter(
        Ostinato(),
        flow.format(port=1, rate=5000, extra="packets: 500")
        + flow.format(port=2, rate=5000, extra="packets: 300, start: 100ms"),
        tmp_path / "chain",
        Endpoint(pair.gen, "veth0"),
    )
    cap.stop()
    assert gen.plan.transmit_mode == "sequential"
    assert list(read_capture(tmp_path / "chain.pcap").dport) == [1] * 500 + [2] * 300
    # Concurrent: both start at 0 with one duration -> interleaved, each at its own rate.
    cap = Tcpdump(pair, tmp_path / "both.pcap")
    gen = run_adapter(
        Ostinato(),
        flow.format(port=1, rate=1000, extra="duration: 1s")
        + flow.format(port=2, rate=3000, extra="duration: 1s"),
        tmp_path / "both",
        Endpoint(pair.gen, "veth0"),
    )
    cap.stop()
    assert gen.plan.transmit_mode == "interleaved" and gen.status() == "completed"
    ports = read_capture(tmp_path / "both.pcap").dport.tolist()
    a, b = ports.count(1), ports.count(2)
    assert a > 300 and 2.0 < b / a < 4.0, (a, b)  # 1:3; loose, the machine may be busy
    assert a + b == gen.counters().packets_sent


def test_ipv6_text_payload_and_icmpv6(pair, tmp_path):
    scapy = pytest.importorskip("scapy.all")
    cap = Tcpdump(pair, tmp_path / "v6.pcap")
    run_adapter(
        Ostinato(),
        (
            "  - {protocol: tcp, src: 2001:db8::1, dst: 2001:db8::2, src_port: 5000, dst_port: 80,"
            " rate: 1000, packets: 5, payload: {text: hello, size: 20}}\n"
            "  - {protocol: icmpv6, src: 2001:db8::1, dst: 2001:db8::2, rate: 1000, packets: 3,"
            " start: 5ms}\n"
        ),
        tmp_path / "run",
        Endpoint(pair.gen, "veth0"),
    )
    cap.stop()
    frames = scapy.rdpcap(str(tmp_path / "v6.pcap"))
    assert len(frames) == 8
    for f in frames[:5]:
        assert len(f) == 14 + 40 + 20 + 20 and f["IPv6"].hlim == 64
        assert bytes(f["TCP"].payload) == b"hello" + bytes(15)
        raw = f["TCP"].chksum
        del f["TCP"].chksum
        assert f.__class__(bytes(f))["TCP"].chksum == raw  # drone's checksum is right
    assert [f["ICMPv6EchoRequest"].seq for f in frames[5:]] == [0, 1, 2]
    assert {f["IPv6"].src for f in frames} == {"2001:db8::1"}
