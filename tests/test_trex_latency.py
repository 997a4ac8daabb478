"""TRex latency probes (`latency_pps`, STLFlowLatencyStats): the mapping and its refusals
offline, the profile as TRex's client builds it, the offline expansion without the probes, and
live against the real TRex v3.08 server ($NTG_TREX_DIR, ../shared/trex).

Live topology (../shared/trex/README.md, ../shared/guide/NETWORK-SAFETY.md): one namespace made
for the test holding both ends of one veth pair (VethPair(split=False); through `testbed run`:
the packaged topology `astf`): TRex port 0 sends on veth0, port 1 receives on veth1 and times the
probes; addresses in 198.18.0.0/15. TRex's own receive side loses a few packets as `ierrors`
(about 0.3 % at 100 kpps), so receive counts are checked as ranges and for consistency, never
exactly. Bounded: about 25,000 packets in 2 s. Everything is torn down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import skip_or_fail
from pydantic import ValidationError

# one namespace with both ends of a veth pair (veth0: TRex port 0, veth1: port 1), the client check
from test_trex_astf import astf_ns, needs_client

from analysis.capture import read_capture
from generators.trex import PLUGIN, Trex, TrexSpec
from generators.trex.expand import ExpandError, frames
from generators.trex.stl_profile import MAX_LATENCY_STREAMS, build_profile
from ntgcore.errors import GeneratorError
from ntgcore.registry import GENERATORS
from ntgcore.scenario import parse_scenario

HEAD = "version: 1\nname: t\nseed: 3\nflows:\n"
UDP = (
    "  - {name: u, protocol: udp, src: 198.18.0.0/24, dst: 198.19.0.1, dst_port: 9, rate: 10000,"
    " packets: 1, payload: {size: 18}, repeat: {count: %d, period: 100us}}\n"
)
TCP = (
    "  - {name: t, protocol: tcp, src: 198.18.1.1, dst: 198.19.0.2, dst_port: 80, rate: 1000,"
    " packets: 500, start: 0.5s}\n"
)


@pytest.fixture(autouse=True)
def registered():
    if "trex" not in GENERATORS:
        GENERATORS.register("trex", PLUGIN)


# ---- offline ------------------------------------------------------------------------------


def test_one_probe_per_flow_beside_its_traffic():
    s = parse_scenario(HEAD + UDP % 20000 + TCP)
    p = build_profile(s, 3, stream_stats=True, latency_pps=1000)
    traffic, probes = p.traffic, [st for st in p.streams if st.latency]
    assert [st.pg_id for st in traffic] == [1, 2] and [st.pg_id for st in probes] == [3, 4]
    u, t = probes
    # from the flow's first packet to its last: 2 s of the UDP flow, 0.5 s of the TCP one at its start
    assert (u.mode, u.isg_us, u.rate, u.vm) == (
        {"type": "single_burst", "total_pkts": 2000},
        0.0,
        {"pps": 1000.0},
        [],
    )
    assert (t.mode["total_pkts"], t.isg_us) == (500, 500_000.0)
    # the flow's first packet; UDP over IPv4 without a checksum (TRex's trailer would break it)
    assert u.packet["ip"] == traffic[0].packet["ip"] and u.packet["l4"] == dict(
        traffic[0].packet["l4"], chksum=0
    )
    assert t.packet["l4"] == traffic[1].packet["l4"]
    # TRex's 16-byte trailer needs payload: the TCP flow's empty payload becomes 16 bytes
    assert (u.frame_bytes, t.frame_bytes) == ((60, 60), (70, 70))
    assert p.expected_seconds == 2.0 and p.packets == 20000 + 500 + 2000 + 500
    assert any(
        "latency_pps: one latency probe per flow" in a and "leaves them out" in a
        for a in p.approximations
    )
    # without stream_stats the probes are pg_id 1.. ; at pace topspeed they run with the traffic
    fast = build_profile(s, 3, pace="topspeed", duration_s=2, topspeed_pps=100_000, latency_pps=500)
    assert [(st.pg_id, st.mode["type"], st.pps) for st in fast.streams] == [
        (None, "continuous", 50_000),
        (None, "continuous", 50_000),
        (1, "continuous", 500),
        (2, "continuous", 500),
    ]


@pytest.mark.parametrize(
    "value, message",
    [
        (0, r"latency_pps: 0: the latency probes' rate .* give a number > 0"),
        (-5, r"latency_pps: -5: .* > 0"),
        ("fast", r"latency_pps: 'fast': .* > 0"),
        (True, r"latency_pps: True: "),
        (
            60_000,
            r"latency_pps: 60000 pps for each of 2 flow\(s\) is 120,000 probes/s; .* give at most 50000",
        ),
    ],
)
def test_bad_latency_rates_are_refused_naming_the_field(value, message):
    with pytest.raises(GeneratorError, match=message):
        build_profile(parse_scenario(HEAD + UDP % 10 + TCP), 3, latency_pps=value)


def test_more_probes_than_trex_times_and_bad_options_are_refused(tmp_path, monkeypatch):
    many = HEAD + "".join(
        f"  - {{protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: {k + 1},"
        f" rate: 10, packets: 1}}\n"
        for k in range(MAX_LATENCY_STREAMS + 1)
    )
    with pytest.raises(
        GeneratorError,
        match=r"latency_pps: one latency probe per flow, and TRex times at "
        r"most 128 latency streams; the scenario has 129 flows",
    ):
        build_profile(parse_scenario(many), 3, latency_pps=10)
    # the options as a scenario gives them: pydantic names the field
    assert TrexSpec(latency_pps=1000, server_iface="gen1").latency_pps == 1000
    for bad in (0, -1, 200_000):
        with pytest.raises(ValidationError, match="latency_pps"):
            TrexSpec(latency_pps=bad)
    with pytest.raises(GeneratorError, match=r"latency_pps: 0: "):
        Trex(latency_pps=0)
    with pytest.raises(
        GeneratorError, match=r"latency_pps: latency probes are stateless streams; mode astf"
    ):
        Trex(mode="astf", latency_pps=100)
    from testbed.endpoints.netns import NetnsEndpoint

    monkeypatch.setenv("NTG_TREX_DIR", str(tmp_path))
    (tmp_path / "_t-rex-64-o").write_text("#!/bin/sh\n")
    (tmp_path / "_t-rex-64-o").chmod(0o755)
    with pytest.raises(
        GeneratorError,
        match=r"latency_pps with `server: start` needs `server_iface`: TRex "
        r"times the probes it receives on its own port 1, the other end of veth0's veth",
    ):
        Trex(latency_pps=100).prepare(
            parse_scenario(HEAD + UDP % 10), tmp_path / "r", 3, NetnsEndpoint("nowhere", "veth0")
        )


def test_the_scenario_validates_with_latency_options(tmp_path):
    path = tmp_path / "lat.yaml"
    path.write_text(
        HEAD + UDP % 100 + "generator: trex\ntestbed:\n  topology: astf\n"
        "  generators: [{name: trex, at: 'gen:gen0', server_iface: gen1, latency_pps: 1000}]\n"
        "  capture: {at: 'gen:gen1'}\n"
    )
    cli = [sys.executable, "-m", "testbed.cli", "validate", str(path)]
    ok = subprocess.run(
        cli, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent
    )
    assert ok.returncode == 0 and ": ok:" in ok.stdout, ok.stderr
    path.write_text(path.read_text().replace("latency_pps: 1000", "latency_pps: 0"))
    bad = subprocess.run(
        cli, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent
    )
    assert bad.returncode != 0 and "latency_pps" in bad.stderr, (bad.stdout, bad.stderr)


@needs_client
def test_probes_are_in_the_runnable_profile_and_left_out_of_the_offline_capture(tmp_path):
    """trex-profile.py (what trex-console loads) holds the probes as STLFlowLatencyStats; the
    offline run's capture.pcap holds the traffic only, and expand() refuses a probe by name."""
    s = parse_scenario(HEAD + UDP % 200 + TCP)
    gen = Trex(latency_pps=1000)
    gen.prepare(s, tmp_path, 3)
    code = (tmp_path / "trex-profile.py").read_text()
    assert code.count("STLFlowLatencyStats(") == 2 and "STLFlowStats(" not in code
    data = json.loads((tmp_path / "trex-profile.json").read_text())
    assert [st["flow_stats"].get("rule_type") for st in data] == [None, None, "latency", "latency"]
    assert [st["flow_stats"].get("stream_id") for st in data][2:] == [1, 2]
    gen.start()
    assert gen.wait() and gen.status() == "completed"
    assert gen.counters().packets_sent == 200 + 500  # the traffic only
    assert len(read_capture(tmp_path / "capture.pcap")) == 700
    assert "leaves them out" in (tmp_path / "trex-approximations.txt").read_text()
    with pytest.raises(ExpandError, match=r"flows\[0\] \(u\) latency"):
        frames(gen.profile)


