"""Streaming analysis (analysis.stream): the same numbers as the in-memory path whatever the chunks,
for unsorted captures, hash collisions, tcpdump rotations, several hosts' files and damaged
tails, and a capture twice the size of the memory its process may use, analysed under a cgroup."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import analyze, flow_table, read_capture, traffic_metrics
from analysis import metrics as metrics_module
from analysis.capture import CaptureError, iter_capture
from analysis.metrics import FLOW_KEY, FlowAccumulator, per_second
from analysis.stream import read_stream, run_capture_files
from analysis.tables import read_table
from benchmarks.pcapgen import write_pcap
from ntgcore.units import parse_size_bytes
from testbed.cli import main as cli_main
from tests.conftest import skip_or_fail

pytestmark = pytest.mark.usefixtures("pcaplib")

NS = 1_000_000_000
REPO = Path(__file__).resolve().parent.parent
PCAP_HEADER = 24


def in_memory(path: Path):
    cap = read_capture(path)
    flows = flow_table(cap)
    return traffic_metrics(cap, flows), flows, cap.problem


def streamed(paths: list[Path], chunk: int):
    s = read_stream(paths, chunk=chunk)
    flows = s.totals.flow_table()
    return s.totals.metrics(flows), flows, s


def assert_same(a, b) -> None:
    assert json.dumps(a[0], sort_keys=True) == json.dumps(b[0], sort_keys=True)
    pd.testing.assert_frame_equal(a[1], b[1])


def concatenate(files: list[Path], out: Path) -> Path:
    """One pcap holding the records of FILES in order (all of one format and link type)."""
    with open(out, "wb") as f:
        f.write(files[0].read_bytes()[:PCAP_HEADER])
        for p in files:
            f.write(p.read_bytes()[PCAP_HEADER:])
    return out


@pytest.fixture(scope="module")
def sorted_pcap(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("stream") / "sorted.pcap"
    write_pcap(path, 3000, gap_ns=2_000_000, jitter_ns=500, flows=40)  # 6 s, 4 × 40 sources
    return path


@pytest.fixture(scope="module")
def unsorted_pcap(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("stream") / "unsorted.pcap"
    write_pcap(path, 3000, gap_ns=2_000_000, jitter_ns=900_000_000, flows=40, seed=4)
    return path


CHUNKS = [1, 2, 3, 7, 64, 999, 1000, 1001, 2999, 3000, 3001, 1 << 20]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_streaming_equals_in_memory_for_any_chunk_size(sorted_pcap, chunk):
    want = in_memory(sorted_pcap)
    got = streamed([sorted_pcap], chunk)
    assert_same(got, want)
    assert got[2].passes == 1 and got[0]["packets"] == 3000
    assert len(got[0]["per_second"]["second"]) >= 6


@pytest.mark.parametrize("chunk", CHUNKS)
def test_an_unsorted_capture_gives_the_same_numbers(unsorted_pcap, chunk):
    ts = read_capture(unsorted_pcap).ts_ns
    assert ts[0] > ts.min() and (np.diff(ts) < 0).any()  # the first packet is not the earliest
    got = streamed([unsorted_pcap], chunk)
    assert_same(got, in_memory(unsorted_pcap))
    assert got[2].passes == 2  # the bins were counted again


def test_the_in_memory_numbers_agree_with_plain_pandas_and_numpy(unsorted_pcap):
    """The single-chunk path checked against the obvious computations on the whole columns."""
    cap = read_capture(unsorted_pcap)
    m, flows, _ = in_memory(unsorted_pcap)
    frame = cap.to_frame()
    ref = (
        frame[frame["ip_version"] > 0]
        .groupby(FLOW_KEY, sort=False)
        .agg(
            packets=("ts_ns", "size"),
            bytes=("wire_len", "sum"),
            first_ns=("ts_ns", "min"),
            last_ns=("ts_ns", "max"),
        )
        .reset_index()
    )
    assert (
        flows[["packets", "bytes", "first_ns", "last_ns"]].to_numpy().tolist()
        == ref[["packets", "bytes", "first_ns", "last_ns"]].to_numpy().tolist()
    )
    assert flows["sport"].tolist() == ref["sport"].tolist()
    sec = (cap.ts_ns - cap.ts_ns.min()) // NS
    assert m["per_second"]["packets"] == np.bincount(sec).tolist()
    assert m["per_second"]["bytes"] == np.bincount(sec, weights=cap.wire_len).astype(int).tolist()
    assert m["packet_size"]["median"] == float(np.median(cap.wire_len))
    assert m["packet_size"]["mean"] == float(np.mean(cap.wire_len))
    kinds = frame.groupby(["ip_version", "proto"]).size()
    assert sorted(p["packets"] for p in m["protocols"]) == sorted(kinds.tolist())
    started = np.bincount(
        (ref["first_ns"].to_numpy() - cap.ts_ns.min()) // NS,
        minlength=len(m["per_second"]["second"]),
    )
    assert m["per_second"]["flows_started"] == started.tolist()


@pytest.mark.parametrize("chunk", [1, 5, 700, 1 << 20])
def test_hash_collisions_are_grouped_exactly_across_chunks(unsorted_pcap, monkeypatch, chunk):
    exact = in_memory(unsorted_pcap)
    monkeypatch.setattr(metrics_module, "NATIVE_FLOWS", False)  # the numpy grouping's hashes
    real = metrics_module.flow_hash
    monkeypatch.setattr(metrics_module, "flow_hash", lambda keys: real(keys) & np.uint64(3))
    assert (
        len(
            np.unique(
                real({k: getattr(read_capture(unsorted_pcap), k) for k in FLOW_KEY}) & np.uint64(3)
            )
        )
        <= 4
    )  # 160 flows share 4 hashes
    got = streamed([unsorted_pcap], chunk)
    assert len(got[1]) == len(exact[1]) == 160
    assert_same(got, exact)


@pytest.mark.parametrize("chunk", [1, 700, 1 << 20])
def test_the_native_flow_table_equals_the_numpy_one(unsorted_pcap, tmp_path, chunk):
    if metrics_module._flow_library() is None:
        skip_or_fail("the loaded libntg has no flow table (built before it): rebuild it")
    mixed = tmp_path / "mixed.pcap"
    write_pcap(mixed, 20_000, gap_ns=1000, jitter_ns=3000, flows=2000, seed=7)
    for path in (unsorted_pcap, mixed) if chunk > 1 else (unsorted_pcap,):
        native, numpy = FlowAccumulator(native=True), FlowAccumulator(native=False)
        assert native._native is not None and numpy._native is None
        for cap in iter_capture(path, chunk):
            native.add(cap)
            numpy.add(cap)
        a, b = native.columns(), numpy.columns()
        assert list(a) == list(b) and len(native) == len(numpy) > 0
        for k in a:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
        pd.testing.assert_frame_equal(native.table(), numpy.table())


@pytest.fixture(scope="module")
def rotated(tmp_path_factory):
    """A 10,000-packet capture and the files of `tcpdump -C 1` rotating it (1 MB each)."""
    if not shutil.which("tcpdump"):
        skip_or_fail(
            "tcpdump is not installed (apt-get install tcpdump): cannot make rotated files"
        )
    work = tmp_path_factory.mktemp("rotation")
    src = work / "in.pcap"
    write_pcap(src, 10_000, gap_ns=1_000_000, jitter_ns=2_000_000, flows=50)
    run = work / "run"
    run.mkdir()
    subprocess.run(
        [
            "tcpdump",
            "-Z",
            "root",
            "--time-stamp-precision=nano",
            "-r",
            str(src),
            "-w",
            str(run / "capture.pcap"),
            "-C",
            "1",
        ],
        check=True,
        capture_output=True,
    )
    files = run_capture_files(run)
    assert len(files) >= 3 and [f.name for f in files[:3]] == [
        "capture.pcap",
        "capture.pcap1",
        "capture.pcap2",
    ]
    return src, run, files


def test_rotated_files_are_one_capture(rotated):
    src, _, files = rotated
    counts = [len(read_capture(f)) for f in files]
    assert sum(counts) == 10_000
    want = in_memory(src)
    edges = np.cumsum(counts)
    for chunk in sorted(
        {1, 3, counts[0] - 1, counts[0], counts[0] + 1, int(edges[1]), int(edges[1]) + 1, 10_000}
    ):
        assert_same(streamed(files, chunk), want)


def test_a_run_folder_with_a_rotation_is_analysed_whole(rotated, tmp_path):
    src, run, files = rotated
    one = analyze(src, tmp_path / "one")
    whole = analyze(run, tmp_path / "rot", memory_limit=1 << 20)
    for key in (
        "packets",
        "bytes",
        "per_second",
        "flows",
        "steady",
        "warmup",
        "packet_size",
        "protocols",
        "mean_pps",
    ):
        assert whole[key] == one[key]
    assert [f["path"] for f in whole["capture"]["files"]] == [str(f.resolve()) for f in files]
    assert whole["capture"]["file_bytes"] == sum(f.stat().st_size for f in files)
    flows = [
        read_table(tmp_path / d, "flows").to_pandas().drop(columns=["run_id", "step"])
        for d in ("rot", "one")
    ]
    assert len(flows[0]) == whole["flows"]["count"] and flows[0].equals(flows[1])


def test_several_hosts_files_count_from_the_earliest_packet(tmp_path):
    """Two hosts' captures given later-first: bins from the earliest packet of both, flows in
    the order of the files given."""
    a, b = tmp_path / "host-a.pcap", tmp_path / "host-b.pcap"
    write_pcap(a, 1500, gap_ns=3_000_000, t0_ns=1_700_000_000_700_000_000, flows=30, seed=4)
    write_pcap(b, 1200, gap_ns=4_000_000, t0_ns=1_700_000_000_000_000_000, flows=30, seed=5)
    want = in_memory(concatenate([a, b], tmp_path / "both.pcap"))
    assert want[0]["first_ns"] == int(read_capture(b).ts_ns.min())
    for chunk in (1, 17, 1499, 1500, 1501, 4000):
        got = streamed([a, b], chunk)
        assert_same(got, want)
        assert got[2].passes == 1  # the earliest packet is b's first: seen before counting


@pytest.mark.parametrize("chunk", [1, 100, 3000])
def test_a_damaged_tail_gives_the_same_packets_and_problem(sorted_pcap, tmp_path, chunk):
    data = sorted_pcap.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) * 2 // 3] + b"\xff" * 40)
    want = in_memory(cut)
    got = streamed([cut], chunk)
    assert want[2] is not None and 0 < want[0]["packets"] < 3000
    assert_same(got, want)
    assert got[2].problem == (cut, want[2])


def test_a_damaged_file_among_several_is_named(sorted_pcap, tmp_path):
    data = sorted_pcap.read_bytes()
    (tmp_path / "a.pcap").write_bytes(data)
    (tmp_path / "b.pcap").write_bytes(data[: len(data) // 2 + 3])
    doc = analyze([tmp_path / "a.pcap", tmp_path / "b.pcap"], tmp_path / "out")
    prob = doc["capture_problem"]
    assert prob["file"] == str((tmp_path / "b.pcap").resolve())
    assert doc["packets"] == 3000 + prob["packets_read"]
    assert [f["packets"] for f in doc["capture"]["files"]] == [3000, prob["packets_read"]]


DAY_NS = 86_400 * NS


def test_real_captures_stream_like_they_read_whole():
    """The shared real captures (ARP, ICMP, DNS, HTTP, IPv6 ...) at a few chunk sizes; one whose
    time stamps span years (97 million one-second bins) is left out."""
    root = os.environ.get("NTG_SHARED_DATA")
    if not root:
        skip_or_fail("NTG_SHARED_DATA not set: real captures live outside the repo")
    files = sorted(Path(root, "pcaps").glob("*.pcap"))
    assert files, f"no pcaps/*.pcap under NTG_SHARED_DATA={root}"
    checked = 0
    for path in files:
        ts = read_capture(path).ts_ns
        if len(ts) and int(ts.max()) - int(ts.min()) > DAY_NS:
            continue
        want = in_memory(path)
        for chunk in (1, 7, 100):
            assert_same(streamed([path], chunk), want)
        checked += 1
    assert checked >= 3


def test_the_run_folder_rule(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in [
        "capture.pcap10",
        "capture.pcap",
        "capture.pcap2",
        "capture.pcap1",
        "benign.pcap",
        "capture.pcap.bak",
        "capture.pcapng",
    ]:
        (run / name).write_bytes(b"")
    assert [p.name for p in run_capture_files(run)] == [
        "capture.pcap",
        "capture.pcap1",
        "capture.pcap2",
        "capture.pcap10",
    ]
    numbered = tmp_path / "w"
    (numbered / "captures").mkdir(parents=True)
    for name in ["host-b.pcap", "host-a.pcapng", "x-2026.pcap9", "x-2026.pcap10", "notes.txt"]:
        (numbered / "captures" / name).write_bytes(b"")
    assert [p.name for p in run_capture_files(numbered)] == [
        "host-a.pcapng",
        "host-b.pcap",
        "x-2026.pcap9",
        "x-2026.pcap10",
    ]
    (numbered / "capture.pcap0").write_bytes(b"")
    with pytest.raises(CaptureError, match="both capture.pcap0 and captures/"):
        run_capture_files(numbered)
    assert run_capture_files(tmp_path) == []


def test_reused_chunks_hold_the_same_packets_in_one_buffer(sorted_pcap):
    fresh = [c.ts_ns.copy() for c in iter_capture(sorted_pcap, 700)]
    reused, bases = [], []
    for c in iter_capture(sorted_pcap, 700, reuse=True):
        reused.append(c.ts_ns.copy())
        bases.append(c.ts_ns.base if c.ts_ns.base is not None else c.ts_ns)
    assert [a.tolist() for a in reused] == [a.tolist() for a in fresh] and len(fresh) == 5
    assert all(b is bases[0] for b in bases)


def test_per_second_and_traffic_metrics_keep_their_api(sorted_pcap):
    cap = read_capture(sorted_pcap)
    flows = flow_table(cap)
    bins = per_second(cap, flows)
    assert bins["packets"].sum() == len(cap) and bins["flows_started"].sum() == len(flows)
    assert traffic_metrics(cap) == traffic_metrics(cap, flows)


def test_cli_takes_several_files_a_glob_and_a_memory_limit(rotated, tmp_path, capsys):
    _, run, files = rotated
    assert (
        cli_main(
            [
                "analyze",
                *map(str, files),
                "--out",
                str(tmp_path / "a"),
                "-q",
                "--memory-limit",
                "1M",
            ]
        )
        == 0
    )
    assert (
        cli_main(["analyze", str(run / "capture.pcap*"), "--out", str(tmp_path / "b"), "-q"]) == 0
    )
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in "ab")
    assert a["packets"] == b["packets"] == 10_000 and len(b["capture"]["files"]) == len(files)
    with pytest.raises(SystemExit):
        cli_main(["analyze", str(files[0]), "--memory-limit", "12Q"])
    assert "unknown size unit 'Q'" in capsys.readouterr().err


def test_sizes_parse_with_binary_and_decimal_units():
    assert parse_size_bytes("512M") == parse_size_bytes("512MiB") == 512 * 2**20
    assert parse_size_bytes("1.5G") == 3 * 2**29
    assert parse_size_bytes("2GB") == 2 * 10**9 and parse_size_bytes("64k") == 65536
    assert parse_size_bytes(4096) == parse_size_bytes("4096") == 4096
    for bad in ("12Q", "1.5", "M", True, 1.0):
        with pytest.raises(ValueError):
            parse_size_bytes(bad)


def test_progress_reports_bytes_and_packets(sorted_pcap, monkeypatch):
    monkeypatch.setattr("analysis.stream.PROGRESS_EVERY_S", 0.0)
    lines: list[str] = []
    read_stream([sorted_pcap], chunk=1000, progress=lines.append)
    assert len(lines) == 3 and lines[-1].endswith("(100%), 3,000 packets")
    assert re.match(r"read \d+ of \d+ MB \(\d+%\), 1,000 packets", lines[0])


# ---- a capture twice the memory its process may use -------------------------------------------

MAPPED_CHILD = """
import sys
from analysis.capture import iter_capture
def rss_file():
    return [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("RssFile:")][0]
