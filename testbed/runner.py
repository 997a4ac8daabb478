"""One lifecycle for every run: folder -> plan -> (site up) -> steps -> (site down) -> finish.

An offline run is one step with no site: its generator writes capture.pcap into the run folder.
A live run is the steps its method plans, executed one after the other on the site (a topology
of network namespaces) that is brought up first and always taken down. The run folder is created
before any work starts and is never overwritten; the manifest is written at the start (status
`running`) and rewritten after every step, so whatever happens the folder says how far it got.
A live run first cleans up after dead runs (testbed/cleanup.py) and marks what it creates, so
that a `kill -9` of this process leaves nothing that `testbed cleanup` cannot find.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import sys
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from analysis import analyze as analyze_offline
from analysis.live import analyze_live, read_manifest
from ntgcore.endpoint import Site
from ntgcore.errors import (
    EXIT_CHECKS_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_SPACE,
    EXIT_OK,
    EXIT_RUN_FAILED,
    NoSpace,
    NtgError,
    RunSetupError,
    ToolMissing,
)
from ntgcore.expected import expected
from ntgcore.files import replacing
from ntgcore.generator import Progress, fit_problem
from ntgcore.proc import Interrupts, Tool, watch_spawns
from ntgcore.registry import ENDPOINTS, GENERATORS, METHODS, PARTS, RUN_HOOKS
from ntgcore.runfolder import MANIFEST, RunFolder, git_info, host_info, tool_versions
from ntgcore.scenario import LoadedScenario, Scenario

from .cleanup import RunMark, cleanup, lab_mark
from .executor import StepContext, StepExecutor
from .ids.regression import Baseline
from .ids.runhooks import attack_player, coverage_baseline_problem, played_attacks_problem
from .methods import Step, planned_parts, with_changes


@dataclass
class RunResult:
    run_dir: Path
    status: str
    exit_code: int
    manifest: dict
    metrics: dict | None = None
    messages: list[str] = field(default_factory=list)


def stage_printer(enabled: bool):
    """A progress callback for long multi-stage work: one line per stage with the time so far."""
    start = time.monotonic()

    def show(stage: str) -> None:
        if enabled:
            print(f"  [{time.monotonic() - start:6.1f} s] {stage}", file=sys.stderr, flush=True)

    return show


# --------------------------------------------------------------------------------------------
# Preconditions: say what fixes them


def check_places(scenario: Scenario, site: Site) -> str | None:
    """Why a place (`ROLE:IFACE`) of the scenario is not one of the site's, or None."""
    tb = scenario.testbed
    method = METHODS.get(tb.method)
    places = [("generators", g.at) for g in scenario.live_generators()] if method.sends else []
    for one in scenario.each_dut():
        assert one.testbed is not None
        for name in reversed(planned_parts(one, method)):  # the method's own parts first
            places += PARTS.get(name).places(one.testbed)
    have = site.places()
    for field_name, place in places:
        if place not in have:
            return (
                f"testbed.{field_name}: `{place}` is not an interface of topology {site.name} "
                f"(it has: {', '.join(have)})"
            )
    return None


def required_tools(scenario: Scenario) -> list[Tool]:
    """The external tools a scenario's run uses: its endpoint back end, parts, generators and attacks."""
    tb = scenario.testbed
    method = METHODS.get(tb.method) if tb is not None else None
    tools: list[Tool] = []
    for hooks in RUN_HOOKS:  # the extensions' (the attacks: mergecap, their replay, Suricata)
        tools += hooks.tools(scenario, method is not None and method.sends)
    if tb is None or method is None:
        return list({t.command: t for t in tools}.values())
    tools += ENDPOINTS.get(tb.backend).tools
    for one in scenario.each_dut():
        for name in planned_parts(one, method):  # the capture, the DUT, the method's parts...
            tools += PARTS.get(name).tools(one)
    if not method.sends:  # its parts make the traffic (multiply): no generator
        return list({t.command: t for t in tools}.values())
    for g in scenario.live_generators():
        tools += GENERATORS.get(g.name).tools
    return list({t.command: t for t in tools}.values())


