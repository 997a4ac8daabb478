"""A server process that a generator starts for one run, inside its endpoint (Ostinato's drone,
the TRex server): one way to start it, know it is ready, watch it and stop it.

`EndpointServer(what, name, program, argv, endpoint, log_path, port)`: `start(timeout)` brings the endpoint's
loopback up (the server's RPC listens there; a topology leaves it down), starts the process with
its output in `log_path`, and returns once `port` accepts a connection on 127.0.0.1 inside the
endpoint, or raises GeneratorError (the server exited: its status and the end of its log; or it
never listened). `stop()` sends SIGTERM (SIGKILL after 5 s); `clean_exit` names the exit status
such a server gives on SIGTERM, which is then noted in the record instead of looking like a crash.
Subclasses add what is their own (drone's RPC client, TRex's DPDK files) around these.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from .endpoint import Endpoint
from .errors import GeneratorError
from .proc import Process


class EndpointServer:
    """One server process at `endpoint`; `what` names it in messages ("drone", "trex: the
    server"); `hint` is added to the message when the program cannot be started at all."""

    def __init__(
        self,
        what: str,
        name: str,
        program: str,
        argv: list[str],
        endpoint: Endpoint,
        log_path: Path,
        port: int,
        cwd: Path | None = None,
        clean_exit: int | None = None,
        hint: str = "",
    ) -> None:
        self.what, self.program, self.endpoint = what, program, endpoint
        self.log_path, self.port, self.clean_exit, self.hint = log_path, port, clean_exit, hint
        self.proc = Process(name, argv, cwd=cwd)
        self.started_s: float | None = None  # launch to the port listening
        self._log: IO[bytes] | None = None

    def start(self, timeout: float = 15.0) -> EndpointServer:
        subprocess.run(
            self.endpoint.argv("ip", "link", "set", "lo", "up"),
            capture_output=True,
            timeout=10,
            check=True,
        )
        self._log = open(self.log_path, "wb")
        self.proc.stdout = self._log
        self.proc.stderr = subprocess.STDOUT
        t0 = time.monotonic()
        try:
            self.proc.start()
        except OSError as exc:
            self.stop()
            raise GeneratorError(
                f"{self.what}: cannot start {self.program}: {exc}"
                + (f"; {self.hint}" if self.hint else "")
            ) from exc
        while time.monotonic() < t0 + timeout:
            if self.proc.poll() is not None:
                self.stop()
                raise GeneratorError(
                    f"{self.what} exited at start-up ({self.proc.record.status}); its output is in "
                    f"{self.log_path}: {self.log_tail()}"
                )
            try:
                self.endpoint.connect("127.0.0.1", self.port, 1.0).close()
                self.started_s = time.monotonic() - t0
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise GeneratorError(
            f"{self.what} did not listen on 127.0.0.1:{self.port} in "
            f"{self.endpoint.where} within {timeout:g}s; see {self.log_path}"
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        ours = self.proc.popen is not None and self.proc.popen.poll() is None
        code = self.proc.stop(signal.SIGTERM, grace=5)
        if ours and code is not None and code == self.clean_exit and not self.proc.record.note:
            self.proc.record.note = f"stopped with SIGTERM; {self.what} exits with {code} then"
        if self._log:
            self._log.close()
            self._log = None
        return code

    def log_tail(self, lines: int = 5) -> str:
        """The last LINES lines of the server's output, joined with " | " ('' when unreadable)."""
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def __enter__(self) -> EndpointServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["EndpointServer"]
