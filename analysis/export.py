"""`testbed export CAPTURE... --parquet DIR`: captures as per-packet and per-flow Parquet tables.

The layout (docs/run-tables.md, "Capture export") is Hive-style, partitioned by the UTC hour of
the packet (of the flow's first packet for the flow table), which DuckDB, Spark, Polars and Arrow
read with hive partitioning:

    DIR/export.json                                      what was exported, by which version
    DIR/packets/date=2026-11-23/hour=15/part-000-0-00000.parquet
    DIR/flows/date=2026-11-23/hour=15/part-000-0-00000.parquet

    SELECT date, hour, count(*) FROM read_parquet('DIR/packets/**/*.parquet', hive_partitioning=true)
    GROUP BY ALL

A capture is read with `iter_capture`, one chunk (CHUNK_PACKETS packets) at a time, into WRITERS
+ 1 sets of arrays in turn: one chunk being written by each writer thread while the next is read;
the flow table is aggregated chunk by chunk (memory grows with the number of flows, not of
packets).
An address is two uint64 columns, `*_hi` and `*_lo`: the 16 bytes of the address, big-endian, in
two halves (IPv6 as it is, IPv4 as IPv4-mapped `::ffff:a.b.c.d`, null for a non-IP packet), not
text: formatting an address costs about 1 µs, a hundred times the rest of a packet's export, and
two 8-byte integers encode several times faster than a 16-byte binary. `ADDRESS_SQL` formats them
in DuckDB (`ntg_ip(src_hi, src_lo)`).

Every file carries `ntg.schema_version` (the run tables' SCHEMA_VERSION, same rules) and
`ntg.table` (`packets` or `flows`) in its key-value metadata. An export is written into a hidden
folder next to DIR and renamed to DIR when complete: a failed export leaves nothing, and DIR never
holds two exports mixed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ntgcore.errors import BadInput
from ntgcore.files import write_error
from ntgcore.runfolder import SCHEMA_VERSION, testbed_version

from .capture import CHUNK_PACKETS, Capture, CaptureError, iter_capture
from .metrics import FlowAccumulator
from .tables import META_TABLE, META_VERSION

EXPORT_MANIFEST = "export.json"
HOUR_NS = 3600 * 1_000_000_000
COMPRESSIONS = ("none", "snappy", "lz4", "zstd", "gzip")
DEFAULT_COMPRESSION = "snappy"  # as fast as lz4 here, and a codec every Parquet reader has (Spark < 3.3 lacks LZ4_RAW)
# Threads writing part files (Parquet encoding is the slowest stage, and releases the GIL): two,
# or one per core but the reader's, up to 4 (2 cores: 2 writers export 13-15 % faster than 1,
# docs/benchmarks.md, "Capture export").
WRITERS = min(4, max(2, (os.cpu_count() or 2) - 1))
MAX_OPEN_PARTS = 32  # open part files (one per partition) before the least recently used is closed

CAPTURE = pa.dictionary(pa.int32(), pa.string())
ADDRESS_COLUMNS = ["src_hi", "src_lo", "dst_hi", "dst_lo"]
IPV4_MAPPED = 0xFFFF_0000_0000  # in *_lo: ::ffff:a.b.c.d
_ADDRESS = [pa.field(name, pa.uint64()) for name in ADDRESS_COLUMNS]  # null without IP


def _required(name: str, kind: pa.DataType) -> pa.Field:
    return pa.field(name, kind, nullable=False)


PACKETS = pa.schema(
    [
        _required("capture", CAPTURE),
        _required("frame", pa.int64()),
        _required("ts_ns", pa.int64()),
        _required("wire_len", pa.uint32()),
        _required("cap_len", pa.uint32()),
        _required("link_type", pa.uint16()),
        _required("ip_version", pa.uint8()),
        _required("proto", pa.uint8()),
        *_ADDRESS,
        _required("sport", pa.uint16()),
        _required("dport", pa.uint16()),
        _required("tcp_flags", pa.uint8()),
    ]
)
FLOWS = pa.schema(
    [
        _required("capture", CAPTURE),
        _required("ip_version", pa.uint8()),
        _required("proto", pa.uint8()),
        *_ADDRESS,
        _required("sport", pa.uint16()),
        _required("dport", pa.uint16()),
        _required("packets", pa.int64()),
        _required("bytes", pa.int64()),
        _required("first_ns", pa.int64()),
        _required("last_ns", pa.int64()),
        _required("duration_ns", pa.int64()),
    ]
)
# Dictionary encoding only where values repeat; on time stamps and lengths it costs time for nothing.
# (Measured on 1M packets: dictionary encoding ip_version, proto or tcp_flags costs 2-3x their
# plain encoding, and compression reduces them anyway.)
DICTIONARY = {"packets": ["capture", "link_type"], "flows": ["capture"]}
# Frame numbers and time stamps as differences (DELTA_BINARY_PACKED: frames 0 bits a value, time
# stamps the bits of the gaps): a million packets encode and compress in ~9 ms less, in 8 MB less
# before compression and 7 MB less after (snappy). Readers: DuckDB, Arrow, Polars, Spark >= 3.3
# (older Spark: spark.sql.parquet.enableVectorizedReader=false).
ENCODING = {
    "packets": {"frame": "DELTA_BINARY_PACKED", "ts_ns": "DELTA_BINARY_PACKED"},
    "flows": {},
}
# Values the Parquet writer encodes at a time (its default, 1,024, costs ~4 ms more a million
# packets); a data page can exceed its 1 MiB target by up to this many values.
WRITE_BATCH = 1 << 16

# DuckDB macros: ntg_ip(hi, lo) is the usual text of an exported address (IPv4 dotted, IPv6
# uncompressed in 8 groups of 4 digits), ntg_ipv4('a.b.c.d') the *_lo of an IPv4 address (its
# *_hi is 0), for filters.
ADDRESS_SQL = """\
CREATE OR REPLACE MACRO ntg_ip(hi, lo) AS CASE
  WHEN hi IS NULL OR lo IS NULL THEN NULL
  WHEN hi = 0 AND lo >> 32 = 65535 THEN
    printf('%d.%d.%d.%d', (lo >> 24) & 255, (lo >> 16) & 255, (lo >> 8) & 255, lo & 255)
  ELSE printf('%04x:%04x:%04x:%04x:%04x:%04x:%04x:%04x', hi >> 48, (hi >> 32) & 65535,
              (hi >> 16) & 65535, hi & 65535, lo >> 48, (lo >> 32) & 65535, (lo >> 16) & 65535,
              lo & 65535)
