"""Runs that end badly from outside: a full disk, a `kill -9` of the testbed itself, and the
analysis of a run that never finished. Real file systems (a small tmpfs), real namespaces and
real processes; the tmpfs and live cases need root."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

import pytest
from conftest import fill, skip_or_fail, tmpfs

from analysis.capture import read_capture

REPO = Path(__file__).resolve().parent.parent
needs_root = pytest.mark.usefixtures("root")  # mounts a tmpfs / creates network namespaces

UDP = (
    "{protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000, dst_port: 9, "
    "rate: %s, packets: %d, payload: {size: 18}}"
)


def scenario(tmp_path: Path, name: str, flow: str, testbed: str | None = None) -> Path:
    path = tmp_path / f"{name}.yaml"
    text = f"version: 1\nname: {name}\nflows:\n  - {flow}\n"
    if testbed is not None:
        text += "testbed:\n" + textwrap.indent(textwrap.dedent(testbed).strip(), "  ") + "\n"
    path.write_text(text)
    return path


def env(marks: Path | None = None) -> dict:
    out = {**os.environ, "PYTHONPATH": str(REPO)}
    if marks is not None:  # the test's own registry of live runs: other runs on the host stay out
        out["NTG_RUN_MARKS"] = str(marks)
    return out


def cli(*args: str, marks: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed", *map(str, args)],
        cwd=REPO,
        env=env(marks),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def manifest_of(out: Path) -> dict:
    return json.loads(next(out.glob("*/manifest.json")).read_text())


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purposes
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


# --------------------------------------------------------------------------------------------
# A full disk


@pytest.fixture
def small_disk(tmp_path, root_in_ci):
    """A 3 MiB tmpfs, unmounted afterwards."""
    with tmpfs(tmp_path / "small", "size=3m") as mnt:
        yield mnt


def assert_failed_for_no_space(res: subprocess.CompletedProcess, out: Path) -> tuple[Path, dict]:
    assert res.returncode == 4, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    run_dir = next(out.iterdir())
    assert f"run failed: no space left on device: {run_dir}" in res.stderr
    assert "the files written until then are kept" in res.stderr
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "failed" and m["finished_utc"]
    assert m["error"].startswith(f"no space left on device: {run_dir}")
    left = {p.name for p in run_dir.iterdir()}
    assert ".manifest.json.tmp" not in left and ".reserve" not in left, left
    return run_dir, m


@needs_root
def test_a_full_disk_ends_an_offline_run_with_its_exit_status_and_a_final_manifest(
    tmp_path, small_disk, flowengine_bin
):
    res = cli("run", REPO / "scenarios" / "quickstart.yaml", "--out", small_disk, "-q")
    run_dir, m = assert_failed_for_no_space(res, small_disk)
    assert (run_dir / "capture.pcap").stat().st_size > 1_000_000  # the partial capture is kept
    assert m["files"]["capture.pcap"]["bytes"] == (run_dir / "capture.pcap").stat().st_size


@needs_root
def test_a_disk_full_before_the_run_starts_runs_nothing_and_says_so(
    tmp_path, small_disk, flowengine_bin
):
    fill(small_disk)  # to the last block
    out = small_disk / "results"
    out.mkdir()
    res = cli("run", REPO / "scenarios" / "quickstart.yaml", "--out", out, "-q")
    assert res.returncode == 4, res.stderr
    assert "Traceback" not in res.stderr
    assert (
        "testbed run: no space left on device: " in res.stderr and "nothing was run" in res.stderr
    )
    for run_dir in out.iterdir():  # tmpfs: a folder takes no block; no room for a manifest
        assert (
            f"cannot write the final manifest {run_dir / 'manifest.json'}; there is none"
            in res.stderr
        )
        assert not (run_dir / ".manifest.json.tmp").exists()


@needs_root
@pytest.mark.serial  # compares every namespace of the machine before and after
def test_a_full_disk_ends_a_live_run_with_its_exit_status_and_a_final_manifest(
    tmp_path, small_disk, flowengine_bin
):
    # full frames captured at 20 kpps: the tap's capture fills 3 MiB in well under a second
    flow = (
        "{protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000, dst_port: 9, "
        "rate: 20000, packets: 100000, payload: {size: 1400}}"
    )
    path = scenario(tmp_path, "fill", flow, "capture: {at: 'tap:tap0', snaplen: 1500}")
    before = namespaces()
    res = cli("run", path, "--out", small_disk, "-q", marks=tmp_path / "marks")
    run_dir, m = assert_failed_for_no_space(res, small_disk)
    assert m["steps"][0]["loss"]["wire"] > 0  # what was measured is kept
    assert (run_dir / "capture.pcap").stat().st_size > 1_000_000
    assert namespaces() == before and not list((tmp_path / "marks").glob("*.json"))


@needs_root
def test_a_live_run_stops_its_step_when_the_capture_fills_the_disk_and_counts_what_it_holds(
    tmp_path, small_disk
):
    # drone at top speed, 64-byte frames: tcpdump fills 3 MiB in well under a second, and goes
    # on counting packets it cannot write; the step must stop then, not at its 8 s
    if not shutil.which("drone"):
        skip_or_fail("drone is not installed (apt-get install ostinato, or ./bootstrap.sh test)")
    res = cli(
        "run",
        REPO / "scenarios" / "seed001-ostinato.yaml",
        "--out",
        small_disk,
        "--duration",
        "8s",
        "-q",
        marks=tmp_path / "marks",
    )
    run_dir, m = assert_failed_for_no_space(res, small_disk)  # no traceback of any thread either
    capture = run_dir / "capture.pcap"
    assert (
        m["error"] == f"no space left on device: {capture}"
    )  # what filled, not the manifest after it
    assert f"run failed: no space left on device: {capture};" in res.stderr
    step = m["steps"][0]
    assert step["status"] == "failed" and step["error"] == f"no space left on device: {capture}"
    in_file = len(read_capture(capture))
    assert step["capture"]["captured"] == step["loss"]["captured"] == in_file > 0
    assert step["capture"]["captured_by_tcpdump"] >= in_file
    took = (
        datetime.fromisoformat(step["finished_utc"].rstrip("Z"))
        - datetime.fromisoformat(step["generators_started_utc"].rstrip("Z"))
    ).total_seconds()
    assert took < 6, took  # the generator stopped when the disk filled (then ~3 s of orderly stop)


# --------------------------------------------------------------------------------------------
# kill -9 of the testbed


def start_live(path: Path, out: Path, marks: Path) -> subprocess.Popen:
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
        env=env(marks),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_sending(marks: Path, names: set[str], timeout: float = 30, settle: float = 1) -> dict:
    """The run's mark once every process in `names` has started (then `settle` s of sending)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in marks.glob("*.json"):
            try:
                doc = json.loads(p.read_text())
            except ValueError:
                continue
            if names <= {c["name"] for c in doc["children"]}:
                time.sleep(settle)
                return json.loads(p.read_text())
        time.sleep(0.1)
    raise AssertionError(f"{names} did not all start within {timeout:g} s")


