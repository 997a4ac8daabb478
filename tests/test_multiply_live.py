"""The multiplier's core driven one packet at a time with live planning, as the inline multiplier
drives it (tests/native/test_mult_live.c): no scan pass, tables sized up front; and the inline
multiplier itself (`flowengine multiply --live`, method `multiply`) on real namespaces with a real
HTTP server."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from scapy.all import IP, UDP, Dot1AD, Dot1Q, Ether, IPv6, rdpcap, wrpcap

import testbed.methods.multiply as multiply_method
from ntgcore.proc import Process
from ntgcore.registry import METHODS
from ntgcore.scenario import ScenarioError, parse_scenario
from testbed.endpoints.netns import NetnsBackend
from tests.test_multiply import (
    C4,
    C6,
    checksum_status,
    engine,
    frame_count,
    mixed_packets,
    shadow_key,
)

# The entry point of pyproject.toml registers it; a venv installed before it existed has not.
if "multiply" not in METHODS:
    METHODS.register("multiply", multiply_method.METHOD)

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "generators" / "flowengine" / "src" / "multiply"
NATIVE = REPO / "ntgcore" / "native"
COMMON = REPO / "generators" / "flowengine" / "src" / "common"


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build tests/native/test_mult_live.c")
    exe = tmp_path_factory.mktemp("multlive") / "test_mult_live"
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            str(SRC),
            "-I",
            str(NATIVE),
            "-I",
            str(COMMON),
            str(REPO / "tests" / "native" / "test_mult_live.c"),
            str(SRC / "mult.c"),
            str(NATIVE / "csum.c"),
            str(NATIVE / "hash_crc32c.c"),
            str(NATIVE / "pcapread.c"),
            "-o",
            str(exe),
        ],
        check=True,
    )
    return exe


def run(driver, inp: Path, out: Path, t: int, max_flows: int, *home: str) -> dict:
    r = subprocess.run(
        [str(driver), str(inp), str(out), str(t), str(max_flows), *home],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    words = r.stdout.split()
    return dict(zip(words[::2], map(int, words[1::2])))


@pytest.mark.parametrize("home", [(), ("home",)], ids=["one-space", "sided"])
def test_live_planning_gives_consistent_shadow_sessions_with_valid_checksums(
    driver, tmp_path, home
):
    inp, out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    packets = mixed_packets()
    wrpcap(str(inp), packets)
    t = 4
    counts = run(driver, inp, out, t, 1000, *home)
    assert counts == {
        "in": len(packets),
        "out": (t + 1) * len(packets),
        "table_full": 0,
        "slots_mismatch": 0,
    }
    assert frame_count(out) == (t + 1) * len(packets)
    assert not [k for k in checksum_status(out) if k[1] == 0]
    # every copy maps an original flow to one shadow flow, and the reverse direction to its reverse
    frames = rdpcap(str(out))
    shadow_of: dict = defaultdict(set)
    for g in range(0, len(frames), t + 1):
        orig = shadow_key(frames[g + t])
        for c in range(t):
            shadow_of[(c, orig)].add(shadow_key(frames[g + c]))
    for (c, (proto, s, sp, d, dp)), shadows in shadow_of.items():
        assert len(shadows) == 1
        (shadow,) = shadows
        back = shadow_of.get((c, (proto, d, dp, s, sp)))
        if back:
            (rp, rs, rsp, rd, rdp) = next(iter(back))
            assert (rp, rd, rdp, rs, rsp) == shadow
        if home:  # the sided plan: the clients' (home) shadows in the home ranges, the servers' not
            for orig, sh in ((s, shadow[1]), (d, shadow[3])):
                client = orig in (C4, C6)
                assert inside(sh, ("198.19.0.0/24", "2001:db8:200::/64")) == client, (orig, sh)
                assert inside(sh, ("198.18.0.0/16", "2001:db8:100::/48")) != client, (orig, sh)


def inside(addr: str, nets: tuple[str, ...]) -> bool:
    a = ipaddress.ip_address(addr)
    return any(a.version == n.version and a in n for n in map(ipaddress.ip_network, nets))


def test_a_flow_past_the_live_bound_goes_out_alone_and_is_counted(driver, tmp_path):
    inp, out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    pk = [
        Ether() / IP(src=C4, dst=f"10.2.0.{i}") / UDP(sport=1000 + i, dport=53) for i in range(1, 6)
    ]
    pk.append(Ether() / IPv6(src=C6, dst="2001:db8:b::1") / UDP(sport=1, dport=2))
    wrpcap(str(inp), pk)
    counts = run(driver, inp, out, 3, 3)
    assert counts == {"in": 6, "out": 3 * 4 + 3, "table_full": 3, "slots_mismatch": 0}
    assert frame_count(out) == 15


# ---- the inline multiplier on real namespaces (method multiply) ------------------------------

INLINE = """\
version: 1
name: inline-test
flows:
  - {{name: http, protocol: tcp, src: 198.18.3.1, dst: 198.18.3.2, dst_port: 8080, rate: 1, duration: 1s}}
