"""The score of a meter's records against the reference records (docs/flowmeters.md, "Score").

`score(reference, collected, tolerance_ns=DEFAULT_TOLERANCE_NS, key_vlan=False) -> Score`:
`Score.flows` (FLOW_SCHEMA) has one row per reference record, in the reference's order, with
its status, and then one row per `spurious` collected record; `Score.totals` is a dict of
counts, sums and distributions.

Matching, per flow key (src, dst, sport, dport, proto, and vlan with `key_vlan`):
1. A collected record with the reference record's packet count and first and last times within
   the tolerance is its 1:1 match (`exact` when the bytes are equal too, else `differs`).
   Candidates that are not unique on both sides are paired greedily, closest times first.
2. The records left are linked when their times overlap (with the tolerance): a reference
   record linked to none is `missing`, to several `split`; one linked to a single collected
   record that no other reference record links to is `differs`, else `merged`; a collected
   record linked to none is `spurious`.

How it is computed: the keys are coded as integers (a dictionary of the address strings, the
ports, protocol and VLAN packed beside them) and both tables sorted by key and first time with
numpy. A key with as many collected records as reference records, each pair (in time order)
meeting step 1, is settled there (the usual case: a meter that exports what it should); a key
on one side only is missing or spurious. Only the keys left (the meter did something else) go
through the full matching above, in DuckDB. benchmarks/bench_meter_score.py measures it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .records import COLLECTED_SCHEMA, KEY_COLUMNS, REFERENCE_SCHEMA, conform

# NetFlow v5/v9 and nfdump give times in milliseconds: a meter that truncates a packet's time to
# its millisecond reports it up to 1 ms early. Exact means within this, inclusive.
DEFAULT_TOLERANCE_NS = 1_000_000
ETHERNET_HEADER = 14
VLAN_TAG = 4
STATUSES: tuple[str, ...] = ("exact", "differs", "missing", "split", "merged", "spurious")
EXACT, DIFFERS, MISSING, SPLIT, MERGED, SPURIOUS = range(len(STATUSES))
QUANTILES: dict[str, float] = {"min": 0.0, "p50": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}
LAYERS: tuple[str, ...] = ("L3", "L2", "other")

FLOW_SCHEMA = pa.schema(
    [
        pa.field("status", pa.string()),
        pa.field("src", pa.string()),
        pa.field("dst", pa.string()),
        pa.field("sport", pa.int32()),
        pa.field("dport", pa.int32()),
        pa.field("proto", pa.int16()),
        pa.field("vlan", pa.int32()),
        pa.field("ref_index", pa.int64()),  # row of the reference table (null: spurious)
        pa.field("packets", pa.int64()),
        pa.field("bytes", pa.int64()),
        pa.field("first_ns", pa.int64()),
        pa.field("last_ns", pa.int64()),
        pa.field("tcp_flags", pa.int16()),
        pa.field("end", pa.string()),
        pa.field("expire_ns", pa.int64()),
        pa.field("collected", pa.int64()),  # collected records linked to it
        pa.field("collected_index", pa.int64()),  # the collected row, when there is one
        pa.field("packets_c", pa.int64()),  # sum / min / max / OR over the linked records
        pa.field("bytes_c", pa.int64()),
        pa.field("first_c", pa.int64()),
        pa.field("last_c", pa.int64()),
        pa.field("tcp_flags_c", pa.int16()),
        pa.field("received_ns", pa.int64()),  # the latest linked record's arrival
        pa.field("packet_error", pa.int64()),  # collected - reference (exact, differs, split)
        pa.field("byte_error", pa.int64()),
        pa.field("bytes_layer", pa.string()),  # L3, L2, other; null when the packets differ
        pa.field("first_error_ns", pa.int64()),  # exact, differs
        pa.field("last_error_ns", pa.int64()),
        pa.field("flags_equal", pa.bool_()),  # TCP records: exact, differs, split
        pa.field("export_delay_ns", pa.int64()),  # received_ns - expire_ns
    ]
)
_REF_COLUMNS = [
    "src",
    "dst",
    "sport",
    "dport",
    "proto",
    "vlan",
    "packets",
    "bytes",
    "first_ns",
    "last_ns",
    "tcp_flags",
    "end",
    "expire_ns",
]
_MIX = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@dataclass
class Score:
    """`flows`: FLOW_SCHEMA, the reference records in reference order, then the spurious
    collected records in collected order; `totals`: see `score`."""

    flows: pa.Table
    totals: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Side:
    """The collected side of each reference record, and what is left of the collected."""

    n: int
    status: np.ndarray
    collected: np.ndarray
    index: np.ndarray  # the collected row when there is exactly one, else -1
    packets: np.ndarray
    bytes: np.ndarray
    first: np.ndarray
    last: np.ndarray
    flags: np.ndarray
    received: np.ndarray
    received_ok: np.ndarray

    @staticmethod
    def missing(n: int) -> _Side:
        z = np.zeros(n, np.int64)
        return _Side(
            n,
            np.full(n, MISSING, np.int8),
            z.copy(),
            np.full(n, -1, np.int64),
            z.copy(),
            z.copy(),
            z.copy(),
            z.copy(),
            np.zeros(n, np.int16),
            z.copy(),
            np.zeros(n, bool),
        )


def _numpy(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy()


def _key_codes(ref: pa.Table, col: pa.Table, key_vlan: bool) -> tuple[np.ndarray, ...] | None:
    """Two uint64 per record that are equal exactly when the flow keys are (A: the indices of
    src and dst in one dictionary of both tables; B: ports, protocol, VLAN), for the reference
    and the collected records; None when a value is outside its field's range."""
    nr = ref.num_rows
    codes = []
    for name in ("src", "dst"):
        both = pa.chunked_array(ref.column(name).chunks + col.column(name).chunks, pa.string())
        encoded = both.dictionary_encode()
        idx = np.concatenate(
            [c.indices.to_numpy(zero_copy_only=False) for c in encoded.chunks]
            or [np.zeros(0, np.int32)]
        )
        codes.append(idx.astype(np.uint64))
    a = codes[0] << np.uint64(32) | codes[1]
    fields = (("sport", 16), ("dport", 16), ("proto", 8)) + ((("vlan", 12),) if key_vlan else ())
    bs = []
    for table in (ref, col):
        b = np.zeros(table.num_rows, np.uint64)
        for name, bits in fields:
            v = _numpy(table, name)
            if len(v) and (v.min() < 0 or v.max() >= 1 << bits):
                return None
            b = b << np.uint64(bits) | v.astype(np.uint64)
        bs.append(b)
    return a[:nr], bs[0], a[nr:], bs[1]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit reaches every output bit."""
    x = x ^ (x >> np.uint64(30))
    x *= _MIX
    x ^= x >> np.uint64(27)
    x *= _MIX2
    return x ^ (x >> np.uint64(31))


def _hash(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _mix(_mix(a) ^ b)


def _sorted_groups(
    h: np.ndarray, a: np.ndarray, b: np.ndarray, first: np.ndarray, last: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Order by hash, then first and last time inside a hash; group starts and sizes, each
    group's hash, and whether the group holds more than one key (a hash collision)."""
    n = len(h)
    order = np.argsort(h)
    hs = h[order]
    new = np.ones(n, bool)
    new[1:] = hs[1:] != hs[:-1]
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, n))
    multi = sizes > 1
    if multi.any():  # only keys with several records need the time order
        pos = _ramp(starts[multi], sizes[multi])
        rows = order[pos]
        group = np.repeat(np.arange(int(multi.sum())), sizes[multi])
        order[pos] = rows[np.lexsort((last[rows], first[rows], group))]
    as_, bs = a[order], b[order]
    other_key = np.zeros(n, bool)
    other_key[1:] = ~new[1:] & ((as_[1:] != as_[:-1]) | (bs[1:] != bs[:-1]))
    collided = np.logical_or.reduceat(other_key, starts) if n else np.zeros(0, bool)
    return order, starts, sizes, hs[starts], collided


