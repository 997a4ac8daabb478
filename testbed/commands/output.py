"""What more than one command prints, and where commands write by default."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path


def err(message: str) -> None:
    print(message, file=sys.stderr)


def default_out(name: str) -> Path:
    """results/<UTC time>-NAME: a command's output folder when --out is not given."""
    return Path("results") / (datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + name)


def print_metrics(m: dict) -> None:
    """The capture's lines of an offline run or an analysed capture (`run`, `analyze`)."""
    flows = m.get("flows") or {}
    mean, variance = m.get("mean_pps"), m.get("variance_pct")
    rate = (
        f"mean {mean:,.0f} pps (variance {variance:.2f}%)"
        if mean is not None and variance is not None
        else "no complete second for a rate"
    )
    print(
        f"capture: {m.get('packets', 0):,} packets, {m.get('bytes', 0):,} bytes, "
        f"{flows.get('count', '?')} flows; {rate}"
    )
    checks = m.get("checks", [])
    if checks:
        ok = sum(1 for c in checks if c.get("ok"))
        print(f"checks: {ok} of {len(checks)} agree with the scenario and the generator")


def print_multiply_report(r: dict) -> None:
    """The capture-counted lines of analysis.multiply's report (`multiply`, `analyze`)."""
    spread = ", ".join(f"{k} x {v}" for k, v in r["shadow_flows_per_original"].items())
    print(
        f"from the captures: egress/ingress {r['packet_ratio']:.4f} ({r['egress_packets']:,} of "
        f"{r['expected_egress_packets']:,} expected), shadow flows per original: {spread or '-'}, "
        f"{r['shadow_directions_equal']:,} of {r['shadow_directions']:,} shadow flow directions equal to their "
        f"original in packets and bytes: {'as planned' if r['ok'] else 'NOT as planned'}"
    )
    if not r["ok"]:
        err("testbed multiply: the output is not as planned (see the report's table)")