END;
CREATE OR REPLACE MACRO ntg_ipv4(a) AS 281470681743360::UBIGINT
  + (split_part(a, '.', 1)::UBIGINT << 24) + (split_part(a, '.', 2)::UBIGINT << 16)
  + (split_part(a, '.', 3)::UBIGINT << 8) + split_part(a, '.', 4)::UBIGINT"""


class ExportError(BadInput):
    """An export that cannot be made: an input that is not a capture, a DIR in the way."""


# --------------------------------------------------------------------------------------------
# Arrow columns


_MAPPED = np.zeros(256, np.uint64)
_MAPPED[4] = IPV4_MAPPED  # by ip_version: what *_lo gets ORed with


def addresses(
    version: np.ndarray, hi: np.ndarray, lo: np.ndarray, out: np.ndarray | None = None
) -> tuple[pa.Array, pa.Array]:
    """An address column pair (hi, lo) as uint64 Arrow arrays: the 16-byte big-endian address
    in two halves (IPv4 as ::ffff:a.b.c.d), null where the version is 0. OUT, if given, is
    where lo is computed (at least as long as the columns); hi is not copied."""
    n = len(version)
    lo = np.bitwise_or(lo, _MAPPED[version], out=None if out is None else out[:n])
    ip = version != 0
    nulls = n - int(np.count_nonzero(ip))
    if not nulls:
        return pa.array(hi), pa.array(lo)
    valid = pa.py_buffer(np.packbits(ip, bitorder="little"))
    return tuple(
        pa.Array.from_buffers(pa.uint64(), n, [valid, pa.py_buffer(a)], null_count=nulls)
        for a in (np.ascontiguousarray(hi), lo)
    )


def _capture_column(name: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([name]))


class Scratch:
    """Arrays a writer thread computes a chunk's columns into, reused from chunk to chunk (the
    kernel need not hand out and zero fresh pages for every chunk)."""

    def __init__(self) -> None:
        self.size = self.first = 0
        self.frame = np.zeros(0, np.int64)  # first, first + 1, ... over the whole size
        self.src_lo = self.dst_lo = np.zeros(0, np.uint64)
        self.zeros = np.zeros(0, np.int32)

    def frames(self, first: int, n: int) -> np.ndarray:
        """Frame numbers FIRST .. FIRST + N - 1 (the arrays grown to N if need be)."""
        if n > self.size:
            self.size, self.first = n, 0
            self.frame = np.arange(n, dtype=np.int64)
            self.src_lo, self.dst_lo = np.empty(n, np.uint64), np.empty(n, np.uint64)
            self.zeros = np.zeros(n, np.int32)
        if first != self.first:
            np.add(self.frame, first - self.first, out=self.frame)
            self.first = first
        return self.frame[:n]


def packet_table(
    cap: Capture,
    name: str,
    first_frame: int,
    rows: np.ndarray | None = None,
    scratch: Scratch | None = None,
) -> pa.Table:
    """The packets of CAP (ROWS of them, when given) as the `packets` table; SCRATCH, when
    given, holds the computed columns (valid until its next use)."""
    n = len(cap.ts_ns)
    if rows is None and scratch is not None:
        frame = scratch.frames(first_frame, n)
        take = lambda a: a
        lo_out: tuple[np.ndarray | None, np.ndarray | None] = (scratch.src_lo, scratch.dst_lo)
        capture = pa.DictionaryArray.from_arrays(pa.array(scratch.zeros[:n]), pa.array([name]))
    else:
        take = (lambda a: a) if rows is None else (lambda a: a[rows])
        frame = take(np.arange(n, dtype=np.int64) + first_frame)
        lo_out = (None, None)
        capture = _capture_column(name, n if rows is None else len(rows))
    ver = take(cap.ip_version)
    cols = [
        capture,
        frame,
        take(cap.ts_ns),
        take(cap.wire_len),
        take(cap.cap_len),
        take(cap.link_types),
        ver,
        take(cap.proto),
        *addresses(ver, take(cap.src_hi), take(cap.src_lo), lo_out[0]),
        *addresses(ver, take(cap.dst_hi), take(cap.dst_lo), lo_out[1]),
        take(cap.sport),
        take(cap.dport),
        take(cap.tcp_flags),
    ]
    return pa.Table.from_arrays(cols, schema=PACKETS)


def flow_arrow(c: dict[str, np.ndarray], name: str) -> pa.Table:
    ver = c["ip_version"]
    cols = [
        _capture_column(name, len(ver)),
        ver,
        c["proto"],
        *addresses(ver, c["src_hi"], c["src_lo"]),
        *addresses(ver, c["dst_hi"], c["dst_lo"]),
        c["sport"],
        c["dport"],
        c["packets"],
        c["bytes"],
        c["first_ns"],
        c["last_ns"],
        c["last_ns"] - c["first_ns"],
    ]
    return pa.Table.from_arrays(cols, schema=FLOWS)


# --------------------------------------------------------------------------------------------
# Partitioned writing


def partition(hour: int) -> str:
    """The Hive path of an hour since the epoch (UTC): `date=YYYY-MM-DD/hour=H` (hour 0..23, not zero-padded, so that readers infer an integer)."""
    t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=int(hour))
    return f"date={t:%Y-%m-%d}/hour={t.hour}"


def _split_by_hour(ts: np.ndarray) -> Iterable[tuple[int, np.ndarray | None]]:
    """(hour, rows) for every hour the time stamps TS fall in; rows None when all do."""
    if not len(ts):
        return []
    h0, h1 = int(ts.min()) // HOUR_NS, int(ts.max()) // HOUR_NS
    if h0 == h1:
        return [(h0, None)]
    hours = ts // HOUR_NS
    order = np.argsort(hours, kind="stable")
    sh = hours[order]
    cuts = np.flatnonzero(np.diff(sh)) + 1
    return [(int(sh[a]), order[a:b]) for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(sh)])]


class PartWriter:
    """Part files of one table under ROOT, one open file per partition (Hive `date=/hour=`
    folders), at most MAX_OPEN_PARTS open at once (the least recently used is closed; a later
    write to its partition opens the next part file)."""

    def __init__(
        self,
        root: Path,
        table: str,
        schema: pa.Schema,
        capture_index: int,
        compression: str,
        row_group: int,
        writer: int = 0,
    ) -> None:
        self.root, self.table, self.capture_index, self.writer = root, table, capture_index, writer
        meta = {META_VERSION: SCHEMA_VERSION.encode(), META_TABLE: table.encode()}
        self.schema = schema.with_metadata(meta)
        self.options = {
            "compression": None if compression == "none" else compression,
            "use_dictionary": DICTIONARY[table],
            "write_statistics": ["ts_ns", "first_ns", "frame"],
            "write_batch_size": WRITE_BATCH,
            "column_encoding": ENCODING[table] or None,
        }
        self.row_group = row_group
        self.open: dict[int, pq.ParquetWriter] = {}
        self.seq = 0
        self.files: list[Path] = []
        self.rows = 0

    def write(self, hour: int, table: pa.Table) -> None:
        w = self.open.pop(hour, None)
        if w is None:
            if len(self.open) >= MAX_OPEN_PARTS:
                self.open.pop(next(iter(self.open))).close()
            folder = self.root / self.table / partition(hour)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"part-{self.capture_index:03d}-{self.writer}-{self.seq:05d}.parquet"
            self.seq += 1
            w = pq.ParquetWriter(path, self.schema, **self.options)
            self.files.append(path)
        self.open[hour] = w  # most recently used last
        w.write_table(
            table.replace_schema_metadata(self.schema.metadata), row_group_size=self.row_group
        )
        self.rows += table.num_rows

    def close(self) -> None:
        for w in self.open.values():
            w.close()
        self.open.clear()


# --------------------------------------------------------------------------------------------
# The export


def check_inputs(paths: list[Path]) -> None:
    """ExportError naming the first input that is missing or not a capture (nothing written)."""
    if not paths:
        raise ExportError("no capture given")
    for p in paths:
        if p.is_dir():
            raise ExportError(f"{p}: a folder, not a capture (give its capture.pcap)")
        try:
            chunks = iter_capture(p, 1)
            next(chunks)
            chunks.close()
        except CaptureError as exc:
            raise ExportError(str(exc)) from None


def _place(out: Path, replace: bool) -> None:
    """ExportError when OUT holds something an export must not mix with or replace."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out}: exists and is not a folder; choose another DIR")
    if out.is_dir() and any(out.iterdir()):
        if not replace:
            raise ExportError(
                f"{out}: not empty; choose a new DIR, or --replace to replace the export in it"
            )
        if not (out / EXPORT_MANIFEST).is_file():
            raise ExportError(
                f"{out}: not empty and holds no {EXPORT_MANIFEST}: not an export, "
                f"--replace does not delete it; choose another DIR"
            )


