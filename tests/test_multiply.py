"""The traffic multiplier (`flowengine multiply`, `testbed multiply`; seed 003, docs/multiplier.md).

Every output is checked by tshark with checksum validation on, and counted from the output
capture, not from the multiplier's own counters."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from scapy.all import (
    ARP,
    ICMP,
    IP,
    TCP,
    UDP,
    Dot1Q,
    Ether,
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    IPerror,
    IPerror6,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    UDPerror,
    fragment,
    fragment6,
    rdpcap,
    wrpcap,
)
from scapy.layers.ipsec import AH
from scapy.layers.sctp import SCTP, SCTPChunkData

from analysis.multiply import shadow_addresses
from ntgcore.scenario import MultiplySpec
from testbed.cli import main
from testbed.multiply import read_plan
from tests.conftest import skip_or_fail

ROOT = Path(__file__).resolve().parent.parent
RANGES = "198.18.0.0/16,2001:db8:100::/48"
C4, S4, C6, S6 = "10.1.0.1", "10.2.0.1", "2001:db8:a::1", "2001:db8:b::1"
MAC = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
TSHARK = shutil.which("tshark")


def http_session(ip, c, s, sport, path=b"/index.html", requests=1):
    """A complete HTTP exchange (handshake, requests and answers, closing ACKs)."""
    cseq, sseq = 1000, 5000
    pk = [
        MAC / ip(src=c, dst=s) / TCP(sport=sport, dport=80, flags="S", seq=cseq),
        MAC / ip(src=s, dst=c) / TCP(sport=80, dport=sport, flags="SA", seq=sseq, ack=cseq + 1),
    ]
    cseq, sseq = cseq + 1, sseq + 1
    pk.append(MAC / ip(src=c, dst=s) / TCP(sport=sport, dport=80, flags="A", seq=cseq, ack=sseq))
    for i in range(requests):
        req = b"GET " + path + b"?n=%d HTTP/1.1\r\nHost: example.test\r\n\r\n" % i
        ans = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        pk.append(
            MAC
            / ip(src=c, dst=s)
            / TCP(sport=sport, dport=80, flags="PA", seq=cseq, ack=sseq)
            / req
        )
        cseq += len(req)
        pk.append(
            MAC
            / ip(src=s, dst=c)
            / TCP(sport=80, dport=sport, flags="PA", seq=sseq, ack=cseq)
            / ans
        )
        sseq += len(ans)
        pk.append(
            MAC / ip(src=c, dst=s) / TCP(sport=sport, dport=80, flags="A", seq=cseq, ack=sseq)
        )
    return pk


def mixed_packets():
    """IPv4 and IPv6: TCP, UDP, ICMP, ICMPv6, VLAN (one and two tags), IPv6 extension headers,
    IPv4 and IPv6 fragments, an ICMP error. Every one of them is rewritable."""
    pk = http_session(IP, C4, S4, 40000) + http_session(IPv6, C6, S6, 40001)
    pk += [
        MAC / IP(src=C4, dst=S4) / UDP(sport=5353, dport=53) / b"query",
        MAC / IP(src=S4, dst=C4) / UDP(sport=53, dport=5353) / b"answer",
        MAC / IPv6(src=C6, dst=S6) / UDP(sport=5353, dport=53) / b"query6",
        MAC / IP(src=C4, dst=S4) / ICMP(type=8, id=7) / b"ping",
        MAC / IP(src=S4, dst=C4) / ICMP(type=0, id=7) / b"ping",
        MAC / IPv6(src=C6, dst=S6) / ICMPv6EchoRequest(id=9) / b"ping6",
        MAC / IPv6(src=S6, dst=C6) / ICMPv6EchoReply(id=9) / b"ping6",
        Ether() / Dot1Q(vlan=10) / IP(src=C4, dst=S4) / UDP(sport=1111, dport=2222) / b"vlan",
        MAC / IP(src=C4, dst=S4) / SCTP(sport=40002, dport=2905) / SCTPChunkData(data=b"sctp"),
        Ether()
        / Dot1Q(vlan=10)
        / Dot1Q(vlan=20)
        / IPv6(src=C6, dst=S6)
        / TCP(sport=1234, dport=443, flags="S"),
        MAC
        / IPv6(src=C6, dst=S6)
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrDestOpt()
        / UDP(sport=7, dport=7)
        / b"ext",
        MAC
        / IP(src=S4, dst=C4)
        / ICMP(type=3, code=3)
        / IP(src=C4, dst=S4)
        / UDP(sport=5353, dport=53),
        MAC
        / IPv6(src=S6, dst=C6)
        / ICMPv6DestUnreach(code=4)
        / IPv6(src=C6, dst=S6)
        / UDP(sport=5353, dport=53),
    ]
    pk += [
        MAC / f
        for f in fragment(IP(src=C4, dst=S4) / UDP(sport=9, dport=9) / (b"x" * 3000), fragsize=1000)
    ]
    pk += [
        MAC / f
        for f in fragment6(
            IPv6(src=C6, dst=S6) / IPv6ExtHdrFragment() / UDP(sport=10, dport=10) / (b"y" * 3000),
            1280,
        )
    ]
    return pk


@pytest.fixture(scope="module")
def engine(flowengine_bin):
    r = subprocess.run([str(flowengine_bin), "multiply", "--help"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(
            f"{flowengine_bin} has no `multiply`: build generators/flowengine and set NTG_FLOWENGINE"
        )
    return flowengine_bin


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mult") / "mixed.pcap"
    wrpcap(str(path), mixed_packets())
    return path


def multiply(engine, inp: Path, out: Path, *args, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [str(engine), "multiply", str(inp), "-o", str(out), *args], capture_output=True, text=True
    )
    if check:
        assert r.returncode == 0, r.stderr
    return r


def checksum_status(capture: Path) -> Counter:
    """(protocol, status) counted by tshark with every checksum validated: 0 bad, 1 good."""
    return frames_and_checksums(capture)[1]


def frames_and_checksums(capture: Path) -> tuple[int, Counter]:
    """The frames tshark reads and checksum_status's counts, from one tshark pass."""
    if TSHARK is None:
        skip_or_fail("tshark is not installed")
    fields = [
        "ip.checksum.status",
        "tcp.checksum.status",
        "udp.checksum.status",
        "icmp.checksum.status",
        "icmpv6.checksum.status",
        "sctp.checksum.status",
    ]
    cmd = [
        TSHARK,
        "-n",
        "-r",
        str(capture),
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "tcp.check_checksum:TRUE",
        "-o",
        "udp.check_checksum:TRUE",
        "-o",
        "sctp.checksum:CRC-32C",
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-e",
        "frame.number",
    ]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    counts: Counter = Counter()
    lines = out.splitlines()
    for line in lines:
        for name, value in zip(fields, line.split("|")[1:]):
            for v in filter(None, value.split(",")):
                counts[(name.split(".")[0], int(v))] += 1
    return len(lines), counts