def check_live_prerequisites(scenario: Scenario) -> None:
    assert scenario.testbed is not None
    if os.geteuid() != 0:
        raise ToolMissing(
            "a live run creates network namespaces and needs root: run it with sudo (or as root)"
        )
    missing = [t for t in required_tools(scenario) if not t.found()]
    if missing:
        cmds = ", ".join(t.command for t in missing)
        pkgs = list(dict.fromkeys(t.package for t in missing if not t.install))
        how = [f"`apt-get install {' '.join(pkgs)}`"] if pkgs else []
        for t in missing:  # a tool with its own way to install (Suricata 7: bookworm-backports)
            if t.install:
                command, _, note = t.install.partition(" (")
                how.append(f"`{command}`" + (f" ({note}" if note else ""))
        raise ToolMissing(
            f"missing {cmds}: install with {' and '.join(how)}, or run "
            f"./bootstrap.sh test, which installs every tool the testbed uses"
        )


def plan_steps(scenario: Scenario) -> list[Step]:
    """The steps of a live scenario, as its method plans them."""
    if scenario.testbed is None:
        raise ValueError("not a live scenario")
    return METHODS.get(scenario.testbed.method).steps(scenario)


def open_site(loaded: LoadedScenario, unique: bool = True) -> Site:
    tb = loaded.scenario.testbed
    assert tb is not None
    return ENDPOINTS.get(tb.backend).open(
        tb.topology, base_dir=loaded.path.parent, source=str(loaded.path), unique=unique
    )


# --------------------------------------------------------------------------------------------
# Progress


class VirtualTimeBar:
    """Offline: how far the generator is in the scenario's (virtual) time."""

    def __init__(self, enabled: bool) -> None:
        self.bar = None
        if enabled:
            self.bar = tqdm(
                total=1,
                desc="virtual time",
                delay=2.0,
                leave=False,
                file=sys.stderr,
                dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| "
                "{n}/{total} s [{elapsed}<{remaining}{postfix}]",
            )
        self.shown_after = time.monotonic() + 2.0  # short runs finish without a bar

    def on_progress(self, p: Progress) -> None:
        if self.bar is not None:
            self.bar.total = p.total  # the generator knows its own horizon
            self.bar.n = min(p.done, self.bar.total)
            self.bar.set_postfix_str(f"{p.packets:,} packets", refresh=False)
            if time.monotonic() >= self.shown_after:
                self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class StepBar:
    """Live: wall seconds of a step against its deadline."""

    def __init__(self, enabled: bool, total_s: float, name: str):
        self.bar = None
        if enabled:
            self.bar = tqdm(
                total=round(total_s, 1),
                desc=name,
                delay=2.0,
                leave=False,
                file=sys.stderr,
                dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s",
            )

    def update(self, elapsed: float) -> None:
        if self.bar is not None:
            self.bar.n = min(round(elapsed, 1), self.bar.total)
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# --------------------------------------------------------------------------------------------
# The run


