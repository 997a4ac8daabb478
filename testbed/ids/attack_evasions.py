"""Evasion variants in a scenario's `attacks:` section (`attacks.evasions`, docs/scenario.md).

Each scheduled attack instance is sent as its plain session (unless `attacks.plain: false`) and
then as every variant of the chosen classes (`idsrules.evasion`), each a session of its own on
addresses no other session of the capture uses. Every session takes a slot of the schedule: slot
j is due at start + j/rate and starts then, or right after the session before it when that is
still running. The plain sessions are `synthesize`'s, as without variants; a variant is the rule's
session as `plain_plans` makes it (the one `testbed ids-coverage --evasions` varies) laid out as
`idsrules.evasion.model.render` defines it (by the native renderer, `idsrules.evasion.native`). Rules without such a session (ICMP, flags only, thresholds, too
many bytes) are sent plain only, and the manifest says why.

Scored after an offline run with `ids: suricata`: a variant session is alerted when its rule's own
sid alerted on its address pair; the host's label per variant comes from the live lab
(`evasion_host.live_table`), and the outcome is `evasion.outcome` of both against the plain
session of the same instance (the control).
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from analysis.tables import write_table
from idsrules.attacks import (
    NS,
    AttackError,
    AttackPlan,
    Attacks,
    manifest_section,
    merge_pcaps,
    plan_attacks,
)
from idsrules.evasion import variants
from idsrules.evasion.native import Renderer, session_program
from idsrules.synth import PKT_GAP_NS, SESSION_GAP_NS, session_sides, synthesize
from ntgcore import packets as P
from ntgcore.files import replacing, write_whole

from .evasion import (
    EXT6,
    HOME6,
    OUTCOMES,
    EvasionCapture,
    VariantSession,
    alerts_by_session,
    outcome,
    plain_plans,
    summarize,
    table_rows,
    write_reports,
)
from .evasion_host import ProbeError, can_go_live, live_table
from .hostlabel import HostLabelError
from .suricata import Alert, Dut

MAX_SIDE_ADDRESSES = 65_535  # 198.18/16 and 198.19/16: one address of each side per session
MAX_SESSIONS = MAX_SIDE_ADDRESSES  # plain and variant sessions of one run (an address pair each)
CONFIG = "default"  # the run's Suricata reads the capture with its own reassembly policy
NO_CONTROL = (
    "attacks.plain: false: no plain session was sent, so a variant's outcome assumes its rule "
    "alerts on the plain session"
)


@dataclass
class VariedAttacks(Attacks):
    """The attack sessions with their evasion variants: `synth` holds the plain sessions (the
    coverage scores them), `variants` the variant sessions (`instances[i]`: the scheduled
    instance variant i belongs to), `plain_of[k]`: the address pair of instance k's plain
    session (None: not sent plain), `no_variants`: sid -> why the rule has none."""

    classes: list[str] = field(default_factory=list)
    plain: bool = True
    variants: EvasionCapture | None = None
    instances: list[int] = field(default_factory=list)
    times: list[tuple[int, int, int]] = field(default_factory=list)  # (first, last ns, packets)
    plain_of: list[tuple[str, str] | None] = field(default_factory=list)
    no_variants: dict[int, str] = field(default_factory=dict)
    packets_total: int = 0
    bytes_total: int = 0

    def summary(self) -> dict:
        out = super().summary()
        cap = self.variants
        assert cap is not None
        firsts = [t[0] for t in self.times] + [out["first_ns"]] * (out["first_ns"] is not None)
        lasts = [t[1] for t in self.times] + [out["last_ns"]] * (out["last_ns"] is not None)
        out.update(
            {
                "packets": self.packets_total,
                "bytes": self.bytes_total,
                "first_ns": min(firsts, default=None),
                "last_ns": max(lasts, default=None),
                "sessions": len(self.synth.sessions) + len(cap.sessions),
                "flows": out["flows"] + len(cap.sessions),
                "plain_sessions": len(self.synth.sessions),
                "variant_sessions": len(cap.sessions),
                "evasion_classes": self.classes,
                "plain": self.plain,
                "no_variants": {str(k): v for k, v in sorted(self.no_variants.items())},
            }
        )
        return out


class _Addresses:
    """Addresses of each side no plain session uses, counted up from the first (IPv4
    198.18/198.19.x.y, IPv6 2001:db8::n / 2001:db8:1::n)."""

    def __init__(self, used: set[str]) -> None:
        self.used = used
        self.next: Counter = Counter()

    def take(self, side: str, v6: bool) -> str:
        while True:
            self.next[(side, v6)] += 1
            n = self.next[(side, v6)]
            if v6:
                text = str(ipaddress.IPv6Address(HOME6 if side == "home" else EXT6) + n)
            elif n > MAX_SIDE_ADDRESSES:
                raise AttackError(
                    f"attacks.evasions: more than {MAX_SIDE_ADDRESSES:,} sessions on one side's "
                    "IPv4 addresses (198.18/16, 198.19/16); lower attacks.count or choose fewer "
                    "evasion classes"
                )
            else:
                text = f"198.{18 if side == 'home' else 19}.{n >> 8}.{n & 255}"
            if text not in self.used:
                return text


def _plain_durations(synth_sessions, plain_models) -> list[tuple[int, int]]:
    """(first, last packet ns) of each plain instance's sessions (a threshold rule has several)."""
    out, i = [], 0
    for m in plain_models:
        group = synth_sessions[i : i + m.events]
        if len(group) != m.events:
            raise AttackError(
                f"attacks: sid {m.sid} gave {len(group)} of its {m.events} sessions; "
                "the rule cannot be sent with evasion variants"
            )
        out.append((group[0].start_ns, group[-1].end_ns))
        i += m.events
    return out


