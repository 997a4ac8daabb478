"""Coverage against a baseline: which sids a change broke, fixed or made noisier.

A single floor (`--min`) lets a change that breaks 30 rules and fixes 30 others pass. Here every
sid is compared with an earlier run's ``coverage.json``:

`load_baseline(path, allow_path=None) -> Baseline` reads and checks that document and the allow
file (one sid a line, optionally followed by the reason; ``#`` starts a comment); a file that is
not what it should be raises `BadInput` naming it (``FILE:LINE`` for the allow file).
`compare_coverage(old, new, allowed) -> dict` is the pure comparison of two coverage documents
(an earlier run and this one, two DUTs of one run, or the same mix of either):
*newly failing* (alerted before, not now: missed, refused by the IDS or gone from the rule files),
*newly passing*, *extra changed* (the set of other sids firing on the rule's session changed),
*added* and *removed* rules. A newly failing sid in `allowed` is still listed, marked allowed; the
others are *blocking* (the command's exit status 3). `markdown_lines` and `summary_lines` render
the result for ``coverage.md``/``.html`` and stderr.

It imports only `ntgcore`: the coverage reports (`testbed.ids.coverage`) call it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ntgcore.errors import BadInput
from ntgcore.files import read_bounded

REMOVED = "removed"  # the state of a sid that is no longer in the rule files
LISTED = 50  # sids named per list on stderr (the reports list them all)
# read at most (`read_bounded`): ET Open's coverage.json is tens of MB; an allow file a sid a line
MAX_BASELINE_BYTES = 128 * 2**20
MAX_ALLOW_BYTES = 16 * 2**20


@dataclass(frozen=True)
class Baseline:
    """An earlier run's coverage document, where it came from, and the regressions allowed."""

    path: str
    doc: dict
    allowed: dict[int, str] = field(default_factory=dict)  # sid -> reason ("" when none given)
    allow_path: str | None = None


def load_baseline(path: str | Path, allow_path: str | Path | None = None) -> Baseline:
    """Read `path` (a coverage.json) and `allow_path`; BadInput when either cannot be used."""
    doc = _read_coverage_json(Path(path))
    allowed = load_allow(Path(allow_path)) if allow_path is not None else {}
    return Baseline(str(path), doc, allowed, str(allow_path) if allow_path is not None else None)


