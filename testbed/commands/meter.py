"""`testbed meter PCAP...`: flow meters on a capture, scored against its exact reference records
(testbed.meters.oncapture); `--conformance`: the meters over the conformance patterns instead."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ntgcore.errors import EXIT_OK, BadInput
from ntgcore.files import write_error

from ..meters import oncapture
from ..meters.conformance.matrix import FIGURE_FILE, MATRIX_FILE, REPORT_FILE, run_matrix
from . import add_parser, argtypes
from .output import default_out, err

VERSIONS = {"5": 5, "9": 9, "10": "ipfix", "ipfix": "ipfix"}


def _version(text: str) -> Any:
    if text.lower() not in VERSIONS:
        raise argparse.ArgumentTypeError(f"5, 9 or ipfix (got {text!r})")
    return VERSIONS[text.lower()]


def _timeouts(text: str) -> dict[str, str]:
    """ "idle=15s,active=1m" -> {"idle_timeout": "15000000000ns", ...} (in ns, with the unit: a
    bare number would be read as seconds)."""
    out: dict[str, str] = {}
    for part in argtypes.names(text):
        name, sep, value = part.partition("=")
        if not sep or name.strip() not in ("idle", "active"):
            raise argparse.ArgumentTypeError(
                f"give idle=DURATION and/or active=DURATION separated by commas (got {part!r})"
            )
        out[f"{name.strip()}_timeout"] = f"{argtypes.duration(value.strip())}ns"
    return out


def register(subparsers) -> None:
    m = add_parser(subparsers, "meter")
    m.add_argument(
        "paths",
        nargs="*",
        metavar="PCAP",
        help="capture files (merged by time when several); none with --conformance",
    )
    m.add_argument(
        "--meter",
        type=argtypes.names,
        metavar="NAMES",
        help="meters separated by commas (default: every one: softflowd, pmacct, nfpcapd, argus)",
    )
    m.add_argument(
        "--version",
        type=_version,
        metavar="5|9|ipfix",
        help="export format, for the meters that have it (default: each meter's own default)",
    )
    m.add_argument(
        "--timeouts",
        type=_timeouts,
        default={},
        metavar="idle=D,active=D",
        help="the meters' idle and active timeouts (default: 15s and 60s)",
    )
    m.add_argument(
        "--max-flows", type=argtypes.count, metavar="N", help="flow table size (default: 8192)"
    )
    m.add_argument("--key-vlan", action="store_true", help="the VLAN id is part of the flow key")
    m.add_argument(
        "--conformance",
        action="store_true",
        help="run the meters over the conformance patterns (docs/flowmeters.md): the matrix",
    )
    m.add_argument("--out", metavar="DIR", help="output folder (default: results/<time>-meter)")
    m.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    m.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    chosen = oncapture.chosen_meters(args.meter)
    if args.conformance == bool(args.paths):
        raise BadInput("give capture files, or --conformance (the patterns), not both or neither")
    options: dict[str, Any] = dict(args.timeouts)
    if args.version is not None:
        options["version"] = args.version
    if args.max_flows is not None:
        options["max_flows"] = args.max_flows
    if args.key_vlan:
        options["key_vlan"] = True
    pcaps = [Path(p) for p in args.paths]
    for p in pcaps:
        if not p.is_file():
            raise BadInput(f"{p}: no such capture file; give pcap or pcapng files")
    out = Path(args.out) if args.out else default_out("meter")
    say = (lambda msg: None) if args.quiet else (lambda msg: err(f"meter: {msg}"))
    try:
        out.mkdir(parents=True, exist_ok=True)
        if args.conformance:
            return conformance(chosen, out, args.version, say)
        pcap = pcaps[0]
        if len(pcaps) > 1:
            pcap = out / "merged.pcap"
            say(f"merging {len(pcaps)} captures by time into {pcap}")
            oncapture.merge_captures(pcaps, pcap)
        doc = oncapture.meter_capture(pcap, chosen, options, out, progress=say)
    except OSError as exc:
        raise write_error(
            exc, out, "choose another --out, on a file system that can be written and has space"
        ) from None
    for row in oncapture.summary_rows(doc):
        print("  ".join(row))
    failed = [r for r in doc["meters"] if r["status"] != "scored"]
    for r in failed:
        err(f"meter: {r['meter']} failed: {r['error']}")
    print(f"report: {out} (meter.md, meter.json, meter-score.png, <meter>/score.parquet)")
    return 1 if failed else EXIT_OK


def conformance(chosen, out: Path, version: Any, say) -> int:
    """The meters over every shipped pattern: the matrix's table, report and heat map in OUT."""
    say(f"{len(chosen)} meters over the conformance patterns")
    table = run_matrix(chosen, None, out, **({"version": version} if version is not None else {}))
    for row in table.to_pylist():
        detail = f": {row['detail']}" if row.get("detail") else ""
        print(f"  {row['meter']:<10} {row['pattern']:<16} {row['result']}{detail}")
    print(f"report: {out} ({REPORT_FILE}, {FIGURE_FILE}, {MATRIX_FILE})")
    return EXIT_OK