base = peak = rss_file()
for cap in iter_capture(sys.argv[1], 1 << 16, reuse=True):
    peak = max(peak, rss_file())
print(peak - base)
"""


def test_the_pages_of_a_capture_once_read_leave_the_process(tmp_path):
    """The reader maps the file; pages behind the cursor are dropped from the mapping
    (pcapread.c, pr_release), so the process's resident file pages stay a window, not the file
    (what `time -v` or top show as its memory)."""
    pcap = tmp_path / "mapped.pcap"
    size = write_pcap(pcap, 600_000)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.run(
        [sys.executable, "-c", MAPPED_CHILD, str(pcap)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    grown = int(child.stdout.split()[-1])
    assert grown < size / 4, (
        f"{grown / 2**20:.0f} MiB of a {size / 2**20:.0f} MiB file stayed mapped"
    )


LIMIT = 192 * 2**20  # the cgroup's hard limit: interpreter, libraries, chunks, flows, plots
CHUNK_BUDGET = 32 * 2**20  # analyze(memory_limit=...)

CHILD = """
import json, sys, threading, time
from analysis import analyze
peak = [0]
def rss_anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
def sample():
    while True:
        peak[0] = max(peak[0], rss_anon())
        time.sleep(0.005)
threading.Thread(target=sample, daemon=True).start()
doc = analyze(sys.argv[1], sys.argv[2], memory_limit=int(sys.argv[3]))
peak[0] = max(peak[0], rss_anon())
hwm = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(json.dumps({"packets": doc["packets"], "captured_bytes": doc["captured_bytes"],
                  "peak_rss_anon": peak[0], "vm_hwm": hwm}))
