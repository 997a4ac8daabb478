"""testbed.parts.monitor.Sampler on real child processes (started through ntgcore.proc.Process)."""

import sys
import time

import psutil
import pytest

from ntgcore.proc import Process
from testbed.parts.monitor import COLUMNS, Sampler, read_samples

BUSY = "while True: pass"
THREADS = (
    "import threading, time\n"
    "def spin():\n    while True: pass\n"
    "def nap():\n    while True: time.sleep(0.01)\n"
    "threading.Thread(target=spin, daemon=True).start()\n"
    "threading.Thread(target=nap, daemon=True).start()\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def procs():
    started = []

    def start(name, code):
        p = Process(name, [sys.executable, "-c", code]).start()
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop(grace=2)


def settled(pid: int, timeout: float = 10.0) -> None:
    """Wait until process `pid` is past its start-up (the interpreter's imports): its main
    thread's CPU time unchanged over 0.2 s. A sleeper sampled earlier shows its start-up as CPU use."""
    stat = f"/proc/{pid}/task/{pid}/stat"
    with open(stat) as f:
        last = f.read().rsplit(")", 1)[1].split()[11:13]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        with open(stat) as f:
            now = f.read().rsplit(")", 1)[1].split()[11:13]  # utime, stime
        if now == last:
            return
        last = now
    raise AssertionError(f"process {pid} still used CPU after {timeout:g} s")


def sample(tmp_path, seconds, hz, pids):
    s = Sampler(tmp_path / "samples.csv", hz=hz, pids=pids).start()
    time.sleep(seconds)
    summary = s.stop()
    return summary, read_samples(tmp_path / "samples.csv")


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) the kernel has charged to process `pid` so far."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def assert_busy_as_measured(percent, pid: int, window) -> None:
    """A spinning process's sampled CPU percent is what the kernel charged it over the window
    (how much CPU a shared machine gave it varies; the sampler must report it, whatever it is)."""
    used = (cpu_seconds(pid) - window[0]) / (time.monotonic() - window[1]) * 100
    assert used > 10, used  # it did spin
    assert abs(percent.dropna().mean() - used) < 15, (percent.tolist(), used)


def spin_window(pid: int):
    return cpu_seconds(pid), time.monotonic()


def test_busy_and_sleeping(tmp_path, procs):
    busy = procs("busy", BUSY)
    sleepy = procs("sleepy", "import time; time.sleep(60)")
    settled(sleepy.pid)
    window = spin_window(busy.pid)
    summary, df = sample(tmp_path, 1.6, 5, lambda: {"busy": busy.pid, "sleepy": sleepy.pid})
    assert_busy_as_measured(
        df[(df.kind == "process") & (df.label == "busy")].cpu_percent, busy.pid, window
    )
    assert list(df.columns) == list(COLUMNS)
    proc = df[df.kind == "process"]
    assert set(proc.label) == {"busy", "sleepy"}
    b, s = proc[proc.label == "busy"], proc[proc.label == "sleepy"]
    assert (b.pid == busy.pid).all() and (b.rss_bytes > 0).all() and (b.mem_percent > 0).all()
    assert s.cpu_percent.dropna().max() < 10, s.cpu_percent.tolist()
    assert len(b) == len(s) == summary["ticks"] and b.cpu_percent.isna().sum() <= 1
    sysrows = df[df.kind == "system"]
    assert len(sysrows) == summary["ticks"] and (sysrows.rss_bytes > 0).all()
    assert sysrows.cpu_percent.dropna().between(0, 100).all()
    assert sysrows.cpu_percent.dropna().max() > 20  # one of two cores is spinning
    cpus = df[df.kind == "cpu"]
    assert len(cpus) == summary["ticks"] * cpus.name.nunique() and cpus.name.nunique() >= 1
    assert 0 <= summary["overhead_percent"] < 50 and summary["sampler_cpu_s"] >= 0
    assert summary["errors"] == [] and summary["rows"] == len(df)


def test_thread_rows_like_top_h(tmp_path, procs):
    multi = procs("multi", THREADS)
    settled(multi.pid)  # its main thread asleep, the other two started
    _, df = sample(tmp_path, 1.6, 5, lambda: {"multi": multi.pid})
    proc = df[df.kind == "process"]
    assert proc.num_threads.iloc[-1] == 3  # once its threads run
    threads = df[df.kind == "thread"]
    assert threads.tid.nunique() == 3 and (threads.pid == multi.pid).all()
    per_thread = threads.groupby("tid").cpu_percent.max()
    # one thread spins, one sleeps in a loop, the main thread sleeps (however loaded the machine)
    spin = per_thread.max()
    assert spin > 10 and (per_thread < min(10, spin / 3)).sum() == 2, per_thread
    assert threads.name.notna().all()  # the kernel's thread names (comm)


def test_children_and_processes_that_come_and_go(tmp_path, procs):
    parent = procs(
        "parent",
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
        "time.sleep(60)\n",
    )
    short = procs("short", "import time; time.sleep(0.5)")
    deadline = time.monotonic() + 10
    while not psutil.Process(parent.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    (spinner,) = psutil.Process(parent.pid).children()
    window = spin_window(spinner.pid)
    _, df = sample(
        tmp_path, 1.5, 4, lambda: {"parent": parent.pid, "short": short.pid, "gone": 999_999_999}
    )
    fam = df[(df.kind == "process") & (df.label == "parent")]
    assert fam.pid.nunique() == 2  # the parent and its child, under the parent's label
    child = fam[fam.pid != parent.pid]
    assert (child.pid == spinner.pid).all()
    assert_busy_as_measured(child.cpu_percent, spinner.pid, window)
    s = df[(df.kind == "process") & (df.label == "short")]
    assert 0 < len(s) < len(fam) / 2  # sampled while alive, then no more rows
    assert "gone" not in set(df.label.dropna())


@pytest.mark.parametrize("hz", [1, 10])
def test_rows_follow_the_rate(tmp_path, procs, hz):
    p = procs("sleepy", "import time; time.sleep(60)")
    summary, df = sample(tmp_path, 1.5, hz, lambda: {"p": p.pid})
    expected = 1 + int(1.5 * hz)  # a tick at t=0, then one every period
    assert expected - 2 <= summary["ticks"] <= expected + 1, summary
    assert len(df[df.kind == "process"]) == summary["ticks"]
    assert summary["late_ticks"] <= summary["ticks"]
    t = df[df.kind == "system"].t.to_numpy()
    assert t[0] < 0.5 and (t[1:] > t[:-1]).all()


@pytest.mark.parametrize("hz", [0, -1, 10.5, 100, float("nan"), "fast"])
def test_rate_out_of_range(tmp_path, hz):
    with pytest.raises(ValueError, match="0 < hz <= 10"):
        Sampler(tmp_path / "s.csv", hz=hz)


def test_failing_pids_callback_does_not_stop_sampling(tmp_path):
    def pids():
        raise RuntimeError("boom")

    summary, df = sample(tmp_path, 0.5, 10, pids)
    assert summary["ticks"] >= 3 and len(df[df.kind == "system"]) == summary["ticks"]
    assert any("boom" in e for e in summary["errors"])
