"""`testbed export CAPTURE... --parquet DIR`: captures as per-packet and per-flow Parquet tables."""

from __future__ import annotations

import argparse
import sys

from analysis.export import COMPRESSIONS, DEFAULT_COMPRESSION, export_captures
from ntgcore.errors import EXIT_OK

from . import add_parser
from .output import err


def register(subparsers) -> None:
    e = add_parser(subparsers, "export")
    e.add_argument("captures", nargs="+", metavar="CAPTURE", help="pcap or pcapng files")
    e.add_argument(
        "--parquet",
        required=True,
        metavar="DIR",
        help="the export folder: new or empty (see --replace)",
    )
    e.add_argument(
        "--replace",
        action="store_true",
        help="replace the earlier export in DIR (only a folder holding an export.json)",
    )
    e.add_argument(
        "--compression",
        choices=COMPRESSIONS,
        default=DEFAULT_COMPRESSION,
        help=f"Parquet compression (default {DEFAULT_COMPRESSION}; zstd: half the size, slower)",
    )
    e.add_argument("--no-flows", action="store_true", help="the packet table only")
    e.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    e.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    show = not args.quiet and sys.stderr.isatty()
    doc = export_captures(
        args.captures,
        args.parquet,
        replace=args.replace,
        compression=args.compression,
        flows=not args.no_flows,
        progress=(lambda msg: err(f"export: {msg}")) if show else None,
    )
    for c in doc["captures"]:
        if c.get("problem"):
            p = c["problem"]
            err(
                f"testbed export: warning: {c['path']}: damaged capture at byte offset {p['offset']}: "
                f"{p['message']} ({p['packets_read']:,} packets exported, those before it)"
            )
        flows = f", {c['flows']:,} flows" if "flows" in c else ""
        print(f"{c['capture']}: {c['packets']:,} packets{flows}")
    rate = doc["packets"] / doc["seconds"] if doc["seconds"] else 0
    print(
        f"exported to {args.parquet} in {doc['seconds']:.2f} s ({rate:,.0f} packets/s): "
        f"packets/ and {'flows/ ' if not args.no_flows else ''}partitioned date=/hour= (UTC), "
        f"schema {doc['schema_version']}"
    )
    return EXIT_OK
