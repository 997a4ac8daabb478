"""Seed 003's figures for the inline multiplier (Figs. 13-16): egress versus ingress, and the
original's added latency per packet size for each T; the numbers come from the captures
(analysis.multiply_live), with the client's result (every page fetched whole) beside them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from analysis.live import PALETTE, fmt_count, save_figure
from analysis.multiply_live import SEED, SIZE_LABELS, step_result
from analysis.plots import GREY, figure

CAPTIONS = {
    "multiply_egress": "Egress versus ingress per second (seed 003, Figs. 13 and 15)",
    "multiply_latency": "Added latency of the original per frame size (seed 003, Figs. 14 and 16)",
}


def analyze(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {}  # the captures are read in plots(), which has the run folder


def step_rows(run: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for entry in manifest.get("steps", []):
        params = entry.get("params") or {}
        if "copies" not in params:
            continue
        files = {
            k: row["file"]
            for row in entry.get("captures", [])
            for k in ("at", "out", "dut")
            if row["at"] == params[k]
        }
        files["in"] = files.pop("at", None)
        mult = entry.get("multiplier") or {}
        row: dict[str, Any] = {
            "step": entry["name"],
            "status": entry.get("status"),
            "fetches": mult.get("fetches"),
            "fetches_ok": mult.get("fetches_ok"),
            "client_bytes": mult.get("bytes"),
        }
        if all(files.get(k) for k in ("in", "out", "dut")):
            row.update(
                step_result(run / entry.get("dir", "."), params["copies"], params["both"], files)
            )
        else:
            row.update(
                copies=params["copies"],
                error="the step has no capture at each of the multiplier's "
                "interfaces (capture.at = inline.at, capture.also_at = [inline.out, inline.dut])",
            )
        rows.append(row)
    return rows


def plots(run: Path, doc: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Path]:
    """Adds `multiply` (one row per step) to the document and draws the figures."""
    rows = step_rows(run, manifest)
    doc["multiply"] = rows
    doc["multiply_seed"] = SEED
    out: dict[str, Path] = {}
    measured = [r for r in rows if r.get("ingress")]
    if not measured:
        return out
    fig, ax = figure(
        "Egress vs ingress, per second of each step",
        "ingress (original frames/s)",
        "egress (frames/s)",
    )
    top = max(p["ingress"] for r in measured for p in r["per_second"]) or 1
    xs = np.array([0, top])
    for i, r in enumerate(measured):
        c = PALETTE[i % len(PALETTE)]
        pts = r["per_second"]
        ax.scatter(
            [p["ingress"] for p in pts],
            [p["egress"] for p in pts],
            color=c,
            s=14,
            label=f"T={r['copies']} (ours)",
        )
        ax.plot(xs, (r["copies"] + 1) * xs, color=c, lw=0.8)
    for ratio in SEED["ratios"].values():
        ax.plot(xs, ratio * xs, color=GREY, ls="--", lw=0.8)
        ax.annotate(f"seed 003: {ratio}x", (top, ratio * top), fontsize=7, color=GREY, ha="right")
    ax.legend(fontsize=8, frameon=False)
    out["multiply_egress"] = save_figure(fig, run / "multiply-egress.png")
    fig, ax = figure(
        "Added latency of the original (SPFO: after its T copies)",
        "frame size (bytes)",
        "latency (µs)",
    )
    for i, r in enumerate(measured):
        c = PALETTE[i % len(PALETTE)]
        idle = {b["size"]: b for b in r["latency_idle_by_size"]}
        every = {b["size"]: b for b in r["latency_by_size"]}
        x = [k for k, lab in enumerate(SIZE_LABELS) if lab in idle]
        ax.plot(
            x,
            [idle[SIZE_LABELS[k]]["median_us"] for k in x],
            marker="o",
            color=c,
            label=f"T={r['copies']} median, found it idle",
        )
        x = [k for k, lab in enumerate(SIZE_LABELS) if lab in every]
        ax.plot(
            x,
            [every[SIZE_LABELS[k]]["median_us"] for k in x],
            marker="s",
            ls="--",
            color=c,
            lw=0.8,
            label=f"T={r['copies']} median, all (bursts queue)",
        )
        ax.plot(
            x,
            [every[SIZE_LABELS[k]]["p99_us"] for k in x],
            marker="^",
            ls=":",
            color=c,
            lw=0.8,
            label=f"T={r['copies']} p99, all",
        )
    ax.set_xticks(range(len(SIZE_LABELS)), SIZE_LABELS)
    ax.set_yscale("log")
    ax.legend(fontsize=6, frameon=False, ncol=3)
    out["multiply_latency"] = save_figure(fig, run / "multiply-latency.png")
    return out


def report(doc: dict[str, Any]) -> list:
    rows = doc.get("multiply") or []
    if not rows:
        return []
    table = [
        [
            r["step"],
            str(r["copies"]),
            f"{fmt_count(r.get('fetches_ok'))}/{fmt_count(r.get('fetches'))}",
            fmt_count(r.get("ingress")),
            fmt_count(r.get("egress")),
            fmt_count(r.get("expected")),
            fmt_count(r.get("loss")),
            "yes" if r.get("exact") else "NO",
            fmt_count(r.get("latency_median_us"), 1),
            fmt_count(r.get("latency_p99_us"), 1),
        ]
        for r in rows
    ]
    table.append(
        ["seed 003", "10 / 22", "–", "–", "11x / 23x", "–", "–", "–", "not given", "not given"]
    )
    sizes = [
        [
            r["step"],
            b["size"],
            fmt_count(b["packets"]),
            fmt_count(b["median_us"], 1),
            fmt_count(b["p99_us"], 1),
            *next(
                (
                    [
                        fmt_count(a["packets"]),
                        fmt_count(a["median_us"], 1),
                        fmt_count(a["p99_us"], 1),
                    ]
                    for a in r["latency_by_size"]
                    if a["size"] == b["size"]
                ),
                ["–", "–", "–"],
            ),
        ]
        for r in rows
        for b in r.get("latency_idle_by_size") or []
    ]
    return [
        ("h2", "Inline multiplier (seed 003, Figs. 13-16)"),
        (
            "p",
            "From the captures at the multiplier's interfaces (one clock): ingress = IP frames of the "
            "multiplied direction(s), matched by content between the client and server sides; egress = "
            "those originals as forwarded plus the copies on the DUT side; loss = (T+1) x ingress - "
            "egress. Latency = departure - arrival of each original (it leaves after its T copies). "
            "Fetches: HTTP 200 with the whole page, as the client saw them. Seed 003 gives the ratios "
            "(11x, 23x) and the trend (latency grows with frame size), not latency values.",
        ),
        (
            "table",
            [
                "step",
                "T",
                "fetches ok",
                "ingress",
                "egress",
                "(T+1) x ingress",
                "loss",
                "exact",
                "latency median µs",
                "latency p99 µs",
            ],
            table,
        ),
        (
            "p",
            "Added latency per frame size: originals that found the multiplier idle (its own latency, "
            "as the seed's low-rate latency test) and all originals (a burst's frames also wait for the "
            "copies of the frames before them).",
        ),
        (
            "table",
            [
                "step",
                "frame size",
                "idle: originals",
                "median µs",
                "p99 µs",
                "all: originals",
                "median µs",
                "p99 µs",
            ],
            sizes,
        ),
    ]
