"""flowengine's `frames` and `stream` lines, `--counters` and pause/resume (SIGUSR1/SIGUSR2)
(generators/flowengine/README.md, "Stream lines", "Counters file", "Pause and resume").

Runs the real binary (fixture `flowengine_bin`); frames are built with Scapy, outputs read back
with the project's pcap reader (analysis.capture.iter_frames) and checksums verified with Scapy and
tshark. The live tests run in the namespaces of the `pair` fixture (veth0 in `pair.gen`, veth1 in
`pair.peer`), bounded in packets and time.
"""

from __future__ import annotations

import json
import mmap
import shutil
import signal
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from analysis.capture import iter_frames
from ntgcore.packets import PcapWriter
from ntgcore.proc import Process
from testbed.endpoints.netns.topology import netns_argv

SMAC, DMAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
MAGIC = b"NTGO"
# Where the 4-byte sequence and the L4 checksum sit in the frames below (the 12-byte signature
# NTGO, flow index, seq at the start of the L4 payload, as the OTG compiler lays it out).
UDP4 = dict(seq_off=14 + 20 + 8 + 8, csum_off=14 + 20 + 6)
TCP4 = dict(seq_off=14 + 20 + 20 + 8, csum_off=14 + 20 + 16)
UDP6 = dict(seq_off=14 + 40 + 8 + 8, csum_off=14 + 40 + 6)


def udp4(size: int, flow: int = 0, fill: bytes = b"") -> bytes:
    head = (
        Ether(src=SMAC, dst=DMAC)
        / IP(src="198.18.0.1", dst="198.19.0.1")
        / UDP(sport=1000, dport=2000)
    )
    pay = MAGIC + struct.pack("!II", flow, 0) + fill
    return bytes(head / Raw(pay + bytes(size - len(head) - len(pay))))


def tcp4(size: int) -> bytes:
    head = (
        Ether(src=SMAC, dst=DMAC)
        / IP(src="198.18.0.2", dst="198.19.0.2")
        / TCP(sport=1001, dport=2001, flags="A", seq=7, ack=9)
    )
    pay = MAGIC + struct.pack("!II", 1, 0)
    return bytes(head / Raw(pay + bytes(size - len(head) - len(pay))))


def udp6(size: int) -> bytes:
    head = (
        Ether(src=SMAC, dst=DMAC)
        / IPv6(src="2001:db8::1", dst="2001:db8::2")
        / UDP(sport=1002, dport=2002)
    )
    pay = MAGIC + struct.pack("!II", 2, 0)
    return bytes(head / Raw(pay + bytes(size - len(head) - len(pay))))


def write_frames(path: Path, frames: list[bytes], cut: dict[int, int] | None = None) -> Path:
    """A nanosecond pcap of `frames`; `cut`: frame index -> bytes kept (cap_len < wire_len)."""
    with open(path, "wb") as f:
        w = PcapWriter(f, nanosecond=True)
        for i, fr in enumerate(frames):
            keep = (cut or {}).get(i)
            w.write(i, fr[:keep] if keep else fr, orig_len=len(fr) if keep else None)
    return path


def stream_line(**kw) -> str:
    d = dict(
        first=0,
        count=1,
        start=0,
        period=1000,
        packets=10,
        burst=0,
        burst_period=0,
        seq_off="-",
        csum_off="-",
    )
    d.update(kw)
    return "stream " + " ".join(f"{k}={v}" for k, v in d.items())


FLOW = (
    "flow af=4 proto=17 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 src=198.18.1.1/32 "
    "src_mode=fixed dst=198.19.1.1/32 dst_mode=fixed sport=3000-3000 sport_mode=fixed dport=9-9 "
    "dport_mode=fixed start={start} period={period} packets={packets} size=22-22 payload=- "
    "reps={reps} rep_period={rep_period}"
)


def session(tmp_path: Path, *lines: str, name: str = "s.ntg") -> Path:
    p = tmp_path / name
    p.write_text("ntg-session 1\nseed 3\n" + "\n".join(lines) + "\n")
    return p


def gen(bin_, sess: Path, *args, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_), "gen", str(sess), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def gen_pcap(bin_, tmp_path: Path, sess: Path, *args) -> tuple[list, dict]:
    out, summ = tmp_path / "out.pcap", tmp_path / "summary.json"
    r = gen(
        bin_,
        sess,
        "-o",
        out,
        "--summary",
        summ,
        "--stats",
        tmp_path / "stats.csv",
        "--flows",
        tmp_path / "flows.csv",
        *args,
    )
    assert r.returncode == 0, r.stderr
    return list(iter_frames(out)), json.loads(summ.read_text())


