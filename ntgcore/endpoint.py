"""Where a live part runs and sends: the contract of the endpoint back ends.

A back end (a network namespace today; a VM or an SSH host later) makes `Endpoint`s: the argv
prefix that runs a command there, a socket connected from there, the counters of an interface
there. Adapters and parts use only this interface; the one back end that knows namespaces is
testbed/endpoints/netns.
"""

from __future__ import annotations

import abc
import socket
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .proc import Tool


class Endpoint(abc.ABC):
    """Interface `iface` at one place of the testbed.

    `endpoint=None` in a generator's `prepare` means offline (the generator writes capture.pcap
    itself, when it can). `pace` is `realtime` (the scenario's timestamps) or `topspeed` (as fast
    as possible, seed 001's "packets/sec 0"); `duration_s` bounds a topspeed run."""

    iface: str
    pace: str  # realtime | topspeed
    duration_s: float | None
    # Several hosts started together (ntgcore.startat.AtTime): the agreed start, ns since the
    # epoch; `argv` then holds every command until it. None: start at once.
    start_at_ns: int | None = None
    # Whether what `argv` starts is a process of this machine (a namespace: signalled, sampled and
    # its pid files read here) or of another (a VM's guest, reached through ssh).
    local_processes: bool = True

    @property
    @abc.abstractmethod
    def where(self) -> str:
        """The place in words, for messages (`namespace ntg1a2b3c-gen`)."""

    @abc.abstractmethod
    def argv(self, *command: str) -> list[str]:
        """`command` run at this place (an argument list, never a shell string)."""

    def argv_self_held(self, *command: str) -> list[str]:
        """`command` run at this place without being held until `start_at_ns`: for a generator
        that waits for it itself, after its own set-up (flowengine `--start-at`)."""
        return self.argv(*command)

    @abc.abstractmethod
    def exists(self) -> bool:
        """Whether the place is there now (a namespace deleted under us is not)."""

    @abc.abstractmethod
    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        """A TCP connection to host:port as seen from this place."""

    @abc.abstractmethod
    def counters(self, iface: str | None = None) -> dict[str, int]:
        """Kernel counters of `iface` (default: this endpoint's): rx/tx packets, bytes, drops."""

    def align_clock(self, max_age_s: float) -> dict[str, int] | None:
        """Set the place's clock to this machine's when it keeps one of its own (a VM's guest) and
        was last set more than `max_age_s` ago, so that a start time given here is met there; the
        setting's numbers (ns: offset applied, round trip, what was left), None when nothing was
        done. A namespace shares this machine's clock: nothing to do."""
        return None

    def pids(self) -> dict[str, int]:
        """Processes of this machine that do the place's work, by label (a VM's qemu): sampled
        with the part that runs there, so its CPU counts what the place costs. {}: none."""
        return {}


@runtime_checkable
class PowerSwitch(Protocol):
    """What an endpoint of a VM back end offers besides `Endpoint`: its machine's power (the fault
    `power-off`; a device under test there knows its end came from the switch)."""

    def power_off(self) -> None: ...

    def power_on(self) -> None: ...


class Site(abc.ABC):
    """The places one back end provides for a run (a topology of namespaces; VMs; hosts), each
    named `ROLE:IFACE`: brought up with `apply`, always taken down with `remove`."""

    name: str

    @abc.abstractmethod
    def places(self) -> list[str]: ...

    @abc.abstractmethod
    def apply(self) -> list[str]:
        """Make the places as described; returns the steps taken ([] when nothing differed)."""

    @abc.abstractmethod
    def remove(self) -> list[str]:
        """Take everything `apply` made down again; returns the steps taken."""

    @abc.abstractmethod
    def endpoint(
        self, place: str, pace: str = "realtime", duration_s: float | None = None
    ) -> Endpoint:
        """The endpoint at `place` (`ROLE:IFACE`)."""

    @abc.abstractmethod
    def locations(self) -> list[str]:
        """What the site made, for the manifest (the namespace names, the VM names)."""

    def counters(self, place: str) -> dict[str, int]:
        return self.endpoint(place).counters()

    def facts(self) -> dict[str, Any]:
        """What the places run on, for the manifest (a VM back end: per role the accelerator, CPU
        model, vCPUs, memory, boot time); {} for places on this machine itself."""
        return {}


class Backend(abc.ABC):
    """An endpoint back end plugin: opens a site from the scenario's `testbed.topology`."""

    name: str
    tools: tuple[Tool, ...] = ()  # what it needs on this machine, checked before a run starts

    @abc.abstractmethod
    def open(
        self,
        ref: str | dict[str, Any],
        base_dir: Path | None,
        source: str | None,
        unique: bool = True,
    ) -> Site:
        """The site `ref` describes; `unique` gives it a fresh name so that runs never collide.
        Raises BadInput (with FILE:LINE) for a description that cannot be used."""

    @abc.abstractmethod
    def discard(self, locations: list[str], dry_run: bool = False) -> list[str]:
        """Delete what a dead run made (`Site.locations()` as it recorded them): only those that
        still exist and that this back end marked as its own. Returns the steps taken."""
