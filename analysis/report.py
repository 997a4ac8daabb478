"""analyze(): a capture or a run folder in, metrics.json + plots + report + run tables out.

A run folder is described in results/README.md. Besides the capture, the analysis reads what is
there of manifest.json (expected counts, generator counters), engine-summary.json,
engine-stats.csv and engine-flows.csv, and turns the comparisons into `checks`.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ntgcore.errors import BadInput
from ntgcore.files import read_json, replacing, write_error

from .capture import CaptureError
from .plots import PLOTS, plot_timing, write_plots
from .runtables import write_run_tables
from .stream import chunk_packets, read_stream, run_capture_files
from .timing import directions, engine_key, run_timing

ANALYSIS_VERSION = 1
RUN_FOLDER = "a run folder holding capture.pcap (see results/README.md) or a pcap/pcapng file"
PER_SECOND_ROWS_MAX = 300
# the link types whose frames the capture reader decodes to IP (ntgcore/native/pcapread.c, LT_*)
LINK_TYPES = {
    0: "BSD loopback",
    1: "Ethernet",
    12: "raw IP (BSD)",
    14: "raw IP (OpenBSD)",
    101: "raw IP",
    108: "OpenBSD loopback",
    113: "Linux cooked (SLL)",
    228: "raw IPv4",
    229: "raw IPv6",
    276: "Linux cooked v2 (SLL2)",
}
DECODED_LINK_TYPES = frozenset(LINK_TYPES)


# What a manifest status other than `completed` means for the numbers of a report.
UNFINISHED = {
    "running": "the run had not finished: its manifest still says `running` (it is still running, or "
    "its process died; `testbed cleanup` marks such runs `abandoned`)",
    "abandoned": "the run was abandoned: its process died before it could finish",
    "failed": "the run failed",
    "interrupted": "the run was interrupted",
}


def unfinished_run(manifest: dict[str, Any]) -> dict[str, str] | None:
    """{status, message} when the manifest says the run did not complete, else None: the report
    shows it as a banner, metrics.json as `incomplete_run`, `testbed analyze` on stderr."""
    status = manifest.get("status")
    if status not in UNFINISHED:
        return None
    why = (
        manifest.get("abandoned_reason")
        or manifest.get("error")
        or (f"by {manifest['interrupted_by']}" if manifest.get("interrupted_by") else None)
    )
    return {
        "status": status,
        "message": f"Incomplete run: {UNFINISHED[status]}"
        + (f" ({why})" if why else "")
        + "; the numbers cover only what it produced until then.",
    }


def analyze(
    path: str | Path | Sequence[str | Path],
    out_dir: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    memory_limit: int | None = None,
) -> dict[str, Any]:
    """Analyse a pcap/pcapng file, a run folder, or several files of one logical capture (a
    tcpdump rotation, the captures of several hosts: a list of paths) and write the report files.

    Output goes to OUT_DIR if given, else into the run folder, else next to the (first) capture
    in `<stem>-analysis/`. Returns what metrics.json holds, plus `report_dir` and `files`.
    The capture is read in chunks that fit MEMORY_LIMIT bytes (analysis.stream; default
    DEFAULT_MEMORY_LIMIT); the results do not depend on it. `progress`, if given, is called
    with the name of each stage as it starts and with the bytes read during long reads.
    Raises CaptureError when there is no readable capture."""
    step = progress or (lambda stage: None)
    sources = [Path(path)] if isinstance(path, (str, os.PathLike)) else [Path(p) for p in path]
    if not sources:
        raise CaptureError(Path("."), "no capture given", RUN_FOLDER)
    src = sources[0]
    side: dict[str, Any] = {}
    warnings: list[str] = []
    if len(sources) == 1 and src.is_dir():
        pcaps = run_capture_files(src)
        if not pcaps:
            raise CaptureError(src, "folder has no capture.pcap (nor captures/)", RUN_FOLDER)
        out = Path(out_dir) if out_dir else src
        side = _read_run_files(src, warnings)
    else:
        for p in sources:
            if p.is_dir():
                raise CaptureError(p, "is a folder", "capture files only, when several are given")
        pcaps = sources
        out = Path(out_dir) if out_dir else src.parent / f"{src.stem}-analysis"
    pcap = pcaps[0]

    size = sum(p.stat().st_size for p in pcaps if p.is_file())
    names = pcap.name if len(pcaps) == 1 else f"{len(pcaps)} files ({pcap.name}, ...)"
    step(
        f"reading {names} ({size / 1e6:,.1f} MB, chunks of {chunk_packets(memory_limit):,} packets)"
    )
    stream = read_stream(pcaps, memory_limit, progress)
    step(f"flow table of {stream.totals.packets:,} packets")
    flows = stream.totals.flow_table()
    step("rates and statistics")
    m = stream.totals.metrics(flows)
    first = stream.files[0]
    capture_info = {
        "path": str(pcap.resolve()),
        "format": first.format,
        "link_type": first.link_type,
        "ts_resolution": first.ts_resolution,
        "file_bytes": sum(f.file_bytes for f in stream.files),
    }
    if len(stream.files) > 1:
        capture_info["files"] = [
            {
                "path": str(f.path.resolve()),
                "format": f.format,
                "link_type": f.link_type,
                "ts_resolution": f.ts_resolution,
                "file_bytes": f.file_bytes,
                "packets": f.packets,
            }
            for f in stream.files
        ]
    undecoded = [
        {"path": str(f.path), "link_type": f.link_type, "packets": f.packets}
        for f in stream.files
        if f.link_type not in DECODED_LINK_TYPES
    ]
    for u in undecoded:
        warnings.append(
            f"{u['path']}: link type {u['link_type']} is not one the analysis decodes "
            f"({', '.join(sorted(LINK_TYPES.values()))}): its {u['packets']:,} packets are "
            "counted in packets, bytes and rates, but no flow, address or port is read from them"
        )
    capture_problem = None
    for where, problem in stream.problems:
        if capture_problem is None:
            capture_problem = {
                "offset": problem.offset,
                "message": problem.message,
                "packets_read": problem.packets_read,
            }
            if len(stream.files) > 1:
                capture_problem["file"] = str(where.resolve())
        else:
            warnings.append(
                f"{where}: damaged too, at byte offset {problem.offset:,}: "
                f"{problem.message} ({problem.packets_read:,} packets read before)"
            )
    attacks = (side.get("manifest") or {}).get("attacks") if src.is_dir() else None
    if attacks and (src / str(attacks.get("benign_pcap"))).is_file():
        checks, mismatches = _checks_with_attacks(m, src, attacks, side, warnings, memory_limit)
    else:
        checks, mismatches = run_checks(m, flows, side)
    timing = run_timing(src, flows) if src.is_dir() else None
    manifest = side.get("manifest") or {}
    run_info = None
    if manifest:
        run_info = {k: manifest.get(k) for k in ("run_id", "status", "seed")}
        run_info["scenario"] = (manifest.get("scenario") or {}).get("name")
    doc: dict[str, Any] = {
        "analysis_version": ANALYSIS_VERSION,
        "analysed_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "source": str(src.resolve()),
        "run": run_info,
        "capture": capture_info,
        "capture_problem": capture_problem,
        "undecoded_link_types": undecoded,
        "incomplete_run": unfinished_run(manifest) if manifest else None,
        "warnings": warnings,
        **m,
        "checks": checks,
        "timing": timing[1] if timing else None,
    }

    step("plots and report")
    try:  # every file whole or not at all (replacing); a full disk ends the command (exit 4)
        out.mkdir(parents=True, exist_ok=True)
        with replacing(out / "metrics.json") as tmp:
            tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        plots = write_plots(stream.totals.size_histogram(), m, out / "plots")
        if timing and len(timing[0]):
            plots["timing"] = plot_timing(timing[0], out / "plots" / PLOTS["timing"])
        md, page = render(doc, flows, mismatches, plots, out)
        for name, text in (("report.md", md), ("report.html", page)):
            with replacing(out / name) as tmp:
                tmp.write_text(text)
        step("run tables")
        tables = write_run_tables(
            out, doc, flows, timing[0] if timing else None, manifest, src if src.is_dir() else None
        )
    except OSError as exc:
        raise write_error(
            exc, out, "free some space, or write the report elsewhere with --out"
        ) from None
    doc["report_dir"] = str(out)
    doc["files"] = sorted(
        str(p.relative_to(out))
        for p in [
            out / "metrics.json",
            out / "report.md",
            out / "report.html",
            *plots.values(),
            *tables,
        ]
    )
    return doc


# ---- run folder -------------------------------------------------------------------------


def _read_run_files(run: Path, warnings: list[str]) -> dict[str, Any]:
    """The optional files of a run folder; an unreadable one becomes a warning, not an error."""
    side: dict[str, Any] = {}
    for key, name in (("manifest", "manifest.json"), ("summary", "engine-summary.json")):
        p = run / name
        if p.is_file():
            try:
                side[key] = read_json(p, name)
            except BadInput as e:
                warnings.append(f"{e}; the checks that need it are skipped")
    for key, name in (("engine_flows", "engine-flows.csv"), ("engine_stats", "engine-stats.csv")):
        p = run / name
        if p.is_file():
            try:
                side[key] = pd.read_csv(p)
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
                warnings.append(
                    f"{p}: not a readable CSV ({e}); the checks that need it are skipped"
                )
    return side


def _checks_with_attacks(
    m: dict[str, Any],
    run: Path,
    attacks: dict[str, Any],
    side: dict[str, Any],
    warnings: list[str],
    memory_limit: int | None = None,
) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    """A run with a scenario `attacks:` section: the scenario/engine checks compare the benign part
    (benign.pcap, the engine's own capture), and the capture must be benign + attack packets."""
    benign = read_stream([run / attacks["benign_pcap"]], memory_limit).totals
    bflows = benign.flow_table()
    bm = benign.metrics(bflows)
    checks, mismatches = run_checks(bm, bflows, side)
    for c in checks:
        c["name"] = f"benign part: {c['name']}"
    for name, key in (("packets", "packets"), ("bytes", "bytes")):
        total = _check(
            f"capture {name} = benign + attack {name}",
            m[key],
            bm[key] + int(attacks[key]),
            note=f"{attacks['benign_pcap']} + {attacks.get('manifest', 'attacks.json')}",
        )
        if total is not None:
            checks.append(total)
    warnings.append(
        f"attack sessions were mixed in: {attacks.get('sessions', 0):,} sessions, "
        f"{attacks['packets']:,} packets from IDS rules ({attacks.get('manifest', 'attacks.json')}); "
        f"the rates and tables describe the whole capture, the checks against the "
        f"scenario and the engine describe its benign part ({attacks['benign_pcap']})"
    )
    return checks, mismatches


def _generator_total(manifest: dict[str, Any], field: str) -> int | None:
    gens = [g for g in (manifest.get("generators") or {}).values() if isinstance(g, dict)]
    values = [g[field] for g in gens if g.get(field) is not None]
    return sum(values) if values else None


def _check(
    name: str, measured: Any, expected: Any = None, generator: Any = None, note: str | None = None
) -> dict[str, Any] | None:
    refs = [r for r in (expected, generator) if r is not None]
    if not refs:
        return None
    c = {
        "name": name,
        "expected": expected,
        "measured": measured,
        "generator": generator,
        "ok": all(r == measured for r in refs),
    }
    if note:
        c["note"] = note
    return c


def run_checks(
    m: dict[str, Any], flows: pd.DataFrame, side: dict[str, Any]
) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    """Expected (manifest) vs measured (capture) vs generator-reported counts, and the flow
    table vs the engine flow log. Returns the checks and the flows that differ from the log."""
    manifest = side.get("manifest") or {}
    summary = side.get("summary") or {}
    expected = manifest.get("expected") or {}
    checks: list[dict[str, Any] | None] = []
    mismatches = pd.DataFrame()

    gen_packets = _generator_total(manifest, "packets_sent")
    gen_bytes = _generator_total(manifest, "bytes_sent")
    if gen_packets is None:
        gen_packets = summary.get("packets")
    if gen_bytes is None:
        gen_bytes = summary.get("bytes")
    checks.append(_check("packets", m["packets"], expected.get("packets"), gen_packets))
    checks.append(
        _check("bytes (frames on the wire)", m["bytes"], expected.get("bytes"), gen_bytes)
    )
    if expected.get("first_ns") is not None and expected.get("last_ns") is not None:
        checks.append(
            _check(
                "duration first→last packet (ns)",
                m["duration_ns"],
                expected["last_ns"] - expected["first_ns"],
                (summary["last_ns"] - summary["first_ns"])
                if summary.get("last_ns") is not None and summary.get("first_ns") is not None
                else None,
            )
        )
    failed = _generator_total(manifest, "packets_failed")
    if failed is not None:
        checks.append(
            _check(
                "generator send failures",
                0,
                generator=failed,
                note="packets the generator could not send",
            )
        )

    log = side.get("engine_flows")
    flow_note = None
    flow_ref_expected, flow_ref_gen = expected.get("flows"), summary.get("flows_started")
    if log is not None and len(log):
        eng = engine_key(directions(log))
        key = ["ip_version", "proto", "src", "dst", "sport", "dport"]
        grouped = eng.groupby(key, as_index=False, sort=False)[["packets", "bytes"]].sum()
        shared = len(eng) - len(grouped)
        if expected.get("sessions"):
            flow_note = (
                "two-way sessions: each direction of a session instance is a flow of the "
                "capture's one-way table, so the measured count is compared with the "
                f"{len(grouped)} distinct directed 5-tuples of the engine flow log"
            )
            flow_ref_expected = flow_ref_gen = len(grouped)
        elif shared:
            flow_note = (
                f"{shared} flow instance(s) share a 5-tuple with another instance; a "
                f"capture cannot tell them apart, so the measured count is compared "
                f"with the {len(grouped)} distinct 5-tuples of the engine flow log"
            )
            flow_ref_expected = flow_ref_gen = len(grouped)
        both = grouped.merge(
            flows[key + ["packets", "bytes"]],
            on=key,
            how="outer",
            suffixes=("_engine", "_capture"),
            indicator=True,
        )
        same_p = (both["_merge"] == "both") & (both["packets_engine"] == both["packets_capture"])
        same_b = same_p & (both["bytes_engine"] == both["bytes_capture"])
        checks.append(
            _check(
                "flows (engine flow log)",
                int(len(flows)),
                len(grouped),
                note="distinct 5-tuples in the capture vs in engine-flows.csv",
            )
        )
        checks.append(
            _check(
                "flows with the engine's packet count",
                int(same_p.sum()),
                len(grouped),
                note="same 5-tuple and the same number of packets",
            )
        )
        checks.append(
            _check(
                "flows with the engine's byte count",
                int(same_b.sum()),
                len(grouped),
                note="same 5-tuple, packets and bytes",
            )
        )
        mismatches = both[~same_b].drop(columns="_merge").copy()
    checks.insert(
        2,
        _check(
            "flows (distinct 5-tuples)", int(len(flows)), flow_ref_expected, flow_ref_gen, flow_note
        ),
    )

    stats = side.get("engine_stats")
    if stats is not None and "packets" in stats:
        checks.append(
            _check(
                "packets (engine per-second stats, summed)",
                m["packets"],
                generator=int(stats["packets"].sum()),
            )
        )
    return [c for c in checks if c is not None], mismatches


# ---- rendering --------------------------------------------------------------------------

Block = tuple  # ("h1"|"h2"|"p"|"warn", text) | ("table", headers, rows) | ("img", title, path)


def fmt_number(x: Any, digits: int = 0) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def _si(x: float | None, unit: str) -> str:
    if x is None:
        return "–"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:,.2f} {prefix}{unit}"
    return f"{x:,.1f} {unit}"


