"""Synthesized sessions read by Wireshark's dissectors (real tshark through pyshark): every session
of every golden case and of a deterministic sample of the shipped ET Open rules dissects as its
intended protocol, with no malformed packet and no expert error; and the check reports both."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import golden_cases, skip_or_fail

from idsrules.dissect import DissectError, dissect, dissect_manifest, problems_by_sid
from idsrules.semantics import load_rules
from idsrules.synth import Session, synthesize
from ntgcore import packets as P

CASES, IPV6_CASES = golden_cases()
ET_SAMPLE = 150


@pytest.fixture(autouse=True)
def _tshark_present() -> None:
    if shutil.which("tshark") is None:
        skip_or_fail("tshark not installed (apt-get install tshark)")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_case_sessions_dissect_as_their_protocol(case: Path, tmp_path: Path) -> None:
    models, problems = load_rules([case / "rules.rules"])
    assert problems == []
    res = synthesize(models, tmp_path / "a.pcap", tmp_path / "a.json")
    out = dissect_manifest(tmp_path / "a.json")
    assert len(out) == len(res.sessions) > 0
    assert problems_by_sid(out) == {}


@pytest.mark.parametrize("case", IPV6_CASES, ids=[c.name for c in IPV6_CASES])
def test_golden_case_sessions_dissect_over_ipv6(case: Path, tmp_path: Path) -> None:
    models, problems = load_rules([case / "rules.rules"])
    assert problems == []
    res = synthesize(models, tmp_path / "a.pcap", tmp_path / "a.json", ip_version=6)
    assert any(":" in s.client for s in res.sessions)  # (an `icmp` rule with itype stays on IPv4)
    out = dissect_manifest(tmp_path / "a.json")
    assert len(out) == len(res.sessions) > 0
    assert problems_by_sid(out) == {}


def test_et_open_sample_dissects_as_intended(tmp_path: Path) -> None:
    root = os.environ.get("NTG_SHARED_DATA")
    if not root:
        skip_or_fail("NTG_SHARED_DATA is not set (.ci/run sets it to /work/shared/data)")
    files = sorted((Path(root) / "rules" / "et-open").glob("*.rules"))
    if not files:
        pytest.skip("no ET Open rule files in NTG_SHARED_DATA")
    models, _problems = load_rules(files)
    supported = [m for m in models if m.supported]
    sample = supported[:: max(len(supported) // ET_SAMPLE, 1)]
    res = synthesize(sample, tmp_path / "a.pcap", tmp_path / "a.json")
    out = dissect(res.pcap, res.sessions)
    assert len(res.sessions) >= ET_SAMPLE
    assert {d.app for d in out} >= {"http", "tls", "dns", "smtp"}
    assert problems_by_sid(out) == {}


def _write(path: Path, frames: list[bytes]) -> None:
    with open(path, "wb") as f:
        w = P.PcapWriter(f)
        for k, frame in enumerate(frames):
            w.write(1_700_000_000_000_000_000 + k * 1000, frame)


BAD_SESSIONS = [
    Session(1, [], "udp", "198.19.0.1", 40000, "198.18.0.1", 53, app="dns"),
    Session(2, [], "udp", "198.19.0.1", 40001, "198.18.0.1", 5555, app="ftp"),
]


def _bad_pcap(path: Path) -> Path:
    """A truncated DNS query (malformed) and FTP bytes on a port no FTP dissector reads."""
    c, s = P.addr("198.19.0.1"), P.addr("198.18.0.1")
    truncated_dns = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05ab"
    _write(
        path,
        [
            P.ether(P.ipv4(c, s, 17, P.udp(c, s, 40000, 53, truncated_dns), 1), True),
            P.ether(P.ipv4(c, s, 17, P.udp(c, s, 40001, 5555, b"USER alice\r\n"), 2), True),
        ],
    )
    return path


def test_malformed_packet_and_wrong_protocol_are_reported(tmp_path: Path) -> None:
    dns, ftp = dissect(_bad_pcap(tmp_path / "bad.pcap"), BAD_SESSIONS)
    assert "dns" in dns.protocols and any("malformed" in p for p in dns.problems)
    assert ftp.problems == ["not dissected as ftp (saw: data, udp)"]
    assert set(problems_by_sid([dns, ftp])) == {1, 2}


def test_rule_bytes_above_the_protocol_are_payload_problems(tmp_path: Path) -> None:
    """The dcerpc golden case names the print spooler's interface: Wireshark reads the rule's stub
    as a SetPrinter call and finds it malformed; that is the rule's payload, not our framing."""
    models, _ = load_rules([Path(__file__).parent / "rules_cases" / "dcerpc" / "rules.rules"])
    res = synthesize(models, tmp_path / "a.pcap")
    out = dissect(res.pcap, res.sessions)
    assert problems_by_sid(out) == {}
    payload = problems_by_sid(out, payload=True)
    assert list(payload) == [1000731] and "malformed spoolss" in payload[1000731][0]


