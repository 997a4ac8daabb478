"""`testbed meter`: real meters on a capture of ours, scored against it; its bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ntgcore.packets import PcapWriter, addr, ether, ip, tcp_session, udp

REPO = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000_000_000_000
MS = 1_000_000
A, B = "198.18.0.1", "198.18.0.2"


def run_testbed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed", *args], cwd=REPO, capture_output=True, text=True
    )


def session() -> list[tuple[bool, bytes]]:
    """A short HTTP exchange: its frames (from the client, Ethernet frame)."""
    talk = [(True, b"GET / HTTP/1.0\r\n\r\n"), (False, b"HTTP/1.0 200 OK\r\n\r\n")]
    return list(tcp_session(addr(A), addr(B), 40000, 80, talk))


def capture(path: Path) -> Path:
    """Two UDP flows (20 and 5 packets) and one TCP session, in time order."""
    a, b = addr(A), addr(B)
    frames = [
        (T0 + i * MS, ether(ip(a, b, 17, udp(a, b, 1000, 2000, b"x" * 50)), True))
        for i in range(20)
    ]
    frames += [
        (T0 + i * 3 * MS, ether(ip(b, a, 17, udp(b, a, 3000, 4000, b"y" * 10)), True))
        for i in range(5)
    ]
    for i, (_, frame) in enumerate(session()):
        frames.append((T0 + 100 * MS + i * MS, frame))
    with open(path, "wb") as f:
        w = PcapWriter(f)
        for ts, frame in sorted(frames, key=lambda x: x[0]):
            w.write(ts, frame)
    return path


@pytest.mark.usefixtures("root")
def test_meters_on_a_capture_are_scored_against_it(tmp_path):
    pcap = capture(tmp_path / "flows.pcap")
    out = tmp_path / "out"
    r = run_testbed("meter", str(pcap), "--meter", "softflowd,nfpcapd", "--out", str(out), "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "meter.json").read_text())
    assert [m["meter"] for m in doc["meters"]] == ["softflowd", "nfpcapd"]
    for m in doc["meters"]:
        assert m["status"] == "scored", m
        s = m["score"]
        flows = pq.read_table(out / m["meter"] / "score.parquet")
        # 2 UDP flows, the TCP session's 2 directions, and the client's last ACK after its FIN
        # (a new record for a conforming meter, RFC 5470's end of flow)
        assert s["reference_records"] == 5 and flows.num_rows >= 5
        assert s["packets_reference"] == 25 + len(session())
        assert s["packets_collected"] == s["packets_reference"] and s["missing"] == 0
    assert doc["meters"][0]["exported"] == doc["meters"][0]["collected"]  # softflowd exports
    assert (out / "meter-score.png").stat().st_size > 0
    assert "| softflowd | 9 | 5 |" in (out / "meter.md").read_text()


def test_bad_options_are_refused_naming_them(tmp_path):
    pcap = capture(tmp_path / "flows.pcap")
    cases = {
        ("--meter", "softflowdd"): "no flow meter 'softflowdd'; the meters are: argus, nfpcapd",
        ("--timeouts", "idle=1s,busy=2s"): "give idle=DURATION and/or active=DURATION",
        ("--version", "7"): "5, 9 or ipfix",
        ("--meter", "argus", "--max-flows", "10"): "argus: --max-flows: Value error, argus "
        "cannot set it",
        ("--meter", "softflowd", "--timeouts", "idle=1500ms"): "softflowd takes whole seconds",
    }
    for args, words in cases.items():
        r = run_testbed("meter", str(pcap), *args, "--out", str(tmp_path / "o"))
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    r = run_testbed("meter", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "give capture files, or --conformance" in r.stderr
    assert not (tmp_path / "o" / "meter.json").exists()


@pytest.mark.usefixtures("root")
def test_the_conformance_matrix_from_the_command(tmp_path):
    out = tmp_path / "c"
    r = run_testbed("meter", "--conformance", "--meter", "nfpcapd", "--out", str(out), "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    table = pq.read_table(out / "conformance.parquet").to_pylist()
    assert {row["meter"] for row in table} == {"nfpcapd"} and len(table) >= 14
    assert "nfpcapd    one-packet       pass" in r.stdout
    assert (out / "conformance.md").is_file() and (out / "conformance.png").is_file()