def kill_9_while_sending(tmp_path: Path, out: Path, marks: Path) -> dict:
    """A long live run (engine, drone, DUT and capture tcpdumps) whose testbed process gets
    SIGKILL while it sends; returns its mark."""
    gens = "[{name: flowengine}]"
    wanted = {"flowengine", "dut-tcpdump", "capture"}
    if shutil.which("drone"):
        gens = "[{name: flowengine}, {name: ostinato}]"
        wanted.add("drone")
    path = scenario(
        tmp_path, "long", UDP % (1000, 60000), f"generators: {gens}\ndut: {{kind: tcpdump}}"
    )
    cli = start_live(path, out, marks)
    try:
        mark = wait_sending(marks, wanted)
    except AssertionError:
        cli.kill()
        raise AssertionError(cli.communicate()[1]) from None
    cli.kill()
    cli.wait()
    return mark


@needs_root
def test_kill_9_of_a_live_run_takes_its_children_and_cleanup_removes_the_rest(
    tmp_path, flowengine_bin
):
    out, marks = tmp_path / "results", tmp_path / "marks"
    mark = kill_9_while_sending(tmp_path, out, marks)
    try:
        deadline = time.monotonic() + 5
        children = {c["pid"]: c["name"] for c in mark["children"]}
        while any(alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [name for pid, name in children.items() if alive(pid)]  # parent-death signal
        assert set(mark["locations"]) <= namespaces()  # only `testbed cleanup` removes them
        assert manifest_of(out)["status"] == "running"

        res = cli("cleanup", "--dry-run", marks=marks)
        assert res.returncode == 0, res.stderr
        assert f"run {mark['run_id']}: its process {mark['pid']} is gone" in res.stdout
        assert all(f"would delete namespace {ns}" in res.stdout for ns in mark["locations"])
        assert set(mark["locations"]) <= namespaces() and manifest_of(out)["status"] == "running"

        res = cli("cleanup", marks=marks)
        assert res.returncode == 0, res.stderr
        assert all(f"deleted namespace {ns}" in res.stdout for ns in mark["locations"])
        assert not set(mark["locations"]) & namespaces()
        m = manifest_of(out)
        assert (
            m["status"] == "abandoned"
            and m["abandoned_utc"]
            and str(mark["pid"]) in m["abandoned_reason"]
        )
        assert not list(marks.glob("*.json"))
        assert "nothing to clean up" in cli("cleanup", marks=marks).stdout
        run_dir = out / m["run_id"]  # its analysis says that it was abandoned
        res = cli("analyze", run_dir, "-q")
        assert "Incomplete run: the run was abandoned" in res.stderr, res.stderr
        assert (
            json.loads((run_dir / "metrics.json").read_text())["incomplete_run"]["status"]
            == "abandoned"
        )
        assert "Incomplete run: the run was abandoned" in (run_dir / "report.md").read_text()
    finally:
        cli("cleanup", marks=marks)


@needs_root
def test_kill_9_of_a_run_with_a_trex_server_and_cleanup_removes_its_dpdk_folder(tmp_path, trex_dir):
    """The TRex server dies with the run (parent-death signal) but its DPDK run folder
    (/var/run/dpdk/<prefix>) outlives it: the mark records it and `testbed cleanup` removes it."""
    out, marks = tmp_path / "results", tmp_path / "marks"
    path = scenario(tmp_path, "trexlong", UDP % (1000, 60000), "capture: null")
    path.write_text(path.read_text() + "generator: trex\n")
    run = start_live(path, out, marks)
    try:
        mark = wait_sending(marks, {"trex-server", "trex-worker"}, timeout=60, settle=2)
    except AssertionError:
        run.kill()
        raise AssertionError(run.communicate()[1]) from None
    run.kill()
    run.wait()
    try:
        server = next(c for c in mark["children"] if c["name"] == "trex-server")
        folder = Path(server["leftovers"][0]["path"])
        assert folder.parent == Path("/var/run/dpdk") and folder.name.startswith("ntg")
        deadline = time.monotonic() + 5
        while alive(server["pid"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(server["pid"])
        assert folder.is_dir()  # what DPDK made for the killed server is still there
        res = cli("cleanup", "--dry-run", marks=marks)
        assert f"would remove {folder}, left by trex-server" in res.stdout and folder.is_dir()
        res = cli("cleanup", marks=marks)
        assert res.returncode == 0, res.stderr
        assert f"remove {folder}, left by trex-server (pid {server['pid']})" in res.stdout
        assert not folder.exists() and manifest_of(out)["status"] == "abandoned"
    finally:
        cli("cleanup", marks=marks)


@needs_root
def test_cleanup_kills_what_is_left_inside_a_dead_runs_namespace(tmp_path):
    """A process inside a namespace of a dead run that no mark names (a daemon's child without the
    parent-death signal) is killed before the namespace goes: nothing outlives the run's places."""
    marks, netns_marks, run_dir = tmp_path / "marks", tmp_path / "netns-marks", tmp_path / "run"
    for d in (marks, netns_marks, run_dir):
        d.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({"run_id": "run", "status": "running"}))
    ns = f"ntgorph{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    (netns_marks / ns).write_text("{}")
    orphan = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "300"], start_new_session=True)
    try:
        gone = subprocess.Popen(["true"])
        gone.wait()
        dead = {
            "run_id": "run",
            "run_dir": str(run_dir),
            "pid": gone.pid,
            "start_ticks": 1,
            "backend": "netns",
            "locations": [ns],
            "children": [],
        }
        (marks / "run.1.json").write_text(json.dumps(dead))
        e = {**env(marks), "NTG_NETNS_MARKS": str(netns_marks)}
        time.sleep(0.3)  # `ip netns exec` has exec'd sleep
        res = subprocess.run(
            [sys.executable, "-m", "testbed", "cleanup"],
            cwd=REPO,
            env=e,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        assert f"killed 1 process(es) left in namespace {ns} (sleep)" in res.stdout, res.stdout
        assert orphan.wait(10) == -9 and ns not in namespaces()
    finally:
        orphan.kill()
        subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def test_cleanup_removes_what_dead_children_left_and_only_that(tmp_path):
    """A dead run's children's leftovers: a folder and a file go, a shared folder only when empty,
    a relative path or a path near the root never; the dry run only says so."""
    marks, run_dir, made = tmp_path / "marks", tmp_path / "run", tmp_path / "made"
    for d in (marks, run_dir, made / "pfx" / "sub", made / "shared-busy", made / "shared-empty"):
        d.mkdir(parents=True)
    (made / "pfx" / "sub" / "config").write_text("x")
    (made / "shared-busy" / "other").write_text("y")
    (made / "file").write_text("z")
    (run_dir / "manifest.json").write_text(json.dumps({"run_id": "run", "status": "running"}))
    gone = subprocess.Popen(["true"])
    gone.wait()
    left = [
        {"path": str(made / "pfx")},
        {"path": str(made / "file")},
        {"path": "relative/x"},
        {"path": "/tmp"},
        {"path": str(made / "shared-busy"), "only_if_empty": True},
        {"path": str(made / "shared-empty"), "only_if_empty": True},
    ]
    dead = {
        "run_id": "run",
        "run_dir": str(run_dir),
        "pid": gone.pid,
        "start_ticks": 1,
        "backend": None,
        "locations": [],
        "children": [
            {"name": "srv", "pid": gone.pid, "start_ticks": 1, "argv": ["true"], "leftovers": left}
        ],
    }
    (marks / "run.1.json").write_text(json.dumps(dead))
    res = cli("cleanup", "--dry-run", marks=marks)
    assert f"would remove {made / 'pfx'}, left by srv" in res.stdout
    assert (made / "pfx").is_dir() and (made / "shared-empty").is_dir()
    res = cli("cleanup", marks=marks)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in made.iterdir()) == ["shared-busy"]
    assert (made / "shared-busy" / "other").is_file() and Path("/tmp").is_dir()
    assert f"remove the empty folder {made / 'shared-empty'}" in res.stdout