def _read_coverage_json(path: Path) -> dict:
    what = "give the coverage.json of an earlier `testbed ids-coverage` run"
    try:
        text = read_bounded(path, MAX_BASELINE_BYTES, "baseline")
    except BadInput as exc:  # missing, a directory or device, too long, not UTF-8 (FILE:LINE)
        raise BadInput(f"baseline {path}: cannot read it: {exc}; {what}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"baseline {path}:{exc.lineno}: not JSON ({exc.msg}); {what}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise BadInput(
            f"baseline {path}: not a coverage.json (no `rows` list of per-rule results); {what}"
        )
    for i, row in enumerate(doc["rows"]):
        problem = _row_problem(row)
        if problem:
            raise BadInput(f"baseline {path}: rows[{i}]: {problem}; {what}")
    return doc


def _row_problem(row) -> str | None:
    if not isinstance(row, dict):
        return "not an object"
    if not isinstance(row.get("sid"), int) or isinstance(row.get("sid"), bool):
        return "no integer `sid`"
    if not isinstance(row.get("state"), str) and not isinstance(row.get("alerted"), bool):
        return "neither `state` nor `alerted`"
    extra = row.get("extra_sids", [])
    if not isinstance(extra, list) or not all(isinstance(s, int) for s in extra):
        return "`extra_sids` is not a list of sids"
    return None


def load_allow(path: Path) -> dict[int, str]:
    """The allow file: `sid [reason]` a line, blank lines and `#` comments skipped."""
    try:
        text = read_bounded(path, MAX_ALLOW_BYTES, "allow file")
    except BadInput as exc:
        raise BadInput(f"allow file {path}: cannot read it: {exc}") from None
    allowed: dict[int, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        first, *rest = body.split(maxsplit=1)
        if not (first.isascii() and first.isdigit()) or int(first) == 0:
            raise BadInput(
                f"{path}:{number}: {first!r} is not a sid; a line is a sid (a positive integer), "
                "optionally followed by the reason; # starts a comment"
            )
        allowed[int(first)] = rest[0] if rest else ""
    return allowed


def _passing(row: dict) -> bool:
    return row["state"] == "alerted" if "state" in row else bool(row.get("alerted"))


def _state(row: dict) -> str:
    return row.get("state") or ("alerted" if row.get("alerted") else "missed")


def _by_sid(doc: dict) -> dict[int, dict]:
    """sid -> its row; a sid in several rows counts as passing when any of them passed."""
    rows: dict[int, dict] = {}
    for row in doc["rows"]:
        seen = rows.get(row["sid"])
        if seen is None or (_passing(row) and not _passing(seen)):
            rows[row["sid"]] = row
    return rows


def _entry(sid: int, old: dict | None, new: dict | None) -> dict:
    here = new or old or {}
    return {
        "sid": sid,
        "where": here.get("where", ""),
        "msg": here.get("msg", ""),
        "before": _state(old) if old else None,
        "now": _state(new) if new else REMOVED,
        "reason": (new or {}).get("reason", "") if new else "no longer in the rule files",
    }


def compare_coverage(old: dict, new: dict, allowed: dict[int, str] | None = None) -> dict:
    """Per-sid changes from the coverage document `old` to `new` (both with `rows`)."""
    allowed = allowed or {}
    before, now = _by_sid(old), _by_sid(new)
    failing, passing, extra_changed = [], [], []
    for sid in sorted(before.keys() | now.keys()):
        o, n = before.get(sid), now.get(sid)
        if o is not None and _passing(o) and (n is None or not _passing(n)):
            e = _entry(sid, o, n)
            e["allowed"] = sid in allowed
            if sid in allowed:
                e["allow_reason"] = allowed[sid]
            failing.append(e)
        elif o is not None and n is not None and _passing(n) and not _passing(o):
            passing.append(_entry(sid, o, n))
        if o is not None and n is not None:
            was, got = set(o.get("extra_sids", [])), set(n.get("extra_sids", []))
            if was != got:
                extra_changed.append(
                    {
                        "sid": sid,
                        "where": n.get("where", ""),
                        "before": sorted(was),
                        "now": sorted(got),
                        "gained": sorted(got - was),
                        "lost": sorted(was - got),
                    }
                )
    added = [_entry(sid, None, now[sid]) for sid in sorted(now.keys() - before.keys())]
    removed = [_entry(sid, before[sid], None) for sid in sorted(before.keys() - now.keys())]
    failing_sids = {e["sid"] for e in failing}
    blocking = [e["sid"] for e in failing if not e["allowed"]]
    return {
        "same_rules": not added and not removed,
        "rule_files": {"before": old.get("rule_files", []), "now": new.get("rule_files", [])},
        "ids_version": {"before": old.get("ids_version"), "now": new.get("ids_version")},
        "coverage": {"before": old.get("coverage"), "now": new.get("coverage")},
        "counts": {
            "newly_failing": len(failing),
            "newly_failing_allowed": len(failing) - len(blocking),
            "blocking": len(blocking),
            "newly_passing": len(passing),
            "extra_changed": len(extra_changed),
            "added": len(added),
            "removed": len(removed),
        },
        "blocking_sids": blocking,
        "newly_failing": failing,
        "newly_passing": passing,
        "extra_changed": extra_changed,
        "added": added,
        "removed": removed,
        # allow entries that excused nothing this time: candidates for deletion from the file
        "allow_unused": sorted(set(allowed) - failing_sids),
    }


def _sids(entries: list, n: int = LISTED) -> str:
    sids = [str(e["sid"] if isinstance(e, dict) else e) for e in entries]
    return ", ".join(sids[:n]) + (f", ... ({len(sids) - n} more)" if len(sids) > n else "")


def _headline(cmp: dict) -> str:
    c = cmp["counts"]
    return (
        f"{c['newly_failing']} newly failing ({c['newly_failing_allowed']} allowed, {c['blocking']} not), "
        f"{c['newly_passing']} newly passing, {c['extra_changed']} with changed extra alerts, "
        f"{c['added']} added, {c['removed']} removed"
    )


def _rule_set_note(cmp: dict) -> str | None:
    if cmp["same_rules"]:
        return None
    c = cmp["counts"]
    return (
        f"the baseline was measured on another rule set ({c['added']} rules added, {c['removed']} removed; "
        "rules in only one of the two runs are listed, not compared)"
    )


def summary_lines(cmp: dict, head: str | None = None, label: str = "baseline") -> list[str]:
    """A few lines for stderr: the counts, a different rule set, and the newly failing sids.
    `head` starts the first line (default "baseline PATH"), `label` the others (another DUT,
    a mix: "dut-b against dut-a")."""
    lines = [f"{head or 'baseline ' + cmp.get('path', '')}: {_headline(cmp)}"]
    note = _rule_set_note(cmp)
    if note:
        lines.append(f"{label}: {note}")
    for e in cmp["newly_failing"][:LISTED]:
        mark = (
            " [allowed" + (f": {e['allow_reason']}" if e.get("allow_reason") else "") + "]"
            if e["allowed"]
            else ""
        )
        lines.append(
            f"{label}: sid {e['sid']} newly failing ({e['before']} -> {e['now']})"
            + (f": {e['reason']}" if e["reason"] else "")
            + mark
        )
    if len(cmp["newly_failing"]) > LISTED:
        lines.append(
            f"{label}: ... and {len(cmp['newly_failing']) - LISTED} more newly failing (coverage.md)"
        )
    if cmp["newly_passing"]:
        lines.append(f"{label}: newly passing sids {_sids(cmp['newly_passing'])}")
    return lines


def _cell(text: str) -> str:
    """Free text (a reason) as one table cell: a `|` in it would split the row."""
    return text.replace("|", "/")


def markdown_lines(
    cmp: dict, title: str = "Changes against the baseline", source: str = "baseline"
) -> list[str]:
    """The "Changes against the baseline" section of coverage.md (`title`; `source` names what the
    path is: the baseline, or the DUT compared with)."""
    out = [
        f"## {title}",
        "",
        f"- {source}: `{cmp.get('path', '')}`"
        + (f", allow file `{cmp['allow_path']}`" if cmp.get("allow_path") else ""),
        f"- {_headline(cmp)}",
    ]
    cov, ver = cmp["coverage"], cmp["ids_version"]
    if isinstance(cov["before"], (int, float)) and isinstance(cov["now"], (int, float)):
        out.append(f"- coverage {100 * cov['before']:.1f}% -> {100 * cov['now']:.1f}%")
    if ver["before"] != ver["now"]:
        out.append(f"- IDS version {ver['before']} -> {ver['now']}")
    note = _rule_set_note(cmp)
    if note:
        out.append(f"- {note}")
    if cmp["allow_unused"]:
        out.append(f"- allowed but not newly failing: {_sids(cmp['allow_unused'])}")
    if cmp["newly_failing"]:
        out += [
            "",
            f"### Newly failing ({len(cmp['newly_failing'])})",
            "",
            "| sid | where | before | now | reason | allowed |",
            "|---|---|---|---|---|---|",
        ]
        out += [
            f"| {e['sid']} | {e['where']} | {e['before']} | {e['now']} | {_cell(e['reason'])} | "
            + (
                ("yes" + (f": {_cell(e['allow_reason'])}" if e.get("allow_reason") else ""))
                if e["allowed"]
                else "no"
            )
            + " |"
            for e in cmp["newly_failing"]
        ]
    if cmp["newly_passing"]:
        out += [
            "",
            f"### Newly passing ({len(cmp['newly_passing'])})",
            "",
            "| sid | where | before |",
            "|---|---|---|",
        ]
        out += [f"| {e['sid']} | {e['where']} | {e['before']} |" for e in cmp["newly_passing"]]
    if cmp["extra_changed"]:
        out += [
            "",
            f"### Extra alerts changed ({len(cmp['extra_changed'])})",
            "",
            "| sid | where | other sids now | gained | lost |",
            "|---|---|---|---|---|",
        ]
        out += [
            f"| {e['sid']} | {e['where']} | {_sids(e['now'], 20) or '-'} | {_sids(e['gained'], 20) or '-'} | "
            f"{_sids(e['lost'], 20) or '-'} |"
            for e in cmp["extra_changed"]
        ]
    for key, title in (("added", "Added rules"), ("removed", "Removed rules")):
        if cmp[key]:
            out += [
                "",
                f"### {title} ({len(cmp[key])})",
                "",
                "| sid | where | state |",
                "|---|---|---|",
            ]
            out += [
                f"| {e['sid']} | {e['where']} | {e['now'] if key == 'added' else e['before']} |"
                for e in cmp[key]
            ]
    return out + [""]
