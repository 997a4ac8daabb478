"""The analysis of a multiplied capture (seed 003, docs/multiplier.md).

`read_plan(path)` reads the shadow plan `flowengine multiply` writes (CSV) as a map from either
direction of any flow, original or shadow, to (flow, copy, direction); `shadow_addresses(path)`
maps every address of the plan, original or shadow, to (original address, copy).

`multiplied_report(ingress, egress, plan) -> dict` reads both captures (chunk by chunk, the
project's reader and flow table) and counts, from the captures alone: ingress and egress packets
and bytes and their ratio, the flows of the egress mapped back through the plan to their
original, the shadow flows found per original flow, and per shadow flow whether its packets and
bytes per direction equal its original's. `write_report(doc, out_dir, stem)` writes
STEM.json, STEM.md (the table) and STEM.png (the plot).
"""

from __future__ import annotations

import csv
import ipaddress
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from ntgcore.files import write_whole

from .capture import iter_capture
from .metrics import FlowAccumulator
from .plots import BLUE, GREY, ORANGE, figure, legend, save

ShadowKey = tuple[int, str, int, str, int]  # proto, address, port, address, port (one direction)
REPORT_STEM = "multiply_report"


def _plan_rows(path: Path):
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            yield (
                int(row["flow"]),
                int(row["copy"]),
                int(row["proto"]),
                str(ipaddress.ip_address(row["a_addr"])),
                int(row["a_port"]),
                str(ipaddress.ip_address(row["b_addr"])),
                int(row["b_port"]),
            )


def read_plan(path: Path) -> dict[ShadowKey, tuple[int, int, int]]:
    """The plan as a map from either direction of a flow (original or shadow) to (flow, copy,
    direction); copy 0 is the original, direction 0 is a -> b. Addresses are normalised
    (ipaddress) so any reader's text matches."""
    found: dict[ShadowKey, tuple[int, int, int]] = {}
    for flow, copy, proto, a, pa, b, pb in _plan_rows(Path(path)):
        found[(proto, b, pb, a, pa)] = (flow, copy, 1)
        found[(proto, a, pa, b, pb)] = (flow, copy, 0)
    return found


def shadow_addresses(path: Path) -> dict[str, tuple[str, int]]:
    """Every address of the plan (normalised text) -> (its original address, copy); an original
    maps to itself with copy 0. The plan keeps each flow's endpoints in the original's order, so
    a copy's endpoint a is the shadow of the original's endpoint a."""
    original: dict[int, tuple[str, str]] = {}
    found: dict[str, tuple[str, int]] = {}
    for flow, copy, _proto, a, _pa, b, _pb in _plan_rows(Path(path)):
        if copy == 0:
            original[flow] = (a, b)
            found[a], found[b] = (a, 0), (b, 0)
        else:
            oa, ob = original[flow]
            found[a], found[b] = (oa, copy), (ob, copy)
    return found


def _flows(path: Path) -> tuple[dict, int, int]:
    """The unidirectional flows of a capture {key: [packets, bytes]}, its packets and wire bytes."""
    acc = FlowAccumulator()
    packets = wire = 0
    for chunk in iter_capture(path):
        acc.add(chunk)
        packets += len(chunk)
        wire += int(chunk.wire_len.sum())
    t = acc.table()
    flows = {
        (int(p), s, int(sp), d, int(dp)): [int(n), int(b)]
        for p, s, sp, d, dp, n, b in zip(
            t["proto"], t["src"], t["sport"], t["dst"], t["dport"], t["packets"], t["bytes"]
        )
    }
    return flows, packets, wire


def _locate(key: tuple, plan: dict, by_addr: dict) -> tuple[int, int, int] | None:
    """The plan entry of a flow of the capture; a flow whose ports the reader and the plan
    spell differently (ICMP echo identifiers, later fragments) by its protocol and addresses
    when those name one flow of the plan."""
    proto, src, dst = key[0], str(ipaddress.ip_address(key[1])), str(ipaddress.ip_address(key[3]))
    ports = [(key[2], key[4])]
    if proto in (
        1,
        58,
    ):  # the reader gives an ICMP echo's identifier as sport, the plan as both ports
        ports += [(key[2], key[2]), (0, 0)]
    for sport, dport in ports:
        hit = plan.get((proto, src, sport, dst, dport))
        if hit is not None:
            return hit
    cands = by_addr.get((proto, src, dst), ())
    return cands[0] if len(cands) == 1 else None


