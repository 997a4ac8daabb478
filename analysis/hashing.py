"""The flow-key hash functions of the native engine (ntgcore/native/hash.h), loaded with ctypes
from the project's native library (libntg.so).

The hashes are C (the engine's flow table uses them); this module hands numpy arrays of keys to
the library's bulk call and gets the values back without copying, so the collision study
(analysis/hashstudy.py), tests/test_hashes.py and benchmarks/bench_hashes.py hash millions of
keys in one call each. docs/hash-study.md says why a library and not a `flowengine` subcommand.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ntgcore import nativelib
from ntgcore.errors import BadInput, NtgError

LIB_ENV = "NTG_HASHLIB"
LIB_NAME = nativelib.LIB_NAME
TUPLE_KEY_LEN = {4: 13, 6: 37}  # bytes of a packed 5-tuple key (hash.h, hash_tuple_key)
# struct hash_tuple as a numpy record (40 bytes): arrays of tuples go to hash_tuple_bulk as they are.
TUPLE_DTYPE = np.dtype(
    [
        ("src", np.uint8, 16),
        ("dst", np.uint8, 16),
        ("sport", "=u2"),
        ("dport", "=u2"),
        ("proto", np.uint8),
        ("family", np.uint8),
        ("pad", np.uint8, 2),
    ]
)


class HashLibraryError(NtgError):
    """The hash library could not be found or loaded."""


class UnknownHash(BadInput):
    """A hash name the library does not know (the message lists the known ones)."""


@dataclass(frozen=True)
class HashInfo:
    """One registry entry of hash.h: `bits` is the width of its values (32 or 64), `rss_input`
    that a tuple is hashed without its protocol byte (Toeplitz), `same_as` the entry whose values
    this one repeats (another implementation of the same function), or None."""

    name: str
    bits: int
    rss_input: bool
    summary: str
    same_as: str | None
    index: int


class _Algo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("bits", ctypes.c_uint),
        ("rss_input", ctypes.c_int),
        ("fn", ctypes.c_void_p),
        ("summary", ctypes.c_char_p),
        ("same_as", ctypes.c_char_p),
    ]


class HashTuple(ctypes.Structure):
    """struct hash_tuple: addresses in network order (IPv4 in the first 4 bytes), ports in host
    order, family 4 or 6."""

    _fields_ = [
        ("src", ctypes.c_uint8 * 16),
        ("dst", ctypes.c_uint8 * 16),
        ("sport", ctypes.c_uint16),
        ("dport", ctypes.c_uint16),
        ("proto", ctypes.c_uint8),
        ("family", ctypes.c_uint8),
        ("pad", ctypes.c_uint8 * 2),
    ]


def library_paths() -> list[Path]:
    """Where the library is looked for, in order: $NTG_HASHLIB, else the installed one."""
    return nativelib.library_paths(LIB_ENV, LIB_NAME)


@functools.cache
def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    p, sz, u64, u32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint32
    lib.hash_algos.argtypes, lib.hash_algos.restype = [ctypes.POINTER(sz)], ctypes.POINTER(_Algo)
    lib.hash_find.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(_Algo))]
    lib.hash_find.restype = ctypes.c_int
    lib.hash_bulk.argtypes = [ctypes.POINTER(_Algo), p, sz, sz, sz, u64, p]
    lib.hash_bulk.restype = ctypes.c_int
    lib.hash_tuple.argtypes = [ctypes.POINTER(_Algo), ctypes.POINTER(HashTuple), u64]
    lib.hash_tuple.restype = u64
    lib.hash_tuple_key.argtypes = [ctypes.POINTER(HashTuple), ctypes.c_char_p]
    lib.hash_tuple_key.restype = ctypes.c_int
    lib.hash_tuple_bulk.argtypes = [ctypes.POINTER(_Algo), ctypes.POINTER(HashTuple), sz, u64, p]
    lib.hash_tuple_bulk.restype = None
    lib.hash_murmur3_128_full.argtypes = [ctypes.c_char_p, sz, u32, ctypes.POINTER(u64)]
    lib.hash_murmur3_128_full.restype = None
    lib.hash_toeplitz_ref.argtypes = [ctypes.c_char_p, ctypes.c_char_p, sz]
    lib.hash_toeplitz_ref.restype = u32
    lib.hash_crc32c_hw_ok.argtypes, lib.hash_crc32c_hw_ok.restype = [], ctypes.c_int
    lib.hash_names.argtypes, lib.hash_names.restype = [ctypes.c_char_p, sz], sz
    return lib


def library() -> ctypes.CDLL:
    """The loaded hash library: $NTG_HASHLIB if set, else the one installed with the package."""
    return nativelib.load_library(
        LIB_ENV,
        LIB_NAME,
        _load,
        HashLibraryError,
        "hash library",
        build=nativelib.BUILD,
        built=nativelib.BUILT,
    )


def algorithms() -> list[HashInfo]:
    """Every hash the library knows, in its registry's order."""
    n = ctypes.c_size_t()
    table = library().hash_algos(ctypes.byref(n))
    return [
        HashInfo(
            name=a.name.decode(),
            bits=a.bits,
            rss_input=bool(a.rss_input),
            summary=a.summary.decode(),
            same_as=a.same_as.decode() if a.same_as else None,
            index=i,
        )
        for i, a in enumerate(table[i] for i in range(n.value))
    ]


def names() -> list[str]:
    return [a.name for a in algorithms()]


def names_text() -> str:
    """The known names as the library lists them in its errors (hash_names())."""
    lib = library()
    need = lib.hash_names(None, 0)
    buf = ctypes.create_string_buffer(need + 1)
    lib.hash_names(buf, len(buf))
    return buf.value.decode()


