"""Seed 002's hash study, for every flow-key hash of the engine: collisions of flow IDs against
the birthday bound, the spread of the values over 100 bins, and hashes per second.

Flows, as seed 002 builds them: the source address runs through the hosts of a /8, /16 or /24
(100.0.0.0/8, 100.100.0.0/16, 100.100.0.0/24, network and broadcast left out), the destination
is uniformly random, the source port goes up by one per flow (wrapping) and the destination port
stays the same for a block of flows (one pass over the prefix's hosts), one up for the next. Two
flows are equal only if they share the host, the block modulo 65536 and the flow number modulo
65536, which needs more than 65536 blocks: at most 16,646,144 flows for the /24, above MAX_FLOWS.

The key hashed is seed 002's FlowID (`flowid`, 37 bytes: the smaller address in a 16-byte field,
its port, the greater address, its port, the protocol) or the engine's packed 5-tuple (`tuple`,
13 bytes, ntgcore/native/hash.h). Values are compared on their low 32 bits (seed 002's
flow ID is 32-bit; 64-bit hashes are also checked at full width).

For N keys in m = 2**32 values a random function leaves E = N - m(1 - (1 - 1/m)**N) of them
without a value of their own (N - distinct; about N**2 / 2m: 116 for a million). N - distinct is
then close to Poisson(E). Each row gets its exact two-sided Poisson p-value; the verdict pools the
draws of the largest flow count (independent key sets: every prefix and repeat): the summed
N - distinct against Poisson(summed E), "at the bound" unless p < alpha = 0.001, else "above" or
"below" the bound (more, or fewer collisions than a random function). The spread is a chi-square
test of 100 bins against uniform, pooled the same way (the chi-squares summed, 99 df a draw).
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil

from analysis import hashing
from analysis.plots import mpl, save
from ntgcore.errors import BadInput
from ntgcore.files import replacing, write_whole

PREFIXES = {8: 0x64000000, 16: 0x64640000, 24: 0x64640000}  # 100.0.0.0/8, 100.100.0.0/16, /24
DEFAULT_FLOWS = (250_000, 500_000, 750_000, 1_000_000)  # seed 002's range
MAX_FLOWS = 16_000_000
MAX_REPEATS = 100  # seed 002 drew 3 times; 100 draws of the default study hash 1.2 G keys
MAX_ROWS = (
    1_000_000  # result rows (a flow count or a spread bin of a hash x key x prefix x draw) held
)
KEYS = {"flowid": 37, "tuple": 13}
BINS = 100
ALPHA = 0.001  # per hash and key: about 2 % false alarms over a default run's 22 verdicts
SPORT0, DPORT0, PROTO = 1024, 1024, 6
BYTES_PER_FLOW = 160  # keys, sort copies and temporaries of the largest step, measured with margin
COLORS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#e7969c",
    "#637939",
]
SEED_002: dict[str, Any] = {
    "collision_pct_per_million": 0.015,
    "hashes_per_s": 2.5e6,
    "hash": "superfasthash",
    "block_s": 0.097,
    "block_flows": 250_000,
}
COLLISION_TEST = (
    "exact two-sided Poisson test of N - distinct (low 32 bits), summed over the draws "
    "(prefixes x repeats) of the largest flow count, against the summed birthday "
    f"expectation, alpha = {ALPHA}"
)
SPREAD_TEST = (
    f"chi-square of {BINS} equal bins against uniform, summed over the same draws "
    f"({BINS - 1} df each), alpha = {ALPHA}"
)


# --- statistics (no scipy in the environment: the regularized incomplete gamma function) ---------


def _gamma_lower_series(a: float, x: float) -> float:
    term = total = 1.0 / a
    n = a
    for _ in range(10_000):
        n += 1.0
        term *= x / n
        total += term
        if abs(term) < abs(total) * 1e-15:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _gamma_upper_fraction(a: float, x: float) -> float:
    # Lentz's method on the continued fraction of the upper incomplete gamma function.
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    f = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        f *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return f * math.exp(-x + a * math.log(x) - math.lgamma(a))


def gamma_p(a: float, x: float) -> float:
    """The regularized lower incomplete gamma function P(a, x)."""
    if x <= 0:
        return 0.0
    if x < a + 1.0:
        return min(1.0, _gamma_lower_series(a, x))
    return max(0.0, 1.0 - _gamma_upper_fraction(a, x))


def gamma_q(a: float, x: float) -> float:
    """Q(a, x) = 1 - P(a, x), computed without the cancellation."""
    if x <= 0:
        return 1.0
    if x < a + 1.0:
        return max(0.0, 1.0 - _gamma_lower_series(a, x))
    return min(1.0, _gamma_upper_fraction(a, x))


def chi2_sf(x: float, df: int) -> float:
    """P(chi-square with DF degrees of freedom >= X)."""
    return gamma_q(df / 2.0, x / 2.0)


def poisson_two_sided(k: int, lam: float) -> float:
    """Exact two-sided p-value of K events under Poisson(LAM): twice the smaller tail."""
    if lam <= 0:
        return 1.0 if k == 0 else 0.0
    at_most = gamma_q(k + 1.0, lam)  # P(X <= k)
    at_least = 1.0 if k == 0 else gamma_p(float(k), lam)  # P(X >= k)
    return min(1.0, 2.0 * min(at_most, at_least))


def birthday_expected(n: int, bits: int = 32) -> float:
    """Expected N - distinct for N keys hashed by a random function into 2**BITS values."""
    m = float(2**bits)
    return n - m * -math.expm1(n * math.log1p(-1.0 / m))


def spread_counts(values32: np.ndarray, bins: int = BINS) -> np.ndarray:
    """Values in [0, 2**32) counted in BINS equal bins (the seed's 100-bin histogram)."""
    idx = (values32.astype(np.uint64) * np.uint64(bins)) >> np.uint64(32)
    return np.bincount(idx.astype(np.int64), minlength=bins)


def bin_expected(n: int, bins: int = BINS) -> np.ndarray:
    """Expected count of each bin for N uniform values (bins differ in width by at most 1)."""
    edges = np.array([-(-k * 2**32 // bins) for k in range(bins + 1)], dtype=np.float64)
    return n * np.diff(edges) / 2**32


def distinct(values: np.ndarray) -> int:
    s = np.sort(values)
    return int(1 + np.count_nonzero(s[1:] != s[:-1])) if len(s) else 0


# --- the flows ------------------------------------------------------------------------------------


def hosts(prefix: int) -> int:
    return 2 ** (32 - prefix) - 2


def flow_columns(prefix: int, n: int, seed: int) -> dict[str, np.ndarray]:
    """Seed 002's first N flows from the /PREFIX: src, dst (uint32), sport, dport (uint16)."""
    if prefix not in PREFIXES:
        raise BadInput(f"prefix /{prefix}: the study has /8, /16 and /24")
    i = np.arange(n, dtype=np.int64)
    h = hosts(prefix)
    src = (PREFIXES[prefix] + 1 + i % h).astype(np.uint32)
    dst = np.random.default_rng(seed).integers(0, 2**32, size=n, dtype=np.uint32)
    sport = ((SPORT0 + i) % 65536).astype(np.uint16)
    dport = ((DPORT0 + i // h) % 65536).astype(np.uint16)
    return {"src": src, "dst": dst, "sport": sport, "dport": dport}


def _be(a: np.ndarray, dtype: str) -> np.ndarray:
    return a.astype(dtype).view(np.uint8).reshape(len(a), -1)


def flow_keys(cols: dict[str, np.ndarray], key: str) -> np.ndarray:
    """The keys to hash, one row per flow: `flowid` (seed 002's 37 bytes, smaller address first)
    or `tuple` (the engine's 13-byte src, dst, sport, dport, proto)."""
    src, dst, sport, dport = cols["src"], cols["dst"], cols["sport"], cols["dport"]
    n = len(src)
    if key == "tuple":
        out = np.zeros((n, KEYS["tuple"]), dtype=np.uint8)
        out[:, 0:4], out[:, 4:8] = _be(src, ">u4"), _be(dst, ">u4")
        out[:, 8:10], out[:, 10:12] = _be(sport, ">u2"), _be(dport, ">u2")
        out[:, 12] = PROTO
        return out
    if key != "flowid":
        raise BadInput(f"key {key!r}: known keys are {', '.join(KEYS)}")
    first = src <= dst
    lo, hi = np.where(first, src, dst), np.where(first, dst, src)
    plo, phi = np.where(first, sport, dport), np.where(first, dport, sport)
    out = np.zeros((n, KEYS["flowid"]), dtype=np.uint8)
    out[:, 0:4], out[:, 16:18] = _be(lo, ">u4"), _be(plo, ">u2")
    out[:, 18:22], out[:, 34:36] = _be(hi, ">u4"), _be(phi, ">u2")
    out[:, 36] = PROTO
    return out


# --- the study ------------------------------------------------------------------------------------


@dataclass
class StudyRequest:
    hashes: list[str]
    flows: list[int] = field(default_factory=lambda: list(DEFAULT_FLOWS))
    prefixes: list[int] = field(default_factory=lambda: [8, 16, 24])
    keys: list[str] = field(default_factory=lambda: ["flowid"])
    repeats: int = 3  # seed 002 repeated each test three times
    seed: int = 2


def memory_problem(flows: list[int], available: int) -> str | None:
    """Why the largest of FLOWS does not fit in AVAILABLE bytes (at most 80 % of them), or None."""
    need = BYTES_PER_FLOW * max(flows)
    if need <= 0.8 * available:
        return None
    return (
        f"--flows {max(flows):,} needs about {need / 2**30:.1f} GiB and {available / 2**30:.1f} "
        f"GiB are available; ask for fewer flows"
    )


def check_request(req: StudyRequest) -> StudyRequest:
    """REQ, or BadInput saying what is wrong, before anything runs."""
    if not req.hashes:
        raise BadInput("no hashes to study")
    hashing.check_names(req.hashes)
    if not req.flows:
        raise BadInput("no flow counts to study")
    for n in req.flows:
        if n < 2:
            raise BadInput(f"--flows {n}: a collision needs at least 2 flows")
        if n > MAX_FLOWS:
            raise BadInput(
                f"--flows {n}: at most {MAX_FLOWS:,} (past that seed 002's flows from "
                f"a /24 are no longer all distinct)"
            )
    for p in req.prefixes:
        if p not in PREFIXES:
            raise BadInput(f"--prefixes {p}: the study has /8, /16 and /24")
    for k in req.keys:
        if k not in KEYS:
            raise BadInput(f"--keys {k}: known keys are {', '.join(KEYS)}")
    if req.repeats < 1:
        raise BadInput(f"--repeats {req.repeats}: must be >= 1")
    if req.repeats > MAX_REPEATS:
        raise BadInput(f"--repeats {req.repeats:,}: too large: at most {MAX_REPEATS}")
    rows = (
        len(req.hashes)
        * len(req.keys)
        * len(req.prefixes)
        * req.repeats
        * (len(set(req.flows)) + BINS)
    )
    if rows > MAX_ROWS:  # checked before anything is allocated: the rows are kept until the end
        raise BadInput(
            f"the study would make {rows:,} result rows (hashes x keys x prefixes x repeats x "
            f"(flow counts + {BINS} spread bins)); at most {MAX_ROWS:,}: ask for fewer"
        )
    problem = memory_problem(req.flows, psutil.virtual_memory().available)
    if problem:
        raise BadInput(problem)
    return req


@dataclass
class Study:
    request: StudyRequest
    rows: pd.DataFrame  # one per hash x key x prefix x repeat x flows
    spread: pd.DataFrame  # bins of the largest flow count, one row per bin
    verdicts: pd.DataFrame  # one per hash x key
    machine: dict[str, Any]
    key_build_per_s: dict[str, float] = field(default_factory=dict)  # key -> keys built a second


def run_study(req: StudyRequest, progress: Any = None) -> Study:
    """Every hash of REQ on every key, prefix, repeat and flow count (checked first)."""
    check_request(req)
    flows = sorted(set(req.flows))
    rows, spread = [], []
    build: dict[str, list[float]] = {key: [] for key in req.keys}
    infos = {name: hashing.info(name) for name in req.hashes}
    for prefix in req.prefixes:
        for rep in range(req.repeats):
            t0 = time.perf_counter()
            cols = flow_columns(prefix, flows[-1], req.seed * 1000 + prefix * 10 + rep)
            t_cols = time.perf_counter() - t0
            for key in req.keys:
                t0 = time.perf_counter()
                keys = flow_keys(cols, key)
                build[key].append(flows[-1] / (t_cols + time.perf_counter() - t0))
                for name in req.hashes:
                    if progress:
                        progress(f"/{prefix} repeat {rep + 1} {key} {name}")
                    for n in flows:
                        values, seconds = hashing.timed_hash_keys(name, keys[:n])
                        rows.append(_row(infos[name], key, prefix, rep, values, seconds))
                        if n == flows[-1]:
                            counts = spread_counts((values & 0xFFFFFFFF).astype(np.uint32))
                            for b, (c, e) in enumerate(zip(counts, bin_expected(n))):
                                spread.append(
                                    {
                                        "hash": name,
                                        "key": key,
                                        "prefix": prefix,
                                        "repeat": rep,
                                        "flows": n,
                                        "bin": b,
                                        "count": int(c),
                                        "expected": float(e),
                                    }
                                )
                del keys
    frame = pd.DataFrame(rows)
    return Study(
        request=req,
        rows=frame,
        spread=pd.DataFrame(spread),
        verdicts=verdicts(frame),
        machine=machine(),
        key_build_per_s={key: float(np.median(v)) for key, v in build.items()},
    )


def _row(
    info: hashing.HashInfo, key: str, prefix: int, rep: int, values: np.ndarray, seconds: float
) -> dict[str, Any]:
    n = len(values)
    v32 = (values & 0xFFFFFFFF).astype(np.uint32)
    d = distinct(v32)
    coll = n - d
    exp = birthday_expected(n)
    counts = spread_counts(v32)
    e = bin_expected(n)
    chi2 = float(((counts - e) ** 2 / e).sum())
    full = coll if info.bits == 32 else n - distinct(values)
    return {
        "hash": info.name,
        "bits": info.bits,
        "key": key,
        "prefix": prefix,
        "repeat": rep,
        "flows": n,
        "distinct": d,
        "collisions": coll,
        "collision_pct": 100.0 * coll / n,
        "expected": exp,
        "expected_pct": 100.0 * exp / n,
        "ratio": coll / exp if exp else float("nan"),
        "p_collisions": poisson_two_sided(coll, exp),
        "chi2": chi2,
        "p_spread": chi2_sf(chi2, BINS - 1),
        "collisions_full_width": full,
        "seconds": seconds,
        "hashes_per_s": n / seconds if seconds > 0 else float("nan"),
    }


def verdicts(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per hash and key: at the bound or not (COLLISION_TEST), spread uniform or not
    (SPREAD_TEST), the mean collision % per million flows and the hashing speed. Both tests pool
    the rows of the largest flow count: each prefix and repeat is its own draw of keys, so their
    counts are independent (the smaller flow counts are prefixes of the same keys, and are not)."""
    out = []
    for (name, key), g in rows.groupby(["hash", "key"], sort=False):
        big = g[g["flows"] == g["flows"].max()]
        k, lam = int(big["collisions"].sum()), float(big["expected"].sum())
        p_coll = poisson_two_sided(k, lam)
        if p_coll >= ALPHA:
            verdict = "at the bound"
        else:
            verdict = "above the bound" if k > lam else "below the bound"
        chi2 = float(big["chi2"].sum())
        p_spread = chi2_sf(chi2, (BINS - 1) * len(big))
        out.append(
            {
                "hash": name,
                "key": key,
                "bits": int(g["bits"].iloc[0]),
                "verdict": verdict,
                "collisions": k,
                "expected": lam,
                "collision_ratio": k / lam if lam else float("nan"),
                "p_collisions": p_coll,
                "spread": "uniform" if p_spread >= ALPHA else "not uniform",
                "chi2": chi2,
                "p_spread": p_spread,
                "draws": len(big),
                "collision_pct_per_million": float(
                    (100.0 * g["collisions"] / g["flows"] * 1e6 / g["flows"]).mean()
                ),
                "collision_pct_at_max": float(big["collision_pct"].mean()),
                "expected_pct_at_max": float(big["expected_pct"].mean()),
                "flows_max": int(big["flows"].iloc[0]),
                "hashes_per_s": float(big["hashes_per_s"].median()),
            }
        )
    return pd.DataFrame(out)


def machine() -> dict[str, Any]:
    model = ""
    try:
        model = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")
            ),
            "",
        )
    except OSError:
        pass
    return {
        "node": platform.node(),
        "cpu": model,
        "cpus": psutil.cpu_count(),
        "crc32c_sse42": hashing.crc32c_hw_available(),
        "python": platform.python_version(),
    }


# --- output ---------------------------------------------------------------------------------------


def write_study(study: Study, out: Path) -> dict[str, Path]:
    """metrics.json, rows.parquet, spread.parquet, verdicts.parquet, two plots and report.md
    into OUT (created)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "rows": out / "rows.parquet",
        "spread": out / "spread.parquet",
        "verdicts": out / "verdicts.parquet",
        "metrics": out / "metrics.json",
        "collisions_plot": out / "collisions.png",
        "spread_plot": out / "spread.png",
        "report": out / "report.md",
    }
    for name in ("rows", "spread", "verdicts"):
        with replacing(paths[name]) as tmp:
            getattr(study, name).to_parquet(tmp, index=False)
    req = study.request
    metrics = {
        "request": {
            "hashes": req.hashes,
            "flows": sorted(set(req.flows)),
            "prefixes": req.prefixes,
            "keys": req.keys,
            "repeats": req.repeats,
            "seed": req.seed,
        },
        "tests": {"collisions": COLLISION_TEST, "spread": SPREAD_TEST},
        "seed_002": SEED_002,
        "machine": study.machine,
        "key_build_per_s": study.key_build_per_s,
        "verdicts": study.verdicts.to_dict(orient="records"),
    }
    write_whole(paths["metrics"], json.dumps(metrics, indent=2) + "\n")
    plot_collisions(study, paths["collisions_plot"])
    plot_spread(study, paths["spread_plot"])
    write_whole(paths["report"], report(study))
    return paths


def plot_collisions(study: Study, path: Path) -> Path:
    """Collision % against flows, one panel per prefix (first key), the birthday bound dashed."""
    rows = study.rows[study.rows["key"] == study.request.keys[0]]
    prefixes = study.request.prefixes
    fig = mpl().Figure(figsize=(3.8 * len(prefixes) + 2.2, 4.4), dpi=110, layout="constrained")
    mpl().FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(prefixes), sharey=True, squeeze=False)[0]
    for ax, prefix in zip(axes, prefixes):
        g = rows[rows["prefix"] == prefix].groupby(["hash", "flows"], sort=False)
        mean = g["collision_pct"].mean().reset_index()
        for i, name in enumerate(study.request.hashes):
            m = mean[mean["hash"] == name]
            ax.plot(
                m["flows"],
                m["collision_pct"],
                marker="os^vD<>ph*"[i % 10],
                ms=3,
                lw=1.2,
                color=COLORS[i % len(COLORS)],
                label=name,
            )
        b = rows[rows["prefix"] == prefix].groupby("flows")["expected_pct"].first()
        ax.plot(b.index, b.values, "k--", lw=2, label="birthday bound")
        ax.axhline(
            SEED_002["collision_pct_per_million"],
            color="grey",
            lw=1,
            ls=":",
            label="seed 002: ~0.015 % (SuperFastHash, 1M)",
        )
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.set_title(f"source /{prefix}", loc="left")
        ax.set_xlabel("flows")
        ax.xaxis.set_major_formatter(mpl().EngFormatter())
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("colliding flow IDs (% of flows, low 32 bits)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="outside right center")
    fig.suptitle(
        f"Flow-ID collisions against the birthday bound ({study.request.keys[0]} key, "
        f"mean of {study.request.repeats})",
        x=0.01,
        ha="left",
    )
    save(fig, path)
    return path


def plot_spread(study: Study, path: Path) -> Path:
    """Each hash's 100-bin histogram at the largest flow count, /16 (seed 002's Fig. 20) or the
    first prefix, first key, first repeat."""
    req = study.request
    prefix = 16 if 16 in req.prefixes else req.prefixes[0]
    s = study.spread[
        (study.spread["prefix"] == prefix)
        & (study.spread["key"] == req.keys[0])
        & (study.spread["repeat"] == 0)
    ]
    cols = min(4, len(req.hashes))
    nrows = -(-len(req.hashes) // cols)
    fig = mpl().Figure(figsize=(3.3 * cols, 2.4 * nrows), dpi=110, layout="constrained")
    mpl().FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    for ax, name in zip(axes, req.hashes):
        g = s[s["hash"] == name]
        ax.bar(g["bin"], g["count"], width=1.0, color="#1f77b4")
        ax.plot(g["bin"], g["expected"], "k-", lw=1)
        r = study.rows[
            (study.rows["hash"] == name)
            & (study.rows["prefix"] == prefix)
            & (study.rows["key"] == req.keys[0])
            & (study.rows["repeat"] == 0)
        ]
        p = r.loc[r["flows"].idxmax(), "p_spread"]
        ax.set_title(f"{name}  (chi-square p = {p:.2g})", fontsize=8, loc="left")
        ax.tick_params(labelsize=6)
    for ax in axes[len(req.hashes) :]:
        ax.set_visible(False)
    n = int(s["flows"].max()) if len(s) else 0
    fig.suptitle(
        f"Spread of {n:,} flow IDs over {BINS} bins, source /{prefix} "
        f"({req.keys[0]} key); the line is uniform",
        x=0.01,
        ha="left",
    )
    save(fig, path)
    return path


def report(study: Study) -> str:
    req = study.request
    v = study.verdicts
    lines = [
        "# Flow-ID hash study (seed 002)",
        "",
        f"Flows from /{', /'.join(map(str, req.prefixes))} source ranges, "
        f"{', '.join(f'{n:,}' for n in sorted(set(req.flows)))} flows, "
        f"{req.repeats} repeat(s), keys: {', '.join(req.keys)}. Machine: {study.machine['cpu']} "
        f"({study.machine['cpus']} CPUs), CRC32C SSE4.2: {study.machine['crc32c_sse42']}.",
        "",
        f"- Collisions: {COLLISION_TEST}.",
        f"- Spread: {SPREAD_TEST}.",
        "- Speed: the library's bulk call over the keys already built (seed 002 timed the FlowID "
        "construction too). Building the keys (numpy, all flows at once): "
        + ", ".join(f"{k} {v / 1e6:.1f} M keys/s" for k, v in study.key_build_per_s.items())
        + ".",
        "",
        "| hash | key | bits | verdict (p) | collisions / bound | % at max flows (bound) | "
        "% per million | spread (p) | M hashes/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in v.itertuples():
        lines.append(
            f"| {r.hash} | {r.key} | {r.bits} | {r.verdict} ({r.p_collisions:.2g}) | "
            f"{r.collisions:,} / {r.expected:,.0f} = {r.collision_ratio:.2f} | "
            f"{r.collision_pct_at_max:.4f} ({r.expected_pct_at_max:.4f}) | "
            f"{r.collision_pct_per_million:.4f} | {r.spread} ({r.p_spread:.2g}) | "
            f"{r.hashes_per_s / 1e6:.1f} |"
        )
    sfh = v[v["hash"] == "superfasthash"]
    lines += ["", "## Beside seed 002", ""]
    if len(sfh):
        r = sfh.iloc[0]
        built = study.key_build_per_s.get(r.key, float("inf"))
        with_keys = 1.0 / (1.0 / r.hashes_per_s + 1.0 / built)
        lines.append(
            f"Seed 002 measured SuperFastHash at about {SEED_002['collision_pct_per_million']} % "
            f"colliding flow IDs per million flows and {SEED_002['hashes_per_s'] / 1e6:.1f} M "
            f"hashes/s (0.097 s per 250K block, FlowID construction included). Here: "
            f"{r.collision_pct_per_million:.4f} % per million ({r.key} key; the birthday bound is "
            f"{birthday_expected(10**6) / 1e4:.4f} %), {r.hashes_per_s / 1e6:.1f} M hashes/s, "
            f"{r.hashes_per_s / SEED_002['hashes_per_s']:.0f}x the seed's rate "
            f"({with_keys / 1e6:.1f} M/s counting the key's construction too); verdict: "
            f"{r.verdict}."
        )
    else:
        lines.append(
            f"Seed 002: SuperFastHash, about {SEED_002['collision_pct_per_million']} % "
            f"per million flows, 2.5 M hashes/s (SuperFastHash was not in this run)."
        )
    lines += ["", "![collisions](collisions.png)", "", "![spread](spread.png)", ""]
    return "\n".join(lines)
