"""Our own expansion of a TRex stateless profile (generators/trex/expand.py), checked against
(a) TRex's simulator bp-sim-64 ($NTG_TREX_DIR/sim), byte for byte, (b) what the real TRex server
sends on a veth, captured on the peer (root, tcpdump, $NTG_TREX_DIR/server), byte for byte, and
(c) the native flow engine's packets for a scenario where the two semantics coincide.

Network safety (../shared/guide/NETWORK-SAFETY.md): the live test uses the `pair` fixture (two
namespaces made for the test, torn down afterwards), addresses in 198.18.0.0/15, an explicit pps
far below 300 kpps and a bounded packet count."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import skip_or_fail

from generators.trex import PLUGIN, WORKER, Trex
from generators.trex.expand import (
    ExpandError,
    StreamExpander,
    expand,
    fastrand,
    fastrand_reference,
    frames,
    template,
    write_pcap,
)
from generators.trex.stl_profile import build_profile
from ntgcore.errors import GeneratorError
from ntgcore.registry import GENERATORS
from ntgcore.scenario import parse_scenario

HEAD = "version: 1\nname: t\nseed: 3\nflows:\n"


@pytest.fixture(autouse=True)
def registered():
    if "trex" not in GENERATORS:
        GENERATORS.register("trex", PLUGIN)
    yield


def profile(text: str, **kw):
    return build_profile(parse_scenario(HEAD + text), 3, **kw)


def read_frames(path) -> list[tuple[int, bytes]]:
    """(time in ns, frame) of every packet of a pcap, through Scapy's raw reader."""
    from scapy.utils import RawPcapReader

    out = []
    with RawPcapReader(str(path)) as r:
        nano = getattr(r, "nano", False)
        for data, meta in r:
            sec, frac = (
                (meta.sec, meta.usec)
                if hasattr(meta, "sec")
                else ((meta.tshigh << 32 | meta.tslow) // 10**6, 0)
            )
            out.append((sec * 10**9 + frac * (1 if nano else 1000), bytes(data)))
    return out


def one_stream(vm: list[dict], n: int = 12, **extra) -> dict:
    """A hand-made UDP stream spec with the given field-engine program."""
    s = {
        "label": "s",
        "name": "s",
        "flow_index": 0,
        "packet": {
            "eth": {"src": "02:00:00:00:00:01", "dst": "02:00:00:00:00:02"},
            "ip": {"version": 4, "src": "198.18.0.1", "dst": "198.19.0.1"},
            "l4": {"proto": "udp", "sport": 1, "dport": 2},
            "payload_hex": "",
            "payload_len": 30,
        },
        "vm": vm,
        "mode": {"type": "single_burst", "total_pkts": n},
        "rate": {"pps": 1000.0},
        "isg_us": 0.0,
        "random_seed": 7,
        "packets": n,
        "pps": 1000.0,
        "frame_bytes": [72, 72],
    }
    s.update(extra)
    return s


def dport_values(vm: list[dict], n: int = 12) -> list[int]:
    vm = vm + [{"op": "write", "var": vm[-1]["name"], "field": "UDP.dport"}]
    f = frames({"streams": [one_stream(vm, n)]})
    return [int.from_bytes(b[36:38], "big") for _, b in f]


def var(name="v", kind="inc", lo=0, hi=3, init=None, step=1, size=2, next_var=None):
    return {
        "op": "var",
        "name": name,
        "size": size,
        "kind": kind,
        "min": lo,
        "max": hi,
        "init": lo if init is None else init,
        "step": step,
        "next_var": next_var,
    }


# ---- the field engine's semantics (TRex's documented examples and its source) ----------------------


def test_inc_and_dec_start_at_init_and_wrap_as_trex_documents():
    # STLVmFlowVar's docstring: min 0, max 3 -> inc 0,1,2,3,0,1,2,3; dec 0,3,2,1,0,3,2,1
    assert dport_values([var(kind="inc")], 8) == [0, 1, 2, 3, 0, 1, 2, 3]
    assert dport_values([var(kind="dec")], 8) == [0, 3, 2, 1, 0, 3, 2, 1]
    assert dport_values([var(kind="inc", lo=10, hi=20, init=18, step=4)], 5) == [18, 11, 15, 19, 12]
    assert dport_values([var(kind="dec", lo=10, hi=20, init=12, step=4)], 4) == [12, 19, 15, 11]


def test_next_var_steps_only_when_the_counter_wraps():
    vm = [var("c", lo=0, hi=2, next_var="v"), var("v", lo=100, hi=101, init=100)]
    assert dport_values(vm, 9) == [100, 100, 100, 101, 101, 101, 100, 100, 100]
    # a counter that does not start at its minimum: the step happens when it wraps
    vm = [var("c", lo=0, hi=2, init=1, next_var="v"), var("v", lo=100, hi=105, init=100)]
    got = dport_values(vm, 7)
    # c runs 1,2,0,1,2,0,1: it wraps in packet 2 and 5; v holds the value before init until then
    assert got == [105, 105, 100, 100, 100, 101, 101]


def test_random_values_come_from_trexs_generator_and_its_seed():
    ref = fastrand_reference(1234567, 70_000)
    assert fastrand(1234567, np.arange(70_000)).tolist() == ref
    assert fastrand(99, np.array([5, 3, 65_535, 65_536, 200_000])).tolist() == [
        fastrand_reference(99, 200_001)[i] for i in (5, 3, 65_535, 65_536, 200_000)
    ]
    # one 2-byte random variable: value = min + draw % range, one draw per packet
    seed0 = (7 * 514229) & 0xFFFFFFFF
    got = dport_values([var(kind="random", lo=1000, hi=1999)], 50)
    assert got == [1000 + r % 1000 for r in fastrand_reference(seed0, 50)]
    # a 2-byte variable draws 15 bits: over 0..65535 it stays below 32768 (TRex's own behaviour)
    assert max(dport_values([var(kind="random", lo=0, hi=65535)], 2000)) < 32768


def test_any_range_of_packets_expands_the_same():
    p = profile(
        "  - {protocol: udp, src: 198.18.0.0/24, dst: {cidr: 198.19.0.7/24, mode: increment},"
        " dst_port: {range: 1000-1099, mode: increment}, rate: 10000, packets: 1,"
        " repeat: {count: 1000, period: 100us}, payload: {size: 10-300}}\n"
    )
    whole = [c.frame(i) for c in expand(p) for i in range(len(c.lengths))]
    pieces = [c.frame(i) for c in expand(p, chunk=37) for i in range(len(c.lengths))]
    assert whole == pieces and len(whole) == 1000
    ex = StreamExpander(p.as_dict()["streams"][0])
    k = np.array([999, 3, 500])
    f, n = ex.frames(k)
    assert [f[i, : n[i]].tobytes() for i in range(3)] == [whole[999], whole[3], whole[500]]


def test_wire_checksums_are_complete_and_offload_leaves_the_pseudo_header_sum():
    scapy = pytest.importorskip("scapy.all")
    p = profile(
        "  - {protocol: udp, src: 198.18.0.0/24, dst: 198.19.0.1, src_port: 4000,"
        " dst_port: {range: 1000-1009, mode: increment}, rate: 10000, packets: 1,"
        " repeat: {count: 200, period: 100us}, payload: {size: 10-40}}\n"
        "  - {protocol: tcp, src: {cidr: 2001:db8::/80, mode: increment}, dst: 2001:db8:1::1,"
        " src_port: 4000, dst_port: 80, rate: 10000, packets: 1, repeat: {count: 50, period: 1ms},"
        " payload: {size: 0-20}}\n"
        "  - {protocol: icmp, src: {cidr: 198.18.3.250/24, mode: increment}, dst: 198.19.0.1,"
        " rate: 10000, packets: 1, repeat: {count: 20, period: 1ms}, payload: {text: hi}}\n"
        "  - {protocol: icmpv6, src: 2001:db8::1, dst: 2001:db8::2, rate: 1000, packets: 30}\n"
    )
    wire = frames(p)
    assert len(wire) == 300
    for _, raw in wire:
        f = scapy.Ether(raw)
        for layer, field in (
            ("IP", "chksum"),
            ("UDP", "chksum"),
            ("TCP", "chksum"),
            ("ICMP", "chksum"),
            ("ICMPv6EchoRequest", "cksum"),
        ):
            if layer in f:
                delattr(f[layer], field)
        assert bytes(scapy.Ether(bytes(f))) == raw
    off = frames(p, checksums="offload")
    v4 = lambda b, proto: b[12:14] == b"\x08\x00" and b[23] == proto
    icmp = lambda b: v4(b, 1) or (b[12:14] == b"\x86\xdd" and b[20] == 58)
    udp = [b for _, b in off if v4(b, 17)]
    assert len(udp) == 200
    assert all(b[24:26] == b"\0\0" for b in udp)  # the IPv4 header checksum is left to the NIC
    for b in udp:
        seg = len(b) - 34
        words = sum(int.from_bytes(b[i : i + 2], "big") for i in range(26, 34, 2)) + 17 + seg
        while words >> 16:
            words = (words & 0xFFFF) + (words >> 16)
        assert int.from_bytes(b[40:42], "big") == words
    # the ICMP streams' own fixes (IPv4 header, ICMPv6) are complete either way
    assert [b for _, b in off if icmp(b)] == [b for _, b in wire if icmp(b)] != []


def test_template_is_the_packet_scapy_builds():
    scapy = pytest.importorskip("scapy.all")
    p = profile(
        "  - {protocol: tcp, src: 198.18.1.1, dst: 198.19.0.1, src_port: 4000, dst_port: 80,"
        " rate: 10000, packets: 20, payload: {text: hello, size: 9}}\n"
    )
    s = p.as_dict()["streams"][0]
    l4 = s["packet"]["l4"]
    want = (
        scapy.Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / scapy.IP(src="198.18.1.1", dst="198.19.0.1", ttl=64, id=0, flags="DF")
        / scapy.TCP(
            sport=4000, dport=80, flags=l4["flags"], seq=l4["seq"], ack=l4["ack"], window=65535
        )
        / scapy.Raw(b"hello\0\0\0\0")
    )
    assert template(s["packet"]).data == bytes(want)


def test_times_follow_trexs_scheduler():
    p = profile(
        "  - {protocol: udp, src: {cidr: 198.18.4.1/24, mode: increment}, dst: 198.19.0.1,"
        " src_port: 5000, dst_port: 53, rate: 10000, packets: 3, repeat: {count: 3, period: 1ms}}\n"
        "  - {protocol: udp, src: 198.18.1.1, dst: 198.19.0.1, src_port: 1, dst_port: 2, rate: 1000,"
        " packets: 2, start: 2.5ms}\n"
    )
    got = [(t, b[26:30]) for t, b in frames(p)]
    # multi-burst: 3 packets 100 us apart, then ibg (800 us) after the last packet: instances
    # every 1 ms, as the scenario says
    assert [t for t, _ in got] == [
        0,
        100_000,
        200_000,
        1_000_000,
        1_100_000,
        1_200_000,
        2_000_000,
        2_100_000,
        2_200_000,
        2_500_000,
        3_500_000,
    ]


def test_a_pcap_our_reader_reads(tmp_path, pcaplib):
    from analysis.capture import read_capture

    p = profile(
        "  - {protocol: udp, src: 198.18.0.0/24, dst: 198.19.0.1, src_port: 4000, dst_port: 9,"
        " rate: 10000, packets: 1, repeat: {count: 5000, period: 100us}, payload: {size: 18-100}}\n"
    )
    info = write_pcap(p, tmp_path / "x.pcap", t0_ns=10**18, chunk=999)
    c = read_capture(tmp_path / "x.pcap")
    assert len(c) == info["packets"] == 5000 and int(c.wire_len.sum()) == info["bytes"]
    assert c.ts_ns[0] == 10**18 and c.ts_ns[-1] == 10**18 + 4999 * 100_000
    assert set(c.wire_len.tolist()) == set(range(60, 143))


def test_what_cannot_be_reproduced_is_refused():
    with pytest.raises(ExpandError, match="pg_id"):
        list(expand({"streams": [one_stream([], pg_id=1)]}))
    with pytest.raises(ExpandError, match="random_seed 0"):
        list(expand({"streams": [one_stream([var(kind="random")], random_seed=0)]}))
    with pytest.raises(ExpandError, match=r"all 2\^64 values.*SIGFPE"):  # what kills TRex's server
        list(expand({"streams": [one_stream([var(lo=0, hi=2**64 - 1, size=8)])]}))
    with pytest.raises(ExpandError, match="needs a duration"):
        list(expand({"streams": [one_stream([], mode={"type": "continuous"})]}))


def test_topspeed_profiles_expand_for_their_duration():
    p = build_profile(
        parse_scenario(
            HEAD + "  - {protocol: tcp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 1,"
            " dst_port: 80, rate: 10, packets: 5}\n"
        ),
        1,
        pace="topspeed",
        duration_s=0.01,
        topspeed_pps=100_000,
    )
    assert len(frames(p)) == 1000


# ---- (a) TRex's simulator ---------------------------------------------------------------------------

needs_client = pytest.mark.skipif(
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; raise SystemExit(u.find_spec('lbr_trex_client') is None)",
        ]
    ).returncode
    != 0,
    reason="lbr-trex-client is not installed",
)

