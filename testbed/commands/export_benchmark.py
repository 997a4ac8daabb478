"""`testbed export-benchmark RUN_DIR... -o FILE.json`: analysed runs as one pytest-benchmark file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from analysis.benchmark import benchmark_document
from ntgcore.errors import EXIT_OK
from ntgcore.files import replacing, write_error

from . import add_parser


def register(subparsers) -> None:
    b = add_parser(subparsers, "export-benchmark")
    b.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders of one commit")
    b.add_argument(
        "-o", "--output", required=True, metavar="FILE.json", help="the JSON file to write"
    )
    b.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    doc = benchmark_document(args.runs)
    out = Path(args.output)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with replacing(out) as tmp:
            tmp.write_text(json.dumps(doc, indent=4) + "\n")
    except OSError as exc:
        raise write_error(exc, out, "choose another -o") from None
    print(
        f"{out}: {len(doc['benchmarks'])} benchmarks from {len(args.runs)} run(s) "
        f"(commit {doc['commit_info']['id'][:12]})"
    )
    return EXIT_OK
