"""Files a user gives are read through one bounded reader (ntgcore.files.read_bounded): a device,
a pipe, a directory, text that is not UTF-8 each get a one-line message and exit 2, never a
traceback or memory without bound (issue 24, items 4 and 5, and the minor `--urls` and `results
show` ones)."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import limit_memory

from ntgcore.errors import BadInput
from ntgcore.files import read_bounded, replacing, write_error
from testbed.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run_limited(*args: str) -> subprocess.CompletedProcess:
    """`testbed ARGS` in a child held to 2 GiB of address space (reading without bound fails)."""
    return subprocess.run(
        [sys.executable, "-m", "testbed", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        preexec_fn=limit_memory(),
    )


# --- the reader ------------------------------------------------------------------------------------


def test_the_reader_stops_one_byte_past_the_limit_of_a_device_and_a_pipe(tmp_path):
    with pytest.raises(
        BadInput,
        match=r"^/dev/zero: the expect file is longer than 1,000 bytes; at most "
        r"1,000 bytes is read$",
    ):
        read_bounded("/dev/zero", 1000, "expect file")
    read_end, write_end = os.pipe()
    writer = threading.Thread(
        target=lambda: (os.write(write_end, b"x" * 4096), os.close(write_end))
    )
    writer.start()
    try:
        with pytest.raises(BadInput, match="longer than 4,095 bytes"):
            read_bounded(f"/proc/self/fd/{read_end}", 4095)
    finally:
        writer.join()
        os.close(read_end)
    exact = tmp_path / "exact.txt"
    exact.write_text("é" * 500)  # 1,000 bytes: at the limit is fine
    assert read_bounded(exact, 1000) == "é" * 500
    with pytest.raises(
        BadInput, match=r"exact.txt: the file is 1,000 bytes; at most 999 bytes is read \(cut it\)$"
    ):
        read_bounded(exact, 999, hint="cut it")


def test_the_reader_names_a_directory_a_missing_path_and_the_first_byte_that_is_not_utf8(tmp_path):
    with pytest.raises(
        BadInput, match=rf"^{tmp_path}: is a directory; give the allow file itself$"
    ):
        read_bounded(tmp_path, 100, "allow file")
    with pytest.raises(BadInput, match=rf"^{tmp_path}/nowhere: no such file$"):
        read_bounded(tmp_path / "nowhere", 100)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"line one\nline two \xc3(\n")
    with pytest.raises(BadInput) as exc:
        read_bounded(bad, 100)
    assert str(exc.value) == (
        f"{bad}:2: the file is not UTF-8 text: byte 0xc3 at offset 18 (invalid "
        "continuation byte); save it as UTF-8"
    )


# --- detect --expect -------------------------------------------------------------------------------


@pytest.fixture
def detect_inputs(tmp_path) -> list[str]:
    """A capture and a rule file that exist: the expect file is read before either is used."""
    (tmp_path / "c.pcap").write_bytes(b"")
    (tmp_path / "r.rules").write_text('alert ip any any -> any any (msg:"x"; sid:1;)\n')
    return [
        "detect",
        str(tmp_path / "c.pcap"),
        "--rules",
        str(tmp_path / "r.rules"),
        "--out",
        str(tmp_path / "out"),
        "-q",
    ]


def test_an_expect_file_that_is_not_utf8_exits_2_at_its_line(detect_inputs, tmp_path, capsys):
    expect = tmp_path / "expect.yaml"
    text = "checks:\n  - filter: {count: 1, match: {alert.signature: café}}\n".encode("latin-1")
    expect.write_bytes(text)
    assert main([*detect_inputs, "--expect", str(expect)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"{expect}:2: the expect file is not UTF-8 text: byte 0xe9 at offset "
        f"{text.index(0xE9)} (invalid continuation byte); save it as UTF-8"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("source", ["/dev/zero", "a directory"])
def test_an_expect_file_that_is_a_device_or_a_directory_exits_2(source, detect_inputs, tmp_path):
    expect = str(tmp_path) if source == "a directory" else source
    out = run_limited(*detect_inputs, "--expect", expect)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip() == (
        f"{expect}: is a directory; give the expect file itself"
        if source == "a directory"
        else "/dev/zero: the expect file is longer than 32.0 MiB; at most 32.0 MiB is read"
    )


# --- multiply --urls -------------------------------------------------------------------------------


def test_a_utf16_urls_file_is_named_as_such_before_the_engine_runs(tmp_path, capsys):
    pytest.importorskip("scapy")
    from scapy.all import IP, TCP, Ether, wrpcap

    pcap = tmp_path / "in.pcap"
    wrpcap(
        str(pcap),
        [Ether() / IP(src="198.18.0.1", dst="198.19.0.1") / TCP(sport=1234, dport=80, flags="S")],
    )
    urls = tmp_path / "urls.txt"
    urls.write_text("/a\n/b\n", encoding="utf-16")
    out = tmp_path / "out.pcap"
    assert (
        main(
            [
                "multiply",
                str(pcap),
                "-T",
                "2",
                "--ranges",
                "198.18.0.0/16",
                "--urls",
                str(urls),
                "-o",
                str(out),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.strip() == (
        f"testbed multiply: {urls}:1: the --urls file is not UTF-8 text (it looks like UTF-16): byte 0xff at "
        "offset 0 (invalid start byte); save it as UTF-8"
    )
    assert not out.exists()
    urls.write_bytes(b"/a\n/b\x00c\n")
    assert (
        main(
            [
                "multiply",
                str(pcap),
                "-T",
                "2",
                "--ranges",
                "198.18.0.0/16",
                "--urls",
                str(urls),
                "-o",
                str(out),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.strip() == (
        f"testbed multiply: {urls}:2: the --urls file holds a NUL byte at offset 5; give request targets as "
        "text, one a line"
    )
    assert not out.exists()


# --- results show ----------------------------------------------------------------------------------


def test_results_show_of_a_folder_that_is_not_a_run_names_that_folder(tmp_path, capsys):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "readme.txt").write_text("not a run\n")
    assert main(["results", "show", str(folder)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"testbed results show: {folder}: not a run folder (it has no manifest.json or coverage.json); give a "
        "run folder, or a run id (with --in DIR, the folder that holds it; `testbed results list` lists them)"
    )


def test_write_error_calls_only_the_output_unwritable(tmp_path):
    """An error of a file outside the output place (an input, a tool) is not called an output
    that cannot be written; a full disk is exit 4 wherever it is; a read-only one exit 2."""
    out = tmp_path / "out"
    inside = write_error(
        PermissionError(errno.EACCES, "Permission denied", str(out / "x.json")), out, "go elsewhere"
    )
    assert (
        inside.exit_status == 2
        and "x.json: cannot be written (Permission denied); go elsewhere" in str(inside)
    )
    elsewhere = write_error(
        PermissionError(errno.EACCES, "Permission denied", "/etc/rules.rules"), out, "go elsewhere"
    )
    assert elsewhere.exit_status == 1 and str(elsewhere) == "/etc/rules.rules: Permission denied"
    full = write_error(OSError(errno.ENOSPC, "No space left on device", "/tmp/x"), out, "free some")
    assert full.exit_status == 4 and "no space left on device: /tmp/x" in str(full)
    ro = write_error(OSError(errno.EROFS, "Read-only file system", "/mnt/y"), out, "go elsewhere")
    assert ro.exit_status == 2 and "cannot be written" in str(ro)


def test_a_run_folder_with_a_huge_manifest_is_refused_by_its_size(tmp_path):
    """A run folder is user input too: a 3 GiB manifest.json (sparse: no disk used) is refused
    from its size, not read into memory (the child is held to 2 GiB)."""
    run = tmp_path / "results" / "20260101T000000Z-big"
    run.mkdir(parents=True)
    with open(run / "manifest.json", "wb") as f:
        f.truncate(3 * 2**30)
    for argv in (
        ["results", "list", str(tmp_path / "results")],
        ["results", "show", str(run)],
        ["export-benchmark", str(run), "-o", str(tmp_path / "b.json")],
    ):
        p = run_limited(*argv)
        assert p.returncode == 2 and "Traceback" not in p.stderr, (argv, p.stderr[-2000:])
        assert "3,072.0 MiB" in p.stderr or "3.0 GiB" in p.stderr or "at most" in p.stderr, (
            argv,
            p.stderr,
        )
    p = run_limited("analyze", str(run), "--out", str(tmp_path / "a"))
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr[-2000:]


@pytest.mark.parametrize("device", ["/dev/null", "/dev/stdout"])
def test_an_output_on_a_device_is_written_in_place_never_renamed_over(device, tmp_path, capfd):
    """As root, the atomic replace renamed its temporary over /dev/null (an attack-synthesis
    trial writes to os.devnull; `-o /dev/null` does too): /dev/null became a regular file for the
    whole machine. A device or pipe is written in place."""
    before = os.lstat(device)  # the node itself: a character device, or the link /dev/stdout
    with replacing(device) as tmp:
        assert str(tmp) == device
        tmp.write_text("written in place\n")
    after = os.lstat(device)
    assert not stat.S_ISREG(after.st_mode)
    assert (after.st_ino, after.st_dev, after.st_mode) == (
        before.st_ino,
        before.st_dev,
        before.st_mode,
    )
    assert main(["schema", "-o", "/dev/null"]) == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not list(Path("/dev").glob(".null.*.tmp"))
