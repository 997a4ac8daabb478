"""Bounded-memory ingest benchmark: in-memory read_capture against the streaming read, and the full
analysis in memory against the streaming one, on one generated capture in one run; then the
streaming analysis in a child process whose memory a cgroup bounds to less than half the file.

Writes one synthetic nanosecond pcap (benchmarks/pcapgen.py; default 10 million packets, 3.7 GB)
and measures, best of --repeat after one untimed run:

- in memory: `read_capture` (the whole file's columns), then read_capture + flow_table +
  traffic_metrics;
- streaming, same process: `iter_capture` at analysis.stream's default chunk, then read_stream
  (metrics and flow table from chunks); the two analyses must give identical metrics;
- bounded (root, cgroup v1): a child in a memory cgroup of --bound bytes (default 512 MiB, the
  file is 7× that) runs the streaming read and analysis with the file in the page cache (warm,
  as the in-memory numbers are), once more after evicting the file from the page cache (cold:
  its pages are then read from disk and charged to the child's cgroup), and read_capture
  once (it needs more than the bound: the kernel is expected to kill it). Peak memory: the
  child's sampled RssAnon (every 5 ms) and VmHWM, the cgroup's max_usage_in_bytes and failcnt;
- the same child without a bound runs read_capture and the streaming read: the like-for-like
  baseline of the bounded child (same process start, same sampling thread).

Prints a Markdown table and writes benchmarks/out/stream.json. Results are written, not asserted.

    python benchmarks/bench_stream.py [--packets N] [--bound 512M] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.capture import iter_capture, read_capture
from analysis.metrics import flow_table, traffic_metrics
from analysis.stream import DEFAULT_MEMORY_LIMIT, chunk_packets, read_stream
from benchmarks.pcapgen import write_pcap
from ntgcore.units import parse_size_bytes

CHILD = r"""
import json, sys, threading, time
from analysis.capture import iter_capture, read_capture
from analysis.stream import chunk_packets, read_stream
path, mode, repeat, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
peak = [0]
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
def sample():
    while True:
        peak[0] = max(peak[0], status("RssAnon"))
        time.sleep(0.005)
threading.Thread(target=sample, daemon=True).start()
def streaming_read():
    n = 0
    for cap in iter_capture(path, chunk_packets(limit), reuse=True):
        n += len(cap)
    return n
def analysis():
    s = read_stream([path], limit)
    flows = s.totals.flow_table()
    return s.totals.metrics(flows)["packets"]
out = {}
jobs = {"warm": [("stream_read", streaming_read), ("stream_analysis", analysis)],
        "unbounded": [("read_capture", lambda: len(read_capture(path))),
                      ("stream_read", streaming_read)],
        "cold": [("stream_analysis", analysis)],
        "in_memory": [("read_capture", lambda: len(read_capture(path)))]}[mode]
for name, fn in jobs:
    runs = []
    if mode in ("warm", "unbounded"):
        fn()  # untimed, as in the parent: the first call pays for fresh memory
    for _ in range(repeat if mode in ("warm", "unbounded") else 1):
        t = time.perf_counter()
        n = fn()
        runs.append(time.perf_counter() - t)
    out[name] = {"packets": n, "seconds": min(runs), "runs_seconds": runs}
peak[0] = max(peak[0], status("RssAnon"))
out["peak_rss_anon"] = peak[0]
out["vm_hwm"] = status("VmHWM")
print(json.dumps(out))
"""


def best(fn, repeat: int) -> tuple[float, float, list[float], object]:
    """(best seconds, first-call seconds, timed runs, result) of REPEAT runs after one untimed."""
    t = time.perf_counter()
    result = fn()
    first = time.perf_counter() - t
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return min(runs), first, runs, result


def memory_cgroup(name: str) -> Path | None:
    """A new cgroup v1 memory group below this process's own, or None."""
    root = Path("/sys/fs/cgroup/memory")
    own = next(
        (
            line.split(":", 2)[2].strip()
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.split(":")[1] == "memory"
        ),
        None,
    )
    if own is None or not (root / "memory.limit_in_bytes").is_file():
        return None
    group = root / own.lstrip("/") / name
    try:
        group.mkdir()
    except OSError:
        return None
    return group


