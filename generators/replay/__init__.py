"""Adapter for tcpreplay: replays a pcap onto the testbed interface.

The pcap is `spec.pcap`, or, when the scenario names none, the scenario's own flows compiled
offline by the native engine into `<run>/tcpreplay-input/capture.pcap` first, so that every
scenario can be replayed. Pacing: `realtime` keeps the pcap's time stamps, `topspeed` is
`--topspeed`; `endpoint.duration_s` becomes `--duration` (and, with no `spec.loop`, the file is
looped until then, and only its first LOOP_PACKETS packets are compiled: a top-speed flow may
have billions), `spec.loop` is `--loop`, `spec.preload` is `--preload-pcap`.
"""

from __future__ import annotations

import math
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Literal

from pydantic import Field

from ntgcore.endpoint import Endpoint
from ntgcore.errors import GeneratorError
from ntgcore.generator import Capabilities, Counters, GeneratorPlugin, ProcessGenerator
from ntgcore.proc import Process, Tool
from ntgcore.scenario import GeneratorSpec, Scenario

from ..flowengine import FlowEngine, memory

INSTALL = "apt-get install tcpreplay"
LOG = "tcpreplay.log"

_ACTUAL = re.compile(r"Actual:\s*(\d+)\s+packets\s+\((\d+)\s+bytes\)\s+sent")
_FIELD = re.compile(r"^\s*(Successful|Failed|Truncated) packets:\s*(\d+)", re.M)


LOOP_PACKETS = 100_000  # packets of the scenario compiled for a file looped until a duration


def parse_stats(text: str) -> dict[str, int] | None:
    """tcpreplay's closing statistics; None when it printed none (it did not get that far)."""
    m = None
    for m in _ACTUAL.finditer(text):  # noqa: B007
        pass  # the last report counts (--stats prints intermediate ones)
    if m is None:
        return None
    out = {"actual_packets": int(m.group(1)), "actual_bytes": int(m.group(2))}
    for f in _FIELD.finditer(text, m.end()):
        out[f.group(1).lower()] = int(f.group(2))
    return out


