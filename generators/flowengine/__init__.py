"""Adapter for the native C flow engine (`flowengine gen`); the engine's contract is README.md here."""

from __future__ import annotations

import functools
import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ntgcore.endpoint import Endpoint
from ntgcore.errors import GeneratorError
from ntgcore.generator import Capabilities, Counters, GeneratorPlugin, ProcessGenerator, Progress
from ntgcore.native_tools import env_var, executable
from ntgcore.proc import Process
from ntgcore.scenario import GeneratorSpec, Scenario

from . import memory
from .options import SECTION, FlowEngineOptions, options_of
from .session import compile_session

ENGINE = "flowengine"  # the program's name (ntgcore.native_tools)
ENGINE_ENV = env_var(ENGINE)  # NTG_FLOWENGINE
EXIT_STATUS = {0: "completed", 1: "failed", 2: "failed", 130: "interrupted", 143: "interrupted"}


def engine_path() -> Path:
    """The `flowengine` executable: $NTG_FLOWENGINE, else the one `pip install .` put on PATH."""
    return executable(ENGINE)


def engine_version(path: Path | None = None) -> str:
    try:
        out = subprocess.run(
            [str(path or engine_path()), "version"], capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or out.stderr.strip()
    except (OSError, GeneratorError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"


@functools.cache
def engine_options(path: Path) -> str:
    """The usage text of `flowengine gen --help` (which options this build has), or ""."""
    try:
        return subprocess.run(
            [str(path), "gen", "--help"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


class FlowEngine(ProcessGenerator):
    name = "flowengine"
    EXIT_STATUS = EXIT_STATUS

    def __init__(self, spec=None, max_packets: int | None = None) -> None:
        super().__init__(spec)
        self.max_packets = max_packets  # stop after this many packets (engine status `limited`)
        self._reader: threading.Thread | None = None
        self._binary: Path | None = None
        self._last_second = 0
        self.stats_error: str | None = None

    def version(self) -> str:
        return engine_version(self._binary)

    def prepare(self, scenario, run_dir: Path, seed: int, endpoint: Endpoint | None = None) -> None:
        self._binary = engine_path()
        self._run_dir = run_dir
        session = run_dir / "session.ntg"
        session.write_text(compile_session(scenario, seed))
        horizon = max(
            [f.last_due_ns for f in scenario.flows] + [s.horizon_ns for s in scenario.sessions]
        )
        self._last_second = max(1, horizon // 1_000_000_000 + 1)
        sink = ["-o", str(run_dir / "capture.pcap")]
        if endpoint is not None:  # live: the capture comes from the testbed's tcpdump
            sink = ["--iface", endpoint.iface, "--pace", endpoint.pace]
        argv = [
            str(self._binary),
            "gen",
            str(session),
            *sink,
            "--seed",
            str(seed),
            "--summary",
            str(run_dir / "engine-summary.json"),
            "--flows",
            str(run_dir / "engine-flows.csv"),
        ]
        options = options_of(scenario)
        if options.planner != "exact":
            argv += ["--planner", options.planner]
        if options.checksum_offload:
            argv += ["--csum-offload"]
        if self.max_packets is not None:
            argv += ["--max-packets", str(self.max_packets)]
        if options.threads > 1:
            argv += ["--threads", str(options.threads)]
        if (
            endpoint is not None
            and endpoint.start_at_ns is not None
            and "--start-at" in engine_options(self._binary)
        ):
            argv = endpoint.argv_self_held(
                *argv, "--start-at", str(endpoint.start_at_ns)
            )  # waits after set-up
        elif endpoint is not None:
            argv = endpoint.argv(*argv)
        self._proc = Process(
            "flowengine", argv, stdout=subprocess.PIPE, stderr=self.open_log("engine.log")
        )

    def start_failure(self, exc: OSError) -> str:
        return f"cannot start {self._binary}: {exc}"

    def on_start(self, on_progress: Callable[[Progress], None] | None) -> None:
        self._reader = threading.Thread(
            target=self._copy_stats, args=(on_progress,), name="flowengine-stats", daemon=True
        )
        self._reader.start()

    def _copy_stats(self, on_progress: Callable[[Progress], None] | None) -> None:
        """Stream the engine's per-second CSV into engine-stats.csv and report progress."""
        assert self._proc is not None and self._proc.popen is not None and self._run_dir
        packets = 0
        stream = self._proc.popen.stdout
        try:
            with open(self._run_dir / "engine-stats.csv", "w") as out:
                for line in stream:  # type: ignore[union-attr]
                    text = line.decode(errors="replace")
                    out.write(text)
                    fields = text.split(",")
                    if on_progress and fields and fields[0].isdigit():
                        packets += int(fields[1])
                        on_progress(Progress(int(fields[0]) + 1, self._last_second, packets))
        except OSError as exc:  # a full disk: say so once the engine ends, never block it
            self.stats_error = f"engine-stats.csv: {exc.strerror}"
            for _ in stream:  # type: ignore[union-attr]
                pass

    def on_exit(self) -> None:
        if self._reader:
            self._reader.join()
        assert self._proc is not None and self._run_dir is not None
        if self.status() != "failed" or self._stopped_by:
            return
        log = self.read_log("engine.log").splitlines()
        messages = [line for line in log if line.strip() and not line.startswith("{")]
        reason = messages[-1] if messages else (self.stats_error or self._proc.record.status)
        self._proc.record.note = reason

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


class FlowEngineSpec(GeneratorSpec):
    """The native engine in a live run (its planning options are the scenario's `flowengine:`)."""

    name: Literal["flowengine"] = "flowengine"

    def fits(self, scenario: Scenario) -> str | None:
        return memory.check_memory(scenario)

    def state_bytes(self, scenario: Scenario) -> int | None:
        return memory.state_bytes(scenario)


PLUGIN = GeneratorPlugin(
    name="flowengine",
    options=FlowEngineSpec,
    adapter=FlowEngine,
    capabilities=Capabilities(offline=True, live=True, sessions=True),
    summary="the native C flow engine (generators/flowengine/README.md)",
    section=(SECTION, FlowEngineOptions),
    session=compile_session,
)