def evict(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def bounded(path: Path, mode: str, bound: int, limit: int, repeat: int) -> dict:
    """Run CHILD in MODE in a fresh memory cgroup of BOUND bytes (mode `unbounded`: in none,
    the same child otherwise, for a like-for-like baseline)."""
    group = None
    if mode != "unbounded":
        group = memory_cgroup(f"ntg-bench-stream-{os.getpid()}-{mode}")
        if group is None:
            return {"skipped": "no writable cgroup v1 memory controller (run as root)"}
    try:
        enter = f"echo $$ > {group}/cgroup.procs && " if group else ""
        if group:
            (group / "memory.limit_in_bytes").write_text(str(bound))
        if mode == "cold":
            evict(path)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        t = time.perf_counter()
        p = subprocess.run(
            [
                "sh",
                "-c",
                enter + 'exec "$0" "$@"',
                sys.executable,
                "-c",
                CHILD,
                str(path),
                mode,
                str(repeat),
                str(limit),
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        wall = time.perf_counter() - t
        out = json.loads(p.stdout.splitlines()[-1]) if p.returncode == 0 else {}
        out.update(
            returncode=p.returncode,
            wall_seconds=wall,
            stderr_tail=p.stderr[-300:] if p.returncode else "",
        )
        if group:
            out.update(
                cgroup_max_usage=int((group / "memory.max_usage_in_bytes").read_text()),
                cgroup_failcnt=int((group / "memory.failcnt").read_text()),
            )
        return out
    finally:
        if group:
            group.rmdir()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=10_000_000)
    ap.add_argument(
        "--bound",
        type=parse_size_bytes,
        default=512 * 2**20,
        help="the child's cgroup memory limit (default 512M)",
    )
    ap.add_argument(
        "--memory-limit",
        type=parse_size_bytes,
        default=DEFAULT_MEMORY_LIMIT,
        help="analysis.stream's memory_limit in the child (default 256M)",
    )
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the generated capture")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "stream.json")
    args = ap.parse_args()

    need = 420 * args.packets
    if shutil.disk_usage(args.dir).free < need:
        raise SystemExit(f"{args.dir}: not enough free space for about {need / 1e9:.1f} GB")
    work = Path(tempfile.mkdtemp(prefix="ntg-bench-stream-", dir=args.dir))
    path = work / "big.pcap"
    rows: list[dict] = []
    try:
        t = time.perf_counter()
        size = write_pcap(path, args.packets)
        gen_s = time.perf_counter() - t
        print(
            f"wrote {args.packets:,} packets, {size / 1e9:.2f} GB in {gen_s:.1f} s", file=sys.stderr
        )
        n = args.packets

        def row(
            name: str, where: str, seconds: float, first: float | None, runs: list[float], **extra
        ) -> None:
            rows.append(
                {
                    "case": name,
                    "where": where,
                    "packets": n,
                    "seconds": seconds,
                    "pps": n / seconds,
                    "first_seconds": first,
                    "runs_seconds": runs,
                    **extra,
                }
            )
            print(f"{name} ({where}): {n / seconds:,.0f} packets/s", file=sys.stderr)

        def stream_read() -> int:
            k = 0
            for cap in iter_capture(path, chunk_packets(args.memory_limit), reuse=True):
                k += len(cap)
            return k

        def in_memory() -> dict:
            cap = read_capture(path)
            return traffic_metrics(cap, flow_table(cap))

        def streaming() -> dict:
            s = read_stream([path], args.memory_limit)
            return s.totals.metrics(s.totals.flow_table())

        s, first, runs, got = best(lambda: len(read_capture(path)), args.repeat)
        assert got == n
        row("read_capture (whole file in memory)", "this process", s, first, runs)
        s, first, runs, got = best(stream_read, args.repeat)
        assert got == n
        row(
            f"iter_capture, chunks of {chunk_packets(args.memory_limit):,}",
            "this process",
            s,
            first,
            runs,
        )
        s, first, runs, m_mem = best(in_memory, args.repeat)
        row(
            "analysis in memory (read_capture + flow_table + traffic_metrics)",
            "this process",
            s,
            first,
            runs,
        )
        s, first, runs, m_stream = best(streaming, args.repeat)
        identical = json.dumps(m_mem, sort_keys=True) == json.dumps(m_stream, sort_keys=True)
        row(
            "analysis streaming (read_stream)",
            "this process",
            s,
            first,
            runs,
            identical_metrics=identical,
        )

        child = {
            mode: bounded(path, mode, args.bound, args.memory_limit, args.repeat)
            for mode in ("unbounded", "warm", "cold", "in_memory")
        }
        bound_text = f"child, cgroup {args.bound / 2**20:.0f} MiB"
        for mode, key, name, where in (
            ("unbounded", "read_capture", "read_capture (whole file in memory)", "child, no bound"),
            ("unbounded", "stream_read", "iter_capture", "child, no bound"),
            ("warm", "stream_read", "iter_capture", bound_text),
            ("warm", "stream_analysis", "analysis streaming", bound_text),
            ("cold", "stream_analysis", "analysis streaming, file not cached", bound_text),
        ):
            c = child[mode]
            if key in c:
                extra = {
                    k: c[k]
                    for k in ("peak_rss_anon", "vm_hwm", "cgroup_max_usage", "cgroup_failcnt")
                    if k in c
                }
                row(name, where, c[key]["seconds"], None, c[key]["runs_seconds"], **extra)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    base = rows[0]["pps"]
    child_base = next((r["pps"] for r in rows if r["where"] == "child, no bound"), None)
    for r in rows:
        r["over_read_capture"] = r["pps"] / base
        if child_base and r["where"].startswith("child"):
            r["over_child_read_capture"] = r["pps"] / child_base
    result = {
        "packets": args.packets,
        "file_bytes": size,
        "bound_bytes": args.bound,
        "memory_limit": args.memory_limit,
        "chunk_packets": chunk_packets(args.memory_limit),
        "file_over_bound": size / args.bound,
        "generate_seconds": gen_s,
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "results": rows,
        "children": child,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    print(
        f"\n{args.packets:,}-packet pcap, {size / 2**30:.2f} GiB; bound {args.bound / 2**20:.0f} MiB "
        f"({size / args.bound:.1f}× smaller than the file), memory_limit "
        f"{args.memory_limit / 2**20:.0f} MiB = chunks of {chunk_packets(args.memory_limit):,} packets\n"
    )
    print(
        "| case | where | seconds (best) | packets/s | ÷ read_capture (this process) | "
        "÷ read_capture (child) | peak RssAnon | cgroup peak |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        anon = f"{r['peak_rss_anon'] / 2**20:,.0f} MiB" if "peak_rss_anon" in r else "–"
        cg = (
            f"{r['cgroup_max_usage'] / 2**20:,.0f} MiB ({r['cgroup_failcnt']:,} reclaims)"
            if "cgroup_max_usage" in r
            else "–"
        )
        vs_child = f"{r['over_child_read_capture']:.2f}" if "over_child_read_capture" in r else "–"
        print(
            f"| {r['case']} | {r['where']} | {r['seconds']:.3f} | {r['pps'] / 1e6:,.1f} M | "
            f"{r['over_read_capture']:.2f} | {vs_child} | {anon} | {cg} |"
        )
    im = child["in_memory"]
    print(
        f"\nread_capture in the same cgroup: exit {im.get('returncode')} "
        f"({'killed by the kernel at the limit' if im.get('returncode') == -9 else 'see JSON'}); "
        f"streaming and in-memory metrics identical: {rows[3].get('identical_metrics')}"
    )
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