class Run:
    def __init__(
        self,
        loaded: LoadedScenario,
        out_root: Path,
        seed: int | None = None,
        duration_ns: int | None = None,
        trials: int | None = None,
    ):
        scenario = loaded.scenario
        if trials is not None:  # fewer repeated trials (short runs); checked by trials_problem
            assert scenario.testbed is not None
            trialled = METHODS.get(scenario.testbed.method).trials
            assert trialled is not None
            scenario = with_changes(scenario, **trialled(scenario.testbed, trials))
            loaded = LoadedScenario(scenario, loaded.path, loaded.text)
        if duration_ns is not None and scenario.testbed is not None:  # short live runs (CI)
            tb = scenario.testbed
            changes: dict[str, Any] = {"duration": duration_ns}
            shortened = METHODS.get(tb.method).shortened  # its own sections' step lengths
            if shortened is not None:
                changes.update(shortened(tb, duration_ns))
            scenario = with_changes(scenario, **changes)
            loaded = LoadedScenario(scenario, loaded.path, loaded.text)
        self.loaded, self.scenario = loaded, scenario
        self.live = scenario.testbed is not None
        self.seed = scenario.seed if seed is None else seed
        self.folder = RunFolder(
            out_root,
            scenario.name,
            {
                "scenario": {
                    "name": scenario.name,
                    "source": str(loaded.path.resolve()),
                    "sha256": hashlib.sha256(loaded.text.encode()).hexdigest(),
                },
                "seed": self.seed,
                "host": host_info(),
                "git": git_info(),
                "tools": tool_versions(),
                "expected": self._expected(scenario),
                "commands": [],
                "generators": {},
                "files": {},
            },
        )
        self.run_dir, self.manifest = self.folder.path, self.folder.manifest
        self.no_space: str | None = None  # `no space left on device: PATH` when the disk filled
        try:
            with replacing(self.run_dir / "scenario.yaml") as tmp:  # whole or not at all
                tmp.write_text(loaded.text)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            self.folder.full_at = self.run_dir / "scenario.yaml"
            self._finish("failed")
            raise NoSpace(
                f"{self.no_space}; nothing was run: free some space or choose another --out"
            ) from None
        self.write_manifest()
        self.steps: list[Step] = []
        self.messages: list[str] = []  # for the user, printed after the run
        self._records: list = []
        self.state: dict[str, Any] = {}  # the run extensions' own data, by their name
        if self.live:
            self.steps = plan_steps(scenario)
            for hooks in RUN_HOOKS:  # the extensions add to the steps (the attack replay)
                hooks.plan(self)
            self.manifest["mode"] = "live"
            self.manifest["method"] = scenario.testbed.method
            self.manifest["steps"] = []
            self.manifest["testbed"] = {}

    def write_manifest(self) -> None:
        self.folder.write()

    def finish(self, status: str) -> str:
        """The run folder finished with `status` (failed, whatever it says, when the disk filled)."""
        return self._finish(status)

    def _finish(self, status: str) -> str:
        self.no_space = self.folder.no_space()  # before `finish` frees the reserve
        if self.no_space and status != "interrupted":
            status = "failed"
            self.manifest["error"] = self.no_space
        return self.folder.finish(status, recursive=self.live)

    def execute(self, show_progress: bool = True) -> str:
        return (
            self._execute_live(show_progress) if self.live else self._execute_offline(show_progress)
        )

    def _clean_up_dead_runs(self) -> None:
        """`testbed cleanup` first: what runs that died left (kept in the manifest as `cleanup`)."""
        try:
            cleaned = cleanup()
        except OSError as exc:  # the marks folder is not ours to lock: say so, run anyway
            cleaned = [f"could not look for dead runs: {exc}"]
        if cleaned:
            self.manifest["cleanup"] = cleaned
            print(
                "\n".join(["cleaning up after runs that died:", *cleaned]),
                file=sys.stderr,
                flush=True,
            )

    @staticmethod
    def _expected(scenario: Scenario) -> dict:
        """The scenario's counts; offline, the generator's own when it writes something else
        (GeneratorSpec.offline_expected; its refusals come at `prepare`)."""
        if scenario.testbed is None:
            try:
                own = scenario.offline_generator().offline_expected(scenario)
            except NtgError:
                own = None
            if own is not None:
                return {k: v for k, v in own.items() if k != "what"}
        return expected(scenario).as_dict()

    # -- offline: one step, no site -----------------------------------------------------------

    def _execute_offline(self, show_progress: bool) -> str:
        self._clean_up_dead_runs()
        mark = RunMark(self.run_dir, None, [])
        try:
            mark.write()  # a `kill -9` of this run is then found and its manifest marked `abandoned`
            watching = watch_spawns(mark.child)
        except OSError as exc:
            print(
                f"note: cannot mark the run in {mark.path.parent} ({exc.strerror}); if it is killed, "
                "its manifest stays `running`",
                file=sys.stderr,
            )
            watching = nullcontext()
        try:
            with watching:
                return self._run_offline(show_progress)
        finally:
            mark.remove()  # the manifest is final now

    def _run_offline(self, show_progress: bool) -> str:
        step = Step("run", self.scenario, [self.scenario.offline_generator()])
        bar = VirtualTimeBar(show_progress)

        def started(records) -> None:
            self.manifest["commands"] = [c.as_dict() for c in records]
            self.write_manifest()

        with Interrupts() as interrupts:
            ctx = StepContext(
                self.run_dir,
                self.loaded.path.parent,
                self.seed,
                interrupts,
                tools=self.manifest["tools"],
                on_started=started,
                on_progress=bar.on_progress,
            )
            executor = StepExecutor(step, ctx, self.run_dir)
            try:
                entry = executor.run()
            finally:
                bar.close()
        status = entry["status"]
        if interrupts.received is not None:
            status = "interrupted"
            self.manifest["interrupted_by"] = signal.Signals(interrupts.received).name
        if executor.raised:
            self.manifest["error"] = executor.raised
        records = executor.records()
        self.manifest["commands"] = [c.as_dict() for c in records]
        for g in executor.gens:
            self.manifest["generators"][g.gen.name] = g.gen.counters().as_dict() if records else {}
        failures = [c for c in self.manifest["commands"] if c.get("note")]
        if status == "failed" and failures and "error" not in self.manifest:
            self.manifest["error"] = f"{failures[0]['name']}: {failures[0]['note']}"
        return self._finish(status)

    # -- live: the method's steps on a site ------------------------------------------------

    def _execute_live(self, show_progress: bool) -> str:
        try:
            site = open_site(self.loaded, unique=False)
            problem = check_places(self.scenario, site)
            site = open_site(self.loaded)
        except Exception as exc:  # a topology that does not load is bad input
            problem = f"testbed.topology: {exc}"
        if problem:
            self.manifest["error"] = problem
            self._finish("failed")
            raise RunSetupError(f"{self.loaded.path}: {problem}")
        self.manifest["testbed"] = {
            "topology": site.name,
            "namespaces": None,
            "applied": [],
            "removed": None,
        }
        self._clean_up_dead_runs()
        self.write_manifest()
        mark = RunMark(
            self.run_dir, self.scenario.testbed.backend, site.locations()
        ).write()  # before anything exists
        try:
            return self._run_live(site, mark, show_progress)
        finally:
            mark.remove()  # the manifest is final now

    def _run_live(self, site: Site, mark: RunMark, show_progress: bool) -> str:
        status = "completed"
        with watch_spawns(mark.child), Interrupts() as interrupts, ExitStack() as stack:
            try:
                stack.callback(self._teardown, site)
                self.manifest["testbed"]["applied"] = site.apply()
                self.manifest["testbed"]["namespaces"] = site.locations()
                self.manifest["testbed"]["backend"] = self.scenario.testbed.backend
                if site.facts():  # what the places run on (a VM's accelerator, CPU, memory)
                    self.manifest["testbed"]["machines"] = site.facts()
                self.write_manifest()
                for i, step in enumerate(self.steps, 1):
                    if show_progress:
                        print(
                            f"step {i}/{len(self.steps)}: {step.name}", file=sys.stderr, flush=True
                        )
                    entry = self._run_step(step, site, interrupts, show_progress)
                    self.manifest["steps"].append(entry)
                    self.write_manifest()
                    if entry["status"] == "interrupted":
                        status = "interrupted"
                        self.manifest["interrupted_by"] = signal.Signals(interrupts.received).name
                        break
                    if entry["status"] != "completed":
                        status = "failed"
                        self.manifest.setdefault("error", f"step {step.name}: {entry.get('error')}")
                        break
            except NtgError as exc:
                status = "failed"
                self.manifest["error"] = str(exc)
            except Exception as exc:  # a failure of the testbed itself: keep what we have
                status = "failed"
                self.manifest["error"] = f"{type(exc).__name__}: {exc}"
        self.manifest["commands"] = [r.as_dict() for r in self._records]
        return self._finish(status)

    def _teardown(self, site: Site) -> None:
        try:
            self.manifest["testbed"]["removed"] = site.remove()
        except Exception as exc:  # teardown problems are reported, never hidden
            self.manifest["testbed"]["removed"] = f"failed: {exc}"
            self.manifest.setdefault("error", f"topology teardown failed: {exc}")

    def _run_step(
        self, step: Step, site: Site, interrupts: Interrupts, show_progress: bool
    ) -> dict:
        step_dir = self.run_dir if len(self.steps) == 1 else self.run_dir / step.name
        step_dir.mkdir(exist_ok=True)

        def started(records) -> None:  # what runs now, with pids, for whoever watches the run
            self.manifest["commands"] = [r.as_dict() for r in self._records + records]
            self.write_manifest()

        ctx = StepContext(
            self.run_dir,
            self.loaded.path.parent,
            self.seed,
            interrupts,
            site,
            tools=self.manifest["tools"],
            on_started=started,
            bar=StepBar(show_progress, step.deadline_s(), step.name),
        )
        executor = StepExecutor(step, ctx, step_dir)
        try:
            return executor.run()
        finally:
            if executor.full_at is not None and self.folder.full_at in (
                None,
                self.run_dir / MANIFEST,
            ):
                self.folder.full_at = (
                    executor.full_at
                )  # what filled the disk, not the manifest after it
            self._records += executor.records()
            self.manifest["commands"] = [r.as_dict() for r in self._records]


