"""`testbed meter`: flow meters on the user's own capture, each scored against the exact reference
records of that capture (analysis.flowmeter), as `testbed detect` does for an IDS.

Every meter runs in its own pcap-reading mode through the one offline runner (`run_on_pcap`: its
own namespace, the real collector), with the options the user gave where the meter has them;
the reference is built once per distinct set of rules (`Meter.rules`). The output folder gets one
folder per meter (records, export capture, counters, the per-flow score `score.parquet`) and the
comparison: meter.json, meter.md and meter-score.png (the flow statuses per meter). A meter that
fails is reported with its error and the others still run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pydantic import ValidationError

from analysis.flowmeter.records import MeterRules
from analysis.flowmeter.reference import reference_records_with_stats
from analysis.flowmeter.score import STATUSES, score
from analysis.flowmeter.steps import SCORE_FILE
from analysis.live import PALETTE
from analysis.plots import figure, save
from idsrules.attacks import merge_pcaps
from ntgcore.errors import BadInput, NtgError
from ntgcore.files import replacing

from .base import Meter, MeterSpec
from .live import meters
from .offline import run_on_pcap

STATUS_COLOURS = dict(zip(STATUSES, PALETTE, strict=False))


def chosen_meters(names: list[str] | None) -> list[Meter]:
    """The meters NAMES names (None: every registered one), or BadInput naming the known."""
    known = meters()
    if names is None:
        return list(known.values())
    wrong = [n for n in names if n not in known]
    if wrong:
        raise BadInput(
            f"--meter: no flow meter {wrong[0]!r}; the meters are: {', '.join(sorted(known))}"
        )
    return [known[n] for n in dict.fromkeys(names)]


def merge_captures(pcaps: list[Path], out: Path) -> Path:
    """Several captures merged by time into OUT (the one merge: mergecap, as `testbed detect`)."""
    merge_pcaps(pcaps, out)
    return out


def meter_options(meter: Meter, options: dict[str, Any]) -> MeterSpec:
    """The meter's options model from the command line's OPTIONS (a `version` the meter does
    not have is left to its own default, and said so in the report)."""
    given = dict(options)
    if "version" in given and given["version"] not in meter.versions:
        given.pop("version")
    try:
        return meter.spec.model_validate({"kind": meter.name, **given})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(x) for x in first["loc"]) or "options"
        raise BadInput(f"{meter.name}: --{field.replace('_', '-')}: {first['msg']}") from None


def meter_capture(
    pcap: Path,
    chosen: list[Meter],
    options: dict[str, Any],
    out: Path,
    progress: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """Run each meter on PCAP into OUT/<meter>/, score it, write the comparison; its document."""
    specs = {m.name: meter_options(m, options) for m in chosen}  # bad options before any run
    out.mkdir(parents=True, exist_ok=True)
    references: dict[MeterRules, Any] = {}
    rows: list[dict[str, Any]] = []
    for meter in chosen:
        spec = specs[meter.name]
        rules = meter.rules(spec)
        row: dict[str, Any] = {
            "meter": meter.name,
            "version": spec.version,
            "rules": {k: v for k, v in asdict(rules).items()},
        }
        if rules not in references:
            progress(f"reference records for {meter.name}'s rules")
            references[rules] = reference_records_with_stats(pcap, rules)
        reference, stats = references[rules]
        progress(f"{meter.name} on {pcap.name}")
        try:
            run = run_on_pcap(meter, spec, pcap, out / meter.name)
        except NtgError as exc:
            rows.append({**row, "status": "failed", "error": str(exc)})
            continue
        result = score(reference, run.records)
        with replacing(out / meter.name / SCORE_FILE) as tmp:
            pq.write_table(result.flows, tmp)
        rows.append(
            {
                **row,
                "status": "scored",
                "seconds": round(run.seconds, 3),
                "exported": run.exported,
                "collected": run.collected,
                "lost_in_export": run.lost_in_export,
                "counters": run.counters.get("own", {}),
                "score": result.totals,
            }
        )
    doc = {
        "capture": str(pcap),
        "options": {k: v for k, v in options.items()},
        "reference": {"packets": int(getattr(stats, "packets", 0))} if references else {},
        "meters": rows,
    }
    with replacing(out / "meter.json") as tmp:
        tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    with replacing(out / "meter.md") as tmp:
        tmp.write_text(markdown(doc))
    if any(r["status"] == "scored" for r in rows):
        status_figure(rows, out / "meter-score.png")
    return doc


def _ms(ns: Any) -> str:
    return "" if ns is None else f"{ns / 1e6:.1f}"


def summary_rows(doc: dict[str, Any]) -> list[list[str]]:
    """One line per meter: its flow statuses, packet and byte totals, byte layer, time errors."""
    out = []
    for r in doc["meters"]:
        if r["status"] != "scored":
            out.append([r["meter"], str(r["version"]), "failed: " + r["error"]])
            continue
        s = r["score"]
        layer = ", ".join(f"{k} {v}" for k, v in s["bytes_layer"].items() if v) or "-"
        out.append(
            [
                r["meter"],
                str(r["version"]),
                f"{s['reference_records']:,}",
                *(f"{s[k]:,}" for k in STATUSES),
                f"{s['packets_collected']:,} / {s['packets_reference']:,}",
                f"{s['bytes_collected']:,} / {s['bytes_reference']:,}",
                layer,
                f"{_ms(s['first_error_ns'].get('p50'))} / {_ms(s['first_error_ns'].get('p99'))}",
                f"{_ms(s['last_error_ns'].get('p50'))} / {_ms(s['last_error_ns'].get('p99'))}",
                "" if r["exported"] is None else f"{r['exported']:,} / {r['collected']:,}",
            ]
        )
    return out


HEADER = [
    "meter",
    "export",
    "reference flows",
    *STATUSES,
    "packets (meter / truth)",
    "bytes (meter / truth)",
    "bytes counted",
    "first ms p50 / p99",
    "last ms p50 / p99",
    "exported / collected",
]


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"# Flow meters on {Path(doc['capture']).name}",
        "",
        "Each meter read the capture in its own pcap mode and exported to nfcapd; its records "
        "are matched to the exact reference records of the capture (docs/flowmeters.md).",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    for row in summary_rows(doc):
        lines.append("| " + " | ".join(row + [""] * (len(HEADER) - len(row))) + " |")
    lines += ["", "Per flow: `<meter>/score.parquet`; the figure: meter-score.png.", ""]
    return "\n".join(lines)


def status_figure(rows: list[dict[str, Any]], path: Path) -> Path:
    """One horizontal bar per meter: the share of reference flows (and spurious records) in
    each status."""
    scored = [r for r in rows if r["status"] == "scored"]
    fig, ax = figure("Flow records by status, per meter", "share of records (%)", "")
    for i, r in enumerate(scored):
        s = r["score"]
        total = sum(s[k] for k in STATUSES) or 1
        left = 0.0
        for k in STATUSES:
            width = 100 * s[k] / total
            ax.barh(i, width, left=left, color=STATUS_COLOURS[k], label=k if i == 0 else None)
            left += width
    ax.set_yticks(range(len(scored)), [r["meter"] for r in scored])
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(STATUSES), frameon=False)
    save(fig, path)
    return path
