"""Seed 001's tables and figures for a comparison run: generators side by side, and the seed's
published numbers (seed001.py) beside ours."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from analysis.live import PALETTE, fmt_count, processes, read_samples, save_figure
from analysis.plots import figure, legend, mpl

from . import seed001

CAPTIONS = {
    "rates": "Average rates, ours and the seed's (seed 001, figure 8)",
    "throughput": "Average throughputs, ours and the seed's (seed 001, figure 9)",
    "rate_series": "Rate over time",
    "cpu": "CPU over time at top speed",
    "ram": "Memory over time at top speed",
    "cpu_load": "CPU versus offered load",
    "ram_load": "Memory versus offered load",
}
SEED_STYLE = {"facecolor": "white", "edgecolor": "#333333", "hatch": "///", "linewidth": 1}
SEED_LINE = {"color": "#333333", "ls": (0, (4, 2)), "lw": 1.4}
SEED = seed001.VM["label"]


def comparison_table(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Seed 001's numbers per generator: average rate, deviation, variance, warm-up, steady
    statistics, average packet size and throughput = size × rate (seed's APS × APR)."""
    rows = []
    for s in steps:
        if s["kind"] != "topspeed" or not s.get("traffic"):
            continue
        t, title = s["traffic"], s["params"]["generator"]
        res = s["resources"].get(title, {})
        rows.append(
            {
                "generator": title,
                "plugin": s["params"].get("plugin", title),
                "packets": t["packets"],
                "mean_pps": t["mean_pps"],
                "std_pps": t["std_pps"],
                "variance_pct": t["variance_pct"],
                "warmup_s": t["warmup"]["seconds"],
                "steady_mean_pps": t["steady"]["mean_pps"],
                "steady_variance_pct": t["steady"]["variance_pct"],
                "average_packet_size": t["average_packet_size"],
                "throughput_Bps": t["throughput_formula_Bps"],
                "cpu_mean": res.get("cpu_mean"),
                "cpu_max": res.get("cpu_max"),
                "rss_max": res.get("rss_max"),
                "sent": (s.get("loss") or {}).get("sent"),
            }
        )
    best = max((r["steady_mean_pps"] or 0 for r in rows), default=0)
    for r in rows:
        r["rate_ratio_to_best"] = (r["steady_mean_pps"] or 0) / best if best else None
    return rows


def machine_memory(steps: list[dict[str, Any]]) -> float | None:
    """The run machine's memory in bytes, from the monitor's samples (RSS and its % of the
    machine's memory, as top shows them): the generator with the largest share, for precision."""
    best = max(
        (
            r
            for s in steps
            for r in (s.get("resources") or {}).values()
            if r.get("mem_percent_mean") and r.get("rss_mean")
        ),
        key=lambda r: r["mem_percent_mean"],
        default=None,
    )
    return best["rss_mean"] * 100 / best["mem_percent_mean"] if best else None


def ratio(ours: float | None, seeds: float | None) -> float | None:
    return ours / seeds if ours is not None and seeds else None


def seed_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The seed's generators, each with ours of the same tool (if any) and ours/seed ratios."""
    out = []
    for r in seed001.RESULTS:
        mine = next((x for x in rows if x["plugin"] == r.plugin), None) if r.plugin else None
        out.append(
            {
                "generator": r.name,
                "ours": mine["generator"] if mine else None,
                "mean_pps": r.mean_pps,
                "std_pps": r.std_pps,
                "variance_pct": r.variance_pct,
                "warmup_s": r.warmup_s,
                "steady_variance_pct": r.steady_variance_pct,
                "average_packet_size": r.average_packet_size,
                "throughput_Bps": r.throughput_Bps,
                "cpu_pct": r.cpu_pct,
                "cpu_note": r.cpu_note,
                "mem_pct": r.mem_pct,
                "mem_bytes": r.mem_bytes,
                "mem_note": r.mem_note,
                "note": r.counterpart_note,
                "where": r.where,
                "rate_ratio": ratio(mine and mine["mean_pps"], r.mean_pps),
                "throughput_ratio": ratio(mine and mine["throughput_Bps"], r.throughput_Bps),
                "size_ratio": ratio(mine and mine["average_packet_size"], r.average_packet_size),
            }
        )
    return out


