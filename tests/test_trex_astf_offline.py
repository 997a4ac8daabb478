"""TRex `mode: astf` offline (no `testbed:` section): the ASTF profile's TCP connections written
into capture.pcap by generators/trex/astf_offline.py, read back by tshark with every checksum
checked; and live, the same profile's offline capture against what the real TRex v3.08 server
($NTG_TREX_DIR) puts on the wire: the same connections carrying the same bytes."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest
from conftest import skip_or_fail
from test_trex_astf import Tcpdump, astf_ns, needs_client, registered

from generators.trex import Trex
from generators.trex.astf_offline import CLIENT_PORT_FIRST, MSS, astf_frames
from generators.trex.astf_profile import MAX_CONNECTIONS, build_astf_profile
from ntgcore.errors import GeneratorError
from ntgcore.scenario import ScenarioError, load_scenario, parse_scenario

TSHARK = shutil.which("tshark")
HEAD = "version: 1\nname: astf-offline\nseed: 5\ngenerator: trex\ngenerator_options: {mode: astf%s}\nflows:\n"
# web: 3 payloads of 700 bytes as one 2100-byte request (two segments) to one server, 40 connections
# from six client addresses; ssh: one 10-byte request, 9 connections over six server addresses (.1-.6);
# both answered with `response_bytes` (3000: three segments) when the options give it
FLOWS = (
    "  - {name: web, protocol: tcp, src: 198.18.0.0/29, dst: 198.19.0.1, dst_port: 80, rate: 1000,"
    " packets: 3, payload: {text: 'GET / HTTP/1.1', size: 700}, repeat: {count: 40, period: 2ms}}\n"
    "  - {name: ssh, protocol: tcp, src: 198.18.1.1, dst: 198.19.0.0/29, dst_port: 22, rate: 1000,"
    " packets: 1, payload: {size: 10}, repeat: {count: 9, period: 7ms}}\n"
)


def offline(tmp_path: Path, text: str) -> tuple[Trex, Path]:
    s = parse_scenario(text)
    gen = Trex(**s.generator_options)
    gen.prepare(s, tmp_path, s.seed, None)
    gen.start()
    assert gen.wait() and gen.status() == "completed", gen.error()
    return gen, tmp_path / "capture.pcap"


def fields(pcap: Path, *names: str, where: str = "") -> list[list[str]]:
    if TSHARK is None:
        skip_or_fail("tshark is not installed")
    argv = [
        TSHARK,
        "-n",
        "-r",
        str(pcap),
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "tcp.check_checksum:TRUE",
        "-T",
        "fields",
        "-E",
        "separator=|",
        *sum((["-e", n] for n in names), []),
    ]
    out = subprocess.run(
        argv + (["-Y", where] if where else []), capture_output=True, text=True, check=True
    )
    return [line.split("|") for line in out.stdout.splitlines()]


def connections(pcap: Path, server_ports=(80, 22)) -> dict[tuple, dict]:
    """Per TCP connection (client, client port, server, server port): the SYN, SYN-ACK and FINs
    of each side, and the payload bytes each way, from tshark."""
    out: dict[tuple, dict] = {}
    for src, sport, dst, dport, flags, length in fields(
        pcap, "ip.src", "tcp.srcport", "ip.dst", "tcp.dstport", "tcp.flags", "tcp.len"
    ):
        fl, from_client = int(flags, 16), int(dport) in server_ports
        key = (
            (src, int(sport), dst, int(dport))
            if from_client
            else (dst, int(dport), src, int(sport))
        )
        c = out.setdefault(
            key, {"syn": 0, "synack": 0, "fin_c": 0, "fin_s": 0, "req": 0, "resp": 0}
        )
        if fl & 0x02:
            c["synack" if fl & 0x10 else "syn"] += 1
        if fl & 0x01:
            c["fin_c" if from_client else "fin_s"] += 1
        c["req" if from_client else "resp"] += int(length)
    return out


def test_offline_capture_is_every_connection_complete_with_good_checksums(tmp_path):
    gen, pcap = offline(tmp_path, HEAD % ", response_bytes: 3000" + FLOWS)
    # 0 bad checksums (IPv4 and TCP checked), no TCP anomaly tshark's analysis sees
    bad = fields(
        pcap,
        "frame.number",
        where="ip.checksum.status == 0 || tcp.checksum.status == 0 || tcp.analysis.flags",
    )
    assert bad == []
    good = fields(pcap, "tcp.checksum.status", where="tcp.checksum.status == 1")
    conns = connections(pcap)
    assert len(good) == gen.counters().packets_sent > 0
    # exactly `limit` connections per template: SYNs per server address and port
    per_server = Counter((k[2], k[3]) for k, c in conns.items() if c["syn"])
    assert per_server[("198.19.0.1", 80)] == 40
    assert sorted(n for (a, p), n in per_server.items() if p == 22) == [
        1,
        1,
        1,
        2,
        2,
        2,
    ]  # 9 over .1-.6
    assert sum(per_server.values()) == len(conns) == 49
    # every connection complete, and carrying the template's bytes each way
    for k, c in conns.items():
        assert (c["syn"], c["synack"], c["fin_c"], c["fin_s"]) == (1, 1, 1, 1), (k, c)
        assert (c["req"], c["resp"]) == ((2100, 3000) if k[3] == 80 else (10, 3000)), (k, c)
    # the server addresses in turn over the block's hosts (seq), the client ports from 1025
    assert {k[2] for k in conns if k[3] == 22} == {f"198.19.0.{i}" for i in range(1, 7)}
    assert min(k[1] for k in conns) == CLIENT_PORT_FIRST
    sizes = [int(n) for (n,) in fields(pcap, "tcp.len", where="tcp.len > 0")]
    assert max(sizes) == MSS and 2100 - MSS in sizes
    # time order, stamped from 0; the k-th connection of a template opens at k/cps
    times = [
        int(a) * 10**9 + int(b)
        for a, b in (t[0].split(".") for t in fields(pcap, "frame.time_epoch"))
    ]
    assert times[0] == 0 and all(a <= b for a, b in zip(times, times[1:]))
    syns = [
        float(t)
        for (t,) in fields(
            pcap, "frame.time_relative", where="tcp.flags == 0x002 && tcp.dstport == 22"
        )
    ]
    assert syns == pytest.approx([k * 0.007 for k in range(9)])


def test_offline_capture_is_deterministic_and_seeded(tmp_path):
    text = HEAD % "" + FLOWS
    _g, a = offline(tmp_path / "a", text)
    _g, b = offline(tmp_path / "b", text)
    assert a.read_bytes() == b.read_bytes()
    _g, c = offline(tmp_path / "c", text.replace("seed: 5", "seed: 6"))
    assert (
        len(c.read_bytes()) == len(a.read_bytes()) and c.read_bytes() != a.read_bytes()
    )  # other ISNs
    # no answer: only the request each way (2100 bytes in two segments), the server's ACKs
    conns = connections(a)
    assert {(c["req"], c["resp"]) for c in conns.values()} == {(2100, 0), (10, 0)}


def test_the_expansion_streams_holding_only_the_open_connections():
    """MAX_CONNECTIONS connections, 2 µs apart (about 80 open at once): the first 100,000 frames
    come with under 1 MB allocated, not the connections' state."""
    s = parse_scenario(
        HEAD % "" + f"  - {{protocol: tcp, src: 198.18.0.0/16, dst: 198.19.0.1, dst_port: 80,"
        f" rate: 1000, packets: 1, repeat: {{count: {MAX_CONNECTIONS}, period: 2us}}}}\n"
    )
    p = build_astf_profile(s, response_bytes=100)
    assert p.connections == MAX_CONNECTIONS
    tracemalloc.start()
    try:
        last = None
        for t, _frame in itertools.islice(astf_frames(p, 1, (bytes(6), bytes(6))), 100_000):
            assert last is None or t >= last
            last = t
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # no request (no payload), a 100-byte answer: 8 frames a connection, 12,500 connections opened
    assert last is not None and 12_000 < last / 2000 < 13_000
    assert peak < 1_000_000, peak