def frame_count(capture: Path) -> int:
    """The records of a capture, counted by Wireshark's capinfos (no dissection: milliseconds)."""
    if shutil.which("capinfos") is None:
        skip_or_fail(
            "capinfos is not installed (wireshark-common, with tshark: ./bootstrap.sh test)"
        )
    out = subprocess.run(
        ["capinfos", "-c", "-M", "-T", "-r", str(capture)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.rsplit("\t", 1)[1])


def shadow_key(p):
    """(proto, src, sport, dst, dport) as the plan writes it."""
    if IP in p:
        ip = p[IP]
        proto, later, layer = ip.proto, ip.frag > 0, ip.payload
    elif IPv6 in p:
        ip = p[IPv6]
        proto, later, layer = ip.nh, False, ip.payload
        while isinstance(
            layer, (IPv6ExtHdrHopByHop, IPv6ExtHdrDestOpt, IPv6ExtHdrRouting, IPv6ExtHdrFragment)
        ):
            later |= isinstance(layer, IPv6ExtHdrFragment) and layer.offset > 0
            proto, layer = layer.nh, layer.payload
    else:
        return None
    sport = dport = 0
    if not later and proto in (6, 17, 132):
        sport, dport = layer.sport, layer.dport
    elif not later and (
        (proto == 1 and layer.type in (0, 8)) or (proto == 58 and layer.type in (128, 129))
    ):
        sport = dport = layer.id
    return (proto, ip.src, sport, ip.dst, dport)


def test_every_checksum_validates_for_every_protocol(engine, mixed, tmp_path):
    out = tmp_path / "out.pcap"
    multiply(engine, mixed, out, "-T", "5", "--ranges", RANGES, "--seed", "1", "--ports", "shift")
    status = checksum_status(out)
    assert not [k for k in status if k[1] == 0], status
    for proto in ("ip", "tcp", "udp", "icmp", "icmpv6", "sctp"):
        assert status[(proto, 1)] >= 6, (proto, status)


def test_real_captures_keep_their_checksums(engine, tmp_path):
    """Real traffic: every checksum stays what it was (captures taken on a sending host hold some
    offloaded, wrong ones: each copy keeps exactly those wrong, none more)."""
    data = os.environ.get("NTG_SHARED_DATA")
    if not data or not (Path(data) / "pcaps").is_dir():
        skip_or_fail("NTG_SHARED_DATA (with pcaps/) is not set")
    captures = sorted((Path(data) / "pcaps").glob("*.pcap"))
    assert captures
    for cap in captures:
        out = tmp_path / (cap.stem + ".out.pcap")
        r = multiply(
            engine,
            cap,
            out,
            "-T",
            "4",
            "--ranges",
            "198.18.0.0/15,2001:db8:100::/40",
            "--seed",
            "2",
        )
        summary = json.loads(r.stdout)
        before, (frames, after) = checksum_status(cap), frames_and_checksums(out)
        assert after[("tcp", 1)] + after[("udp", 1)] > 0, cap
        passed = sum(summary["passthrough"].values())
        assert frames == 5 * (summary["packets_in"] - passed) + passed, cap
        if passed == 0:
            assert after == Counter({k: 5 * n for k, n in before.items()}), cap
        if not [k for k in before if k[1] == 0]:
            assert not [k for k in after if k[1] == 0], cap


def test_egress_is_exactly_T_plus_1_times_ingress(engine, mixed, tmp_path):
    n = frame_count(mixed)
    for t in (1, 10, 22):
        out = tmp_path / f"t{t}.pcap"
        multiply(engine, mixed, out, "-T", str(t), "--ranges", RANGES)
        assert frame_count(out) == (t + 1) * n


def test_both_directions_of_a_shadow_session_share_one_pair(engine, mixed, tmp_path):
    out, plan = tmp_path / "out.pcap", tmp_path / "plan.csv"
    t = 3
    multiply(
        engine,
        mixed,
        out,
        "-T",
        str(t),
        "--ranges",
        RANGES,
        "--ports",
        "shift",
        "--plan",
        str(plan),
    )
    known = copies_as_originals(out, plan, t)
    # a request and its response map to the same shadow pair
    req = next(v for k, v in known.items() if k[0] == 6 and k[4] == 80 and v[1] == 2)
    resp = [v for k, v in known.items() if v[:2] == req[:2] and v[2] != req[2]]
    assert resp


def copies_as_originals(out: Path, plan: Path, t: int) -> dict:
    """Every frame of `out` belongs to a planned flow, each copy has per flow and direction the
    frames its original has, the plan's shadow rows are distinct; returns the plan."""
    known = read_plan(plan)
    counts: Counter = Counter()
    for p in rdpcap(str(out)):
        key = shadow_key(p)
        assert key in known, f"a frame of no planned flow: {key}"
        counts[known[key]] += 1
    flows = {f for f, _, _ in counts}
    for f in flows:
        for d in (0, 1):
            originals = counts[(f, 0, d)]
            assert [counts[(f, c, d)] for c in range(1, t + 1)] == [originals] * t, (f, d)
    # one shadow pair per copy and flow: the plan's rows are distinct
    shadows = [k for k, v in known.items() if v[1] > 0]
    assert len(shadows) == len(set(shadows))
    return known


HOME, HOME_RANGES = "10.1.0.0/16,2001:db8:a::/48", "198.19.0.0/24,2001:db8:200::/64"


def test_the_sided_plan_keeps_the_home_sides_shadows_in_its_own_ranges(engine, mixed, tmp_path):
    """--home/--home-ranges: the shadows of the clients (home) come from the home ranges, the
    servers' from --ranges; sessions stay consistent, checksums good."""
    out, plan = tmp_path / "out.pcap", tmp_path / "plan.csv"
    t = 4
    multiply(
        engine,
        mixed,
        out,
        "-T",
        str(t),
        "--ranges",
        RANGES,
        "--home",
        HOME,
        "--home-ranges",
        HOME_RANGES,
        "--ports",
        "shift",
        "--plan",
        str(plan),
    )
    copies_as_originals(out, plan, t)
    status = checksum_status(out)
    assert not [k for k in status if k[1] == 0] and status[("tcp", 1)] > 0, status
    nets = {
        name: [ipaddress.ip_network(n) for n in text.split(",")]
        for name, text in (("home", HOME), ("home_ranges", HOME_RANGES), ("ranges", RANGES))
    }
    inside = lambda a, name: any(
        ipaddress.ip_address(a) in n
        for n in nets[name]
        if n.version == ipaddress.ip_address(a).version
    )
    shadows = {a: v for a, v in shadow_addresses(plan).items() if v[1]}
    assert {v[0] for v in shadows.values()} == {C4, S4, C6, S6}
    for a, (orig, copy) in shadows.items():
        assert inside(a, "home_ranges" if inside(orig, "home") else "ranges"), (a, orig, copy)
    assert len(shadows) == 4 * t  # one shadow per address and copy, all distinct


def test_the_default_plan_gives_the_bytes_it_gave_before_the_sided_plan(engine, tmp_path):
    """The sided plan is additive: without --home, the output and the plan are byte for byte those
    of the engine before it (commit b20730a, digests taken with its build)."""
    data = os.environ.get("NTG_SHARED_DATA")
    cap = Path(data or "/nonexistent") / "pcaps" / "zeek__wikipedia.pcap"
    if not cap.is_file():
        skip_or_fail("NTG_SHARED_DATA (with pcaps/zeek__wikipedia.pcap) is not set")
    out, plan = tmp_path / "out.pcap", tmp_path / "plan.csv"
    multiply(
        engine,
        cap,
        out,
        "-T",
        "3",
        "--ranges",
        RANGES,
        "--seed",
        "5",
        "--ports",
        "shift",
        "--order",
        "interleaved",
        "--plan",
        str(plan),
    )
    assert (
        hashlib.sha256(out.read_bytes()).hexdigest()
        == "b57eb811587626495f5eb8459bc4f6eeb9449f3aae8785c306117113d5e0c804"
    )
    assert (
        hashlib.sha256(plan.read_bytes()).hexdigest()
        == "983e81c61ed8d90ca52e8062b9a045122be14bfd9b371b23357f6ef7ea48e903"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--home", HOME], "give --home"),
        (["--home", HOME, "--home-ranges", ""], "give --home"),
        (
            ["--home", HOME, "--home-ranges", "198.18.5.0/24,2001:db8:200::/64"],
            "--ranges and --home-ranges: 198.18.0.0/16 and 198.18.5.0/24 overlap",
        ),
        (
            ["--home", HOME, "--home-ranges", "10.1.7.0/24,2001:db8:200::/64"],
            "--home-ranges 10.1.7.0/24 overlaps the home range 10.1.0.0/16",
        ),
        (
            ["--home", HOME, "--home-ranges", "198.19.0.0/31,2001:db8:200::/64"],
            "--home-ranges: the IPv4 ranges hold 2 addresses; T=3 copies of the 1 original home (--home) addresses need 3",
        ),
        (
            ["--home", HOME, "--home-ranges", "198.19.0.0/24"],
            "--home-ranges: the IPv6 ranges hold 0 addresses",
        ),
        (
            ["--home", "10.2.0.0/16", "--home-ranges", "10.1.0.0/24,2001:db8:200::/64"],
            "original address 10.1.0.1 lies in the shadow range 10.1.0.0/24",
        ),
    ],
)
def test_the_sided_plan_refuses_overlaps_and_short_ranges(engine, mixed, tmp_path, args, message):
    r = multiply(
        engine, mixed, tmp_path / "o.pcap", "-T", "3", "--ranges", RANGES, *args, check=False
    )
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())