# ---- live ---------------------------------------------------------------------------------


def check_latency(lat: dict, sent: int) -> None:
    """What must hold of one probe's numbers, whatever TRex's receive side lost."""
    assert lat["tx_pkts"] == sent, lat
    assert 0.97 * sent <= lat["rx_pkts"] <= sent, lat
    assert 0 < lat["min_us"] <= lat["avg_us"] <= lat["max_us"] < 1_000_000, lat
    assert lat["jitter_us"] is not None and lat["jitter_us"] >= 0, lat
    hist = lat["histogram"]
    assert hist and all(int(v) > 0 for v in hist.values()), lat
    # TRex's histogram: lower bounds in µs (the "0" range: under 10 µs) of (nearly: its "0" range
    # is folded in per sampling period) every probe received; TRex's total_max can miss a probe's
    # last sampling period, so the highest range is reported beside it, not checked against it
    assert 0.99 * lat["rx_pkts"] <= sum(hist.values()) <= lat["rx_pkts"], lat
    assert lat["histogram_max_from_us"] == max(float(k) for k in hist) >= lat["min_us"] - 10, lat
    seq = lat["seq_errors"]
    assert set(seq) == {"dropped", "out_of_order", "dup", "seq_too_high", "seq_too_low"}
    # TRex's loss estimate from the sequence numbers: at most what did not arrive (a lost last
    # probe has no successor to reveal it); a veth neither reorders nor duplicates
    assert (
        0 <= seq["dropped"] <= sent - lat["rx_pkts"] and seq["dup"] == seq["out_of_order"] == 0
    ), lat


