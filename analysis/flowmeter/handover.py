"""Records lost across a fail-over handover: a flow-meter pair (the master's and the backup's
meter) against the packets the client sent to and got from the virtual address.

`handover_flows(cap, vip, master, backup, unanswered, died_ns) -> pa.Table` (HANDOVER_SCHEMA):
one row per unidirectional flow key (src, dst, sport, dport, proto; ICMP with sport and dport
0, its type and code left out: meters differ in exporting them) of the packets to or from VIP in
the client's capture CAP, and of the records of either meter with VIP as an end:

| column | meaning |
|---|---|
| sent | the key's packets in the client's capture |
| unanswered | of those, requests no DUT answered (the caller's UNANSWERED mask over CAP) |
| unanswered_recorded | of those, the ones within the time span of a record of the key (either meter's, +- TOLERANCE_NS): a meter saw them though no DUT answered |
| held | answered packets sent before DIED_NS, the master's meter's death (0 without one): what the master's meter had taken in when it died |
| in_master, in_backup | packets in the master's / the backup's records of the key |
| records_master, records_backup | how many records each exported |
| exported_by | `master`, `backup`, `both` (a flow that crossed the handover is split between them) or `neither` |
| lost_with_master | packets the master held that no record has: min(missing, held - in_master) |
| outage | of the rest missing, the unanswered ones no record covers: no DUT received them |
| rest | missing - lost_with_master - outage: lost by the meters otherwise |
| extra | packets in records beyond what was sent (recorded - sent, when more) |

where recorded = in_master + in_backup and missing = max(0, sent - recorded): the three parts
of the loss add up to `missing`. Lost with the master is counted first because it is exact
(the packets before the death, answered, are the master's; no DUT but the master answers before
the backup takes over), while a meter in promiscuous mode may record some of the outage's
requests (a bridge floods frames to a port it no longer knows). `handover_totals` sums them.

Pure: no processes; the caller reads the capture (analysis.capture.read_capture) and records.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..capture import Capture, address_text
from .records import KEY_COLUMNS, RECORD_SCHEMA, conform
from .score import DEFAULT_TOLERANCE_NS

ICMP_PROTOS = (1, 58)
EXPORTED_BY: tuple[str, ...] = ("neither", "master", "backup", "both")
COUNTS: tuple[str, ...] = (
    "sent",
    "unanswered",
    "unanswered_recorded",
    "held",
    "in_master",
    "in_backup",
    "records_master",
    "records_backup",
    "lost_with_master",
    "outage",
    "rest",
    "extra",
)
HANDOVER_SCHEMA = pa.schema(
    [
        pa.field("src", pa.string()),
        pa.field("dst", pa.string()),
        pa.field("sport", pa.int32()),
        pa.field("dport", pa.int32()),
        pa.field("proto", pa.int16()),
        pa.field("to_vip", pa.bool_()),
        *[pa.field(name, pa.int64()) for name in COUNTS],
        pa.field("exported_by", pa.string()),
    ]
)


def _packets(cap: Capture, vip: str, unanswered: np.ndarray, died_ns: int | None) -> pa.Table:
    """One row per IPv4 packet to or from VIP: its key, and whether it was answered and held."""
    v = int(ipaddress.IPv4Address(vip))
    four = cap.ip_version == 4
    at = np.flatnonzero(four & ((cap.src_lo == v) | (cap.dst_lo == v)))
    proto = cap.proto[at].astype(np.int16)
    icmp = np.isin(proto, ICMP_PROTOS)
    ver = np.full(len(at), 4, np.uint8)
    zero = np.zeros(len(at), np.uint64)
    lost = unanswered[at]
    held = ~lost & (cap.ts_ns[at] < died_ns) if died_ns is not None else np.zeros(len(at), bool)
    return pa.table(
        {
            "src": pa.array(address_text(ver, zero, cap.src_lo[at].astype(np.uint64)), pa.string()),
            "dst": pa.array(address_text(ver, zero, cap.dst_lo[at].astype(np.uint64)), pa.string()),
            "sport": pa.array(np.where(icmp, 0, cap.sport[at]).astype(np.int32)),
            "dport": pa.array(np.where(icmp, 0, cap.dport[at]).astype(np.int32)),  # see _icmp
            "proto": pa.array(proto),
            "sent": pa.array(np.ones(len(at), np.int64)),
            "unanswered": pa.array(lost.astype(np.int64)),
            "held": pa.array(held.astype(np.int64)),
            "ts": pa.array(cap.ts_ns[at].astype(np.int64)),
        }
    )


def _within_records(packets: pa.Table, records: pa.Table, tolerance_ns: int) -> np.ndarray:
    """Per packet: whether it lies within the time span (first, last, +- the tolerance) of a
    record of its key: a meter saw it."""
    con = duckdb.connect()
    try:
        con.register("p", packets.append_column("i", pa.array(np.arange(packets.num_rows))))
        con.register("r", records)
        hit = con.execute(
            "SELECT DISTINCT p.i FROM p JOIN r USING (src, dst, sport, dport, proto) "
            "WHERE p.unanswered = 1 AND p.ts BETWEEN r.first_ns - ? AND r.last_ns + ?",
            [tolerance_ns, tolerance_ns],
        ).fetchnumpy()["i"]
    finally:
        con.close()
    seen = np.zeros(packets.num_rows, bool)
    seen[np.asarray(hit, np.int64)] = True
    return seen


def _to_or_from(table: pa.Table, vip: str) -> pa.Table:
    return table.filter(
        pc.or_(pc.equal(table.column("src"), vip), pc.equal(table.column("dst"), vip))
    )


def _icmp(table: pa.Table) -> pa.Table:
    """ICMP records keyed without their type and code (dport 0): meters differ in exporting
    them (pmacct 1.7.7 exports none), and the accounting here is per direction, not per type."""
    icmp = pc.is_in(table.column("proto"), pa.array(ICMP_PROTOS, pa.int16()))
    dport = pc.if_else(icmp, pa.scalar(0, pa.int32()), table.column("dport"))
    return table.set_column(table.schema.get_field_index("dport"), "dport", dport)


def _records(table: pa.Table, vip: str, side: str) -> pa.Table:
    """The records with VIP as an end, summed per key: in_<side>, records_<side>."""
    t = _icmp(_to_or_from(conform(table, RECORD_SCHEMA), vip))
    t = t.append_column(f"records_{side}", pa.array(np.ones(t.num_rows, np.int64)))
    agg = t.group_by(list(KEY_COLUMNS)).aggregate([("packets", "sum"), (f"records_{side}", "sum")])
    names = {"packets_sum": f"in_{side}", f"records_{side}_sum": f"records_{side}"}
    return agg.rename_columns([names.get(c, c) for c in agg.column_names])


def handover_flows(
    cap: Capture,
    vip: str,
    master: pa.Table,
    backup: pa.Table,
    unanswered: np.ndarray,
    died_ns: int | None,
    tolerance_ns: int = DEFAULT_TOLERANCE_NS,
) -> pa.Table:
    """The flows to and from VIP with their packets split by meter and their loss split by
    cause (module docstring). UNANSWERED: a bool per packet of CAP (True: a request no DUT
    answered); DIED_NS: when the master's meter was killed (CLOCK_REALTIME ns, the capture's
    clock), None when it was not."""
    if len(unanswered) != len(cap):
        raise ValueError(f"unanswered has {len(unanswered)} values for {len(cap)} packets")
    packets = _packets(cap, vip, np.asarray(unanswered, bool), died_ns)
    both = pa.concat_tables(
        [_icmp(_to_or_from(conform(t, RECORD_SCHEMA), vip)) for t in (master, backup)]
    )
    seen = _within_records(packets, both, tolerance_ns)
    packets = packets.append_column("unanswered_recorded", pa.array(seen.astype(np.int64)))
    sent = packets.group_by(list(KEY_COLUMNS)).aggregate(
        [("sent", "sum"), ("unanswered", "sum"), ("unanswered_recorded", "sum"), ("held", "sum")]
    )
    sent = sent.rename_columns([c.removesuffix("_sum") for c in sent.column_names])
    sides = []
    for side, table in (("master", master), ("backup", backup)):
        agg = _records(table, vip, side) if table.num_rows else None
        if agg is None:
            agg = pa.table(
                {
                    **{
                        f.name: pa.array([], f.type) for f in RECORD_SCHEMA if f.name in KEY_COLUMNS
                    },
                    f"in_{side}": pa.array([], pa.int64()),
                    f"records_{side}": pa.array([], pa.int64()),
                }
            )
        sides.append(agg)
    key_schema = pa.schema(
        [pa.field(f.name, f.type) for f in RECORD_SCHEMA if f.name in KEY_COLUMNS]
    )
    keys = (
        pa.concat_tables([t.select(list(KEY_COLUMNS)).cast(key_schema) for t in (sent, *sides)])
        .group_by(list(KEY_COLUMNS))
        .aggregate([])
    )
    joined = keys.join(sent, list(KEY_COLUMNS), join_type="left outer")
    for agg in sides:
        joined = joined.join(agg, list(KEY_COLUMNS), join_type="left outer")
    joined = joined.sort_by([(k, "ascending") for k in ("proto", "src", "dst", "sport", "dport")])
    col = {
        name: joined.column(name).fill_null(0).to_numpy().astype(np.int64)
        for name in ("sent", "unanswered", "unanswered_recorded", "held", "in_master", "in_backup")
        + ("records_master", "records_backup")
    }
    recorded = col["in_master"] + col["in_backup"]
    missing = np.maximum(0, col["sent"] - recorded)
    lost_with_master = np.minimum(missing, np.maximum(0, col["held"] - col["in_master"]))
    outage = np.minimum(missing - lost_with_master, col["unanswered"] - col["unanswered_recorded"])
    rest = missing - lost_with_master - outage
    extra = np.maximum(0, recorded - col["sent"])
    by = (col["records_master"] > 0).astype(np.int8) + 2 * (col["records_backup"] > 0)
    out = {
        **{k: joined.column(k) for k in KEY_COLUMNS},
        "to_vip": pc.equal(joined.column("dst"), vip),
        **col,
        "lost_with_master": lost_with_master,
        "outage": outage,
        "rest": rest,
        "extra": extra,
        "exported_by": pa.array(EXPORTED_BY, pa.string()).take(pa.array(by.astype(np.int64))),
    }
    return pa.table(out).select(HANDOVER_SCHEMA.names).cast(HANDOVER_SCHEMA)


def handover_totals(flows: pa.Table) -> dict[str, Any]:
    """The sums of HANDOVER_SCHEMA's counts and the flows per `exported_by`."""
    out: dict[str, Any] = {name: int(pc.sum(flows.column(name)).as_py() or 0) for name in COUNTS}
    out["flows"] = flows.num_rows
    by = {
        str(v["values"]): int(v["counts"])
        for v in flows.column("exported_by").value_counts().to_pylist()
    }
    out["exported_by"] = {k: by.get(k, 0) for k in EXPORTED_BY}
    out["recorded"] = out["in_master"] + out["in_backup"]
    out["missing"] = out["lost_with_master"] + out["outage"] + out["rest"]
    return out


__all__ = ["COUNTS", "EXPORTED_BY", "HANDOVER_SCHEMA", "handover_flows", "handover_totals"]
