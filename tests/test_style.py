"""The contributor's habits, checked: ruff lints and formats, mypy types, short commit subjects.

The tools come from the venv that runs the tests (`pip install '.[test]'`); their settings are in
pyproject.toml and docs/contributing.md says how to fix what they find.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from ntgcore import runfolder

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# The commit that formatted the code with ruff: the subjects after it are held to the limit.
STYLE_START = "c7be105"
MAX_SUBJECT = 72


def tool(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed in {BIN} (pip install '.[test]')")
    return path


def run(argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_ruff_lint_is_clean():
    p = run([str(tool("ruff")), "check", "--no-cache", "."])
    assert p.returncode == 0, (
        "ruff check found problems (fix: ruff check --fix FILE, then by hand):\n"
        + p.stdout
        + p.stderr
    )


def test_ruff_format_is_clean():
    p = run([str(tool("ruff")), "format", "--check", "--no-cache", "."])
    assert p.returncode == 0, (
        "files ruff would reformat (fix: ruff format FILE):\n" + p.stdout + p.stderr
    )


def test_mypy_is_clean():
    # The files and the strictness are pyproject.toml's [tool.mypy]; the cache is kept outside the
    # tree so that a second run takes seconds.
    cache = Path(tempfile.gettempdir()) / f"ntg-testbed-mypy-{os.getuid()}"
    p = run([str(tool("mypy")), "--cache-dir", str(cache)], timeout=600)
    assert p.returncode == 0, "mypy found problems:\n" + p.stdout + p.stderr


def commit_subjects(since: str) -> list[str]:
    if not (REPO / ".git").exists() or not shutil.which("git"):
        pytest.skip("not a git checkout (an sdist or an export): no commit subjects to check")
    known = run(["git", "rev-parse", "--verify", "--quiet", since + "^{commit}"], timeout=30)
    if known.returncode != 0:
        pytest.skip(f"commit {since} is not in this checkout (a shallow clone?)")
    p = run(["git", "log", "--format=%s", f"{since}..HEAD"], timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def long_subjects(subjects: list[str]) -> list[str]:
    return [s for s in subjects if len(s) >= MAX_SUBJECT]


def test_the_subject_limit_counts_characters():
    accents = ("Ünïcödé " * 9)[:71]  # 71 characters, more bytes
    assert long_subjects(["a" * 71, "b" * 72, accents]) == ["b" * 72]


def test_commit_subjects_are_short():
    too_long = long_subjects(commit_subjects(STYLE_START))
    assert not too_long, (
        f"commit subjects of {MAX_SUBJECT} characters or more since {STYLE_START} "
        "(reword them: git rebase -i, `reword`):\n" + "\n".join(too_long)
    )


def releases() -> list[str]:
    text = (REPO / "CHANGELOG.md").read_text()
    return re.findall(r"^## \[([^\]]+)\]", text, flags=re.M)


def test_the_newest_release_is_pyproject_s_version(monkeypatch):
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    names = releases()
    assert names[0] == "Unreleased", "CHANGELOG.md starts with an [Unreleased] section"
    assert names[1] == version, f"the newest release in CHANGELOG.md is not pyproject's {version}"
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", n) for n in names[1:]), names

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(runfolder, "version", not_installed)
    assert runfolder.testbed_version() == f"{version}+source"
