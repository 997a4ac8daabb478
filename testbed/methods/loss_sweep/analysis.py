"""Seed 002's tables and figures for a loss sweep: loss versus packet rate and hosts, and the
DUT's per-thread CPU and memory per step.

With several devices under test (`testbed.duts`: steps `NAME-STEP`) the table says each step's
DUT (`dut_label`, `dut_kind`) and the loss figures draw one line per DUT. A flow meter's loss is
the packets on the wire its collected records lack (analysis.flowmeter.steps), and its loss by
stage gets a figure of its own. Seed 002's own curve is drawn dashed beside them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.flowmeter.steps import STAGE_TITLES
from analysis.live import (
    PALETTE,
    dut_threads,
    fmt_count,
    fmt_pct,
    processes,
    read_samples,
    save_figure,
)
from analysis.plots import GREY, ORANGE, figure, legend

CAPTIONS = {
    "loss_rate": "Loss versus packet rate",
    "loss_hosts": "Loss versus hosts",
    "meter_stages": "Flow meters: loss by stage",
    "dut_cpu": "DUT threads' CPU",
    "dut_mem": "DUT memory",
}

# Seed 002 (ANGEL flow meter), packet loss rate (%) by its PCAP buffer. Figure 3 (III.A.1):
# no loss up to 25,000 pps; 12.89 % at 30,000 pps and 38.11 % at 40,000 pps (one flow; the
# numbers are given in III.B.1's text); "greater than 50 %" at 50,000 pps (a lower bound).
# Figure 11 (III.B.1): no loss up to 10 hosts (20,000 flows/s); 15.33 % at 15 hosts (30,000
# flows/s), 44.30 % at 20 hosts (40,000 flows/s); "more than 80 %" at 50 hosts (a lower bound).
SEED_LOSS: dict[str, tuple[list[tuple[float, float]], tuple[float, float]]] = {
    "rate": (
        [(1000, 0), (5000, 0), (10000, 0), (15000, 0), (20000, 0), (25000, 0)]
        + [(30000, 12.89), (40000, 38.11)],
        (50000, 50.0),
    ),
    "hosts": ([(1, 0), (5, 0), (10, 0), (15, 15.33), (20, 44.30)], (50, 80.0)),
}
# A step of several DUTs: `LABEL-` before the method's own name (rate-..., hosts-N).
_DUT_STEP = re.compile(r"^(?P<label>.+)-(?:rate|hosts)-[^-]+$")


def dut_label(step: dict[str, Any]) -> str | None:
    """The DUT a step of several (testbed.duts) ran against: the manifest's label, or the
    `NAME-` of the step's name; None for a run of one DUT."""
    label = (step.get("dut") or {}).get("label")
    if label:
        return str(label)
    found = _DUT_STEP.match(str(step.get("name") or ""))
    return found.group("label") if found else None


def _meter_columns(meter: dict[str, Any] | None) -> dict[str, Any]:
    """A flow-meter step's loss (packets on the wire not in its collected records, 0 .. 1) and
    its stages (fractions of the wire's packets; None where the counters cannot tell)."""
    if not meter:
        return {}
    st = meter.get("stages") or {}
    return {
        "meter_loss": (st.get("total") or {}).get("packets_fraction"),
        "meter_flow_loss": (st.get("total") or {}).get("flows_fraction"),
        **{f"{k}_loss": (st.get(k) or {}).get("packets_fraction") for k in STAGE_TITLES},
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
                "dut_label": dut_label(s),
                "dut_kind": (s.get("dut") or {}).get("kind"),
                **_meter_columns(s.get("meter")),
            }
        )
    return rows


def _loss_percent(row: dict[str, Any]) -> float:
    """The loss a figure draws: a meter's (what its records lack), else the step's."""
    loss = row.get("meter_loss") if row.get("meter_loss") is not None else row.get("loss_rate")
    return 100 * (loss or 0)


def loss_series(
    rows: list[dict[str, Any]], xkey: str
) -> dict[str | None, list[tuple[float, float]]]:
    """The points (x, loss %) each DUT's line goes through, by DUT label (one DUT: None), in
    order of x; rows without an x are left out."""
    out: dict[str | None, list[tuple[float, float]]] = {}
    for r in sorted((r for r in rows if r.get(xkey) is not None), key=lambda r: r[xkey]):
        out.setdefault(r.get("dut_label"), []).append((r[xkey], _loss_percent(r)))
    return out