def _stats_rows(m: dict[str, Any]) -> list[list[str]]:
    a, s = m, m["steady"]

    def row(label: str, key: str, fmt) -> list[str]:
        return [label, fmt(a.get(key)), fmt(s.get(key))]

    pct = lambda v: "–" if v is None else f"{v:.2f} %"
    pps = lambda v: "–" if v is None else f"{v:,.0f}"
    return [
        ["seconds in the statistics", fmt_number(a["seconds"]), fmt_number(s["seconds"])],
        row("mean rate (packets/s)", "mean_pps", pps),
        row("standard deviation (packets/s)", "std_pps", pps),
        row("variance (std / mean)", "variance_pct", pct),
        row("lowest second (packets)", "min_pps", pps),
        row("highest second (packets)", "max_pps", pps),
        [
            "average packet size (bytes)",
            fmt_number(a["average_packet_size"], 1),
            fmt_number(s["average_packet_size"], 1),
        ],
        row("throughput, measured", "throughput_bps", lambda v: _si(v, "bit/s")),
        row("throughput, measured (bytes/s)", "throughput_Bps", lambda v: _si(v, "B/s")),
        row("average size × average rate", "throughput_formula_Bps", lambda v: _si(v, "B/s")),
    ]


def build(
    doc: dict[str, Any], flows: pd.DataFrame, mismatches: pd.DataFrame, plots: dict[str, Path]
) -> list[Block]:
    m = doc
    run = doc.get("run") or {}
    title = run.get("run_id") or Path(doc["capture"]["path"]).name
    b: list[Block] = [("h1", f"Traffic report: {title}")]
    if doc.get("incomplete_run"):
        b.append(("warn", doc["incomplete_run"]["message"]))
    prob = doc["capture_problem"]
    if prob:
        b.append(
            (
                "warn",
                f"Damaged capture: at byte offset {prob['offset']:,}: {prob['message']}. "
                f"Everything below is computed from the {prob['packets_read']:,} packets "
                f"read before that point.",
            )
        )
    for w in doc["warnings"]:
        b.append(("warn", w))
    c = doc["capture"]
    src_rows = [
        ["capture", c["path"]],
        [
            "format",
            f"{c['format']}, link type {c['link_type']} "
            f"({LINK_TYPES.get(c['link_type'], 'other')}), "
            f"{c['ts_resolution']:,} timestamp units per second",
        ],
        ["file size", f"{c['file_bytes']:,} bytes"],
    ]
    if run:
        src_rows += [
            [
                "run",
                f"{run.get('run_id')} (scenario {run.get('scenario')}, "
                f"status {run.get('status')}, seed {run.get('seed')})",
            ]
        ]
    src_rows.append(["analysed", doc["analysed_utc"]])
    b.append(("table", ["", ""], src_rows))

    if doc["checks"]:
        ok = sum(1 for x in doc["checks"] if x["ok"])
        b.append(("h2", "Checks"))
        b.append(
            (
                "p",
                f"{ok} of {len(doc['checks'])} agree. Expected comes from the scenario "
                f"(manifest.json), measured from the capture, generator from the "
                f"generator's own counters.",
            )
        )
        b.append(
            (
                "table",
                ["check", "expected", "measured", "generator", "result", "note"],
                [
                    [
                        x["name"],
                        fmt_number(x["expected"]),
                        fmt_number(x["measured"]),
                        fmt_number(x["generator"]),
                        "ok" if x["ok"] else "**differs**",
                        x.get("note", ""),
                    ]
                    for x in doc["checks"]
                ],
            )
        )
        if len(mismatches):
            b.append(
                (
                    "p",
                    f"{len(mismatches):,} flow(s) differ from the engine flow log; the "
                    f"first {min(10, len(mismatches))}:",
                )
            )
            cols = [
                "ip_version",
                "proto",
                "src",
                "dst",
                "sport",
                "dport",
                "packets_engine",
                "packets_capture",
                "bytes_engine",
                "bytes_capture",
            ]
            b.append(
                (
                    "table",
                    cols,
                    [
                        [fmt_number(v) if not isinstance(v, float) or v == v else "–" for v in r]
                        for r in mismatches[cols].head(10).itertuples(index=False)
                    ],
                )
            )

    b.append(("h2", "Traffic"))
    dur = m["duration_s"]
    b.append(
        (
            "table",
            ["", ""],
            [
                ["packets", fmt_number(m["packets"])],
                ["bytes (frames on the wire)", fmt_number(m["bytes"])],
                ["IP packets", fmt_number(m["ip_packets"])],
                ["duration, first to last packet", "–" if dur is None else f"{dur:,.6f} s"],
                ["packets ÷ duration", fmt_number(m["packets_per_duration"])],
                ["flows (distinct 5-tuples)", fmt_number(m["flows"]["count"])],
            ],
        )
    )
    b.append(
        (
            "p",
            "Rates are packets counted in 1-second bins from the first packet. The "
            "variance is the standard deviation divided by the mean (coefficient of "
            "variation, in percent), as in the traffic-generator comparison this testbed "
            "follows; the standard deviation is the population one. "
            + (
                "The last second is partial and left out of the statistics. "
                if m["per_second"]["last_partial"]
                else ""
            )
            + (
                f"No rate statistics: {m['per_second']['left_out']}. "
                if m["per_second"].get("left_out")
                else ""
            ),
        )
    )
    w = m["warmup"]
    if w["found"] and w["seconds"]:
        wtext = f"Warm-up: the first {w['seconds']} s. "
    elif w["found"]:
        wtext = "Warm-up: none; the rate is steady from the first second. "
    else:
        wtext = "Warm-up: not determined (too few seconds, or the rate never settles). "
    if w["reference_pps"] is not None:
        wtext += (
            f"Rule: {w['rule']}; reference {w['reference_pps']:,.0f} packets/s, floor "
            f"{w['reference_pps'] * (1 - w['band_pct'] / 100):,.0f} packets/s "
            f"(−{w['band_pct']:.1f} %)."
        )
    b.append(("p", wtext))
    b.append(
        (
            "table",
            [
                "",
                "all complete seconds",
                f"steady state (from second {m['steady']['from_second']})",
            ],
            _stats_rows(m),
        )
    )
    if "rate" in plots:
        b.append(("img", "Packet rate", plots["rate"]))
    if "throughput" in plots:
        b.append(("img", "Throughput", plots["throughput"]))

    b.append(("h2", "Packet sizes"))
    ps = m["packet_size"]
    b.append(
        (
            "p",
            f"Frame length on the wire: min {fmt_number(ps['min'])}, median {fmt_number(ps['median'], 0)}, "
            f"mean {fmt_number(ps['mean'], 1)}, max {fmt_number(ps['max'])} bytes.",
        )
    )
    b.append(
        (
            "table",
            ["length (bytes)", "packets", "share"],
            [
                [x["range"], fmt_number(x["packets"]), f"{x['share_pct']:.2f} %"]
                for x in ps["buckets"]
                if x["packets"]
            ],
        )
    )
    if "sizes" in plots:
        b.append(("img", "Packet sizes", plots["sizes"]))
    b.append(("h2", "Protocols"))
    b.append(
        (
            "table",
            ["protocol", "packets", "bytes"],
            [[x["name"], fmt_number(x["packets"]), fmt_number(x["bytes"])] for x in m["protocols"]],
        )
    )

    b.append(("h2", "Flows"))
    fl = m["flows"]
    b.append(
        (
            "p",
            f"{fl['count']:,} flows (unidirectional 5-tuples of the IP packets; ICMP echo "
            f"uses the identifier as source port); the full table is tables/flows.parquet.",
        )
    )
    if "flows" in plots:
        b.append(("img", "Flows started per second", plots["flows"]))
    if len(flows):
        top = flows.nlargest(10, "bytes")
        b.append(("p", "The largest flows by bytes:"))
        b.append(
            (
                "table",
                ["IP", "proto", "source", "destination", "packets", "bytes", "duration (s)"],
                [
                    [
                        f"v{r.ip_version}",
                        fmt_number(int(r.proto)),
                        f"{r.src} :{r.sport}",
                        f"{r.dst} :{r.dport}",
                        fmt_number(int(r.packets)),
                        fmt_number(int(r.bytes)),
                        f"{r.duration_ns / 1e9:,.3f}",
                    ]
                    for r in top.itertuples(index=False)
                ],
            )
        )

    t = doc.get("timing")
    if t and t["instances"]:
        b.append(("h2", "Timing accuracy"))
        b.append(
            (
                "p",
                f"For each of the {t['instances']:,} flow instances identified in the "
                f"capture: start error = first packet's time stamp − planned start, "
                f"duration error = (last − first) − planned duration (FLOR's timing "
                f"tests; tables/timing.parquet has every instance).",
            )
        )
        rows = []
        for label, key in (
            ("flow-start error", "start_error"),
            ("flow-duration error", "duration_error"),
        ):
            e = t[key]
            rows.append(
                [
                    label,
                    f"{e['exact']:,} of {e['count']:,}",
                    _ns(e["mean_ns"]),
                    _ns(e["std_ns"]),
                    _ns(e["median_ns"]),
                    _ns(e["p99_ns"]),
                    _ns(e["max_abs_ns"]),
                ]
            )
        b.append(
            (
                "table",
                ["", "exact", "mean", "std", "median", "99th percentile", "largest |error|"],
                rows,
            )
        )
        if "timing" in plots:
            b.append(("img", "Timing errors", plots["timing"]))

    ps_ = m["per_second"]
    if 0 < len(ps_["second"]) <= PER_SECOND_ROWS_MAX:
        b.append(("h2", "Per second"))
        last = len(ps_["second"]) - 1
        b.append(
            (
                "table",
                ["second", "packets", "bytes", "flows started", ""],
                [
                    [
                        fmt_number(s),
                        fmt_number(p),
                        fmt_number(by),
                        fmt_number(f),
                        "partial"
                        if ps_["last_partial"] and i == last
                        else ("warm-up" if s < w["seconds"] else ""),
                    ]
                    for i, (s, p, by, f) in enumerate(
                        zip(ps_["second"], ps_["packets"], ps_["bytes"], ps_["flows_started"])
                    )
                ],
            )
        )
    return b


