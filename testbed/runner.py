"""One lifecycle for every run: folder -> generator -> wait -> stop -> collect -> analyze.

The run folder is created before any work starts and is never overwritten; the manifest is
written at the start (status `running`) and rewritten at every step, so whatever happens the
folder says how far the run got.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from generators import GeneratorError, get_generator
from generators.base import Progress

from .compile import check_memory, expected
from .proc import utc_now
from .scenario import LoadedScenario

# Exit statuses of `testbed run` (documented in README.md).
EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_CHECKS_FAILED = 3
EXIT_INTERRUPTED = 130


class RunSetupError(Exception):
    """The run cannot start (bad output directory, missing tool); nothing was sent."""


def testbed_version() -> str:
    try:
        from importlib.metadata import version

        return version("ntg-testbed")
    except Exception:  # not installed: running from a checkout
        return "0.1.0+source"


def _git_info() -> dict:
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return {"revision": None, "dirty": None}
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        )  # fmt: skip
        return {"revision": rev.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return {"revision": None, "dirty": None}


def _host_info() -> dict:
    os_name = None
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return {
        "hostname": platform.node(),
        "os": os_name,
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def _tool_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    tools = {"testbed": testbed_version(), "python": platform.python_version()}
    for lib in ("numpy", "pandas", "matplotlib", "pydantic", "PyYAML"):
        try:
            tools[lib] = version(lib)
        except PackageNotFoundError:
            tools[lib] = None
    return tools


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_run_dir(root: Path, name: str) -> Path:
    """A new folder `<UTC time>-<name>` under `root`; never an existing one."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunSetupError(f"cannot create the output directory {root}: {exc.strerror}") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise RunSetupError(f"the output directory {root} is not writable; choose another with --out")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        candidate = root / (f"{stamp}-{name}" if n == 1 else f"{stamp}-{name}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunSetupError(f"cannot create {candidate}: {exc.strerror}") from None
    raise RunSetupError(f"too many runs named {name} in {root} this second")


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