def test_kill_9_of_an_offline_run_takes_the_engine_and_cleanup_marks_it_abandoned(
    tmp_path, flowengine_bin
):
    """An offline run marks itself too (no root needed): after a `kill -9` the engine goes with it
    and `testbed cleanup` (or the next run) finalises the manifest as `abandoned`."""
    out, marks = tmp_path / "results", tmp_path / "marks"
    path = scenario(tmp_path, "long-offline", UDP % ("1000000", 50_000_000))  # seconds of writing
    proc = start_live(path, out, marks)  # the same command line; the scenario has no testbed:
    try:
        mark = wait_sending(marks, {"flowengine"}, timeout=60, settle=0.2)
    except AssertionError:
        proc.kill()
        raise AssertionError(proc.communicate()[1]) from None
    proc.kill()
    proc.wait()
    (engine,) = [c["pid"] for c in mark["children"] if c["name"] == "flowengine"]
    deadline = time.monotonic() + 5
    while alive(engine) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(engine)
    assert mark["backend"] is None and mark["locations"] == []
    assert manifest_of(out)["status"] == "running"
    res = cli(
        "run",
        scenario(tmp_path, "next", UDP % (1000, 10)),
        "--out",
        tmp_path / "next",
        "--no-analyze",
        "-q",
        marks=marks,
    )
    assert res.returncode == 0, res.stderr
    assert f"run {mark['run_id']}: its process {mark['pid']} is gone" in res.stderr
    m = manifest_of(out)
    assert m["status"] == "abandoned" and str(mark["pid"]) in m["abandoned_reason"]
    assert not list(marks.glob("*.json"))


