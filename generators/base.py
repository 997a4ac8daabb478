"""The one small interface every generator adapter implements.

A run calls, in order: `prepare(scenario, run_dir, seed, endpoint)` (write configuration, check
that the tool exists: fail here, before anything is sent), `start()`, then `wait(timeout)` until it returns
True or the run decides to `stop()`. `counters()` may be called at any time and after the end;
loss is always computed from these counters the same way: sent by the generator vs seen on the
wire vs seen by the device under test.
"""

from __future__ import annotations

import abc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from testbed.proc import CommandRecord
    from testbed.scenario import Scenario


@dataclass(frozen=True)
class Endpoint:
    """Where a live generator sends: interface `iface` inside network namespace `netns`.

    `endpoint=None` in `prepare` means offline (the generator writes capture.pcap itself, when it
    can). `pace` is `realtime` (the scenario's timestamps) or `topspeed` (as fast as possible,
    seed 001's "packets/sec 0"); `duration_s` bounds a topspeed run."""

    netns: str
    iface: str
    pace: str = "realtime"
    duration_s: float | None = None

    def argv(self, *command: str) -> list[str]:
        """`command` run inside the namespace (argument list, never a shell string)."""
        return ["ip", "netns", "exec", self.netns, *command]


class GeneratorError(Exception):
    """The generator cannot run or failed; the message says why and what to do."""


@dataclass
class Counters:
    packets_attempted: int = 0
    packets_sent: int = 0
    packets_failed: int = 0
    bytes_attempted: int = 0
    bytes_sent: int = 0
    bytes_failed: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Progress:
    """How far a generator is: `done` out of `total` units (virtual seconds for the engine)."""

    done: float
    total: float
    packets: int


class Generator(abc.ABC):
    name: str = "generator"

    @abc.abstractmethod
    def prepare(
        self, scenario: "Scenario", run_dir: Path, seed: int, endpoint: Endpoint | None = None
    ) -> None: ...

    @abc.abstractmethod
    def start(self, on_progress: Callable[[Progress], None] | None = None) -> None: ...

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> bool:
        """True once the generator has finished (by itself or after `stop`)."""

    @abc.abstractmethod
    def stop(self, interrupt: bool = False) -> None:
        """Stop early; `interrupt` means the user asked (Ctrl-C), not a failure."""

    @abc.abstractmethod
    def counters(self) -> Counters: ...

    @abc.abstractmethod
    def status(self) -> str:
        """`completed`, `interrupted`, `failed` or `running`."""

    @abc.abstractmethod
    def commands(self) -> list["CommandRecord"]:
        """Every process this adapter started, for the manifest."""

    def version(self) -> str:
        return "unknown"


# name -> "module:Class" of every adapter; imported only when used.
ADAPTERS = {
    "flowengine": "generators.flowengine:FlowEngine",
    "tcpreplay": "generators.replay:Replay",
    "scapy": "generators.scapysend:ScapySend",
    "ostinato": "generators.ostinato:Ostinato",
}


def get_generator(name: str, spec: object = None) -> Generator:
    """The adapter `name`; `spec` is its `GeneratorSpec` from the scenario's `testbed:` section."""
    import importlib

    if name not in ADAPTERS:
        raise GeneratorError(f"unknown generator {name!r}; available: {', '.join(sorted(ADAPTERS))}")
    module, cls = ADAPTERS[name].split(":")
    return getattr(importlib.import_module(module), cls)(spec)
