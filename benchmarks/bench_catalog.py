"""Results catalogue benchmark: `testbed results list|compare|query` over 1,000 run folders.

Generates N run folders (default 1,000) of one live comparison scenario (seed 001's shape, as
`scenarios/seed001-comparison.yaml` runs it: two generators, each at top speed for 60 s and at 3
offered loads for 10 s) with their run tables written by `analysis.tables.write_table`: manifest.json
(status completed, scenario sha256, schema_version), and tables/run, steps, per_second (one row per
second of every step) and resources (the monitor's process rows at 1 Hz) of realistic size and
values: the rates, CPU and memory of a real comparison run on this machine (flowengine about
395 kpps, Scapy about 5.7 kpps) with a few per cent of noise between repetitions.

Each command runs as the real command line in a child process (`python -m testbed results ...`),
so the times include the interpreter's start and the imports (measured alone as `startup`: `testbed
--version`). Cold: the run folders' files evicted from the page cache first (posix_fadvise
DONTNEED on each file, so the rest of the machine keeps its cache); warm: the median of --runs runs
right after. Writes
benchmarks/out/catalog.json and prints a Markdown table; results are written, not asserted.

    python benchmarks/bench_catalog.py [--runs-folders 1000] [--runs 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.catalog import Catalog
from analysis.tables import write_table
from ntgcore.runfolder import SCHEMA_VERSION

SCENARIO = "seed001-comparison"
SHA = hashlib.sha256(b"bench_catalog: one scenario, repeated").hexdigest()
# per generator: top-speed packets per second, CPU % mean/max, RSS bytes (a real run's numbers)
GENERATORS = {
    "native": (394_987.0, 50.0, 100.0, 1_818_624),
    "scapy": (5_703.0, 33.0, 99.0, 68_689_920),
}
TOPSPEED_S, LOAD_S, LOADS_KBPS = 60, 10, (500, 1000, 1500)
FRAME = 60


def make_run(root: Path, i: int, rng: random.Random) -> Path:
    created = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=7 * i)
    run_id = f"{created:%Y%m%dT%H%M%SZ}-{SCENARIO}"
    folder = root / run_id
    folder.mkdir(parents=True)
    manifest = {
        "manifest_version": 1,
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "status": "completed",
        "created_utc": created.isoformat().replace("+00:00", "Z"),
        "finished_utc": (created + timedelta(seconds=170)).isoformat().replace("+00:00", "Z"),
        "scenario": {"name": SCENARIO, "source": f"/srv/scenarios/{SCENARIO}.yaml", "sha256": SHA},
        "seed": 1,
        "mode": "live",
        "method": "comparison",
        "host": {
            "hostname": "vm",
            "kernel": "6.18",
            "machine": "x86_64",
            "cpus": 2,
            "python": "3.11.7",
        },
        "git": {"revision": "4e732eeb1a1d1e802a2e879ab1682bf49128edb8", "dirty": False},
        "tools": {"testbed": "0.1.0"},
        "steps": [],
    }
    steps, seconds, resources = [], [], []
    for gen, (pps, cpu, cpu_max, rss) in GENERATORS.items():
        plan = [(gen, "topspeed", pps * rng.gauss(1, 0.03), TOPSPEED_S)]
        plan += [(f"{gen}-load-{k}kBps", "load", k * 1000 / FRAME, LOAD_S) for k in LOADS_KBPS]
        for name, kind, rate, secs in plan:
            manifest["steps"].append(_step_entry(name, kind, gen, run_id, created))
            per = [
                max(0, int(rate * rng.gauss(1, 0.02 if kind == "topspeed" else 0.001)))
                for _ in range(secs)
            ]
            if kind == "topspeed":
                per[0] = int(per[0] * 0.4)  # a warm-up second
            mean = statistics.fmean(per)
            std = statistics.pstdev(per)
            steady = per[1:] if kind == "topspeed" else per
            c = cpu * rng.gauss(1, 0.05) * (1 if kind == "topspeed" else rate * FRAME / 25e6)
            packets = sum(per)
            steps.append(
                {
                    "run_id": run_id,
                    "step": name,
                    "kind": kind,
                    "generator": gen,
                    "status": "completed",
                    "packets": packets,
                    "bytes": packets * FRAME,
                    "duration_s": float(secs),
                    "mean_pps": mean,
                    "std_pps": std,
                    "variance_pct": 100 * std / mean if mean else None,
                    "warmup_s": 1 if kind == "topspeed" else 0,
                    "steady_mean_pps": statistics.fmean(steady),
                    "steady_variance_pct": 100
                    * statistics.pstdev(steady)
                    / statistics.fmean(steady),
                    "average_packet_size": float(FRAME),
                    "throughput_bps": mean * FRAME * 8,
                    "flows": 1,
                    "sent": packets,
                    "wire": packets,
                    "dut": None,
                    "loss_rate": 0.0,
                    "cpu_mean": c,
                    "cpu_max": min(cpu_max, c * 1.6),
                    "rss_mean": rss * rng.gauss(1, 0.01),
                    "rss_max": rss * rng.gauss(1.02, 0.01),
                }
            )
            seconds += [
                {
                    "run_id": run_id,
                    "step": name,
                    "second": s,
                    "packets": p,
                    "bytes": p * FRAME,
                    "flows_started": 1 if s == 0 else 0,
                    "partial": False,
                }
                for s, p in enumerate(per)
            ]
            for t in range(secs + 1):
                for label, pname, r in (
                    (f"gen:{gen}:0", gen, rss),
                    ("capture", "tcpdump", 72_986_624),
                ):
                    resources.append(
                        {
                            "run_id": run_id,
                            "step": name,
                            "t": t + 0.0002,
                            "kind": "process",
                            "label": label,
                            "pid": 1000 + i,
                            "tid": None,
                            "name": pname,
                            "cpu_percent": c * rng.gauss(1, 0.1)
                            if label.startswith("gen")
                            else 2.0,
                            "rss_bytes": int(r),
                            "mem_percent": r / 24e9 * 100,
                        }
                    )
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    write_table(
        folder,
        "run",
        [
            {
                "run_id": run_id,
                "scenario": SCENARIO,
                "scenario_sha256": SHA,
                "method": "comparison",
                "status": "completed",
                "created_utc": manifest["created_utc"],
                "finished_utc": manifest["finished_utc"],
                "seed": 1,
                "hostname": "vm",
                "cpus": 2,
                "schema_version": SCHEMA_VERSION,
            }
        ],
    )
    write_table(folder, "steps", steps)
    write_table(folder, "per_second", seconds)
    write_table(folder, "resources", resources)
    return folder


def _step_entry(name: str, kind: str, gen: str, run_id: str, created: datetime) -> dict:
    """A step of the manifest as the live runner writes it (about 3 kB of JSON: a real
    comparison run's manifest is 27 kB for 6 steps), so that reading manifests costs what it does."""
    stamp = created.isoformat().replace("+00:00", "Z")
    counters = {
        "rx_packets": 0,
        "rx_bytes": 0,
        "rx_dropped": 0,
        "tx_packets": 797441,
        "tx_bytes": 47846460,
        "tx_dropped": 0,
    }
    params = {
        "generator": gen,
        **({"offered_kBps": int(name.split("-")[-1][:-4])} if kind == "load" else {}),
    }
    return {
        "name": name,
        "kind": kind,
        "params": params,
        "dir": name,
        "started_utc": stamp,
        "status": "completed",
        "generators_started_utc": stamp,
        "monitor": {
            "hz": 1.0,
            "ticks": 61,
            "late_ticks": 0,
            "rows": 1159,
            "wall_s": 61.2,
            "sampler_cpu_s": 0.09,
            "overhead_percent": 0.147,
            "errors": [],
            "csv": f"/srv/results/{run_id}/{name}/samples.csv",
        },
        "capture": {
            "captured": 797441,
            "received_by_filter": 797441,
            "dropped_by_kernel": 0,
            "dropped_by_interface": None,
        },
        "wire": {
            "gen:gen0": counters,
            "tap:tap0": {**counters, "rx_packets": 797441, "tx_packets": 0},
        },
        "generators": {
            gen: {
                "name": "flowengine" if gen == "native" else gen,
                "at": "gen:gen0",
                "pace": "topspeed" if kind == "topspeed" else "realtime",
                "status": "interrupted",
                "packets_attempted": 797441,
                "packets_sent": 797441,
                "packets_failed": 0,
                "bytes_attempted": 47846460,
                "bytes_sent": 47846460,
                "bytes_failed": 0,
            }
        },
        "loss": {
            "sent": 797441,
            "wire": 797441,
            "dut": None,
            "dut_dropped": None,
            "lost_on_wire": 0,
            "loss_rate": 0.0,
            "captured": 797441,
            "capture_dropped": 0,
        },
        "commands": [
            {
                "name": f"gen:{gen}",
                "argv": [
                    "ip",
                    "netns",
                    "exec",
                    "ntg-gen",
                    "flowengine",
                    "live",
                    f"/srv/results/{run_id}/{name}/gen-{gen}/session.ntg",
                    "--iface",
                    "gen0",
                    "--seed",
                    "1",
                ],
                "started_utc": stamp,
                "ended_utc": stamp,
                "exit_code": 0,
                "status": "exit status 0",
                "pid": 14080,
            }
        ]
        * 3,
        "finished_utc": stamp,
    }


def make_runs(root: Path, n: int, seed: int = 1) -> list[Path]:
    rng = random.Random(seed)
    return [make_run(root, i, rng) for i in range(n)]


def timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "testbed", *argv], capture_output=True, text=True, env=env, cwd=ROOT
    )
    return time.perf_counter() - t, p


