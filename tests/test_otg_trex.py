"""OTG flows sent by TRex: a port whose location is `trex:p1` (testbed/otg/trexsender.py).

`testbed otg serve` as a user starts it (tests/test_otg_service.py's `serve`), driven by snappi
1.58; TRex v3.08 from $NTG_TREX_DIR (the trex lane: one TRex server at a time; skipped without it
outside CI). Network safety: the server's own site (namespaces it makes, one veth pair), addresses
in 198.18.0.0/15, 1,000 frames at 1,000 pps.
"""

from __future__ import annotations

import json
import signal
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import snappi
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from analysis.capture import iter_frames
from testbed.otg.flows import MAGIC, signature
from tests.test_otg_service import (
    Served,
    all_received,
    capture,
    control,
    flow_metrics,
    otg_error,
    serve,
    udp_flow,
    wait_for,
)


@pytest.fixture(scope="module")
def server(root, pcaplib, tmp_path_factory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("otg-trex"), grpc=False)
    try:
        yield s
    finally:
        code = s.proc.stop(signal.SIGTERM, grace=30)
    assert code == 0, f"testbed otg serve ended with {code} on SIGTERM:\n{s.log_tail()}"


def api_of(s: Served) -> snappi.Api:
    return snappi.api(location=s.url, verify=False, version_check=True)


def trex_config(api: snappi.Api) -> snappi.Config:
    c = api.config()
    c.ports.add(name="p1", location="trex:p1")
    c.ports.add(name="p2", location="p2")
    return c


def summary_of(path: Path) -> dict[str, Any]:
    """The worker's summary, written once TRex has stopped (a moment after the last frame)."""
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def test_one_flow_sent_by_trex(server, root, trex_dir, tmp_path):
    """1,000 tagged frames from TRex on p1: frames_rx == frames_tx == 1000 (the receiver's count
    of the signature on p2), the bytes as OTG counts them, and on the wire every sequence number
    once, each frame the flow's frame with its sequence number and UDP checksum (TRex's field
    engine), the 4 FCS bytes zero (TRex cannot redo a CRC-32, and its software checksum sums
    them)."""
    api = api_of(server)
    c = trex_config(api)
    udp_flow(c, packets=1000, pps=1000, size=128)
    c.captures.add(name="cap", port_names=["p2"])
    api.set_config(c)
    capture(api, "start", ["p2"])
    control(api, "start")
    m = wait_for(api, all_received, 60, "all 1,000 frames received")["f1"]
    assert m.frames_tx == m.frames_rx == 1000
    assert m.bytes_tx == m.bytes_rx == 1000 * 128
    assert m.loss == 0

    folder = server.run_dir()
    start = folder / "start-001"
    summary = summary_of(start / "p1.summary.json")
    assert summary["sent"] == summary["trex"]["opackets"] == 1000
    assert summary["trex"]["obytes"] == 1000 * (128 + 4)  # TRex counts an FCS of its own
    assert (folder / "trex-p1" / "trex-server.log").exists()
    got = [data for _, _, data in iter_frames(folder / "rx-p2.pcap")]
    ours = [d for d in got if signature(d) is not None]
    assert len(ours) == 1000
    seqs = sorted(sig[1] for sig in map(signature, ours) if sig is not None)
    assert seqs == list(range(1000))
    first = next(d for d in ours if signature(d) == (0, 0))
    k = first.find(MAGIC)
    seq_at, body_end = k + 8, len(first) - 4
    for d in ours:
        assert len(d) == 128
        pkt = Ether(d[:body_end])
        assert UDP in pkt and pkt[IP].src == "198.18.3.1"
        sent = pkt[UDP].chksum
        del pkt[UDP].chksum
        assert Ether(bytes(pkt))[UDP].chksum == sent, "UDP checksum not right after the seq write"
        (seq,) = struct.unpack_from("!I", d, seq_at)
        udp_csum = k - 8 + 6  # the signature starts right after the 8-byte UDP header
        same = bytearray(d[:body_end])
        ref = bytearray(first[:body_end])
        for b in (same, ref):
            b[seq_at : seq_at + 4] = b"\0\0\0\0"
            b[udp_csum : udp_csum + 2] = b"\0\0"
        assert same == ref, f"frame of seq {seq} differs beyond its seq and checksum"
        assert d[body_end:] == bytes(4)  # the FCS bytes: zeros (trexsender.streams says why)

    req = api.capture_request()
    req.port_name = "p2"
    cap = api.get_capture(req)
    path = tmp_path / "cap.pcap"
    path.write_bytes(cap.read())
    restored = [d for _, _, d in iter_frames(path) if signature(d) is not None]
    assert len(restored) == 1000
    # no address was mapped: restore_frame returns the wire frames as they are (FCS bytes zero)
    assert sorted(restored) == sorted(ours)

    # Started again at once (the next worker, connected already, acquires the port the first
    # released), then a new config at once: the first start's worker is done, no 409.
    control(api, "start")
    m = wait_for(api, all_received, 60, "all 1,000 frames of the second start")["f1"]
    assert m.frames_tx == m.frames_rx == 1000
    assert summary_of(folder / "start-002" / "p1.summary.json")["sent"] == 1000
    api.set_config(c)


