"""The generator plugin contract: what every adapter implements and what it declares.

A run calls, in order: `prepare(scenario, run_dir, seed, endpoint)` (write configuration, check
that the tool exists: fail here, before anything is sent), `start()`, then `wait(timeout)` until it
returns True or the run decides to `stop()`. `counters()` may be called at any time and after the
end; loss is always computed from these counters the same way: sent by the generator vs seen on
the wire vs seen by the device under test.

A generator plugin is one folder under `generators/` that exposes a `GeneratorPlugin` (its name,
its options model, the tools it needs, its capabilities and its adapter class) and is registered by
one entry point in pyproject.toml (group `ntg_testbed.generators`) or by `GENERATORS.register`.
"""

from __future__ import annotations

import abc
import json
import signal
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from .endpoint import Endpoint
from .errors import GeneratorError
from .proc import CommandRecord, Process, Tool
from .registry import GENERATORS
from .scenario import GeneratorSpec, Scenario, ScenarioSection

STATUSES = ("not started", "running", "completed", "interrupted", "failed")


@dataclass
class Counters:
    packets_attempted: int = 0
    packets_sent: int = 0
    packets_failed: int = 0
    bytes_attempted: int = 0
    bytes_sent: int = 0
    bytes_failed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Progress:
    """How far a generator is: `done` out of `total` units (virtual seconds for the engine)."""

    done: float
    total: float
    packets: int


