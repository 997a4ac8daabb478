"""Adapter for Scapy's `sendp`: the slow baseline of seed 001's generator comparison.

`prepare` writes `<run>/scapy-plan.json` (one entry per scenario flow: its first addresses and
ports, its smallest payload size, its timing) and the command that runs the worker
(`python -m generators.scapysend.worker PLAN`) inside the endpoint's namespace. The worker
writes `<run>/scapy-summary.json` at exit, also when stopped; the counters come from it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

from ntgcore.endpoint import Endpoint
from ntgcore.errors import GeneratorError
from ntgcore.generator import Capabilities, Counters, GeneratorPlugin, ProcessGenerator
from ntgcore.proc import Process
from ntgcore.scenario import GeneratorSpec

PLAN = "scapy-plan.json"
SUMMARY = "scapy-summary.json"
LOG = "scapy.log"
# the worker's own exit codes after SIGINT/SIGTERM, and the same signals before its handlers ran
EXIT_STATUS = {
    0: "completed",
    130: "interrupted",
    143: "interrupted",
    -2: "interrupted",
    -15: "interrupted",
}


def _first_port(p, default: int) -> int:
    return p.bounds[0] if p is not None else default


def plan_flows(scenario) -> list[dict]:
    """What the worker needs of each flow of the scenario."""
    out = []
    for f in scenario.flows:
        out.append(
            {
                "name": f.name,
                "af": f.ip_version,
                "protocol": f.protocol,
                "smac": scenario.ethernet.src,
                "dmac": scenario.ethernet.dst,
                "src": str(f.src.interface.ip),
                "dst": str(f.dst.interface.ip),
                "sport": _first_port(f.src_port, 49152),
                "dport": _first_port(f.dst_port, 0),
                "size": f.payload.sizes[0],
                "payload_hex": f.payload.content.hex(),
                "start_ns": f.start,
                "period_ns": f.period_ns,
                "packets": f.packet_count,
                "reps": f.repetitions,
                "rep_period_ns": f.repeat_period_ns,
            }
        )
    return out


def scapy_version() -> str:
    spec = importlib.util.find_spec("scapy")
    if spec is None:
        return "unavailable (scapy is not installed)"
    import scapy

    return f"scapy {scapy.VERSION}"


class ScapySend(ProcessGenerator):
    name = "scapy"
    EXIT_STATUS = EXIT_STATUS

    def version(self) -> str:
        return scapy_version()

    def prepare(self, scenario, run_dir: Path, seed: int, endpoint: Endpoint | None = None) -> None:
        if endpoint is None:
            raise GeneratorError(
                "the scapy generator sends onto an interface: the scenario needs a `testbed:` "
                "section that says where the generator sends"
            )
        if importlib.util.find_spec("scapy") is None:
            raise GeneratorError(
                f"scapy is not installed; install it with `{sys.executable} -m pip install scapy`"
            )
        if endpoint.duration_s is not None and endpoint.duration_s <= 0:
            raise GeneratorError(f"duration {endpoint.duration_s} s must be positive")
        self._run_dir = Path(run_dir)
        plan = {
            "iface": endpoint.iface,
            "pace": endpoint.pace,
            "duration_s": endpoint.duration_s,
            "seed": seed,
            "summary": str(self._run_dir / SUMMARY),
            "flows": plan_flows(scenario),
        }
        (self._run_dir / PLAN).write_text(json.dumps(plan, indent=1) + "\n")
        # The worker imports this repository's packages, wherever it is installed or checked out.
        root = Path(__file__).resolve().parent.parent.parent
        path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
        argv = endpoint.argv(
            "env",
            f"PYTHONPATH={path}",
            sys.executable,
            "-m",
            "generators.scapysend.worker",
            str(self._run_dir / PLAN),
        )
        self._proc = Process("scapy", argv, stdout=self.open_log(LOG), stderr=subprocess.STDOUT)

    def start_failure(self, exc: OSError) -> str:
        return f"cannot start the scapy sender: {exc}"

    def on_exit(self) -> None:
        assert self._proc is not None
        if self.status() == "failed" and not self._proc.record.note:
            self._proc.record.note = self.summary().get("error") or self.last_log_line(LOG)

    def summary(self) -> dict:
        try:
            return json.loads((self._run_dir / SUMMARY).read_text())  # type: ignore[operator]
        except (OSError, ValueError, TypeError):
            return {}

    def counters(self) -> Counters:
        s = self.summary()
        sent, failed = s.get("sent", 0), s.get("failed", 0)
        nbytes, fbytes = s.get("bytes", 0), s.get("failed_bytes", 0)
        return Counters(sent + failed, sent, failed, nbytes + fbytes, nbytes, fbytes)


class ScapySpec(GeneratorSpec):
    """Scapy's sendp in a live run (seed 001's slow baseline); no options of its own."""

    name: Literal["scapy"] = "scapy"


PLUGIN = GeneratorPlugin(
    name="scapy",
    options=ScapySpec,
    adapter=ScapySend,
    capabilities=Capabilities(offline=False, live=True),
    summary="Scapy's sendp, one packet at a time (seed 001's baseline)",
)


__all__ = ["PLUGIN", "ScapySend", "ScapySpec", "plan_flows", "scapy_version"]
