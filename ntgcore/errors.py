"""The one error base class, and the exit statuses of the `testbed` command.

Every error the project raises on purpose derives from `NtgError`; its `exit_status` is what the
command line returns when the error ends a command, so no caller keeps its own table.
"""

from __future__ import annotations

# Exit statuses of `testbed run` and friends (documented in README.md).
EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_CHECKS_FAILED = 3
EXIT_NO_SPACE = 4
EXIT_INTERRUPTED = 130


class NtgError(Exception):
    """An error whose message says what was wrong and what to do; `exit_status` ends the command."""

    exit_status: int = EXIT_RUN_FAILED


class BadInput(NtgError):
    """The user's input (a file, a flag, a place) cannot be used; nothing was started."""

    exit_status = EXIT_BAD_INPUT


class InputProblems(BadInput):
    """Input with problems at places: `problems` holds one `FILE:LINE: field: message` each, and
    the command line prints them one a line, as they are (a scenario, a topology, an expect file)."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class RunSetupError(BadInput):
    """The run cannot start (bad output directory, missing tool); nothing was sent."""


class ToolMissing(BadInput):
    """A program the run needs is not installed; the message names the package that has it."""


class GeneratorError(NtgError):
    """The generator cannot run or failed; the message says why and what to do."""


class PluginError(BadInput):
    """A plugin name that no registry knows, or a plugin registered twice."""


class NoSpace(NtgError):
    """The file system of the run folder is full: the run stopped, what was written is kept."""

    exit_status = EXIT_NO_SPACE
