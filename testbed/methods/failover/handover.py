"""Records lost across the handover: a fail-over step with a flow-meter pair
(`failover.meter`, testbed.meters.pair) scored against the client's capture.

Per step: the reference records (analysis.flowmeter.reference_records under the meter's rules)
of the flows to and from the virtual address, the union of both meters' records scored against
them (analysis.flowmeter.score: a flow that crossed the handover is `split` between the two
meters), and per flow key the packets in each meter's records beside the packets the client sent
and got answered, with the loss split into the outage, the records lost with the master and the
rest (analysis.flowmeter.handover). The per-key table is written as `<step>/handover.parquet`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis.capture import Capture
from analysis.flowmeter import COLLECTED_SCHEMA, MeterRules, conform, empty_table, reference_records
from analysis.flowmeter.handover import handover_flows, handover_totals
from analysis.flowmeter.score import STATUSES, score
from analysis.live import PALETTE, fmt_count, save_figure
from analysis.plots import figure
from ntgcore.files import replacing

FLOWS_FILE = "handover.parquet"
RECORDS_FILE = "records.parquet"  # each side's records (testbed.meters.pair's folders)
ROLES = ("master", "backup")


def folder_name(role: str) -> str:
    """ROLE's meter folder in the step folder (testbed.meters.pair.folder_name)."""
    return f"meter-{role}"


GROUP_NAMES = {1: "icmp", 6: "tcp", 17: "udp"}


def _records(step_dir: Path, role: str, problems: list[str]) -> pa.Table:
    path = step_dir / folder_name(role) / RECORDS_FILE
    try:
        return conform(pq.read_table(path), COLLECTED_SCHEMA)
    except (OSError, ValueError, pa.ArrowInvalid) as exc:
        problems.append(f"{folder_name(role)}/{RECORDS_FILE}: {exc}")
        return empty_table(COLLECTED_SCHEMA)


def _to_or_from(table: pa.Table, vip: str) -> pa.Table:
    return table.filter(
        pc.or_(pc.equal(table.column("src"), vip), pc.equal(table.column("dst"), vip))
    )


def _groups(flows: pa.Table) -> list[dict[str, Any]]:
    """The per-key table summed per protocol and direction (UDP's probe is one key per source
    port; ICMP and TCP one key each way)."""
    out = []
    protos = flows.column("proto").to_numpy()
    to_vip = flows.column("to_vip").to_numpy(zero_copy_only=False)
    for proto in sorted(set(protos.tolist())):
        for way in (True, False):
            pick = (protos == proto) & (to_vip == way)
            if not pick.any():
                continue
            part = flows.filter(pa.array(pick))
            out.append(
                {
                    "probe": GROUP_NAMES.get(int(proto), f"proto {proto}"),
                    "direction": "to the address" if way else "from the address",
                    **handover_totals(part),
                }
            )
    return out


def step_handover(
    step_dir: Path,
    entry: dict[str, Any],
    cap: Capture,
    unanswered: np.ndarray,
    fault_ns: int | None,
    died_ns: int | None,
) -> dict[str, Any]:
    """One step's row: totals, per-protocol groups, the score's statuses; writes FLOWS_FILE."""
    pair, params = entry["meter_pair"], entry.get("params") or {}
    vip = str((entry.get("vrrp") or {}).get("vip", "")).split("/")[0]
    problems: list[str] = []
    row: dict[str, Any] = {
        "step": entry["name"],
        "trial": params.get("trial"),
        "fault": params.get("fault"),
        "advert_int_s": params.get("advert_int_s"),
        "meter": pair.get("kind"),
        "dies_with_master": bool(pair.get("dies_with_master")),
        "master_killed": bool((pair.get("master") or {}).get("killed")),
        "died_after_fault_s": (died_ns - fault_ns) / 1e9
        if died_ns is not None and fault_ns is not None
        else None,
        "problems": problems,
    }
    if not vip:
        problems.append("no virtual address in the step's `vrrp` entry")
        return row
    sides = {role: _records(step_dir, role, problems) for role in ROLES}
    flows = handover_flows(cap, vip, sides["master"], sides["backup"], unanswered, died_ns)
    try:
        with replacing(step_dir / FLOWS_FILE) as tmp:
            pq.write_table(flows, tmp)
        row["flows_file"] = FLOWS_FILE
    except OSError as exc:
        problems.append(f"{FLOWS_FILE}: not written ({exc})")
    row.update(handover_totals(flows))
    row["answered"] = row["sent"] - row["unanswered"]
    row["groups"] = _groups(flows)
    rules = MeterRules(**pair["rules"]) if pair.get("rules") else MeterRules()
    ref = _to_or_from(reference_records(step_dir / "capture.pcap", rules), vip)
    union = pa.concat_tables([_to_or_from(sides[r], vip) for r in ROLES])
    result = score(ref, union, key_vlan=rules.key_vlan)
    row["score"] = {s: result.totals[s] for s in STATUSES}
    row["score"]["reference_records"] = result.totals["reference_records"]
    row["score"]["collected_records"] = result.totals["collected_records"]
    return row


