"""`testbed otg serve` as a service, through snappi 1.58 (the real client), beyond the example
clients and the refusal classes of tests/test_otg_clients.py: the gRPC transport, the run folder a
config leaves, pause and resume, latency and timestamps, port metrics, stopping a continuous flow,
IPv6 with a VLAN tag and the address mapping of the captures, and the server stopped by SIGTERM
while it sends.

One server for the module (HTTPS and gRPC on free loopback ports, its run marks and results in a
temporary folder), started as a user starts it; the tests use it one after the other. The last
test starts its own server, since it stops it.
"""

from __future__ import annotations

import ipaddress
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import snappi

from analysis.capture import iter_frames
from analysis.catalog import Catalog
from analysis.tables import read_table
from ntgcore.proc import Process, same_process
from tests.test_otg_clients import REPO, free_port, start_server

TX_MAC, RX_MAC = "02:00:00:00:03:01", "02:00:00:00:03:02"


@dataclass
class Served:
    url: str  # the HTTPS API
    grpc: str | None  # HOST:PORT of the gRPC API
    proc: Process
    log: Path
    results: Path
    marks: Path

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def mark(self) -> dict[str, Any]:
        (path,) = self.marks.glob("*.json")
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc

    def run_dir(self) -> Path:
        """The run folder of the config set last (the server's run mark names it)."""
        return Path(self.mark()["run_dir"])


def serve(tmp: Path, grpc: bool) -> Served:
    """`testbed otg serve` on free loopback ports (gRPC too when asked), started as
    tests/test_otg_clients.py starts it; returns once GET /capabilities/version answers."""
    gport = free_port() if grpc else None
    s = start_server(tmp, ("--grpc", f"127.0.0.1:{gport}") if gport is not None else ())
    grpc_at = f"127.0.0.1:{gport}" if gport is not None else None
    return Served(s.url, grpc_at, s.proc, s.log, s.results, s.marks)


@pytest.fixture(scope="module")
def server(root, flowengine_bin, pcaplib, tmp_path_factory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("otg-service"), grpc=True)
    try:
        yield s
    finally:
        code = s.proc.stop(signal.SIGTERM, grace=30)
    assert code == 0, f"testbed otg serve ended with {code} on SIGTERM:\n{s.log_tail()}"


def https(s: Served) -> Any:
    return snappi.api(location=s.url, verify=False, version_check=True)


def two_ports(api: Any) -> Any:
    c = api.config()
    c.ports.add(name="p1", location="p1")
    c.ports.add(name="p2", location="p2")
    return c


def udp_flow(
    c: Any,
    name: str = "f1",
    tx: str = "p1",
    rx: str = "p2",
    packets: int | None = 200,
    pps: int = 1000,
    size: int = 128,
    src: str = "198.18.3.1",
    dst: str = "198.18.3.2",
) -> Any:
    """A UDP flow with metrics; `packets` None: continuous."""
    f = c.flows.add(name=name)
    f.tx_rx.port.tx_name = tx
    f.tx_rx.port.rx_names = [rx]
    f.size.fixed = size
    f.rate.pps = pps
    if packets is None:
        f.duration.continuous.gap = 12
    else:
        f.duration.fixed_packets.packets = packets
    f.metrics.enable = True
    eth, ip, udp = f.packet.ethernet().ipv4().udp()
    eth.src.value, eth.dst.value = (TX_MAC, RX_MAC) if tx == "p1" else (RX_MAC, TX_MAC)
    ip.src.value, ip.dst.value = src, dst
    udp.src_port.value, udp.dst_port.value = 7100, 7101
    return f


def control(api: Any, state: str, names: list[str] | None = None) -> None:
    cs = api.control_state()
    cs.traffic.flow_transmit.state = state
    if names:
        cs.traffic.flow_transmit.flow_names = names
    api.set_control_state(cs)


def capture(api: Any, state: str, ports: list[str]) -> None:
    cs = api.control_state()
    cs.port.capture.state = state
    cs.port.capture.port_names = ports
    api.set_control_state(cs)


def flow_metrics(api: Any) -> dict[str, Any]:
    req = api.metrics_request()
    req.flow.flow_names = []
    return {m.name: m for m in api.get_metrics(req).flow_metrics}


def port_metrics(api: Any) -> dict[str, Any]:
    req = api.metrics_request()
    req.port.port_names = []
    return {m.name: m for m in api.get_metrics(req).port_metrics}


