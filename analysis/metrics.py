"""Numbers from a capture: per-second rates, variance, warm-up, steady state, sizes and flows.

The method is the one of the traffic-generator comparison (seed 001): count packets per second,
take the mean and the standard deviation of those counts, call std / mean × 100 the "variance" in
percent (a coefficient of variation: TRex 37526 / 98810 = 37.98 %), recompute it after the warm-up,
and estimate throughput as average packet size × average rate, next to the measured bytes per
second. Standard deviations are population ones (ddof = 0), as numpy computes them by default.

Seconds are bins of 1 s counted from the first packet. The last bin is *partial* when the capture
stops before that second ends: when the time from the last packet to the end of the bin is more
than two mean inter-packet gaps (measured inside that bin, or over the whole capture when the bin
holds fewer than two packets). A partial bin is shown but left out of every mean and deviation.

Warm-up (see `detect_warmup`) is the time the rate takes to come up to its steady level: the
reference is the median rate of the second half of the complete seconds, the floor is
reference × (1 − band) with band = max(10 %, 3 × the robust spread of that half, i.e.
1.4826 × MAD / median), capped at 50 %, and the steady state starts at the first second at or above
the floor of which at least 2 of the 3 seconds starting there (all, when fewer remain) are at or
above it. A lone second reaching the floor during a ramp does not end the warm-up, a lone dip
after a steady start does not create one, and rates above the band (spikes, an early burst) never
count as warm-up.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from .capture import Capture, address_text

NS = 1_000_000_000
FLOW_KEY = ["ip_version", "proto", "src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport"]
PROTO_NAMES = {1: "ICMP", 2: "IGMP", 6: "TCP", 17: "UDP", 41: "IPv6-in-IP", 47: "GRE",
               50: "ESP", 51: "AH", 58: "ICMPv6", 88: "EIGRP", 89: "OSPF", 132: "SCTP"}
SIZE_BUCKETS = [(0, 63), (64, 127), (128, 255), (256, 511), (512, 1023), (1024, 1518),
                (1519, 2**32 - 1)]

WARMUP_MIN_BAND = 0.10
WARMUP_MAX_BAND = 0.50
WARMUP_WINDOW = 3
WARMUP_MIN_SECONDS = 4


def flow_table(cap: Capture) -> pd.DataFrame:
    """One row per unidirectional flow (ip_version, proto, src, dst, sport, dport) of the IP
    packets, in order of first appearance: packets, bytes (wire), first_ns, last_ns,
    duration_ns; addresses as text."""
    keys = {k: getattr(cap, k) for k in FLOW_KEY}
    ts, size = cap.ts_ns, cap.wire_len
    if not cap.ip_version.all():
        ip = np.flatnonzero(cap.ip_version)
        keys = {k: v[ip] for k, v in keys.items()}
        ts, size = ts[ip], size[ip]
    codes, reps = _group(keys)
    nf = len(reps)
    first = np.full(nf, np.iinfo(np.int64).max, np.int64)
    last = np.full(nf, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first, codes, ts)
    np.maximum.at(last, codes, ts)
    key = {k: v[reps] for k, v in keys.items()}
    table = pd.DataFrame({
        "ip_version": key["ip_version"], "proto": key["proto"],
        "src": address_text(key["ip_version"], key["src_hi"], key["src_lo"]),
        "dst": address_text(key["ip_version"], key["dst_hi"], key["dst_lo"]),
        "sport": key["sport"], "dport": key["dport"]})
    table["packets"] = np.bincount(codes, minlength=nf).astype(np.int64)
    table["bytes"] = np.bincount(codes, weights=size, minlength=nf).astype(np.int64)
    table["first_ns"] = first
    table["last_ns"] = last
    table["duration_ns"] = last - first
    return table


def _group(keys: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Group codes per row (0.. in order of first appearance) and the first row of each group.

    A 64-bit hash of the key is factorized (one hash table pass instead of a multi-column
    groupby, ~5× faster); every row is then compared with its group's first row, and a
    collision, however unlikely, falls back to the exact multi-column grouping."""
    n = len(keys["ip_version"])
    if n == 0:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    mul = np.uint64(0x9E3779B97F4A7C15)
    h = keys["ip_version"].astype(np.uint64) << np.uint64(8) | keys["proto"]
    with np.errstate(over="ignore"):
        for col in (keys["src_hi"], keys["src_lo"], keys["dst_hi"], keys["dst_lo"],
                    keys["sport"].astype(np.uint64) << np.uint64(16) | keys["dport"]):
            h = (h ^ col) * mul
            h ^= h >> np.uint64(29)
    codes, _ = pd.factorize(h)
    reps = np.flatnonzero(np.r_[True, np.diff(np.maximum.accumulate(codes)) > 0])
    back = reps[codes]
    if all(np.array_equal(v, v[back]) for v in keys.values()):
        return codes, reps
    codes = pd.DataFrame(keys).groupby(FLOW_KEY, sort=False).ngroup().to_numpy()
    reps = np.flatnonzero(np.r_[True, np.diff(np.maximum.accumulate(codes)) > 0])
    return codes, reps