def analyze(steps: list[dict[str, Any]]) -> dict[str, Any]:
    rows = comparison_table(steps)
    memory = machine_memory(steps)
    for r in rows:
        r["mem_pct_max"] = (
            r["rss_max"] / memory * 100 if memory and r["rss_max"] is not None else None
        )
    return {
        "comparison": rows,
        "machine_memory_bytes": memory,
        "seed001": seed_rows(rows),
        "seed001_vm": seed001.VM,
    }


# --------------------------------------------------------------------------------------------
# Figures


def _slug(title: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", title)


def _shade(k: int, n: int) -> str:
    """The K-th of N load steps: light to dark blue, heavier load darker."""
    lo, hi = (158, 202, 225), (8, 48, 107)
    f = k / max(n - 1, 1)
    return "#" + "".join(f"{round(a + (b - a) * f):02x}" for a, b in zip(lo, hi))


def _bar_labels(ax: Any, bars: Any, texts: list[str], above: list[float]) -> None:
    """Each bar's value written above it (and above its error bar: ABOVE, in data units)."""
    for bar, text, extra in zip(bars, texts, above):
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, bar.get_height() + extra),
            ha="center",
            va="bottom",
            fontsize=7,
            xytext=(0, 3),
            textcoords="offset points",
        )


def _grouped_bars(
    doc: dict[str, Any],
    title: str,
    ylabel: str,
    key: str,
    scale: float,
    label: Any,
    err: str | None = None,
) -> Any:
    """Figures 8 and 9: per generator our bar (colour) and the seed's (hatched, beside it)."""
    rows, seeds = doc["comparison"], doc["seed001"]
    names = [r["generator"] for r in rows] + [s["generator"] for s in seeds if s["ours"] is None]
    mine = {r["generator"]: r for r in rows}
    seed_of = {s["ours"] or s["generator"]: s for s in seeds}
    fig, ax = figure(title, "", ylabel)
    w = 0.38
    xs = range(len(names))
    ours_x = [i - w / 2 for i, n in enumerate(names) if n in mine]
    ours_rows = [mine[n] for n in names if n in mine]
    bars = ax.bar(
        ours_x,
        [(r[key] or 0) / scale for r in ours_rows],
        width=w,
        color=[PALETTE[i % len(PALETTE)] for i in range(len(ours_rows))],
        label="ours (this machine)",
    )
    _bar_labels(
        ax,
        bars,
        [label(r) for r in ours_rows],
        [(r[err] or 0) / scale if err else 0 for r in ours_rows],
    )
    seed_x = [i + w / 2 for i, n in enumerate(names) if n in seed_of]
    seed_bars = [seed_of[n] for n in names if n in seed_of]
    bars = ax.bar(seed_x, [s[key] / scale for s in seed_bars], width=w, label=SEED, **SEED_STYLE)
    _bar_labels(
        ax, bars, [label(s) for s in seed_bars], [s[err] / scale if err else 0 for s in seed_bars]
    )
    tops = [((r[key] or 0) + ((r[err] or 0) if err else 0)) / scale for r in ours_rows + seed_bars]
    ax.set_ylim(0, 1.15 * max(tops + [1]))  # room for the labels above the bars
    ax.set_xticks(list(xs), [n if n in mine else f"{n}\n(seed only)" for n in names])
    return fig, ax, ours_x, ours_rows, seed_x, seed_bars


def _rate_figure(run: Path, doc: dict[str, Any]) -> Path:
    fig, ax, ox, orows, sx, srows = _grouped_bars(
        doc,
        "Average packet rate per generator: ours beside seed 001's (its figure 8)",
        "packets per second",
        "mean_pps",
        1,
        lambda r: fmt_count(r["mean_pps"]),
        "std_pps",
    )
    ax.errorbar(
        ox,
        [r["mean_pps"] or 0 for r in orows],
        yerr=[r["std_pps"] or 0 for r in orows],
        fmt="none",
        ecolor="#555555",
        capsize=3,
        lw=1,
        label="± standard deviation",
    )
    ax.errorbar(
        sx,
        [s["mean_pps"] for s in srows],
        yerr=[s["std_pps"] for s in srows],
        fmt="none",
        ecolor="#555555",
        capsize=3,
        lw=1,
    )
    ax.plot(
        ox,
        [r["steady_mean_pps"] or 0 for r in orows],
        ls="none",
        marker="D",
        ms=5,
        color="black",
        label="ours after warm-up",
    )
    ax.yaxis.set_major_formatter(mpl().EngFormatter(unit="pps"))
    legend(ax)
    return save_figure(fig, run / "compare-rates.png")


