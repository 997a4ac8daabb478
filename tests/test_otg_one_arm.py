"""A one-arm OTG port (docs/otg.md): `testbed otg serve --topology otg-one-arm` gives one port, p1,
wired to a namespace that sends back whatever it receives; a flow sent and received on p1 is
counted once, on arrival, and its capture holds the reflected frames only."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest
import snappi

from analysis.capture import iter_frames
from tests.test_otg_clients import Server, start_server

FRAMES, SIZE, PPS = 300, 200, 1000


@pytest.fixture(scope="module")
def one_arm(root, flowengine_bin, tmp_path_factory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("otg-one-arm"), ("--topology", "otg-one-arm"))
    try:
        yield s
    finally:
        code = s.proc.stop(signal.SIGTERM, grace=30)
    assert code == 0, f"testbed otg serve ended with {code}:\n{s.log_tail()}"


def test_a_flow_out_and_back_on_one_port(one_arm, tmp_path):
    api = snappi.api(location=one_arm.url, verify=False)
    c = api.config()
    c.ports.add(name="arm", location="p1")
    c.captures.add(name="cap", port_names=["arm"])
    f = c.flows.add(name="echoed")
    f.tx_rx.port.tx_name, f.tx_rx.port.rx_names = "arm", ["arm"]
    f.duration.fixed_packets.packets, f.rate.pps, f.size.fixed = FRAMES, PPS, SIZE
    f.metrics.enable = True
    eth, ip, udp = f.packet.ethernet().ipv4().udp()
    eth.src.value, eth.dst.value = "02:00:00:00:0a:01", "02:00:00:00:0a:02"
    ip.src.value, ip.dst.value = "198.18.10.1", "198.18.10.2"
    udp.src_port.value, udp.dst_port.increment.start = 7000, 8000
    udp.dst_port.increment.count = 50
    api.set_config(c)
    for what, value in (("capture", "start"), ("traffic", "start")):
        cs = api.control_state()
        if what == "capture":
            cs.port.capture.state = value
        else:
            cs.traffic.flow_transmit.state = value
        api.set_control_state(cs)
    deadline, m = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        req = api.metrics_request()
        req.flow.flow_names = []
        m = api.get_metrics(req).flow_metrics[0]
        if m.transmit == "stopped" and m.frames_rx >= FRAMES:
            break
        time.sleep(0.3)
    assert m is not None and m.transmit == "stopped"
    assert (m.frames_tx, m.frames_rx) == (FRAMES, FRAMES), "counted once, on arrival"
    assert m.bytes_rx == FRAMES * SIZE
    cs = api.control_state()
    cs.port.capture.state = "stop"
    api.set_control_state(cs)
    req = api.capture_request()
    req.port_name = "arm"
    pcap = tmp_path / "arm.pcap"
    pcap.write_bytes(api.get_capture(req).read())
    frames = [data for _, _, data in iter_frames(pcap)]
    assert len(frames) == FRAMES, "the port's capture holds what came back, not what it sent too"
    ports = [int.from_bytes(d[36:38], "big") for d in frames]
    assert ports == [8000 + (j % 50) for j in range(FRAMES)], "back in the order sent"