"""


def memory_cgroup(tmp_name: str) -> Path:
    """A new cgroup v1 memory group below this process's own; skips (fails in CI) when there
    is none that can be made."""
    root = Path("/sys/fs/cgroup/memory")
    own = next(
        (
            line.split(":", 2)[2].strip()
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.split(":")[1] == "memory"
        ),
        None,
    )
    if not (root / "memory.limit_in_bytes").is_file() or own is None:
        skip_or_fail("no cgroup v1 memory controller at /sys/fs/cgroup/memory")
    group = root / own.lstrip("/") / tmp_name
    try:
        group.mkdir()
    except OSError as exc:
        skip_or_fail(f"cannot make a memory cgroup ({exc}); run as root")
    return group


def test_a_capture_twice_the_allowed_memory_is_analysed_within_it(tmp_path):
    if not shutil.which("capinfos"):
        skip_or_fail("capinfos is not installed (apt-get install wireshark-common)")
    pcap = tmp_path / "big.pcap"
    size = write_pcap(pcap, 1_150_000, gap_ns=10_000, flows=20_000)
    assert size >= 2 * LIMIT
    counted = subprocess.run(
        ["capinfos", "-c", "-M", "-T", "-r", str(pcap)], check=True, capture_output=True, text=True
    ).stdout.split()
    with open(pcap, "rb") as f:  # out of the page cache: the child's reads
        os.fsync(f.fileno())  # are charged to its own cgroup
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    group = memory_cgroup(f"ntg-stream-test-{os.getpid()}")
    try:
        (group / "memory.limit_in_bytes").write_text(str(LIMIT))
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        child = subprocess.run(
            [
                "sh",
                "-c",
                f'echo $$ > {group}/cgroup.procs && exec "$0" "$@"',
                sys.executable,
                "-c",
                CHILD,
                str(pcap),
                str(tmp_path / "report"),
                str(CHUNK_BUDGET),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        max_usage = int((group / "memory.max_usage_in_bytes").read_text())
        failcnt = int((group / "memory.failcnt").read_text())
    finally:
        group.rmdir()
    assert child.returncode == 0, (
        f"exit {child.returncode} (-9: killed at the limit)\n{child.stderr}"
    )
    got = json.loads(child.stdout.splitlines()[-1])
    assert got["packets"] == int(counted[-1]) == 1_150_000
    assert max_usage <= LIMIT and got["peak_rss_anon"] < LIMIT
    assert failcnt > 0  # the file did not fit: the kernel reclaimed its pages to hold the limit
    print(
        f"\ncapture {size / 2**20:.0f} MiB, cgroup limit {LIMIT / 2**20:.0f} MiB: peak charged "
        f"{max_usage / 2**20:.0f} MiB (anon + page cache; limit hit {failcnt} times), peak "
        f"RssAnon {got['peak_rss_anon'] / 2**20:.0f} MiB, VmHWM {got['vm_hwm'] / 2**20:.0f} MiB"
    )
