"""The `testbed` command line: validate, schema, run, analyze, export, export-benchmark, results,
cleanup, translate-rules, ids-coverage, detect, hash-study, match-sweep, multiply, spread."""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import sys
from datetime import UTC, datetime, timezone
from pathlib import Path

from analysis import analyze
from analysis.benchmark import benchmark_document
from analysis.capture import CaptureError
from analysis.catalog import BY, Catalog, comparison_lines, list_lines, plot_comparison, text_table
from analysis.export import COMPRESSIONS, DEFAULT_COMPRESSION, export_captures
from analysis.hashing import distinct_names
from analysis.hashstudy import (
    DEFAULT_FLOWS,
    KEYS,
    PREFIXES,
    StudyRequest,
    check_request,
    run_study,
    write_study,
)
from analysis.hashstudy import MAX_REPEATS as HASH_MAX_REPEATS
from analysis.hashstudy import machine as hashstudy_machine
from analysis.matchsweep import write_results as write_match_sweep
from analysis.stream import natural_key
from ntgcore.compile import (
    ENGINE_BYTES_PER_FLOW,
    check_memory,
    compile_session,
    expected,
    peak_concurrent_flows,
)
from ntgcore.errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECKS_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_RUN_FAILED,
    BadInput,
    NtgError,
)
from ntgcore.files import read_json, replacing, write_error, write_whole
from ntgcore.proc import Interrupted, Interrupts
from ntgcore.runfolder import testbed_version
from ntgcore.scenario import ScenarioError, attack_rule_paths, json_schema, load_scenario
from ntgcore.units import parse_duration_ns, parse_size_bytes

from .cleanup import cleanup
from .ids import detect
from .ids.coverage import gate_lines, run_coverage_duts, sid_change_lines, summary_lines
from .ids.expect import ExpectError, load_expect
from .ids.multiplied import MAX_COPIES
from .ids.regression import load_allow, load_baseline
from .ids.rules.attacks import load_selection, tcp_dialogues
from .ids.rules.translate import report_json
from .ids.suricata import (
    CHECKSUM_MODES,
    SuricataMissing,
    check_config,
    check_load,
    make_duts,
    translate_file,
)
from .matchsweep import (
    DEFAULT_FEEDS,
    DEFAULT_HASHES,
    DEFAULT_STRUCTS,
    SweepRequest,
    parse_sizes,
    run_sweep,
)
from .matchsweep import MAX_CELLS as MATCH_MAX_CELLS
from .matchsweep import MAX_PACKETS as MATCH_MAX_PACKETS
from .methods import spread_shares
from .multiply import (
    MultiplyParams,
    analyze_multiplied,
    multiply_capture,
    multiply_run_folder,
    rerun_report,
    scenario_params,
)
from .parts.hosts import collect_hosts
from .runner import (
    analyze_live_run,
    attack_player,
    check_places,
    coverage_baseline_problem,
    open_site,
    plan_steps,
    played_attacks_problem,
    run_scenario,
    stage_printer,
)


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
        live_line = None
        if (
            loaded.scenario.testbed is not None
        ):  # checked first: no "ok" for a run that cannot start
            code, live_line = _validate_live(loaded)
            if code != EXIT_OK:
                status = code
                continue
        else:  # what the offline generator writes, when it is not the flows as counted below
            try:
                live_line = (
                    loaded.scenario.offline_generator().offline_expected(loaded.scenario) or {}
                ).get("what")
            except NtgError as exc:
                _err(f"{file}: {exc}")
                status = EXIT_BAD_INPUT
                continue
        e = expected(loaded.scenario)
        peak = peak_concurrent_flows(loaded.scenario)
        size = f"{e.bytes:,} bytes" if e.bytes is not None else "random sizes"
        span = max(f.last_due_ns for f in loaded.scenario.flows) - min(
            f.start for f in loaded.scenario.flows
        )
        print(
            f"{file}: ok: {len(loaded.scenario.flows)} flow definitions, {e.flows:,} flows, "
            f"{e.packets:,} packets, {size}, {span / 1e9:g} s; at most {peak:,} flows at once "
            f"(about {_size(peak * ENGINE_BYTES_PER_FLOW)} of engine state)"
        )
        too_big = check_memory(loaded.scenario)
        if too_big:
            _err(f"{file}: warning: {too_big}")
        if live_line:
            print(live_line)
        if loaded.scenario.attacks is not None:
            _validate_attacks(file, loaded)
    return status


def _validate_attacks(file: str, loaded) -> None:
    """How many rules `attacks:` selects (parsing rule files is cheap: thousands per second)."""
    spec = loaded.scenario.attacks
    selected, models, problems = load_selection(attack_rule_paths(spec, loaded.path), spec.select)
    print(
        f"{file}: attacks: {len(selected):,} of {len(models):,} rules selected "
        f"({len(problems)} malformed, skipped); {spec.count:,} attack sessions at {float(spec.rate):g}/s"
        + ("" if selected else " -- the selection is empty: widen attacks.select")
    )
    player = attack_player(loaded.scenario.live_generators())
    if player is not None and selected:
        sessions, skipped = tcp_dialogues(spec, attack_rule_paths(spec, loaded.path))
        print(
            f"{file}: attacks: played by {player.title} over its own TCP stack: {len(sessions):,} TCP "
            f"rule(s); not played: {', '.join(skipped[:10]) or 'none'}{', ...' if len(skipped) > 10 else ''}"
            + (f" -- {problem}" if (problem := played_attacks_problem(loaded.scenario)) else "")
        )


