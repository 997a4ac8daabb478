"""ntg-testbed orchestration: scenario model, runner, process lifecycle, command line."""

from .scenario import Scenario, ScenarioError, load_scenario, parse_scenario

__all__ = ["Scenario", "ScenarioError", "load_scenario", "parse_scenario"]
