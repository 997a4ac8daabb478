"""Numbers from a capture: per-second rates, variance, warm-up, steady state, sizes and flows.

The method is the one of the traffic-generator comparison (seed 001): count packets per second,
take the mean and the standard deviation of those counts, call std / mean × 100 the "variance" in
percent (a coefficient of variation: TRex 37526 / 98810 = 37.98 %), recompute it after the warm-up,
and estimate throughput as average packet size × average rate, next to the measured bytes per
second. Standard deviations are population ones (ddof = 0), as numpy computes them by default.

Seconds are bins of 1 s counted from the first packet. The last bin is *partial* when the capture
stops before that second ends: when the time from the last packet to the end of the bin is more
than two mean inter-packet gaps (measured inside that bin, or over the whole capture when the bin
holds fewer than two packets). A partial bin is shown but left out of every mean and deviation.
A capture that spans more than PER_SECOND_MAX_S (31 days: a capture pieced together, a clock jump,
a hostile time stamp) has no per-second bins: the series is empty, every rate statistic None, as
for a capture without a complete second, and `per_second.left_out` says why (a month of bins is
2.7 million numbers; three years would be 97 million, and 2^32 s 30 GiB).

Warm-up (see `detect_warmup`) is the time the rate takes to come up to its steady level: the
reference is the median rate of the second half of the complete seconds, the floor is
reference × (1 − band) with band = max(10 %, 3 × the robust spread of that half, i.e.
1.4826 × MAD / median), capped at 50 %, and the steady state starts at the first second at or above
the floor of which at least 2 of the 3 seconds starting there (all, when fewer remain) are at or
above it. A lone second reaching the floor during a ramp does not end the warm-up, a lone dip
after a steady start does not create one, and rates above the band (spikes, an early burst) never
count as warm-up.

Everything here is computed by accumulators fed chunks in file order (`TrafficAccumulator`,
`FlowAccumulator`): `traffic_metrics`, `flow_table` and `per_second` feed them a whole capture as
one chunk, `analysis.stream` a capture of any size chunk by chunk, with identical results.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from .capture import COLUMNS, Capture, CaptureLibraryError, address_text, library

NS = 1_000_000_000
FLOW_KEY = ["ip_version", "proto", "src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport"]
PROTO_NAMES = {
    1: "ICMP",
    2: "IGMP",
    6: "TCP",
    17: "UDP",
    41: "IPv6-in-IP",
    47: "GRE",
    50: "ESP",
    51: "AH",
    58: "ICMPv6",
    88: "EIGRP",
    89: "OSPF",
    132: "SCTP",
}
SIZE_BUCKETS = [
    (0, 63),
    (64, 127),
    (128, 255),
    (256, 511),
    (512, 1023),
    (1024, 1518),
    (1519, 2**32 - 1),
]

WARMUP_MIN_BAND = 0.10
WARMUP_MAX_BAND = 0.50
WARMUP_WINDOW = 3
WARMUP_MIN_SECONDS = 4


def flow_table(cap: Capture) -> pd.DataFrame:
    """One row per unidirectional flow (ip_version, proto, src, dst, sport, dport) of the IP
    packets, in order of first appearance: packets, bytes (wire), first_ns, last_ns,
    duration_ns; addresses as text. (`FlowAccumulator` builds the same table from chunks.)"""
    acc = FlowAccumulator()
    acc.add(cap)
    return acc.table()


def flow_hash(keys: dict[str, np.ndarray]) -> np.ndarray:
    """A 64-bit hash of each row's flow key (the FLOW_KEY columns)."""
    mul = np.uint64(0x9E3779B97F4A7C15)
    h = keys["ip_version"].astype(np.uint64) << np.uint64(8) | keys["proto"]
    with np.errstate(over="ignore"):
        for col in (
            keys["src_hi"],
            keys["src_lo"],
            keys["dst_hi"],
            keys["dst_lo"],
            keys["sport"].astype(np.uint64) << np.uint64(16) | keys["dport"],
        ):
            h = (h ^ col) * mul
            h ^= h >> np.uint64(29)
    return h


