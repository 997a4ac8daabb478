"""Every command against hostile inputs, full and read-only file systems, and odd counts: one
table, so a new command is covered by adding its row (docs/fuzzing.md, "Commands").

- READERS: every command that reads a file gets /dev/zero, a large pipe, a file that is not UTF-8
  (nor a capture), a directory and a missing path: each must end in exit 2 with a message and no
  traceback, within the driver's memory bound (nothing reads a device or a pipe to its end).
- WRITERS: every command that writes gets an output place on a full file system (exit 4) and on a
  read-only one (exit 2: an output directory that cannot be written), with no traceback and no
  half-written file left behind.
- COUNTS: every count option gets 0, a negative number and 10^9: it is done, or refused with
  exit 2 before anything is allocated.

The commands run in one child process per table (tests/fuzz/commands.py) under a memory bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import fill, tmpfs

from ntgcore.scenario import load_scenario
from testbed.runner import run_scenario

REPO = Path(__file__).resolve().parent.parent
DRIVER = REPO / "tests" / "fuzz" / "commands.py"
SCENARIO = """\
version: 1
name: hostile-small
flows:
  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 53, rate: 200, duration: 1s,
     payload: {size: 100}}
"""
RULES = 'alert udp any any -> any 53 (msg:"hostile table"; content:"a"; sid:1000001; rev:1;)\n'
RANGES = "198.19.128.0/17"
IN, OUT, N = "{IN}", "{OUT}", "{N}"

# command -> its argv, IN the hostile input; every other input is a good one (`good` below)
READERS = {
    "validate": ["validate", IN],
    "run": ["run", IN, "--out", OUT],
    "analyze": ["analyze", IN, "--out", OUT],
    "compare-traffic": ["compare-traffic", IN, "{PCAP}", "-o", OUT, "-q"],
    "compare-traffic B": ["compare-traffic", "{PCAP}", IN, "-o", OUT, "-q"],
    "learn": ["learn", IN, "-o", f"{OUT}/l.yaml", "-q"],
    "export": ["export", IN, "--parquet", OUT],
    "export-benchmark": ["export-benchmark", IN, "-o", f"{OUT}/b.json"],
    "results show": ["results", "show", IN],
    "translate-rules": ["translate-rules", IN, "-o", f"{OUT}/t.rules", "--no-check"],
    "ids-coverage": ["ids-coverage", IN, "--out", OUT],
    "ids-coverage --baseline": ["ids-coverage", "{RULES}", "--out", OUT, "--baseline", IN],
    "ids-coverage --ja3-strings": ["ids-coverage", "{RULES}", "--out", OUT, "--ja3-strings", IN],
    "detect": ["detect", IN, "--rules", "{RULES}", "--out", OUT],
    "detect --rules": ["detect", "{PCAP}", "--rules", IN, "--out", OUT],
    "meter": ["meter", IN, "--meter", "softflowd", "--out", OUT],
    "otg serve --topology": ["otg", "serve", "--topology", IN, "--results", OUT],
    "detect --expect": ["detect", "{PCAP}", "--rules", "{RULES}", "--expect", IN, "--out", OUT],
    "detect --suricata-config": [
        "detect",
        "{PCAP}",
        "--rules",
        "{RULES}",
        "--suricata-config",
        IN,
        "--out",
        OUT,
    ],
    "ids-coverage --suricata-config": [
        "ids-coverage",
        "{RULES}",
        "--out",
        OUT,
        "--suricata-config",
        IN,
    ],
    "multiply --scenario": ["multiply", "{PCAP}", "--scenario", IN, "-o", f"{OUT}/m.pcap"],
    "multiply": ["multiply", IN, "-T", "1", "--ranges", RANGES, "-o", f"{OUT}/m.pcap"],
    "multiply --urls": [
        "multiply",
        "{PCAP}",
        "-T",
        "1",
        "--ranges",
        RANGES,
        "--urls",
        IN,
        "-o",
        f"{OUT}/m.pcap",
    ],
    "spread": ["spread", IN, "--out", OUT],
    "match-sweep --feeds pcap:": [
        "match-sweep",
        "--structs",
        "chain",
        "--hashes",
        "lookup3",
        "--sizes",
        "2^10",
        "--feeds",
        f"pcap:{IN}",
        "--packets",
        "1000",
        "--out",
        OUT,
    ],
}
HOSTILE = ("dev-zero", "pipe", "not-utf8", "directory", "missing")

WRITERS = {
    "run": ["run", "{SCENARIO}", "--out", f"{OUT}/run"],
    "analyze": ["analyze", "{PCAP}", "--out", f"{OUT}/a"],
    "compare-traffic": ["compare-traffic", "{PCAP}", "{PCAP}", "-o", f"{OUT}/f", "-q"],
    "learn": ["learn", "{PCAP}", "-o", f"{OUT}/l.yaml", "-q"],
    "export": ["export", "{PCAP}", "--parquet", f"{OUT}/p"],
    "export-benchmark": ["export-benchmark", "{RUN}", "-o", f"{OUT}/b.json"],
    "translate-rules": ["translate-rules", "{RULES}", "-o", f"{OUT}/t.rules", "--no-check"],
    "multiply": ["multiply", "{PCAP}", "-T", "1", "--ranges", RANGES, "-o", f"{OUT}/m.pcap"],
    "detect": ["detect", "{PCAP}", "--rules", "{RULES}", "--out", f"{OUT}/d"],
    "meter": ["meter", "{PCAP}", "--meter", "softflowd", "--out", f"{OUT}/m"],
    "hash-study": [
        "hash-study",
        "--hashes",
        "lookup3",
        "--flows",
        "1000",
        "--prefixes",
        "24",
        "--repeats",
        "1",
        "--out",
        f"{OUT}/h",
    ],
    "match-sweep": [
        "match-sweep",
        "--structs",
        "chain",
        "--hashes",
        "lookup3",
        "--sizes",
        "2^10",
        "--feeds",
        "det",
        "--packets",
        "1000",
        "--out",
        f"{OUT}/ms",
    ],
    "results compare": ["results", "compare", "{RUN}", "--plots", f"{OUT}/cmp"],
    "schema": ["schema", "-o", f"{OUT}/schema.json"],
    "analyze RUN_DIR": ["analyze", "{RUN}", "--out", f"{OUT}/a"],
    "spread": ["spread", "{SPREAD}", "--out", f"{OUT}/s"],
    "ids-coverage": ["ids-coverage", "{RULES}", "--out", f"{OUT}/c"],
}
PLACES = {"full": 4, "read-only": 2}
# refused before writing, nothing written: the output's size is checked against the free space
CHECKS_SPACE_FIRST = {"multiply"}

# option -> (argv with N, {value: the exit statuses it may end in})
REFUSED = {0: {2}, -1: {2}, 10**9: {2}}
COUNTS = {
    "run --seed": (["run", "{SCENARIO}", "--out", OUT, "--seed", N], {0: {0}, -1: {2}, 10**9: {0}}),
    "analyze --memory-limit": (
        ["analyze", "{PCAP}", "--out", OUT, "--memory-limit", N],
        {0: {2}, -1: {2}, 10**9: {0}},
    ),
    "learn --classes": (["learn", "{PCAP}", "-o", f"{OUT}/l.yaml", "--classes", N], REFUSED),
    "learn --seed": (
        ["learn", "{PCAP}", "-o", f"{OUT}/l.yaml", "--seed", N],
        {0: {0}, -1: {2}, 10**9: {0}},
    ),
    "learn --memory-limit": (
        ["learn", "{PCAP}", "-o", f"{OUT}/l.yaml", "--memory-limit", N],
        {0: {2}, -1: {2}, 10**9: {0}},
    ),
    "compare-traffic --memory-limit": (
        ["compare-traffic", "{PCAP}", "{PCAP}", "-o", OUT, "-q", "--memory-limit", N],
        {0: {2}, -1: {2}, 10**9: {0}},
    ),
    "run --trials": (["run", "{SCENARIO}", "--out", OUT, "--trials", N], REFUSED),
    "multiply --mtu": (
        ["multiply", "{PCAP}", "-T", "1", "--ranges", RANGES, "--mtu", N, "-o", f"{OUT}/m.pcap"],
        REFUSED,
    ),
    "multiply --max-flows": (
        [
            "multiply",
            "{PCAP}",
            "-T",
            "1",
            "--ranges",
            RANGES,
            "--max-flows",
            N,
            "-o",
            f"{OUT}/m.pcap",
        ],
        {0: {0}, -1: {2}, 10**9: {0}},
    ),  # 0: the default bound
    "multiply --max-seconds": (
        [
            "multiply",
            "{PCAP}",
            "-T",
            "1",
            "--ranges",
            RANGES,
            "--max-seconds",
            N,
            "-o",
            f"{OUT}/m.pcap",
        ],
        {0: {2}, -1: {2}, 10**9: {0}},
    ),
    "multiply --seed": (
        ["multiply", "{PCAP}", "-T", "1", "--ranges", RANGES, "--seed", N, "-o", f"{OUT}/m.pcap"],
        {0: {0}, -1: {2}, 10**9: {0}},
    ),
    "hash-study --seed": (
        [
            "hash-study",
            "--hashes",
            "lookup3",
            "--flows",
            "1000",
            "--prefixes",
            "24",
            "--repeats",
            "1",
            "--seed",
            N,
            "--out",
            OUT,
        ],
        {0: {0}, -1: {2}, 10**9: {0}},
    ),
    "spread --seed": (
        ["spread", "{SPREAD}", "--out", OUT, "--seed", N],
        {0: {0}, -1: {2}, 10**9: {0}},
    ),
    "hash-study --prefixes": (
        [
            "hash-study",
            "--hashes",
            "lookup3",
            "--flows",
            "1000",
            "--prefixes",
            N,
            "--repeats",
            "1",
            "--out",
            OUT,
        ],
        REFUSED,
    ),
    "multiply -T": (
        ["multiply", "{PCAP}", "-T", N, "--ranges", RANGES, "-o", f"{OUT}/m.pcap"],
        REFUSED,
    ),
    "ids-coverage --multiply": (
        ["ids-coverage", "{RULES}", "--out", OUT, "--multiply", N],
        REFUSED,
    ),
    "ids-coverage --peers": (
        ["ids-coverage", "{RULES}", "--out", OUT, "--peers", N],
        REFUSED,
    ),
    "meter --max-flows": (
        ["meter", "{PCAP}", "--meter", "pmacct", "--out", OUT, "--max-flows", N],
        REFUSED,
    ),
    "detect --top": (
        ["detect", "{PCAP}", "--rules", "{RULES}", "--out", OUT, "--top", N],
        {0: {0}, -1: {2}, 10**9: {0}},
    ),
    "hash-study --repeats": (
        [
            "hash-study",
            "--hashes",
            "lookup3",
            "--flows",
            "1000",
            "--prefixes",
            "24",
            "--repeats",
            N,
            "--out",
            OUT,
        ],
        {0: {2}, -1: {2}, 10**9: {2}},
    ),
    "hash-study --flows": (
        [
            "hash-study",
            "--hashes",
            "lookup3",
            "--flows",
            N,
            "--prefixes",
            "24",
            "--repeats",
            "1",
            "--out",
            OUT,
        ],
        REFUSED,
    ),
    "match-sweep --repeats": (
        [
            "match-sweep",
            "--structs",
            "chain",
            "--hashes",
            "lookup3",
            "--sizes",
            "2^10",
            "--feeds",
            "det",
            "--packets",
            "1000",
            "--repeats",
            N,
            "--out",
            OUT,
        ],
        REFUSED,
    ),
    "match-sweep --packets": (
        [
            "match-sweep",
            "--structs",
            "chain",
            "--hashes",
            "lookup3",
            "--sizes",
            "2^10",
            "--feeds",
            "det",
            "--packets",
            N,
            "--cell-timeout",
            "20",
            "--out",
            OUT,
        ],
        {0: {2}, -1: {2}, 10**9: {0, 2}},
    ),
    "match-sweep --cell-timeout": (
        [
            "match-sweep",
            "--structs",
            "chain",
            "--hashes",
            "lookup3",
            "--sizes",
            "2^10",
            "--feeds",
            "det",
            "--packets",
            "100000",
            "--cell-timeout",
            N,
            "--out",
            OUT,
        ],
        REFUSED,
    ),
}


# how a refusal may name an option besides its own flag (the engine's words for `-T`)
SAID = {"-T": ("copies",), "--multiply": ("copies", "T1"), "--prefixes": ("prefix",)}


@pytest.fixture(scope="module")
def good(tmp_path_factory, flowengine_bin):
    """Good inputs: a scenario, an analysed offline run of it (its capture), a rules file."""
    base = tmp_path_factory.mktemp("good")
    scenario = base / "small.yaml"
    scenario.write_text(SCENARIO)
    rules = base / "small.rules"
    rules.write_text(RULES)
    result = run_scenario(
        load_scenario(scenario), base / "results", analyze=True, show_progress=False
    )
    assert result.status == "completed", result.messages
    return SimpleNamespace(
        base=base,
        SCENARIO=scenario,
        RULES=rules,
        RUN=result.run_dir,
        PCAP=result.run_dir / "capture.pcap",
        SPREAD=REPO / "scenarios" / "two-hosts.yaml",
    )


def _hostile(base: Path) -> dict[str, str]:
    not_utf8 = base / "not-utf8.bin"
    not_utf8.write_bytes(b"\xff\xfe\x00version: 1\x80\x81\xc3\x28" * 4096)
    (base / "a-directory").mkdir(exist_ok=True)
    return {
        "dev-zero": "/dev/zero",
        "pipe": "{PIPE}",
        "not-utf8": str(not_utf8),
        "directory": str(base / "a-directory"),
        "missing": str(base / "no-such-file"),
    }


def _argv(template: list[str], good, **subs: str) -> list[str]:
    names = {f"{{{k}}}": str(v) for k, v in vars(good).items()} | {
        f"{{{k}}}": v for k, v in subs.items()
    }
    out = []
    for arg in template:
        for key, value in names.items():
            if key in arg and not (key == "{PIPE}"):
                arg = arg.replace(key, value)
        out.append(arg)
    return out


def _drive(cases: list[dict], work: Path) -> dict:
    (work / "cases.json").write_text(json.dumps(cases))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(
        [sys.executable, str(DRIVER), str(work / "cases.json"), str(work / "results.json")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if p.returncode != 0:  # every test of the table fails with this (the fixture is not run again)
        return {
            "_driver": f"the driver failed ({p.returncode}): {p.stdout[-3000:]}{p.stderr[-3000:]}"
        }
    return json.loads((work / "results.json").read_text())


@pytest.fixture(scope="module")
def reader_results(good, tmp_path_factory):
    work = tmp_path_factory.mktemp("readers")
    hostile = _hostile(work)
    cases = [
        {
            "id": f"{cmd}|{kind}",
            "argv": _argv(t, good, IN=hostile[kind], OUT=str(work / "out" / f"{i}-{kind}")),
        }
        for i, (cmd, t) in enumerate(READERS.items())
        for kind in HOSTILE
    ]
    return _drive(cases, work)


@pytest.fixture(scope="module")
def writer_results(good, tmp_path_factory, root_in_ci):
    work = tmp_path_factory.mktemp("writers")
    with tmpfs(work / "full", "size=1m") as full, tmpfs(work / "ro", "size=1m") as ro:
        for i in range(len(WRITERS)):  # each case's folder exists: the output goes into it
            (full / str(i)).mkdir()
            (ro / str(i)).mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        fill(full)
        cases = [
            {
                "id": f"{cmd}|{place}",
                "argv": _argv(t, good, OUT=str((full if place == "full" else ro) / str(i))),
            }
            for i, (cmd, t) in enumerate(WRITERS.items())
            for place in PLACES
        ]
        results = _drive(cases, work)
        results["_left"] = {
            "full": sorted(
                str(p.relative_to(full))
                for p in full.rglob("*")
                if p.is_file()
                and p.name != "filler"
                and (p.stat().st_size == 0 or p.name.startswith(".") or ".tmp" in p.name)
            )
        }
        return results


@pytest.fixture(scope="module")
def count_results(good, tmp_path_factory):
    work = tmp_path_factory.mktemp("counts")
    cases = []
    for i, (opt, (template, allowed)) in enumerate(COUNTS.items()):
        for j, value in enumerate(allowed):
            out = work / "out" / f"{i}-{j}"
            out.mkdir(parents=True)  # a good output place: only the count may be refused
            cases.append(
                {"id": f"{opt}|{value}", "argv": _argv(template, good, N=str(value), OUT=str(out))}
            )
    return _drive(cases, work)


def _result(results: dict, case: str) -> dict:
    assert "_driver" not in results, results.get("_driver")
    return results[case]


def _check(result: dict, allowed: set[int]) -> None:
    said = f"argv {result['argv']}\nstderr: {result['stderr']}\nstdout: {result['stdout'][-1000:]}"
    assert "traceback" not in result, f"{said}\n{result['traceback']}"
    assert result["status"] in allowed, (
        f"exit {result['status']}, expected one of {sorted(allowed)}\n{said}"
    )
    if result["status"] != 0:
        assert result["stderr"].strip(), f"exit {result['status']} without a word on stderr\n{said}"


@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("command", READERS)
def test_a_hostile_input_is_refused_with_a_message(reader_results, command, kind):
    _check(_result(reader_results, f"{command}|{kind}"), {2})


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("command", WRITERS)
def test_an_output_place_that_cannot_be_written_is_said(writer_results, command, place):
    allowed = {PLACES[place]} | (
        {2} if place == "full" and command in CHECKS_SPACE_FIRST else set()
    )
    _check(_result(writer_results, f"{command}|{place}"), allowed)


def test_a_full_disk_leaves_no_empty_file_or_temporary(writer_results):
    assert _result(writer_results, "_left")["full"] == []


@pytest.mark.parametrize("value", [0, -1, 10**9])
@pytest.mark.parametrize("option", COUNTS)
def test_a_count_is_done_or_refused_before_allocating(count_results, option, value):
    result = _result(count_results, f"{option}|{value}")
    _check(result, COUNTS[option][1][value])
    if result["status"] == 2:  # refused for the count, not for anything else of the command line
        flag = COUNTS[option][0][COUNTS[option][0].index(N) - 1]
        names = {flag.lstrip("-"), *SAID.get(flag, ())}
        assert any(n in result["stderr"] for n in names), (names, result["stderr"])
