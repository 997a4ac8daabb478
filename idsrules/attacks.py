"""The scenario's `attacks:` section: rule selection, attack sessions on a schedule, the one pcap merge.

`select_rules(models, select)` keeps the rules a scenario's `attacks.select` asks for;
`schedule(models, count)` cycles them into `count` attack instances in file order;
`write_attacks(spec, rule_paths, out_dir, ...)` writes ``attacks.pcap`` and ``attacks.json`` with
session *k* due at ``start + k / rate`` (later only when the session before it is still running),
over IPv6 with ``ip_version: 6``;
`tcp_dialogues(spec, rule_paths)` gives the selected TCP rules' sessions as plain dialogues (what
a stateful generator such as TRex's ASTF mode replays with its own TCP stack);
`merge_pcaps(inputs, out)` merges captures by time (mergecap, nanosecond pcap) and is the one merge
used by runs and by `testbed ids-coverage --mix`. Scoring the attack sessions of a capture with
Suricata is `testbed.ids.coverage.attack_coverage`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ntgcore.errors import NtgError
from ntgcore.files import replacing
from ntgcore.proc import Process, Tool

from .semantics import RuleModel, load_rules
from .synth import SynthResult, flowbit_setters, session_ports, session_sides, synthesize
from .synth import plan as session_plan

NS = 1_000_000_000
MERGECAP = Tool("mergecap", "wireshark-common")
PLAYED_NETS = {
    "home": "198.18",
    "external": "198.19",
}  # tcp_dialogues' addresses, by the rule's side
MAX_PLAYED_RULES = 254


class AttackError(NtgError):
    """The attack sessions could not be made (a tool failed); the message says what to do."""


def select_rules(models: list[RuleModel], select) -> list[RuleModel]:
    """The models that can alert and match every given selector of `select` (an AttackSelect or None)."""
    sids = set(select.sids) if select is not None and select.sids else None
    classtypes = set(select.classtypes) if select is not None and select.classtypes else None
    msg = re.compile(select.msg) if select is not None and select.msg else None
    keywords = set(select.keywords) if select is not None and select.keywords else None
    out = []
    for m in models:
        if not m.supported or m.noalert:
            continue
        if sids is not None and m.sid not in sids:
            continue
        if classtypes is not None and (m.raw.first("classtype") or "") not in classtypes:
            continue
        if msg is not None and not msg.search(m.raw.msg or ""):
            continue
        if keywords is not None and not keywords <= set(m.keywords):
            continue
        out.append(m)
    return out


def load_selection(
    rule_paths: list[Path], select
) -> tuple[list[RuleModel], list[RuleModel], list[str]]:
    """(selected models, every model of the files, problems as `FILE:LINE: what`)."""
    models, problems = load_rules(rule_paths)
    return select_rules(models, select), models, [str(p) for p in problems]


def schedule(selected: list[RuleModel], count: int) -> list[RuleModel]:
    """`count` attack instances: the selected rules in file order, cycled."""
    if not selected:
        return []
    return [selected[k % len(selected)] for k in range(count)]


@dataclass
class Attacks:
    pcap: Path
    manifest: Path
    synth: SynthResult
    selected: list[RuleModel]
    problems: list[str]
    scheduled: list[RuleModel]
    # sid -> why its session is not sent (a live run: its rule's addresses are outside the
    # test ranges, RuleModel.offline_only)
    not_live: dict[int, str] = field(default_factory=dict)

    def summary(self) -> dict:
        s = self.synth
        pairs = {(x.proto, x.client, x.cport, x.server, x.sport) for x in s.sessions}
        return {
            "pcap": self.pcap.name,
            "manifest": self.manifest.name,
            "rules_selected": len(self.selected),
            "instances": len(self.scheduled),
            "sessions": len(s.sessions),
            "flows": len(pairs),
            "packets": s.packets,
            "bytes": s.bytes,
            "sids": sorted({x.sid for x in s.sessions}),
            "first_ns": min((x.start_ns for x in s.sessions), default=None),
            "last_ns": max((x.end_ns for x in s.sessions), default=None),
            "unsynthesized": {str(k): v for k, v in s.failed.items() if k not in self.not_live},
            "not_sent_live": {str(k): v for k, v in self.not_live.items()},
            "problems": self.problems[:50],
        }


@dataclass
class AttackPlan:
    """What an `attacks:` section sends before anything is written: the selected rules (those
    that can be synthesized, and sent when the run is live), every model of the files, the
    problems, the rules that cannot be synthesized (sid -> why), the scheduled instances, when
    the first is due, and the rules a live run does not send (sid -> why: offline only)."""

    selected: list[RuleModel]
    models: list[RuleModel]
    problems: list[str]
    unsynthesizable: dict[int, str]
    scheduled: list[RuleModel]
    first_ns: int
    not_live: dict[int, str] = field(default_factory=dict)


def plan_attacks(
    spec,
    rule_paths: list[Path],
    *,
    t0_ns: int = 0,
    start_ns: int | None = None,
    live: bool = False,
) -> AttackPlan:
    """The rules of an `attacks:` section that can be sent, scheduled `spec.count` times from
    t0 + start (AttackError when none can). `live`: the sessions go on a wire, so the rules
    whose sessions are offline only (RuleModel.offline_only) are left out, in `not_live`."""
    selected, models, problems = load_selection(rule_paths, spec.select)
    if not selected:
        raise AttackError(
            "attacks: the selection picks no rule that can be synthesized; widen "
            "attacks.select or check the rule files (`testbed validate` counts them)"
        )
    # which rules can be written at all (and, live, sent)
    trial = synthesize(selected, os.devnull, all_models=models, live=live)
    not_live = {m.sid: m.offline_only for m in selected if live and m.offline_only}
    unsynthesizable = {k: v for k, v in trial.failed.items() if k not in not_live}
    selected = [m for m in selected if m.sid not in trial.failed]
    if not selected:
        raise AttackError(
            "attacks: no selected rule can be synthesized"
            + (" and sent live: " if live else ": ")
            + "; ".join(f"sid {k}: {v}" for k, v in list(trial.failed.items())[:5])
        )
    first = t0_ns + (spec.start if start_ns is None else start_ns)
    return AttackPlan(
        selected,
        models,
        problems,
        unsynthesizable,
        schedule(selected, spec.count),
        first,
        not_live,
    )


def manifest_section(spec, rule_paths: list[Path], pre: AttackPlan) -> dict:
    """The `attacks` section of attacks.json: what the scenario asked for and what was left out."""
    return {
        "rule_files": [str(p.resolve()) for p in rule_paths],
        "count": spec.count,
        "rate": float(spec.rate),
        "start_ns": pre.first_ns,
        "ip_version": spec.ip_version,
        "selected_sids": [m.sid for m in pre.selected],
        "unsynthesizable": {str(k): v for k, v in pre.unsynthesizable.items()},
        "not_sent_live": {str(k): v for k, v in pre.not_live.items()},
    }


def write_attacks(
    spec,
    rule_paths: list[Path],
    out_dir: Path,
    *,
    t0_ns: int = 0,
    start_ns: int | None = None,
    live: bool = False,
) -> Attacks:
    """Synthesize the attack sessions of an `attacks:` section into out_dir/attacks.pcap + .json.

    Session k starts at t0 + start + k/rate, or right after session k-1 when that is still running.
    The manifest's `sessions` list every attack session (sid, 5-tuple, first and last packet).
    `live`: the pcap is to be replayed on a wire; offline-only rules are left out (`plan_attacks`).
    (With `attacks.evasions`, testbed.ids.attack_evasions writes them with their variants.)"""
    pre = plan_attacks(spec, rule_paths, t0_ns=t0_ns, start_ns=start_ns, live=live)
    period = NS / float(spec.rate)
    starts = [pre.first_ns + round(k * period) for k in range(len(pre.scheduled))]
    out_dir.mkdir(parents=True, exist_ok=True)
    pcap, manifest = out_dir / "attacks.pcap", out_dir / "attacks.json"
    synth = synthesize(
        pre.scheduled,
        pcap,
        manifest,
        all_models=pre.models,
        starts_ns=starts,
        ip_version=spec.ip_version,
        live=live,
    )
    doc = json.loads(manifest.read_text())
    doc["attacks"] = manifest_section(spec, rule_paths, pre)
    manifest.write_text(json.dumps(doc, indent=1) + "\n")
    synth.failed.update(pre.unsynthesizable)
    return Attacks(
        pcap, manifest, synth, pre.selected, pre.problems, pre.scheduled, dict(pre.not_live)
    )


def tcp_dialogues(spec, rule_paths: list[Path]) -> tuple[list[dict], list[str]]:
    """The `attacks:` section's TCP sessions as plain data, for a generator with a TCP stack of
    its own: one entry per selected rule that is a TCP session with a handshake, `{"sid",
    "related", "client": (first, last), "server", "server_port", "messages": [(from_client,
    bytes), ...], "count"}` (the same dialogue and server port the attack pcap carries, `related`
    the flowbits setters whose messages it includes, `count` = its share of the `spec.count`
    sessions cycled over these rules), and what was left out (`sid N (why)`: UDP, ICMP,
    flag-only TCP, IPv6, a rule that lists its own addresses, ...). The addresses are on the rule's sides as the attack pcap's
    ($HOME_NET 198.18/16, $EXTERNAL_NET 198.19/16): clients x.x.254.1-254 of the client's side,
    rule k (from 1) served from x.x.255.k of the server's side, so that a session's server address
    names its rule (`played_sessions`)."""
    selected, models, _problems = load_selection(rule_paths, spec.select)
    setters = flowbit_setters(models)
    usable: list[dict[str, Any]] = []
    skipped: list[str] = []
    for i, m in enumerate(selected):
        why = (
            "not synthesizable"
            if not m.supported
            else m.proto
            if m.proto != "tcp"
            else m.offline_only
            if m.offline_only
            else "the rule lists its own addresses; the player serves its own"
            if m.src_host or m.dst_host
            else "IPv6"
            if m.ipv6 or spec.ip_version == 6
            else "tcp flags without a session"
            if m.tcp_flags is not None and not m.established
            else None
        )
        if why is None and len(usable) == MAX_PLAYED_RULES:
            why = f"more than {MAX_PLAYED_RULES} TCP rules: one server address each"
        if why is None:
            try:
                pl = session_plan(m, setters, i + 1)
                _cport, sport = session_ports(m, i)
                cside, sside = session_sides(m)
            except Exception as exc:  # what the attack pcap cannot write either
                why = str(exc)
        if why:
            skipped.append(f"sid {m.sid} ({why})")
            continue
        k = len(usable) + 1
        usable.append(
            {
                "sid": m.sid,
                "related": list(pl.related),
                "client": (f"{PLAYED_NETS[cside]}.254.1", f"{PLAYED_NETS[cside]}.254.254"),
                "server": f"{PLAYED_NETS[sside]}.255.{k}",
                "server_port": sport,
                "messages": [(c, d) for c, d in pl.messages if d],
                "count": 0,
                "_model": m,
            }
        )
    order = schedule([u["_model"] for u in usable], spec.count) if usable else []
    for m in order:
        next(u for u in usable if u["_model"] is m)["count"] += 1
    out = [{k: v for k, v in u.items() if k != "_model"} for u in usable if u["count"]]
    return out, skipped


def merge_pcaps(inputs: list[Path], out: Path) -> None:
    """Merge captures by time stamp into one nanosecond pcap (mergecap -F nsecpcap), written whole
    or not at all (`replacing`)."""
    if not MERGECAP.found():
        raise AttackError(
            "mergecap is missing: install it with `apt-get install wireshark-common` "
            "(./bootstrap.sh test installs it)"
        )
    with replacing(out) as tmp:  # whole or not at all (a full disk leaves no half capture)
        argv = ["mergecap", "-F", "nsecpcap", "-w", str(tmp), *[str(p) for p in inputs]]
        proc = Process("mergecap", argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE).start()
        if proc.wait(600) != 0:
            err = (
                proc.popen.stderr.read().decode(errors="replace")
                if proc.popen and proc.popen.stderr
                else ""
            )
            raise AttackError(f"mergecap failed: {err.strip() or 'no message'}")