class Generator(abc.ABC):
    name: str = "generator"

    def __init__(self, spec: GeneratorSpec | dict[str, Any] | None = None) -> None:
        self.spec = spec

    @abc.abstractmethod
    def prepare(
        self, scenario: Scenario, run_dir: Path, seed: int, endpoint: Endpoint | None = None
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
        """One of STATUSES: `not started`, `running`, `completed`, `interrupted` or `failed`."""

    @abc.abstractmethod
    def commands(self) -> list[CommandRecord]:
        """Every process this adapter started, for the manifest."""

    def version(self) -> str:
        return "unknown"

    def port_stats(self) -> dict[str, Any] | None:
        """The generator's own view of its ports (Ostinato's getStats), when it has one."""
        return None

    def give_attack_sessions(self, sessions: list[dict[str, Any]], skipped: list[str]) -> None:
        """Before `prepare`: the scenario's `attacks:` TCP sessions as dialogues (the
        orchestration reads the rules: idsrules.attacks.tcp_dialogues), for an adapter
        whose options say it plays them (`GeneratorSpec.plays_attacks`); `skipped`: the rules left out."""
        raise GeneratorError(f"{self.name} does not play attack sessions")


class ProcessGenerator(Generator):
    """A generator that is one child process (plus helpers): start, watch, stop, exit status.

    Subclasses build `self._proc` in `prepare` (with `self.open_log`), map exit codes with
    EXIT_STATUS and may override `on_exit` to explain a failure from their log."""

    EXIT_STATUS: dict[int, str] = {0: "completed"}
    STOP_SIGNAL = signal.SIGTERM
    INTERRUPT_SIGNAL = signal.SIGINT
    STOP_GRACE_S = 10.0

    def __init__(self, spec: GeneratorSpec | None = None) -> None:
        super().__init__(spec)
        self._proc: Process | None = None
        self._log: IO[Any] | None = None
        self._run_dir: Path | None = None
        self._stopped_by: str | None = None

    def open_log(self, name: str) -> IO[Any]:
        assert self._run_dir is not None
        self._log = open(self._run_dir / name, "wb")
        return self._log

    def read_log(self, name: str) -> str:
        if self._run_dir is None:  # not prepared
            return ""
        try:
            return (self._run_dir / name).read_text(errors="replace")
        except OSError:
            return ""

    def read_json(self, name: str) -> dict[str, Any]:
        """A JSON file the process wrote into the run folder (its summary), or {} if none yet."""
        if self._run_dir is None:  # not prepared
            return {}
        try:
            summary: dict[str, Any] = json.loads((self._run_dir / name).read_text())
        except (OSError, ValueError):
            return {}
        return summary

    def start(self, on_progress: Callable[[Progress], None] | None = None) -> None:
        assert self._proc is not None, "prepare() first"
        try:
            self._proc.start()
        except OSError as exc:
            raise GeneratorError(self.start_failure(exc)) from exc
        self.on_start(on_progress)

    def start_failure(self, exc: OSError) -> str:
        return f"cannot start {self.name}: {exc}"

    def on_start(self, on_progress: Callable[[Progress], None] | None) -> None:
        """After the process started (a thread that reads its output, for example)."""

    def wait(self, timeout: float | None = None) -> bool:
        assert self._proc is not None
        done = self._proc.wait(timeout) is not None
        if done:
            if self._log is not None and not self._log.closed:
                self._log.close()
            self.on_exit()
        return done

    def on_exit(self) -> None:
        """Once the process has ended: say why it failed in its record's note."""

    def stop(self, interrupt: bool = False) -> None:
        if self._proc is None or self._proc.popen is None:
            return
        self._stopped_by = "SIGINT" if interrupt else "stop"
        self._proc.stop(
            self.INTERRUPT_SIGNAL if interrupt else self.STOP_SIGNAL, grace=self.STOP_GRACE_S
        )
        self.wait()

    def status(self) -> str:
        if self._proc is None or self._proc.popen is None:
            return "not started"
        code = self._proc.record.exit_code
        if code is None:
            return "running"
        return self.EXIT_STATUS.get(code, "failed")

    def commands(self) -> list[CommandRecord]:
        return [self._proc.record] if self._proc else []

    def last_log_line(self, name: str) -> str:
        lines = [ln.strip() for ln in self.read_log(name).splitlines() if ln.strip()]
        return lines[-1] if lines else ""


ALL_COUNTERS = tuple(f.name for f in fields(Counters))


@dataclass(frozen=True)
class Capabilities:
    offline: bool = False  # writes capture.pcap itself with no endpoint
    live: bool = True  # sends on an endpoint's interface
    counters: tuple[str, ...] = ALL_COUNTERS  # the counters it really measures (others stay 0)
    port_stats: bool = False  # `port_stats()` returns the generator's own port statistics
    sessions: bool = False  # sends the scenario's two-way `sessions:` (else refused at validation)


@dataclass(frozen=True)
class GeneratorPlugin:
    name: str
    options: type[GeneratorSpec]  # the scenario's `testbed.generators[]` entry model
    adapter: type[Generator]
    tools: tuple[Tool, ...] = ()
    capabilities: Capabilities = field(default_factory=Capabilities)
    summary: str = ""
    # its own top-level scenario section (key, model), e.g. the engine's `flowengine:`
    section: tuple[str, type[ScenarioSection]] | None = None
    # the scenario as the input file its native program reads, e.g. the engine's session text
    # (`testbed spread` writes one per host)
    session: Callable[[Scenario, int], str] | None = None
    # a class that sends an OTG port's flows (`testbed otg serve`, a port located `NAME:PLACE`),
    # built with (port name, endpoint, the config's folder), e.g. generators/trex/otgport.py
    otg_port: Callable[..., Any] | None = None

    def create(self, spec: GeneratorSpec | dict[str, Any] | None = None) -> Generator:
        return self.adapter(spec)


def get_generator(name: str, spec: GeneratorSpec | dict[str, Any] | None = None) -> Generator:
    """The adapter `name`, given its options (`spec`: its model from the scenario's `testbed:`
    section, or a plain mapping for a script)."""
    plugin: GeneratorPlugin = GENERATORS.get(name)
    return plugin.create(spec)


def used_generators(scenario: Scenario) -> list[GeneratorSpec]:
    """The generators a run of `scenario` uses: offline its `generator`, live every one."""
    if scenario.testbed is None:
        return [scenario.offline_generator()]
    return scenario.live_generators()


def fit_problem(scenario: Scenario) -> str | None:
    """Why a generator that a run of `scenario` uses cannot run it on this machine (its own
    check, `GeneratorSpec.fits`: the engine's memory), or None when every one can."""
    for spec in used_generators(scenario):
        problem = spec.fits(scenario)
        if problem:
            return problem
    return None


def state_bytes(scenario: Scenario) -> int | None:
    """The most memory one of the scenario's generators says it holds for it, or None."""
    sizes = [
        n for spec in used_generators(scenario) if (n := spec.state_bytes(scenario)) is not None
    ]
    return max(sizes) if sizes else None


def session_text(spec: GeneratorSpec, scenario: Scenario, seed: int) -> str | None:
    """`scenario` as the input file the native program of generator `spec` reads (the engine's
    session: `GeneratorPlugin.session`), or None when the generator has none."""
    plugin: GeneratorPlugin = GENERATORS.get(spec.name)
    return plugin.session(scenario, seed) if plugin.session is not None else None