def distinct_names() -> list[str]:
    """One name per hash function (entries that repeat another's values left out)."""
    return [a.name for a in algorithms() if a.same_as is None]


def crc32c_hw_available() -> bool:
    return bool(library().hash_crc32c_hw_ok())


def _algo(name: str) -> ctypes._Pointer:
    lib = library()
    out = ctypes.POINTER(_Algo)()
    rc = lib.hash_find(name.encode(), ctypes.byref(out))
    if rc == -errno.ENOENT:
        raise UnknownHash(f"unknown hash {name!r}; known: {names_text()}")
    if rc == -errno.ENOTSUP:
        raise BadInput(
            f"hash {name!r} needs CPU instructions this machine lacks (SSE4.2); "
            f"use crc32c (it picks the portable path)"
        )
    return out


def check_names(requested: list[str]) -> list[str]:
    """REQUESTED, each checked (UnknownHash names the first unknown one and lists the known)."""
    for name in requested:
        _algo(name)
    return list(requested)


def info(name: str) -> HashInfo:
    _algo(name)
    return next(a for a in algorithms() if a.name == name)


def hash_bytes(name: str, data: bytes, seed: int = 0) -> int:
    """NAME's value of DATA (one key)."""
    keys = np.frombuffer(data, dtype=np.uint8).reshape(1, len(data))
    return int(hash_keys(name, keys, seed)[0])


def hash_keys(name: str, keys: np.ndarray, seed: int = 0) -> np.ndarray:
    """NAME's value of each row of KEYS (uint8, shape (n, len), rows may be strided but each row's
    bytes contiguous), as uint64; the library's bulk call, the GIL released while it runs."""
    return timed_hash_keys(name, keys, seed)[0]


def timed_hash_keys(name: str, keys: np.ndarray, seed: int = 0) -> tuple[np.ndarray, float]:
    """hash_keys, and the seconds the bulk call took (the hashing alone)."""
    rows_split = keys.ndim == 2 and keys.size > 0 and keys.shape[1] > 1 and keys.strides[1] != 1
    if keys.dtype != np.uint8 or keys.ndim != 2 or rows_split:
        raise ValueError("keys must be a 2-D uint8 array whose rows are contiguous")
    algo = _algo(name)
    n, length = keys.shape
    out = np.empty(n, dtype=np.uint64)
    stride = keys.strides[0] if n > 1 else length
    t0 = time.perf_counter()
    rc = library().hash_bulk(algo, keys.ctypes.data, length, stride, n, seed, out.ctypes.data)
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise ValueError(f"hash_bulk refused the keys (rc {rc}): stride {stride} < length {length}")
    return out, seconds


def make_tuple(src: bytes, dst: bytes, sport: int, dport: int, proto: int) -> HashTuple:
    """A struct hash_tuple from packed addresses (4 bytes: IPv4, 16: IPv6)."""
    if len(src) != len(dst) or len(src) not in (4, 16):
        raise ValueError("src and dst must both be 4 (IPv4) or 16 (IPv6) bytes")
    t = HashTuple()
    t.src[: len(src)] = list(src)
    t.dst[: len(dst)] = list(dst)
    t.sport, t.dport, t.proto = sport, dport, proto
    t.family = 4 if len(src) == 4 else 6
    return t


def tuple_key(t: HashTuple) -> bytes:
    """The bytes the library hashes for T (hash_tuple_key)."""
    buf = ctypes.create_string_buffer(TUPLE_KEY_LEN[6])
    n = library().hash_tuple_key(ctypes.byref(t), buf)
    if n < 0:
        raise ValueError(f"tuple of family {t.family}: not 4 or 6")
    return buf.raw[:n]


def hash_tuple(name: str, t: HashTuple, seed: int = 0) -> int:
    return int(library().hash_tuple(_algo(name), ctypes.byref(t), seed))


def tuple_array(tuples: list[HashTuple]) -> np.ndarray:
    """TUPLES as a TUPLE_DTYPE array."""
    return np.frombuffer(bytes((HashTuple * len(tuples))(*tuples)), dtype=TUPLE_DTYPE).copy()


def hash_tuples(name: str, tuples: np.ndarray, seed: int = 0) -> np.ndarray:
    """Each tuple's value: hash_tuple_bulk, one hash_tuple() (pack, then the hash through its
    function pointer) per tuple."""
    return timed_hash_tuples(name, tuples, seed)[0]


def timed_hash_tuples(name: str, tuples: np.ndarray, seed: int = 0) -> tuple[np.ndarray, float]:
    """hash_tuples, and the seconds the call took."""
    if tuples.dtype != TUPLE_DTYPE or not tuples.flags.c_contiguous:
        raise ValueError("tuples must be a contiguous array of hashing.TUPLE_DTYPE")
    algo = _algo(name)
    out = np.empty(len(tuples), dtype=np.uint64)
    ptr = ctypes.cast(tuples.ctypes.data, ctypes.POINTER(HashTuple))
    t0 = time.perf_counter()
    library().hash_tuple_bulk(algo, ptr, len(tuples), seed, out.ctypes.data)
    return out, time.perf_counter() - t0


def murmur3_128(data: bytes, seed: int = 0) -> tuple[int, int]:
    """Both 64-bit halves of MurmurHash3 x64_128 (the registry keeps the first)."""
    out = (ctypes.c_uint64 * 2)()
    library().hash_murmur3_128_full(data, len(data), seed, out)
    return out[0], out[1]


def toeplitz_reference(key: bytes, data: bytes) -> int:
    """Toeplitz of DATA under a 40-byte KEY, bit by bit (the reference of the table-driven one)."""
    if len(key) != 40:
        raise ValueError("a Toeplitz key is 40 bytes")
    return int(library().hash_toeplitz_ref(key, data, len(data)))
