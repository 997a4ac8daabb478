"""The test lanes (docs/testing.md): markers that tests/conftest.py puts on every test from the
fixtures it uses, and the two phases of `./bootstrap.sh test` that together run every test once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import LANES

REPO = Path(__file__).resolve().parent.parent

# a plugin that prints each collected test's lanes as one JSON line
PROBE = """
import json

def pytest_collection_finish(session):
    for item in session.items:
        print("LANES " + json.dumps([item.nodeid, sorted({m.name for m in item.iter_markers()})]))
"""

TESTS = """
import pytest

def test_nothing(): pass

def test_root(root): pass

def test_in_ci_root_and_suricata(root_in_ci, suricata_in_ci): pass

@pytest.mark.ntg_live
def test_public_marker(): pass

@pytest.fixture
def server(trex_dir, root):
    return trex_dir

def test_through_a_fixture(server): pass

def test_simulator(trex_sim_dir): pass

def test_image(guest_image): pass

def test_playbook(ansible): pass

def test_binary(suricata, pair): pass

@pytest.mark.parametrize("x", [1, pytest.param(2, marks=pytest.mark.vm)])
def test_param(x): pass

@pytest.mark.serial
def test_alone(): pass

@pytest.fixture
def guest_image(): pass
"""


def lanes_of(tmp_path: Path, tests: str, *args: str) -> dict[str, list[str]]:
    (tmp_path / "lanes_probe.py").write_text(PROBE)
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(tests))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(tmp_path), str(REPO)]),
    }
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "lanes_probe", "--co", "-q"]
        + ["-p", "no:cacheprovider", "--rootdir", str(tmp_path), *args, "test_probe.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode in (0, 5), p.stdout + p.stderr
    return {
        nodeid.split("::")[-1]: sorted(set(marks) & set(LANES))
        for nodeid, marks in _probed(p.stdout)
    }


def _probed(out: str) -> list[tuple[str, list[str]]]:
    """The (node id, marker names) lines that PROBE printed."""
    return [
        json.loads(line[len("LANES ") :]) for line in out.splitlines() if line.startswith("LANES ")
    ]


def test_every_test_is_in_the_lanes_of_the_fixtures_it_uses_or_else_unit(tmp_path):
    assert lanes_of(tmp_path, TESTS) == {
        "test_nothing": ["unit"],
        "test_root": ["live"],
        "test_in_ci_root_and_suricata": ["live", "suricata"],
        "test_public_marker": ["live"],
        "test_through_a_fixture": ["live", "trex"],  # a fixture's own fixtures count
        "test_simulator": ["trex"],
        "test_image": ["live", "vm"],
        "test_playbook": ["ansible"],
        "test_binary": ["live", "suricata"],
        "test_param[1]": ["unit"],
        "test_param[2]": ["vm"],  # a lane marker put on by hand, on one parameter
        "test_alone": ["unit"],
    }


def test_a_lane_is_chosen_with_m(tmp_path):
    assert sorted(lanes_of(tmp_path, TESTS, "-m", "trex")) == [
        "test_simulator",
        "test_through_a_fixture",
    ]
    assert sorted(lanes_of(tmp_path, TESTS, "-m", "unit")) == [
        "test_alone",
        "test_nothing",
        "test_param[1]",
    ]


def test_every_lane_is_registered_with_a_line_of_help():
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "--markers", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    for lane in [*LANES, "serial", "ntg_live"]:
        assert re.search(rf"^@pytest\.mark\.{lane}: \S", p.stdout, re.M), lane


def _phases() -> dict[str, str]:
    text = (REPO / "bootstrap.sh").read_text()
    return dict(re.findall(r'^(PHASE_[A-Z]+)="([^"]+)"$', text, re.M))


def test_the_phases_of_bootstrap_test_run_every_test_of_the_suite_once(tmp_path):
    (tmp_path / "lanes_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}

    def collect(*args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    phases = _phases()
    assert sorted(phases) == ["PHASE_BESIDE", "PHASE_PARALLEL", "PHASE_SERIAL"]
    procs = {
        "every": collect("-p", "lanes_probe"),
        **{k: collect("-m", v) for k, v in phases.items()},
    }
    outs, ids = {}, {}
    for name, p in procs.items():
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, out[-2000:] + err[-2000:]
        outs[name] = out
        ids[name] = [
            line for line in out.splitlines() if "::" in line and not line.startswith("LANES ")
        ]
    lanes = dict(_probed(outs["every"]))
    every = list(lanes)
    assert len(every) > 1000 and sorted(ids["every"]) == sorted(every)
    chosen = [i for k in phases for i in ids[k]]
    assert sorted(chosen) == sorted(every)  # each test in one phase: none twice, none left out
    alone = {i for i, marks in lanes.items() if {"trex", "vm", "serial"} & set(marks)}
    assert (
        sum("trex" in m for m in lanes.values()) >= 20
        and sum("vm" in m for m in lanes.values()) >= 5
    )
    # one TRex server and one VM at a time, the serial tests alone: never on the xdist workers
    assert not alone & set(ids["PHASE_PARALLEL"])
    # the VM lane runs beside the workers, the trex and serial tests after both
    assert not {i for i in alone if not {"trex", "serial"}.isdisjoint(lanes[i])} & set(
        ids["PHASE_BESIDE"]
    )