def verify_l4(frame: bytes) -> bool:
    """The frame's TCP/UDP checksum is right: Scapy recomputes it (0 and 0xffff are the same
    one's-complement value; UDP sends a computed 0 as 0xffff)."""
    pkt = Ether(frame)
    layer = TCP if TCP in pkt else UDP
    got = pkt[layer].chksum
    del pkt[layer].chksum
    want = Ether(bytes(pkt))[layer].chksum
    return got == want or {got, want} == {0, 0xFFFF}


def seq_at(frame: bytes, off: int) -> int:
    return struct.unpack_from("!I", frame, off)[0]


# --- the session format -------------------------------------------------------------------------


@pytest.fixture
def frames2(tmp_path) -> Path:
    return write_frames(tmp_path / "frames.pcap", [udp4(64), udp4(100)])


GOOD = dict(first=0, count=2, packets=5, seq_off=UDP4["seq_off"], csum_off=UDP4["csum_off"])

# (changes to GOOD or a whole line, the key the message names, a piece of the message)
BAD_STREAM = [
    (dict(first="x"), "first", "expected a non-negative integer"),
    (dict(first=2, count=1), "count", "must not exceed the 2 frames"),
    (dict(count=0), "count", "must be >= 1"),
    (dict(count=3), "count", "must not exceed the 2 frames"),
    (dict(start="-1"), "start", "expected a non-negative integer"),
    (dict(start=2**32 * 10**9 - 1000), "start", "before 2^32 s"),
    (dict(period=0), "period", "must be >= 1 without bursts"),
    (dict(period=2**64), "period", "expected a non-negative integer"),
    (dict(packets=0), "packets", "must be >= 1"),
    (dict(packets=2**62 + 1), "packets", "must be 1..2^62"),
    (dict(burst="many"), "burst", "expected a non-negative integer"),
    (dict(burst=3, burst_period=1999), "burst_period", "at least (burst - 1) * period"),
    (dict(burst_period="x"), "burst_period", "expected a non-negative integer"),
    (dict(seq_off=61), "seq_off", "does not fit frame 0 (64 bytes)"),
    (dict(seq_off="one"), "seq_off", "expected - or a byte offset"),
    (dict(csum_off=41), "csum_off", "must be even"),
    (dict(csum_off=GOOD["seq_off"] + 2), "csum_off", "overlaps the sequence field"),
    (dict(seq_off="-"), "csum_off", "needs seq_off"),
    (dict(csum_off=63), "csum_off", "does not fit frame 0"),
    (dict(csum_off=65535), "csum_off", "expected - or a byte offset"),
    (dict(fcs=2), "fcs", "must be 0 or 1"),
    (dict(fcs="yes"), "fcs", "expected a non-negative integer"),
    (dict(seq_off=58, csum_off=40, fcs=1), "fcs", "overlap the FCS of frame 0 (64 bytes"),
]


@pytest.mark.parametrize(
    "change,key,what", BAD_STREAM, ids=[f"{c[1]}-{i}" for i, c in enumerate(BAD_STREAM)]
)
def test_stream_key_errors(flowengine_bin, tmp_path, frames2, change, key, what):
    sess = session(
        tmp_path, f"frames {frames2}", "# a comment line", stream_line(**{**GOOD, **change})
    )
    r = gen(flowengine_bin, sess, "--null")
    assert r.returncode == 2, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"{sess}:5: {key}: "), first
    assert what in first, first
    assert "Traceback" not in r.stderr


def test_stream_line_errors(flowengine_bin, tmp_path, frames2):
    good = stream_line(**GOOD)
    cases = [
        ([good], 3, "stream: needs a `frames PATH` line before it"),
        ([f"frames {frames2}", good + " color=red"], 4, "color: unknown key (got color=red)"),
        ([f"frames {frames2}", good.replace(" burst=0", "")], 4, "burst: missing"),
        ([f"frames {frames2}", good + " count=2"], 4, "count: given twice"),
        ([f"frames {frames2}", f"frames {frames2}"], 4, "frames: given twice"),
        ([f"frames {frames2} extra"], 3, "frames: expected one PATH"),
        ([f"frames {tmp_path / 'none.pcap'}"], 3, "frames: "),
        (["streams x=1"], 3, "unknown directive (expected seed, flow, frames or stream)"),
    ]
    for lines, line, what in cases:
        sess = session(tmp_path, *lines)
        r = gen(flowengine_bin, sess, "--null")
        assert r.returncode == 2, (lines, r.stderr)
        assert r.stderr.startswith(f"{sess}:{line}: "), r.stderr
        assert what in r.stderr.splitlines()[0], (what, r.stderr)


