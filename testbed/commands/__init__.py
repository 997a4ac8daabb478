"""The commands of `testbed`, one module each (docs/architecture.md, "How to add a command").

`COMMANDS` is the light table `testbed --help` lists: name -> module and one-line help, in the order
the help shows them. `testbed.cli` imports only the chosen command's module, whose
`register(subparsers)` adds its parser (through `add_parser`, so the help is the table's) and
whose `run(args) -> int` does the work; its heavy imports (pandas, the analysis, the runner) load
only then. This module (the table) imports nothing else of the project.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple


class Command(NamedTuple):
    module: str  # under testbed.commands
    help: str


COMMANDS: dict[str, Command] = {
    "validate": Command("validate", "check scenario files and say what they will produce"),
    "schema": Command("schema", "print the scenario JSON Schema (for editors)"),
    "run": Command("run", "run a scenario into a new run folder and analyse it"),
    "analyze": Command("analyze", "turn a capture or a run folder into metrics and a report"),
    "learn": Command(
        "learn",
        "learn a scenario of two-way sessions from a capture, nfdump files or flow tables "
        "(addresses mapped into the benchmark ranges)",
    ),
    "compare-traffic": Command(
        "compare_traffic",
        "how close capture B is to capture A: NetShare's JSD and normalized EMD per field, "
        "top talkers and ports, flow counts (docs/fidelity.md)",
    ),
    "export": Command(
        "export",
        "captures as per-packet and per-flow Parquet tables, partitioned by "
        "UTC hour (Hive-style date=/hour= folders; docs/run-tables.md)",
    ),
    "export-benchmark": Command(
        "export_benchmark",
        "write completed, analysed runs as one pytest-benchmark JSON "
        "file (rates and loss as times, lower is better) for `pytest-benchmark compare`",
    ),
    "results": Command(
        "results",
        "the results catalogue: list, show, compare and query analysed run "
        "folders (DuckDB over their run tables)",
    ),
    "cleanup": Command(
        "cleanup",
        "remove what live runs that died (kill -9) left: their namespaces "
        "and processes; mark their manifests `abandoned`",
    ),
    "translate-rules": Command(
        "translate_rules",
        "rewrite Snort 3 rules in Suricata 7 syntax and check that Suricata loads them",
    ),
    "ids-coverage": Command(
        "ids_coverage", "attack traffic from IDS rules and the IDS's detection coverage"
    ),
    "multiply": Command(
        "multiply",
        "copy every packet of a capture T times with shadow addresses "
        "(seed 003's traffic multiplier, docs/multiplier.md)",
    ),
    "detect": Command(
        "detect",
        "run a capture (or a run folder) and rules through Suricata and report the alerts",
    ),
    "meter": Command(
        "meter",
        "run flow meters (softflowd, pmacct, nfpcapd, argus) on a capture and score their "
        "records against the capture's exact reference records",
    ),
    "otg": Command(
        "otg",
        "the Open Traffic Generator API in front of the generators: `otg serve` answers snappi "
        "and gosnappi clients on the testbed's ports (docs/otg.md)",
    ),
    "hash-study": Command(
        "hash_study",
        "seed 002's flow-ID hash study: collisions against the birthday "
        "bound, spread and speed of every flow-key hash (docs/hash-study.md)",
    ),
    "match-sweep": Command(
        "match_sweep",
        "seed 000's flow-matching grid with `flowengine match`: "
        "Parquet rows, Figs. 2-5 and Table 1 beside the seed's (docs/flow-match.md)",
    ),
    "spread": Command(
        "spread",
        "several generator hosts: one engine session per host of a "
        "`testbed.spread` scenario (for site.yml's multihost play), or --collect their results",
    ),
}


def module_name(name: str) -> str:
    """The module of command NAME (`match-sweep` -> `testbed.commands.match_sweep`)."""
    return f"{__name__}.{COMMANDS[name].module}"


def add_parser(subparsers, name: str) -> argparse.ArgumentParser:
    """The parser of command NAME, with the table's help: what `register` starts from."""
    return subparsers.add_parser(name, help=COMMANDS[name].help)
