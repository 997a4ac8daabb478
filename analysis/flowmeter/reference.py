"""The reference records: what a conforming flow meter exports for a capture, exactly.

`reference_records(pcap, rules) -> pa.Table` (REFERENCE_SCHEMA) reads the capture with the one
pcap reader in chunks (analysis.capture.iter_capture) and cuts each unidirectional flow key's
packets into records by the rules of `MeterRules` (docs/flowmeters.md, "Reference records"):
idle and active timeouts, FIN/RST expiry, the VLAN in or out of the key, and a table of bounded
size that evicts its least recently used record.

How it is computed, and what it costs:
- Each chunk's IP packets (with the still-open records of earlier chunks as one row each) are
  grouped by key (a 64-bit hash of the key's fields, sorted stably, so each group keeps file
  order; a hash collision is detected and the chunk is then sorted by the fields themselves).
- In a key whose timestamps never go back (the usual case), the idle and FIN/RST boundaries
  depend only on neighbouring packets: numpy finds them all at once. Active-timeout boundaries
  depend on where the record started: they are found in rounds, one boundary per long run per
  round, each round a binary search over all runs at once.
- A key with a timestamp earlier than one before it is cut by a per-packet loop in Python
  (exact for any order; such keys are rare).
- A table size (`max_flows`) only matters if the table would overflow: the records are first
  computed without eviction, the table's occupancy is bounded from them, and only if it can
  exceed `max_flows` is the capture read again through the per-packet loop with a least recently
  used table (a few microseconds a packet).
Memory: one chunk of packets plus one row per still-open record plus the records made; never
the whole capture.
"""

from __future__ import annotations

import heapq
import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..capture import CHUNK_PACKETS, Capture, address_text, iter_capture
from .records import END_REASONS, REFERENCE_SCHEMA, MeterRules

IDLE, ACTIVE, FIN, RST, EVICTED, EOF = range(len(END_REASONS))
NO_END = -1
TCP_FIN, TCP_RST = 0x01, 0x04
ICMP_PROTOS = (1, 58)

# The fields of a flow key, in the order of the tuples of the per-packet loop.
KEY_FIELDS = ("ver", "proto", "shi", "slo", "dhi", "dlo", "sport", "dport", "kvlan")
_ROW_DTYPES: dict[str, type] = {
    "ver": np.uint8,
    "proto": np.int16,
    "shi": np.uint64,
    "slo": np.uint64,
    "dhi": np.uint64,
    "dlo": np.uint64,
    "sport": np.int32,
    "dport": np.int32,
    "kvlan": np.int32,
    "first": np.int64,
    "last": np.int64,
    "packets": np.int64,
    "bytes": np.int64,
    "flags": np.int16,
    "vlan": np.int32,
    "end": np.int8,  # packets: FIN/RST when the packet ends its record, else NO_END
    "expire": np.int64,  # records: when a conforming meter expired it
}
_MIX = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_OFFSET_LIMIT = 1 << 62  # room in int64 for the active-timeout search's packed times


@dataclass
class _Rows:
    """Columns of packets, open records or records (the fields of _ROW_DTYPES)."""

    cols: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.cols["first"])

    def take(self, index: np.ndarray) -> _Rows:
        return _Rows({k: v[index] for k, v in self.cols.items()})

    @staticmethod
    def empty() -> _Rows:
        return _Rows({k: np.zeros(0, d) for k, d in _ROW_DTYPES.items()})

    @staticmethod
    def concat(parts: Iterable[_Rows]) -> _Rows:
        parts = [p for p in parts if len(p)]
        if not parts:
            return _Rows.empty()
        if len(parts) == 1:
            return parts[0]
        return _Rows({k: np.concatenate([p.cols[k] for p in parts]) for k in _ROW_DTYPES})

    @staticmethod
    def from_tuples(rows: list[tuple[int, ...]]) -> _Rows:
        """Rows as tuples in the order of _ROW_DTYPES."""
        if not rows:
            return _Rows.empty()
        columns = list(zip(*rows, strict=True))
        return _Rows({k: np.array(c, d) for (k, d), c in zip(_ROW_DTYPES.items(), columns)})


