#!/usr/bin/env python3
"""Issue 12: `flowengine match` against DPDK rte_hash, random lookups over 4M flows, all hits.

Both run in the same invocation, one after the other, pinned to the same core (taskset -c CPU):
- rte_hash: benchmarks/native/rte_hash_bench.c, built here with pkg-config libdpdk (Debian
  libdpdk-dev, installed by `./bootstrap.sh bench`); skipped with a note when it is missing.
  4M keys inserted, then a feed of --packets keys drawn uniformly among them, looked up one by one
  (rte_hash_lookup), 64 at a time (rte_hash_lookup_bulk) and 64 at a time with data
  (rte_hash_lookup_bulk_data); each hit adds to a per-flow counter. Key lengths 16 (a packed IPv4
  5-tuple) and 40 (our struct match_key, the bytes our tables hash and compare). Hash: rte_hash_crc
  (CRC32C), as our default crc32c.
- ours: `flowengine match --feed uniform:4194304 --warmup` per structure (the sizes of
  bench_match.py), the same feed shape and size. linear16 keeps IPv4 keys packed in 16 bytes
  (hashed as those 16 bytes): its like-for-like peer is rte_hash with 16-byte keys; the others
  hash and compare our 40-byte struct match_key, like rte_hash with 40-byte keys.
Each repeat runs rte_hash (both key lengths) and then every structure, so that a change of the
machine's load between repeats touches both sides. Reports, per structure, ours / rte_hash bulk
(40-byte keys; and 16-byte keys, DPDK's usual flow key) and the median of --repeat runs of each.

Results go to benchmarks/out/match_rte.json; a Markdown table goes to stdout.

--compare BIN runs another flowengine (e.g. the commit before) right after ours for each structure,
repeat by repeat, and reports it beside ours against the same rte_hash runs.

    python benchmarks/bench_match_rte.py [--repeat R] [--packets N] [--cpu C] [--bin PATH] [--compare PATH]
"""

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import OUT, REPO, find_binary
from bench_match import IPV4_ONLY, ODD_SIZES, RANDOM_FLOWS, RANDOM_SIZES, run

# the EAL arguments that start here without hugepages (docs/flow-match.md); -l: the core
EAL = ["--no-huge", "--no-pci", "-m", "512", "--no-shconf", "--no-telemetry", "--log-level=error"]
RTE_SOURCE = REPO / "benchmarks" / "native" / "rte_hash_bench.c"
RTE_KEYS = (16, 40)
RTE_RATES = ("single_mpps", "bulk_mpps", "bulk_data_mpps", "bulk_cpu_mpps")


