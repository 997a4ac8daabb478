"""ntgcore.proc.Process.communicate: the one way a short command's output is read with a time
limit (topology commands, VM commands, faults, the VRRP part, the match sweep, TRex's builder)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ntgcore.proc import Process, packet_ring_mapped, watch_spawns
from testbed import cleanup
from tests.conftest import REPO


def test_communicate_reads_both_streams_and_records_the_exit():
    proc = Process(
        "two streams",
        [sys.executable, "-c", "import sys; print('out'); sys.stderr.write('err'); sys.exit(3)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ).start()
    assert proc.communicate(30) == (b"out\n", b"err")
    assert proc.wait() == 3 and proc.record.exit_code == 3 and proc.record.ended_utc is not None


def test_a_stream_that_is_not_piped_reads_as_empty():
    proc = Process("no pipes", [sys.executable, "-c", "pass"], stdout=subprocess.DEVNULL).start()
    assert proc.communicate(30) == (b"", b"")


def test_a_timeout_stops_the_whole_process_group_and_returns_none():
    """A child that outlives the limit is stopped with its own children (the group), not left."""
    code = "import subprocess, sys, time; c = subprocess.Popen(['sleep', '60']); print(c.pid, flush=True); time.sleep(60)"
    proc = Process("sleeper", [sys.executable, "-c", code], stdout=subprocess.PIPE).start()
    assert proc.popen is not None and proc.popen.stdout is not None
    grandchild = int(proc.popen.stdout.readline())
    started = time.monotonic()
    assert proc.communicate(0.5) is None
    assert time.monotonic() - started < 10
    assert proc.record.exit_code is not None and proc.record.exit_code < 0  # ended by a signal
    for _ in range(100):  # the grandchild got the group's SIGTERM too
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the grandchild {grandchild} outlived the stop")


def test_children_started_from_several_threads_are_all_in_the_runs_mark(tmp_path, monkeypatch):
    """VMs boot together, the fault part starts commands from its thread: every start rewrites
    the run's mark, and none may fail or be lost (two threads once raced on its temporary file)."""
    monkeypatch.setattr(cleanup, "RUN_MARKS", tmp_path)
    mark = cleanup.RunMark(tmp_path / "20261127T000000Z-race", None, []).write()
    procs: list[Process] = []
    failures: list[BaseException] = []

    def start_some() -> None:
        try:
            for _ in range(25):
                procs.append(Process("sleep", ["sleep", "30"]).start())
        except BaseException as exc:
            failures.append(exc)

    try:
        with watch_spawns(mark.child):
            threads = [threading.Thread(target=start_some) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        assert not failures, failures
        doc = json.loads(mark.path.read_text())
        assert (
            sorted(c["pid"] for c in doc["children"]) == sorted(p.pid for p in procs)
            and len(procs) == 100
        )
        assert [p.name for p in tmp_path.iterdir()] == [mark.path.name]  # no temporary file left
    finally:
        for p in procs:
            p.stop(grace=1)


def _interrupted_child(body: str, tag: str) -> subprocess.CompletedProcess:
    """Run BODY in a fresh Python under `Interrupts(raising=True)`, with SIGINT ignored at start
    (as in a background job of a non-interactive shell); `sleep TAG` is the child it starts."""
    script = (
        "import os, signal, sys, threading\n"
        "from ntgcore.proc import Interrupted, Interrupts, Process\n"
        "with Interrupts(raising=True):\n"
        "    try:\n"
        + "".join(f"        {line}\n" for line in body.splitlines())
        + "    except Interrupted as exc:\n"
        "        import psutil\n"  # still running when the exception arrives? (not at exit:
        f"        left = [p.pid for p in psutil.process_iter(['cmdline']) if p.info['cmdline'] == ['sleep', '{tag}']]\n"
        "        where = exc.__traceback__\n"
        "        while where.tb_next:\n"
        "            where = where.tb_next\n"
        "        print('interrupted by', exc.name, 'in', where.tb_frame.f_code.co_name, 'left', left)\n"
    )  # the death signal kills it then)
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )


HIT = (
    "    os.kill(os.getpid(), signal.SIGINT)\n"
    "    sum(range(1000))\n"
)  # any Python code after it: the handler runs there


@pytest.mark.parametrize(
    "where,setup",
    [
        (
            "an at-fork callback",
            "def hit():\n" + HIT + "os.register_at_fork(after_in_parent=hit)\n",
        ),
        (
            "Popen's own code after the fork",
            "import subprocess\nclose = subprocess.Popen._close_pipe_fds\n"
            "def hit(*args):\n" + HIT + "    return close(*args)\n"
            "subprocess.Popen._close_pipe_fds = hit\n",
        ),
    ],
)
def test_a_signal_while_popen_runs_is_raised_after_it_and_the_child_is_stopped(where, setup):
    """Raised in an at-fork callback, Python would print the exception and drop it; raised in
    Popen after the fork, the child would be left running with nobody holding it. The handler
    defers it while Popen runs; `start` raises it then, and stops the child first."""
    done = _interrupted_child(
        setup + "Process('sleep', ['sleep', '30.25']).start()\nprint('not interrupted')", "30.25"
    )
    assert done.stdout == "interrupted by SIGINT in start left []\n", (where, done.stderr)
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "sig,call,tag", [("SIGTERM", "communicate", "30.5"), ("SIGHUP", "wait", "30.75")]
)
def test_an_interrupt_while_waiting_for_the_child_stops_it(sig, call, tag):
    """`communicate` (its output) and `wait` (its exit) both stop the child before they raise."""
    done = _interrupted_child(
        f"threading.Timer(0.5, os.kill, (os.getpid(), signal.{sig})).start()\n"
        f"Process('sleep', ['sleep', '{tag}'], stdout=-1).start().{call}()\n"
        "print('not interrupted')",
        tag,
    )
    assert done.stdout == f"interrupted by {sig} in _handle left []\n", done.stderr


@pytest.mark.usefixtures("root")
def test_a_capture_is_seen_once_its_ring_is_mapped_and_not_before():
    """packet_ring_mapped: a tcpdump (libpcap, an activated capture) is, and so is its parent; a
    process that has only opened a packet socket is not."""
    opener = Process(
        "opener",
        [
            sys.executable,
            "-c",
            "import socket, time; s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); "
            "print('open', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
    ).start()
    dump = Process("dump", ["tcpdump", "-i", "lo", "-w", os.devnull]).start()
    try:
        assert opener.popen.stdout.readline().strip() == b"open"
        deadline = time.monotonic() + 10
        while not packet_ring_mapped(dump.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert packet_ring_mapped(dump.pid)
        assert not packet_ring_mapped(opener.pid)  # a socket, no ring
        assert packet_ring_mapped(os.getpid())  # its children count: the tcpdump
    finally:
        dump.stop(grace=2)
        opener.stop(grace=2)
