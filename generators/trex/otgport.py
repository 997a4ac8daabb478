"""One OTG port sent by TRex (`testbed otg serve`, a port located `trex:PLACE`).

The OTG side (testbed/otg/trexsender.py) turns a flow into TRex STL streams as plain data; this
module runs them: a TRex server (server.py: software mode, low_end) in the port's namespace on
its interface, and per traffic start one worker process (worker.py `otg-wait`, TRex's client in
its own process) that has imported the client and connected beforehand. Files of one port, in
the config's folder `trex-PORT/`:

    job-NNN.json   the streams (the OTG side's), written when worker NNN may acquire the port
    ready-NNN      worker NNN acquired the port, added the streams and cleared the counters
    go-NNN         {"start_at_ns", "counters", "summary", "started", "log"}: start then
    worker-NNN.log what worker NNN said before its start's log took over

`prepare` (set_config) brings the server up and the first worker to `ready`, so a start only
writes `go` (TRex's ~1.5 s start-up, the client's ~1 s import and the port's acquisition are
not part of it); a later start gives the next, already connected, worker its job and go at once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ntgcore.endpoint import Endpoint
from ntgcore.errors import GeneratorError
from ntgcore.files import replacing
from ntgcore.proc import CommandRecord, Process

from .server import ASYNC_PORT, SYNC_PORT, TrexServer, interface_mac, server_binary

WORKER = Path(__file__).resolve().parent / "worker.py"
READY_TIMEOUT_S = 30.0


class OtgPort:
    """TRex sending one OTG port's flow: `prepare(streams)`, then `start(...)` per start."""

    def __init__(self, name: str, endpoint: Endpoint, folder: Path) -> None:
        self.name, self.endpoint = name, endpoint
        self.dir = folder / f"trex-{name}"
        self.dir.mkdir(exist_ok=True)
        self.server: TrexServer | None = None
        self.streams: list[dict[str, Any]] = []
        self.next: tuple[int, Process] | None = None  # the worker waiting for its job or go
        self.ready = False  # that worker has its job and the port
        self.made = 0
        self.handed: list[Process] = []  # the workers given a start

    def prepare(self, streams: list[dict[str, Any]]) -> None:
        """The server, and a worker holding the port with these streams added."""
        self.streams = streams
        if self.server is None:
            mac = interface_mac(self.endpoint, self.endpoint.iface)
            self.server = TrexServer(server_binary(None), self.endpoint, self.dir, mac, mac).start()
        n, _ = self._worker()
        self._job(n)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (self.dir / f"ready-{n:03d}").exists():
            assert self.next is not None
            if self.next[1].poll() is not None or time.monotonic() > deadline:
                log = (self.dir / f"worker-{n:03d}.log").read_text(errors="replace")
                raise GeneratorError(
                    f"trex: the worker of port {self.name} did not get ready: "
                    f"{log.strip().splitlines()[-1:] or '(no output)'}"
                )
            time.sleep(0.02)
        self.ready = True

    def _worker(self) -> tuple[int, Process]:
        if self.next is None or self.next[1].poll() is not None:
            self.made += 1
            go = self.dir / f"go-{self.made:03d}"
            argv = self.endpoint.argv(
                sys.executable, "-W", "ignore", str(WORKER), "otg-wait", str(go)
            )
            with open(self.dir / f"worker-{self.made:03d}.log", "wb") as out:
                proc = Process(
                    f"trex-worker-{self.name}", argv, stdout=out, stderr=subprocess.STDOUT
                ).start()
            self.next, self.ready = (self.made, proc), False
        return self.next

    def _job(self, n: int) -> None:
        job = {
            "host": "127.0.0.1",
            "sync_port": SYNC_PORT,
            "async_port": ASYNC_PORT,
            "rpc_timeout": 10,
            "streams": self.streams,
            "ready": str(self.dir / f"ready-{n:03d}"),
        }
        with replacing(self.dir / f"job-{n:03d}.json") as tmp:
            tmp.write_text(json.dumps(job, indent=1) + "\n")

    def start(
        self,
        start_at_ns: int,
        counters: Path,
        summary: Path,
        started: Path,
        log: Path,
        packets: int | None = None,
    ) -> Process:
        """Send the streams from `start_at_ns` (CLOCK_REALTIME; at once when the worker is
        ready later); the worker keeps COUNTERS (the engine's `--counters` layout), writes
        SUMMARY at its end and STARTED when it started the traffic, its output into LOG;
        PACKETS, the streams' total (None: continuous), marks the counters finished with it.
        SIGUSR1 pauses it, SIGUSR2 resumes, SIGTERM stops."""
        n, proc = self._worker()
        if not self.ready:
            self._job(n)
        go = {
            "start_at_ns": start_at_ns,
            "counters": str(counters),
            "summary": str(summary),
            "started": str(started),
            "log": str(log),
            "packets": packets,
        }
        with replacing(self.dir / f"go-{n:03d}") as tmp:
            tmp.write_text(json.dumps(go) + "\n")
        self.handed.append(proc)
        self.next, self.ready = None, False
        self._worker()  # the next start's: imported and connected by then
        return proc

    def stop(self) -> list[CommandRecord]:
        """The waiting worker and the server stopped; the records of the processes not handed
        to a start."""
        out = []
        for proc in self.handed:  # done sending, releasing the port: not cut short
            if proc.wait(5) is None:
                proc.stop(signal.SIGTERM, grace=5)
        if self.next is not None:
            self.next[1].stop(signal.SIGTERM, grace=5)
            out.append(self.next[1].record)
            self.next = None
        if self.server is not None:
            self.server.stop()
            out.append(self.server.proc.record)
            self.server = None
        return out


__all__ = ["OtgPort"]