def _first_rows(codes: np.ndarray) -> np.ndarray:
    """The first row of each code, codes being numbered 0.. in order of first appearance."""
    return np.flatnonzero(np.r_[True, np.diff(np.maximum.accumulate(codes)) > 0])


# The native flow table (libntg, ntgcore/native/flowtab.h): FlowAccumulator uses it when the
# loaded library has it (a library built before it had not), else the numpy grouping below. Both
# give identical tables; tests turn this off to check the numpy one.
NATIVE_FLOWS = True
_FT_IN = (
    "ts_ns",
    "wire_len",
    "ip_version",
    "proto",
    "src_hi",
    "src_lo",
    "dst_hi",
    "dst_lo",
    "sport",
    "dport",
)
_FT_OUT = {
    **{k: COLUMNS[k] for k in FLOW_KEY},
    "packets": np.int64,
    "bytes": np.int64,
    "first_ns": np.int64,
    "last_ns": np.int64,
}


class _FtPackets(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in _FT_IN]


class _FtFlows(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in _FT_OUT]


def _flow_library() -> ctypes.CDLL | None:
    """The loaded reader library if it has the flow table (ft_*), else None."""
    try:
        lib = library()
    except CaptureLibraryError:
        return None
    if not hasattr(lib, "ft_new"):
        return None
    if getattr(lib, "_ntg_flow_table", False):
        return lib
    p, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.ft_new.argtypes, lib.ft_new.restype = [], p
    lib.ft_free.argtypes, lib.ft_free.restype = [p], None
    lib.ft_add.argtypes, lib.ft_add.restype = [p, ctypes.POINTER(_FtPackets), sz], ctypes.c_int
    lib.ft_count.argtypes, lib.ft_count.restype = [p], sz
    lib.ft_columns.argtypes, lib.ft_columns.restype = [p, ctypes.POINTER(_FtFlows)], None
    lib._ntg_flow_table = True  # type: ignore[attr-defined]  # a mark: its prototypes are set
    return lib