def _packet_rows(cap: Capture, rules: MeterRules) -> _Rows:
    """The IP packets of a chunk as rows: one-packet aggregates in file order."""
    ip = np.flatnonzero(cap.ip_version != 0)
    proto = cap.proto[ip].astype(np.int16)
    icmp = (proto == ICMP_PROTOS[0]) | (proto == ICMP_PROTOS[1])
    sport = np.where(icmp, 0, cap.sport[ip]).astype(np.int32)
    dport = np.where(icmp, cap.icmp_type[ip], cap.dport[ip]).astype(np.int32)
    flags = cap.tcp_flags[ip].astype(np.int16)
    vlan = cap.vlan[ip].astype(np.int32)
    end = np.full(len(ip), NO_END, np.int8)
    if rules.tcp_end:
        tcp = proto == 6
        end[tcp & (flags & TCP_FIN != 0)] = FIN
        end[tcp & (flags & TCP_RST != 0)] = RST  # both set: RST
    t = cap.ts_ns[ip]
    return _Rows(
        {
            "ver": cap.ip_version[ip],
            "proto": proto,
            "shi": cap.src_hi[ip],
            "slo": cap.src_lo[ip],
            "dhi": cap.dst_hi[ip],
            "dlo": cap.dst_lo[ip],
            "sport": sport,
            "dport": dport,
            "kvlan": vlan if rules.key_vlan else np.zeros(len(ip), np.int32),
            "first": t,
            "last": t,
            "packets": np.ones(len(ip), np.int64),
            "bytes": (cap.wire_len if rules.frame_bytes else cap.l3_len)[ip].astype(np.int64),
            "flags": flags,
            "vlan": vlan,
            "end": end,
            "expire": np.zeros(len(ip), np.int64),
        }
    )


def _key_hash(rows: _Rows) -> np.ndarray:
    """A 64-bit hash of each row's key: each field folded in with splitmix64's finaliser."""
    h = np.zeros(len(rows), np.uint64)
    for name in KEY_FIELDS:
        h ^= rows.cols[name].astype(np.uint64)
        h ^= h >> np.uint64(30)
        h *= _MIX
        h ^= h >> np.uint64(27)
        h *= _MIX2
        h ^= h >> np.uint64(31)
    return h


def _group(rows: _Rows) -> tuple[_Rows, np.ndarray]:
    """ROWS sorted by key with each key's rows in their original order, and the mask of the
    rows that start a key."""
    n = len(rows)
    h = _key_hash(rows)
    order = np.argsort(h, kind="stable")
    sorted_rows = rows.take(order)
    hs = h[order]
    same_hash = hs[1:] == hs[:-1]
    same_key = np.ones(max(n - 1, 0), bool)
    for name in KEY_FIELDS:
        col = sorted_rows.cols[name]
        same_key &= col[1:] == col[:-1]
    if np.any(same_hash & ~same_key):  # a collision: sort by the fields themselves
        keys = [np.arange(n)] + [rows.cols[k] for k in reversed(KEY_FIELDS)]
        order = np.lexsort(keys)
        sorted_rows = rows.take(order)
        same_key = np.ones(max(n - 1, 0), bool)
        for name in KEY_FIELDS:
            col = sorted_rows.cols[name]
            same_key &= col[1:] == col[:-1]
    start = np.ones(n, bool)
    start[1:] = ~same_key
    return sorted_rows, start


def _end_by_deadline(
    first: np.ndarray, last: np.ndarray, rules: MeterRules
) -> tuple[np.ndarray, np.ndarray]:
    """End reason and time of records that expired on a timeout: the earlier deadline (idle:
    the record is over at any time after last + idle; active: at first + active)."""
    active_at = first + rules.active_timeout_ns
    idle_at = last + rules.idle_timeout_ns
    active = active_at <= idle_at
    return np.where(active, ACTIVE, IDLE).astype(np.int8), np.where(active, active_at, idle_at)


