"""Timing accuracy (FLOR 6.2): start and duration errors of flow instances, from the capture."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis import analyze
from analysis.tables import read_table
from analysis.timing import session_flows, timing_summary

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """\
version: 1
name: timing
flows:
  - protocol: udp
    src: {cidr: 198.18.0.1/24, mode: increment}
    dst: 198.19.0.1
    dst_port: 9
    start: 1ms
    rate: 10
    packets: 100
    repeat: {count: 100, period: 0s}
  - protocol: tcp
    src: 2001:db8::1
    dst: {cidr: "2001:db8:1::/64", mode: increment}
    dst_port: 80
    start: 250ms
    period: 100ms
    packets: 100
    repeat: {count: 50, period: 100ms}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, flowengine_bin, pcaplib) -> Path:
    tmp = tmp_path_factory.mktemp("timing")
    (tmp / "s.yaml").write_text(SCENARIO)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed",
            "run",
            str(tmp / "s.yaml"),
            "--out",
            str(tmp / "runs"),
            "-q",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (d,) = (tmp / "runs").iterdir()
    return d


def test_session_flow_lines_are_read():
    text = "ntg-session 1\nseed 1\nflow af=4 start=5 period=7 packets=3 reps=2 rep_period=11 x=y\n"
    t = session_flows(text)
    assert t.loc[0].to_dict() == {
        "start": 5,
        "period": 7,
        "packets": 3,
        "reps": 2,
        "rep_period": 11,
    }


def test_the_exact_planner_is_exact_in_pcap_mode(run_dir):
    metrics = pd.read_json(run_dir / "metrics.json", typ="series")
    t = metrics["timing"]
    assert t["instances"] == 150
    for key in ("start_error", "duration_error"):
        assert t[key]["exact"] == 150 and t[key]["max_abs_ns"] == 0
    errors = read_table(run_dir, "timing").to_pandas()
    second = errors[errors["flow"] == 1].set_index("rep")
    assert second.loc[49, "intended_start_ns"] == 250_000_000 + 49 * 100_000_000
    assert (second["intended_duration_ns"] == 99 * 100_000_000).all()
    assert "## Timing accuracy" in (run_dir / "report.md").read_text()


def shift_packets(pcap: Path, out: Path, select, delta_ns: int) -> int:
    """Copy a nanosecond pcap, adding `delta_ns` to the time stamps of the records `select` picks."""
    data = bytearray(pcap.read_bytes())
    off, n, moved = 24, 0, 0
    while off < len(data):
        sec, nsec, incl, _ = struct.unpack_from("<IIII", data, off)
        if select(n, bytes(data[off + 16 : off + 16 + incl])):
            t = sec * 10**9 + nsec + delta_ns
            struct.pack_into("<II", data, off, t // 10**9, t % 10**9)
            moved += 1
        off += 16 + incl
        n += 1
    out.write_bytes(data)
    return moved


def test_errors_injected_into_a_real_capture_are_measured(run_dir, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    first_of_each = set()

    def first_packet_of_ipv4_flows(n: int, frame: bytes) -> bool:
        # IPv4 frames (ethertype 0x0800): delay the first packet of every 5-tuple by 3 ms
        if frame[12:14] != b"\x08\x00":
            return False
        key = frame[26:34] + frame[34:38]
        if key in first_of_each:
            return False
        first_of_each.add(key)
        return True

    moved = shift_packets(
        run_dir / "capture.pcap", copy / "capture.pcap", first_packet_of_ipv4_flows, 3_000_000
    )
    assert moved == 100
    m = analyze(copy, progress=None)
    t = m["timing"]
    assert t["start_error"]["exact"] == 50  # the IPv6 flows were not touched
    errors = read_table(copy, "timing").to_pandas()
    v4 = errors[errors["flow"] == 0]
    assert (v4["start_error_ns"] == 3_000_000).all()
    assert (v4["duration_error_ns"] == -3_000_000).all()
    s = timing_summary(errors)
    assert s["start_error"]["max_abs_ns"] == 3_000_000
    assert s["start_error"]["mean_ns"] == pytest.approx(3_000_000 * 100 / 150)