def _validate_live(loaded) -> tuple[int, str | None]:
    """What a live scenario will do: the topology (checked) and the steps."""
    tb = loaded.scenario.testbed
    try:
        site = open_site(loaded, unique=False)
    except ScenarioError as exc:
        for problem in exc.problems:
            _err(problem)
        return EXIT_BAD_INPUT, None
    problem = check_places(loaded.scenario, site)
    if problem:
        _err(f"{loaded.path}: {problem}")
        return EXIT_BAD_INPUT, None
    steps = plan_steps(loaded.scenario)
    total = sum(s.deadline_s() for s in steps)
    names = ", ".join(s.name for s in steps[:6]) + (", ..." if len(steps) > 6 else "")
    return EXIT_OK, (
        f"  live: method {tb.method}, topology {site.name}, {len(steps)} step(s) "
        f"({names}); at most {total:,.0f} s of sending"
    )


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GiB"  # pragma: no cover - the loop returns


def cmd_schema(args: argparse.Namespace) -> int:
    text = json.dumps(json_schema(), indent=2) + "\n"
    if args.output:
        try:
            write_whole(args.output, text)
        except OSError as exc:
            raise write_error(exc, args.output, "choose another -o") from None
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
    if args.coverage_allow is not None and args.coverage_baseline is None:
        _err(
            "testbed run: --coverage-allow needs --coverage-baseline (the allow file excuses sids that "
            "stopped alerting since the baseline run)"
        )
        return EXIT_BAD_INPUT
    baseline = None
    if args.coverage_baseline is not None:  # checked before the run: nothing is sent for a bad one
        problem = coverage_baseline_problem(loaded.scenario)
        if problem:
            _err(f"testbed run: {args.scenario}: {problem}")
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