def _active_boundaries(
    rows: _Rows, run_begin: np.ndarray, run_end: np.ndarray, active_ns: int
) -> np.ndarray:
    """Rows (indices) where an active timeout starts a new record, in runs of rows whose
    timestamps do not go back and that no idle or FIN/RST boundary cuts.

    A record starting at row s ends before the first row q > s of its run with
    t[q] >= first[s] + active; q then starts the next one. The runs' times are packed, run
    after run, into one increasing array so that one binary search serves every run at once;
    each round finds one boundary per run still longer than the timeout."""
    first, last = rows.cols["first"], rows.cols["last"]
    found: list[np.ndarray] = []
    span = last[run_end - 1] - first[run_begin]
    long = np.flatnonzero(span >= active_ns)
    # Batches whose packed times fit in int64.
    batch: list[int] = []
    total = 0
    batches: list[list[int]] = []
    for r, s in zip(long.tolist(), span[long].tolist(), strict=True):
        if batch and total + s + 1 >= _OFFSET_LIMIT:
            batches.append(batch)
            batch, total = [], 0
        batch.append(r)
        total += s + 1
    if batch:
        batches.append(batch)
    for b in batches:
        runs = np.array(b, np.int64)
        rb, re = run_begin[runs], run_end[runs]
        length = re - rb
        base = np.cumsum(length) - length  # where each run starts in the packed array
        idx = np.arange(length.sum()) - np.repeat(base, length) + np.repeat(rb, length)
        width = span[runs] + 1
        offset = np.cumsum(width) - width
        u = last[idx] - np.repeat(first[rb] - offset, length)
        cur, stop, start_u = base, base + length, offset
        while len(cur):
            q = np.searchsorted(u, start_u + active_ns, side="left")
            q = np.maximum(q, cur + 1)
            ok = q < stop
            cur, stop = q[ok], stop[ok]
            found.append(idx[cur])
            start_u = u[cur]  # a packet row: its first is its last
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def _cut_monotone(rows: _Rows, start: np.ndarray, rules: MeterRules) -> tuple[_Rows, _Rows]:
    """Records of key-sorted ROWS whose keys' times never go back: (closed records, open ones:
    the last record of each key unless a FIN/RST closed it)."""
    n = len(rows)
    if n == 0:
        return _Rows.empty(), _Rows.empty()
    first, last, end = rows.cols["first"], rows.cols["last"], rows.cols["end"]
    idle = np.zeros(n, bool)
    idle[1:] = ~start[1:] & (first[1:] - last[:-1] > rules.idle_timeout_ns)
    ended = np.zeros(n, bool)
    ended[1:] = ~start[1:] & (end[:-1] != NO_END)
    run_start = start | idle | ended
    run_begin = np.flatnonzero(run_start)
    run_end = np.append(run_begin[1:], n)
    rec_start = run_start.copy()
    active_rows = _active_boundaries(rows, run_begin, run_end, rules.active_timeout_ns)
    rec_start[active_rows] = True

    rs = np.flatnonzero(rec_start)
    re = np.append(rs[1:], n)
    rec = _Rows(
        {k: rows.cols[k][rs] for k in (*KEY_FIELDS, "vlan")}
        | {
            "first": np.minimum.reduceat(first, rs),
            "last": np.maximum.reduceat(last, rs),
            "packets": np.add.reduceat(rows.cols["packets"], rs),
            "bytes": np.add.reduceat(rows.cols["bytes"], rs),
            "flags": np.bitwise_or.reduceat(rows.cols["flags"], rs),
        }
    )
    m = len(rs)
    # How each record ended: by what starts the next one of its key, or by its last packet.
    after = np.minimum(re, n - 1)
    nxt_same_key = (re < n) & ~start[after]
    by_timeout, timeout_at = _end_by_deadline(rec.cols["first"], rec.cols["last"], rules)
    reason = np.full(m, NO_END, np.int8)
    expire = np.zeros(m, np.int64)
    is_idle = nxt_same_key & idle[after]
    reason[is_idle] = by_timeout[is_idle]
    expire[is_idle] = timeout_at[is_idle]
    is_active = nxt_same_key & ~idle[after] & ~ended[after]
    reason[is_active] = ACTIVE
    expire[is_active] = rec.cols["first"][is_active] + rules.active_timeout_ns
    last_end = end[re - 1]
    closed_by_packet = last_end != NO_END
    reason[closed_by_packet] = last_end[closed_by_packet]
    expire[closed_by_packet] = last[re - 1][closed_by_packet]
    rec.cols["end"] = reason
    rec.cols["expire"] = expire
    closed = reason != NO_END
    return rec.take(np.flatnonzero(closed)), rec.take(np.flatnonzero(~closed))


