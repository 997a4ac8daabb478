"""nfdump's nfpcapd (Debian package nfdump, 1.7.1) as a flow meter. It has no NetFlow v5/v9/IPFIX
export: it makes nfdump records itself and writes them as nfcapd files (`-w`), read back here
with nfdump like the collector's (version `nfdump`). Its `-H host/port` mode (records to a remote
nfcapd, "netflow version 240") sent nothing at all in 1.7.1, from a pcap or live, hence `-w`.

Options: `-e active,inactive` (whole seconds; its cache is checked every 10 s, nfpcapd(1)).
It cannot bound its table (`-B` sets the initial cache size, which grows as needed) nor key on
the VLAN. It prints `Total: Processed: N, skipped: ...` and, live, `Stat: received: N, dropped
by OS/Buffer: M` when it stops.

What it does (1.7.1, found with these tests): per-direction records with their own times
(milliseconds), L3 bytes; timeouts on packet time in pcap mode, the active one up to 10 s late
(its cache check); one record per packet for ICMP and for UDP to or from port 53 (DNS)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field

from ntgcore.parts import DutKind
from ntgcore.proc import Tool

from ..base import Meter, MeterSpec, Version
from ..collector.nfdump import flow_files, read_flows
from ..live import meter_kind

FLOWS_DIR = "nfpcapd"


class NfpcapdSpec(MeterSpec):
    meter: ClassVar[str] = "nfpcapd"
    versions: ClassVar[tuple[Version, ...]] = ("nfdump",)
    exports: ClassVar[bool] = False
    cannot: ClassVar[dict[str, str]] = {
        "max_flows": "its flow cache grows as needed (-B only sets its initial size)",
        "key_vlan": "no option of nfpcapd keys flows on the VLAN",
    }
    kind: Literal["nfpcapd"] = Field(
        "nfpcapd", description="nfpcapd: nfdump's pcap meter, writing nfcapd files itself."
    )
    version: Version = Field("nfdump", description="nfdump: its own records (nfcapd files).")


_COUNTERS = {
    "packets_received": r"Stat: received: (\d+)",
    "packets_dropped": r"dropped by OS/Buffer: (\d+)",
    "packets_processed": r"Total: Processed: (\d+)",
    "packets_skipped": r"Total: Processed: \d+, skipped: (\d+)",
    "short_caplen": r"Total: Processed: \d+, skipped: \d+, short caplen: (\d+)",
    "unknown": r"Total: Processed: \d+, skipped: \d+, short caplen: \d+, unknown: (\d+)",
    "flows": r"Flows: (\d+), Packets:",
}


class Nfpcapd(Meter):
    name = "nfpcapd"
    package = "nfdump"
    tools = (Tool("nfpcapd", "nfdump"), Tool("nfdump", "nfdump"))
    spec = NfpcapdSpec
    summary = "nfpcapd (nfdump): its own records"

    def _flows(self, workdir: Path) -> Path:
        out = workdir / FLOWS_DIR
        out.mkdir(parents=True, exist_ok=True)
        return out

    def live_argv(self, spec, iface, collector, workdir) -> list[str]:
        timeouts = f"{spec.active_s},{spec.idle_s}"
        return [
            "nfpcapd",
            "-i",
            iface,
            "-w",
            str(self._flows(workdir)),
            "-e",
            timeouts,
            "-t",
            "3600",
        ]

    def pcap_argv(self, spec, pcap, collector, workdir) -> list[str]:
        timeouts = f"{spec.active_s},{spec.idle_s}"
        return ["nfpcapd", "-r", str(pcap), "-w", str(self._flows(workdir)), "-e", timeouts]

    def clear(self, workdir: Path) -> None:
        for old in flow_files(workdir / FLOWS_DIR):
            old.unlink()

    def own_records(self, workdir: Path) -> pa.Table:
        return read_flows(workdir / FLOWS_DIR, workdir / "nfdump.log")

    def counters(self, workdir: Path, output: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, pattern in _COUNTERS.items():
            found = re.findall(pattern, output)
            if found:
                out[key] = int(found[-1])
        return out


METER = Nfpcapd()
KIND: DutKind = meter_kind(METER)
