"""What an IDS detects in a capture the user already has: `testbed detect`.

`resolve_inputs(paths, rules) -> DetectInput` takes capture files or one run folder (its
capture.pcap with the captures of its `capture.also_at`, and the rule files of its `attacks:`
unless rules are given);
`address_group(text, flag)` checks a ``--home-net``/``--external-net`` value;
`run_detect(inputs, out_dir, ...) -> dict` runs Suricata once on the capture (``--runmode
single``, so that the checksum auto mode decides the same way every time) (several captures are
first merged by time, `merge_pcaps`) through the one runner (`suricata.run_offline`), keeps
eve.json in `out_dir`, counts the alerts per sid (count, first and last time, msg, the flows),
lists the rules Suricata refused, compares the events with an expect file (`expect.py`) and writes
detect.json, detect.md and detect.html.

HOME_NET: without ``--home-net`` a capture gets ``any`` (and EXTERNAL_NET ``any``, since
``!any`` is empty): we do not know which side of the capture is the protected network, and with
``any`` no alert is lost because an address is not "home"; ports, flow direction and contents still
apply. A run folder gets the testbed's own HOME_NET, since its addresses are ours. A
``--suricata-config`` keeps its own address groups unless they are given. The report prints the
values used and why.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from analysis.capture import read_capture
from idsrules.attacks import AttackError, merge_pcaps
from idsrules.syntax import read_rule_text
from idsrules.variables import EXTERNAL_NET, HOME_NET
from ntgcore.errors import BadInput, NoSpace
from ntgcore.files import no_space_at, no_space_error, read_json, replacing
from ntgcore.packets import short_address
from ntgcore.runfolder import is_full

from .expect import ExpectFile, evaluate
from .report import markdown_html
from .suricata import DEFAULT_EVE_TYPES, read_eve, run_offline, suricata_version

FORMATS = ("md", "html", "json")
TOP_FLOWS = 5
# One packet thread: Suricata's checksum auto mode decides at the 1,000th packet read, on the count
# of bad checksums the detection threads have found by then; with several threads that count
# depends on their timing (0, 1 and 420 of 1,000 on the same capture), with one it does not.
RUNMODE = "single"
# EVE events and fields as Suricata's default configuration logs them (http and tls extended:
# http_method, status, tls fingerprint, ...), so that an expect file checks what it checks under
# plain Suricata
EVE_TYPES = DEFAULT_EVE_TYPES
ANY_REASON = (
    "not given: any, since which side of the capture is home is not known and no alert "
    "should be lost for an address; --home-net narrows it"
)
RUN_REASON = "not given: the testbed's own HOME_NET, since the run's addresses are ours"


@dataclass
class DetectInput:
    captures: list[Path]
    rules: list[Path]
    run_dir: Path | None = None


def address_group(text: str, flag: str) -> str:
    """A Suricata address group from ``any``, addresses and CIDR blocks separated by commas
    (``!`` negates one, ``$HOME_NET`` may be named in ``--external-net``); BadInput says which
    item is wrong, also for what Suricata itself would refuse: ``!any`` (no address at all) and a
    group defined by itself (``--home-net $HOME_NET``, or ``$EXTERNAL_NET``, which is ``!$HOME_NET``)."""
    items = [t.strip() for t in text.strip().strip("[]").split(",")]
    if not items or any(not t for t in items):
        raise BadInput(
            f"{flag} {text!r}: empty item; give addresses or CIDR blocks separated by "
            "commas, e.g. 192.0.2.0/24,2001:db8::/32, or `any`"
        )
    own = {"--home-net": ("$HOME_NET", "$EXTERNAL_NET"), "--external-net": ("$EXTERNAL_NET",)}.get(
        flag, ()
    )
    for item in items:
        bare = item.lstrip("!")
        if item.startswith("!") and bare == "any":
            raise BadInput(
                f"{flag}: {item!r} is no address at all (Suricata refuses an address group "
                "with the complete address space negated); give addresses or CIDR blocks, or `any`"
            )
        if bare in own:
            raise BadInput(
                f"{flag}: {item!r} defines the group by itself (Suricata refuses the loop); "
                "give addresses or CIDR blocks, e.g. 192.0.2.0/24, or `any`"
            )
        if bare in ("any", "$HOME_NET", "$EXTERNAL_NET"):
            continue
        try:
            ipaddress.ip_network(bare, strict=False)
        except ValueError:
            raise BadInput(
                f"{flag}: {item!r} is not an address or CIDR block (e.g. 192.0.2.0/24, "
                "2001:db8::/32, or `any`)"
            ) from None
    return items[0] if len(items) == 1 else "[" + ",".join(items) + "]"


def resolve_inputs(paths: list[str | Path], rules: list[str | Path] | None) -> DetectInput:
    """Capture files, or one run folder; rule files must be readable UTF-8 text (`read_rule_text`)."""
    paths = [Path(p) for p in paths]
    run_dir = None
    if len(paths) == 1 and paths[0].is_dir():
        run_dir = paths[0]
        capture = run_dir / "capture.pcap"
        if not capture.is_file():
            raise BadInput(
                f"{run_dir}: a folder without capture.pcap; give capture files or a run folder"
            )
        captures = [capture, *more_captures(run_dir)]
    else:
        for p in paths:
            if p.is_dir():
                raise BadInput(
                    f"{p}: a folder among several inputs; give capture files, or one run folder"
                )
            if not p.exists():
                raise BadInput(f"{p}: no such capture file")
        captures = paths
    if rules:
        rule_paths = [Path(r) for r in rules]
    elif run_dir is not None:
        rule_paths = run_rule_files(run_dir)
    else:
        raise BadInput(
            "no rules: give --rules FILE.rules (a run folder with attacks brings its own)"
        )
    for r in rule_paths:
        if r.is_dir():
            raise BadInput(
                f"{r}: a directory, not a rule file; give its .rules files (e.g. {r}/*.rules)"
            )
        if not r.exists():
            raise BadInput(f"{r}: no such rule file; give paths of .rules files")
        if (
            not r.is_file()
        ):  # read here and again by Suricata: a pipe would be empty the second time
            raise BadInput(f"{r}: a device or a pipe, not a rule file; give a .rules file")
        read_rule_text(r)  # BadInput before Suricata runs: not UTF-8 (FILE:LINE), too long
    return DetectInput(captures, rule_paths, run_dir)


def more_captures(run_dir: Path) -> list[Path]:
    """A live run's other captures in its folder (`capture.also_at`: the other directions, the
    manifest's step `captures` not `counted`), read with capture.pcap."""
    try:
        steps = read_json(run_dir / "manifest.json", "run manifest").get("steps") or []
    except (BadInput, AttributeError):  # none, or damaged: no other captures named
        return []
    listed = steps[0].get("captures", []) if len(steps) == 1 and steps[0].get("dir") == "." else []
    return [
        run_dir / c["file"]
        for c in listed
        if not c.get("counted") and (run_dir / c["file"]).is_file()
    ]