class _Loop:
    """The per-packet loop: exact for any timestamp order, and the only place a table of
    bounded size evicts. Rows are fed in file order (for one key, in that key's order)."""

    def __init__(self, rules: MeterRules, max_flows: int | None) -> None:
        self.rules = rules
        self.max_flows = max_flows
        self.table: OrderedDict[tuple[int, ...], list[int]] = OrderedDict()
        self.heap: list[tuple[int, int, tuple[int, ...]]] = []  # (first + active, serial, key)
        self.serial = 0
        self.closed: list[tuple[int, ...]] = []

    def _close(self, key: tuple[int, ...], r: list[int], reason: int, at: int) -> None:
        # r: first, last, packets, bytes, flags, vlan, serial
        self.closed.append((*key, r[0], r[1], r[2], r[3], r[4], r[5], reason, at))

    def _close_timeout(self, key: tuple[int, ...], r: list[int]) -> None:
        active_at = r[0] + self.rules.active_timeout_ns
        idle_at = r[1] + self.rules.idle_timeout_ns
        if active_at <= idle_at:
            self._close(key, r, ACTIVE, active_at)
        else:
            self._close(key, r, IDLE, idle_at)

    def _make_room(self, t: int) -> None:
        """Expire what has timed out by T; if the table is still full, evict its least
        recently used record (at T)."""
        table, heap = self.table, self.heap
        while heap and heap[0][0] <= t:
            _, serial, key = heapq.heappop(heap)
            r = table.get(key)
            if r is not None and r[6] == serial:
                del table[key]
                self._close_timeout(key, r)
        idle, limit = self.rules.idle_timeout_ns, self.max_flows or 0
        while table:
            key, r = table.popitem(last=False)  # the least recently used
            if t - r[1] > idle:
                self._close_timeout(key, r)
            elif len(table) + 1 >= limit:
                self._close(key, r, EVICTED, t)
                break
            else:  # room was made: it stays, at the front
                table[key] = r
                table.move_to_end(key, last=False)
                break

    def feed(self, rows: _Rows) -> None:
        idle, active = self.rules.idle_timeout_ns, self.rules.active_timeout_ns
        table, limit = self.table, self.max_flows
        cols = [rows.cols[k].tolist() for k in KEY_FIELDS]
        rest = [rows.cols[k].tolist() for k in ("first", "last", "packets", "bytes", "flags")]
        vlans, ends = rows.cols["vlan"].tolist(), rows.cols["end"].tolist()
        for key, first, last, packets, nbytes, flags, vlan, end in zip(
            zip(*cols, strict=True), *rest, vlans, ends, strict=True
        ):
            r = table.get(key)
            if r is not None and (first - r[1] > idle or first - r[0] >= active):
                del table[key]
                self._close_timeout(key, r)
                r = None
            if r is None:
                if limit is not None and len(table) >= limit:
                    self._make_room(first)
                self.serial += 1
                r = [first, last, packets, nbytes, flags, vlan, self.serial]
                table[key] = r
                if limit is not None:
                    heapq.heappush(self.heap, (first + active, self.serial, key))
            else:
                if first < r[0]:
                    r[0] = first
                if last > r[1]:
                    r[1] = last
                r[2] += packets
                r[3] += nbytes
                r[4] |= flags
                if limit is not None:
                    table.move_to_end(key)
            if end != NO_END:
                del table[key]
                self._close(key, r, end, first)

    def take_closed(self) -> _Rows:
        out = _Rows.from_tuples(self.closed)
        self.closed = []
        return out

    def take_open(self) -> _Rows:
        rows = [(*k, r[0], r[1], r[2], r[3], r[4], r[5], NO_END, 0) for k, r in self.table.items()]
        self.table.clear()
        self.heap.clear()
        return _Rows.from_tuples(rows)