# inc / dec only (addresses and ports stepped, the ICMP checksum counted down, a multi-burst with
# a counter's next_var, an inter-stream gap, IPv6) and one with random fields and trimmed lengths
SIM_INC = (
    "  - {protocol: udp, src: {cidr: 198.18.0.250/24, mode: increment}, dst: {cidr: 198.19.7.3/28, mode: increment},"
    " src_port: 4000, dst_port: {range: 1000-1009, mode: increment}, rate: 10000, packets: 1,"
    " repeat: {count: 300, period: 100us}, payload: {text: abc, size: 30}}\n"
    "  - {protocol: tcp, src: 198.18.1.1, dst: 198.19.0.1, src_port: 4000, dst_port: 80, rate: 10000,"
    " packets: 20, start: 5ms}\n"
    "  - {protocol: icmp, src: {cidr: 198.18.3.250/24, mode: increment}, dst: 198.19.0.1, rate: 10000,"
    " packets: 1, repeat: {count: 10, period: 1ms}}\n"
    "  - {protocol: icmp, src: 198.18.2.1, dst: 198.19.0.1, rate: 1000, packets: 7, payload: {text: hi}}\n"
    "  - {protocol: udp, src: {cidr: 198.18.4.1/24, mode: increment}, dst: 198.19.0.1, src_port: 5000,"
    " dst_port: 53, rate: 10000, packets: 3, repeat: {count: 4, period: 1ms}}\n"
    "  - {protocol: udp, src: {cidr: 2001:db8::ff/120, mode: increment}, dst: 2001:db8:1::1, src_port: 7,"
    " dst_port: 9, rate: 1000, packets: 1, repeat: {count: 300, period: 1ms}}\n"
    "  - {protocol: icmpv6, src: 2001:db8::1, dst: 2001:db8::2, rate: 1000, packets: 3}\n"
)
SIM_RANDOM = (
    "  - {protocol: udp, src: 198.18.0.0/24, dst: 198.19.0.0/16, dst_port: {range: 1000-1099},"
    " rate: 10000, packets: 1, repeat: {count: 2000, period: 100us}, payload: {size: 10-300}}\n"
)


