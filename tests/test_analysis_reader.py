"""The native capture reader: every column against Scapy's dissection, every file variant, damage."""

import ipaddress
import os
import shutil
import struct
import subprocess
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from conftest import skip_or_fail
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_Router_Alert
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import ARP, GRE, CookedLinux, Dot1Q, Ether
from scapy.layers.sctp import SCTP
from scapy.packet import Raw
from scapy.utils import PcapNgWriter, rdpcap, wrpcap

from analysis.capture import COLUMNS, CaptureError, library, read_capture

pytestmark = pytest.mark.usefixtures("pcaplib")

T0 = Decimal("1700000000.000000000")
SHARED_SKIP = "NTG_SHARED_DATA not set: real captures live outside the repo"


def mixed_packets() -> list:
    """One of each shape the reader dissects, or must leave alone."""
    e = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    pkts = [
        e / IP(src="198.18.0.1", dst="198.19.0.2") / TCP(sport=1234, dport=443, flags="S"),
        e
        / IP(src="198.18.0.2", dst="198.19.0.3")
        / TCP(sport=443, dport=1234, flags="SA")
        / Raw(b"x" * 100),
        e / IP(src="198.18.0.1", dst="198.19.0.2") / TCP(sport=1234, dport=443, flags="FPAUEC"),
        e / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=53, dport=33333) / Raw(b"q" * 30),
        e
        / IP(src="10.0.0.1", dst="10.0.0.2", options=[IPOption_Router_Alert()])
        / UDP(sport=5, dport=6),
        e / IP(src="10.1.0.1", dst="10.1.0.2") / ICMP(type=8, id=0xBEEF, seq=3),
        e / IP(src="10.1.0.2", dst="10.1.0.1") / ICMP(type=0, id=0xBEEF, seq=3),
        e
        / IP(src="10.1.0.2", dst="10.1.0.1")
        / ICMP(type=3, code=1)
        / IP(src="10.1.0.1")
        / UDP(sport=9, dport=10),
        e
        / IP(src="10.2.0.1", dst="10.2.0.2", frag=0, flags="MF", proto=17)
        / Raw(b"\x00\x07\x00\x08" + b"a" * 20),
        e / IP(src="10.2.0.1", dst="10.2.0.2", frag=3, proto=17) / Raw(b"\x00\x07\x00\x08rest"),
        e / IP(src="10.3.0.1", dst="10.3.0.2") / GRE() / IP() / UDP(),
        e / IP(src="10.3.0.1", dst="10.3.0.2") / SCTP(sport=2905, dport=2906),
        e / IPv6(src="2001:db8::1", dst="2001:db8:1::2") / TCP(sport=40000, dport=80, flags="A"),
        e / IPv6(src="2001:db8::1", dst="ff02::1:3") / UDP(sport=5355, dport=5355) / Raw(b"z" * 7),
        e
        / IPv6(src="fe80::1", dst="2001:db8::5")
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrDestOpt()
        / UDP(sport=7, dport=8),
        e
        / IPv6(src="2001:db8::7", dst="2001:db8::8")
        / IPv6ExtHdrRouting()
        / TCP(sport=1, dport=2, flags="R"),
        e
        / IPv6(src="2001:db8::7", dst="2001:db8::8")
        / IPv6ExtHdrFragment(offset=0, m=1)
        / UDP(sport=11, dport=12),
        e
        / IPv6(src="2001:db8::7", dst="2001:db8::8")
        / IPv6ExtHdrFragment(offset=10, nh=17)
        / Raw(b"tail"),
        e / IPv6(src="2001:db8::a", dst="2001:db8::b") / ICMPv6EchoRequest(id=77, seq=1),
        e / IPv6(src="2001:db8::b", dst="2001:db8::a") / ICMPv6EchoReply(id=77, seq=1),
        e / IPv6(src="2001:db8::b", dst="2001:db8::a") / ICMPv6DestUnreach() / IPv6() / UDP(),
        e / Dot1Q(vlan=42) / IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=1000, dport=2000),
        e
        / Dot1Q(vlan=1)
        / Dot1Q(vlan=2)
        / IPv6(src="2001:db8::1", dst="2001:db8::2")
        / TCP(sport=3, dport=4),
        e / ARP(psrc="192.0.2.1", pdst="192.0.2.2"),
        Ether(dst="01:80:c2:00:00:00", type=0x88CC) / Raw(b"\x02\x07" + b"\x00" * 40),
    ]
    for i, p in enumerate(pkts):
        p.time = T0 + Decimal(i) + Decimal("0.000123456") + Decimal(i) / Decimal(10**9)
    return pkts


