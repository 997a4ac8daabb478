"""Evasion variants of every alerting rule's session, the IDS's verdict on each, the host's label,
the matrix and the gate (docs/ids-coverage.md, "Evasion variants").

For each rule that alerted on its plain session, its session is rebuilt as a `WirePlan` and
varied by the chosen classes (`idsrules.evasion`); every variant is a session with an address
pair of its own in `evasions/pcaps/` (a file per writer process), beside the plain plan rendered the same way (the control: a
rule that does not alert on it is "not comparable"). Suricata reads the capture once per
configuration (its reassembly policy left default, and set to the host's, Linux). Whether a
variant reached the host comes from `host_table`: each variant, applied to probe sessions, sent
live through a router into a Linux stack (`testbed.ids.hostlabel`), and what the server
application read compared with what the client meant. Outcome per rule, variant and
configuration: detected (host reached, alert), evaded (host reached, no alert), false alert (no
host, alert), harmless (neither).
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import json
import os
import socket
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path

import pyarrow as pa

from idsrules.evasion import variants
from idsrules.evasion.model import WirePlan, plain_plan
from idsrules.evasion.native import Renderer, session_program
from idsrules.layout import LayoutError
from idsrules.regex_example import RegexUnsupported
from idsrules.semantics import RuleModel
from idsrules.synth import (
    SynthError,
    flowbit_setters,
    icmpv4_only,
    plan,
    session_ports,
    session_sides,
)
from ntgcore import packets as P
from ntgcore.files import replacing, write_whole

from .suricata import Dut, alert_pairs, run_offline

T0_NS = 1_700_000_000_000_000_000
PKT_GAP_NS = 20_000
MAX_WINDOW_S = 7 * 86_400
MAX_VARIED_BYTES = 1 << 16  # client bytes of a session that gets variants (ET Open's most: 50,186)
PART_SESSIONS = 1 << 24  # session numbers per writer process
PART_SPAN_NS = 10**17  # its capture's clock starts this much later (3 years) per part
SESSION_GAP_NS = 1_000_000
# The Suricata configurations every variant is read with: name -> host-os-policy of HOME_NET
CONFIGS: dict[str, str | None] = {"default": None, "linux": "linux"}
HOME6, EXT6 = "2001:db8::", "2001:db8:1::"  # /48 each, as the plain sessions' (synth._Addr)
_HOME6_INT, _EXT6_INT = int(ipaddress.IPv6Address(HOME6)), int(ipaddress.IPv6Address(EXT6))
# the host's label per (variant, proto) and the live probes' document, when they are ready
HostLabels = Callable[[], tuple[dict[tuple[str, str], bool | None], dict] | None]

# alerts without the flow's and the application's records: half the eve.json (160 MB, not 350)
EVE_TYPES = (("alert", {"metadata": "no"}),)
OUTCOMES = ("detected", "evaded", "false alert", "harmless", "unlabelled", "not comparable")


@dataclass
class VariantSession:
    sid: int
    variant: str
    cls: str
    proto: str
    client: str
    cport: int
    server: str
    sport: int
    v6: bool = False


@dataclass
class EvasionCapture:
    pcap: Path
    sessions: list[VariantSession] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)  # sid -> why it has no variants
    packets: int = 0


SERVER_SLOTS4 = 1000  # IPv4 server addresses a side has: 198.x.251.1 to 198.x.254.250
SERVER_BASE6 = 1 << 40  # IPv6 server addresses start this far into a side's /48


def client_address(n: int, side: str, v6: bool) -> str:
    """The address of the `n`-th variant session's client on a side (home 198.18/16 or
    2001:db8::/48, external 198.19/16 or 2001:db8:1::/48): IPv4 198.x.1.1 to 198.x.250.250 (the
    n-th of 62,500), never .0 or .255."""
    if v6:
        base = _HOME6_INT if side == "home" else _EXT6_INT
        return socket.inet_ntop(socket.AF_INET6, (base + n % SERVER_BASE6 + 1).to_bytes(16, "big"))
    return f"198.{18 if side == 'home' else 19}.{1 + n // 250 % 250}.{1 + n % 250}"


def server_address(k: int, side: str, v6: bool) -> str:
    """The `k`-th server address of a side, apart from every client address of both sides: a
    rule whose client is on the external side (clients 198.19.x.y, servers 198.18.x.y) must not
    put a session on the address pair of another rule's session the other way round (alerts are
    told apart by their address pair: two sessions on one pair would share their alerts)."""
    if v6:
        base = (_HOME6_INT if side == "home" else _EXT6_INT) + SERVER_BASE6
        return socket.inet_ntop(socket.AF_INET6, (base + k + 1).to_bytes(16, "big"))
    k %= SERVER_SLOTS4
    return f"198.{18 if side == 'home' else 19}.{251 + k // 250}.{1 + k % 250}"


def window_ns(model: RuleModel) -> int:
    """How far apart a rule's variant sessions go: past its threshold's window (a `limit`
    threshold tracked by the server's address would otherwise let one alert through for all of
    them; a week at most), 0 without a threshold."""
    if not model.threshold_s:
        return 0
    return (min(model.threshold_s, MAX_WINDOW_S) + 1) * 1_000_000_000


def plain_plans(
    models: list[RuleModel], sids: set[int]
) -> tuple[dict[int, tuple[RuleModel, WirePlan, int, int, bool]], dict[int, str]]:
    """The plain session of each rule in `sids` as a WirePlan, with its ports and IPv6 flag, made
    as `synthesize` makes it (the same messages for the same position); the reasons of the rules
    that have none: ICMP, packets without a conversation, threshold rules (several sessions),
    rules that list their own addresses (offline only when outside the test ranges)."""
    setters = flowbit_setters(models)
    out: dict[int, tuple[RuleModel, WirePlan, int, int, bool]] = {}
    skipped: dict[int, str] = {}
    for i, model in enumerate(models):
        if model.sid not in sids:
            continue
        if model.proto not in ("tcp", "udp"):
            skipped[model.sid] = f"{model.proto}: no stream or datagram to vary"
            continue
        if model.proto == "tcp" and model.tcp_flags is not None and not model.established:
            skipped[model.sid] = "a packet with flags, no conversation to vary"
            continue
        if model.events > 1:
            skipped[model.sid] = f"threshold: {model.events} sessions, not varied"
            continue
        if model.src_host or model.dst_host:
            # every variant needs an address pair of its own; the rule allows only its own
            skipped[model.sid] = model.offline_only or (
                "the rule lists its own addresses: no address pair of their own for the variants"
            )
            continue
        try:
            pl = plan(model, setters, i + 1)
            cport, sport = session_ports(model, i)
        except (SynthError, LayoutError, RegexUnsupported, ValueError) as exc:
            skipped[model.sid] = str(exc)
            continue
        v6 = model.ipv6 and not icmpv4_only(model)
        size = sum(len(d) for fc, d in pl.messages if fc)
        if size > MAX_VARIED_BYTES:
            skipped[model.sid] = (
                f"the client sends {size:,} bytes, more than the {MAX_VARIED_BYTES:,} a varied "
                "session may (one byte a segment would be as many packets, in each of 84 variants)"
            )
            continue
        messages = list(pl.messages)
        while model.to_server and len(messages) > 1 and not messages[-1][0]:
            messages.pop()  # the answer after the last request: no to_server rule reads it
        out[model.sid] = (model, plain_plan(model.proto, messages, i + 1), cport, sport, v6)
    return out, skipped


@dataclass(frozen=True)
class _Job:
    """One rule's plain session and where it goes (picklable: handed to a writer process)."""

    index: int  # the rule's position among the varied rules (its IPv6 server address)
    sid: int
    base: WirePlan
    cport: int
    sport: int
    v6: bool
    cside: str
    sside: str
    gap_ns: int = 0  # after each session: a threshold's window, so no session counts for another


