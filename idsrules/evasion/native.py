"""Variant sessions rendered offline by the native library (ntgcore/native/wirerender.h).

`model.render` is the definition of a session's frames; rendering millions of them in Python was
most of an evasion run, so the evasion capture is rendered in C from a program this module
encodes (the layout: wirerender.h). tests/test_wire_render.py holds the two equal, byte for byte,
on every variant class. A `Renderer` gathers sessions and renders them in one call.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import struct
from dataclasses import dataclass
from pathlib import Path

from ntgcore import nativelib
from ntgcore import packets as P
from ntgcore.errors import NtgError

from .model import WirePlan

LIB_ENV = "NTG_WIRELIB"
LIB_NAME = nativelib.LIB_NAME
SESSION = struct.Struct("<BBBxHHII16s16s")  # wirerender.h: the session header (48 bytes)
STEP = struct.Struct("<BxxxII")
SEG = struct.Struct("<IIIIHHHBBBxxx")
FRAG = struct.Struct("<III")
PLAIN_SEGS = NO_FILL = 0xFFFFFFFF
F_TIMESTAMPS, S_BAD_CHECKSUM, S_ATOMIC, S_SHIFTED = 0x01, 0x01, 0x02, 0x04
MASK32 = 0xFFFFFFFF


class WireLibraryError(NtgError):
    """The native library could not be found or loaded, or it rendered nothing."""


class _Result(ctypes.Structure):
    _fields_ = [
        ("packets", ctypes.c_uint64),
        ("sessions", ctypes.c_uint64),
        ("t_ns", ctypes.c_uint64),
        ("at", ctypes.c_uint64),
    ]


def library_paths() -> list[Path]:
    """Where the library is looked for, in order: $NTG_WIRELIB, else the installed one."""
    return nativelib.library_paths(LIB_ENV, LIB_NAME)


@functools.cache
def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    if not hasattr(lib, "wr_session_len"):
        raise OSError(
            "it has no wire renderer: it is older than the source; rebuild it (`pip install .`)"
        )
    u64, sz, p = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p
    lib.wr_render.argtypes = [p, sz, u64, u64, u64, ctypes.c_int, p, sz, ctypes.POINTER(_Result)]
    lib.wr_render.restype = ctypes.c_int64
    lib.wr_session_len.argtypes, lib.wr_session_len.restype = [], ctypes.c_uint
    if lib.wr_session_len() != SESSION.size:
        raise OSError(
            f"its session header is {lib.wr_session_len()} bytes, this module writes "
            f"{SESSION.size}: rebuild it (`pip install .`)"
        )
    return lib


def library() -> ctypes.CDLL:
    """The loaded renderer: $NTG_WIRELIB if set, else the library installed with the package."""
    return nativelib.load_library(
        LIB_ENV,
        LIB_NAME,
        _load,
        WireLibraryError,
        "wire renderer",
        build=nativelib.BUILD,
        built=nativelib.BUILT,
    )


def session_program(
    plan: WirePlan, client: str, server: str, cport: int, sport: int, seed: int
) -> bytes:
    """One session of a program: what `model.render(plan, client, server, cport, sport, seed)`
    renders."""
    c, s = P.addr(client), P.addr(server)
    flags = F_TIMESTAMPS if plan.timestamps else 0
    cisn = P.initial_seq(seed)
    proto = 6 if plan.proto == "tcp" else 17
    family = 4 if len(c) == 4 else 6
    out = [SESSION.pack(proto, family, flags, cport, sport, cisn, len(plan.steps), c, s)]
    for step in plan.steps:
        if not step.from_client or not step.segs:
            out += (STEP.pack(step.from_client, len(step.data), PLAIN_SEGS), step.data)
            continue
        out += (STEP.pack(1, len(step.data), len(step.segs)), step.data)
        for g in step.segs:
            bits = (
                (S_BAD_CHECKSUM if g.bad_checksum else 0)
                | (S_ATOMIC if g.atomic else 0)
                | (S_SHIFTED if g.seq_shift else 0)
            )
            out += (
                SEG.pack(
                    g.off,
                    len(g.data),
                    g.seq_shift & MASK32,
                    g.ts_back & MASK32,
                    g.flags,
                    g.urgent,
                    len(g.frags),
                    g.hops,
                    bits,
                    len(g.ext),
                ),
                bytes(g.ext),
                g.data,
            )
            for f in g.frags:
                if f.fill is None:
                    out.append(FRAG.pack(f.offset, f.length, NO_FILL))
                else:
                    out += (FRAG.pack(f.offset, f.length, len(f.fill)), f.fill)
    return b"".join(out)


@dataclass
class Rendered:
    records: bytes  # pcap records (no file header)
    packets: int
    t_ns: int  # the time after the last session and its gap


class Renderer:
    """Renders programs into one output buffer, grown as needed and kept between calls."""

    def __init__(self, *, nanosecond: bool = False) -> None:
        self.lib = library()
        self.nanosecond = nanosecond
        self.buf = ctypes.create_string_buffer(1 << 20)

    def render(self, program: bytes, t_ns: int, pkt_gap_ns: int, session_gap_ns: int) -> Rendered:
        """The sessions of `program` as pcap records, the first frame at `t_ns`, `pkt_gap_ns`
        between frames and `session_gap_ns` more after each session."""
        res = _Result()
        while True:
            cap = len(self.buf)
            n = self.lib.wr_render(
                program,
                len(program),
                t_ns,
                pkt_gap_ns,
                session_gap_ns,
                int(self.nanosecond),
                self.buf,
                cap,
                ctypes.byref(res),
            )
            if n != -errno.ENOBUFS:
                break
            self.buf = ctypes.create_string_buffer(cap * 4)
        if n < 0:
            why = {errno.EINVAL: "a malformed program", errno.EMSGSIZE: "a packet over 64 KiB"}
            raise WireLibraryError(
                f"the wire renderer stopped at byte {res.at} of its program: "
                f"{why.get(-n, f'error {-n}')}"
            )
        return Rendered(ctypes.string_at(self.buf, n), res.packets, res.t_ns)