def expected_row(p) -> dict:
    """What the reader must report for packet P, from Scapy's own dissection."""
    row = dict(
        ip_version=0, proto=0, src_hi=0, src_lo=0, dst_hi=0, dst_lo=0, sport=0, dport=0, tcp_flags=0
    )
    layer = next((x for x in p.iterpayloads() if isinstance(x, (IP, IPv6))), None)
    if layer is None:
        return row
    if isinstance(layer, IP):
        row.update(
            ip_version=4,
            proto=layer.proto,
            src_lo=int(ipaddress.IPv4Address(layer.src)),
            dst_lo=int(ipaddress.IPv4Address(layer.dst)),
        )
        l4 = layer.payload if layer.frag == 0 else None
    else:
        src, dst = int(ipaddress.IPv6Address(layer.src)), int(ipaddress.IPv6Address(layer.dst))
        row.update(
            ip_version=6,
            src_hi=src >> 64,
            src_lo=src & (2**64 - 1),
            dst_hi=dst >> 64,
            dst_lo=dst & (2**64 - 1),
        )
        nh, l4 = layer.nh, layer.payload
        while isinstance(
            l4, (IPv6ExtHdrHopByHop, IPv6ExtHdrDestOpt, IPv6ExtHdrRouting, IPv6ExtHdrFragment)
        ):
            nh = l4.nh
            if isinstance(l4, IPv6ExtHdrFragment) and l4.offset:
                l4 = None
                break
            l4 = l4.payload
        row["proto"] = nh
    if type(l4) is TCP:
        row.update(sport=l4.sport, dport=l4.dport, tcp_flags=int(l4.flags))
    elif type(l4) in (UDP, SCTP):
        row.update(sport=l4.sport, dport=l4.dport)
    elif type(l4) is ICMP and l4.type in (0, 8):
        row.update(sport=l4.id)
    elif type(l4) in (ICMPv6EchoRequest, ICMPv6EchoReply):
        row.update(sport=l4.id)
    elif isinstance(l4, Raw) and row["proto"] in (6, 17) and len(l4.load) >= 4:
        row.update(
            sport=int.from_bytes(l4.load[:2], "big"), dport=int.from_bytes(l4.load[2:4], "big")
        )
    return row


def assert_matches_scapy(path: Path, ns: bool = True) -> None:
    cap = read_capture(path)
    assert cap.problem is None
    ref = rdpcap(str(path))
    assert len(cap) == len(ref)
    for i, p in enumerate(ref):
        t = Decimal(p.time)
        assert cap.ts_ns[i] == int(t * 10**9), f"packet {i}: timestamp"
        assert cap.wire_len[i] == (p.wirelen or len(p.original)), f"packet {i}: wire_len"
        assert cap.cap_len[i] == len(p.original), f"packet {i}: cap_len"
        for col, want in expected_row(p).items():
            assert getattr(cap, col)[i] == want, f"packet {i} ({p.summary()}): {col}"


def test_every_column_matches_scapy_microsecond_pcap(tmp_path):
    path = tmp_path / "us.pcap"
    wrpcap(str(path), mixed_packets())
    assert_matches_scapy(path)
    cap = read_capture(path)
    assert (cap.format, cap.link_type, cap.ts_resolution) == ("pcap", 1, 10**6)
    assert cap.ts_ns[0] == 1_700_000_000_000_123_000  # microseconds: the nanoseconds are cut


def test_every_column_matches_scapy_nanosecond_pcap(tmp_path):
    path = tmp_path / "ns.pcap"
    wrpcap(str(path), mixed_packets(), nano=True)
    assert_matches_scapy(path)
    cap = read_capture(path)
    assert cap.ts_resolution == 10**9
    assert cap.ts_ns[3] == 1_700_000_003_000_123_459


def test_every_column_matches_scapy_pcapng(tmp_path):
    path = tmp_path / "scapy.pcapng"
    w = PcapNgWriter(str(path))
    for p in mixed_packets():
        w.write(p)
    w.close()
    assert_matches_scapy(path)
    assert read_capture(path).format == "pcapng"


