"""Read a pcap or pcapng file into numpy columns with the native reader (libntg via ctypes)."""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import socket
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ntgcore import nativelib
from ntgcore.errors import BadInput, NtgError

LIB_ENV = "NTG_PCAPLIB"
LIB_NAME = nativelib.LIB_NAME

# Column name -> dtype, in the order of struct pr_columns in ntgcore/native/pcapread.h.
COLUMNS: dict[str, type] = {
    "ts_ns": np.int64,
    "wire_len": np.uint32,
    "cap_len": np.uint32,
    "link_types": np.uint16,
    "ip_version": np.uint8,
    "proto": np.uint8,
    "src_hi": np.uint64,
    "src_lo": np.uint64,
    "dst_hi": np.uint64,
    "dst_lo": np.uint64,
    "sport": np.uint16,
    "dport": np.uint16,
    "tcp_flags": np.uint8,
    "vlan": np.uint16,
    "l3_len": np.uint32,
    "frag": np.uint8,
    "icmp_type": np.uint16,
    "l4_payload": np.uint32,
}

_SAMPLE = 4096  # packets read before sizing the arrays for the whole file
CHUNK_PACKETS = 1 << 20  # iter_capture's default: about 57 MiB of columns
BYTES_PER_PACKET = sum(np.dtype(t).itemsize for t in COLUMNS.values())  # one packet's columns


class CaptureError(BadInput):
    """A file that cannot be read as a capture at all (missing, unreadable, not pcap/pcapng)."""

    def __init__(
        self, path: str | os.PathLike, reason: str, expected: str = "a pcap or pcapng capture file"
    ) -> None:
        self.path = str(path)
        self.reason = reason
        self.expected = expected
        super().__init__(f"{self.path}: {reason} (expected {expected})")


class CaptureLibraryError(NtgError):
    """The native reader library could not be found or loaded."""


@dataclass(frozen=True)
class CaptureProblem:
    """Where a damaged capture stopped being readable; the packets before it were read."""

    offset: int
    message: str
    packets_read: int


class _Columns(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in COLUMNS]


@dataclass
class Capture:
    """One capture as columns, one element per packet, in file order.

    Addresses are big-endian numbers split in two uint64 (IPv6: bytes 0-7 in *_hi, 8-15 in
    *_lo; IPv4: the address in *_lo, *_hi = 0). `link_type` is the link type of the file (pcapng:
    its first interface) and `link_types` the one of each packet's interface. `ts_resolution` is
    the number of timestamp units per second in the file (10**6 for microsecond pcap).

    `vlan` is the outer 802.1Q/802.1ad VLAN id (0: untagged), `l3_len` the IP length from the
    header (IPv4 total length, IPv6 40 + payload length; 0 without IP), `frag` 0 for a packet
    that is not a fragment, 1 for a first fragment, 2 for a later one (which has no ports), and
    `icmp_type` the ICMP/ICMPv6 type * 256 + code (NetFlow's ICMP_TYPE; 0 for other protocols).
    `l4_payload` is the TCP/UDP payload length from the IP length field less the IP, extension
    and TCP/UDP headers (whatever was captured of it; 0 for other packets and later fragments).
    """

    path: Path
    format: str
    link_type: int
    ts_resolution: int
    ts_ns: np.ndarray
    wire_len: np.ndarray
    cap_len: np.ndarray
    link_types: np.ndarray
    ip_version: np.ndarray
    proto: np.ndarray
    src_hi: np.ndarray
    src_lo: np.ndarray
    dst_hi: np.ndarray
    dst_lo: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    tcp_flags: np.ndarray
    vlan: np.ndarray
    l3_len: np.ndarray
    frag: np.ndarray
    icmp_type: np.ndarray
    l4_payload: np.ndarray
    problem: CaptureProblem | None = None
    end_offset: int | None = None  # byte offset in the file just after these packets

    def __len__(self) -> int:
        return len(self.ts_ns)

    def to_frame(self) -> pd.DataFrame:
        """The packet columns as a DataFrame (numeric; `link_types` becomes `link_type`)."""
        cols = {name: getattr(self, name) for name in COLUMNS}
        cols["link_type"] = cols.pop("link_types")
        return pd.DataFrame(cols, copy=False)


class _Packet(ctypes.Structure):  # struct pr_packet (ntgcore/native/pcapread.h)
    _fields_ = [
        ("data", ctypes.POINTER(ctypes.c_uint8)),
        ("cap_len", ctypes.c_uint32),
        ("wire_len", ctypes.c_uint32),
        ("ts_ns", ctypes.c_int64),
        ("link_type", ctypes.c_uint16),
    ]


