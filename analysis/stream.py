"""One logical capture read in chunks: metrics and flow table in bounded memory.

A logical capture is one file, the files of a tcpdump rotation (`-C`, `-G`), or the captures of
several hosts taken during one run: every packet of every file counts once, per-second bins count
from the earliest packet of all of them, and flows are ordered by first appearance in the order
the files are given (file by file, packet by packet).

    from analysis.stream import read_stream
    s = read_stream(["capture.pcap", "capture.pcap1"], memory_limit=512 * 2**20)
    s.totals.metrics(), s.totals.flow_table(), s.problem

Memory: the files are read `chunk_packets(memory_limit)` packets at a time (the columns of one
chunk plus the arrays computed from them fit in MEMORY_LIMIT); what grows with the capture is
only the flow state (94 to 172 bytes a flow while reading; the flow table with its text addresses
about 90 bytes a flow at the end), one number per second, and one per distinct packet length.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .capture import BYTES_PER_PACKET, Capture, CaptureError, CaptureProblem, iter_capture
from .metrics import TrafficAccumulator

DEFAULT_MEMORY_LIMIT = 256 * 2**20
# What a packet of a chunk costs beyond its columns (BYTES_PER_PACKET) while it is counted: the
# temporaries of TrafficAccumulator.add at their peak (hashes, group codes, flow ids, seconds),
# measured with tracemalloc: 57-63 bytes a packet on 1-million-packet chunks, 96 leaves a margin.
WORK_BYTES_PER_PACKET = 96
MIN_CHUNK_PACKETS = 1024
# Larger chunks are not faster, they are slower (less of a chunk stays in the CPU caches between
# the passes over it): 2^19 packets read at 34 M packets/s, 2^22 at 18 M (docs/benchmarks.md)
MAX_CHUNK_PACKETS = 1 << 19
PROGRESS_EVERY_S = 2.0

BASE_NAMES = ("capture.pcap", "capture.pcapng")
CAPTURES_DIR = "captures"
_CAPTURE_FILE = re.compile(r".*\.(pcap|pcapng|cap)\d*$")


def chunk_packets(memory_limit: int | None = None) -> int:
    """Packets per chunk so that a chunk and its working arrays fit in MEMORY_LIMIT bytes
    (DEFAULT_MEMORY_LIMIT when None), at most MAX_CHUNK_PACKETS."""
    limit = DEFAULT_MEMORY_LIMIT if memory_limit is None else int(memory_limit)
    if limit <= 0:
        raise ValueError(f"memory_limit must be a positive number of bytes, not {limit}")
    return max(
        MIN_CHUNK_PACKETS,
        min(MAX_CHUNK_PACKETS, limit // (BYTES_PER_PACKET + WORK_BYTES_PER_PACKET)),
    )


def natural_key(name: str) -> list:
    """Sort key of natural name order: capture.pcap2 before capture.pcap10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def run_capture_files(run: Path) -> list[Path]:
    """The files of a run folder's capture, in order (the rule, analysis/README.md):

    1. `capture.pcap` and its rotations by `tcpdump -C` (`capture.pcap1`, `capture.pcap2`, ...;
       with `-W` every file is numbered, `capture.pcap0` ...), by number; else the same for
       `capture.pcapng`;
    2. else every file of `captures/` whose name ends in .pcap, .pcapng or .cap, optionally
       followed by a rotation number (one file per host, or `-G` time-named files), in natural
       name order.

    Empty when there is neither; CaptureError when there are both (which one is the run's?)."""
    main: list[Path] = []
    for base in BASE_NAMES:
        pattern = re.compile(re.escape(base) + r"(\d*)")
        found = [
            (int(m.group(1)) if m.group(1) else -1, p)
            for p in run.iterdir()
            if (m := pattern.fullmatch(p.name)) and p.is_file()
        ]
        if found:
            main = [p for _, p in sorted(found)]
            break
    folder = run / CAPTURES_DIR
    more = (
        sorted(
            (p for p in folder.iterdir() if p.is_file() and _CAPTURE_FILE.fullmatch(p.name)),
            key=lambda p: natural_key(p.name),
        )
        if folder.is_dir()
        else []
    )
    if main and more:
        raise CaptureError(
            run,
            f"both {main[0].name} and {CAPTURES_DIR}/ hold captures",
            f"a run folder with either {BASE_NAMES[0]} (and its rotations) or a "
            f"{CAPTURES_DIR}/ folder; move the one that is not the run's capture "
            f"away, or name the files to analyse",
        )
    return main or more


