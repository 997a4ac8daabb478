"""flowengine's command line against its contract (generators/flowengine/README.md).

Runs the real binary (fixture `flowengine_bin` in conftest.py) on small
hand-written session files and checks the pcap with a tiny reader below, scapy
and tshark.
"""

import csv
import ipaddress
import json
import mmap
import os
import random
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

NS = 1_000_000_000

BASE = {
    "af": 4,
    "proto": 17,
    "smac": "02:00:00:00:00:01",
    "dmac": "02:00:00:00:00:02",
    "src": "198.18.0.1/32",
    "src_mode": "fixed",
    "dst": "198.19.0.1/32",
    "dst_mode": "fixed",
    "sport": "40000-40000",
    "sport_mode": "fixed",
    "dport": "9-9",
    "dport_mode": "fixed",
    "start": 0,
    "period": 1000,
    "packets": 1,
    "size": "0-0",
    "payload": "-",
    "reps": 1,
    "rep_period": 0,
}

ICMP4 = {"proto": 1, "sport": "0-0", "dport": "0-0"}
ICMP6 = {
    "af": 6,
    "proto": 58,
    "src": "2001:db8::1/128",
    "dst": "2001:db8::2/128",
    "sport": "0-0",
    "dport": "0-0",
}


def flow(**kw):
    d = dict(BASE)
    d.update(kw)
    return "flow " + " ".join(f"{k}={v}" for k, v in d.items())


def flow_dict(**kw):
    d = dict(BASE)
    d.update(kw)
    return d


def session_text(flows, seed=42):
    lines = ["ntg-session 1", f"seed {seed}"]
    lines += [f if isinstance(f, str) else flow(**f) for f in flows]
    return "\n".join(lines) + "\n"


def write_session(tmp_path, flows, seed=42, name="s.ntg"):
    p = tmp_path / name
    p.write_text(session_text(flows, seed))
    return p


def run(bin_, *args, input=None, check=True):
    r = subprocess.run(
        [str(bin_), *map(str, args)], capture_output=True, text=True, input=input, timeout=120
    )
    if check and r.returncode != 0:
        raise AssertionError(
            f"exit {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}"
        )
    return r


def gen(bin_, tmp_path, flows, seed=42, extra=(), name="out"):
    """Runs gen to a pcap with every output; returns a dict of results."""
    s = write_session(tmp_path, flows, seed, name=f"{name}.ntg")
    pcap = tmp_path / f"{name}.pcap"
    summ = tmp_path / f"{name}.json"
    flows_csv = tmp_path / f"{name}.flows.csv"
    r = run(bin_, "gen", s, "-o", pcap, "--summary", summ, "--flows", flows_csv, *extra)
    return {
        "session": s,
        "pcap": pcap,
        "records": read_pcap(pcap),
        "summary": json.loads(summ.read_text()),
        "flows": read_csv(flows_csv),
        "stats": list(csv.DictReader(r.stdout.splitlines())),
        "stderr": r.stderr,
    }


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --- a tiny pcap reader -----------------------------------------------------


def pcap_header(data):
    if data[:4] == b"\x4d\x3c\xb2\xa1":
        endian = "<"
    elif data[:4] == b"\xa1\xb2\x3c\x4d":
        endian = ">"
    else:
        raise AssertionError(f"not a nanosecond pcap (magic {data[:4].hex()})")
    magic, major, minor, zone, sigfigs, snaplen, link = struct.unpack_from(
        endian + "IHHiIII", data, 0
    )
    assert (major, minor, zone, sigfigs, snaplen, link) == (2, 4, 0, 0, 65535, 1)
    return endian


def read_pcap(path):
    """[(timestamp ns, frame bytes)]; fails on any incomplete record."""
    data = Path(path).read_bytes()
    endian = pcap_header(data)
    out, off = [], 24
    while off < len(data):
        assert off + 16 <= len(data), f"truncated record header at {off}"
        sec, nsec, incl, orig = struct.unpack_from(endian + "IIII", data, off)
        assert nsec < NS and incl == orig and incl <= 65535
        off += 16
        assert off + incl <= len(data), f"truncated record at {off}"
        out.append((sec * NS + nsec, data[off : off + incl]))
        off += incl
    return out