def simulate(tmp_path: Path, text: str, d: Path):
    gen = Trex(server={"host": "127.0.0.1"})
    prof = gen.write_profile(parse_scenario(HEAD + text), tmp_path, 3)
    res = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            str(WORKER),
            "sim",
            str(tmp_path / "trex-profile.py"),
            str(tmp_path / "sim.pcap"),
            str(Path(d) / "sim"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert '"event": "simulated"' in res.stdout, res.stdout + res.stderr
    return prof, read_frames(tmp_path / "sim.pcap")


def by_stream(pkts: list[tuple[int, bytes]], prof) -> dict:
    """Frames grouped by their stream (the stream whose expansion holds them), each in order."""
    out: dict = {}
    for c in expand(prof, checksums="offload"):
        for i in range(len(c.lengths)):
            out.setdefault(c.frame(i), int(c.stream[i]))
    groups: dict = {}
    for t, b in pkts:
        groups.setdefault(out.get(b, -1), []).append((t, b))
    return groups


@needs_client
@pytest.mark.parametrize("text", [SIM_INC, SIM_RANDOM], ids=["inc-dec", "random-trim"])
def test_byte_equal_to_trexs_simulator(tmp_path, text, trex_sim_dir):
    prof, sim = simulate(tmp_path, text, trex_sim_dir)
    ours = frames(prof, checksums="offload")  # the simulator leaves fix_chksum_hw to the "NIC"
    assert len(ours) == len(sim) == prof.packets
    assert Counter(b for _, b in ours) == Counter(b for _, b in sim)
    mine, theirs = by_stream(ours, prof), by_stream(sim, prof)
    assert -1 not in theirs
    for i in mine:  # each stream's packets in the same order
        assert [b for _, b in mine[i]] == [b for _, b in theirs[i]], i
        t0 = theirs[i][0][0] - mine[i][0][0]  # the simulator's clock starts elsewhere
        dt = [abs(a - (b - t0)) for (a, _), (b, _) in zip(mine[i], theirs[i])]
        assert max(dt) <= 2_000, (i, max(dt))  # its pcap has microseconds; float accumulation


# ---- (b) the real server on a veth --------------------------------------------------------------------

LIVE = (
    "  - {protocol: udp, src: 198.18.0.0/24, dst: {cidr: 198.19.0.10/24, mode: increment},"
    " dst_port: {range: 1000-1099, mode: increment}, rate: 50kpps, packets: 1,"
    " repeat: {count: 20000, period: 20us}, payload: {size: 18-300}}\n"
    "  - {protocol: tcp, src: 198.18.1.1, dst: 198.19.0.1, src_port: 4000, dst_port: 80, rate: 10kpps,"
    " packets: 2000, start: 5ms, payload: {text: GET /, size: 40}}\n"
    "  - {protocol: icmp, src: {cidr: 198.18.3.250/24, mode: increment}, dst: 198.19.0.1, rate: 5kpps,"
    " packets: 1, repeat: {count: 1000, period: 200us}, payload: {size: 18}}\n"
    "  - {protocol: udp, src: {cidr: 198.18.4.1/24, mode: increment}, dst: 198.19.0.1, src_port: 5000,"
    " dst_port: 53, rate: 10kpps, packets: 3, repeat: {count: 300, period: 1ms}, payload: {size: 18}}\n"
    "  - {protocol: udp, src: {cidr: 2001:db8::ffff:ffff:ff00/80, mode: increment}, dst: 2001:db8:1::1, src_port: 7,"
    " dst_port: {range: 1-65535}, rate: 5kpps, packets: 1, repeat: {count: 1000, period: 200us}}\n"
    "  - {protocol: icmpv6, src: 2001:db8::1, dst: 2001:db8::2, rate: 1kpps, packets: 20}\n"
)


@pytest.mark.ntg_live
@pytest.mark.usefixtures("root")
@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed")
def test_byte_equal_to_what_the_real_server_sends_on_a_veth(pair, tmp_path, pcaplib, trex_dir):
    import signal
    import time

    from ntgcore.proc import Process
    from testbed.endpoints.netns import NetnsEndpoint

    cap = tmp_path / "peer.pcap"
    log = open(tmp_path / "tcpdump.log", "wb")
    dump = Process(
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
            "65536",
            "-s",
            "2048",
            "-U",
            "--immediate-mode",
            "-w",
            str(cap),
        ],
        stderr=log,
    ).start()
    gen = Trex()
    try:
        deadline = time.monotonic() + 10
        while b"listening on" not in (tmp_path / "tcpdump.log").read_bytes():
            assert time.monotonic() < deadline and dump.poll() is None
            time.sleep(0.05)
        gen.prepare(
            parse_scenario(HEAD + LIVE), tmp_path / "run", 3, NetnsEndpoint(pair.gen, "veth0")
        )
        gen.start()
        assert gen.wait(60) and gen.status() == "completed", gen.error()
        time.sleep(0.3)
    finally:
        gen.stop()
        dump.stop(signal.SIGINT, grace=5)
        log.close()
    wire = read_frames(cap)
    ours = frames(gen.profile)  # checksums="wire": TRex computes them in software on a veth
    assert len(ours) == gen.profile.packets == 20000 + 2000 + 1000 + 900 + 1000 + 20
    assert len(wire) == len(ours), (tmp_path / "tcpdump.log").read_text()
    assert Counter(b for _, b in wire) == Counter(b for _, b in ours)
    index: dict = {}
    for c in expand(gen.profile):
        for i in range(len(c.lengths)):
            index[c.frame(i)] = int(c.stream[i])
    for s in range(len(gen.profile.streams)):  # each stream's packets in our order
        assert [b for _, b in wire if index[b] == s] == [b for _, b in ours if index[b] == s], s


