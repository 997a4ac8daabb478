"""The run folder and its manifest: the one hand-over between the testbed and the analysis.

A folder `<UTC time>-<scenario>` is created before any work starts and is never overwritten; the
manifest is written at the start (status `running`) and rewritten at every step (atomically), so
whatever happens the folder says how far the run got. `finish` hashes every file once.

A full disk must not cost the manifest: the folder holds a hidden reserve (`.reserve`, 1 MiB)
from its creation that `finish` (or `abandon`) deletes before the last write, so the final status
fits even when the run filled the file system. A write that fails leaves the previous manifest
(no half-written temporary file) and says so on stderr.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .errors import NoSpace, RunSetupError
from .files import NO_SPACE, no_space_at, read_json, replacing
from .proc import utc_now

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
# The run tables' schema ("MAJOR.MINOR", analysis/tables.py, docs/run-tables.md), stated in the
# manifest so that a reader knows what to expect of the folder before opening a table.
SCHEMA_VERSION = "1.2"
RESERVE = ".reserve"
RESERVE_BYTES = 1 << 20
FULL_BELOW_BYTES = 64 << 10  # free space below this on the run's file system: it is full


def testbed_version() -> str:
    try:
        return version("ntg-testbed")
    except PackageNotFoundError:  # not installed: running from a checkout
        return "0.13.0+source"


def git_info() -> dict[str, Any]:
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return {"revision": None, "dirty": None}
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return {"revision": rev.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return {"revision": None, "dirty": None}


def host_info() -> dict[str, Any]:
    os_name = None
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return {
        "hostname": platform.node(),
        "os": os_name,
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def tool_versions() -> dict[str, Any]:
    tools: dict[str, str | None] = {
        "testbed": testbed_version(),
        "python": platform.python_version(),
    }
    for lib in ("numpy", "pandas", "matplotlib", "pydantic", "PyYAML"):
        try:
            tools[lib] = version(lib)
        except PackageNotFoundError:
            tools[lib] = None
    return tools


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_run_dir(root: Path, name: str) -> Path:
    """A new folder `<UTC time>-<name>` under `root`; never an existing one."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunSetupError(f"cannot create the output directory {root}: {exc.strerror}") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise RunSetupError(
            f"the output directory {root} is not writable; choose another with --out"
        )
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        candidate = root / (f"{stamp}-{name}" if n == 1 else f"{stamp}-{name}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise NoSpace(
                    f"{NO_SPACE}: cannot create {candidate}; nothing was run: free some "
                    f"space or choose another --out"
                ) from None
            raise RunSetupError(f"cannot create {candidate}: {exc.strerror}") from None
    raise RunSetupError(f"too many runs named {name} in {root} this second")


def free_bytes(path: Path) -> int:
    """Bytes this process may still write on the file system of `path` (root: the blocks kept
    back for root too)."""
    st = os.statvfs(path)
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize


def is_full(path: Path) -> bool:
    """Whether the file system of `path` is full (less than FULL_BELOW_BYTES free): a tool that
    writes there (tcpdump) may go on without saying so, so the run looks; False if it cannot tell."""
    try:
        return free_bytes(path) < FULL_BELOW_BYTES
    except OSError:
        return False


class RunFolder:
    """A run's folder and its manifest (a plain dict, written as JSON after every change)."""

    def __init__(self, root: Path, name: str, manifest: dict[str, Any]) -> None:
        self.path = make_run_dir(root, name)
        self.manifest: dict[str, Any] = {
            "manifest_version": MANIFEST_VERSION,
            "schema_version": SCHEMA_VERSION,
            "run_id": self.path.name,
            "status": "running",
            "created_utc": utc_now(),
            "finished_utc": None,
            **manifest,
        }
        self.full_at: Path | None = None  # the first file a write found no space for
        self._reserve()

    @classmethod
    def open(cls, path: Path) -> RunFolder:
        """An existing run folder (its manifest read back), to mark it `abandoned`."""
        folder = cls.__new__(cls)
        folder.path = Path(path)
        folder.manifest = read_json(folder.path / MANIFEST, "run manifest")
        folder.full_at = None
        return folder

    def _reserve(self) -> None:
        try:
            fd = os.open(self.path / RESERVE, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            finally:
                os.close(fd)
        except OSError:  # not even that much room: the first write that fails says so
            (self.path / RESERVE).unlink(missing_ok=True)

    def no_space(self) -> str | None:
        """`no space left on device: PATH` when a write found the file system full or it is full
        now (checked before `finish` frees the reserve), else None."""
        if self.full_at is None:
            if not is_full(self.path):
                return None
            self.full_at = self.path
        return no_space_at(self.full_at)

    def write(self) -> bool:
        """Replace the manifest atomically; False (said on stderr) when the disk is full."""
        try:
            with replacing(self.path / MANIFEST) as tmp:
                tmp.write_text(json.dumps(self.manifest, indent=2) + "\n")
            return True
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            if self.full_at is None:
                print(
                    f"warning: {NO_SPACE}: {self.path / MANIFEST} not updated (it keeps the "
                    f"previous state); the final status is written when the run ends",
                    file=sys.stderr,
                    flush=True,
                )
            self.full_at = self.full_at or self.path / MANIFEST
            return False

    def _last_write(self) -> None:
        (self.path / RESERVE).unlink(missing_ok=True)  # the room the final manifest needs
        if not self.write():
            before = (
                "it keeps its previous state"
                if (self.path / MANIFEST).exists()
                else "there is none"
            )
            print(
                f"error: {NO_SPACE}: cannot write the final manifest {self.path / MANIFEST}; {before}",
                file=sys.stderr,
                flush=True,
            )

    def _list_files(self, recursive: bool) -> None:
        files = self.manifest.setdefault("files", {})
        paths = self.path.rglob("*") if recursive else self.path.iterdir()
        for path in sorted(paths):
            rel = str(path.relative_to(self.path))
            if path.is_file() and not path.name.startswith(".") and rel != MANIFEST:
                files[rel] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}

    def finish(self, status: str, recursive: bool = False) -> str:
        """Record the final `status` and the size and SHA-256 of every file; write the manifest."""
        self.manifest["status"] = status
        self.manifest["finished_utc"] = utc_now()
        self._list_files(recursive)
        self._last_write()
        return status

    def abandon(self, note: str) -> None:
        """A run whose process died before it could finish (`testbed cleanup`): status
        `abandoned`, the time and what happened; the files as they are."""
        self.manifest["status"] = "abandoned"
        self.manifest["abandoned_utc"] = utc_now()
        self.manifest["abandoned_reason"] = note
        self._list_files(recursive=True)
        self._last_write()
