"""The line of a hash in `flowengine match`'s tables (match_line, generators/flowengine/src/
match/match_table.h): the low 32 bits of the hash modulo the size for sizes up to 2^32, the whole hash
modulo the size beyond, computed without a division (a per-table reciprocal, or a mask). Checked
against Python's remainder at the edges of each path."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "generators" / "flowengine" / "src" / "match"
NATIVE = REPO / "ntgcore" / "native"


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler (cc, gcc or clang) to build tests/native/test_match_line.c")
    exe = tmp_path_factory.mktemp("match_line") / "test_match_line"
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            str(SRC),
            "-I",
            str(NATIVE),
            str(REPO / "tests" / "native" / "test_match_line.c"),
            "-o",
            str(exe),
        ],
        check=True,
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return [tuple(int(v) for v in line.split()) for line in out.splitlines()]


def test_every_line_is_the_remainder(rows):
    assert len(rows) > 1000
    wrong = [
        (n, h, line)
        for n, h, line in rows
        if line != ((h & 0xFFFFFFFF) % n if n <= 2**32 else h % n)
    ]
    assert wrong == []


def test_the_sizes_cover_each_path(rows):
    sizes = {n for n, _, _ in rows}
    assert {1, 2**32 - 1, 2**32, 2**32 + 1, 1000003, 2**16} <= sizes
    assert any(n > 2**32 and n & (n - 1) for n in sizes) and any(
        n > 2**32 and not n & (n - 1) for n in sizes
    )
