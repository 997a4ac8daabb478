"""`testbed translate-rules IN.rules -o OUT.rules`: Snort 3 rules in Suricata 7 syntax, checked."""

from __future__ import annotations

import argparse
from pathlib import Path

from idsrules.translate import report_json
from ntgcore.errors import EXIT_BAD_INPUT, EXIT_CHECKS_FAILED, EXIT_OK
from ntgcore.files import replacing, write_error

from ..ids.suricata import SuricataMissing, check_load, translate_file
from . import add_parser
from .output import err


def register(subparsers) -> None:
    t = add_parser(subparsers, "translate-rules")
    t.add_argument("input", metavar="IN.rules", help="Snort 3 rule file")
    t.add_argument(
        "-o", "--output", required=True, metavar="OUT.rules", help="the Suricata rule file to write"
    )
    t.add_argument(
        "--report",
        metavar="FILE",
        help="also write the counts and every untranslatable rule as JSON",
    )
    t.add_argument("--no-check", action="store_true", help="do not run `suricata -T` on the output")
    t.add_argument(
        "--app-header",
        action="store_true",
        help="a rule with one service Suricata parses gets it as header protocol (alert smtp ...)",
    )
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    src, out = Path(args.input), Path(args.output)
    if src.is_dir():
        err(
            f"testbed translate-rules: {src}: a directory, not a rule file; give one Snort 3 .rules file in it"
        )
        return EXIT_BAD_INPUT
    if not src.is_file():
        err(
            f"testbed translate-rules: {src}: no such rule file; give the path of a Snort 3 .rules file"
        )
        return EXIT_BAD_INPUT
    if out.resolve() == src.resolve():
        err(
            f"testbed translate-rules: {out}: the output would overwrite the input; choose another -o"
        )
        return EXIT_BAD_INPUT
    advice = "choose another -o, on a file system that can be written and has space"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        rep = translate_file(
            src, out, check=False, app_header=args.app_header
        )  # BadInput: not a rule file
    except OSError as exc:  # written whole or not at all: nothing half-written is left
        raise write_error(exc, out, advice) from None
    if rep.total == 0:
        out.unlink(missing_ok=True)
        err(
            f"testbed translate-rules: {src}: no rules in it (only comments and blank lines); "
            "give a Snort 3 .rules file"
        )
        return EXIT_BAD_INPUT
    if not args.no_check:
        try:
            rep.load = check_load(out, out.with_name(out.name + ".suricata-check"))
        except SuricataMissing as exc:
            err(f"testbed translate-rules: not checked: {exc}")
        except OSError as exc:  # its configuration beside the output
            raise write_error(exc, out.parent, advice + ", or give --no-check") from None
    for p in rep.problems:
        err(f"{p} (skipped)")
    for tr in rep.untranslatable:
        err(
            f"{tr.rule.where}: sid {tr.sid}: untranslatable: {tr.reason}"
            + (f" ({tr.detail})" if tr.detail else "")
        )
    print(
        f"{src}: {rep.total:,} rules; {len(rep.translated):,} translated, "
        f"{len(rep.untranslatable):,} untranslatable, {len(rep.problems):,} malformed"
    )
    for reason, n in rep.reasons().most_common():
        print(f"  untranslatable: {n:,} x {reason}")
    if rep.load is not None:
        print(
            f"suricata -T: {rep.load.rules_loaded if rep.load.rules_loaded is not None else '?'} rules loaded, "
            f"{len(rep.load.failures)} translated rules refused (exit status {rep.load.exit_code})"
        )
        for sid, lines in sorted(rep.load.failures.items()):
            err(f"suricata refused sid {sid}: {' | '.join(lines)}")
    print(f"written: {out}")
    if args.report:
        try:
            with replacing(args.report) as tmp:
                tmp.write_text(report_json(rep))
        except OSError as exc:
            raise write_error(
                exc,
                args.report,
                "choose another --report, on a file system that can be "
                f"written and has space ({out} is written)",
            ) from None
        print(f"report: {args.report}")
    if rep.load is not None and (rep.load.exit_code != 0 or rep.load.failures):
        if not rep.load.failures:
            for line in rep.load.errors[:20]:
                err(f"suricata: {line}")
        err(
            f"testbed translate-rules: suricata -T failed on {out} (exit status {rep.load.exit_code}, "
            f"{len(rep.load.failures)} translated rules refused, as listed above): fix or remove those "
            "rules, or give --no-check to keep the output unchecked"
        )
        return EXIT_CHECKS_FAILED
    return EXIT_OK