def test_frames_file_errors(flowengine_bin, tmp_path):
    """A frames file that is cut short, damaged, not a capture or not Ethernet: exit 2, naming
    the file, the frame and the record's byte offset."""
    cut = write_frames(tmp_path / "cut.pcap", [udp4(64), udp4(80)], cut={1: 60})
    damaged = tmp_path / "damaged.pcap"
    damaged.write_bytes(write_frames(tmp_path / "ok.pcap", [udp4(64)]).read_bytes()[:-10])
    not_pcap = tmp_path / "text.pcap"
    not_pcap.write_text("hello\n" * 10)
    raw_ip = tmp_path / "rawip.pcap"
    body = udp4(64)[14:]
    raw_ip.write_bytes(
        struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)
        + struct.pack("<IIII", 0, 0, len(body), len(body))
        + body
    )
    tiny = write_frames(tmp_path / "tiny.pcap", [udp4(64), b"\x02" * 10])
    cases = [
        (cut, "frame 1 (the record at byte 104): 60 of its 80 bytes captured"),
        (damaged, "damaged at byte 24"),
        (not_pcap, "not a pcap or pcapng file"),
        (raw_ip, "frame 0 (the record at byte 24): link type 101, but frames must be Ethernet"),
        (tiny, "frame 1 (the record at byte 104): 10 bytes; a frame has 14 to 65535 bytes"),
    ]
    for path, what in cases:
        sess = session(tmp_path, f"frames {path}")
        r = gen(flowengine_bin, sess, "--null")
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith(f"{sess}:3: frames: "), r.stderr
        assert what in r.stderr, (what, r.stderr)


def test_threads_and_counters_need_one_thread(flowengine_bin, tmp_path, frames2):
    sess = session(
        tmp_path,
        f"frames {frames2}",
        FLOW.format(start=0, period=10, packets=3, reps=1, rep_period=0),
        stream_line(**GOOD),
    )
    r = gen(flowengine_bin, sess, "--null", "--threads", "2")
    assert r.returncode == 2
    assert f"--threads 2: {sess}:5: stream lines need --threads 1" in r.stderr
    r = gen(flowengine_bin, sess, "--null", "--threads", "2", "--counters", tmp_path / "c.bin")
    assert r.returncode == 2 and "--counters needs --threads 1" in r.stderr
    assert not (tmp_path / "c.bin").exists()
    # The same session with one thread runs.
    r = gen(flowengine_bin, sess, "--null", "--threads", "1", "--stats", tmp_path / "st.csv")
    assert r.returncode == 0, r.stderr


# --- what a stream sends ------------------------------------------------------------------------


def expected_frame(template: bytes, i: int, seq_off: int | None) -> bytes:
    if seq_off is None:
        return template
    return template[:seq_off] + struct.pack("!I", i & 0xFFFFFFFF) + template[seq_off + 4 :]


def without(frame: bytes, off: int) -> bytes:
    return frame[:off] + frame[off + 2 :]


@pytest.mark.parametrize(
    "make,offs", [(udp4, UDP4), (tcp4, TCP4), (udp6, UDP6)], ids=["udp4", "tcp4", "udp6"]
)
def test_due_times_bytes_and_checksums(flowengine_bin, tmp_path, make, offs):
    """Packet i is frame first + i mod count at start + i*period; its bytes are the frame's with
    i in the sequence field, and its checksum is valid (Scapy recomputes it)."""
    frames = [make(80), make(78), make(128), make(100), make(90)]
    path = write_frames(tmp_path / "f.pcap", frames)
    first, count, start, period, packets = 1, 3, 1_234_567, 999_983, 11
    sess = session(
        tmp_path,
        f"frames {path}",
        stream_line(first=first, count=count, start=start, period=period, packets=packets, **offs),
    )
    out, summ = gen_pcap(flowengine_bin, tmp_path, sess)
    assert len(out) == packets == summ["packets"]
    assert summ["bytes"] == sum(len(frames[first + i % count]) for i in range(packets))
    for i, (ts, wire, data) in enumerate(out):
        tpl = frames[first + i % count]
        assert ts == start + i * period
        assert wire == len(data) == len(tpl)
        want = expected_frame(tpl, i, offs["seq_off"])
        assert without(data, offs["csum_off"]) == without(want, offs["csum_off"])
        assert seq_at(data, offs["seq_off"]) == i
        assert verify_l4(data), i
    # The flow log: one row, the first frame's endpoints, first and last due times.
    rows = (tmp_path / "flows.csv").read_text().splitlines()
    assert len(rows) == 2
    serial, flow, rep, af, proto, src, dst, sport, dport, first_ns, last_ns, n, nbytes = rows[
        1
    ].split(",")
    pkt = Ether(frames[first])
    ip = pkt[IP] if IP in pkt else pkt[IPv6]
    assert (serial, flow, rep) == ("0", "0", "0")
    assert af == ("4" if IP in pkt else "6") and src == ip.src and dst == ip.dst
    assert proto == ("6" if TCP in pkt else "17")
    assert (int(sport), int(dport)) == (ip.payload.sport, ip.payload.dport)
    assert int(first_ns) == start and int(last_ns) == start + (packets - 1) * period
    assert int(n) == packets and int(nbytes) == summ["bytes"]