def walk_pcap(path):
    """Record count of a possibly large pcap, checking every record is complete."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        endian = pcap_header(m[:24])
        unpack = struct.Struct(endian + "IIII").unpack_from
        size, off, n, last = len(m), 24, 0, -1
        while off < size:
            assert off + 16 <= size, "truncated record header"
            sec, nsec, incl, _ = unpack(m, off)
            ts = sec * NS + nsec
            assert ts >= last
            last = ts
            off += 16 + incl
            assert off <= size, "truncated record"
            n += 1
        return n


# --- frame field helpers (offsets per README "What the packets look like") --


def l4_offset(frame):
    et = frame[12:14]
    return 34 if et == b"\x08\x00" else 54


def icmp_id_seq(frame):
    o = l4_offset(frame)
    return struct.unpack_from("!HH", frame, o + 4)


def addrs(frame):
    if frame[12:14] == b"\x08\x00":
        return (str(ipaddress.IPv4Address(frame[26:30])), str(ipaddress.IPv4Address(frame[30:34])))
    return (str(ipaddress.IPv6Address(frame[22:38])), str(ipaddress.IPv6Address(frame[38:54])))


def ports(frame):
    return struct.unpack_from("!HH", frame, l4_offset(frame))


def expected_schedule(flows):
    """[(due, serial, index)] in the README's output order."""
    out, serial = [], 0
    for d in flows:
        d = flow_dict(**d)
        for r in range(d["reps"]):
            for i in range(d["packets"]):
                out.append((d["start"] + r * d["rep_period"] + i * d["period"], serial + r, i))
        serial += d["reps"]
    return sorted(out)


def hdr_len(af, proto):
    return 14 + (20 if af == 4 else 40) + (20 if proto == 6 else 8)


# --- tests --------------------------------------------------------------------


def test_version(flowengine_bin):
    r = run(flowengine_bin, "version")
    assert r.stdout.strip() == "flowengine 0.1.0"


def test_usage_errors_exit_2(flowengine_bin, tmp_path):
    s = write_session(tmp_path, [{}])
    for args in (
        [],
        ["gen"],
        ["gen", s],
        ["gen", s, "--null", "-o", tmp_path / "x.pcap"],
        ["gen", s, "--null", "--bogus"],
        ["gen", s, "--null", "--seed", "x"],
        ["frobnicate"],
    ):
        r = run(flowengine_bin, *args, check=False)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr


ALL_KINDS = [
    dict(
        af=4,
        proto=17,
        size="0-40",
        payload="0102030405",
        reps=3,
        rep_period=500,
        packets=6,
        sport="40000-40100",
        sport_mode="random",
        dst="198.19.0.0/24",
        dst_mode="increment",
    ),
    dict(
        af=4,
        proto=6,
        size="0-40",
        payload="a1b2c3",
        reps=3,
        rep_period=700,
        packets=5,
        sport="41000-41100",
        sport_mode="increment",
        dport="8080-8080",
    ),
    dict(ICMP4, size="0-33", payload="ff00ee", reps=2, rep_period=300, packets=4),
    dict(
        af=6,
        proto=17,
        src="2001:db8:a::/64",
        src_mode="random",
        dst="2001:db8:b::1/128",
        size="1-41",
        payload="0badc0ffee",
        reps=3,
        rep_period=111,
        packets=5,
        sport="42000-42010",
        sport_mode="increment",
    ),
    dict(
        af=6,
        proto=6,
        src="2001:db8:a::5/128",
        dst="2001:db8:c::/48",
        dst_mode="random",
        size="0-39",
        payload="-",
        reps=2,
        rep_period=1234,
        packets=6,
        sport="43000-43999",
        sport_mode="random",
        dport="8443-8443",
    ),
    dict(ICMP6, size="0-17", payload="abcdef", reps=2, rep_period=10, packets=4),
    # Fixed sizes, long and odd, and single-packet instances.
    dict(
        af=4,
        proto=17,
        size="1471-1471",
        payload="ff" * 1500,
        packets=2,
        start=5,
        sport="45000-45000",
    ),
    dict(
        af=6,
        proto=6,
        src="2001:db8::7/128",
        dst="2001:db8::8/128",
        size="7-7",
        payload="ffffffffffffffffff",
        packets=1,
        reps=2,
        sport="44000-44001",
        sport_mode="increment",
        dport="8000-8000",
    ),
]


@pytest.fixture(scope="module")
def all_kinds(flowengine_bin, tmp_path_factory):
    return gen(flowengine_bin, tmp_path_factory.mktemp("kinds"), ALL_KINDS, name="kinds")


def test_same_seed_same_bytes_other_seed_differs(flowengine_bin, tmp_path):
    s = write_session(tmp_path, ALL_KINDS, seed=7)
    outs = []
    for i, extra in enumerate(([], [], ["--seed", "8"], ["--seed", "7"])):
        p = tmp_path / f"{i}.pcap"
        run(flowengine_bin, "gen", s, "-o", p, *extra)
        outs.append(p.read_bytes())
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]
    assert outs[0] == outs[3]  # --seed N equals a session seed N