def test_testbed_run_and_validate_of_an_offline_astf_scenario(tmp_path, run_scenario):
    path = tmp_path / "astf.yaml"
    path.write_text(HEAD % ", response_bytes: 112" + FLOWS)
    out = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent)),
    )
    assert out.returncode == 0, out.stderr
    # web: 6 + 2 × (2 request + 1 answer segments) = 12 a connection, ssh: 6 + 2 × (1 + 1) = 10
    assert (
        "offline (trex, mode astf): capture.pcap with 49 TCP connection(s) of 2 template(s), 570 packets"
        in out.stdout
    ), out.stdout
    run = run_scenario(path)
    assert run.ok, run.messages
    m = run.manifest
    assert m["expected"]["packets"] == m["generators"]["trex"]["packets_sent"] == 570
    checks = run.metrics["checks"]
    assert len(checks) >= 4 and all(c["ok"] for c in checks), (
        checks
    )  # packets, bytes, flows, duration
    for name in (
        "trex-astf-profile.py",
        "trex-astf-profile.json",
        "trex-profile-spec.json",
        "capture.pcap",
    ):
        assert (run.run_dir / name).is_file(), name


@pytest.mark.parametrize(
    "text, message",
    [
        (
            HEAD % ""
            + "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 10, packets: 1}\n",
            r"flows\[0\]: protocol udp: ASTF mode carries TCP sessions only",
        ),
        (
            HEAD % ""
            + "  - {protocol: tcp, src: '2001:db8::1', dst: '2001:db8::2', dst_port: 80, rate: 10, packets: 1}\n",
            r"flows\[0\]: src: ASTF mode maps IPv4 sessions only",
        ),
    ],
)
def test_what_astf_cannot_express_is_refused_offline_too(tmp_path, text, message):
    with pytest.raises(GeneratorError, match=message):
        offline(tmp_path, text)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    out = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent)),
    )
    assert out.returncode == 2 and "ASTF mode" in out.stderr, (out.returncode, out.stderr)


