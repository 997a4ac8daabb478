"""The run tables, figure and report lines of an OTG session's run folder (`testbed otg serve`).

A config served over OTG is a run folder like any other (docs/otg.md): manifest.json (`mode`
"otg", `method` "otg"), config.json, one `start-NNN/` folder per traffic start with the engines'
sessions, summaries, per-second statistics and flow logs; the receivers' captures (`rx-PORT.pcap`,
one per rx port from the first start on), the captures the client asked for, metrics.json (the
last OTG flow and port metrics) and report.md. This module turns it into the run tables the catalogue reads
(`run`; `steps`: one row per rx port, measured on what its receiver captured over the config's
starts, `sent` the frames the engines sent in all; `per_second`, `flows`) and `otg-rx-rate.png`,
the received rate of every rx port over time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from .capture import read_capture
from .metrics import flow_table, plain, traffic_metrics
from .plots import figure, legend, save
from .runtables import per_second_rows, run_row, traffic_columns, write_tables
from .tables import SCHEMAS

FIGURE = "otg-rx-rate.png"


def _engine_sent(step_dir: Path) -> int:
    total = 0
    for path in sorted(step_dir.glob("*.summary.json")):
        try:
            total += int(json.loads(path.read_text()).get("sent") or 0)
        except (OSError, ValueError):
            continue
    return total


def otg_tables(run_dir: Path, manifest: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run tables of an OTG run folder, and the traffic metrics of each rx port's capture
    they came from (`{"rx-p2": metrics}`)."""
    run_id = manifest["run_id"]
    steps: list[dict[str, Any]] = []
    per_second: list[pd.DataFrame] = []
    flows: list[pd.DataFrame] = []
    measured: dict[str, Any] = {}
    starts = (manifest.get("otg") or {}).get("starts", [])
    sent = sum(_engine_sent(run_dir / s["folder"]) for s in starts)
    for cap_path in sorted(run_dir.glob("rx-*.pcap")):
        port = cap_path.stem[len("rx-") :]
        step = f"rx-{port}"
        cap = read_capture(cap_path)
        ft = flow_table(cap)
        m = traffic_metrics(cap, ft)
        measured[step] = m
        row: dict[str, Any] = {
            "run_id": run_id,
            "step": step,
            "kind": "otg",
            "generator": "flowengine",
            "status": manifest.get("status"),
            **traffic_columns(m),
            "sent": sent,
            "wire": m.get("packets"),
            "params": json.dumps({"rx_port": port, "starts": [s["folder"] for s in starts]}),
        }
        steps.append(row)
        rows = per_second_rows(run_id, step, m)
        if rows is not None:
            per_second.append(rows)
        if len(ft):
            f = ft[[c for c in SCHEMAS["flows"].names if c in ft.columns]].copy()
            f.insert(0, "step", step)
            f.insert(0, "run_id", run_id)
            flows.append(f)
    tables: dict[str, Any] = {
        "run": [run_row(run_id, manifest, "otg", None)],
        "steps": steps,
    }
    if per_second:
        tables["per_second"] = pd.concat(per_second, ignore_index=True)
    if flows:
        tables["flows"] = pd.concat(flows, ignore_index=True)
    return tables, measured


def plot_rx_rate(measured: dict[str, Any], path: Path) -> Path | None:
    """Packets received per second, one line per rx port."""
    series = [(k, m.get("per_second") or {}) for k, m in measured.items()]
    series = [(k, ps) for k, ps in series if ps.get("second")]
    if not series:
        return None
    fig, ax = figure(
        "OTG: frames received per second", "second from the first frame received", "frames/s"
    )
    for name, ps in series:
        ax.plot(ps["second"], ps["packets"], marker="o", markersize=3, label=name)
    legend(ax)
    save(fig, path)
    return path


def analyze_otg(run_dir: Path, manifest: dict[str, Any]) -> list[Path]:
    """Write the run tables and the figure of an OTG run folder; the paths written."""
    tables, measured = otg_tables(run_dir, manifest)
    written = write_tables(run_dir, tables)
    fig = plot_rx_rate(measured, run_dir / FIGURE)
    (run_dir / "otg-traffic.json").write_text(json.dumps(plain(measured), indent=1) + "\n")
    return [*written, *([fig] if fig else [])]