def test_session_from_stdin(flowengine_bin, tmp_path):
    s = write_session(tmp_path, ALL_KINDS)
    a, b = tmp_path / "a.pcap", tmp_path / "b.pcap"
    run(flowengine_bin, "gen", s, "-o", a)
    run(flowengine_bin, "gen", "-", "-o", b, input=s.read_text())
    assert a.read_bytes() == b.read_bytes()


def test_frame_layout_and_payload(all_kinds):
    recs = all_kinds["records"]
    assert len(recs) == sum(
        f["reps"] * f["packets"] for f in map(lambda d: flow_dict(**d), ALL_KINDS)
    )
    for _ts, fr in recs:
        assert fr[0:6] == bytes.fromhex("020000000002") and fr[6:12] == bytes.fromhex(
            "020000000001"
        )
        if fr[12:14] == b"\x08\x00":
            assert fr[14] == 0x45 and fr[15] == 0
            assert struct.unpack_from("!H", fr, 16)[0] == len(fr) - 14
            assert fr[20:22] == b"\x40\x00" and fr[22] == 64  # DF, TTL
            proto = fr[23]
        else:
            assert fr[12:14] == b"\x86\xdd"
            assert fr[14:18] == b"\x60\x00\x00\x00" and fr[21] == 64
            assert struct.unpack_from("!H", fr, 18)[0] == len(fr) - 54
            proto = fr[20]
        o = l4_offset(fr)
        hl = 20 if proto == 6 else 8
        payload = fr[o + hl :]
        if proto == 17:
            assert struct.unpack_from("!H", fr, o + 4)[0] == hl + len(payload)
        # The payload is the session's prefix truncated, then zeros.
        af = 4 if o == 34 else 6
        sport = icmp_id_seq(fr)[0] if proto in (1, 58) else ports(fr)[0]
        line = next(
            f
            for f in map(lambda d: flow_dict(**d), ALL_KINDS)
            if (f["af"], f["proto"]) == (af, proto)
            and (
                proto in (1, 58)
                or int(f["sport"].split("-")[0]) <= sport <= int(f["sport"].split("-")[1])
            )
        )
        assert int(line["size"].split("-")[0]) <= len(payload) <= int(line["size"].split("-")[1])
        prefix = b"" if line["payload"] == "-" else bytes.fromhex(line["payload"])
        n = min(len(prefix), len(payload))
        assert payload[:n] == prefix[:n]
        assert payload[n:] == bytes(len(payload) - n)


def test_ip_id_and_icmp_fields(all_kinds):
    by_instance = {}
    for ts, fr in all_kinds["records"]:
        if fr[12:14] == b"\x08\x00":
            key = (addrs(fr), fr[23], ports(fr) if fr[23] != 1 else icmp_id_seq(fr)[0])
            idx = len(by_instance.setdefault(key, []))
            by_instance[key].append(ts)
            assert struct.unpack_from("!H", fr, 18)[0] == idx  # IP ID = packet index
        o = l4_offset(fr)
        proto = fr[23] if o == 34 else fr[20]
        if proto in (1, 58):
            assert fr[o] == (8 if proto == 1 else 128) and fr[o + 1] == 0


def test_packet_times_exact(all_kinds):
    got = [ts for ts, _ in all_kinds["records"]]
    want = [due for due, _, _ in expected_schedule(ALL_KINDS)]
    assert got == want


def test_output_order_due_serial_index(flowengine_bin, tmp_path):
    # ICMP carries (serial mod 2^16, packet index) in (identifier, sequence), so
    # the whole order can be compared. Lines 0 and 2 collide on due times.
    flows = [
        dict(ICMP4, start=0, period=7, packets=50, reps=5, rep_period=13),
        dict(ICMP6, start=3, period=5, packets=40, reps=4, rep_period=0),
        dict(ICMP4, start=0, period=7, packets=30, reps=3, rep_period=7),
        dict(ICMP4, start=100, period=1, packets=100),
        dict(ICMP6, start=0, period=1_000_000, packets=3, reps=2, rep_period=1),
    ]
    recs = gen(flowengine_bin, tmp_path, flows)["records"]
    got = [(ts, *icmp_id_seq(fr)) for ts, fr in recs]
    want = [(due, serial % 65536, i % 65536) for due, serial, i in expected_schedule(flows)]
    assert got == want