def _ns(x: float) -> str:
    """A time error in the unit that reads best."""
    a = abs(x)
    if a == 0:
        return "0"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if a >= scale:
            return f"{x / scale:,.3f} {unit}"
    return f"{x:,.0f} ns"


def _md_cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block], out: Path) -> str:
    lines: list[str] = []
    for blk in blocks:
        kind = blk[0]
        if kind == "h1":
            lines += [f"# {blk[1]}", ""]
        elif kind == "h2":
            lines += [f"## {blk[1]}", ""]
        elif kind == "p":
            lines += [blk[1], ""]
        elif kind == "warn":
            lines += [f"> **⚠ {blk[1]}**", ""]
        elif kind == "table":
            head, rows = blk[1], blk[2]
            lines.append("| " + " | ".join(_md_cell(h) for h in head) + " |")
            lines.append("|" + "|".join("---" for _ in head) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
            lines.append("")
        elif kind == "img":
            lines += [f"![{blk[1]}]({blk[2].relative_to(out).as_posix()})", ""]
    return "\n".join(lines)


CSS = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;
max-width:1000px;margin:2em auto;padding:0 1em}
h1{font-size:1.6em;border-bottom:1px solid #d0d7de;padding-bottom:.3em}
h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #eaeef2;padding-bottom:.2em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d0d7de;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f6f8fa}tr:nth-child(even) td{background:#fbfcfd}
td.num{text-align:right}
.warn{background:#fff4e5;border:1px solid #f0b37e;border-left:5px solid #d9730d;
padding:.6em 1em;margin:1em 0;font-weight:600}
.bad{color:#b42318;font-weight:700}.ok{color:#1a7f37}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eaeef2}
figcaption{color:#57606a;font-size:.9em}
"""


NUMBER = re.compile(r"–|-?[\d,]+(\.\d+)?( %| [kMGT]?(bit/s|B/s))?")


def _html_cell(x: Any, tag: str = "td") -> str:
    s = str(x)
    if s == "**differs**":
        return f'<{tag} class="bad">differs</{tag}>'
    if s == "ok" and tag == "td":
        return f'<{tag} class="ok">ok</{tag}>'
    cls = ' class="num"' if tag == "td" and NUMBER.fullmatch(s) else ""
    return f"<{tag}{cls}>{html.escape(s)}</{tag}>"


def to_html(blocks: list[Block]) -> str:
    body: list[str] = []
    title = "Traffic report"
    for blk in blocks:
        kind = blk[0]
        if kind == "h1":
            title = blk[1]
            body.append(f"<h1>{html.escape(blk[1])}</h1>")
        elif kind == "h2":
            body.append(f"<h2>{html.escape(blk[1])}</h2>")
        elif kind == "p":
            body.append(f"<p>{html.escape(blk[1])}</p>")
        elif kind == "warn":
            body.append(f'<div class="warn">⚠ {html.escape(blk[1])}</div>')
        elif kind == "table":
            head = "".join(_html_cell(h, "th") for h in blk[1]) if any(blk[1]) else ""
            rows = "".join("<tr>" + "".join(_html_cell(c) for c in r) + "</tr>" for r in blk[2])
            body.append(
                "<table>"
                + (f"<thead><tr>{head}</tr></thead>" if head else "")
                + f"<tbody>{rows}</tbody></table>"
            )
        elif kind == "img":
            data = base64.b64encode(blk[2].read_bytes()).decode()
            body.append(
                f'<figure><img alt="{html.escape(blk[1])}" '
                f'src="data:image/png;base64,{data}"><figcaption>'
                f"{html.escape(blk[1])}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def render(
    doc: dict[str, Any],
    flows: pd.DataFrame,
    mismatches: pd.DataFrame,
    plots: dict[str, Path],
    out: Path,
) -> tuple[str, str]:
    """The Markdown and the self-contained HTML report of one analysis."""
    blocks = build(doc, flows, mismatches, plots)
    return to_markdown(blocks, out), to_html(blocks)