def _warn_incomplete(path: str, metrics: dict) -> None:
    if metrics.get("incomplete_run"):
        _err(
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


def cmd_analyze(args: argparse.Namespace) -> int:
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
            _err(f"check failed: {c['name']}: expected {c['expected']}, measured {c['measured']}")
        return EXIT_CHECKS_FAILED if failed else EXIT_OK
    try:
        metrics = analyze(
            Path(paths[0]) if len(paths) == 1 else [Path(p) for p in paths],
            Path(args.out) if args.out else None,
            progress=stage_printer(not args.quiet and sys.stderr.isatty()),
            memory_limit=args.memory_limit,
        )
    except CaptureError as exc:
        _err(f"testbed analyze: {exc}")
        return EXIT_BAD_INPUT
    _warn_incomplete(args.path, metrics)
    _print_metrics(metrics)
    where = metrics.get("report_dir")
    if where:
        print(f"report: {Path(where) / 'report.html'}")
    multiplied = rerun_report(run_dir) if len(paths) == 1 and run_dir.is_dir() else None
    if multiplied is not None:  # a run folder that `testbed multiply` multiplied
        _print_multiply_report(multiplied)
        print(f"multiplied: {run_dir / 'multiply_report.md'} (also .json, .png)")
        if not multiplied["ok"]:
            return EXIT_CHECKS_FAILED
    problem = metrics.get("capture_problem")
    if problem:
        _err(
            f"{args.path}: damaged capture at byte offset {problem['offset']}: {problem['message']} "
            f"({problem['packets_read']:,} packets read before it)"
        )
        return EXIT_CHECKS_FAILED
    for u in metrics.get("undecoded_link_types") or []:
        _err(
            f"testbed analyze: {u['path']}: link type {u['link_type']} is not one the analysis decodes: "
            f"its {u['packets']:,} packets count in packets, bytes and rates, not in flows (0 flows "
            "from them); the analysis reads Ethernet, raw IP, Linux cooked (SLL, SLL2) and BSD loopback"
        )
    if metrics.get("undecoded_link_types"):
        return EXIT_CHECKS_FAILED
    if any(not c.get("ok") for c in metrics.get("checks", [])):
        return EXIT_CHECKS_FAILED
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    show = not args.quiet and sys.stderr.isatty()
    doc = export_captures(
        args.captures,
        args.parquet,
        replace=args.replace,
        compression=args.compression,
        flows=not args.no_flows,
        progress=(lambda msg: _err(f"export: {msg}")) if show else None,
    )
    for c in doc["captures"]:
        if c.get("problem"):
            p = c["problem"]
            _err(
                f"testbed export: warning: {c['path']}: damaged capture at byte offset {p['offset']}: "
                f"{p['message']} ({p['packets_read']:,} packets exported, those before it)"
            )
        flows = f", {c['flows']:,} flows" if "flows" in c else ""
        print(f"{c['capture']}: {c['packets']:,} packets{flows}")
    rate = doc["packets"] / doc["seconds"] if doc["seconds"] else 0
    print(
        f"exported to {args.parquet} in {doc['seconds']:.2f} s ({rate:,.0f} packets/s): "
        f"packets/ and {'flows/ ' if not args.no_flows else ''}partitioned date=/hour= (UTC), "
        f"schema {doc['schema_version']}"
    )
    return EXIT_OK


def cmd_export_benchmark(args: argparse.Namespace) -> int:
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


def cmd_results(args: argparse.Namespace) -> int:
    """`testbed results ACTION`: errors name the action (`testbed results compare: ...`)."""
    try:
        return args.action(args)
    except NtgError as exc:
        _err(f"testbed results {args.results_command}: {exc}")
        return exc.exit_status


def cmd_results_list(args: argparse.Namespace) -> int:
    cat = Catalog(args.dirs)
    frame, problems = cat.list()
    if args.json:
        _emit(frame, "json")
    elif frame.empty:
        print(f"no run folders under {', '.join(args.dirs)}")
    else:
        print("\n".join(list_lines(frame)))
    for p in problems:
        _err(p)
    if problems:
        _err(
            f"testbed results list: {len(problems)} run folder(s) cannot be read (above); the others are listed"
        )
        return EXIT_BAD_INPUT
    return EXIT_OK


def cmd_results_show(args: argparse.Namespace) -> int:
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


def _cell(v) -> str | None:
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def cmd_results_compare(args: argparse.Namespace) -> int:
    cat = Catalog(args.dirs)
    cmp = cat.compare(
        args.by, allow_mixed=args.allow_mixed, include_unfinished=args.include_unfinished
    )
    for note in cmp.notes:
        _err(f"testbed results compare: {note}")
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


def cmd_results_query(args: argparse.Namespace) -> int:
    cat = Catalog(args.dirs)
    frame, notes = cat.query(args.sql)
    for note in notes:
        _err(f"testbed results query: {note}")
    _emit(frame, "csv" if args.csv else "json" if args.json else None)
    return EXIT_OK


def cmd_cleanup(args: argparse.Namespace) -> int:
    if os.geteuid() != 0 and not args.dry_run:
        _err(
            "testbed cleanup: deleting namespaces and killing what a dead run left needs root: run it "
            "with sudo (or see what it would do with --dry-run)"
        )
        return EXIT_BAD_INPUT
    lines = cleanup(dry_run=args.dry_run)
    print("\n".join(lines) if lines else "nothing to clean up: no dead run left a mark")
    return EXIT_OK


def _duration(text: str) -> int:
    try:
        value = parse_duration_ns(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _byte_size(text: str) -> int:
    try:
        value = parse_size_bytes(text)
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


def cmd_translate_rules(args: argparse.Namespace) -> int:
    src, out = Path(args.input), Path(args.output)
    if src.is_dir():
        _err(
            f"testbed translate-rules: {src}: a directory, not a rule file; give one Snort 3 .rules file in it"
        )
        return EXIT_BAD_INPUT
    if not src.is_file():
        _err(
            f"testbed translate-rules: {src}: no such rule file; give the path of a Snort 3 .rules file"
        )
        return EXIT_BAD_INPUT
    if out.resolve() == src.resolve():
        _err(
            f"testbed translate-rules: {out}: the output would overwrite the input; choose another -o"
        )
        return EXIT_BAD_INPUT
    advice = "choose another -o, on a file system that can be written and has space"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        rep = translate_file(
            src, out, check=False, app_header=args.app_header
        )  # BadInput: not a rule file
    except OSError as exc:  # written whole or not at all: nothing half-written is left
        raise write_error(exc, out, advice) from None
    if rep.total == 0:
        out.unlink(missing_ok=True)
        _err(
            f"testbed translate-rules: {src}: no rules in it (only comments and blank lines); "
            "give a Snort 3 .rules file"
        )
        return EXIT_BAD_INPUT
    if not args.no_check:
        try:
            rep.load = check_load(out, out.with_name(out.name + ".suricata-check"))
        except SuricataMissing as exc:
            _err(f"testbed translate-rules: not checked: {exc}")
        except OSError as exc:  # its configuration beside the output
            raise write_error(exc, out.parent, advice + ", or give --no-check") from None
    for p in rep.problems:
        _err(f"{p} (skipped)")
    for tr in rep.untranslatable:
        _err(
            f"{tr.rule.where}: sid {tr.sid}: untranslatable: {tr.reason}"
            + (f" ({tr.detail})" if tr.detail else "")
        )
    print(
        f"{src}: {rep.total:,} rules; {len(rep.translated):,} translated, "
        f"{len(rep.untranslatable):,} untranslatable, {len(rep.problems):,} malformed"
    )
    for reason, n in rep.reasons().most_common():
        print(f"  untranslatable: {n:,} x {reason}")
    if rep.load is not None:
        print(
            f"suricata -T: {rep.load.rules_loaded if rep.load.rules_loaded is not None else '?'} rules loaded, "
            f"{len(rep.load.failures)} translated rules refused (exit status {rep.load.exit_code})"
        )
        for sid, lines in sorted(rep.load.failures.items()):
            _err(f"suricata refused sid {sid}: {' | '.join(lines)}")
    print(f"written: {out}")
    if args.report:
        try:
            with replacing(args.report) as tmp:
                tmp.write_text(report_json(rep))
        except OSError as exc:
            raise write_error(
                exc,
                args.report,
                "choose another --report, on a file system that can be "
                f"written and has space ({out} is written)",
            ) from None
        print(f"report: {args.report}")
    if rep.load is not None and (rep.load.exit_code != 0 or rep.load.failures):
        if not rep.load.failures:
            for line in rep.load.errors[:20]:
                _err(f"suricata: {line}")
        _err(
            f"testbed translate-rules: suricata -T failed on {out} (exit status {rep.load.exit_code}, "
            f"{len(rep.load.failures)} translated rules refused, as listed above): fix or remove those "
            "rules, or give --no-check to keep the output unchecked"
        )
        return EXIT_CHECKS_FAILED
    return EXIT_OK


def cmd_multiply(args: argparse.Namespace) -> int:
    src = Path(args.input)
    given = args.copies is not None or args.ranges is not None
    if given and (args.copies is None or args.ranges is None):
        _err(
            "testbed multiply: give both -T and --ranges (or neither, to take them from a scenario's multiply: section)"
        )
        return EXIT_BAD_INPUT
    if bool(args.home) != bool(args.home_ranges):
        _err(
            "testbed multiply: give --home (the home side's original CIDRs) together with --home-ranges "
            "(its shadow ranges), or neither"
        )
        return EXIT_BAD_INPUT
    params = None
    if given:
        params = MultiplyParams(
            copies=args.copies,
            ranges=tuple(args.ranges.split(",")),
            seed=args.seed,
            order=args.order,
            ports=args.ports,
            urls=Path(args.urls) if args.urls else None,
            mtu=args.mtu,
            original=tuple(args.original.split(",")) if args.original else (),
            max_flows=args.max_flows,
            max_seconds=args.max_seconds,
            upto_damage=args.upto_damage,
            home=tuple(args.home.split(",")) if args.home else (),
            home_ranges=tuple(args.home_ranges.split(",")) if args.home_ranges else (),
        )
    elif args.scenario:
        params = scenario_params(Path(args.scenario))
    if src.is_dir():
        doc = multiply_run_folder(src, params)
        where = f"{src} (multiplied.pcap, shadow_plan.csv, multiply.json)"
    else:
        if not args.output or params is None:
            _err(
                "testbed multiply: a capture needs -o OUT.pcap and the parameters (-T and --ranges, or --scenario)"
            )
            return EXIT_BAD_INPUT
        out = Path(args.output)
        plan = Path(args.plan) if args.plan else out.with_suffix(".plan.csv")
        doc = multiply_capture(src, out, plan, out.with_suffix(".multiply.json"), params)
        where = f"{out} (plan {plan})"
        if out.is_file():  # not /dev/null: the analysis of the output beside it
            doc["report"] = analyze_multiplied(
                src, out, plan, params.copies, out.parent, out.stem + ".report", params.urls is None
            )
    for line in doc.get("warning", "").splitlines():
        _err(line)
    passed = sum(doc["passthrough"].values())
    print(
        f"{doc['packets_in']:,} packets in, {doc['packets_out']:,} out ({doc['rewritten']:,} x "
        f"{doc['copies'] + 1}, {passed:,} passed through alone), {doc['flows']:,} flows: {where}"
    )
    report = doc.get("report")
    if report is not None:
        _print_multiply_report(report)
        return EXIT_OK if report["ok"] else EXIT_CHECKS_FAILED
    return EXIT_OK


def _print_multiply_report(r: dict) -> None:
    """The capture-counted lines of analysis.multiply's report."""
    spread = ", ".join(f"{k} x {v}" for k, v in r["shadow_flows_per_original"].items())
    print(
        f"from the captures: egress/ingress {r['packet_ratio']:.4f} ({r['egress_packets']:,} of "
        f"{r['expected_egress_packets']:,} expected), shadow flows per original: {spread or '-'}, "
        f"{r['shadow_directions_equal']:,} of {r['shadow_directions']:,} shadow flow directions equal to their "
        f"original in packets and bytes: {'as planned' if r['ok'] else 'NOT as planned'}"
    )
    if not r["ok"]:
        _err("testbed multiply: the output is not as planned (see the report's table)")


def cmd_spread(args: argparse.Namespace) -> int:
    """The split of a `testbed.spread` scenario for hosts started by Ansible (site.yml, tag
    multihost): one engine session per host and spread.json; or, with --collect, the hosts'
    fetched results summed and their captures merged (spread-collected.json)."""
    out = Path(args.out)
    if args.collect:
        doc = collect_hosts(out)
        missing = [h["name"] for h in doc["hosts"] if h.get("packets_sent") is None]
        for h in doc["hosts"]:
            print(
                f"{h['name']}: "
                + (
                    "no engine-summary.json fetched (the host failed or was not reached)"
                    if h["name"] in missing
                    else f"{h['packets_sent']:,} packets sent"
                )
                + (f", {h['captured']:,} captured" if h.get("captured") is not None else "")
            )
        skew = doc.get("start_skew_ms")
        print(
            f"sum: {doc['packets_sent'] if doc['packets_sent'] is not None else 'incomplete'}; start skew "
            f"{'n/a (needs every host captured)' if skew is None else format(skew, '.3f') + ' ms'}; "
            f"{out / 'spread-collected.json'}"
        )
        if missing:
            return EXIT_RUN_FAILED
        return EXIT_OK if all(c["ok"] for c in doc.get("checks", [])) else EXIT_CHECKS_FAILED
    loaded = load_scenario(args.scenario)
    tb = loaded.scenario.testbed
    if tb is None or tb.spread is None:
        _err(f"{args.scenario}: no `testbed.spread` section: nothing to split (docs/multihost.md)")
        return EXIT_BAD_INPUT
    seed = loaded.scenario.seed if args.seed is None else args.seed
    shares, info = spread_shares(loaded.scenario)
    info["seed"] = seed
    try:  # each file whole or not at all
        out.mkdir(parents=True, exist_ok=True)
        for title, share in shares.items():
            write_whole(out / f"{title}.ntg", compile_session(share, seed))
        write_whole(out / "spread.json", json.dumps(info, indent=2) + "\n")
    except OSError as exc:
        raise write_error(exc, out, "free some space, or choose another --out") from None
    for h in info["hosts"]:
        print(
            f"{h['name']}: {h['flow_count']} flows, {h['packets_planned']:,} packets -> {out / (h['name'] + '.ntg')}"
        )
    return EXIT_OK


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
    r.add_argument(
        "--out",
        default="results",
        metavar="DIR",
        help="where the run folder is created (default: ./results)",
    )
    r.add_argument("--seed", type=_seed, help="override the scenario's seed (0 .. 2^64-1)")
    r.add_argument("--no-analyze", action="store_true", help="stop after generating")
    r.add_argument(
        "--duration",
        type=_duration,
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
    r.set_defaults(func=cmd_run)

    a = sub.add_parser("analyze", help="turn a capture or a run folder into metrics and a report")
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
        type=_byte_size,
        metavar="SIZE",
        help="memory for the packets being counted, e.g. 512M (K, M, G: powers of "
        "1024); the capture is read in chunks that fit it (default 256M); the "
        "results do not depend on it",
    )
    a.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    a.set_defaults(func=cmd_analyze)

    e = sub.add_parser(
        "export",
        help="captures as per-packet and per-flow Parquet tables, partitioned by "
        "UTC hour (Hive-style date=/hour= folders; docs/run-tables.md)",
    )
    e.add_argument("captures", nargs="+", metavar="CAPTURE", help="pcap or pcapng files")
    e.add_argument(
        "--parquet",
        required=True,
        metavar="DIR",
        help="the export folder: new or empty (see --replace)",
    )
    e.add_argument(
        "--replace",
        action="store_true",
        help="replace the earlier export in DIR (only a folder holding an export.json)",
    )
    e.add_argument(
        "--compression",
        choices=COMPRESSIONS,
        default=DEFAULT_COMPRESSION,
        help=f"Parquet compression (default {DEFAULT_COMPRESSION}; zstd: half the size, slower)",
    )
    e.add_argument("--no-flows", action="store_true", help="the packet table only")
    e.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    e.set_defaults(func=cmd_export)

    b = sub.add_parser(
        "export-benchmark",
        help="write completed, analysed runs as one pytest-benchmark JSON "
        "file (rates and loss as times, lower is better) for `pytest-benchmark compare`",
    )
    b.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders of one commit")
    b.add_argument(
        "-o", "--output", required=True, metavar="FILE.json", help="the JSON file to write"
    )
    b.set_defaults(func=cmd_export_benchmark)

    res = sub.add_parser(
        "results",
        help="the results catalogue: list, show, compare and query analysed run "
        "folders (DuckDB over their run tables)",
    )
    rs = res.add_subparsers(dest="results_command", required=True, metavar="ACTION")
    res.set_defaults(func=cmd_results)
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
    rl.set_defaults(action=cmd_results_list)
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
    rw.set_defaults(action=cmd_results_show)
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
    rc.set_defaults(action=cmd_results_compare)
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
    rq.set_defaults(action=cmd_results_query)

    k = sub.add_parser(
        "cleanup",
        help="remove what live runs that died (kill -9) left: their namespaces "
        "and processes; mark their manifests `abandoned`",
    )
    k.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    k.set_defaults(func=cmd_cleanup)

    t = sub.add_parser(
        "translate-rules",
        help="rewrite Snort 3 rules in Suricata 7 syntax and check that Suricata loads them",
    )
    t.add_argument("input", metavar="IN.rules", help="Snort 3 rule file")
    t.add_argument(
        "-o", "--output", required=True, metavar="OUT.rules", help="the Suricata rule file to write"
    )
    t.add_argument(
        "--report",
        metavar="FILE",
        help="also write the counts and every untranslatable rule as JSON",
    )
    t.add_argument("--no-check", action="store_true", help="do not run `suricata -T` on the output")
    t.add_argument(
        "--app-header",
        action="store_true",
        help="a rule with one service Suricata parses gets it as header protocol (alert smtp ...)",
    )
    t.set_defaults(func=cmd_translate_rules)

    c = sub.add_parser(
        "ids-coverage", help="attack traffic from IDS rules and the IDS's detection coverage"
    )
    c.add_argument(
        "rules",
        nargs="+",
        metavar="RULES",
        help="rule files (Suricata, Snort 2.9 or Snort 3 syntax)",
    )
    c.add_argument(
        "--ids",
        default="suricata",
        choices=["suricata"],
        help="the IDS to measure (default: suricata)",
    )
    c.add_argument(
        "--min",
        type=_fraction,
        metavar="FRACTION",
        help="exit 3 when the coverage is below FRACTION (0..1): the CI gate; rules the IDS "
        "refuses to load count as missed",
    )
    c.add_argument(
        "--exclude-unloadable",
        action="store_true",
        help="leave rules the IDS refuses to load out of the coverage (they are still reported)",
    )
    c.add_argument(
        "--ipv6",
        action="store_true",
        help="every attack session over IPv6 (2001:db8::/32; default: IPv4, IPv6 for rules that name it)",
    )
    c.add_argument(
        "--out", metavar="DIR", help="output folder (default: results/<time>-ids-coverage)"
    )
    c.add_argument(
        "--mix",
        type=_fractions,
        default=(),
        metavar="F1,F2",
        help="also measure with the attacks mixed into benign load at these packet fractions, e.g. 0.01,0.1",
    )
    c.add_argument(
        "--baseline",
        metavar="OLD.json",
        help="compare per sid with an earlier run's coverage.json; exit 3 when a sid that "
        "alerted there does not now (unless --allow lists it)",
    )
    c.add_argument(
        "--allow",
        metavar="ALLOW_FILE",
        help="with --baseline or several DUTs: sids allowed to stop alerting, one a line "
        "(optionally with the reason after it; # comments); they are still reported",
    )
    c.add_argument(
        "--suricata",
        action="append",
        metavar="[NAME=]PATH",
        help="the Suricata binary to measure (default: suricata on PATH); give it twice or more "
        "to compare DUTs: the same sessions run through each, each DUT compared per sid "
        "with the first, exit 3 when a sid it alerted for does not alert with another",
    )
    c.add_argument(
        "--suricata-config",
        action="append",
        metavar="[NAME=]FILE",
        help="a suricata.yaml to use instead of ours (HOME_NET, EXTERNAL_NET and checksum "
        "checks are still set to the testbed's); twice or more: DUTs compared as with "
        "--suricata (as many of each pair up in order, one goes with all of the other)",
    )
    c.add_argument(
        "--multiply",
        type=_copies_list,
        default=(),
        metavar="T1,T2",
        help="also run the attack sessions multiplied T times (each session and T shadow sessions, "
        "seed 003's multiplier) and report per sid whether the alerts are (T+1)x; e.g. 3,10",
    )
    c.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    c.set_defaults(func=cmd_ids_coverage)

    m = sub.add_parser(
        "multiply",
        help="copy every packet of a capture T times with shadow addresses "
        "(seed 003's traffic multiplier, docs/multiplier.md)",
    )
    m.add_argument(
        "input",
        metavar="IN",
        help="a pcap/pcapng, or a run folder (its capture.pcap; parameters "
        "from its scenario's multiply: section unless given)",
    )
    m.add_argument(
        "-o", "--output", metavar="OUT", help="the multiplied capture (for a capture IN)"
    )
    m.add_argument(
        "-T", "--copies", type=int, metavar="N", help="shadow copies of every packet (1..1024)"
    )
    m.add_argument("--ranges", metavar="CIDR,...", help="shadow address ranges, IPv4 and/or IPv6")
    m.add_argument("--original", metavar="CIDR,...", help="the originals' own ranges (checked)")
    m.add_argument(
        "--home",
        metavar="CIDR,...",
        help="home side: originals in these CIDRs take their shadows "
        "from --home-ranges, the others from --ranges",
    )
    m.add_argument(
        "--home-ranges", metavar="CIDR,...", help="the home side's shadow ranges (with --home)"
    )
    m.add_argument("--seed", type=int, default=1, help="seed of the plan (default 1)")
    m.add_argument("--order", choices=("spfo", "interleaved"), default="spfo")
    m.add_argument("--ports", choices=("keep", "shift"), default="keep")
    m.add_argument(
        "--urls", metavar="FILE", help="request targets, one a line, substituted per copy"
    )
    m.add_argument(
        "--mtu", type=int, default=1500, help="largest IP packet a substituted request may become"
    )
    m.add_argument(
        "--plan", metavar="FILE", help="the shadow plan, .csv or .json (default OUT.plan.csv)"
    )
    m.add_argument(
        "--scenario",
        metavar="FILE",
        help="take the parameters from this scenario's multiply: section",
    )
    m.add_argument("--max-flows", type=int, help="flow-table bound (default: half the free memory)")
    m.add_argument("--max-seconds", type=int, help="refuse a run estimated longer (default 3600)")
    m.add_argument(
        "--upto-damage", action="store_true", help="multiply a damaged capture up to the damage"
    )
    m.set_defaults(func=cmd_multiply)

    d = sub.add_parser(
        "detect",
        help="run a capture (or a run folder) and rules through Suricata and report the alerts",
    )
    d.add_argument(
        "paths",
        nargs="+",
        metavar="PCAP|RUN_DIR",
        help="capture files (merged by time when several), or one run folder (its capture.pcap)",
    )
    d.add_argument(
        "--rules",
        nargs="+",
        metavar="R",
        help="rule files (a run folder with attacks brings its own)",
    )
    d.add_argument(
        "--home-net",
        metavar="CIDRS",
        help="HOME_NET: addresses or CIDR blocks separated by commas, or any (default: any for a "
        "capture, the testbed's own for a run folder)",
    )
    d.add_argument(
        "--external-net",
        metavar="CIDRS",
        help="EXTERNAL_NET (default: !$HOME_NET, or any when HOME_NET is any)",
    )
    d.add_argument(
        "--checksum-validation",
        choices=CHECKSUM_MODES,
        default="auto",
        help="all: check every packet; none: check none (offloaded checksums); auto (default): "
        "Suricata's own: stop checking when over 10%% of the first 1,000 packets are bad",
    )
    d.add_argument(
        "--suricata-config", metavar="FILE", help="a suricata.yaml to use instead of ours"
    )
    d.add_argument(
        "--midstream",
        action="store_true",
        help="stream.midstream: pick up TCP sessions whose handshake the capture does not have "
        "(as suricata-verify cases with `stream.midstream=true` do)",
    )
    d.add_argument(
        "--expect",
        metavar="EXPECT.yaml",
        help="checks on the EVE events (suricata-verify's shape); exit 3 when one fails",
    )
    d.add_argument(
        "--out",
        metavar="DIR",
        help="output folder (default: RUN_DIR/detect, or results/<time>-detect)",
    )
    d.add_argument(
        "--format",
        type=_formats,
        default=detect.FORMATS,
        metavar="md,html,json",
        help="which reports to write (default: all three; eve.json is always kept)",
    )
    d.add_argument(
        "--top",
        type=_count,
        default=detect.TOP_FLOWS,
        metavar="N",
        help="flows listed per sid (default: %(default)s; the report counts them all)",
    )
    d.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    d.set_defaults(func=cmd_detect)

    hs = sub.add_parser(
        "hash-study",
        help="seed 002's flow-ID hash study: collisions against the birthday "
        "bound, spread and speed of every flow-key hash (docs/hash-study.md)",
    )
    hs.add_argument(
        "--hashes",
        type=_names,
        metavar="A,B",
        help="hashes to study (default: every distinct one; an unknown name lists the known)",
    )
    hs.add_argument(
        "--flows",
        type=_flow_counts,
        default=list(DEFAULT_FLOWS),
        metavar="N,N",
        help="flow counts, K and M allowed (default: 250K,500K,750K,1M; at most 16M)",
    )
    hs.add_argument(
        "--prefixes",
        type=_ints,
        default=sorted(PREFIXES),
        metavar="8,16,24",
        help="source ranges by prefix length (default: %(default)s)",
    )
    hs.add_argument(
        "--keys",
        type=_names,
        default=["flowid"],
        metavar=",".join(KEYS),
        help="what is hashed: seed 002's 37-byte FlowID and/or the engine's 13-byte "
        "5-tuple (default: flowid)",
    )
    hs.add_argument(
        "--repeats",
        type=_count_upto(HASH_MAX_REPEATS),
        default=3,
        help=f"draws of the destinations (default: 3, as seed 002; at most {HASH_MAX_REPEATS})",
    )
    hs.add_argument(
        "--seed", type=_seed, default=2, help="random seed of the destinations (default: 2)"
    )
    hs.add_argument(
        "--out", metavar="DIR", help="output folder (default: results/<time>-hash-study)"
    )
    hs.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    hs.set_defaults(func=cmd_hash_study)

    ms = sub.add_parser(
        "match-sweep",
        help="seed 000's flow-matching grid with `flowengine match`: "
        "Parquet rows, Figs. 2-5 and Table 1 beside the seed's (docs/flow-match.md)",
    )
    ms.add_argument(
        "--structs",
        type=_names,
        default=DEFAULT_STRUCTS,
        metavar="A,B",
        help="chain, tree, linear, robin, cuckoo, linear16 (IPv4 feeds only) (default: chain,tree)",
    )
    ms.add_argument(
        "--hashes",
        type=_names,
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
        type=_names,
        default=DEFAULT_FEEDS,
        metavar="det,uniform:N,pcap:FILE",
        help="feeds of flowengine match (default: det,uniform:1000000)",
    )
    ms.add_argument(
        "--packets",
        type=_count_upto(MATCH_MAX_PACKETS),
        default=1_000_000,
        help="packets a cell (default: 10^6)",
    )
    ms.add_argument(
        "--repeats",
        type=_count_upto(MATCH_MAX_CELLS),
        default=1,
        help=f"runs a cell (default: 1; at most {MATCH_MAX_CELLS:,} cells in all)",
    )
    ms.add_argument(
        "--cell-timeout",
        type=_seconds,
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
    ms.set_defaults(func=cmd_match_sweep)

    sp = sub.add_parser(
        "spread",
        help="several generator hosts: one engine session per host of a "
        "`testbed.spread` scenario (for site.yml's multihost play), or --collect their results",
    )
    sp.add_argument("scenario", nargs="?", help="the scenario (not with --collect)")
    sp.add_argument(
        "--out",
        required=True,
        help="folder of the sessions and spread.json (with --collect: "
        "the folder the play fetched the hosts' results into)",
    )
    sp.add_argument("--seed", type=_seed, help="default: the scenario's (0 .. 2^64-1)")
    sp.add_argument(
        "--collect",
        action="store_true",
        help="sum the fetched hosts' counters, merge their captures",
    )
    sp.set_defaults(func=cmd_spread)
    return p


def _names(text: str) -> list[str]:
    values = [t.strip() for t in text.split(",") if t.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"give names separated by commas (got {text!r})")
    return values


def _ints(text: str) -> list[int]:
    try:
        return [int(t) for t in _names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"give integers separated by commas (got {text!r})"
        ) from None


def _flow_counts(text: str) -> list[int]:
    """ "250K,1M,1500000" -> [250000, 1000000, 1500000] (the study refuses 0 and too many)."""
    out = []
    for t in _names(text):
        scale = {"K": 1_000, "M": 1_000_000}.get(t[-1].upper(), 1)
        try:
            out.append(int(float(t[:-1] if scale > 1 else t) * scale))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a flow count: {t!r} (e.g. 250K, 1M, 2000000)"
            ) from None
    return out


def _count(text: str, maximum: int | None = None) -> int:
    digits = text.strip().removeprefix("+")
    if digits.isascii() and digits.isdigit() and len(digits) > 19:  # also past int()'s 4,300 digits
        raise argparse.ArgumentTypeError(
            f"too large: a number of {len(digits):,} digits"
            + (f"; at most {maximum:,}" if maximum is not None else "")
        )
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text[:40]!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {value})")
    if maximum is not None and value > maximum:
        raise argparse.ArgumentTypeError(f"too large: at most {maximum:,} (got {value:,})")
    return value


def _count_upto(maximum: int):
    """An argparse type: a count 0..MAXIMUM (the command refuses 0 itself where it must)."""

    def count(text: str) -> int:
        return _count(text, maximum)

    return count


MAX_SECONDS = 1_000_000  # about 11.6 days: more than any wait needs (poll() takes at most 2^31 ms)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds > 0 and at most {MAX_SECONDS:,} (got {text[:40]})"
        )
    return value