def test_order_by_full_serial_beyond_2_32(flowengine_bin, tmp_path):
    # Line 1's serial is 2^32: its low 32 bits (0) are below those of line 0's
    # repetition 1 (serial 1) due at the same time, yet it must come after.
    flows = [
        dict(ICMP4, start=0, period=10, packets=2, reps=2**32, rep_period=5),
        dict(ICMP6, start=5, period=10, packets=2),
    ]
    res = gen(flowengine_bin, tmp_path, flows, extra=["--max-packets", "12"])
    got = [
        (ts, 4 if fr[12:14] == b"\x08\x00" else 6, *icmp_id_seq(fr)) for ts, fr in res["records"]
    ]
    small = [dict(flows[0], reps=20), flows[1]]
    want = []
    for due, serial, i in expected_schedule(small)[:12]:
        serial = serial if serial < 20 else 2**32  # line 1's real serial
        want.append((due, 4 if serial < 2**32 else 6, serial % 65536, i))
    assert got == want
    assert res["summary"]["status"] == "limited"
    assert any(int(r["serial"]) == 2**32 for r in res["flows"])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_output_order_random_sessions(flowengine_bin, tmp_path, seed):
    rnd = random.Random(seed)
    flows = []
    for _ in range(25):
        base = ICMP4 if rnd.random() < 0.5 else ICMP6
        flows.append(
            dict(
                base,
                start=rnd.randrange(0, 200),
                period=rnd.choice([1, 3, 7, 10, 50]),
                packets=rnd.randrange(1, 30),
                reps=rnd.randrange(1, 12),
                rep_period=rnd.choice([0, 1, 5, 20, 100]),
            )
        )
    recs = gen(flowengine_bin, tmp_path, flows, seed=seed)["records"]
    got = [(ts, *icmp_id_seq(fr)) for ts, fr in recs]
    want = [(due, serial % 65536, i % 65536) for due, serial, i in expected_schedule(flows)]
    assert got == want


@pytest.mark.parametrize("af", [4, 6])
def test_tcp_flags_and_sequence(flowengine_bin, tmp_path, af):
    from scapy.all import TCP, Ether

    addr = {} if af == 4 else dict(src="2001:db8::1/128", dst="2001:db8::2/128")
    flows = [
        dict(
            af=af,
            proto=6,
            packets=6,
            size="0-30",
            reps=3,
            rep_period=1,
            sport="50000-50002",
            sport_mode="increment",
            dport="80-80",
            **addr,
        ),
        dict(af=af, proto=6, packets=1, size="3-3", sport="50010-50010", dport="80-80", **addr),
    ]
    res = gen(flowengine_bin, tmp_path, flows)
    streams = {}
    for _ts, fr in res["records"]:
        t = Ether(fr)[TCP]
        streams.setdefault(t.sport, []).append(t)
    assert sorted(streams) == [50000, 50001, 50002, 50010]
    for sport, segs in streams.items():
        for t in segs:
            assert t.dataofs == 5 and t.window == 65535 and t.urgptr == 0
        if sport == 50010:
            (t,) = segs
            assert str(t.flags) == "FS" and t.ack == 0
            continue
        assert len(segs) == 6
        assert str(segs[0].flags) == "S" and segs[0].ack == 0
        assert str(segs[-1].flags) == "FA"
        assert all(str(t.flags) == "PA" for t in segs[1:-1])
        assert len({t.ack for t in segs[1:]}) == 1
        for prev, cur in zip(segs, segs[1:]):
            step = len(prev.payload) + (1 if "S" in str(prev.flags) else 0)
            assert cur.seq == (prev.seq + step) % 2**32


def test_checksums_scapy(all_kinds):
    from scapy.all import ICMP, IP, TCP, UDP, Ether, ICMPv6EchoRequest, IPv6, raw

    seen = set()
    for _, fr in all_kinds["records"]:
        pkt = Ether(fr)
        assert raw(pkt) == fr
        for layer, field in (
            (IP, "chksum"),
            (TCP, "chksum"),
            (UDP, "chksum"),
            (ICMP, "chksum"),
            (ICMPv6EchoRequest, "cksum"),
        ):
            if layer not in pkt:
                continue
            seen.add(layer.__name__)
            fresh = Ether(fr)
            delattr(fresh[layer], field)
            want = getattr(Ether(raw(fresh))[layer], field)
            assert getattr(pkt[layer], field) == want, (layer.__name__, fr.hex())
        if IPv6 in pkt:
            seen.add("IPv6")
    assert seen == {"IP", "IPv6", "TCP", "UDP", "ICMP", "ICMPv6EchoRequest"}