def write_varied_attacks(
    spec,
    rule_paths: list[Path],
    out_dir: Path,
    *,
    seed: int = 1,
    t0_ns: int = 0,
    live: bool = False,
) -> VariedAttacks:
    """attacks.pcap + attacks.json of an `attacks:` section with `evasions`: every instance's
    plain session (with `spec.plain`) and its variants, one schedule slot each; reproducible
    from `seed` (a variant of instance k of rule sid is drawn from seed + sid + k). `live`: the
    pcap is to be replayed on a wire; offline-only rules are left out (`plan_attacks`)."""
    pre = plan_attacks(spec, rule_paths, t0_ns=t0_ns, live=live)
    classes = list(spec.evasions)
    plans, no_variants = plain_plans(pre.models, {m.sid for m in pre.selected})
    kinds: dict[int, int] = {}  # sid -> variants per instance
    for sid, (model, base, _cport, _sport, rule_v6) in list(plans.items()):
        v6 = rule_v6 or spec.ip_version == 6
        got = [v for v in variants(base, classes, seed + sid) if not (v6 and v.cls == "ip4-frag")]
        kinds[sid] = len(got)
        if not got:
            no_variants[sid] = f"no variant of a {model.proto} session in {', '.join(classes)}"
            del plans[sid]  # sent plain, whatever attacks.plain says
    plain_k = [k for k, m in enumerate(pre.scheduled) if spec.plain or m.sid not in plans]
    total = len(plain_k) + sum(kinds.get(m.sid, 0) for m in pre.scheduled if m.sid in plans)
    if total > MAX_SESSIONS:
        raise AttackError(
            f"attacks.evasions: {total:,} sessions (the plain ones and the variants), more than "
            f"the {MAX_SESSIONS:,} that have an address pair of their own in 198.18/16 and "
            f"198.19/16; lower attacks.count (now {spec.count:,}) or choose fewer classes"
        )
    plain_models = [pre.scheduled[k] for k in plain_k]
    # the plain sessions' lengths, to give each its slot (written for real once the times are known)
    trial = synthesize(
        plain_models,
        os.devnull,
        all_models=pre.models,
        ip_version=spec.ip_version,
        t0_ns=0,
        live=live,
    )
    lengths = [b - a for a, b in _plain_durations(trial.sessions, plain_models)]
    out_dir.mkdir(parents=True, exist_ok=True)
    pcap, manifest = out_dir / "attacks.pcap", out_dir / "attacks.json"
    plain_pcap, var_pcap = out_dir / ".attacks-plain.pcap", out_dir / ".attacks-variants.pcap"
    addrs = _Addresses({a for s in trial.sessions for a in (s.client, s.server)})
    period = NS / float(spec.rate)
    res = VariedAttacks(
        pcap,
        manifest,
        trial,
        pre.selected,
        pre.problems,
        pre.scheduled,
        dict(pre.not_live),
        classes=classes,
        plain=spec.plain,
    )
    cap = res.variants = EvasionCapture(pcap, skipped=no_variants)
    res.no_variants = no_variants
    res.plain_of = [None] * len(pre.scheduled)
    plain_starts: list[int] = []
    slot, free = 0, None  # the next slot; when the last session ended (+ the gaps)

    def start() -> int:
        nonlocal slot
        due = pre.first_ns + round(slot * period)
        slot += 1
        return due if free is None else max(due, free)

    plain_at = dict(zip(plain_k, lengths))
    n = 0  # variant sessions so far (their ISNs)
    renderer = Renderer()
    with replacing(var_pcap) as tmp, open(tmp, "wb") as f:
        w = P.PcapWriter(f)
        for k, model in enumerate(pre.scheduled):
            if k in plain_at:
                t = start()
                plain_starts.append(t)
                free = t + plain_at[k] + PKT_GAP_NS + SESSION_GAP_NS
            if model.sid not in plans:
                continue
            _model, base, cport, sport, rule_v6 = plans[model.sid]
            v6 = rule_v6 or spec.ip_version == 6
            cside, sside = session_sides(model)
            for var in variants(base, classes, seed + model.sid + k):
                if v6 and var.cls == "ip4-frag":
                    continue  # the rule's session is IPv6: no IPv4 fragments of it
                six = v6 or var.family == 6
                client, server = addrs.take(cside, six), addrs.take(sside, six)
                t = first = start()
                before = w.packets
                n += 1
                out = renderer.render(
                    session_program(var, client, server, cport, sport, n), t, PKT_GAP_NS, 0
                )
                w.write_records(out.records, out.packets)
                t = out.t_ns
                free = t + SESSION_GAP_NS  # t: the last packet's time + PKT_GAP_NS
                cap.sessions.append(
                    VariantSession(
                        model.sid,
                        var.variant,
                        var.cls,
                        var.proto,
                        client,
                        cport,
                        server,
                        sport,
                        six,
                    )
                )
                res.instances.append(k)
                res.times.append((first, t - PKT_GAP_NS, w.packets - before))
        res.packets_total, res.bytes_total = w.packets, w.bytes
    synth = synthesize(
        plain_models,
        plain_pcap,
        manifest,
        all_models=pre.models,
        starts_ns=plain_starts,
        ip_version=spec.ip_version,
        live=live,
    )
    synth.failed.update(pre.unsynthesizable)
    if not spec.plain:
        for sid in plans:
            synth.failed[sid] = "sent only as evasion variants (attacks.plain: false)"
    res.synth = synth
    i = 0
    for k, m in zip(plain_k, plain_models):
        s = synth.sessions[i]
        res.plain_of[k] = (s.client, s.server)
        i += m.events
    res.packets_total += synth.packets
    res.bytes_total += synth.bytes
    merge_pcaps([plain_pcap, var_pcap], pcap)
    plain_pcap.unlink()
    var_pcap.unlink()
    _write_manifest(res, spec, rule_paths, pre, plain_k)
    return res


