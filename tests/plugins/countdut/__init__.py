"""A test-only DUT kind: the whole of what adding a DUT kind takes (docs/architecture.md, "How to
add a DUT kind").

`countdut` counts what its interface received, with no tool but `cat`: it reads the interface's
statistic `counter` (/sys/class/net/IFACE/statistics/COUNTER, at the DUT's place) when the step
starts and when it stops, and reports the difference as `received`. It is one folder: its options
model, its part and its DUT_KIND, registered with one call (or one entry point)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Literal

from pydantic import Field

from ntgcore.endpoint import Endpoint
from ntgcore.errors import NtgError
from ntgcore.parts import DutKind, Part
from ntgcore.proc import CommandRecord, Process, Tool
from ntgcore.scenario import DutSpec


class CountDutSpec(DutSpec):
    kind: Literal["countdut"] = "countdut"
    counter: Literal["rx_packets", "rx_bytes"] = Field(
        "rx_packets", description="countdut: the interface statistic it counts."
    )


class CountDut(Part):
    key = "dut"  # its statistics are the step's `dut`, as every DUT's
    watched_first = True

    def __init__(self, spec: CountDutSpec, endpoint: Endpoint, step_dir: Path, scenario_dir: Path):
        self.spec, self.endpoint = spec, endpoint
        self.path = f"/sys/class/net/{endpoint.iface}/statistics/{spec.counter}"
        self.reads: list[CommandRecord] = []
        self.before: int | None = None

    def _read(self) -> int:
        proc = Process("countdut", self.endpoint.argv("cat", self.path), stdout=subprocess.PIPE)
        self.reads.append(proc.record)
        out = proc.start().communicate(timeout=10)
        if out is None or proc.record.exit_code != 0:
            raise NtgError(f"countdut: cannot read {self.path} in {self.endpoint.where}")
        return int(out[0])

    def start(self, abort) -> None:
        self.before = self._read()

    def stop(self) -> dict:
        if self.before is None:
            return {"kind": "countdut"}
        return {
            "kind": "countdut",
            "counter": self.spec.counter,
            "received": self._read() - self.before,
        }

    def records(self) -> list[CommandRecord]:
        return self.reads


DUT_KIND = DutKind("countdut", CountDutSpec, CountDut, (Tool("cat", "coreutils"),), "counts rx")