def multiplied_report(
    ingress: Path, egress: Path, plan_path: Path, copies: int, same_bytes: bool = True
) -> dict:
    """The counts of a multiplication, from its input and output captures and its plan. With
    `same_bytes` false (URLs substituted: a shadow request has its own length) a shadow flow is
    compared with its original by packets only."""
    plan = read_plan(plan_path)
    by_addr: dict[tuple, list] = defaultdict(list)
    for (proto, src, _sport, dst, _dport), v in plan.items():
        if v not in by_addr[(proto, src, dst)]:
            by_addr[(proto, src, dst)].append(v)
    fin, pin, bin_ = _flows(Path(ingress))
    fout, pout, bout = _flows(Path(egress))
    orig: dict[tuple[int, int], list[int]] = {}
    for key, (n, b) in fin.items():
        hit = _locate(key, plan, by_addr)
        if hit is not None and hit[1] == 0:
            cur = orig.setdefault((hit[0], hit[2]), [0, 0])
            cur[0] += n
            cur[1] += b
    seen: dict[tuple[int, int, int], list[int]] = defaultdict(lambda: [0, 0])
    unmapped: Counter[str] = Counter()
    for key, (n, b) in fout.items():
        hit = _locate(key, plan, by_addr)
        if hit is None:
            unmapped["flows"] += 1
            unmapped["packets"] += n
            continue
        cur = seen[hit]
        cur[0] += n
        cur[1] += b
    copies_of: dict[int, set[int]] = defaultdict(set)
    equal = differ = 0
    diffs: list[dict[str, int]] = []
    ratios = []  # per original flow and direction: shadow packets / original packets (each copy)
    for (flow, copy, direction), (n, b) in seen.items():
        if copy == 0:
            continue
        copies_of[flow].add(copy)
        want = orig.get((flow, direction), [0, 0])
        if n == want[0] and (b == want[1] or not same_bytes):
            equal += 1
        else:
            differ += 1
            if len(diffs) < 20:
                diffs.append(
                    {
                        "flow": flow,
                        "copy": copy,
                        "direction": direction,
                        "packets": n,
                        "bytes": b,
                        "original_packets": want[0],
                        "original_bytes": want[1],
                    }
                )
        ratios.append((want[0], n))
    flows = sorted({f for f, _ in orig})
    per_original = Counter(len(copies_of.get(f, ())) for f in flows)
    missing_originals = sum(1 for key in orig if seen.get((key[0], 0, key[1])) != orig[key])
    rewritten_in = sum(v[0] for v in orig.values())
    doc = {
        "copies": copies,
        "ingress_packets": pin,
        "egress_packets": pout,
        "ingress_bytes": bin_,
        "egress_bytes": bout,
        "packet_ratio": pout / pin if pin else 0.0,
        "byte_ratio": bout / bin_ if bin_ else 0.0,
        "ingress_rewritable_packets": rewritten_in,
        "passed_through_packets": pin - rewritten_in,
        "expected_egress_packets": (copies + 1) * rewritten_in + (pin - rewritten_in),
        "original_flows": len(flows),
        "original_directions": len(orig),
        "shadow_flows_per_original": {str(k): v for k, v in sorted(per_original.items())},
        "shadow_directions": equal + differ,
        "shadow_directions_equal": equal,
        "shadow_directions_differ": differ,
        "bytes_compared": same_bytes,
        "originals_changed": missing_originals,
        "unmapped_egress_flows": unmapped["flows"],
        "unmapped_egress_packets": unmapped["packets"],
        "differences": diffs,
        "ingress": str(ingress),
        "egress": str(egress),
        "plan": str(plan_path),
    }
    doc["ok"] = (
        pout == doc["expected_egress_packets"]
        and differ == 0
        and missing_originals == 0
        and set(per_original) <= {copies}
        and equal == copies * len(orig)
    )
    doc["per_flow_packets"] = sorted(ratios)[
        :: max(1, len(ratios) // 2000)
    ]  # the plot's points, thinned
    return doc


def markdown(doc: dict) -> str:
    t = doc["copies"]
    spread = ", ".join(f"{k}: {v}" for k, v in doc["shadow_flows_per_original"].items())
    rows = [
        ("copies T", f"{t}", "-"),
        ("ingress packets / bytes", f"{doc['ingress_packets']:,} / {doc['ingress_bytes']:,}", "-"),
        ("egress packets / bytes", f"{doc['egress_packets']:,} / {doc['egress_bytes']:,}", "-"),
        (
            "egress / ingress (packets)",
            f"{doc['packet_ratio']:.4f}",
            f"{(t + 1) * doc['ingress_rewritable_packets'] + doc['passed_through_packets']:,} packets "
            f"= (T+1) x {doc['ingress_rewritable_packets']:,} + {doc['passed_through_packets']:,} passed",
        ),
        (
            "egress / ingress (bytes)",
            f"{doc['byte_ratio']:.4f}",
            f"{t + 1}" if doc["bytes_compared"] else "other than T+1: URLs substituted",
        ),
        (
            "original flows (directions)",
            f"{doc['original_flows']:,} ({doc['original_directions']:,})",
            "-",
        ),
        ("shadow flows per original", spread or "-", f"{t}: {doc['original_flows']:,}"),
        (
            "shadow directions equal to their original (packets"
            + (" and bytes)" if doc["bytes_compared"] else ", not bytes: URLs substituted)"),
            f"{doc['shadow_directions_equal']:,} of {doc['shadow_directions']:,}",
            f"{t * doc['original_directions']:,}",
        ),
        ("originals changed", f"{doc['originals_changed']}", "0"),
        (
            "egress flows not in the plan (packets)",
            f"{doc['unmapped_egress_flows']} ({doc['unmapped_egress_packets']})",
            "only non-IP or passed-through packets",
        ),
    ]
    out = [
        "# Multiplied capture",
        "",
        f"- input `{doc['ingress']}`, output `{doc['egress']}`, plan `{doc['plan']}`",
        f"- result: {'as planned' if doc['ok'] else 'NOT as planned'}",
        "",
        "| measure | measured | expected |",
        "|---|---|---|",
    ]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    if doc["differences"]:
        out += [
            "",
            "## Shadow flows that differ from their original (first 20)",
            "",
            "| flow | copy | direction | packets | bytes | original packets | original bytes |",
            "|---|---|---|---|---|---|---|",
        ]
        out += [
            f"| {d['flow']} | {d['copy']} | {d['direction']} | {d['packets']} | {d['bytes']} | "
            f"{d['original_packets']} | {d['original_bytes']} |"
            for d in doc["differences"]
        ]
    return "\n".join(out) + "\n"


def plot(doc: dict, path: Path) -> Path:
    """Left: ingress and egress packets (and T+1 x ingress); right: each shadow direction's packets
    against its original's (on the diagonal when equal)."""
    fig, ax = figure(f"Multiplied capture, T = {doc['copies']}", "", "packets")
    ax.remove()
    left, right = fig.subplots(1, 2)
    fig.suptitle(f"Multiplied capture, T = {doc['copies']}", x=0.01, ha="left", fontsize=12)
    bars = [doc["ingress_packets"], doc["egress_packets"], doc["expected_egress_packets"]]
    left.bar(
        ["ingress", "egress", "(T+1) x rewritable\n+ passed"], bars, color=[GREY, BLUE, ORANGE]
    )
    left.set_ylabel("packets")
    left.set_title(f"egress / ingress = {doc['packet_ratio']:.3f}", loc="left", fontsize=10)
    pts = np.array(doc["per_flow_packets"] or [(0, 0)], dtype=float)
    right.scatter(pts[:, 0], pts[:, 1], s=8, color=BLUE, label="a shadow flow direction")
    top = max(1.0, float(pts.max()))
    right.plot([0, top], [0, top], color=ORANGE, lw=1, label="equal to the original")
    right.set_xlabel("original's packets")
    right.set_ylabel("shadow's packets")
    right.set_title(
        f"{doc['shadow_directions_equal']:,} of {doc['shadow_directions']:,} equal",
        loc="left",
        fontsize=10,
    )
    legend(right)
    save(fig, path)
    return path


def write_report(doc: dict, out_dir: Path, stem: str = REPORT_STEM) -> dict[str, Path]:
    """STEM.json, STEM.md and STEM.png in out_dir."""
    out_dir = Path(out_dir)
    paths = {
        "json": out_dir / f"{stem}.json",
        "md": out_dir / f"{stem}.md",
        "png": out_dir / f"{stem}.png",
    }
    write_whole(paths["json"], json.dumps(doc, indent=1) + "\n")
    write_whole(paths["md"], markdown(doc))
    plot(doc, paths["png"])
    return paths