@dataclass(frozen=True)
class CaptureFile:
    """One file of a logical capture."""

    path: Path
    format: str
    link_type: int
    ts_resolution: int
    file_bytes: int
    packets: int
    problem: CaptureProblem | None


@dataclass
class StreamResult:
    """What read_stream found: per-file facts, the accumulated totals (metrics, flow table,
    packet-length histogram), the chunk size used, and how many passes over the files were
    needed (2 when a packet was earlier than every file's first packet)."""

    files: list[CaptureFile]
    totals: TrafficAccumulator
    chunk_packets: int
    passes: int = 1
    problems: list[tuple[Path, CaptureProblem]] = field(default_factory=list)

    @property
    def problem(self) -> tuple[Path, CaptureProblem] | None:
        """The first damaged file and where it stopped being readable, or None."""
        return self.problems[0] if self.problems else None


def _first_ts(path: Path) -> int | None:
    chunks = iter_capture(path, 1)
    try:
        first = next(chunks)
    finally:
        chunks.close()
    return int(first.ts_ns[0]) if len(first) else None


def _chunks(paths: Sequence[Path], size: int) -> Iterator[Capture]:
    for path in paths:
        yield from iter_capture(path, size, reuse=True)


def read_stream(
    paths: Iterable[str | os.PathLike],
    memory_limit: int | None = None,
    progress: Callable[[str], None] | None = None,
    flows: bool = True,
    chunk: int | None = None,
) -> StreamResult:
    """Read the files of one logical capture in chunks into a TrafficAccumulator (with the flow
    table when FLOWS). CHUNK, if given, is the number of packets per chunk instead of the one
    MEMORY_LIMIT allows. PROGRESS, if given, is called with a line about the bytes and packets
    read every PROGRESS_EVERY_S seconds. Raises CaptureError for a missing file or one that is
    not a capture, before counting anything."""
    captures = [Path(p) for p in paths]
    if not captures:
        raise ValueError("read_stream needs at least one capture file")
    size = chunk if chunk is not None else chunk_packets(memory_limit)
    starts = [t for t in map(_first_ts, captures) if t is not None]
    totals = TrafficAccumulator(min(starts) if starts else None, flows=flows)
    total_bytes = sum(p.stat().st_size for p in captures)
    files: list[CaptureFile] = []
    problems: list[tuple[Path, CaptureProblem]] = []
    done_bytes, shown = 0, time.monotonic()
    for path in captures:
        packets, facts = 0, None
        chunks = iter_capture(path, size, reuse=True)
        # the chunks share their arrays (reuse): each is dropped before the next is read into them
        while (cap := next(chunks, None)) is not None:
            totals.add(cap)
            packets += len(cap)
            facts = (cap.format, cap.link_type, cap.ts_resolution, cap.problem)
            if progress and time.monotonic() - shown >= PROGRESS_EVERY_S:
                shown = time.monotonic()
                done = done_bytes + (cap.end_offset or 0)
                progress(
                    f"read {done / 1e6:,.0f} of {total_bytes / 1e6:,.0f} MB "
                    f"({done / max(total_bytes, 1):.0%}), {totals.packets:,} packets"
                )
            del cap
        assert facts is not None  # iter_capture yields at least one chunk
        file_bytes = path.stat().st_size
        done_bytes += file_bytes
        files.append(CaptureFile(path, *facts[:3], file_bytes, packets, facts[3]))
        if facts[3] is not None:
            problems.append((path, facts[3]))
    result = StreamResult(files, totals, size, 1, problems)
    if totals.needs_rebin:
        if progress:
            progress(
                "a packet is earlier than every file's first one: counting the seconds "
                "again from it (second pass)"
            )
        totals.rebin(_chunks(captures, size))
        result.passes = 2
    return result


def flow_table_of(
    paths: Iterable[str | os.PathLike], memory_limit: int | None = None
) -> pd.DataFrame:
    """flow_table of one logical capture, read in chunks (bounded memory)."""
    flows = read_stream(paths, memory_limit).totals.flows
    assert flows is not None  # read_stream keeps the flow table by default
    return flows.table()


__all__ = [
    "read_stream",
    "flow_table_of",
    "run_capture_files",
    "chunk_packets",
    "natural_key",
    "StreamResult",
    "CaptureFile",
    "DEFAULT_MEMORY_LIMIT",
    "WORK_BYTES_PER_PACKET",
    "BASE_NAMES",
    "CAPTURES_DIR",
]
