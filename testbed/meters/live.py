"""A flow meter as the device under test of a live step: `MeterPart` starts it inside its
endpoint (a namespace: `Endpoint.argv`), capturing on the DUT's interface and exporting to the
collector part (testbed.meters.collector.part, started just before it in the same place), and
`meter_kind(meter)` makes its `DutKind` (each meter folder's `KIND`).

Its files go into the step folder's `meter/`: the meter's log, counters.json (its own counters;
the collector part adds its own and writes records.parquet when it stops, after the meter); a
meter that writes its own records (nfpcapd, argus) writes records.parquet itself.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from analysis.flowmeter.steps import METER_DIR
from ntgcore.endpoint import Endpoint, PowerSwitch
from ntgcore.parts import DutKind, Part
from ntgcore.proc import CommandRecord, Process, packet_ring_mapped
from ntgcore.registry import DUT_KINDS

from .base import Meter, MeterError, MeterSpec, tail, write_counters, write_outputs

START_GRACE_S = 0.5  # a meter that cannot open its interface or socket exits within this
READY_TIMEOUT_S = 10.0  # a meter on this machine opens its capture within this


class MeterPart(Part):
    """One meter, live, on the DUT's interface."""

    key = "dut"
    watched_first = True

    def __init__(
        self, meter: Meter, spec: MeterSpec, endpoint: Endpoint, step_dir: Path, scenario_dir: Path
    ) -> None:
        self.meter, self.spec, self.endpoint = meter, spec, endpoint
        self.tools = meter.tools
        self.folder = Path(step_dir) / METER_DIR
        self.log_path = self.folder / f"{meter.name}.log"
        self.proc: Process | None = None
        self.asked: list[CommandRecord] = []
        self.died: str | None = None
        self._stats: dict[str, Any] | None = None

    def _log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def start(self, abort: Callable[[], bool]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.meter.clear(self.folder)
        argv = self.meter.live_argv(
            self.spec, self.endpoint.iface, ("127.0.0.1", self.spec.collector_port), self.folder
        )
        with open(self.log_path, "wb") as log:
            self.proc = Process(
                f"dut-{self.meter.name}",
                self.endpoint.argv(*argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
            )
            try:
                self.proc.start()
            except OSError as exc:
                raise MeterError(f"cannot run {self.meter.name}: {exc}") from None
        # a meter in a namespace of this machine: until its capture's ring is mapped (libpcap
        # activated it: a packet sent before lands in a socket nobody reads yet, and nfpcapd,
        # for one, then drops every packet of a 20 kpps burst); in a VM: a grace period
        # and at least START_GRACE_S (pmacctd's plugin, a process of its own, starts after the
        # core opened the capture)
        local = not isinstance(self.endpoint, PowerSwitch) and self.proc.pid is not None
        started = time.monotonic()
        deadline = started + (READY_TIMEOUT_S if local else START_GRACE_S)
        ready = False
        while time.monotonic() < deadline and self.proc.poll() is None and not abort():
            if local and self.proc.pid is not None and packet_ring_mapped(self.proc.pid):
                ready = True
                time.sleep(max(0.0, started + START_GRACE_S - time.monotonic()))
                break
            time.sleep(0.02)
        if self.proc.poll() is not None:
            raise MeterError(
                f"the meter {self.meter.name} in {self.endpoint.where} exited at once "
                f"({self.proc.record.status}): {tail(self._log())}; see {self.log_path}"
            )
        if local and not ready and not abort():
            raise MeterError(
                f"the meter {self.meter.name} in {self.endpoint.where} did not open its capture "
                f"on {self.endpoint.iface} within {READY_TIMEOUT_S:g} s: {tail(self._log())}; "
                f"see {self.log_path}"
            )

    def problem(self) -> str | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        if self.died is None:
            self.died = (
                f"the device under test ({self.meter.name}) ended during the step: "
                f"{self.proc.record.status}: {tail(self._log(), 2)}"
            )
        return self.died

    def stop(self) -> dict[str, Any]:
        if self._stats is not None:
            return self._stats
        if self.proc is None:
            return {"kind": self.meter.name}
        asked = ""
        if self.proc.poll() is None:
            asked = self.meter.finish(self.proc, self.folder, self.endpoint.argv)
        self.proc.stop(grace=2)
        output = self._log() + "\n" + asked
        own = self.meter.counters(self.folder, output)
        counters: dict[str, Any] = {
            "meter": self.meter.name,
            "status": self.proc.record.status,
            "own": own,
        }
        records = None
        if self.meter.exports:  # the collector part adds its statistics and the records
            write_counters(self.folder, counters)
        else:
            records = self.meter.own_records(self.folder)
            counters["collected"] = records.num_rows
            write_outputs(self.folder, records, counters)
        self._stats = {
            "kind": self.meter.name,
            "meter": True,
            "version": self.spec.version,
            "rules": asdict(self.meter.rules(self.spec)),  # what the analysis scores against
            "status": self.proc.record.status,
            "counters": own,
            "log": f"{METER_DIR}/{self.log_path.name}",
            **({"collected": records.num_rows} if records is not None else {}),
            **({"died": self.died} if self.died else {}),
        }
        return self._stats

    def records(self) -> list[CommandRecord]:
        return [self.proc.record] if self.proc is not None else []

    def pids(self) -> dict[str, int]:
        if self.proc is None or self.proc.pid is None or self.proc.poll() is not None:
            return {}
        return {f"dut:{self.meter.name}": self.proc.pid}


@dataclass(frozen=True)
class MeterKind(DutKind):
    """A DUT kind that is a flow meter: `meter` is its Meter (what `testbed meter` runs on a
    capture and the conformance matrix on its patterns)."""

    meter: Meter | None = None


def meter_kind(meter: Meter) -> MeterKind:
    """The DUT kind of METER: its options model, its live part, its tools."""

    def part(spec: Any, endpoint: Endpoint, step_dir: Path, scenario_dir: Path) -> Part:
        return MeterPart(meter, spec, endpoint, step_dir, scenario_dir)

    return MeterKind(meter.name, meter.spec, part, meter.tools, meter.summary, meter=meter)


def meters() -> dict[str, Meter]:
    """The registered flow meters (DUT kinds that are meters), by name."""
    return {k.name: k.meter for k in DUT_KINDS if isinstance(k, MeterKind) and k.meter}


__all__ = ["METER_DIR", "MeterKind", "MeterPart", "meter_kind", "meters"]
