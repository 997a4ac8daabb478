"""Method `failover` (seed 002 IV, "performance with power failover"): a redundant DUT pair
sharing a virtual address (VRRP, keepalived), a numbered probe stream to that address, and a
fault on the master at `failover.fault_at`; `trials` steps per advertisement interval. The pair
is the executor's VrrpPair part (testbed.failover), the fault its FaultPart (testbed.faults),
the probes generator `probe`; analysis.py reads the outage from the client's capture. With
`fault_phase: random` (the default) each trial's fault comes a random part of one advertisement
interval after `fault_at` (seeded: the same scenario plans the same times), since the outage
depends on how long before the fault the master's last advertisement left."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ntgcore.registry import PARTS
from ntgcore.scenario import FailoverSpec, FaultSpec, Scenario, TestbedSpec

from .. import NS, UNSET, Method, Step, StepParams, with_changes
from . import analysis
from .analysis import MASTER_METER

MASTER_PROCESS = "vrrp:master"


def fault_for(fo: FailoverSpec, kind: str, at_ns: int) -> FaultSpec:
    """The fault of one trial: on the master's link to the segment or its VM's power, or on its
    keepalived."""
    if kind in ("link-down", "power-off"):
        return FaultSpec(kind=kind, at=fo.master, start=f"{at_ns}ns")
    return FaultSpec(kind=kind, process=MASTER_PROCESS, start=f"{at_ns}ns")


@dataclass
class FailoverParams(StepParams):
    advert_int_s: float = UNSET
    vrrp_version: int = UNSET
    trial: int = UNSET
    fault: str = UNSET
    fault_at_s: float = UNSET


def rules(tb: TestbedSpec) -> str | None:
    if (tb.method == "failover") != (tb.failover is not None):
        return (
            "method `failover` needs a `failover` section, and `failover` belongs "
            "to method `failover`"
        )
    if tb.failover is not None and tb.failover.meter is not None and "meterpair" not in PARTS:
        return (
            "`failover.meter` needs the part `meterpair` (testbed.meters.pair), which is not "
            "registered: install the project (pip install .)"
        )
    return None


def with_trials(tb: TestbedSpec, trials: int) -> dict:
    """`testbed run --trials N`: N trials per advertisement interval and fault."""
    assert tb.failover is not None
    return {"failover": tb.failover.model_copy(update={"trials": trials})}


def interval_name(ns: int) -> str:
    return f"{ns // NS}s" if ns % NS == 0 else f"{ns // 1_000_000}ms"


def plan(scenario: Scenario) -> list[Step]:
    tb = scenario.testbed
    assert tb is not None and tb.failover is not None
    fo = tb.failover
    gens = scenario.live_generators()
    steps = []
    rng = random.Random(scenario.seed)  # the fault's phase in the VRRP cycle, per trial
    for adv in fo.advert_int:
        for kind in fo.fault:
            one = fo.model_copy(
                update={"advert_int": [adv], "fault": [kind], "version": fo.vrrp_version}
            )
            for k in range(1, fo.trials + 1):
                at = fo.fault_at + (
                    int(rng.random() * adv) // 1000 * 1000 if fo.fault_phase == "random" else 0
                )
                fault = fault_for(one, kind, at)
                # the master's meter killed in the same instant, after the master's own fault
                # (listed after it): the flows it held are lost, as on a power cut
                dies = (
                    [FaultSpec(kind="kill", process=MASTER_METER, start=f"{at}ns")]
                    if fo.meter_dies_with_master
                    else []
                )
                steps.append(
                    Step(
                        f"adv{interval_name(adv)}-{kind}-{k}",
                        with_changes(scenario, failover=one, faults=[*tb.faults, fault, *dies]),
                        gens,
                        "failover",
                        FailoverParams(
                            advert_int_s=adv / NS,
                            vrrp_version=one.vrrp_version,
                            trial=k,
                            fault=kind,
                            fault_at_s=at / NS,
                        ),
                    )
                )
    return steps


METHOD = Method(
    "failover",
    plan,
    analysis,
    summary="seed 002: a VRRP pair, a fault on the master, the outage in the probe stream",
    sections=("failover",),
    rules=rules,
    parts=("vrrp",),
    trials=with_trials,
)
