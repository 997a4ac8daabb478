"""A `kill -9` of the testbed at the worst moments (issue 24): nothing is left after `testbed
cleanup`, and what the killed run captured is analysed. A watcher kills the run the moment its
first namespace, or that namespace's mark, appears; real namespaces, real processes (root)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parent.parent
NETNS_DIR = Path("/run/netns")  # what `ip netns list` lists
needs_root = pytest.mark.usefixtures("root")

SHORT = """version: 1
name: {name}
flows:
  - {{protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000, dst_port: 9, rate: 1000,
     packets: {packets}, payload: {{size: 18}}}}
testbed:
  dut: {{kind: tcpdump}}
"""


def env(marks: Path, netns_marks: Path) -> dict:
    """The test's own registries of runs and of namespaces: other runs on the host stay out."""
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "NTG_RUN_MARKS": str(marks),
        "NTG_NETNS_MARKS": str(netns_marks),
    }


def ntg(*args, e: dict, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed", *map(str, args)],
        cwd=REPO,
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_run(tmp_path: Path, out: Path, e: dict, packets: int = 200) -> subprocess.Popen:
    path = tmp_path / "short.yaml"
    path.write_text(SHORT.format(name="short", packets=packets))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed",
            "run",
            str(path),
            "--out",
            str(out),
            "--no-analyze",
            "-q",
        ],
        cwd=REPO,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def listing(folder: Path) -> set[str]:
    try:
        return set(os.listdir(folder))
    except FileNotFoundError:
        return set()


# The watcher: a process of its own at real-time priority, woken by inotify the moment a name is
# created in the watched folder; if the name is one of the run's namespaces it notes whether that
# namespace's mark exists at this moment and kills the run (SIGKILL) before the run runs again.
WATCHER = r"""
import ctypes, json, os, signal, struct, sys
from pathlib import Path
watched, marks, netns_marks = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
except OSError:
    os.nice(-20)
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_CLOEXEC)
if fd < 0 or libc.inotify_add_watch(fd, bytes(watched), 0x100) < 0:  # IN_CREATE
    sys.exit(f"inotify on {watched}: {os.strerror(ctypes.get_errno())}")
print("watching", flush=True)
while True:
    buf, at = os.read(fd, 65536), 0
    while at < len(buf):
        _, _, _, n = struct.unpack_from("iIII", buf, at)
        name = buf[at + 16:at + 16 + n].rstrip(b"\0").decode()
        at += 16 + n
        for p in marks.glob("*.json"):  # written before anything of the run exists
            try:
                doc = json.loads(p.read_text())
            except ValueError:
                continue
            if name in doc["locations"]:
                marked = (netns_marks / name).exists()
                os.kill(doc["pid"], signal.SIGKILL)
                print(json.dumps({"mark": doc, "name": name, "marked": marked}), flush=True)
                sys.exit(0)
"""


