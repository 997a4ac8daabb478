"""flowengine's live back end (`gen --iface`) on real veth pairs in test namespaces.

Follows docs ../shared/guide/NETWORK-SAFETY.md: every test runs inside network namespaces
named ntgtest-<random> that the fixture creates (one `gen` namespace holding veth0, one
`peer` namespace holding veth1, IPv6 off so the kernel sends nothing of its own, no
addresses, no routes) and deletes again, also when a test fails. Every run is bounded in
packets and in time (timeouts on every subprocess). No mocks: packets sent according to
the summary are compared with the peer veth's rx counter and with what tcpdump captured.
"""

import json
import os
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from testbed.endpoints.netns.topology import VethPair

pytestmark = [
    pytest.mark.usefixtures("root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 (`ip netns`) is not installed"),
]

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
    "sport": "40000-40100",
    "sport_mode": "random",
    "dport": "9-9",
    "dport_mode": "fixed",
    "start": 0,
    "period": 1000,
    "packets": 1,
    "size": "22-22",
    "payload": "-",
    "reps": 1,
    "rep_period": 0,
}


def session_text(*flows, seed=1):
    lines = ["ntg-session 1", f"seed {seed}"]
    for f in flows:
        d = dict(BASE, **f)
        lines.append("flow " + " ".join(f"{k}={v}" for k, v in d.items()))
    return "\n".join(lines) + "\n"


def sh(*args, timeout=10, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture
def pair():
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10)
    if probe.returncode != 0:
        pytest.skip("`ip netns` is not usable here")
    p = VethPair(prefix="ntgtest")
    try:
        yield p.setup()
    finally:
        p.teardown()


