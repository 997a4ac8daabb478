"""How close a generated trace is to an original one: NetShare's distributional metrics, rank
correlations of the heaviest talkers and ports, downstream counts, plots and a report.

    from analysis.fidelity import compare_traffic, write_report
    r = compare_traffic("original.pcap", "learned.pcap")
    r.metrics["jsd_dst_port"], r.missed()
    write_report("fidelity", {"learned": r, "baseline": compare_traffic("original.pcap", "b.pcap")})

Definitions (docs/fidelity.md says where each comes from and where we deviate from NetShare,
Yin et al., SIGCOMM 2022):

- Records. Every metric but the packet size is computed over flow records, as NetShare's NetFlow
  evaluation uses one row per flow record: a unidirectional 5-tuple's IP packets, cut where two
  of them are more than FLOW_IDLE_NS apart (a flow meter's idle timeout; no active timeout, no
  FIN/RST end; bytes are frame bytes, as in analysis' flow table; an ICMP flow's key holds its
  type and code) by the flow-meter reference (`analysis.flowmeter.reference`). Without the cut a
  5-tuple met again after a pause of months (a learned scenario that keeps a capture's clock
  jumps, a client port drawn again) would be one flow months long. The packet size is over
  every packet.
- JSD: Jensen-Shannon divergence with base-2 logarithms, in [0, 1] (0: the same distribution).
  Ports and protocol: distributions over the values (0..65535, 0..255). Addresses: over the
  popularity ranks (the share of the most frequent address, of the second, ...), as NetShare does:
  it compares the shape of the address distribution, not which addresses (a learned trace's are
  mapped into documentation ranges).
- nEMD: the earth mover's distance (1-Wasserstein) between the generated and the original values,
  divided by the original's range (max - min; when that is 0, by max(|value|, 1)): 0 for equal
  distributions, 1 when the generated values are shifted by the whole range of the original's.
  Flow start times are taken relative to each trace's first packet and divided by that trace's
  span (first to last packet), so they lie in [0, 1] and their nEMD is their EMD.
- Spearman rank correlation of the volumes (bytes) of the top-10 talkers (source addresses) and
  top-10 service ports (the lower of a flow's two ports) of both traces (the union of the two
  top-10 lists, a volume of 0 where one trace has none).

Everything is computed with numpy over the flow records' columns (no per-packet Python loop); a
capture is read in chunks (`iter_capture`, `chunk_packets(memory_limit)` packets at a time) twice:
once for a packet-length histogram, once for the records: memory is bounded by the chunk plus
the flows.
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ntgcore.errors import BadInput
from ntgcore.files import replacing, write_error

from .capture import iter_capture
from .flowmeter.records import MeterRules
from .flowmeter.reference import reference_records
from .metrics import PROTO_NAMES
from .plots import BLUE, GREEN, GREY, ORANGE, figure, legend, save
from .report import to_html, to_markdown
from .stream import PROGRESS_EVERY_S, chunk_packets

FLOW_IDLE_NS = 1800 * 10**9  # a 5-tuple's packets further apart than this are two flows
RECORD_RULES = MeterRules(
    idle_timeout_ns=FLOW_IDLE_NS, active_timeout_ns=2**61, tcp_end=False, frame_bytes=True
)
RECORD_COLUMNS = [
    "src",
    "dst",
    "sport",
    "dport",
    "proto",
    "packets",
    "bytes",
    "first_ns",
    "last_ns",
]

JSD_FIELDS = {
    "src_addr": "source address (popularity rank)",
    "dst_addr": "destination address (popularity rank)",
    "src_port": "source port",
    "dst_port": "destination port",
    "protocol": "IP protocol",
}
EMD_FIELDS = {
    "flow_start": "flow start time (share of the trace's span)",
    "flow_duration": "flow duration (ns)",
    "flow_packets": "packets per flow",
    "flow_bytes": "bytes per flow",
    "packet_size": "packet size (bytes on the wire)",
}
RANK_FIELDS = {
    "talkers": "top-10 talkers' bytes (source address)",
    "ports": "top-10 service ports' bytes (lower port)",
}
KIND_LABELS = {"jsd": "JSD", "nemd": "nEMD", "spearman": "Spearman"}
TOP = 10
# The targets of issue 28: every JSD and every nEMD at most 0.1. Spearman has none.
TARGETS = {"jsd": 0.1, "nemd": 0.1}
CDF_POINTS = 257  # quantiles kept per field and trace for the plots
SHOWN_CATEGORIES = 20  # categories kept per categorical field and trace for the plots
FLOW_TABLE_COLUMNS = ("proto", "src", "dst", "sport", "dport", "packets", "bytes", "first_ns")
PARQUET_MAGIC = b"PAR1"
# what a flow table's numbers may be: (lowest, highest, what) per column (times: any ns that an
# int64 holds, less a margin so that differences of two cannot overflow)
TABLE_RANGES = {
    "packets": (1, 2**53, "a packet count"),
    "bytes": (0, 2**53, "a byte count"),
    "first_ns": (-(2**61), 2**61, "a time stamp in ns"),
    "last_ns": (-(2**61), 2**61, "a time stamp in ns"),
    "proto": (0, 255, "an IP protocol number"),
    "sport": (0, 65535, "a port"),
    "dport": (0, 65535, "a port"),
}
PLOT_COLORS = (ORANGE, GREEN, "#9467bd", "#8c564b", "#e377c2", GREY)


def metric_names() -> list[str]:
    """Every metric's key in FidelityResult.metrics, in report order."""
    return (
        [f"jsd_{f}" for f in JSD_FIELDS]
        + [f"nemd_{f}" for f in EMD_FIELDS]
        + [f"spearman_{f}" for f in RANK_FIELDS]
    )