def test_generator_options_are_the_generators_own(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(HEAD % ", nonsense: 1" + FLOWS)
    with pytest.raises(
        ScenarioError, match="generator_options: nonsense: Extra inputs are not permitted"
    ):
        load_scenario(path)
    path.write_text((HEAD % "").replace("{mode: astf}", "{name: trex, mode: astf}") + FLOWS)
    with pytest.raises(ScenarioError, match="generator_options: `name` is `generator`'s"):
        load_scenario(path)


# ---- live: the same profile through the real TRex -------------------------------------------


@needs_client
def test_offline_and_live_carry_the_same_connections_and_bytes(astf_ns, tmp_path):
    """The same scenario offline and live (TRex's client and server sides on veth0/veth1): as
    many connections, the same multiset of (request bytes, response bytes) per connection, the
    same server addresses and ports. What differs (ISNs, client ports, windows, TCP options,
    segment boundaries, times) is listed in generators/trex/README.md."""
    from testbed.endpoints.netns import NetnsEndpoint

    text = HEAD % ", response_bytes: 3000" + FLOWS
    _g, off = offline(tmp_path / "off", text)
    caps = {i: Tcpdump(astf_ns.gen, i, tmp_path / f"{i}.pcap") for i in ("veth0", "veth1")}
    s = parse_scenario(text)
    gen = Trex(mode="astf", server_iface="veth1", response_bytes=3000)
    try:
        gen.prepare(s, tmp_path / "live", 5, NetnsEndpoint(astf_ns.gen, "veth0"))
        gen.start()
        assert gen.wait(60), "the adapter did not finish in time"
    finally:
        gen.stop()
        for c in caps.values():
            c.stop()
    assert gen.status() == "completed", gen.error()
    merged = tmp_path / "live.pcap"
    subprocess.run(
        ["mergecap", "-w", str(merged), str(tmp_path / "veth0.pcap"), str(tmp_path / "veth1.pcap")],
        check=True,
    )
    live, mine = connections(merged), connections(off)
    assert len(live) == len(mine) == 49
    assert all(
        (c["syn"], c["synack"], c["fin_c"], c["fin_s"]) == (1, 1, 1, 1) for c in live.values()
    ), live
    assert Counter((c["req"], c["resp"]) for c in live.values()) == Counter(
        (c["req"], c["resp"]) for c in mine.values()
    )
    assert Counter(k[2:] for k in live) == Counter(k[2:] for k in mine)
    ports = sorted(k[1] for k in live)
    print(
        f"\nASTF offline vs live: {len(live)} connections each; TRex's client ports {ports[0]}-{ports[-1]}, "
        f"ours {min(k[1] for k in mine)}-{max(k[1] for k in mine)}"
    )
