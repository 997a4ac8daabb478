"""Run methods: how a live run is cut into steps, and what its analysis adds.

A method is a plugin folder here exposing `METHOD` (a `Method`), registered by an entry point
(group `ntg_testbed.methods`). Its `plan` is pure: scenario in, steps out (tested without root).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from analysis.hashing import hash_tuple, make_tuple
from analysis.live import MethodAnalysis
from ntgcore.errors import BadInput
from ntgcore.scenario import Flow, GeneratorSpec, Scenario

NS = 1_000_000_000
PROTOCOL_NUMBERS = {"icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58}
REALTIME_GRACE_S = 10.0  # a realtime generator may run this much past the scenario's last packet


@dataclass
class Step:
    name: str
    scenario: Scenario
    generators: list[GeneratorSpec]
    kind: str = "run"  # run | topspeed | load | rate | hosts
    params: dict[str, Any] = field(default_factory=dict)
    # generator title -> the `attacks:` TCP dialogues it plays (GeneratorSpec.plays_attacks)
    attack_sessions: dict[str, tuple[list[dict], list[str]]] = field(default_factory=dict)
    # generator title -> the scenario it sends instead of `scenario` (its share: testbed.spread)
    shares: dict[str, Scenario] = field(default_factory=dict)

    def deadline_s(self) -> float:
        """Wall seconds after which the step is over whatever the generators say."""
        tb = self.scenario.testbed
        assert tb is not None
        if "deadline_s" in self.params:  # a step whose length its method knows (multiply)
            return float(self.params["deadline_s"])
        delay = (
            max((g.start for g in self.generators), default=0) / NS
        )  # the latest generator start
        delay += self.params.get(
            "start_lead_s", 0.0
        )  # several hosts: their agreed start comes later
        if any(g.pace == "topspeed" for g in self.generators):
            return (tb.duration or 0) / NS + delay
        horizon = max(f.last_due_ns for f in self.scenario.flows) / NS
        horizon = max(horizon, self.params.get("attacks_last_s", 0.0))  # the attack replay, if any
        return horizon + delay + REALTIME_GRACE_S

    def stopped_at_deadline_is_planned(self, spec: GeneratorSpec) -> bool:
        """A generator the deadline stopped finished as planned (else it was still sending)."""
        return self.kind != "run" or spec.pace == "topspeed"


@dataclass(frozen=True)
class Method:
    """`plan(scenario) -> steps` (pure); `analysis`, when the method has tables and figures of
    its own, is its `analysis.py` (analysis.live.MethodAnalysis: `analyze(steps)` adds tables to
    the metrics, `plots(run, doc, manifest)` writes figures, `report(doc)` adds sections)."""

    name: str
    plan: Callable[[Scenario], list[Step]]
    analysis: MethodAnalysis | None = None
    summary: str = ""


def template_flow(scenario: Scenario) -> Flow:
    return scenario.flows[0]


def derived_flow(template: Flow, **changes: Any) -> Flow:
    """`template` with its timing replaced by `changes` (a flow of a planned step)."""
    data = template.model_dump(mode="python", exclude_none=True)
    for key in ("rate", "period", "packets", "duration", "repeat"):
        data.pop(key, None)
    data.update(changes)
    if isinstance(data.get("rate"), Decimal):
        data["rate"] = f"{data['rate']:.6f}"
    for key in ("start", "duration", "period"):  # a bare number would be read as seconds
        if isinstance(data.get(key), int):
            data[key] = f"{data[key]}ns"
    if isinstance(data.get("repeat"), dict) and isinstance(data["repeat"].get("period"), int):
        data["repeat"] = {**data["repeat"], "period": f"{data['repeat']['period']}ns"}
    return Flow.model_validate(data)


def sized(template: Flow, frame_size: int) -> dict:
    return {"size": max(0, frame_size - template.header_bytes)}


def dst_port_of(template: Flow):
    return template.dst_port.model_dump() if template.dst_port else 9


def with_changes(scenario: Scenario, flows: list[Flow] | None = None, **testbed: Any) -> Scenario:
    tb = scenario.testbed.model_copy(update=testbed) if testbed else scenario.testbed
    return scenario.model_copy(update={"flows": flows or scenario.flows, "testbed": tb})


def flow_key_hash(flow: Flow, hash_name: str) -> int:
    """The hash (analysis.hashing, the engine's hash.h) of a flow's first 5-tuple: its first
    source and destination address, the low end of its port ranges (0 without ports) and its
    protocol number; seed 0."""
    sport = flow.src_port.bounds[0] if flow.src_port else 0
    dport = flow.dst_port.bounds[0] if flow.dst_port else 0
    t = make_tuple(
        flow.src.interface.ip.packed,
        flow.dst.interface.ip.packed,
        sport,
        dport,
        PROTOCOL_NUMBERS[flow.protocol],
    )
    return hash_tuple(hash_name, t)


def spread_shares(scenario: Scenario) -> tuple[dict[str, Scenario], dict[str, Any]]:
    """`testbed.spread`: each host's scenario (the flows whose key hash modulo the number of hosts
    is its index, in the scenario's order) by the host's generator title, and the split as the
    manifest states it. A host left without a flow is bad input (fewer hosts or more flows)."""
    tb = scenario.testbed
    assert tb is not None and tb.spread is not None
    spread, n = tb.spread, len(tb.spread.hosts)
    try:
        owner = [flow_key_hash(f, spread.hash) % n for f in scenario.flows]
    except BadInput as exc:
        raise BadInput(f"testbed.spread.hash: {exc}") from None
    shares: dict[str, Scenario] = {}
    info: dict[str, Any] = {
        "rule": f"flow i goes to host {spread.hash}(first 5-tuple of flow i, seed 0) mod {n}",
        "hash": spread.hash,
        "start_lead_s": spread.start_lead / NS,
        "hosts": [],
    }
    for i, host in enumerate(spread.hosts):
        title = spread.label(i)
        mine = [k for k, o in enumerate(owner) if o == i]
        if not mine:
            raise BadInput(
                f"testbed.spread.hosts[{i}] ({host.at}): the split by flow hash gives this "
                f"host none of the {len(scenario.flows)} flows; give more flows or fewer hosts"
            )
        flows = [scenario.flows[k] for k in mine]
        shares[title] = scenario.model_copy(update={"flows": flows})
        info["hosts"].append(
            {
                "name": title,
                "at": host.at,
                "capture": host.capture,
                "flows": mine,
                "flow_names": [f.name or f"flow {k}" for k, f in zip(mine, flows)],
                "flow_count": len(flows),
                "first_due_ns": min(f.start for f in flows),
                "packets_planned": sum(f.packet_count * f.repetitions for f in flows),
            }
        )
    return shares, info
