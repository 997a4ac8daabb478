"""`testbed compare-traffic A B`: how close capture (or flow table) B is to A: NetShare's JSD and
normalized EMD per field, rank correlations of the top talkers and ports, flow counts, and with
--suricata Suricata's app-layer protocol counts; a report folder (docs/fidelity.md)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

from analysis.capture import CaptureError
from analysis.fidelity import FidelityResult, compare_traffic, metric_names, target_of, write_report
from ntgcore.errors import EXIT_BAD_INPUT, EXIT_CHECKS_FAILED, EXIT_OK

from ..ids.suricata import read_eve, run_offline
from ..runner import stage_printer
from . import add_parser, argtypes
from .output import default_out, err

SURICATA_TIMEOUT_S = 600.0


def register(subparsers) -> None:
    a = add_parser(subparsers, "compare-traffic")
    a.add_argument(
        "original", metavar="A", help="the original: a pcap/pcapng capture or a Parquet flow table"
    )
    a.add_argument("generated", metavar="B", help="the trace to compare with A (the same kinds)")
    a.add_argument(
        "-o",
        "--out",
        metavar="DIR",
        help="report folder (default: results/<UTC time>-compare-traffic)",
    )
    a.add_argument(
        "--suricata",
        action="store_true",
        help="also run Suricata offline on both captures and compare its app-layer protocol "
        "detections (eve flow events' app_proto; slow)",
    )
    a.add_argument(
        "--json", action="store_true", help="print the metrics as JSON instead of the table"
    )
    a.add_argument(
        "--memory-limit",
        type=argtypes.byte_size,
        metavar="SIZE",
        help="memory for the packets being counted, e.g. 512M (default 256M); the results do "
        "not depend on it",
    )
    a.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    a.set_defaults(func=run)


def suricata_app_protocols(capture: Path) -> dict[str, int]:
    """Flows per app-layer protocol Suricata detects in CAPTURE (offline, no rules, checksums not
    checked; eve `flow` events' app_proto, "unknown" when it names none)."""
    with tempfile.TemporaryDirectory(prefix="ntg-fidelity-suricata-") as work:
        result = run_offline(
            capture, [], work, eve_types=("flow",), checksum="none", timeout=SURICATA_TIMEOUT_S
        )
        counts = Counter(
            str(ev.get("app_proto") or "unknown")
            for ev in read_eve(result.eve or Path(work) / "eve.json")
            if ev.get("event_type") == "flow"
        )
    return dict(sorted(counts.items()))


def compare_with_suricata(
    original: Path,
    generated: Path,
    *,
    suricata: bool = False,
    memory_limit: int | None = None,
    progress: Callable[[str], None] | None = None,
    address_map: Mapping[str, str] | None = None,
) -> FidelityResult:
    """analysis.fidelity.compare_traffic with Suricata's app-layer counts when SURICATA (what
    `testbed learn --check` calls: the analysis runs no tool itself). ADDRESS_MAP: the original's
    addresses (text) -> the generated trace's, for the top talkers' rank correlation."""
    return compare_traffic(
        original,
        generated,
        suricata=suricata,
        memory_limit=memory_limit,
        app_protocols=suricata_app_protocols if suricata else None,
        progress=progress,
        address_map=address_map,
    )


def print_table(results: dict[str, FidelityResult]) -> None:
    """The metrics, one column per compared trace, each with its target mark."""
    names = list(results)
    print(f"{'metric':28} {'target':>8} " + " ".join(f"{n:>16}" for n in names))
    for metric in metric_names():
        bound = target_of(metric)
        cells = []
        for n in names:
            v = results[n].metrics[metric]
            if v != v:  # NaN
                cells.append(f"{'-':>16}")
            else:
                mark = "" if bound is None else (" ok" if v <= bound else " MISSED")
                cells.append(f"{v:.4f}{mark}".rjust(16))
        target = "-" if bound is None else f"<= {bound}"
        print(f"{metric:28} {target:>8} " + " ".join(cells))
    for n, r in results.items():
        d = r.downstream
        print(
            f"{n}: flows {d['flows']['generated']:,} (original {d['flows']['original']:,}), "
            f"packets {d['packets']['generated']:,} (original {d['packets']['original']:,})"
        )


def run(args: argparse.Namespace) -> int:
    progress = stage_printer(not args.quiet and sys.stderr.isatty())
    try:
        result = compare_with_suricata(
            Path(args.original),
            Path(args.generated),
            suricata=args.suricata,
            memory_limit=args.memory_limit,
            progress=progress,
        )
    except CaptureError as exc:
        err(f"testbed compare-traffic: {exc}")
        return EXIT_BAD_INPUT
    progress("report")
    out = Path(args.out) if args.out else default_out("compare-traffic")
    files = write_report(out, {"generated": result})
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        print_table({"generated": result})
        print(f"report: {files['report.html']}")
    missed = result.missed()
    if missed:
        err(f"testbed compare-traffic: {args.generated} misses the target on: {', '.join(missed)}")
        return EXIT_CHECKS_FAILED
    return EXIT_OK