def _throughput_figure(run: Path, doc: dict[str, Any]) -> Path:
    fig, ax, *_ = _grouped_bars(
        doc,
        "Average throughput = packet size × rate: ours beside seed 001's (its figure 9)",
        "kB/s (1,000 bytes per second)",
        "throughput_Bps",
        1000,
        lambda r: (
            f"{fmt_count((r['throughput_Bps'] or 0) / 1000)}\n{fmt_count(r['average_packet_size'])} B"
        ),
    )
    ax.yaxis.set_major_formatter(lambda v, _: fmt_count(v))
    legend(ax)
    return save_figure(fig, run / "compare-throughput.png")


def _per_step_series(
    run: Path, steps: list[dict[str, Any]], by_name: dict[str, Any], title: str
) -> list[tuple[str, dict[str, Any], Any]]:
    """(label, step, samples) of the generator TITLE: its load steps, then its top-speed step."""
    mine = [s for s in steps if s["params"].get("generator") == title]
    mine.sort(key=lambda s: (s["kind"] == "topspeed", s["params"].get("offered_kBps", 0)))
    out = []
    for s in mine:
        series = processes(
            read_samples(run / by_name.get(s["name"], {}).get("dir", ".")), f"gen:{title}:"
        )
        if series.empty:
            continue
        label = f"{s['params']['offered_kBps']:,} kB/s" if s["kind"] == "load" else "top speed"
        out.append((label, s, series))
    return out


def _resource_figures(run: Path, doc: dict[str, Any], by_name: dict[str, Any]) -> dict[str, Path]:
    """The seed's figures 2-7: per generator CPU and memory over time, one line per load step;
    the seed's printed level of the same tool as a dashed reference line."""
    out: dict[str, Path] = {}
    memory = doc.get("machine_memory_bytes")
    for row in doc["comparison"]:
        title = row["generator"]
        lines = _per_step_series(run, doc["steps"], by_name, title)
        if not lines:
            continue
        ref = seed001.for_plugin(row["plugin"])
        figs = (
            (f"its figure {ref.figures[0]}", f"its figure {ref.figures[1]}")
            if ref and ref.figures
            else (
                "like figures 2, 4, 6; no counterpart in the seed",
                "like figures 3, 5, 7; no counterpart in the seed",
            )
        )
        n_load = sum(1 for _, s, _ in lines if s["kind"] == "load")
        fig_c, ax_c = figure(
            f"{title}: CPU over time per load step (seed 001, {figs[0]})",
            "seconds since the step began",
            "CPU % (100 = one core, like top)",
        )
        fig_m, ax_m = figure(
            f"{title}: memory over time per load step (seed 001, {figs[1]})",
            "seconds since the step began",
            "RSS (MB)",
        )
        k = 0
        for label, s, series in lines:
            style = (
                {"color": _shade(k, n_load), "marker": "o", "ms": 3}
                if s["kind"] == "load"
                else {"color": PALETTE[1], "ls": ":", "marker": "s", "ms": 3}
            )
            k += 1 if s["kind"] == "load" else 0
            ax_c.plot(series["t"], series["cpu_percent"], label=label, **style)
            ax_m.plot(series["t"], series["rss_bytes"] / 1e6, label=label, **style)
        if ref and ref.cpu_pct is not None:
            ax_c.axhline(
                ref.cpu_pct,
                label=f"{SEED}: {ref.cpu_pct} % ({ref.cpu_note.split(';')[0]})",
                **SEED_LINE,
            )
        if ref and ref.mem_bytes is not None:
            ax_m.axhline(
                ref.mem_bytes / 1e6,
                label=f"{SEED}: {ref.mem_pct} % of 4 GB = "
                f"{ref.mem_bytes / 1e6:.0f} MB ({ref.mem_note.split(';')[0]})",
                **SEED_LINE,
            )
        if memory:
            sec = ax_m.secondary_yaxis(
                "right", functions=(lambda mb: mb * 1e8 / memory, lambda pct: pct * memory / 1e8)
            )
            sec.set_ylabel(f"% of this machine's {memory / 1e9:.1f} GB")
        cpu_top = max(
            [ser["cpu_percent"].max() for _, _, ser in lines]
            + [ref.cpu_pct if ref and ref.cpu_pct else 0]
        )
        mem_top = max(
            [ser["rss_bytes"].max() / 1e6 for _, _, ser in lines]
            + [ref.mem_bytes / 1e6 if ref and ref.mem_bytes else 0]
        )
        ax_c.set_ylim(0, 1.12 * (cpu_top or 1))  # headroom: a reference line is not on the frame
        ax_m.set_ylim(0, 1.12 * (mem_top or 1))
        legend(ax_c)
        legend(ax_m)
        out[f"{title}: CPU per load step"] = save_figure(
            fig_c, run / f"compare-cpu-{_slug(title)}.png"
        )
        out[f"{title}: memory per load step"] = save_figure(
            fig_m, run / f"compare-ram-{_slug(title)}.png"
        )
    return out


