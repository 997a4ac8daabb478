"""STAND-IN for the run-table writer (issue 16): the tests of the results catalogue need the Parquet
run tables (analysis/tables.py) of real run folders. The analysis writes them itself once its
writer lands; until then `ensure_tables` writes them here, with `analysis.tables.write_table`, from
what the real analysis left in the folder (manifest.json, metrics.json, flows.csv, the steps'
samples.csv, coverage.json). A folder that already has tables is left alone, so with the real
writer in place this module does nothing and the tests read what the analysis wrote.

Remove this module (and its calls) once every analysed run folder has its tables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.tables import TABLES_DIR, write_table
from ntgcore.runfolder import SCHEMA_VERSION


def ensure_tables(folder: str | Path) -> Path:
    """The run tables of FOLDER (a run folder, or an ids-coverage output folder): written from its
    JSON files unless the analysis already wrote them."""
    folder = Path(folder)
    tables = folder / TABLES_DIR
    if tables.is_dir() and any(tables.glob("*.parquet")):
        return tables
    if (folder / "coverage.json").is_file() and not (folder / "manifest.json").is_file():
        _coverage(folder)
        return tables
    manifest = json.loads((folder / "manifest.json").read_text())
    metrics = json.loads((folder / "metrics.json").read_text())
    run_id = manifest["run_id"]
    write_table(folder, "run", [_run_row(manifest, metrics)])
    if manifest.get("mode") == "live":
        by_name = {e["name"]: e for e in manifest.get("steps", [])}
        steps, seconds, samples = [], [], []
        for s in metrics["steps"]:
            entry = by_name.get(s["name"], {})
            steps.append(_live_step(run_id, s))
            if s.get("traffic"):
                seconds += _per_second(run_id, s["name"], s["traffic"]["per_second"])
            csv = folder / entry.get("dir", s["name"]) / "samples.csv"
            if csv.is_file() and csv.stat().st_size:
                frame = pd.read_csv(csv)
                frame = frame[[c for c in frame.columns if c != "num_threads"]]
                samples.append(frame.assign(run_id=run_id, step=s["name"]))
        write_table(folder, "steps", steps)
        write_table(folder, "per_second", seconds)
        write_table(folder, "resources", pd.concat(samples) if samples else [])
    else:
        gen = next(iter(manifest.get("generators") or {"flowengine": {}}))
        counters = (manifest.get("generators") or {}).get(gen, {})
        row = _traffic_row(run_id, "run", metrics)
        row.update(kind="run", generator=gen, status=manifest.get("status"),
                   flows=(metrics.get("flows") or {}).get("count"), sent=counters.get("packets_sent"))
        write_table(folder, "steps", [row])
        write_table(folder, "per_second", _per_second(run_id, "run", metrics["per_second"]))
        if (folder / "flows.csv").is_file():
            write_table(folder, "flows", pd.read_csv(folder / "flows.csv").assign(run_id=run_id, step="run"))
        if (folder / "timing.csv").is_file():
            write_table(folder, "timing", pd.read_csv(folder / "timing.csv").assign(run_id=run_id, step="run"))
    return tables


def _run_row(manifest: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    sc, host, git = manifest.get("scenario") or {}, manifest.get("host") or {}, manifest.get("git") or {}
    return {"run_id": manifest["run_id"], "scenario": sc.get("name"), "scenario_sha256": sc.get("sha256"),
            "method": manifest.get("method") or "offline", "status": manifest.get("status"),
            "created_utc": manifest.get("created_utc"), "finished_utc": manifest.get("finished_utc"),
            "analysed_utc": metrics.get("analysed_utc"), "seed": manifest.get("seed"),
            "git_revision": git.get("revision"), "git_dirty": git.get("dirty"),
            "hostname": host.get("hostname"), "kernel": host.get("kernel"), "cpus": host.get("cpus"),
            "testbed_version": (manifest.get("tools") or {}).get("testbed"),
            "schema_version": SCHEMA_VERSION}


def _traffic_row(run_id: str, step: str, t: dict[str, Any]) -> dict[str, Any]:
    steady = t.get("steady") or {}
    return {"run_id": run_id, "step": step, "packets": t.get("packets"), "bytes": t.get("bytes"),
            "duration_s": t.get("duration_s"), "mean_pps": t.get("mean_pps"), "std_pps": t.get("std_pps"),
            "variance_pct": t.get("variance_pct"), "warmup_s": (t.get("warmup") or {}).get("seconds"),
            "steady_mean_pps": steady.get("mean_pps"), "steady_variance_pct": steady.get("variance_pct"),
            "average_packet_size": t.get("average_packet_size"), "throughput_bps": t.get("throughput_bps")}


def _live_step(run_id: str, s: dict[str, Any]) -> dict[str, Any]:
    gen = (s.get("params") or {}).get("generator") or next(iter(s.get("resources") or {}), None)
    row = _traffic_row(run_id, s["name"], s.get("traffic") or {})
    loss = s.get("loss") or {}
    res = (s.get("resources") or {}).get(gen) or {}
    row.update(kind=s.get("kind"), generator=gen, status=s.get("status"), sent=loss.get("sent"),
               wire=loss.get("wire"), dut=loss.get("dut"), loss_rate=loss.get("loss_rate"),
               cpu_mean=res.get("cpu_mean"), cpu_max=res.get("cpu_max"), rss_mean=res.get("rss_mean"),
               rss_max=res.get("rss_max"))
    return row


def _per_second(run_id: str, step: str, ps: dict[str, Any]) -> list[dict[str, Any]]:
    n = len(ps["second"])
    return [{"run_id": run_id, "step": step, "second": ps["second"][i], "packets": ps["packets"][i],
             "bytes": ps["bytes"][i], "flows_started": (ps.get("flows_started") or [None] * n)[i],
             "partial": bool(ps.get("last_partial")) and i == n - 1} for i in range(n)]


def _coverage(folder: Path) -> None:
    doc = json.loads((folder / "coverage.json").read_text())
    rows = [{"run_id": folder.name, "step": "run", **{k: r.get(k) for k in (
        "sid", "where", "msg", "classtype", "state", "loaded", "synthesized", "alerted", "reason",
        "extra_sids", "extra_kind")}} for r in doc["rows"]]
    write_table(folder, "coverage", rows)
