"""The flow record table that the reference, the collectors and the scorer share.

One row per unidirectional flow record, as a pyarrow Table with `RECORD_SCHEMA`:

| column | type | meaning |
|---|---|---|
| src, dst | string | addresses as text: IPv4 dotted, IPv6 compressed lower case (inet_ntop) |
| sport, dport | int32 | L4 ports; ICMP/ICMPv6: sport 0, dport type * 256 + code (NetFlow's ICMP_TYPE); none (later fragments, protocols without ports): 0 |
| proto | int16 | IPv4 protocol / IPv6 upper-layer header |
| vlan | int32 | outer 802.1Q id, 0 none |
| packets, bytes | int64 | bytes are L3: IP total length (IPv6: 40 + payload length), RFC 5102 octetDeltaCount |
| first_ns, last_ns | int64 | first and last packet time, ns since the epoch |
| tcp_flags | int16 | OR of the TCP flags of the record's packets |

The reference (analysis.flowmeter.reference) adds `end` and `expire_ns` (`REFERENCE_SCHEMA`),
the collected records add `received_ns` (`COLLECTED_SCHEMA`, nullable). `MeterRules` says what a
conforming meter does with packets: its timeouts, its key, its TCP expiry and its table size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

KEY_COLUMNS: tuple[str, ...] = ("src", "dst", "sport", "dport", "proto")

RECORD_SCHEMA = pa.schema(
    [
        pa.field("src", pa.string(), nullable=False),
        pa.field("dst", pa.string(), nullable=False),
        pa.field("sport", pa.int32(), nullable=False),
        pa.field("dport", pa.int32(), nullable=False),
        pa.field("proto", pa.int16(), nullable=False),
        pa.field("vlan", pa.int32(), nullable=False),
        pa.field("packets", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("first_ns", pa.int64(), nullable=False),
        pa.field("last_ns", pa.int64(), nullable=False),
        pa.field("tcp_flags", pa.int16(), nullable=False),
    ]
)

# How a reference record ended (REFERENCE_SCHEMA's `end`), in the order of the codes that
# analysis.flowmeter.reference uses inside.
END_REASONS: tuple[str, ...] = ("idle", "active", "fin", "rst", "evicted", "eof")
# The same as RFC 7012's flowEndReason (information element 136): idle timeout 1, active timeout
# 2, end of flow detected 3, forced end 4, lack of resources 5.
FLOW_END_REASON: dict[str, int] = {
    "idle": 1,
    "active": 2,
    "fin": 3,
    "rst": 3,
    "eof": 4,
    "evicted": 5,
}

REFERENCE_SCHEMA = RECORD_SCHEMA.append(pa.field("end", pa.string(), nullable=False)).append(
    pa.field("expire_ns", pa.int64(), nullable=False)
)
COLLECTED_SCHEMA = RECORD_SCHEMA.append(pa.field("received_ns", pa.int64(), nullable=True))

SECOND_NS = 1_000_000_000


@dataclass(frozen=True)
class MeterRules:
    """What a conforming meter exports (docs/flowmeters.md, "Reference records").

    - `idle_timeout_ns`: a packet more than this after its record's last packet starts a new
      record (the old one ended `idle`);
    - `active_timeout_ns`: a packet at least this after its record's first packet starts a new
      record (`active`);
    - `key_vlan`: the outer VLAN id is part of the flow key;
    - `tcp_end`: a TCP packet with FIN or RST ends its record after being counted (`fin`, `rst`);
    - `max_flows`: the flow table's size; a new record in a full table evicts the least
      recently used one (`evicted`); None: unbounded;
    - `frame_bytes`: `bytes` counts whole frames (the capture's wire length, as analysis' flow
      table does) instead of IP bytes (what a meter exports); for the fidelity comparison.
    """

    idle_timeout_ns: int = 15 * SECOND_NS
    active_timeout_ns: int = 60 * SECOND_NS
    key_vlan: bool = False
    tcp_end: bool = True
    max_flows: int | None = None
    frame_bytes: bool = False

    def __post_init__(self) -> None:
        for name in ("idle_timeout_ns", "active_timeout_ns"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"MeterRules.{name} must be a positive int (ns), not {value!r}")
        if self.max_flows is not None and (
            not isinstance(self.max_flows, int) or self.max_flows < 1
        ):
            raise ValueError(f"MeterRules.max_flows must be None or >= 1, not {self.max_flows!r}")


def empty_table(schema: pa.Schema = RECORD_SCHEMA) -> pa.Table:
    """A table of SCHEMA without rows."""
    return schema.empty_table()


def records_table(
    rows: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]],
    schema: pa.Schema = RECORD_SCHEMA,
) -> pa.Table:
    """Rows (a list of dicts) or columns (a dict of lists) as a table of SCHEMA; a column of
    SCHEMA that is missing is an error unless it is nullable (then null)."""
    if isinstance(rows, Mapping):
        columns = dict(rows)
        n = len(next(iter(columns.values()))) if columns else 0
    else:
        n = len(rows)
        columns = {name: [r.get(name) for r in rows] for name in schema.names}
    arrays = []
    for field in schema:
        if field.name not in columns:
            if not field.nullable:
                raise ValueError(f"records_table: column {field.name!r} is missing")
            arrays.append(pa.nulls(n, field.type))
            continue
        arrays.append(pa.array(columns[field.name], type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def conform(table: pa.Table, schema: pa.Schema = RECORD_SCHEMA) -> pa.Table:
    """TABLE with SCHEMA's columns in its order and types (casting safely; extra columns are
    dropped, a missing nullable column becomes null). A missing required column or a value
    that does not fit raises ValueError naming the column."""
    arrays = []
    for field in schema:
        if field.name not in table.column_names:
            if not field.nullable:
                raise ValueError(f"record table: column {field.name!r} is missing")
            arrays.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        try:
            arrays.append(column.cast(field.type) if column.type != field.type else column)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise ValueError(f"record table: column {field.name!r}: {e}") from e
    return pa.Table.from_arrays(arrays, schema=schema)


__all__ = [
    "COLLECTED_SCHEMA",
    "END_REASONS",
    "FLOW_END_REASON",
    "KEY_COLUMNS",
    "MeterRules",
    "RECORD_SCHEMA",
    "REFERENCE_SCHEMA",
    "SECOND_NS",
    "conform",
    "empty_table",
    "records_table",
]
