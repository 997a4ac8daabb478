"""Hash benchmark: every flow-key hash of the engine (ntgcore/native/hash.h) on
5-tuples, one core, three ways: per tuple (hash_tuple_bulk: each struct hash_tuple packed, then
hashed through the registry's function pointer, what a caller holding tuples pays), bulk over
packed IPv4 keys (hash_bulk, 13-byte keys 16 bytes apart) and bulk over packed IPv6 keys (37
bytes, 40 apart). Random tuples; best of --repeat runs, by wall time and by the thread's CPU
time (on a shared machine the CPU time is the steadier figure); the peer is seed 002's SuperFastHash rate
(2.5 M hashes/s, FlowID construction included). Prints a Markdown table and writes
benchmarks/out/hashes.json. Results are written, not asserted (target: CRC32C >= 500 M/s).

    python benchmarks/bench_hashes.py [--keys N] [--repeat R] [--hashes a,b]

Needs the native library: installed by `pip install .`, or NTG_HASHLIB=<build>/libntg.so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis import hashing
from analysis.hashstudy import SEED_002, machine

TARGET_CRC32C = 500e6


def tuples(n: int, family: int, rng: np.random.Generator) -> np.ndarray:
    t = np.zeros(n, dtype=hashing.TUPLE_DTYPE)
    width = 4 if family == 4 else 16
    t["src"][:, :width] = rng.integers(0, 256, size=(n, width), dtype=np.uint8)
    t["dst"][:, :width] = rng.integers(0, 256, size=(n, width), dtype=np.uint8)
    t["sport"] = rng.integers(0, 65536, size=n, dtype=np.uint16)
    t["dport"] = rng.integers(0, 65536, size=n, dtype=np.uint16)
    t["proto"] = rng.choice(np.array([6, 17], dtype=np.uint8), size=n)
    t["family"] = family
    return t


def packed(t: np.ndarray, family: int, stride: int) -> np.ndarray:
    """The tuples' keys (hash_tuple_key's bytes) as rows STRIDE bytes apart."""
    width = 4 if family == 4 else 16
    length = hashing.TUPLE_KEY_LEN[family]
    rows = np.zeros((len(t), stride), dtype=np.uint8)
    rows[:, 0:width], rows[:, width : 2 * width] = t["src"][:, :width], t["dst"][:, :width]
    q = 2 * width
    rows[:, q : q + 2] = t["sport"].astype(">u2").view(np.uint8).reshape(-1, 2)
    rows[:, q + 2 : q + 4] = t["dport"].astype(">u2").view(np.uint8).reshape(-1, 2)
    rows[:, q + 4] = t["proto"]
    return rows[:, :length]


def best_rates(fn, n: int, repeat: int) -> tuple[float, float]:
    """Keys per second of FN's best run, by wall time (FN's own timing) and by thread CPU time."""
    wall, cpu = [], []
    for _ in range(repeat):
        c0 = time.thread_time()
        wall.append(fn()[1])
        cpu.append(time.thread_time() - c0)
    return n / min(wall), n / max(min(cpu), 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=4_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--hashes", default=",".join(hashing.names()))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "hashes.json")
    args = ap.parse_args()
    names = hashing.check_names([h for h in args.hashes.split(",") if h])
    if not hashing.crc32c_hw_available() and "crc32c_hw" in names:
        names.remove("crc32c_hw")

    rng = np.random.default_rng(1)
    t4, t6 = tuples(args.keys, 4, rng), tuples(args.keys, 6, rng)
    k4, k6 = packed(t4, 4, 16), packed(t6, 6, 40)
    for name in ("crc32c", "lookup3", "wyhash"):  # the packed keys are the tuples' keys
        if name in names:
            assert np.array_equal(
                hashing.hash_keys(name, k4[:1000]), hashing.hash_tuples(name, t4[:1000])
            )
    rows = []
    for name in names:
        row = {"hash": name}
        for col, fn in (
            ("per_tuple_v4", lambda n=name: hashing.timed_hash_tuples(n, t4)),
            ("bulk_v4", lambda n=name: hashing.timed_hash_keys(n, k4)),
            ("bulk_v6", lambda n=name: hashing.timed_hash_keys(n, k6)),
        ):
            row[col], row[col + "_cpu"] = best_rates(fn, args.keys, args.repeat)
        rows.append(row)
        print(f"{name}: {row['bulk_v4_cpu'] / 1e6:.0f} M/s bulk", file=sys.stderr)

    print(
        f"\n{args.keys:,} random 5-tuples, best of {args.repeat}, one core, M hashes/s by CPU "
        f"time (by wall time)\n"
    )
    print(
        "| hash | per tuple, IPv4 | bulk, IPv4 (13 B) | bulk, IPv6 (37 B) | bulk IPv4 ÷ seed 002 |"
    )
    print("|---|---:|---:|---:|---:|")
    m = lambda r, c: f"{r[c + '_cpu'] / 1e6:.0f} ({r[c] / 1e6:.0f})"
    for r in rows:
        print(
            f"| {r['hash']} | {m(r, 'per_tuple_v4')} | {m(r, 'bulk_v4')} | {m(r, 'bulk_v6')} | "
            f"{r['bulk_v4_cpu'] / SEED_002['hashes_per_s']:,.0f}× |"
        )
    crc = next((r for r in rows if r["hash"] == "crc32c"), None)
    if crc:
        met = "met" if crc["bulk_v4_cpu"] >= TARGET_CRC32C else "NOT met"
        print(
            f"\ntarget CRC32C >= {TARGET_CRC32C / 1e6:.0f} M/s on 5-tuples: {met} "
            f"({crc['bulk_v4_cpu'] / 1e6:.0f} M/s bulk by CPU time, {crc['bulk_v4'] / 1e6:.0f} by wall)"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "keys": args.keys,
        "repeat": args.repeat,
        "rows": rows,
        "seed_002": SEED_002,
        "target_crc32c": TARGET_CRC32C,
        "machine": machine(),
        "load_average": os.getloadavg(),
        "platform": platform.platform(),
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
