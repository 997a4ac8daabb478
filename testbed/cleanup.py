"""Runs that died without finishing, and what they left behind: `testbed cleanup`.

A run marks what it creates in RUN_MARKS (`/run/ntg-testbed/runs/<run-id>.<pid>.json` for root,
else in the user's runtime directory): its own pid and start time, for a live run the back end and
the places it makes (namespace names), every child it starts (pid, start time, command line, and
the files it leaves behind when killed: `ntgcore.proc.Leftover`, such as a TRex server's DPDK
folder) and its run folder. The mark is written before the site
comes up, rewritten at every child and removed once the manifest has its final status.

A run is dead when its pid is gone, or now belongs to a process that started at another time.
Cleanup then kills the children it recorded that are still the same processes (start time and
command line), removes what those children left behind once they are gone, has the back end delete the places it recorded that still exist and carry the back
end's own mark, and rewrites the run's manifest to `abandoned`. Nothing that no mark names is
touched. Every run cleans up first (reporting what it removed); `/run` is emptied at boot, like
the namespaces themselves.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ntgcore.errors import BadInput
from ntgcore.files import replacing
from ntgcore.proc import Process, same_process, start_ticks, utc_now, watch_spawns
from ntgcore.registry import ENDPOINTS
from ntgcore.runfolder import MANIFEST, RunFolder


def _marks_dir() -> Path:
    """$NTG_RUN_MARKS; else /run/ntg-testbed/runs for root (emptied at boot, like namespaces),
    else the user's runtime directory (or ~/.cache): offline runs need no root."""
    if os.environ.get("NTG_RUN_MARKS"):
        return Path(os.environ["NTG_RUN_MARKS"])
    if os.geteuid() == 0:
        return Path("/run/ntg-testbed/runs")
    base = os.environ.get("XDG_RUNTIME_DIR") or str(Path.home() / ".cache")
    return Path(base) / "ntg-testbed" / "runs"


RUN_MARKS = _marks_dir()


def _write_json(path: Path, doc: dict) -> None:
    with replacing(path) as tmp:
        tmp.write_text(json.dumps(doc, indent=1) + "\n")