def library_paths() -> list[Path]:
    """Where the native reader is looked for, in order."""
    return nativelib.library_paths(LIB_ENV, LIB_NAME)


@functools.cache
def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    p, sz, u64, i64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int64
    lib.pr_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, sz]
    lib.pr_open.restype = p
    lib.pr_close.argtypes = [p]
    lib.pr_close.restype = None
    lib.pr_format.argtypes = [p]
    lib.pr_format.restype = ctypes.c_int
    lib.pr_link_type.argtypes = [p]
    lib.pr_link_type.restype = ctypes.c_uint32
    lib.pr_ts_units.argtypes = [p]
    lib.pr_ts_units.restype = u64
    lib.pr_size.argtypes = [p]
    lib.pr_size.restype = u64
    lib.pr_offset.argtypes = [p]
    lib.pr_offset.restype = u64
    lib.pr_count.argtypes = [p]
    lib.pr_count.restype = i64
    lib.pr_next.argtypes = [p, ctypes.POINTER(_Packet)]
    lib.pr_next.restype = ctypes.c_int
    lib.pr_read.argtypes = [p, ctypes.POINTER(_Columns), sz]
    lib.pr_read.restype = sz
    lib.pr_problem.argtypes = [p, ctypes.POINTER(u64)]
    lib.pr_problem.restype = ctypes.c_char_p
    # A library built before the columns of COLUMNS would fill only some of them.
    count = getattr(lib, "pr_column_count", None)
    have = count() if count is not None else 13
    if have != len(COLUMNS):
        raise OSError(
            f"it fills {have} packet columns and this analysis/capture.py reads {len(COLUMNS)}: "
            "the library is older (or newer) than the source; rebuild it: `pip install .`, or "
            f"`{nativelib.BUILD}` and set {LIB_ENV}={nativelib.BUILT}"
        )
    return lib


def library() -> ctypes.CDLL:
    """The loaded native reader: $NTG_PCAPLIB if set, else the one installed with the package."""
    return nativelib.load_library(
        LIB_ENV,
        LIB_NAME,
        _load,
        CaptureLibraryError,
        "capture reader",
        build=nativelib.BUILD,
        built=nativelib.BUILT,
    )


def _open(lib: ctypes.CDLL, path: Path) -> int:
    err = ctypes.create_string_buffer(512)
    handle = lib.pr_open(os.fsencode(path), err, len(err))
    if not handle:
        reason = err.value.decode(errors="replace").removeprefix(f"{path}: ")
        raise CaptureError(path, reason)
    return handle


def _capture(
    lib: ctypes.CDLL,
    handle: int,
    path: Path,
    arrays: dict[str, np.ndarray],
    read_before: int,
    final: bool,
) -> Capture:
    """ARRAYS as a Capture of PATH; when FINAL, with the file's problem (if any), whose
    `packets_read` counts READ_BEFORE packets of earlier chunks too."""
    problem = None
    if final:
        offset = ctypes.c_uint64()
        why = lib.pr_problem(handle, ctypes.byref(offset))
        if why is not None:
            problem = CaptureProblem(
                offset.value, why.decode(errors="replace"), read_before + len(arrays["ts_ns"])
            )
    fmt = "pcap" if lib.pr_format(handle) == 1 else "pcapng"
    return Capture(
        path=path,
        format=fmt,
        link_type=lib.pr_link_type(handle),
        ts_resolution=lib.pr_ts_units(handle),
        problem=problem,
        end_offset=lib.pr_offset(handle),
        **arrays,
    )


def read_capture(path: str | os.PathLike) -> Capture:
    """Read every packet of a pcap/pcapng file; a damaged file gives what precedes the damage
    and sets `problem`. Raises CaptureError when the file is missing or not a capture.
    The whole file's columns are held in memory (BYTES_PER_PACKET a packet); `iter_capture`
    reads it in chunks of bounded size instead."""
    path = Path(path)
    lib = library()
    handle = _open(lib, path)
    try:
        arrays, _ = _read_all(lib, handle)
        return _capture(lib, handle, path, arrays, 0, True)
    finally:
        lib.pr_close(handle)


