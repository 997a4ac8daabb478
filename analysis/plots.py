"""PNG plots of a capture's metrics (matplotlib's Agg canvas; pyplot and its global state are
never touched, so importing this does not change a notebook's backend)."""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ntgcore.files import replacing

BLUE, ORANGE, GREY, GREEN = "#1f77b4", "#d9730d", "#8c8c8c", "#2a9d55"
PLOTS = {
    "rate": "rate.png",
    "throughput": "throughput.png",
    "sizes": "packet-sizes.png",
    "flows": "flows-started.png",
    "timing": "timing-errors.png",
}


@functools.cache
def mpl() -> SimpleNamespace:
    """The matplotlib pieces the plots use. matplotlib costs about 0.2 s to import, so it is
    imported at the first plot rather than by every command that imports the analysis."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter, MaxNLocator

    return SimpleNamespace(
        FigureCanvasAgg=FigureCanvasAgg,
        Figure=Figure,
        EngFormatter=EngFormatter,
        MaxNLocator=MaxNLocator,
    )


def figure(title: str, xlabel: str, ylabel: str) -> tuple[Any, Any]:
    fig = mpl().Figure(figsize=(9, 4.2), dpi=110, layout="constrained")
    mpl().FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title, loc="left", fontsize=12)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def _series(m: dict[str, Any], key: str) -> tuple[np.ndarray, np.ndarray, bool]:
    ps = m["per_second"]
    return np.asarray(ps["second"]), np.asarray(ps[key], dtype=float), bool(ps["last_partial"])


def _mark_warmup(ax: Any, m: dict[str, Any]) -> None:
    w = m["warmup"]["seconds"]
    if w:
        ax.axvspan(-0.5, w - 0.5, color=GREY, alpha=0.12, lw=0, label=f"warm-up ({w} s)")
        ax.axvline(w - 0.5, color=GREY, ls="--", lw=1)


def _plot_line(ax: Any, x: np.ndarray, y: np.ndarray, partial: bool, label: str) -> None:
    full = len(x) - 1 if partial else len(x)
    ax.plot(x[:full], y[:full], color=BLUE, marker="o", ms=3, lw=1.5, label=label)
    if partial:
        ax.plot(x[-2:], y[-2:], color=BLUE, ls=":", lw=1)
        ax.plot(
            x[-1:],
            y[-1:],
            ls="none",
            marker="o",
            ms=5,
            mfc="white",
            mec=BLUE,
            label="last second (partial, not in the statistics)",
        )


def save(fig: Any, path: Path) -> None:
    """The figure as PATH (its suffix the format), whole or not at all."""
    with replacing(path) as tmp:
        fig.savefig(tmp, format=Path(path).suffix.lstrip("."))


def legend(ax: Any) -> None:
    """Below the axes, where it cannot hide a data point."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8, frameon=False)


def plot_rate(m: dict[str, Any], path: Path) -> Path:
    x, y, partial = _series(m, "packets")
    fig, ax = figure(
        "Packet rate per second", "time since the first packet (s)", "packets per second"
    )
    ax.yaxis.set_major_formatter(mpl().EngFormatter(unit="pps"))
    _mark_warmup(ax, m)
    _plot_line(ax, x, y, partial, "packets per second")
    if m.get("mean_pps") is not None:
        ax.axhline(
            m["mean_pps"],
            color=GREY,
            lw=1,
            ls=":",
            label=f"mean, all seconds {m['mean_pps']:,.0f} pps (variance {m['variance_pct']:.2f}%)",
        )
    st = m["steady"]
    if st.get("mean_pps") is not None:
        ax.hlines(
            st["mean_pps"],
            st["from_second"] - 0.5,
            x[-1] + 0.5,
            color=ORANGE,
            lw=1.5,
            label=f"steady-state mean {st['mean_pps']:,.0f} pps "
            f"(variance {st['variance_pct']:.2f}%)",
        )
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(mpl().MaxNLocator(integer=True))
    legend(ax)
    save(fig, path)
    return path


