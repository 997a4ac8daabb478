"""The flow-matching sweep's results (`testbed match-sweep`, testbed/matchsweep.py): the rows as a
table, metrics.json, seed 000's Figs. 2-5 and Table 1 redrawn with the seed's numbers beside ours
(analysis/seed000.py), and report.md. Reads the sweep folder only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import seed000
from analysis.plots import mpl, save
from ntgcore.files import write_whole

ROWS_NAME = "rows.parquet"
FIGURES = {
    "fig2": "match-fig2-rate.png",
    "fig3": "match-fig3-ratio.png",
    "fig4": "match-fig4-pdf.png",
    "fig5": "match-fig5-loss.png",
    "table1": "match-table1.png",
}
STYLE = {
    "chain": "-",
    "tree": "--",
    "linear": "-.",
    "robin": ":",
    "cuckoo": (0, (5, 1, 1, 1)),
    "linear16": (0, (3, 1, 1, 1, 1, 1)),
}
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def rows_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per structure x hash x size x feed x repeat; `probe_hist` a list column."""
    frame = pd.DataFrame(rows)
    for col in ("mpps", "p_l1", "probe_mean", "occupancy", "bytes_per_flow"):
        if col not in frame:
            frame[col] = np.nan
    return frame


def load_rows(folder: Path) -> pd.DataFrame:
    return pd.read_parquet(Path(folder) / ROWS_NAME)


def feed_class(feed: str) -> str:
    kind = feed.split(":")[0]
    return {"det": "deterministic", "pcap": "trace"}.get(
        kind, "random" if kind == "uniform" else kind
    )


def short(feed: str) -> str:
    """pcap:/a/b/c.pcap -> pcap:c.pcap (titles and legends)."""
    return "pcap:" + Path(feed[5:]).name if feed.startswith("pcap:") else feed


def means(rows: pd.DataFrame) -> pd.DataFrame:
    ok = rows[~rows["timed_out"].astype(bool)]
    return ok.groupby(["feed", "struct", "hash", "size"], as_index=False).agg(
        mpps=("mpps", "mean"),
        mpps_min=("mpps", "min"),
        mpps_max=("mpps", "max"),
        p_l1=("p_l1", "mean"),
        probe_mean=("probe_mean", "mean"),
        occupancy=("occupancy", "mean"),
    )


def table1(rows: pd.DataFrame) -> pd.DataFrame:
    """Seed 000's Table 1 beside ours: chain and tree, per feed class, at the swept size closest to
    the seed's 54 M, hash coralreef when swept (else the first)."""
    m = means(rows)
    hashes = list(dict.fromkeys(rows["hash"]))
    h = seed000.TABLE1_HASH if seed000.TABLE1_HASH in hashes else hashes[0]
    out = []
    for struct, bounds in seed000.TABLE1.items():
        for cls, seed_mpps in bounds.items():
            g = m[(m["struct"] == struct) & (m["hash"] == h) & (m["feed"].map(feed_class) == cls)]
            r = None
            if len(g):
                size = min(g["size"].unique(), key=lambda s: abs(np.log(s / seed000.TABLE1_SIZE)))
                r = g[g["size"] == size].iloc[0]
            out.append(
                {
                    "struct": struct,
                    "feed_class": cls,
                    "seed_mpps": seed_mpps,
                    "hash": h,
                    "feed": None if r is None else r["feed"],
                    "size": None if r is None else int(r["size"]),
                    "mpps": None if r is None else float(r["mpps"]),
                }
            )
    return pd.DataFrame(out)