def test_checksums_tshark(all_kinds):
    tshark = shutil.which("tshark")
    if not tshark:
        pytest.skip("tshark not installed")
    base = [
        tshark,
        "-r",
        str(all_kinds["pcap"]),
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "tcp.check_checksum:TRUE",
        "-o",
        "udp.check_checksum:TRUE",
        # Payloads are ours: keep application dissectors off them.
        "-d",
        "udp.port==1-65535,data",
        "-d",
        "tcp.port==1-65535,data",
    ]
    fields = [
        "ip.checksum.status",
        "udp.checksum.status",
        "tcp.checksum.status",
        "icmp.checksum.status",
        "icmpv6.checksum.status",
        "_ws.malformed",
    ]
    r = subprocess.run(
        base + ["-T", "fields", "-E", "separator=|"] + [a for f in fields for a in ("-e", f)],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split("|") for line in r.stdout.splitlines()]
    assert len(rows) == len(all_kinds["records"])
    good = {f: 0 for f in fields[:5]}
    for row in rows:
        for f, v in zip(fields, row):
            if f == "_ws.malformed":
                assert v == "", row
            elif v:
                assert v == "1", (f, row)  # 1: good, 0: bad
                good[f] += 1
    assert all(good.values()), good
    assert sum(good[f] for f in fields[1:5]) == len(rows)
    bad = subprocess.run(
        base + ["-Y", "_ws.malformed || _ws.expert.severity >= error"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert bad.stdout.strip() == ""


def test_flow_log_matches_session_and_pcap(all_kinds):
    rows = all_kinds["flows"]
    assert list(rows[0]) == [
        "serial",
        "flow",
        "rep",
        "af",
        "proto",
        "src",
        "dst",
        "sport",
        "dport",
        "first_ns",
        "last_ns",
        "packets",
        "bytes",
    ]
    assert len(rows) == sum(flow_dict(**f)["reps"] for f in ALL_KINDS)
    assert sorted(int(r["serial"]) for r in rows) == list(range(len(rows)))
    offsets = [sum(flow_dict(**f)["reps"] for f in ALL_KINDS[:k]) for k in range(len(ALL_KINDS))]
    per_instance = {}
    for ts, fr in all_kinds["records"]:
        o = l4_offset(fr)
        proto = fr[23] if o == 34 else fr[20]
        sp, dp = (icmp_id_seq(fr)[0], 0) if proto in (1, 58) else ports(fr)
        key = (*addrs(fr), proto, sp, dp)
        per_instance.setdefault(key, []).append((ts, len(fr)))
    assert len(per_instance) == len(rows)
    for r in rows:
        k, rep = int(r["flow"]), int(r["rep"])
        f = flow_dict(**ALL_KINDS[k])
        assert int(r["serial"]) == offsets[k] + rep
        assert (int(r["af"]), int(r["proto"])) == (f["af"], f["proto"])
        assert int(r["packets"]) == f["packets"]
        first = f["start"] + rep * f["rep_period"]
        assert int(r["first_ns"]) == first
        assert int(r["last_ns"]) == first + (f["packets"] - 1) * f["period"]
        if f["proto"] in (1, 58):
            assert int(r["sport"]) == int(r["serial"]) % 65536 and r["dport"] == "0"
        sent = per_instance[(r["src"], r["dst"], f["proto"], int(r["sport"]), int(r["dport"]))]
        assert len(sent) == int(r["packets"])
        assert sum(n for _, n in sent) == int(r["bytes"])
        assert (sent[0][0], sent[-1][0]) == (int(r["first_ns"]), int(r["last_ns"]))


def test_summary(all_kinds):
    s = all_kinds["summary"]
    recs = all_kinds["records"]
    n_inst = sum(flow_dict(**f)["reps"] for f in ALL_KINDS)
    assert s["status"] == "completed" and s["exit_code"] == 0 and s["signal"] is None
    assert s["sink"] == "pcap" and s["seed"] == 42 and s["errors"] == 0
    assert s["packets"] == len(recs) and s["bytes"] == sum(len(fr) for _, fr in recs)
    assert s["flows_started"] == s["flows_finished"] == n_inst
    assert (s["first_ns"], s["last_ns"]) == (recs[0][0], recs[-1][0])
    assert s["wall_seconds"] >= 0 and s["mpps"] >= 0
    # Also on stderr, one line.
    assert json.loads(all_kinds["stderr"].strip().splitlines()[-1]) == s


def test_address_and_port_modes(flowengine_bin, tmp_path):
    flows = [
        dict(
            src="10.1.0.0/16",
            src_mode="random",
            dst="192.0.2.2/30",
            dst_mode="increment",
            sport="1000-1009",
            sport_mode="random",
            dport="5-7",
            dport_mode="increment",
            reps=50,
        ),
        dict(
            af=6,
            src="2001:db8:1:0:ffff:ffff:ffff:fffe/48",
            src_mode="increment",
            dst="2001:db8:2::/48",
            dst_mode="random",
            reps=4,
        ),
        dict(
            af=6,
            src="2001:db8:1:ffff:ffff:ffff:ffff:ffff/48",
            src_mode="increment",
            dst="::/0",
            dst_mode="random",
            reps=3,
        ),
        dict(
            af=4,
            src="10.0.0.255/24",
            src_mode="increment",
            dst="0.0.0.0/0",
            dst_mode="random",
            reps=3,
        ),
    ]
    res = gen(flowengine_bin, tmp_path, flows)
    rows = sorted(res["flows"], key=lambda r: int(r["serial"]))
    r0, r1, r2, r3 = rows[:50], rows[50:54], rows[54:57], rows[57:]
    srcs = [ipaddress.ip_address(r["src"]) for r in r0]
    assert all(a in ipaddress.ip_network("10.1.0.0/16") for a in srcs)
    assert len(set(srcs)) > 40
    assert [r["dst"] for r in r0[:6]] == [
        "192.0.2.2",
        "192.0.2.3",
        "192.0.2.0",
        "192.0.2.1",
        "192.0.2.2",
        "192.0.2.3",
    ]
    assert all(1000 <= int(r["sport"]) <= 1009 for r in r0)
    assert len({r["sport"] for r in r0}) == 10
    assert [int(r["dport"]) for r in r0[:7]] == [5, 6, 7, 5, 6, 7, 5]
    # IPv6 /48 increment: the carry crosses from the low 64 bits into the high ones.
    assert [r["src"] for r in r1] == [
        "2001:db8:1:0:ffff:ffff:ffff:fffe",
        "2001:db8:1:0:ffff:ffff:ffff:ffff",
        "2001:db8:1:1::",
        "2001:db8:1:1::1",
    ]
    dsts = [ipaddress.ip_address(r["dst"]) for r in r1]
    assert all(a in ipaddress.ip_network("2001:db8:2::/48") for a in dsts)
    assert len({int(a) >> 64 & 0xFFFF for a in dsts}) > 1  # host bits above bit 64 drawn too
    # Wrap inside the prefix: the carry never leaves the host bits.
    assert [r["src"] for r in r2] == [
        "2001:db8:1:ffff:ffff:ffff:ffff:ffff",
        "2001:db8:1::",
        "2001:db8:1::1",
    ]
    assert [r["src"] for r in r3] == ["10.0.0.255", "10.0.0.0", "10.0.0.1"]
    # The pcap carries what the flow log says.
    by_sport = {}
    for _, fr in res["records"]:
        by_sport.setdefault(addrs(fr), ports(fr))
    for r in rows:
        assert by_sport[(r["src"], r["dst"])] == (int(r["sport"]), int(r["dport"]))


def test_per_second_csv(flowengine_bin, tmp_path):
    flows = [
        dict(start=NS // 2, period=NS, packets=3, size="10-10"),
        dict(start=5 * NS + 200, packets=1, size="0-0"),
        dict(start=NS // 4, period=10, packets=2, reps=2, rep_period=NS),
    ]
    res = gen(flowengine_bin, tmp_path, flows)
    big, small = 14 + 20 + 8 + 10, 14 + 20 + 8
    want = [
        # second, packets, bytes, started, finished, active
        (0, 3, big + 2 * small, 2, 1, 1),
        (1, 3, big + 2 * small, 1, 1, 1),
        (2, 1, big, 0, 1, 0),
        (3, 0, 0, 0, 0, 0),
        (4, 0, 0, 0, 0, 0),
        (5, 1, small, 1, 1, 0),
    ]
    got = [
        tuple(
            int(r[k])
            for k in (
                "second",
                "packets",
                "bytes",
                "flows_started",
                "flows_finished",
                "active_flows",
            )
        )
        for r in res["stats"]
    ]
    assert got == want
    # --stats sends the same rows to a file and leaves stdout empty.
    out = tmp_path / "stats.csv"
    r = run(flowengine_bin, "gen", res["session"], "--null", "--stats", out)
    assert r.stdout == ""
    assert [tuple(int(v) for v in row.values()) for row in read_csv(out)] == want


def test_max_packets_limited(flowengine_bin, tmp_path):
    flows = [dict(packets=10, reps=3, rep_period=5, period=10)]
    res = gen(flowengine_bin, tmp_path, flows, extra=["--max-packets", "7"])
    s = res["summary"]
    assert s["status"] == "limited" and s["exit_code"] == 0 and s["packets"] == 7
    assert len(res["records"]) == 7
    # Instances still running are logged at exit with what they sent.
    assert sum(int(r["packets"]) for r in res["flows"]) == 7
    assert len(res["flows"]) == s["flows_started"]


BAD = [
    # (text replacing the session, line, expected fragment)
    ("ntg-session 2\n", 1, "unsupported version (got 2)"),
    ("seed 1\n", 1, "ntg-session 1"),
    ("", 1, "ntg-session 1"),
    ("ntg-session 1\nseed 1\nflw x=1\n", 3, "unknown directive"),
    ("ntg-session 1\nseed 1\nseed 2\n", 3, "seed: given twice"),
    ("ntg-session 1\nseed -1\n", 2, "seed: expected a non-negative integer (got -1)"),
]

BAD_FLOW = [
    (dict(period=0), "period: must be >= 1 (got 0)"),
    (dict(packets=0), "packets: must be >= 1 (got 0)"),
    (dict(reps=0), "reps: must be >= 1 (got 0)"),
    (dict(start="x"), "start: expected a non-negative integer (got x)"),
    (dict(sport="70000-70001"), "sport: ports must be 0..65535 (got 70000-70001)"),
    (dict(dport="90-80"), "dport: LO must not exceed HI (got 90-80)"),
    (dict(dport="80"), "dport: expected LO-HI (got 80)"),
    (dict(size="10-5"), "size: LO must not exceed HI (got 10-5)"),
    (dict(size="0-65494"), "size: at most 65493 payload bytes"),
    (
        dict(af=6, proto=17, src="2001:db8::1/128", dst="2001:db8::2/128", size="0-65474"),
        "size: at most 65473",
    ),
    (dict(af=5), "af: must be 4 or 6 (got 5)"),
    (dict(proto=2), "proto: must be 6, 17, 1 or 58 (got 2)"),
    (dict(ICMP6, af=4, src="10.0.0.1/32", dst="10.0.0.2/32"), "proto: 58 (ICMPv6) needs af=6"),
    (dict(ICMP4, af=6, src="2001:db8::1/128", dst="2001:db8::2/128"), "proto: 1 (ICMP) needs af=4"),
    (dict(src="2001:db8::1/64"), "src: not an IPv4 address"),
    (dict(af=6, dst="10.0.0.1/32", src="2001:db8::1/128"), "dst: not an IPv6 address"),
    (dict(dst="10.0.0.1/33"), "dst: prefix must be 0..32 (got 10.0.0.1/33)"),
    (dict(af=6, src="2001:db8::1/129", dst="2001:db8::2/128"), "src: prefix must be 0..128"),
    (dict(src="10.0.0.1"), "src: expected ADDRESS/PREFIX (got 10.0.0.1)"),
    (dict(src_mode="sequential"), "src_mode: must be fixed, random or increment (got sequential)"),
    (dict(dport_mode="Fixed"), "dport_mode: must be fixed, random or increment (got Fixed)"),
    (dict(smac="02:00:00:00:00"), "smac: expected xx:xx:xx:xx:xx:xx (got 02:00:00:00:00)"),
    (dict(payload="abc"), "payload: expected - or an even number of hex digits (got abc)"),
    (dict(payload="ABCD"), "payload: expected lowercase hex (got ABCD)"),
    (dict(start=4294967296 * NS), "must be due before 2^32 s"),
    (dict(reps=2, rep_period=5 * 10**18), "must be due before 2^32 s"),
    (dict(packets=10, period=10**19), "must be due before 2^32 s"),
]


def _check_bad(flowengine_bin, tmp_path, text, line, fragment):
    p = tmp_path / "bad.ntg"
    p.write_text(text)
    pcap = tmp_path / "bad.pcap"
    r = run(flowengine_bin, "gen", p, "-o", pcap, check=False)
    assert r.returncode == 2, r.stderr
    msg = r.stderr.strip().splitlines()[0]
    assert msg.startswith(f"{p}:{line}: "), msg
    assert fragment in msg, msg
    assert not pcap.exists()


@pytest.mark.parametrize("text,line,fragment", BAD)
def test_bad_session_file(flowengine_bin, tmp_path, text, line, fragment):
    _check_bad(flowengine_bin, tmp_path, text, line, fragment)


@pytest.mark.parametrize("kw,fragment", BAD_FLOW, ids=[f for _, f in BAD_FLOW])
def test_bad_flow_line(flowengine_bin, tmp_path, kw, fragment):
    text = session_text([{}, {}]).replace("\nflow", "\n# a comment\n\nflow", 1)
    text += flow(**kw) + "\n"  # line 7: header, seed, comment, blank, flow, flow, bad
    _check_bad(flowengine_bin, tmp_path, text, 7, fragment)


def test_bad_flow_keys(flowengine_bin, tmp_path):
    good = flow()
    cases = [
        (good.replace(" dport=9-9", ""), "dport: missing"),
        (good + " foo=1", "foo: unknown key (got foo=1)"),
        (good + " period=5", "period: given twice"),
        (good + " junk", "junk: expected key=value"),
    ]
    for text, fragment in cases:
        _check_bad(flowengine_bin, tmp_path, f"ntg-session 1\n{text}\n", 2, fragment)


def _start_long_run(flowengine_bin, tmp_path, sink_args):
    s = write_session(
        tmp_path,
        [
            dict(packets=10**9, period=1, size="22-22"),
            dict(
                packets=10**6,
                period=1000,
                reps=1000,
                rep_period=1,
                sport="1000-2000",
                sport_mode="increment",
            ),
        ],
    )
    summ, flows_csv = tmp_path / "sum.json", tmp_path / "flows.csv"
    proc = subprocess.Popen(
        [
            str(flowengine_bin),
            "gen",
            str(s),
            *map(str, sink_args),
            "--summary",
            str(summ),
            "--flows",
            str(flows_csv),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)
    return proc, summ, flows_csv


@pytest.mark.parametrize(
    "sig,code,name", [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_signal_stops_cleanly_null(flowengine_bin, tmp_path, sig, code, name):
    proc, summ, flows_csv = _start_long_run(flowengine_bin, tmp_path, ["--null"])
    assert proc.poll() is None, "finished before the signal"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    s = json.loads(summ.read_text())
    assert s["status"] == "interrupted" and s["exit_code"] == code and s["signal"] == name
    assert 0 < s["packets"] < 10**9 + 10**9
    rows = read_csv(flows_csv)
    assert sum(int(r["packets"]) for r in rows) == s["packets"]
    assert len(rows) == s["flows_started"]
    stats = list(csv.DictReader(out.splitlines()))
    assert sum(int(r["packets"]) for r in stats) == s["packets"]


def test_sigint_leaves_valid_pcap(flowengine_bin, tmp_path):
    outdir = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp_path
    pcap = outdir / f"flowengine-test-{os.getpid()}.pcap"
    try:
        proc, summ, _ = _start_long_run(flowengine_bin, tmp_path, ["-o", pcap])
        assert proc.poll() is None, "finished before the signal"
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        assert proc.returncode == 130
        s = json.loads(summ.read_text())
        assert s["status"] == "interrupted" and s["sink"] == "pcap"
        assert walk_pcap(pcap) == s["packets"] > 0
    finally:
        pcap.unlink(missing_ok=True)


def test_unwritable_output_is_runtime_error(flowengine_bin, tmp_path):
    s = write_session(tmp_path, [{}])
    r = run(flowengine_bin, "gen", s, "-o", tmp_path / "no" / "such" / "dir.pcap", check=False)
    assert r.returncode == 1
    assert json.loads(r.stderr.strip().splitlines()[-1])["status"] == "error"


@pytest.mark.parametrize("planner", ["exact", "stochastic"])
def test_more_live_flows_than_memory_is_refused_before_sending(flowengine_bin, tmp_path, planner):
    # 2^40 instances alive at once: no machine of ours holds 2^40 x 52 bytes
    s = write_session(tmp_path, [flow(reps=2**40, rep_period=0, packets=10, period=1000)])
    pcap = tmp_path / "never.pcap"
    r = run(flowengine_bin, "gen", s, "-o", pcap, "--planner", planner, check=False)
    assert r.returncode == 2
    assert "up to 1099511627776 flow instances are alive at once" in r.stderr
    assert "lower reps or packets" in r.stderr
    assert not pcap.exists()
    # the same number of instances one after another is fine: one is alive at a time
    s2 = write_session(
        tmp_path, [flow(reps=2**40, rep_period=10_000, packets=10, period=1000)], name="seq.ntg"
    )
    ok = run(flowengine_bin, "gen", s2, "--null", "--max-packets", "1000", "--planner", planner)
    assert ok.returncode == 0
