"""After a step spread over several generator hosts (testbed.spread): each host's counters, its
own capture and first packet, the captures merged into one, and the start skew.

Every host's frames are captured on their own (`spread.hosts[].capture`: the receiver's port
facing the host, so every capture is taken on the receiver's one clock). Those captures are merged
by time into hosts-merged.pcap (mergecap, as the attack mixing does); the checks are exact: the
merged count equals the sum of the hosts' captures and the sum of the hosts' generator counters
(`packets_sent`), and the step's own capture (when it sees every host) agrees. The start skew is
the spread, over the hosts, of (first packet captured - agreed start - first packet's due time).

When the step's own capture (`testbed.capture.at`) is one host's capture place (no tap sees every
host: the shape of SSH hosts), the merged capture becomes the step's capture.pcap, so that the
analysis sees one capture of every host: the host's file is kept as capture-ROLE-IFACE.pcap and
the step's capture statistics and wire count become the sums over the hosts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from analysis.capture import CaptureError, iter_capture
from idsrules.attacks import AttackError, merge_pcaps
from ntgcore.errors import BadInput

MERGED = "hosts-merged.pcap"


def capture_span(path: Path) -> dict[str, Any]:
    """Packets, first and last time stamp (ns since the epoch) of one capture, read in chunks."""
    packets, first, last = 0, None, None
    for chunk in iter_capture(path, reuse=True):
        if len(chunk):
            first = int(chunk.ts_ns[0]) if first is None else first
            last = int(chunk.ts_ns[-1])
        packets += len(chunk)
    return {"packets": packets, "first_ns": first, "last_ns": last}


def spread_accounting(entry: dict, step_dir: Path, info: dict, start_at_ns: int | None) -> dict:
    """The step entry's `spread`: per host and merged counters, the checks and the start skew."""
    out: dict[str, Any] = {k: v for k, v in info.items() if k != "hosts"}
    out["start_at_ns"] = start_at_ns
    captures = {c["at"]: c for c in entry.get("captures", [])}
    gens = entry.get("generators", {})
    hosts, files = [], []
    for h in info["hosts"]:
        gen = gens.get(h["name"], {})
        row: dict[str, Any] = {
            **h,
            "status": gen.get("status"),
            "packets_sent": gen.get("packets_sent"),
            "bytes_sent": gen.get("bytes_sent"),
        }
        cap = captures.get(h["capture"]) if h.get("capture") else None
        if cap is not None and (step_dir / cap["file"]).is_file():
            try:
                span = capture_span(step_dir / cap["file"])
            except CaptureError as exc:
                row["capture_problem"] = str(exc)
            else:
                row.update(
                    capture_file=cap["file"],
                    captured=span["packets"],
                    first_packet_ns=span["first_ns"],
                    last_packet_ns=span["last_ns"],
                )
                if span["packets"] and start_at_ns is not None:
                    row["start_offset_ms"] = (
                        span["first_ns"] - start_at_ns - h["first_due_ns"]
                    ) / 1e6
                if span["packets"] and span["last_ns"] > span["first_ns"]:
                    row["rate_pps"] = (span["packets"] - 1) / (
                        (span["last_ns"] - span["first_ns"]) / 1e9
                    )
                files.append(step_dir / cap["file"])
        hosts.append(row)
    out["hosts"] = hosts
    sent = [h["packets_sent"] for h in hosts]
    out["packets_sent"] = sum(sent) if all(s is not None for s in sent) else None
    offsets = [h["start_offset_ms"] for h in hosts if "start_offset_ms" in h]
    out["start_skew_ms"] = (max(offsets) - min(offsets)) if len(offsets) == len(hosts) > 1 else None
    counted = next((c for c in entry.get("captures", []) if c.get("counted")), None)
    as_capture = counted is not None and any(h.get("capture") == counted["at"] for h in hosts)
    if files and len(files) == len(hosts):
        target = step_dir / (counted["file"] if as_capture else MERGED)
        try:
            if as_capture:  # the step's capture.pcap is one host's: keep it under the host's name
                own = f"capture-{counted['at'].replace(':', '-')}.pcap"
                os.replace(target, step_dir / own)
                files = [step_dir / own if f == target else f for f in files]
                for h in hosts:
                    if h.get("capture_file") == counted["file"]:
                        h["capture_file"] = own
                counted.update(file=own, counted=False)
            merge_pcaps(files, target)
            merged = capture_span(target)
        except (AttackError, CaptureError, OSError) as exc:
            out["merge_problem"] = str(exc)
            return out
        if as_capture:
            merged_stats(
                entry,
                [c for c in entry["captures"] if c["at"] in {h.get("capture") for h in hosts}],
                target.name,
            )
        host_sum = sum(h["captured"] for h in hosts)
        out["merged"] = {
            "file": target.name,
            "packets": merged["packets"],
            "hosts_captured": host_sum,
            "is_step_capture": as_capture,
            "first_ns": merged["first_ns"],
            "last_ns": merged["last_ns"],
        }
        if merged["packets"] > 1 and merged["last_ns"] > merged["first_ns"]:
            out["merged"]["rate_pps"] = (merged["packets"] - 1) / (
                (merged["last_ns"] - merged["first_ns"]) / 1e9
            )
        checks = [("merged capture = sum of the hosts' captures", host_sum, merged["packets"])]
        if out["packets_sent"] is not None:
            checks.append(
                (
                    "merged capture = sum of the hosts' generator counters",
                    out["packets_sent"],
                    merged["packets"],
                )
            )
        step_count = (entry.get("capture") or {}).get("captured")
        if step_count is not None and not as_capture:
            checks.append(("step capture = merged capture", merged["packets"], step_count))
        out["checks"] = [
            {"name": n, "expected": e, "measured": m, "ok": e == m} for n, e, m in checks
        ]
    return out