def figure_handover(run: Path, pair: list[dict[str, Any]]) -> Path:
    """Per trial, stacked: packets in the master's records, in the backup's, lost with the
    master, lost in the outage, lost otherwise."""
    rows = [r for r in pair if "sent" in r]
    fig, ax = figure("Records lost across the handover", "", "packets")
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for i, (key, label) in enumerate(
        (
            ("in_master", "in the master's records"),
            ("in_backup", "in the backup's records"),
            ("lost_with_master", "lost with the master"),
            ("outage", "lost in the outage (no DUT received them)"),
            ("rest", "lost otherwise"),
        )
    ):
        values = np.array([r[key] for r in rows], float)
        ax.bar(x, values, 0.6, bottom=bottom, label=label, color=PALETTE[i % len(PALETTE)])
        bottom += values
    ax.plot(x, [r["sent"] for r in rows], "k_", ms=30, mew=1.5, label="sent by the client")
    ax.set_xticks(x, [f"{r['step']} ({r['meter']})" for r in rows], rotation=30, ha="right")
    ax.set_xlim(-0.9, len(rows) - 0.1)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.set_size_inches(8 + 0.8 * len(rows), 4.5)
    return save_figure(fig, run / "failover-meters.png")


def report(pair: list[dict[str, Any]]) -> list:
    if not pair:
        return []
    rows = [r for r in pair if "sent" in r]
    totals = [
        [
            r["step"],
            r["meter"],
            "yes" if r["dies_with_master"] else "no",
            fmt_count(r["sent"]),
            fmt_count(r["answered"]),
            fmt_count(r["in_master"]),
            fmt_count(r["in_backup"]),
            fmt_count(r["lost_with_master"]),
            fmt_count(r["outage"]),
            fmt_count(r["rest"]),
            fmt_count(r["extra"]),
            " / ".join(str(r["exported_by"][k]) for k in ("master", "backup", "both", "neither")),
            " / ".join(str(r["score"][k]) for k in ("exact", "differs", "split", "missing")),
        ]
        for r in rows
    ]
    groups = [
        [
            r["step"],
            g["probe"],
            g["direction"],
            fmt_count(g["flows"]),
            fmt_count(g["sent"]),
            fmt_count(g["sent"] - g["unanswered"]),
            fmt_count(g["in_master"]),
            fmt_count(g["in_backup"]),
            fmt_count(g["lost_with_master"]),
            fmt_count(g["outage"]),
            fmt_count(g["rest"]),
            " / ".join(str(g["exported_by"][k]) for k in ("master", "backup", "both", "neither")),
        ]
        for r in rows
        for g in r["groups"]
    ]
    blocks: list = [
        ("h2", "Records lost across the handover"),
        (
            "p",
            "The same flow meter on the master's and on the backup's segment interface, each "
            "with its own collector. Per trial, the flows to and from the virtual address in the "
            "client's capture: packets sent, answered, in the master's and in the backup's "
            "records; the loss split into the packets the master's meter held when it died "
            "(`meter_dies_with_master`) that no record has, the outage's requests no DUT "
            "received, and the rest; extra: packets in records beyond those sent (a meter in "
            "promiscuous mode sees the requests the bridge floods to it during the outage). "
            "Flows exported by master / backup / both (split across the handover) / neither; "
            "the union of both meters' records scored against the reference: exact / differs / "
            "split / missing records.",
        ),
        (
            "table",
            [
                "step",
                "meter",
                "dies with master",
                "sent",
                "answered",
                "in master's records",
                "in backup's records",
                "lost with the master",
                "outage",
                "rest",
                "extra",
                "flows: master / backup / both / neither",
                "records: exact / differs / split / missing",
            ],
            totals,
        ),
        (
            "table",
            [
                "step",
                "probe",
                "direction",
                "flows",
                "sent",
                "answered",
                "in master's",
                "in backup's",
                "lost with the master",
                "outage",
                "rest",
                "master / backup / both / neither",
            ],
            groups,
        ),
    ]
    problems = [f"{r['step']}: {p}" for r in pair for p in r.get("problems") or []]
    if problems:
        blocks.append(("p", "Problems: " + "; ".join(problems)))
    return blocks


__all__ = ["FLOWS_FILE", "figure_handover", "report", "step_handover"]
