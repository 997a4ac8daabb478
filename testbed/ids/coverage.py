"""IDS detection coverage of rule files: synthesize one session per rule, run the IDS, count.

`run_coverage(rule_files, out_dir, *, ids="suricata", mixes=(), progress=None, ip_version=4,
exclude_unloadable=False, baseline=None, dut=None) -> dict` writes
``attacks.pcap``, ``attacks.json`` (the synthesis manifest), ``coverage.json``, ``coverage.md``,
``coverage.html`` and ``tables/coverage.parquet`` (the `coverage` run table of
`analysis.tables`) into `out_dir`, and returns the JSON document; with a `baseline`
(`testbed.ids.regression.Baseline`) the document gets a ``baseline`` section: the per-sid
changes against that earlier run (`compare_coverage`), each mix compared with the baseline's
same mix when that has per-sid rows (`mixes.F.rows`).
`run_coverage_duts(rule_files, out_dir, duts, ...)` is the same for several DUTs
(`testbed.ids.suricata.Dut`: a binary and a configuration): the sessions and mixed captures are
made once, each DUT is scored into ``out_dir/NAME/`` and compared per sid with the first
(``versus``), ``comparison.json/md/html`` sum them up; `blocking(docs)` lists the comparisons
with newly failing sids that are not allowed (the exit status 3).

Counting (per rule): *parsed* (the splitter accepted it), *synthesizable* (semantics supported and
a session was written), *loaded* (Suricata did not reject it), *alerted* (an alert with the rule's
own sid on the rule's session, matched by the session's address pair, which is unique per rule),
*missed* (loaded, but no own alert; with the likely reason), and *extra* (sessions on which other
sids fired, except the flowbits setters written into the same session). *Unloadable*: rules that
can alert (no ``noalert``) but the IDS refused to load. Coverage is alerted / (rules that can
alert, unloadable ones included): a rule the IDS refuses detects nothing. ``coverage_loaded`` is
alerted / (loaded rules that can alert); with `exclude_unloadable` ``coverage`` is that one.

`score(models, synth, suri, *, exclude_unloadable=False) -> dict` is that count for any synthesis
result and Suricata run;
`attack_coverage(pcap, attacks, rule_paths, out_dir, baseline=None)` scores the attack sessions
of a run's capture (`idsrules.attacks`) the same way; `played_coverage(pcap, spec,
rule_paths, dialogues, out_dir, baseline=None)` does it for attack sessions a generator played
over its own TCP stack (TRex ASTF), the sessions found in the capture by their rule's server
address and port (`played_sessions`). `--mix` adds benign background load from the
flowengine generator (through the generator registry), merged by time with the attack sessions.
`multiply=(T, ...)` also runs the attack sessions multiplied T times (`testbed.ids.multiplied`:
each session and T shadow sessions) through each DUT and adds, per T, the per-sid alert counts
against (T+1)x the unmultiplied ones (the document's `multiplied` section).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from analysis.capture import address_text, read_capture
from analysis.tables import table_path, write_table
from idsrules.attacks import Attacks, load_selection, merge_pcaps
from idsrules.layout import LayoutError, build_buffer
from idsrules.regex_example import RegexUnsupported, literal_runs
from idsrules.semantics import RuleModel, load_rules, resolve_ja3_hashes
from idsrules.synth import SESSION_GAP_NS, T0_NS, Session, SynthResult, synthesize
from ntgcore.errors import GeneratorError
from ntgcore.generator import get_generator
from ntgcore.scenario import parse_scenario

from .evasion import HostLabels, compact, compare_evasions, run_evasions
from .evasion import summary_lines as evasion_summary
from .evasion import table_rows as evasion_rows
from .evasion import write_markdown as write_evasion_md
from .evasion import write_reports as write_evasion_reports
from .missreason import MISS_EVE_TYPES, SessionViews, miss_reason
from .multiplied import (
    MAX_COPIES,
    MultipliedCapture,
    multiplied_home_net,
    multiply_attacks,
    score_multiplied,
)
from .multiplied import markdown_lines as multiplied_markdown
from .multiplied import summary_line as multiplied_summary
from .regression import Baseline, compare_coverage
from .regression import markdown_lines as baseline_markdown
from .regression import summary_lines as comparison_summary
from .report import markdown_html
from .suricata import Dut, SuricataResult, run_offline

BENIGN_NET = ("198.18.240.0/24", "198.19.240.0/24")


def score(
    models: list[RuleModel],
    synth: SynthResult,
    suri: SuricataResult,
    *,
    exclude_unloadable: bool = False,
) -> dict:
    """The coverage counts of `models` whose sessions `synth` wrote and Suricata read (`suri`)."""
    by_pair: dict[frozenset, set[int]] = defaultdict(set)
    for a in suri.alerts:
        by_pair[frozenset((a.src, a.dst))].add(a.sid)
    sessions_of: dict[int, list] = defaultdict(list)
    for s in synth.sessions:
        sessions_of[s.sid].append(s)
    failed_load = suri.failed_sids
    load_error = {e.sid: e.reason or e.line_text for e in suri.load_errors if e.sid is not None}
    alerted_any = {a.sid for a in suri.alerts}
    generic = {m.sid for m in models if not any(m.buffers.values())}
    by_sid = {m.sid: m for m in models}
    rows = []
    extra_sessions = 0
    extra_specific = 0
    extra_kind: Counter = Counter()
    extra_sids: Counter = Counter()
    extra_sids_kind: dict[str, Counter] = defaultdict(Counter)
    views: SessionViews | None = None
    for m in models:
        row = {
            "sid": m.sid,
            "where": m.raw.where,
            "msg": m.raw.msg,
            "classtype": m.raw.first("classtype") or "-",
            "keywords": m.keywords,
        }
        sess = sessions_of.get(m.sid, [])
        row["loaded"] = m.sid not in failed_load
        row["synthesized"] = bool(sess)
        got: set[int] = set()
        for s in sess:
            got |= by_pair.get(frozenset((s.client, s.server)), set())
        row["alerted"] = m.sid in got
        extra = got - {m.sid} - set(sess[0].related if sess else [])
        if extra:
            extra_sessions += 1
            extra_sids.update(extra)
            row["extra_sids"] = sorted(extra)
            if extra - generic:
                extra_specific += 1
            setters = [by_sid[r] for r in sess[0].related if r in by_sid]
            kinds = {s: extra_kind_of(m, by_sid.get(s), generic, setters) for s in extra}
            for s, k in kinds.items():
                extra_sids_kind[k][s] += 1
            worst = next(k for k in EXTRA_KINDS[::-1] if k in kinds.values())
            row["extra_kind"] = worst
            extra_kind[worst] += 1
        if not row["loaded"]:
            row["state"] = "not loaded"
            row["reason"] = "Suricata rejected the rule: " + load_error.get(m.sid, "")
            row["can_alert"] = not m.noalert
        elif m.noalert:
            row["state"], row["reason"] = "silent", "noalert (sets flowbits only)"
        elif row["alerted"]:
            row["state"] = "alerted"
        elif not m.supported:
            row["state"], row["reason"] = "missed", "unsupported: " + "; ".join(m.reasons)
        elif m.sid in synth.failed:
            row["state"], row["reason"] = "missed", "not synthesized: " + synth.failed[m.sid]
        else:
            row["state"] = "missed"
            why = None
            if m.sid not in alerted_any:
                if views is None:  # what Suricata parsed on each session (eve.json), read once
                    views = SessionViews.read(suri.eve)
                why = miss_reason(m, views.of([frozenset((s.client, s.server)) for s in sess]))
            row["reason"] = (
                "alerted on another session"
                if m.sid in alerted_any
                else f"no alert: {why}"
                if why
                else "no alert: session written, the IDS did not match "
                f"(buffers {', '.join(sorted(m.buffers)) or 'none'})"
            )
        rows.append(row)
    loaded = [r for r in rows if r["loaded"]]
    can_alert = [r for r in loaded if r["state"] != "silent"]
    alerted = [r for r in can_alert if r["alerted"]]
    unloadable = [r for r in rows if not r["loaded"] and r["can_alert"]]
    counted = len(can_alert) + (0 if exclude_unloadable else len(unloadable))
    sessions = len({frozenset((s.client, s.server)) for s in synth.sessions})
    per_kw: dict[str, Counter] = defaultdict(Counter)
    per_ct: dict[str, Counter] = defaultdict(Counter)
    for r in can_alert:
        for k in r["keywords"]:
            per_kw[k]["rules"] += 1
            per_kw[k]["alerted"] += r["alerted"]
        per_ct[r["classtype"]]["rules"] += 1
        per_ct[r["classtype"]]["alerted"] += r["alerted"]
    reasons = Counter(_reason_class(r.get("reason", "")) for r in can_alert if not r["alerted"])
    return {
        "rules": len(models),
        "parsed": len(models),
        "synthesizable": sum(1 for m in models if m.supported and m.sid in synth.synthesized),
        "loaded": len(loaded),
        "silent": len(loaded) - len(can_alert),
        "alerted": len(alerted),
        "missed": len(can_alert) - len(alerted),
        "unloadable": len(unloadable),
        "unloadable_sids": sorted(r["sid"] for r in unloadable),
        "unloadable_excluded": exclude_unloadable,
        # the gate's number: unloadable rules count as missed unless excluded
        "coverage": len(alerted) / counted if counted else 0.0,
        "coverage_loaded": len(alerted) / len(can_alert) if can_alert else 0.0,
        "sessions": sessions,
        "extra_alert_sessions": extra_sessions,
        "extra_fraction": extra_sessions / sessions if sessions else 0.0,
        "extra_specific_sessions": extra_specific,
        "extra_specific_fraction": extra_specific / sessions if sessions else 0.0,
        "extra_sids": dict(extra_sids.most_common(20)),
        # the same sessions by the worst kind of extra alert on them (EXTRA_KINDS, docs/ids-coverage.md)
        **{f"extra_{k}_sessions": extra_kind[k] for k in EXTRA_KINDS},
        **{
            f"extra_{k}_fraction": (extra_kind[k] / sessions if sessions else 0.0)
            for k in EXTRA_KINDS
        },
        "extra_sids_by_kind": {k: dict(extra_sids_kind[k].most_common(20)) for k in EXTRA_KINDS},
        "missed_reasons": dict(reasons.most_common()),
        "per_keyword": {k: dict(v) for k, v in sorted(per_kw.items())},
        "per_classtype": {k: dict(v) for k, v in sorted(per_ct.items())},
        "rows": rows,
    }


# Kinds of extra alert (another sid firing on a rule's session), from the most to the least expected:
# header_only: the other rule has no content or pcre (a SYN to port 1521, say): it matches any
#   session to that port, whatever we send;
# overlapping: every content of the other rule also occurs in this rule's own contents (or those
#   of the flowbit setters written into its session), or is HTTP framing every request carries
#   (method, " HTTP/1."): traffic that satisfies this rule satisfies the other's contents too;
# unrelated: anything else, i.e. the session carried bytes that neither rule asked for. The
#   "<= 1% of sessions" target is judged on this kind.
EXTRA_KINDS = ("header_only", "overlapping", "unrelated")
_HTTP_FRAMING = (
    b"get",
    b"post",
    b"head",
    b" http/1.",
    b"http/1.",
    b"http/1.1",
    b"http/1.0",
    b"\r\n",
)


def _contents(m: RuleModel) -> list[bytes]:
    return [
        x.data
        for ms in m.buffers.values()
        for x in ms
        if x.kind == "content" and not x.negated and x.data
    ]


# application protocols whose commands are CRLF-ended lines the synthesizer writes
_LINE_APPS = ("ftp", "smtp", "pop3", "imap")


def _written(m: RuleModel) -> list[bytes]:
    """Bytes a rule's own matches put into its session beyond each content alone: a buffer's
    contents laid out side by side as `within`/`distance` let the layout put them (the filler
    between them left out: it is found by laying them out twice, with two filler bytes), and the
    literal runs of its pcres (`^MKD\\s[^\\n]{100}` -> `MKD `); on a line protocol a run that ends
    its pattern ends the command line (CRLF)."""
    out: list[bytes] = []
    for ms in m.buffers.values():
        cs = [x for x in ms if x.kind == "content" and not x.negated and x.data]
        if len(cs) > 1:
            try:
                lay0, lay1 = (build_buffer(cs, None, fill=f) for f in (b"\0", b"\xff"))
            except (LayoutError, RegexUnsupported):
                lay0 = lay1 = b""
            if len(lay0) == len(lay1):
                out += [
                    bytes(seg)
                    for seg in re.split(
                        rb"\0+",
                        bytes(a if a == b else 0 for a, b in zip(lay0, lay1, strict=True)),
                    )
                    if seg
                ]
        for x in ms:
            if x.kind == "pcre" and not x.negated:
                runs, ends = literal_runs(x.pattern, x.flags)
                out += runs
                if runs and ends and m.app in _LINE_APPS:
                    out.append(runs[-1] + b"\r\n")
    return out


def extra_kind_of(
    own: RuleModel,
    other: RuleModel | None,
    generic: set[int],
    setters: list[RuleModel] | tuple = (),
) -> str:
    """Which of EXTRA_KINDS an alert of `other` on the session of `own` is (`setters`: the
    flowbit setters whose messages were written into that session, whose contents count as its
    own)."""
    if other is None:
        return "unrelated"
    if other.sid in generic:
        return "header_only"
    theirs = _contents(other)
    if not theirs:
        return "unrelated"  # pcre / byte_test only: nothing to compare
    mine = b"\n".join(c for r in (own, *setters) for c in _contents(r) + _written(r)).lower()
    framing = _HTTP_FRAMING if own.app == "http" else ()
    if all(c.lower() in mine or c.lower() in framing for c in theirs):
        return "overlapping"
    return "unrelated"


EVASION_GATE = "evasions against the baseline"


def _reason_class(reason: str) -> str:
    r = reason.split(" (")[0]
    for prefix in ("unsupported: needs specific addresses",):
        if r.startswith(prefix):
            return prefix
    return r[:90]


def run_coverage(
    rule_files: list[str | Path],
    out_dir: str | Path,
    *,
    ids: str = "suricata",
    mixes: tuple[float, ...] = (),
    progress=None,
    ip_version: int = 4,
    exclude_unloadable: bool = False,
    baseline: Baseline | None = None,
    dut: Dut | None = None,
) -> dict:
    """One DUT (default: `suricata` on PATH with our configuration): its coverage document."""
    return run_coverage_duts(
        rule_files,
        out_dir,
        [dut or Dut()],
        ids=ids,
        mixes=mixes,
        progress=progress,
        ip_version=ip_version,
        exclude_unloadable=exclude_unloadable,
        baseline=baseline,
    )["duts"][0]


@dataclass
class _MixCapture:
    """A mixed capture, made once and read by every DUT: benign load + the attack sessions."""

    key: str
    folder: Path
    synth: SynthResult
    pcap: Path
    benign_packets: int


def run_coverage_duts(
    rule_files: list[str | Path],
    out_dir: str | Path,
    duts: list[Dut],
    *,
    ids: str = "suricata",
    mixes: tuple[float, ...] = (),
    progress=None,
    ip_version: int = 4,
    exclude_unloadable: bool = False,
    baseline: Baseline | None = None,
    allowed: dict[int, str] | None = None,
    allow_path: str | None = None,
    multiply: tuple[int, ...] = (),
    evasions: tuple[str, ...] = (),
    evasion_live: HostLabels | None = None,
    ja3_strings: Mapping[str, bytes] | None = None,
) -> dict:
    """The sessions synthesized once (and the mixed captures made once), read by every DUT.

    `evasions`: classes of evasion variants (`idsrules.evasion`) made of every rule that alerted
    with the first DUT, read by it in each reassembly configuration (`testbed.ids.evasion`), with
    `evasion_live()` the host's label per (variant, proto) and the live probes' document
    (`testbed.ids.evasion_host.live_table`; None: unlabelled), called once the variants have been
    read (the live lab may run beside the synthesis and writing); `doc["evasions"]`, evasion.json/.md
    and the table coverage_evasion, compared with the baseline's evasions.

    `ja3_strings` (MD5 hex -> JA3 string, `idsrules.synth.read_ja3_strings`): `ja3.hash` rules
    whose hash is one of them are synthesized from that string (`doc["ja3_from_strings"]`).

    One DUT writes its reports into `out_dir`; several each into `out_dir/NAME/`, compared per sid
    with the first (`versus`), and `comparison.json/md/html` in `out_dir`. Every DUT is compared
    with `baseline` when given. `allowed` (sid -> reason; default: the baseline's allow file)
    excuses newly failing sids in both comparisons. `tables/coverage.parquet` in `out_dir` holds
    every DUT's rows (step: the DUT's name, "run" for one DUT). Returns {"duts": [doc, ...],
    "blocking": [(what, sids), ...]}."""
    if ids != "suricata":
        raise ValueError(f"IDS {ids!r} is not supported; use --ids suricata")
    if not duts:
        raise ValueError("run_coverage_duts needs at least one DUT")
    if any(not 1 <= t <= MAX_COPIES for t in multiply):
        raise ValueError(f"multiply: the number of copies must be 1..{MAX_COPIES} (got {multiply})")
    if allowed is None and baseline is not None:
        allowed, allow_path = baseline.allowed, baseline.allow_path
    allowed = allowed or {}
    say = progress or (lambda msg: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    models, problems = load_rules(rule_files)
    unknown = Counter(k for m in models for k in m.unknown)
    say(f"parsed {len(models):,} rules ({len(problems)} problems)")
    from_strings = resolve_ja3_hashes(models, ja3_strings) if ja3_strings else {}
    if ja3_strings:
        say(
            f"{len(from_strings):,} ja3.hash rules have their JA3 string among the {len(ja3_strings):,} given"
        )
    t1 = time.monotonic()
    synth = synthesize(
        models,
        out / "attacks.pcap",
        out / "attacks.json",
        ip_version=ip_version,
        progress=lambda i, n: say(f"synthesizing {i:,}/{n:,}"),
    )
    t2 = time.monotonic()
    say(f"wrote {len(synth.sessions):,} sessions, {synth.packets:,} packets")
    mixed = []
    for frac in mixes:
        say(f"mixing with benign load: attacks {frac:.0%} of packets")
        mixed.append(_mix_capture(models, out, frac, synth.packets, ip_version))
    multiplied: list[MultipliedCapture] = []
    for copies in multiply:
        say(f"multiplying the attack sessions: T = {copies}")
        multiplied.append(
            multiply_attacks(out / "attacks.pcap", copies, out / f"multiply-{copies}")
        )
    several = len(duts) > 1
    docs: list[dict] = []
    for dut in duts:
        where = out / dut.name if several else out
        where.mkdir(parents=True, exist_ok=True)
        say(f"running suricata ({dut.name})" if several else "running suricata")
        t3 = time.monotonic()
        suri = run_offline(
            out / "attacks.pcap",
            list(rule_files),
            where / "suricata",
            binary=dut.binary,
            config=dut.config,
            eve_types=MISS_EVE_TYPES,  # the app events tell why a session did not alert
        )
        t4 = time.monotonic()
        info = dut.describe(suri.config)
        doc = {
            "ids": ids,
            "ids_version": info["version"],
            "dut": info,
            "rule_files": [str(f) for f in rule_files],
            "problems": [str(p) for p in problems],
            "unknown_keywords": dict(unknown.most_common()),
            "suricata_errors": suri.errors[:200],
            "suricata_rules_loaded": suri.rules_loaded,
            "suricata_rules_failed": suri.rules_failed,
            "packets": synth.packets,
            "ip_version": ip_version,
            "timing_s": {
                "parse_and_synthesize": round(t2 - t_start, 3),
                "synthesize": round(t2 - t1, 3),
                "suricata": round(t4 - t3, 3),
            },
            **score(models, synth, suri, exclude_unloadable=exclude_unloadable),
            "ja3_from_strings": {str(k): v.decode() for k, v in sorted(from_strings.items())},
            "mixes": {},
        }
        for mc in mixed:
            say(f"suricata on the mix at {mc.key}" + (f" ({dut.name})" if several else ""))
            folder = where / mc.folder.name if several else mc.folder
            suri_m = run_offline(
                mc.pcap, list(rule_files), folder / "suricata", binary=dut.binary, config=dut.config
            )
            doc["mixes"][mc.key] = _mix_result(models, mc, suri_m, exclude_unloadable)
        if multiplied:
            doc["multiplied"] = {}
        for mt in multiplied:
            say(
                f"suricata on the attacks multiplied T = {mt.copies}"
                + (f" ({dut.name})" if several else "")
            )
            folder = where / mt.folder.name if several else mt.folder
            t5 = time.monotonic()
            suri_t = run_offline(
                mt.pcap,
                list(rule_files),
                folder / "suricata",
                binary=dut.binary,
                config=dut.config,
                home_net=multiplied_home_net(mt),
            )
            doc["multiplied"][str(mt.copies)] = score_multiplied(mt, suri, suri_t, models)
            doc["multiplied"][str(mt.copies)]["suricata_s"] = round(time.monotonic() - t5, 3)
        if baseline is not None:
            doc["baseline"] = compare_docs(
                baseline.doc, doc, allowed, path=baseline.path, allow_path=allow_path
            )
        if evasions and not docs:
            say("evasion variants of the rules that alerted")
            doc["evasions"] = _evasions(
                models, doc, list(rule_files), list(evasions), where, dut, evasion_live, say
            )
            if baseline is not None:
                doc["evasions"]["baseline"] = compare_evasions(
                    baseline.doc.get("evasions") or {}, doc["evasions"], allowed
                )
                write_evasion_md(doc["evasions"], where)
        elif not docs:
            table_path(where, "coverage_evasion").unlink(missing_ok=True)
        if docs:
            doc["versus"] = compare_docs(
                docs[0],
                doc,
                allowed,
                path=str(out / duts[0].name / "coverage.json"),
                allow_path=allow_path,
                dut=duts[0].name,
            )
        doc["timing_s"]["total"] = round(time.monotonic() - t_start, 3)
        docs.append(doc)
    for dut, doc in zip(duts, docs):
        write_reports(doc, out / dut.name if several else out, table=False)
    write_coverage_table(out, [(doc["dut"]["name"] if several else "run", doc) for doc in docs])
    result = {"duts": docs, "blocking": blocking(docs)}
    if several:
        write_comparison(result, out)
    return result


ROW_KEYS = (
    "sid",
    "where",
    "msg",
    "classtype",
    "state",
    "loaded",
    "synthesized",
    "alerted",
    "reason",
    "extra_sids",
    "extra_kind",
)


def _slim(row: dict) -> dict:
    """A row of a mix as coverage.json keeps it: enough for the per-sid comparison and the table."""
    return {k: row[k] for k in ROW_KEYS if k in row}


def compare_docs(
    old: dict,
    new: dict,
    allowed: dict[int, str],
    *,
    path: str,
    allow_path: str | None,
    dut: str | None = None,
) -> dict:
    """compare_coverage of the unmixed rows, and of every mix both documents have per-sid rows for."""
    cmp = {
        "path": path,
        "allow_path": allow_path,
        **({"dut": dut} if dut else {}),
        **compare_coverage(old, new, allowed),
        "mixes": {},
    }
    for key, mx in new.get("mixes", {}).items():
        before = old.get("mixes", {}).get(key)
        if not isinstance(before, dict) or not isinstance(before.get("rows"), list):
            why = (
                "it was not mixed at this fraction"
                if not isinstance(before, dict)
                else "its mix has no per-sid rows (written before they were kept)"
            )
            cmp["mixes"][key] = {"compared": False, "why": why}
            continue
        cmp["mixes"][key] = {
            "compared": True,
            "path": path,
            "allow_path": allow_path,
            **compare_coverage(before, mx, allowed),
        }
    return cmp


def _evasions(
    models: list[RuleModel],
    doc: dict,
    rule_files: list[str | Path],
    classes: list[str],
    where: Path,
    dut: Dut,
    live: HostLabels | None,
    say,
) -> dict:
    """The evasion run of one DUT's alerting rules: reports and table written, the compact
    document returned (the rows are in the table)."""
    sids = {r["sid"] for r in doc["rows"] if r["state"] == "alerted"}
    ev = run_evasions(models, sids, rule_files, classes, where, dut, live, progress=say)
    write_evasion_reports(ev, where)
    write_table(
        where, "coverage_evasion", evasion_rows(where.resolve().name, "run", ev, doc["dut"])
    )
    return compact(ev)


def blocking(docs: list[dict]) -> list[tuple[str, list[int]]]:
    """Every comparison with newly failing sids that are not allowed: (what, sids), `what` naming
    the DUT (when several), the reference (the baseline, or the first DUT) and the mix."""
    several = len(docs) > 1
    found = []
    for doc in docs:
        name = doc.get("dut", {}).get("name", "suricata")
        for key in ("baseline", "versus"):
            cmp = doc.get(key)
            if not cmp:
                continue
            if key == "baseline":
                what = f"{name} against the baseline" if several else "the baseline"
            else:
                what = f"{name} against {cmp['dut']}"
            if cmp["blocking_sids"]:
                found.append((what, cmp["blocking_sids"]))
            for mkey, mcmp in cmp.get("mixes", {}).items():
                if mcmp.get("compared") and mcmp["blocking_sids"]:
                    found.append((f"{what}, mixed at {mkey}", mcmp["blocking_sids"]))
        ev = (doc.get("evasions") or {}).get("baseline")
        if ev and ev["blocking_sids"]:
            found.append((EVASION_GATE, ev["blocking_sids"]))
    return found


def attack_coverage(
    pcap: Path,
    attacks: Attacks,
    rule_paths: list[Path],
    out_dir: Path,
    baseline: Baseline | None = None,
) -> dict:
    """Suricata offline on `pcap` (which holds the attack sessions); coverage of the selected rules
    written as coverage.json/md/html and tables/coverage.parquet into out_dir (a run folder: its
    name is the table's run_id). With `baseline`, the per-sid comparison (the `baseline` section;
    `blocking([doc])` for the gate). Returns the coverage document."""
    t = time.monotonic()
    suri = run_offline(pcap, [str(p) for p in rule_paths], out_dir / "suricata")
    info = Dut().describe(suri.config)
    doc = {
        "ids": "suricata",
        "ids_version": info["version"],
        "dut": info,
        "rule_files": [str(p) for p in rule_paths],
        "problems": attacks.problems,
        "unknown_keywords": {},
        "suricata_errors": suri.errors[:200],
        "suricata_rules_loaded": suri.rules_loaded,
        "suricata_rules_failed": suri.rules_failed,
        "packets": attacks.synth.packets,
        "capture": pcap.name,
        **score(list({m.sid: m for m in attacks.scheduled}.values()), attacks.synth, suri),
        "mixes": {},
    }
    if baseline is not None:
        doc["baseline"] = compare_docs(
            baseline.doc, doc, baseline.allowed, path=baseline.path, allow_path=baseline.allow_path
        )
    doc["timing_s"] = {
        "parse_and_synthesize": 0.0,
        "suricata": round(time.monotonic() - t, 3),
        "total": round(time.monotonic() - t, 3),
    }
    write_reports(doc, out_dir)
    doc["summary"] = summary_lines(doc)
    return doc


def played_sessions(pcap: Path, dialogues: list[dict]) -> SynthResult:
    """The attack sessions a generator played (`dialogues` as tcp_dialogues gives them), as
    `pcap` shows them: one session per client SYN to a rule's server address and port (a
    retransmitted SYN is the same session), with the rule's sid and related sids. `synthesized`:
    the sids with a session; `failed`: the played sids without one."""
    cap = read_capture(pcap)
    res = SynthResult(Path(pcap), packets=len(cap), bytes=int(cap.wire_len.sum()))
    rule_of = {(d["server"], int(d["server_port"])): d for d in dialogues}
    syn = (cap.proto == 6) & ((cap.tcp_flags & 0x12) == 0x02)
    idx = syn.nonzero()[0]
    src = address_text(cap.ip_version[idx], cap.src_hi[idx], cap.src_lo[idx])
    dst = address_text(cap.ip_version[idx], cap.dst_hi[idx], cap.dst_lo[idx])
    seen: set[tuple] = set()
    for j, i in enumerate(idx.tolist()):
        d = rule_of.get((dst[j], int(cap.dport[i])))
        key = (src[j], int(cap.sport[i]), dst[j], int(cap.dport[i]))
        if d is None or key in seen:
            continue
        seen.add(key)
        res.sessions.append(
            Session(
                d["sid"],
                list(d.get("related", [])),
                "tcp",
                key[0],
                key[1],
                key[2],
                key[3],
                start_ns=int(cap.ts_ns[i]),
            )
        )
        res.synthesized[d["sid"]] = "ok"
    for d in dialogues:
        if d["sid"] not in res.synthesized:
            res.failed[d["sid"]] = "played, but no session of it in the capture"
    return res


def played_coverage(
    pcap: Path,
    spec,
    rule_paths: list[Path],
    dialogues: list[dict],
    out_dir: Path,
    baseline: Baseline | None = None,
) -> dict:
    """`attack_coverage` of the attack sessions a generator played (`dialogues`, from
    tcp_dialogues(spec, rule_paths)) in `pcap`, a capture of both directions; the sessions found
    are listed in out_dir/attacks/played.json (the document's `played_sessions`: how many)."""
    selected, _models, problems = load_selection(rule_paths, spec.select)
    played = {d["sid"] for d in dialogues}
    models = [m for m in selected if m.sid in played]
    synth = played_sessions(pcap, dialogues)
    listing = out_dir / "attacks" / "played.json"
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text(
        json.dumps(
            {
                "capture": str(pcap),
                "packets": synth.packets,
                "sessions": [s.as_dict() for s in synth.sessions],
                "no_session": {str(k): v for k, v in synth.failed.items()},
            },
            indent=1,
        )
        + "\n"
    )
    attacks = Attacks(Path(pcap), listing, synth, models, problems, models)
    doc = attack_coverage(Path(pcap), attacks, rule_paths, out_dir, baseline=baseline)
    doc["played_sessions"] = len(synth.sessions)
    return doc


def _benign_pcap(out: Path, packets: int, duration_s: float) -> Path:
    """Benign load from the native engine: UDP and TCP flows among BENIGN_NET addresses.

    The flowengine generator writes its files into out/benign/; its session is kept as
    out/benign.ntg and its capture becomes out/benign.pcap."""
    flows = 50
    rate = max(1, int(packets / duration_s / flows))
    text = f"""version: 1
name: benign-mix
seed: 7
flows:
  - protocol: udp
    src: {{cidr: {BENIGN_NET[0]}, mode: increment}}
    dst: {BENIGN_NET[1]}
    dst_port: 5004
    rate: {rate}
    duration: {duration_s:.3f}s
    payload: {{size: 100-1200}}
    repeat: {{count: {flows // 2}, period: 1ms}}
  - protocol: tcp
    src: {{cidr: {BENIGN_NET[0]}, mode: increment}}
    dst: {BENIGN_NET[1]}
    dst_port: 9000
    rate: {rate}
    duration: {duration_s:.3f}s
    payload: {{size: 100-1400}}
    repeat: {{count: {flows - flows // 2}, period: 1ms}}
"""
    scen = parse_scenario(text, "<benign-mix>")
    work = out / "benign"
    work.mkdir(exist_ok=True)
    gen = get_generator("flowengine")
    gen.prepare(scen, work, scen.seed)
    gen.start()
    if not gen.wait(600):
        gen.stop()
    if gen.status() != "completed":
        record = gen.commands()[0]
        raise GeneratorError(f"flowengine failed: {record.note or record.status}")
    (work / "session.ntg").replace(out / "benign.ntg")
    pcap = (work / "capture.pcap").replace(out / "benign.pcap")
    shutil.rmtree(work)
    return pcap


def _mix_capture(
    models: list[RuleModel], out: Path, frac: float, attack_packets: int, ip_version: int
) -> _MixCapture:
    """out/mix-F/: benign load and the attack sessions again (their times inside the benign
    load's), merged by time into mixed.pcap."""
    mdir = out / f"mix-{frac:g}"
    mdir.mkdir(exist_ok=True)
    benign_packets = int(attack_packets * (1 - frac) / frac)
    n_sessions = sum(1 for m in models if m.supported) or 1
    duration_s = max(1.0, n_sessions * SESSION_GAP_NS / 1e9)
    benign = _benign_pcap(mdir, benign_packets, duration_s)
    cap = read_capture(benign)
    t0 = int(cap.ts_ns[0]) if len(cap.ts_ns) else T0_NS
    synth = synthesize(
        models, mdir / "attacks.pcap", mdir / "attacks.json", t0_ns=t0, ip_version=ip_version
    )
    merged = mdir / "mixed.pcap"
    merge_pcaps([benign, mdir / "attacks.pcap"], merged)  # the one merge (idsrules/attacks.py)
    benign.unlink(missing_ok=True)
    return _MixCapture(f"{frac:g}", mdir, synth, merged, len(cap.ts_ns))


def _mix_result(
    models: list[RuleModel], mc: _MixCapture, suri: SuricataResult, exclude_unloadable: bool
) -> dict:
    counts = score(models, mc.synth, suri, exclude_unloadable=exclude_unloadable)
    total = mc.benign_packets + mc.synth.packets
    keep = (
        "loaded",
        "silent",
        "alerted",
        "missed",
        "coverage",
        "coverage_loaded",
        "unloadable",
        "sessions",
        "extra_alert_sessions",
        "extra_fraction",
        "extra_specific_sessions",
        "extra_specific_fraction",
        "extra_unrelated_sessions",
        "extra_unrelated_fraction",
    )
    res = {k: counts[k] for k in keep}
    res.update(
        benign_packets=mc.benign_packets,
        attack_packets=mc.synth.packets,
        attack_fraction=mc.synth.packets / total if total else 0.0,
    )
    res["rows"] = [_slim(r) for r in counts["rows"]]  # per sid: a later run's baseline of this mix
    return res


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _counted(doc: dict) -> int:
    """The rules the coverage divides by: loaded ones that can alert, plus the unloadable ones."""
    return doc["loaded"] - doc["silent"] + (0 if doc["unloadable_excluded"] else doc["unloadable"])


def summary_lines(doc: dict) -> list[str]:
    lines = [
        f"rules: {doc['rules']:,} parsed ({len(doc['problems'])} malformed, skipped), "
        f"{doc['synthesizable']:,} synthesizable, {doc['loaded']:,} loaded by {doc['ids']} {doc['ids_version']}",
        f"coverage: {_pct(doc['coverage'])}: {doc['alerted']:,} of {_counted(doc):,} rules that can alert "
        f"alerted for their own sid; {doc['missed']:,} missed; {doc['silent']} noalert rules not counted",
        f"unloadable: {doc['unloadable']:,} rules that could alert were refused by {doc['ids']}"
        + (
            f" (sids {', '.join(map(str, doc['unloadable_sids'][:20]))}"
            + (", ..." if doc["unloadable"] > 20 else "")
            + ")"
            if doc["unloadable"]
            else ""
        )
        + (
            "; left out of the coverage (--exclude-unloadable)"
            if doc["unloadable_excluded"]
            else "; counted as missed in the coverage"
        )
        + f"; coverage of the loaded rules {_pct(doc['coverage_loaded'])}",
        f"extra alerts (raw): {doc['extra_alert_sessions']:,} of {doc['sessions']:,} sessions ({_pct(doc['extra_fraction'])}) "
        f"had another sid fire: header-only rules, which match any session to that port: "
        f"{doc.get('extra_header_only_sessions', 0):,} ({_pct(doc.get('extra_header_only_fraction', 0))}); "
        f"overlapping rules, whose contents this rule's contents include: {doc.get('extra_overlapping_sessions', 0):,} "
        f"({_pct(doc.get('extra_overlapping_fraction', 0))}); "
        f"unrelated: {doc.get('extra_unrelated_sessions', 0):,} ({_pct(doc.get('extra_unrelated_fraction', 0))})",
    ]
    for mx in doc.get("mixes", {}).values():
        lines.append(
            f"mixed at {_pct(mx['attack_fraction'])} attack packets ({mx['benign_packets']:,} benign): "
            f"coverage {_pct(mx['coverage'])}, extra {_pct(mx['extra_fraction'])} "
            f"(unrelated {_pct(mx.get('extra_unrelated_fraction', 0))})"
        )
    for mt in doc.get("multiplied", {}).values():
        lines.append(multiplied_summary(mt))
    if doc.get("evasions"):
        lines += evasion_summary(doc["evasions"])
    t = doc["timing_s"]
    lines.append(
        f"time: parse+synthesize {t['parse_and_synthesize']:.2f} s, suricata {t['suricata']:.2f} s, "
        f"total {t.get('total', 0):.2f} s"
    )
    if doc.get("dut"):
        lines.append(dut_line(doc["dut"]))
    return lines


def dut_line(dut: dict) -> str:
    """The DUT in one line: name, binary, `suricata -V`, configuration and its sha256."""
    cfg = f"configuration {dut['config']}" if dut.get("config") else "the testbed's configuration"
    sha = f" (sha256 {dut['config_sha256'][:16]})" if dut.get("config_sha256") else ""
    return f"DUT {dut['name']}: {dut['binary']} ({dut.get('version_line') or dut.get('version')}), {cfg}{sha}"


def _comparisons(doc: dict, several: bool = False):
    """(section title, source, stderr head, stderr label, comparison, unmixed comparison or None)
    of every comparison in `doc`: against the baseline, against the first DUT, and each of their
    mixes that was compared."""
    name = doc.get("dut", {}).get("name", "suricata")
    for key in ("baseline", "versus"):
        cmp = doc.get(key)
        if not cmp:
            continue
        if key == "baseline":
            title, source = "Changes against the baseline", "baseline"
            head = f"baseline {cmp['path']}" + (f" ({name})" if several else "")
            label = f"baseline ({name})" if several else "baseline"
        else:
            title, source = f"Changes against DUT {cmp['dut']}", f"DUT {cmp['dut']}"
            head = label = f"{name} against {cmp['dut']}"
        yield title, source, head, label, cmp, None
        for mkey, mcmp in cmp.get("mixes", {}).items():
            if mcmp.get("compared"):
                yield (
                    f"{title}, mixed at {mkey}",
                    source,
                    f"{head}, mixed at {mkey}",
                    f"{label}, mixed at {mkey}",
                    mcmp,
                    cmp,
                )
            else:
                yield (
                    f"{title}, mixed at {mkey}",
                    source,
                    f"{head}, mixed at {mkey}",
                    label,
                    mcmp,
                    cmp,
                )


def sid_change_lines(doc: dict, several: bool = False) -> list[str]:
    """The stderr lines of every comparison in `doc` (regression.summary_lines each); a mix lists
    only the sids that do not also fail unmixed, and says so when it cannot be compared."""
    lines = []
    for _, _, head, label, cmp, unmixed in _comparisons(doc, several):
        if not cmp.get("compared", True):
            lines.append(f"{head}: not compared: {cmp['why']}")
            continue
        if unmixed is not None:
            also = {e["sid"] for e in unmixed["newly_failing"]}
            only = [e for e in cmp["newly_failing"] if e["sid"] not in also]
            cmp = {**cmp, "newly_failing": only}
            dropped = cmp["counts"]["newly_failing"] - len(only)
            head += f" ({dropped} of them also unmixed, not listed again)" if dropped else ""
        lines += comparison_summary(cmp, head=head, label=label)
    return lines


def gate_lines(result: dict) -> list[str]:
    """One line per comparison with newly failing sids not allowed (`blocking`); a mix whose sids
    all fail unmixed too is not repeated."""
    unmixed = {what: set(sids) for what, sids in result["blocking"] if ", mixed at " not in what}
    lines = []
    for what, sids in result["blocking"]:
        base = what.split(", mixed at ")[0]
        if what != base and set(sids) <= unmixed.get(base, set()):
            continue
        listed = f"sids {', '.join(map(str, sids[:20]))}{', ...' if len(sids) > 20 else ''}"
        if what == EVASION_GATE:
            lines.append(
                f"{len(sids)} sids have a variant evaded now that was not in the baseline "
                f"({listed}; evasion.md lists the variants)"
            )
        elif what == "the baseline":
            lines.append(f"{len(sids)} sids alerted in the baseline and do not now ({listed})")
        else:
            lines.append(f"{what}: {len(sids)} sids newly failing ({listed})")
    return lines


def markdown(doc: dict) -> str:
    out = ["# IDS detection coverage", "", *[f"- {x}" for x in summary_lines(doc)], ""]
    out += _comparison_markdown(doc)
    for mt in doc.get("multiplied", {}).values():
        out += multiplied_markdown(mt)
    out += ["## Why rules were missed", "", "| reason | rules |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in doc["missed_reasons"].items()]
    out += [
        "",
        "## Per keyword",
        "",
        "| keyword | rules | alerted | coverage |",
        "|---|---|---|---|",
    ]
    for k, v in sorted(doc["per_keyword"].items(), key=lambda kv: -kv[1]["rules"]):
        out.append(
            f"| {k} | {v['rules']} | {v.get('alerted', 0)} | {_pct(v.get('alerted', 0) / v['rules'])} |"
        )
    out += [
        "",
        "## Per classtype",
        "",
        "| classtype | rules | alerted | coverage |",
        "|---|---|---|---|",
    ]
    for k, v in sorted(doc["per_classtype"].items(), key=lambda kv: -kv[1]["rules"]):
        out.append(
            f"| {k} | {v['rules']} | {v.get('alerted', 0)} | {_pct(v.get('alerted', 0) / v['rules'])} |"
        )
    if doc["extra_sids"]:
        out += [
            "",
            "## Sids firing on other rules' sessions",
            "",
            "| sid | kind | sessions |",
            "|---|---|---|",
        ]
        kind = {str(s): k for k, sids in doc.get("extra_sids_by_kind", {}).items() for s in sids}
        out += [f"| {k} | {kind.get(str(k), '-')} | {v} |" for k, v in doc["extra_sids"].items()]
        unrelated = [r for r in doc["rows"] if r.get("extra_kind") == "unrelated"]
        if unrelated:
            out += [
                "",
                f"## Sessions with unrelated extra alerts ({len(unrelated)})",
                "",
                "| sid | where | other sids |",
                "|---|---|---|",
            ]
            out += [
                f"| {r['sid']} | {r['where']} | {', '.join(map(str, r['extra_sids']))} |"
                for r in unrelated[:500]
            ]
    if doc["unknown_keywords"]:
        out += ["", "## Unknown keywords", "", "| keyword | rules |", "|---|---|"]
        out += [f"| {k} | {v} |" for k, v in doc["unknown_keywords"].items()]
    if doc["problems"]:
        out += ["", "## Malformed rules (skipped)", ""] + [
            f"- `{p}`" for p in doc["problems"][:200]
        ]
    if doc["suricata_errors"]:
        out += ["", "## Suricata errors", "", "```"] + doc["suricata_errors"][:50] + ["```"]
    refused = [r for r in doc["rows"] if r["state"] == "not loaded"]
    if refused:
        out += [
            "",
            f"## Rules {doc['ids']} refused to load ({len(refused)})",
            "",
            "| sid | where | error |",
            "|---|---|---|",
        ]
        out += [f"| {r['sid']} | {r['where']} | {r['reason']} |" for r in refused[:2000]]
    missed = [r for r in doc["rows"] if r["state"] == "missed"]
    out += ["", f"## Missed rules ({len(missed)})", "", "| sid | where | reason |", "|---|---|---|"]
    out += [f"| {r['sid']} | {r['where']} | {r.get('reason', '')} |" for r in missed[:2000]]
    return "\n".join(out) + "\n"


def _comparison_markdown(doc: dict, prefix: str = "") -> list[str]:
    out = []
    for title, source, _, _, cmp, _ in _comparisons(doc):
        title = prefix + (title[0].lower() + title[1:] if prefix else title)
        if cmp.get("compared", True):
            out += baseline_markdown(cmp, title=title, source=source)
        else:
            out += [f"## {title}", "", f"Not compared: {cmp['why']}.", ""]
    return out


def write_reports(doc: dict, out: Path, table: bool = True) -> None:
    """coverage.json (the baseline format), coverage.md and .html in `out`; with `table` also
    tables/coverage.parquet (`write_coverage_table`, step "run")."""
    (out / "coverage.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = markdown(doc)
    (out / "coverage.md").write_text(md)
    (out / "coverage.html").write_text(markdown_html(md, "IDS coverage"))
    if table:
        write_coverage_table(out, [("run", doc)])


def coverage_rows(run_id: str, step: str, doc: dict) -> list[dict]:
    """The run table `coverage` (analysis.tables) of one coverage document: a row per sid, and per
    sid and mix (`mix`: the attack packet fraction asked for; null for the attack capture alone)."""
    dut = doc.get("dut") or {}
    common = {
        "run_id": run_id,
        "step": step,
        "ids_version": doc.get("ids_version"),
        "config_sha256": dut.get("config_sha256"),
    }
    rows = [
        {**common, **_slim(r), "extra_sids": r.get("extra_sids", []), "mix": None}
        for r in doc["rows"]
    ]
    for key, mx in doc.get("mixes", {}).items():
        rows += [
            {**common, **_slim(r), "extra_sids": r.get("extra_sids", []), "mix": float(key)}
            for r in mx.get("rows", [])
        ]
    return rows


def coverage_multiplied_rows(run_id: str, step: str, doc: dict) -> list[dict]:
    """The run table `coverage_multiplied` of one coverage document: a row per T and sid of its
    `multiplied` section (none without --multiply)."""
    dut = doc.get("dut") or {}
    common = {
        "run_id": run_id,
        "step": step,
        "ids_version": doc.get("ids_version"),
        "config_sha256": dut.get("config_sha256"),
    }
    return [
        {
            **common,
            "copies": int(t),
            "reason": r.get("reason"),
            **{
                k: r[k]
                for k in (
                    "sid",
                    "msg",
                    "alerts",
                    "alerts_multiplied",
                    "expected",
                    "per_copy",
                    "scales",
                )
            },
        }
        for t, m in doc.get("multiplied", {}).items()
        for r in m["rows"]
    ]


def write_coverage_table(out: Path, steps: list[tuple[str, dict]]) -> Path:
    """out/tables/coverage.parquet: the rows of every (step, document), run_id the folder's name;
    with --multiply also coverage_multiplied.parquet (removed when an earlier run left one)."""
    run_id = Path(out).resolve().name
    multiplied = [row for step, doc in steps for row in coverage_multiplied_rows(run_id, step, doc)]
    if multiplied:
        write_table(out, "coverage_multiplied", multiplied)
    else:
        table_path(out, "coverage_multiplied").unlink(missing_ok=True)
    return write_table(
        out, "coverage", [row for step, doc in steps for row in coverage_rows(run_id, step, doc)]
    )


def comparison_markdown(result: dict) -> str:
    docs = result["duts"]
    first = docs[0]["dut"]["name"]
    out = [
        f"# IDS detection coverage of {len(docs)} DUTs",
        "",
        f"- the same {docs[0]['sessions']:,} sessions ({docs[0]['packets']:,} packets, `attacks.pcap`) read by "
        f"each DUT; each is compared per sid with the first, {first}",
    ]
    if result["blocking"]:
        out += [
            "- gate: failed: "
            + "; ".join(
                f"{what}: sids {', '.join(map(str, sids[:20]))}"
                + (", ..." if len(sids) > 20 else "")
                for what, sids in result["blocking"]
            )
        ]
    else:
        out += ["- gate: passed (no newly failing sid that is not allowed)"]
    out += [
        "",
        "| DUT | binary | version | configuration | config sha256 | coverage | alerted | missed | "
        "not loaded | report |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in docs:
        u = d["dut"]
        out.append(
            f"| {u['name']} | `{u['binary']}` | {u['version']} | {('`' + u['config'] + '`') if u['config'] else 'the testbed'} "
            f"| {(u.get('config_sha256') or '-')[:16]} | {_pct(d['coverage'])} | {d['alerted']} | {d['missed']} "
            f"| {d['unloadable']} | `{u['name']}/coverage.html` |"
        )
    out.append("")
    for d in docs:
        out += _comparison_markdown(d, prefix=f"{d['dut']['name']}: ")
    return "\n".join(out) + "\n"


def write_comparison(result: dict, out: Path) -> None:
    """comparison.json (the DUTs, the per-sid comparisons with the first and with the baseline, the
    gate), comparison.md and .html in `out`."""
    docs = result["duts"]
    summary = {
        "duts": [
            {
                **d["dut"],
                "coverage": d["coverage"],
                "alerted": d["alerted"],
                "missed": d["missed"],
                "unloadable": d["unloadable"],
                "report": f"{d['dut']['name']}/coverage.json",
            }
            for d in docs
        ],
        "versus": {d["dut"]["name"]: d["versus"] for d in docs[1:]},
        "baseline": {d["dut"]["name"]: d["baseline"] for d in docs if d.get("baseline")},
        "blocking": [{"what": what, "sids": sids} for what, sids in result["blocking"]],
    }
    (out / "comparison.json").write_text(json.dumps(summary, indent=1) + "\n")
    md = comparison_markdown(result)
    (out / "comparison.md").write_text(md)
    (out / "comparison.html").write_text(markdown_html(md, "IDS coverage of several DUTs"))
