"""Analysis of a live run folder: every step's capture, resource samples and loss accounting,
and the two methods' comparisons (seed 001: generators side by side; seed 002: loss sweeps).

    from analysis.live import analyze_live
    m = analyze_live("results/20261122T130000Z-seed001-comparison")
    m["steps"][0]["traffic"]["steady"]["mean_pps"], m["steps"][0]["loss"]["loss_rate"]

Writes metrics.json, report.md, report.html and the plots into the run folder. Reads only files
(manifest.json, each step's capture.pcap and samples.csv); starts no process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from .capture import CaptureError, read_capture
from .metrics import plain, traffic_metrics
from .plots import BLUE, GREY, ORANGE, figure, legend
from .report import fmt_number, to_html, to_markdown

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
        return pd.DataFrame(columns=["t", "kind", "label", "pid", "tid", "name", "cpu_percent",
                                     "rss_bytes", "mem_percent"])
    return pd.read_csv(path)


def _processes(samples: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """CPU % and RSS summed over the processes whose label starts with PREFIX, per sample time."""
    rows = samples[(samples["kind"] == "process") & samples["label"].astype(str).str.startswith(prefix)]
    if rows.empty:
        return pd.DataFrame(columns=["t", "cpu_percent", "rss_bytes", "mem_percent"])
    return rows.groupby("t", as_index=False)[["cpu_percent", "rss_bytes", "mem_percent"]].sum()


def _resource_stats(series: pd.DataFrame) -> dict[str, Any]:
    if series.empty:
        return {"samples": 0, "cpu_mean": None, "cpu_max": None, "rss_mean": None,
                "rss_max": None, "mem_percent_mean": None}
    return {"samples": int(len(series)),
            "cpu_mean": float(series["cpu_percent"].mean()),
            "cpu_max": float(series["cpu_percent"].max()),
            "rss_mean": float(series["rss_bytes"].mean()),
            "rss_max": float(series["rss_bytes"].max()),
            "mem_percent_mean": float(series["mem_percent"].mean())}


def dut_threads(samples: pd.DataFrame) -> pd.DataFrame:
    """The DUT's per-thread rows (like `top -H`): t, tid, name, cpu_percent."""
    rows = samples[(samples["kind"] == "thread") & samples["label"].astype(str).str.startswith("dut")]
    return rows[["t", "tid", "name", "cpu_percent"]].copy()


# --------------------------------------------------------------------------------------------
# Metrics


def step_metrics(run_dir: Path, entry: dict[str, Any]) -> dict[str, Any]:
    step_dir = run_dir / entry.get("dir", ".")
    out: dict[str, Any] = {k: entry.get(k) for k in ("name", "kind", "params", "status", "error",
                                                      "loss", "capture", "dut", "monitor")}
    pcap = step_dir / "capture.pcap"
    if not pcap.is_file():  # no tcpdump: a generator's own capture (Ostinato's drone) stands in
        own = sorted(step_dir.glob("gen-*/drone-capture.pcap"))
        if own:
            pcap = own[0]
            out["capture_source"] = str(pcap.relative_to(step_dir))
    out["traffic"] = None
    if pcap.is_file():
        try:
            cap = read_capture(pcap)
            m = traffic_metrics(cap)
            m.pop("protocols", None)
            out["traffic"] = m
            if cap.problem is not None:
                out["capture_problem"] = cap.problem.message
        except CaptureError as exc:
            out["capture_problem"] = str(exc)
    samples = read_samples(step_dir)
    out["resources"] = {}
    for title in entry.get("generators", {}):
        out["resources"][title] = _resource_stats(_processes(samples, f"gen:{title}:"))
    if entry.get("dut"):
        out["resources"]["dut"] = _resource_stats(_processes(samples, "dut"))
        threads = dut_threads(samples)
        out["dut_threads"] = {
            str(name): {"cpu_median": float(g["cpu_percent"].median()),
                        "cpu_max": float(g["cpu_percent"].max()), "samples": int(len(g))}
            for name, g in threads.groupby("name")} if not threads.empty else {}
    return out


