"""The engine's own top-level scenario section, `flowengine:` (how it plans and builds packets);
the plugin declares it (GeneratorPlugin.section) and ntgcore.scenario.ensure_models adds it to
the scenario model, so the YAML, its JSON Schema and its `FILE:LINE` errors are as before."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ntgcore.scenario import Scenario, ScenarioSection

SECTION = "flowengine"  # the scenario's top-level key


class FlowEngineOptions(ScenarioSection):
    """How the native engine plans and builds packets (generators/flowengine/README.md)."""

    planner: Literal["exact", "stochastic"] = Field(
        "exact",
        description="`exact`: every packet at its due time; `stochastic`: FLOR's Distribution "
        "Tree picks the next flow with probability proportional to its rate.",
    )
    threads: int = Field(
        1,
        ge=1,
        le=256,
        description="Worker threads; with the exact planner the output is the same for any count.",
    )
    checksum_offload: bool = Field(
        False,
        description="Write only the pseudo-header part of transport checksums and no IPv4 header "
        "checksum, as for a NIC that completes them (FLOR 6.3.4).",
    )

    def keeps_due_times(self) -> bool:
        return self.planner == "exact"


def options_of(scenario: Scenario) -> FlowEngineOptions:
    """The scenario's `flowengine:` section (its defaults when the YAML has none)."""
    options = getattr(scenario, SECTION, None)
    return options if isinstance(options, FlowEngineOptions) else FlowEngineOptions()


__all__ = ["SECTION", "FlowEngineOptions", "options_of"]
