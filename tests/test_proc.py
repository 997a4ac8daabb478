"""ntgcore.proc.Process.communicate: the one way a short command's output is read with a time
limit (topology commands, VM commands, faults, the VRRP part, the match sweep, TRex's builder)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ntgcore.proc import Process


def test_communicate_reads_both_streams_and_records_the_exit():
    proc = Process("two streams", [sys.executable, "-c", "import sys; print('out'); sys.stderr.write('err'); sys.exit(3)"],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE).start()  # fmt: skip
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