def run_rule_files(run_dir: Path) -> list[Path]:
    """The rule files a run's `attacks:` used (attacks.json, offline or live)."""
    for manifest in (run_dir / "attacks.json", run_dir / "attacks" / "attacks.json"):
        if manifest.is_file():
            doc = read_json(manifest, "attack manifest")
            files = (
                (doc.get("attacks") or {}).get("rule_files", []) if isinstance(doc, dict) else []
            )
            if files:
                return [Path(f) for f in files]
    raise BadInput(
        f"{run_dir}: the run had no attacks, so it names no rules; give --rules FILE.rules"
    )


def address_vars(
    inputs: DetectInput, home_net: str | None, external_net: str | None, config: Path | None
) -> tuple[str | None, str | None, str]:
    """(HOME_NET, EXTERNAL_NET, why) for the run; None leaves a user configuration's own value."""
    if home_net is not None:
        external = external_net or ("any" if home_net == "any" else "!$HOME_NET")
        return home_net, external, "given"
    if config is not None:
        return None, external_net, f"not given: the value in {config}"
    if inputs.run_dir is not None:
        return HOME_NET, external_net or EXTERNAL_NET, RUN_REASON
    return "any", external_net or "any", ANY_REASON


def run_detect(
    inputs: DetectInput,
    out_dir: str | Path,
    *,
    home_net: str | None = None,
    external_net: str | None = None,
    checksum: str = "auto",
    config: str | Path | None = None,
    expect: ExpectFile | None = None,
    expect_path: str | Path | None = None,
    formats: tuple[str, ...] = FORMATS,
    top: int = TOP_FLOWS,
    midstream: bool = False,
    progress=None,
) -> dict:
    say = progress or (lambda msg: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    captures = [_capture_summary(p) for p in inputs.captures]  # CaptureError: not a capture
    if len(inputs.captures) > 1:
        say(f"merging {len(inputs.captures)} captures by time")
        pcap = out / "merged.pcap"
        try:
            merge_pcaps(inputs.captures, pcap)
        except AttackError:
            if is_full(out):
                raise no_space_error(pcap, "free some space or choose another --out") from None
            raise
    else:
        pcap = inputs.captures[0]
    cfg = Path(config) if config is not None else None
    home, external, why = address_vars(inputs, home_net, external_net, cfg)
    say(
        f"running suricata on {pcap} (HOME_NET {home or 'from the configuration'}, checksums {checksum})"
    )
    suri = run_offline(
        pcap,
        inputs.rules,
        out,
        home_net=home,
        external_net=external,
        checksum=checksum,
        config=cfg,
        eve_types=EVE_TYPES,
        runmode=RUNMODE,
        stream={"midstream": "true"} if midstream else None,
    )
    if is_full(
        out
    ):  # Suricata says nothing when eve.json finds the disk full: its events stop there
        raise NoSpace(
            f"{no_space_at(suri.eve)}: the file system filled while Suricata wrote it, so its events "
            "are cut (kept as they are, not counted); free some space or choose another --out"
        )
    if not suri.eve.is_file():
        raise BadInput(
            f"{cfg}: Suricata wrote no eve.json into {out}: enable an eve-log output with "
            "`filename: eve.json` and `types: [alert]` in that configuration"
        )
    events = list(read_eve(suri.eve))
    doc = {
        "command": "detect",
        "captures": captures,
        **_time_range(captures),
        "capture": str(pcap),
        "run_dir": str(inputs.run_dir) if inputs.run_dir else None,
        "rule_files": [str(r) for r in inputs.rules],
        "home_net": home if home is not None else "(the configuration's)",
        "external_net": external if external is not None else "(the configuration's)",
        "home_net_reason": why,
        "checksum_validation": checksum,
        "midstream": midstream,
        "suricata_config": str(cfg) if cfg else "ours (suricata.yaml in the output folder)",
        "ids": "suricata",
        "ids_version": suricata_version(),
        "suricata_command": suri.command,
        "rules_loaded": suri.rules_loaded,
        "rules_failed": suri.rules_failed,
        "load_errors": [
            {
                "file": e.file,
                "line": e.line,
                "sid": e.sid,
                "reason": e.reason,
                "suricata": e.line_text,
            }
            for e in suri.load_errors
        ],
        "suricata_errors": [
            e
            for e in suri.errors
            if "error parsing signature" not in e
            and not any(r.reason and e.endswith(r.reason) for r in suri.load_errors)
        ][:200],
        "eve": suri.eve.name,
        "events": dict(Counter(ev.get("event_type", "?") for ev in events).most_common()),
        **alerts_per_sid(events, top),
        "expect": None,
    }
    if expect is not None:
        results = evaluate(expect, events)
        doc["expect"] = {
            "file": str(expect_path),
            "passed": sum(r.ok for r in results),
            "failed": sum(not r.ok for r in results),
            "checks": [r.as_dict() | {"text": str(r)} for r in results],
        }
    doc["timing_s"] = round(time.monotonic() - t0, 3)
    write_reports(doc, out, formats)
    return doc


def _capture_summary(path: Path) -> dict:
    cap = read_capture(path)
    info = {"path": str(path), "format": cap.format, "packets": len(cap)}
    if len(cap):
        first, last = int(cap.ts_ns.min()), int(cap.ts_ns.max())
        info.update(first_utc=_utc(first / 1e9), last_utc=_utc(last / 1e9))
    if cap.problem is not None:
        info["problem"] = (
            f"damaged at byte offset {cap.problem.offset}: {cap.problem.message} "
            f"({cap.problem.packets_read:,} packets read before it)"
        )
    return info


def _time_range(captures: list[dict]) -> dict:
    """The first and last packet of all the captures (merged: not the first file's and the last's)."""
    firsts = [c["first_utc"] for c in captures if c.get("first_utc")]
    lasts = [c["last_utc"] for c in captures if c.get("last_utc")]
    # one ISO 8601 form (_utc): the text order is the time order
    return {"first_utc": min(firsts) if firsts else None, "last_utc": max(lasts) if lasts else None}


def _utc(epoch: float) -> str:
    return (
        datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    )


def eve_epoch(stamp: str) -> float:
    """Seconds since 1970 of an EVE time stamp (``2023-11-14T22:13:20.003000+0000``)."""
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def alerts_per_sid(events: list[dict], top: int = TOP_FLOWS) -> dict:
    """``alerts`` (total) and ``sids``: per (gid, sid) the count, msg, first and last time (UTC
    and epoch) and the flows (5-tuples: the `top` busiest and how many there were)."""
    per: dict[tuple[int, int], dict] = {}
    flows: dict[tuple[int, int], Counter] = defaultdict(Counter)
    total = 0
    for ev in events:
        if ev.get("event_type") != "alert":
            continue
        total += 1
        a = ev.get("alert", {})
        key = (int(a.get("gid", 1)), int(a.get("signature_id", 0)))
        t = eve_epoch(ev["timestamp"])
        row = per.setdefault(
            key,
            {
                "gid": key[0],
                "sid": key[1],
                "rev": a.get("rev"),
                "msg": a.get("signature", ""),
                "category": a.get("category", ""),
                "severity": a.get("severity"),
                "alerts": 0,
                "first_epoch": t,
                "last_epoch": t,
            },
        )
        row["alerts"] += 1
        row["first_epoch"] = min(row["first_epoch"], t)
        row["last_epoch"] = max(row["last_epoch"], t)
        flows[key][
            (
                ev.get("proto", ""),
                short_address(ev.get("src_ip")),
                ev.get("src_port"),
                short_address(ev.get("dest_ip")),
                ev.get("dest_port"),
            )
        ] += 1
    rows = []
    for key, row in sorted(per.items(), key=lambda kv: (-kv[1]["alerts"], kv[0])):
        row["first_utc"], row["last_utc"] = _utc(row["first_epoch"]), _utc(row["last_epoch"])
        row["first_epoch"], row["last_epoch"] = (
            round(row["first_epoch"], 6),
            round(row["last_epoch"], 6),
        )
        row["flows"] = len(flows[key])
        row["top_flows"] = [
            {"proto": p, "src_ip": s, "src_port": sp, "dest_ip": d, "dest_port": dp, "alerts": n}
            for (p, s, sp, d, dp), n in flows[key].most_common(top)
        ]
        rows.append(row)
    return {"alerts": total, "sids": rows}


def flow_text(f: dict) -> str:
    src = f"[{f['src_ip']}]" if ":" in f["src_ip"] else f["src_ip"]
    dst = f"[{f['dest_ip']}]" if ":" in f["dest_ip"] else f["dest_ip"]
    sp = f":{f['src_port']}" if f["src_port"] is not None else ""
    dp = f":{f['dest_port']}" if f["dest_port"] is not None else ""
    return f"{f['proto']} {src}{sp} -> {dst}{dp}"


def summary_lines(doc: dict) -> list[str]:
    caps = doc["captures"]
    packets = sum(c["packets"] for c in caps)
    lines = [
        f"capture: {', '.join(c['path'] for c in caps)} ({packets:,} packets"
        + (f", {doc['first_utc']} .. {doc['last_utc']}" if packets else "")
        + ")",
        f"rules: {', '.join(doc['rule_files'])}; {doc['rules_loaded'] if doc['rules_loaded'] is not None else '?'} "
        f"loaded, {len(doc['load_errors'])} refused by {doc['ids']} {doc['ids_version']}",
        f"HOME_NET {doc['home_net']}, EXTERNAL_NET {doc['external_net']} ({doc['home_net_reason']}); "
        f"checksum validation {doc['checksum_validation']}"
        + ("; stream midstream on" if doc.get("midstream") else "")
        + f"; configuration {doc['suricata_config']}",
        f"alerts: {doc['alerts']:,} from {len(doc['sids'])} sid(s)",
    ]
    for c in caps:
        if c.get("problem"):
            lines.append(f"warning: {c['path']}: {c['problem']}")
    if doc["expect"] is not None:
        e = doc["expect"]
        lines.append(
            f"expect: {e['passed']} of {e['passed'] + e['failed']} checks passed ({e['file']})"
        )
    return lines


def markdown(doc: dict) -> str:
    out = ["# IDS detections", "", *[f"- {x}" for x in summary_lines(doc)], ""]
    out += [
        "## Alerts per sid",
        "",
        "| sid | msg | alerts | first (UTC) | last (UTC) | first, last (epoch) | flows |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in doc["sids"]:
        sid = f"{r['gid']}:{r['sid']}" if r["gid"] != 1 else str(r["sid"])
        out.append(
            f"| {sid} | {_cell(r['msg'])} | {r['alerts']} | {r['first_utc']} | {r['last_utc']} | "
            f"{r['first_epoch']:.6f}, {r['last_epoch']:.6f} | {r['flows']} |"
        )
    if doc["sids"]:
        out += [
            "",
            "## Flows per sid (the busiest first)",
            "",
            "| sid | flow | alerts |",
            "|---|---|---|",
        ]
        for r in doc["sids"]:
            for f in r["top_flows"]:
                out.append(f"| {r['sid']} | {flow_text(f)} | {f['alerts']} |")
            if r["flows"] > len(r["top_flows"]):
                out.append(
                    f"| {r['sid']} | ... and {r['flows'] - len(r['top_flows'])} more flows | |"
                )
    if doc["expect"] is not None:
        out += [
            "",
            "## Expected results",
            "",
            "| check | result | expected | found | hint |",
            "|---|---|---|---|---|",
        ]
        for c in doc["expect"]["checks"]:
            name = f"{c['check']} {c['name']}".strip()
            out.append(
                f"| {name} | {'pass' if c['ok'] else 'FAIL'} | {c['expected']} | {c['found']} | {c['hint']} |"
            )
    if doc["load_errors"]:
        out += [
            "",
            f"## Rules Suricata refused ({len(doc['load_errors'])})",
            "",
            "| where | sid | why |",
            "|---|---|---|",
        ]
        for e in doc["load_errors"]:
            out.append(
                f"| {e['file']}:{e['line']} | {e['sid'] if e['sid'] is not None else '-'} | "
                f"{_cell(e['reason'] or e['suricata'])} |"
            )
    if doc["suricata_errors"]:
        out += ["", "## Other Suricata errors", "", "```", *doc["suricata_errors"][:50], "```"]
    out += ["", "## Events in eve.json", "", "| event_type | events |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in doc["events"].items()]
    out += ["", "## Command", "", "```", " ".join(doc["suricata_command"]), "```"]
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return str(text).replace("|", "\u00a6")  # a table cell cannot hold |


def write_reports(doc: dict, out: Path, formats: tuple[str, ...] = FORMATS) -> None:
    """detect.json, .md and .html (those in `formats`), each whole or not at all (`replacing`)."""
    md = markdown(doc)
    texts = {
        "json": json.dumps(doc, indent=1) + "\n",
        "md": md,
        "html": markdown_html(md, "IDS detections"),
    }
    for fmt in ("json", "md", "html"):
        if fmt in formats:
            with replacing(out / f"detect.{fmt}") as tmp:
                tmp.write_text(texts[fmt])
