"""Finding and loading the project's native library with ctypes: $ENV when set, else the copy
`pip install .` put in <platlib>/ntg_native/ (the top-level CMakeLists.txt installs it there).

The library is ntgcore/native/ (libntg.so: the pcap reader, the flow table, the flow-key hashes,
the checksum and the evasion variants' wire renderer), the same objects the flowengine executable
links. analysis/capture.py (with $NTG_PCAPLIB), analysis/hashing.py (with $NTG_HASHLIB) and
idsrules/evasion/native.py (with $NTG_WIRELIB) load it through here; each variable may name a
libntg.so of another build."""

from __future__ import annotations

import ctypes
import os
import sysconfig
from collections.abc import Callable
from pathlib import Path

from .errors import NtgError

LIB_NAME = "libntg.so"
# How to build the library alone, and where that puts it (for the error saying how).
BUILD = "cmake -S ntgcore/native -B build/native && cmake --build build/native"
BUILT = f"build/native/{LIB_NAME}"


def library_paths(env: str, name: str) -> list[Path]:
    """Where library NAME is looked for, in order: $ENV if set, else the installed one."""
    if os.environ.get(env):
        return [Path(os.environ[env])]
    return [Path(sysconfig.get_path("platlib")) / "ntg_native" / name]


def load_library(
    env: str,
    name: str,
    load: Callable[[Path], ctypes.CDLL],
    error: type[NtgError],
    what: str,
    build: str,
    built: str,
) -> ctypes.CDLL:
    """The first of library_paths(ENV, NAME) that exists, loaded by LOAD (which declares the
    functions' types); ERROR, naming WHAT, when it cannot be loaded or none exists (then saying
    how to BUILD it and that the result is at BUILT)."""
    tried = library_paths(env, name)
    for path in tried:
        if path.is_file():
            try:
                return load(path.resolve())
            except OSError as e:
                raise error(f"{path}: cannot load the {what}: {e}") from e
    raise error(
        f"{what} {name} not found (looked at {', '.join(map(str, tried))}); install the project "
        f"with `pip install .`, or build it with `{build}` and set {env}={built}"
    )
