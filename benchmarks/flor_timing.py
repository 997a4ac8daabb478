#!/usr/bin/env python3
"""FLOR's timing-accuracy tests (thesis section 6.2) for both planners of the native engine.

Runs scenarios/flor-interference.yaml (several seeds), flor-insertion.yaml and
flor-insertion-x10.yaml with `flowengine.planner` set to exact and to stochastic, measures every
flow instance's start error and duration error in the capture (analysis.timing), and writes
benchmarks/out/timing.json, a Markdown table on stdout, and one plot per scenario in docs/img/
(the distribution of both errors for both planners). FLOR reports errors of up to about a second
for its stochastic planner; the exact planner must show none in pcap mode.

    python benchmarks/flor_timing.py [--seeds 1 2 3] [--skip-x10] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.capture import read_capture
from analysis.metrics import flow_table
from analysis.timing import run_timing
from ntgcore.scenario import LoadedScenario, parse_scenario
from testbed.runner import run_scenario

PLANNERS = ("exact", "stochastic")


def run_one(path: Path, planner: str, seed: int, out: Path):
    data = yaml.safe_load(path.read_text())
    data.setdefault("flowengine", {})["planner"] = planner
    text = yaml.safe_dump(data, sort_keys=False)
    loaded = LoadedScenario(parse_scenario(text, str(path)), path, text)
    result = run_scenario(loaded, out, seed=seed, analyze=False, show_progress=False)
    if result.status != "completed":
        raise SystemExit(f"{path.name} ({planner}, seed {seed}) {result.status}: {result.messages}")
    flows = flow_table(read_capture(result.run_dir / "capture.pcap"))
    errors, summary = run_timing(result.run_dir, flows)
    return errors, summary


def plot(name: str, samples: dict, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.8), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    for i, (col, title) in enumerate(
        (("start_error_ns", "flow-start error"), ("duration_error_ns", "flow-duration error"))
    ):
        ax = fig.add_subplot(1, 2, i + 1)
        for planner, color in zip(PLANNERS, ("#1f77b4", "#d9730d")):
            v = np.sort(np.concatenate([e[col].to_numpy() for e in samples[planner]]) / 1e6)
            ax.step(
                v,
                np.arange(1, len(v) + 1) / len(v),
                where="post",
                color=color,
                label=f"{planner} (largest |error| {np.abs(v).max():,.3f} ms)",
            )
        ax.set_title(f"{name}: {title}", loc="left", fontsize=11)
        ax.set_xlabel("error (ms), capture − plan")
        ax.set_ylabel("share of flow instances (CDF)")
        ax.grid(True, color="#e5e5e5", linewidth=0.8)
        ax.legend(loc="lower right", fontsize=8, frameon=False)
    fig.savefig(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[1, 2, 3],
        help="seeds for the interference test (FLOR used several runs)",
    )
    ap.add_argument(
        "--skip-x10", action="store_true", help="leave out the 10-million-packet variant"
    )
    ap.add_argument("--keep", help="keep the run folders in this directory")
    a = ap.parse_args()

    cases = [("flor-interference", a.seeds), ("flor-insertion", [1])]
    if not a.skip_x10:
        cases.append(("flor-insertion-x10", [1]))
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="flor-timing-"))
    rows, report = [], {"cases": []}
    try:
        for name, seeds in cases:
            samples = {p: [] for p in PLANNERS}
            for planner in PLANNERS:
                for seed in seeds:
                    errors, summary = run_one(
                        ROOT / "scenarios" / f"{name}.yaml", planner, seed, work
                    )
                    samples[planner].append(errors)
                    report["cases"].append(
                        {"scenario": name, "planner": planner, "seed": seed, **summary}
                    )
                    for key in ("start_error", "duration_error"):
                        e = summary[key]
                        rows.append(
                            (
                                name,
                                planner,
                                seed,
                                key.replace("_", " "),
                                e["count"],
                                e["exact"],
                                e["mean_ns"] / 1e6,
                                e["std_ns"] / 1e6,
                                e["p99_ns"] / 1e6,
                                e["max_abs_ns"] / 1e6,
                            )
                        )
                    if not a.keep:
                        for run in work.iterdir():
                            shutil.rmtree(run)
            img = ROOT / "docs" / "img" / f"{name}-timing.png"
            plot(name, samples, img)
            print(f"plot: {img.relative_to(ROOT)}", file=sys.stderr)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)

    out = ROOT / "benchmarks" / "out" / "timing.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        "| scenario | planner | seed | error | instances | exact | mean (ms) | std (ms) "
        "| 99th pct (ms) | largest \\|error\\| (ms) |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:,} | {r[5]:,} | {r[6]:,.3f} | "
            f"{r[7]:,.3f} | {r[8]:,.3f} | {r[9]:,.3f} |"
        )
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
