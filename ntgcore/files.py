"""The one way a file is replaced atomically: written under a temporary name beside it, then
renamed over it. A reader never sees half a file, and an error or an interrupt (Ctrl-C, a
SIGTERM turned into an exception) leaves neither a half-written file nor the temporary behind."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yield the temporary path to write; when the block ends without an exception it becomes
    PATH (os.replace, so on the same file system); otherwise it is removed and PATH is untouched.
    The temporary name is hidden and unique per process and thread, so writers do not collide."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