def test_testbed_multiply_refuses_home_without_home_ranges(engine, mixed, tmp_path, capsys):
    argv = [
        "multiply",
        str(mixed),
        "-o",
        str(tmp_path / "o.pcap"),
        "-T",
        "2",
        "--ranges",
        RANGES,
        "--home",
        HOME,
    ]
    assert main(argv) == 2 and "together with --home-ranges" in capsys.readouterr().err
    assert main(argv + ["--home-ranges", HOME_RANGES]) == 0
    assert frame_count(tmp_path / "o.pcap") == 3 * frame_count(mixed)


def test_a_multiply_section_takes_home_and_home_ranges_together_and_apart():
    ok = MultiplySpec(
        copies=2, ranges=[RANGES.split(",")[0]], home=["10.1.0.0/16"], home_ranges=["198.19.0.0/24"]
    )
    assert ok.home_ranges == ["198.19.0.0/24"]
    for bad, message in (
        ({"home": ["10.1.0.0/16"]}, "together, or neither"),
        ({"home": ["10.1.0.0/16"], "home_ranges": ["198.18.7.0/24"]}, "overlap"),
        ({"home": ["198.19.0.0/16"], "home_ranges": ["198.19.0.0/24"]}, "overlaps the original"),
    ):
        with pytest.raises(ValueError, match=message):
            MultiplySpec(copies=2, ranges=[RANGES.split(",")[0]], **bad)