# ---- (c) the native flow engine, where the semantics coincide ------------------------------------------

SAME = {
    "udp4": "  - {protocol: udp, src: {cidr: 198.18.0.250/24, mode: increment}, dst: 198.19.0.1, src_port: 4000,"
    " dst_port: {range: 1000-1009, mode: increment}, rate: 10000, packets: 1,"
    " repeat: {count: 600, period: 100us}, payload: {text: abc, size: 30}}\n",
    "icmp4": "  - {protocol: icmp, src: {cidr: 198.18.3.0/24, mode: increment}, dst: 198.19.0.1, rate: 1000,"
    " packets: 1, repeat: {count: 300, period: 1ms}, payload: {text: ping, size: 20}}\n",
    "udp6": "  - {protocol: udp, src: {cidr: 2001:db8::ff00/120, mode: increment}, dst: 2001:db8:1::1, src_port: 7,"
    " dst_port: {range: 1-65535, mode: increment}, rate: 1000, packets: 1,"
    " repeat: {count: 300, period: 1ms}, payload: {size: 100}}\n",
}


@pytest.mark.parametrize("name", list(SAME))
def test_byte_equal_to_the_native_engine_where_the_semantics_coincide(name, tmp_path):
    from generators.flowengine import engine_path
    from generators.flowengine.session import compile_session

    try:
        binary = engine_path()
    except GeneratorError as exc:
        skip_or_fail(str(exc))
    s = parse_scenario(HEAD + SAME[name])
    (tmp_path / "s.ntg").write_text(compile_session(s, 3))
    res = subprocess.run(
        [
            str(binary),
            "gen",
            str(tmp_path / "s.ntg"),
            "-o",
            str(tmp_path / "e.pcap"),
            "--seed",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    engine = read_frames(tmp_path / "e.pcap")
    ours = frames(build_profile(s, 3))
    assert [b for _, b in ours] == [b for _, b in engine]
    assert [t - ours[0][0] for t, _ in ours] == [t - engine[0][0] for t, _ in engine]


# ---- the adapter offline ------------------------------------------------------------------------------


@needs_client
def test_an_offline_run_with_generator_trex_writes_our_expansion(tmp_path, run_scenario, pcaplib):
    flows = (
        "  - {protocol: udp, src: {cidr: 198.18.0.0/20, mode: increment}, dst: 198.19.0.1, src_port: 4000,"
        " dst_port: 9, rate: 10000,"
        " packets: 1, repeat: {count: 3000, period: 100us}, payload: {size: 18-100}}\n"
        "  - {protocol: icmp, src: 198.18.2.1, dst: 198.19.0.1, rate: 1000, packets: 40, start: 1ms}\n"
    )
    path = tmp_path / "offline.yaml"
    path.write_text(HEAD + flows + "generator: trex\n")
    run = run_scenario(path)
    assert run.ok, run.messages
    got = read_frames(run.run_dir / "capture.pcap")
    want = frames(profile(flows))
    assert got == want and len(got) == 3040
    assert run.manifest["generators"]["trex"]["packets_sent"] == 3040
    assert (run.run_dir / "trex-profile.py").is_file()


@needs_client
def test_an_offline_run_refuses_what_trex_cannot_send(tmp_path):
    gen = Trex()
    with pytest.raises(GeneratorError, match=r"flows\[0\]: src: .*at most 63 bits.*64 host bits"):
        gen.prepare(
            parse_scenario(
                HEAD + "  - {protocol: udp, src: {cidr: 2001:db8::/64, mode: increment},"
                " dst: 2001:db8::1, dst_port: 9, rate: 10, packets: 1,"
                " repeat: {count: 2, period: 1ms}}\n"
            ),
            tmp_path,
            3,
            None,
        )
    assert gen.status() == "not started" and not (tmp_path / "capture.pcap").exists()