def wait_for(
    api: Any, done: Callable[[dict[str, Any]], bool], timeout: float, what: str
) -> dict[str, Any]:
    """Flow metrics polled until `done` says so; fails with the last ones after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        m = flow_metrics(api)
        if done(m):
            return m
        if time.monotonic() > deadline:
            shown = {n: (x.transmit, x.frames_tx, x.frames_rx) for n, x in m.items()}
            pytest.fail(f"{what} not within {timeout:g} s: {shown}", pytrace=False)
        time.sleep(0.2)


def all_received(m: dict[str, Any]) -> bool:
    return all(x.transmit == "stopped" and x.frames_rx == x.frames_tx > 0 for x in m.values())


def pcap_frames(data: bytes, tmp: Path) -> list[tuple[int, int, bytes]]:
    path = tmp / f"got-{len(list(tmp.glob('got-*.pcap')))}.pcap"
    path.write_bytes(data)
    return list(iter_frames(path))


def otg_error(api: Any, call: Callable[..., Any], *args: Any) -> Any:
    with pytest.raises(Exception) as info:
        call(*args)
    error = api.from_exception(info.value)
    assert error is not None, f"not an OTG error: {info.value!r}"
    return error


# --- 1. gRPC ------------------------------------------------------------------------------------


def test_grpc_flow_end_to_end(server, root, tmp_path):
    """A flow over gRPC, end to end. The server starts a process for most calls (the counters'
    `cat`, engines, tcpdump) while gRPC's threads serve the call: with gRPC's fork support on (its
    default), the forked child can die of SIGSEGV before its exec (grpc/grpc#17093)."""
    assert server.grpc is not None
    api = snappi.api(location=server.grpc, transport="grpc", version_check=True)
    try:
        c = two_ports(api)
        c.captures.add(name="cap", port_names=["p2"])
        udp_flow(c, packets=300, pps=1000)
        api.set_config(c)
        assert api.get_config().flows[0].duration.fixed_packets.packets == 300
        capture(api, "start", ["p2"])
        control(api, "start")
        m = wait_for(api, all_received, 30, "the flow's 300 frames received (gRPC)")["f1"]
        assert (m.frames_tx, m.frames_rx, m.bytes_tx, m.bytes_rx) == (
            300,
            300,
            300 * 128,
            300 * 128,
        )
        for _ in range(30):  # each starts a process per port (the kernel's counters)
            p = port_metrics(api)
            assert (p["p1"].frames_tx, p["p2"].frames_rx) == (300, 300), p
        req = api.capture_request()
        req.port_name = "p2"
        got = pcap_frames(api.get_capture(req).read(), tmp_path)
    finally:
        api.close()
    ours = [d for _, _, d in got if d[6:12] == bytes.fromhex(TX_MAC.replace(":", ""))]
    assert len(ours) == 300, f"{len(ours)} of 300 frames in the capture from gRPC get_capture"
    assert all(len(d) == 128 and d[26:30] == bytes([198, 18, 3, 1]) for d in ours)


def test_grpc_refusal_is_otg_error(server, root):
    api = snappi.api(location=server.grpc, transport="grpc")
    try:
        c = api.config()
        c.ports.add(name="p1", location="p1")
        c.ports.add(name="p2", location="nowhere")
        udp_flow(c)
        error = otg_error(api, api.set_config, c)
    finally:
        api.close()
    assert (error.code, error.kind) == (400, "validation"), error.serialize()
    assert any("ports[1].location" in e and "nowhere" in e for e in error.errors), error.errors


# --- 2. the run folder of a config ----------------------------------------------------------------


def test_run_folder_of_a_config(server, root):
    api = https(server)
    c = two_ports(api)
    udp_flow(c, packets=200, src="10.0.0.1")  # outside the safe range: mapped on the wire
    warnings = api.set_config(c).warnings
    assert any("10.0.0.1 -> 198.18.128.0" in w for w in warnings), warnings
    folder = server.run_dir()
    control(api, "start")
    wait_for(api, all_received, 30, "the flow's 200 frames received")
    assert json.loads((folder / "manifest.json").read_text())["status"] == "running"
    api.set_config(two_ports(api))  # the next config finishes the previous folder
    assert server.run_dir() != folder

    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "completed", manifest.get("error")
    assert "error" not in manifest, manifest["error"]
    assert (manifest["mode"], manifest["method"]) == ("otg", "otg")
    assert manifest["otg"]["address_map"] == {"10.0.0.1": "198.18.128.0"}
    assert [s["folder"] for s in manifest["otg"]["starts"]] == ["start-001"]
    for name in ("metrics.json", "report.md", "config.json", "otg-rx-rate.png"):
        assert (folder / name).is_file(), f"{name} missing in {sorted(folder.iterdir())}"
    metrics = json.loads((folder / "metrics.json").read_text())
    (fm,) = metrics["flow_metrics"]
    assert (fm["frames_tx"], fm["frames_rx"]) == (200, 200)
    assert re.search(r"^\| f1 \| p1 \| 200 \| 200 \|", (folder / "report.md").read_text(), re.M)

    run = read_table(folder, "run").to_pylist()
    assert len(run) == 1 and run[0]["run_id"] == folder.name, run
    steps = read_table(folder, "steps").to_pylist()
    # one row for the rx port p2 (the layout of analysis/otg.py): what its receiver captured
    assert [(s["packets"], s["sent"]) for s in steps] == [(200, 200)], steps
    assert "p2" in steps[0]["step"] and steps[0]["kind"] == "otg", steps

    frame, problems = Catalog([server.results]).list()
    row = frame[frame["run_id"] == folder.name]
    assert len(row) == 1, frame.to_string()
    assert row.iloc[0]["status"] == "completed" and int(row.iloc[0]["packets"]) == 200
    assert not problems, problems
    done = subprocess.run(
        [sys.executable, "-m", "testbed", "results", "list", "--json", str(folder)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (listed,) = json.loads(done.stdout)
    assert listed["run_id"] == folder.name and listed["method"] == "otg", listed


# --- 3. pause and resume -----------------------------------------------------------------------


def test_pause_and_resume(server, root):
    api = https(server)
    c = two_ports(api)
    udp_flow(c, packets=2000, pps=1000)
    api.set_config(c)
    folder = server.run_dir()
    control(api, "start")
    wait_for(api, lambda m: m["f1"].frames_tx >= 300, 10, "300 frames sent")
    control(api, "pause")
    paused = wait_for(api, lambda m: m["f1"].transmit == "paused", 5, "transmit paused")["f1"]
    time.sleep(0.3)  # what was queued when the pause came is out
    before = flow_metrics(api)["f1"]
    time.sleep(1.0)
    after = flow_metrics(api)["f1"]
    assert paused.frames_tx < 2000 and after.transmit == "paused"
    assert after.frames_tx == before.frames_tx, "frames were sent while paused"
    assert after.frames_rx == after.frames_tx, "frames sent before the pause were not received"
    control(api, "resume")
    m = wait_for(api, all_received, 20, "the flow completed after resume")["f1"]
    assert m.frames_tx == m.frames_rx == 2000
    (start,) = json.loads((folder / "manifest.json").read_text())["otg"]["starts"]
    summary_path = folder / start["folder"] / "p1.summary.json"
    deadline = time.monotonic() + 10  # "stopped" comes with the last frame, the summary at exit
    while not summary_path.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    summary = json.loads(summary_path.read_text())
    assert summary["paused_ns"] >= 1.2e9 and summary["sent"] == 2000, summary


# --- 4. metrics ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["cut_through", "store_forward"])
def test_latency_and_timestamps(server, root, mode):
    api = https(server)
    c = two_ports(api)
    f = udp_flow(c, packets=200, pps=1000)
    f.metrics.timestamps = True
    f.metrics.latency.enable = True
    f.metrics.latency.mode = mode
    api.set_config(c)
    t0 = time.clock_gettime_ns(time.CLOCK_REALTIME)
    control(api, "start")
    m = wait_for(api, all_received, 30, "the flow's 200 frames received")["f1"]
    t1 = time.clock_gettime_ns(time.CLOCK_REALTIME)
    first, last = m.timestamps.first_timestamp_ns, m.timestamps.last_timestamp_ns
    assert t0 < first < last < t1, (t0, first, last, t1)
    assert 0.19e9 <= last - first <= 0.3e9, f"200 frames at 1000/s spanned {last - first} ns"
    lat = m.latency
    assert 0 < lat.minimum_ns <= lat.average_ns <= lat.maximum_ns < 1e9, lat.serialize()


def test_port_metrics_on_a_quiet_pair(server, root):
    api = https(server)
    c = two_ports(api)
    udp_flow(c, packets=250, pps=2000, size=200)
    api.set_config(c)
    control(api, "start")
    wait_for(api, all_received, 30, "the flow's 250 frames received")
    time.sleep(0.3)
    p = port_metrics(api)
    got = {n: (x.frames_tx, x.frames_rx, x.bytes_tx, x.bytes_rx) for n, x in p.items()}
    assert got == {"p1": (250, 0, 250 * 200, 0), "p2": (0, 250, 0, 250 * 200)}, got
    assert p["p1"].transmit == "stopped" and p["p1"].location == "p1"


def test_two_flows_in_opposite_directions(server, root):
    api = https(server)
    c = two_ports(api)
    udp_flow(c, "f12", "p1", "p2", packets=400, pps=1000)
    udp_flow(c, "f21", "p2", "p1", packets=300, pps=1000, src="198.18.3.2", dst="198.18.3.1")
    api.set_config(c)
    control(api, "start")
    m = wait_for(api, all_received, 30, "both flows received")
    got = {n: (x.port_tx, x.port_rx, x.frames_tx, x.frames_rx) for n, x in m.items()}
    assert got == {"f12": ("p1", "p2", 400, 400), "f21": ("p2", "p1", 300, 300)}, got
    p = port_metrics(api)
    assert (p["p1"].frames_tx, p["p1"].frames_rx) == (400, 300)
    assert (p["p2"].frames_tx, p["p2"].frames_rx) == (300, 400)


# --- 5. a continuous flow stopped ----------------------------------------------------------------


def test_continuous_flow_stopped(server, root):
    api = https(server)
    c = two_ports(api)
    udp_flow(c, packets=None, pps=2000)
    api.set_config(c)
    control(api, "start")
    wait_for(api, lambda m: m["f1"].frames_tx >= 500, 10, "500 frames sent")
    assert flow_metrics(api)["f1"].transmit == "started"
    control(api, "stop", ["f1"])
    m = wait_for(api, all_received, 10, "the stopped flow's frames all received")["f1"]
    time.sleep(0.5)
    again = flow_metrics(api)["f1"]
    assert (again.transmit, again.frames_tx, again.frames_rx) == (
        "stopped",
        m.frames_tx,
        m.frames_tx,
    ), "frames sent after the stop"


def test_two_continuous_flows_of_one_port_stopped(server, root):
    """Two flows sent by one engine (one tx port), stopped together: each one's frames_tx is what
    went out, so frames_rx == frames_tx for both."""
    api = https(server)
    c = two_ports(api)
    udp_flow(c, "a", packets=None, pps=1000)
    udp_flow(c, "b", packets=None, pps=700, src="198.18.3.5")
    api.set_config(c)
    control(api, "start")
    wait_for(api, lambda m: min(x.frames_tx for x in m.values()) >= 300, 10, "300 frames each")
    control(api, "stop")
    m = wait_for(api, all_received, 10, "the stopped flows' frames all received")
    p = port_metrics(api)
    assert sum(x.frames_tx for x in m.values()) == p["p1"].frames_tx == p["p2"].frames_rx


# --- 6. IPv6, a VLAN tag, TCP increment: the captures' addresses ---------------------------------


def test_ipv6_vlan_tcp_increment_capture(server, root, tmp_path):
    api = https(server)
    c = two_ports(api)
    c.captures.add(name="cap", port_names=["p2"])
    f = c.flows.add(name="v6")
    f.tx_rx.port.tx_name, f.tx_rx.port.rx_names = "p1", ["p2"]
    f.size.fixed = 128
    f.rate.pps = 1000
    f.duration.fixed_packets.packets = 100
    f.metrics.enable = True
    eth, vlan, ip6, tcp = f.packet.ethernet().vlan().ipv6().tcp()
    eth.src.value, eth.dst.value = TX_MAC, RX_MAC
    vlan.id.value, vlan.priority.value = 300, 5
    ip6.src.value, ip6.dst.value = "2001:db8::1", "2a00::1"
    tcp.src_port.increment.start, tcp.src_port.increment.step = 1000, 3
    tcp.src_port.increment.count = 4
    tcp.dst_port.value = 80
    warnings = api.set_config(c).warnings
    assert any("2a00::1 -> 2001:db8:ffff::1" in w for w in warnings), warnings
    folder = server.run_dir()
    capture(api, "start", ["p2"])
    control(api, "start")
    m = wait_for(api, all_received, 30, "the IPv6 flow's 100 frames received")["v6"]
    assert m.frames_rx == 100
    req = api.capture_request()
    req.port_name = "p2"
    returned = pcap_frames(api.get_capture(req).read(), tmp_path)
    (wire_path,) = folder.glob("capture-p2-*.pcap")
    wire = list(iter_frames(wire_path))
    assert len(returned) == len(wire) == 100

    src, cfg_dst = ipaddress.IPv6Address("2001:db8::1"), ipaddress.IPv6Address("2a00::1")
    wire_dst = ipaddress.IPv6Address("2001:db8:ffff::1")
    for i, ((_, _, got), (_, _, sent)) in enumerate(zip(returned, wire)):
        for frame, dst in ((got, cfg_dst), (sent, wire_dst)):
            assert len(frame) == 128
            assert frame[12:14] == b"\x81\x00" and frame[16:18] == b"\x86\xdd"
            tci = int.from_bytes(frame[14:16], "big")
            assert (tci >> 13, tci & 0xFFF) == (5, 300)
            assert frame[24] == 6  # next header: TCP
            assert ipaddress.IPv6Address(frame[26:42]) == src
            assert ipaddress.IPv6Address(frame[42:58]) == dst, f"frame {i}"
            sport, dport = int.from_bytes(frame[58:60], "big"), int.from_bytes(frame[60:62], "big")
            assert (sport, dport) == (1000 + 3 * (i % 4), 80), f"frame {i}"
        assert got[:42] == sent[:42] and got[58:62] == sent[58:62]
    assert tcp_checksum_ok(returned[0][2]) and tcp_checksum_ok(wire[0][2])


def tcp_checksum_ok(frame: bytes) -> bool:
    """The TCP checksum of a VLAN-tagged IPv6 frame (FCS at the end) sums to 0xffff."""
    ip = frame[18:]
    plen = int.from_bytes(ip[4:6], "big")
    seg = ip[40 : 40 + plen]
    data = ip[8:40] + plen.to_bytes(4, "big") + b"\x00\x00\x00\x06" + seg
    if len(data) % 2:
        data += b"\x00"
    total = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


# --- 7. SIGTERM while a continuous flow runs ----------------------------------------------------


def test_sigterm_while_a_flow_runs(root, flowengine_bin, pcaplib, tmp_path):
    s = serve(tmp_path, grpc=False)
    try:
        api = https(s)
        c = two_ports(api)
        c.captures.add(name="cap", port_names=["p2"])
        udp_flow(c, packets=None, pps=1000)
        api.set_config(c)
        capture(api, "start", ["p2"])
        control(api, "start")
        wait_for(api, lambda m: m["f1"].frames_tx >= 200, 10, "200 frames sent")
        mark = s.mark()
        children = [x for x in mark["children"] if x.get("pid")]
        alive = [x for x in children if same_process(x["pid"], x["start_ticks"], x["argv"])]
        names = sorted(x["name"] for x in alive)
        assert "flowengine-p1" in names and len(alive) >= 3, names  # engine, receiver, capture
        s.proc.send_signal(signal.SIGTERM)
        code = s.proc.wait(60)
    finally:
        if s.proc.poll() is None:
            s.proc.stop(signal.SIGKILL, grace=10)
    assert code == 0, f"exit {code} on SIGTERM:\n{s.log_tail()}"
    left = [x["name"] for x in alive if same_process(x["pid"], x["start_ticks"], x["argv"])]
    assert not left, f"still running after the server stopped: {left}"
    present = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    gone = [ns for ns in mark["locations"] if re.search(rf"^{re.escape(ns)}\b", present, re.M)]
    assert mark["locations"] and not gone, f"namespaces left: {gone}"
    assert not list(s.marks.glob("*.json")), "the server's run mark is still there"
    folder = Path(mark["run_dir"])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "completed", manifest["status"]
    assert "error" not in manifest, manifest["error"]
    steps = read_table(folder, "steps").to_pylist()
    assert len(steps) == 1 and steps[0]["packets"] >= 200, steps
    assert list(folder.glob("capture-p2-*.pcap")), "the capture was not kept"
