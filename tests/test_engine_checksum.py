"""The engine's one checksum routine (ntgcore/native/csum.c)
against RFC 1071 known answers and an independent Python reference."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "ntgcore" / "native"


def ref_sum(data: bytes) -> int:
    """Folded one's complement sum of 16-bit big-endian words (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    total = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def ref_checksum(data: bytes) -> int:
    return ~ref_sum(data) & 0xFFFF


def pseudo4(src: bytes, dst: bytes, proto: int, length: int) -> bytes:
    return src + dst + bytes([0, proto]) + length.to_bytes(2, "big")


def pseudo6(src: bytes, dst: bytes, nh: int, length: int) -> bytes:
    return src + dst + length.to_bytes(4, "big") + bytes([0, 0, 0, nh])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler (cc, gcc or clang) to build tests/native/test_checksum.c")
    exe = tmp_path_factory.mktemp("checksum") / "test_checksum"
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
            str(REPO / "tests" / "native" / "test_checksum.c"),
            str(SRC / "csum.c"),
            "-o",
            str(exe),
        ],
        check=True,
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines()]
    assert rows, "test_checksum printed nothing"
    return rows


def unhex(s: str) -> bytes:
    return b"" if s == "-" else bytes.fromhex(s)


def by_name(results, kind, name):
    for r in results:
        if r[0] == kind and r[1] == name:
            return r
    raise AssertionError(f"{kind} {name} missing from the C program's output")


def test_rfc1071_example(results):
    r = by_name(results, "sum", "rfc1071")
    assert unhex(r[2]) == bytes.fromhex("0001f203f4f5f6f7")
    assert int(r[3], 16) == 0xDDF2
    assert int(by_name(results, "csum", "rfc1071")[3], 16) == 0x220D


def test_classic_ipv4_header(results):
    r = by_name(results, "csum", "ipv4hdr")
    hdr = unhex(r[2])
    assert hdr == bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert int(r[3], 16) == 0xB861
    # With the checksum in place the header sums to 0xffff.
    full = hdr[:10] + (0xB861).to_bytes(2, "big") + hdr[12:]
    assert ref_sum(full) == 0xFFFF


def test_all_0xff(results):
    for name in ("ff2", "ff1024"):
        assert int(by_name(results, "sum", name)[3], 16) == 0xFFFF
        assert int(by_name(results, "csum", name)[3], 16) == 0x0000
    # 1025 bytes: the odd 0xff is the high half of a last word 0xff00, and
    # 0xffff + 0xff00 folds to 0xff00.
    assert int(by_name(results, "sum", "ff1025")[3], 16) == 0xFF00
    assert int(by_name(results, "csum", "ff1025")[3], 16) == 0x00FF


@pytest.mark.parametrize("kind", ["sum", "csum", "chain"])
def test_every_vector_matches_reference(results, kind):
    rows = [r for r in results if r[0] == kind]
    assert rows
    for _, name, data, value in rows:
        want = ref_sum(unhex(data)) if kind == "sum" else ref_checksum(unhex(data))
        assert int(value, 16) == want, name


def test_odd_lengths_present(results):
    lengths = {len(unhex(r[2])) for r in results if r[0] == "sum"}
    assert {1, 3, 7, 13, 1499} <= lengths


def test_udp_over_ipv6(results):
    _, _, src, dst, seg, value = by_name(results, "udp6", "hello")
    src, dst, seg = unhex(src), unhex(dst), unhex(seg)
    assert seg[6:8] == b"\0\0"
    want = ref_checksum(pseudo6(src, dst, 17, len(seg)) + seg)
    assert int(value, 16) == want
    # The receiver's check: the segment with its checksum sums to 0xffff.
    filled = seg[:6] + want.to_bytes(2, "big") + seg[8:]
    assert ref_sum(pseudo6(src, dst, 17, len(seg)) + filled) == 0xFFFF


def test_tcp_over_ipv4(results):
    _, _, src, dst, seg, value = by_name(results, "tcp4", "synack")
    src, dst, seg = unhex(src), unhex(dst), unhex(seg)
    assert seg[16:18] == b"\0\0"
    want = ref_checksum(pseudo4(src, dst, 6, len(seg)) + seg)
    assert int(value, 16) == want
    filled = seg[:16] + want.to_bytes(2, "big") + seg[18:]
    assert ref_sum(pseudo4(src, dst, 6, len(seg)) + filled) == 0xFFFF
