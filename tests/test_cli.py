"""The `testbed` command line's structure: one module per command under testbed/commands, listed
from a light table, and only the chosen command's module (and its heavy imports) loaded."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

from testbed.commands import COMMANDS, module_name

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("pandas", "numpy", "matplotlib", "pyarrow", "duckdb", "scapy", "analysis")
HELPERS = {"__init__", "argtypes", "output"}  # the package's shared pieces, not commands


def _fresh_modules(argv: list[str]) -> list[str]:
    """The modules a fresh interpreter holds after `import testbed.cli` and parsing ARGV."""
    code = (
        "import json, sys\n"
        "import testbed.cli as cli\n"
        f"argv = {argv!r}\n"
        "try:\n"
        "    cli.build_parser(argv).parse_args(argv)\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in HEAVY]


def test_version_and_help_import_no_heavy_module():
    for argv in (["--version"], ["--help"]):
        modules = _fresh_modules(argv)
        assert _heavy(modules) == [], argv
        chosen = {module_name(name) for name in COMMANDS} & set(modules)
        assert chosen == set(), argv  # no command's module: only the table and the helpers


def test_a_command_imports_only_its_own_module():
    modules = _fresh_modules(["cleanup", "--help"])
    commands = {m for m in modules if m.startswith("testbed.commands.")}
    assert commands == {"testbed.commands.cleanup", "testbed.commands.output"}
    assert _heavy(modules) == []


def test_every_command_module_has_register_and_run():
    for name in COMMANDS:
        module = importlib.import_module(module_name(name))
        assert callable(module.register) and callable(module.run), name
        parser = argparse.ArgumentParser(prog="testbed")
        sub = parser.add_subparsers(dest="command")
        module.register(sub)
        assert list(sub.choices) == [name], name  # its own parser, under its own name
        assert sub.choices[name].get_default("func") is module.run, name
        helps = {a.dest: a.help for a in sub._choices_actions}
        assert helps == {name: COMMANDS[name].help}, name  # the table's help, as --help lists it


def test_every_module_of_the_package_is_a_listed_command():
    files = {p.stem for p in (REPO / "testbed" / "commands").glob("*.py")} - HELPERS
    assert files == {c.module for c in COMMANDS.values()}


def test_help_lists_every_command_with_its_help():
    done = subprocess.run(
        [sys.executable, "-m", "testbed", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    for name, command in COMMANDS.items():
        assert f"    {name}" in done.stdout and command.help in done.stdout, name
