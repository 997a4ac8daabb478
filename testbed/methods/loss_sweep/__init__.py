"""Method `loss-sweep` (seed 002): a packet-rate sweep and a flow-rate (hosts) sweep at the DUT."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from decimal import Decimal

from ntgcore.scenario import Flow, Scenario, TestbedSpec

from .. import (
    NS,
    UNSET,
    Method,
    Step,
    StepParams,
    derived_flow,
    dst_port_of,
    sized,
    template_flow,
    with_changes,
)
from . import analysis


@dataclass
class SweepParams(StepParams):
    hosts: int = UNSET  # a host step's host count
    packet_rate: float | None = UNSET  # None: the generators at top speed (`max`)
    max: bool = UNSET
    step_s: float = UNSET
    flows_per_second: float = UNSET


def rules(tb: TestbedSpec) -> str | None:
    if tb.method == "loss-sweep":
        if tb.sweep is None:
            return "method `loss-sweep` needs a `sweep` section"
        if tb.dut.kind == "none":
            return "method `loss-sweep` needs a device under test (`dut.kind`)"
    elif tb.sweep is not None:
        return "`sweep` belongs to method `loss-sweep`"
    return None


def rate_step_flow(template: Flow, rate: Decimal, frame_size: int, step_ns: int) -> Flow:
    udp = derived_flow(template, protocol="udp", dst_port=dst_port_of(template), rate=1, packets=1)
    return derived_flow(
        template,
        protocol="udp",
        dst_port=dst_port_of(template),
        start=0,
        rate=rate,
        duration=step_ns,
        payload=sized(udp, frame_size),
    )


def host_step_flows(
    template: Flow, hosts: int, sessions: int, host_rate: Decimal, frame_size: int, step_ns: int
) -> list[Flow]:
    """Seed 002 II.B: every host runs `sessions` UDP sessions one after another."""
    base = template.src.interface.ip
    session_ns = max(1, step_ns // sessions)
    flows = []
    for h in range(hosts):
        src = str(ipaddress.ip_address(int(base) + h))
        flows.append(
            derived_flow(
                template,
                name=f"host{h + 1}",
                protocol="udp",
                src=src,
                src_port={"range": "10000-60000", "mode": "increment"},
                dst_port=dst_port_of(template),
                start=0,
                rate=host_rate,
                duration=session_ns,
                payload=sized(template, frame_size),
                repeat={"count": sessions, "period": session_ns},
            )
        )
    return flows


def shortened(tb: TestbedSpec, step_ns: int) -> dict:
    """`testbed run --duration T`: every step T long."""
    assert tb.sweep is not None
    return {"sweep": tb.sweep.model_copy(update={"step": step_ns})}


def plan(scenario: Scenario) -> list[Step]:
    tb = scenario.testbed
    assert tb is not None and tb.sweep is not None
    sw = tb.sweep
    gens = scenario.live_generators()
    template = template_flow(scenario)
    steps = []
    for rate in sw.packet_rates:
        if rate == "max":  # as fast as the generators go, for one step
            flow = rate_step_flow(template, Decimal(100_000_000), sw.frame_size, sw.step)
            fast = [g.model_copy(update={"pace": "topspeed"}) for g in gens]
            steps.append(
                Step(
                    "rate-max",
                    with_changes(scenario, [flow], duration=sw.step),
                    fast,
                    "rate",
                    SweepParams(packet_rate=None, max=True, step_s=sw.step / NS),
                )
            )
            continue
        flow = rate_step_flow(template, rate, sw.frame_size, sw.step)
        steps.append(
            Step(
                f"rate-{rate.normalize():f}pps",
                with_changes(scenario, [flow]),
                gens,
                "rate",
                SweepParams(packet_rate=float(rate), step_s=sw.step / NS),
            )
        )
    for hosts in sw.hosts:
        flows = host_step_flows(
            template, hosts, sw.sessions_per_host, sw.host_rate, sw.frame_size, sw.step
        )
        steps.append(
            Step(
                f"hosts-{hosts}",
                with_changes(scenario, flows),
                gens,
                "hosts",
                SweepParams(
                    hosts=hosts,
                    packet_rate=float(sw.host_rate * hosts),
                    flows_per_second=hosts * sw.sessions_per_host / (sw.step / NS),
                ),
            )
        )
    return steps


METHOD = Method(
    "loss-sweep",
    plan,
    analysis,
    summary="seed 002: packet-rate and host sweeps against the DUT",
    sections=("sweep",),
    rules=rules,
    shortened=shortened,
)
