"""The one process-lifecycle helper: start a tool, watch it, stop it, and record what happened.

Every process a run starts goes through `Process`, so the manifest can list every command line
with its times and exit status, and so nothing is left running when a run ends for any reason:
a child started from the main thread gets the kernel's parent-death signal (PR_SET_PDEATHSIG),
so even a `kill -9` of the testbed takes its tcpdump, drone and engine with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

import psutil

PR_SET_PDEATHSIG = 1
# What a child gets when the testbed dies: SIGKILL, because nobody is left to wait for an orderly
# stop, and a tool that catches SIGTERM (drone, Suricata) could outlive the run.
DEATH_SIGNAL = signal.SIGKILL
_LIBC = ctypes.CDLL(None, use_errno=True)  # looked up before any fork: the child only calls it
_SPAWN_WATCHERS: list[Callable[[Process], None]] = []


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The main thread is in `Process.start`'s Popen: an interrupt there is deferred to its end (raised
# inside Popen it would be dropped by an at-fork callback, or leave a child nobody holds).
_FORKING = threading.Event()
_DEFERRED: list[int] = []  # the signals deferred so, in order
_SIGNAL_NAMES: dict[int, str] = {
    signal.SIGINT: "SIGINT",
    signal.SIGTERM: "SIGTERM",
    signal.SIGKILL: "SIGKILL",
}


def describe_exit(code: int | None) -> str:
    if code is None:
        return "running"
    if code < 0:
        return f"killed by {_SIGNAL_NAMES.get(-code, f'signal {-code}')}"
    return f"exit status {code}"


@dataclass
class CommandRecord:
    name: str
    argv: list[str]
    started_utc: str = ""
    ended_utc: str | None = None
    exit_code: int | None = None
    status: str = "not started"
    note: str = ""
    pid: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            k: v for k, v in self.__dict__.items() if (v != "" and v is not None) or k == "status"
        }


def _die_with(parent: int) -> Callable[[], None]:
    """The child's set-up between fork and exec: the death signal when `parent` ends. The signal
    is tied to the thread that forked, hence only for children of the main thread; it survives
    `exec` (`ip netns exec` and `env` exec in turn) but not a change of user (tcpdump -Z)."""

    def setup() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the prctl: nobody would signal us
            os.kill(os.getpid(), DEATH_SIGNAL)

    return setup


def start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat field 22): with the pid,
    what tells it from a later process that got the same pid. None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def cmdline(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def same_process(pid: int, ticks: int | None, argv: list[str]) -> bool:
    """Whether `pid` is still the process started at `ticks` with `argv` (or with a tail of it:
    `ip netns exec NS tool ...` becomes `tool ...` once `ip` has exec'd)."""
    now = cmdline(pid)
    if ticks is None or start_ticks(pid) != ticks or not now:
        return False
    return any(argv[i:] == now for i in range(len(argv)))


def packet_ring_mapped(pid: int) -> bool:
    """Whether process PID or one of its descendants has mapped the ring of an AF_PACKET socket:
    a capture on an interface that libpcap has activated (it reads packets from then on), read
    from /proc (each process's namespace's /proc/PID/net/packet, its maps)."""
    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return False
    for proc in family:
        try:
            with open(f"/proc/{proc.pid}/net/packet") as f:
                inodes = {line.split()[-1] for line in f.readlines()[1:] if line.split()}
            with open(f"/proc/{proc.pid}/maps") as f:
                mapped = {
                    line.rsplit("socket:[", 1)[1].strip()[:-1] for line in f if "socket:[" in line
                }
        except OSError:
            continue
        if mapped & inodes:
            return True
    return False


@contextlib.contextmanager
def watch_spawns(callback: Callable[[Process], None]) -> Iterator[None]:
    """Call `callback(process)` after every `Process.start` inside the block (a live run records
    its children where `testbed cleanup` finds them)."""
    _SPAWN_WATCHERS.append(callback)
    try:
        yield
    finally:
        _SPAWN_WATCHERS.remove(callback)


@dataclass(frozen=True)
class Leftover:
    """A file or folder a process makes that outlives it when it is killed (a DPDK run folder):
    its owner removes it on an orderly stop; `testbed cleanup` removes it after a `kill -9` of the
    run, once the process is gone. `only_if_empty`: a shared folder, removed only when empty."""

    path: str
    only_if_empty: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "only_if_empty": self.only_if_empty}


