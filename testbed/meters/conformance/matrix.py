"""The conformance matrix: every meter on every pattern's capture in its pcap mode
(testbed.meters.offline.run_on_pcap), scored (analysis.flowmeter.score) against the pattern's
hand-checked records (`expected.yaml`, which the tests hold equal to the reference records).

`run_matrix(meters, patterns, folder) -> pa.Table` (MATRIX_SCHEMA, one row per meter x pattern:
`pass`, `differs` with what differed, or `error` with the meter's error) and writes into FOLDER:

    conformance.parquet     the table
    conformance.md          the report: the matrix, then per cell that is not `pass` what differed,
                            record by record (reference beside collected)
    conformance.png         the heat map
    pcaps/<pattern>.pcap    the captures (made once, shared by the meters)
    <meter>/<pattern>/      each run's files (records.parquet, export.pcap, counters.json, log)

Each meter is run with the pattern's rules: its idle and active timeouts, its table size where
the pattern sets one, the VLAN in the key where the pattern asks for it. A rule the meter cannot
set (its spec's `cannot`) is left at the meter's default and said in the cell.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis.flowmeter.score import DEFAULT_TOLERANCE_NS, Score, score
from analysis.plots import mpl
from ntgcore.errors import NtgError
from ntgcore.files import replacing, write_whole

from ..base import Meter, MeterSpec
from ..offline import run_on_pcap
from .patterns import Pattern, expected_records, load_pattern, pattern_folders, write_pcap

MATRIX_FILE, REPORT_FILE, FIGURE_FILE = "conformance.parquet", "conformance.md", "conformance.png"
RESULTS = ("pass", "differs", "error")
MATRIX_SCHEMA = pa.schema(
    [
        pa.field("meter", pa.string()),
        pa.field("version", pa.string()),
        pa.field("pattern", pa.string()),
        pa.field("result", pa.string()),  # pass, differs, error
        pa.field("detail", pa.string()),  # what differed ("" for pass)
        pa.field("reference", pa.int64()),  # expected records
        pa.field("collected", pa.int64()),
        *(
            pa.field(s, pa.int64())
            for s in ("exact", "differs_records", "missing", "split", "merged", "spurious")
        ),
    ]
)
COLOURS = {"pass": (0.65, 0.87, 0.72), "differs": (0.98, 0.80, 0.55), "error": (0.93, 0.55, 0.6)}
DETAIL_ROWS = 12
INTERNAL = "internal error (a bug of the meter's code in testbed/meters): "  # records shown per cell in the report


@dataclass
class Cell:
    """One meter on one pattern."""

    meter: str
    version: str
    pattern: str
    result: str
    detail: str
    reference: pa.Table
    collected: pa.Table | None
    score: Score | None


def meter_spec(meter: Meter, pattern: Pattern, version: Any = 9) -> tuple[MeterSpec, list[str]]:
    """The meter's options for the pattern's rules, and the rules it cannot take (left at its
    default). VERSION where the meter has it, else its first (nfpcapd, argus: their own)."""
    r = pattern.rules
    cannot = meter.spec.cannot
    fields: dict[str, Any] = {
        "version": version if version in meter.versions else meter.versions[0],
        "idle_timeout": f"{r.idle_timeout}ns",  # (a bare number would be seconds)
        "active_timeout": f"{r.active_timeout}ns",
    }
    skipped = []
    if r.max_flows is not None:
        if "max_flows" in cannot:
            skipped.append(f"cannot set max_flows ({cannot['max_flows']})")
        else:
            fields["max_flows"] = r.max_flows
    if r.key_vlan:
        if "key_vlan" in cannot:
            skipped.append(f"cannot key by VLAN ({cannot['key_vlan']})")
        else:
            fields["key_vlan"] = True
    for name in ("idle_timeout", "active_timeout"):
        if name in cannot:
            skipped.append(f"cannot set {name} ({cannot[name]})")
            fields.pop(name)
    return meter.spec.model_validate(fields), skipped


def _ms(ns: int) -> str:
    """The largest error: ms, or s when it is 10 s or more."""
    return f"{ns / 1e6:+,.0f} ms" if abs(ns) < 10**10 else f"{ns / 1e9:+,.1f} s"


def describe(s: Score) -> str:
    """What differed, in one line ("" when nothing did)."""
    t = s.totals
    f = s.flows
    parts = []
    for k in ("missing", "split", "merged", "differs", "spurious"):
        if not t.get(k):
            continue
        if k == "merged":
            rows = f.filter(pc.equal(f.column("status"), "merged"))
            into = len(set(rows.column("collected_index").drop_null().to_pylist()))
            parts.append(f"{t[k]} merged into {into}" if into else f"{t[k]} merged")
        else:
            parts.append(f"{t[k]} {k}")
    matched = f.filter(pc.is_in(f.column("status"), pa.array(["exact", "differs", "split"])))
    if matched.num_rows:
        layers = t.get("bytes_layer", {})
        if layers.get("L2"):
            parts.append(f"L2 bytes (frame) in {layers['L2']}")
        be = [
            x
            for x, layer in zip(
                matched.column("byte_error").to_pylist(), matched.column("bytes_layer").to_pylist()
            )
            if x and layer != "L2"
        ]
        if be:
            parts.append(f"bytes {_range(be)} in {len(be)}")
        pe = [x for x in matched.column("packet_error").to_pylist() if x]
        if pe:
            parts.append(f"packets {_range(pe)} in {len(pe)}")
        for col, name in (("first_error_ns", "first"), ("last_error_ns", "last")):
            errs = [
                x
                for x in matched.column(col).to_pylist()
                if x is not None and abs(x) > t["tolerance_ns"]
            ]
            if errs:
                worst = max(errs, key=abs)
                parts.append(f"{name} off {_ms(worst)} in {len(errs)}")
        if t.get("flags_differ"):
            parts.append(f"TCP flags differ in {t['flags_differ']}")
    return "; ".join(parts)


def _range(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:+,}" if lo == hi else f"{lo:+,}..{hi:+,}"


def _vlan_detail(s: Score, collected: pa.Table) -> str:
    """Matched records whose VLAN id is not the reference's, for a pattern with the VLAN in the
    key (without it a meter need not export the VLAN: NetFlow v5 has no field for it)."""
    f = s.flows.filter(pc.equal(s.flows.column("collected"), 1))
    idx = f.column("collected_index").to_pylist()
    if "vlan" not in collected.column_names or not idx:
        return ""
    got = collected.column("vlan").take(pa.array(idx, pa.int64())).to_pylist()
    bad = sum(1 for want, g in zip(f.column("vlan").to_pylist(), got) if want != g)
    return f"VLAN id differs in {bad}" if bad else ""


def _run_cell(
    meter: Meter, pattern: Pattern, pcap: Path, ref: pa.Table, folder: Path, version: Any, tol: int
) -> Cell:
    spec, skipped = meter_spec(meter, pattern, version)
    v = str(spec.version)
    try:
        run = run_on_pcap(meter, spec, pcap, folder / meter.name / pattern.name)
    except Exception as exc:  # one meter's failure is its cell's result; the others still run
        text = str(exc).splitlines()[0] if str(exc) else ""
        if not isinstance(exc, NtgError):  # not an error the meter's runner says: a bug there
            text = f"{INTERNAL}{type(exc).__name__}: {text}"
            where = folder / meter.name / pattern.name
            where.mkdir(parents=True, exist_ok=True)
            write_whole(where / "error.txt", traceback.format_exc())
        for place in (str(folder.resolve()), str(folder)):  # the same text from any folder
            text = text.replace(place + "/", "")
        return Cell(meter.name, v, pattern.name, "error", text, ref, None, None)
    s = score(ref, run.records, tol, key_vlan=pattern.rules.key_vlan and not skipped)
    vlan = _vlan_detail(s, run.records) if pattern.rules.key_vlan else ""
    parts = [p for p in (describe(s), vlan) if p]
    result = "pass" if not parts else "differs"
    return Cell(
        meter.name,
        v,
        pattern.name,
        result,
        "; ".join(parts + skipped),
        ref,
        run.records,
        s,
    )


def run_matrix(
    meters: Sequence[Meter],
    patterns: Sequence[str] | None,
    folder: str | Path,
    *,
    version: Any = 9,
    tolerance_ns: int = DEFAULT_TOLERANCE_NS,
    progress: Callable[[str], None] | None = None,
    jobs: int = 6,
) -> pa.Table:
    """Every meter on every pattern (None: all shipped ones); the table (MATRIX_SCHEMA), and the
    table, the report and the heat map written into FOLDER. VERSION: the export format of the
    meters that have it; PROGRESS: told one line per cell as it is done; JOBS: meter runs at
    once."""
    folder = Path(folder)
    (folder / "pcaps").mkdir(parents=True, exist_ok=True)
    chosen = pattern_folders(list(patterns) if patterns is not None else None)
    loaded, inputs = [], []
    for d in chosen:
        pattern = load_pattern(d)
        loaded.append(pattern)
        pcap = write_pcap(pattern, folder / "pcaps" / f"{pattern.name}.pcap")
        inputs.append((pattern, pcap, expected_records(d, pattern.start)))

    def one(job: tuple[Meter, tuple[Any, Path, pa.Table]]) -> Cell:
        meter, (pattern, pcap, ref) = job
        cell = _run_cell(meter, pattern, pcap, ref, folder, version, tolerance_ns)
        if progress is not None:
            progress(f"{meter.name} on {pattern.name}: {cell.result}")
        return cell

    # several runs at once: each has its own namespace, collector and folder, and most of a run's
    # time is the meter's own waiting (pmacctd sleeps about 3 s per capture), not CPU
    work = [(meter, item) for meter in meters for item in inputs]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        cells = list(pool.map(one, work))
    cells.sort(key=lambda c: ([m.name for m in meters].index(c.meter), c.pattern))
    table = _table(cells)
    with replacing(folder / MATRIX_FILE) as tmp:
        pq.write_table(table, tmp)
    write_whole(folder / REPORT_FILE, report(cells, loaded))
    heat_map(table, folder / FIGURE_FILE)
    return table


def _table(cells: list[Cell]) -> pa.Table:
    rows = []
    for c in cells:
        t = c.score.totals if c.score is not None else {}
        rows.append(
            {
                "meter": c.meter,
                "version": c.version,
                "pattern": c.pattern,
                "result": c.result,
                "detail": c.detail,
                "reference": c.reference.num_rows,
                "collected": c.collected.num_rows if c.collected is not None else None,
                "exact": t.get("exact"),
                "differs_records": t.get("differs"),
                "missing": t.get("missing"),
                "split": t.get("split"),
                "merged": t.get("merged"),
                "spurious": t.get("spurious"),
            }
        )
    return pa.Table.from_pylist(rows, schema=MATRIX_SCHEMA)


# --------------------------------------------------------------------------------------------
# The report and the heat map


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _record_line(r: dict[str, Any], base_ns: int) -> str:
    t0 = (r["first_ns"] - base_ns) / 1e9
    t1 = (r["last_ns"] - base_ns) / 1e9
    vlan = f" vlan {r['vlan']}" if r.get("vlan") else ""
    src, dst = (f"[{a}]" if ":" in a else a for a in (r["src"], r["dst"]))
    return (
        f"{src}:{r['sport']} > {dst}:{r['dport']} proto {r['proto']}{vlan}: "
        f"{r['packets']:,} pkts {r['bytes']:,} B {t0:.3f}-{t1:.3f} s{_flag_text(r['tcp_flags'])}"
    )


def _flag_text(bits: int | None) -> str:
    if not bits:
        return ""
    return " " + "".join(ch for ch, b in zip("FSRPAUEC", (1, 2, 4, 8, 16, 32, 64, 128)) if bits & b)


def report(cells: list[Cell], chosen: list[Pattern]) -> str:
    """The markdown report: the matrix, then what differed per cell, record by record, then
    the patterns (what each exposes)."""
    patterns = [p.name for p in chosen]
    meters = list(dict.fromkeys(c.meter for c in cells))
    by = {(c.meter, c.pattern): c for c in cells}
    lines = [
        "# Flow meter conformance",
        "",
        "Each meter read each pattern's capture in its pcap mode with the pattern's rules "
        "(testbed/meters/conformance/patterns/<pattern>/pattern.yaml); its records were matched "
        "to the pattern's hand-checked records (expected.yaml). `pass`: every record exact "
        "(packets, bytes, first/last within the tolerance, flags), none extra.",
        "",
        "| pattern | " + " | ".join(f"{m} ({by[(m, patterns[0])].version})" for m in meters) + " |",
        "|---|" + "---|" * len(meters),
    ]
    for p in patterns:
        row = []
        for m in meters:
            c = by[(m, p)]
            short = c.detail if len(c.detail) <= 90 else c.detail[:89] + "…"
            if c.result == "pass":
                row.append(f"pass ({_md(short)})" if c.detail else "pass")
            else:
                row.append(f"**{c.result}**: {_md(short)}")
        lines.append(f"| {p} | " + " | ".join(row) + " |")
    lines.append("")
    for c in cells:
        if c.result == "pass":
            continue
        lines += [f"## {c.meter} on {c.pattern}: {c.result}", "", _md(c.detail), ""]
        if c.score is None or c.collected is None:
            continue
        base = min(c.reference.column("first_ns").to_pylist() or [0])
        base -= base % 1_000_000_000
        f = c.score.flows.filter(pc.not_equal(c.score.flows.column("status"), "exact"))
        collected = c.collected.to_pylist()
        shown = 0
        for r in f.to_pylist():
            if shown == DETAIL_ROWS:
                lines.append(f"- ... ({f.num_rows - shown} more)")
                break
            shown += 1
            if r["status"] == "spurious":
                got = collected[r["collected_index"]] if r["collected_index"] is not None else r
                lines.append(f"- spurious: `{_record_line(got, base)}`")
                continue
            want = c.reference.slice(r["ref_index"], 1).to_pylist()[0]
            lines.append(f"- {r['status']}: expected `{_record_line(want, base)}` ({want['end']})")
            if r["collected_index"] is not None:
                lines.append(f"  - got `{_record_line(collected[r['collected_index']], base)}`")
            elif r["collected"]:
                lines.append(
                    f"  - got {r['collected']} records: {r['packets_c']:,} pkts {r['bytes_c']:,} B"
                )
        lines.append("")
    lines += ["## The patterns", ""]
    for pat in chosen:
        r = pat.rules
        rules = (
            f"idle {r.idle_timeout // 10**9} s, active {r.active_timeout // 10**9} s"
            + (f", table {r.max_flows}" if r.max_flows else "")
            + (", VLAN in the key" if r.key_vlan else "")
            + ("" if r.tcp_end else ", no FIN/RST expiry")
        )
        lines += [f"- **{pat.name}** ({rules}): {_md(pat.exposes)} *{_md(pat.artifact)}*"]
    return "\n".join(lines) + "\n"


def heat_map(table: pa.Table, path: Path) -> Path:
    """meter x pattern: green pass, orange differs, red error; each cell labelled."""
    m = mpl()
    meters = list(dict.fromkeys(table.column("meter").to_pylist()))
    patterns = sorted(set(table.column("pattern").to_pylist()))
    version = dict(zip(table.column("meter").to_pylist(), table.column("version").to_pylist()))
    grid = [[COLOURS["pass"]] * len(meters) for _ in patterns]
    labels = [[""] * len(meters) for _ in patterns]
    for r in table.to_pylist():
        i, j = patterns.index(r["pattern"]), meters.index(r["meter"])
        grid[i][j] = COLOURS[r["result"]]
        labels[i][j] = r["result"] if r["result"] != "differs" else _short(r["detail"])
    fig = m.Figure(figsize=(2.2 + 2.1 * len(meters), 1.0 + 0.5 * len(patterns)))
    m.FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.imshow(grid, aspect="auto")
    ax.set_xticks(range(len(meters)), [f"{m} ({_version(version[m])})" for m in meters])
    ax.set_yticks(range(len(patterns)), patterns)
    ax.xaxis.tick_top()
    for i in range(len(patterns)):
        for j in range(len(meters)):
            ax.text(j, i, labels[i][j], ha="center", va="center", fontsize=7)
    ax.set_title("flow meter conformance (pass / differs / error)", fontsize=9, pad=24)
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    return path


def _version(v: str) -> str:
    return {"5": "NetFlow v5", "9": "NetFlow v9", "ipfix": "IPFIX"}.get(v, v)


def _short(detail: str) -> str:
    """The first two differences, one a line (a rule the meter cannot take is in the report)."""
    said = [p.strip() for p in detail.split(";") if not p.strip().startswith("cannot ")]
    said = said or [detail.split(";")[0]]
    return "\n".join(p if len(p) <= 28 else p[:27] + "…" for p in said[:2])


__all__ = ["MATRIX_SCHEMA", "Cell", "describe", "heat_map", "meter_spec", "report", "run_matrix"]
