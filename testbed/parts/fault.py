"""Faults on a schedule, as one more part of a step (`testbed.faults` in the scenario).

    kill       SIGKILL a process of the run (its whole process group); cannot be undone
    stop       SIGSTOP it; undone with SIGCONT
    link-down  `ip link set IFACE down` in the interface's namespace; undone with `up`
    netem      `tc qdisc add dev IFACE root netem loss P% delay D [J]`; undone by deleting it
    power-off  a VM's power, through the endpoint's power switch (`PowerSwitch`); a back end
               without one (network namespaces) is refused before the step starts anything

Each fault is applied `start` after the part starts (the executor starts it right before the
generators, so the times count like a generator's `start`), again every `repeat.period`, and
undone `duration` later, or when the step ends. Everything still applied is undone in `stop()`,
which the executor's exit stack calls on every path (the end of the step, a failure, Ctrl-C).

Only what the run made is touched: processes are the step's own parts' (by the labels their
`pids()` give), interfaces are places of the run's site. The manifest entry (`faults`) lists
every event with the time it was issued (`applied_*`), in effect (`in_effect_*`: the signal
sent, the command returned; `ip` takes about 10 ms) and undone (`undone_*`: the undoing had
returned), each on two clocks: CLOCK_REALTIME in ns, the clock of tcpdump's nanosecond time
stamps (so a fault lines up with the capture), and CLOCK_MONOTONIC in ns.
"""

from __future__ import annotations

import fnmatch
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ntgcore.endpoint import Endpoint, PowerSwitch, Site
from ntgcore.errors import NtgError
from ntgcore.parts import FAULTS_ORDER, Part, PartContext, PartPlugin
from ntgcore.proc import CommandRecord, Process, Tool
from ntgcore.scenario import FaultSpec

COMMAND_TIMEOUT_S = 10.0


class FaultError(NtgError):
    """A fault that cannot be planned or applied; the message says which and why."""


@dataclass
class FaultEvent:
    """One application of a fault (repetition `n`) and, if it has one, its undoing."""

    kind: str
    target: str
    n: int
    planned_s: float
    applied_realtime_ns: int | None = None  # when it was issued
    applied_mono_ns: int | None = None
    in_effect_realtime_ns: int | None = None  # when the signal or command had returned
    in_effect_mono_ns: int | None = None
    undone: bool | None = False  # None: cannot be undone (kill)
    undone_realtime_ns: int | None = None
    undone_mono_ns: int | None = None
    pid: int | None = None
    error: str | None = None
    undo: Callable[[], None] | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        return {
            k: v
            for k, v in self.__dict__.items()
            if k != "undo" and (v is not None or k == "undone")
        }


def _now() -> tuple[int, int]:
    return time.time_ns(), time.monotonic_ns()


