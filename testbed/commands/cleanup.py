"""`testbed cleanup [--dry-run]`: remove what live runs that died left (namespaces, processes)."""

from __future__ import annotations

import argparse
import os

from ntgcore.errors import EXIT_BAD_INPUT, EXIT_OK

from ..cleanup import cleanup
from . import add_parser
from .output import err


def register(subparsers) -> None:
    k = add_parser(subparsers, "cleanup")
    k.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    k.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if os.geteuid() != 0 and not args.dry_run:
        err(
            "testbed cleanup: deleting namespaces and killing what a dead run left needs root: run it "
            "with sudo (or see what it would do with --dry-run)"
        )
        return EXIT_BAD_INPUT
    lines = cleanup(dry_run=args.dry_run)
    print("\n".join(lines) if lines else "nothing to clean up: no dead run left a mark")
    return EXIT_OK