class _Interrupts:
    """Turns SIGINT/SIGTERM/SIGHUP into a flag the run loop acts on, so stopping is always orderly
    (our children run in their own sessions: without this, a closed terminal would orphan them)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> "_Interrupts":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # HUP: the terminal closed
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.received = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


class Run:
    def __init__(self, loaded: LoadedScenario, out_root: Path, seed: int | None = None):
        self.loaded = loaded
        self.scenario = loaded.scenario
        self.seed = self.scenario.seed if seed is None else seed
        self.run_dir = make_run_dir(out_root, self.scenario.name)
        self.manifest: dict = {
            "manifest_version": 1,
            "run_id": self.run_dir.name,
            "status": "running",
            "created_utc": utc_now(),
            "finished_utc": None,
            "scenario": {
                "name": self.scenario.name,
                "source": str(loaded.path.resolve()),
                "sha256": hashlib.sha256(loaded.text.encode()).hexdigest(),
            },
            "seed": self.seed,
            "host": _host_info(),
            "git": _git_info(),
            "tools": _tool_versions(),
            "expected": expected(self.scenario).as_dict(),
            "commands": [],
            "generators": {},
            "files": {},
        }
        (self.run_dir / "scenario.yaml").write_text(loaded.text)
        self.write_manifest()

    def write_manifest(self) -> None:
        tmp = self.run_dir / ".manifest.json.tmp"
        tmp.write_text(json.dumps(self.manifest, indent=2) + "\n")
        os.replace(tmp, self.run_dir / "manifest.json")

    def execute(self, show_progress: bool = True) -> str:
        """Run the generator to the end (or until interrupted); returns the run status."""
        gen = get_generator(self.scenario.generator)
        bar = None
        try:
            gen.prepare(self.scenario, self.run_dir, self.seed)
            self.manifest["tools"][gen.name] = gen.version()
            if show_progress:
                from tqdm import tqdm

                bar = tqdm(total=1, desc="virtual time", delay=2.0, leave=False, file=sys.stderr,
                           dynamic_ncols=True, bar_format="{desc}: {percentage:3.0f}%|{bar}| "
                           "{n}/{total} s [{elapsed}<{remaining}{postfix}]")  # fmt: skip
            shown_after = time.monotonic() + 2.0  # short runs finish without a bar

            def on_progress(p: Progress) -> None:
                if bar is not None:
                    bar.total = p.total  # the generator knows its own horizon
                    bar.n = min(p.done, bar.total)
                    bar.set_postfix_str(f"{p.packets:,} packets", refresh=False)
                    if time.monotonic() >= shown_after:
                        bar.refresh()

            with _Interrupts() as interrupts:
                gen.start(on_progress)
                self.manifest["commands"] = [c.as_dict() for c in gen.commands()]
                self.write_manifest()
                while not gen.wait(0.1):
                    if interrupts.received is not None:
                        gen.stop(interrupt=True)
                status = gen.status()
                if interrupts.received is not None:
                    status = "interrupted"
                    self.manifest["interrupted_by"] = signal.Signals(interrupts.received).name
        except GeneratorError as exc:
            self.manifest["error"] = str(exc)
            status = "failed"
        finally:
            if bar is not None:
                bar.close()
            gen.stop() if gen.status() == "running" else None
            self.manifest["commands"] = [c.as_dict() for c in gen.commands()]
            self.manifest["generators"][gen.name] = gen.counters().as_dict() if gen.commands() else {}
        failures = [c for c in self.manifest["commands"] if c.get("note")]
        if status == "failed" and failures and "error" not in self.manifest:
            self.manifest["error"] = f"{failures[0]['name']}: {failures[0]['note']}"
        self.manifest["status"] = status
        self.manifest["finished_utc"] = utc_now()
        for name in sorted(os.listdir(self.run_dir)):
            path = self.run_dir / name
            if path.is_file() and not name.startswith(".") and name != "manifest.json":
                self.manifest["files"][name] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
        self.write_manifest()
        return status


def run_scenario(
    loaded: LoadedScenario,
    out_root: Path,
    seed: int | None = None,
    analyze: bool = True,
    show_progress: bool = True,
    duration_ns: int | None = None,
) -> RunResult:
    too_big = check_memory(loaded.scenario)
    if too_big:
        raise RunSetupError(f"{loaded.path}: {too_big}")
    if loaded.scenario.testbed is not None:
        return _run_live(loaded, out_root, seed, analyze, show_progress, duration_ns)
    run = Run(loaded, out_root, seed)
    status = run.execute(show_progress)
    result = RunResult(run.run_dir, status, EXIT_OK, run.manifest)
    if status == "interrupted":
        result.exit_code = EXIT_INTERRUPTED
        result.messages.append(
            f"interrupted: the capture holds what was generated until then; "
            f"analyse it with `testbed analyze {run.run_dir}`"
        )
        return result
    if status == "completed" and loaded.scenario.attacks is not None:
        status = _mix_attacks(run, loaded, result, show_progress)
    if status != "completed":
        result.exit_code = EXIT_RUN_FAILED
        result.messages.append(f"run failed: {run.manifest.get('error', 'see engine.log')}")
        return result
    if analyze:
        from analysis import analyze as analyze_run

        if show_progress:
            print("analysing the run:", file=sys.stderr)
        result.metrics = analyze_run(run.run_dir, progress=stage_printer(show_progress))
        failed = [c for c in result.metrics.get("checks", []) if not c.get("ok")]
        if result.metrics.get("capture_problem") or failed:
            result.exit_code = EXIT_CHECKS_FAILED
            for c in failed:
                result.messages.append(
                    f"check failed: {c['name']}: expected {c['expected']}, measured {c['measured']}"
                )
    return result


def _mix_attacks(run: Run, loaded: LoadedScenario, result: RunResult, show_progress: bool) -> str:
    """Offline `attacks:`: the engine's capture becomes benign.pcap, the attack sessions
    attacks.pcap (+ attacks.json), both merged by time into capture.pcap; with `ids: suricata`,
    Suricata reads the mixed capture and coverage.json/md/html score the attack sessions."""
    from generators.rules.attacks import AttackError, attack_coverage, merge_pcaps, write_attacks

    from .dut.suricata import SuricataError, SuricataMissing
    from .scenario import attack_rule_paths

    spec = loaded.scenario.attacks
    say = stage_printer(show_progress)
    rules = attack_rule_paths(spec, loaded.path)
    capture, benign = run.run_dir / "capture.pcap", run.run_dir / "benign.pcap"
    try:
        say("synthesizing the attack sessions")
        attacks = write_attacks(spec, rules, run.run_dir)
        os.replace(capture, benign)
        say("merging benign and attack packets by time")
        merge_pcaps([benign, attacks.pcap], capture)
        info = {**attacks.summary(), "benign_pcap": benign.name, "capture": capture.name}
        if spec.ids == "suricata":
            say("suricata on the mixed capture")
            doc = attack_coverage(capture, attacks, rules, run.run_dir)
            info["coverage"] = {k: doc[k] for k in ("loaded", "alerted", "missed", "coverage",
                                                    "extra_alert_sessions", "extra_unrelated_sessions")}
            info["alerted_sids"] = sorted(r["sid"] for r in doc["rows"] if r["alerted"])
            result.messages += [f"attacks: {line}" for line in doc["summary"][:3]]
        run.manifest["attacks"] = info
        status = "completed"
    except (AttackError, OSError, SuricataMissing, SuricataError) as exc:  # the run failed: say why
        run.manifest["error"] = f"attacks: {exc}"
        status = "failed"
    run.manifest["status"] = status
    for name in sorted(os.listdir(run.run_dir)):
        path = run.run_dir / name
        if path.is_file() and not name.startswith(".") and name != "manifest.json":
            run.manifest["files"][name] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
    run.write_manifest()
    return status


def _run_live(loaded: LoadedScenario, out_root: Path, seed: int | None, analyze: bool,
              show_progress: bool, duration_ns: int | None) -> RunResult:  # fmt: skip
    from .live import LiveError, LiveRun, check_live_prerequisites

    try:
        check_live_prerequisites(loaded.scenario)
    except LiveError as exc:
        raise RunSetupError(str(exc)) from None
    run = LiveRun(loaded, out_root, seed, duration_ns)
    status = run.execute(show_progress)
    result = RunResult(run.run_dir, status, EXIT_OK, run.manifest)
    if status == "interrupted":
        result.exit_code = EXIT_INTERRUPTED
        result.messages.append(f"interrupted: the steps so far are kept in {run.run_dir}")
    elif status != "completed":
        result.exit_code = EXIT_RUN_FAILED
        result.messages.append(f"run failed: {run.manifest.get('error', 'see manifest.json')}")
    if analyze and run.manifest.get("steps"):
        from analysis.live import analyze_live

        if show_progress:
            print("analysing the run:", file=sys.stderr)
        result.metrics = analyze_live(run.run_dir, progress=stage_printer(show_progress))
        if result.exit_code == EXIT_OK:
            failed = [c for c in result.metrics.get("checks", []) if not c.get("ok")]
            for c in failed:
                result.messages.append(
                    f"check failed: {c['name']}: expected {c['expected']}, measured {c['measured']}")
            if failed:
                result.exit_code = EXIT_CHECKS_FAILED
    return result
