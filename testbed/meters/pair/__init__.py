"""A flow-meter pair under method `failover` (`testbed.failover.meter`, docs/failover.md): the same
meter on the master's and on the backup's segment interface, each in its DUT's namespace with
its own collector (nfcapd on that namespace's loopback), as one part (`PLUGIN`, name
`meterpair`, started just after the VRRP pair and stopped just before it).

Each side's files go into the step folder's `meter-master/` and `meter-backup/`, laid out as a
meter DUT's `meter/` (testbed.meters.base: records.parquet, export.pcap, counters.json, the
meter's log). Process labels (`pids()`, for the monitor and for faults): `vrrp:master:meter`,
`vrrp:backup:meter`, `vrrp:master:collector`, `vrrp:backup:collector`.

With `failover.meter_dies_with_master` the method's plan adds a fault `kill` of
`vrrp:master:meter` at the fault's time (after the master's own fault in the same instant, so
no packet reaches the master between the two): the flows it held unexported are lost, as on a
power cut. Its collector stands for a remote one and goes on. That SIGKILL is what the step
planned, so it does not fail the step; any other end of a meter does.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ntgcore.endpoint import Endpoint
from ntgcore.parts import PAIR_ORDER, Part, PartContext, PartPlugin
from ntgcore.proc import CommandRecord, Tool
from ntgcore.registry import DUT_KINDS
from ntgcore.scenario import FailoverSpec, Scenario, TestbedSpec

from ..base import Meter, MeterError, MeterSpec, read_counters, write_outputs
from ..collector import COLLECTOR_TOOLS, Collector
from ..live import MeterKind, MeterPart

PAIR_METER_ORDER = PAIR_ORDER + 1  # after the VRRP pair: started after it, stopped before it
ROLES = ("master", "backup")
MASTER_METER = "vrrp:master:meter"


def label(role: str) -> str:
    """The process label of ROLE's meter."""
    return f"vrrp:{role}:meter"


def folder_name(role: str) -> str:
    """ROLE's folder in the step folder."""
    return f"meter-{role}"


def pair_meter(spec: FailoverSpec) -> Meter:
    """The Meter of `spec.meter` (a registered flow-meter DUT kind: the scenario checked it)."""
    assert spec.meter is not None
    kind = DUT_KINDS.get(spec.meter.kind)
    if not isinstance(kind, MeterKind) or kind.meter is None:
        raise MeterError(f"testbed.failover.meter.kind: `{spec.meter.kind}` is not a flow meter")
    return kind.meter


class SideMeter(MeterPart):
    """The meter of one DUT of the pair, in `<step>/meter-<role>/`; `planned_kill`: its SIGKILL
    is the step's own fault (meter_dies_with_master), not a failure."""

    def __init__(
        self,
        meter: Meter,
        spec: MeterSpec,
        endpoint: Endpoint,
        step_dir: Path,
        role: str,
        planned_kill: bool,
    ) -> None:
        super().__init__(meter, spec, endpoint, step_dir, step_dir)
        self.role, self.planned_kill = role, planned_kill
        self.folder = Path(step_dir) / folder_name(role)
        self.log_path = self.folder / f"{meter.name}.log"

    def killed(self) -> bool:
        return self.proc is not None and self.proc.record.exit_code == -signal.SIGKILL

    def problem(self) -> str | None:
        if self.planned_kill and self.proc is not None and self.proc.poll() is not None:
            if self.killed():
                return None
        said = super().problem()
        return said and f"the {self.role}'s meter: {said}"