class RunMark:
    """The mark of one run (this process): `write` it before creating anything, `child` for every
    process started (see `ntgcore.proc.watch_spawns`), `remove` once the run is finished. An
    offline run has no back end and no places (`backend=None`). Processes start from several
    threads (VMs booting together, the fault part's commands): a lock keeps one writer at a time."""

    def __init__(self, run_dir: Path, backend: str | None, locations: list[str]) -> None:
        pid = os.getpid()
        self.path = RUN_MARKS / f"{run_dir.name}.{pid}.json"
        self.doc = {
            "run_id": run_dir.name,
            "run_dir": str(run_dir.resolve()),
            "pid": pid,
            "start_ticks": start_ticks(pid),
            "created_utc": utc_now(),
            "backend": backend,
            "locations": list(locations),
            "children": [],
        }
        self.procs: list[Process] = []
        self.lock = threading.Lock()

    def write(self) -> RunMark:
        with self.lock:
            RUN_MARKS.mkdir(parents=True, exist_ok=True)
            _write_json(self.path, self.doc)
        return self

    def child(self, proc: Process) -> None:
        with self.lock:
            self.procs = [p for p in self.procs if p.record.exit_code is None] + [proc]
            self.doc["children"] = [
                {
                    "name": p.name,
                    "pid": p.pid,
                    "start_ticks": p.start_ticks,
                    "argv": p.record.argv,
                    "leftovers": [x.as_dict() for x in p.leftovers],
                }
                for p in self.procs
            ]
        self.write()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def marks() -> list[tuple[Path, dict]]:
    out = []
    for path in sorted(RUN_MARKS.glob("*.json")) if RUN_MARKS.is_dir() else []:
        try:
            out.append((path, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue  # being rewritten, or not ours to read
    return out


def is_dead(doc: dict) -> bool:
    """The run's process is gone (or its pid is another process's now)."""
    ticks = start_ticks(int(doc["pid"]))
    return ticks is None or ticks != doc.get("start_ticks")


def _gone(child: dict, timeout: float = 5.0) -> bool:
    """Whether the recorded child is no longer that process (waiting up to `timeout` s)."""
    deadline = time.monotonic() + timeout
    while same_process(child["pid"], child.get("start_ticks"), child.get("argv", [])):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _remove_leftovers(child: dict, dry_run: bool) -> list[str]:
    """What a dead child left behind (its mark's `leftovers`, absolute paths only)."""
    would = "would " if dry_run else ""
    done = []
    for x in child.get("leftovers") or []:
        p = Path(str(x.get("path", "")))
        if not p.is_absolute() or len(p.parts) < 3 or not (p.exists() or p.is_symlink()):
            continue
        if x.get("only_if_empty"):
            if p.is_dir() and not any(p.iterdir()):
                if not dry_run:
                    p.rmdir()
                done.append(f"{would}remove the empty folder {p} ({child['name']} made it)")
            continue
        if not dry_run:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        done.append(f"{would}remove {p}, left by {child['name']} (pid {child['pid']})")
    return done


def _clean_one(path: Path, doc: dict, dry_run: bool) -> list[str]:
    would = "would " if dry_run else ""
    lines = [f"run {doc['run_id']}: its process {doc['pid']} is gone; run folder {doc['run_dir']}"]
    done = []
    for c in doc.get("children", []):
        if not c.get("pid"):
            continue
        if same_process(c["pid"], c.get("start_ticks"), c.get("argv", [])):
            if not dry_run:
                try:
                    os.kill(c["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
            done.append(f"{would}kill {c['name']} (pid {c['pid']})")
            if not dry_run and not _gone(c):
                done.append(f"{c['name']} (pid {c['pid']}) survived SIGKILL: what it made is left")
                continue
        done += _remove_leftovers(c, dry_run)
    try:
        if doc.get("backend"):  # an offline run has no back end and made no places
            done += ENDPOINTS.get(doc["backend"]).discard(doc.get("locations", []), dry_run=dry_run)
    except Exception as exc:  # report it, carry on with the manifest and the other runs
        done.append(f"could not remove {', '.join(doc.get('locations', []))}: {exc}")
    run_dir = Path(doc["run_dir"])
    try:
        folder = RunFolder.open(run_dir)
    except BadInput:  # gone, damaged, not JSON
        folder = None
        done.append(f"no readable {MANIFEST} in {run_dir}: left as it is")
    if folder is not None and folder.manifest.get("status") == "running":
        done.append(f"{would}mark {run_dir / MANIFEST} `abandoned`")
        if not dry_run:
            folder.abandon(
                f"the run's process (pid {doc['pid']}) ended without finishing the run "
                f"(killed?); `testbed cleanup` found it gone at {utc_now()}"
            )
    if not dry_run:
        path.unlink(missing_ok=True)
    return lines + [f"  {line}" for line in done]


def cleanup(dry_run: bool = False) -> list[str]:
    """Clean up after every dead run that left a mark; lines saying what was (would be) done."""
    if not RUN_MARKS.is_dir():
        return []
    if dry_run:
        return [
            line for path, doc in marks() if is_dead(doc) for line in _clean_one(path, doc, True)
        ]
    lines: list[str] = []
    with open(RUN_MARKS / ".lock", "w") as lock:  # two runs starting at once clean up once
        fcntl.flock(lock, fcntl.LOCK_EX)
        for path, doc in marks():
            if is_dead(doc):
                lines += _clean_one(path, doc, False)
    return lines


__all__ = ["RUN_MARKS", "RunMark", "cleanup", "is_dead", "marks"]


@contextlib.contextmanager
def lab_mark(out: Path) -> Iterator[Callable[[list[str]], None]]:
    """A run mark for the live labs made inside the block (their helpers watched, their
    namespaces recorded by the callback it yields, for `on_places`), so that `testbed cleanup`
    removes them after a kill -9; removed at the end."""
    mark = RunMark(out, "netns", []).write()
    made: set[str] = set()

    def places(names: list[str]) -> None:
        made.update(names)
        mark.doc["locations"] = sorted(made)
        mark.write()

    try:
        with watch_spawns(mark.child):
            yield places
    finally:
        mark.remove()
