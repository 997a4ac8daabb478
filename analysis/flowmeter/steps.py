"""A flow meter's live step, scored: `meter_step(step_dir, dut_entry, capture) -> dict`.

A live step whose device under test is a flow meter leaves in its folder the wire capture at
the meter's interface (`capture.pcap`) and, in `meter/`: the records read back from the
collector (`records.parquet`, COLLECTED_SCHEMA), the export packets (`export.pcap`) and the
counters (`counters.json`: the meter's own under `own`, the collector's under `collector` with
the export count under `collector.export.records`, and `collected`). The step's manifest entry
holds the rules a conforming meter with the step's options follows (`dut.rules`,
`dataclasses.asdict(MeterRules)`).

`meter_step` computes the reference records from the capture with those rules, scores the
collected records against them, writes the per-flow table as `meter/score.parquet` (whole or
not at all) and returns a summary: the score's totals, a few sums over the per-flow table, and
the loss by stage as seed 002 separates it (section III.A.1: dropped by the capture buffer,
lost in the meter's processing, lost on the way to the collector), in packets and in flows, each
with its fraction of what was on the wire (docs/flowmeters.md, "Loss by stage").

Nothing here raises for a missing or damaged file: the summary's `missing` says what was
missing and what could not be computed because of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ntgcore.files import replacing

from ..capture import CaptureError
from .records import COLLECTED_SCHEMA, MeterRules, conform
from .reference import reference_records_with_stats
from .score import DEFAULT_TOLERANCE_NS, score

# The files of a meter step, named once here: testbed.meters writes them under these names.
METER_DIR = "meter"
RECORDS_FILE = "records.parquet"
COUNTERS_FILE = "counters.json"
EXPORT_FILE = "export.pcap"
SCORE_FILE = "score.parquet"
# The stages of a packet from the wire to the collector, in order (seed 002, III.A.1).
STAGES: tuple[str, ...] = ("capture", "processing", "export")
STAGE_TITLES: dict[str, str] = {
    "capture": "dropped at capture",
    "processing": "lost in processing",
    "export": "lost in export",
}


def _fraction(part: int | None, whole: int | None) -> float | None:
    if part is None or not whole:
        return None
    return part / whole


def _read_counters(folder: Path, missing: list[str]) -> dict[str, Any]:
    path = folder / COUNTERS_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        missing.append(f"{METER_DIR}/{COUNTERS_FILE}: not there (no meter or export counters)")
        return {}
    except (OSError, ValueError) as exc:
        missing.append(f"{METER_DIR}/{COUNTERS_FILE}: unreadable ({exc})")
        return {}
    if not isinstance(data, dict):
        missing.append(f"{METER_DIR}/{COUNTERS_FILE}: not a JSON object")
        return {}
    return data


def _read_records(folder: Path, missing: list[str]) -> pa.Table | None:
    path = folder / RECORDS_FILE
    if not path.is_file():
        missing.append(
            f"{METER_DIR}/{RECORDS_FILE}: not there (the collector did not write the meter's "
            "records: no score)"
        )
        return None
    try:
        return conform(pq.read_table(path), COLLECTED_SCHEMA)
    except (pa.ArrowException, OSError, ValueError) as exc:
        missing.append(f"{METER_DIR}/{RECORDS_FILE}: unreadable ({exc}): no score")
        return None


def _rules(dut_entry: Mapping[str, Any], missing: list[str]) -> MeterRules | None:
    given = dut_entry.get("rules")
    if given is None:
        missing.append(
            "the meter's rules: the manifest entry has none (a step the run did not record): "
            "no reference records, only the packet counts"
        )
        return None
    try:
        return MeterRules(**given)
    except (TypeError, ValueError) as exc:
        missing.append(f"the meter's rules in the manifest entry are not MeterRules ({exc})")
        return None


def _int(x: Any) -> int | None:
    return int(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _export(counters: Mapping[str, Any]) -> dict[str, Any]:
    """What the counters say of the export: records on the wire, collected, complete or not."""
    collector = counters.get("collector")
    out: dict[str, Any] = {
        # a meter that writes its own records (nfpcapd, argus) has `collected` and no collector
        "exports": collector is not None or "collected" not in counters,
        "exported": None,
        "collected": _int(counters.get("collected")),
        "export_complete": None,
    }
    if isinstance(collector, Mapping):
        export = collector.get("export")
        if isinstance(export, Mapping):
            out["exported"] = _int(export.get("records"))
        out["export_complete"] = collector.get("export_complete")
    return out


def _flow_sums(flows: pa.Table) -> dict[str, Any]:
    """Sums over the per-flow table: flows with a packet or byte error and the errors' sums."""
    out: dict[str, Any] = {}
    for name in ("packet_error", "byte_error"):
        col = flows.column(name).drop_null()
        out[f"{name}_flows"] = int(pc.sum(pc.not_equal(col, 0)).as_py() or 0)
        out[f"{name}_sum"] = int(pc.sum(col).as_py() or 0)
    return out


