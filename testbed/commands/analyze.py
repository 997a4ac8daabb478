"""`testbed analyze PCAP|RUN_DIR...`: turn a capture or a run folder into metrics and a report."""

from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path

from analysis import analyze
from analysis.capture import CaptureError
from analysis.stream import natural_key
from ntgcore.errors import EXIT_BAD_INPUT, EXIT_CHECKS_FAILED, EXIT_OK, BadInput
from ntgcore.files import read_json

from ..multiply import rerun_report
from ..runner import analyze_live_run, stage_printer
from . import add_parser, argtypes
from .output import err, print_metrics, print_multiply_report


def register(subparsers) -> None:
    a = add_parser(subparsers, "analyze")
    a.add_argument(
        "path",
        nargs="+",
        metavar="PCAP|RUN_DIR",
        help="a run folder, a capture file, or several files (or a quoted glob such "
        "as 'capture.pcap*') of one logical capture: a tcpdump rotation, several hosts",
    )
    a.add_argument("--out", metavar="DIR", help="report folder (default: the run folder)")
    a.add_argument(
        "--memory-limit",
        type=argtypes.byte_size,
        metavar="SIZE",
        help="memory for the packets being counted, e.g. 512M (K, M, G: powers of "
        "1024); the capture is read in chunks that fit it (default 256M); the "
        "results do not depend on it",
    )
    a.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    a.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    paths = _analyze_paths(args.path)
    args.path = paths[0] if len(paths) == 1 else " ".join(paths)
    run_dir = Path(paths[0])
    if len(paths) == 1 and _is_live_run(run_dir):
        metrics = analyze_live_run(
            run_dir, progress=stage_printer(not args.quiet and sys.stderr.isatty())
        )
        _warn_incomplete(args.path, metrics)
        print(f"report: {metrics['report']}")
        failed = [c for c in metrics.get("checks", []) if not c.get("ok")]
        for c in failed:  # as `testbed run` says them
            err(f"check failed: {c['name']}: expected {c['expected']}, measured {c['measured']}")
        return EXIT_CHECKS_FAILED if failed else EXIT_OK
    try:
        metrics = analyze(
            Path(paths[0]) if len(paths) == 1 else [Path(p) for p in paths],
            Path(args.out) if args.out else None,
            progress=stage_printer(not args.quiet and sys.stderr.isatty()),
            memory_limit=args.memory_limit,
        )
    except CaptureError as exc:
        err(f"testbed analyze: {exc}")
        return EXIT_BAD_INPUT
    _warn_incomplete(args.path, metrics)
    print_metrics(metrics)
    where = metrics.get("report_dir")
    if where:
        print(f"report: {Path(where) / 'report.html'}")
    multiplied = rerun_report(run_dir) if len(paths) == 1 and run_dir.is_dir() else None
    if multiplied is not None:  # a run folder that `testbed multiply` multiplied
        print_multiply_report(multiplied)
        print(f"multiplied: {run_dir / 'multiply_report.md'} (also .json, .png)")
        if not multiplied["ok"]:
            return EXIT_CHECKS_FAILED
    problem = metrics.get("capture_problem")
    if problem:
        err(
            f"{args.path}: damaged capture at byte offset {problem['offset']}: {problem['message']} "
            f"({problem['packets_read']:,} packets read before it)"
        )
        return EXIT_CHECKS_FAILED
    for u in metrics.get("undecoded_link_types") or []:
        err(
            f"testbed analyze: {u['path']}: link type {u['link_type']} is not one the analysis decodes: "
            f"its {u['packets']:,} packets count in packets, bytes and rates, not in flows (0 flows "
            "from them); the analysis reads Ethernet, raw IP, Linux cooked (SLL, SLL2) and BSD loopback"
        )
    if metrics.get("undecoded_link_types"):
        return EXIT_CHECKS_FAILED
    if any(not c.get("ok") for c in metrics.get("checks", [])):
        return EXIT_CHECKS_FAILED
    return EXIT_OK


def _warn_incomplete(path: str, metrics: dict) -> None:
    if metrics.get("incomplete_run"):
        err(
            f"testbed analyze: warning: {path}: {metrics['incomplete_run']['message']} "
            f"The report says so too."
        )


def _analyze_paths(patterns: list[str]) -> list[str]:
    """The paths given, a quoted glob pattern (`'capture.pcap*'`) replaced by the files it
    matches in natural name order (capture.pcap, capture.pcap1, ..., capture.pcap10)."""
    out: list[str] = []
    for p in patterns:
        if not Path(p).exists() and glob.has_magic(p):
            out += sorted(glob.glob(p), key=natural_key) or [p]
        else:
            out.append(p)
    return out


def _is_live_run(folder: Path) -> bool:
    """Whether FOLDER is a live run's folder (its manifest says so; a damaged one is not)."""
    if not (folder / "manifest.json").is_file():
        return False
    try:
        manifest = read_json(folder / "manifest.json", "run manifest")
    except BadInput:
        return False
    return isinstance(manifest, dict) and manifest.get("mode") == "live"
