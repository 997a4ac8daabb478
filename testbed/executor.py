"""The step executor: one step of a run, every part started in order under one exit stack.

    the parts the method planned (Step.parts), in their order: captures on -> DUT on -> (VRRP pair
    on) -> (inline multiplier on) -> monitor on -> generators prepared -> (faults armed)
    -> generators started -> until they finish, the deadline passes, a part fails (also: a file of
    its found the file system full, `Part.no_space`) or the user interrupts -> stop in reverse (faults undone first) -> counters

A live generator with a `start` is started that long after the others (the attack replay's
`attacks.start`); until then it counts as running. The entry's `generators_started_utc` is when
the generators were started, the origin of every `start`.

Offline runs are the same with no site: one generator, no endpoint, no other part. The step's
entry (a dict for the manifest) keeps whatever was measured, also when a part failed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ntgcore.endpoint import Site
from ntgcore.errors import NtgError
from ntgcore.files import no_space_at
from ntgcore.generator import Progress, get_generator
from ntgcore.parts import GENERATORS_ORDER, Part, PartContext, PartPlugin
from ntgcore.proc import CommandRecord, Interrupts, utc_now
from ntgcore.registry import GENERATORS, PARTS
from ntgcore.scenario import TestbedSpec
from ntgcore.startat import AtTime

from .methods import Step
from .parts import GeneratorPart
from .parts.hosts import spread_accounting

STOP_DRAIN_S = 0.5  # frames still in flight when the generators stop reach the capture


@dataclass
class StepContext:
    """What a step runs in: the run's folder, seed and interrupts; the site (None: offline)."""

    run_dir: Path
    scenario_dir: Path
    seed: int
    interrupts: Interrupts
    site: Site | None = None
    tools: dict[str, str] = field(default_factory=dict)  # generator versions, by name
    on_started: Callable[[list[CommandRecord]], None] = lambda records: None
    on_progress: Callable[[Progress], None] | None = None  # offline progress (virtual time)
    bar: Any = None  # live progress: update(s), close()


def wire_points(step: Step, tb: TestbedSpec) -> list[str]:
    points = [g.at for g in step.generators]
    if tb.dut.kind != "none":
        points.append(tb.dut.at)
    if tb.capture is not None:
        points += [tb.capture.at, *tb.capture.also_at]
    return list(dict.fromkeys(points))


def loss_accounting(entry: dict, tb: TestbedSpec) -> dict:
    """Sent by the generators vs seen on the wire vs received by the DUT, in packets.

    `wire` is the receive counter of the DUT's interface (or the capture's, without a DUT);
    `dut` is what the DUT says it received, minus what its kernel buffer dropped."""
    sent = sum(g.get("packets_sent", 0) for g in entry.get("generators", {}).values())
    at = tb.dut.at if tb.dut.kind != "none" else (tb.capture.at if tb.capture else None)
    wire = entry.get("wire", {}).get(at, {}).get("rx_packets") if at else None
    out: dict[str, Any] = {"sent": sent, "wire": wire, "dut": None, "dut_dropped": None}
    dut = entry.get("dut") or {}
    if dut:
        out["dut"] = dut.get("received", dut.get("captured"))
        out["dut_dropped"] = dut.get("dropped", dut.get("dropped_by_kernel"))
    if wire is not None:
        out["lost_on_wire"] = sent - wire
    if out["dut"] is not None and wire is not None:
        out["lost_at_dut"] = wire - out["dut"]
    last = out["dut"] if out["dut"] is not None else wire
    out["loss_rate"] = (1 - last / sent) if sent and last is not None else None
    capture = entry.get("capture") or {}
    if capture:
        out["captured"] = capture.get("captured")
        out["capture_dropped"] = capture.get("dropped_by_kernel")
    return out