class Capture:
    """tcpdump on veth1 in the peer namespace, started before sending and stopped with SIGINT."""

    def __init__(self, pair, path):
        self.path = path
        self.proc = subprocess.Popen(
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
                "32768",
                "-s",
                "2048",
                "-U",
                "--immediate-mode",
                "--time-stamp-precision",
                "nano",
                "-w",
                str(path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.err = ""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # tcpdump says so once its socket is bound
            line = self.proc.stderr.readline()
            self.err += line
            if "listening on" in line:
                return
            if not line and self.proc.poll() is not None:
                break
        self.proc.kill()
        raise RuntimeError(f"tcpdump did not start: {self.err}")

    def stop(self):
        # -U writes every packet as it comes: wait until the file stops growing (bounded).
        size, stable_since, deadline = -1, time.monotonic(), time.monotonic() + 5
        while time.monotonic() < deadline:
            now_size = self.path.stat().st_size if self.path.exists() else 0
            if now_size != size:
                size, stable_since = now_size, time.monotonic()
            elif time.monotonic() - stable_since > 0.3:
                break
            time.sleep(0.05)
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=10)
        self.err += err
        return read_pcap(self.path)


def read_pcap(path):
    """[(timestamp in ns, frame bytes)] of a classic pcap (micro- or nanosecond magic)."""
    data = Path(path).read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    scale = {0xA1B2C3D4: 1000, 0xA1B23C4D: 1}[magic]
    out, off = [], 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack_from("<IIII", data, off)
        out.append((sec * NS + frac * scale, data[off + 16 : off + 16 + incl]))
        off += 16 + incl
    return out


def run(engine, pair, tmp_path, text, *args, timeout=30):
    sess = tmp_path / "s.txt"
    sess.write_text(text)
    summ = tmp_path / "summary.json"
    t0 = time.monotonic()
    p = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            pair.gen,
            str(engine),
            "gen",
            str(sess),
            "--summary",
            str(summ),
            "--stats",
            str(tmp_path / "stats.csv"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall = time.monotonic() - t0
    summary = json.loads(summ.read_text()) if summ.exists() and summ.stat().st_size else None
    return p, summary, wall


@pytest.mark.parametrize("tx", ["ring", "sendmmsg"])
def test_sent_equals_peer_rx_equals_capture(flowengine_bin, pair, tmp_path, tx):
    text = session_text({"packets": 20_000, "period": 1000})
    before = pair.rx()
    cap = Capture(pair, tmp_path / "cap.pcap")
    p, s, _ = run(
        flowengine_bin, pair, tmp_path, text, "--iface", "veth0", "--pace", "topspeed", "--tx", tx
    )
    frames = cap.stop()
    assert p.returncode == 0, p.stderr
    assert s["sink"] == f"afpacket-{tx}"
    assert s["status"] == "completed" and s["pace"] == "topspeed"
    assert s["sent"] == s["packets"] == 20_000 and s["failed"] == 0
    assert s["sent_bytes"] == s["bytes"] == 20_000 * 64
    assert pair.rx() - before == s["sent"]
    assert "0 packets dropped by kernel" in cap.err
    assert len(frames) == s["sent"]
    assert all(len(f) == 64 and f[12:14] == b"\x08\x00" for _, f in frames)
    # Topspeed: no late column in the CSV.
    assert (tmp_path / "stats.csv").read_text().splitlines()[0].endswith("active_flows")


def test_realtime_pacing(flowengine_bin, pair, tmp_path):
    """2,000 packets 500 us apart: 1 s of wall time, and so are the capture's gaps on average."""
    text = session_text({"packets": 2_000, "period": 500_000})
    before = pair.rx()
    cap = Capture(pair, tmp_path / "cap.pcap")
    p, s, wall = run(flowengine_bin, pair, tmp_path, text, "--iface", "veth0")
    frames = cap.stop()
    assert p.returncode == 0, p.stderr
    assert s["pace"] == "realtime" and s["sent"] == 2_000 == pair.rx() - before == len(frames)
    # The last packet is due at 0.9995 s after the first.
    assert 0.9 <= s["wall_seconds"] <= 1.1, s
    assert wall < 1.6
    ts = [t for t, _ in frames]
    mean_gap = (ts[-1] - ts[0]) / (len(ts) - 1)
    assert abs(mean_gap - 500_000) < 25_000, mean_gap
    span = (ts[-1] - ts[0]) / NS
    assert 0.9 <= span <= 1.1
    # How many packets miss the 100 us default depends on the machine's load; that they are
    # counted consistently does not (the threshold itself is tested below).
    assert 0 <= s["late"] <= s["sent"] and s["max_late_ns"] >= 0
    rows = (tmp_path / "stats.csv").read_text().splitlines()
    assert rows[0] == "second,packets,bytes,flows_started,flows_finished,active_flows,late"
    assert sum(int(r.split(",")[-1]) for r in rows[1:]) == s["late"]
    assert sum(int(r.split(",")[1]) for r in rows[1:]) == 2_000

    # The same session at top speed takes a fraction of that.
    p2, s2, _ = run(flowengine_bin, pair, tmp_path, text, "--iface", "veth0", "--pace", "topspeed")
    assert p2.returncode == 0 and s2["sent"] == 2_000
    assert s2["wall_seconds"] < 0.2, s2


def test_late_threshold_decides_what_counts_as_late(flowengine_bin, pair, tmp_path):
    text = session_text({"packets": 500, "period": 1_000_000})
    _, strict, _ = run(flowengine_bin, pair, tmp_path, text, "--iface", "veth0", "--late-ns", "1")
    _, lenient, _ = run(
        flowengine_bin, pair, tmp_path, text, "--iface", "veth0", "--late-ns", "1000000000"
    )
    assert strict["sent"] == lenient["sent"] == 500
    # nothing leaves within a nanosecond of its due time; nothing is a whole second late
    assert strict["late"] >= 450 and strict["max_late_ns"] > 0
    assert lenient["late"] == 0


def _fold(s):
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def _sum16(b):
    if len(b) % 2:
        b += b"\0"
    return sum(struct.unpack(f"!{len(b) // 2}H", b))


def check_offload(frame):
    """The frame's checksums are what a driver leaves for TX checksum offload."""
    et = struct.unpack("!H", frame[12:14])[0]
    if et == 0x0800:
        ihl = (frame[14] & 15) * 4
        proto, tot = frame[23], struct.unpack("!H", frame[16:18])[0]
        assert frame[24:26] == b"\0\0"  # IPv4 header checksum left to the NIC
        l4 = frame[14 + ihl : 14 + tot]
        if proto == 1:
            assert l4[2:4] == b"\0\0"
            return
        pseudo = _sum16(frame[26:34]) + proto + len(l4)
    else:
        assert et == 0x86DD
        proto, plen = frame[20], struct.unpack("!H", frame[18:20])[0]
        l4 = frame[54 : 54 + plen]
        pseudo = _sum16(frame[22:54]) + proto + len(l4)
    off = {17: 6, 6: 16, 58: 2}[proto]
    assert struct.unpack("!H", l4[off : off + 2])[0] == _fold(pseudo), (proto, frame.hex())


def test_csum_offload(flowengine_bin, pair, tmp_path):
    v6 = {"af": 6, "src": "2001:db8::1/128", "dst": "2001:db8::2/128"}
    icmp = {"sport": "0-0", "dport": "0-0", "sport_mode": "fixed"}
    flows = [
        {"proto": 17},
        {"proto": 6},
        {"proto": 1, **icmp},
        {"proto": 17, **v6},
        {"proto": 6, **v6},
        {"proto": 58, **v6, **icmp},
    ]
    text = session_text(
        *(
            dict(f, packets=50, period=10_000, size="0-301", payload="c0ffee", start=i)
            for i, f in enumerate(flows)
        )
    )
    cap = Capture(pair, tmp_path / "cap.pcap")
    p, s, _ = run(
        flowengine_bin,
        pair,
        tmp_path,
        text,
        "--iface",
        "veth0",
        "--pace",
        "topspeed",
        "--csum-offload",
    )
    frames = cap.stop()
    assert p.returncode == 0, p.stderr
    assert len(frames) == s["sent"] == 300
    for _, f in frames:
        check_offload(f)
    # Every sink: the pcap holds the same frames.
    pc = tmp_path / "o.pcap"
    p = subprocess.run(
        [
            str(flowengine_bin),
            "gen",
            str(tmp_path / "s.txt"),
            "-o",
            str(pc),
            "--csum-offload",
            "--stats",
            os.devnull,
        ],
        capture_output=True,
        timeout=30,
    )
    assert p.returncode == 0
    written = [f for _, f in read_pcap(pc)]
    assert written == [f for _, f in frames]


def test_missing_interface_lists_existing(flowengine_bin, pair, tmp_path):
    p, s, _ = run(flowengine_bin, pair, tmp_path, session_text({"packets": 10}), "--iface", "nope0")
    assert p.returncode == 2 and s is None
    assert "nope0" in p.stderr and "no such interface" in p.stderr
    assert "veth0" in p.stderr and "lo" in p.stderr


def test_down_interface(flowengine_bin, pair, tmp_path):
    sh("ip", "-n", pair.gen, "link", "set", "veth0", "down")
    before = pair.rx()
    p, s, _ = run(flowengine_bin, pair, tmp_path, session_text({"packets": 10}), "--iface", "veth0")
    assert p.returncode == 2 and s is None
    assert "ip link set veth0 up" in p.stderr
    assert pair.rx() == before


def test_frame_larger_than_mtu(flowengine_bin, pair, tmp_path):
    sh("ip", "-n", pair.gen, "link", "set", "veth0", "mtu", "1000")
    before = pair.rx()
    text = session_text({"packets": 10}, {"packets": 10, "size": "1200-1200"})
    p, s, _ = run(flowengine_bin, pair, tmp_path, text, "--iface", "veth0")
    assert p.returncode == 2 and s is None
    assert "s.txt:4:" in p.stderr and "MTU" in p.stderr and "1000" in p.stderr
    assert pair.rx() == before


def test_no_permission(flowengine_bin, pair, tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    sess = tmp_path / "s.txt"
    sess.write_text(session_text({"packets": 10}))
    # A fresh user namespace has no CAP_NET_RAW over the test namespace.
    p = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            pair.gen,
            "unshare",
            "-U",
            str(flowengine_bin),
            "gen",
            str(sess),
            "--iface",
            "veth0",
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert p.returncode == 2
    assert "CAP_NET_RAW" in p.stderr and "unshare -Urn" in p.stderr


def test_sigterm_mid_run(flowengine_bin, pair, tmp_path):
    """A 60 s realtime session stopped after 0.5 s: exit 143, exact counters."""
    sess = tmp_path / "s.txt"
    sess.write_text(session_text({"packets": 60_000, "period": 1_000_000}))
    summ = tmp_path / "summary.json"
    before = pair.rx()
    proc = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            pair.gen,
            str(flowengine_bin),
            "gen",
            str(sess),
            "--iface",
            "veth0",
            "--summary",
            str(summ),
            "--stats",
            os.devnull,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)
        # ip netns exec execs the engine: the pid is the engine's.
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    s = json.loads(summ.read_text())
    assert s["status"] == "interrupted" and s["signal"] == "SIGTERM" and s["exit_code"] == 143
    assert 200 <= s["sent"] <= 1500, s
    assert s["failed"] == 0
    assert pair.rx() - before == s["sent"]
    assert s["packets"] - s["sent"] <= 1  # at most the frame waiting for its due time
