"""Seed 002's tables and figures for a loss sweep: loss versus packet rate and hosts, and the
DUT's per-thread CPU and memory per step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.live import (
    PALETTE,
    dut_threads,
    fmt_count,
    fmt_pct,
    processes,
    read_samples,
    save_figure,
)
from analysis.plots import ORANGE, figure

CAPTIONS = {
    "loss_rate": "Loss versus packet rate",
    "loss_hosts": "Loss versus hosts",
    "dut_cpu": "DUT threads' CPU",
    "dut_mem": "DUT memory",
}


def sweep_table(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for s in steps:
        loss = s.get("loss") or {}
        res = s["resources"].get("dut", {})
        params = dict(s.get("params") or {})
        if params.get("max") and loss.get("sent") and params.get("step_s"):
            params["packet_rate"] = loss["sent"] / params["step_s"]  # what top speed reached
        rows.append(
            {
                "step": s["name"],
                "kind": s["kind"],
                **params,
                "sent": loss.get("sent"),
                "wire": loss.get("wire"),
                "dut": loss.get("dut"),
                "dut_dropped": loss.get("dut_dropped"),
                "loss_rate": loss.get("loss_rate"),
                "dut_cpu_mean": res.get("cpu_mean"),
                "dut_rss_max": res.get("rss_max"),
            }
        )
    return rows


def analyze(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"loss_sweep": sweep_table(steps)}


def plots(run: Path, doc: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    steps = doc["steps"]
    by_name = {e["name"]: e for e in manifest.get("steps", [])}
    for kind, xkey, xlabel, fname, fig_no in (
        ("rate", "packet_rate", "offered packet rate (pps)", "loss-vs-rate.png", "3"),
        ("hosts", "hosts", "concurrent hosts", "loss-vs-hosts.png", "11"),
    ):
        rows = [r for r in doc["loss_sweep"] if r["kind"] == kind]
        if not rows:
            continue
        fig, ax = figure(
            f"Packet loss at the DUT (seed 002, figure {fig_no})", xlabel, "packet loss rate (%)"
        )
        rows = [r for r in rows if r.get(xkey) is not None]
        rows.sort(key=lambda r: r[xkey])
        ax.plot(
            [r[xkey] for r in rows],
            [100 * (r["loss_rate"] or 0) for r in rows],
            marker="o",
            color=ORANGE,
        )
        out[f"loss_{kind}"] = save_figure(fig, run / fname)
    threads, mem, labels = [], [], []
    for s in steps:
        entry = by_name.get(s["name"], {})
        samples = read_samples(run / entry.get("dir", "."))
        threads.append(dut_threads(samples))
        proc = processes(samples, "dut")
        labels.append(s["name"])
        mem.append(proc["rss_bytes"].to_numpy() / 1e6 if not proc.empty else np.zeros(0))
    pooled = pd.concat(threads) if threads else pd.DataFrame()
    if not pooled.empty:
        # the busiest threads (a capture and a processing thread in seed 002), one box each
        top = (
            pooled.groupby("name")["cpu_percent"]
            .mean()
            .sort_values(ascending=False)
            .index[:3]
            .tolist()
        )
        fig, ax = figure(
            "CPU of the DUT's busiest threads per step (seed 002, figures 9-10, 16-17)",
            "",
            "CPU % per thread (like top -H)",
        )
        width = 0.8 / len(top)
        for j, name in enumerate(top):
            data = [t.loc[t["name"] == name, "cpu_percent"].dropna().to_numpy() for t in threads]
            pos = [i + 1 + (j - (len(top) - 1) / 2) * width for i in range(len(threads))]
            box = ax.boxplot(
                [d if len(d) else [np.nan] for d in data],
                positions=pos,
                widths=width * 0.9,
                patch_artist=True,
                manage_ticks=False,
            )
            for patch in box["boxes"]:
                patch.set_facecolor(PALETTE[j % len(PALETTE)])
                patch.set_alpha(0.6)
            ax.plot([], [], color=PALETTE[j % len(PALETTE)], lw=8, alpha=0.6, label=str(name))
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=45, ha="right")
        ax.legend(loc="upper left", fontsize=8, frameon=False)  # rotated labels fill the bottom
        out["dut_cpu"] = save_figure(fig, run / "dut-cpu-box.png")
    if any(len(m) for m in mem):
        fig, ax = figure(
            "Memory of the DUT per step (seed 002, figures 7-8, 14-15)", "", "RSS (MB)"
        )
        ax.boxplot([m if len(m) else [np.nan] for m in mem])
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=45, ha="right")
        out["dut_mem"] = save_figure(fig, run / "dut-mem-box.png")
    return out


def report(doc: dict[str, Any]) -> list:
    if not doc.get("loss_sweep"):
        return []
    return [
        ("h2", "Loss sweep (seed 002's method)"),
        (
            "table",
            [
                "step",
                "pps offered",
                "hosts",
                "sent",
                "wire",
                "DUT",
                "DUT dropped",
                "loss",
                "DUT CPU %",
                "DUT RSS MB",
            ],
            [
                [
                    r["step"],
                    fmt_count(r.get("packet_rate")),
                    fmt_count(r.get("hosts")),
                    fmt_count(r["sent"]),
                    fmt_count(r["wire"]),
                    fmt_count(r["dut"]),
                    fmt_count(r["dut_dropped"]),
                    fmt_pct(r["loss_rate"]),
                    fmt_count(r["dut_cpu_mean"], 1),
                    fmt_count((r["dut_rss_max"] or 0) / 1e6, 1),
                ]
                for r in doc["loss_sweep"]
            ],
        ),
    ]
