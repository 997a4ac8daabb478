"""`testbed multiply`: the offline traffic multiplier (seed 003, docs/multiplier.md).

The rewriting is the native engine's (`flowengine multiply`); this module chooses the inputs and
outputs, takes the parameters from the command line or a scenario's `multiply:` section, and
records the result: the multiplied capture, the shadow plan (every shadow flow and its original)
and the engine's counters. Given a run folder, all three go into it and its manifest says so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

from analysis.multiply import REPORT_STEM, multiplied_report, read_plan, write_report
from ntgcore.errors import BadInput, NtgError
from ntgcore.files import no_space_error, read_bounded
from ntgcore.native_tools import executable
from ntgcore.proc import Process
from ntgcore.runfolder import RunFolder, is_full
from ntgcore.scenario import MultiplySpec, ScenarioError, load_scenario
from ntgcore.yamlread import yaml_lines

PLAN_NAME = "shadow_plan.csv"
OUTPUT_NAME = "multiplied.pcap"
SUMMARY_NAME = "multiply.json"
MAX_URLS_BYTES = 64 * 2**20  # a --urls file; the engine takes 65,536 targets of up to 4,096 bytes
__all__ = [
    "MultiplyParams",
    "analyze_multiplied",
    "multiply_capture",
    "multiply_run_folder",
    "read_plan",
    "rerun_report",
    "scenario_params",
]


@dataclasses.dataclass(frozen=True)
class MultiplyParams:
    copies: int
    ranges: tuple[str, ...]
    seed: int = 1
    order: str = "spfo"
    ports: str = "keep"
    urls: Path | None = None
    mtu: int = 1500
    original: tuple[str, ...] = ()
    max_flows: int | None = None
    max_seconds: int | None = None
    upto_damage: bool = False
    home: tuple[str, ...] = ()  # the sided plan: home CIDRs' shadows in home_ranges
    home_ranges: tuple[str, ...] = ()


def params_from_spec(
    spec: MultiplySpec, scenario_path: Path, scenario_seed: int, text: str
) -> MultiplyParams:
    urls = None
    if spec.urls is not None:
        urls = scenario_path.parent / spec.urls
        if not urls.is_file():
            line = yaml_lines(text).get(("multiply", "urls"))
            where = f"{scenario_path}:{line}" if line else str(scenario_path)
            raise ScenarioError(
                [
                    f"{where}: multiply.urls: no such file {urls} (paths are relative to the scenario)"
                ]
            )
    return MultiplyParams(
        copies=spec.copies,
        ranges=tuple(spec.ranges),
        seed=spec.seed if spec.seed is not None else scenario_seed,
        order=spec.order,
        ports=spec.ports,
        urls=urls,
        mtu=spec.mtu,
        original=tuple(spec.original),
        home=tuple(spec.home),
        home_ranges=tuple(spec.home_ranges),
    )


def scenario_params(path: Path) -> MultiplyParams:
    """The `multiply:` section of a scenario file (errors as FILE:LINE: field: message)."""
    loaded = load_scenario(path)
    if loaded.scenario.multiply is None:
        raise ScenarioError([f"{path}: no `multiply:` section (docs/multiplier.md shows one)"])
    return params_from_spec(
        loaded.scenario.multiply, loaded.path, loaded.scenario.seed, loaded.text
    )


def engine_argv(
    binary: Path, inp: Path, out: Path, plan: Path, summary: Path, p: MultiplyParams
) -> list[str]:
    argv = [
        str(binary),
        "multiply",
        str(inp),
        "-o",
        str(out),
        "-T",
        str(p.copies),
        "--ranges",
        ",".join(p.ranges),
        "--seed",
        str(p.seed),
        "--order",
        p.order,
        "--ports",
        p.ports,
        "--mtu",
        str(p.mtu),
        "--plan",
        str(plan),
        "--summary",
        str(summary),
    ]
    if p.urls is not None:
        argv += ["--urls", str(p.urls)]
    if p.original:
        argv += ["--original", ",".join(p.original)]
    if p.home:
        argv += ["--home", ",".join(p.home), "--home-ranges", ",".join(p.home_ranges)]
    if p.max_flows is not None:
        argv += ["--max-flows", str(p.max_flows)]
    if p.max_seconds is not None:
        argv += ["--max-seconds", str(p.max_seconds)]
    if p.upto_damage:
        argv.append("--upto-damage")
    return argv


def check_urls(path: Path) -> None:
    """BadInput unless PATH is UTF-8 text of at most MAX_URLS_BYTES without NUL bytes (the engine
    checks each line's length and count; a UTF-16 file gave it no more than "Invalid argument")."""
    text = read_bounded(path, MAX_URLS_BYTES, "--urls file", "one request target a line")
    nul = text.find("\0")
    if nul >= 0:
        raise BadInput(
            f"{path}:{text.count(chr(10), 0, nul) + 1}: the --urls file holds a NUL byte at offset "
            f"{len(text[:nul].encode()):,}; give request targets as text, one a line"
        )


def multiply_capture(inp: Path, out: Path, plan: Path, summary: Path, p: MultiplyParams) -> dict:
    """Runs the engine; returns its counters. Bad input (exit 2: nothing written) raises BadInput
    with the engine's explanation; a failure while writing raises NtgError."""
    if p.urls is not None:
        check_urls(p.urls)
    binary = executable("flowengine")
    proc = Process(
        "flowengine multiply",
        engine_argv(binary, inp, out, plan, summary, p),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ).start()
    _, err = proc.popen.communicate()
    code = proc.wait()
    text = err.decode(errors="replace").strip()
    if code == 2:
        raise BadInput(
            text.removeprefix("flowengine multiply: ") or "flowengine multiply refused the input"
        )
    if code != 0:
        full = next(
            (f for f in (out, plan, summary) if f != Path(os.devnull) and is_full(f.parent)), None
        )
        if full is not None:  # the engine says `Input/output error` for a full disk
            raise no_space_error(full, "free some space, or write elsewhere (-o, --plan)")
        raise NtgError(f"flowengine multiply failed (exit status {code}): {text}")
    doc = json.loads(summary.read_text())
    if text:
        doc["warning"] = text
    return doc


def multiply_run_folder(run_dir: Path, p: MultiplyParams | None) -> dict:
    """Multiplies a run folder's capture.pcap into it, with its scenario's `multiply:` section
    unless parameters are given; the manifest records the outputs."""
    capture = run_dir / "capture.pcap"
    if not capture.is_file():
        raise BadInput(f"{run_dir}: no capture.pcap in this run folder (an offline run writes one)")
    if p is None:
        p = scenario_params(run_dir / "scenario.yaml")
    doc = multiply_capture(
        capture, run_dir / OUTPUT_NAME, run_dir / PLAN_NAME, run_dir / SUMMARY_NAME, p
    )
    report = multiplied_report(
        capture, run_dir / OUTPUT_NAME, run_dir / PLAN_NAME, p.copies, p.urls is None
    )
    paths = write_report(report, run_dir, REPORT_STEM)
    folder = RunFolder.open(run_dir)
    folder.manifest["multiply"] = {
        "input": "capture.pcap",
        "output": OUTPUT_NAME,
        "plan": PLAN_NAME,
        "summary": SUMMARY_NAME,
        "parameters": params_dict(p),
        "packets_in": doc["packets_in"],
        "packets_out": doc["packets_out"],
        "report": {k: v.name for k, v in paths.items()},
        "egress_ratio": report["packet_ratio"],
        "as_planned": report["ok"],
    }
    folder.write()
    doc["report"] = report
    return doc


def analyze_multiplied(
    inp: Path,
    out: Path,
    plan: Path,
    copies: int,
    report_dir: Path,
    stem: str,
    same_bytes: bool = True,
) -> dict:
    """The analysis of a multiplication (analysis.multiply) written beside its output; `same_bytes`
    false when URLs were substituted (shadow flows then compared by packets only)."""
    report = multiplied_report(inp, out, plan, copies, same_bytes)
    write_report(report, report_dir, stem)
    return report


def rerun_report(run_dir: Path) -> dict | None:
    """The multiply report of a run folder that `testbed multiply` multiplied, written anew from
    its captures and plan; None for any other folder."""
    manifest = run_dir / "manifest.json"
    if not manifest.is_file():
        return None
    rec = json.loads(manifest.read_text()).get("multiply")
    if not rec or not (run_dir / rec["output"]).is_file():
        return None
    return analyze_multiplied(
        run_dir / rec["input"],
        run_dir / rec["output"],
        run_dir / rec["plan"],
        int(rec["parameters"]["copies"]),
        run_dir,
        REPORT_STEM,
        rec["parameters"].get("urls") is None,
    )


def params_dict(p: MultiplyParams) -> dict:
    d = dataclasses.asdict(p)
    d["ranges"], d["original"] = list(p.ranges), list(p.original)
    d["home"], d["home_ranges"] = list(p.home), list(p.home_ranges)
    d["urls"] = str(p.urls) if p.urls is not None else None
    return d