def _seed_line(ax: Any, kind: str) -> None:
    points, above = SEED_LOSS[kind]
    ax.plot(*zip(*points), ls="--", color=GREY, marker=".", label="seed 002 (ANGEL)")
    ax.plot([points[-1][0], above[0]], [points[-1][1], above[1]], ls=":", color=GREY)
    ax.plot(*above, marker="^", color=GREY, ls="none")
    ax.annotate(f"> {above[1]:g} %", above, textcoords="offset points", xytext=(4, -10))


def _stages_figure(rows: list[dict[str, Any]], run: Path) -> Path | None:
    """Stacked bars: each meter step's loss by stage (% of the wire's packets)."""
    rows = [r for r in rows if r.get("meter_loss") is not None]
    if not rows:
        return None
    fig, ax = figure(
        "Flow meters: where the packets were lost (seed 002, III.A.1: capture, processing, export)",
        "",
        "% of the packets on the wire",
    )
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for i, (stage, title) in enumerate(STAGE_TITLES.items()):
        # a negative stage (a drop counter above what is missing) is drawn as none
        height = np.array([max(0.0, 100 * (r.get(f"{stage}_loss") or 0)) for r in rows])
        ax.bar(x, height, bottom=bottom, color=PALETTE[i % len(PALETTE)], label=title)
        bottom += height
    ax.set_xticks(x, [r["step"] for r in rows], rotation=45, ha="right")
    ax.set_ylim(0, max(1.0, float(bottom.max()) * 1.3))  # room for the legend above the bars
    ax.legend(loc="upper left", fontsize=8, frameon=False)  # rotated labels fill the bottom
    return save_figure(fig, run / "meter-loss-stages.png")


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
        series = loss_series(rows, xkey)
        for i, (label, points) in enumerate(series.items()):  # one line per DUT
            ax.plot(
                *zip(*points),
                marker="o",
                color=ORANGE if label is None else PALETTE[i % len(PALETTE)],
                label=label or "DUT",
            )
        _seed_line(ax, kind)
        fps = [r for r in rows if kind == "hosts" and r.get("flows_per_second") and r.get(xkey)]
        if fps:  # seed 002's figure 11 counts hosts and flows per second
            per_host = fps[0]["flows_per_second"] / fps[0][xkey]
            top = ax.secondary_xaxis(
                "top", functions=(lambda h, k=per_host: h * k, lambda f, k=per_host: f / k)
            )
            top.set_xlabel("flows per second")
        legend(ax)
        out[f"loss_{kind}"] = save_figure(fig, run / fname)
    stages = _stages_figure(doc["loss_sweep"], run)
    if stages is not None:
        out["meter_stages"] = stages
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
    rows = doc["loss_sweep"]
    if any(r.get("dut_label") or r.get("meter_loss") is not None for r in rows):
        return _report_duts(rows)
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


def _report_duts(rows: list[dict[str, Any]]) -> list:
    """The sweep table with the DUT of each step and a flow meter's loss and its stages."""
    meters = any(r.get("meter_loss") is not None for r in rows)
    stage_heads = [f"meter: {t}" for t in STAGE_TITLES.values()] if meters else []
    return [
        ("h2", "Loss sweep (seed 002's method)"),
        (
            "table",
            [
                "DUT",
                "kind",
                "step",
                "pps offered",
                "hosts",
                "sent",
                "wire",
                "DUT received",
                "DUT dropped",
                "loss",
                *(["meter loss (packets)", "meter loss (flows)", *stage_heads] if meters else []),
                "DUT CPU %",
                "DUT RSS MB",
            ],
            [
                [
                    r.get("dut_label") or "–",
                    r.get("dut_kind") or "–",
                    r["step"],
                    fmt_count(r.get("packet_rate")),
                    fmt_count(r.get("hosts")),
                    fmt_count(r["sent"]),
                    fmt_count(r["wire"]),
                    fmt_count(r["dut"]),
                    fmt_count(r["dut_dropped"]),
                    fmt_pct(r["loss_rate"]),
                    *(
                        [
                            fmt_pct(r.get("meter_loss")),
                            fmt_pct(r.get("meter_flow_loss")),
                            *(fmt_pct(r.get(f"{k}_loss")) for k in STAGE_TITLES),
                        ]
                        if meters
                        else []
                    ),
                    fmt_count(r["dut_cpu_mean"], 1),
                    fmt_count((r["dut_rss_max"] or 0) / 1e6, 1),
                ]
                for r in rows
            ],
        ),
        (
            "p",
            "A flow meter's loss is the packets on the wire its collected records lack; the "
            "figures draw it, and the DUT's own loss for the other kinds. The stages "
            '(docs/flowmeters.md, "Loss by stage") are fractions of the wire\'s packets; – '
            "where the meter's counters cannot tell (then counted in processing).",
        ),
    ]
