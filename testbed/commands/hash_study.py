"""`testbed hash-study`: seed 002's flow-ID hash study (docs/hash-study.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.hashing import distinct_names
from analysis.hashstudy import (
    DEFAULT_FLOWS,
    KEYS,
    MAX_REPEATS,
    PREFIXES,
    StudyRequest,
    check_request,
    run_study,
    write_study,
)
from ntgcore.errors import EXIT_OK
from ntgcore.files import write_error

from . import add_parser, argtypes
from .output import default_out, err


def register(subparsers) -> None:
    hs = add_parser(subparsers, "hash-study")
    hs.add_argument(
        "--hashes",
        type=argtypes.names,
        metavar="A,B",
        help="hashes to study (default: every distinct one; an unknown name lists the known)",
    )
    hs.add_argument(
        "--flows",
        type=argtypes.flow_counts,
        default=list(DEFAULT_FLOWS),
        metavar="N,N",
        help="flow counts, K and M allowed (default: 250K,500K,750K,1M; at most 16M)",
    )
    hs.add_argument(
        "--prefixes",
        type=argtypes.ints,
        default=sorted(PREFIXES),
        metavar="8,16,24",
        help="source ranges by prefix length (default: %(default)s)",
    )
    hs.add_argument(
        "--keys",
        type=argtypes.names,
        default=["flowid"],
        metavar=",".join(KEYS),
        help="what is hashed: seed 002's 37-byte FlowID and/or the engine's 13-byte "
        "5-tuple (default: flowid)",
    )
    hs.add_argument(
        "--repeats",
        type=argtypes.count_upto(MAX_REPEATS),
        default=3,
        help=f"draws of the destinations (default: 3, as seed 002; at most {MAX_REPEATS})",
    )
    hs.add_argument(
        "--seed", type=argtypes.seed, default=2, help="random seed of the destinations (default: 2)"
    )
    hs.add_argument(
        "--out", metavar="DIR", help="output folder (default: results/<time>-hash-study)"
    )
    hs.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    hs.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    req = check_request(
        StudyRequest(
            hashes=args.hashes or distinct_names(),
            flows=args.flows,
            prefixes=args.prefixes,
            keys=args.keys,
            repeats=args.repeats,
            seed=args.seed,
        )
    )
    out = Path(args.out) if args.out else default_out("hash-study")
    show = not args.quiet and sys.stderr.isatty()
    study = run_study(req, progress=(lambda msg: err(f"hash-study: {msg}")) if show else None)
    try:
        paths = write_study(study, out)
    except OSError as exc:
        raise write_error(exc, out, "free some space, or choose another --out") from None
    for r in study.verdicts.itertuples():
        print(
            f"{r.hash:14s} {r.key:7s} {r.verdict:16s} collisions/bound {r.collision_ratio:8.2f}  "
            f"spread {r.spread:11s}  {r.hashes_per_s / 1e6:7.1f} M hashes/s"
        )
    print(
        f"wrote {paths['report']} (and metrics.json, rows/spread/verdicts.parquet, collisions.png, spread.png)"
    )
    return EXIT_OK
