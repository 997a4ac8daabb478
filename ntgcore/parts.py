"""The contracts of a step's parts and of the device-under-test kinds, seen by every layer.

A step (testbed/executor.py) starts the parts its method planned (`Step.parts`: names in the
PARTS registry) through one protocol, `Part`, in the order of their `PartPlugin.order`; the
generators are prepared at `GENERATORS_ORDER` (a part after it, the faults, is armed last and
undone first). A part's statistics go into the step's manifest entry under its `key`.

A DUT kind (`testbed.dut.kind`) is a `DutKind` in the DUT_KINDS registry: its options model
(a DutSpec subclass with `kind: Literal["<its name>"]`, joined into the scenario by `kind`), the
tools it needs and the factory of its part. Both are registered like generators: one entry point
(groups `ntg_testbed.parts`, `ntg_testbed.dut_kinds`) or `register()` (docs/architecture.md).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .endpoint import Endpoint, Site
from .proc import CommandRecord, Tool
from .scenario import DutSpec, NoDutSpec, Scenario, TestbedSpec

# when a part starts, by its `PartPlugin.order`: lower first; stopped in reverse
CAPTURE_ORDER, DUT_ORDER, PAIR_ORDER, INLINE_ORDER, MONITOR_ORDER = 10, 20, 30, 40, 50
GENERATORS_ORDER = 60  # the generators are prepared here; parts above it are armed after them
FAULTS_ORDER = 70


class Part(abc.ABC):
    """One running piece of a step. `start` may raise (the step fails, the stack unwinds);
    `problem` says why a part that should run has ended; `stop` returns its statistics, which
    `record` puts into the step's entry (by default under `key`)."""

    key: str = "part"
    tools: tuple[Tool, ...] = ()  # checked before a run starts anything
    watched_first = False  # its `problem` is asked before the others' (the DUT: when it and the
    # capture both ended, the DUT is what failed)
    measures_loss = False  # True: the step's loss is its method's to count (no one-way count)

    @abc.abstractmethod
    def start(self, abort: Callable[[], bool]) -> None: ...

    def problem(self) -> str | None:
        return None

    def no_space(self) -> Path | None:
        """The file this part could not write because its file system is full (its `problem`
        then says so): the step stops and names it."""
        return None

    @abc.abstractmethod
    def stop(self) -> dict[str, Any]: ...

    def listed(self, entry: dict[str, Any]) -> None:
        """Called before the part starts: what the entry lists of it even if it fails to."""
        return None

    def record(self, entry: dict[str, Any], stats: dict[str, Any]) -> None:
        """Its statistics (from `stop`) into the step's entry."""
        entry[self.key] = stats

    def records(self) -> list[CommandRecord]:
        return []

    def pids(self) -> dict[str, int]:
        """Live processes to sample, by label."""
        return {}

    def busy(self) -> bool:
        """True while the part still has work the step waits for (the inline multiplier's
        client), like a running generator."""
        return False


@dataclass
class PartContext:
    """What a part is made from: the step (testbed.methods.Step), its scenario's testbed, the
    site, the step's folder, the scenario's folder, the run's seed and the live processes."""

    step: Any
    testbed: TestbedSpec
    site: Site
    step_dir: Path
    scenario_dir: Path
    seed: int
    pids: Callable[[], dict[str, int]]


def _nothing(_: Any) -> Sequence[Any]:
    return ()


def _never(_: Any) -> bool:
    return False


@dataclass(frozen=True)
class PartPlugin:
    """A part a method can plan, by name. `create` makes its part(s) for one step; `wanted`
    says whether every step of a scenario has it (its section is set: capture, dut, faults),
    else only the methods that plan it do; `tools` and `places` (`(field, ROLE:IFACE)` pairs,
    checked against the topology) are asked before the run starts."""

    name: str
    order: int
    create: Callable[[PartContext], list[Part]]
    wanted: Callable[[TestbedSpec], bool] = _never
    tools: Callable[[Scenario], Sequence[Tool]] = _nothing
    places: Callable[[TestbedSpec], Sequence[tuple[str, str]]] = _nothing
    summary: str = ""


@dataclass(frozen=True)
class DutKind:
    """A kind of device under test: `part(spec, endpoint, step_dir, scenario_dir)` makes it (None:
    the kind `none`, no DUT)."""

    name: str
    options: type[DutSpec]
    part: Callable[[DutSpec, Endpoint, Path, Path], Part] | None = None
    tools: tuple[Tool, ...] = field(default_factory=tuple)
    summary: str = ""


NO_DUT = DutKind("none", NoDutSpec, summary="no device under test (`dut:` omitted)")