def evict(root: Path) -> bool:
    """The run folders' files out of the page cache (posix_fadvise DONTNEED on each: only these
    files, so other work on the machine keeps its cache)."""
    os.sync()
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--runs-folders", type=int, default=1000, help="how many run folders (default 1000)"
    )
    ap.add_argument("--runs", type=int, default=5, help="warm runs per command (median)")
    ap.add_argument(
        "--keep", metavar="DIR", help="generate into DIR and keep it (default: a temporary folder)"
    )
    args = ap.parse_args()
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="bench-catalog-")
    root = Path(args.keep or tmp.name) / "results"
    t = time.perf_counter()
    make_runs(root, args.runs_folders)
    generate_s = time.perf_counter() - t
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    plots = Path(tmp.name if tmp else args.keep) / "plots"
    commands = {
        "startup (testbed --version)": ["--version"],
        "results list": ["results", "list", str(root)],
        "results compare --no-plots": ["results", "compare", str(root), "--no-plots"],
        "results compare --by step --no-plots": [
            "results",
            "compare",
            str(root),
            "--by",
            "step",
            "--no-plots",
        ],
        "results compare (with 4 PNG plots)": [
            "results",
            "compare",
            str(root),
            "--plots",
            str(plots),
        ],
        "results query (per_second: avg per generator)": [
            "results",
            "query",
            "SELECT s.generator, avg(p.packets) AS pps, count(*) AS seconds FROM per_second p "
            "JOIN steps s USING (run_id, step) WHERE s.kind = 'topspeed' GROUP BY ALL ORDER BY 1",
            str(root),
        ],
        "results query (resources: max RSS per generator)": [
            "results",
            "query",
            "SELECT split_part(label, ':', 2) AS generator, max(rss_bytes) AS rss "
            "FROM resources WHERE label LIKE 'gen:%' GROUP BY ALL ORDER BY 1",
            str(root),
        ],
    }
    rows = []
    load_before = os.getloadavg()
    for name, argv in commands.items():
        cold = None
        if argv != ["--version"] and evict(root):
            cold, p = timed(argv)
            assert p.returncode == 0, (name, p.stdout[-2000:], p.stderr[-2000:])
        warm = []
        for _ in range(args.runs):
            s, p = timed(argv)
            assert p.returncode == 0, (name, p.stdout[-2000:], p.stderr[-2000:])
            warm.append(s)
        rows.append(
            {
                "command": name,
                "argv": argv,
                "cold_s": cold,
                "warm_s": statistics.median(warm),
                "warm_all_s": warm,
                "stdout_lines": len(p.stdout.splitlines()),
            }
        )
    # the catalogue alone, in this process (no interpreter start, no imports): a fresh Catalog each time
    api = {
        "Catalog(): find and read 1,000 manifests": lambda: Catalog([root]),
        "Catalog().list()": lambda: Catalog([root]).list(),
        "Catalog().compare()": lambda: Catalog([root]).compare(),
        "Catalog().compare(by='step')": lambda: Catalog([root]).compare(by="step"),
        "Catalog().query(per_second join steps)": lambda: Catalog([root]).query(
            commands["results query (per_second: avg per generator)"][2]
        ),
    }
    for name, call in api.items():
        warm = []
        for _ in range(args.runs):
            t = time.perf_counter()
            call()
            warm.append(time.perf_counter() - t)
        rows.append(
            {
                "command": f"in process: {name}",
                "argv": None,
                "cold_s": None,
                "warm_s": statistics.median(warm),
                "warm_all_s": warm,
                "stdout_lines": None,
            }
        )
    doc = {
        "benchmark": "catalog",
        "date_utc": datetime.now(UTC).isoformat(),
        "run_folders": args.runs_folders,
        "generate_s": generate_s,
        "bytes": size,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "host": {
            "node": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "kernel": platform.release(),
        },
        "results": rows,
    }
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "catalog.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(
        f"{args.runs_folders:,} run folders ({size / 1e6:.0f} MB, generated in {generate_s:.0f} s); load "
        f"average {doc['loadavg_before'][0]:.1f} before, {doc['loadavg_after'][0]:.1f} after\n"
    )
    print(f"| command | cold s | warm s (median of {args.runs}) |")
    print("|---|---:|---:|")
    for r in rows:
        cold = f"{r['cold_s']:.2f}" if r["cold_s"] is not None else "–"
        print(f"| {r['command']} | {cold} | {r['warm_s']:.2f} |")
    print(f"\nwritten: {out / 'catalog.json'}")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