def checks(step: dict[str, Any]) -> list[dict[str, Any]]:
    """What must hold in every step, whatever was lost: the counters only ever shrink along the
    path, and a capture that dropped nothing holds what crossed the wire."""
    loss, name = step.get("loss") or {}, step["name"]
    out = []
    sent, wire, dut = loss.get("sent"), loss.get("wire"), loss.get("dut")
    if wire is not None:
        out.append({"name": f"{name}: wire ≤ sent", "expected": f"≤ {sent}", "measured": wire,
                    "ok": wire <= sent})
    if dut is not None and wire is not None:
        out.append({"name": f"{name}: DUT received ≤ wire", "expected": f"≤ {wire}",
                    "measured": dut, "ok": dut <= wire})
    seen = (step.get("dut") or {}).get("received_by_filter")
    if seen is not None and wire is not None:  # tcpdump's kernel count = received + dropped
        out.append({"name": f"{name}: the DUT's kernel saw every frame on the wire",
                    "expected": wire, "measured": seen, "ok": seen == wire})
    cap = step.get("capture") or {}
    if cap and cap.get("dropped_by_kernel") == 0 and step.get("traffic") is not None:
        n = step["traffic"]["packets"]
        out.append({"name": f"{name}: capture file holds every captured packet",
                    "expected": cap.get("captured"), "measured": n, "ok": n == cap.get("captured")})
    return out


