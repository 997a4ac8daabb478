"""Run folders as one pytest-benchmark result document, so its `compare` works across commits.

pytest-benchmark stores times, lower is better. A run's quantities become times the same way, each
its own benchmark and group (`SCENARIO::QUANTITY`, live runs `SCENARIO/STEP::QUANTITY`):

- `packet_rate`: one sample per complete second of the capture, 1 / packets in that second, i.e.
  seconds per packet. The `ops` pytest-benchmark derives (rounds / total) is then the harmonic
  mean of the packets per second, and 1 / `min` is the best second's rate (`max_pps`).
- `byte_rate`: the same with bytes: seconds per byte, `ops` in bytes per second.
- `loss` (live steps with a loss count): one sample, the step's loss rate as a fraction (0 .. 1)
  written where a time would be.

The seconds are those metrics.json counts (`analysis.metrics.per_second`: 1 s bins from the first
packet, the partial last one left out). A second without packets has no time per packet; it is
left out and counted in the benchmark's `extra_info.seconds_without_packets`.
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import Any

from ntgcore.errors import BadInput
from ntgcore.files import read_json

# the pytest-benchmark release line whose saved JSON this mirrors (the fields: tests/test_benchmark_export.py)
FORMAT_VERSION = "5.1.0"
UNITS = {
    "packet_rate": "seconds per packet (1 / packets in a second)",
    "byte_rate": "seconds per byte (1 / bytes in a second)",
    "loss": "loss rate as a fraction (0 .. 1), in place of seconds",
}
OPTIONS = {
    "disable_gc": False,
    "timer": "ntg-testbed capture seconds",
    "min_rounds": 1,
    "max_time": None,
    "min_time": None,
    "precision": None,
    "confidence": None,
    "warmup": False,
}


class NotExportable(BadInput):
    """A run folder that cannot become benchmarks: not completed, or without the numbers."""


def sample_stats(data: list[float]) -> dict[str, Any]:
    """The statistics pytest-benchmark keeps for a list of times, with its definitions: sample
    standard deviation, quartiles by Tukey's hinges (method 2 for an even count, method 3 for an
    odd one), outliers beyond mean ± stddev and beyond the 1.5 IQR fences."""
    values = sorted(data)
    n = len(values)
    mean = statistics.mean(values)
    stddev = statistics.stdev(values) if n > 1 else 0.0
    q1, q3 = _quartiles(values)
    iqr = q3 - q1
    low, high = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    std_out = sum(1 for v in values if not mean - stddev <= v <= mean + stddev)
    iqr_out = sum(1 for v in values if not low <= v <= high)
    total = sum(values)
    return {
        "min": values[0],
        "max": values[-1],
        "mean": mean,
        "stddev": stddev,
        "rounds": n,
        "median": statistics.median(values),
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": iqr_out,
        "stddev_outliers": std_out,
        "outliers": f"{std_out};{iqr_out}",
        "ld15iqr": values[bisect_left(values, low)] if n > 1 else values[0],
        "hd15iqr": values[bisect_right(values, high) - 1] if n > 1 else values[0],
        "ops": n / total if total else 0,
        "total": total,
        "iterations": 1,
        "data": list(data),
    }


def _quartiles(v: list[float]) -> tuple[float, float]:
    n = len(v)
    if n == 1:
        return v[0], v[0]
    if n % 2 == 0:
        return statistics.median(v[: n // 2]), statistics.median(v[n // 2 :])
    k, r = divmod(n, 4)
    if r == 1:
        return 0.25 * v[k - 1] + 0.75 * v[k], 0.75 * v[3 * k] + 0.25 * v[3 * k + 1]
    return 0.75 * v[k] + 0.25 * v[k + 1], 0.25 * v[3 * k + 1] + 0.75 * v[3 * k + 2]


def _read(path: Path, what: str) -> dict[str, Any]:
    if not path.exists():
        raise NotExportable(f"{path.parent}: no {path.name}: {what}")
    try:
        return read_json(path, path.name)
    except BadInput as exc:
        raise NotExportable(f"{exc}; re-run the analysis") from None


def _rate_entries(
    name: str, traffic: dict[str, Any], where: Path
) -> list[tuple[str, list[float], dict]]:
    """The packet_rate and byte_rate samples of one traffic block of metrics.json."""
    per = traffic.get("per_second") or {}
    seconds = list(zip(per.get("packets") or [], per.get("bytes") or []))
    if per.get("last_partial"):
        seconds = seconds[:-1]
    if not any(p for p, _ in seconds):
        raise NotExportable(
            f"{where}: {name}: no complete second with packets in metrics.json, so no "
            "rate to export; a run needs at least one full second of traffic"
        )
    out = []
    for quantity, column in (("packet_rate", 0), ("byte_rate", 1)):
        counts = [s[column] for s in seconds]
        data = [1 / c for c in counts if c > 0]
        out.append((quantity, data, {"seconds_without_packets": len(counts) - len(data)}))
    return out


def run_benchmarks(run_dir: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manifest of a completed, analysed run folder and its benchmarks (module docstring)."""
    run = Path(run_dir)
    manifest = _read(run / "manifest.json", "not a run folder (give the folder `testbed run` made)")
    if manifest.get("status") != "completed":
        raise NotExportable(
            f"{run}: the run is {manifest.get('status')!r}, not completed: its rates "
            "would compare a fragment; export only completed runs"
        )
    metrics = _read(
        run / "metrics.json", f"the run is not analysed; run `testbed analyze {run}` first"
    )
    scenario = (manifest.get("scenario") or {}).get("name") or run.name
    entries: list[tuple[str, dict | None, str, list[float], dict]] = []
    if manifest.get("mode") == "live":
        steps = metrics.get("steps") or []
        for step in steps:
            label = f"{scenario}/{step['name']}"
            if step.get("traffic"):
                entries += [
                    (label, step.get("params"), q, d, x)
                    for q, d, x in _rate_entries(label, step["traffic"], run)
                ]
            rate = (step.get("loss") or {}).get("loss_rate")
            if rate is not None and math.isfinite(rate):
                entries.append((label, step.get("params"), "loss", [float(rate)], {}))
        if not entries:
            raise NotExportable(f"{run}: no step of this live run has a capture or a loss count")
    else:
        if "per_second" not in metrics:
            raise NotExportable(
                f"{run}: metrics.json has no per-second table; run `testbed analyze {run}`"
            )
        entries = [(scenario, None, q, d, x) for q, d, x in _rate_entries(scenario, metrics, run)]
    benchmarks = []
    for label, params, quantity, data, extra in entries:
        name = f"{label}::{quantity}"
        benchmarks.append(
            {
                "group": name,
                "name": name,
                "fullname": name,
                "params": params,
                "param": None,
                "extra_info": {"unit": UNITS[quantity], "run_id": manifest.get("run_id"), **extra},
                "options": dict(OPTIONS),
                "stats": sample_stats(data),
            }
        )
    return manifest, benchmarks


