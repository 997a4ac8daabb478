"""The run tables of an analysed run folder (analysis/tables.py, docs/run-tables.md), from what
the analysis computed and the run folder's own files.

`write_run_tables` is called once at the end of `analysis.analyze` (offline runs and captures),
`write_live_tables` at the end of `analysis.live.analyze_live`. Both write every table that
applies (run, steps, per_second, flows; timing when the run has one; resources when a step has
the monitor's samples.csv; alerts when an IDS wrote an eve.json) and remove the ones of an earlier
analysis that no longer apply, each file replaced atomically.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ntgcore.runfolder import SCHEMA_VERSION

from .capture import CaptureError
from .stream import flow_table_of
from .tables import SCHEMAS, table_path, write_table

# The tables this module writes (and may remove when they no longer apply); `coverage` is not
# one of them: testbed ids-coverage writes it.
ANALYSIS_TABLES = ("run", "steps", "per_second", "flows", "timing", "resources", "alerts")
# What analyze wrote before the run tables (now tables/flows.parquet and tables/timing.parquet).
LEGACY_CSV = ("flows.csv", "timing.csv")
# Where IDS alerts of a run live: (eve.json relative to the run folder or a step's folder).
RUN_EVE = ("suricata/eve.json", "detect/eve.json")  # offline `attacks:` with ids; testbed detect
STEP_EVE = ("dut/eve.json",)  # a live step's DUT (testbed.parts: Suricata's output folder)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def run_row(
    run_id: str, manifest: dict[str, Any], mode: str, analysed_utc: str | None
) -> dict[str, Any]:
    scen = manifest.get("scenario") or {}
    git = manifest.get("git") or {}
    host = manifest.get("host") or {}
    return {
        "run_id": run_id,
        "scenario": scen.get("name"),
        "scenario_sha256": scen.get("sha256"),
        "method": manifest.get("method"),
        "status": manifest.get("status"),
        "created_utc": manifest.get("created_utc"),
        "finished_utc": manifest.get("finished_utc"),
        "analysed_utc": analysed_utc or _now(),
        "seed": manifest.get("seed"),
        "git_revision": git.get("revision"),
        "git_dirty": git.get("dirty"),
        "hostname": host.get("hostname"),
        "kernel": host.get("kernel"),
        "cpus": host.get("cpus"),
        "testbed_version": (manifest.get("tools") or {}).get("testbed"),
        "schema_version": SCHEMA_VERSION,
        "mode": mode,
    }


def traffic_columns(m: dict[str, Any] | None, flows: int | None = None) -> dict[str, Any]:
    """The steps columns of traffic_metrics' numbers."""
    if not m:
        return {}
    steady = m.get("steady") or {}
    return {
        "packets": m.get("packets"),
        "bytes": m.get("bytes"),
        "duration_s": m.get("duration_s"),
        "mean_pps": m.get("mean_pps"),
        "std_pps": m.get("std_pps"),
        "variance_pct": m.get("variance_pct"),
        "warmup_s": (m.get("warmup") or {}).get("seconds"),
        "steady_mean_pps": steady.get("mean_pps"),
        "steady_variance_pct": steady.get("variance_pct"),
        "average_packet_size": m.get("average_packet_size"),
        "throughput_bps": m.get("throughput_bps"),
        "flows": flows if flows is not None else (m.get("flows") or {}).get("count"),
    }


def per_second_rows(run_id: str, step: str, m: dict[str, Any] | None) -> pd.DataFrame | None:
    ps = (m or {}).get("per_second")
    if not ps or not ps.get("second"):
        return None
    n = len(ps["second"])
    partial = np.zeros(n, bool)
    partial[-1] = bool(ps.get("last_partial"))
    return pd.DataFrame(
        {
            "run_id": run_id,
            "step": step,
            "second": ps["second"],
            "packets": ps["packets"],
            "bytes": ps["bytes"],
            "flows_started": ps.get("flows_started") or [0] * n,
            "partial": partial,
        }
    )


def _with_id(frame: pd.DataFrame, run_id: str, step: str, name: str) -> pd.DataFrame:
    cols = [c for c in SCHEMAS[name].names if c in frame.columns and c not in ("run_id", "step")]
    out = frame[cols].copy()
    out.insert(0, "step", step)
    out.insert(0, "run_id", run_id)
    return out


def _address(text: Any) -> str | None:
    if not text:
        return None
    try:
        return ipaddress.ip_address(text).compressed
    except ValueError:
        return str(text)