def _stages(
    wire_packets: int | None,
    wire_flows: int | None,
    dropped: int | None,
    dropped_why: str | None,
    collected_packets: int | None,
    found_flows: int | None,
    missing_flows: int | None,
    export: Mapping[str, Any],
) -> dict[str, dict[str, Any]]:
    """The loss by stage (docs/flowmeters.md, "Loss by stage"). Each stage: packets, flows,
    their fractions of the wire's, and `why` when a number is unknown or covers more."""
    cap: dict[str, Any] = {"packets": dropped, "flows": None, "why": dropped_why}
    short = (
        wire_packets - collected_packets
        if wire_packets is not None and collected_packets is not None
        else None
    )
    if dropped is not None and short is not None and dropped > max(short, 0):
        # a counter above what is missing (nfpcapd's libpcap statistics count some packets
        # twice): the packets missing are all it can have lost
        cap["said"] = dropped
        dropped = max(short, 0)
        cap["packets"] = dropped
        dropped_why = (
            f"the meter's counter says {cap['said']:,} dropped, more than the {dropped:,} packets "
            "missing from its records: counted as those"
        )
    if dropped == 0:
        cap["flows"] = 0
    elif dropped is not None:
        cap["why"] = (
            "the capture counter counts packets: a flow whose every packet was dropped is "
            "counted in processing"
        )
        if "said" in cap:
            cap["why"] = f"{dropped_why}; {cap['why']}"
    exp: dict[str, Any] = {"packets": None, "flows": None, "why": None}
    exported, collected = export.get("exported"), export.get("collected")
    if not export.get("exports"):
        exp.update(packets=0, flows=0, why="the meter writes its own records: no export")
    elif exported is None:
        exp["why"] = "no export count (no export capture): counted in processing"
    else:
        lost_records = max(0, exported - (collected or 0))
        flows = lost_records if missing_flows is None else min(lost_records, missing_flows)
        exp["flows"] = flows
        if lost_records == 0:
            exp["packets"] = 0
        else:
            exp["why"] = (
                f"{lost_records} exported record(s) not collected: the export count gives "
                "records, not their packets (counted in processing)"
            )
        if not export.get("export_complete"):
            exp["why"] = ((exp["why"] + "; ") if exp["why"] else "") + (
                "the export capture dropped packets: the export count is a lower bound"
            )
    proc: dict[str, Any] = {"packets": None, "flows": None, "why": None}
    if wire_packets is not None and collected_packets is not None:
        proc["packets"] = wire_packets - collected_packets - (dropped or 0) - (exp["packets"] or 0)
    if missing_flows is not None:
        proc["flows"] = missing_flows - (cap["flows"] or 0) - (exp["flows"] or 0)
    notes = [
        f"its {what} include those lost at {name} (unknown there)"
        for what in ("packets", "flows")
        for name, d in (("capture", cap), ("export", exp))
        if d[what] is None and proc[what] is not None
    ]
    if notes:
        proc["why"] = "; ".join(notes)
    stages = {
        "wire": {"packets": wire_packets, "flows": wire_flows},
        "capture": cap,
        "processing": proc,
        "export": exp,
        "collected": {"packets": collected_packets, "flows": found_flows},
    }
    for d in stages.values():
        d["packets_fraction"] = _fraction(d["packets"], wire_packets)
        d["flows_fraction"] = _fraction(d["flows"], wire_flows)
    total: dict[str, Any] = {"packets": None, "flows": missing_flows}
    if wire_packets is not None and collected_packets is not None:
        total["packets"] = wire_packets - collected_packets
    total["packets_fraction"] = _fraction(total["packets"], wire_packets)
    total["flows_fraction"] = _fraction(missing_flows, wire_flows)
    # every stage known: the three stages add up to the total
    total["by_stage"] = all(stages[s][w] is not None for s in STAGES for w in ("packets", "flows"))
    stages["total"] = total
    return stages


