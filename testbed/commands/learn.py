"""`testbed learn INPUT... -o SCENARIO.yaml`: a scenario of two-way sessions learned from a
capture (pcap/pcapng), nfdump files or Parquet flow tables (docs/learn.md)."""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from analysis.capture import CaptureError
from analysis.fidelity import (
    FidelityResult,
    compare_traces,
    metric_names,
    pool_traces,
    read_trace,
    write_report,
)
from analysis.learn import (
    MAX_CLASSES,
    MAX_SCALE,
    MAX_TIERS,
    LearnOptions,
    LearnResult,
    learn_capture,
)
from ntgcore.errors import EXIT_CHECKS_FAILED, EXIT_OK, GeneratorError
from ntgcore.files import write_error, write_whole
from ntgcore.native_tools import executable
from ntgcore.proc import Process
from ntgcore.registry import GENERATORS
from ntgcore.scenario import parse_scenario
from ntgcore.units import format_ns

from ..meters.collector.nfdump import read_file
from . import add_parser, argtypes
from .compare_traffic import print_table, suricata_app_protocols
from .output import err

# --check: the learned model and the baseline are each played as REPLICAS independent runs (seeds
# seed, seed + 1, ...) of the scenario as learned, until they hold CHECK_SESSIONS sessions
# together (one run when the input has that many), and their flows are pooled: the metrics then
# compare the model's distribution with the original, not one small draw of it.
CHECK_SESSIONS = 20_000
MAX_REPLICAS = 256
ENGINE_TIMEOUT_S = 600.0
SURICATA_REPLICAS = 8  # --suricata: replicas Suricata reads (its counts: their mean)
# A learned metric within tie_of(flows) of the baseline's counts as level with it, not worse: the
# input is one sample of its traffic, and a distance to it is only known to within that sample's
# own noise, about 0.5 / sqrt(flows) for a distribution over [0, 1] (the EMD between two samples
# of n draws each of one distribution falls like 1/sqrt(n)); never less than TIE.
TIE = 0.01


def tie_of(flows: int) -> float:
    """How far apart two models' metrics must be to say one is closer to an input of FLOWS
    flows."""
    return max(TIE, 0.5 / math.sqrt(max(flows, 1)))


NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text[:40]!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_SCALE):
        raise argparse.ArgumentTypeError(
            f"must be above 0 and at most {MAX_SCALE:g} (got {text[:40]})"
        )
    return value


def scenario_name(text: str) -> str:
    if not NAME.match(text):
        raise argparse.ArgumentTypeError(
            "letters, digits, `_`, `.` and `-`, starting with a letter or digit, at most 64"
        )
    return text


