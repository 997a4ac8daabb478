"""`testbed ids-coverage RULES...`: attack traffic from IDS rules and the IDS's detection coverage."""

from __future__ import annotations

import argparse
import json
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from idsrules.evasion import CLASSES, UnknownClass, parse_classes
from idsrules.semantics import load_rules, resolve_ja3_hashes
from idsrules.synth import read_ja3_strings
from ntgcore.errors import EXIT_BAD_INPUT, EXIT_CHECKS_FAILED, EXIT_OK, EXIT_RUN_FAILED
from ntgcore.files import write_error, write_whole

from ..cleanup import lab_mark
from ..ids.coverage import gate_lines, run_coverage_duts, sid_change_lines, summary_lines
from ..ids.evasion_host import ProbeError, can_go_live, live_table
from ..ids.hostlabel import MAX_ITEMS as MAX_PEER_SESSIONS
from ..ids.hostlabel import HostLabelError
from ..ids.multiplied import MAX_COPIES
from ..ids.peers import PeerReport, check_peers
from ..ids.regression import load_allow, load_baseline
from ..ids.suricata import make_duts
from . import add_parser, argtypes
from .output import default_out, err


def register(subparsers) -> None:
    c = add_parser(subparsers, "ids-coverage")
    c.add_argument(
        "rules",
        nargs="+",
        metavar="RULES",
        help="rule files (Suricata, Snort 2.9 or Snort 3 syntax)",
    )
    c.add_argument(
        "--ids",
        default="suricata",
        choices=["suricata"],
        help="the IDS to measure (default: suricata)",
    )
    c.add_argument(
        "--min",
        type=argtypes.fraction,
        metavar="FRACTION",
        help="exit 3 when the coverage is below FRACTION (0..1): the CI gate; rules the IDS "
        "refuses to load count as missed",
    )
    c.add_argument(
        "--exclude-unloadable",
        action="store_true",
        help="leave rules the IDS refuses to load out of the coverage (they are still reported)",
    )
    c.add_argument(
        "--ipv6",
        action="store_true",
        help="every attack session over IPv6 (2001:db8::/32; default: IPv4, IPv6 for rules that name it)",
    )
    c.add_argument(
        "--out", metavar="DIR", help="output folder (default: results/<time>-ids-coverage)"
    )
    c.add_argument(
        "--mix",
        type=argtypes.fractions,
        default=(),
        metavar="F1,F2",
        help="also measure with the attacks mixed into benign load at these packet fractions, e.g. 0.01,0.1",
    )
    c.add_argument(
        "--baseline",
        metavar="OLD.json",
        help="compare per sid with an earlier run's coverage.json; exit 3 when a sid that "
        "alerted there does not now (unless --allow lists it)",
    )
    c.add_argument(
        "--allow",
        metavar="ALLOW_FILE",
        help="with --baseline or several DUTs: sids allowed to stop alerting, one a line "
        "(optionally with the reason after it; # comments); they are still reported",
    )
    c.add_argument(
        "--suricata",
        action="append",
        metavar="[NAME=]PATH",
        help="the Suricata binary to measure (default: suricata on PATH); give it twice or more "
        "to compare DUTs: the same sessions run through each, each DUT compared per sid "
        "with the first, exit 3 when a sid it alerted for does not alert with another",
    )
    c.add_argument(
        "--suricata-config",
        action="append",
        metavar="[NAME=]FILE",
        help="a suricata.yaml to use instead of ours (HOME_NET, EXTERNAL_NET and checksum "
        "checks are still set to the testbed's); twice or more: DUTs compared as with "
        "--suricata (as many of each pair up in order, one goes with all of the other)",
    )
    c.add_argument(
        "--multiply",
        type=_copies_list,
        default=(),
        metavar="T1,T2",
        help="also run the attack sessions multiplied T times (each session and T shadow sessions, "
        "seed 003's multiplier) and report per sid whether the alerts are (T+1)x; e.g. 3,10",
    )
    c.add_argument(
        "--ja3-strings",
        metavar="FILE",
        help="JA3 strings you know, one a line: a ja3.hash rule whose hash is the MD5 of one of "
        "them gets a ClientHello of that string (a hash alone cannot be inverted)",
    )
    c.add_argument(
        "--evasions",
        type=_classes,
        default=(),
        metavar="CLASSES",
        help="also send evasion variants of every rule that alerted: all, or some of "
        + ", ".join(CLASSES)
        + "; each labelled by a Linux host live (root) and read by Suricata with its default "
        "and the host's reassembly policy: evasion.md, tables/coverage_evasion.parquet; with "
        "--baseline, exit 3 on a sid with a newly evaded variant",
    )
    c.add_argument(
        "--peers",
        nargs="?",
        const=MAX_PEER_SESSIONS,
        type=_peer_count,
        metavar="N",
        help="also replay the sessions live against real peers (root): N per rule file, drawn "
        "with a fixed seed (no N: all), each judged by its application's parser on what the "
        "server and the client received (docs/ids-coverage.md, 'Real peers'); peers.json and a "
        "section in coverage.md; exit 3 when a peer rejects a session",
    )
    c.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    c.set_defaults(func=run)