@needs_root
def test_the_next_live_run_cleans_up_after_a_dead_one_and_says_so(tmp_path, flowengine_bin):
    out, marks = tmp_path / "results", tmp_path / "marks"
    mark = kill_9_while_sending(tmp_path, out, marks)
    try:
        path = scenario(tmp_path, "next", UDP % (1000, 200), "dut: {kind: tcpdump}")
        res = cli("run", path, "--out", tmp_path / "next", "--no-analyze", "-q", marks=marks)
        assert res.returncode == 0, res.stderr
        assert "cleaning up after runs that died:" in res.stderr
        assert all(f"deleted namespace {ns}" in res.stderr for ns in mark["locations"])
        assert not set(mark["locations"]) & namespaces()
        assert manifest_of(out)["status"] == "abandoned"
        assert any(mark["run_id"] in line for line in manifest_of(tmp_path / "next")["cleanup"])
        assert not list(marks.glob("*.json"))
    finally:
        cli("cleanup", marks=marks)


@needs_root
def test_cleanup_touches_only_what_a_dead_run_marked_and_still_is_that_run(tmp_path):
    """A mark whose pid now belongs to another process (pid reuse) is a dead run; a recorded child
    whose pid is another process now is not killed; a namespace without our mark is left alone;
    the mark of a run whose process lives is not touched."""
    marks, run_dir = tmp_path / "marks", tmp_path / "run"
    marks.mkdir()
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({"run_id": "run", "status": "running"}))
    other = subprocess.Popen(["sleep", "60"])
    stranger = f"ntgfx{os.getpid()}"  # a namespace no run of ours made
    subprocess.run(["ip", "netns", "add", stranger], check=True)
    try:
        ticks = int(Path(f"/proc/{other.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        dead = {
            "run_id": "run",
            "run_dir": str(run_dir),
            "pid": other.pid,
            "start_ticks": ticks - 1,
            "backend": "netns",
            "locations": [stranger],
            "children": [
                {
                    "name": "sleep",
                    "pid": other.pid,
                    "start_ticks": ticks - 1,
                    "argv": ["sleep", "60"],
                }
            ],
        }
        living = {
            **dead,
            "run_id": "living",
            "run_dir": str(tmp_path / "nowhere"),
            "start_ticks": ticks,
        }
        (marks / "run.1.json").write_text(json.dumps(dead))
        (marks / "living.2.json").write_text(json.dumps(living))
        res = cli("cleanup", marks=marks)
        assert res.returncode == 0, res.stderr
        assert (
            f"namespace {stranger} was not made by ntg-testbed" in res.stdout
            and "living" not in res.stdout
        )
        assert other.poll() is None and stranger in namespaces()
        assert json.loads((run_dir / "manifest.json").read_text())["status"] == "abandoned"
        assert sorted(p.name for p in marks.glob("*.json")) == ["living.2.json"]
    finally:
        other.kill()
        other.wait()
        subprocess.run(["ip", "netns", "del", stranger], check=False)


# --------------------------------------------------------------------------------------------
# Analysing a run that did not finish


@pytest.mark.parametrize("status", ["running", "abandoned", "failed", "interrupted"])
def test_analyze_warns_about_a_run_that_did_not_finish_and_marks_the_report(
    tmp_path, status, flowengine_bin, pcaplib
):
    out = tmp_path / "r"
    res = cli(
        "run", scenario(tmp_path, "tiny", UDP % (1000, 300)), "--out", out, "-q", "--no-analyze"
    )
    assert res.returncode == 0, res.stderr
    run_dir = next(out.iterdir())
    m = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**m, "status": status}))
    res = cli("analyze", run_dir, "-q")
    assert res.returncode == 0, res.stderr  # the exit status says what the checks say
    assert f"testbed analyze: warning: {run_dir}: Incomplete run:" in res.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["incomplete_run"]["status"] == status
    banner = metrics["incomplete_run"]["message"]
    assert f"> **⚠ {banner}**" in (run_dir / "report.md").read_text()
    assert "Incomplete run:" in (run_dir / "report.html").read_text()


def test_analyze_of_a_completed_run_has_no_incomplete_banner(tmp_path, flowengine_bin, pcaplib):
    out = tmp_path / "r"
    res = cli("run", scenario(tmp_path, "tiny", UDP % (1000, 300)), "--out", out, "-q")
    assert res.returncode == 0, res.stderr
    run_dir = next(out.iterdir())
    res = cli("analyze", run_dir, "-q")
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
    assert json.loads((run_dir / "metrics.json").read_text())["incomplete_run"] is None
    assert "Incomplete run" not in (run_dir / "report.md").read_text()