def register(subparsers) -> None:
    p = add_parser(subparsers, "learn")
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="capture files (pcap, pcapng: one trace, in the order given), or nfdump files "
        "(nfcapd.*), or Parquet flow tables (`testbed export --parquet` flows, a run folder's "
        "tables/flows.parquet, or a folder of them); recognised by their content",
    )
    p.add_argument("-o", "--output", required=True, metavar="SCENARIO.yaml", help="the scenario")
    p.add_argument(
        "--duration",
        type=argtypes.duration,
        metavar="D",
        help="how long the learned traffic lasts, e.g. 60s (default: as long as the input); "
        "the session count follows the input's session rate",
    )
    p.add_argument(
        "--rate-scale",
        type=scale,
        default=1.0,
        metavar="X",
        help="sessions per second times X (arrivals X times closer), default 1",
    )
    p.add_argument(
        "--hosts-scale",
        type=scale,
        default=1.0,
        metavar="X",
        help="hosts per class times X: below 1 keeps the busiest, above 1 adds copies in "
        "other synthetic prefixes; default 1",
    )
    p.add_argument(
        "--classes",
        type=argtypes.count_upto(MAX_CLASSES),
        default=12,
        metavar="N",
        help="application classes (protocol, server port) fitted apart, the largest by "
        "sessions; the rest is one `other` class per protocol (default 12)",
    )
    p.add_argument(
        "--tiers",
        type=argtypes.count_upto(MAX_TIERS),
        default=4,
        metavar="N",
        help="a TCP class's sessions (of one close: FIN, RST, none) in up to N entries by "
        "duration, each fitted apart (default 4; 1: none)",
    )
    p.add_argument("--seed", type=argtypes.seed, default=1, help="the scenario's seed (default 1)")
    p.add_argument(
        "--name", type=scenario_name, help="the scenario's name (default: learned-INPUT)"
    )
    p.add_argument(
        "--baseline",
        action="store_true",
        help="the Harpoon-style baseline instead: one class, every field from its own "
        "marginal over all sessions, independently",
    )
    p.add_argument(
        "--drop-jumps",
        action="store_true",
        help="leave the input's clock jumps (gaps of over a minute and 1000 median gaps "
        "between session starts: a capture pieced together) out of the timeline, each "
        "replaced by the median gap (default: kept as pauses, so the scenario lasts as long "
        "as the input: years, maybe)",
    )
    p.add_argument(
        "--memory-limit",
        type=argtypes.byte_size,
        metavar="SIZE",
        help="memory for the packets being read, e.g. 512M (default 256M); the capture is "
        "read in chunks that fit it; the result does not depend on it",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="also play the learned scenario and the baseline with the engine and compare both "
        "with the input (docs/fidelity.md): the report goes to SCENARIO.fidelity/ (or "
        "--report); exit 3 when the learned traffic misses a target or is farther from the "
        "input than the baseline on a metric",
    )
    p.add_argument("--report", metavar="DIR", help="--check's report folder")
    p.add_argument(
        "--suricata",
        action="store_true",
        help="with --check: also compare Suricata's app-layer protocol counts (slow)",
    )
    p.add_argument("--json", action="store_true", help="print what was fitted as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.classes < 1:
        err("testbed learn: --classes must be at least 1")
        return 2
    show = not args.quiet and sys.stderr.isatty()
    options = LearnOptions(
        duration_ns=args.duration,
        rate_scale=args.rate_scale,
        hosts_scale=args.hosts_scale,
        classes=args.classes,
        seed=args.seed,
        name=args.name,
        baseline=args.baseline,
        drop_jumps=args.drop_jumps,
        tiers=args.tiers,
        memory_limit=args.memory_limit,
        progress=(lambda line: err(f"testbed learn: {line}")) if show else None,
        read_nfdump=read_file,
    )
    result = learn_capture(args.inputs, options)
    try:
        write_whole(args.output, result.yaml_text)
    except OSError as exc:
        raise write_error(exc, args.output, "choose another -o") from None
    for w in result.report["warnings"]:
        err(f"testbed learn: warning: {w}")
    if args.json:
        print(json.dumps(result.report, indent=2, default=str))
        return EXIT_OK
    r = result.report
    read = r["read"]
    source = (
        f"{read['packets']:,} packets ({read['packets_used']:,} TCP/UDP)"
        if "packets" in read
        else f"{read['records']:,} flow records"
    )
    print(f"learned {r['sessions']:,} sessions from {source}, {format_ns(max(r['span_ns'], 1))}")
    print(f"{'class':<18} {'sessions':>9} {'share':>7} {'count':>9} {'arrival':>12} {'rtt':>10}")
    for c in r["classes"]:
        print(
            f"{c['name']:<18} {c['sessions']:>9,} {c['share']:>7.1%} {c['count']:>9,} "
            f"{c['arrival']:>12} {format_ns(max(c['rtt_ns'], 1)):>10}"
        )
    print(f"scenario: {args.output}")
    if not args.check:
        return EXIT_OK
    report = Path(args.report) if args.report else Path(args.output + ".fidelity")
    return check(args.inputs, result, report, suricata=args.suricata, show=show)


def replicas_for(sessions: int) -> int:
    """How many independent runs of the learned scenario --check pools."""
    return max(1, min(MAX_REPLICAS, -(-CHECK_SESSIONS // max(1, sessions))))


def play(
    result: LearnResult, replicas: int, work: Path, note: Callable[[str], None]
) -> tuple[list[Path], int]:
    """The learned scenario run REPLICAS times offline by the engine (seed, seed + 1, ...): one
    capture each in WORK, and the sessions they hold."""
    scenario = parse_scenario(result.yaml_text, "<learned>")
    compile_session = GENERATORS.get("flowengine").session
    engine = executable("flowengine")
    captures = []
    sessions = 0
    for i in range(replicas):
        session = work / f"replica-{i}.ntg"
        capture = work / f"replica-{i}.pcap"
        session.write_text(compile_session(scenario, scenario.seed + i))
        proc = Process("flowengine", [str(engine), "gen", str(session), "-o", str(capture),
                                      "--summary", str(work / "summary.json")],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE).start()  # fmt: skip
        out = proc.communicate(timeout=ENGINE_TIMEOUT_S)
        if out is None or proc.popen is None or proc.popen.returncode != 0:
            why = "timed out" if out is None else out[1].decode(errors="replace").strip()
            raise GeneratorError(f"flowengine on the learned scenario (replica {i}): {why}")
        sessions += json.loads((work / "summary.json").read_text())["flows_started"]
        captures.append(capture)
        session.unlink()
        if replicas > 1 and (i + 1) % 32 == 0:
            note(f"{i + 1} of {replicas} replicas played")
    return captures, sessions


def check(inputs: list[str], learned: LearnResult, out: Path, *, suricata: bool, show: bool) -> int:
    """`--check`: the learned model and the Harpoon-style baseline against the input."""

    def note(line: str) -> None:
        if show:
            err(f"testbed learn --check: {line}")

    try:
        original = read_trace(inputs)
    except CaptureError as exc:
        err(f"testbed learn --check: {exc}")
        return 2
    models = {"learned": learned, "baseline": learned.baseline()}
    replicas = replicas_for(int(learned.report["sessions"]))
    address_map = learned.address_map()
    results: dict[str, FidelityResult] = {}
    with tempfile.TemporaryDirectory(prefix="ntg-learn-check-") as tmp:
        for name, model in models.items():
            work = Path(tmp) / name
            work.mkdir()
            note(f"{name}: {replicas} replica(s) of the scenario through the engine")
            captures, sessions = play(model, replicas, work, note)
            trace = pool_traces(
                [read_trace(c) for c in captures], f"{name} ({replicas} x, {sessions:,} sessions)"
            )
            r = compare_traces(original, trace, address_map)
            per_replica(r, replicas)
            if suricata:
                used = captures[:SURICATA_REPLICAS]
                note(f"{name}: Suricata on {len(used)} replica(s) and the input")
                counts = _app_protocols(used)
                r.downstream["app_proto"] = {
                    "original": _app_protocols([Path(p) for p in inputs]),
                    "generated": {k: round(v / len(used), 1) for k, v in counts.items()},
                }
            results[name] = r
    files = write_report(out, results)
    print_table(results)
    print(f"fidelity report: {files['report.html']}")
    problems = [f"learned misses the target on {m}" for m in results["learned"].missed()]
    tie = tie_of(len(original.flows))
    problems += [
        f"learned is farther from the input than the baseline on {m} "
        f"({results['learned'].metrics[m]:.4f} against {results['baseline'].metrics[m]:.4f}, "
        f"more than {tie:.3f}, the input's own noise)"
        for m in worse_than_baseline(results["learned"], results["baseline"], tie)
    ]
    for p in problems:
        err(f"testbed learn --check: {p}")
    return EXIT_CHECKS_FAILED if problems else EXIT_OK


def per_replica(result: FidelityResult, replicas: int) -> None:
    """The generated side's downstream counts as the mean of one replica (comparable with the
    input's): the metrics compare distributions of the pooled replicas, the counts one run."""
    if replicas == 1:
        return
    for key in ("flows", "packets", "bytes"):
        d = result.downstream[key]
        d["generated"] = round(d["generated"] / replicas, 1)
    result.notes.append(
        f"the metrics compare the flows of {replicas} replicas pooled (independent runs of the "
        "scenario, seeds seed .. seed + replicas - 1); the downstream counts are per replica "
        "(their mean)"
    )


def worse_than_baseline(
    learned: FidelityResult, baseline: FidelityResult, tie: float = TIE
) -> list[str]:
    """The metrics on which LEARNED is farther from the original than BASELINE by more than TIE
    (JSD and nEMD: lower is closer; Spearman: higher is closer; NaN on either side: not
    compared)."""
    worse = []
    for m in metric_names():
        a, b = learned.metrics[m], baseline.metrics[m]
        if math.isnan(a) or math.isnan(b):
            continue
        if (b - a > tie) if m.startswith("spearman") else (a - b > tie):
            worse.append(m)
    return worse


def _app_protocols(captures: list[Path]) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in captures:
        for k, v in suricata_app_protocols(c).items():
            total[k] = total.get(k, 0) + v
    return dict(sorted(total.items()))