def plot_throughput(m: dict[str, Any], path: Path) -> Path:
    x, y, partial = _series(m, "bytes")
    fig, ax = figure(
        "Throughput per second (frame bytes on the wire)",
        "time since the first packet (s)",
        "throughput",
    )
    ax.yaxis.set_major_formatter(mpl().EngFormatter(unit="bit/s"))
    _mark_warmup(ax, m)
    _plot_line(ax, x, y * 8, partial, "measured")
    st = m["steady"]
    if st.get("throughput_bps") is not None:
        ax.hlines(
            st["throughput_bps"],
            st["from_second"] - 0.5,
            x[-1] + 0.5,
            color=ORANGE,
            lw=1.5,
            label=f"steady-state mean {mpl().EngFormatter('bit/s')(st['throughput_bps'])}",
        )
    if st.get("throughput_formula_Bps") is not None:
        ax.hlines(
            st["throughput_formula_Bps"] * 8,
            st["from_second"] - 0.5,
            x[-1] + 0.5,
            color=GREEN,
            lw=1,
            ls="--",
            label="average size × average rate "
            f"{mpl().EngFormatter('bit/s')(st['throughput_formula_Bps'] * 8)}",
        )
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(mpl().MaxNLocator(integer=True))
    legend(ax)
    save(fig, path)
    return path


def plot_sizes(sizes: tuple[np.ndarray, np.ndarray], m: dict[str, Any], path: Path) -> Path:
    """Histogram of the wire lengths; SIZES = (lengths, packets of each length), as
    TrafficAccumulator.size_histogram gives it."""
    fig, ax = figure("Packet sizes", "frame length on the wire (bytes)", "packets")
    values, packets = sizes
    if len(values):
        hi = int(values.max())
        width = max(1, int(np.ceil((hi + 1) / 120)))
        edges = np.arange(0, hi + width + 1, width)
        counts = np.bincount(values // width, weights=packets, minlength=len(edges) - 1)
        ax.bar(edges[:-1], counts[: len(edges) - 1], width=width, align="edge", color=BLUE, lw=0)
        ax.axvline(
            m["average_packet_size"],
            color=ORANGE,
            lw=1.5,
            label=f"mean {m['average_packet_size']:.1f} B",
        )
        ax.axvline(
            m["packet_size"]["median"],
            color=GREEN,
            lw=1,
            ls="--",
            label=f"median {m['packet_size']['median']:.0f} B",
        )
        legend(ax)
    ax.yaxis.set_major_formatter(mpl().EngFormatter())
    save(fig, path)
    return path


def plot_flows(m: dict[str, Any], path: Path) -> Path:
    x, y, partial = _series(m, "flows_started")
    fig, ax = figure(
        "Flows started per second",
        "time since the first packet (s)",
        "new flows (first packet seen)",
    )
    colors = [BLUE] * len(x)
    if partial and len(x):
        colors[-1] = GREY
    ax.bar(x, y, width=0.8, color=colors, lw=0)
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(mpl().MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(mpl().MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(mpl().EngFormatter())
    save(fig, path)
    return path


def plot_timing(errors: Any, path: Path) -> Path:
    """Distributions of the flow-start and flow-duration errors (FLOR's timing tests)."""
    fig = mpl().Figure(figsize=(9, 3.8), dpi=110, layout="constrained")
    mpl().FigureCanvasAgg(fig)
    for i, (col, title) in enumerate(
        (("start_error_ns", "Flow-start error"), ("duration_error_ns", "Flow-duration error"))
    ):
        ax = fig.add_subplot(1, 2, i + 1)
        values = np.asarray(errors[col], dtype=np.float64) / 1e6
        ax.hist(values, bins=min(60, max(1, len(np.unique(values)))), color=BLUE)
        ax.set_title(title, loc="left", fontsize=12)
        ax.set_xlabel("error (ms): measured in the capture − planned")
        ax.set_ylabel("flow instances")
        ax.grid(True, color="#e5e5e5", linewidth=0.8)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    save(fig, path)
    return path


def write_plots(
    sizes: tuple[np.ndarray, np.ndarray], m: dict[str, Any], out_dir: Path
) -> dict[str, Path]:
    """All plots into OUT_DIR (created) from the metrics M and the packet-length histogram SIZES
    (TrafficAccumulator.size_histogram); returns {name: path}. Empty when there are no packets."""
    if not m["packets"]:
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    return {
        "rate": plot_rate(m, out_dir / PLOTS["rate"]),
        "throughput": plot_throughput(m, out_dir / PLOTS["throughput"]),
        "sizes": plot_sizes(sizes, m, out_dir / PLOTS["sizes"]),
        "flows": plot_flows(m, out_dir / PLOTS["flows"]),
    }
