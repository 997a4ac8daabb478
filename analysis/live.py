"""Analysis of a live run folder: every step's capture, resource samples and loss accounting;
a run method adds its own tables and figures through `MethodAnalysis` (testbed/methods/).

    from analysis.live import analyze_live
    m = analyze_live("results/20261122T130000Z-seed001-comparison")
    m["steps"][0]["traffic"]["steady"]["mean_pps"], m["steps"][0]["loss"]["loss_rate"]

Writes metrics.json, report.md, report.html, the plots and the run tables (tables/*.parquet,
docs/run-tables.md) into the run folder, and a flow meter's per-flow score into its step's
meter/score.parquet (analysis.flowmeter.steps). Reads only files
(manifest.json, each step's capture.pcap and samples.csv); starts no process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from ntgcore.files import replacing, write_error

from .capture import CaptureError
from .flowmeter.steps import METER_DIR, STAGE_TITLES, meter_step
from .metrics import plain
from .plots import BLUE, GREY, ORANGE, figure, legend, save
from .report import fmt_number, to_html, to_markdown, unfinished_run
from .runtables import write_live_tables
from .stream import read_stream

PALETTE = [BLUE, ORANGE, "#2a9d55", "#9b59b6", "#c0392b", "#16a085", GREY]


# --------------------------------------------------------------------------------------------
# Reading


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "manifest.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CaptureError(Path(run_dir), "no manifest.json", "a live run folder") from None


def read_samples(step_dir: Path) -> pd.DataFrame:
    """samples.csv of a step (testbed.parts.monitor's long format), or an empty frame."""
    path = step_dir / "samples.csv"
    if not path.is_file() or path.stat().st_size == 0:
        return pd.DataFrame(
            columns=[
                "t",
                "kind",
                "label",
                "pid",
                "tid",
                "name",
                "cpu_percent",
                "rss_bytes",
                "mem_percent",
            ]
        )
    return pd.read_csv(path)


def processes(samples: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """CPU % and RSS summed over the processes whose label starts with PREFIX, per sample time."""
    rows = samples[
        (samples["kind"] == "process") & samples["label"].astype(str).str.startswith(prefix)
    ]
    if rows.empty:
        return pd.DataFrame(columns=["t", "cpu_percent", "rss_bytes", "mem_percent"])
    return rows.groupby("t", as_index=False)[["cpu_percent", "rss_bytes", "mem_percent"]].sum()


def _resource_stats(series: pd.DataFrame) -> dict[str, Any]:
    if series.empty:
        return {
            "samples": 0,
            "cpu_mean": None,
            "cpu_max": None,
            "rss_mean": None,
            "rss_max": None,
            "mem_percent_mean": None,
        }
    return {
        "samples": int(len(series)),
        "cpu_mean": float(series["cpu_percent"].mean()),
        "cpu_max": float(series["cpu_percent"].max()),
        "rss_mean": float(series["rss_bytes"].mean()),
        "rss_max": float(series["rss_bytes"].max()),
        "mem_percent_mean": float(series["mem_percent"].mean()),
    }


def dut_threads(samples: pd.DataFrame) -> pd.DataFrame:
    """The DUT's per-thread rows (like `top -H`): t, tid, name, cpu_percent."""
    rows = samples[
        (samples["kind"] == "thread") & samples["label"].astype(str).str.startswith("dut")
    ]
    return rows[["t", "tid", "name", "cpu_percent"]].copy()


# --------------------------------------------------------------------------------------------
# Metrics


# A step the run died in: its folder holds its capture and samples, but the runner writes a
# step's entry into the manifest only when the step ends.
UNRECORDED = "unrecorded"
STEP_FILES = ("capture.pcap", "samples.csv")


def unrecorded_steps(run: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Entries for the step folders of a run that did not finish that no manifest entry names
    (the run folder itself for a run of one step, else its sub-folders): what a `kill -9` left,
    analysed from their files alone (name: the folder's, `run` for the run folder)."""
    if not unfinished_run(manifest):
        return []
    recorded = {Path(e.get("dir") or ".") for e in manifest.get("steps") or []}
    folders = [run, *sorted(p for p in run.iterdir() if p.is_dir())] if run.is_dir() else []
    out: list[dict[str, Any]] = []
    for d in folders:
        rel = d.relative_to(run)
        if rel in recorded or not (
            any((d / f).is_file() for f in STEP_FILES) or any(d.glob("gen-*/drone-capture.pcap"))
        ):
            continue
        out.append(
            {
                "name": d.name if d != run else "run",
                "kind": None,
                "params": {},
                "dir": str(rel),
                "status": UNRECORDED,
                "generators": {g.name[4:]: {} for g in sorted(d.glob("gen-*")) if g.is_dir()},
                "error": f"the run ended during this step (manifest: `{manifest.get('status')}`) "
                "before recording it: no counters, only its capture and samples",
            }
        )
    return out


def step_metrics(run_dir: Path, entry: dict[str, Any]) -> dict[str, Any]:
    step_dir = run_dir / entry.get("dir", ".")
    out: dict[str, Any] = {
        k: entry.get(k)
        for k in (
            "name",
            "kind",
            "params",
            "status",
            "error",
            "loss",
            "capture",
            "dut",
            "monitor",
            "spread",
        )
    }
    pcap = step_dir / "capture.pcap"
    if not pcap.is_file():  # no tcpdump: a generator's own capture (Ostinato's drone) stands in
        own = sorted(step_dir.glob("gen-*/drone-capture.pcap"))
        if own:
            pcap = own[0]
            out["capture_source"] = str(pcap.relative_to(step_dir))
    out["traffic"] = None
    if pcap.is_file():
        try:
            stream = read_stream([pcap])
            m = stream.totals.metrics()
            m.pop("protocols", None)
            out["traffic"] = m
            if stream.problem is not None:
                out["capture_problem"] = stream.problem[1].message
        except CaptureError as exc:
            out["capture_problem"] = str(exc)
    dut = entry.get("dut") or {}
    if dut.get("meter") or (entry.get("status") == UNRECORDED and (step_dir / METER_DIR).is_dir()):
        # a flow meter: its records scored against the wire (analysis.flowmeter.steps)
        out["meter"] = meter_step(
            step_dir, dut, pcap if pcap.is_file() else None, entry.get("capture")
        )
    samples = read_samples(step_dir)
    out["resources"] = {}
    for title in entry.get("generators", {}):
        out["resources"][title] = _resource_stats(processes(samples, f"gen:{title}:"))
    if entry.get("dut") or (
        entry.get("status") == UNRECORDED and not processes(samples, "dut").empty
    ):
        out["resources"]["dut"] = _resource_stats(processes(samples, "dut"))
        threads = dut_threads(samples)
        out["dut_threads"] = (
            {
                str(name): {
                    "cpu_median": float(g["cpu_percent"].median()),
                    "cpu_max": float(g["cpu_percent"].max()),
                    "samples": int(len(g)),
                }
                for name, g in threads.groupby("name")
            }
            if not threads.empty
            else {}
        )
    return out


def checks(step: dict[str, Any]) -> list[dict[str, Any]]:
    """What must hold in every step, whatever was lost: the counters only ever shrink along the
    path, and a capture that dropped nothing holds what crossed the wire."""
    loss, name = step.get("loss") or {}, step["name"]
    out = []
    if step.get("status") == UNRECORDED:  # nothing to hold the capture against: it cannot pass
        out.append(
            {
                "name": f"{name}: the run recorded the step's end",
                "expected": "its entry in manifest.json",
                "measured": "none: the run ended during the step",
                "ok": False,
            }
        )
    sent, wire, dut = loss.get("sent"), loss.get("wire"), loss.get("dut")
    if wire is not None:
        out.append(
            {
                "name": f"{name}: wire ≤ sent",
                "expected": f"≤ {sent}",
                "measured": wire,
                "ok": wire <= sent,
            }
        )
    if dut is not None and wire is not None:
        out.append(
            {
                "name": f"{name}: DUT received ≤ wire",
                "expected": f"≤ {wire}",
                "measured": dut,
                "ok": dut <= wire,
            }
        )
    seen = (step.get("dut") or {}).get("received_by_filter")
    if seen is not None and wire is not None:  # tcpdump's kernel count = received + dropped
        out.append(
            {
                "name": f"{name}: the DUT's kernel saw every frame on the wire",
                "expected": wire,
                "measured": seen,
                "ok": seen == wire,
            }
        )
    meter = (step.get("meter") or {}).get("counters") or {}
    exported, collected = meter.get("exported"), meter.get("collected")
    if meter.get("export_complete") and exported is not None and collected is not None:
        out.append(  # the collector cannot hold more than the export capture saw the meter send
            {
                "name": f"{name}: records collected ≤ records exported",
                "expected": f"≤ {exported}",
                "measured": collected,
                "ok": collected <= exported,
            }
        )
    for c in (step.get("spread") or {}).get("checks", []):  # several hosts: the exact merged counts
        out.append({**c, "name": f"{name}: {c['name']}"})
    cap = step.get("capture") or {}
    if cap and cap.get("dropped_by_kernel") == 0 and step.get("traffic") is not None:
        n = step["traffic"]["packets"]
        out.append(
            {
                "name": f"{name}: capture file holds every captured packet",
                "expected": cap.get("captured"),
                "measured": n,
                "ok": n == cap.get("captured"),
            }
        )
    return out


class MethodAnalysis(Protocol):
    """What a run method adds to the analysis (testbed/methods/<name>/analysis.py)."""

    CAPTIONS: dict[str, str]

    def analyze(self, steps: list[dict[str, Any]]) -> dict[str, Any]: ...
    def plots(
        self, run: Path, doc: dict[str, Any], manifest: dict[str, Any]
    ) -> dict[str, Path]: ...
    def report(self, doc: dict[str, Any]) -> list: ...


def analyze_live(
    run_dir: str | Path,
    progress: Callable[[str], None] | None = None,
    method: MethodAnalysis | None = None,
) -> dict[str, Any]:
    """The run's metrics, plots and report; `method` adds the run method's own tables and
    figures (the testbed passes the method the manifest names)."""
    run = Path(run_dir)
    say = progress or (lambda s: None)
    manifest = read_manifest(run)
    lost = unrecorded_steps(run, manifest)
    if lost:  # the parts below read the steps' folders from the manifest's entries
        manifest = {**manifest, "steps": [*(manifest.get("steps") or []), *lost]}
    steps = []
    for entry in manifest.get("steps", []):
        say(f"step {entry['name']}: capture and samples")
        steps.append(step_metrics(run, entry))
    doc: dict[str, Any] = {
        "run_id": manifest.get("run_id"),
        "method": manifest.get("method"),
        "status": manifest.get("status"),
        "incomplete_run": unfinished_run(manifest),
        "steps": steps,
    }
    doc["checks"] = [c for s in steps for c in checks(s)]
    if doc["incomplete_run"] and not steps:  # died before its first step: nothing to show for it
        doc["checks"].append(
            {"name": "run: at least one step", "expected": "≥ 1 step", "measured": 0, "ok": False}
        )
    doc.update(summary(steps))
    if method is not None:
        doc.update(method.analyze(steps))
    say("plots and report")
    try:  # every file whole or not at all (replacing); a full disk ends the command (exit 4)
        plots = method.plots(run, doc, manifest) if method is not None else {}
        plots.update(latency_plots(run, manifest))
        blocks = report_blocks(doc, manifest, plots, method)
        doc = plain(doc)
        for name, text in (
            ("report.md", to_markdown(blocks, run)),
            ("report.html", to_html(blocks)),
            ("metrics.json", json.dumps(doc, indent=1) + "\n"),
        ):
            with replacing(run / name) as tmp:
                tmp.write_text(text)
        say("run tables")
        write_live_tables(run, doc, manifest)
    except OSError as exc:
        raise write_error(exc, run, "free some space, then analyse the run again") from None
    doc["report"] = str(run / "report.html")
    return doc


def summary(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Run-level numbers: totals over the steps and the worst step's loss rate."""
    losses = [s["loss"] for s in steps if s.get("loss")]
    rates = [x["loss_rate"] for x in losses if x.get("loss_rate") is not None]

    def total(key: str) -> int | None:
        vals = [x.get(key) for x in losses]
        return sum(vals) if vals and all(v is not None for v in vals) else None

    out = {
        "sent": total("sent"),
        "wire": total("wire"),
        "dut": total("dut"),
        "loss_rate": max(rates) if rates else None,
    }
    if len(steps) == 1 and steps[0].get("traffic"):
        t = steps[0]["traffic"]
        out.update(packets=t["packets"], mean_pps=t["mean_pps"], variance_pct=t["variance_pct"])
    return out


# --------------------------------------------------------------------------------------------
# Plots


def save_figure(fig, path: Path) -> Path:
    save(fig, path)
    return path


# --------------------------------------------------------------------------------------------
# Report


def fmt_pct(x: Any) -> str:
    return "–" if x is None else f"{100 * x:.2f} %"


def fmt_count(x: Any, digits: int = 0) -> str:
    return "–" if x is None else fmt_number(x, digits)


ASTF_COLUMNS = (
    ("expected", "connections_expected"),
    ("attempted", "connections_attempted"),
    ("established", "connections_established"),
    ("closed", "connections_closed"),
    ("drops", "drops"),
    ("server accepted", "server_accepted"),
    ("server closed", "server_closed"),
    ("server drops", "server_drops"),
)


def astf_blocks(manifest: dict[str, Any]) -> list:
    """TRex's own TCP counters of generators in ASTF mode (their port_stats.astf), per step."""
    rows = []
    for s in manifest.get("steps") or []:
        for title, g in (s.get("generators") or {}).items():
            a = (g.get("port_stats") or {}).get("astf")
            if a:
                errors = ", ".join(f"{k} {v}" for k, v in (a.get("errors") or {}).items()) or "none"
                rows.append(
                    [
                        s.get("name", ""),
                        title,
                        *(fmt_count(a.get(k)) for _, k in ASTF_COLUMNS),
                        errors,
                    ]
                )
    if not rows:
        return []
    return [
        ("h2", "TCP sessions (TRex ASTF): TRex's own counters"),
        ("table", ["step", "generator", *(c for c, _ in ASTF_COLUMNS), "errors"], rows),
    ]


LATENCY_COLUMNS = (
    ("sent", "tx_pkts"),
    ("received", "rx_pkts"),
    ("min µs", "min_us"),
    ("avg µs", "avg_us"),
    ("max µs", "max_us"),
    ("highest range from µs", "histogram_max_from_us"),
    ("jitter µs", "jitter_us"),
)
LATENCY_PLOT = "TRex latency probes: packets per latency range (TRex's histogram, per probe)"


def latency_probes(manifest: dict[str, Any]):
    """(step, generator, probe label, its numbers) of every TRex latency probe
    (port_stats.latency of generators with `latency_pps`)."""
    for s in manifest.get("steps") or []:
        for title, g in (s.get("generators") or {}).items():
            for label, v in ((g.get("port_stats") or {}).get("latency") or {}).items():
                if label != "global":
                    yield s.get("name", ""), title, label, v


def latency_blocks(manifest: dict[str, Any]) -> list:
    """TRex's latency probes, per step: sent/received, min/avg/max latency, jitter, sequence errors."""
    rows = []
    for step, title, label, v in latency_probes(manifest):
        seq = v.get("seq_errors") or {}
        errors = ", ".join(f"{k} {n}" for k, n in seq.items() if n) or "none"
        rows.append(
            [step, title, label, *(fmt_count(v.get(k)) for _, k in LATENCY_COLUMNS), errors]
        )
    if not rows:
        return []
    return [
        ("h2", "Latency (TRex latency probes): timed by TRex on its own receiving port"),
        (
            "table",
            ["step", "generator", "probe", *(c for c, _ in LATENCY_COLUMNS), "sequence errors"],
            rows,
        ),
    ]


def latency_plots(run: Path, manifest: dict[str, Any]) -> dict[str, Path]:
    """TRex's latency histograms (buckets by their lower bound, µs), one line per probe."""
    probes = [
        (f"{step} {title} {label}", v.get("histogram") or {})
        for step, title, label, v in latency_probes(manifest)
    ]
    probes = [(name, h) for name, h in probes if h]
    if not probes:
        return {}
    bounds = sorted({float(k) for _, h in probes for k in h})
    fig, ax = figure(
        "Latency of the TRex probes (TRex's histogram)",
        "latency from (µs; TRex's ranges: 10 µs wide below 100, 100 µs below 1000, …)",
        "packets",
    )
    for i, (name, h) in enumerate(probes):
        counts = {float(k): n for k, n in h.items()}
        ax.plot(
            range(len(bounds)),
            [counts.get(b, 0) for b in bounds],
            marker="o",
            ms=3,
            color=PALETTE[i % len(PALETTE)],
            label=name,
        )
    ax.set_xticks(range(len(bounds)), [f"{b:g}" for b in bounds], rotation=60, fontsize=8)
    legend(ax)
    return {LATENCY_PLOT: save_figure(fig, run / "latency-histogram.png")}


def _quantile_ms(q: dict[str, Any] | None, key: str) -> str:
    return "–" if not q or q.get(key) is None else f"{q[key] / 1e6:,.3f}"


def _bytes_layer(layers: dict[str, int] | None) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in (layers or {}).items() if v) or "–"


def _stage_cell(stage: dict[str, Any], unit: str) -> str:
    n, f = stage.get(unit), stage.get(f"{unit}_fraction")
    if n is None:
        return "?"
    return fmt_count(n) + ("" if f is None else f" ({fmt_pct(f)})")


METER_COLUMNS = (
    "step",
    "meter",
    "reference",
    "collected",
    "exact",
    "differs",
    "missing",
    "split",
    "merged",
    "spurious",
    "packet errors (flows, sum)",
    "byte errors (flows, sum)",
    "bytes layer",
    "first time error p50 / p99 (ms)",
    "last time error p50 / p99 (ms)",
    "export delay p50 (ms)",
)
STAGE_COLUMNS = ("on the wire", *STAGE_TITLES.values(), "collected", "lost in all")


def meter_blocks(steps: list[dict[str, Any]]) -> list:
    """The flow meter's score and its loss by stage, per step with a meter DUT (`meter`)."""
    meters = [s for s in steps if s.get("meter")]
    if not meters:
        return []
    score_rows: list[list[str]] = []
    stage_rows: list[list[str]] = []
    notes: dict[str, list[str]] = {}  # what is unknown or missing -> the steps it concerns
    for s in meters:
        m = s["meter"]
        t = m.get("totals") or {}
        name, kind = s["name"], m.get("kind") or "–"
        score_rows.append(
            [
                name,
                kind,
                fmt_count(t.get("reference_records")),
                fmt_count(t.get("collected_records")),
                *(fmt_count(t.get(k)) for k in ("exact", "differs", "missing", "split")),
                *(fmt_count(t.get(k)) for k in ("merged", "spurious")),
                f"{fmt_count(t.get('packet_error_flows'))}, {fmt_count(t.get('packet_error_sum'))}",
                f"{fmt_count(t.get('byte_error_flows'))}, {fmt_count(t.get('byte_error_sum'))}",
                _bytes_layer(t.get("bytes_layer")),
                *(
                    f"{_quantile_ms(t.get(k), 'p50')} / {_quantile_ms(t.get(k), 'p99')}"
                    for k in ("first_error_ns", "last_error_ns")
                ),
                _quantile_ms(t.get("export_delay_ns"), "p50"),
            ]
        )
        st = m.get("stages") or {}
        for unit in ("packets", "flows"):
            stage_rows.append(
                [
                    name,
                    kind,
                    unit,
                    *(
                        _stage_cell(st.get(k) or {}, unit)
                        for k in ("wire", *STAGE_TITLES, "collected", "total")
                    ),
                ]
            )
        for stage, title in STAGE_TITLES.items():
            why = (st.get(stage) or {}).get("why")
            if why:
                notes.setdefault(f"{title}: {why}", []).append(name)
        for what in m.get("missing") or []:
            notes.setdefault(f"missing: {what}", []).append(name)
    b: list = [
        ("h2", "Flow meter"),
        (
            "p",
            "The meter's records (read back from the collector) scored against the reference "
            "records a conforming meter exports for the step's capture (docs/flowmeters.md).",
        ),
        ("table", list(METER_COLUMNS), score_rows),
        (
            "p",
            "Loss by stage (seed 002, III.A.1): of what was on the wire, dropped by the meter's "
            "capture buffer (its own counter), lost inside the meter, lost between the meter and "
            "the collector (the export capture's records against the collected ones); "
            "? where the counters cannot tell.",
        ),
        ("table", ["step", "meter", "", *STAGE_COLUMNS], stage_rows),
    ]
    for note, names in notes.items():
        b.append(("p", f"{', '.join(names)}: {note}."))
    return b


def report_blocks(
    doc: dict[str, Any],
    manifest: dict[str, Any],
    plots: dict[str, Path],
    method: MethodAnalysis | None = None,
) -> list:
    b: list = [("h1", f"Live run {doc['run_id']}")]
    tb = manifest.get("testbed", {})
    b.append(
        (
            "p",
            f"Method: {doc['method']}. Status: {doc['status']}. Topology: "
            f"{tb.get('topology')} ({', '.join(tb.get('namespaces') or [])}), removed "
            f"afterwards: {'yes' if isinstance(tb.get('removed'), list) else tb.get('removed')}.",
        )
    )
    if doc.get("incomplete_run"):
        b.append(("warn", doc["incomplete_run"]["message"]))
    elif manifest.get("error"):
        b.append(("warn", f"The run failed: {manifest['error']}"))
    bad = [c for c in doc["checks"] if not c["ok"]]
    if bad:
        b.append(("warn", f"{len(bad)} check(s) failed: " + "; ".join(c["name"] for c in bad)))
    b.append(("h2", "Steps: sent by the generators, seen on the wire, received by the DUT"))
    rows = []
    for s in doc["steps"]:
        loss = s.get("loss") or {}
        t = s.get("traffic") or {}
        rows.append(
            [
                s["name"],
                s["status"],
                fmt_count(loss.get("sent")),
                fmt_count(loss.get("wire")),
                fmt_count(loss.get("dut")),
                fmt_pct(loss.get("loss_rate")),
                fmt_count(t.get("packets")),
                fmt_count((s.get("capture") or {}).get("dropped_by_kernel")),
            ]
        )
    b.append(
        (
            "table",
            ["step", "status", "sent", "wire", "DUT", "loss", "captured", "capture drops"],
            rows,
        )
    )
    b += meter_blocks(doc["steps"])
    b += astf_blocks(manifest)
    b += latency_blocks(manifest)
    measured = [
        (s["monitor"] or {}).get("overhead_percent") for s in doc["steps"] if s.get("monitor")
    ]
    overheads = [o for o in measured if o is not None]
    if overheads:
        hz = (doc["steps"][0].get("monitor") or {}).get("hz")
        b.append(
            (
                "p",
                f"The resource sampler ({hz:g} Hz) cost {max(overheads):.2f} % of one core "
                f"at most (its own CPU time over wall time, per step).",
            )
        )
    if method is not None:
        b += method.report(doc)
    captions = method.CAPTIONS if method is not None else {}
    if plots:
        b.append(("h2", "Plots"))
        for key, path in plots.items():
            b.append(("img", captions.get(key, key), path))
    return b