def _ramp(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The positions starts[i] .. starts[i] + sizes[i] - 1 of every group, concatenated."""
    total = int(sizes.sum())
    offsets = np.cumsum(sizes) - sizes
    return np.arange(total) - np.repeat(offsets, sizes) + np.repeat(starts, sizes)


def _fast_pairs(
    ref: pa.Table, col: pa.Table, key_vlan: bool, tol: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(rid, cid) pairs of the keys settled by rank, and the rows of the keys left for the
    full matching (reference rows, collected rows); the rows of keys on one side only are in
    neither. None: no fast path (a key value out of range)."""
    codes = _key_codes(ref, col, key_vlan)
    if codes is None:
        return None
    ar, br, ac, bc = codes
    hr, hc = _hash(ar, br), _hash(ac, bc)
    fr, fc = _numpy(ref, "first_ns"), _numpy(col, "first_ns")
    lr, lc = _numpy(ref, "last_ns"), _numpy(col, "last_ns")
    order_r, start_r, size_r, key_r, coll_r = _sorted_groups(hr, ar, br, fr, lr)
    order_c, start_c, size_c, key_c, coll_c = _sorted_groups(hc, ac, bc, fc, lc)
    _, gr, gc = np.intersect1d(key_r, key_c, assume_unique=True, return_indices=True)
    same = (size_r[gr] == size_c[gc]) & ~coll_r[gr] & ~coll_c[gc]
    sr, sc = gr[same], gc[same]
    rid = order_r[_ramp(start_r[sr], size_r[sr])]
    cid = order_c[_ramp(start_c[sc], size_c[sc])]
    ok = (
        (ar[rid] == ac[cid])
        & (br[rid] == bc[cid])
        & (_numpy(ref, "packets")[rid] == _numpy(col, "packets")[cid])
        & (np.abs(fr[rid] - fc[cid]) <= tol)
        & (np.abs(lr[rid] - lc[cid]) <= tol)
    )
    sizes = size_r[sr]
    if len(ok):
        group_ok = np.logical_and.reduceat(ok, np.cumsum(sizes) - sizes)
    else:
        group_ok = np.zeros(0, bool)
    keep = np.repeat(group_ok, sizes)
    left_r = np.concatenate(
        [order_r[_ramp(start_r[gr[~same]], size_r[gr[~same]])], rid[~keep]]
    ).astype(np.int64)
    left_c = np.concatenate(
        [order_c[_ramp(start_c[gc[~same]], size_c[gc[~same]])], cid[~keep]]
    ).astype(np.int64)
    return rid[keep], cid[keep], left_r, left_c


def _pair_candidates(cand: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """1:1 pairs among step 1's candidates (rid, cid, d): a candidate alone on both sides is
    taken; the others are paired greedily, closest times (smallest d) first."""
    rid, cid, d = (cand.column(k).to_numpy() for k in ("rid", "cid", "d"))
    _, ri, rn = np.unique(rid, return_inverse=True, return_counts=True)
    _, ci, cn = np.unique(cid, return_inverse=True, return_counts=True)
    alone = (rn[ri] == 1) & (cn[ci] == 1)
    rest = np.flatnonzero(~alone)
    order = rest[np.lexsort((cid[rest], rid[rest], d[rest]))]
    used_r: set[int] = set()
    used_c: set[int] = set()
    pairs: list[tuple[int, int]] = []
    for r, c in zip(rid[order].tolist(), cid[order].tolist(), strict=True):
        if r not in used_r and c not in used_c:
            used_r.add(r)
            used_c.add(c)
            pairs.append((r, c))
    got = np.array(pairs, np.int64).reshape(-1, 2)
    return (
        np.concatenate([rid[alone], got[:, 0]]).astype(np.int64),
        np.concatenate([cid[alone], got[:, 1]]).astype(np.int64),
    )


_AGG_SQL = """
SELECT l.rid, count(*) AS n, sum(c.packets)::BIGINT AS packets_c,
       sum(c.bytes)::BIGINT AS bytes_c, min(c.first_ns) AS first_c, max(c.last_ns) AS last_c,
       bit_or(c.tcp_flags)::SMALLINT AS tcp_flags_c, max(c.received_ns) AS received_ns,
       min(l.cid) AS cid, bool_or(l.anchored) AS anchored, max(cdeg.deg) AS cdeg
FROM links l JOIN c USING (cid) JOIN cdeg USING (cid)
GROUP BY l.rid
"""


def _full_match(ref: pa.Table, col: pa.Table, key_vlan: bool, tol: int) -> tuple[pa.Table, set]:
    """The full matching (module docstring) of REF (with `rid`) and COL (with `cid`): per
    linked reference record its aggregate (_AGG_SQL), and the linked collected rows."""
    keys = [*KEY_COLUMNS, "vlan"] if key_vlan else list(KEY_COLUMNS)
    on = " AND ".join(f"r.{k} = c.{k}" for k in keys)
    con = duckdb.connect()
    try:
        con.register("r", ref)
        con.register("c", col)
        cand = con.sql(
            f"""SELECT r.rid, c.cid, abs(c.first_ns - r.first_ns) + abs(c.last_ns - r.last_ns) AS d
            FROM r JOIN c ON {on} AND r.packets = c.packets
            WHERE abs(c.first_ns - r.first_ns) <= {tol} AND abs(c.last_ns - r.last_ns) <= {tol}"""
        ).to_arrow_table()
        ar, ac = _pair_candidates(cand)
        con.register("anchors", pa.table({"rid": ar, "cid": ac}))
        con.sql(
            f"""CREATE TEMP TABLE links AS
            SELECT rid, cid, true AS anchored FROM anchors
            UNION ALL
            SELECT r.rid, c.cid, false FROM
                (SELECT * FROM r WHERE rid NOT IN (SELECT rid FROM anchors)) r
                JOIN (SELECT * FROM c WHERE cid NOT IN (SELECT cid FROM anchors)) c
                ON {on} AND c.first_ns <= r.last_ns + {tol} AND c.last_ns + {tol} >= r.first_ns"""
        )
        con.sql("CREATE TEMP TABLE cdeg AS SELECT cid, count(*) AS deg FROM links GROUP BY cid")
        agg = con.sql(_AGG_SQL).to_arrow_table()
        linked = set(con.sql("SELECT DISTINCT cid FROM links").fetchnumpy()["cid"].tolist())
    finally:
        con.close()
    return agg, linked


def _fill_pairs(
    side: _Side, col: pa.Table, ref_bytes: np.ndarray, rid: np.ndarray, cid: np.ndarray
) -> None:
    """1:1 matches from step 1: exact or differs (bytes)."""
    side.status[rid] = np.where(_numpy(col, "bytes")[cid] == ref_bytes[rid], EXACT, DIFFERS)
    side.collected[rid] = 1
    side.index[rid] = cid
    for attr, name in (
        ("packets", "packets"),
        ("bytes", "bytes"),
        ("first", "first_ns"),
        ("last", "last_ns"),
        ("flags", "tcp_flags"),
    ):
        getattr(side, attr)[rid] = _numpy(col, name)[cid]
    received = col.column("received_ns")
    side.received_ok[rid] = ~received.is_null().to_numpy(zero_copy_only=False)[cid]
    side.received[rid] = received.fill_null(0).to_numpy()[cid]


def _fill_full(side: _Side, agg: pa.Table, ref_bytes: np.ndarray) -> None:
    """Reference records linked by the full matching."""
    rid = _numpy(agg, "rid")
    n = _numpy(agg, "n")
    anchored = _numpy(agg, "anchored")
    cdeg = _numpy(agg, "cdeg")
    bytes_c = _numpy(agg, "bytes_c")
    status = np.where(
        anchored,
        np.where(bytes_c == ref_bytes[rid], EXACT, DIFFERS),
        np.where(n > 1, SPLIT, np.where(cdeg > 1, MERGED, DIFFERS)),
    )
    side.status[rid] = status
    side.collected[rid] = n
    side.index[rid] = np.where(n == 1, _numpy(agg, "cid"), -1)
    for attr, name in (
        ("packets", "packets_c"),
        ("bytes", "bytes_c"),
        ("first", "first_c"),
        ("last", "last_c"),
        ("flags", "tcp_flags_c"),
    ):
        getattr(side, attr)[rid] = _numpy(agg, name)
    received = agg.column("received_ns")
    side.received_ok[rid] = ~received.is_null().to_numpy(zero_copy_only=False)
    side.received[rid] = received.fill_null(0).to_numpy()


def _masked(values: np.ndarray, ok: np.ndarray, kind: pa.DataType) -> pa.Array:
    return pa.array(values, kind, mask=~ok)


def score(
    reference: pa.Table,
    collected: pa.Table,
    tolerance_ns: int = DEFAULT_TOLERANCE_NS,
    key_vlan: bool = False,
) -> Score:
    """Match COLLECTED records (RECORD_SCHEMA, `received_ns` optional) to the REFERENCE ones
    (REFERENCE_SCHEMA; plain RECORD_SCHEMA works too, without end and delay) by flow key and
    time. TOLERANCE_NS is how far a collected first/last time may be from the reference's for
    the record to be exact (inclusive; default 1 ms, the resolution of NetFlow's times);
    KEY_VLAN puts the VLAN in the key (with MeterRules.key_vlan).

    `totals`: `tolerance_ns`; `reference_records`, `collected_records`; one count per status
    (STATUSES); `packets_reference`, `packets_collected`, `bytes_reference`, `bytes_collected`
    (every record, spurious included) and `packets_missing`, `bytes_missing` (of the missing
    records); `bytes_layer`: counts of L3 / L2 / other among the records with equal packets
    (L2: the collected bytes are the reference's plus 14, 18 or 22 a packet: an Ethernet
    header with 0, 1 or 2 VLAN tags); `flags_equal`, `flags_differ` (TCP records that are
    exact, differs or split); quantiles (QUANTILES; None without values) of `first_error_ns`,
    `last_error_ns` (collected - reference, exact and differs records) and `export_delay_ns`
    (received_ns - expire_ns of matched records with both)."""
    if tolerance_ns < 0:
        raise ValueError(f"tolerance_ns must be >= 0, not {tolerance_ns}")
    tol = int(tolerance_ns)
    ref = conform(_with_optional(reference), REFERENCE_SCHEMA)
    col = conform(collected, COLLECTED_SCHEMA)
    nr, nc = ref.num_rows, col.num_rows
    side = _Side.missing(nr)
    ref_bytes = _numpy(ref, "bytes")
    linked_c = np.zeros(nc, bool)
    fast = _fast_pairs(ref, col, key_vlan, tol)
    if fast is None:
        left_r, left_c = np.arange(nr), np.arange(nc)
    else:
        rid, cid, left_r, left_c = fast
        _fill_pairs(side, col, ref_bytes, rid, cid)
        linked_c[cid] = True
    if len(left_r) and len(left_c):
        r_in = ref.take(left_r).append_column("rid", pa.array(left_r, pa.int64()))
        c_in = col.take(left_c).append_column("cid", pa.array(left_c, pa.int64()))
        agg, linked = _full_match(r_in, c_in, key_vlan, tol)
        _fill_full(side, agg, ref_bytes)
        linked_c[np.fromiter(linked, np.int64, len(linked))] = True
    spurious = np.flatnonzero(~linked_c)
    flows = _flows(ref, col, side, spurious)
    return Score(flows=flows, totals=_totals(flows, ref, col, tol))


def _with_optional(table: pa.Table) -> pa.Table:
    """A plain record table gets the reference's `end` ('') and `expire_ns` (null)."""
    if "end" not in table.column_names:
        table = table.append_column("end", pa.array([""] * table.num_rows, pa.string()))
    if "expire_ns" not in table.column_names:
        table = table.append_column("expire_ns", pa.nulls(table.num_rows, pa.int64()))
    return table


def _flows(ref: pa.Table, col: pa.Table, side: _Side, spurious: np.ndarray) -> pa.Table:
    """FLOW_SCHEMA: the reference rows with their collected side and errors, then the
    spurious collected rows."""
    nr, ns = ref.num_rows, len(spurious)
    st = side.status
    one = (st == EXACT) | (st == DIFFERS)
    comparable = one | (st == SPLIT)
    linked = st != MISSING
    packets, nbytes = _numpy(ref, "packets"), _numpy(ref, "bytes")
    same_packets = comparable & (side.packets == packets)
    excess = side.bytes - nbytes
    l2 = np.zeros(nr, bool)
    for tags in range(3):
        l2 |= excess == (ETHERNET_HEADER + tags * VLAN_TAG) * packets
    layer = np.where(excess == 0, 0, np.where(l2, 1, 2)).astype(np.int8)
    expire = ref.column("expire_ns")
    expire_ok = ~expire.is_null().to_numpy(zero_copy_only=False)
    expire_v = expire.fill_null(0).to_numpy()
    delay_ok = (comparable | (st == MERGED)) & side.received_ok & expire_ok
    tcp = _numpy(ref, "proto") == 6
    status_names = pa.array(list(STATUSES), pa.string())
    layer_names = pa.array(list(LAYERS), pa.string())
    ref_part = {
        "status": status_names.take(pa.array(st)),
        **{name: ref.column(name) for name in _REF_COLUMNS},
        "ref_index": pa.array(np.arange(nr, dtype=np.int64)),
        "collected": pa.array(side.collected),
        "collected_index": _masked(side.index, side.index >= 0, pa.int64()),
        "packets_c": _masked(side.packets, linked, pa.int64()),
        "bytes_c": _masked(side.bytes, linked, pa.int64()),
        "first_c": _masked(side.first, linked, pa.int64()),
        "last_c": _masked(side.last, linked, pa.int64()),
        "tcp_flags_c": _masked(side.flags, linked, pa.int16()),
        "received_ns": _masked(side.received, linked & side.received_ok, pa.int64()),
        "packet_error": _masked(side.packets - packets, comparable, pa.int64()),
        "byte_error": _masked(excess, comparable, pa.int64()),
        "bytes_layer": pc.if_else(
            pa.array(same_packets), layer_names.take(pa.array(layer)), pa.nulls(nr, pa.string())
        ),
        "first_error_ns": _masked(side.first - _numpy(ref, "first_ns"), one, pa.int64()),
        "last_error_ns": _masked(side.last - _numpy(ref, "last_ns"), one, pa.int64()),
        "flags_equal": _masked(
            side.flags == _numpy(ref, "tcp_flags"), comparable & tcp, pa.bool_()
        ),
        "export_delay_ns": _masked(side.received - expire_v, delay_ok, pa.int64()),
    }
    spur = col.take(pa.array(spurious, pa.int64()))
    nulls = {f.name: pa.nulls(ns, f.type) for f in FLOW_SCHEMA}
    spur_part = nulls | {
        "status": pa.array(["spurious"] * ns, pa.string()),
        **{name: spur.column(name) for name in ("src", "dst", "sport", "dport", "proto", "vlan")},
        "collected": pa.array(np.ones(ns, np.int64)),
        "collected_index": pa.array(spurious.astype(np.int64)),
        "packets_c": spur.column("packets"),
        "bytes_c": spur.column("bytes"),
        "first_c": spur.column("first_ns"),
        "last_c": spur.column("last_ns"),
        "tcp_flags_c": spur.column("tcp_flags"),
        "received_ns": spur.column("received_ns"),
    }
    tables = [
        pa.table({f.name: part[f.name] for f in FLOW_SCHEMA}, schema=FLOW_SCHEMA)
        for part in (ref_part, spur_part)
    ]
    return pa.concat_tables(tables)


def _column(table: pa.Table, name: str) -> np.ndarray:
    """The non-null values of a column as numpy."""
    return table.column(name).drop_null().to_numpy()


def _quantiles(values: np.ndarray) -> dict[str, int] | None:
    if len(values) == 0:
        return None
    q = np.quantile(values, list(QUANTILES.values()), method="nearest")
    return {name: int(v) for name, v in zip(QUANTILES, q, strict=True)}


def _sum(column: pa.ChunkedArray) -> int:
    return int(pc.sum(column).as_py() or 0)


def _totals(flows: pa.Table, ref: pa.Table, col: pa.Table, tolerance_ns: int) -> dict[str, Any]:
    counts = {
        str(v["values"]): int(v["counts"])
        for v in flows.column("status").value_counts().to_pylist()
    }
    missing = flows.filter(pc.equal(flows.column("status"), "missing"))
    layer = flows.column("bytes_layer").value_counts().to_pylist()
    layers = {str(v["values"]): int(v["counts"]) for v in layer if v["values"] is not None}
    flags = _column(flows, "flags_equal")
    return {
        "tolerance_ns": int(tolerance_ns),
        "reference_records": ref.num_rows,
        "collected_records": col.num_rows,
        **{s: counts.get(s, 0) for s in STATUSES},
        "packets_reference": _sum(ref.column("packets")),
        "packets_collected": _sum(col.column("packets")),
        "bytes_reference": _sum(ref.column("bytes")),
        "bytes_collected": _sum(col.column("bytes")),
        "packets_missing": _sum(missing.column("packets")),
        "bytes_missing": _sum(missing.column("bytes")),
        "bytes_layer": {k: layers.get(k, 0) for k in LAYERS},
        "flags_equal": int(flags.sum()),
        "flags_differ": int(len(flags) - flags.sum()),
        "first_error_ns": _quantiles(_column(flows, "first_error_ns")),
        "last_error_ns": _quantiles(_column(flows, "last_error_ns")),
        "export_delay_ns": _quantiles(_column(flows, "export_delay_ns")),
    }


__all__ = [
    "DEFAULT_TOLERANCE_NS",
    "FLOW_SCHEMA",
    "LAYERS",
    "QUANTILES",
    "STATUSES",
    "Score",
    "score",
]