@pytest.mark.skipif(not shutil.which("editcap"), reason="editcap (Wireshark) is not installed")
def test_editcap_pcapng_nanosecond_matches_the_pcap(tmp_path):
    src, dst = tmp_path / "ns.pcap", tmp_path / "ns.pcapng"
    wrpcap(str(src), mixed_packets(), nano=True)
    subprocess.run(["editcap", "-F", "pcapng", str(src), str(dst)], check=True)
    a, b = read_capture(src), read_capture(dst)
    assert b.format == "pcapng" and b.ts_resolution == 10**9
    for col in COLUMNS:
        assert np.array_equal(getattr(a, col), getattr(b, col)), col


def big_endian_pcap(src: Path, dst: Path) -> None:
    """Rewrite a little-endian pcap with every header field big-endian."""
    data = src.read_bytes()
    magic, vmaj, vmin, zone, sig, snap, link = struct.unpack_from("<IHHiIII", data, 0)
    out = [struct.pack(">IHHiIII", magic, vmaj, vmin, zone, sig, snap, link)]
    off = 24
    while off < len(data):
        sec, frac, incl, orig = struct.unpack_from("<IIII", data, off)
        out.append(struct.pack(">IIII", sec, frac, incl, orig) + data[off + 16 : off + 16 + incl])
        off += 16 + incl
    dst.write_bytes(b"".join(out))


@pytest.mark.parametrize("nano", [False, True], ids=["microsecond", "nanosecond"])
def test_big_endian_pcap_reads_like_little_endian(tmp_path, nano):
    le, be = tmp_path / "le.pcap", tmp_path / "be.pcap"
    wrpcap(str(le), mixed_packets(), nano=nano)
    big_endian_pcap(le, be)
    assert be.read_bytes()[:4] == (b"\xa1\xb2\x3c\x4d" if nano else b"\xa1\xb2\xc3\xd4")
    a, b = read_capture(le), read_capture(be)
    assert b.problem is None and len(b) == len(mixed_packets())
    for col in COLUMNS:
        assert np.array_equal(getattr(a, col), getattr(b, col)), col


# ---- pcapng written by hand: sections in both byte orders, resolutions, block kinds -----------


def _opt(e: str, code: int, value: bytes) -> bytes:
    return struct.pack(e + "HH", code, len(value)) + value + b"\x00" * (-len(value) % 4)


