"""Method `run` over several generator hosts (testbed.spread): a table per host (its share of the
flows, its generator's count, its own capture, its rate and start offset) and the merged capture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.live import fmt_count

CAPTIONS: dict[str, str] = {}


def spread_table(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for s in steps:
        spread = s.get("spread") or {}
        for h in spread.get("hosts", []):
            rows.append(
                {
                    "step": s["name"],
                    "host": h["name"],
                    "at": h["at"],
                    "flows": h["flow_count"],
                    "planned": h["packets_planned"],
                    "sent": h.get("packets_sent"),
                    "captured": h.get("captured"),
                    "rate_pps": h.get("rate_pps"),
                    "start_offset_ms": h.get("start_offset_ms"),
                }
            )
        if spread.get("merged"):
            m = spread["merged"]
            rows.append(
                {
                    "step": s["name"],
                    "host": "merged",
                    "at": m["file"],
                    "flows": sum(h["flow_count"] for h in spread["hosts"]),
                    "planned": sum(h["packets_planned"] for h in spread["hosts"]),
                    "sent": spread.get("packets_sent"),
                    "captured": m["packets"],
                    "rate_pps": m.get("rate_pps"),
                    "start_offset_ms": None,
                    "start_skew_ms": spread.get("start_skew_ms"),
                }
            )
    return rows


def analyze(steps: list[dict[str, Any]]) -> dict[str, Any]:
    rows = spread_table(steps)
    return {"spread": rows} if rows else {}


def plots(run: Path, doc: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Path]:
    return {}


def report(doc: dict[str, Any]) -> list:
    rows = doc.get("spread")
    if not rows:
        return []
    skews = [
        f"{r['step']}: {r['start_skew_ms']:.3f} ms"
        for r in rows
        if r["host"] == "merged" and r.get("start_skew_ms") is not None
    ]
    return [
        ("h2", "Generator hosts"),
        (
            "p",
            "Each host sends the flows whose key hash modulo the number of hosts is its index, "
            "all started at one agreed time; every host's frames are captured at the receiver's "
            "port facing it and the captures are merged into one. Start offset: first packet "
            "captured minus the agreed start minus the first packet's due time; the skew is the "
            "spread of the hosts' offsets" + (f" ({'; '.join(skews)})." if skews else "."),
        ),
        (
            "table",
            [
                "step",
                "host",
                "at",
                "flows",
                "planned",
                "sent",
                "captured",
                "pps",
                "start offset ms",
            ],
            [
                [
                    r["step"],
                    r["host"],
                    r["at"],
                    fmt_count(r["flows"]),
                    fmt_count(r["planned"]),
                    fmt_count(r["sent"]),
                    fmt_count(r["captured"]),
                    fmt_count(r["rate_pps"]),
                    fmt_count(r["start_offset_ms"], 3),
                ]
                for r in rows
            ],
        ),
    ]
