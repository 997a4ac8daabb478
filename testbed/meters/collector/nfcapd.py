"""The collector: nfcapd on 127.0.0.1:PORT inside the meter's own namespace (or VM), writing
FOLDER/nfcapd/nfcapd.*, and a capture of the export packets on the same loopback
(FOLDER/export.pcap), so that records lost between meter and collector are counted apart from
records the meter never made.

    c = Collector(endpoint.argv, 9995, step_dir / "meter").start()
    ... the meter exports to 127.0.0.1:9995 ...
    stats = c.stop()          # waits for the export packets to settle, stops nfcapd
    table = c.records()       # COLLECTED_SCHEMA, read back with nfdump

nfcapd's own closing line (`Ident: ... Flows: N, Packets: ..., Sequence Errors: ...`) is kept
in the statistics. A port already taken, a folder it cannot write: CollectorError naming the
port or folder and what to do.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from ntgcore.errors import NtgError
from ntgcore.proc import CommandRecord, Process, Tool

from ...parts.tcpdump import Tcpdump, TcpdumpError
from .export import ExportCount, count_export
from .nfdump import flow_files, read_flows

NFCAPD = Tool("nfcapd", "nfdump")
NFDUMP = Tool("nfdump", "nfdump")
COLLECTOR_TOOLS = (NFCAPD, NFDUMP, Tool("tcpdump", "tcpdump"))
READY_TIMEOUT_S = 10.0
# nfcapd's socket buffer (-B): a meter flushing its table at the end of a pcap sends thousands of
# datagrams at once; with the kernel's default (208 KiB) nfcapd lost a tenth of 50,000 records.
SOCKET_BUFFER = 64 * 1024 * 1024
# The export capture runs in immediate mode (TPACKET_V2: one slot of the snap length per packet,
# and loopback shows every packet twice to the ring): export datagrams are at most ~1.5 KB here,
# so 4,000 bytes keep them whole, and 64 MiB hold ~8,000 of them in a burst.
EXPORT_SNAPLEN, EXPORT_BUFFER_KIB = 4000, 65536
_CLOSING = re.compile(
    r"Flows: (\d+), Packets: (\d+), Bytes: (\d+), Sequence Errors: (\d+), Bad Packets: (\d+)"
)


class CollectorError(NtgError):
    """The collector could not start or failed; the message says why and what to do."""


def parse_closing(text: str) -> dict[str, int]:
    """nfcapd's closing statistics line (the last one), or {}."""
    found = _CLOSING.findall(text)
    if not found:
        return {}
    flows, packets, octets, seq_errors, bad = map(int, found[-1])
    return {
        "flows": flows,
        "packets": packets,
        "bytes": octets,
        "sequence_errors": seq_errors,
        "bad_packets": bad,
    }


class Collector:
    """nfcapd on 127.0.0.1:`port` where `argv_prefix` runs commands, plus the export capture."""

    def __init__(
        self,
        argv_prefix: Callable[..., list[str]],
        port: int,
        folder: Path,
        capture: bool = True,
    ) -> None:
        self.port, self.folder = port, Path(folder)
        self.flows = self.folder / "nfcapd"
        self.log = self.folder / "nfcapd.log"
        self.pcap = self.folder / "export.pcap"
        self._log_file: Any = None
        self.proc = Process(
            "nfcapd",
            argv_prefix(
                "nfcapd",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "-w",
                str(self.flows),
                "-t",
                "3600",
                "-B",
                str(SOCKET_BUFFER),
            ),
        )
        self.tcpdump = (
            Tcpdump(
                argv_prefix,
                "lo",
                self.pcap,
                snaplen=EXPORT_SNAPLEN,
                buffer_kib=EXPORT_BUFFER_KIB,
                bpf="udp",
                name="export-capture",
                immediate=True,
            )
            if capture
            else None
        )
        self.export: ExportCount | None = None
        self._stats: dict[str, Any] | None = None

    def start(self) -> Collector:
        self.flows.mkdir(parents=True, exist_ok=True)
        for old in flow_files(self.flows):  # an earlier run's, in the same folder
            old.unlink()
        if self.tcpdump is not None:
            try:
                self.tcpdump.start()
            except TcpdumpError as exc:
                raise CollectorError(f"the export capture on lo did not start: {exc}") from None
        self._log_file = open(self.log, "wb")
        self.proc.stdout = self.proc.stderr = self._log_file
        try:
            self.proc.start()
        except OSError as exc:
            self._abandon()
            raise CollectorError(
                f"cannot run nfcapd: {exc}; install it with `apt-get install nfdump`"
            ) from None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "Startup nfcapd" not in self.log_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                said = " / ".join(ln for ln in self.log_text().splitlines() if ln.strip())
                self._abandon()
                hint = (
                    f"port {self.port} is taken in that place: give the meter another "
                    "`collector_port`, or stop what listens there"
                    if "in use" in said
                    else f"see {self.log}"
                )
                what = (
                    f"exited ({self.proc.record.status})"
                    if self.proc.record.exit_code is not None
                    else f"did not start within {READY_TIMEOUT_S:g}s"
                )
                raise CollectorError(
                    f"the collector (nfcapd on 127.0.0.1:{self.port}) {what}: "
                    f"{said or '(nothing logged)'}; {hint}"
                )
            time.sleep(0.02)
        return self

    def _abandon(self) -> None:
        self.proc.stop(grace=2)
        if self.tcpdump is not None:
            self.tcpdump.stop(settle=0)
        if self._log_file is not None:
            self._log_file.close()

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def running(self) -> bool:
        return self.proc.poll() is None

    def problem(self) -> str | None:
        if self.proc.popen is None or self.running():
            return None
        return f"the collector (nfcapd) ended: {self.proc.record.status}; see {self.log}"

    def stop(self) -> dict[str, Any]:
        """Wait for the export packets to settle, stop nfcapd (it writes its file on SIGTERM)
        and count what was exported; harmless to call again."""
        if self._stats is not None:
            return self._stats
        capture: dict[str, Any] = {}
        if self.tcpdump is not None:
            capture = dict(self.tcpdump.stop(settle=0.3))
        time.sleep(0.1)  # the last datagram read from nfcapd's socket
        ended_before = self.proc.record.exit_code is not None or self.proc.poll() is not None
        self.proc.stop(signal.SIGTERM, grace=5)
        if self._log_file is not None:
            self._log_file.close()
        self.export = count_export(self.pcap, self.port) if self.tcpdump is not None else None
        self._stats = {
            "port": self.port,
            "status": self.proc.record.status,
            "ended_early": ended_before,
            "nfcapd": parse_closing(self.log_text()),
            **({"export": self.export.as_dict(), "capture": capture} if self.export else {}),
            # the export count is exact only when the capture lost nothing
            "export_complete": self.export is not None and capture.get("dropped_by_kernel") == 0,
        }
        return self._stats

    def records(self) -> pa.Table:
        """The collected records (COLLECTED_SCHEMA); after `stop`."""
        return read_flows(self.flows, self.folder / "nfdump.log")

    def command_records(self) -> list[CommandRecord]:
        out = [self.proc.record]
        if self.tcpdump is not None:
            out.append(self.tcpdump.record)
        return out

    def pids(self) -> dict[str, int]:
        return {"collector:nfcapd": self.proc.pid} if self.proc.pid and self.running() else {}


__all__ = ["COLLECTOR_TOOLS", "Collector", "CollectorError", "parse_closing"]
