"""`testbed results ACTION`: the results catalogue (list, show, compare, query) over run folders.

Its errors name the action (`testbed results compare: ...`): each action's parser sets `label`,
which testbed.cli puts in the message line."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from analysis.catalog import BY, Catalog, comparison_lines, list_lines, plot_comparison, text_table
from ntgcore.errors import EXIT_BAD_INPUT, EXIT_OK, BadInput
from ntgcore.files import write_error

from . import add_parser
from .output import err


def register(subparsers) -> None:
    res = add_parser(subparsers, "results")
    rs = res.add_subparsers(dest="results_command", required=True, metavar="ACTION")
    res.set_defaults(func=run)
    rl = rs.add_parser(
        "list", help="one line per run folder: scenario, method, status, steps, packets, rate"
    )
    rl.add_argument(
        "dirs",
        nargs="*",
        default=["results"],
        metavar="DIR",
        help="run folders, or folders searched for them (default: results)",
    )
    rl.add_argument("--json", action="store_true", help="JSON records instead of the table")
    rl.set_defaults(action=run_list, label="results list")
    rw = rs.add_parser("show", help="one run: its manifest summary, run tables and steps")
    rw.add_argument("run", metavar="RUN", help="a run folder, or the run id of one under --in")
    rw.add_argument(
        "--in",
        dest="dirs",
        action="append",
        default=None,
        metavar="DIR",
        help="where to look for a run id (default: results)",
    )
    rw.add_argument("--json", action="store_true", help="JSON instead of text")
    rw.set_defaults(action=run_show, label="results show")
    rc = rs.add_parser(
        "compare",
        help="seed 001's comparison over runs: rate, variance, CPU and memory per "
        "generator (or step), with their spread over repeated runs, and plots",
    )
    rc.add_argument(
        "dirs",
        nargs="*",
        default=["results"],
        metavar="DIR",
        help="run folders, or folders searched for them (default: results)",
    )
    rc.add_argument(
        "--by",
        choices=BY,
        default="generator",
        help="generator (default: each generator's steps at its own pace), step (every step), or "
        "scenario (and generator)",
    )
    plots = rc.add_mutually_exclusive_group()
    plots.add_argument(
        "--plots",
        metavar="DIR",
        help="where the PNG plots go (default: a new results/<time>-compare)",
    )
    plots.add_argument(
        "--no-plots", action="store_true", help="no plots (faster: matplotlib is not loaded)"
    )
    rc.add_argument(
        "--allow-mixed",
        action="store_true",
        help="compare runs of different scenarios (grouped by scenario) instead of refusing",
    )
    rc.add_argument(
        "--include-unfinished",
        action="store_true",
        help="also compare runs that did not complete (interrupted, failed, abandoned)",
    )
    fmt = rc.add_mutually_exclusive_group()
    fmt.add_argument(
        "--json", action="store_true", help="the full table (every statistic) as JSON records"
    )
    fmt.add_argument("--csv", action="store_true", help="the full table (every statistic) as CSV")
    rc.set_defaults(action=run_compare, label="results compare")
    rq = rs.add_parser(
        "query",
        help="SQL over the run tables (views run, steps, per_second, flows, timing, "
        "resources, alerts, coverage) of the runs",
    )
    rq.add_argument("sql", metavar="SQL")
    rq.add_argument(
        "dirs",
        nargs="*",
        default=["results"],
        metavar="DIR",
        help="run folders, or folders searched for them (default: results)",
    )
    fmt = rq.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="CSV instead of a table")
    fmt.add_argument("--json", action="store_true", help="JSON records instead of a table")
    rq.set_defaults(action=run_query, label="results query")


def run(args: argparse.Namespace) -> int:
    return args.action(args)


def run_list(args: argparse.Namespace) -> int:
    cat = Catalog(args.dirs)
    frame, problems = cat.list()
    if args.json:
        _emit(frame, "json")
    elif frame.empty:
        print(f"no run folders under {', '.join(args.dirs)}")
    else:
        print("\n".join(list_lines(frame)))
    for p in problems:
        err(p)
    if problems:
        err(
            f"testbed results list: {len(problems)} run folder(s) cannot be read (above); the others are listed"
        )
        return EXIT_BAD_INPUT
    return EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    folder = Path(args.run)
    is_run = (folder / "manifest.json").is_file() or (folder / "coverage.json").is_file()
    if not is_run and folder.is_dir():  # not a run id either: say so of the folder given
        raise BadInput(
            f"{folder}: not a run folder (it has no manifest.json or coverage.json); give a run "
            "folder, or a run id (with --in DIR, the folder that holds it; `testbed results list` lists them)"
        )
    cat = Catalog([folder] if is_run else args.dirs or ["results"])
    summary, steps = cat.show(args.run)
    if args.json:
        print(
            json.dumps(
                {"summary": summary, "steps": json.loads(steps.to_json(orient="records"))}, indent=1
            )
        )
        return EXIT_OK
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        if key == "tables":
            value = (
                ", ".join(f"{n} ({c:,} row{'' if c == 1 else 's'})" for n, c in value.items())
                or "none"
            )
        if value is not None:
            print(f"{key.ljust(width)}  {value}")
    if not steps.empty:
        cols = [
            "step",
            "kind",
            "generator",
            "status",
            "packets",
            "mean_pps",
            "variance_pct",
            "steady_mean_pps",
            "loss_rate",
            "cpu_mean",
            "cpu_max",
            "rss_max",
        ]
        print()
        print(
            "\n".join(
                text_table(
                    cols,
                    [[_cell(v) for v in row] for row in steps[cols].itertuples(index=False)],
                    right=range(4, len(cols)),
                )
            )
        )
    return EXIT_OK


def run_compare(args: argparse.Namespace) -> int:
    cat = Catalog(args.dirs)
    cmp = cat.compare(
        args.by, allow_mixed=args.allow_mixed, include_unfinished=args.include_unfinished
    )
    for note in cmp.notes:
        err(f"testbed results compare: {note}")
    if args.json or args.csv:
        _emit(cmp.table, "json" if args.json else "csv")
    else:
        print("\n".join(comparison_lines(cmp)))
    if not args.no_plots:
        out = Path(args.plots) if args.plots else _new_folder(Path("results"), "compare")
        try:
            written = plot_comparison(cmp, out)
        except OSError as exc:
            raise write_error(exc, out, "choose another --plots folder, or --no-plots") from None
        missing = [k for k in ("rate", "cpu", "memory", "variance") if k not in written]
        print(
            f"plots: {out} ({', '.join(p.name for p in written.values())})"
            + (
                f"; none of {', '.join(missing)}: these runs have no such numbers"
                if missing
                else ""
            ),
            file=sys.stderr if args.json or args.csv else sys.stdout,
        )
    return EXIT_OK


def run_query(args: argparse.Namespace) -> int:
    cat = Catalog(args.dirs)
    notes: list[str]  # Catalog.query's list[str] (its method `list` hides the type from mypy)
    frame, notes = cat.query(args.sql)
    for note in notes:
        err(f"testbed results query: {note}")
    _emit(frame, "csv" if args.csv else "json" if args.json else None)
    return EXIT_OK


def _emit(frame, fmt: str | None) -> None:
    """FRAME on stdout as a table, CSV or JSON (records)."""
    if fmt == "csv":
        frame.to_csv(sys.stdout, index=False)
    elif fmt == "json":
        print(frame.to_json(orient="records", date_format="iso", indent=1))
    elif frame.empty:
        print(
            "  ".join(map(str, frame.columns)) + ("\n" if len(frame.columns) else "") + "(no rows)"
        )
    else:
        print(frame.to_string(index=False))


def _cell(v) -> str | None:
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def _new_folder(root: Path, name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        path = root / (f"{stamp}-{name}" if n == 1 else f"{stamp}-{name}-{n}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    return path