class _NativeFlows:
    """FlowAccumulator's table in libntg: one pass over a chunk's packets, keys compared
    exactly, flows in order of first appearance (the GIL is released while it runs)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self._table = lib.ft_new()
        if not self._table:
            raise MemoryError("cannot allocate a flow table")

    def __del__(self) -> None:
        table, self._table = getattr(self, "_table", None), None
        if table:
            self._lib.ft_free(table)

    def __len__(self) -> int:
        return self._lib.ft_count(self._table)

    def add(self, cap: Capture) -> None:
        cols: dict[str, np.ndarray] = {
            k: np.ascontiguousarray(getattr(cap, k), COLUMNS[k]) for k in _FT_IN
        }
        n = len(cols["ts_ns"])
        if n and any(len(a) != n for a in cols.values()):
            raise ValueError("the capture's columns differ in length")
        packets = _FtPackets(**{k: a.ctypes.data for k, a in cols.items()})
        if self._lib.ft_add(self._table, ctypes.byref(packets), n) != 0:
            raise MemoryError("out of memory in the flow table")

    def columns(self) -> dict[str, np.ndarray]:
        n = len(self)
        out: dict[str, np.ndarray] = {k: np.empty(n, dtype) for k, dtype in _FT_OUT.items()}
        if n:
            self._lib.ft_columns(
                self._table, ctypes.byref(_FtFlows(**{k: a.ctypes.data for k, a in out.items()}))
            )
        return out


class FlowAccumulator:
    """The flow table of a capture fed in chunks (file order); `table()` is flow_table's.

    A 64-bit hash of the key is factorized per chunk (one hash table pass instead of a
    multi-column groupby, ~5x faster) and looked up among the hashes seen before (a sorted
    array); the first key seen with a hash represents it. Every row is compared with its hash's
    representative, and a row that differs (a hash collision, however unlikely) is grouped by
    its exact key in a side dictionary instead, so the grouping is exact whatever the chunks.
    Memory: the chunk's temporaries plus 78 bytes a flow in arrays grown by doubling, and 16
    in the sorted hashes: 94 to 172 bytes a flow.

    That is the numpy grouping, ~60 ms a million packets. When the loaded reader library has
    the native flow table (NATIVE_FLOWS, NATIVE when given), that one is used instead: one
    pass in C, exact keys in a hash table, ~88-176 bytes a flow, the same table."""

    def __init__(self, native: bool | None = None) -> None:
        lib = _flow_library() if (NATIVE_FLOWS if native is None else native) else None
        self._native = _NativeFlows(lib) if lib is not None else None
        self._hashes = np.zeros(0, np.uint64)  # sorted hashes that have a representative
        self._hash_ids = np.zeros(0, np.int64)  # the flow of each
        self._exact: dict[tuple[int, ...], int] = {}  # key -> flow, for colliding keys
        self._n = 0  # flows so far
        self._rows = 0  # IP rows seen so far (orders flows by first appearance)
        self._cols: dict[str, np.ndarray] = {
            **{k: np.zeros(0, COLUMNS[k]) for k in FLOW_KEY},
            "order": np.zeros(0, np.int64),
            "packets": np.zeros(0, np.int64),
            "bytes": np.zeros(0, np.int64),
            "first_ns": np.zeros(0, np.int64),
            "last_ns": np.zeros(0, np.int64),
        }

    def __len__(self) -> int:
        return len(self._native) if self._native is not None else self._n

    def _grow(self, extra: int) -> None:
        need = self._n + extra
        have = len(self._cols["order"])
        if need <= have:
            return
        size = max(need, 2 * have, 1024)
        for name, a in self._cols.items():
            grown = np.empty(size, a.dtype)
            grown[: self._n] = a[: self._n]
            if name == "first_ns":
                grown[self._n :] = np.iinfo(np.int64).max
            elif name == "last_ns":
                grown[self._n :] = np.iinfo(np.int64).min
            elif name in ("packets", "bytes"):
                grown[self._n :] = 0
            self._cols[name] = grown

    def _new_flows(self, keys: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
        """New flows represented by the chunk's ROWS (in order); returns their ids."""
        self._grow(len(rows))
        ids = np.arange(self._n, self._n + len(rows), dtype=np.int64)
        for k in FLOW_KEY:
            self._cols[k][ids] = keys[k][rows]
        self._cols["order"][ids] = self._rows + rows
        self._n += len(rows)
        return ids

    def add(self, cap: Capture) -> None:
        """Count the IP packets of CAP (the next chunk in file order)."""
        if self._native is not None:
            self._native.add(cap)
            return
        keys = {k: getattr(cap, k) for k in FLOW_KEY}
        ts, size = cap.ts_ns, cap.wire_len
        if not cap.ip_version.all():
            ip = np.flatnonzero(cap.ip_version)
            keys = {k: v[ip] for k, v in keys.items()}
            ts, size = ts[ip], size[ip]
        n = len(ts)
        if n == 0:
            return
        codes, uniq = pd.factorize(flow_hash(keys))
        firsts = _first_rows(codes)
        # the chunk's hashes among the known ones; new ones get a flow represented by their
        # first row here
        pos = np.searchsorted(self._hashes, uniq)
        if len(self._hashes):
            found = self._hashes[np.minimum(pos, len(self._hashes) - 1)] == uniq
        else:
            found = np.zeros(len(uniq), bool)
        ids = np.empty(len(uniq), np.int64)
        ids[found] = self._hash_ids[pos[found]]
        new = np.flatnonzero(~found)
        if len(new):
            ids[new] = self._new_flows(keys, firsts[new])
            order = np.argsort(uniq[new], kind="stable")
            self._hashes = np.insert(self._hashes, pos[new][order], uniq[new][order])
            self._hash_ids = np.insert(self._hash_ids, pos[new][order], ids[new][order])
        flow = ids[codes]
        reps = {k: self._cols[k][: self._n] for k in FLOW_KEY}
        if all(np.array_equal(keys[k], reps[k][flow]) for k in FLOW_KEY):
            # codes -> flows is one-to-one: aggregate per code, then scatter
            c = self._cols
            c["packets"][ids] += np.bincount(codes, minlength=len(ids))
            c["bytes"][ids] += np.bincount(codes, weights=size, minlength=len(ids)).astype(np.int64)
            lo = np.full(len(ids), np.iinfo(np.int64).max, np.int64)
            hi = np.full(len(ids), np.iinfo(np.int64).min, np.int64)
            np.minimum.at(lo, codes, ts)
            np.maximum.at(hi, codes, ts)
            c["first_ns"][ids] = np.minimum(c["first_ns"][ids], lo)
            c["last_ns"][ids] = np.maximum(c["last_ns"][ids], hi)
        else:
            self._collided(keys, reps, flow, ts, size)
        self._rows += n

    def _collided(
        self,
        keys: dict[str, np.ndarray],
        reps: dict[str, np.ndarray],
        flow: np.ndarray,
        ts: np.ndarray,
        size: np.ndarray,
    ) -> None:
        """A chunk with rows whose key differs from their hash's representative: those rows are
        grouped by their exact key (the side dictionary), then everything is added row-wise."""
        same = np.ones(len(flow), bool)
        for k in FLOW_KEY:
            same &= keys[k] == reps[k][flow]
        for row in np.flatnonzero(~same).tolist():
            key = tuple(int(keys[k][row]) for k in FLOW_KEY)
            fid = self._exact.get(key)
            if fid is None:
                fid = int(self._new_flows(keys, np.array([row]))[0])
                self._exact[key] = fid
            flow[row] = fid
        c = self._cols
        np.add.at(c["packets"], flow, 1)
        np.add.at(c["bytes"], flow, size.astype(np.int64))
        np.minimum.at(c["first_ns"], flow, ts)
        np.maximum.at(c["last_ns"], flow, ts)

    def columns(self) -> dict[str, np.ndarray]:
        """The flows so far as arrays, in order of first appearance: the key columns of
        FLOW_KEY (addresses split as in Capture), packets, bytes, first_ns, last_ns."""
        if self._native is not None:
            return self._native.columns()
        c = {k: v[: self._n] for k, v in self._cols.items()}
        order = np.argsort(c.pop("order"), kind="stable")
        if not np.array_equal(order, np.arange(self._n)):
            c = {k: v[order] for k, v in c.items()}
        return c

    def table(self) -> pd.DataFrame:
        """The flow table so far (flow_table's columns, rows in order of first appearance)."""
        c = self.columns()
        table = pd.DataFrame(
            {
                "ip_version": c["ip_version"],
                "proto": c["proto"],
                "src": address_text(c["ip_version"], c["src_hi"], c["src_lo"]),
                "dst": address_text(c["ip_version"], c["dst_hi"], c["dst_lo"]),
                "sport": c["sport"],
                "dport": c["dport"],
            }
        )
        table["packets"] = c["packets"].copy()
        table["bytes"] = c["bytes"].copy()
        table["first_ns"] = c["first_ns"].copy()
        table["last_ns"] = c["last_ns"].copy()
        table["duration_ns"] = c["last_ns"] - c["first_ns"]
        return table