def target_of(name: str) -> float | None:
    """The upper bound a metric must meet (TARGETS), None for the rank correlations."""
    return TARGETS.get(name.split("_", 1)[0])


# ---- the distances ---------------------------------------------------------------------------


def jsd(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence (base 2, in [0, 1]) between two count or probability vectors of
    the same categories (padded with zeros by the caller). Empty vectors: BadInput."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"jsd needs vectors of one length, not {p.shape} and {q.shape}")
    sp, sq = p.sum(), q.sum()
    if not (sp > 0 and sq > 0) or not (np.isfinite(sp) and np.isfinite(sq)):
        raise ValueError("jsd needs two distributions with a positive, finite total")
    p, q = p / sp, q / sq
    m = (p + q) / 2
    out = 0.0
    for x in (p, q):
        nz = x > 0
        out += 0.5 * float(np.sum(x[nz] * np.log2(x[nz] / m[nz])))
    return min(max(out, 0.0), 1.0)  # rounding can leave it a hair outside


def emd(
    u: np.ndarray,
    v: np.ndarray,
    u_weights: np.ndarray | None = None,
    v_weights: np.ndarray | None = None,
) -> float:
    """Earth mover's distance (1-Wasserstein) between two one-dimensional samples, optionally
    weighted (a histogram: values and their counts): the area between the two CDFs."""
    u = np.asarray(u, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    if not len(u) or not len(v):
        raise ValueError("emd needs two non-empty samples")
    uw = np.ones(len(u)) if u_weights is None else np.asarray(u_weights, dtype=np.float64)
    vw = np.ones(len(v)) if v_weights is None else np.asarray(v_weights, dtype=np.float64)
    iu, iv = np.argsort(u, kind="stable"), np.argsort(v, kind="stable")
    us, vs = u[iu], v[iv]
    grid = np.sort(np.concatenate([us, vs]))
    steps = np.diff(grid)
    cu = np.concatenate([[0.0], np.cumsum(uw[iu])])
    cv = np.concatenate([[0.0], np.cumsum(vw[iv])])
    fu = cu[np.searchsorted(us, grid[:-1], side="right")] / cu[-1]
    fv = cv[np.searchsorted(vs, grid[:-1], side="right")] / cv[-1]
    return float(np.sum(np.abs(fu - fv) * steps))


def normalized_emd(
    original: np.ndarray,
    generated: np.ndarray,
    o_weights: np.ndarray | None = None,
    g_weights: np.ndarray | None = None,
) -> float:
    """emd divided by the original's range (max - min), or by max(|max|, 1) when the range is 0."""
    o = np.asarray(original, dtype=np.float64)
    if not len(o):
        raise ValueError("normalized_emd needs a non-empty original sample")
    span = float(o.max() - o.min())
    if span <= 0:
        span = max(abs(float(o.max())), 1.0)
    return emd(o, generated, o_weights, g_weights) / span


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN with fewer than two pairs or a
    constant side."""
    if len(x) < 2:
        return math.nan
    rx = pd.Series(np.asarray(x, dtype=np.float64)).rank(method="average").to_numpy()
    ry = pd.Series(np.asarray(y, dtype=np.float64)).rank(method="average").to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


# ---- one trace -------------------------------------------------------------------------------


@dataclass
class Trace:
    """What the metrics need of one trace: its flow table (analysis' columns), its packet-length
    histogram (None for a flow table, which has no packets), its first and last time stamps."""

    source: str
    flows: pd.DataFrame
    sizes: tuple[np.ndarray, np.ndarray] | None
    first_ns: int
    last_ns: int
    packets: int
    problems: list[str] = field(default_factory=list)

    @property
    def span_ns(self) -> int:
        return self.last_ns - self.first_ns


def _paths(source: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    if isinstance(source, str | os.PathLike):
        return [Path(source)]
    return [Path(p) for p in source]


def _is_parquet(path: Path) -> bool:
    """Whether PATH is a regular file that starts like Parquet (a pipe or a device is not read
    here: the capture reader says what it is)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return False
        with path.open("rb") as f:
            return f.read(4) == PARQUET_MAGIC
    except OSError:
        return False


def read_trace(
    source: str | os.PathLike | Sequence[str | os.PathLike],
    memory_limit: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> Trace:
    """A trace from a capture (pcap/pcapng; several files: one logical capture), read in chunks,
    or from a Parquet flow table with analysis' flow columns (`tables/flows.parquet`). BadInput
    (CaptureError) for a missing file, a folder, a file that is neither, or a trace without one IP
    flow."""
    paths = _paths(source)
    if not paths:
        raise BadInput("compare-traffic: no trace given (expected a capture or a flow table)")
    label = " ".join(str(p) for p in paths)
    for p in paths:
        if p.is_dir():
            raise BadInput(
                f"{p}: is a folder (expected a pcap or pcapng capture file, or a Parquet flow "
                "table such as a run folder's tables/flows.parquet)"
            )
    if len(paths) == 1 and _is_parquet(paths[0]):
        return _trace_of_table(paths[0])
    for p in paths:  # a missing file or one that is not a capture, before reading any
        opened = iter_capture(p, 1)
        try:
            next(opened)
        finally:
            opened.close()
    sizes: pd.Series = pd.Series(dtype=np.int64)
    packets, first, last, shown = 0, None, None, time.monotonic()
    problems = []
    for p in paths:
        chunks = iter_capture(p, chunk_packets(memory_limit), reuse=True)
        # the chunks share their arrays (reuse): each is dropped before the next is read
        while (cap := next(chunks, None)) is not None:
            if len(cap):
                packets += len(cap)
                lo, hi = int(cap.ts_ns.min()), int(cap.ts_ns.max())
                first = lo if first is None else min(first, lo)
                last = hi if last is None else max(last, hi)
                v, c = np.unique(cap.wire_len, return_counts=True)
                sizes = sizes.add(pd.Series(c, index=v), fill_value=0)
            if cap.problem is not None:
                problems.append(f"{p}: damaged at byte offset {cap.problem.offset:,}")
            if progress and time.monotonic() - shown >= PROGRESS_EVERY_S:
                shown = time.monotonic()
                progress(f"{label}: {packets:,} packets")
            del cap
    records = reference_records(paths, RECORD_RULES, chunk_packets(memory_limit))
    flows = records.select(RECORD_COLUMNS).to_pandas()
    flows["duration_ns"] = flows["last_ns"] - flows["first_ns"]
    if not len(flows):
        raise BadInput(
            f"{label}: no IP flow in {packets:,} packets (expected a capture with IPv4 or "
            "IPv6 packets: the metrics compare flows)"
        )
    assert first is not None and last is not None  # it has packets
    hist = (sizes.index.to_numpy(np.int64), sizes.to_numpy(np.int64))
    return Trace(label, flows, hist, first, last, packets, problems)


def pool_traces(traces: Sequence[Trace], label: str) -> Trace:
    """Several independent realizations of one model (replicas: each its own capture, all starting
    at the same time) as one trace: their flow records side by side, never merged across replicas
    (two replicas may draw the same 5-tuple), their packet-size histograms summed. Each flow keeps
    its start as a share of its own replica's span (column `start_frac`, what the flow start
    metric uses): one replica that runs longer must not squeeze the others' starts towards 0.
    What `testbed learn --check` compares with the original: a model's distribution, not one
    small draw of it."""
    if not traces:
        raise ValueError("pool_traces: no trace")
    flows = []
    for t in traces:  # each replica's starts as a share of its own span (_values)
        f = t.flows
        frac = (f["first_ns"].to_numpy(np.int64) - t.first_ns) / max(t.span_ns, 1)
        flows.append(f.assign(start_frac=frac))
    sized = [t.sizes for t in traces if t.sizes is not None]
    sizes = None
    if len(sized) == len(traces):
        hist = pd.concat([pd.Series(c, index=v) for v, c in sized]).groupby(level=0).sum()
        sizes = (hist.index.to_numpy(np.int64), hist.to_numpy(np.int64))
    return Trace(
        label,
        pd.concat(flows, ignore_index=True),
        sizes,
        min(t.first_ns for t in traces),
        max(t.last_ns for t in traces),
        sum(t.packets for t in traces),
        [p for t in traces for p in t.problems],
    )


def _trace_of_table(path: Path) -> Trace:
    try:
        flows = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: not a readable Parquet flow table ({exc})") from None
    missing = [c for c in FLOW_TABLE_COLUMNS if c not in flows.columns]
    if missing:
        raise BadInput(
            f"{path}: a Parquet file without the flow table column(s) {', '.join(missing)} "
            f"(expected analysis' flow table: {', '.join(FLOW_TABLE_COLUMNS)}, last_ns)"
        )
    if not len(flows):
        raise BadInput(f"{path}: the flow table has no row (expected at least one flow)")
    if "last_ns" not in flows.columns:
        flows["last_ns"] = flows["first_ns"] + flows.get("duration_ns", 0)
    for c, (lo, hi, what) in TABLE_RANGES.items():
        col = pd.to_numeric(flows[c], errors="coerce").astype(np.float64)
        bad = ~np.isfinite(col.to_numpy()) | (col < lo).to_numpy() | (col > hi).to_numpy()
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise BadInput(
                f"{path}: column {c}, row {row}: {flows[c].iloc[row]} is not {what} "
                f"({lo:,} to {hi:,})"
            )
        flows[c] = pd.to_numeric(flows[c]).astype(np.int64)
    if (flows["last_ns"] < flows["first_ns"]).any():
        row = int(np.flatnonzero((flows["last_ns"] < flows["first_ns"]).to_numpy())[0])
        raise BadInput(f"{path}: row {row}: last_ns is before first_ns (expected a flow's times)")
    return Trace(
        str(path),
        flows,
        None,
        int(flows["first_ns"].min()),
        int(flows["last_ns"].max()),
        int(flows["packets"].sum()),
    )


# ---- the comparison --------------------------------------------------------------------------


@dataclass
class FidelityResult:
    """One generated trace against its original: `metrics` (metric_names() -> value; NaN where a
    metric cannot be computed, e.g. the packet size of a flow table), `downstream` (flow, packet
    and byte counts; Suricata's app-layer protocols when asked), `tables` (DataFrames behind the
    plots and the report: cdf, categories, top_talkers, top_ports, app_proto)."""

    original: str
    generated: str
    metrics: dict[str, float]
    downstream: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def passed(self) -> dict[str, bool]:
        """metric -> whether it meets its target (metrics that have one and a value)."""
        out = {}
        for name, value in self.metrics.items():
            bound = target_of(name)
            if bound is not None and not math.isnan(value):
                out[name] = value <= bound
        return out

    def missed(self) -> list[str]:
        """The metrics above their target, in report order."""
        return [k for k, ok in self.passed().items() if not ok]

    def to_dict(self) -> dict[str, Any]:
        return {
            "original": self.original,
            "generated": self.generated,
            "metrics": {k: (None if math.isnan(v) else v) for k, v in self.metrics.items()},
            "targets": {k: target_of(k) for k in self.metrics},
            "missed": self.missed(),
            "downstream": self.downstream,
            "notes": self.notes,
        }

    def write_report(
        self, out_dir: str | os.PathLike, peers: Mapping[str, FidelityResult] | None = None
    ) -> dict[str, Path]:
        """write_report(OUT_DIR, {"generated": self, **PEERS})."""
        return write_report(out_dir, {"generated": self, **(peers or {})})


def _rank_counts(col: pd.Series) -> np.ndarray:
    """Counts of each distinct value, most frequent first (the popularity-rank distribution)."""
    return np.sort(col.value_counts(sort=False).to_numpy())[::-1]


def _padded(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = max(len(a), len(b))
    return np.pad(a, (0, n - len(a))), np.pad(b, (0, n - len(b)))


def _values(t: Trace, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The sample of continuous field NAME (values, weights or None)."""
    f = t.flows
    if name == "flow_start":
        if "start_frac" in f.columns:  # pooled replicas: each against its own span
            return f["start_frac"].to_numpy(np.float64), None
        span = max(t.span_ns, 1)
        return (f["first_ns"].to_numpy(np.int64) - t.first_ns) / span, None
    if name == "flow_duration":
        return (f["last_ns"].to_numpy(np.int64) - f["first_ns"].to_numpy(np.int64)), None
    if name == "flow_packets":
        return f["packets"].to_numpy(np.int64), None
    if name == "flow_bytes":
        return f["bytes"].to_numpy(np.int64), None
    assert name == "packet_size" and t.sizes is not None
    return t.sizes


def _service_port(f: pd.DataFrame) -> np.ndarray:
    return np.minimum(f["sport"].to_numpy(np.int64), f["dport"].to_numpy(np.int64))


def _volumes(keys: pd.Series | np.ndarray, weights: pd.Series) -> pd.Series:
    return pd.Series(weights.to_numpy(np.int64)).groupby(np.asarray(keys)).sum()


def _top_table(a: pd.Series, b: pd.Series, key: str) -> pd.DataFrame:
    """The union of A's and B's top-10 keys by volume, with both volumes (0 where absent)."""
    keys = list(dict.fromkeys([*a.nlargest(TOP).index, *b.nlargest(TOP).index]))
    return pd.DataFrame(
        {
            key: [str(k) for k in keys],
            "original_bytes": [int(a.get(k, 0)) for k in keys],
            "generated_bytes": [int(b.get(k, 0)) for k in keys],
        }
    )


def _quantiles(values: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    q = np.linspace(0, 1, CDF_POINTS)
    if weights is None:
        return q, np.quantile(np.asarray(values, dtype=np.float64), q, method="inverted_cdf")
    order = np.argsort(values)
    v, c = np.asarray(values, dtype=np.float64)[order], np.cumsum(weights[order])
    idx = np.searchsorted(c, q * c[-1], side="left").clip(0, len(v) - 1)
    return q, v[idx]


def _categories(t: Trace, name: str) -> pd.Series:
    """Shares of the SHOWN_CATEGORIES most frequent values of categorical field NAME (addresses:
    labelled by rank)."""
    f = t.flows
    if name in ("src_addr", "dst_addr"):
        counts = _rank_counts(f["src" if name == "src_addr" else "dst"])[:SHOWN_CATEGORIES]
        return pd.Series(counts / len(f), index=[f"#{i + 1}" for i in range(len(counts))])
    col = {"src_port": "sport", "dst_port": "dport", "protocol": "proto"}[name]
    s = f[col].value_counts(normalize=True).head(SHOWN_CATEGORIES)
    if name == "protocol":
        s.index = [PROTO_NAMES.get(int(p), str(p)) for p in s.index]
    return s


def compare_traces(
    original: Trace, generated: Trace, address_map: Mapping[str, str] | None = None
) -> FidelityResult:
    """The metrics of GENERATED against ORIGINAL (see the module's docstring). ADDRESS_MAP maps
    the original's addresses (text) to the generated trace's, for the talkers' rank correlation
    when the generated trace's addresses were renamed (as `testbed learn` does)."""
    a, b = original.flows, generated.flows
    metrics: dict[str, float] = {}
    notes: list[str] = []
    for name in ("src_addr", "dst_addr"):
        col = "src" if name == "src_addr" else "dst"
        metrics[f"jsd_{name}"] = jsd(*_padded(_rank_counts(a[col]), _rank_counts(b[col])))
    for name, col, size in (
        ("src_port", "sport", 1 << 16),
        ("dst_port", "dport", 1 << 16),
        ("protocol", "proto", 1 << 8),
    ):
        metrics[f"jsd_{name}"] = jsd(
            np.bincount(a[col].to_numpy(np.int64), minlength=size),
            np.bincount(b[col].to_numpy(np.int64), minlength=size),
        )
    cdf_rows = []
    for name in EMD_FIELDS:
        if name == "packet_size" and (original.sizes is None or generated.sizes is None):
            metrics[f"nemd_{name}"] = math.nan
            notes.append("packet size: not in a flow table (compare captures for it)")
            continue
        (ov, ow), (gv, gw) = _values(original, name), _values(generated, name)
        if name == "flow_start":  # both already in [0, 1] of their own trace's span
            metrics[f"nemd_{name}"] = emd(ov, gv, ow, gw)
        else:
            metrics[f"nemd_{name}"] = normalized_emd(ov, gv, ow, gw)
        for trace, (v, w) in (("original", (ov, ow)), ("generated", (gv, gw))):
            q, x = _quantiles(v, w)
            cdf_rows.append(pd.DataFrame({"field": name, "trace": trace, "q": q, "value": x}))
    talk_a = _volumes(a["src"], a["bytes"])
    if address_map:
        talk_a = talk_a.groupby(lambda k: address_map.get(k, k)).sum()
    talk_b = _volumes(b["src"], b["bytes"])
    talkers = _top_table(talk_a, talk_b, "address")
    ports = _top_table(
        _volumes(_service_port(a), a["bytes"]), _volumes(_service_port(b), b["bytes"]), "port"
    )
    for name, table in (("talkers", talkers), ("ports", ports)):
        metrics[f"spearman_{name}"] = spearman(table["original_bytes"], table["generated_bytes"])
    if not (talkers["original_bytes"].gt(0) & talkers["generated_bytes"].gt(0)).any():
        notes.append(
            "talkers: no address is among the top talkers of both traces (renamed addresses? "
            "pass the mapping, address_map)"
        )
    cat_rows = []
    for name in JSD_FIELDS:
        for trace, t in (("original", original), ("generated", generated)):
            s = _categories(t, name)
            cat_rows.append(
                pd.DataFrame(
                    {
                        "field": name,
                        "trace": trace,
                        "category": [str(k) for k in s.index],
                        "share": s.to_numpy(np.float64),
                    }
                )
            )
    downstream = {
        "flows": {"original": len(a), "generated": len(b)},
        "packets": {"original": original.packets, "generated": generated.packets},
        "bytes": {"original": int(a["bytes"].sum()), "generated": int(b["bytes"].sum())},
        "span_s": {"original": original.span_ns / 1e9, "generated": generated.span_ns / 1e9},
        "app_proto": None,
    }
    return FidelityResult(
        original.source,
        generated.source,
        {k: metrics[k] for k in metric_names()},
        downstream,
        {
            "cdf": pd.concat(cdf_rows, ignore_index=True) if cdf_rows else pd.DataFrame(),
            "categories": pd.concat(cat_rows, ignore_index=True),
            "top_talkers": talkers,
            "top_ports": ports,
        },
        notes,
    )


def compare_traffic(
    original: str | os.PathLike | Sequence[str | os.PathLike],
    generated: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    suricata: bool = False,
    memory_limit: int | None = None,
    app_protocols: Callable[[Path], dict[str, int]] | None = None,
    address_map: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> FidelityResult:
    """GENERATED against ORIGINAL (each a capture, several files of one capture, or a Parquet flow
    table). SURICATA: also Suricata's app-layer protocol counts of both captures, through
    APP_PROTOCOLS (capture -> {app_proto: flows}; the analysis does not run tools: the testbed
    gives it, `testbed.commands.compare_traffic.suricata_app_protocols`)."""
    if suricata and app_protocols is None:
        raise ValueError(
            "suricata=True needs app_protocols (capture -> {app_proto: flows}): the analysis "
            "runs no tool; use testbed.commands.compare_traffic.compare_with_suricata"
        )
    a = read_trace(original, memory_limit, progress)
    b = read_trace(generated, memory_limit, progress)
    result = compare_traces(a, b, address_map)
    result.notes += [
        f"damaged capture, read up to the damage: {p}" for p in a.problems + b.problems
    ]
    if suricata and app_protocols is not None:
        if a.sizes is None or b.sizes is None:
            raise BadInput(
                "--suricata needs two captures, not flow tables (Suricata reads packets)"
            )
        counts = {
            "original": app_protocols(_paths(original)[0]),
            "generated": app_protocols(_paths(generated)[0]),
        }
        result.downstream["app_proto"] = counts
        names = sorted(set(counts["original"]) | set(counts["generated"]))
        result.tables["app_proto"] = pd.DataFrame(
            {
                "app_proto": names,
                "original": [counts["original"].get(n, 0) for n in names],
                "generated": [counts["generated"].get(n, 0) for n in names],
            }
        )
    return result


# ---- the report ------------------------------------------------------------------------------


def _fmt(x: float) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:.4f}"


def metrics_table(results: Mapping[str, FidelityResult]) -> pd.DataFrame:
    """One row per (trace, metric): trace, metric, value, target, ok (None without a target)."""
    rows = []
    for trace, r in results.items():
        for name, value in r.metrics.items():
            bound = target_of(name)
            ok = None if bound is None or math.isnan(value) else bool(value <= bound)
            rows.append({"trace": trace, "metric": name, "value": value, "target": bound, "ok": ok})
    return pd.DataFrame(rows)


def _label(name: str) -> str:
    kind, f = name.split("_", 1)
    return f"{KIND_LABELS[kind]} {({**JSD_FIELDS, **EMD_FIELDS, **RANK_FIELDS})[f]}"


def _blocks(results: Mapping[str, FidelityResult], plots: dict[str, Path]) -> list[tuple]:
    names = list(results)
    first = next(iter(results.values()))
    blocks: list[tuple] = [("h1", "Traffic fidelity")]
    blocks.append(("p", f"Original: {first.original}"))
    for n, r in results.items():
        blocks.append(("p", f"{n}: {r.generated}"))
    missed = {n: r.missed() for n, r in results.items()}
    for n, m in missed.items():
        if m:
            blocks.append(("warn", f"{n} misses its target on: {', '.join(m)}"))
    blocks.append(
        (
            "p",
            "JSD (base 2, 0..1) and nEMD (EMD / the original's range) as docs/fidelity.md defines "
            f"them; targets: JSD <= {TARGETS['jsd']}, nEMD <= {TARGETS['nemd']}; Spearman: rank "
            "correlation of the heaviest talkers' and ports' bytes (1: same order).",
        )
    )
    head = ["metric", "target", *names]
    rows = []
    for metric in metric_names():
        bound = target_of(metric)
        row = [_label(metric), "–" if bound is None else f"<= {bound}"]
        for n in names:
            v = results[n].metrics[metric]
            mark = "" if bound is None or math.isnan(v) else (" ok" if v <= bound else " MISSED")
            row.append(_fmt(v) + mark)
        rows.append(row)
    blocks.append(("h2", "Metrics"))
    blocks.append(("table", head, rows))
    blocks.append(("h2", "Downstream"))
    rows = []
    for key in ("flows", "packets", "bytes", "span_s"):
        row = [key, f"{first.downstream[key]['original']:,}"]
        row += [f"{results[n].downstream[key]['generated']:,}" for n in names]
        rows.append(row)
    blocks.append(("table", ["count", "original", *names], rows))
    apps = {n: r.downstream.get("app_proto") for n, r in results.items()}
    if any(apps.values()):
        protos = sorted(
            {p for a in apps.values() if a for side in a.values() for p in side}, key=str
        )
        orig = next(a for a in apps.values() if a)["original"]
        rows = [
            [p, orig.get(p, 0), *[(apps[n] or {}).get("generated", {}).get(p, "–") for n in names]]
            for p in protos
        ]
        blocks.append(("h2", "Suricata app-layer protocols (flows)"))
        blocks.append(("table", ["app_proto", "original", *names], rows))
    for key, title in (("top_talkers", "Top talkers"), ("top_ports", "Top service ports")):
        for n, r in results.items():
            t = r.tables[key]
            blocks.append(("h2", f"{title}: original and {n} (bytes)"))
            blocks.append(("table", list(t.columns), t.astype(str).values.tolist()))
    notes = [f"{n}: {note}" for n, r in results.items() for note in r.notes]
    if notes:
        blocks.append(("h2", "Notes"))
        blocks += [("p", note) for note in notes]
    blocks.append(("h2", "Plots"))
    for name, path in plots.items():
        blocks.append(("img", name, path))
    return blocks


def _plot_field(results: Mapping[str, FidelityResult], name: str, path: Path) -> Path | None:
    first = next(iter(results.values()))
    if name in EMD_FIELDS:
        cdf = first.tables["cdf"]
        if not len(cdf) or not (cdf["field"] == name).any():
            return None
        fig, ax = figure(EMD_FIELDS[name], EMD_FIELDS[name], "CDF")
        o = cdf[(cdf["field"] == name) & (cdf["trace"] == "original")]
        ax.step(o["value"], o["q"], where="post", color=BLUE, linewidth=2.2, label="original")
        for (n, r), color in zip(results.items(), PLOT_COLORS):
            c = r.tables["cdf"]
            g = c[(c["field"] == name) & (c["trace"] == "generated")]
            ax.step(g["value"], g["q"], where="post", color=color, linewidth=1.4, label=n)
        positive = o["value"][o["value"] > 0]
        if name != "flow_start" and len(positive) and o["value"].max() > 100 * positive.min():
            # heavy tails over decades: logarithmic, linear near 0 (single-packet flows last 0)
            ax.set_xscale("symlog", linthresh=float(positive.min()))
    else:
        cats = first.tables["categories"]
        o = cats[(cats["field"] == name) & (cats["trace"] == "original")]
        order = list(o["category"])
        for r in results.values():
            c = r.tables["categories"]
            g = c[(c["field"] == name) & (c["trace"] == "generated")]
            order += [k for k in g["category"] if k not in order]
        order = order[:SHOWN_CATEGORIES]
        fig, ax = figure(JSD_FIELDS[name], JSD_FIELDS[name], "share of flows")
        width = 0.8 / (1 + len(results))
        x = np.arange(len(order))
        shares = dict(zip(o["category"], o["share"]))
        ax.bar(x, [shares.get(k, 0) for k in order], width, color=BLUE, label="original")
        for i, ((n, r), color) in enumerate(zip(results.items(), PLOT_COLORS), start=1):
            c = r.tables["categories"]
            g = c[(c["field"] == name) & (c["trace"] == "generated")]
            shares = dict(zip(g["category"], g["share"]))
            ax.bar(x + i * width, [shares.get(k, 0) for k in order], width, color=color, label=n)
        ax.set_xticks(x + width * len(results) / 2, order, rotation=60, fontsize=8)
    legend(ax)
    save(fig, path)
    return path


def _plot_summary(results: Mapping[str, FidelityResult], path: Path) -> Path:
    names = [m for m in metric_names() if target_of(m) is not None]
    fig, ax = figure("Distances to the original (lower is better)", "", "JSD / nEMD")
    x = np.arange(len(names))
    width = 0.8 / max(len(results), 1)
    for i, ((n, r), color) in enumerate(zip(results.items(), PLOT_COLORS)):
        values = [0 if math.isnan(r.metrics[m]) else r.metrics[m] for m in names]
        ax.bar(x + i * width, values, width, color=color, label=n)
    ax.axhline(TARGETS["jsd"], color="#b42318", linestyle="--", linewidth=1, label="target")
    ax.set_xticks(x + width * (len(results) - 1) / 2, names, rotation=45, fontsize=8, ha="right")
    ax.legend(loc="upper right", frameon=False, fontsize=8)  # below, it would meet the labels
    save(fig, path)
    return path


def write_report(
    out_dir: str | os.PathLike, results: Mapping[str, FidelityResult]
) -> dict[str, Path]:
    """Into OUT_DIR: report.md, report.html (self-contained), metrics.parquet and metrics.json
    (one row per trace and metric), plots/<field>.png per field and plots/summary.png. RESULTS:
    name -> FidelityResult of one generated trace against the same original (one report column
    each, e.g. "learned" and "baseline"). Returns name -> path of every file written; a full disk
    is NoSpace (exit 4), an output place that cannot be written BadInput (exit 2)."""
    if not results:
        raise ValueError("write_report needs at least one FidelityResult")
    originals = {r.original for r in results.values()}
    if len(originals) > 1:
        raise ValueError(f"the results compare with different originals: {sorted(originals)}")
    out = Path(out_dir)
    files: dict[str, Path] = {}
    try:
        (out / "plots").mkdir(parents=True, exist_ok=True)
        table = metrics_table(results)
        with replacing(out / "metrics.parquet") as tmp:
            table.to_parquet(tmp, index=False)
        files["metrics.parquet"] = out / "metrics.parquet"
        doc = {n: r.to_dict() for n, r in results.items()}
        with replacing(out / "metrics.json") as tmp:
            tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        files["metrics.json"] = out / "metrics.json"
        plots: dict[str, Path] = {}
        plots["summary"] = _plot_summary(results, out / "plots" / "summary.png")
        for name in [*JSD_FIELDS, *EMD_FIELDS]:
            p = _plot_field(results, name, out / "plots" / f"{name}.png")
            if p is not None:
                plots[name] = p
        files.update({f"plots/{p.name}": p for p in plots.values()})
        blocks = _blocks(results, plots)
        for name, text in (
            ("report.md", to_markdown(blocks, out)),
            ("report.html", to_html(blocks)),
        ):
            with replacing(out / name) as tmp:
                tmp.write_text(text)
            files[name] = out / name
    except OSError as exc:
        raise write_error(exc, out, "free some space, or write the report elsewhere") from None
    return files


__all__ = [
    "compare_traffic",
    "compare_traces",
    "pool_traces",
    "read_trace",
    "write_report",
    "metrics_table",
    "metric_names",
    "target_of",
    "jsd",
    "emd",
    "normalized_emd",
    "spearman",
    "FidelityResult",
    "Trace",
    "TARGETS",
    "JSD_FIELDS",
    "EMD_FIELDS",
    "RANK_FIELDS",
]