def test_two_flows_on_one_trex_port_are_refused(server, root):
    """TRex's port counters are one flow's frames_tx: a second flow on the port is refused at
    set_config (501, naming the flows), before any server starts."""
    api = api_of(server)
    c = trex_config(api)
    udp_flow(c, name="a", packets=10)
    udp_flow(c, name="b", packets=10)
    err = otg_error(api, api.set_config, c)
    assert err.code == 501
    assert "'a', 'b'" in err.errors[0] and "TRex port 'p1'" in err.errors[0]


def test_unknown_back_end_location(server, root):
    api = api_of(server)
    c = api.config()
    c.ports.add(name="p1", location="trex:nowhere")
    err = otg_error(api, api.set_config, c)
    assert err.code == 400 and "trex:nowhere" in err.errors[0]


def test_pause_resume_stop_by_trex(server, root, trex_dir):
    """A continuous flow from TRex: paused, it sends nothing (TRex's pause); resumed and
    stopped, every frame sent is received, in order (sequence numbers 0 .. n-1)."""
    api = api_of(server)
    c = trex_config(api)
    udp_flow(c, packets=None, pps=1000, size=192)
    api.set_config(c)
    control(api, "start")
    wait_for(api, lambda m: m["f1"].frames_tx >= 300, 20, "300 frames sent")
    control(api, "pause")
    time.sleep(0.3)
    held = flow_metrics(api)["f1"]
    time.sleep(0.5)
    m = flow_metrics(api)["f1"]
    assert m.transmit == "paused" and m.frames_tx == held.frames_tx
    control(api, "resume")
    wait_for(api, lambda m: m["f1"].frames_tx >= held.frames_tx + 300, 20, "300 more sent")
    control(api, "stop")
    m = wait_for(api, all_received, 30, "every frame sent received")["f1"]
    n = m.frames_tx
    got = [d for _, _, d in iter_frames(server.run_dir() / "rx-p2.pcap") if signature(d)]
    seqs = [sig[1] for sig in map(signature, got) if sig is not None]
    assert seqs == list(range(n)), "sequence numbers not 0..n-1 in order"
    assert m.bytes_tx == m.bytes_rx == 192 * n


def test_metrics_on_a_cycle_of_frames_refused(server, root):
    """TRex v3.08's field engine gave several streams' sequence numbers wrong values: a flow
    with metrics and more than one distinct frame is refused on a TRex port (501)."""
    api = api_of(server)
    c = trex_config(api)
    f = udp_flow(c, packets=30)
    f.size.increment.start, f.size.increment.end, f.size.increment.step = 128, 256, 64
    err = otg_error(api, api.set_config, c)
    assert err.code == 501 and "cycle of 3 distinct frames" in err.errors[0]


def test_bursts_by_trex(server, root, trex_dir):
    """Four bursts of 50 frames at 5,000 pps, 100 ms apart between bursts (TRex's multi-burst
    stream, its inter-burst gap from the flow's burst period): every frame received, and the
    bursts' first frames about one burst period apart on the wire."""
    api = api_of(server)
    c = trex_config(api)
    f = udp_flow(c, packets=None, pps=5000)
    b = f.duration.burst
    b.packets, b.bursts = 50, 4
    b.inter_burst_gap.nanoseconds = 100_000_000
    api.set_config(c)
    control(api, "start")
    m = wait_for(api, all_received, 30, "all 200 frames received")["f1"]
    assert m.frames_tx == m.frames_rx == 200
    got = [(t, d) for t, _, d in iter_frames(server.run_dir() / "rx-p2.pcap") if signature(d)]
    assert [sig[1] for sig in (signature(d) for _, d in got) if sig] == list(range(200))
    firsts = [got[i][0] for i in range(0, 200, 50)]
    period_ns = 49 * 200_000 + 200_000 + 100_000_000  # burst × period + inter_burst_gap
    gaps = [b - a for a, b in zip(firsts, firsts[1:])]
    assert all(abs(g - period_ns) < 5_000_000 for g in gaps), gaps
