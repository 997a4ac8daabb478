"""The one process-lifecycle helper: start a tool, watch it, stop it, and record what happened.

Every process a run starts goes through `Process`, so the manifest can list every command line
with its times and exit status, and so nothing is left running when a run ends for any reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_SIGNAL_NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGKILL: "SIGKILL"}


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

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if (v != "" and v is not None) or k == "status"}


@dataclass
class Process:
    """A child process with its own process group, so a stop reaches all of it."""

    name: str
    argv: list[str]
    stdout: IO | int | None = None
    stderr: IO | int | None = None
    cwd: Path | None = None
    record: CommandRecord = field(init=False)
    popen: subprocess.Popen | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.record = CommandRecord(self.name, [str(a) for a in self.argv])

    def start(self) -> "Process":
        self.record.started_utc = utc_now()
        try:
            self.popen = subprocess.Popen(
                self.record.argv,
                stdout=self.stdout,
                stderr=self.stderr,
                stdin=subprocess.DEVNULL,
                cwd=self.cwd,
                start_new_session=True,  # our own Ctrl-C handling decides what the child gets
            )
        except OSError as exc:
            self.record.status = "failed to start"
            self.record.note = str(exc)
            raise
        self.record.status = "running"
        self.record.pid = self.popen.pid
        return self

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def poll(self) -> int | None:
        return self._finish(self.popen.poll()) if self.popen else None

    def wait(self, timeout: float | None = None) -> int | None:
        """Exit code, or None if still running after `timeout` seconds."""
        if not self.popen:
            return None
        try:
            return self._finish(self.popen.wait(timeout))
        except subprocess.TimeoutExpired:
            return None

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
                self.record.note = f"did not stop within {grace:g}s of {_SIGNAL_NAMES.get(sig, sig)}; killed"
        return self._finish(self.popen.wait())

    def _finish(self, code: int | None) -> int | None:
        if code is not None and self.record.ended_utc is None:
            self.record.ended_utc = utc_now()
            self.record.exit_code = code
            self.record.status = describe_exit(code)
        return code


class Interrupts:
    """Turns SIGINT/SIGTERM/SIGHUP into a flag the run loop acts on, so stopping is always orderly
    (our children run in their own sessions: without this, a closed terminal would orphan them)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # HUP: the terminal closed
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.received = signum

    def __exit__(self, *exc) -> None:
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
