"""Attack sessions multiplied T times into the IDS (seed 003's IDS use, docs/ids-coverage.md).

`multiply_attacks(pcap, copies, out_dir) -> MultipliedCapture`: the attack capture through the
traffic multiplier (`testbed.multiply`, the native engine) into out_dir: every session gets T
shadow sessions with addresses of their own, complete and consistent (the same segments, the
same sequence numbers), and the plan maps each shadow address back to its original.

`multiplied_home_net(mc)`: the IDS must see a shadow session as it sees its original, so the
shadow of a HOME_NET address is in HOME_NET and the shadow of an external address is not. The
multiplier's sided plan (`--home`, `--home-ranges`) puts the shadows of home addresses into a
range of their own: HOME_NET becomes the testbed's HOME_NET without the shadow ranges plus that
range, a few CIDRs (EXTERNAL_NET stays !$HOME_NET).

`score_multiplied(mc, base, suri, models) -> dict`: per sid, the alerts of the unmultiplied run
(`base`) against the alerts of the multiplied run (`suri`), each alert mapped to its copy by its
addresses: a sid scales when every copy 0..T has exactly the alerts the unmultiplied run had, so
its total is (T+1)x. A sid that does not scale gets the reason it can be given.
"""

from __future__ import annotations

import ipaddress
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from analysis.multiply import shadow_addresses
from idsrules.semantics import RuleModel
from idsrules.variables import HOME_NET

from ..multiply import MultiplyParams, multiply_capture
from .suricata import SuricataResult

# shadow ranges beside the synthesized sessions' own (198.18.0.x up, 198.19.0.x up, 2001:db8::/48,
# 2001:db8:1::/48), all in the testbed's ranges (docs NETWORK-SAFETY): the upper half of the home
# /16 and a third IPv6 /48 for the shadows of home addresses, the upper half of the other /16 and a
# fourth /48 for the rest; the engine refuses them if an original lies in one
HOME_SHADOW_RANGES = ("198.18.128.0/17", "2001:db8:100::/48")
SHADOW_RANGES = ("198.19.128.0/17", "2001:db8:200::/48")
MAX_COPIES = 64


@dataclass
class MultipliedCapture:
    """A multiplied attack capture, made once and read by every DUT."""

    copies: int
    folder: Path
    pcap: Path
    plan: Path
    summary: dict
    addresses: dict[str, tuple[str, int]]  # every address -> (original address, copy)
    home_net: str  # HOME_NET for it: home without the shadow ranges + theirs


def _networks(bracketed: str) -> list:
    return [ipaddress.ip_network(x.strip()) for x in bracketed.strip("[]").split(",")]


def _without_shadows(home: list) -> list:
    """The home networks with the shadow ranges cut out."""
    shadow = [ipaddress.ip_network(r) for r in SHADOW_RANGES + HOME_SHADOW_RANGES]
    kept: list = []
    for net in home:
        parts = [net]
        for s in shadow:
            if s.version != net.version:
                continue
            nxt = []
            for p in parts:
                if s.subnet_of(p):
                    nxt += list(p.address_exclude(s))
                elif not p.subnet_of(s):
                    nxt.append(p)
            parts = nxt
        kept += parts
    return kept


def _collapsed(nets: list) -> list[str]:
    return [
        str(n)
        for v in (4, 6)
        for n in ipaddress.collapse_addresses([n for n in nets if n.version == v])
    ]


def multiply_attacks(
    pcap: Path, copies: int, out_dir: Path, seed: int = 1, home_net: str = HOME_NET
) -> MultipliedCapture:
    """out_dir/attacks.pcap, shadow_plan.csv and multiply.json: `pcap` with T = `copies`, the
    shadows of `home_net`'s addresses (a bracketed list of CIDRs) in HOME_SHADOW_RANGES."""
    out_dir.mkdir(parents=True, exist_ok=True)
    home = _collapsed(_without_shadows(_networks(home_net)))
    params = MultiplyParams(
        copies=copies,
        ranges=SHADOW_RANGES,
        seed=seed,
        home=tuple(home),
        home_ranges=HOME_SHADOW_RANGES,
    )
    out, plan = out_dir / "attacks.pcap", out_dir / "shadow_plan.csv"
    summary = multiply_capture(Path(pcap), out, plan, out_dir / "multiply.json", params)
    multiplied = home + list(HOME_SHADOW_RANGES)
    return MultipliedCapture(
        copies,
        out_dir,
        out,
        plan,
        summary,
        shadow_addresses(plan),
        "[" + ",".join(_collapsed([ipaddress.ip_network(n) for n in multiplied])) + "]",
    )


def multiplied_home_net(mc: MultipliedCapture) -> str:
    """HOME_NET for the multiplied capture: the home networks without the shadow ranges, plus the
    home side's shadow ranges (the multiplier put every shadow of a home address there)."""
    return mc.home_net