@needs_client
def test_latency_probes_live_timed_on_trex_own_receiving_port(astf_ns, tmp_path):
    from testbed.endpoints.netns import NetnsEndpoint

    n = 20000
    s = parse_scenario(HEAD + UDP % n + TCP)
    gen = Trex(server_iface="veth1", latency_pps=1000, stream_stats=True)
    try:
        gen.prepare(s, tmp_path, 3, NetnsEndpoint(astf_ns.gen, "veth0"))
        gen.start()
        assert gen.wait(60), "the adapter did not finish in time"
    finally:
        gen.stop()
    assert gen.status() == "completed", gen.error()
    stats = gen.port_stats()
    lat = stats["latency"]
    check_latency(lat["flows[0] (u) latency"], 2000)
    check_latency(lat["flows[1] (t) latency"], 500)
    assert (lat["flows[0] (u) latency"]["pg_id"], lat["flows[1] (t) latency"]["flow"]) == (3, 1)
    assert lat["global"].get("bad_hdr", 0) == 0, lat["global"]
    # the traffic's own counters (stream_stats), the probes not among them: tx on port 0, rx on
    # port 1 (TRex's receive side may lose a little, never gain)
    streams = stats["streams"]
    assert {k: v["tx_pkts"] for k, v in streams.items()} == {"flows[0] (u)": n, "flows[1] (t)": 500}
    for v in streams.values():
        assert 0.97 * v["tx_pkts"] <= v["rx_pkts"] <= v["tx_pkts"], v
        assert v["rx_bytes"] * v["tx_pkts"] == v["tx_bytes"] * v["rx_pkts"], v  # fixed-size frames
    total = n + 500 + 2000 + 500
    assert gen.counters().packets_sent == stats["veth0"]["opackets"] == total
    # port 1 received what port 0 sent, less TRex's receive losses
    rx = stats["veth1"]
    assert rx["trex_port"] == 1 and 0.97 * total <= rx["ipackets"] <= total, rx
    assert rx["ipackets"] + rx["ierrors"] == total, rx  # what TRex's receive side lost, it counts
    assert (
        "veth1" in (tmp_path / "trex_cfg.yaml").read_text()
        and "--astf" not in gen.server.proc.record.argv
    )
    assert json.loads((tmp_path / "trex-stats.json").read_text())["latency"] == lat
    assert all(r.exit_code is not None for r in gen.commands())
    u = lat["flows[0] (u) latency"]
    print(
        f"\nlatency live: probes {u['tx_pkts']} sent, {u['rx_pkts']} received; min/avg/max "
        f"{u['min_us']}/{u['avg_us']}/{u['max_us']} µs, jitter {u['jitter_us']} µs; "
        f"histogram {u['histogram']}; port 1 {rx['ipackets']} of {total}, ierrors {rx['ierrors']}"
    )


@needs_client
def test_latency_through_testbed_run_with_the_astf_topology(tmp_path, run_scenario, root, trex_dir):
    """`latency_pps` in a scenario on the packaged `astf` topology (TRex sends on gen0, receives
    and times on gen1, the capture on gen1): the probes' numbers in the manifest, the latency
    table and the histogram plot in the report; the probes are on the wire and counted as sent."""
    path = tmp_path / "latency.yaml"
    path.write_text(
        HEAD + UDP % 10000 + "generator: trex\ntestbed:\n  topology: astf\n"
        "  generators: [{name: trex, at: 'gen:gen0', server_iface: gen1, latency_pps: 2000}]\n"
        "  capture: {at: 'gen:gen1', snaplen: 128}\n"
    )
    run = run_scenario(path)
    assert run.ok, run.messages
    step = run.manifest["steps"][0]
    g = step["generators"]["trex"]
    lat = g["port_stats"]["latency"]
    check_latency(lat["flows[0] (u) latency"], 2000)
    assert (
        g["packets_sent"]
        == g["port_stats"]["gen0"]["opackets"]
        == 10000 + 2000
        == step["loss"]["wire"]
    )
    assert step["loss"]["loss_rate"] == 0
    report = (run.run_dir / "report.md").read_text()
    assert "Latency (TRex latency probes): timed by TRex on its own receiving port" in report
    u = lat["flows[0] (u) latency"]
    row = (
        f"| run | trex | flows[0] (u) latency | 2,000 | {u['rx_pkts']:,} | {u['min_us']:,} | {u['avg_us']:,} "
        f"| {u['max_us']:,} | {u['histogram_max_from_us']:,} | {u['jitter_us']:,} |"
    )
    assert row in report, report
    assert (run.run_dir / "latency-histogram.png").stat().st_size > 5000
    assert (
        "TRex latency probes: packets per latency range"
        in (run.run_dir / "report.html").read_text()
    )