def test_the_json_plan_holds_the_same_flows_as_the_csv_plan(engine, mixed, tmp_path):
    for ext in ("csv", "json"):
        multiply(
            engine,
            mixed,
            tmp_path / f"{ext}.pcap",
            "-T",
            "2",
            "--ranges",
            RANGES,
            "--plan",
            str(tmp_path / f"plan.{ext}"),
        )
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["copies"] == 2 and doc["order"] == "spfo"
    rows = {}
    for f in doc["flows"]:
        for c, (a, pa, b, pb) in enumerate(f["copies"]):
            rows[(f["proto"], a, pa, b, pb)] = (f["flow"], c, 0)
            rows[(f["proto"], b, pb, a, pa)] = (f["flow"], c, 1)
    assert read_plan(tmp_path / "plan.csv") == rows


def test_an_icmp_error_quotes_the_shadow_packet_of_its_own_copy(engine, mixed, tmp_path):
    out, plan = tmp_path / "out.pcap", tmp_path / "plan.csv"
    multiply(
        engine, mixed, out, "-T", "3", "--ranges", RANGES, "--ports", "shift", "--plan", str(plan)
    )
    known = read_plan(plan)
    errors = 0
    for p in rdpcap(str(out)):
        outer = shadow_key(p)
        quoted = p.getlayer(UDPerror)
        if outer[0] not in (1, 58) or quoted is None:
            continue
        inner = p.getlayer(IPerror) or p.getlayer(IPerror6)
        key = (17, inner.src, quoted.sport, inner.dst, quoted.dport)
        assert known[key][1] == known[outer][1], (outer, key)
        errors += 1
    assert errors == 2 * 4
    assert not [k for k in checksum_status(out) if k[1] == 0]