# --------------------------------------------------------------------------------------------
# Run, mix attacks, analyse


def trials_problem(scenario: Scenario, trials: int) -> str | None:
    """Why `--trials N` cannot apply to this scenario, or None."""
    if not 1 <= trials <= 100:
        return f"--trials {trials}: give 1 to 100"
    if scenario.testbed is None or METHODS.get(scenario.testbed.method).trials is None:
        return (
            "--trials applies to a method with repeated trials (method failover: "
            "testbed.failover.trials); this scenario has none"
        )
    return None


def run_scenario(
    loaded: LoadedScenario,
    out_root: Path,
    seed: int | None = None,
    analyze: bool = True,
    show_progress: bool = True,
    duration_ns: int | None = None,
    coverage_baseline: Baseline | None = None,
    trials: int | None = None,
) -> RunResult:
    """`coverage_baseline`: an earlier coverage.json (and allow file) the offline attack coverage is
    compared with per sid; a newly failing sid that is not allowed makes the exit status 3.
    `trials`: run this many of each repeated trial instead of the scenario's (`trials_problem`)."""
    if trials is not None:
        problem = trials_problem(loaded.scenario, trials)
        if problem:
            raise RunSetupError(f"{loaded.path}: {problem}")
    # what the run extensions read; lab_mark: a run mark for a live lab a hook makes
    options = {"coverage_baseline": coverage_baseline, "lab_mark": lab_mark}
    for hooks in RUN_HOOKS:  # the coverage baseline applies; the rule files read (attacks)
        hooks.check(loaded, options)
    too_big = fit_problem(loaded.scenario)  # each generator's own check (the engine's memory)
    if too_big:
        raise RunSetupError(f"{loaded.path}: {too_big}")
    if loaded.scenario.testbed is not None:
        check_live_prerequisites(loaded.scenario)
    run = Run(loaded, out_root, seed, duration_ns, trials)
    status = run.execute(show_progress)
    for hooks in RUN_HOOKS:  # the attacks mixed in (offline) or scored (live)
        status = hooks.after_run(run, status, stage_printer(show_progress), options)
    result = RunResult(run.run_dir, status, EXIT_OK, run.manifest, messages=list(run.messages))
    if run.no_space:
        result.exit_code = EXIT_NO_SPACE
        result.messages.append(
            f"run failed: {run.no_space}; the files written until then are kept in {run.run_dir} "
            f"(manifest.json says `{status}`). Free some space or choose another --out; the data "
            f"so far can be analysed with `testbed analyze {run.run_dir}` once there is room"
        )
        return result
    if status == "interrupted":
        result.exit_code = EXIT_INTERRUPTED
        result.messages.append(
            f"interrupted: the steps so far are kept in {run.run_dir}"
            if run.live
            else f"interrupted: the capture holds what was generated until then; "
            f"analyse it with `testbed analyze {run.run_dir}`"
        )
    elif status != "completed":
        result.exit_code = EXIT_RUN_FAILED
        where = "see manifest.json" if run.live else "see engine.log"
        result.messages.append(f"run failed: {run.manifest.get('error', where)}")
    # a live run's steps so far are analysed whatever happened; an offline capture when complete
    if analyze and (run.manifest.get("steps") if run.live else result.exit_code == EXIT_OK):
        if show_progress:
            print("analysing the run:", file=sys.stderr)
        progress = stage_printer(show_progress)
        result.metrics = (
            analyze_live_run(run.run_dir, progress)
            if run.live
            else analyze_offline(run.run_dir, progress=progress)
        )
        failed = [c for c in result.metrics.get("checks", []) if not c.get("ok")]
        if result.exit_code == EXIT_OK and (failed or result.metrics.get("capture_problem")):
            result.exit_code = EXIT_CHECKS_FAILED
            result.messages += [
                f"check failed: {c['name']}: expected {c['expected']}, measured {c['measured']}"
                for c in failed
            ]
    if result.exit_code == EXIT_OK and any(hooks.blocks(run) for hooks in RUN_HOOKS):
        result.exit_code = EXIT_CHECKS_FAILED  # a gate of an extension (the coverage baseline)
    return result


def analyze_live_run(run_dir: Path, progress=None) -> dict:
    """analysis.live for a live run folder, with the tables and figures of the run's method."""
    method = read_manifest(run_dir).get("method")
    return analyze_live(
        run_dir, progress, METHODS.get(method).analysis if method in METHODS else None
    )


__all__ = [
    "Run",
    "RunResult",
    "analyze_live_run",
    "attack_player",
    "check_live_prerequisites",
    "check_places",
    "coverage_baseline_problem",
    "plan_steps",
    "played_attacks_problem",
    "run_scenario",
    "stage_printer",
]
