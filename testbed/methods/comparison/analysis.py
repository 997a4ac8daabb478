"""Seed 001's tables and figures for a comparison run: generators side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.live import PALETTE, fmt_count, processes, read_samples, save_figure
from analysis.plots import figure, legend

CAPTIONS = {"rates": "Average rates", "throughput": "Average throughputs",
            "rate_series": "Rate over time", "cpu": "CPU over time", "ram": "Memory over time",
            "cpu_load": "CPU versus offered load", "ram_load": "Memory versus offered load"}


def comparison_table(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Seed 001's numbers per generator: average rate, deviation, variance, warm-up, steady
    statistics, average packet size and throughput = size × rate (seed's APS × APR)."""
    rows = []
    for s in steps:
        if s["kind"] != "topspeed" or not s.get("traffic"):
            continue
        t, title = s["traffic"], s["params"]["generator"]
        res = s["resources"].get(title, {})
        rows.append({
            "generator": title, "packets": t["packets"], "mean_pps": t["mean_pps"],
            "std_pps": t["std_pps"], "variance_pct": t["variance_pct"],
            "warmup_s": t["warmup"]["seconds"], "steady_mean_pps": t["steady"]["mean_pps"],
            "steady_variance_pct": t["steady"]["variance_pct"],
            "average_packet_size": t["average_packet_size"],
            "throughput_Bps": t["throughput_formula_Bps"],
            "cpu_mean": res.get("cpu_mean"), "rss_max": res.get("rss_max"),
            "sent": (s.get("loss") or {}).get("sent"),
        })
    best = max((r["steady_mean_pps"] or 0 for r in rows), default=0)
    for r in rows:
        r["rate_ratio_to_best"] = (r["steady_mean_pps"] or 0) / best if best else None
    return rows


def analyze(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"comparison": comparison_table(steps)}


def plots(run: Path, doc: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    steps = doc["steps"]
    by_name = {e["name"]: e for e in manifest.get("steps", [])}
    if doc.get("comparison"):
        rows = doc["comparison"]
        names = [r["generator"] for r in rows]
        fig, ax = figure("Average packet rate per generator (seed 001, figure 8)", "",
                         "packets per second")
        ax.bar(names, [r["mean_pps"] or 0 for r in rows], color=PALETTE[: len(rows)], alpha=0.35,
               label="whole run")
        ax.bar(names, [r["steady_mean_pps"] or 0 for r in rows], color=PALETTE[: len(rows)],
               width=0.4, label="after warm-up")
        legend(ax)
        out["rates"] = save_figure(fig, run / "compare-rates.png")
        fig, ax = figure("Average throughput = packet size × rate (seed 001, figure 9)", "", "kB/s")
        ax.bar(names, [(r["throughput_Bps"] or 0) / 1000 for r in rows], color=PALETTE[: len(rows)])
        out["throughput"] = save_figure(fig, run / "compare-throughput.png")
        fig, ax = figure("Packet rate per second", "seconds since the first packet",
                         "packets per second")
        fig2, ax2 = figure("CPU of each generator (like top)", "seconds since the step began",
                           "CPU % (100 = one core)")
        fig3, ax3 = figure("Memory of each generator", "seconds since the step began", "RSS (MB)")
        for i, s in enumerate(x for x in steps if x["kind"] == "topspeed"):
            colour = PALETTE[i % len(PALETTE)]
            title = s["params"]["generator"]
            if s.get("traffic"):
                ps = s["traffic"]["per_second"]
                full = len(ps["second"]) - (1 if ps["last_partial"] else 0)  # a partial second
                ax.plot(ps["second"][:full], ps["packets"][:full], marker="o", ms=3, color=colour,
                        label=title)
            entry = by_name.get(s["name"], {})
            series = processes(read_samples(run / entry.get("dir", ".")), f"gen:{title}:")
            if not series.empty:
                ax2.plot(series["t"], series["cpu_percent"], color=colour, label=title)
                ax3.plot(series["t"], series["rss_bytes"] / 1e6, color=colour, label=title)
        for a in (ax, ax2, ax3):
            legend(a)
        out["rate_series"] = save_figure(fig, run / "compare-rate-series.png")
        out["cpu"] = save_figure(fig2, run / "compare-cpu.png")
        out["ram"] = save_figure(fig3, run / "compare-ram.png")
    load = [s for s in steps if s["kind"] == "load"]
    if load:
        fig, ax = figure("CPU versus offered load (seed 001, figures 2, 4, 6)", "offered load (kB/s)",
                         "mean CPU % (100 = one core)")
        fig2, ax2 = figure("Memory versus offered load (seed 001, figures 3, 5, 7)",
                           "offered load (kB/s)", "max RSS (MB)")
        gens = list(dict.fromkeys(s["params"]["generator"] for s in load))
        for i, g in enumerate(gens):
            pts = [(s["params"]["offered_kBps"], s["resources"].get(g, {})) for s in load
                   if s["params"]["generator"] == g]
            x = [p for p, _ in pts]
            colour = PALETTE[i % len(PALETTE)]
            ax.plot(x, [r.get("cpu_mean") or 0 for _, r in pts], marker="o", color=colour, label=g)
            ax2.plot(x, [(r.get("rss_max") or 0) / 1e6 for _, r in pts], marker="o", color=colour,
                     label=g)
        legend(ax)
        legend(ax2)
        out["cpu_load"] = save_figure(fig, run / "compare-cpu-vs-load.png")
        out["ram_load"] = save_figure(fig2, run / "compare-ram-vs-load.png")
    return out


def report(doc: dict[str, Any]) -> list:
    if not doc.get("comparison"):
        return []
    return [
        ("h2", "Generator comparison (seed 001's method)"),
        ("p", "Per-second rates from the capture. Warm-up is found automatically (the "
              "seed removed TRex's first 9 s by hand); 'steady' is after it. Throughput is "
              "average packet size × average rate, as in the seed."),
        ("table", ["generator", "mean pps", "std pps", "variance", "warm-up s",
                   "steady pps", "steady variance", "avg size B", "throughput kB/s",
                   "rate vs best", "CPU % mean", "RSS max MB"],
         [[r["generator"], fmt_count(r["mean_pps"]), fmt_count(r["std_pps"]),
           fmt_count(r["variance_pct"], 2) + " %" if r["variance_pct"] is not None else "–",
           fmt_count(r["warmup_s"]), fmt_count(r["steady_mean_pps"]),
           fmt_count(r["steady_variance_pct"], 2) + " %" if r["steady_variance_pct"] is not None else "–",
           fmt_count(r["average_packet_size"], 1), fmt_count((r["throughput_Bps"] or 0) / 1000, 1),
           fmt_count(r["rate_ratio_to_best"], 3), fmt_count(r["cpu_mean"], 1),
           fmt_count((r["rss_max"] or 0) / 1e6, 1)] for r in doc["comparison"]]),
    ]