def read_alerts(path: Path, run_id: str, step: str, source: str) -> pd.DataFrame:
    """The alert events of an eve.json as rows of the alerts table (other events, and lines that
    are not JSON, are skipped)."""
    rows = []
    with open(path, errors="replace") as f:
        for line in f:
            if '"alert"' not in line:
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            if ev.get("event_type") != "alert":
                continue
            a = ev.get("alert") or {}
            rows.append(
                {
                    "ts": ev.get("timestamp"),
                    "gid": a.get("gid"),
                    "sid": a.get("signature_id"),
                    "rev": a.get("rev"),
                    "msg": a.get("signature"),
                    "category": a.get("category"),
                    "severity": a.get("severity"),
                    "proto": ev.get("proto"),
                    "src": _address(ev.get("src_ip")),
                    "sport": ev.get("src_port"),
                    "dst": _address(ev.get("dest_ip")),
                    "dport": ev.get("dest_port"),
                    "action": a.get("action"),
                }
            )
    frame = pd.DataFrame(
        rows,
        columns=[
            "ts",
            "gid",
            "sid",
            "rev",
            "msg",
            "category",
            "severity",
            "proto",
            "src",
            "sport",
            "dst",
            "dport",
            "action",
        ],
    )
    ts = pd.to_datetime(frame["ts"], utc=True, format="%Y-%m-%dT%H:%M:%S.%f%z", errors="coerce")
    ns = ts.dt.tz_convert(None).to_numpy(dtype="datetime64[ns]").view(np.int64)
    frame["ts_ns"] = pd.array(ns, dtype="Int64")
    frame.loc[ts.isna().to_numpy(), "ts_ns"] = pd.NA
    frame = frame.drop(columns="ts")
    frame.insert(0, "step", step)
    frame.insert(0, "run_id", run_id)
    frame["source"] = source
    return frame


def _alerts(
    base: Path, names: tuple[str, ...], run_dir: Path, run_id: str, step: str
) -> list[pd.DataFrame]:
    out = []
    for name in names:
        p = base / name
        if p.is_file():
            out.append(read_alerts(p, run_id, step, str(p.relative_to(run_dir))))
    return out


def _concat(frames: list[pd.DataFrame | None]) -> pd.DataFrame | None:
    present = [f for f in frames if f is not None]
    if not present:
        return None
    present = [f for f in present if len(f)] or present[:1]
    return present[0] if len(present) == 1 else pd.concat(present, ignore_index=True)


def write_tables(out: str | os.PathLike, tables: dict[str, Any]) -> list[Path]:
    """Write TABLES ({name: data}) into OUT/tables/, each file replaced atomically, and remove
    the analysis tables of an earlier analysis that are not among them. Returns the paths."""
    out = Path(out)
    written = [write_table(out, name, data) for name, data in tables.items()]
    for name in ANALYSIS_TABLES:
        if name not in tables:
            table_path(out, name).unlink(missing_ok=True)
    return written


def write_run_tables(
    out: str | os.PathLike,
    doc: dict[str, Any],
    flows: pd.DataFrame,
    timing: pd.DataFrame | None = None,
    manifest: dict[str, Any] | None = None,
    run_dir: str | os.PathLike | None = None,
) -> list[Path]:
    """The run tables of an offline analysis (analysis.analyze): DOC is what metrics.json holds,
    FLOWS the flow table, TIMING the timing errors (or None), MANIFEST the run's manifest (None
    for a capture analysed on its own), RUN_DIR the run folder (for its eve.json files).
    run_id is the manifest's, else the name of the output folder; the one step is "run"."""
    out = Path(out)
    manifest = manifest or {}
    run_id = manifest.get("run_id") or out.name
    mode = "capture" if not manifest else manifest.get("mode", "offline")
    step = "run"
    gens = manifest.get("generators") or {}
    sent = [g.get("packets_sent") for g in gens.values() if isinstance(g, dict)]
    steps = {
        "run_id": run_id,
        "step": step,
        "kind": mode,
        "generator": ",".join(gens) or None,
        "status": manifest.get("status"),
        **traffic_columns(doc, len(flows)),
        "sent": sum(s for s in sent if s is not None) if sent and None not in sent else None,
    }
    tables: dict[str, Any] = {
        "run": [run_row(run_id, manifest, mode, doc.get("analysed_utc"))],
        "steps": [steps],
        "per_second": per_second_rows(run_id, step, doc) if doc.get("per_second") else [],
        "flows": _with_id(flows, run_id, step, "flows"),
    }
    if timing is not None and len(timing):
        tables["timing"] = _with_id(timing, run_id, step, "timing")
    alerts = _alerts(Path(run_dir), RUN_EVE, Path(run_dir), run_id, step) if run_dir else []
    if alerts:
        tables["alerts"] = _concat(alerts)
    if tables["per_second"] is None:
        tables["per_second"] = []
    if (out / "manifest.json").is_file():  # a run folder analysed before the run tables existed
        for legacy in LEGACY_CSV:
            (out / legacy).unlink(missing_ok=True)
    return write_tables(out, tables)