def detect_warmup(rates: np.ndarray) -> dict[str, Any]:
    """Warm-up of a series of complete per-second rates (rule in the module docstring).

    Returns {seconds, found, reference_pps, band_pct}; seconds = 0 and found = False when the
    series is too short (< 4 s) or never reaches the floor."""
    rates = np.asarray(rates, dtype=np.float64)
    out: dict[str, Any] = {"seconds": 0, "found": False, "reference_pps": None, "band_pct": None}
    m = len(rates)
    if m < WARMUP_MIN_SECONDS:
        return out
    tail = rates[m // 2:]
    ref = float(np.median(tail))
    if ref <= 0:
        return out
    spread = 1.4826 * float(np.median(np.abs(tail - ref))) / ref
    band = min(max(WARMUP_MIN_BAND, 3 * spread), WARMUP_MAX_BAND)
    inside = rates >= (1 - band) * ref
    out.update(reference_pps=ref, band_pct=band * 100)
    for s in range(m):
        window = inside[s:s + WARMUP_WINDOW]
        if inside[s] and 3 * window.sum() >= 2 * len(window):
            out.update(seconds=s, found=True)
            break
    return out


def _rate_stats(pkts: np.ndarray, byts: np.ndarray, avg_size: float | None) -> dict[str, Any]:
    """The seed's statistics over complete seconds; AVG_SIZE feeds the throughput formula."""
    if len(pkts) == 0:
        return {"seconds": 0, "mean_pps": None, "std_pps": None, "variance_pct": None,
                "min_pps": None, "max_pps": None, "throughput_Bps": None, "throughput_bps": None,
                "throughput_formula_Bps": None}
    mean = float(np.mean(pkts))
    std = float(np.std(pkts))
    mean_bytes = float(np.mean(byts))
    return {
        "seconds": int(len(pkts)),
        "mean_pps": mean,
        "std_pps": std,
        "variance_pct": std / mean * 100 if mean else None,
        "min_pps": int(pkts.min()),
        "max_pps": int(pkts.max()),
        "throughput_Bps": mean_bytes,
        "throughput_bps": mean_bytes * 8,
        "throughput_formula_Bps": avg_size * mean if avg_size is not None else None,
    }


def per_second(cap: Capture, flows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Packets, bytes and flows started in each second from the first packet, and whether the
    bin is partial (only the last one can be)."""
    n = len(cap)
    if n == 0:
        empty = np.zeros(0, np.int64)
        return pd.DataFrame({"second": empty, "packets": empty, "bytes": empty,
                             "flows_started": empty, "partial": np.zeros(0, bool)})
    first, last = int(cap.ts_ns.min()), int(cap.ts_ns.max())
    sec = (cap.ts_ns - first) // NS
    nb = int(sec.max()) + 1
    pkts = np.bincount(sec, minlength=nb)
    byts = np.bincount(sec, weights=cap.wire_len, minlength=nb).astype(np.int64)
    tail = nb * NS - (last - first)
    in_last = cap.ts_ns[sec == nb - 1]
    if len(in_last) >= 2:
        gap = (int(in_last.max()) - int(in_last.min())) / (len(in_last) - 1)
    else:
        gap = (last - first) / (n - 1) if n > 1 else 0.0
    partial = np.zeros(nb, bool)
    partial[-1] = tail > 2 * gap
    started = np.zeros(nb, np.int64)
    if flows is not None and len(flows):
        started = np.bincount((flows["first_ns"].to_numpy() - first) // NS, minlength=nb)
    return pd.DataFrame({"second": np.arange(nb), "packets": pkts, "bytes": byts,
                         "flows_started": started, "partial": partial})


def traffic_metrics(cap: Capture, flows: pd.DataFrame | None = None) -> dict[str, Any]:
    """Everything the report shows about the traffic, as plain JSON-ready values.

    Top level: totals, the per-second statistics over all complete seconds (mean_pps, std_pps,
    variance_pct, throughput_Bps/bps measured, throughput_formula_Bps = average_packet_size ×
    mean_pps), `warmup`, the same statistics after it in `steady`, `per_second` series,
    `packet_size`, `protocols` and `flows`. FLOWS is flow_table(cap), computed when not given."""
    if flows is None:
        flows = flow_table(cap)
    n = len(cap)
    wire = cap.wire_len
    total_bytes = int(wire.sum(dtype=np.int64))
    out: dict[str, Any] = {
        "packets": n,
        "bytes": total_bytes,
        "captured_bytes": int(cap.cap_len.sum(dtype=np.int64)),
        "ip_packets": int(np.count_nonzero(cap.ip_version)),
        "first_ns": int(cap.ts_ns.min()) if n else None,
        "last_ns": int(cap.ts_ns.max()) if n else None,
    }
    out["duration_ns"] = out["last_ns"] - out["first_ns"] if n else None
    out["duration_s"] = out["duration_ns"] / NS if n else None
    out["packets_per_duration"] = (n / out["duration_s"]) if n > 1 and out["duration_ns"] else None
    out["average_packet_size"] = total_bytes / n if n else None
    out["packet_size"] = _sizes(wire)
    out["protocols"] = _protocols(cap)

    bins = per_second(cap, flows)
    complete = bins[~bins["partial"]]
    pkts = complete["packets"].to_numpy()
    byts = complete["bytes"].to_numpy()
    out["per_second"] = {
        "second": bins["second"].tolist(),
        "packets": bins["packets"].tolist(),
        "bytes": bins["bytes"].tolist(),
        "flows_started": bins["flows_started"].tolist(),
        "last_partial": bool(bins["partial"].any()),
    }
    out.update(_rate_stats(pkts, byts, out["average_packet_size"]))
    warm = detect_warmup(pkts)
    warm["rule"] = ("steady from the first complete second whose rate reaches the median of "
                    "the second half less max(10%, 3×robust spread), with 2 of the 3 seconds "
                    "from it doing so")
    out["warmup"] = warm
    w = warm["seconds"]
    steady_pkts = int(pkts[w:].sum())
    steady_size = float(byts[w:].sum() / steady_pkts) if steady_pkts else None
    out["steady"] = {"from_second": w, "average_packet_size": steady_size,
                     **_rate_stats(pkts[w:], byts[w:], steady_size)}
    out["flows"] = {
        "count": int(len(flows)),
        "started_per_second_mean": (float(np.mean(complete["flows_started"]))
                                    if len(complete) else None),
        "packets_per_flow_mean": float(flows["packets"].mean()) if len(flows) else None,
        "duration_ns_mean": float(flows["duration_ns"].mean()) if len(flows) else None,
    }
    return plain(out)


def _sizes(wire: np.ndarray) -> dict[str, Any]:
    if len(wire) == 0:
        return {"min": None, "max": None, "mean": None, "median": None, "buckets": []}
    buckets = []
    for lo, hi in SIZE_BUCKETS:
        k = int(np.count_nonzero((wire >= lo) & (wire <= hi)))
        label = f"{lo}-{hi}" if hi < 2**32 - 1 else f"≥{lo}"
        buckets.append({"range": label, "packets": k, "share_pct": k / len(wire) * 100})
    return {"min": int(wire.min()), "max": int(wire.max()), "mean": float(wire.mean()),
            "median": float(np.median(wire)), "buckets": buckets}


def _protocols(cap: Capture) -> list[dict[str, Any]]:
    key = cap.ip_version.astype(np.uint16) << 8 | cap.proto
    key = np.where(cap.ip_version == 0, 0, key)
    uniq, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
    byts = np.bincount(inv, weights=cap.wire_len, minlength=len(uniq))
    rows = []
    for k, c, b in zip(uniq.tolist(), counts.tolist(), byts.tolist()):
        v, p = k >> 8, k & 255
        name = "non-IP" if v == 0 else f"IPv{v} {PROTO_NAMES.get(p, f'proto {p}')}"
        rows.append({"ip_version": v, "proto": p if v else None, "name": name, "packets": c,
                     "bytes": int(b)})
    rows.sort(key=lambda r: -r["packets"])
    return rows


def plain(x: Any) -> Any:
    """JSON-ready copy: numpy scalars to Python, NaN to None."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
