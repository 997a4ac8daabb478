"""`testbed detect PCAP|RUN_DIR...`: a capture and rules through Suricata, the alerts reported."""

from __future__ import annotations

import argparse
from pathlib import Path

from ntgcore.errors import EXIT_CHECKS_FAILED, EXIT_OK
from ntgcore.files import write_error

from ..ids import detect
from ..ids.expect import load_expect
from ..ids.suricata import CHECKSUM_MODES, check_config
from . import add_parser, argtypes
from .output import default_out, err


def register(subparsers) -> None:
    d = add_parser(subparsers, "detect")
    d.add_argument(
        "paths",
        nargs="+",
        metavar="PCAP|RUN_DIR",
        help="capture files (merged by time when several), or one run folder (its capture.pcap)",
    )
    d.add_argument(
        "--rules",
        nargs="+",
        metavar="R",
        help="rule files (a run folder with attacks brings its own)",
    )
    d.add_argument(
        "--home-net",
        metavar="CIDRS",
        help="HOME_NET: addresses or CIDR blocks separated by commas, or any (default: any for a "
        "capture, the testbed's own for a run folder)",
    )
    d.add_argument(
        "--external-net",
        metavar="CIDRS",
        help="EXTERNAL_NET (default: !$HOME_NET, or any when HOME_NET is any)",
    )
    d.add_argument(
        "--checksum-validation",
        choices=CHECKSUM_MODES,
        default="auto",
        help="all: check every packet; none: check none (offloaded checksums); auto (default): "
        "Suricata's own: stop checking when over 10%% of the first 1,000 packets are bad",
    )
    d.add_argument(
        "--suricata-config", metavar="FILE", help="a suricata.yaml to use instead of ours"
    )
    d.add_argument(
        "--midstream",
        action="store_true",
        help="stream.midstream: pick up TCP sessions whose handshake the capture does not have "
        "(as suricata-verify cases with `stream.midstream=true` do)",
    )
    d.add_argument(
        "--expect",
        metavar="EXPECT.yaml",
        help="checks on the EVE events (suricata-verify's shape); exit 3 when one fails",
    )
    d.add_argument(
        "--out",
        metavar="DIR",
        help="output folder (default: RUN_DIR/detect, or results/<time>-detect)",
    )
    d.add_argument(
        "--format",
        type=_formats,
        default=detect.FORMATS,
        metavar="md,html,json",
        help="which reports to write (default: all three; eve.json is always kept)",
    )
    d.add_argument(
        "--top",
        type=argtypes.count,
        default=detect.TOP_FLOWS,
        metavar="N",
        help="flows listed per sid (default: %(default)s; the report counts them all)",
    )
    d.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    d.set_defaults(func=run)


def _formats(text: str) -> tuple[str, ...]:
    values = tuple(t.strip() for t in text.split(",") if t.strip())
    wrong = [v for v in values if v not in detect.FORMATS]
    if wrong or not values:
        raise argparse.ArgumentTypeError(
            f"formats are md, html and json, separated by commas (got {text!r})"
        )
    return values


def run(args: argparse.Namespace) -> int:
    inputs = detect.resolve_inputs(args.paths, args.rules)
    home = detect.address_group(args.home_net, "--home-net") if args.home_net else None
    external = (
        detect.address_group(args.external_net, "--external-net") if args.external_net else None
    )
    if args.suricata_config:
        check_config(args.suricata_config)
    # an ExpectError: its problems, exit 2 (testbed.cli)
    expect = load_expect(args.expect) if args.expect else None
    if args.out:
        out = Path(args.out)
    elif inputs.run_dir is not None:
        out = inputs.run_dir / "detect"
    else:
        out = default_out("detect")
    try:  # every file of ours is written whole or not at all
        out.mkdir(parents=True, exist_ok=True)
        doc = detect.run_detect(
            inputs,
            out,
            home_net=home,
            external_net=external,
            checksum=args.checksum_validation,
            config=args.suricata_config,
            expect=expect,
            expect_path=args.expect,
            formats=args.format,
            top=args.top,
            midstream=args.midstream,
            progress=None if args.quiet else (lambda msg: err(f"detect: {msg}")),
        )
    except OSError as exc:
        raise write_error(
            exc, out, "choose another --out, on a file system that can be written and has space"
        ) from None
    for e in doc["load_errors"]:
        err(
            f"{e['file']}:{e['line']}: suricata refused sid {e['sid']}: {e['reason'] or e['suricata']}"
        )
    for line in doc["suricata_errors"][:20]:
        err(f"suricata: {line}")
    for line in detect.summary_lines(doc):
        print(line)
    for r in doc["sids"][:50]:
        flows = ", ".join(detect.flow_text(f) for f in r["top_flows"][:2])
        more = f" (+{r['flows'] - 2} more flows)" if r["flows"] > 2 else ""
        print(
            f"  sid {r['sid']}: {r['alerts']:,} alerts, {r['first_utc']} .. {r['last_utc']}: {r['msg']} [{flows}{more}]"
        )
    if len(doc["sids"]) > 50:
        print(f"  ... and {len(doc['sids']) - 50} more sids (the report lists them all)")
    written = [f"detect.{f}" for f in args.format]
    print(f"report: {out} ({', '.join(written + ['eve.json'])})")
    failed = [c for c in (doc["expect"] or {}).get("checks", []) if not c["ok"]]
    for c in failed:
        err(f"{args.expect}: {c['text']}")
    return EXIT_CHECKS_FAILED if failed else EXIT_OK