def _peer_count(text: str) -> int:
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {text[:20]}; no N: every session)")
    value = argtypes.count_upto(MAX_PEER_SESSIONS)(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be >= 1 (no N: every session)")
    return value


def _peer_check(
    args: argparse.Namespace, out: Path, say, ja3: dict[str, bytes] | None
) -> PeerReport | None:
    """The sessions replayed against real peers under a run mark (`testbed cleanup` removes the
    lab after a kill -9); None (said on stderr) when they cannot be. `ja3`: the JA3 strings
    given, so a `ja3.hash` rule has the session the coverage run synthesized."""
    models, _problems = load_rules(args.rules)
    if ja3:
        resolve_ja3_hashes(models, ja3)
    per_file = None if args.peers >= MAX_PEER_SESSIONS else args.peers
    if say:
        say(
            "replaying the sessions against real peers"
            + (f" ({per_file} per file)" if per_file else "")
        )
    try:
        with lab_mark(out) as places:
            report = check_peers(
                models, None, out / "peers", sample_per_file=per_file, on_places=places
            )
    except HostLabelError as exc:
        err(f"testbed ids-coverage: --peers: {exc}")
        return None
    write_whole(out / "peers.json", json.dumps(report.as_dict(), indent=1) + "\n")
    for md in [out / "coverage.md", *sorted(out.glob("*/coverage.md"))]:
        if md.is_file():
            with md.open("a") as f:
                f.write("\n" + "\n".join(report.markdown()))
    return report


def _live_labels(args: argparse.Namespace, out: Path, dut, say):
    """The host's table (`live_table`) under a run mark, so that `testbed cleanup` removes the
    lab's namespaces and helpers after a kill -9; None (said on stderr) when the lab fails."""
    try:
        with lab_mark(out) as places:
            return live_table(
                list(args.evasions), out / "evasions" / "host", dut, progress=say, on_places=places
            )
    except ProbeError as exc:
        err(f"testbed ids-coverage: {exc}")
        return None


class _LabFailed(Exception):
    """The live lab failed (said on stderr): the evasion outcomes would be unlabelled."""


def _labels_when_ready(future: Future):
    """The lab's table when the scoring asks for it, or _LabFailed."""

    def labels():
        got = future.result()
        if got is None:
            raise _LabFailed
        return got

    return labels


def _classes(text: str) -> tuple[str, ...]:
    try:
        return tuple(parse_classes(text))
    except UnknownClass as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _copies_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give numbers of copies separated by commas, e.g. 3,10"
        ) from None
    if not values or any(not 1 <= v <= MAX_COPIES for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each number of copies must be 1..{MAX_COPIES}")
    return values


def run(args: argparse.Namespace) -> int:
    for f in args.rules:
        if not Path(f).is_file():
            err(f"testbed ids-coverage: {f}: no such rule file; give paths of .rules files")
            return EXIT_BAD_INPUT
    # read before the run: bad DUTs, a bad baseline or allow file end the command before any work
    duts = make_duts(args.suricata, args.suricata_config)
    several = len(duts) > 1
    if args.allow is not None and args.baseline is None and not several:
        err(
            "testbed ids-coverage: --allow needs --baseline or several DUTs (the allow file excuses sids "
            "that stopped alerting since the baseline run, or with a DUT against the first)"
        )
        return EXIT_BAD_INPUT
    baseline = load_baseline(args.baseline, args.allow) if args.baseline is not None else None
    allowed = baseline.allowed if baseline else (load_allow(Path(args.allow)) if args.allow else {})
    ja3 = read_ja3_strings(args.ja3_strings) if args.ja3_strings else None
    why = can_go_live() if args.peers is not None else None
    if why:
        err(f"testbed ids-coverage: --peers: the sessions cannot be replayed live ({why})")
        return EXIT_RUN_FAILED
    out = Path(args.out) if args.out else default_out("ids-coverage")
    show = not args.quiet
    say = (lambda msg: err(f"ids-coverage: {msg}")) if show else None
    try:
        out.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=1) as lab:
            labels = None
            if args.evasions:
                why = can_go_live()
                if why:
                    err(
                        "testbed ids-coverage: the evasion variants are not labelled by a host "
                        f"({why}): their outcomes are 'unlabelled'"
                    )
                else:  # the live lab mostly waits: it runs beside the synthesis and writing
                    labels = _labels_when_ready(lab.submit(_live_labels, args, out, duts[0], say))
            result = run_coverage_duts(
                args.rules,
                out,
                duts,
                ids=args.ids,
                mixes=args.mix,
                ip_version=6 if args.ipv6 else 4,
                exclude_unloadable=args.exclude_unloadable,
                baseline=baseline,
                allowed=allowed,
                allow_path=args.allow,
                multiply=args.multiply,
                evasions=args.evasions,
                evasion_live=labels,
                ja3_strings=ja3,
                progress=say,
            )
        peers = _peer_check(args, out, say, ja3) if args.peers is not None else None
    except _LabFailed:
        return EXIT_RUN_FAILED
    except OSError as exc:
        raise write_error(exc, out, "free some space, or choose another --out") from None
    if args.peers is not None and peers is None:
        return EXIT_RUN_FAILED
    docs = result["duts"]
    problems = docs[0]["problems"]
    for problem in problems[:50]:
        err(problem)
    if len(problems) > 50:
        err(f"... and {len(problems) - 50} more malformed rules (coverage.md lists them)")
    for doc in docs:
        who = f" ({doc['dut']['name']})" if several else ""
        for line in doc["suricata_errors"][:20]:
            err(f"suricata{who}: {line}")
        refused = [r for r in doc["rows"] if r["state"] == "not loaded"]
        if refused:
            how = (
                "left out of the coverage"
                if args.exclude_unloadable
                else "counted as missed (--exclude-unloadable leaves them out)"
            )
            err(
                f"testbed ids-coverage: {len(refused)} rules {args.ids}{who} refused to load, {how}:"
            )
            for r in refused[:50]:
                err(f"{r['where']}: sid {r['sid']}: {r['reason']}")
    for doc in docs:
        if several:
            print(f"== {doc['dut']['name']} ==")
        for line in summary_lines(doc):
            print(line)
    if several:
        print(
            f"report: {out / 'comparison.html'} (also comparison.md, comparison.json; each DUT's "
            f"coverage.html/md/json in {', '.join(str(out / d.name) for d in duts)}); table: "
            f"{out / 'tables' / 'coverage.parquet'}"
        )
    else:
        print(
            f"report: {out / 'coverage.html'} (also coverage.md, coverage.json, tables/coverage.parquet)"
        )
    status = EXIT_OK
    if peers is not None:
        doc_p = peers.as_dict()
        print(
            f"real peers: {doc_p['accepted']} of {doc_p['sessions']} sessions accepted "
            f"({out / 'peers.json'})"
        )
        for s in peers.failures()[:20]:
            err(
                f"testbed ids-coverage: sid {s.sid} ({s.app}): a real peer rejected its session: {s.verdict}"
            )
        if len(peers.failures()) > 20:
            err(f"... and {len(peers.failures()) - 20} more (peers.json, coverage.md)")
        if peers.failures():
            status = EXIT_CHECKS_FAILED
    for doc in docs:
        for line in sid_change_lines(doc, several):
            err(line)
    for line in gate_lines(result):
        err(
            f"testbed ids-coverage: {line}; fix them, or list them in an --allow file with the reason"
        )
    if result["blocking"]:
        status = EXIT_CHECKS_FAILED
    if args.min is not None:
        for doc in docs:
            if doc["coverage"] < args.min:
                who = f" of {doc['dut']['name']}" if several else ""
                err(
                    f"testbed ids-coverage: coverage{who} {doc['coverage']:.3f} is below --min {args.min:g}"
                )
                status = EXIT_CHECKS_FAILED
    return status