def _chunk_records(
    packets: _Rows, carry: _Rows, rules: MeterRules
) -> tuple[list[_Rows], _Rows, int]:
    """One chunk: (closed records, the open records to carry, packets cut by the loop)."""
    rows, start = _group(_Rows.concat([carry, packets]))
    if len(rows) == 0:
        return [], carry, 0
    group = np.cumsum(start) - 1
    back = np.zeros(len(rows), bool)
    back[1:] = ~start[1:] & (rows.cols["first"][1:] < rows.cols["last"][:-1])
    out_of_order = np.zeros(int(group[-1]) + 1, bool)
    out_of_order[group[back]] = True
    loop_rows = out_of_order[group]
    closed, still_open = _cut_monotone(
        rows.take(np.flatnonzero(~loop_rows)), start[~loop_rows], rules
    )
    parts, carried = [closed], [still_open]
    looped = int(loop_rows.sum())
    if looped:
        loop = _Loop(rules, None)
        loop.feed(rows.take(np.flatnonzero(loop_rows)))
        parts.append(loop.take_closed())
        carried.append(loop.take_open())
    return parts, _Rows.concat(carried), looped


def _close_at_eof(rows: _Rows, end_ns: int, rules: MeterRules) -> _Rows:
    """Open records at the end of the capture (END_NS: its latest packet time): those whose
    timeout fell within the capture ended by it, the others `eof` at END_NS."""
    reason, at = _end_by_deadline(rows.cols["first"], rows.cols["last"], rules)
    timed_out = (rows.cols["first"] + rules.active_timeout_ns <= end_ns) | (
        rows.cols["last"] + rules.idle_timeout_ns < end_ns
    )
    rows.cols["end"] = np.where(timed_out, reason, EOF).astype(np.int8)
    rows.cols["expire"] = np.where(timed_out, at, end_ns)
    return rows


@dataclass
class ReferenceStats:
    """What `reference_records` did: packets read, IP packets counted, packets cut by the
    per-packet loop (out-of-order keys, or all of them when the table overflowed), whether the
    table overflowed, and the capture's problem (damage) if any."""

    packets: int = 0
    ip_packets: int = 0
    looped_packets: int = 0
    overflowed: bool = False
    problem: str | None = None


def _may_overflow(rec: _Rows, max_flows: int, monotone: bool) -> bool:
    """Whether a table of MAX_FLOWS can be full when a record of REC starts: an upper bound
    of the live records at each record's start, from the records cut without eviction (each
    live from its first packet to its expiry, inclusive). Without monotone time the bound does
    not hold: any capture with more records than the table then goes through the loop."""
    if len(rec) <= max_flows:
        return False
    if not monotone:
        return True
    starts = np.sort(rec.cols["first"])
    ends = np.sort(rec.cols["expire"] + 1)
    live = np.searchsorted(starts, starts, "right") - np.searchsorted(ends, starts, "right")
    return bool(live.max() > max_flows)