def tcpreplay_version() -> str:
    try:
        p = subprocess.run(["tcpreplay", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"
    text = (p.stdout or p.stderr).strip().splitlines()
    return text[0] if text else "unknown"


class Replay(ProcessGenerator):
    name = "tcpreplay"
    STOP_SIGNAL = signal.SIGINT  # tcpreplay prints its statistics only on SIGINT

    def __init__(self, spec=None) -> None:
        super().__init__(spec)
        self._engine: FlowEngine | None = None
        self.pcap: Path | None = None

    def version(self) -> str:
        return tcpreplay_version()

    def prepare(self, scenario, run_dir: Path, seed: int, endpoint: Endpoint | None = None) -> None:
        if endpoint is None:
            raise GeneratorError(
                "tcpreplay replays onto an interface: the scenario needs a `testbed:` section "
                "that says where the generator sends (an offline run has nothing to replay onto)"
            )
        if shutil.which("tcpreplay") is None:
            raise GeneratorError(f"tcpreplay is not installed; install it with `{INSTALL}`")
        self._run_dir = Path(run_dir)
        pcap = getattr(self.spec, "pcap", None)
        if pcap is not None:
            pcap = Path(pcap)
            if not pcap.is_file():
                raise GeneratorError(
                    f"tcpreplay: pcap {pcap} does not exist; give an existing file "
                    "in the scenario's tcpreplay.pcap (or none to replay the "
                    "scenario's own flows)"
                )
        else:
            looped = endpoint.duration_s is not None and getattr(self.spec, "loop", None) is None
            pcap = self._compile(scenario, seed, LOOP_PACKETS if looped else None)
        self.pcap = pcap
        argv = ["tcpreplay", f"--intf1={endpoint.iface}"]
        if endpoint.pace == "topspeed":
            argv.append("--topspeed")
        loop = getattr(self.spec, "loop", None)
        if endpoint.duration_s is not None:
            if endpoint.duration_s <= 0:
                raise GeneratorError(f"duration {endpoint.duration_s} s must be positive")
            argv.append(f"--duration={max(1, math.ceil(endpoint.duration_s))}")
            if loop is None:
                loop = 0  # tcpreplay: 0 = forever; --duration ends it
        if loop is not None:
            if int(loop) < 0:
                raise GeneratorError(f"tcpreplay loop {loop} must be >= 0 (0 = until the duration)")
            argv.append(f"--loop={int(loop)}")
        if getattr(self.spec, "preload", False):
            argv.append("--preload-pcap")
        argv.append(str(pcap))
        self._proc = Process(
            "tcpreplay", endpoint.argv(*argv), stdout=self.open_log(LOG), stderr=subprocess.STDOUT
        )

    def _compile(self, scenario, seed: int, max_packets: int | None = None) -> Path:
        """The scenario's flows as a pcap, written by the native engine offline; only the first
        MAX_PACKETS when the file is looped for a duration (a top-speed flow can have billions)."""
        assert self._run_dir is not None
        folder = self._run_dir / "tcpreplay-input"
        folder.mkdir(parents=True, exist_ok=True)
        self._engine = FlowEngine(max_packets=max_packets)
        self._engine.prepare(scenario, folder, seed, None)
        self._engine.start()
        self._engine.wait()
        if self._engine.status() != "completed":
            note = self._engine.commands()[0].note or self._engine.commands()[0].status
            raise GeneratorError(
                f"tcpreplay: compiling the scenario into a pcap with flowengine "
                f"failed: {note} (log: {folder / 'engine.log'})"
            )
        return folder / "capture.pcap"

    def start_failure(self, exc: OSError) -> str:
        return f"cannot start tcpreplay: {exc}; install it with `{INSTALL}`"

    def on_exit(self) -> None:
        assert self._proc is not None
        if self.status() == "failed" and not self._proc.record.note:
            self._proc.record.note = self.last_log_line(LOG) or self._proc.record.status

    def log_text(self) -> str:
        return self.read_log(LOG)

    def stats(self) -> dict[str, int] | None:
        return parse_stats(self.log_text())

    def counters(self) -> Counters:
        s = self.stats()
        if s is None:
            return Counters()
        # "Actual" counts every packet tcpreplay handed to the interface, failed ones included;
        # it is what the wire saw, also when interrupted (then "Successful" can miss the last
        # packet). Bytes exist only for "Actual": with failures, the bytes sent are estimated
        # by the packet share.
        attempted, nbytes = s["actual_packets"], s["actual_bytes"]
        failed = min(s.get("failed", 0), attempted)
        sent = attempted - failed
        sent_bytes = nbytes if not failed else round(nbytes * sent / max(1, attempted))
        return Counters(attempted, sent, failed, nbytes, sent_bytes, nbytes - sent_bytes)

    def status(self) -> str:
        status = super().status()
        if status not in ("not started", "running") and self._stopped_by:
            return "interrupted"  # as for the engine: stopped early is `interrupted`
        return status

    def commands(self):
        return (list(self._engine.commands()) if self._engine else []) + super().commands()


class ReplaySpec(GeneratorSpec):
    """tcpreplay in a live run: which capture it replays, and how."""

    name: Literal["tcpreplay"] = "tcpreplay"
    pcap: str | None = Field(
        None,
        description="tcpreplay: the capture to replay (default: the "
        "scenario's flows, generated first by the native engine).",
    )
    loop: int | None = Field(None, ge=1, description="tcpreplay: play the capture this many times.")
    preload: bool = Field(False, description="tcpreplay: load the capture into memory first.")

    def fits(self, scenario: Scenario) -> str | None:
        """With no `pcap`, the engine compiles the scenario first: its memory must hold it."""
        return memory.check_memory(scenario) if self.pcap is None else None

    def state_bytes(self, scenario: Scenario) -> int | None:
        return memory.state_bytes(scenario) if self.pcap is None else None


PLUGIN = GeneratorPlugin(
    name="tcpreplay",
    options=ReplaySpec,
    adapter=Replay,
    tools=(Tool("tcpreplay", "tcpreplay"),),
    capabilities=Capabilities(offline=False, live=True, sessions=True),
    summary="replays a pcap (or the scenario's flows, compiled by the engine) with tcpreplay",
)


__all__ = ["PLUGIN", "Replay", "ReplaySpec", "parse_stats", "tcpreplay_version"]