testbed:
  topology: multiply
  method: multiply
  capture: {{at: "mult:m-in", also_at: ["mult:m-out", "mult:m-dut"], snaplen: 2048}}
  inline:
    copies: [3]
    ranges: [198.19.0.0/16]
    original: [198.18.3.0/24]
    both: {both}
    pages: [300, 20000, 150000]
    rounds: 2
"""


@pytest.mark.parametrize("both", [False, True])
def test_inline_multiplier_with_a_real_server_gives_exact_egress_and_valid_checksums(
    both, engine, tmp_path, run_scenario, root
):
    path = tmp_path / "inline.yaml"
    path.write_text(INLINE.format(both=str(both).lower()))
    r = run_scenario(str(path))
    assert r.ok, r.messages
    (row,) = r.metrics["multiply"]
    # the original sessions completed: every page fetched whole with HTTP 200
    assert row["fetches"] == row["fetches_ok"] == 6 and row["client_bytes"] == 2 * (
        300 + 20000 + 150000
    ), row
    # counted from the captures: egress is exactly (T+1) x ingress, nothing lost
    assert (
        row["ingress"] > 20
        and row["egress"] == 4 * row["ingress"]
        and row["loss"] == 0
        and row["exact"]
    ), row
    assert row["latency_median_us"] > 0 and row["latency_p99_us"] >= row["latency_median_us"]
    assert 0 < row["idle_originals"] <= row["ingress"]
    step = Path(r.run_dir) / r.manifest["steps"][0]["dir"]
    engine_counts = r.manifest["steps"][0]["multiplier"]["engine"]
    reverse = engine_counts["reverse"]
    assert (reverse["copies_sent"] > 0) is both
    for name in ("capture-mult-m-out.pcap", "capture-mult-m-dut.pcap", "capture.pcap"):
        status = checksum_status(step / name)
        assert not [k for k in status if k[1] == 0], (name, status)
        assert status[("tcp", 1)] > 0, (name, status)


def test_inline_multiplier_refuses_bad_bounds_before_opening_anything(engine):
    def refused(*args: str) -> str:
        p = subprocess.run(
            [str(engine), "multiply", "--live", "no-in", "no-out", "no-dut", *args],
            capture_output=True,
            text=True,
        )
        assert p.returncode == 2, p
        return p.stderr

    assert "need 90112 shadow addresses" in refused(
        "-T", "22", "--ranges", "198.19.0.0/16", "--max-addrs", "4096"
    )
    assert "more than half" in refused(
        "-T", "2", "--ranges", "198.19.0.0/8", "--max-flows", "1000000000"
    )
    assert "overlaps the original" in refused(
        "-T", "2", "--ranges", "198.18.0.0/16", "--original", "198.18.3.0/24"
    )
    assert "no interface 'no-in'" in refused("-T", "2", "--ranges", "198.19.0.0/16")


def test_the_plan_is_one_step_per_t_and_the_section_belongs_to_its_method():
    text = INLINE.format(both="false").replace("copies: [3]", "copies: [1, 10, 22]")
    steps = multiply_method.plan(parse_scenario(text))
    assert [(s.name, s.params["copies"], s.generators) for s in steps] == [
        ("T1", 1, []),
        ("T10", 10, []),
        ("T22", 22, []),
    ]
    assert all(s.deadline_s() == steps[0].params["deadline_s"] > 30 for s in steps)
    with pytest.raises(ScenarioError, match="method `multiply` needs an `inline` section"):
        parse_scenario(text.replace("  inline:\n", "  inlined:\n").split("  inlined:")[0])
    with pytest.raises(ScenarioError, match="measures from the captures at the multiplier"):
        parse_scenario(
            text.replace('also_at: ["mult:m-out", "mult:m-dut"]', 'also_at: ["mult:m-out"]')
        )
    with pytest.raises(ScenarioError, match="overlaps the original range"):
        parse_scenario(text.replace("ranges: [198.19.0.0/16]", "ranges: [198.18.3.0/25]"))
    with pytest.raises(ScenarioError, match="ranges"):
        parse_scenario(
            text.replace("ranges: [198.19.0.0/16]", "ranges: [198.19.0.0/16, 198.19.1.0/24]")
        )


def test_vlan_tags_the_kernel_takes_off_leave_the_inline_multiplier_again(engine, tmp_path, root):
    """A frame received on a packet socket comes without its outer VLAN tag (the kernel keeps it
    in the ring's header): the inline multiplier puts it back, so the original (to the server)
    and its T copies (to the DUT) leave tagged as they came: 802.1Q, 802.1ad over 802.1Q, and
    untagged frames alike, every checksum right (tshark), nothing untagged that came tagged."""
    if not shutil.which("tcpreplay") or not shutil.which("tcpdump"):
        pytest.skip("needs root, tcpreplay and tcpdump (./bootstrap.sh test installs them)")

    def frame(*tags) -> Ether:
        inner = IP(src="198.18.3.1", dst="198.18.3.2") / UDP(sport=40000, dport=9) / (b"x" * 40)
        for tag in reversed(tags):
            inner = tag / inner
        return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / inner

    frames = (
        [frame(Dot1Q(vlan=42, prio=5))] * 8
        + [frame(Dot1AD(vlan=7), Dot1Q(vlan=42))] * 4
        + [frame()] * 4
    )
    feed, summary = tmp_path / "feed.pcap", tmp_path / "summary.json"
    wrpcap(str(feed), frames)
    site = NetnsBackend().open("multiply")
    caps = {"out": tmp_path / "out.pcap", "dut": tmp_path / "dut.pcap"}
    procs: list[Process] = []
    try:
        site.apply()
        for place, name in (("server:sv0", "out"), ("dut:d0", "dut")):
            ep = site.endpoint(place)
            procs.append(
                Process(
                    f"tcpdump {name}",
                    ep.argv("tcpdump", "-n", "-U", "-i", ep.iface, "-w", str(caps[name])),
                    stderr=subprocess.DEVNULL,
                ).start()
            )
        mult = Process(
            "multiplier",
            site.endpoint("mult:m-in").argv(
                str(engine),
                "multiply",
                "--live",
                "m-in",
                "m-out",
                "m-dut",
                "-T",
                "2",
                "--ranges",
                "198.19.0.0/16",
                "--original",
                "198.18.3.0/24",
                "--summary",
                str(summary),
            ),
        ).start()
        procs.append(mult)
        time.sleep(1.5)  # the multiplier's rings and tcpdump's sockets are open
        ep = site.endpoint("client:cl0")
        sent = subprocess.run(
            ep.argv("tcpreplay", "-q", "-i", ep.iface, "--pps", "200", str(feed)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stderr
        time.sleep(1.0)
        assert mult.stop(grace=5) == 0  # SIGTERM: it writes its summary and ends
        for p in procs:
            p.stop(signal.SIGINT, grace=5)
    finally:
        for p in procs:
            p.stop(grace=2)
        site.remove()
    fwd = json.loads(summary.read_text())["forward"]
    assert fwd["received"] == 16 and fwd["vlan_restored"] == 12 and fwd["copies_sent"] == 32, fwd
    got = {name: rdpcap(str(path)) for name, path in caps.items()}
    assert len(got["out"]) == 16 and len(got["dut"]) == 32
    for name, packets in got.items():
        tags = Counter(
            (
                p[Dot1AD].vlan if Dot1AD in p else None,
                p[Dot1Q].vlan if Dot1Q in p else None,
                p[Dot1Q].prio if Dot1Q in p else None,
            )
            for p in packets
        )
        per = 1 if name == "out" else 2
        assert tags == {(None, 42, 5): 8 * per, (7, 42, 0): 4 * per, (None, None, None): 4 * per}, (
            name,
            tags,
        )
        status = checksum_status(caps[name])
        assert not [k for k in status if k[1] == 0] and status[("udp", 1)] == len(packets), (
            name,
            status,
        )
    assert {p[IP].src for p in got["out"]} == {"198.18.3.1"}
    assert all(
        ipaddress.ip_address(p[IP].src) in ipaddress.ip_network("198.19.0.0/16") for p in got["dut"]
    )