def quietly(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # keep stopping the other parts
        print(f"warning: while stopping: {exc}", file=sys.stderr)
        return None


class StepExecutor:
    def __init__(self, step: Step, ctx: StepContext, step_dir: Path) -> None:
        self.step, self.ctx, self.dir = step, ctx, step_dir
        self.parts: list[Part] = []
        self.gens: list[GeneratorPart] = []
        self.entry: dict[str, Any] = {}
        self.status, self.error = "completed", None
        self.raised: str | None = None  # the error of an exception that ended the step
        self.start_at_ns: int | None = None  # several hosts (testbed.spread): their agreed start
        self.full_at: Path | None = None  # the file a part could not write: its file system filled

    # -- the parts ---------------------------------------------------------------------------

    def _start(self, stack: ExitStack, part: Part) -> None:
        self.parts.append(part)  # listed even if it fails to start
        part.listed(self.entry)
        stack.callback(lambda: part.record(self.entry, quietly(part.stop) or {}))
        part.start(abort=lambda: self.ctx.interrupts.received is not None)

    def _start_parts(self, stack: ExitStack, plugins: list[PartPlugin]) -> None:
        """The parts of `plugins`, each made for this step and started, in their order."""
        step, ctx = self.step, self.ctx
        if not plugins:
            return
        assert ctx.site is not None and step.scenario.testbed is not None
        made = PartContext(
            step, step.scenario.testbed, ctx.site, self.dir, ctx.scenario_dir, ctx.seed, self._pids
        )
        for plugin in sorted(plugins, key=lambda p: p.order):
            for part in plugin.create(made):
                self._start(stack, part)

    def _pids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for part in self.parts:
            out.update(part.pids())
        return out

    def records(self) -> list[CommandRecord]:
        return [r for p in self.parts for r in p.records()]

    def _prepare_generators(self, stack: ExitStack) -> None:
        step, ctx, tb = self.step, self.ctx, self.step.scenario.testbed
        if step.shares and ctx.site is not None:  # several hosts: one agreed start for all of them
            self.start_at_ns = time.time_ns() + round(step.params.start_lead_s * 1e9)
            self.entry["start_at_ns"] = self.start_at_ns
        for spec in step.generators:
            if getattr(spec, "pcap", None) and not Path(spec.pcap).is_absolute():
                spec = spec.model_copy(update={"pcap": str(ctx.scenario_dir / spec.pcap)})
            gen = get_generator(spec.name, spec)
            if ctx.site is None:  # offline: the generator writes the run folder itself
                folder, endpoint = self.dir, None
            else:
                folder = self.dir / f"gen-{spec.title}"
                folder.mkdir(exist_ok=True)
                duration = (tb.duration / 1e9) if spec.pace == "topspeed" else None
                endpoint = ctx.site.endpoint(spec.at, spec.pace, duration)
                if self.start_at_ns is not None:
                    endpoint = AtTime(endpoint, self.start_at_ns)
            if spec.title in step.attack_sessions:  # it plays the `attacks:` TCP sessions itself
                gen.give_attack_sessions(*step.attack_sessions[spec.title])
            part = GeneratorPart(spec, gen, endpoint, folder)
            if not self.gens:  # after the generators stop: let the last frames reach the capture
                stack.callback(lambda: time.sleep(STOP_DRAIN_S if ctx.site is not None else 0))
            self.parts.append(part)
            self.gens.append(part)
            stack.callback(
                lambda p=part: quietly(
                    lambda: p.gen.stop() if p.gen.status() == "running" else None
                )
            )
            gen.prepare(step.shares.get(spec.title, step.scenario), folder, ctx.seed, endpoint)
            ctx.tools.setdefault(gen.name, gen.version())

    # -- the step ----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        step, ctx = self.step, self.ctx
        tb = step.scenario.testbed
        site = ctx.site
        self.entry = {
            "name": step.name,
            "kind": step.kind,
            "params": step.params.as_dict(),
            "dir": str(self.dir.relative_to(ctx.run_dir)) or ".",
            "started_utc": utc_now(),
            "status": "running",
        }
        points = wire_points(step, tb) if site is not None else []
        before = {p: self._counters(p) for p in points}
        try:
            with ExitStack() as stack:
                # offline: no part but the generator
                planned = [PARTS.get(name) for name in step.parts] if site is not None else []
                self._start_parts(stack, [p for p in planned if p.order < GENERATORS_ORDER])
                self._prepare_generators(stack)
                # armed last, so undone first (the faults)
                self._start_parts(stack, [p for p in planned if p.order >= GENERATORS_ORDER])
                self._wait()
        except NtgError as exc:
            self.status, self.error = "failed", str(exc)
            self.raised = self.error
        except Exception as exc:  # any failure of a part: keep the data so far, tear down
            self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"
            self.raised = self.error
        self.full_at = next(filter(None, (p.no_space() for p in self.parts)), None)
        if (
            self.full_at is not None and self.status != "interrupted"
        ):  # the cause, whatever followed
            self.status, self.error = "failed", no_space_at(self.full_at)
        if site is not None:
            after = {p: self._counters(p) for p in points}
            self.entry["wire"] = {p: _delta(before[p], after[p]) for p in points}
        self.entry["generators"] = {
            g.spec.title: {
                "name": g.spec.name,
                "at": g.spec.at,
                "pace": g.spec.pace,
                "status": g.gen.status(),
                **g.gen.counters().as_dict(),
            }
            for g in self.gens
        }
        for g in self.gens:  # the generator's own view of its ports (Ostinato's getStats)
            stats = (
                quietly(g.gen.port_stats)
                if GENERATORS.get(g.spec.name).capabilities.port_stats
                else None
            )
            if stats:
                self.entry["generators"][g.spec.title]["port_stats"] = stats
        if site is not None:
            self.entry["loss"] = loss_accounting(self.entry, tb)
            if any(p.measures_loss for p in self.parts):
                # no generator's one-way count: the method counts
                self.entry["loss"].update(wire=None, loss_rate=None)
                self.entry["loss"].pop("lost_on_wire", None)
        if site is not None and "spread" in step.params:  # several hosts: per host and merged
            self.entry["spread"] = quietly(
                lambda: spread_accounting(
                    self.entry, self.dir, step.params["spread"], self.start_at_ns
                )
            )
        if self.status == "failed" and ctx.interrupts.received is not None:
            self.status = "interrupted"  # the failure came from stopping on the user's request
        self.entry["status"] = self.status
        if self.error:
            self.entry["error"] = self.error
        self.entry["finished_utc"] = utc_now()
        return self.entry

    def _counters(self, place: str) -> dict:
        try:
            return self.ctx.site.counters(place)  # type: ignore[union-attr]
        except Exception:  # a namespace already gone: no numbers rather than a crash
            return {}

    def _wait(self) -> None:
        step, ctx = self.step, self.ctx
        live = ctx.site is not None
        total = step.deadline_s() if live else None
        started = time.monotonic()
        self.entry["generators_started_utc"] = utc_now()
        later = [g for g in self.gens if live and g.spec.start > 0]  # not yet started
        for g in self.gens:
            if g not in later:
                g.gen.start(ctx.on_progress)
        ctx.on_started(self.records())
        stopped_at_deadline: set[str] = set()
        # the DUT first: when it and the capture both ended, the DUT is what failed
        watched = sorted(
            (p for p in self.parts if not isinstance(p, GeneratorPart)),
            key=lambda p: not p.watched_first,
        )
        while True:
            due = [g for g in later if time.monotonic() - started >= g.spec.start / 1e9]
            for g in due:
                later.remove(g)
                g.gen.start(ctx.on_progress)
            if due:
                ctx.on_started(self.records())
            running = [
                g for g in self.gens if g not in later and not g.gen.wait(0.05 if live else 0.1)
            ]
            busy = [
                p for p in watched if p.busy()
            ]  # a part with work of its own (the multiplier's client)
            if ctx.bar is not None and total is not None:
                ctx.bar.update(time.monotonic() - started)
            if not running and not later and not busy:
                break
            if not running:
                time.sleep(0.05)  # only generators still to start: nothing to wait on
            if ctx.interrupts.received is not None:
                self.status = "interrupted"
                later.clear()  # a generator not started yet is not started any more
                for g in running:
                    g.gen.stop(interrupt=True)
                if live:
                    break
                continue  # offline: wait until the generator has stopped
            problem = next(filter(None, (p.problem() for p in watched)), None)
            if problem:
                self.status, self.error = "failed", problem
                for g in running:
                    g.gen.stop()
                break
            if any(g not in running and g.gen.status() == "failed" for g in self.gens):
                for g in running:  # one generator failed: the step is lost, stop the others now
                    g.gen.stop()
                break
            if total is not None and time.monotonic() - started >= total:
                for g in running:
                    stopped_at_deadline.add(g.spec.title)
                    g.gen.stop()
                break
        if ctx.bar is not None:
            ctx.bar.close()
        self._settle(stopped_at_deadline)

    def _settle(self, stopped_at_deadline: set[str]) -> None:
        """The step's status from the generators' (a deadline stop may be as planned)."""
        step = self.step
        for g in self.gens:
            spec, gs = g.spec, g.gen.status()
            if spec.title in stopped_at_deadline and step.stopped_at_deadline_is_planned(spec):
                gs = "completed"  # stopped by the run's duration, as planned
            elif spec.title in stopped_at_deadline:
                gs = "failed"
                self.error = self.error or (
                    f"{spec.title} was still sending {step.deadline_s():.0f} s "
                    f"after the step began; stopped"
                )
            if gs == "failed" and self.status == "completed":
                self.status = "failed"
                notes = [r.note for r in g.gen.commands() if r.note]
                self.error = self.error or f"generator {spec.title} failed" + (
                    f": {notes[0]}" if notes else ""
                )
            if gs == "interrupted" and self.status == "completed":
                self.status = "interrupted"


def _delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in b if k in a}
