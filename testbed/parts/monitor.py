"""Resource sampling of every process a run started (psutil), like `top -H`, into one CSV.

`Sampler(out_csv, hz, pids=...)` runs in a thread. At each tick it asks `pids()` for the run's
processes ({label: pid}; processes come and go), adds each one's children (recursively), and
writes long-format rows (columns in `COLUMNS`, described in docs/live.md):

    kind=process  one row per process: cpu_percent (100 = one core), rss_bytes, mem_percent,
                  num_threads
    kind=thread   one row per thread of those processes (tid, thread name, its cpu_percent)
    kind=system   one row: all-CPU busy percent (100 = every core), memory used, its percent
    kind=cpu      one row per CPU (name cpuN): busy percent of that core

CPU percentages are deltas of the CPU times between two ticks divided by the wall time between
them, so they are empty the first time a process or thread is seen (processes that already run
when the sampler starts get a baseline at t=0). A process that exits between ticks just stops
having rows. `stop()` returns a summary with the sampler's own CPU cost (its thread's CPU time
over wall time).

A write that finds the file system full ends the sampling without a traceback: `full_at` is then
the CSV (the run stops the step and names it), and the summary's `errors` say so.
"""

from __future__ import annotations

import csv
import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from ntgcore.files import no_space_at

COLUMNS = (
    "t",
    "kind",
    "label",
    "pid",
    "tid",
    "name",
    "cpu_percent",
    "rss_bytes",
    "mem_percent",
    "num_threads",
)
MAX_HZ = 10.0
_GONE = (
    psutil.NoSuchProcess,
    psutil.ZombieProcess,
    psutil.AccessDenied,
    ProcessLookupError,
    FileNotFoundError,
)


