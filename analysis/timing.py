"""Timing accuracy of a generated capture (FLOR's tests of section 6.2).

For every flow instance the session says when it should start (`start + rep × rep_period`) and how
long it should last (`(packets − 1) × period`). The capture says when its first and last packets
were really stamped. The differences are the flow-start error and the flow-duration error; an
exact planner writing a pcap must make both zero.

Instances are found in the capture by their 5-tuple, through the engine's flow log (which names
the flow line and repetition of each 5-tuple); instances sharing a 5-tuple are left out, since a
capture cannot tell them apart.
"""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pandas as pd

KEY = ["ip_version", "proto", "src", "dst", "sport", "dport"]


def session_flows(text: str) -> pd.DataFrame:
    """The `flow` lines of a session file (generators/flowengine/README.md) as a table, indexed
    by their line number as the flow log counts lines (flow, stream and session lines together);
    session lines, whose instances start at drawn times, have no row."""
    rows, index = [], []
    number = 0
    for line in text.splitlines():
        if line.startswith("flow "):
            fields = dict(kv.split("=", 1) for kv in line.split()[1:])
            rows.append(
                {k: int(fields[k]) for k in ("start", "period", "packets", "reps", "rep_period")}
            )
            index.append(number)
        if line.startswith(("flow ", "stream ", "session ")):
            number += 1
    table = pd.DataFrame(
        rows,
        columns=["start", "period", "packets", "reps", "rep_period"],
        index=pd.Index(index, dtype=np.int64),
    )
    table.index.name = "flow"
    return table


def directions(log: pd.DataFrame) -> pd.DataFrame:
    """The engine flow log with one row per direction: a session instance's row (its 5-tuple
    the client's, `packets` and `bytes` both directions', `s_packets` and `s_bytes` the server's)
    becomes a client -> server row and a server -> client row (addresses and ports swapped),
    as a capture's one-way flow table sees them; rows of no packets are left out. A log
    without `s_packets` (no session lines) is returned as it is."""
    if "s_packets" not in log.columns:
        return log
    s_packets = log["s_packets"].fillna(0).astype(np.int64)
    s_bytes = log["s_bytes"].fillna(0).astype(np.int64)
    forward = log.assign(
        packets=log["packets"].astype(np.int64) - s_packets,
        bytes=log["bytes"].astype(np.int64) - s_bytes,
    )
    reverse = log.assign(
        src=log["dst"], dst=log["src"], sport=log["dport"], dport=log["sport"],
        packets=s_packets, bytes=s_bytes,
    )  # fmt: skip
    both = pd.concat([forward, reverse], ignore_index=True)
    return both[both["packets"] > 0].reset_index(drop=True)


def engine_key(df: pd.DataFrame) -> pd.DataFrame:
    """The engine flow log keyed like flow_table (text addresses through inet_pton/ntop)."""

    def norm(af: int, text: str) -> str:
        fam = socket.AF_INET if af == 4 else socket.AF_INET6
        return socket.inet_ntop(fam, socket.inet_pton(fam, str(text)))

    out = pd.DataFrame(
        {
            "ip_version": df["af"].astype(int),
            "proto": df["proto"].astype(int),
            "src": [norm(a, s) for a, s in zip(df["af"], df["src"])],
            "dst": [norm(a, s) for a, s in zip(df["af"], df["dst"])],
            "sport": df["sport"].astype(int),
            "dport": df["dport"].astype(int),
            "packets": df["packets"].astype(np.int64),
            "bytes": df["bytes"].astype(np.int64),
        }
    )
    return out


def timing_errors(flows: pd.DataFrame, engine_log: pd.DataFrame, session_text: str) -> pd.DataFrame:
    """One row per flow instance found in the capture: intended and measured start and duration.

    `flows` is the capture's flow table (analysis.metrics.flow_table), `engine_log` the engine's
    engine-flows.csv as read by pandas, `session_text` the run's session.ntg."""
    plan = session_flows(session_text)
    log = engine_key(engine_log).assign(
        flow=engine_log["flow"].astype(int).to_numpy(),
        rep=engine_log["rep"].astype(np.int64).to_numpy(),
    )
    log = log[~log.duplicated(KEY, keep=False)]
    log = log[log["flow"].isin(plan.index)]  # flow lines only (no session lines)
    both = log[KEY + ["flow", "rep"]].merge(flows[KEY + ["packets", "first_ns", "last_ns"]], on=KEY)
    line = plan.loc[both["flow"].to_numpy()]
    intended_start = (
        line["start"].to_numpy() + both["rep"].to_numpy() * line["rep_period"].to_numpy()
    )
    intended_duration = (line["packets"].to_numpy() - 1) * line["period"].to_numpy()
    first = both["first_ns"].to_numpy(np.int64)
    duration = both["last_ns"].to_numpy(np.int64) - first
    return pd.DataFrame(
        {
            "flow": both["flow"].to_numpy(),
            "rep": both["rep"].to_numpy(),
            "packets": both["packets"].to_numpy(),
            "intended_start_ns": intended_start,
            "start_ns": first,
            "start_error_ns": first - intended_start,
            "intended_duration_ns": intended_duration,
            "duration_ns": duration,
            "duration_error_ns": duration - intended_duration,
        }
    ).sort_values(["flow", "rep"], ignore_index=True)


def error_summary(values: np.ndarray) -> dict:
    """Distribution of one error column, in nanoseconds."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"count": 0}
    q = np.percentile(v, [1, 50, 99])
    return {
        "count": int(v.size),
        "exact": int(np.count_nonzero(v == 0)),
        "mean_ns": float(v.mean()),
        "std_ns": float(v.std()),
        "min_ns": float(v.min()),
        "p01_ns": float(q[0]),
        "median_ns": float(q[1]),
        "p99_ns": float(q[2]),
        "max_ns": float(v.max()),
        "max_abs_ns": float(np.abs(v).max()),
    }


def timing_summary(errors: pd.DataFrame) -> dict:
    return {
        "instances": int(len(errors)),
        "start_error": error_summary(errors["start_error_ns"].to_numpy()),
        "duration_error": error_summary(errors["duration_error_ns"].to_numpy()),
    }


def run_timing(run_dir: Path, flows: pd.DataFrame) -> tuple[pd.DataFrame, dict] | None:
    """Timing errors of a run folder, or None if it lacks session.ntg or engine-flows.csv."""
    session, log = run_dir / "session.ntg", run_dir / "engine-flows.csv"
    if not (session.is_file() and log.is_file()):
        return None
    engine_log = pd.read_csv(log)
    if engine_log.empty:
        return None
    errors = timing_errors(flows, engine_log, session.read_text())
    return errors, timing_summary(errors)