def kill_when(
    tmp_path: Path, watched: Path, marks: Path, netns_marks: Path, e: dict, timeout: float = 60
) -> dict:
    """Start a short live run and kill -9 it as soon as one of its namespaces' names is created
    in `watched` (/run/netns: the namespace itself; the netns marks folder: its mark). Returns
    the watcher's note: the run's mark, that name, and whether the namespace's mark existed then."""
    watched.mkdir(parents=True, exist_ok=True)
    watcher = subprocess.Popen(
        [sys.executable, "-c", WATCHER, watched, marks, netns_marks],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert watcher.stdout.readline() == "watching\n", watcher.communicate()
    run = start_run(tmp_path, tmp_path / "results", e)
    try:
        out, err = watcher.communicate(timeout=timeout)
        assert watcher.returncode == 0 and out, (err, run.poll() is not None and run.communicate())
        run.wait()
        return json.loads(out)
    finally:
        watcher.kill()
        run.kill()
        run.wait()


def remove_left(note: dict) -> None:
    """What a failed test's run left (its namespaces, named by its mark): the host stays clean."""
    for ns in set(note.get("mark", {}).get("locations", [])) & namespaces():
        subprocess.run(["ip", "netns", "del", ns], check=False)


def assert_cleanup_leaves_nothing(mark: dict, marks: Path, netns_marks: Path, e: dict) -> None:
    res = ntg("cleanup", e=e)
    assert res.returncode == 0, res.stderr
    assert "was not made by ntg-testbed" not in res.stdout, res.stdout
    assert not set(mark["locations"]) & namespaces(), res.stdout
    assert not set(mark["locations"]) & listing(netns_marks), res.stdout  # no stale namespace mark
    assert not list(marks.glob("*.json"))
    run_dir = Path(mark["run_dir"])
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "abandoned"
    assert "nothing to clean up" in ntg("cleanup", e=e).stdout


@needs_root
@pytest.mark.parametrize("attempt", range(3))
def test_kill_9_as_a_namespace_appears_leaves_nothing_after_cleanup(
    tmp_path, attempt, flowengine_bin
):
    """The window between `ip netns add` and the namespace's mark (issue 24, item 10): the mark
    is there before the namespace, so cleanup knows the namespace as ours and deletes it."""
    marks, netns_marks = tmp_path / "marks", tmp_path / "netns-marks"
    e = env(marks, netns_marks)
    note = {}
    try:
        note = kill_when(tmp_path, NETNS_DIR, marks, netns_marks, e)
        assert note["name"] in namespaces()  # the kill left it: only cleanup removes it
        assert_cleanup_leaves_nothing(note["mark"], marks, netns_marks, e)
        assert note["marked"], f"namespace {note['name']} existed without its mark in {netns_marks}"
    finally:
        ntg("cleanup", e=e)
        remove_left(note)


@needs_root
def test_kill_9_between_a_namespaces_mark_and_the_namespace_leaves_no_stale_mark(
    tmp_path, flowengine_bin
):
    """The kill lands after the namespace's mark, before `ip netns add`: cleanup finds no
    namespace and removes the mark that names it, so a later namespace of that name is not adopted."""
    marks, netns_marks = tmp_path / "marks", tmp_path / "netns-marks"
    e = env(marks, netns_marks)
    note = {}
    try:
        note = kill_when(tmp_path, netns_marks, marks, netns_marks, e)
        assert (netns_marks / note["name"]).exists()
        res = ntg("cleanup", "--dry-run", e=e)
        assert (netns_marks / note["name"]).exists(), res.stdout  # a dry run removes nothing
        assert_cleanup_leaves_nothing(note["mark"], marks, netns_marks, e)
        run_dir = Path(note["mark"]["run_dir"])  # killed before its first step: nothing passes
        res, m = analyze_killed(run_dir, e)
        assert res.returncode == 3 and m["steps"] == [], res.stderr
        assert [(c["name"], c["ok"]) for c in m["checks"]] == [("run: at least one step", False)]
    finally:
        ntg("cleanup", e=e)
        remove_left(note)


# --------------------------------------------------------------------------------------------
# Analysing what a killed run captured (issue 24, item 7)

SWEEP = """version: 1
name: sweep
flows:
  - {protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000, dst_port: 9, rate: 1000, packets: 1}
testbed:
  method: loss-sweep
  dut: {kind: tcpdump}
  monitor: {hz: 10}
  sweep: {packet_rates: [500, 1000], hosts: [], step: 2s}
"""


def packets_in(pcap: Path) -> int:
    """What tcpdump itself reads from a capture (a killed tcpdump may leave a cut last packet)."""
    res = subprocess.run(["tcpdump", "-n", "-q", "-r", str(pcap)], capture_output=True, text=True)
    return len(res.stdout.splitlines())


def kill_when_file(run: subprocess.Popen, path_of, packets: int, timeout: float = 90) -> None:
    """Kill -9 `run` once the capture `path_of()` names holds at least `packets` packets (tcpdump
    writes each packet as it comes, so a loaded machine only makes the wait longer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.poll() is None:
        path = path_of()
        if path is not None and path.is_file() and packets_in(path) >= packets:
            run.kill()
            run.wait()
            return
        time.sleep(0.2)
    run.kill()
    raise AssertionError(f"{timeout:g} s without {packets} packets: {run.communicate()}")


def analyze_killed(run_dir: Path, e: dict) -> tuple[subprocess.CompletedProcess, dict]:
    res = ntg("analyze", run_dir, "-q", e=e)
    assert "Traceback" not in res.stderr, res.stderr
    assert (
        f"testbed analyze: warning: {run_dir}: Incomplete run: the run was abandoned" in res.stderr
    )
    return res, json.loads((run_dir / "metrics.json").read_text())


@needs_root
def test_analyze_of_a_run_killed_while_sending_analyses_its_capture_and_fails(
    tmp_path, flowengine_bin, pcaplib
):
    """One step, killed while it sends, then `testbed cleanup`: the step has no entry in the
    manifest, yet its capture and samples are analysed as step `run`, marked unrecorded; the
    run is incomplete, and its check that the step ended fails (exit 3), not 0 with no steps."""
    marks, netns_marks, out = tmp_path / "marks", tmp_path / "netns-marks", tmp_path / "results"
    e = env(marks, netns_marks)
    run = start_run(tmp_path, out, e, packets=60000)  # a minute at 1000/s: killed long before
    try:
        kill_when_file(run, lambda: next(out.glob("*/capture.pcap"), None), packets=1500)
        assert ntg("cleanup", e=e).returncode == 0
        run_dir = next(out.iterdir())
        assert json.loads((run_dir / "manifest.json").read_text())["steps"] == []
        res, m = analyze_killed(run_dir, e)
        assert res.returncode == 3, res.stderr
        assert m["incomplete_run"]["status"] == "abandoned"
        (step,) = m["steps"]
        assert step["name"] == "run" and step["status"] == "unrecorded"
        held = packets_in(run_dir / "capture.pcap")
        assert held > 100 and step["traffic"]["packets"] == held == m["packets"]
        assert (
            step["resources"]["flowengine"]["samples"] > 0
            and step["resources"]["dut"]["samples"] > 0
        )
        assert [c["ok"] for c in m["checks"]] == [False]
        assert "the run recorded the step's end" in m["checks"][0]["name"]
        assert (
            "check failed: run: the run recorded the step's end: expected its entry in manifest.json"
            in res.stderr
        )
        report = (run_dir / "report.md").read_text()
        assert "Incomplete run" in report and "unrecorded" in report
        steps = pq.read_table(run_dir / "tables" / "steps.parquet").to_pylist()
        assert [(s["step"], s["status"], s["packets"]) for s in steps] == [
            ("run", "unrecorded", held)
        ]
    finally:
        run.kill()
        ntg("cleanup", e=e)


@needs_root
def test_analyze_of_a_sweep_killed_in_its_second_step_keeps_both_steps(
    tmp_path, flowengine_bin, pcaplib
):
    """Several steps: the first recorded in the manifest, the second (killed) only in its folder;
    each is analysed from its own capture, the first with its checks, the second unrecorded."""
    marks, netns_marks, out = tmp_path / "marks", tmp_path / "netns-marks", tmp_path / "results"
    e = env(marks, netns_marks)
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP)
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed",
            "run",
            str(path),
            "--out",
            str(out),
            "--no-analyze",
            "-q",
        ],
        cwd=REPO,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kill_when_file(run, lambda: next(out.glob("*/rate-1000pps/capture.pcap"), None), packets=50)
        assert ntg("cleanup", e=e).returncode == 0
        run_dir = next(out.iterdir())
        assert [
            s["name"] for s in json.loads((run_dir / "manifest.json").read_text())["steps"]
        ] == ["rate-500pps"]
        res, m = analyze_killed(run_dir, e)
        assert res.returncode == 3, res.stderr
        first, second = m["steps"]
        assert (first["name"], first["status"]) == ("rate-500pps", "completed")
        assert (second["name"], second["status"]) == ("rate-1000pps", "unrecorded")
        for s in (first, second):
            assert s["traffic"]["packets"] == packets_in(run_dir / s["name"] / "capture.pcap") > 0
        assert second["resources"]["dut"]["samples"] > 0
        failed = [c["name"] for c in m["checks"] if not c["ok"]]
        assert failed == ["rate-1000pps: the run recorded the step's end"]
        assert [r["step"] for r in m["loss_sweep"]] == ["rate-500pps", "rate-1000pps"]
    finally:
        run.kill()
        ntg("cleanup", e=e)
