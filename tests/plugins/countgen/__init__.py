"""A test-only generator plugin: the whole of what adding a generator takes (docs/architecture.md).

`countgen` writes the scenario's first `frames` packets as a pcap with no tool at all (offline),
or reports that it has nothing to send live. It exists to show that a generator is one folder:
its adapter, its options model and its PLUGIN, registered with one call (or one entry point)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Literal

from pydantic import Field

from ntgcore.generator import Capabilities, Counters, Generator, GeneratorPlugin
from ntgcore.scenario import GeneratorSpec


class CountGenSpec(GeneratorSpec):
    name: Literal["countgen"] = "countgen"
    frames: int = Field(3, ge=1, le=1000, description="countgen: frames written")


class CountGen(Generator):
    name = "countgen"

    def prepare(self, scenario, run_dir: Path, seed: int, endpoint=None) -> None:
        self.path, self.sent, self.state = Path(run_dir) / "capture.pcap", 0, "not started"
        self.frames = getattr(self.spec, "frames", 3)

    def start(self, on_progress=None) -> None:
        frame = bytes(60)
        with open(self.path, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
            for i in range(self.frames):
                f.write(struct.pack("<IIII", i, 0, len(frame), len(frame)) + frame)
        self.sent, self.state = self.frames, "completed"

    def wait(self, timeout=None) -> bool:
        return True

    def stop(self, interrupt: bool = False) -> None:
        pass

    def counters(self) -> Counters:
        return Counters(self.sent, self.sent, 0, 60 * self.sent, 60 * self.sent, 0)

    def status(self) -> str:
        return self.state

    def commands(self):
        return []


PLUGIN = GeneratorPlugin(
    name="countgen",
    options=CountGenSpec,
    adapter=CountGen,
    capabilities=Capabilities(offline=True, live=True),
)