def merged_stats(entry: dict, rows: list[dict], file: str) -> None:
    """The merged capture as the step's capture: its statistics and the wire count are the sums
    over the hosts' captures `rows` (the loss accounting's wire was one host's port)."""
    stats: dict[str, Any] = {"merged_from": [r["file"] for r in rows]}
    for key in ("captured", "received_by_filter", "dropped_by_kernel"):
        values = [r.get(key) for r in rows]
        stats[key] = sum(values) if all(v is not None for v in values) else None
    entry["capture"] = stats
    entry["captures"].append(
        {"file": file, "at": "+".join(r["at"] for r in rows), "counted": True, **stats}
    )
    loss = entry.get("loss")
    wires = [entry.get("wire", {}).get(r["at"], {}).get("rx_packets") for r in rows]
    if loss is not None and all(w is not None for w in wires):
        loss["wire"] = sum(wires)
        loss["captured"], loss["capture_dropped"] = stats["captured"], stats["dropped_by_kernel"]
        if loss.get("sent") is not None:
            loss["lost_on_wire"] = loss["sent"] - loss["wire"]
            last = loss["dut"] if loss.get("dut") is not None else loss["wire"]
            loss["loss_rate"] = (1 - last / loss["sent"]) if loss["sent"] else None


def collect_hosts(folder: Path) -> dict:
    """Hosts started by Ansible (site.yml, tag multihost): FOLDER holds spread.json (`testbed
    spread`), start_at_ns (the agreed time) and one folder per host with what the play fetched
    (engine-summary.json; capture.pcap when a collector captured that host's port). The same
    accounting as a live step's, written to FOLDER/spread-collected.json."""
    try:
        info = json.loads((folder / "spread.json").read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(
            f"{folder}/spread.json: {exc}; run `testbed spread SCENARIO --out {folder}` first"
        ) from None
    start = folder / "start_at_ns"
    start_at_ns = (
        int(start.read_text()) if start.is_file() and start.read_text().strip().isdigit() else None
    )
    entry: dict[str, Any] = {"generators": {}, "captures": []}
    hosts = []
    for h in info["hosts"]:
        summary_file = folder / h["name"] / "engine-summary.json"
        try:
            summary = json.loads(summary_file.read_text())
        except (OSError, ValueError):
            summary = None  # not fetched: the host failed or was not reached; kept as missing
        if summary is not None:
            entry["generators"][h["name"]] = {
                "status": summary.get("status"),
                "packets_sent": summary.get("sent"),
                "bytes_sent": summary.get("sent_bytes"),
            }
        capture = f"{h['name']}/capture.pcap"
        if (folder / capture).is_file():
            entry["captures"].append({"at": f"{h['name']}:capture", "file": capture})
        hosts.append({**h, "capture": f"{h['name']}:capture"})
    doc = spread_accounting(entry, folder, {**info, "hosts": hosts}, start_at_ns)
    (folder / "spread-collected.json").write_text(json.dumps(doc, indent=2) + "\n")
    return doc