def with_fcs(frame: bytes) -> bytes:
    """`frame` with its last 4 bytes replaced by its Ethernet FCS (CRC-32, least significant byte
    first)."""
    body = frame[:-4]
    return body + struct.pack("<I", zlib.crc32(body))


@pytest.mark.parametrize(
    "make,offs", [(udp4, UDP4), (tcp4, TCP4), (udp6, UDP6)], ids=["udp4", "tcp4", "udp6"]
)
def test_fcs_kept_right(flowengine_bin, tmp_path, make, offs):
    """fcs=1: every packet's last 4 bytes are the CRC-32 of the bytes before them, after the
    sequence and checksum patch (zlib computes it here), for frames of several lengths; the rest
    of the frame is as without fcs."""
    frames = [with_fcs(make(n)) for n in (78, 1518, 80, 9018, 78)]
    path = write_frames(tmp_path / "f.pcap", frames)
    line = stream_line(count=5, packets=70_003, period=1, **offs)
    out, _ = gen_pcap(
        flowengine_bin, tmp_path, session(tmp_path, f"frames {path}", line + " fcs=1")
    )
    assert len(out) == 70_003
    bad = [i for i, (_, _, d) in enumerate(out) if d[-4:] != struct.pack("<I", zlib.crc32(d[:-4]))]
    assert bad == []
    assert [seq_at(d, offs["seq_off"]) for _, _, d in out[65_530:65_540]] == list(
        range(65_530, 65_540)
    )
    # Without fcs (the default, also fcs=0) the same frames keep the stored FCS of frame j.
    plain, _ = gen_pcap(flowengine_bin, tmp_path, session(tmp_path, f"frames {path}", line))
    assert [d[:-4] for _, _, d in plain] == [d[:-4] for _, _, d in out]
    assert plain[7][2][-4:] == frames[2][-4:] != out[7][2][-4:]
    # fcs=1 without seq_off: nothing changes, the frames go as stored.
    line = stream_line(count=5, packets=7, period=1, fcs=1)
    same, _ = gen_pcap(flowengine_bin, tmp_path, session(tmp_path, f"frames {path}", line))
    assert [d for _, _, d in same] == [frames[i % 5] for i in range(7)]


def test_no_patch_sends_frames_as_they_are(flowengine_bin, tmp_path):
    frames = [udp4(64, fill=b"abc"), tcp4(70)]
    path = write_frames(tmp_path / "f.pcap", frames)
    sess = session(tmp_path, f"frames {path}", stream_line(count=2, packets=6, period=5))
    out, _ = gen_pcap(flowengine_bin, tmp_path, sess)
    assert [d for _, _, d in out] == [frames[i % 2] for i in range(6)]
    assert [t for t, _, _ in out] == [5 * i for i in range(6)]


def test_pcapng_frames_and_stochastic_planner(flowengine_bin, tmp_path):
    """A pcapng frames file (editcap's conversion) plays the same bytes; with --planner
    stochastic a stream keeps its exact due times."""
    if not shutil.which("editcap"):
        pytest.skip("editcap (wireshark-common) is not installed")
    frames = [udp4(64), udp4(90)]
    pcap = write_frames(tmp_path / "f.pcap", frames)
    png = tmp_path / "f.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(pcap), str(png)], check=True, timeout=30)
    line = stream_line(count=2, packets=9, period=333, start=17, **UDP4)
    base, _ = gen_pcap(flowengine_bin, tmp_path, session(tmp_path, f"frames {pcap}", line))
    out, _ = gen_pcap(flowengine_bin, tmp_path, session(tmp_path, f"frames {png}", line))
    assert out == base and len(out) == 9
    sess = session(
        tmp_path,
        f"frames {png}",
        line,
        FLOW.format(start=0, period=100, packets=50, reps=3, rep_period=10),
    )
    mixed, _ = gen_pcap(flowengine_bin, tmp_path, sess, "--planner", "stochastic")
    ours = [t for t, _, d in mixed if Ether(d)[IP].src == "198.18.0.1"]
    assert ours == [17 + 333 * i for i in range(9)]


