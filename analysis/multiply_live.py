"""The inline multiplier's numbers, from the captures at its interfaces (seed 003, Figs. 13-16;
docs/multiplier.md): never from the multiplier's own counters.

A step of method `multiply` captures the multiplier's ingress (client side, `capture.pcap`), its
egress towards the server and its DUT side (`capture.also_at`), all in the multiplier's namespace
with one clock. Every frame the multiplier forwards appears unchanged on both the client-side and
the server-side interface; matched by content (the captured bytes and the length, in order of
appearance), the earlier of the two is its arrival and the later its departure, which gives the
direction (client->server when first seen on the ingress) and the added latency (departure -
arrival: with SPFO the original waits for its copies). IP frames of a multiplied direction are the
ingress; the egress is their originals as forwarded plus every IP frame on the DUT side (the
copies). Loss = (T+1) x ingress - egress. An original that arrived while the frame before it was
still inside the multiplier waited for that one too (queueing, in a burst); one that found it
idle shows the multiplier's own latency: both are reported, per frame size.
"""

from __future__ import annotations

from collections import defaultdict, deque
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .capture import iter_frames

# frame-size bins of the latency figures (Ethernet frame bytes, without the FCS)
SIZE_BINS = [0, 128, 256, 512, 1024, 1600]
SIZE_LABELS = ["<128", "128-255", "256-511", "512-1023", "1024-1514"]
ETH_IP = (b"\x08\x00", b"\x86\xdd")
# Seed 003 (section V): the egress/ingress ratio of Figs. 13 and 15, its peak rate and packet sizes.
SEED = {"ratios": {10: 11, 22: 23}, "peak_pps": 6e6, "sizes": (32, 1024)}


def is_ip(frame: bytes) -> bool:
    return frame[12:14] in ETH_IP


def forwarded(client_side: Path, server_side: Path) -> pd.DataFrame:
    """Every frame seen on both sides: arrival and departure (ns), frame length, direction
    (0 client->server, 1 server->client), IP or not. Frames seen on one side only are not in it
    (counted by `unmatched`)."""
    waiting: dict[tuple[int, bytes], deque[int]] = defaultdict(deque)
    for ts, wire, data in iter_frames(server_side):
        waiting[(wire, data)].append(ts)
    rows = []
    for ts, wire, data in iter_frames(client_side):
        q = waiting.get((wire, data))
        if not q:
            continue
        other = q.popleft()
        rows.append((min(ts, other), max(ts, other), wire, 0 if ts <= other else 1, is_ip(data)))
    return pd.DataFrame(rows, columns=["t_in", "t_out", "size", "direction", "ip"])


def idle(fw: pd.DataFrame, orig: pd.DataFrame) -> pd.Series:
    """True for the originals that arrived after every earlier frame had left the multiplier."""
    order = fw.sort_values("t_in", kind="stable")
    left = order["t_out"].cummax().shift(1, fill_value=0)
    return (order["t_in"] >= left).reindex(orig.index)


def size_table(orig: pd.DataFrame, lat: pd.Series) -> list[dict[str, Any]]:
    if not len(orig):
        return []
    rows = []
    bins = pd.cut(orig["size"], SIZE_BINS, right=False, labels=SIZE_LABELS)
    for label, grp in lat.groupby(bins, observed=True):
        rows.append(
            {
                "size": str(label),
                "packets": int(len(grp)),
                "median_us": float(grp.median()),
                "p99_us": float(np.percentile(grp, 99)),
                "max_us": float(grp.max()),
            }
        )
    return rows


def count_ip(path: Path) -> tuple[int, list[int]]:
    """IP frames in a capture and their timestamps."""
    ts = [t for t, _, data in iter_frames(path) if is_ip(data)]
    return len(ts), ts


def frames_in(path: Path) -> int:
    return sum(1 for _ in iter_frames(path))


def step_result(step_dir: Path, copies: int, both: bool, files: dict[str, str]) -> dict[str, Any]:
    """One step's ingress, egress, loss and latency. `files`: capture file of 'in', 'out', 'dut'."""
    cin, cout, cdut = (step_dir / files[k] for k in ("in", "out", "dut"))
    fw = forwarded(cin, cout)
    dirs = [0, 1] if both else [0]
    orig = fw[fw["ip"] & fw["direction"].isin(dirs)]
    ingress = int(len(orig))
    dut_ip, dut_ts = count_ip(cdut)
    egress = ingress + dut_ip
    lat = (orig["t_out"] - orig["t_in"]) / 1e3  # µs
    by_size, idle_by_size = (
        size_table(orig, lat),
        size_table(orig[idle(fw, orig)], lat[idle(fw, orig)]),
    )
    seconds = []
    if ingress:
        t0 = int(orig["t_in"].min())
        sec_in = ((orig["t_in"] - t0) // 1_000_000_000).value_counts()
        sec_out = ((orig["t_out"] - t0) // 1_000_000_000).value_counts()
        sec_dut = pd.Series(
            (np.asarray(dut_ts, dtype=np.int64) - t0) // 1_000_000_000
        ).value_counts()
        for s in sorted(set(sec_in.index) | set(sec_dut.index)):
            seconds.append(
                {
                    "second": int(s),
                    "ingress": int(sec_in.get(s, 0)),
                    "egress": int(sec_out.get(s, 0) + sec_dut.get(s, 0)),
                }
            )
    span = (orig["t_in"].max() - orig["t_in"].min()) / 1e9 if ingress > 1 else 0.0
    return {
        "copies": copies,
        "both": both,
        "ingress": ingress,
        "egress": egress,
        "expected": (copies + 1) * ingress,
        "loss": (copies + 1) * ingress - egress,
        "ratio": egress / ingress if ingress else None,
        "exact": egress == (copies + 1) * ingress,
        "dut_frames": dut_ip,
        "unmatched_in": frames_in(cin) - len(fw),
        "non_ip_forwarded": int((~fw["ip"]).sum()),
        "ingress_pps": ingress / span if span else None,
        "egress_pps": egress / span if span else None,
        "latency_median_us": float(lat.median()) if ingress else None,
        "latency_p99_us": float(np.percentile(lat, 99)) if ingress else None,
        "latency_by_size": by_size,
        "latency_idle_by_size": idle_by_size,
        "idle_originals": sum(r["packets"] for r in idle_by_size),
        "per_second": seconds,
    }


__all__ = ["SEED", "SIZE_LABELS", "forwarded", "step_result", "is_ip"]
