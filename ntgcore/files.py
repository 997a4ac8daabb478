"""The one way a file is replaced atomically (`replacing`): written under a temporary name beside
it, then renamed over it. A reader never sees half a file, and an error or an interrupt (Ctrl-C, a
SIGTERM turned into an exception) leaves neither a half-written file nor the temporary behind.

And the one way a file a user gives is read whole (`read_bounded`): at most a limit, whatever it
is (a file, a device such as /dev/zero, a pipe such as /dev/stdin, whose size the file system
does not know), as UTF-8 text; anything else is a BadInput that says what and where.

A full file system (or quota) is said one way: `no space left on device: PATH` (`no_space_at`);
`no_space` turns such an OSError into the NoSpace error (exit 4) a command ends with."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import BadInput, NoSpace, NtgError

NO_SPACE = "no space left on device"


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield the temporary path to write; when the block ends without an exception it becomes
    PATH (os.replace, so on the same file system); otherwise it is removed and PATH is untouched.
    The temporary name is hidden and unique per process and thread, so writers do not collide.
    An OSError that names no file, or the temporary, names PATH instead.

    A PATH that exists and is not a regular file (a device such as /dev/null, a pipe) or is a
    symbolic link (/dev/stdout) is yielded itself and written in place: renaming a file over it
    would replace the device node or the link for the whole machine (as root, `-o /dev/null`
    would turn /dev/null into a regular file)."""
    path = Path(path)
    try:
        special = not stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:  # not there yet (or not reachable): the rename below says what is wrong
        special = False
    if special:
        yield path
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        if exc.filename in (None, str(tmp)):
            exc.filename = str(path)
        raise
    finally:
        tmp.unlink(missing_ok=True)


def write_whole(path: str | os.PathLike[str], text: str) -> None:
    """PATH holds TEXT (UTF-8), whole or not at all (`replacing`)."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def no_space_at(path: str | os.PathLike[str]) -> str:
    """The one message for a file that found its file system full."""
    return f"{NO_SPACE}: {path}"


def no_space(exc: BaseException, where: str | os.PathLike[str], advice: str) -> NoSpace | None:
    """NoSpace for EXC when it is an OSError of a full file system or quota, naming its file (else
    WHERE, the folder being written), saying that no file was left half-written and ADVICE (what
    to do); None for any other error. Whoever writes makes sure of the half-written part:
    `replacing`, or removing what it wrote."""
    if not isinstance(exc, OSError) or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    return no_space_error(exc.filename or where, advice)


def no_space_error(path: str | os.PathLike[str], advice: str) -> NoSpace:
    """The NoSpace error of a command that could not write PATH (and left no half of it)."""
    return NoSpace(f"{no_space_at(path)}; no file is left half-written: {advice}")


MAX_JSON_BYTES = 256 * 2**20  # a run's manifest is tens of kB, metrics.json of a long run a few MB


def read_json(
    path: str | os.PathLike[str], what: str = "JSON file", limit: int = MAX_JSON_BYTES
) -> Any:
    """The JSON value of PATH, read through `read_bounded` (at most LIMIT bytes); BadInput
    `PATH: ...` for what read_bounded refuses and for text that is not JSON."""
    text = read_bounded(path, limit, what)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BadInput(f"{path}: the {what} is not valid JSON ({exc})") from None


def write_error(exc: OSError, where: str | os.PathLike[str], advice: str) -> NtgError:
    """The error a command ends with when EXC stopped it while it wrote its output into WHERE:
    NoSpace (exit 4) for a full file system (`no_space`); BadInput (exit 2: an output place that
    cannot be written) for a read-only file system, or any error of a file in WHERE (else of
    WHERE itself), with ADVICE; any other file's error (an input, a tool) is an NtgError (exit 1)
    naming that file, not called an output."""
    full = no_space(exc, where, advice)
    if full is not None:
        return full
    name = exc.filename or where
    if exc.errno == errno.EROFS or _inside(name, where):
        return BadInput(f"{name}: cannot be written ({exc.strerror or exc}); {advice}")
    return NtgError(f"{name}: {exc.strerror or exc}")


def _inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether PATH is FOLDER or below it (as written, and with links resolved)."""
    for resolve in (os.path.abspath, os.path.realpath):
        p, f = resolve(path), resolve(folder)
        if p == f or p.startswith(f.rstrip(os.sep) + os.sep):
            return True
    return False


def size_text(n: int) -> str:
    """`32.0 MiB` for 2^25, `1,000 bytes` for 1000."""
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n:,} bytes"


def read_bounded(
    path: str | os.PathLike[str], limit: int, what: str = "file", hint: str = ""
) -> str:
    """The UTF-8 text of PATH, read with at most LIMIT + 1 bytes in memory; BadInput (message
    `PATH: ...`) for a missing path, a directory, a file that cannot be read, more than LIMIT
    bytes (a regular file refused by its size, unread), or bytes that are not UTF-8 (the line and
    byte offset of the first). WHAT names the file in the messages ("expect file"); HINT is added
    to the too-long one (how to say the same in less)."""
    path = Path(path)
    too_long = f"at most {size_text(limit)} is read" + (f" ({hint})" if hint else "")
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISREG(st.st_mode) and st.st_size > limit:
                raise BadInput(f"{path}: the {what} is {size_text(st.st_size)}; {too_long}")
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory; give the {what} itself") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise BadInput(f"{path}: the {what} is longer than {size_text(limit)}; {too_long}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        utf16 = " (it looks like UTF-16)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise BadInput(
            f"{path}:{line}: the {what} is not UTF-8 text{utf16}: byte 0x{data[exc.start]:02x} at "
            f"offset {exc.start:,} ({exc.reason}); save it as UTF-8"
        ) from None