class MeterPairPart(Part):
    """Both sides' meters and collectors (see the module's text)."""

    key = "meter_pair"

    def __init__(self, ctx: PartContext) -> None:
        fo = ctx.testbed.failover
        assert fo is not None and isinstance(fo.meter, MeterSpec)
        self.spec, self.meter = fo.meter, pair_meter(fo)
        self.dies_with_master = fo.meter_dies_with_master
        self.tools = (*self.meter.tools, *(COLLECTOR_TOOLS if self.meter.exports else ()))
        places = {"master": fo.master, "backup": fo.backup}
        self.endpoints = {r: ctx.site.endpoint(places[r]) for r in ROLES}
        if self.dies_with_master and not self.endpoints["master"].local_processes:
            raise MeterError(
                "testbed.failover.meter_dies_with_master: the master "
                f"({fo.master}) is a VM, whose meter is no process of this machine to kill: "
                "leave it out and use the fault power-off (the meter goes with the VM)"
            )
        self.sides = {
            r: SideMeter(
                self.meter,
                self.spec,
                self.endpoints[r],
                ctx.step_dir,
                r,
                planned_kill=self.dies_with_master and r == "master",
            )
            for r in ROLES
        }
        self.collectors = (
            {
                r: Collector(self.endpoints[r].argv, self.spec.collector_port, self.sides[r].folder)
                for r in ROLES
            }
            if self.meter.exports
            else {}
        )
        self._stats: dict[str, Any] | None = None

    def start(self, abort: Callable[[], bool]) -> None:
        for role in ROLES:
            self.sides[role].folder.mkdir(parents=True, exist_ok=True)
            if role in self.collectors:
                self.collectors[role].start()
            self.sides[role].start(abort)

    def problem(self) -> str | None:
        for role in ROLES:
            said = self.sides[role].problem()
            if said:
                return said
            if role in self.collectors:
                said = self.collectors[role].problem()
                if said:
                    return f"the {role}'s collector: {said}"
        return None

    def _side_stats(self, role: str) -> dict[str, Any]:
        side = self.sides[role]
        stats = dict(side.stop())  # the meter first: its last export reaches the collector
        stats["folder"] = folder_name(role)
        stats["log"] = f"{folder_name(role)}/{side.log_path.name}"
        stats["killed"] = side.killed()
        collector = self.collectors.get(role)
        if collector is None or collector.proc.popen is None:
            return stats
        got = collector.stop()
        records = collector.records()
        counters = read_counters(side.folder)
        counters.update(collector=got, collected=records.num_rows)
        write_outputs(side.folder, records, counters)
        exported = (got.get("export") or {}).get("records")
        stats.update(
            collector=got,
            collected=records.num_rows,
            exported=exported,
            lost_in_export=None if exported is None else max(0, exported - records.num_rows),
            records=f"{folder_name(role)}/records.parquet",
            export_pcap=f"{folder_name(role)}/export.pcap",
        )
        return stats

    def stop(self) -> dict[str, Any]:
        if self._stats is not None:
            return self._stats
        sides: dict[str, Any] = {}
        for role in ROLES:
            try:
                sides[role] = self._side_stats(role)
            except MeterError as exc:  # the other side is still stopped and recorded
                sides[role] = {"error": str(exc), "folder": folder_name(role)}
        self._stats = {
            "kind": self.meter.name,
            "version": self.spec.version,
            "rules": asdict(self.meter.rules(self.spec)),  # what the analysis scores against
            "dies_with_master": self.dies_with_master,
            **sides,
        }
        return self._stats

    def records(self) -> list[CommandRecord]:
        out: list[CommandRecord] = []
        for role in ROLES:
            out += self.sides[role].records()
            if role in self.collectors:
                out += self.collectors[role].command_records()
        return out

    def pids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for role in ROLES:
            side = self.sides[role]
            if not self.endpoints[role].local_processes:
                continue  # a VM's: its processes are the guest's
            if side.proc is not None and side.proc.pid is not None and side.proc.poll() is None:
                out[label(role)] = side.proc.pid
            collector = self.collectors.get(role)
            if collector is not None and collector.proc.pid and collector.running():
                out[f"vrrp:{role}:collector"] = collector.proc.pid
        return out


def _wanted(tb: TestbedSpec) -> bool:
    return tb.failover is not None and tb.failover.meter is not None


def _tools(scenario: Scenario) -> list[Tool]:
    tb = scenario.testbed
    if tb is None or tb.failover is None or tb.failover.meter is None:
        return []
    meter = pair_meter(tb.failover)
    return [*meter.tools, *(COLLECTOR_TOOLS if meter.exports else ())]


def _places(tb: TestbedSpec) -> list[tuple[str, str]]:
    fo = tb.failover
    return [] if fo is None else [("failover.master", fo.master), ("failover.backup", fo.backup)]


PLUGIN = PartPlugin(
    "meterpair",
    PAIR_METER_ORDER,
    lambda ctx: [MeterPairPart(ctx)],
    wanted=_wanted,
    tools=_tools,
    places=_places,
    summary="method failover's flow-meter pair: a meter and a collector at the master and at "
    "the backup (`failover.meter`)",
)

__all__ = [
    "MASTER_METER",
    "PAIR_METER_ORDER",
    "PLUGIN",
    "MeterPairPart",
    "SideMeter",
    "folder_name",
    "label",
    "pair_meter",
]