def test_bursts(flowengine_bin, tmp_path):
    """burst=4: packet i at start + (i / 4) * burst_period + (i mod 4) * period; burst_period may
    equal the burst's length (back to back) and burst 1 uses burst_period alone."""
    path = write_frames(tmp_path / "f.pcap", [udp4(64)])
    cases = [
        dict(start=10, period=1000, packets=10, burst=4, burst_period=50_000),
        dict(start=0, period=1000, packets=9, burst=3, burst_period=2000),  # same instant
        dict(start=7, period=0, packets=6, burst=2, burst_period=300),  # a burst at one instant
        dict(start=0, period=123, packets=5, burst=1, burst_period=1000),
    ]
    for c in cases:
        sess = session(tmp_path, f"frames {path}", stream_line(**c, **UDP4))
        out, summ = gen_pcap(flowengine_bin, tmp_path, sess)
        want = [
            c["start"] + (i // c["burst"]) * c["burst_period"] + (i % c["burst"]) * c["period"]
            for i in range(c["packets"])
        ]
        assert [t for t, _, _ in out] == want, c
        assert [seq_at(d, UDP4["seq_off"]) for _, _, d in out] == list(range(c["packets"]))
        assert summ["last_ns"] == want[-1]
        last_ns = int((tmp_path / "flows.csv").read_text().splitlines()[1].split(",")[10])
        assert last_ns == want[-1]


def test_sequence_and_checksums_across_2_16(flowengine_bin, tmp_path):
    """66,000 packets: the sequence's high word changes at 65,536; tshark finds every UDP
    checksum good."""
    if not shutil.which("tshark"):
        pytest.skip("tshark is not installed")
    path = write_frames(tmp_path / "f.pcap", [udp4(64, flow=5), udp4(72, flow=5)])
    sess = session(
        tmp_path, f"frames {path}", stream_line(count=2, packets=66_000, period=1, **UDP4)
    )
    out, _ = gen_pcap(flowengine_bin, tmp_path, sess)
    assert [seq_at(d, UDP4["seq_off"]) for _, _, d in out] == list(range(66_000))
    for i in (0, 1, 65_534, 65_535, 65_536, 65_537, 65_999):
        assert verify_l4(out[i][2]), i
    r = subprocess.run(
        [
            "tshark",
            "-r",
            str(tmp_path / "out.pcap"),
            "-o",
            "udp.check_checksum:TRUE",
            "-T",
            "fields",
            "-e",
            "udp.checksum.status",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    status = r.stdout.split()
    assert len(status) == 66_000 and set(status) == {"1"}  # 1: good


def test_zero_checksum_is_sent_as_ffff(flowengine_bin, tmp_path):
    """A frame whose checksum, for sequence 1, comes out as 0x0000 gets 0xffff (UDP: 0 would mean
    "no checksum")."""
    probe = Ether(udp4(64, fill=b"\0\0"))
    probe[Raw].load = probe[Raw].load[:8] + struct.pack("!I", 1) + probe[Raw].load[12:]
    del probe[UDP].chksum
    adjust = Ether(bytes(probe))[UDP].chksum  # putting this word in the payload makes the sum 0
    tpl = udp4(64, fill=struct.pack("!H", adjust))
    path = write_frames(tmp_path / "f.pcap", [tpl])
    sess = session(tmp_path, f"frames {path}", stream_line(packets=3, **UDP4))
    out, _ = gen_pcap(flowengine_bin, tmp_path, sess)
    csums = [struct.unpack_from("!H", d, UDP4["csum_off"])[0] for _, _, d in out]
    assert csums[1] == 0xFFFF
    assert all(verify_l4(d) for _, _, d in out)


def test_flow_and_stream_lines_keep_session_order(flowengine_bin, tmp_path):
    """Lines are indexed in session order; instances are numbered across flow and stream lines
    alike; at one due time packets leave by serial. The flow log, the per-second CSV and the
    summary count stream packets like any other."""
    path = write_frames(tmp_path / "f.pcap", [udp4(64), tcp4(90)])
    lines = [
        f"frames {path}",
        FLOW.format(start=0, period=1000, packets=4, reps=2, rep_period=500),  # serials 0, 1
        stream_line(first=0, count=1, start=0, period=500, packets=8, **UDP4),  # serial 2
        FLOW.format(start=1000, period=2000, packets=2, reps=1, rep_period=0),  # serial 3
        stream_line(first=1, count=1, start=1500, period=1_000_000_000, packets=2, **TCP4),
    ]
    sess = session(tmp_path, *lines)
    out, summ = gen_pcap(flowengine_bin, tmp_path, sess)
    # The expected (due, serial) sequence.
    sched = []
    sched += [(500 * r + 1000 * i, r, "flow0") for r in range(2) for i in range(4)]
    sched += [(500 * i, 2, "stream1") for i in range(8)]
    sched += [(1000 + 2000 * i, 3, "flow2") for i in range(2)]
    sched += [(1500 + 1_000_000_000 * i, 4, "stream3") for i in range(2)]
    sched.sort(key=lambda x: (x[0], x[1]))
    assert [t for t, _, _ in out] == [d for d, _, _ in sched]

    def kind(frame: bytes) -> str:
        pkt = Ether(frame)
        if TCP in pkt:
            return "stream3"
        return "stream1" if pkt[IP].src == "198.18.0.1" else "flow"

    got = [kind(d) for _, _, d in out]
    want = [k if k.startswith("stream") else "flow" for _, _, k in sched]
    assert got == want
    assert summ["packets"] == 8 + 2 + 8 + 2 and summ["flows_started"] == 5
    assert summ["flows_finished"] == 5
    rows = [r.split(",") for r in (tmp_path / "flows.csv").read_text().splitlines()[1:]]
    by_serial = {int(r[0]): r for r in rows}
    assert {s: int(r[1]) for s, r in by_serial.items()} == {0: 0, 1: 0, 2: 1, 3: 2, 4: 3}
    assert by_serial[2][5:7] == ["198.18.0.1", "198.19.0.1"] and by_serial[4][4] == "6"
    assert int(by_serial[4][10]) == 1_000_001_500
    stats = (tmp_path / "stats.csv").read_text().splitlines()
    assert stats[1].split(",")[:2] == ["0", str(8 + 2 + 8 + 1)]
    assert stats[2].split(",")[:2] == ["1", "1"]


def read_counters(path: Path) -> tuple[int, list[tuple[int, int]]]:
    """(state, [(packets, bytes) per line]) of a --counters file, read through mmap as a client
    would while the engine runs."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        magic, n, state = struct.unpack_from("=8sQQ", m, 0)
        assert magic == b"NTGCNT01"
        vals = struct.unpack_from(f"={2 * n}Q", m, 24)
    return state, [(vals[2 * k], vals[2 * k + 1]) for k in range(n)]


def test_counters_offline_equal_summary(flowengine_bin, tmp_path):
    path = write_frames(tmp_path / "f.pcap", [udp4(64), udp4(96)])
    lines = [
        f"frames {path}",
        FLOW.format(start=0, period=1000, packets=30, reps=3, rep_period=100),
        stream_line(count=2, packets=41, period=77, **UDP4),
    ]
    sess = session(tmp_path, *lines)
    _, summ = gen_pcap(flowengine_bin, tmp_path, sess, "--counters", tmp_path / "c.bin")
    state, lines_ = read_counters(tmp_path / "c.bin")
    assert state == 2
    assert lines_ == [(90, 90 * 64), (41, 21 * 64 + 20 * 96)]
    assert sum(p for p, _ in lines_) == summ["packets"]
    assert sum(b for _, b in lines_) == summ["bytes"]
    assert oct((tmp_path / "c.bin").stat().st_mode & 0o777) == oct(0o644)


def wait_for(cond, timeout: float, step: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return None


def counters_state(path: Path) -> int | None:
    try:
        return read_counters(path)[0]
    except (OSError, ValueError, AssertionError, struct.error):
        return None  # not created yet, or the header not yet whole


def test_pause_resume_unpaced_null(flowengine_bin, tmp_path):
    """--null at top speed: SIGUSR1 stops the loop (state 1, counters frozen), SIGUSR2 goes on;
    the summary's paused_ns is the time held; a SIGINT while paused ends the run (130)."""
    path = write_frames(tmp_path / "f.pcap", [udp4(64)])
    sess = session(tmp_path, f"frames {path}", stream_line(packets=2**40, period=1, **UDP4))
    cnt, summ = tmp_path / "c.bin", tmp_path / "s.json"
    p = Process(
        "flowengine",
        [
            str(flowengine_bin),
            "gen",
            str(sess),
            "--null",
            "--counters",
            str(cnt),
            "--summary",
            str(summ),
            "--stats",
            str(tmp_path / "st.csv"),
        ],
        stderr=subprocess.PIPE,
    ).start()
    try:
        assert wait_for(lambda: counters_state(cnt) == 0 and read_counters(cnt)[1][0][0] > 0, 10)
        p.send_signal(signal.SIGUSR1)
        assert wait_for(lambda: counters_state(cnt) == 1, 5)
        frozen = read_counters(cnt)[1]
        time.sleep(0.4)
        assert read_counters(cnt) == (1, frozen)
        p.send_signal(signal.SIGUSR2)
        assert wait_for(lambda: read_counters(cnt)[1][0][0] > frozen[0][0], 5)
        assert counters_state(cnt) == 0
        p.send_signal(signal.SIGUSR1)
        assert wait_for(lambda: counters_state(cnt) == 1, 5)
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        assert p.wait(10) == 130
    finally:
        p.stop(grace=2)
    s = json.loads(summ.read_text())
    assert s["status"] == "interrupted" and s["signal"] == "SIGINT"
    assert s["paused_ns"] >= 0.55e9, s
    assert s["paused_ns"] < s["wall_seconds"] * 1e9
    state, lines_ = read_counters(cnt)
    assert state == 2 and lines_ == [(s["packets"], s["bytes"])]


def test_pause_shifts_paced_pcap_run(flowengine_bin, tmp_path):
    """-o with --pace realtime: a pause (during the pacing wait) lengthens the run by the time
    held; the pcap keeps the virtual due times (they do not shift) and nothing is lost."""
    path = write_frames(tmp_path / "f.pcap", [udp4(64)])
    sess = session(tmp_path, f"frames {path}", stream_line(packets=40, period=10_000_000, **UDP4))
    out, summ = tmp_path / "o.pcap", tmp_path / "s.json"
    p = Process(
        "flowengine",
        [
            str(flowengine_bin),
            "gen",
            str(sess),
            "-o",
            str(out),
            "--pace",
            "realtime",
            "--summary",
            str(summ),
            "--stats",
            str(tmp_path / "st.csv"),
        ],
        stderr=subprocess.PIPE,
    ).start()
    try:
        time.sleep(0.15)
        p.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        p.send_signal(signal.SIGUSR2)
        assert p.wait(20) == 0
    finally:
        p.stop(grace=2)
    s = json.loads(summ.read_text())
    assert 0.4e9 <= s["paused_ns"] <= 1.5e9, s
    assert s["wall_seconds"] >= 0.39 + s["paused_ns"] / 1e9 - 0.02, s
    # No catch-up: had the clock not moved on, the packets after the pause would be ~0.5 s late.
    assert s["max_late_ns"] < 100_000_000, s
    assert [t for t, _, _ in iter_frames(out)] == [10_000_000 * i for i in range(40)]


# --- live: counters and pause/resume on a veth pair ----------------------------------------------


class Capture:
    """tcpdump on veth1 in the peer namespace (nanosecond timestamps), until stop()."""

    def __init__(self, pair, path: Path, log: Path):
        self.path, self.log = path, log
        self.err = open(log, "wb")
        self.proc = Process(
            "tcpdump",
            netns_argv(
                pair.peer,
                "tcpdump",
                "-i",
                "veth1",
                "-n",
                "-U",
                "--immediate-mode",
                "-B",
                "16384",
                "--time-stamp-precision",
                "nano",
                "-w",
                str(path),
            ),
            stderr=self.err,
        ).start()
        if not wait_for(lambda: b"listening on" in log.read_bytes(), 10):
            self.proc.stop(grace=1)
            raise RuntimeError(f"tcpdump did not start: {log.read_text()}")

    def stop(self) -> list[tuple[int, int, bytes]]:
        time.sleep(0.3)
        self.proc.stop(signal.SIGINT, grace=5)
        self.err.close()
        return list(iter_frames(self.path))


def live_engine(bin_, pair, tmp_path: Path, sess: Path, *args) -> Process:
    return Process(
        "flowengine",
        netns_argv(
            pair.gen,
            str(bin_),
            "gen",
            str(sess),
            "--iface",
            "veth0",
            "--summary",
            str(tmp_path / "s.json"),
            "--stats",
            str(tmp_path / "st.csv"),
            *map(str, args),
        ),
        stderr=open(tmp_path / "engine.log", "wb"),
    ).start()


def test_live_counters_while_running_and_at_the_end(flowengine_bin, pair, tmp_path):
    path = write_frames(tmp_path / "f.pcap", [udp4(64), udp4(128)])
    lines = [
        f"frames {path}",
        stream_line(count=2, packets=150, period=8_000_000, **UDP4),
        FLOW.format(start=0, period=10_000_000, packets=120, reps=1, rep_period=0),
    ]
    sess = session(tmp_path, *lines)
    cnt = tmp_path / "c.bin"
    before = pair.rx()
    cap = Capture(pair, tmp_path / "cap.pcap", tmp_path / "tcpdump.log")
    p = live_engine(flowengine_bin, pair, tmp_path, sess, "--counters", cnt)
    seen = []
    try:
        assert wait_for(lambda: counters_state(cnt) is not None, 10)
        while p.poll() is None:
            state, v = read_counters(cnt)
            if state == 0:
                seen.append(v)
            time.sleep(0.05)
        assert p.wait(10) == 0, (tmp_path / "engine.log").read_text()
    finally:
        p.stop(grace=2)
        frames = cap.stop()
    s = json.loads((tmp_path / "s.json").read_text())
    # While it ran: growing, never past the end, both lines moving.
    assert len(seen) >= 10
    assert all(a[k][0] <= b[k][0] for a, b in zip(seen, seen[1:]) for k in range(2))
    mid = seen[len(seen) // 2]
    assert 0 < mid[0][0] < 150 and 0 < mid[1][0] < 120, mid
    state, final = read_counters(cnt)
    assert state == 2
    assert final == [(150, 75 * 64 + 75 * 128), (120, 120 * 64)]
    assert (sum(p for p, _ in final), sum(b for _, b in final)) == (s["packets"], s["bytes"])
    assert s["sent"] == s["packets"] == 270 and s["failed"] == 0
    assert pair.rx() - before == 270 == len(frames)
    # The stream's frames arrive as sent: sequence numbers in order, checksums valid.
    ours = [d for _, _, d in frames if Ether(d)[IP].src == "198.18.0.1"]
    assert [seq_at(d, UDP4["seq_off"]) for d in ours] == list(range(150))
    assert all(verify_l4(d) for d in ours)


def test_live_pause_resume_no_catch_up(flowengine_bin, pair, tmp_path):
    """SIGUSR1 holds the live run (state 1, nothing arrives at the peer), SIGUSR2 resumes: the
    gap in the capture is at least the pause, and the frames after it keep the period (no burst
    to catch up)."""
    period = 10_000_000
    path = write_frames(tmp_path / "f.pcap", [udp4(64)])
    sess = session(tmp_path, f"frames {path}", stream_line(packets=80, period=period, **UDP4))
    cnt = tmp_path / "c.bin"
    cap = Capture(pair, tmp_path / "cap.pcap", tmp_path / "tcpdump.log")
    p = live_engine(flowengine_bin, pair, tmp_path, sess, "--counters", cnt)
    try:
        assert wait_for(lambda: counters_state(cnt) == 0 and read_counters(cnt)[1][0][0] >= 20, 10)
        p.send_signal(signal.SIGUSR1)
        assert wait_for(lambda: counters_state(cnt) == 1, 5)
        rx_paused, n_paused = pair.rx(), read_counters(cnt)[1][0][0]
        time.sleep(0.6)
        assert pair.rx() == rx_paused and read_counters(cnt)[1][0][0] == n_paused
        p.send_signal(signal.SIGUSR2)
        assert p.wait(20) == 0, (tmp_path / "engine.log").read_text()
    finally:
        p.stop(grace=2)
        frames = cap.stop()
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["sent"] == 80 == len(frames) and s["status"] == "completed"
    assert 0.55e9 <= s["paused_ns"] < 2e9, s
    seqs = [seq_at(d, UDP4["seq_off"]) for _, _, d in frames]
    assert seqs == list(range(80))
    ts = [t for t, _, _ in frames]
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    k = max(range(len(gaps)), key=gaps.__getitem__)  # the pause
    assert k + 1 == n_paused, (k, n_paused)
    assert gaps[k] >= s["paused_ns"], (gaps[k], s["paused_ns"])
    # After the resume: the period again, no catch-up burst.
    # (Without the shift the frames due during the pause would leave back to back: their span
    # would be microseconds.)
    assert ts[k + 11] - ts[k + 1] >= 10 * period * 0.9, gaps[k + 1 : k + 11]
    assert (ts[-1] - ts[k + 1]) >= (len(ts) - k - 2) * period * 0.9


def test_live_stream_frame_larger_than_mtu(flowengine_bin, pair, tmp_path):
    path = write_frames(tmp_path / "f.pcap", [udp4(64), udp4(1600)])
    sess = session(tmp_path, f"frames {path}", stream_line(count=2, packets=4))
    r = subprocess.run(
        netns_argv(pair.gen, str(flowengine_bin), "gen", str(sess), "--iface", "veth0"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert (
        f"{sess}:4: stream: frames up to 1600 bytes do not fit the MTU of veth0 (1500" in r.stderr
    )
