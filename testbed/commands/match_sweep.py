"""`testbed match-sweep`: seed 000's flow-matching grid with `flowengine match` (docs/flow-match.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.hashstudy import machine
from analysis.matchsweep import write_results
from ntgcore.errors import EXIT_BAD_INPUT, EXIT_OK
from ntgcore.files import write_error

from ..matchsweep import (
    DEFAULT_FEEDS,
    DEFAULT_HASHES,
    DEFAULT_STRUCTS,
    MAX_CELLS,
    MAX_PACKETS,
    SweepRequest,
    parse_sizes,
    run_sweep,
)
from . import add_parser, argtypes
from .output import default_out, err


def register(subparsers) -> None:
    ms = add_parser(subparsers, "match-sweep")
    ms.add_argument(
        "--structs",
        type=argtypes.names,
        default=DEFAULT_STRUCTS,
        metavar="A,B",
        help="chain, tree, linear, robin, cuckoo, linear16 (IPv4 feeds only) (default: chain,tree)",
    )
    ms.add_argument(
        "--hashes",
        type=argtypes.names,
        default=DEFAULT_HASHES,
        metavar="A,B",
        help="hashes of the registry (default: coralreef,lookup3,murmur3_32)",
    )
    ms.add_argument(
        "--sizes",
        default="2^14..2^24",
        metavar="2^A..2^B,N",
        help="table sizes: ranges of powers of two and single sizes (default: %(default)s)",
    )
    ms.add_argument(
        "--feeds",
        type=argtypes.names,
        default=DEFAULT_FEEDS,
        metavar="det,uniform:N,pcap:FILE",
        help="feeds of flowengine match (default: det,uniform:1000000)",
    )
    ms.add_argument(
        "--packets",
        type=argtypes.count_upto(MAX_PACKETS),
        default=1_000_000,
        help="packets a cell (default: 10^6)",
    )
    ms.add_argument(
        "--repeats",
        type=argtypes.count_upto(MAX_CELLS),
        default=1,
        help=f"runs a cell (default: 1; at most {MAX_CELLS:,} cells in all)",
    )
    ms.add_argument(
        "--cell-timeout",
        type=argtypes.seconds,
        default=120.0,
        metavar="S",
        help="a cell running longer is stopped and kept as timed out (default: 120)",
    )
    ms.add_argument(
        "--out", metavar="DIR", help="output folder (default: results/<time>-match-sweep)"
    )
    again = ms.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="go on with the interrupted sweep in --out: keep its rows, run the cells it lacks "
        "(the same request, else exit 2)",
    )
    again.add_argument(
        "--replace",
        action="store_true",
        help="start the sweep in --out over, dropping its rows (without --resume or --replace "
        "a folder that holds a sweep is refused)",
    )
    ms.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    ms.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    req = SweepRequest(
        structs=args.structs,
        hashes=args.hashes,
        sizes=parse_sizes(args.sizes),
        feeds=args.feeds,
        packets=args.packets,
        repeats=args.repeats,
        cell_timeout_s=args.cell_timeout,
    )
    out = Path(args.out) if args.out else default_out("match-sweep")
    progress = None if args.quiet else (lambda msg: err(f"match-sweep: {msg}"))
    if args.resume and not args.out:
        err("testbed match-sweep: --resume needs --out DIR, the folder of the sweep to go on with")
        return EXIT_BAD_INPUT
    try:
        rows = run_sweep(req, out, progress=progress, resume=args.resume, replace=args.replace)
        paths = write_results(rows, out, request=vars(req), machine=machine())
    except OSError as exc:  # the rows measured until then are kept whole (--resume goes on)
        raise write_error(exc, out, "free some space, or choose another --out") from None
    print(
        f"wrote {paths['report']} (and rows.parquet, metrics.json, {len(rows)} rows, the figures)"
    )
    return EXIT_OK
