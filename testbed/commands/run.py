"""`testbed run SCENARIO`: run a scenario into a new run folder and analyse it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ntgcore.errors import EXIT_BAD_INPUT
from ntgcore.scenario import load_scenario

from ..ids.regression import load_baseline
from ..runner import coverage_baseline_problem, run_scenario
from . import add_parser, argtypes
from .output import err, print_metrics


def register(subparsers) -> None:
    r = add_parser(subparsers, "run")
    r.add_argument("scenario", metavar="SCENARIO")
    r.add_argument(
        "--out",
        default="results",
        metavar="DIR",
        help="where the run folder is created (default: ./results)",
    )
    r.add_argument("--seed", type=argtypes.seed, help="override the scenario's seed (0 .. 2^64-1)")
    r.add_argument("--no-analyze", action="store_true", help="stop after generating")
    r.add_argument(
        "--duration",
        type=argtypes.duration,
        metavar="TIME",
        help="live runs: how long every step sends (testbed.duration, sweep.step, "
        "load_steps.duration), e.g. 2s for a short CI run",
    )
    r.add_argument(
        "--trials",
        type=int,
        metavar="N",
        help="method failover: N trials of each advertisement interval and fault instead of "
        "testbed.failover.trials (a short run)",
    )
    r.add_argument(
        "--coverage-baseline",
        metavar="OLD.json",
        help="scenarios with `attacks: {ids: suricata}`: compare the attack coverage per sid with "
        "an earlier coverage.json; exit 3 when a sid that alerted there does not now",
    )
    r.add_argument(
        "--coverage-allow",
        metavar="ALLOW_FILE",
        help="with --coverage-baseline: sids allowed to stop alerting, one a line (as ids-coverage --allow)",
    )
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    loaded = load_scenario(args.scenario)  # a ScenarioError: its problems, exit 2 (testbed.cli)
    if args.coverage_allow is not None and args.coverage_baseline is None:
        err(
            "testbed run: --coverage-allow needs --coverage-baseline (the allow file excuses sids that "
            "stopped alerting since the baseline run)"
        )
        return EXIT_BAD_INPUT
    baseline = None
    if args.coverage_baseline is not None:  # checked before the run: nothing is sent for a bad one
        problem = coverage_baseline_problem(loaded.scenario)
        if problem:
            err(f"testbed run: {args.scenario}: {problem}")
            return EXIT_BAD_INPUT
        baseline = load_baseline(args.coverage_baseline, args.coverage_allow)
    result = run_scenario(
        loaded,
        Path(args.out),
        seed=args.seed,
        analyze=not args.no_analyze,
        show_progress=not args.quiet and sys.stderr.isatty(),
        duration_ns=args.duration,
        coverage_baseline=baseline,
        trials=args.trials,
    )
    counters = result.manifest.get("generators", {})
    print(f"run folder: {result.run_dir}")
    print(f"status: {result.status}")
    if result.manifest.get("mode") == "live":
        _print_live(result)
        for message in result.messages:
            err(message)
        return result.exit_code
    for name, c in counters.items():
        if c:
            print(f"{name}: {c['packets_sent']:,} packets, {c['bytes_sent']:,} bytes sent")
    if result.metrics:
        print_metrics(result.metrics)
        print(f"report: {result.run_dir / 'report.html'}")
    for message in result.messages:
        err(message)
    return result.exit_code


def _print_live(result) -> None:
    for step in result.manifest.get("steps", []):
        loss = step.get("loss", {})
        rate = loss.get("loss_rate")
        parts = [f"sent {loss.get('sent', 0):,}"]
        if loss.get("wire") is not None:
            parts.append(f"wire {loss['wire']:,}")
        if loss.get("dut") is not None:
            parts.append(f"DUT {loss['dut']:,}")
        if rate is not None:
            parts.append(f"loss {rate:.2%}")
        print(f"  {step['name']}: {step['status']}; " + ", ".join(parts))
    if result.metrics and result.metrics.get("report"):
        print(f"report: {result.metrics['report']}")
