"""Evasion variants (idsrules/evasion): every class deterministic per seed, each variant's
packets what its name says, the offline rendering a capture Wireshark reads as the session.

Live labels: tests/test_ids_hostlabel.py; the run, the matrix and the gate: tests/test_ids_evasion.py.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from idsrules.evasion import CLASSES, UnknownClass, parse_classes, variants
from idsrules.evasion.common import junk
from idsrules.evasion.model import (
    MSS,
    Conn,
    Seg,
    client_packets,
    plain_plan,
    plan_from_dict,
    plan_to_dict,
    render,
    wire_end,
)
from idsrules.evasion.pairs import ORDERS, RELATIONS
from ntgcore import packets as P

REQUEST = b"GET /cgi-bin/attack.cgi?cmd=cat%20/etc/passwd HTTP/1.1\r\nHost: h\r\n\r\n"
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
TCP = plain_plan("tcp", [(True, REQUEST), (False, ANSWER), (True, b"x" * 3000)], 5)
UDP = plain_plan("udp", [(True, b"q" * 100 + b"attack-datagram"), (False, b"a")], 5)


def all_variants(plan):
    return variants(plan, list(CLASSES), 11)


def test_class_names_are_checked_and_all_means_every_class():
    assert parse_classes("all") == list(CLASSES)
    assert parse_classes("tcp-seg, ip4-frag") == ["ip4-frag", "tcp-seg"]  # CLASSES' order
    with pytest.raises(UnknownClass, match="unknown evasion class 'tcp-sge'.*tcp-seg"):
        parse_classes("tcp-sge")
    with pytest.raises(UnknownClass, match="no evasion class"):
        parse_classes(" , ")


def test_the_same_seed_gives_the_same_variants_and_another_seed_other_junk():
    a, b, c = all_variants(TCP), all_variants(TCP), variants(TCP, list(CLASSES), 12)
    assert a == b and [v.variant for v in a] == [v.variant for v in c]
    assert a != c  # the junk and the shuffles come from the seed
    names = [v.variant for v in a]
    assert len(names) == len(set(names)) and all(v.cls in CLASSES for v in a)


def test_udp_sessions_get_only_the_ip_classes():
    assert {v.cls for v in all_variants(UDP)} == {"ip4-frag", "ip6-frag", "ip4-pairs", "ip6-pairs"}


ALLEN = {  # R = [rs, re), J = [js, je): the relation of J to R, by its endpoints
    "equals": lambda rs, re, js, je: rs == js and re == je,
    "starts": lambda rs, re, js, je: rs == js and je < re,
    "started-by": lambda rs, re, js, je: rs == js and re < je,
    "finishes": lambda rs, re, js, je: re == je and rs < js,
    "finished-by": lambda rs, re, js, je: re == je and js < rs,
    "during": lambda rs, re, js, je: rs < js and je < re,
    "contains": lambda rs, re, js, je: js < rs and re < je,
    "overlaps": lambda rs, re, js, je: rs < js < re < je,
    "overlapped-by": lambda rs, re, js, je: js < rs < je < re,
}


def test_every_variant_keeps_the_messages_and_survives_json():
    for v in all_variants(TCP) + all_variants(UDP):
        base = TCP if v.proto == "tcp" else UDP
        assert v.client_stream() == base.client_stream() or v.app, v.variant
        assert plan_from_dict(plan_to_dict(v)) == v, v.variant


@pytest.mark.parametrize("relation", list(RELATIONS))
def test_a_pair_places_real_and_junk_by_its_relation_and_junk_only_where_they_share(relation):
    v = by_name(TCP)
    for order in ORDERS:
        segs = segs_of(v[f"tcp-pair-{relation}-{order}"])  # the request: one chunk
        *uncovered, first, second, head = segs
        assert head.off == 0 and head.data == REQUEST[: len(head.data)]  # held back, sent last
        real, bad = (first, second) if order == "real-first" else (second, first)
        assert real.data == REQUEST[real.off : real.off + len(real.data)]
        assert all(s.data == REQUEST[s.off : s.off + len(s.data)] for s in uncovered)
        rs, re_, js, je = real.off, real.off + len(real.data), bad.off, bad.off + len(bad.data)
        assert ALLEN[relation](rs, re_, js, je), (relation, rs, re_, js, je)
        # the junk differs from the real bytes exactly where the two share positions
        lo, hi = max(real.off, bad.off), min(real.off + len(real.data), bad.off + len(bad.data))
        differ = [bad.off + i for i, b in enumerate(bad.data) if b != REQUEST[bad.off + i]]
        assert differ == list(range(lo, hi))
        every = {s.off + i for s in segs for i in range(len(s.data))}
        assert every == set(range(len(REQUEST)))  # nothing left out, nothing beyond


def covered(segs, honest) -> bytes:
    """The stream the segments that pass `honest` put together (later bytes do not overwrite)."""
    out: dict[int, int] = {}
    for s in segs:
        if honest(s):
            for i, b in enumerate(s.data):
                out.setdefault(s.off + i, b)
    return bytes(out[i] for i in sorted(out))


def segs_of(v, step=0):
    return [s for s in v.steps if s.from_client][step].segs


def by_name(plan):
    return {v.variant: v for v in all_variants(plan)}


def test_segmentation_cuts_and_orders_as_named():
    v = by_name(TCP)
    one = segs_of(v["tcp-seg-1byte"])
    assert {len(s.data) for s in one} == {1} and len(one) == len(REQUEST)
    rev = segs_of(v["tcp-seg-reverse"])
    assert [s.off for s in rev] == sorted((s.off for s in rev), reverse=True)
    rnd = segs_of(v["tcp-seg-random"])
    assert sorted(s.off for s in rnd) == [s.off for s in segs_of(v["tcp-seg-reverse"])][::-1]
    assert [s.off for s in rnd] != sorted(s.off for s in rnd)
    for name in ("tcp-seg-1byte", "tcp-seg-reverse", "tcp-seg-random"):
        assert covered(segs_of(v[name]), lambda s: True) == REQUEST


def test_overlaps_put_junk_where_the_name_says():
    v = by_name(TCP)
    old, new = segs_of(v["tcp-overlap-old"]), segs_of(v["tcp-overlap-new"])
    # the same offsets twice, real first (old) or junk first (new); the head last
    assert old[0].off == old[1].off and old[0].data == REQUEST[8:] and old[1].data != REQUEST[8:]
    assert new[1].data == REQUEST[8:] and new[0].data != REQUEST[8:] and new[-1].off == 0
    assert all(a != b for a, b in zip(new[0].data, REQUEST[8:]))  # junk differs everywhere
    covers = segs_of(v["tcp-overlap-covers"])
    assert covers[0].off == 9 and len(covers[0].data) == len(REQUEST) - 10
    rt = segs_of(v["tcp-overlap-retransmit"])
    assert rt[0] == Seg(0, REQUEST) and rt[1].off == 0 and rt[1].data != REQUEST


def test_insertions_are_packets_a_host_drops_ahead_of_the_real_ones():
    v = by_name(TCP)
    first = {name: segs_of(v[name])[0] for name in v if name.startswith("ins-")}
    assert first["ins-bad-checksum"].bad_checksum and first["ins-ttl"].hops == 1
    assert not first["ins-no-ack"].flags & P.ACK
    assert first["ins-outside-window"].seq_shift >= 1 << 24
    assert first["ins-rst-outside-window"].flags & P.RST
    assert first["ins-syn-established"].flags == P.SYN
    for name in first:  # and the real segment right after
        assert segs_of(v[name])[1] == Seg(0, REQUEST), name
    honest = covered(segs_of(v["ins-ttl"]), lambda s: s.hops > 1)
    assert honest == REQUEST
    assert covered(segs_of(v["ins-ttl"]), lambda s: True) != REQUEST  # what a naive IDS keeps


def test_urgent_data_one_byte_a_message_moves_the_rest_up():
    v = by_name(TCP)["urgent-byte"]
    for st in v.steps:
        if not st.from_client:
            continue
        marked = [s for s in st.segs if s.urgent]
        assert len(marked) == 1  # one mark a message: Linux holds one at a time
        cut = b"".join(
            s.data[: s.urgent - 1] + s.data[s.urgent :] if s.urgent else s.data for s in st.segs
        )
        assert cut == st.data
        mark = marked[0]  # the junk byte sits at the message's middle
        assert mark.off - st.segs[0].off + mark.urgent - 1 == len(st.data) // 2
    segs = [s for st in v.steps if st.from_client for s in st.segs]
    messages = sum(1 for st in v.steps if st.from_client)
    assert wire_end(segs) == len(v.client_stream()) + messages
    assert max(len(s.data) for s in segs) <= MSS


def test_paws_turns_timestamps_on_and_ages_the_junk():
    v = by_name(TCP)["paws-old-timestamp"]
    assert v.timestamps and segs_of(v)[0].ts_back > 0 and segs_of(v)[1].ts_back == 0


def l4_of(packets: list[bytes], v6: bool) -> bytes:
    """The transport bytes of IP fragments, put back together by offset (first copy wins)."""
    got: dict[int, int] = {}
    for p in packets:
        if v6:
            nxt, off = p[6], 40
            while nxt in (0, 43, 60):
                nxt, off = p[off], off + 8 * (p[off + 1] + 1)
            (frag,) = struct.unpack_from("!H", p, off + 2)
            payload, start = p[off + 8 :], frag & ~7
        else:
            (frag,) = struct.unpack_from("!H", p, 6)
            payload, start = p[20:], (frag & 0x1FFF) * 8
        for i, b in enumerate(payload):
            got.setdefault(start + i, b)
    assert sorted(got) == list(range(len(got)))
    return bytes(got[i] for i in range(len(got)))


@pytest.mark.parametrize("family", [4, 6])
def test_fragments_cover_the_segment_and_keep_its_checksum(family):
    addrs = ("198.19.0.1", "198.18.0.1") if family == 4 else ("2001:db8:1::1", "2001:db8::1")
    conn = Conn(P.addr(addrs[0]), P.addr(addrs[1]), 40000, 80, cisn=7, ack=9)
    whole = client_packets(Seg(0, REQUEST), conn, "tcp")[0]
    l4 = whole[20:] if family == 4 else whole[40:]
    for v in all_variants(TCP):
        if v.cls != f"ip{family}-frag" or v.variant.endswith(("atomic", "ext-chain")):
            continue
        packets = client_packets(segs_of(v)[0], conn, "tcp")
        assert len(packets) > 1, v.variant
        if v.variant.endswith("overlap-new"):
            # the junk came first: reassembled first-wins it is other bytes with the same sum
            other = l4_of(packets, family == 6)
            assert other != l4 and P.checksum(other) == P.checksum(l4)
        else:
            assert l4_of(packets, family == 6) == l4, v.variant


def test_junk_differs_everywhere_and_can_keep_the_sum():
    real = bytes(range(256)) * 3
    for seed in range(20):
        j = junk(real[seed:], seed, same_sum=True)
        assert all(a != b for a, b in zip(j, real[seed:]))
        assert P.checksum(j) == P.checksum(real[seed:])
    zeros = junk(bytes(9), 3, same_sum=True)  # sum 0: letters reach it only as 0xFFFF
    assert 0 not in zeros and P.checksum(zeros) % 0xFFFF == P.checksum(bytes(9)) % 0xFFFF
    assert junk(b"abc", 1) == junk(b"abc", 1) != junk(b"abc", 2)


def test_offline_rendering_is_one_session_wireshark_reads_whole(tmp_path: Path):
    pcap = tmp_path / "v.pcap"
    plans = [TCP, *all_variants(TCP)]
    clients = []
    with open(pcap, "wb") as f:
        w = P.PcapWriter(f)
        t = 1_700_000_000_000_000_000
        for k, v in enumerate(plans):
            six = v.family == 6
            clients.append(f"2001:db8:1::{k + 1:x}" if six else f"198.19.0.{k + 1}")
            server = "2001:db8::1" if six else "198.18.0.1"
            for _fc, frame in render(v, clients[-1], server, 40000, 80, k + 1):
                w.write(t, frame)
                t += 1000
    fields = ["tcp.stream", "ip.src", "ipv6.src", "tcp.checksum.status", "ip.checksum.status"]
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-o", "tcp.check_checksum:TRUE"]
        + ["-o", "ip.check_checksum:TRUE", "-T", "fields"]
        + [a for f in fields for a in ("-e", f)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    streams: dict[str, set[str]] = {}
    for r in rows:
        if r[0]:
            streams.setdefault(r[1] or r[2], set()).add(r[0])
    for v, client in zip(plans, clients):
        # one conversation each; a SYN inside the session starts another in tshark's view
        want = 1 + 4 if v.variant == "ins-syn-established" else 1
        assert len(streams[client]) == want, v.variant
    bad = {r[1] for r in rows if r[3] == "0"}
    assert bad == {clients[[v.variant for v in plans].index("ins-bad-checksum")]}
    assert sum(r[3] == "0" for r in rows) == 4  # the request and the 3 MSS chunks of 3000 bytes
    assert all(r[4] != "0" for r in rows)  # every IPv4 header checksum right
