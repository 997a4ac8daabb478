"""The `testbed` command line: the top parser, the commands listed from the light table of
`testbed.commands` (one module each, imported only when chosen), and the errors handled once."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from ntgcore.errors import EXIT_INTERRUPTED, InputProblems, NtgError
from ntgcore.proc import Interrupted, Interrupts
from ntgcore.runfolder import testbed_version

from .commands import COMMANDS, add_parser, module_name
from .commands.output import err


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of `testbed ARGV`: every command listed (name and help, from the table), the one
    ARGV chooses (its first word that is not an option) with all its arguments, from its module."""
    args = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in args if not a.startswith("-")), None)
    p = argparse.ArgumentParser(
        prog="testbed",
        description="Describe traffic once in a scenario YAML, generate it, and measure it.",
    )
    p.add_argument("--version", action="version", version=f"testbed {testbed_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        if name == chosen:
            importlib.import_module(module_name(name)).register(sub)
        else:
            add_parser(sub, name)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser(argv).parse_args(argv)
    try:
        with Interrupts(raising=True):  # Ctrl-C, SIGTERM, SIGHUP unwind; `run` polls its own flag
            return args.func(args)
    except Interrupted as exc:
        err(f"testbed {args.command}: stopped by {exc.name}")
        return EXIT_INTERRUPTED
    except InputProblems as exc:  # a scenario, topology, expect file: one FILE:LINE problem a line
        for problem in exc.problems:
            err(problem)
        return exc.exit_status
    except NtgError as exc:  # every error of ours says what to do and carries its exit status
        err(f"testbed {getattr(args, 'label', args.command)}: {exc}")  # label: `results compare`
        return exc.exit_status
    except BrokenPipeError:  # `testbed results compare --json | head`: the reader has gone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout at exit
        return 128 + signal.SIGPIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