def _write_manifest(
    res: VariedAttacks, spec, rule_paths: list[Path], pre: AttackPlan, plain_k: list[int]
) -> None:
    """attacks.json: the plain sessions (`sessions`, as without variants, with their instance and
    variant `plain`), every variant session (`variant_sessions`: sid, instance, variant, class,
    5-tuple, first and last packet) and the rules without variants and why."""
    doc = json.loads(res.manifest.read_text())
    doc["pcap"] = str(res.pcap)
    doc["packets"], doc["bytes"] = res.packets_total, res.bytes_total
    sessions = iter(doc["sessions"])
    for k in plain_k:
        for _ in range(pre.scheduled[k].events):
            next(sessions).update({"instance": k, "variant": "plain", "class": "plain"})
    cap = res.variants
    assert cap is not None
    doc["variant_sessions"] = [
        {
            "sid": v.sid,
            "instance": k,
            "variant": v.variant,
            "class": v.cls,
            "proto": v.proto,
            "client": v.client,
            "cport": v.cport,
            "server": v.server,
            "sport": v.sport,
            "start_ns": first,
            "end_ns": last,
            "packets": packets,
        }
        for v, k, (first, last, packets) in zip(cap.sessions, res.instances, res.times)
    ]
    doc["attacks"] = {
        **manifest_section(spec, rule_paths, pre),
        "evasions": res.classes,
        "plain": res.plain,
        "variant_sessions": len(cap.sessions),
        "no_variants": {str(k): v for k, v in sorted(res.no_variants.items())},
    }
    write_whole(res.manifest, json.dumps(doc, indent=1) + "\n")


# --- scoring ---------------------------------------------------------------------------------------
Labels = tuple[dict[tuple[str, str], bool | None], dict | None]