def test_dissecting_leaves_no_signal_handler_behind(tmp_path: Path) -> None:
    """pyshark left to itself installs a SIGCHLD handler and a wakeup fd for a loop that no longer
    runs; every later child exit then warned in the process that called it. pyshark now lives in
    the dissection worker: the caller never imports it."""
    child = (
        "import signal, sys\n"
        "from pathlib import Path\n"
        "from idsrules.semantics import load_rules\n"
        "from idsrules.synth import synthesize\n"
        "from idsrules.dissect import dissect_manifest\n"
        "models, _ = load_rules([Path(sys.argv[1])])\n"
        "synthesize(models, sys.argv[2] + '/a.pcap', sys.argv[2] + '/a.json')\n"
        "out = dissect_manifest(sys.argv[2] + '/a.json')\n"
        "assert out and not any(d.problems for d in out), out\n"
        "print(signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL, signal.set_wakeup_fd(-1),\n"
        "      'pyshark' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            child,
            str(root / "tests/rules_cases/ftp_dialogue/rules.rules"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "-1", "False"]


def test_dissecting_is_immune_to_who_reaps_children(tmp_path: Path) -> None:
    """Something else in the process may reap tshark before pyshark's child watcher sees it exit
    (CI: "Unknown child process pid N, will report returncode 255"); a healthy tshark was then
    reported as crashed. Here a thread of the calling process reaps every child the moment it
    exits, as a library's SIGCHLD handler or a `waitpid(-1)` loop would."""
    child = (
        "import os, sys, threading, time\n"
        "from idsrules.dissect import dissect\n"
        "from idsrules.synth import Session\n"
        "def reap():\n"
        "    while True:\n"
        "        try:\n"
        "            os.waitpid(-1, 0)\n"
        "        except ChildProcessError:\n"
        "            time.sleep(0.001)\n"
        "threading.Thread(target=reap, daemon=True).start()\n"
        "sessions = [Session(1, [], 'udp', '198.19.0.1', 40000, '198.18.0.1', 53, app='dns'),\n"
        "            Session(2, [], 'udp', '198.19.0.1', 40001, '198.18.0.1', 5555, app='ftp')]\n"
        "for _ in range(3):\n"
        "    dns, ftp = dissect(sys.argv[1], sessions)\n"
        "    assert 'dns' in dns.protocols and any('malformed' in p for p in dns.problems), dns\n"
        "    assert ftp.problems == ['not dissected as ftp (saw: data, udp)'], ftp\n"
        "print('ok')\n"
    )
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(
        [sys.executable, "-c", child, str(_bad_pcap(tmp_path / "bad.pcap"))],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ok"]


@pytest.mark.parametrize("content", [None, b"not a capture\n"], ids=["missing", "not-a-pcap"])
def test_a_capture_tshark_cannot_read_is_one_clear_line(
    tmp_path: Path, content: bytes | None
) -> None:
    pcap = tmp_path / "x.pcap"
    if content is not None:
        pcap.write_bytes(content)
    with pytest.raises(DissectError) as err:
        dissect(pcap, BAD_SESSIONS)
    text = str(err.value)
    assert text.startswith(f"{pcap}: ") and "\n" not in text
    assert ("No such file" if content is None else "isn't a capture file") in text