def _block(e: str, btype: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack(e + "II", btype, n) + body + struct.pack(e + "I", n)


def shb(e: str) -> bytes:
    return _block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(e: str, link: int, tsresol: int | None = None, tsoffset: int | None = None) -> bytes:
    opts = b""
    if tsresol is not None:
        opts += _opt(e, 9, bytes([tsresol]))
    if tsoffset is not None:
        opts += _opt(e, 14, struct.pack(e + "q", tsoffset))
    if opts:
        opts += _opt(e, 0, b"")
    return _block(e, 1, struct.pack(e + "HHI", link, 0, 0) + opts)


def epb(e: str, ifid: int, ts: int, frame: bytes, wire: int | None = None) -> bytes:
    return _block(
        e,
        6,
        struct.pack(e + "IIIII", ifid, ts >> 32, ts & 0xFFFFFFFF, len(frame), wire or len(frame))
        + frame,
    )


def spb(e: str, frame: bytes) -> bytes:
    return _block(e, 3, struct.pack(e + "I", len(frame)) + frame)


def test_pcapng_sections_resolutions_and_block_kinds(tmp_path):
    eth = bytes(Ether() / IP(src="198.18.0.1", dst="198.18.0.2") / UDP(sport=1, dport=2))
    raw6 = bytes(IPv6(src="2001:db8::1", dst="2001:db8::2") / TCP(sport=3, dport=4, flags="S"))
    parts = [
        shb("<"),
        idb("<", 1),  # default: microseconds
        idb("<", 101, tsresol=9),  # raw IP, nanoseconds
        _block("<", 4, b"\x00" * 8),  # name resolution block: skipped
        epb("<", 0, 1_700_000_000_123_456, eth),
        epb("<", 1, 1_700_000_001_000_000_007, raw6),
        spb("<", eth),  # no time: inherits the previous one
        _block("<", 0x00000BAD, b"custom"),  # custom block: skipped
        shb(">"),  # a big-endian section: interfaces reset
        idb(">", 1, tsresol=0x80 | 20, tsoffset=1_600_000_000),  # 2^-20 s, offset in seconds
        epb(">", 0, 3 << 19, eth, wire=1500),  # 1.5 s after the offset
    ]
    path = tmp_path / "hand.pcapng"
    path.write_bytes(b"".join(parts))
    cap = read_capture(path)
    assert cap.problem is None
    assert (cap.format, cap.link_type, cap.ts_resolution) == ("pcapng", 1, 10**6)
    assert len(cap) == 4
    assert cap.ts_ns.tolist() == [
        1_700_000_000_123_456_000,
        1_700_000_001_000_000_007,
        1_700_000_001_000_000_007,
        1_600_000_001_500_000_000,
    ]
    assert cap.link_types.tolist() == [1, 101, 1, 1]
    assert cap.ip_version.tolist() == [4, 6, 4, 4]
    assert cap.proto.tolist() == [17, 6, 17, 17]
    assert cap.sport.tolist() == [1, 3, 1, 1]
    assert cap.tcp_flags.tolist() == [0, 2, 0, 0]
    assert cap.wire_len.tolist() == [len(eth), len(raw6), len(eth), 1500]
    assert cap.cap_len.tolist() == [len(eth), len(raw6), len(eth), len(eth)]


def test_pcapng_packet_for_an_undefined_interface_is_a_problem(tmp_path):
    eth = bytes(Ether() / IP() / UDP())
    good = shb("<") + idb("<", 1) + epb("<", 0, 5, eth)
    path = tmp_path / "badif.pcapng"
    path.write_bytes(good + epb("<", 3, 6, eth))
    cap = read_capture(path)
    assert len(cap) == 1
    assert cap.problem.offset == len(good)
    assert "interface 3" in cap.problem.message


# ---- other link types ---------------------------------------------------------------------


def test_linux_cooked_and_raw_ip_link_types(tmp_path):
    sll, raw = tmp_path / "sll.pcap", tmp_path / "raw.pcap"
    wrpcap(
        str(sll),
        [
            CookedLinux(proto=0x0800) / IP(src="1.2.3.4", dst="5.6.7.8") / UDP(sport=10, dport=20),
            CookedLinux(proto=0x86DD) / IPv6(src="::1", dst="::2") / TCP(flags="S"),
        ],
    )
    wrpcap(
        str(raw),
        [IP(src="1.2.3.4", dst="5.6.7.8") / TCP(sport=1, dport=2, flags="A")],
        linktype=101,
    )
    a, b = read_capture(sll), read_capture(raw)
    assert a.link_type == 113 and b.link_type == 101
    assert a.ip_version.tolist() == [4, 6] and a.proto.tolist() == [17, 6]
    assert a.src_lo[0] == 0x01020304 and a.sport[0] == 10 and a.tcp_flags[1] == 0x02
    assert b.ip_version.tolist() == [4] and b.dport.tolist() == [2] and b.tcp_flags[0] == 0x10


def test_snaplen_cut_packets_keep_what_was_captured(tmp_path):
    path = tmp_path / "snap.pcap"
    pkts = [
        Ether(dst="02:00:00:00:00:02")
        / IP(src="1.1.1.1", dst="2.2.2.2")
        / TCP(sport=80, dport=81)
        / Raw(b"p" * 500),
        Ether(dst="02:00:00:00:00:02") / IPv6(src="::1", dst="::2") / UDP(sport=1, dport=2),
    ]
    records = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 40, 1)]
    for i, p in enumerate(pkts):
        frame = bytes(p)
        records.append(struct.pack("<IIII", 1_700_000_000 + i, 0, 40, len(frame)) + frame[:40])
    path.write_bytes(b"".join(records))
    cap = read_capture(path)
    assert cap.cap_len.tolist() == [40, 40]
    assert cap.wire_len.tolist() == [len(pkts[0]), len(pkts[1])]
    # IPv4 header complete, 6 bytes of TCP: the ports but not the flags
    assert cap.ip_version[0] == 4 and cap.src_lo[0] == 0x01010101
    assert (cap.sport[0], cap.dport[0], cap.tcp_flags[0]) == (80, 81, 0)
    # IPv6 header (40 bytes after 14 of Ethernet) not complete: not counted as IP
    assert cap.ip_version[1] == 0


# ---- damage -------------------------------------------------------------------------------