@dataclass
class Process:
    """A child process with its own process group, so a stop reaches all of it. `leftovers`: what
    it leaves behind if killed (recorded in the run's mark before it starts)."""

    name: str
    argv: list[str]
    stdout: IO[Any] | int | None = None
    stderr: IO[Any] | int | None = None
    cwd: Path | None = None
    leftovers: list[Leftover] = field(default_factory=list)
    record: CommandRecord = field(init=False)
    popen: subprocess.Popen[bytes] | None = field(default=None, init=False)
    start_ticks: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.record = CommandRecord(self.name, [str(a) for a in self.argv])

    def start(self) -> Process:
        self.record.started_utc = utc_now()
        main = threading.current_thread() is threading.main_thread()
        deferred = len(_DEFERRED)
        if main:
            _FORKING.set()
        try:
            self.popen = subprocess.Popen(
                self.record.argv,
                stdout=self.stdout,
                stderr=self.stderr,
                stdin=subprocess.DEVNULL,
                cwd=self.cwd,
                start_new_session=True,  # our own Ctrl-C handling decides what the child gets
                preexec_fn=_die_with(os.getpid()) if main else None,
            )
        except OSError as exc:
            self.record.status = "failed to start"
            self.record.note = str(exc)
            if main and len(_DEFERRED) > deferred:
                raise Interrupted(_DEFERRED[-1]) from exc
            raise
        finally:
            if main:
                _FORKING.clear()
        if (
            main and len(_DEFERRED) > deferred
        ):  # a stop signal came while Popen ran: its child is ours now
            self.stop(grace=1)
            raise Interrupted(_DEFERRED[-1])
        self.record.status = "running"
        self.record.pid = self.popen.pid
        self.start_ticks = start_ticks(self.popen.pid)
        for watcher in list(_SPAWN_WATCHERS):
            watcher(self)
        return self

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def poll(self) -> int | None:
        return self._finish(self.popen.poll()) if self.popen else None

    def wait(self, timeout: float | None = None) -> int | None:
        """Exit code, or None if still running after `timeout` seconds. Interrupted (Ctrl-C,
        SIGTERM raised by `Interrupts(raising=True)`), it stops the child before it raises."""
        if not self.popen:
            return None
        try:
            return self._finish(self.popen.wait(timeout))
        except subprocess.TimeoutExpired:
            return None
        except BaseException:
            self.stop(grace=5)  # SIGTERM first: a tool that writes a summary on it still does
            raise

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes] | None:
        """Read the child's piped stdout and stderr to their end and wait for it: (out, err), b""
        for a stream that is not a pipe; or None when `timeout` seconds pass first, the child
        then stopped (SIGTERM, SIGKILL a second later)."""
        assert self.popen is not None, "communicate() before start()"
        try:
            out, err = self.popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop(grace=1)
            return None
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): the child does not outlive the wait
            self.stop(grace=5)
            raise
        self._finish(self.popen.returncode)
        return out or b"", err or b""

    def send_signal(self, sig: int) -> None:
        if self.popen and self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, sig: int = signal.SIGTERM, grace: float = 5.0) -> int | None:
        """Send `sig`; after `grace` seconds, SIGKILL. Returns the exit code."""
        if not self.popen:
            return None
        if self.popen.poll() is None:
            self.send_signal(sig)
            deadline = time.monotonic() + grace
            while self.popen.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if self.popen.poll() is None:
                self.send_signal(signal.SIGKILL)
                self.record.note = (
                    f"did not stop within {grace:g}s of {_SIGNAL_NAMES.get(sig, str(sig))}; killed"
                )
        return self._finish(self.popen.wait())

    def _finish(self, code: int | None) -> int | None:
        if code is not None and self.record.ended_utc is None:
            self.record.ended_utc = utc_now()
            self.record.exit_code = code
            self.record.status = describe_exit(code)
        return code


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived in a block of `Interrupts(raising=True)`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


class Interrupts:
    """Turns SIGINT/SIGTERM/SIGHUP into a flag the run loop acts on, so stopping is always orderly
    (our children run in their own sessions: without this, a closed terminal would orphan them).
    `raising`: raise `Interrupted` at once instead (a command with no loop of its own to poll a
    flag unwinds through its `finally`s). Either way the handlers are installed whatever the
    signals' dispositions were: a background job of a non-interactive shell starts with SIGINT
    ignored, and Python then never raises KeyboardInterrupt on its own."""

    def __init__(self, raising: bool = False) -> None:
        self.received: int | None = None
        self.raising = raising
        self._old: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in _STOP_SIGNALS:  # HUP: the terminal closed
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        if self.raising:
            if _FORKING.is_set():
                _DEFERRED.append(signum)  # `Process.start` raises it once Popen has returned
                return
            raise Interrupted(signum)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


@dataclass(frozen=True)
class Tool:
    """A program a generator needs: checked before anything starts, with the package that has it."""

    command: str
    package: str
    install: str = ""  # how to install, when not `apt-get install <package>`

    def found(self) -> bool:
        return shutil.which(self.command) is not None
