"""Adapter for the native C flow engine (`flowengine gen`); the engine's contract is README.md here."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sysconfig
import threading
from pathlib import Path
from typing import Callable

from ..base import Counters, Endpoint, Generator, GeneratorError, Progress

ENGINE_ENV = "NTG_FLOWENGINE"
EXIT_STATUS = {0: "completed", 1: "failed", 2: "failed", 130: "interrupted", 143: "interrupted"}


def engine_path() -> Path:
    """The `flowengine` executable: $NTG_FLOWENGINE, else the one `pip install .` put on PATH."""
    override = os.environ.get(ENGINE_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise GeneratorError(f"NTG_FLOWENGINE={override} is not a file")
        return path
    found = shutil.which("flowengine")
    if found:
        return Path(found)
    beside = Path(sysconfig.get_path("scripts")) / "flowengine"
    if beside.is_file():
        return beside
    raise GeneratorError(
        "the flowengine executable was not found; build and install it with `pip install .` "
        "from the repository (or run ./bootstrap.sh quickstart), or set NTG_FLOWENGINE"
    )


def engine_version(path: Path | None = None) -> str:
    try:
        out = subprocess.run(
            [str(path or engine_path()), "version"], capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or out.stderr.strip()
    except (OSError, GeneratorError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"


class FlowEngine(Generator):
    name = "flowengine"

    def __init__(self, spec=None, max_packets: int | None = None) -> None:
        self.spec = spec
        self.max_packets = max_packets  # stop after this many packets (engine status `limited`)
        self._proc = None
        self._reader: threading.Thread | None = None
        self._run_dir: Path | None = None
        self._binary: Path | None = None
        self._last_second = 0
        self._stopped_by: str | None = None

    def version(self) -> str:
        return engine_version(self._binary)

    def prepare(self, scenario, run_dir: Path, seed: int, endpoint: Endpoint | None = None) -> None:
        from testbed.compile import compile_session
        from testbed.proc import Process

        self._binary = engine_path()
        self._run_dir = run_dir
        session = run_dir / "session.ntg"
        session.write_text(compile_session(scenario, seed))
        horizon = max(f.last_due_ns for f in scenario.flows)
        self._last_second = max(1, horizon // 1_000_000_000 + 1)
        sink = ["-o", str(run_dir / "capture.pcap")]
        if endpoint is not None:  # live: the capture comes from the testbed's tcpdump
            sink = ["--iface", endpoint.iface, "--pace", endpoint.pace]
        argv = [
            str(self._binary), "gen", str(session), *sink,
            "--seed", str(seed),
            "--summary", str(run_dir / "engine-summary.json"),
            "--flows", str(run_dir / "engine-flows.csv"),
        ]  # fmt: skip
        options = scenario.flowengine
        if options.planner != "exact":
            argv += ["--planner", options.planner]
        if options.checksum_offload:
            argv += ["--csum-offload"]
        if self.max_packets is not None:
            argv += ["--max-packets", str(self.max_packets)]
        if options.threads > 1:
            argv += ["--threads", str(options.threads)]
        if endpoint is not None:
            argv = endpoint.argv(*argv)
        self._log = open(run_dir / "engine.log", "wb")
        self._proc = Process("flowengine", argv, stdout=subprocess.PIPE, stderr=self._log)

    def start(self, on_progress: Callable[[Progress], None] | None = None) -> None:
        assert self._proc is not None and self._run_dir is not None, "prepare() first"
        try:
            self._proc.start()
        except OSError as exc:
            raise GeneratorError(f"cannot start {self._binary}: {exc}") from exc
        self._reader = threading.Thread(
            target=self._copy_stats, args=(on_progress,), name="flowengine-stats", daemon=True
        )
        self._reader.start()

    def _copy_stats(self, on_progress: Callable[[Progress], None] | None) -> None:
        """Stream the engine's per-second CSV into engine-stats.csv and report progress."""
        assert self._proc is not None and self._proc.popen is not None and self._run_dir
        packets = 0
        with open(self._run_dir / "engine-stats.csv", "w") as out:
            for line in self._proc.popen.stdout:  # type: ignore[union-attr]
                text = line.decode(errors="replace")
                out.write(text)
                fields = text.split(",")
                if on_progress and fields and fields[0].isdigit():
                    packets += int(fields[1])
                    on_progress(Progress(int(fields[0]) + 1, self._last_second, packets))

    def wait(self, timeout: float | None = None) -> bool:
        assert self._proc is not None
        done = self._proc.wait(timeout) is not None
        if done:
            if self._reader:
                self._reader.join()
            self._log.close()
            self._check_failure()
        return done

    def stop(self, interrupt: bool = False) -> None:
        if self._proc is None:
            return
        self._stopped_by = "SIGINT" if interrupt else "SIGTERM"
        self._proc.stop(signal.SIGINT if interrupt else signal.SIGTERM, grace=10)
        self.wait()

    def summary(self) -> dict:
        assert self._run_dir is not None
        try:
            return json.loads((self._run_dir / "engine-summary.json").read_text())
        except (OSError, ValueError):
            return {}

    def counters(self) -> Counters:
        s = self.summary()
        packets, nbytes = s.get("packets", 0), s.get("bytes", 0)
        sent, sent_bytes = s.get("sent", packets), s.get("sent_bytes", nbytes)
        return Counters(packets, sent, s.get("failed", 0), nbytes, sent_bytes, nbytes - sent_bytes)

    def status(self) -> str:
        if self._proc is None or self._proc.record.exit_code is None:
            return "running" if self._proc and self._proc.popen else "not started"
        return EXIT_STATUS.get(self._proc.record.exit_code, "failed")

    def commands(self):
        return [self._proc.record] if self._proc else []

    def _check_failure(self) -> None:
        assert self._proc is not None and self._run_dir is not None
        if self.status() != "failed" or self._stopped_by:
            return
        log = (self._run_dir / "engine.log").read_text(errors="replace").splitlines()
        messages = [line for line in log if line.strip() and not line.startswith("{")]
        reason = messages[-1] if messages else self._proc.record.status
        self._proc.record.note = reason