def _thread_name(pid: int, tid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _children_map() -> dict[int, list[int]]:
    """parent pid -> child pids, from one pass over /proc (psutil's children() makes one pass
    per call, which costs milliseconds per sampled process on a busy machine)."""
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            kids.setdefault(int(fields[1]), []).append(int(entry.name))
    return kids


_HAVE_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _children(pid: int) -> list[int]:
    """Child pids of `pid` from /proc/PID/task/*/children (Linux with CONFIG_PROC_CHILDREN)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            continue
    return out


def _busy_total(t) -> tuple[float, float]:
    """(busy, total) seconds of one psutil cpu_times entry; guest time is already in user."""
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    idle = t.idle + getattr(t, "iowait", 0.0)
    return total - idle, total


def _pct(now: float, before: float | None, wall: float) -> float | None:
    if before is None or wall <= 0:
        return None
    return round(max(0.0, now - before) / wall * 100.0, 2)


class Sampler:
    """Samples the processes `pids()` names (and their children) `hz` times a second."""

    def __init__(
        self, out_csv: Path, hz: float = 1.0, pids: Callable[[], dict[str, int]] | None = None
    ) -> None:
        try:
            hz = float(hz)
        except (TypeError, ValueError):
            raise ValueError(
                f"sampling rate {hz!r} is not a number; use 0 < hz <= {MAX_HZ:g}"
            ) from None
        if not 0 < hz <= MAX_HZ:
            raise ValueError(f"sampling rate {hz:g} Hz is out of range; use 0 < hz <= {MAX_HZ:g}")
        self.out_csv = Path(out_csv)
        self.hz = hz
        self._pids = pids or (lambda: {})
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._summary: dict = {}
        self._procs: dict[int, psutil.Process] = {}
        self._proc_cpu: dict[int, tuple[float, float]] = {}  # pid -> (cpu seconds, at)
        self._thread_cpu: dict[tuple[int, int], tuple[float, float]] = {}
        self._names: dict[tuple[int, int], str] = {}
        self._sys_cpu: list[tuple[float, float]] | None = None
        self._sys_at = 0.0
        self._mem_total = psutil.virtual_memory().total
        self.errors: list[str] = []
        self.full_at: Path | None = None  # the CSV, once a write found its file system full

    def start(self) -> Sampler:
        if self._thread is not None:
            raise RuntimeError("a Sampler starts once")
        self.out_csv.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.out_csv, "w", newline="")
        self._csv = csv.writer(self._file)
        self._csv.writerow(COLUMNS)
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="ntg-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Stop sampling (one last tick is not taken) and return the summary; idempotent."""
        if self._thread is None:
            return {}
        self._stop.set()
        self._thread.join()
        return dict(self._summary)

    @property
    def summary(self) -> dict:
        return dict(self._summary)

    # ------------------------------------------------------------------------------------

    def _loop(self) -> None:
        period = 1.0 / self.hz
        ticks = late = rows = 0
        cpu0 = time.thread_time()
        k = 0
        try:
            while True:
                now = time.monotonic()
                rows += self._tick(now)
                ticks += 1
                k += 1
                due = self._t0 + k * period
                after = time.monotonic()
                if after > due:  # the tick took longer than the period: skip to the next slot
                    late += 1
                    k = int((after - self._t0) / period) + 1
                    due = self._t0 + k * period
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    break
        except Exception as exc:  # never take the run down; say what happened in the summary
            self._failed(exc)
        finally:
            wall = time.monotonic() - self._t0
            cpu = time.thread_time() - cpu0
            try:
                self._file.close()  # closed also when its last flush fails
            except OSError as exc:
                self._failed(exc)
            self._summary = {
                "hz": self.hz,
                "ticks": ticks,
                "late_ticks": late,
                "rows": rows,
                "wall_s": round(wall, 3),
                "sampler_cpu_s": round(cpu, 4),
                "overhead_percent": round(cpu / wall * 100.0, 3) if wall > 0 else 0.0,
                "errors": list(self.errors),
                "csv": str(self.out_csv),
            }

    def _failed(self, exc: Exception) -> None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            if self.full_at is not None:
                return
            self.full_at = self.out_csv
            self.errors.append(f"sampler stopped: {no_space_at(self.out_csv)}")
            return
        self.errors.append(f"sampler stopped: {type(exc).__name__}: {exc}")

    def _targets(self) -> list[tuple[str, psutil.Process]]:
        try:
            named = dict(self._pids())
        except Exception as exc:
            if len(self.errors) < 20:
                self.errors.append(f"pids() failed: {type(exc).__name__}: {exc}")
            named = {}
        out, seen = [], set()
        kids = _children_map() if named and not _HAVE_CHILDREN_FILE else None
        for label, pid in named.items():
            if pid is None:
                continue
            todo = [int(pid)]
            while todo:  # the process and its descendants, under its label
                pid = todo.pop()
                if pid in seen:
                    continue
                proc = self._process(pid)
                if proc is None:
                    continue
                seen.add(pid)
                self._procs[pid] = proc
                out.append((label, proc))
                todo.extend(kids.get(pid, ()) if kids is not None else _children(pid))
        for pid in set(self._procs) - seen:  # forget processes that are no longer ours
            self._procs.pop(pid, None)
            self._proc_cpu.pop(pid, None)
            for key in [k for k in self._thread_cpu if k[0] == pid]:
                del self._thread_cpu[key]
                self._names.pop(key, None)
        return out

    def _process(self, pid: int) -> psutil.Process | None:
        cached = self._procs.get(pid)
        try:
            if cached is not None and cached.is_running():
                return cached
            self._procs.pop(pid, None)
            self._proc_cpu.pop(pid, None)
            return psutil.Process(pid)
        except _GONE:
            return None

    def _tick(self, now: float) -> int:
        t = round(now - self._t0, 4)
        rows: list[tuple] = []
        for label, p in self._targets():
            try:
                with p.oneshot():
                    if p.status() == psutil.STATUS_ZOMBIE:  # exited, not yet reaped: gone
                        continue
                    ct = p.cpu_times()
                    cpu = ct.user + ct.system
                    rss = p.memory_info().rss
                    name = p.name()
                    threads = p.threads()
            except _GONE:
                continue
            at = time.monotonic()
            prev = self._proc_cpu.get(p.pid)
            pct = _pct(cpu, prev[0], at - prev[1]) if prev else None
            self._proc_cpu[p.pid] = (cpu, at)
            rows.append(
                (
                    t,
                    "process",
                    label,
                    p.pid,
                    "",
                    name,
                    pct,
                    rss,
                    round(rss / self._mem_total * 100.0, 3),
                    len(threads),
                )
            )
            for th in threads:
                key = (p.pid, th.id)
                tcpu = th.user_time + th.system_time
                tprev = self._thread_cpu.get(key)
                tpct = _pct(tcpu, tprev[0], at - tprev[1]) if tprev else None
                self._thread_cpu[key] = (tcpu, at)
                tname = self._names.get(key)
                if tname is None:  # read once per thread: /proc/PID/task/TID/comm
                    tname = self._names[key] = _thread_name(p.pid, th.id)
                rows.append((t, "thread", label, p.pid, th.id, tname, tpct, "", "", ""))
        rows += self._system_rows(t)
        self._csv.writerows(rows)
        self._file.flush()
        return len(rows)

    def _system_rows(self, t: float) -> list[tuple]:
        per = [_busy_total(c) for c in psutil.cpu_times(percpu=True)]
        mem = psutil.virtual_memory()
        rows: list[tuple] = []
        before = self._sys_cpu
        self._sys_cpu = per
        busy = sum(b for b, _ in per) - (sum(b for b, _ in before) if before else 0)
        total = sum(x for _, x in per) - (sum(x for _, x in before) if before else 0)
        pct = round(busy / total * 100.0, 2) if before and total > 0 else None
        rows.append((t, "system", "", "", "", "system", pct, mem.used, mem.percent, ""))
        for i, (b, x) in enumerate(per):
            cp = None
            if before and i < len(before) and x - before[i][1] > 0:
                cp = round((b - before[i][0]) / (x - before[i][1]) * 100.0, 2)
            rows.append((t, "cpu", "", "", "", f"cpu{i}", cp, "", "", ""))
        return rows


def read_samples(path: Path):
    """samples.csv as a pandas DataFrame (numbers as numbers, empty cells as NaN)."""
    import pandas as pd

    return pd.read_csv(path, dtype={"kind": str, "label": str, "name": str})


__all__ = ["COLUMNS", "MAX_HZ", "Sampler", "read_samples"]