def _fig(w: float, h: float, nrows: int = 1, ncols: int = 1):
    fig = mpl().Figure(figsize=(w, h), dpi=110, layout="constrained")
    mpl().FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def plot_fig2(rows: pd.DataFrame, path: Path) -> Path:
    """Mpps against size (log2), a panel per feed x hash, a line per structure; occupancy dotted
    on the right axis; seed 000's threshold (2^22) marked."""
    m = means(rows)
    feeds, hashes = list(dict.fromkeys(rows["feed"])), list(dict.fromkeys(rows["hash"]))
    fig, axes = _fig(3.6 * len(hashes) + 1, 2.8 * len(feeds), len(feeds), len(hashes))
    for i, feed in enumerate(feeds):
        for j, h in enumerate(hashes):
            ax = axes[i][j]
            occ = ax.twinx()
            for k, struct in enumerate(dict.fromkeys(rows["struct"])):
                g = m[(m["feed"] == feed) & (m["hash"] == h) & (m["struct"] == struct)].sort_values(
                    "size"
                )
                pow2 = (g["size"].astype("int64") & (g["size"].astype("int64") - 1)) == 0
                odd, g = g[~pow2], g[pow2]  # non-powers of two: Fig. 5, marks here
                ax.plot(
                    g["size"],
                    g["mpps"],
                    ls=STYLE.get(struct, "-"),
                    marker="o",
                    ms=3,
                    color=COLORS[k % len(COLORS)],
                    label=struct,
                )
                ax.plot(
                    odd["size"],
                    odd["mpps"],
                    ls="none",
                    marker="s",
                    ms=4,
                    mfc="none",
                    color=COLORS[k % len(COLORS)],
                )
                ax.fill_between(
                    g["size"],
                    g["mpps_min"],
                    g["mpps_max"],
                    alpha=0.2,
                    color=COLORS[k % len(COLORS)],
                )
                occ.plot(g["size"], g["occupancy"], ":", color="grey", lw=1)
            ax.axvline(2**seed000.FIG2_THRESHOLD_LOG2, color="k", lw=0.8, ls=":")
            ax.set_xscale("log", base=2)
            ax.set_title(f"{short(feed)}, {h}", fontsize=9, loc="left")
            ax.grid(alpha=0.3)
            occ.set_ylim(0, 1.05)
            occ.tick_params(labelsize=7)
            if j == 0:
                ax.set_ylabel("Mpps")
            if i == len(feeds) - 1:
                ax.set_xlabel("table size (lines, slots or flows)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        "Fig. 2: matching rate against size (open squares: sizes that are not powers of two; dotted "
        "grey, right: used lines / lines); seed 000's threshold ~2^22 (CAIDA) marked",
        x=0.01,
        ha="left",
        fontsize=10,
    )
    save(fig, path)
    return path


def plot_fig3(rows: pd.DataFrame, path: Path) -> Path:
    """Tree rate / chain rate against size, a line per feed x hash; seed 000's ratios as stars."""
    m = means(rows)
    fig, axes = _fig(7.5, 4.2)
    ax = axes[0][0]
    k = 0
    for feed in dict.fromkeys(rows["feed"]):
        for h in dict.fromkeys(rows["hash"]):
            g = m[(m["feed"] == feed) & (m["hash"] == h)].pivot(
                index="size", columns="struct", values="mpps"
            )
            if {"chain", "tree"} <= set(g.columns):
                ax.plot(
                    g.index,
                    g["tree"] / g["chain"],
                    marker="o",
                    ms=3,
                    color=COLORS[k % len(COLORS)],
                    label=f"{short(feed)}, {h}",
                )
                k += 1
    for lg, ratio, text in seed000.FIG3_POINTS:
        ax.plot([2**lg], [ratio], "k*", ms=10)
        ax.annotate(
            f"seed 000: {text}",
            (2**lg, ratio),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("table size (lines)")
    ax.set_ylabel("tree Mpps / chain Mpps")
    ax.grid(alpha=0.3)
    if k:
        ax.legend(fontsize=7)
    else:  # a sweep of one structure: the seed's points alone, and why
        ax.text(
            0.5,
            0.5,
            "no ratio: the sweep needs both chain and tree in --structs",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=9,
            color="grey",
        )
    ax.set_title("Fig. 3: trees over lists (above 1: trees faster)", loc="left", fontsize=10)
    save(fig, path)
    return path


def plot_fig4(rows: pd.DataFrame, path: Path, struct: str = "chain", sizes: int = 3) -> Path:
    """Chain-length (probe) PDF, log y, for a few sizes, a line per hash, on the first feed that
    is not deterministic; P(L=1) and E[L] in the legend."""
    ok = rows[~rows["timed_out"].astype(bool)]
    if ok.empty:  # every cell timed out: no probe counts to draw, and the figure says so
        fig, axes = _fig(7.5, 3.4)
        axes[0][0].text(
            0.5,
            0.5,
            "no probe counts: every cell timed out (raise --cell-timeout)",
            transform=axes[0][0].transAxes,
            ha="center",
            va="center",
            fontsize=9,
            color="grey",
        )
        fig.suptitle("Fig. 4: chain-length PDF", x=0.01, ha="left", fontsize=10)
        save(fig, path)
        return path
    feeds = [f for f in dict.fromkeys(ok["feed"]) if feed_class(f) != "deterministic"] or list(
        ok["feed"][:1]
    )
    sel = ok[
        (ok["feed"] == feeds[0])
        & (ok["struct"] == (struct if struct in set(ok["struct"]) else ok["struct"].iloc[0]))
    ]
    all_sizes = sorted(sel["size"].unique())
    picked = [
        all_sizes[int(i)] for i in np.linspace(0, len(all_sizes) - 1, min(sizes, len(all_sizes)))
    ]
    fig, axes = _fig(3.6 * len(picked) + 0.5, 3.4, 1, len(picked))
    for ax, size in zip(axes[0], picked):
        for k, h in enumerate(dict.fromkeys(sel["hash"])):
            g = sel[(sel["size"] == size) & (sel["hash"] == h)]
            if not len(g):
                continue
            hist = np.sum(np.stack(g["probe_hist"].map(np.asarray).to_list()), axis=0).astype(float)
            pdf = hist / hist.sum()
            x = np.arange(1, len(pdf) + 1)
            ax.semilogy(
                x[pdf > 0],
                pdf[pdf > 0],
                marker="o",
                ms=3,
                color=COLORS[k % len(COLORS)],
                label=f"{h}: P(L=1) {g['p_l1'].mean():.3f}, E[L] {g['probe_mean'].mean():.2f}",
            )
        ax.set_title(f"size {size:,}", fontsize=9, loc="left")
        ax.set_xlabel("probes L (64: 64 or more)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("P(L)")
    fig.suptitle(
        f"Fig. 4: chain-length PDF ({sel['struct'].iloc[0] if len(sel) else struct}, {feeds[0]}); "
        "seed 000: exponential decrease, Murmur shortest, CoralReef longest",
        x=0.01,
        ha="left",
        fontsize=10,
    )
    save(fig, path)
    return path


def loss_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Seed 000's Fig. 5: for each power-of-two size, the rate of the nearest swept size that is
    not a power of two over the power of two's rate (the 'potential loss'), per feed x struct x hash."""
    m = means(rows)
    out = []
    for (feed, struct, h), g in m.groupby(["feed", "struct", "hash"]):
        is_pow2 = (g["size"].astype("int64") & (g["size"].astype("int64") - 1)) == 0
        pow2, odd = g[is_pow2], g[~is_pow2]
        for r in pow2.itertuples():
            if not len(odd):
                break
            o = odd.iloc[int(np.argmin(np.abs(np.log(odd["size"] / r.size))))]
            if abs(np.log2(o["size"] / r.size)) <= 0.5:
                out.append(
                    {
                        "feed": feed,
                        "struct": struct,
                        "hash": h,
                        "size": int(r.size),
                        "odd_size": int(o["size"]),
                        "mpps_pow2": r.mpps,
                        "mpps_odd": o["mpps"],
                        "loss": o["mpps"] / r.mpps,
                    }
                )
    return pd.DataFrame(
        out, columns=["feed", "struct", "hash", "size", "odd_size", "mpps_pow2", "mpps_odd", "loss"]
    )


def plot_fig5(rows: pd.DataFrame, path: Path) -> Path:
    """The band between non-powers of two and powers of two (seed 000's Fig. 5) as the ratio of the
    two rates against size; the seed's worst losses (lists x4, trees x1.3) as lines."""
    lt = loss_table(rows)
    fig, axes = _fig(7.5, 4.2)
    ax = axes[0][0]
    for k, ((feed, struct, h), g) in enumerate(lt.groupby(["feed", "struct", "hash"])):
        ax.plot(
            g["size"],
            g["loss"],
            ls=STYLE.get(struct, "-"),
            marker="o",
            ms=3,
            color=COLORS[k % len(COLORS)],
            label=f"{struct}, {h}, {short(feed)}",
        )
    for struct, loss in seed000.FIG5_LOSS.items():
        ax.axhline(loss, color="k", lw=0.8, ls=STYLE.get(struct, "-"))
        ax.annotate(
            f"seed 000, {struct} (CoralReef): up to x{loss}",
            (2**14, loss),
            fontsize=7,
            xytext=(0, 3),
            textcoords="offset points",
        )
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("power-of-two size (beside it: the nearest non-power of two swept)")
    ax.set_ylabel("Mpps(non-power of two) / Mpps(power of two)")
    ax.grid(alpha=0.3)
    if len(lt):
        ax.legend(fontsize=6)
    else:
        ax.text(
            0.5,
            0.5,
            "no non-power-of-two sizes swept (add e.g. 1000003)",
            transform=ax.transAxes,
            ha="center",
        )
    ax.set_title("Fig. 5: potential loss of a power-of-two size", loc="left", fontsize=10)
    save(fig, path)
    return path


def plot_table1(rows: pd.DataFrame, path: Path) -> Path:
    """Table 1 as bars: seed 000's bounds beside ours, lists and trees, per feed class."""
    t = table1(rows)
    fig, axes = _fig(7.0, 3.8)
    ax = axes[0][0]
    labels = [f"{r.struct}\n{r.feed_class}" for r in t.itertuples()]
    x = np.arange(len(t))
    ax.bar(x - 0.2, t["seed_mpps"], 0.4, color="#999999", label="seed 000 (CoralReef, 54M)")
    ax.bar(x + 0.2, t["mpps"].fillna(0), 0.4, color="#1f77b4", label="ours")
    for xi, r in zip(x, t.itertuples()):
        ax.annotate(
            "n/a" if r.mpps is None or pd.isna(r.mpps) else f"{r.mpps:.1f}",
            (xi + 0.2, r.mpps or 0),
            ha="center",
            fontsize=7,
            xytext=(0, 2),
            textcoords="offset points",
        )
        ax.annotate(
            f"{r.seed_mpps}",
            (xi - 0.2, r.seed_mpps),
            ha="center",
            fontsize=7,
            xytext=(0, 2),
            textcoords="offset points",
        )
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("Mpps")
    ax.legend(fontsize=7)
    ax.set_title(
        "Table 1: bounds of the matching rate, seed 000 beside ours", loc="left", fontsize=10
    )
    save(fig, path)
    return path


def write_results(
    rows: pd.DataFrame, out: Path, request: dict[str, Any], machine: dict[str, Any]
) -> dict[str, Path]:
    """metrics.json, the five figures and report.md into OUT (rows.parquet is already there)."""
    paths = {k: out / v for k, v in FIGURES.items()}
    for k, fn in (
        ("fig2", plot_fig2),
        ("fig3", plot_fig3),
        ("fig4", plot_fig4),
        ("fig5", plot_fig5),
        ("table1", plot_table1),
    ):
        fn(rows, paths[k])
    t1, lt = table1(rows), loss_table(rows)
    metrics = {
        "request": request,
        "machine": machine,
        "rows": len(rows),
        "timed_out": int(rows["timed_out"].astype(bool).sum()),
        "table1": t1.to_dict(orient="records"),
        "fig5_loss": lt.to_dict(orient="records"),
        "seed_000": {
            "table1": seed000.TABLE1,
            "table1_size": seed000.TABLE1_SIZE,
            "trace": seed000.TRACE,
            "fig5_loss": seed000.FIG5_LOSS,
        },
    }
    write_whole(out / "metrics.json", json.dumps(metrics, indent=2, default=str) + "\n")
    lines = [
        "# Flow-matching sweep (seed 000)",
        "",
        f"{len(rows)} cells ({metrics['timed_out']} timed out): structures "
        f"{', '.join(dict.fromkeys(rows['struct']))}; hashes {', '.join(dict.fromkeys(rows['hash']))}; "
        f"feeds {', '.join(dict.fromkeys(rows['feed']))}; {request.get('packets')} packets a cell. "
        f"Machine: {machine.get('cpu', '')} ({machine.get('cpus')} CPUs).",
        "",
        "## Table 1",
        "",
        "| structure | feed | seed 000 (Mpps) | ours (Mpps) | our feed, size, hash |",
        "|---|---|---:|---:|---|",
    ]
    for r in t1.itertuples():
        ours = "n/a" if r.mpps is None or pd.isna(r.mpps) else f"{r.mpps:.1f}"
        where = (
            "not measured (or every cell timed out)"
            if r.feed is None or pd.isna(r.size)
            else f"{r.feed}, {int(r.size):,}, {r.hash}"
        )
        lines.append(f"| {r.struct} | {r.feed_class} | {r.seed_mpps} | {ours} | {where} |")
    lines += ["", f"Seed 000's trace: {seed000.TRACE}.", ""]
    lines += [f"![{k}]({p.name})" for k, p in paths.items()] + [""]
    write_whole(out / "report.md", "\n".join(lines))
    paths["metrics"], paths["report"] = out / "metrics.json", out / "report.md"
    return paths