def build_rte():
    """The rte_hash peer's binary in benchmarks/out, or (None, why) when DPDK is not installed."""
    if (
        not shutil.which("pkg-config")
        or subprocess.run(["pkg-config", "--exists", "libdpdk"]).returncode != 0
    ):
        return None, "pkg-config libdpdk not found (apt-get install libdpdk-dev pkg-config)"
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "libdpdk"], capture_output=True, text=True, check=True
    ).stdout.split()
    out = OUT / "rte_hash_bench"
    OUT.mkdir(parents=True, exist_ok=True)
    cc = shutil.which("cc") or shutil.which("gcc")
    r = subprocess.run(
        [cc, "-O2", "-Wall", "-o", str(out), str(RTE_SOURCE), *flags, "-march=native"],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        return None, f"building {RTE_SOURCE.name} failed: {r.stderr.strip()[-500:]}"
    return out, None


def run_rte(binary, cpu, keylen, packets):
    r = subprocess.run(
        [
            "taskset",
            "-c",
            str(cpu),
            str(binary),
            *EAL,
            "-l",
            str(cpu),
            "--",
            "--flows",
            str(RANDOM_FLOWS),
            "--packets",
            str(packets),
            "--keylen",
            str(keylen),
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise RuntimeError(f"rte_hash_bench exited {r.returncode}: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def median_by(runs, key):
    runs = sorted(runs, key=lambda r: r[key])
    best = dict(runs[len(runs) // 2])
    best[key + "_runs"] = [r[key] for r in runs]
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--packets", type=int, default=8_000_000)
    ap.add_argument("--cpu", type=int, default=0, help="the core both run on (taskset -c)")
    ap.add_argument("--hash", default="crc32c")
    ap.add_argument("--bin")
    ap.add_argument(
        "--compare", help="another flowengine binary, run after ours for each structure"
    )
    ap.add_argument(
        "--structs",
        default=",".join(
            [
                *RANDOM_SIZES,
                *(f"{k}:{v}" for k, v in ODD_SIZES.items() if k in ("linear", "linear16")),
            ]
        ),
        help="NAME or NAME:SIZE (default: bench_match.py's sizes, and linear and linear16 "
        "a little over 2^23, where the line is a modulo and not a mask)",
    )
    a = ap.parse_args()
    ours_bin = find_binary(a.bin)
    rte_bin, why = build_rte()
    results = {
        "machine": platform.node(),
        "cpu": platform.processor(),
        "core": a.cpu,
        "packets": a.packets,
        "flows": RANDOM_FLOWS,
        "repeat": a.repeat,
        "hash": a.hash,
        "eal": EAL,
        "rte_hash": {},
        "ours": [],
        "rte_hash_missing": why,
    }
    structs = a.structs.split(",")
    sizes = {s: s.split(":")[1] if ":" in s else RANDOM_SIZES[s] for s in structs}
    rte_runs = {k: [] for k in (RTE_KEYS if rte_bin else ())}
    our_runs = {s: [] for s in structs}
    other_runs = {s: [] for s in structs}
    for rep in range(a.repeat):
        for keylen in rte_runs:
            rte_runs[keylen].append(run_rte(rte_bin, a.cpu, keylen, a.packets))
            print(
                f"[{rep + 1}/{a.repeat}] rte_hash key {keylen}: bulk {rte_runs[keylen][-1]['bulk_mpps']:.2f}",
                file=sys.stderr,
            )
        for struct in structs:
            args = [
                "--struct",
                struct.split(":")[0],
                "--hash",
                a.hash,
                "--size",
                sizes[struct],
                "--feed",
                f"uniform:{RANDOM_FLOWS}",
                "--packets",
                str(a.packets),
                "--warmup",
            ]
            our_runs[struct].append(run(ours_bin, args, pin=a.cpu))
            print(
                f"[{rep + 1}/{a.repeat}] {struct:8} {our_runs[struct][-1]['mpps']:8.2f} Mpps",
                file=sys.stderr,
            )
            if a.compare:
                other_runs[struct].append(run(a.compare, args, pin=a.cpu))
    for keylen, runs in rte_runs.items():
        med = {k: statistics.median(r[k] for r in runs) for k in RTE_RATES}
        results["rte_hash"][str(keylen)] = {
            **runs[0],
            **med,
            "runs": {k: [r[k] for r in runs] for k in RTE_RATES},
        }
    for struct in structs:
        size = sizes[struct]
        r = median_by(our_runs[struct], "mpps")
        row = {
            "struct": struct.split(":")[0],
            "size": size,
            "mpps": r["mpps"],
            "mpps_runs": r["mpps_runs"],
            "p_l1": r["p_l1"],
            "bytes_per_flow": r["bytes_per_flow"],
        }
        row["mpps_cpu"] = statistics.median(x["mpps_cpu"] for x in our_runs[struct])
        for keylen, peer in results["rte_hash"].items():
            row[f"ratio_bulk_key{keylen}"] = r["mpps"] / peer["bulk_mpps"]
            row[f"ratio_bulk_data_key{keylen}"] = r["mpps"] / peer["bulk_data_mpps"]
            # by CPU time, and repeat by repeat (the two sides of one repeat ran minutes apart at most)
            row[f"ratio_bulk_cpu_key{keylen}"] = row["mpps_cpu"] / peer["bulk_cpu_mpps"]
            row[f"ratio_bulk_key{keylen}_by_repeat"] = [
                o["mpps"] / p["bulk_mpps"] for o, p in zip(our_runs[struct], rte_runs[int(keylen)])
            ]
        row["key_bytes"] = 16 if row["struct"] in IPV4_ONLY else 40
        if a.compare:
            o = median_by(other_runs[struct], "mpps")
            row["compare"] = {
                "bin": a.compare,
                "mpps": o["mpps"],
                "mpps_runs": o["mpps_runs"],
                "mpps_cpu": statistics.median(x["mpps_cpu"] for x in other_runs[struct]),
            }
            for keylen, peer in results["rte_hash"].items():
                row["compare"][f"ratio_bulk_key{keylen}"] = o["mpps"] / peer["bulk_mpps"]
                row["compare"][f"ratio_bulk_cpu_key{keylen}"] = (
                    row["compare"]["mpps_cpu"] / peer["bulk_cpu_mpps"]
                )
        results["ours"].append(row)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "match_rte.json").write_text(json.dumps(results, indent=1) + "\n")
    if why:
        print(f"rte_hash not run: {why}")
    for keylen, p in results["rte_hash"].items():
        print(
            f"rte_hash ({p['dpdk']}), {keylen}-byte keys, median of {a.repeat}: single "
            f"{p['single_mpps']:.1f}, bulk {p['bulk_mpps']:.1f}, bulk_data {p['bulk_data_mpps']:.1f} M/s"
        )
    keys = [k for k in results["rte_hash"]]
    print(
        "| structure | size | key bytes | Mpps | P(L=1) | "
        + " | ".join(f"ours / bulk (key {k}): wall, CPU time, by repeat" for k in keys)
        + " |"
    )
    print("|---|---|---|---|---|" + "---|" * len(keys))
    for row in results["ours"]:
        print(
            f"| {row['struct']} | {row['size']} | {row['key_bytes']} | {row['mpps']:.1f} | {row['p_l1']:.2f} | "
            + " | ".join(
                f"{row[f'ratio_bulk_key{k}']:.2f}, {row[f'ratio_bulk_cpu_key{k}']:.2f}, "
                + "/".join(f"{x:.2f}" for x in row[f"ratio_bulk_key{k}_by_repeat"])
                for k in keys
            )
            + " |"
        )
        if "compare" in row:
            c = row["compare"]
            print(
                f"| {row['struct']} (compare) | {row['size']} | {row['key_bytes']} | {c['mpps']:.1f} | | "
                + " | ".join(
                    f"{c[f'ratio_bulk_key{k}']:.2f}, {c[f'ratio_bulk_cpu_key{k}']:.2f}, -"
                    for k in keys
                )
                + " |"
            )


if __name__ == "__main__":
    main()