def record_offsets(path: Path) -> list[int]:
    data, off, out = path.read_bytes(), 24, []
    while off < len(data):
        out.append(off)
        off += 16 + struct.unpack_from("<I", data, off + 8)[0]
    return out


@pytest.mark.parametrize("cut", [7, 16 + 5], ids=["in-record-header", "in-packet-data"])
def test_truncated_pcap_returns_the_packets_before_the_cut(tmp_path, cut):
    full, cut_path = tmp_path / "full.pcap", tmp_path / "cut.pcap"
    wrpcap(str(full), mixed_packets(), nano=True)
    offsets = record_offsets(full)
    at = offsets[10]
    cut_path.write_bytes(full.read_bytes()[: at + cut])
    cap = read_capture(cut_path)
    assert len(cap) == 10
    assert cap.problem.offset == at
    assert cap.problem.packets_read == 10
    assert "truncated" in cap.problem.message
    whole = read_capture(full)
    assert np.array_equal(cap.ts_ns, whole.ts_ns[:10])


def test_garbage_after_the_file_header(tmp_path):
    path = tmp_path / "garbage.pcap"
    wrpcap(str(path), mixed_packets()[:1])
    header = path.read_bytes()[:24]
    path.write_bytes(header + b"\xff" * 100)
    cap = read_capture(path)
    assert len(cap) == 0
    assert cap.problem.offset == 24 and cap.problem.packets_read == 0
    assert "corrupt" in cap.problem.message


def test_garbage_after_valid_packets(tmp_path):
    path = tmp_path / "tail.pcap"
    wrpcap(str(path), mixed_packets()[:5])
    size = path.stat().st_size
    path.write_bytes(path.read_bytes() + bytes(range(200, 256)) * 2)
    cap = read_capture(path)
    assert len(cap) == 5
    assert (cap.problem.offset, cap.problem.packets_read) == (size, 5)


def test_truncated_pcapng_block(tmp_path):
    full = tmp_path / "full.pcapng"
    w = PcapNgWriter(str(full))
    for p in mixed_packets()[:6]:
        w.write(p)
    w.close()
    data = full.read_bytes()
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(data[:-10])
    cap = read_capture(cut)
    assert len(cap) == 5
    last_block = len(data) - struct.unpack_from("<I", data, len(data) - 4)[0]
    assert cap.problem.offset == last_block and cap.problem.packets_read == 5
    assert "truncated block" in cap.problem.message


def test_count_and_chunked_reads_agree_with_one_read(tmp_path):
    """The C API used directly: pr_count, and pr_read resumed with a small capacity."""
    import ctypes

    from analysis.capture import _Columns

    path = tmp_path / "chunks.pcap"
    wrpcap(str(path), mixed_packets() * 3)
    lib = library()
    h = lib.pr_open(os.fsencode(path), None, 0)
    try:
        n = lib.pr_count(h)
        assert n == 3 * len(mixed_packets())
        cols = {k: np.zeros(n, d) for k, d in COLUMNS.items()}
        got = 0
        while True:
            c = _Columns(**{k: a.ctypes.data + got * a.itemsize for k, a in cols.items()})
            k = lib.pr_read(h, ctypes.byref(c), min(7, n - got))
            if k == 0:
                break
            got += k
        assert got == n and lib.pr_offset(h) == path.stat().st_size
    finally:
        lib.pr_close(h)
    whole = read_capture(path)
    for k in COLUMNS:
        assert np.array_equal(cols[k], getattr(whole, k)), k


# ---- not a capture ------------------------------------------------------------------------


def test_missing_file_is_a_capture_error(tmp_path):
    with pytest.raises(CaptureError, match="No such file") as e:
        read_capture(tmp_path / "nope.pcap")
    assert e.value.path == str(tmp_path / "nope.pcap")


@pytest.mark.parametrize(
    "content",
    [b"", b"hello, this is text\n", b"\xd4\xc3\xb2\xa1\x02\x00"],
    ids=["empty", "text", "short-header"],
)
def test_not_a_capture_is_a_capture_error(tmp_path, content):
    path = tmp_path / "x.pcap"
    path.write_bytes(content)
    with pytest.raises(CaptureError, match="expected a pcap or pcapng") as e:
        read_capture(path)
    assert str(path) in str(e.value)


def test_directory_is_a_capture_error(tmp_path):
    with pytest.raises(CaptureError, match="directory"):
        read_capture(tmp_path)