def export_captures(
    paths: list[str | os.PathLike],
    out: str | os.PathLike,
    *,
    replace: bool = False,
    compression: str = DEFAULT_COMPRESSION,
    chunk_packets: int = CHUNK_PACKETS,
    row_group: int = CHUNK_PACKETS,
    flows: bool = True,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Export the captures PATHS into the folder OUT (layout in the module docstring); returns
    the export manifest (also written as OUT/export.json). ExportError (nothing written) for an
    input that is not a capture or an OUT in the way."""
    say = progress or (lambda s: None)
    if compression not in COMPRESSIONS:
        raise ExportError(f"compression {compression!r}: choose one of {', '.join(COMPRESSIONS)}")
    srcs = [Path(p) for p in paths]
    out = Path(out)
    check_inputs(srcs)
    _place(out, replace)
    work = out.parent / f".{out.name}.partial-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
    except OSError as exc:
        raise write_error(exc, out, "export into a folder elsewhere") from None
    names = _names(srcs)
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "testbed_version": testbed_version(),
        "created_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "layout": {
            "packets": "packets/date=YYYY-MM-DD/hour=H/part-CCC-W-NNNNN.parquet",
            "flows": "flows/date=YYYY-MM-DD/hour=H/part-CCC-W-NNNNN.parquet" if flows else None,
            "partition": "UTC hour of the packet (flows: of their first packet)",
        },
        "compression": compression,
        "captures": [],
    }
    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(WRITERS) as pool:
            for i, (src, name) in enumerate(zip(srcs, names)):
                say(f"exporting {src}")
                doc["captures"].append(
                    _export_one(
                        src, name, i, work, pool, compression, chunk_packets, row_group, flows
                    )
                )
        doc["seconds"] = time.perf_counter() - t0
        doc["packets"] = sum(c["packets"] for c in doc["captures"])
        (work / EXPORT_MANIFEST).write_text(json.dumps(doc, indent=2) + "\n")
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.rename(out, old)
            os.rename(work, out)
            shutil.rmtree(old)
        else:
            os.rename(work, out)
    except BaseException as exc:
        shutil.rmtree(work, ignore_errors=True)  # nothing half-written; an earlier export is kept
        if isinstance(exc, OSError) and exc.errno is not None:  # the file system said no
            raise write_error(
                exc, out, "free some space, or export into a folder elsewhere"
            ) from None
        raise
    return doc


def _names(srcs: list[Path]) -> list[str]:
    """The `capture` column of each input: its file name, its path where names repeat."""
    counts = pd.Series([p.name for p in srcs]).value_counts()
    return [p.name if counts[p.name] == 1 else str(p) for p in srcs]


def _export_one(
    src: Path,
    name: str,
    index: int,
    work: Path,
    pool: ThreadPoolExecutor,
    compression: str,
    chunk_packets: int,
    row_group: int,
    flows: bool,
) -> dict[str, Any]:
    """One capture: chunk k's packets are written by writer k mod WRITERS (each its own part
    files, in its own thread) while the next chunk is read and its flows aggregated here."""
    writers = [
        PartWriter(work, "packets", PACKETS, index, compression, row_group, w)
        for w in range(WRITERS)
    ]
    pending: list[Future | None] = [None] * WRITERS
    acc = FlowAccumulator() if flows else None
    frame = 1
    info: dict[str, Any] = {"capture": name, "path": str(src.resolve()), "packets": 0, "bytes": 0}

    scratch = [Scratch() for _ in range(WRITERS)]

    def write(slot: int, cap: Capture, first: int) -> None:
        for hour, rows in _split_by_hour(cap.ts_ns):
            writers[slot].write(hour, packet_table(cap, name, first, rows, scratch[slot]))

    try:
        # WRITERS + 1 sets of arrays in turn: chunk k is read while chunks k-WRITERS..k-1 may
        # still be being written (each writer is waited for before it gets the next chunk)
        for k, cap in enumerate(iter_capture(src, chunk_packets, reuse=WRITERS + 1)):
            slot = k % WRITERS
            earlier = pending[slot]
            if earlier is not None:
                earlier.result()  # at most WRITERS chunks being written while one is read
            pending[slot] = pool.submit(write, slot, cap, frame)
            if acc is not None:
                acc.add(cap)
            frame += len(cap)
            info["packets"] += len(cap)
            info["bytes"] += int(cap.wire_len.sum(dtype=np.int64))
            info.update(format=cap.format, link_type=int(cap.link_type))
            if cap.problem is not None:
                info["problem"] = {
                    "offset": cap.problem.offset,
                    "message": cap.problem.message,
                    "packets_read": cap.problem.packets_read,
                }
        for f in pending:
            if f is not None:
                f.result()
    finally:
        for f in pending:  # an error: let the other writer finish before closing its files
            if f is not None:
                f.exception()
        for w in writers:
            w.close()
    info["packet_files"] = sum(len(w.files) for w in writers)
    if acc is not None:
        c = acc.columns()
        fw = PartWriter(work, "flows", FLOWS, index, compression, row_group)
        try:
            table = flow_arrow(c, name)
            for hour, rows in _split_by_hour(c["first_ns"]):
                fw.write(hour, table if rows is None else table.take(pa.array(rows)))
        finally:
            fw.close()
        info["flows"] = int(len(c["packets"]))
    return info


__all__ = [
    "ADDRESS_COLUMNS",
    "ADDRESS_SQL",
    "COMPRESSIONS",
    "DEFAULT_COMPRESSION",
    "EXPORT_MANIFEST",
    "ExportError",
    "FLOWS",
    "PACKETS",
    "addresses",
    "export_captures",
    "packet_table",
    "partition",
]