def host_labels(
    classes: list[str],
    out: Path,
    dut: Dut,
    *,
    say: Callable[[str], None] | None = None,
    mark: Callable[[], AbstractContextManager] | None = None,
) -> tuple[Labels | None, str | None]:
    """The live lab's label per (variant, proto) and its document for `classes` (`live_table`),
    under `mark()` (a run mark that yields the callback recording the lab's namespaces, as
    `testbed ids-coverage` makes one) when given; (None, why) when the lab cannot run here or
    failed."""
    why = can_go_live()
    if why:
        return None, f"the live lab cannot run ({why})"
    try:
        if mark is None:
            return live_table(classes, out, dut, progress=say), None
        with mark() as places:
            return live_table(classes, out, dut, progress=say, on_places=places), None
    except (ProbeError, HostLabelError, OSError) as exc:
        return None, f"the live lab failed: {exc}"
    except Exception as exc:  # a bug of the lab: the run keeps its capture and coverage, says so
        return None, f"the live lab failed: {type(exc).__name__}: {exc}"


def score_variants(
    attacks: VariedAttacks, alerts: list[Alert], labels: Labels | None, unlabelled_why: str | None
) -> dict:
    """The evasion document of the variant sessions (evasion.json, before `compact`): per
    variant session whether its rule's sid alerted on it, the host's label and the outcome
    against its instance's plain session."""
    cap = attacks.variants
    assert cap is not None
    got = alerts_by_session(cap, [(a.sid, a.src, a.dst) for a in alerts])
    by_pair: dict[frozenset, set[int]] = defaultdict(set)
    for a in alerts:
        by_pair[frozenset((P.short_address(a.src), P.short_address(a.dst)))].add(a.sid)
    host, live = labels if labels is not None else ({}, None)
    rows = []
    for i, (s, k) in enumerate(zip(cap.sessions, attacks.instances)):
        pair = attacks.plain_of[k]
        plain_alert = s.sid in by_pair.get(frozenset(pair), set()) if pair else True
        alert = s.sid in got.get(i, set())
        reached = host.get((s.variant, s.proto))
        rows.append(
            {
                "sid": s.sid,
                "instance": k,
                "variant": s.variant,
                "class": s.cls,
                "proto": s.proto,
                "config": CONFIG,
                "client": s.client,
                "cport": s.cport,
                "server": s.server,
                "sport": s.sport,
                "alerted": alert,
                "plain_alerted": plain_alert if pair else None,
                "host_reached": reached,
                "outcome": outcome(reached, alert, plain_alert),
            }
        )
    return {
        "classes": attacks.classes,
        "configs": {CONFIG: "the run's Suricata configuration"},
        "sessions": len(attacks.synth.sessions) + len(cap.sessions),
        "packets": attacks.packets_total,
        "plain": attacks.plain,
        "control": None if attacks.plain else NO_CONTROL,
        "unlabelled": unlabelled_why,
        "skipped": {str(k): v for k, v in sorted(attacks.no_variants.items())},
        "host": [{"variant": v, "proto": p, "reached": r} for (v, p), r in sorted(host.items())],
        "live": live,
        "summary": summarize(rows),
        "rows": rows,
    }


def record_variants(doc: dict, run_dir: Path, dut: dict) -> dict:
    """evasion.json + evasion.md and the `coverage_evasion` table (step `attacks`) of a run
    folder; the summary the manifest's `attacks.evasions` keeps."""
    write_reports(doc, run_dir)
    notes = [f"Unlabelled: {doc['unlabelled']}." if doc["unlabelled"] else "", doc["control"] or ""]
    if any(notes):
        md = run_dir / "evasion.md"
        write_whole(md, md.read_text() + "".join(f"\n{n}\n" for n in notes if n))
    write_table(run_dir, "coverage_evasion", table_rows(run_dir.name, "attacks", doc, dut))
    counts = Counter(r["outcome"] for r in doc["rows"])
    evaded = doc["summary"]["evaded"].get(CONFIG, {})
    return {
        "classes": doc["classes"],
        "variant_sessions": len(doc["rows"]),
        "outcomes": {o: counts[o] for o in OUTCOMES if counts[o]},
        "evaded": {v: sids for v, sids in sorted(evaded.items())},
        "unlabelled": doc["unlabelled"],
        "control": doc["control"],
        "report": "evasion.md",
    }


def message(summary: dict) -> str:
    """The run's message line: `evasions: 40 variant sessions: 30 detected, 6 evaded (ins-ttl,
    urgent-byte), ...`."""
    parts = []
    for o, n in summary["outcomes"].items():
        shown = f"{n:,} {o}"
        if o == "evaded":
            shown += f" ({', '.join(summary['evaded'])})"
        parts.append(shown)
    text = f"evasions: {summary['variant_sessions']:,} variant sessions: " + (
        ", ".join(parts) or "none"
    )
    if summary["unlabelled"]:
        text += f"; unlabelled: {summary['unlabelled']}"
    return text