def benchmark_document(run_dirs: list[str | Path]) -> dict[str, Any]:
    """One pytest-benchmark JSON document from the runs of one commit (machine and commit from
    the first run's manifest; runs of different commits are refused: one file per commit)."""
    if not run_dirs:
        raise NotExportable("no run folder given")
    manifests, benchmarks = [], []
    for run_dir in run_dirs:
        manifest, found = run_benchmarks(run_dir)
        manifests.append(manifest)
        benchmarks += found
    revisions = {(m.get("git") or {}).get("revision") for m in manifests}
    if len(revisions) > 1:
        raise NotExportable(
            "the runs come from different commits ("
            + ", ".join(sorted(map(str, revisions)))
            + "): export each commit's runs into its own file, then compare the files"
        )
    names = [b["fullname"] for b in benchmarks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise NotExportable(
            f"two runs give the same benchmarks ({', '.join(twice)}): pytest-benchmark "
            "tells benchmarks apart by name; export such runs into separate files"
        )
    first = manifests[0]
    host, git = first.get("host") or {}, first.get("git") or {}
    return {
        "machine_info": {
            "node": host.get("hostname"),
            "processor": "",
            "machine": host.get("machine"),
            "python_implementation": "CPython",
            "python_version": host.get("python"),
            "release": host.get("kernel"),
            "system": "Linux",
            "os": host.get("os"),
            "cpu": {"count": host.get("cpus")},
        },
        "commit_info": {
            "id": git.get("revision") or "unversioned",
            "time": None,
            "author_time": None,
            "dirty": bool(git.get("dirty")),
            "project": "ntg-testbed",
            "branch": git.get("branch") or "(unknown)",
        },
        "benchmarks": benchmarks,
        "datetime": first.get("finished_utc") or first.get("created_utc"),
        "version": FORMAT_VERSION,
    }
