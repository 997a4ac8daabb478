"""The run folder and its manifest: the one hand-over between the testbed and the analysis.

A folder `<UTC time>-<scenario>` is created before any work starts and is never overwritten; the
manifest is written at the start (status `running`) and rewritten at every step (atomically), so
whatever happens the folder says how far the run got. `finish` hashes every file once.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .errors import RunSetupError
from .proc import utc_now

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


def testbed_version() -> str:
    try:
        return version("ntg-testbed")
    except PackageNotFoundError:  # not installed: running from a checkout
        return "0.1.0+source"


def git_info() -> dict:
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return {"revision": None, "dirty": None}
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        )  # fmt: skip
        return {"revision": rev.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return {"revision": None, "dirty": None}


def host_info() -> dict:
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


def tool_versions() -> dict:
    tools = {"testbed": testbed_version(), "python": platform.python_version()}
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
        raise RunSetupError(f"the output directory {root} is not writable; choose another with --out")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        candidate = root / (f"{stamp}-{name}" if n == 1 else f"{stamp}-{name}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunSetupError(f"cannot create {candidate}: {exc.strerror}") from None
    raise RunSetupError(f"too many runs named {name} in {root} this second")


class RunFolder:
    """A run's folder and its manifest (a plain dict, written as JSON after every change)."""

    def __init__(self, root: Path, name: str, manifest: dict[str, Any]) -> None:
        self.path = make_run_dir(root, name)
        self.manifest: dict[str, Any] = {
            "manifest_version": MANIFEST_VERSION,
            "run_id": self.path.name,
            "status": "running",
            "created_utc": utc_now(),
            "finished_utc": None,
            **manifest,
        }

    def write(self) -> None:
        tmp = self.path / f".{MANIFEST}.tmp"
        tmp.write_text(json.dumps(self.manifest, indent=2) + "\n")
        os.replace(tmp, self.path / MANIFEST)

    def finish(self, status: str, recursive: bool = False) -> str:
        """Record the final `status` and the size and SHA-256 of every file; write the manifest."""
        self.manifest["status"] = status
        self.manifest["finished_utc"] = utc_now()
        files = self.manifest.setdefault("files", {})
        paths = self.path.rglob("*") if recursive else self.path.iterdir()
        for path in sorted(paths):
            rel = str(path.relative_to(self.path))
            if path.is_file() and not path.name.startswith(".") and rel != MANIFEST:
                files[rel] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
        self.write()
        return status
