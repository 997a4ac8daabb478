"""Run methods: how a live run is cut into steps, and what its analysis adds.

A method is a plugin folder here exposing `METHOD` (a `Method`), registered by an entry point
(group `ntg_testbed.methods`). Its `plan` is pure: scenario in, steps out (tested without root).
A step carries its parameters typed (a `StepParams` subclass of the method's) and the parts it
runs (names in the PARTS registry, ntgcore.parts); the scenario model asks every registered method
whether the `testbed:` section suits it (`Method.check`) and joins its own sections
(`Method.options`) into `testbed:` (docs/architecture.md, "How to add a method").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

from analysis.hashing import hash_tuple, make_tuple
from analysis.live import MethodAnalysis
from ntgcore.errors import BadInput
from ntgcore.registry import PARTS
from ntgcore.scenario import Flow, GeneratorSpec, Scenario, TestbedSpec

NS = 1_000_000_000
PROTOCOL_NUMBERS = {"icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58}
REALTIME_GRACE_S = 10.0  # a realtime generator may run this much past the scenario's last packet


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # a parameter a step does not have (not in the manifest's `params`)


@dataclass
class StepParams:
    """A step's parameters: each method subclasses it with its own fields (default UNSET). The
    manifest's `params` are the fields that are set, the method's first; read like a mapping
    (`params["copies"]`) by the analysis and the tests. The fields here are the ones the executor
    and the runner read, whatever the method."""

    start_lead_s: float = UNSET  # several hosts: their agreed start, after the step begins
    deadline_s: float = UNSET  # a step whose length its method knows (multiply)
    attacks_last_s: float = UNSET  # the attack sessions' span (set by the attack planning)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__eq__ = StepParams.__eq__  # type: ignore[method-assign]  # kept by @dataclass

    def __eq__(self, other: object) -> bool:
        """Equal to the same parameters, or to the mapping the manifest holds of them."""
        if isinstance(other, StepParams):
            return self.as_dict() == other.as_dict()
        if isinstance(other, dict):
            return self.as_dict() == other
        return NotImplemented

    def as_dict(self) -> dict[str, Any]:
        own = [f.name for f in fields(self) if f.name not in _BASE_PARAMS]
        keys = [*own, *_BASE_PARAMS]
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not UNSET}

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key, UNSET) if key in self._names() else UNSET
        if value is UNSET:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._names() and getattr(self, str(key)) is not UNSET

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def _names(self) -> set[str]:
        return {f.name for f in fields(self)}


_BASE_PARAMS = tuple(f.name for f in fields(StepParams))


@dataclass
class Step:
    name: str
    scenario: Scenario
    generators: list[GeneratorSpec]
    kind: str = "run"  # run | topspeed | load | rate | hosts
    params: StepParams = field(default_factory=StepParams)
    # the parts it runs (PARTS names), started in their order; empty: the scenario's (planned_parts)
    parts: list[str] = field(default_factory=list)
    # generator title -> the `attacks:` TCP dialogues it plays (GeneratorSpec.plays_attacks)
    attack_sessions: dict[str, tuple[list[dict], list[str]]] = field(default_factory=dict)
    # generator title -> the scenario it sends instead of `scenario` (its share: testbed.spread)
    shares: dict[str, Scenario] = field(default_factory=dict)

    def deadline_s(self) -> float:
        """Wall seconds after which the step is over whatever the generators say."""
        tb = self.scenario.testbed
        assert tb is not None
        if "deadline_s" in self.params:  # a step whose length its method knows (multiply)
            return float(self.params.deadline_s)
        delay = (
            max((g.start for g in self.generators), default=0) / NS
        )  # the latest generator start
        delay += self.params.get(
            "start_lead_s", 0.0
        )  # several hosts: their agreed start comes later
        if any(g.pace == "topspeed" for g in self.generators):
            return (tb.duration or 0) / NS + delay
        horizon = (
            max(
                [f.last_due_ns for f in self.scenario.flows]
                + [s.horizon_ns for s in self.scenario.sessions]  # an estimate, generous
            )
            / NS
        )
        # the attack replay, if any
        horizon = max(horizon, self.params.get("attacks_last_s", 0.0))
        return horizon + delay + REALTIME_GRACE_S

    def stopped_at_deadline_is_planned(self, spec: GeneratorSpec) -> bool:
        """A generator the deadline stopped finished as planned (else it was still sending)."""
        return self.kind != "run" or spec.pace == "topspeed"


@dataclass(frozen=True)
class Method:
    """`plan(scenario) -> steps` (pure); `analysis`, when the method has tables and figures of
    its own, is its `analysis.py` (analysis.live.MethodAnalysis: `analyze(steps)` adds tables to
    the metrics, `plots(run, doc, manifest)` writes figures, `report(doc)` adds sections).

    What the scenario model asks of it (ntgcore.scenario): `sections`, the `testbed:` sections
    that belong to it (another method's scenario may not set them), `options`, sections of its
    own joined into `testbed:` (`{"twostep": TwoStepSpec}`: `testbed.twostep`), and `rules`, its
    own checks of the `testbed:` section (worded for the user; also for its sections when another
    method is chosen). What a run asks of it: `parts`, the parts its steps run beyond the
    scenario's (PARTS names: failover's `vrrp`), and `sends`: whether its steps send the
    scenario's generators (multiply's part makes the traffic itself); `shortened` and `trials`:
    how `testbed run --duration` and `--trials` change its sections."""

    name: str
    plan: Callable[[Scenario], list[Step]]
    analysis: MethodAnalysis | None = None
    summary: str = ""
    sections: tuple[str, ...] = ()
    options: dict[str, type[BaseModel]] = field(default_factory=dict)
    rules: Callable[[TestbedSpec], str | None] | None = None
    parts: tuple[str, ...] = ()
    sends: bool = True
    # `testbed run --duration T`: the changes of its sections that make its steps T long
    shortened: Callable[[TestbedSpec, int], dict[str, Any]] | None = None
    # `testbed run --trials N`: the changes of its sections for N repeated trials (None: it has none)
    trials: Callable[[TestbedSpec, int], dict[str, Any]] | None = None

    def check(self, tb: TestbedSpec) -> str | None:
        """Why `tb` does not suit this method (chosen or not), or None."""
        problem = self.rules(tb) if self.rules is not None else None
        if problem:
            return problem
        for section in (*self.sections, *self.options):
            if tb.method != self.name and getattr(tb, section, None) is not None:
                return f"`{section}` belongs to method `{self.name}`"
        return None

    def steps(self, scenario: Scenario) -> list[Step]:
        """The planned steps, each with its parts (the scenario's and the method's when its
        planner did not list them), in the order they start."""
        steps: list[Step] = []
        several = len(scenario.each_dut()) > 1
        for one in scenario.each_dut():  # `testbed.duts`: the method's steps once per DUT
            planned = self.plan(one)
            if several:
                assert one.testbed is not None
                for step in planned:
                    step.name = f"{one.testbed.dut.label}-{step.name}"
            steps += planned
        for step in steps:
            if not step.parts:
                step.parts = planned_parts(step.scenario, self)
        return steps


def planned_parts(scenario: Scenario, method: Method) -> list[str]:
    """The parts of a step of `method` on `scenario`: those the scenario's `testbed:` sections
    ask for (capture, dut, monitor, faults: PartPlugin.wanted) and the method's own, in the
    order they start (PartPlugin.order; the generators are prepared at GENERATORS_ORDER)."""
    tb = scenario.testbed
    assert tb is not None
    names = [p.name for p in PARTS if p.wanted(tb)] + list(method.parts)
    return sorted(dict.fromkeys(names), key=lambda n: PARTS.get(n).order)


def template_flow(scenario: Scenario) -> Flow:
    if not scenario.flows:
        raise BadInput(
            "this method copies the scenario's first flow into its steps: add one to `flows`"
        )
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
    if scenario.sessions:
        raise BadInput(
            "testbed.spread splits `flows` by their key hash; `sessions` are not split: run "
            "them on one generator host"
        )
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