def meter_step(
    step_dir: str | os.PathLike,
    dut_entry: Mapping[str, Any] | None,
    capture: str | os.PathLike | None,
    capture_stats: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The score and the loss by stage of a flow-meter step (module docstring).

    STEP_DIR: the step's folder (with `meter/`); DUT_ENTRY: the step's manifest entry's `dut`
    (`kind`, `rules`, optionally `tolerance_ns`; {} or None for a step the run did not record);
    CAPTURE: the wire capture at the meter's interface (None: there is none); CAPTURE_STATS: the
    entry's `capture` (its `dropped_by_kernel` tells whether the reference is complete).

    Returns: `kind`, `rules`, `tolerance_ns`, `missing` (what was missing or damaged, [] when
    nothing), `reference` (packets read, IP packets, records, the capture's problem),
    `counters` (the meter's own, `exported`, `collected`, `export_complete`), `totals` (the
    score's, plus `packet_error_flows`/`_sum`, `byte_error_flows`/`_sum`; None without a score),
    `stages` (_stages) and `files` (the score table, relative to STEP_DIR, when written)."""
    step = Path(step_dir)
    folder = step / METER_DIR
    dut = dict(dut_entry or {})
    missing: list[str] = []
    counters = _read_counters(folder, missing)
    own: dict[str, Any] = counters["own"] if isinstance(counters.get("own"), dict) else {}
    if not own and isinstance(dut.get("counters"), dict):
        own = dut["counters"]
    export = _export(counters)
    kind = dut.get("kind") or counters.get("meter")
    rules = _rules(dut, missing)
    tolerance = int(dut.get("tolerance_ns") or DEFAULT_TOLERANCE_NS)
    out: dict[str, Any] = {
        "kind": kind,
        "rules": dict(dut["rules"]) if rules is not None else None,
        "tolerance_ns": tolerance,
        "missing": missing,
        "reference": None,
        "counters": {"own": own, **{k: export[k] for k in ("exported", "collected")}},
        "totals": None,
        "stages": None,
        "files": {},
    }
    out["counters"]["export_complete"] = export["export_complete"]
    reference = None
    wire_packets: int | None = None
    if capture is None or not Path(capture).is_file():
        missing.append("capture.pcap: not there (the wire at the meter's interface): no reference")
    else:
        try:
            reference, stats = reference_records_with_stats(capture, rules or MeterRules())
        except CaptureError as exc:
            missing.append(f"the capture: {exc.reason}: no reference")
        else:
            wire_packets = int(pc.sum(reference.column("packets")).as_py() or 0)
            out["reference"] = {
                "capture": os.path.relpath(capture, step),
                "packets": stats.packets,
                "ip_packets": stats.ip_packets,
                "records": reference.num_rows if rules is not None else None,
                "problem": stats.problem,
            }
            if stats.problem is not None:
                missing.append(
                    f"the capture is damaged at {stats.problem}: the reference has the packets "
                    "before it only"
                )
            if rules is None:
                reference = None
    dropped_cap = _int((capture_stats or {}).get("dropped_by_kernel"))
    if dropped_cap:
        missing.append(
            f"the capture dropped {dropped_cap} packet(s): the reference lacks them (their "
            "records count as spurious or differing)"
        )
    collected = _read_records(folder, missing)
    if collected is not None and export["collected"] is None:
        export["collected"] = out["counters"]["collected"] = collected.num_rows
    found_flows = missing_flows = wire_flows = None
    if reference is not None and collected is not None and rules is not None:
        result = score(reference, collected, tolerance_ns=tolerance, key_vlan=rules.key_vlan)
        out["totals"] = {**result.totals, **_flow_sums(result.flows)}
        wire_flows = result.totals["reference_records"]
        missing_flows = result.totals["missing"]
        found_flows = wire_flows - missing_flows
        try:
            with replacing(folder / SCORE_FILE) as tmp:
                pq.write_table(result.flows, tmp)
            out["files"]["score"] = f"{METER_DIR}/{SCORE_FILE}"
        except OSError as exc:
            missing.append(f"{METER_DIR}/{SCORE_FILE}: not written ({exc})")
    elif reference is not None:
        wire_flows = reference.num_rows
    dropped = _int(own.get("packets_dropped"))
    unread = _int(own.get("packets_unprocessed"))  # in the capture buffer, never read (softflowd)
    if dropped is not None and unread:
        dropped += unread
    why = None
    if dropped is None:
        why = f"{kind or 'the meter'} reports no capture drop counter" + (
            "" if counters else f" (no readable {METER_DIR}/{COUNTERS_FILE})"
        )
    collected_packets = (
        int(pc.sum(collected.column("packets")).as_py() or 0) if collected is not None else None
    )
    out["stages"] = _stages(
        wire_packets,
        wire_flows,
        dropped,
        why,
        collected_packets,
        found_flows,
        missing_flows,
        export,
    )
    return out


__all__ = ["METER_DIR", "SCORE_FILE", "STAGES", "STAGE_TITLES", "meter_step"]