def detect_warmup(rates: np.ndarray) -> dict[str, Any]:
    """Warm-up of a series of complete per-second rates (rule in the module docstring).

    Returns {seconds, found, reference_pps, band_pct}; seconds = 0 and found = False when the
    series is too short (< 4 s) or never reaches the floor."""
    rates = np.asarray(rates, dtype=np.float64)
    out: dict[str, Any] = {"seconds": 0, "found": False, "reference_pps": None, "band_pct": None}
    m = len(rates)
    if m < WARMUP_MIN_SECONDS:
        return out
    tail = rates[m // 2 :]
    ref = float(np.median(tail))
    if ref <= 0:
        return out
    spread = 1.4826 * float(np.median(np.abs(tail - ref))) / ref
    band = min(max(WARMUP_MIN_BAND, 3 * spread), WARMUP_MAX_BAND)
    inside = rates >= (1 - band) * ref
    out.update(reference_pps=ref, band_pct=band * 100)
    for s in range(m):
        window = inside[s : s + WARMUP_WINDOW]
        if inside[s] and 3 * window.sum() >= 2 * len(window):
            out.update(seconds=s, found=True)
            break
    return out


def _rate_stats(pkts: np.ndarray, byts: np.ndarray, avg_size: float | None) -> dict[str, Any]:
    """The seed's statistics over complete seconds; AVG_SIZE feeds the throughput formula."""
    if len(pkts) == 0:
        return {
            "seconds": 0,
            "mean_pps": None,
            "std_pps": None,
            "variance_pct": None,
            "min_pps": None,
            "max_pps": None,
            "throughput_Bps": None,
            "throughput_bps": None,
            "throughput_formula_Bps": None,
        }
    mean = float(np.mean(pkts))
    std = float(np.std(pkts))
    mean_bytes = float(np.mean(byts))
    return {
        "seconds": int(len(pkts)),
        "mean_pps": mean,
        "std_pps": std,
        "variance_pct": std / mean * 100 if mean else None,
        "min_pps": int(pkts.min()),
        "max_pps": int(pkts.max()),
        "throughput_Bps": mean_bytes,
        "throughput_bps": mean_bytes * 8,
        "throughput_formula_Bps": avg_size * mean if avg_size is not None else None,
    }


def per_second(cap: Capture, flows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Packets, bytes and flows started in each second from the first packet, and whether the
    bin is partial (only the last one can be)."""
    acc = TrafficAccumulator(flows=False)
    acc.add(cap)
    return acc.per_second(flows)


def traffic_metrics(cap: Capture, flows: pd.DataFrame | None = None) -> dict[str, Any]:
    """Everything the report shows about the traffic, as plain JSON-ready values.

    Top level: totals, the per-second statistics over all complete seconds (mean_pps, std_pps,
    variance_pct, throughput_Bps/bps measured, throughput_formula_Bps = average_packet_size ×
    mean_pps), `warmup`, the same statistics after it in `steady`, `per_second` series,
    `packet_size`, `protocols` and `flows`. FLOWS is flow_table(cap), computed when not given.
    (`TrafficAccumulator` computes the same from chunks.)"""
    acc = TrafficAccumulator(flows=flows is None)
    acc.add(cap)
    return acc.metrics(flows)


PER_SECOND_MAX_S = 31 * 86_400  # per-second bins only for captures spanning at most this
SIZE_DIRECT = 1 << 18  # wire lengths below this are counted in an array, larger ones in a dict


class SecondBins:
    """Packets and bytes per 1-second bin counted from ORIGIN_NS, fed in chunks, and what the
    partial-last-bin rule needs (count, first and last time stamp of the last bin).

    A packet earlier than the origin cannot be binned (the bins would have to move by a
    fraction of a second): `early` is then set and the bins must be counted again from the
    true first packet. A packet PER_SECOND_MAX_S or more after the origin sets `too_long`: the
    bins are dropped and nothing more is counted."""

    def __init__(self, origin_ns: int) -> None:
        self.origin = origin_ns
        self.early = False
        self.too_long = False
        self.packets = np.zeros(0, np.int64)
        self.bytes = np.zeros(0, np.int64)
        self.last_bin = -1  # index of the last bin with a packet, and its packets' times
        self.last_min = self.last_max = 0

    def add(self, ts: np.ndarray, wire: np.ndarray) -> None:
        if len(ts) == 0 or self.early:
            return
        if int(ts.min()) < self.origin:
            self.early = True
            return
        if self.too_long:
            return
        sec = (ts - self.origin) // NS
        lo, hi = int(sec.min()), int(sec.max())
        if hi >= PER_SECOND_MAX_S:
            self.too_long = True
            self.packets = self.bytes = np.zeros(0, np.int64)
            return
        if hi >= len(self.packets):
            grow = hi + 1 - len(self.packets)
            self.packets = np.concatenate([self.packets, np.zeros(grow, np.int64)])
            self.bytes = np.concatenate([self.bytes, np.zeros(grow, np.int64)])
        rel = sec - lo if lo else sec
        self.packets[lo : hi + 1] += np.bincount(rel, minlength=hi + 1 - lo)
        self.bytes[lo : hi + 1] += np.bincount(rel, weights=wire, minlength=hi + 1 - lo).astype(
            np.int64
        )
        if hi >= self.last_bin:
            t = ts[sec == hi]
            tmin, tmax = int(t.min()), int(t.max())
            if hi > self.last_bin:
                self.last_bin, self.last_min, self.last_max = hi, tmin, tmax
            else:
                self.last_min, self.last_max = min(self.last_min, tmin), max(self.last_max, tmax)


class TrafficAccumulator:
    """traffic_metrics (and, with FLOWS, the flow table) of a capture fed in chunks in file
    order, in memory bounded by the chunk (plus the flows and one number per second).

    Per-second bins count from ORIGIN_NS, which must be the first packet's time stamp; when it
    is not given the first chunk's earliest packet is taken. If a later packet turns out to be
    earlier (an unsorted capture, or files given out of order), `needs_rebin` is true and the
    caller feeds every chunk again to `rebin` with the true first time stamp (`first_ns`);
    nothing else depends on the origin. Results are identical whatever the chunks."""

    def __init__(self, origin_ns: int | None = None, flows: bool = True) -> None:
        self.flows = FlowAccumulator() if flows else None
        self.bins = SecondBins(origin_ns) if origin_ns is not None else None
        self.packets = self.bytes = self.captured_bytes = self.ip_packets = 0
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self._proto_packets = np.zeros(1 << 16, np.int64)  # by ip_version << 8 | proto
        self._proto_bytes = np.zeros(1 << 16, np.int64)
        self._sizes = np.zeros(0, np.int64)  # packets by wire length < SIZE_DIRECT
        self._big_sizes: dict[int, int] = {}

    @property
    def needs_rebin(self) -> bool:
        return self.bins is not None and self.bins.early

    def add(self, cap: Capture) -> None:
        n = len(cap)
        if n == 0:
            return
        ts, wire = cap.ts_ns, cap.wire_len
        tmin, tmax = int(ts.min()), int(ts.max())
        self.first_ns = tmin if self.first_ns is None else min(self.first_ns, tmin)
        self.last_ns = tmax if self.last_ns is None else max(self.last_ns, tmax)
        self.packets += n
        self.bytes += int(wire.sum(dtype=np.int64))
        self.captured_bytes += int(cap.cap_len.sum(dtype=np.int64))
        self.ip_packets += int(np.count_nonzero(cap.ip_version))
        if self.bins is None:
            self.bins = SecondBins(tmin)
        self.bins.add(ts, wire)
        key = cap.ip_version.astype(np.int64) << 8 | cap.proto
        key[cap.ip_version == 0] = 0
        top = int(key.max()) + 1
        self._proto_packets[:top] += np.bincount(key, minlength=top)
        self._proto_bytes[:top] += np.bincount(key, weights=wire, minlength=top).astype(np.int64)
        self._add_sizes(wire)
        if self.flows is not None:
            self.flows.add(cap)

    def _add_sizes(self, wire: np.ndarray) -> None:
        top = int(wire.max()) + 1
        if top > SIZE_DIRECT:
            big = wire >= SIZE_DIRECT
            for v, c in zip(*np.unique(wire[big], return_counts=True)):
                self._big_sizes[int(v)] = self._big_sizes.get(int(v), 0) + int(c)
            wire = wire[~big]
            top = int(wire.max()) + 1 if len(wire) else 0
        if top > len(self._sizes):
            self._sizes = np.concatenate([self._sizes, np.zeros(top - len(self._sizes), np.int64)])
        if top:
            self._sizes[:top] += np.bincount(wire, minlength=top)

    def rebin(self, chunks: Iterable[Capture]) -> None:
        """Count the per-second bins again from the first packet, over every chunk."""
        assert self.first_ns is not None  # needs_rebin: packets were added
        self.bins = SecondBins(self.first_ns)
        chunks = iter(chunks)
        while (cap := next(chunks, None)) is not None:
            self.bins.add(cap.ts_ns, cap.wire_len)
            del cap  # before the next chunk is read

    def size_histogram(self) -> tuple[np.ndarray, np.ndarray]:
        """(wire lengths, packets of each length), lengths ascending; only lengths present."""
        small = np.flatnonzero(self._sizes)
        big = sorted(self._big_sizes)
        return (
            np.concatenate([small, np.array(big, np.int64)]).astype(np.int64),
            np.concatenate(
                [self._sizes[small], np.array([self._big_sizes[v] for v in big], np.int64)]
            ),
        )

    def flow_table(self) -> pd.DataFrame:
        if self.flows is None:
            raise ValueError("this TrafficAccumulator was made with flows=False")
        return self.flows.table()

    def per_second(self, flows: pd.DataFrame | None = None) -> pd.DataFrame:
        """per_second's table: packets, bytes, flows started per second, partial last bin
        (no rows when the capture spans more than PER_SECOND_MAX_S)."""
        if self.packets == 0 or (self.bins is not None and self.bins.too_long):
            empty = np.zeros(0, np.int64)
            return pd.DataFrame(
                {
                    "second": empty,
                    "packets": empty,
                    "bytes": empty,
                    "flows_started": empty,
                    "partial": np.zeros(0, bool),
                }
            )
        b = self.bins
        assert b is not None and self.first_ns is not None and self.last_ns is not None  # packets
        if b.early or b.origin != self.first_ns:
            raise ValueError(
                "the per-second bins do not start at the first packet: call rebin() first"
            )
        first, last, n = self.first_ns, self.last_ns, self.packets
        nb = len(b.packets)
        tail = nb * NS - (last - first)
        in_last = int(b.packets[-1])
        if in_last >= 2:
            gap = (b.last_max - b.last_min) / (in_last - 1)
        else:
            gap = (last - first) / (n - 1) if n > 1 else 0.0
        partial = np.zeros(nb, bool)
        partial[-1] = tail > 2 * gap
        started = np.zeros(nb, np.int64)
        if flows is not None and len(flows):
            started = np.bincount((flows["first_ns"].to_numpy() - first) // NS, minlength=nb)
        return pd.DataFrame(
            {
                "second": np.arange(nb),
                "packets": b.packets.copy(),
                "bytes": b.bytes.copy(),
                "flows_started": started,
                "partial": partial,
            }
        )

    def per_second_left_out(self) -> str | None:
        """Why the capture has no per-second bins although it has packets (None: it has them)."""
        if self.bins is None or not self.bins.too_long:
            return None
        assert self.first_ns is not None and self.last_ns is not None
        span = (self.last_ns - self.first_ns) / NS
        return (
            f"the capture spans {span:,.0f} s ({span / 86_400:,.1f} days), more than "
            f"{PER_SECOND_MAX_S // 86_400} days: no per-second bins, rates or warm-up "
            "(a capture pieced together or a clock jump?)"
        )

    def metrics(self, flows: pd.DataFrame | None = None) -> dict[str, Any]:
        """traffic_metrics' dictionary; FLOWS is the flow table (this one's when not given)."""
        if flows is None:
            flows = self.flow_table()
        n = self.packets
        out: dict[str, Any] = {
            "packets": n,
            "bytes": self.bytes,
            "captured_bytes": self.captured_bytes,
            "ip_packets": self.ip_packets,
            "first_ns": self.first_ns if n else None,
            "last_ns": self.last_ns if n else None,
        }
        out["duration_ns"] = out["last_ns"] - out["first_ns"] if n else None
        out["duration_s"] = out["duration_ns"] / NS if n else None
        out["packets_per_duration"] = (
            (n / out["duration_s"]) if n > 1 and out["duration_ns"] else None
        )
        out["average_packet_size"] = self.bytes / n if n else None
        out["packet_size"] = _sizes(*self.size_histogram(), self.bytes)
        out["protocols"] = self._protocols()

        bins = self.per_second(flows)
        complete = bins[~bins["partial"]]
        pkts = complete["packets"].to_numpy()
        byts = complete["bytes"].to_numpy()
        out["per_second"] = {
            "second": bins["second"].tolist(),
            "packets": bins["packets"].tolist(),
            "bytes": bins["bytes"].tolist(),
            "flows_started": bins["flows_started"].tolist(),
            "last_partial": bool(bins["partial"].any()),
            "left_out": self.per_second_left_out(),
        }
        out.update(_rate_stats(pkts, byts, out["average_packet_size"]))
        warm = detect_warmup(pkts)
        warm["rule"] = (
            "steady from the first complete second whose rate reaches the median of "
            "the second half less max(10%, 3×robust spread), with 2 of the 3 seconds "
            "from it doing so"
        )
        out["warmup"] = warm
        w = warm["seconds"]
        steady_pkts = int(pkts[w:].sum())
        steady_size = float(byts[w:].sum() / steady_pkts) if steady_pkts else None
        out["steady"] = {
            "from_second": w,
            "average_packet_size": steady_size,
            **_rate_stats(pkts[w:], byts[w:], steady_size),
        }
        out["flows"] = {
            "count": int(len(flows)),
            "started_per_second_mean": (
                float(np.mean(complete["flows_started"])) if len(complete) else None
            ),
            "packets_per_flow_mean": float(flows["packets"].mean()) if len(flows) else None,
            "duration_ns_mean": float(flows["duration_ns"].mean()) if len(flows) else None,
        }
        return plain(out)

    def _protocols(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for k in np.flatnonzero(self._proto_packets).tolist():
            v, p = k >> 8, k & 255
            name = "non-IP" if v == 0 else f"IPv{v} {PROTO_NAMES.get(p, f'proto {p}')}"
            rows.append(
                {
                    "ip_version": v,
                    "proto": p if v else None,
                    "name": name,
                    "packets": int(self._proto_packets[k]),
                    "bytes": int(self._proto_bytes[k]),
                }
            )
        rows.sort(key=lambda r: -r["packets"])
        return rows


def _sizes(values: np.ndarray, counts: np.ndarray, total_bytes: int) -> dict[str, Any]:
    """Statistics of the wire lengths from their histogram (VALUES ascending, COUNTS)."""
    n = int(counts.sum())
    if n == 0:
        return {"min": None, "max": None, "mean": None, "median": None, "buckets": []}
    buckets = []
    for lo, hi in SIZE_BUCKETS:
        k = int(counts[(values >= lo) & (values <= hi)].sum())
        label = f"{lo}-{hi}" if hi < 2**32 - 1 else f"≥{lo}"
        buckets.append({"range": label, "packets": k, "share_pct": k / n * 100})
    # the median as numpy computes it: the middle value, or the mean of the two middle ones
    ends = np.cumsum(counts)
    upper = int(values[np.searchsorted(ends, n // 2, side="right")])
    if n % 2:
        median = float(upper)
    else:
        lower = int(values[np.searchsorted(ends, n // 2 - 1, side="right")])
        median = (lower + upper) / 2
    return {
        "min": int(values[0]),
        "max": int(values[-1]),
        "mean": total_bytes / n,
        "median": median,
        "buckets": buckets,
    }


def plain(x: Any) -> Any:
    """JSON-ready copy: numpy scalars to Python, NaN to None."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