def _formats(text: str) -> tuple[str, ...]:
    values = tuple(t.strip() for t in text.split(",") if t.strip())
    wrong = [v for v in values if v not in detect.FORMATS]
    if wrong or not values:
        raise argparse.ArgumentTypeError(
            f"formats are md, html and json, separated by commas (got {text!r})"
        )
    return values


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (got {value})")
    return value


def _fractions(text: str) -> tuple[float, ...]:
    values = tuple(_fraction(t) for t in text.split(",") if t.strip())
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("mix fractions must be > 0")
    return values


def _copies_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give numbers of copies separated by commas, e.g. 3,10"
        ) from None
    if not values or any(not 1 <= v <= MAX_COPIES for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each number of copies must be 1..{MAX_COPIES}")
    return values


def cmd_ids_coverage(args: argparse.Namespace) -> int:
    for f in args.rules:
        if not Path(f).is_file():
            _err(f"testbed ids-coverage: {f}: no such rule file; give paths of .rules files")
            return EXIT_BAD_INPUT
    # read before the run: bad DUTs, a bad baseline or allow file end the command before any work
    duts = make_duts(args.suricata, args.suricata_config)
    several = len(duts) > 1
    if args.allow is not None and args.baseline is None and not several:
        _err(
            "testbed ids-coverage: --allow needs --baseline or several DUTs (the allow file excuses sids "
            "that stopped alerting since the baseline run, or with a DUT against the first)"
        )
        return EXIT_BAD_INPUT
    baseline = load_baseline(args.baseline, args.allow) if args.baseline is not None else None
    allowed = baseline.allowed if baseline else (load_allow(Path(args.allow)) if args.allow else {})
    out = (
        Path(args.out)
        if args.out
        else Path("results") / (datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-ids-coverage")
    )
    show = not args.quiet
    try:
        out.mkdir(parents=True, exist_ok=True)
        result = run_coverage_duts(
            args.rules,
            out,
            duts,
            ids=args.ids,
            mixes=args.mix,
            ip_version=6 if args.ipv6 else 4,
            exclude_unloadable=args.exclude_unloadable,
            baseline=baseline,
            allowed=allowed,
            allow_path=args.allow,
            multiply=args.multiply,
            progress=(lambda msg: _err(f"ids-coverage: {msg}")) if show else None,
        )
    except OSError as exc:
        raise write_error(exc, out, "free some space, or choose another --out") from None
    docs = result["duts"]
    problems = docs[0]["problems"]
    for problem in problems[:50]:
        _err(problem)
    if len(problems) > 50:
        _err(f"... and {len(problems) - 50} more malformed rules (coverage.md lists them)")
    for doc in docs:
        who = f" ({doc['dut']['name']})" if several else ""
        for line in doc["suricata_errors"][:20]:
            _err(f"suricata{who}: {line}")
        refused = [r for r in doc["rows"] if r["state"] == "not loaded"]
        if refused:
            how = (
                "left out of the coverage"
                if args.exclude_unloadable
                else "counted as missed (--exclude-unloadable leaves them out)"
            )
            _err(
                f"testbed ids-coverage: {len(refused)} rules {args.ids}{who} refused to load, {how}:"
            )
            for r in refused[:50]:
                _err(f"{r['where']}: sid {r['sid']}: {r['reason']}")
    for doc in docs:
        if several:
            print(f"== {doc['dut']['name']} ==")
        for line in summary_lines(doc):
            print(line)
    if several:
        print(
            f"report: {out / 'comparison.html'} (also comparison.md, comparison.json; each DUT's "
            f"coverage.html/md/json in {', '.join(str(out / d.name) for d in duts)}); table: "
            f"{out / 'tables' / 'coverage.parquet'}"
        )
    else:
        print(
            f"report: {out / 'coverage.html'} (also coverage.md, coverage.json, tables/coverage.parquet)"
        )
    status = EXIT_OK
    for doc in docs:
        for line in sid_change_lines(doc, several):
            _err(line)
    for line in gate_lines(result):
        _err(
            f"testbed ids-coverage: {line}; fix them, or list them in an --allow file with the reason"
        )
    if result["blocking"]:
        status = EXIT_CHECKS_FAILED
    if args.min is not None:
        for doc in docs:
            if doc["coverage"] < args.min:
                who = f" of {doc['dut']['name']}" if several else ""
                _err(
                    f"testbed ids-coverage: coverage{who} {doc['coverage']:.3f} is below --min {args.min:g}"
                )
                status = EXIT_CHECKS_FAILED
    return status


def cmd_detect(args: argparse.Namespace) -> int:
    inputs = detect.resolve_inputs(args.paths, args.rules)
    home = detect.address_group(args.home_net, "--home-net") if args.home_net else None
    external = (
        detect.address_group(args.external_net, "--external-net") if args.external_net else None
    )
    if args.suricata_config:
        check_config(args.suricata_config)
    try:
        expect = load_expect(args.expect) if args.expect else None
    except ExpectError as exc:
        for problem in exc.problems:
            _err(problem)
        return EXIT_BAD_INPUT
    if args.out:
        out = Path(args.out)
    elif inputs.run_dir is not None:
        out = inputs.run_dir / "detect"
    else:
        out = Path("results") / (datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-detect")
    try:  # every file of ours is written whole or not at all
        out.mkdir(parents=True, exist_ok=True)
        doc = detect.run_detect(
            inputs,
            out,
            home_net=home,
            external_net=external,
            checksum=args.checksum_validation,
            config=args.suricata_config,
            expect=expect,
            expect_path=args.expect,
            formats=args.format,
            top=args.top,
            midstream=args.midstream,
            progress=None if args.quiet else (lambda msg: _err(f"detect: {msg}")),
        )
    except OSError as exc:
        raise write_error(
            exc, out, "choose another --out, on a file system that can be written and has space"
        ) from None
    for e in doc["load_errors"]:
        _err(
            f"{e['file']}:{e['line']}: suricata refused sid {e['sid']}: {e['reason'] or e['suricata']}"
        )
    for line in doc["suricata_errors"][:20]:
        _err(f"suricata: {line}")
    for line in detect.summary_lines(doc):
        print(line)
    for r in doc["sids"][:50]:
        flows = ", ".join(detect.flow_text(f) for f in r["top_flows"][:2])
        more = f" (+{r['flows'] - 2} more flows)" if r["flows"] > 2 else ""
        print(
            f"  sid {r['sid']}: {r['alerts']:,} alerts, {r['first_utc']} .. {r['last_utc']}: {r['msg']} [{flows}{more}]"
        )
    if len(doc["sids"]) > 50:
        print(f"  ... and {len(doc['sids']) - 50} more sids (the report lists them all)")
    written = [f"detect.{f}" for f in args.format]
    print(f"report: {out} ({', '.join(written + ['eve.json'])})")
    failed = [c for c in (doc["expect"] or {}).get("checks", []) if not c["ok"]]
    for c in failed:
        _err(f"{args.expect}: {c['text']}")
    return EXIT_CHECKS_FAILED if failed else EXIT_OK


def cmd_hash_study(args: argparse.Namespace) -> int:
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
    out = (
        Path(args.out)
        if args.out
        else Path("results") / (datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-hash-study")
    )
    show = not args.quiet and sys.stderr.isatty()
    study = run_study(req, progress=(lambda msg: _err(f"hash-study: {msg}")) if show else None)
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


def cmd_match_sweep(args: argparse.Namespace) -> int:
    req = SweepRequest(
        structs=args.structs,
        hashes=args.hashes,
        sizes=parse_sizes(args.sizes),
        feeds=args.feeds,
        packets=args.packets,
        repeats=args.repeats,
        cell_timeout_s=args.cell_timeout,
    )
    out = (
        Path(args.out)
        if args.out
        else Path("results") / (datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-match-sweep")
    )
    progress = None if args.quiet else (lambda msg: _err(f"match-sweep: {msg}"))
    if args.resume and not args.out:
        _err("testbed match-sweep: --resume needs --out DIR, the folder of the sweep to go on with")
        return EXIT_BAD_INPUT
    try:
        rows = run_sweep(req, out, progress=progress, resume=args.resume, replace=args.replace)
        paths = write_match_sweep(rows, out, request=vars(req), machine=hashstudy_machine())
    except OSError as exc:  # the rows measured until then are kept whole (--resume goes on)
        raise write_error(exc, out, "free some space, or choose another --out") from None
    print(
        f"wrote {paths['report']} (and rows.parquet, metrics.json, {len(rows)} rows, the figures)"
    )
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with Interrupts(raising=True):  # Ctrl-C, SIGTERM, SIGHUP unwind; `run` polls its own flag
            return args.func(args)
    except Interrupted as exc:
        _err(f"testbed {args.command}: stopped by {exc.name}")
        return EXIT_INTERRUPTED
    except ScenarioError as exc:  # a scenario or topology: one FILE:LINE problem a line
        for problem in exc.problems:
            _err(problem)
        return exc.exit_status
    except NtgError as exc:  # every error of ours says what to do and carries its exit status
        _err(f"testbed {args.command}: {exc}")
        return exc.exit_status
    except BrokenPipeError:  # `testbed results compare --json | head`: the reader has gone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout at exit
        return 128 + signal.SIGPIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