def analyze_live(run_dir: str | Path, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    run = Path(run_dir)
    say = progress or (lambda s: None)
    manifest = read_manifest(run)
    steps = []
    for entry in manifest.get("steps", []):
        say(f"step {entry['name']}: capture and samples")
        steps.append(step_metrics(run, entry))
    doc: dict[str, Any] = {"run_id": manifest.get("run_id"), "method": manifest.get("method"),
                           "status": manifest.get("status"), "steps": steps}
    doc["checks"] = [c for s in steps for c in checks(s)]
    doc.update(summary(steps))
    if doc["method"] == "comparison":
        doc["comparison"] = comparison_table(steps)
    if doc["method"] == "loss-sweep":
        doc["loss_sweep"] = sweep_table(steps)
    say("plots and report")
    plots = write_plots(run, doc, manifest)
    blocks = report_blocks(doc, manifest, plots)
    (run / "report.md").write_text(to_markdown(blocks, run))
    (run / "report.html").write_text(to_html(blocks))
    doc = plain(doc)
    (run / "metrics.json").write_text(json.dumps(doc, indent=1) + "\n")
    doc["report"] = str(run / "report.html")
    return doc


def summary(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Run-level numbers: totals over the steps and the worst step's loss rate."""
    losses = [s["loss"] for s in steps if s.get("loss")]
    rates = [x["loss_rate"] for x in losses if x.get("loss_rate") is not None]

    def total(key: str) -> int | None:
        vals = [x.get(key) for x in losses]
        return sum(vals) if vals and all(v is not None for v in vals) else None

    out = {"sent": total("sent"), "wire": total("wire"), "dut": total("dut"),
           "loss_rate": max(rates) if rates else None}
    if len(steps) == 1 and steps[0].get("traffic"):
        t = steps[0]["traffic"]
        out.update(packets=t["packets"], mean_pps=t["mean_pps"], variance_pct=t["variance_pct"])
    return out


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


def sweep_table(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for s in steps:
        loss = s.get("loss") or {}
        res = s["resources"].get("dut", {})
        params = dict(s.get("params") or {})
        if params.get("max") and loss.get("sent") and params.get("step_s"):
            params["packet_rate"] = loss["sent"] / params["step_s"]  # what top speed reached
        rows.append({"step": s["name"], "kind": s["kind"], **params,
                     "sent": loss.get("sent"), "wire": loss.get("wire"), "dut": loss.get("dut"),
                     "dut_dropped": loss.get("dut_dropped"), "loss_rate": loss.get("loss_rate"),
                     "dut_cpu_mean": res.get("cpu_mean"), "dut_rss_max": res.get("rss_max")})
    return rows


# --------------------------------------------------------------------------------------------
# Plots


def _save(fig, path: Path) -> Path:
    fig.savefig(path)
    return path


def write_plots(run: Path, doc: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Path]:
    plots: dict[str, Path] = {}
    steps = doc["steps"]
    by_name = {e["name"]: e for e in manifest.get("steps", [])}
    if doc["method"] == "comparison" and doc["comparison"]:
        rows = doc["comparison"]
        names = [r["generator"] for r in rows]
        fig, ax = figure("Average packet rate per generator (seed 001, figure 8)", "",
                          "packets per second")
        ax.bar(names, [r["mean_pps"] or 0 for r in rows], color=PALETTE[: len(rows)], alpha=0.35,
               label="whole run")
        ax.bar(names, [r["steady_mean_pps"] or 0 for r in rows], color=PALETTE[: len(rows)],
               width=0.4, label="after warm-up")
        legend(ax)
        plots["rates"] = _save(fig, run / "compare-rates.png")
        fig, ax = figure("Average throughput = packet size × rate (seed 001, figure 9)", "",
                          "kB/s")
        ax.bar(names, [(r["throughput_Bps"] or 0) / 1000 for r in rows], color=PALETTE[: len(rows)])
        plots["throughput"] = _save(fig, run / "compare-throughput.png")
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
            series = _processes(read_samples(run / entry.get("dir", ".")), f"gen:{title}:")
            if not series.empty:
                ax2.plot(series["t"], series["cpu_percent"], color=colour, label=title)
                ax3.plot(series["t"], series["rss_bytes"] / 1e6, color=colour, label=title)
        for a in (ax, ax2, ax3):
            legend(a)
        plots["rate_series"] = _save(fig, run / "compare-rate-series.png")
        plots["cpu"] = _save(fig2, run / "compare-cpu.png")
        plots["ram"] = _save(fig3, run / "compare-ram.png")
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
        plots["cpu_load"] = _save(fig, run / "compare-cpu-vs-load.png")
        plots["ram_load"] = _save(fig2, run / "compare-ram-vs-load.png")
    if doc["method"] == "loss-sweep":
        for kind, xkey, xlabel, fname, fig_no in (
                ("rate", "packet_rate", "offered packet rate (pps)", "loss-vs-rate.png", "3"),
                ("hosts", "hosts", "concurrent hosts", "loss-vs-hosts.png", "11")):
            rows = [r for r in doc["loss_sweep"] if r["kind"] == kind]
            if not rows:
                continue
            fig, ax = figure(f"Packet loss at the DUT (seed 002, figure {fig_no})", xlabel,
                              "packet loss rate (%)")
            rows = [r for r in rows if r.get(xkey) is not None]
            rows.sort(key=lambda r: r[xkey])
            ax.plot([r[xkey] for r in rows], [100 * (r["loss_rate"] or 0) for r in rows],
                    marker="o", color=ORANGE)
            plots[f"loss_{kind}"] = _save(fig, run / fname)
        threads, mem, labels = [], [], []
        for s in steps:
            entry = by_name.get(s["name"], {})
            samples = read_samples(run / entry.get("dir", "."))
            threads.append(dut_threads(samples))
            proc = _processes(samples, "dut")
            labels.append(s["name"])
            mem.append(proc["rss_bytes"].to_numpy() / 1e6 if not proc.empty else np.zeros(0))
        pooled = pd.concat(threads) if threads else pd.DataFrame()
        if not pooled.empty:
            # the busiest threads (a capture and a processing thread in seed 002), one box each
            top = (pooled.groupby("name")["cpu_percent"].mean().sort_values(ascending=False)
                   .index[:3].tolist())
            fig, ax = figure("CPU of the DUT's busiest threads per step (seed 002, figures 9-10, "
                              "16-17)", "", "CPU % per thread (like top -H)")
            width = 0.8 / len(top)
            for j, name in enumerate(top):
                data = [t.loc[t["name"] == name, "cpu_percent"].dropna().to_numpy() for t in threads]
                pos = [i + 1 + (j - (len(top) - 1) / 2) * width for i in range(len(threads))]
                box = ax.boxplot([d if len(d) else [np.nan] for d in data], positions=pos,
                                 widths=width * 0.9, patch_artist=True, manage_ticks=False)
                for patch in box["boxes"]:
                    patch.set_facecolor(PALETTE[j % len(PALETTE)])
                    patch.set_alpha(0.6)
                ax.plot([], [], color=PALETTE[j % len(PALETTE)], lw=8, alpha=0.6, label=str(name))
            ax.set_xticks(range(1, len(labels) + 1), labels, rotation=45, ha="right")
            ax.legend(loc="upper left", fontsize=8, frameon=False)  # rotated labels fill the bottom
            plots["dut_cpu"] = _save(fig, run / "dut-cpu-box.png")
        if any(len(m) for m in mem):
            fig, ax = figure("Memory of the DUT per step (seed 002, figures 7-8, 14-15)", "",
                              "RSS (MB)")
            ax.boxplot([m if len(m) else [np.nan] for m in mem])
            ax.set_xticks(range(1, len(labels) + 1), labels, rotation=45, ha="right")
            plots["dut_mem"] = _save(fig, run / "dut-mem-box.png")
    return plots


# --------------------------------------------------------------------------------------------
# Report


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * x:.2f} %"


def _num(x: Any, digits: int = 0) -> str:
    return "–" if x is None else fmt_number(x, digits)


def report_blocks(doc: dict[str, Any], manifest: dict[str, Any], plots: dict[str, Path]) -> list:
    b: list = [("h1", f"Live run {doc['run_id']}")]
    tb = manifest.get("testbed", {})
    b.append(("p", f"Method: {doc['method']}. Status: {doc['status']}. Topology: "
                   f"{tb.get('topology')} ({', '.join(tb.get('namespaces') or [])}), removed "
                   f"afterwards: {'yes' if isinstance(tb.get('removed'), list) else tb.get('removed')}."))
    if manifest.get("error"):
        b.append(("warn", f"The run failed: {manifest['error']}"))
    bad = [c for c in doc["checks"] if not c["ok"]]
    if bad:
        b.append(("warn", f"{len(bad)} check(s) failed: " + "; ".join(c["name"] for c in bad)))
    b.append(("h2", "Steps: sent by the generators, seen on the wire, received by the DUT"))
    rows = []
    for s in doc["steps"]:
        loss = s.get("loss") or {}
        t = s.get("traffic") or {}
        rows.append([s["name"], s["status"], _num(loss.get("sent")), _num(loss.get("wire")),
                     _num(loss.get("dut")), _pct(loss.get("loss_rate")), _num(t.get("packets")),
                     _num((s.get("capture") or {}).get("dropped_by_kernel"))])
    b.append(("table", ["step", "status", "sent", "wire", "DUT", "loss", "captured",
                        "capture drops"], rows))
    overheads = [(s["monitor"] or {}).get("overhead_percent") for s in doc["steps"] if s.get("monitor")]
    overheads = [o for o in overheads if o is not None]
    if overheads:
        hz = (doc["steps"][0].get("monitor") or {}).get("hz")
        b.append(("p", f"The resource sampler ({hz:g} Hz) cost {max(overheads):.2f} % of one core "
                       f"at most (its own CPU time over wall time, per step)."))
    if doc.get("comparison"):
        b.append(("h2", "Generator comparison (seed 001's method)"))
        b.append(("p", "Per-second rates from the capture. Warm-up is found automatically (the "
                       "seed removed TRex's first 9 s by hand); 'steady' is after it. Throughput is "
                       "average packet size × average rate, as in the seed."))
        b.append(("table", ["generator", "mean pps", "std pps", "variance", "warm-up s",
                            "steady pps", "steady variance", "avg size B", "throughput kB/s",
                            "rate vs best", "CPU % mean", "RSS max MB"],
                  [[r["generator"], _num(r["mean_pps"]), _num(r["std_pps"]),
                    _num(r["variance_pct"], 2) + " %" if r["variance_pct"] is not None else "–",
                    _num(r["warmup_s"]), _num(r["steady_mean_pps"]),
                    _num(r["steady_variance_pct"], 2) + " %" if r["steady_variance_pct"] is not None else "–",
                    _num(r["average_packet_size"], 1), _num((r["throughput_Bps"] or 0) / 1000, 1),
                    _num(r["rate_ratio_to_best"], 3), _num(r["cpu_mean"], 1),
                    _num((r["rss_max"] or 0) / 1e6, 1)] for r in doc["comparison"]]))
    if doc.get("loss_sweep"):
        b.append(("h2", "Loss sweep (seed 002's method)"))
        b.append(("table", ["step", "pps offered", "hosts", "sent", "wire", "DUT", "DUT dropped",
                            "loss", "DUT CPU %", "DUT RSS MB"],
                  [[r["step"], _num(r.get("packet_rate")), _num(r.get("hosts")), _num(r["sent"]),
                    _num(r["wire"]), _num(r["dut"]), _num(r["dut_dropped"]), _pct(r["loss_rate"]),
                    _num(r["dut_cpu_mean"], 1), _num((r["dut_rss_max"] or 0) / 1e6, 1)]
                   for r in doc["loss_sweep"]]))
    captions = {"rates": "Average rates", "throughput": "Average throughputs",
                "rate_series": "Rate over time", "cpu": "CPU over time", "ram": "Memory over time",
                "cpu_load": "CPU versus offered load", "ram_load": "Memory versus offered load",
                "loss_rate": "Loss versus packet rate", "loss_hosts": "Loss versus hosts",
                "dut_cpu": "DUT threads' CPU", "dut_mem": "DUT memory"}
    if plots:
        b.append(("h2", "Plots"))
        for key, path in plots.items():
            b.append(("img", captions.get(key, key), path))
    return b