def _write_part(part: int, jobs: list[_Job], classes: list[str], seed: int, pcap: Path):
    """One writer's share: the sessions of `jobs` into `pcap`; (sessions, packets). Without the
    cyclic garbage collector (a variant's objects are freed by their counts; its passes over
    millions of segments cost a tenth of the writing)."""
    with _collector_off():
        return _write_sessions(part, jobs, classes, seed, pcap)


@contextlib.contextmanager
def _collector_off() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _write_sessions(part: int, jobs: list[_Job], classes: list[str], seed: int, pcap: Path):
    sessions = []
    n = part * PART_SESSIONS  # the part's own block of session numbers (addresses, seeds)
    t = T0_NS + part * PART_SPAN_NS
    renderer = Renderer()
    with replacing(pcap) as tmp, open(tmp, "wb") as f:
        w = P.PcapWriter(f)
        for job in jobs:
            varied = variants(job.base, classes, seed + job.sid)
            controls = [job.base]
            if not job.v6 and any(v.family == 6 for v in varied):
                controls.append(replace(job.base, variant="plain-ipv6", family=6))
            program = []
            for var in [*controls, *varied]:
                six = job.v6 or var.family == 6
                if job.v6 and var.cls == "ip4-frag":
                    continue  # the rule's session is IPv6: no IPv4 fragments of it
                client = client_address(n, job.cside, six)
                server = server_address(job.index if six else n // 62500, job.sside, six)
                program.append(session_program(var, client, server, job.cport, job.sport, n + 1))
                sessions.append(
                    VariantSession(
                        job.sid,
                        var.variant,
                        var.cls,
                        var.proto,
                        client,
                        job.cport,
                        server,
                        job.sport,
                        six,
                    )
                )
                n += 1
            # the job's sessions in one call, as model.render lays them out
            out = renderer.render(b"".join(program), t, PKT_GAP_NS, SESSION_GAP_NS + job.gap_ns)
            w.write_records(out.records, out.packets)
            t = out.t_ns
        return sessions, w.packets


def write_variants(
    models: list[RuleModel],
    sids: set[int],
    classes: list[str],
    folder: Path,
    *,
    seed: int = 1,
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> EvasionCapture:
    """Every variant (and the plain control) of each rule in `sids`, one session each, into pcap
    files in `folder` (one per writer process: `workers`, default one per core up to 2; Suricata
    reads the folder). The same rules, classes and seed give the same files."""
    plans, skipped = plain_plans(models, sids)
    jobs = [
        _Job(k, sid, base, cport, sport, v6, *session_sides(model), window_ns(model))
        for k, (sid, (model, base, cport, sport, v6)) in enumerate(plans.items())
    ]
    count = max(1, min(workers or min(2, os.cpu_count() or 1), len(jobs) or 1))
    share = -(-len(jobs) // count)
    parts = [jobs[i * share : (i + 1) * share] for i in range(count)]
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("part-*.pcap"):
        old.unlink()
    paths = [folder / f"part-{i}.pcap" for i in range(count)]
    if progress:
        progress(f"writing the variants of {len(jobs):,} rules in {count} processes")
    args = [(i, parts[i], classes, seed, paths[i]) for i in range(count)]
    gc.freeze()  # what the writers inherit is not walked by their collectors (nor copied)
    try:
        if count == 1:
            done = [_write_part(*args[0])]
        else:
            with ProcessPoolExecutor(count, mp_context=get_context("fork")) as pool:
                done = list(pool.map(_write_part, *zip(*args)))
    finally:
        gc.unfreeze()
    res = EvasionCapture(folder, skipped=skipped)
    for sessions, packets in done:
        res.sessions += sessions
        res.packets += packets
    return res


def session_index(cap: EvasionCapture) -> dict[tuple[str, str], int]:
    """(one address, the other) -> the session on that address pair, both ways round.
    ValueError when two sessions share a pair (their alerts could not be told apart)."""
    index: dict[tuple[str, str], int] = {}
    for i, s in enumerate(cap.sessions):
        if (s.client, s.server) in index:
            j = index[(s.client, s.server)]
            raise ValueError(
                f"variant sessions {j} and {i} share the address pair {s.client} {s.server}"
            )
        index[(s.client, s.server)] = index[(s.server, s.client)] = i
    return index


def alerts_by_session(
    cap: EvasionCapture,
    alerts: Iterable[tuple[int, str, str]],
    index: dict[tuple[str, str], int] | None = None,
) -> dict[int, set[int]]:
    """session index -> the sids that alerted on it: `alerts` as (sid, source, destination) in
    the short address form (`alert_pairs`); an alert belongs to the session of its address pair
    (`index`: `session_index(cap)`, made once for several readings)."""
    index = session_index(cap) if index is None else index
    got: dict[int, set[int]] = defaultdict(set)
    for sid, src, dst in alerts:
        i = index.get((src, dst))
        if i is not None:
            got[i].add(sid)
    return got


def outcome(reached: bool | None, alert: bool, plain_alert: bool) -> str:
    if not plain_alert:
        return "not comparable"
    if reached is None:
        return "unlabelled"
    if reached:
        return "detected" if alert else "evaded"
    return "false alert" if alert else "harmless"


def score(
    cap: EvasionCapture,
    verdicts: dict[str, dict[int, set[int]]],
    host: dict[tuple[str, str], bool | None],
) -> list[dict]:
    """One row per rule, variant and configuration."""
    plain_of: dict[tuple[str, int, bool], bool] = {}
    for conf, got in verdicts.items():
        for i, s in enumerate(cap.sessions):
            if s.cls == "plain":
                plain_of[(conf, s.sid, s.v6)] = s.sid in got.get(i, set())
    rows = []
    for conf, got in verdicts.items():
        for i, s in enumerate(cap.sessions):
            if s.cls == "plain":
                continue
            alert = s.sid in got.get(i, set())
            reached = host.get((s.variant, s.proto))
            rows.append(
                {
                    "sid": s.sid,
                    "variant": s.variant,
                    "class": s.cls,
                    "proto": s.proto,
                    "config": conf,
                    "alerted": alert,
                    "host_reached": reached,
                    "outcome": outcome(reached, alert, plain_of[(conf, s.sid, s.v6)]),
                }
            )
    return rows


def run_evasions(
    models: list[RuleModel],
    sids: set[int],
    rule_files: list[str | Path],
    classes: list[str],
    out: Path,
    dut: Dut,
    labels: HostLabels | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """The variants of the rules in `sids` (those that alerted plainly), read by Suricata in
    each configuration of CONFIGS; the document `evasion.json` holds (summary and rows).
    `labels()`: the host's label per (variant, proto) and the live document, asked for once
    Suricata has read the variants (None, or None from it: every variant unlabelled)."""
    say = progress or (lambda msg: None)
    folder = out / "evasions"
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    cap = write_variants(models, sids, classes, folder / "pcaps", progress=say)
    t1 = time.monotonic()
    say(f"wrote {len(cap.sessions):,} variant sessions, {cap.packets:,} packets")
    timing = {"write": round(t1 - t0, 3)}
    say(f"running suricata on the variants ({', '.join(CONFIGS)} reassembly policies at once)")

    index = session_index(cap)

    def read(conf: str) -> tuple[str, dict[int, set[int]], float]:
        t = time.monotonic()
        suri = run_offline(
            cap.pcap,
            list(rule_files),
            folder / conf / "suricata",
            binary=dut.binary,
            config=dut.config,
            host_os=CONFIGS[conf],
            runmode="single",  # deterministic: autofp's threads gave 1,008 of 320,000 alerts
            alerts=False,  # read below as (sid, source, destination) alone
            eve_types=EVE_TYPES,
        )
        pairs = alert_pairs(suri.eve or folder / conf / "suricata" / "eve.json")
        return conf, alerts_by_session(cap, pairs, index), time.monotonic() - t

    # one Suricata per configuration side by side, each on one core (runmode single)
    with ThreadPoolExecutor(max_workers=len(CONFIGS)) as pool:
        done = list(pool.map(read, CONFIGS))
    verdicts = {conf: got for conf, got, _s in done}
    timing.update({f"suricata_{conf}": round(s, 3) for conf, _got, s in done})
    timing["suricata_wall"] = round(time.monotonic() - t1, 3)
    t2 = time.monotonic()
    host, live = (labels() if labels else None) or ({}, None)
    timing["host_wait"] = round(time.monotonic() - t2, 3)
    with _collector_off():  # a row a rule, variant and configuration: no cycles among them
        rows = score(cap, verdicts, host)
    doc = {
        "classes": classes,
        "configs": {k: v or "suricata's default (bsd)" for k, v in CONFIGS.items()},
        "sessions": len(cap.sessions),
        "packets": cap.packets,
        "skipped": {str(k): v for k, v in sorted(cap.skipped.items())},
        "host": [{"variant": v, "proto": p, "reached": r} for (v, p), r in sorted(host.items())],
        "live": live,
        "summary": summarize(rows),
        "rows": rows,
        "timing_s": timing,
    }
    return doc


def summarize(rows: list[dict]) -> dict:
    """Counts per configuration and class, and per configuration and variant; the evaded sids."""
    by_class: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    by_variant: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    evaded: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_class[r["config"]][r["class"]][r["outcome"]] += 1
        by_variant[r["config"]][r["variant"]][r["outcome"]] += 1
        if r["outcome"] == "evaded":
            evaded[r["config"]][r["variant"]].append(r["sid"])
    return {
        "by_class": {c: {k: dict(v) for k, v in d.items()} for c, d in by_class.items()},
        "by_variant": {c: {k: dict(v) for k, v in d.items()} for c, d in by_variant.items()},
        "evaded": {c: {k: sorted(v) for k, v in d.items()} for c, d in evaded.items()},
    }


def compact(doc: dict) -> dict:
    """The evasion document as coverage.json keeps it (a baseline reads it): everything but the
    rows, with the varied sids, the variants and the evaded (sid, variant, config) triples."""
    rows = doc["rows"]
    out = {k: v for k, v in doc.items() if k != "rows"}
    out["varied_sids"] = sorted({r["sid"] for r in rows})
    out["variants"] = sorted({r["variant"] for r in rows})
    out["evaded"] = sorted(
        [r["sid"], r["variant"], r["config"]] for r in rows if r["outcome"] == "evaded"
    )
    return out


def compare_evasions(old: dict, new: dict, allowed: dict[int, str]) -> dict:
    """Newly evaded (sid, variant, config): evaded now and measured but not evaded in the
    baseline; a sid or variant the baseline did not vary is counted as not compared. Both are
    compact documents (`compact`)."""
    old_sids, old_vars = set(old.get("varied_sids", [])), set(old.get("variants", []))
    before = {tuple(e) for e in old.get("evaded", [])}
    now = {tuple(e) for e in new.get("evaded", [])}
    measured = [k for k in now if k[0] in old_sids and k[1] in old_vars]
    newly = sorted(k for k in measured if k not in before)
    new_sids, new_vars = set(new.get("varied_sids", [])), set(new.get("variants", []))
    fixed = sorted(k for k in before - now if k[0] in new_sids and k[1] in new_vars)
    return {
        "newly_evaded": [
            {"sid": s, "variant": v, "config": c, "allowed": s in allowed} for s, v, c in newly
        ],
        "no_longer_evaded": [{"sid": s, "variant": v, "config": c} for s, v, c in fixed],
        "not_compared": len(now) - len(measured),
        "blocking_sids": sorted({k[0] for k in newly if k[0] not in allowed}),
    }


def markdown(doc: dict) -> str:
    """The evasion matrix as Markdown: the host's label per variant, then per configuration the
    outcome counts per variant, then the evaded sids."""
    lines = ["# Evasion variants", ""]
    lines += [
        f"{doc['sessions']:,} sessions ({doc['packets']:,} packets): every alerting rule's "
        f"session in {len(doc['classes'])} classes ({', '.join(doc['classes'])}) and its plain "
        "control. Outcome: detected (the host got the attack and the IDS alerted), evaded (the "
        "host got it, no alert), false alert (the host did not get it, alert), harmless "
        "(neither).",
        "",
        "## The host (Linux, live)",
        "",
        "| variant | proto | reached the application |",
        "|---|---|---|",
    ]
    for h in doc["host"]:
        r = h["reached"]
        lines.append(
            f"| {h['variant']} | {h['proto']} | {'yes' if r else 'no' if r is False else 'not measured'} |"
        )
    if doc.get("live"):
        confs = list(doc["configs"])
        lines += [
            "",
            "## Live: the probes through a router into the host, Suricata on that capture",
            "",
            "| variant | probe | IP | host got it | "
            + " | ".join(f"alert ({c})" for c in confs)
            + " | detail |",
            "|---|---|---|---|" + "---|" * len(confs) + "---|",
        ]
        for r in doc["live"]["rows"]:
            lines.append(
                f"| {r['variant']} | {r.get('probe', r['proto'])} | {r['ip_version']} | "
                f"{'yes' if r['reached'] else 'no'} | "
                + " | ".join("yes" if r["alerted"].get(c) else "no" for c in confs)
                + f" | {r['detail']} |"
            )
    for conf, table in doc["summary"]["by_variant"].items():
        lines += [
            "",
            f"## Suricata, reassembly policy {doc['configs'][conf]} ({conf})",
            "",
            "| variant | " + " | ".join(OUTCOMES) + " |",
            "|---|" + "---:|" * len(OUTCOMES),
        ]
        for variant, counts in sorted(table.items()):
            lines.append(
                f"| {variant} | " + " | ".join(f"{counts.get(o, 0):,}" for o in OUTCOMES) + " |"
            )
        ev = doc["summary"]["evaded"].get(conf, {})
        if ev:
            lines += ["", "Evaded:", ""]
            for variant, sids in sorted(ev.items()):
                shown = ", ".join(map(str, sids[:20])) + (" ..." if len(sids) > 20 else "")
                lines.append(f"- {variant}: {len(sids):,} sids ({shown})")
    if doc.get("baseline"):
        b = doc["baseline"]
        lines += [
            "",
            "## Against the baseline",
            "",
            f"{len(b['newly_evaded'])} newly evaded, {len(b['no_longer_evaded'])} no longer "
            f"evaded, {b['not_compared']} not compared (variants the baseline did not run).",
        ]
        for r in b["newly_evaded"][:200]:
            lines.append(
                f"- sid {r['sid']} {r['variant']} ({r['config']})"
                + (" (allowed)" if r["allowed"] else "")
            )
    if doc["skipped"]:
        lines += ["", f"## Rules without variants ({len(doc['skipped'])})", ""]
        reasons = Counter(doc["skipped"].values())
        for reason, n in reasons.most_common(20):
            lines.append(f"- {n}: {reason}")
    return "\n".join(lines) + "\n"


def table_rows(run_id: str, step: str, doc: dict, dut: dict) -> pa.Table:
    """The `coverage_evasion` run table's rows, as columns (a row a rule, variant and
    configuration: 690,000 of them for ET Open with `all`)."""
    keys = ("sid", "variant", "class", "proto", "config", "alerted", "host_reached", "outcome")
    rows = doc["rows"]
    n = len(rows)
    return pa.table(
        {
            "run_id": [run_id] * n,
            "step": [step] * n,
            **{k: [r[k] for r in rows] for k in keys},
            "ids_version": [dut.get("version")] * n,
            "config_sha256": [dut.get("config_sha256")] * n,
        }
    )


def write_reports(doc: dict, out: Path) -> None:
    """evasion.json (the compact document) and evasion.md in `out`, of a full or compact
    document."""
    small = compact(doc) if "rows" in doc else doc
    write_whole(out / "evasion.json", json.dumps(small, indent=1) + "\n")
    write_whole(out / "evasion.md", markdown(small))


write_markdown = write_reports  # again, once the baseline comparison is in the document


def summary_lines(doc: dict) -> list[str]:
    """The evasion run in a few lines of the coverage summary."""
    lines = []
    for conf, table in doc["summary"]["by_variant"].items():
        counts: Counter = Counter()
        for c in table.values():
            counts.update(c)
        ev = doc["summary"]["evaded"].get(conf, {})
        lines.append(
            f"evasions ({conf} reassembly): {sum(counts.values()):,} variant sessions of "
            f"{len(doc['varied_sids']):,} rules: "
            + ", ".join(f"{counts.get(o, 0):,} {o}" for o in OUTCOMES if counts.get(o))
            + (f"; evaded by {', '.join(sorted(ev))}" if ev else "; none evaded")
        )
    b = doc.get("baseline")
    if b:
        lines.append(
            f"evasions against the baseline: {len(b['newly_evaded'])} newly evaded, "
            f"{len(b['no_longer_evaded'])} no longer, {b['not_compared']} not compared"
        )
    return lines