def test_spfo_puts_the_copies_first_and_the_original_last(engine, mixed, tmp_path):
    t = 4
    originals = {C4, S4, C6, S6}
    for order in ("spfo", "interleaved"):
        out = tmp_path / f"{order}.pcap"
        multiply(engine, mixed, out, "-T", str(t), "--ranges", RANGES, "--order", order)
        frames = rdpcap(str(out))
        for i in range(0, len(frames), t + 1):
            group = frames[i : i + t + 1]
            is_orig = [shadow_key(p)[1] in originals for p in group]
            k = i // (t + 1)
            where = t if order == "spfo" else (k + 1) % (t + 1)
            assert is_orig == [j == where for j in range(t + 1)], (order, k)


def test_a_seed_gives_the_same_bytes_and_another_seed_other_ones(engine, mixed, tmp_path):
    a, b, c = (tmp_path / f"{n}.pcap" for n in "abc")
    multiply(engine, mixed, a, "-T", "3", "--ranges", RANGES, "--seed", "7")
    multiply(engine, mixed, b, "-T", "3", "--ranges", RANGES, "--seed", "7")
    multiply(engine, mixed, c, "-T", "3", "--ranges", RANGES, "--seed", "8")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_urls_of_other_lengths_give_consistent_tcp_streams(engine, tmp_path):
    inp, out = tmp_path / "http.pcap", tmp_path / "out.pcap"
    wrpcap(
        str(inp),
        http_session(IP, C4, S4, 40000, requests=3) + http_session(IPv6, C6, S6, 40001, requests=3),
    )
    urls = ["/a", "/a-much-longer-request-target/with/a/path?and=query", "/same-length"]
    (tmp_path / "urls.txt").write_text("\n".join(urls) + "\n")
    r = multiply(
        engine, inp, out, "-T", "3", "--ranges", RANGES, "--urls", str(tmp_path / "urls.txt")
    )
    assert json.loads(r.stdout)["url_requests"] == 6
    assert not [k for k in checksum_status(out) if k[1] == 0]
    fields = subprocess.run(
        [
            TSHARK,
            "-n",
            "-r",
            str(out),
            "-Y",
            "http.request",
            "-T",
            "fields",
            "-e",
            "http.request.uri",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(Counter(fields).items()) == sorted(
        Counter(urls * 6 + [f"/index.html?n={i}" for i in range(3)] * 2).items()
    )
    # tshark finds no gap, overlap or unseen-segment ACK in any stream: the shifted sequence numbers hold
    bad = subprocess.run(
        [
            TSHARK,
            "-n",
            "-r",
            str(out),
            "-Y",
            "tcp.analysis.flags && !tcp.analysis.window_update",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert bad.split() == []
    # the reassembled stream of a shadow session holds its new URL, every request of it
    streams = subprocess.run(
        [TSHARK, "-n", "-r", str(out), "-q", "-z", "follow,tcp,ascii,1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert streams.count("GET " + urls[1]) == 3


def test_urls_substituted_in_a_real_web_capture_keep_its_streams_as_they_were(engine, tmp_path):
    """A real page load (31 requests on several connections): every shadow stream has exactly the
    TCP anomalies of its original (tshark's analysis flags), no more, and the new targets."""
    data = os.environ.get("NTG_SHARED_DATA")
    cap = Path(data or "/nonexistent") / "pcaps" / "zeek__http_bro.org.pcap"
    if not cap.is_file():
        skip_or_fail("NTG_SHARED_DATA/pcaps/zeek__http_bro.org.pcap is missing")
    out, urls = tmp_path / "out.pcap", tmp_path / "urls.txt"
    urls.write_text("/x\n/a-longer-target/y?z=1\n")
    t = 3
    r = multiply(engine, cap, out, "-T", str(t), "--ranges", "198.18.0.0/15", "--urls", str(urls))
    requests = json.loads(r.stdout)["url_requests"]
    assert requests > 10

    def tshark(path, *args):
        return subprocess.run(
            [TSHARK, "-n", "-r", str(path), *args], capture_output=True, text=True, check=True
        ).stdout.split()

    flags = [
        "-Y",
        "tcp.analysis.flags && !tcp.analysis.window_update",
        "-T",
        "fields",
        "-e",
        "frame.number",
    ]
    assert len(tshark(out, *flags)) == (t + 1) * len(tshark(cap, *flags))
    uris = Counter(tshark(out, "-Y", "http.request", "-T", "fields", "-e", "http.request.uri"))
    assert uris["/x"] == 2 * requests and uris["/a-longer-target/y?z=1"] == requests
    assert not [k for k in checksum_status(out) if k[1] == 0]


def test_a_url_too_long_for_the_packet_is_refused(engine, tmp_path):
    inp, out = tmp_path / "http.pcap", tmp_path / "out.pcap"
    wrpcap(str(inp), http_session(IP, C4, S4, 40000))
    (tmp_path / "urls.txt").write_text("/" + "x" * 1600 + "\n")
    r = multiply(
        engine,
        inp,
        out,
        "-T",
        "2",
        "--ranges",
        RANGES,
        "--urls",
        str(tmp_path / "urls.txt"),
        check=False,
    )
    assert r.returncode == 2
    assert "--mtu 1500" in r.stderr
    assert not out.exists() and list(tmp_path.glob("out.pcap*")) == []


def test_routing_headers_and_ah_pass_through_once_unchanged_and_counted(engine, tmp_path):
    inp, out = tmp_path / "rh.pcap", tmp_path / "out.pcap"
    rh = (
        MAC
        / IPv6(src=C6, dst=S6)
        / IPv6ExtHdrRouting(addresses=["2001:db8:c::1"], segleft=1)
        / UDP(sport=8, dport=8)
    )
    ah = MAC / IP(src=C4, dst=S4) / AH(spi=1, icv=b"\0" * 12) / UDP(sport=3, dport=4)
    wrpcap(str(inp), [rh, ah, MAC / IP(src=C4, dst=S4) / UDP(sport=1, dport=2), MAC / ARP()])
    r = multiply(engine, inp, out, "-T", "3", "--ranges", RANGES)
    summary = json.loads(r.stdout)
    assert summary["passthrough"] == {
        "not_ip": 1,
        "truncated": 0,
        "routing": 1,
        "auth": 1,
        "table_full": 0,
        "no_range": 0,
    }
    frames = rdpcap(str(out))
    assert len(frames) == 1 + 1 + 4 + 1
    assert bytes(frames[0]) == bytes(rh) and bytes(frames[1]) == bytes(ah)


def test_a_capture_that_is_not_ethernet_is_refused(engine, tmp_path):
    inp = tmp_path / "raw.pcap"
    wrpcap(str(inp), [IP(src=C4, dst=S4) / UDP(sport=1, dport=2)], linktype=101)
    r = multiply(engine, inp, tmp_path / "o.pcap", "-T", "2", "--ranges", RANGES, check=False)
    assert r.returncode == 2 and "link type 101; only Ethernet (1)" in r.stderr


@pytest.mark.parametrize(
    "ranges, says",
    [
        ("198.18.0.0/16,198.18.4.0/24", "overlap"),
        (
            "10.0.0.0/8,2001:db8:100::/48",
            "original address 10.1.0.1 lies in the shadow range 10.0.0.0/8",
        ),
        (
            "198.18.0.0/30,2001:db8:100::/48",
            "hold 4 addresses; T=3 copies of 2 original addresses need 6",
        ),
        ("198.18.0.0/16", "no IPv6 range"),
        ("198.18.0.0/33", "not an IPv4 or IPv6 CIDR range"),
    ],
)
def test_bad_ranges_are_refused_and_nothing_is_written(engine, mixed, tmp_path, ranges, says):
    out = tmp_path / "out.pcap"
    r = multiply(engine, mixed, out, "-T", "3", "--ranges", ranges, check=False)
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_ranges_overlapping_the_originals_range_are_refused(engine, mixed, tmp_path):
    r = multiply(
        engine,
        mixed,
        tmp_path / "o.pcap",
        "-T",
        "2",
        "--ranges",
        "198.18.0.0/16,2001:db8:100::/48",
        "--original",
        "198.16.0.0/13",
        check=False,
    )
    assert r.returncode == 2 and "overlaps the original range 198.16.0.0/13" in r.stderr


@pytest.mark.parametrize("t, says", [("0", "must be 1..1024"), ("100000", "must be 1..1024")])
def test_a_number_of_copies_out_of_bounds_is_refused(engine, mixed, tmp_path, t, says):
    r = multiply(engine, mixed, tmp_path / "o.pcap", "-T", t, "--ranges", RANGES, check=False)
    assert r.returncode == 2 and says in r.stderr


def test_an_egress_too_long_for_the_time_allowed_is_refused_with_the_numbers(
    engine, mixed, tmp_path
):
    n = frame_count(mixed)
    r = multiply(
        engine,
        mixed,
        tmp_path / "o.pcap",
        "-T",
        "1000",
        "--ranges",
        "198.18.0.0/15,2001:db8:100::/48",
        "--max-seconds",
        "0",
        check=False,
    )
    assert r.returncode == 2
    assert f"{n} packets x 1001 = {n * 1001} frames" in r.stderr and "--max-seconds 0" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_egress_larger_than_the_free_disk_is_refused_with_the_numbers(
    engine, mixed, tmp_path, root_in_ci
):
    """On a 1 MiB tmpfs mounted in a mount namespace of the test's own."""
    if not shutil.which("unshare"):
        skip_or_fail("needs root and unshare (a private 1 MiB tmpfs)")
    small = tmp_path / "small"
    small.mkdir()
    script = (
        f"mount -t tmpfs -o size=1m ntg-mult-test {small} && "
        f"{engine} multiply {mixed} -o {small}/o.pcap -T 200 --ranges 198.18.0.0/15,2001:db8:100::/48; "
        f"echo rc=$?; ls -A {small}"
    )
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
    )
    assert "rc=2" in r.stdout and "bytes free" in r.stderr and "frames)" in r.stderr, (
        r.stdout + r.stderr
    )
    assert r.stdout.split("rc=2")[1].split() == []  # nothing written there


def test_a_flow_table_bound_is_refused_before_writing(engine, mixed, tmp_path):
    r = multiply(
        engine,
        mixed,
        tmp_path / "o.pcap",
        "-T",
        "2",
        "--ranges",
        RANGES,
        "--max-flows",
        "3",
        check=False,
    )
    assert r.returncode == 2 and "more than 3 flows" in r.stderr and "bytes a flow" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_capture_is_reported_at_its_offset(engine, mixed, tmp_path):
    data = mixed.read_bytes()
    frames = rdpcap(str(mixed))
    good = 5
    cut = 24 + sum(16 + len(bytes(f)) for f in frames[:good]) + 16 + 10  # inside record 6's bytes
    bad = tmp_path / "in" / "damaged.pcap"
    bad.parent.mkdir()
    bad.write_bytes(data[:cut])
    out = tmp_path / "out" / "o.pcap"
    out.parent.mkdir()
    r = multiply(engine, bad, out, "-T", "2", "--ranges", RANGES, check=False)
    offset = cut - 26
    assert (
        r.returncode == 2
        and f"damaged at byte offset {offset}" in r.stderr
        and f"{good} packets" in r.stderr
    )
    assert list(out.parent.iterdir()) == []
    r = multiply(engine, bad, out, "-T", "2", "--ranges", RANGES, "--upto-damage")
    assert f"damaged at byte offset {offset}" in r.stderr
    assert frame_count(out) == 3 * good


def test_testbed_multiply_records_the_plan_in_a_run_folder(engine, tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("""version: 1
name: mult
seed: 5
flows:
  - protocol: udp
    src: 10.0.0.1
    dst: {cidr: 10.0.1.0/24, mode: increment}
    dst_port: 53
    packets: 4
    period: 1ms
    repeat: {count: 5, period: 1ms}
multiply:
  copies: 3
  ranges: [198.18.0.0/16]
""")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed",
            "run",
            str(scenario),
            "--out",
            str(tmp_path / "runs"),
            "-q",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    (run,) = (tmp_path / "runs").iterdir()
    r = subprocess.run(
        [sys.executable, "-m", "testbed", "multiply", str(run)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["multiply"]["packets_out"] == 4 * 20 == frame_count(run / "multiplied.pcap")
    known = read_plan(run / "shadow_plan.csv")
    assert {v[1] for v in known.values()} == {0, 1, 2, 3} and len(
        {v[0] for v in known.values()}
    ) == 5
    for p in rdpcap(str(run / "multiplied.pcap")):
        assert shadow_key(p) in known


def test_testbed_multiply_takes_a_capture_and_refuses_half_parameters(engine, mixed, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "testbed", "multiply", str(mixed)]
    r = subprocess.run(
        cli + ["-o", str(tmp_path / "o.pcap"), "-T", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 2 and "give both -T and --ranges" in r.stderr
    r = subprocess.run(
        cli + ["-o", str(tmp_path / "o.pcap"), "-T", "2", "--ranges", RANGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert frame_count(tmp_path / "o.pcap") == 3 * frame_count(mixed)
    assert (
        read_plan(tmp_path / "o.plan.csv")
        and json.loads((tmp_path / "o.multiply.json").read_text())["copies"] == 2
    )
    r = subprocess.run(
        cli + ["-o", str(tmp_path / "p.pcap"), "-T", "2", "--ranges", "10.0.0.0/8," + RANGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert (
        r.returncode == 2
        and "testbed multiply: " in r.stderr
        and "lies in the shadow range 10.0.0.0/8" in r.stderr
    )
    assert not (tmp_path / "p.pcap").exists()


def test_a_bad_multiply_section_names_its_line_and_field(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "version: 1\nname: m\nflows:\n  - {protocol: udp, src: 10.0.0.1, dst: 10.0.0.2, "
        "dst_port: 53, packets: 1, rate: 1}\nmultiply:\n  copies: 2\n"
        "  ranges: [198.18.0.0/16]\n  original: [198.0.0.0/8]\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "testbed", "validate", str(scenario)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 2
    assert (
        f"{scenario}:6: multiply: " in r.stderr
        and "overlaps the original range 198.0.0.0/8" in r.stderr
    )
