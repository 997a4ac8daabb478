"""The collector as a step's part (`PLUGIN`, name `collector`): nfcapd and the export capture in
the place of a DUT that is a flow meter exporting NetFlow/IPFIX, started just before the DUT
(order DUT_ORDER - 1) and stopped just after it, so the meter's last export is collected. On stop
it reads the records back and writes the step's `meter/records.parquet` and `meter/export.pcap`,
and adds its statistics (and the export count) to `meter/counters.json`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ntgcore.parts import DUT_ORDER, Part, PartContext, PartPlugin
from ntgcore.proc import CommandRecord
from ntgcore.scenario import TestbedSpec

from ..base import MeterSpec, read_counters, write_outputs
from ..live import METER_DIR
from .nfcapd import COLLECTOR_TOOLS, Collector

COLLECTOR_ORDER = DUT_ORDER - 1


class CollectorPart(Part):
    key = "collector"
    tools = COLLECTOR_TOOLS

    def __init__(self, ctx: PartContext) -> None:
        spec = ctx.testbed.dut
        assert isinstance(spec, MeterSpec)
        self.folder = ctx.step_dir / METER_DIR
        endpoint = ctx.site.endpoint(spec.at)
        self.collector = Collector(endpoint.argv, spec.collector_port, self.folder)
        self._stats: dict[str, Any] | None = None

    def start(self, abort: Callable[[], bool]) -> None:
        self.collector.start()

    def problem(self) -> str | None:
        return self.collector.problem()

    def stop(self) -> dict[str, Any]:
        if self._stats is not None:
            return self._stats
        if self.collector.proc.popen is None:
            return {}
        stats = self.collector.stop()
        records = self.collector.records()
        counters = read_counters(self.folder)
        counters.update(collector=stats, collected=records.num_rows)
        write_outputs(self.folder, records, counters)
        export = stats.get("export") or {}
        exported = export.get("records")
        note = None
        if export.get("other_ports") and not export.get("packets"):
            ports = ", ".join(export["other_ports"])
            note = (
                f"the meter exported to port {ports}, where no collector listens (the "
                f"collector is on {self.collector.port}): set `collector_port`"
            )
        elif not export.get("packets"):
            note = "the meter exported nothing (no NetFlow/IPFIX packet reached the collector)"
        elif exported is not None and exported > records.num_rows:
            note = f"{exported - records.num_rows} exported records were not collected"
        self._stats = {
            **({"note": note} if note else {}),
            **stats,
            "collected": records.num_rows,
            "exported": exported,
            "lost_in_export": None if exported is None else max(0, exported - records.num_rows),
            "records": f"{METER_DIR}/records.parquet",
            "export_pcap": f"{METER_DIR}/export.pcap",
        }
        return self._stats

    def records(self) -> list[CommandRecord]:
        return self.collector.command_records()

    def pids(self) -> dict[str, int]:
        return self.collector.pids()


def _wanted(tb: TestbedSpec) -> bool:
    return isinstance(tb.dut, MeterSpec) and tb.dut.exports


PLUGIN = PartPlugin(
    "collector",
    COLLECTOR_ORDER,
    lambda ctx: [CollectorPart(ctx)],
    wanted=_wanted,
    tools=lambda scenario: COLLECTOR_TOOLS,
    places=lambda tb: [("dut.at", tb.dut.at)],
    summary="nfcapd and the export capture beside a flow-meter DUT (its NetFlow/IPFIX)",
)

__all__ = ["COLLECTOR_ORDER", "CollectorPart", "PLUGIN"]