def _copy_of(mc: MultipliedCapture, src: str, dst: str) -> int | None:
    """The copy an alert belongs to by its addresses; None when they are not of one copy."""
    a = mc.addresses.get(str(ipaddress.ip_address(src))) if src else None
    b = mc.addresses.get(str(ipaddress.ip_address(dst))) if dst else None
    if a is None or b is None or a[1] != b[1]:
        return None
    return a[1]


def _reason(
    model: RuleModel | None, per_copy: list[int], base: int, unmapped: int, passed: int
) -> str:
    if model is not None and model.track == "by_rule":
        return (
            "threshold/detection_filter tracks by_rule: one counter for the original and all its copies "
            "(by_src, by_dst and by_both count each copy's own addresses)"
        )
    if unmapped:
        return f"{unmapped} alerts on addresses not of one copy (an alert without addresses, or across copies)"
    if passed:
        return f"{passed} packets passed through the multiplier unchanged (once, not T+1 times)"
    if per_copy[0] != base:
        return "the original's alerts changed in the multiplied capture (its timing or order among the copies)"
    return "the copies alert differently from the original: see eve.json of both runs"


def score_multiplied(
    mc: MultipliedCapture, base: SuricataResult, suri: SuricataResult, models: list[RuleModel]
) -> dict:
    """Per sid: alerts unmultiplied, multiplied, per copy; which scale (T+1)x and why not."""
    t = mc.copies
    before = Counter(a.sid for a in base.alerts)
    per_copy: dict[int, list[int]] = defaultdict(lambda: [0] * (t + 1))
    unmapped: Counter = Counter()
    after: Counter = Counter()
    for a in suri.alerts:
        after[a.sid] += 1
        c = _copy_of(mc, a.src, a.dst)
        if c is None:
            unmapped[a.sid] += 1
        else:
            per_copy[a.sid][c] += 1
    by_sid = {m.sid: m for m in models}
    passed = sum(mc.summary.get("passthrough", {}).values())
    rows = []
    for sid in sorted(set(before) | set(after)):
        copies = per_copy[sid]
        scales = not unmapped[sid] and all(n == before[sid] for n in copies)
        row = {
            "sid": sid,
            "msg": by_sid[sid].raw.msg if sid in by_sid else "",
            "alerts": before[sid],
            "alerts_multiplied": after[sid],
            "expected": (t + 1) * before[sid],
            "per_copy": copies,
            "scales": scales,
        }
        if not scales:
            row["reason"] = _reason(by_sid.get(sid), copies, before[sid], unmapped[sid], passed)
        rows.append(row)
    total_before, total_after = sum(before.values()), sum(after.values())
    return {
        "copies": t,
        "capture": str(mc.pcap),
        "plan": str(mc.plan),
        "packets_in": mc.summary["packets_in"],
        "packets_out": mc.summary["packets_out"],
        "passed_through": passed,
        "alerts": total_before,
        "alerts_multiplied": total_after,
        "expected": (t + 1) * total_before,
        "ratio": total_after / total_before if total_before else 0.0,
        "sids": len(rows),
        "sids_scaling": sum(r["scales"] for r in rows),
        "not_scaling": [r["sid"] for r in rows if not r["scales"]],
        "rows": rows,
    }


def summary_line(m: dict) -> str:
    bad = m["not_scaling"]
    return (
        f"multiplied T={m['copies']} ({m['packets_in']:,} packets -> {m['packets_out']:,}): alerts "
        f"{m['alerts_multiplied']:,} = {m['ratio']:.2f} x {m['alerts']:,} (expected {m['expected']:,}); "
        f"{m['sids_scaling']} of {m['sids']} sids alert exactly (T+1)x"
        + (
            f"; not: sids {', '.join(map(str, bad[:20]))}{', ...' if len(bad) > 20 else ''} "
            "(the report says why)"
            if bad
            else ""
        )
        + (f"; suricata {m['suricata_s']:.1f} s" if "suricata_s" in m else "")
    )


def markdown_lines(m: dict) -> list[str]:
    t = m["copies"]
    out = [
        f"## Attack sessions multiplied, T = {t}",
        "",
        f"Every session and T = {t} shadow sessions of it (`{Path(m['capture']).parent.name}/attacks.pcap`, "
        f"plan `shadow_plan.csv`); HOME_NET holds the shadows of home addresses. Alerts per copy "
        "mapped by the plan; a sid scales when each of the T+1 copies has its unmultiplied alerts.",
        "",
        f"- {summary_line(m)}",
        "",
        "| sid | msg | alerts | multiplied | expected (T+1)x | per copy (0 = original) | scales | why not |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in m["rows"]:
        out.append(
            f"| {r['sid']} | {r['msg']} | {r['alerts']} | {r['alerts_multiplied']} | {r['expected']} | "
            f"{' '.join(map(str, r['per_copy']))} | {'yes' if r['scales'] else 'no'} | {r.get('reason', '')} |"
        )
    return out + [""]
