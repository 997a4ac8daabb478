"""`testbed schema [-o FILE]`: print the scenario JSON Schema (for editors)."""

from __future__ import annotations

import argparse
import json
import sys

from ntgcore.errors import EXIT_OK
from ntgcore.files import write_error, write_whole
from ntgcore.scenario import json_schema

from . import add_parser


def register(subparsers) -> None:
    s = add_parser(subparsers, "schema")
    s.add_argument("-o", "--output", metavar="FILE", help="write it to FILE instead of stdout")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    text = json.dumps(json_schema(), indent=2) + "\n"
    if args.output:
        try:
            write_whole(args.output, text)
        except OSError as exc:
            raise write_error(exc, args.output, "choose another -o") from None
    else:
        sys.stdout.write(text)
    return EXIT_OK
