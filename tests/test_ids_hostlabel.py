"""Live host labelling (testbed.ids.hostlabel): hand-built wire plans sent through the
client-router-server namespaces; the server application's reads decide `reached`. Real kernel,
real tshark and tcpdump; one lab per address family for the plans, one per clean-up check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from idsrules.evasion.model import Frag, Seg, Step, WirePlan, plain_plan
from ntgcore import packets as P
from ntgcore.errors import BadInput
from testbed.ids.hostlabel import CLIENT, SERVER, label_live

REPO = Path(__file__).resolve().parent.parent
REQ = b"GET /private/attack.cgi?cmd=id HTTP/1.1\r\nHost: www.example.test\r\n\r\n"
RESP = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
MORE = b"POST /second HTTP/1.1\r\nHost: www.example.test\r\nContent-Length: 0\r\n\r\n"
JUNK = b"Z" * 24  # other bytes at the same offset as the request's first 24
TCP_HDR = 20  # no options: the plans here offer no timestamps
BIG = bytes(range(256)) * 12  # an answer over two MSS
UDP_MSG = b"udp attack message: 0123456789abcdefghijklmnop"


def tcp_plan(name: str, segs: tuple[Seg, ...], data: bytes = REQ) -> WirePlan:
    return WirePlan(name, name, 0, "tcp", (Step(True, data, segs),))


def pieces(total: int, first: int, size: int = 8) -> list[Frag]:
    """Fragments of a `total`-byte IP payload: `first` bytes, then `size`-byte pieces."""
    out = [Frag(0, first)]
    out += [Frag(o, min(size, total - o)) for o in range(first, total, size)]
    return out


def plans(version: int) -> list[tuple[WirePlan, int]]:
    seg_len = TCP_HDR + len(REQ)
    items = [
        (plain_plan("tcp", [(True, REQ), (False, RESP), (True, MORE)]), 8080),
        (replace(plain_plan("tcp", [(True, REQ), (False, BIG)]), variant="big-answer"), 8080),
        (tcp_plan("bad-checksum-junk-first", (Seg(0, JUNK, bad_checksum=True), Seg(0, REQ))), 8080),
        (tcp_plan("ttl-junk-first", (Seg(0, JUNK, hops=1), Seg(0, REQ))), 8080),
        (tcp_plan("ttl-real-first", (Seg(0, REQ, hops=1), Seg(0, JUNK + REQ[len(JUNK) :]))), 8080),
        (
            WirePlan(
                "udp-frags",
                "udp-frags",
                0,
                "udp",
                (
                    Step(
                        True,
                        UDP_MSG,
                        (Seg(0, UDP_MSG, frags=tuple(pieces(8 + len(UDP_MSG), 16)[::-1])),),
                    ),
                    Step(False, b"answer"),
                ),
            ),
            5353,
        ),
    ]
    if version == 4:  # Linux takes tiny IPv4 fragments: 8 bytes, the last first
        old = 100_000  # ms: a TSval this much older than the connection's is refused (PAWS)
        items += [
            (
                replace(
                    tcp_plan("paws-junk-first", (Seg(0, JUNK, ts_back=old), Seg(0, REQ))),
                    timestamps=True,
                ),
                8080,
            ),
            (
                replace(
                    tcp_plan(
                        "paws-real-first",
                        (Seg(0, REQ, ts_back=old), Seg(0, JUNK + REQ[len(JUNK) :])),
                    ),
                    timestamps=True,
                ),
                8080,
            ),
            (tcp_plan("urgent-10", (Seg(0, REQ, urgent=10),)), 8080),
        ]
        items.append(
            (
                tcp_plan(
                    "ip4-frag8-reverse", (Seg(0, REQ, frags=tuple(pieces(seg_len, 8)[::-1])),)
                ),
                8080,
            )
        )
    else:
        # IPv6 (RFC 8200, 4.5): the first fragment must hold the whole header chain, the TCP
        # header included; Linux drops a smaller one (ipv6frag_thdr_truncated)
        items += [
            (
                tcp_plan(
                    "ip6-frag-reverse", (Seg(0, REQ, frags=tuple(pieces(seg_len, 24)[::-1])),)
                ),
                8080,
            ),
            (
                tcp_plan("ip6-frag8-tiny-first", (Seg(0, REQ, frags=tuple(pieces(seg_len, 8))),)),
                8080,
            ),
            (
                tcp_plan(
                    "ip6-atomic-ext",
                    (Seg(0, REQ, atomic=True, ext=(P.IP6_HOP_BY_HOP, P.IP6_DEST_OPTIONS)),),
                ),
                8080,
            ),
        ]
    return items


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def pids_in(names: list[str]) -> list[psutil.Process]:
    procs = []
    for ns in names:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        procs += [psutil.Process(int(p)) for p in out.stdout.split() if psutil.pid_exists(int(p))]
    return procs


def gone(procs: list[psutil.Process]) -> bool:
    return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)


class Lab:
    def __init__(self, version: int, out: Path) -> None:
        self.items = plans(version)
        self.names: list[str] = []
        self.procs: list[psutil.Process] = []

        def up(names: list[str]) -> None:
            self.names = names
            self.procs = pids_in(names)

        self.result = label_live(self.items, out, ip_version=version, server_capture=True, on_up=up)
        self.by_name = {o.variant: o for o in self.result.outcomes}


@pytest.fixture(scope="module")
def lab4(root, tmp_path_factory) -> Lab:
    return Lab(4, tmp_path_factory.mktemp("hostlabel4"))


@pytest.fixture(scope="module")
def lab6(root, tmp_path_factory) -> Lab:
    return Lab(6, tmp_path_factory.mktemp("hostlabel6"))


def tshark(pcap: Path, *fields: str, where: str = "", checks: bool = False) -> list[list[str]]:
    argv = ["tshark", "-r", str(pcap), "-T", "fields", "-E", "separator=|"]
    if checks:
        for proto in ("ip", "tcp", "udp"):
            argv += ["-o", f"{proto}.check_checksum:TRUE"]
    if where:
        argv += ["-Y", where]
    for f in fields:
        argv += ["-e", f]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    return [line.split("|") for line in out.splitlines()]


def test_plain_dialogue_reaches_the_host_and_is_captured_both_ways(lab4):
    plain = lab4.by_name["plain"]
    assert plain.reached and plain.received == REQ + MORE
    assert "ended: fin" in plain.detail
    rows = tshark(
        lab4.result.capture, "ip.src", "tcp.len", where=f"tcp.port == {plain.cport}", checks=True
    )
    assert {r[0] for r in rows} == {CLIENT[4], SERVER[4]}
    assert [CLIENT[4], str(len(REQ))] in rows and [SERVER[4], str(len(RESP))] in rows
    # no offload on the way: the host's 3072-byte answer in MSS-sized segments, all acknowledged
    big = lab4.by_name["big-answer"]
    rows = tshark(
        lab4.result.capture,
        "tcp.len",
        where=f"tcp.srcport == {big.cport} || (tcp.dstport == {big.cport} && tcp.len > 0)",
    )
    sizes = [int(r[0]) for r in rows]
    assert big.reached and "ended: fin" in big.detail
    assert sum(sizes) == len(REQ) + len(BIG) and max(sizes) <= 1460
    # the only bad checksum in the capture is the one the plan asked for
    bad = tshark(
        lab4.result.capture,
        "tcp.srcport",
        "tcp.len",
        where="tcp.checksum.status == 0 || ip.checksum.status == 0 || udp.checksum.status == 0",
        checks=True,
    )
    assert bad == [[str(lab4.by_name["bad-checksum-junk-first"].cport), str(len(JUNK))]]


def test_a_bad_checksum_segment_does_not_reach_the_host(lab4, lab6):
    for lab in (lab4, lab6):
        got = lab.by_name["bad-checksum-junk-first"]
        assert got.reached and got.received == REQ and JUNK not in got.received


def test_a_segment_with_one_hop_dies_at_the_router(lab4, lab6):
    for lab in (lab4, lab6):
        junk_first, real_first = lab.by_name["ttl-junk-first"], lab.by_name["ttl-real-first"]
        assert junk_first.reached and junk_first.received == REQ
        assert not real_first.reached
        assert real_first.received == JUNK + REQ[len(JUNK) :]
    # the router answered the expired segments: time exceeded, to the client
    rows = tshark(lab4.result.capture, "ip.src", where="icmp.type == 11")
    assert len(rows) == 2 and all(r[0].split(",")[0] == "198.19.250.1" for r in rows)


def test_timestamps_an_old_tsval_is_refused_by_the_host(lab4):
    assert lab4.by_name["paws-junk-first"].reached
    assert lab4.by_name["paws-junk-first"].received == REQ
    real_first = lab4.by_name["paws-real-first"]
    assert not real_first.reached and real_first.received == JUNK + REQ[len(JUNK) :]
    # the SYN offered timestamps and the host took them: every client segment carries one
    rows = tshark(
        lab4.result.capture,
        "tcp.options.timestamp.tsval",
        where=f"tcp.port == {real_first.cport} && ip.src == {CLIENT[4]}",
    )
    assert rows and all(r[0] for r in rows)


def test_urgent_data_leaves_the_stream_as_linux_does_by_default(lab4):
    got = lab4.by_name["urgent-10"]
    # the urgent pointer points past the urgent byte (BSD, Linux's default): byte 9 goes out
    assert not got.reached and got.received == REQ[:9] + REQ[10:]


def test_ipv4_fragments_cross_the_router_as_sent_and_reach_the_host(lab4):
    got = lab4.by_name["ip4-frag8-reverse"]
    assert got.reached and got.received == REQ
    fields = ("ip.id", "ip.frag_offset", "ip.flags.mf")
    where = f"ip.src == {CLIENT[4]} && (ip.flags.mf == 1 || ip.frag_offset > 0)"
    sent = tshark(lab4.result.capture, *fields, where=where)
    arrived = tshark(lab4.result.server_capture, *fields, where=where)
    frags = [len(seg.frags) for plan, _ in lab4.items for st in plan.steps for seg in st.segs]
    assert len(sent) == sum(frags) == 6 + 11  # the UDP datagram's, the TCP segment's
    assert arrived == sent  # not reassembled on the way: the same fragments, the same order
    tcp = [int(r[1]) for r in sent if r[0] == sent[-1][0]]
    assert tcp == sorted(tcp, reverse=True) and len(tcp) == 11  # the last first, as sent


def test_ipv6_fragments_atomic_fragment_and_extension_headers(lab6):
    assert lab6.by_name["ip6-frag-reverse"].reached
    assert lab6.by_name["ip6-frag-reverse"].received == REQ
    assert lab6.by_name["ip6-atomic-ext"].reached
    tiny = lab6.by_name["ip6-frag8-tiny-first"]
    assert not tiny.reached and tiny.received == b""
    where = f"ipv6.src == {CLIENT[6]} && ipv6.fraghdr"
    fields = ("ipv6.fraghdr.ident", "ipv6.fraghdr.offset", "ipv6.fraghdr.more")
    sent = tshark(lab6.result.capture, *fields, where=where)
    assert len(sent) > 10
    assert tshark(lab6.result.server_capture, *fields, where=where) == sent
    chain = tshark(
        lab6.result.capture,
        "ipv6.nxt",
        where=f"tcp.port == {lab6.by_name['ip6-atomic-ext'].cport} && tcp.len > 0",
    )
    assert chain and chain[0][0].split(",")[0] == "0"  # hop-by-hop first


def test_fragmented_udp_datagrams_reach_the_host(lab4, lab6):
    for lab in (lab4, lab6):
        got = lab.by_name["udp-frags"]
        assert got.reached and got.datagrams == [UDP_MSG]
        answer = tshark(lab.result.capture, "udp.srcport", where="udp.srcport == 5353")
        assert answer  # the host answered, and the answer is in the capture


def test_nothing_is_left_after_a_run(lab4, lab6):
    for lab in (lab4, lab6):
        assert len(lab.names) == 3 and len(lab.procs) >= 1  # the server application ran
        assert not set(lab.names) & namespaces()
        assert gone(lab.procs)


def test_nothing_is_left_after_an_exception_mid_run(root, tmp_path):
    seen: dict[str, list] = {}

    def fail(names: list[str]) -> None:
        seen["names"], seen["procs"] = names, pids_in(names)
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        label_live([(plain_plan("tcp", [(True, REQ)]), 80)], tmp_path, on_up=fail)
    assert seen["procs"] and not set(seen["names"]) & namespaces()
    assert gone(seen["procs"])


def lab_up(proc: subprocess.Popen, flag: Path) -> tuple[list[str], list[psutil.Process]]:
    """The namespaces a `label_live` in `proc` wrote to `flag` once up, and its two helpers (the
    server and the raw client) found in them."""
    deadline = time.monotonic() + 20
    while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert flag.exists(), proc.stderr.read().decode() if proc.stderr else ""
    names = json.loads(flag.read_text())
    procs: list[psutil.Process] = []
    while len(procs) < 2 and time.monotonic() < deadline:
        procs = pids_in(names)
        time.sleep(0.02)
    return names, procs


def test_nothing_is_left_after_sigterm(root, tmp_path):
    flag = tmp_path / "up.json"
    script = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        from idsrules.evasion.model import Step, WirePlan
        from testbed.ids.hostlabel import label_live
        steps = (Step(True, b"x"),) + tuple(Step(False, b"never") for _ in range(60))
        label_live([(WirePlan("slow", "slow", 0, "udp", steps), 9)], Path({str(tmp_path)!r}),
                   on_up=lambda names: Path({str(flag)!r}).write_text(json.dumps(names)))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
    try:
        names, procs = lab_up(proc, flag)
        assert len(procs) >= 2
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert not set(names) & namespaces()
    assert gone(procs)


def test_testbed_cleanup_removes_the_lab_of_a_killed_run(root, tmp_path):
    """A caller that records `on_places` in its run mark: after a kill -9 the helpers die with it
    (parent-death signal) and `testbed cleanup` deletes the namespaces."""
    flag, marks = tmp_path / "up.json", tmp_path / "marks"
    script = textwrap.dedent(
        f"""
        import json
        from pathlib import Path
        from idsrules.evasion.model import Step, WirePlan
        from ntgcore.proc import watch_spawns
        from testbed.cleanup import RunMark
        from testbed.ids.hostlabel import label_live
        out = Path({str(tmp_path / "run")!r})
        mark = RunMark(out, "netns", []).write()
        def places(names):
            mark.doc["locations"] = names
            mark.write()
        steps = (Step(True, b"x"),) + tuple(Step(False, b"never") for _ in range(60))
        with watch_spawns(mark.child):
            label_live([(WirePlan("slow", "slow", 0, "udp", steps), 9)], out, on_places=places,
                       on_up=lambda names: Path({str(flag)!r}).write_text(json.dumps(names)))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "NTG_RUN_MARKS": str(marks)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
    try:
        names, procs = lab_up(proc, flag)
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert set(names) <= namespaces()  # a kill -9 runs no clean-up of its own
    done = subprocess.run(
        [sys.executable, "-m", "testbed", "cleanup"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not set(names) & namespaces()
    assert all(f"deleted namespace {ns}" in done.stdout for ns in names), done.stdout
    assert len(procs) >= 2 and gone(procs)


def test_bad_items_are_refused_before_anything_starts(tmp_path):
    udp = plain_plan("udp", [(True, b"x")])
    with pytest.raises(BadInput, match="server port 0"):
        label_live([(udp, 0)], tmp_path)
    with pytest.raises(BadInput, match="tcp or udp"):
        label_live([(plain_plan("sctp", [(True, b"x")]), 9)], tmp_path)
    with pytest.raises(BadInput, match="use 4 or 6"):
        label_live([(udp, 9)], tmp_path, ip_version=5)
    big = tcp_plan("big", (Seg(0, REQ * 30),), REQ * 30)
    with pytest.raises(BadInput, match="exceeds the lab's MTU of 1500"):
        label_live([(big, 80)], tmp_path)
    hops = tcp_plan("hops", (Seg(0, REQ, hops=300),))
    with pytest.raises(BadInput, match=r"item 1 \(hops\).*cannot be built.*hops"):
        label_live([(udp, 9), (hops, 80)], tmp_path)
    assert not list(tmp_path.iterdir())  # refused before anything started
    with pytest.raises(BadInput, match="an IPv6 variant in a call with ip_version=4"):
        label_live([(replace(udp, family=6), 9)], tmp_path)
    empty = label_live([], tmp_path)
    assert empty.outcomes == [] and tshark(empty.capture, "frame.number") == []
