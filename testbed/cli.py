"""The `testbed` command line: validate, schema, run, analyze."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .runner import (
    EXIT_BAD_INPUT,
    EXIT_CHECKS_FAILED,
    EXIT_OK,
    RunSetupError,
    run_scenario,
    stage_printer,
    testbed_version,
)
from .scenario import ScenarioError, json_schema, load_scenario


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for file in args.files:
        try:
            loaded = load_scenario(file)
        except ScenarioError as exc:
            for problem in exc.problems:
                _err(problem)
            status = EXIT_BAD_INPUT
            continue
        from .compile import ENGINE_BYTES_PER_FLOW, check_memory, expected, peak_concurrent_flows

        e = expected(loaded.scenario)
        peak = peak_concurrent_flows(loaded.scenario)
        size = f"{e.bytes:,} bytes" if e.bytes is not None else "random sizes"
        span = max(f.last_due_ns for f in loaded.scenario.flows) - min(f.start for f in loaded.scenario.flows)
        print(
            f"{file}: ok: {len(loaded.scenario.flows)} flow definitions, {e.flows:,} flows, "
            f"{e.packets:,} packets, {size}, {span / 1e9:g} s; at most {peak:,} flows at once "
            f"(about {_size(peak * ENGINE_BYTES_PER_FLOW)} of engine state)"
        )
        too_big = check_memory(loaded.scenario)
        if too_big:
            _err(f"{file}: warning: {too_big}")
    return status


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GiB"  # pragma: no cover - the loop returns


def cmd_schema(args: argparse.Namespace) -> int:
    text = json.dumps(json_schema(), indent=2) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    try:
        loaded = load_scenario(args.scenario)
    except ScenarioError as exc:
        for problem in exc.problems:
            _err(problem)
        return EXIT_BAD_INPUT
    try:
        result = run_scenario(
            loaded,
            Path(args.out),
            seed=args.seed,
            analyze=not args.no_analyze,
            show_progress=not args.quiet and sys.stderr.isatty(),
            duration_ns=args.duration,
        )
    except RunSetupError as exc:
        _err(f"testbed run: {exc}")
        return EXIT_BAD_INPUT
    counters = result.manifest.get("generators", {})
    print(f"run folder: {result.run_dir}")
    print(f"status: {result.status}")
    if result.manifest.get("mode") == "live":
        _print_live(result)
        for message in result.messages:
            _err(message)
        return result.exit_code
    for name, c in counters.items():
        if c:
            print(f"{name}: {c['packets_sent']:,} packets, {c['bytes_sent']:,} bytes sent")
    if result.metrics:
        _print_metrics(result.metrics)
        print(f"report: {result.run_dir / 'report.html'}")
    for message in result.messages:
        _err(message)
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


def _print_metrics(m: dict) -> None:
    flows = m.get("flows") or {}
    mean, variance = m.get("mean_pps"), m.get("variance_pct")
    rate = (
        f"mean {mean:,.0f} pps (variance {variance:.2f}%)"
        if mean is not None and variance is not None
        else "no complete second for a rate"
    )
    print(
        f"capture: {m.get('packets', 0):,} packets, {m.get('bytes', 0):,} bytes, "
        f"{flows.get('count', '?')} flows; {rate}"
    )
    checks = m.get("checks", [])
    if checks:
        ok = sum(1 for c in checks if c.get("ok"))
        print(f"checks: {ok} of {len(checks)} agree with the scenario and the generator")


def cmd_analyze(args: argparse.Namespace) -> int:
    from analysis import analyze
    from analysis.capture import CaptureError

    run_dir = Path(args.path)
    if (run_dir / "manifest.json").is_file() and '"mode": "live"' in (run_dir / "manifest.json").read_text():
        from analysis.live import analyze_live

        metrics = analyze_live(run_dir, progress=stage_printer(not args.quiet and sys.stderr.isatty()))
        print(f"report: {metrics['report']}")
        return EXIT_CHECKS_FAILED if any(not c.get("ok") for c in metrics.get("checks", [])) else EXIT_OK
    try:
        metrics = analyze(Path(args.path), Path(args.out) if args.out else None,
                          progress=stage_printer(not args.quiet and sys.stderr.isatty()))
    except CaptureError as exc:
        _err(f"testbed analyze: {exc}")
        return EXIT_BAD_INPUT
    _print_metrics(metrics)
    where = metrics.get("report_dir")
    if where:
        print(f"report: {Path(where) / 'report.html'}")
    problem = metrics.get("capture_problem")
    if problem:
        _err(
            f"{args.path}: damaged capture at byte offset {problem['offset']}: {problem['message']} "
            f"({problem['packets_read']:,} packets read before it)"
        )
        return EXIT_CHECKS_FAILED
    if any(not c.get("ok") for c in metrics.get("checks", [])):
        return EXIT_CHECKS_FAILED
    return EXIT_OK


def _duration(text: str) -> int:
    from .units import parse_duration_ns

    try:
        value = parse_duration_ns(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"must be between 0 and 2^64-1 (got {value})")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="testbed",
        description="Describe traffic once in a scenario YAML, generate it, and measure it.",
    )
    p.add_argument("--version", action="version", version=f"testbed {testbed_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    v = sub.add_parser("validate", help="check scenario files and say what they will produce")
    v.add_argument("files", nargs="+", metavar="FILE")
    v.set_defaults(func=cmd_validate)

    s = sub.add_parser("schema", help="print the scenario JSON Schema (for editors)")
    s.add_argument("-o", "--output", metavar="FILE", help="write it to FILE instead of stdout")
    s.set_defaults(func=cmd_schema)

    r = sub.add_parser("run", help="run a scenario into a new run folder and analyse it")
    r.add_argument("scenario", metavar="SCENARIO")
    r.add_argument("--out", default="results", metavar="DIR",
                   help="where the run folder is created (default: ./results)")  # fmt: skip
    r.add_argument("--seed", type=_seed, help="override the scenario's seed (0 .. 2^64-1)")
    r.add_argument("--no-analyze", action="store_true", help="stop after generating")
    r.add_argument("--duration", type=_duration, metavar="TIME",
                   help="live runs: override testbed.duration (e.g. 3s for a short CI run)")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_run)

    a = sub.add_parser("analyze", help="turn a capture or a run folder into metrics and a report")
    a.add_argument("path", metavar="PCAP|RUN_DIR")
    a.add_argument("--out", metavar="DIR", help="report folder (default: the run folder)")
    a.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    a.set_defaults(func=cmd_analyze)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