class FaultPart(Part):
    """The step's faults (`specs`) on `site`; `pids()` gives the step's processes by label."""

    key = "faults"
    tools = (Tool("ip", "iproute2"), Tool("tc", "iproute2"))

    def __init__(
        self, specs: list[FaultSpec], site: Site, pids: Callable[[], dict[str, int]]
    ) -> None:
        self.specs, self.site, self.step_pids = list(specs), site, pids
        self.events: list[FaultEvent] = []
        self._records: list[CommandRecord] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._problem: str | None = None
        self.origin: tuple[int, int] | None = None
        places = site.places()
        for i, s in enumerate(self.specs):  # before anything starts
            if s.at is not None and s.at not in places:
                raise FaultError(
                    f"testbed.faults[{i}].at: `{s.at}` is not an interface of topology "
                    f"{site.name} (it has: {', '.join(places)})"
                )
            if s.kind == "power-off" and not isinstance(site.endpoint(s.at), PowerSwitch):
                raise FaultError(
                    f"testbed.faults[{i}]: `power-off` needs a VM back end; `{s.at}` is "
                    f"{site.endpoint(s.at).where}, which has no power to switch off: "
                    f"use kill, stop or link-down"
                )

    # -- the part ------------------------------------------------------------------------------

    def start(self, abort) -> None:
        labels = self.step_pids()
        for i, s in enumerate(self.specs):
            if s.process is not None and not fnmatch.filter(labels, s.process):
                raise FaultError(
                    f"testbed.faults[{i}].process: no process `{s.process}` in this step "
                    f"(its processes: {', '.join(sorted(labels)) or 'none'})"
                )
        plan = sorted(
            (t, i, n) for i, s in enumerate(self.specs) for n, t in enumerate(s.times_ns())
        )
        self.origin = _now()
        self._thread = threading.Thread(target=self._run, args=(plan,), name="faults", daemon=True)
        self._thread.start()

    def problem(self) -> str | None:
        return self._problem

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(COMMAND_TIMEOUT_S * 2)
        with self._lock:
            for ev in reversed(self.events):  # everything still applied, newest first
                self._undo(ev)
        return {
            "origin_realtime_ns": self.origin[0] if self.origin else None,
            "origin_mono_ns": self.origin[1] if self.origin else None,
            "events": [e.as_dict() for e in self.events],
            "all_undone": all(e.undone is not False for e in self.events),
        }

    def records(self) -> list[CommandRecord]:
        return list(self._records)

    # -- the schedule --------------------------------------------------------------------------

    def _run(self, plan: list[tuple[int, int, int]]) -> None:
        assert self.origin is not None
        origin = self.origin[1]
        undo_at: list[tuple[int, FaultEvent]] = []
        while plan or undo_at:
            due = min([p[0] for p in plan[:1]] + [u[0] for u in undo_at])
            wait = (origin + due - time.monotonic_ns()) / 1e9
            if wait > 0 and self._stop.wait(wait):
                return
            now = time.monotonic_ns() - origin
            with self._lock:
                if self._stop.is_set():
                    return
                for item in [u for u in undo_at if u[0] <= now]:
                    undo_at.remove(item)
                    self._undo(item[1])
                while plan and plan[0][0] <= now:
                    t, i, n = plan.pop(0)
                    spec = self.specs[i]
                    ev = self._apply(spec, n, t)
                    if ev.error:
                        self._problem = (
                            f"fault {spec.kind} {spec.target} at {t / 1e9:g} s: {ev.error}"
                        )
                        return
                    if spec.duration is not None and ev.undone is False:
                        undo_at.append((t + spec.duration, ev))

    def _apply(self, spec: FaultSpec, n: int, t_ns: int) -> FaultEvent:
        ev = FaultEvent(spec.kind, spec.target, n, t_ns / 1e9)
        self.events.append(ev)
        try:
            action, ev.undo = self._actions(spec, ev)
            ev.applied_realtime_ns, ev.applied_mono_ns = _now()
            action()
            ev.in_effect_realtime_ns, ev.in_effect_mono_ns = _now()
            if ev.undo is None:
                ev.undone = None
        except (OSError, NtgError) as exc:
            ev.error, ev.undo, ev.undone = str(exc), None, None
        return ev

    def _undo(self, ev: FaultEvent) -> None:
        if ev.undone is not False or ev.undo is None:
            return
        try:
            ev.undo()
            ev.undone_realtime_ns, ev.undone_mono_ns = _now()
            ev.undone = True
        except (OSError, NtgError) as exc:
            ev.error = f"could not undo: {exc}"

    def _actions(
        self, spec: FaultSpec, ev: FaultEvent
    ) -> tuple[Callable[[], None], Callable[[], None] | None]:
        if spec.process is not None:
            pid = self._pid(spec.process)
            ev.pid = pid
            if spec.kind == "kill":
                return lambda: _signal(pid, signal.SIGKILL), None
            return lambda: _signal(pid, signal.SIGSTOP), lambda: _signal(pid, signal.SIGCONT)
        assert spec.at is not None
        endpoint = self.site.endpoint(spec.at)
        if spec.kind == "power-off":
            switch: PowerSwitch = endpoint  # type: ignore[assignment]  # checked in __init__
            return switch.power_off, switch.power_on
        iface = endpoint.iface
        if spec.kind == "link-down":
            return (
                lambda: self._command(endpoint, "ip", "link", "set", iface, "down"),
                lambda: self._command(endpoint, "ip", "link", "set", iface, "up"),
            )
        return (
            lambda: self._command(
                endpoint, "tc", "qdisc", "add", "dev", iface, "root", "netem", *netem_args(spec)
            ),
            lambda: self._command(endpoint, "tc", "qdisc", "del", "dev", iface, "root"),
        )

    def _pid(self, label: str) -> int:
        labels = self.step_pids()
        found = sorted(fnmatch.filter(labels, label))
        if not found:
            raise FaultError(
                f"no process `{label}` runs now (running: {', '.join(sorted(labels)) or 'none'})"
            )
        return labels[found[0]]

    def _command(self, endpoint: Endpoint, *argv: str) -> None:
        proc = Process(
            f"fault {argv[0]}",
            endpoint.argv(*argv),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._records.append(proc.record)
        done = proc.start().communicate(COMMAND_TIMEOUT_S)
        if done is None:
            raise FaultError(
                f"`{' '.join(argv)}` in {endpoint.where} did not end within {COMMAND_TIMEOUT_S:g} s"
            )
        err = done[1]
        code = proc.wait()
        if code != 0:
            text = err.decode(errors="replace").strip()
            proc.record.note = text
            if argv[0] == "tc" and "qdisc kind is unknown" in text:
                text += " (this kernel has no netem: load sch_netem, or build the kernel with CONFIG_NET_SCH_NETEM)"
            raise FaultError(
                f"`{' '.join(argv)}` in {endpoint.where} failed ({proc.record.status}): {text}"
            )


def netem_args(spec: FaultSpec) -> list[str]:
    out: list[str] = []
    if spec.loss is not None:
        out += ["loss", f"{spec.loss:g}%"]
    if spec.delay is not None:
        out += ["delay", f"{spec.delay // 1000}us"]
        if spec.jitter is not None:
            out.append(f"{spec.jitter // 1000}us")
    return out


def _signal(pid: int, sig: int) -> None:
    """`sig` to the process group that `pid` leads (every child started through ntgcore.proc
    leads its own), else to `pid` alone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        raise FaultError(f"process {pid} is gone") from None


__all__ = ["FaultError", "FaultEvent", "FaultPart", "PowerSwitch", "netem_args"]


def _faults(ctx: PartContext) -> list[Part]:
    return [FaultPart(ctx.testbed.faults, ctx.site, ctx.pids)]


PLUGIN = PartPlugin(
    "faults",
    FAULTS_ORDER,  # last on, first off: undone before the rest stops
    _faults,
    wanted=lambda tb: bool(tb.faults),
    summary="the faults of `testbed.faults`, on their schedule",
)