def _addresses(ver: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> pa.Array:
    """Addresses as text (analysis.capture.address_text), each distinct one formatted once."""
    n = len(ver)
    order = np.lexsort((lo, hi, ver))
    v, h, low = ver[order], hi[order], lo[order]
    new = np.ones(n, bool)
    new[1:] = (v[1:] != v[:-1]) | (h[1:] != h[:-1]) | (low[1:] != low[:-1])
    index = np.empty(n, np.int64)
    index[order] = np.cumsum(new) - 1
    text = address_text(v[new], h[new], low[new])
    return pa.array(text, pa.string()).take(pa.array(index))


def _table(rec: _Rows) -> pa.Table:
    """Records as a REFERENCE_SCHEMA table, sorted by first time then key."""
    c = rec.cols
    by_key = np.lexsort((c["last"], _key_hash(rec)))  # ties of first time: by key, then last
    order = by_key[np.argsort(c["first"][by_key], kind="stable")]
    c = {k: v[order] for k, v in c.items()}
    columns = {
        "src": _addresses(c["ver"], c["shi"], c["slo"]),
        "dst": _addresses(c["ver"], c["dhi"], c["dlo"]),
        "sport": pa.array(c["sport"], pa.int32()),
        "dport": pa.array(c["dport"], pa.int32()),
        "proto": pa.array(c["proto"], pa.int16()),
        "vlan": pa.array(c["vlan"], pa.int32()),
        "packets": pa.array(c["packets"], pa.int64()),
        "bytes": pa.array(c["bytes"], pa.int64()),
        "first_ns": pa.array(c["first"], pa.int64()),
        "last_ns": pa.array(c["last"], pa.int64()),
        "tcp_flags": pa.array(c["flags"], pa.int16()),
        "end": pa.array(END_REASONS, pa.string()).take(pa.array(c["end"])),
        "expire_ns": pa.array(c["expire"], pa.int64()),
    }
    return pa.Table.from_arrays(list(columns.values()), schema=REFERENCE_SCHEMA)


Pcaps = str | os.PathLike | Sequence[str | os.PathLike]


def _chunks(pcap: Pcaps, chunk_packets: int) -> Iterator[Capture]:
    """The chunks of PCAP, or of several files one after the other (one logical capture)."""
    for path in [pcap] if isinstance(pcap, (str, os.PathLike)) else pcap:
        yield from iter_capture(path, chunk_packets=chunk_packets)


def reference_records_with_stats(
    pcap: Pcaps, rules: MeterRules, chunk_packets: int = CHUNK_PACKETS
) -> tuple[pa.Table, ReferenceStats]:
    """`reference_records` and what it did (ReferenceStats)."""
    stats = ReferenceStats()
    closed: list[_Rows] = []
    carry = _Rows.empty()
    end_ns: int | None = None
    prev_ns: int | None = None
    monotone = True
    for cap in _chunks(pcap, chunk_packets):
        if cap.problem is not None:
            stats.problem = f"byte {cap.problem.offset}: {cap.problem.message}"
        if len(cap) == 0:
            continue
        ts = cap.ts_ns
        stats.packets += len(cap)
        hi = int(ts.max())
        end_ns = hi if end_ns is None else max(end_ns, hi)
        if monotone and (
            (prev_ns is not None and int(ts[0]) < prev_ns) or bool(np.any(ts[1:] < ts[:-1]))
        ):
            monotone = False
        prev_ns = int(ts[-1])
        packets = _packet_rows(cap, rules)
        stats.ip_packets += len(packets)
        parts, carry, looped = _chunk_records(packets, carry, rules)
        closed.extend(parts)
        stats.looped_packets += looped
    if end_ns is None:
        return _table(_Rows.empty()), stats
    closed.append(_close_at_eof(carry, end_ns, rules))
    rec = _Rows.concat(closed)
    if rules.max_flows is not None and _may_overflow(rec, rules.max_flows, monotone):
        stats.overflowed = True
        rec = _loop_all(pcap, rules, chunk_packets, end_ns)
        stats.looped_packets = stats.ip_packets
    return _table(rec), stats


def _loop_all(pcap: Pcaps, rules: MeterRules, chunk_packets: int, end_ns: int) -> _Rows:
    """Every packet through the per-packet loop with a table of rules.max_flows."""
    loop = _Loop(rules, rules.max_flows)
    closed: list[_Rows] = []
    for cap in _chunks(pcap, chunk_packets):
        loop.feed(_packet_rows(cap, rules))
        closed.append(loop.take_closed())
    closed.append(_close_at_eof(loop.take_open(), end_ns, rules))
    return _Rows.concat(closed)


def reference_records(
    pcap: Pcaps, rules: MeterRules, chunk_packets: int = CHUNK_PACKETS
) -> pa.Table:
    """The records (REFERENCE_SCHEMA) a conforming meter with RULES exports for the IP packets
    of PCAP (pcap or pcapng, or a list of them: one logical capture, read in turn; packets
    without a readable IP header are not counted), sorted by
    first time and key. Reads the capture in chunks of CHUNK_PACKETS (the result does not
    depend on it). A damaged capture gives the records of the packets before the damage.
    Raises analysis.capture.CaptureError when PCAP is not a capture."""
    return reference_records_with_stats(pcap, rules, chunk_packets)[0]


__all__ = ["ReferenceStats", "reference_records", "reference_records_with_stats"]