def test_header_only_capture_is_empty_not_an_error(tmp_path):
    path = tmp_path / "empty.pcap"
    wrpcap(str(path), [])
    cap = read_capture(path)
    assert len(cap) == 0 and cap.problem is None
    assert set(cap.to_frame().columns) == set(COLUMNS) - {"link_types"} | {"link_type"}


# ---- real captures ------------------------------------------------------------------------


def shared_pcaps() -> list[Path]:
    root = os.environ.get("NTG_SHARED_DATA")
    if not root:
        return []
    return sorted(Path(root, "pcaps").glob("*.pcap"))


@pytest.fixture
def shared_data():
    if not os.environ.get("NTG_SHARED_DATA"):
        skip_or_fail(SHARED_SKIP)
    if not shutil.which("tshark"):
        pytest.skip("tshark is not installed")
    files = shared_pcaps()
    assert files, f"no pcaps/*.pcap under NTG_SHARED_DATA={os.environ['NTG_SHARED_DATA']}"
    return files


def tshark_fields(path: Path, *fields: str) -> list[list[str]]:
    cmd = ["tshark", "-n", "-r", str(path), "-T", "fields", "-E", "occurrence=f"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def test_real_captures_match_tshark_times_and_lengths(shared_data):
    for path in shared_data:
        rows = tshark_fields(path, "frame.time_epoch", "frame.len", "frame.cap_len")
        cap = read_capture(path)
        assert cap.problem is None, path
        assert len(cap) == len(rows), path
        ts = [int(Decimal(r[0]) * 10**9) for r in rows]
        assert cap.ts_ns.tolist() == ts, path
        assert cap.wire_len.tolist() == [int(r[1]) for r in rows], path
        assert cap.cap_len.tolist() == [int(r[2]) for r in rows], path


def test_real_captures_match_tshark_addresses_and_ports(shared_data):
    """Where tshark sees IP right after Ethernet (no tunnel, no MPLS), it must agree with us."""
    checked = 0
    for path in shared_data:
        rows = tshark_fields(
            path,
            "frame.protocols",
            "ip.src",
            "ip.dst",
            "ipv6.src",
            "ipv6.dst",
            "tcp.srcport",
            "tcp.dstport",
            "udp.srcport",
            "udp.dstport",
            "tcp.flags",
            "ip.frag_offset",
        )
        cap = read_capture(path)
        for i, (protos, s4, d4, s6, d6, ts, td, us, ud, fl, frag) in enumerate(rows):
            layers = protos.split(":")
            if layers[:2] != ["eth", "ethertype"] or layers[2:3] not in (["ip"], ["ipv6"]):
                continue
            if "ip" in layers[3:] or "ipv6" in layers[3:] or "icmp" in layers or "icmpv6" in layers:
                continue  # tunnels and ICMP errors quote inner headers
            checked += 1
            if layers[2] == "ip":
                assert cap.ip_version[i] == 4, (path, i)
                assert cap.src_lo[i] == int(ipaddress.IPv4Address(s4)), (path, i)
                assert cap.dst_lo[i] == int(ipaddress.IPv4Address(d4)), (path, i)
            else:
                src, dst = int(ipaddress.IPv6Address(s6)), int(ipaddress.IPv6Address(d6))
                assert cap.ip_version[i] == 6, (path, i)
                assert (int(cap.src_hi[i]) << 64 | int(cap.src_lo[i])) == src, (path, i)
                assert (int(cap.dst_hi[i]) << 64 | int(cap.dst_lo[i])) == dst, (path, i)
            if frag not in ("", "0"):
                continue  # tshark shows the ports of the reassembled datagram
            if ts:
                assert (cap.sport[i], cap.dport[i]) == (int(ts), int(td)), (path, i)
                assert cap.tcp_flags[i] == int(fl, 16) & 0xFF, (path, i)
            elif us:
                assert (cap.sport[i], cap.dport[i]) == (int(us), int(ud)), (path, i)
    assert checked > 500


def test_missing_library_says_how_to_build_it(tmp_path, monkeypatch):
    from analysis.capture import LIB_ENV, CaptureLibraryError

    monkeypatch.setenv(LIB_ENV, str(tmp_path / "libntg.so"))
    with pytest.raises(CaptureLibraryError, match="cmake -S ntgcore/native"):
        read_capture(tmp_path / "any.pcap")
