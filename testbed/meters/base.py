"""The flow-meter contract: the options every meter has (`MeterSpec`), one `Meter` object per
meter folder (its argv for live capture and for reading a pcap, its own counters, the rules a
conforming meter with those options follows), and what one run of a meter leaves (`MeterRun`).

A meter exports NetFlow v5 / v9 / IPFIX to the collector (testbed.meters.collector: nfcapd on
127.0.0.1 in the meter's own namespace), or writes its own records where it has no such export
(`exports = False`: nfpcapd writes nfcapd files itself, argus its own record file); then its
records are read back from its own output instead.

Every run, live or offline, leaves the same files in its folder:

    records.parquet    the collected records (analysis.flowmeter.records.COLLECTED_SCHEMA)
    export.pcap        the export packets on the meter's loopback (meters that export)
    counters.json      the meter's own counters, the collector's and the export count
    <meter>.log        the meter's stdout and stderr

The offline runner (`run_on_pcap`) is in testbed.meters.offline; the live part in
testbed.meters.live.
"""

from __future__ import annotations

import abc
import json
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, ValidationInfo, field_validator

from analysis.flowmeter.records import COLLECTED_SCHEMA, MeterRules, empty_table
from analysis.flowmeter.steps import COUNTERS_FILE, EXPORT_FILE, RECORDS_FILE
from ntgcore.errors import NtgError, ToolMissing
from ntgcore.files import replacing
from ntgcore.proc import Process, Tool
from ntgcore.scenario import Duration, DutSpec

Version = Literal[5, 9, "ipfix", "nfdump", "argus"]
NETFLOW_VERSIONS: tuple[Version, ...] = (5, 9, "ipfix")
SECOND_NS = 1_000_000_000


class MeterError(NtgError):
    """A meter failed, exported nothing, or exported where no collector listens; the message
    says which, what was kept and what to do."""


def _version_text(v: object) -> str:
    return {5: "NetFlow v5", 9: "NetFlow v9", "ipfix": "IPFIX"}.get(v, repr(v))


