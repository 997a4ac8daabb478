"""The contract of a run extension: hooks the run lifecycle (testbed/runner.py) calls at fixed
points without knowing what the extension does. The IDS side (a scenario's `attacks:`: their
synthesis, replay or hand-over to a generator, and Suricata's scoring) is one
(testbed/ids/runhooks.py). An extension is registered by an entry point (group
`ntg_testbed.run_hooks`) or by `RUN_HOOKS.register`.

`run` is the testbed.runner.Run being made (its `loaded` scenario, `run_dir`, `manifest`,
`steps`, `folder`, `messages`, and `state`: a dict the extensions keep their own data in, by
their name). `options` are the run's options by name (`coverage_baseline`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .proc import Tool
from .scenario import LoadedScenario, Scenario


class RunHooks:
    """Every hook does nothing unless overridden."""

    name = "hooks"

    def tools(self, scenario: Scenario, sends: bool) -> list[Tool]:
        """The tools a run of `scenario` needs for this extension (`sends`: its method's steps
        send the scenario's generators)."""
        return []

    def check(self, loaded: LoadedScenario, options: dict[str, Any]) -> None:
        """Before anything is made: raise an NtgError (RunSetupError, BadInput) naming the
        scenario for what cannot run."""

    def plan(self, run: Any) -> None:
        """A live run's steps are planned (`run.steps`), nothing has run: add to them. To refuse,
        finish the run folder failed and raise RunSetupError."""

    def after_run(
        self, run: Any, status: str, say: Callable[[str], None], options: dict[str, Any]
    ) -> str:
        """The run has ended with `status` (its folder finished): work on its files; the run's
        status from here on."""
        return status

    def blocks(self, run: Any) -> bool:
        """After the analysis: whether a gate of this extension fails the run (exit status 3)
        although its checks passed."""
        return False