def iter_capture(
    path: str | os.PathLike, chunk_packets: int = CHUNK_PACKETS, reuse: int = 0
) -> Generator[Capture, None, None]:
    """The packets of a pcap/pcapng file as Captures of at most CHUNK_PACKETS packets each, in
    file order, so that memory stays bounded whatever the file's size. Each chunk is newly
    allocated (a consumer may keep it), or with REUSE (True, or a number k) chunks are read into
    the same arrays, k sets of them in turn: a chunk is then valid only until k more have been
    read (with True, until the next one), and no new memory is touched after the first k chunks
    (faster: the kernel need not hand out and zero fresh pages for every chunk). At least one
    chunk is yielded (empty for a capture without packets); the last one carries the file's
    `problem`. Raises CaptureError as read_capture does, before the first chunk."""
    if chunk_packets < 1:
        raise ValueError(f"chunk_packets must be at least 1, not {chunk_packets}")
    path = Path(path)
    lib = library()
    handle = _open(lib, path)
    try:
        size = lib.pr_size(handle)
        done = 0
        ring: list[dict[str, np.ndarray]] = []
        for k in itertools.count():
            if reuse and len(ring) == int(reuse):
                buffers = ring[k % len(ring)]
            else:
                buffers = {name: np.empty(chunk_packets, dtype) for name, dtype in COLUMNS.items()}
                if reuse:
                    ring.append(buffers)
            n = _fill(lib, handle, buffers, 0)
            arrays = {name: a[:n] for name, a in buffers.items()}
            final = n < chunk_packets or lib.pr_offset(handle) >= size
            chunk = _capture(lib, handle, path, arrays, done, final)
            del arrays
            yield chunk
            del chunk
            done += n
            if final:
                return
    finally:
        lib.pr_close(handle)


def _fill(lib: ctypes.CDLL, handle: int, arrays: dict[str, np.ndarray], start: int) -> int:
    """Read packets into ARRAYS from index START to their end; returns the new end."""
    cols = _Columns(**{name: a.ctypes.data + start * a.itemsize for name, a in arrays.items()})
    room = len(arrays["ts_ns"]) - start
    return start + lib.pr_read(handle, ctypes.byref(cols), room)


def _read_all(lib: ctypes.CDLL, handle: int) -> tuple[dict[str, np.ndarray], int]:
    """One pass over the file into arrays sized from the mean record size seen so far.

    Counting first would read the whole file twice, which costs more than the occasional
    regrowth when the first packets are not typical of the rest; the unused tail of the arrays
    is never touched, so it takes address space but no memory."""
    size = lib.pr_size(handle)
    first = lib.pr_offset(handle)
    arrays: dict[str, np.ndarray] = {
        name: np.empty(_SAMPLE, dtype) for name, dtype in COLUMNS.items()
    }
    n = _fill(lib, handle, arrays, 0)
    while n == len(arrays["ts_ns"]):
        pos = lib.pr_offset(handle)
        if pos >= size:
            break
        mean = max((pos - first) / n, 16.0)
        grown = {
            name: np.empty(n + int((size - pos) / mean * 1.1) + _SAMPLE, a.dtype)
            for name, a in arrays.items()
        }
        for name, a in arrays.items():
            grown[name][:n] = a
        arrays = grown
        n = _fill(lib, handle, arrays, n)
    return {name: a[:n] for name, a in arrays.items()}, n


def address_text(version: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> list[str]:
    """Text form (inet_ntop, as tools print it) of addresses split as in Capture; '' where the
    version is neither 4 nor 6."""
    n = len(version)
    out = [""] * n
    v4 = np.flatnonzero(version == 4)
    raw4 = lo[v4].astype(">u4").tobytes()
    for j, i in enumerate(v4.tolist()):
        out[i] = socket.inet_ntop(socket.AF_INET, raw4[4 * j : 4 * j + 4])
    v6 = np.flatnonzero(version == 6)
    raw6 = np.stack([hi[v6], lo[v6]], axis=1).astype(">u8").tobytes()
    for j, i in enumerate(v6.tolist()):
        out[i] = socket.inet_ntop(socket.AF_INET6, raw6[16 * j : 16 * j + 16])
    return out


__all__ = [
    "Capture",
    "CaptureError",
    "CaptureLibraryError",
    "CaptureProblem",
    "read_capture",
    "iter_capture",
    "CHUNK_PACKETS",
    "BYTES_PER_PACKET",
    "address_text",
    "library",
    "library_paths",
    "iter_frames",
]


def iter_frames(path: str | os.PathLike) -> Iterator[tuple[int, int, bytes]]:
    """Every frame of a capture as (ts_ns, wire_len, captured bytes), in file order, for an
    analysis that compares frames by content (the inline multiplier's latency). Stops at damage
    (as read_capture does)."""
    path = Path(path)
    lib = library()
    handle = _open(lib, path)
    p = _Packet()
    try:
        while lib.pr_next(handle, ctypes.byref(p)):
            yield p.ts_ns, p.wire_len, ctypes.string_at(p.data, p.cap_len)
    finally:
        lib.pr_close(handle)