class MeterSpec(DutSpec):
    """The options of every flow meter; each meter subclasses it with `kind: Literal["<name>"]`
    and says which of them it has (`versions`, `cannot`: field -> why it cannot set it)."""

    meter: ClassVar[str] = "meter"
    versions: ClassVar[tuple[Version, ...]] = NETFLOW_VERSIONS
    cannot: ClassVar[dict[str, str]] = {}
    exports: ClassVar[bool] = True  # False: it writes its own records (no collector)
    whole_seconds: ClassVar[bool] = True  # its timeouts are whole seconds

    version: Version = Field(
        9,
        description="Export format: 5 (NetFlow v5), 9 (NetFlow v9) or ipfix, where the meter "
        "has it (nfpcapd: nfdump, its own records; argus: argus).",
    )
    active_timeout: Duration = Field(
        60 * SECOND_NS, description="Active timeout: a flow is exported after this long."
    )
    idle_timeout: Duration = Field(
        15 * SECOND_NS, description="Idle (inactive) timeout: a flow quiet this long ends."
    )
    max_flows: int = Field(
        8192, ge=1, le=100_000_000, description="Flow table size (flows tracked at once)."
    )
    key_vlan: bool = Field(False, description="The VLAN id is part of the flow key.")
    collector_port: int = Field(
        9995, ge=1024, le=65535, description="UDP port of the collector (127.0.0.1, its place)."
    )

    @field_validator("version", mode="before")
    @classmethod
    def _has_version(cls, v: Any) -> Any:
        if v == 10 or v == "10":
            v = "ipfix"
        if v not in cls.versions:
            has = ", ".join(f"{h} ({_version_text(h)})" for h in cls.versions)
            raise ValueError(f"{cls.meter} exports only {has}; not {v!r}")
        return v

    @field_validator("active_timeout", "idle_timeout", "max_flows", "key_vlan")
    @classmethod
    def _can_set(cls, v: Any, info: ValidationInfo) -> Any:
        """Runs only for a value given (defaults are not validated): a field the meter cannot
        set is refused, naming the meter; a timeout must be whole seconds where it counts so."""
        name = str(info.field_name)
        why = cls.cannot.get(name)
        if why and not (name == "key_vlan" and v is False):
            raise ValueError(f"{cls.meter} cannot set it: {why}")
        if name.endswith("timeout"):
            if v <= 0:
                raise ValueError("must be more than 0")
            if cls.whole_seconds and v % SECOND_NS:
                raise ValueError(
                    f"{cls.meter} takes whole seconds; give e.g. {v // SECOND_NS + 1}s"
                )
        return v

    @property
    def active_s(self) -> int:
        return max(1, -(-self.active_timeout // SECOND_NS))

    @property
    def idle_s(self) -> int:
        return max(1, -(-self.idle_timeout // SECOND_NS))


class Meter(abc.ABC):
    """One flow meter: what it needs, its argv (the bare command: the caller runs it in the
    meter's place) and what it says about itself."""

    name: str
    package: str  # the Debian package named when it is not installed
    tools: tuple[Tool, ...]
    spec: type[MeterSpec]
    summary: str = ""
    stop_signal: int = signal.SIGTERM  # what makes it flush its flows and exit (live)

    @property
    def versions(self) -> tuple[Version, ...]:
        return self.spec.versions

    @property
    def exports(self) -> bool:
        return self.spec.exports

    @abc.abstractmethod
    def live_argv(
        self, spec: MeterSpec, iface: str, collector: tuple[str, int], workdir: Path
    ) -> list[str]:
        """Capture on IFACE, export to COLLECTOR (host, port); files it needs go in WORKDIR."""

    @abc.abstractmethod
    def pcap_argv(
        self, spec: MeterSpec, pcap: Path, collector: tuple[str, int], workdir: Path
    ) -> list[str]:
        """Read PCAP, export everything to COLLECTOR and exit at its end."""

    def counters(self, workdir: Path, output: str) -> dict[str, Any]:
        """Its own counters (packets received / dropped at capture, flows) from OUTPUT, what it
        printed (and what `finish` asked it); {} where it has none."""
        return {}

    def finish(
        self,
        proc: Process,
        workdir: Path,
        argv_prefix: Callable[..., list[str]],
        grace: float = 10.0,
    ) -> str:
        """Stop the running meter so that it exports what it holds (`stop_signal`); returns
        text with the counters it was asked for while stopping ("" where it prints them
        itself when it exits: `counters` reads its log)."""
        proc.stop(self.stop_signal, grace=grace)
        return ""

    def clear(self, workdir: Path) -> None:
        """Remove what an earlier run left in WORKDIR that this one would add to (its own
        record files), before it starts."""
        return None

    def own_records(self, workdir: Path) -> pa.Table:
        """The records it wrote itself (meters with `exports = False`)."""
        return empty_table(COLLECTED_SCHEMA)

    def rules(self, spec: MeterSpec) -> MeterRules:
        """What a conforming meter with these options exports."""
        return MeterRules(
            idle_timeout_ns=spec.idle_s * SECOND_NS if spec.whole_seconds else spec.idle_timeout,
            active_timeout_ns=spec.active_s * SECOND_NS
            if spec.whole_seconds
            else spec.active_timeout,
            key_vlan=spec.key_vlan,
            tcp_end=True,  # RFC 5102 flowEndReason 3: the end of a TCP connection (FIN, RST)
            max_flows=None if "max_flows" in spec.cannot else spec.max_flows,
        )

    def missing(self, with_collector: bool = True) -> list[Tool]:
        from_collector = _collector_tools() if (with_collector and self.exports) else ()
        return [t for t in (*self.tools, *from_collector) if not t.found()]

    def check_installed(self, with_collector: bool = True) -> None:
        """ToolMissing naming the Debian package of each program that is not installed."""
        gone = self.missing(with_collector)
        if gone:
            names = ", ".join(f"{t.command} (package {t.package})" for t in gone)
            pkgs = " ".join(dict.fromkeys(t.package for t in gone))
            raise ToolMissing(
                f"the meter {self.name} needs {names}, not installed: `apt-get install {pkgs}`"
            )


def _collector_tools() -> tuple[Tool, ...]:
    return (Tool("nfcapd", "nfdump"), Tool("nfdump", "nfdump"), Tool("tcpdump", "tcpdump"))


@dataclass
class MeterRun:
    """What one run of a meter left: its records, export capture, counters and output."""

    meter: str
    folder: Path
    records: pa.Table
    counters: dict[str, Any]
    stderr: str
    status: str
    exported: int | None = None  # flow records in the export packets (None: it exports none)
    export_pcap: Path | None = None
    collector: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def collected(self) -> int:
        return self.records.num_rows

    @property
    def lost_in_export(self) -> int | None:
        """Records on the wire that the collector did not store (None: no export stage)."""
        return None if self.exported is None else max(0, self.exported - self.collected)


def write_outputs(folder: Path, records: pa.Table, counters: dict[str, Any]) -> None:
    """records.parquet and counters.json into FOLDER (each written whole, or not at all)."""
    with replacing(folder / RECORDS_FILE) as tmp:
        pq.write_table(records, tmp)
    write_counters(folder, counters)


def write_counters(folder: Path, counters: dict[str, Any]) -> None:
    with replacing(folder / COUNTERS_FILE) as tmp:
        tmp.write_text(json.dumps(counters, indent=1, sort_keys=True, default=str) + "\n")


def read_counters(folder: Path) -> dict[str, Any]:
    """counters.json of FOLDER ({} when there is none yet)."""
    try:
        return json.loads((folder / COUNTERS_FILE).read_text())
    except (OSError, ValueError):
        return {}


def tail(text: str, lines: int = 4) -> str:
    said = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " / ".join(said[-lines:]) if said else "(nothing printed)"


__all__ = [
    "COUNTERS_FILE",
    "EXPORT_FILE",
    "NETFLOW_VERSIONS",
    "RECORDS_FILE",
    "Meter",
    "MeterError",
    "MeterRun",
    "MeterSpec",
    "Version",
    "read_counters",
    "tail",
    "write_counters",
    "write_outputs",
]