def _gen_resources(samples: pd.DataFrame, prefix: str) -> dict[str, Any]:
    rows = samples[
        (samples["kind"] == "process") & samples["label"].astype(str).str.startswith(prefix)
    ]
    if rows.empty:
        return {}
    per_t = rows.groupby("t")[["cpu_percent", "rss_bytes"]].sum(min_count=1)
    return {
        "cpu_mean": per_t["cpu_percent"].mean(),
        "cpu_max": per_t["cpu_percent"].max(),
        "rss_mean": per_t["rss_bytes"].mean(),
        "rss_max": per_t["rss_bytes"].max(),
    }


def _capture_of(step_dir: Path, step: dict[str, Any]) -> Path | None:
    """The capture step_metrics analysed (capture.pcap, or the generator's own)."""
    for p in (
        step_dir / "capture.pcap",
        step_dir / step["capture_source"] if step.get("capture_source") else None,
    ):
        if p is not None and p.is_file():
            return p
    return None


def write_live_tables(
    run_dir: str | os.PathLike, doc: dict[str, Any], manifest: dict[str, Any]
) -> list[Path]:
    """The run tables of a live run (analysis.live.analyze_live): DOC its metrics (the steps as
    step_metrics gives them), MANIFEST the run's manifest. The flow table of each step is read
    from its capture in chunks (analysis.stream.flow_table_of)."""

    run = Path(run_dir)
    run_id = manifest.get("run_id") or run.name
    entries = {e.get("name"): e for e in manifest.get("steps") or []}
    steps, per_second, flows, resources, alerts = [], [], [], [], []
    seen_samples: set[Path] = set()
    for s in doc.get("steps") or []:
        name = s["name"]
        entry = entries.get(name, {})
        step_dir = run / entry.get("dir", ".")
        loss = s.get("loss") or {}
        gens = entry.get("generators") or {}
        row = {
            "run_id": run_id,
            "step": name,
            "kind": s.get("kind"),
            "generator": ",".join(g.get("name", t) for t, g in gens.items()) or None,
            "status": s.get("status"),
            **traffic_columns(s.get("traffic")),
            "sent": loss.get("sent"),
            "wire": loss.get("wire"),
            "dut": loss.get("dut"),
            "loss_rate": loss.get("loss_rate"),
            "dut_dropped": loss.get("dut_dropped"),
            "capture_dropped": (s.get("capture") or {}).get("dropped_by_kernel"),
            "params": json.dumps(s.get("params"), sort_keys=True) if s.get("params") else None,
            "error": s.get("error"),
            "alerts": (s.get("dut") or {}).get("alerts"),
        }
        samples_csv = step_dir / "samples.csv"
        if samples_csv.is_file() and samples_csv.stat().st_size and samples_csv not in seen_samples:
            seen_samples.add(samples_csv)
            samples = pd.read_csv(samples_csv)
            row.update(_gen_resources(samples, "gen:"))
            row.update({f"dut_{k}": v for k, v in _gen_resources(samples, "dut").items()})
            resources.append(_with_id(samples, run_id, name, "resources"))
        steps.append(row)
        per_second.append(per_second_rows(run_id, name, s.get("traffic")))
        pcap = _capture_of(step_dir, s) if s.get("traffic") else None
        if pcap is not None:
            try:
                flows.append(_with_id(flow_table_of([pcap]), run_id, name, "flows"))
            except CaptureError:
                pass  # step_metrics said so (capture_problem)
        alerts += _alerts(step_dir, STEP_EVE, run, run_id, name)
    alerts += _alerts(run, RUN_EVE, run, run_id, "run")
    tables: dict[str, Any] = {
        "run": [run_row(run_id, manifest, "live", None)],
        "steps": steps,
        "per_second": _concat(per_second) if any(p is not None for p in per_second) else [],
        "flows": _concat(flows) if flows else [],
    }
    if resources:
        tables["resources"] = _concat(resources)
    if alerts:
        tables["alerts"] = _concat(alerts)
    return write_tables(run, tables)


__all__ = [
    "ANALYSIS_TABLES",
    "read_alerts",
    "run_row",
    "write_live_tables",
    "write_run_tables",
    "write_tables",
]