def plots(run: Path, doc: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    steps = doc["steps"]
    doc["machine_cpus"] = (manifest.get("host") or {}).get("cpus")  # for the report's sentence
    by_name = {e["name"]: e for e in manifest.get("steps", [])}
    if doc.get("comparison"):
        out["rates"] = _rate_figure(run, doc)
        out["throughput"] = _throughput_figure(run, doc)
        fig, ax = figure(
            "Packet rate per second", "seconds since the first packet", "packets per second"
        )
        fig2, ax2 = figure(
            "CPU of each generator at top speed (like top)",
            "seconds since the step began",
            "CPU % (100 = one core)",
        )
        fig3, ax3 = figure(
            "Memory of each generator at top speed", "seconds since the step began", "RSS (MB)"
        )
        for i, s in enumerate(x for x in steps if x["kind"] == "topspeed"):
            colour = PALETTE[i % len(PALETTE)]
            title = s["params"]["generator"]
            if s.get("traffic"):
                ps = s["traffic"]["per_second"]
                full = len(ps["second"]) - (1 if ps["last_partial"] else 0)  # a partial second
                ax.plot(
                    ps["second"][:full],
                    ps["packets"][:full],
                    marker="o",
                    ms=3,
                    color=colour,
                    label=title,
                )
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
        out.update(_resource_figures(run, doc, by_name))
    load = [s for s in steps if s["kind"] == "load"]
    if load:
        fig, ax = figure(
            "CPU versus offered load (seed 001, figures 2, 4, 6)",
            "offered load (kB/s)",
            "mean CPU % (100 = one core)",
        )
        fig2, ax2 = figure(
            "Memory versus offered load (seed 001, figures 3, 5, 7)",
            "offered load (kB/s)",
            "max RSS (MB)",
        )
        gens = list(dict.fromkeys(s["params"]["generator"] for s in load))
        for i, g in enumerate(gens):
            pts = [
                (s["params"]["offered_kBps"], s["resources"].get(g, {}))
                for s in load
                if s["params"]["generator"] == g
            ]
            x = [p for p, _ in pts]
            colour = PALETTE[i % len(PALETTE)]
            ax.plot(x, [r.get("cpu_mean") or 0 for _, r in pts], marker="o", color=colour, label=g)
            ax2.plot(
                x,
                [(r.get("rss_max") or 0) / 1e6 for _, r in pts],
                marker="o",
                color=colour,
                label=g,
            )
        trex = seed001.TREX
        ax.plot(
            [seed001.LOAD_STEP_BYTES_PER_S / 1000],
            [trex.cpu_pct],
            ls="none",
            marker="X",
            ms=9,
            mfc="white",
            mec="#333333",
            label=f"{SEED}: TRex {trex.cpu_pct} % at 500 KB/s",
        )
        legend(ax)
        legend(ax2)
        out["cpu_load"] = save_figure(fig, run / "compare-cpu-vs-load.png")
        out["ram_load"] = save_figure(fig2, run / "compare-ram-vs-load.png")
    return out


# --------------------------------------------------------------------------------------------
# Report


def _pct(x: Any) -> str:
    return fmt_count(x, 2) + " %" if x is not None else "–"


def _x(x: Any) -> str:
    return fmt_count(x, 2) + "×" if x is not None else "–"


def report(doc: dict[str, Any]) -> list:
    if not doc.get("comparison"):
        return []
    memory, vm = doc.get("machine_memory_bytes"), doc.get("seed001_vm") or seed001.VM
    seeds = doc.get("seed001") or []
    seed_of = {s["ours"]: s for s in seeds if s["ours"]}
    head = [
        "generator",
        "source",
        "mean pps",
        "std pps",
        "variance",
        "warm-up s",
        "steady pps",
        "steady variance",
        "avg size B",
        "throughput kB/s",
        "ours/seed rate",
        "ours/seed throughput",
        "CPU % mean (max)",
        "RAM max MB",
        "RAM % of machine",
    ]

    def seed_line(s: dict[str, Any]) -> list[str]:
        return [
            s["generator"],
            "seed 001",
            fmt_count(s["mean_pps"]),
            fmt_count(s["std_pps"]),
            _pct(s["variance_pct"]),
            fmt_count(s["warmup_s"]) + " (by hand)" if s["warmup_s"] else "–",
            "–",
            _pct(s["steady_variance_pct"]),
            fmt_count(s["average_packet_size"]),
            fmt_count(s["throughput_Bps"] / 1000, 1),
            "–",
            "–",
            fmt_count(s["cpu_pct"], 1) if s["cpu_pct"] is not None else "–",
            fmt_count((s["mem_bytes"] or 0) / 1e6, 0) if s["mem_bytes"] else "–",
            _pct(s["mem_pct"]) + " of 4 GB" if s["mem_pct"] is not None else "–",
        ]

    table = []
    for r in doc["comparison"]:
        s = seed_of.get(r["generator"])
        table.append(
            [
                r["generator"],
                "ours",
                fmt_count(r["mean_pps"]),
                fmt_count(r["std_pps"]),
                _pct(r["variance_pct"]),
                fmt_count(r["warmup_s"]),
                fmt_count(r["steady_mean_pps"]),
                _pct(r["steady_variance_pct"]),
                fmt_count(r["average_packet_size"], 1),
                fmt_count((r["throughput_Bps"] or 0) / 1000, 1),
                _x(s["rate_ratio"]) if s else "–",
                _x(s["throughput_ratio"]) if s else "–",
                f"{fmt_count(r['cpu_mean'], 1)} ({fmt_count(r.get('cpu_max'), 1)})",
                fmt_count((r["rss_max"] or 0) / 1e6, 1),
                _pct(r.get("mem_pct_max")),
            ]
        )
        if s:
            table.append(seed_line(s))
    table += [seed_line(s) for s in seeds if not s["ours"]]
    machine = (
        f"{doc.get('machine_cpus') or '?'} CPUs, {memory / 1e9:.1f} GB of memory"
        if memory
        else "memory unknown (no resource samples)"
    )
    notes = [
        f"{s['generator']}: CPU "
        + (f"{s['cpu_pct']} % ({s['cpu_note']})" if s["cpu_pct"] is not None else s["cpu_note"])
        + (
            f"; RAM {s['mem_pct']} % of 4 GB ({s['mem_note']})."
            if s["mem_pct"] is not None
            else "."
        )
        for s in seeds
    ]
    counterpart = [f"{s['generator']}: {s['note']}." for s in seeds if s["note"]]
    return [
        ("h2", "Generator comparison (seed 001's method)"),
        (
            "p",
            "Per-second rates from the capture. Warm-up is found automatically (the "
            "seed removed TRex's first 9 s by hand); 'steady' is after it. Throughput is "
            "average packet size × average rate, as in the seed.",
        ),
        (
            "p",
            f"Rows marked 'seed 001' are the seed's published numbers (testbed/methods/comparison/"
            f"seed001.py, with the section of each), measured on a VM with {vm['vcpus']} vCPUs and "
            f"4 GB for {vm['run_s']} s per generator; ours on this machine: {machine}. The seed's "
            f"KB/s are KiB/s, shown here as kB/s (1,000 B). ours/seed: our whole-run mean over "
            f"the seed's, for the same tool. The seed's CPU and RAM are single levels it prints "
            f"(its load steps, not top speed); its RAM % is of its 4 GB, ours of this machine's "
            f"memory, so compare the MB.",
        ),
        ("table", head, table),
        ("p", "The seed's CPU and RAM figures: " + " ".join(notes) + " " + " ".join(counterpart)),
    ]
