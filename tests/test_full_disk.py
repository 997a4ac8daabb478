"""Commands that write, on a full file system (a small tmpfs this test mounts and fills): exit 4,
one line that names the file and says what to do, no traceback of any thread, nothing
half-written. The live run's full disk is in test_run_faults.py."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import fill, tmpfs

from testbed.parts import MonitorPart

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("root")


@pytest.fixture
def full_disk(tmp_path, root_in_ci):
    """A 2 MiB tmpfs filled to its last block (`filler`), unmounted afterwards."""
    with tmpfs(tmp_path / "full", "size=2m") as mnt:
        fill(mnt)
        yield mnt


def files_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "filler")


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed", *map(str, args)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    """A small capture (UDP over IPv4, 198.18.0.0/15) on a disk with room."""
    from scapy.all import IP, UDP, Ether, Raw, wrpcap

    path = tmp_path_factory.mktemp("cap") / "small.pcap"
    pkts = []
    for i in range(3000):
        p = (
            Ether()
            / IP(src="198.18.0.1", dst=f"198.19.0.{i % 50}")
            / UDP(sport=40000 + i % 7, dport=9)
            / Raw(b"x" * 100)
        )
        p.time = 1_700_000_000 + i / 1000
        pkts.append(p)
    wrpcap(str(path), pkts)
    return path


def test_the_sampler_on_a_full_disk_stops_and_names_its_file_without_a_traceback(
    full_disk, monkeypatch
):
    raised = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    csv = full_disk / "samples.csv"
    part = MonitorPart(csv, 10, lambda: {"me": os.getpid()})
    part.start(abort=lambda: False)
    deadline = time.monotonic() + 5
    while part.problem() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert part.problem() == f"no space left on device: {csv}"
    assert part.no_space() == csv
    summary = part.stop()
    assert not raised, raised
    assert summary["errors"] == [f"sampler stopped: no space left on device: {csv}"]


def test_a_run_on_a_full_disk_leaves_no_empty_scenario_file(full_disk, flowengine_bin):
    out = full_disk / "results"
    out.mkdir()
    res = cli("run", REPO / "scenarios" / "quickstart.yaml", "--out", out, "-q")
    assert res.returncode == 4 and "Traceback" not in res.stderr, res.stderr
    run_dir = next(out.iterdir())
    assert "scenario.yaml" in res.stderr  # the file that did not fit
    assert files_in(run_dir) == []  # no 0-byte scenario.yaml, no temporary


def test_analyze_on_a_full_disk_exits_4_and_writes_no_half_file(full_disk, capture):
    out = full_disk / "report"
    res = cli("analyze", capture, "--out", out, "-q")
    assert res.returncode == 4, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"testbed analyze: no space left on device: {out}"
    ), lines
    assert "no file is left half-written: free some space" in lines[0]
    assert files_in(full_disk) == []  # no 0-byte metrics.json, no half plot, no temporary


def test_export_on_a_full_disk_exits_4_and_leaves_nothing(full_disk, capture):
    out = full_disk / "export"
    res = cli("export", capture, "--parquet", out, "-q")
    assert res.returncode == 4, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("testbed export: no space left on device: "), (
        lines
    )
    assert "no file is left half-written: free some space" in lines[0]
    assert files_in(full_disk) == [] and not out.exists()


def test_multiply_with_its_plan_on_a_full_disk_exits_4_and_names_the_plan(
    full_disk, capture, tmp_path, flowengine_bin
):
    out, plan = tmp_path / "out.pcap", full_disk / "plan.csv"  # the output fits, its plan does not
    res = cli(
        "multiply", capture, "-T", "2", "--ranges", "198.18.128.0/17", "-o", out, "--plan", plan
    )
    assert res.returncode == 4, res.stderr
    assert res.stderr.strip() == (
        f"testbed multiply: no space left on device: {plan}; no file is left "
        f"half-written: free some space, or write elsewhere (-o, --plan)"
    )
    assert files_in(full_disk) == [] and not out.exists()
