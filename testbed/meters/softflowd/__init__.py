"""softflowd (Debian package softflowd, 1.1.0) as a flow meter: NetFlow v5, v9 and IPFIX.

Options (softflowd(8)): `-v 5|9|10`, the idle timeout on every protocol (`-t general= tcp=
tcp.rst= tcp.fin= udp= icmp=`, whole seconds), the active one as `-t maxlife=`, `-t expint=1`
(expiry checked every second; its default is 60 s), the table size `-m`, the key with VLAN
`-T vlan`. v9/IPFIX carry absolute millisecond times (`-A milli`); pcap mode adds `-a` (times
taken from the capture, without it they are off by the wall clock). Live, its control socket
(`-c`) answers `softflowctl statistics`: packets received and dropped by libpcap.

What it does (1.1.0, found with these tests): reading a pcap it applies no timeout at all (every
flow is one record, flushed at the end of the file) except table overflow (`-m`: the least
recently used flow is expired); both directions of a flow carry the pair's first and last times;
bytes are L3; ICMP dport = type * 256 + code, except ICMPv6 in v9 (0); v5 drops IPv6. Live it
gets packets from libpcap in whole blocks (no immediate mode): at a low rate it sees nothing
until a block fills, and what is left in the ring when it stops is never counted (the counter
`packets_unprocessed`). SIGTERM kills it without export and `softflowctl shutdown` exits
without expiring its flows: it is stopped with `expire-all` first (`finish`).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from ntgcore.parts import DutKind
from ntgcore.proc import Process, Tool

from ..base import Meter, MeterSpec
from ..live import meter_kind


def control_socket(workdir: Path) -> Path:
    """softflowd's control socket for a run in WORKDIR: in /tmp under a digest of the folder's
    path (a Unix socket's path has at most 107 bytes, which a run folder's can exceed)."""
    digest = hashlib.sha1(str(Path(workdir).resolve()).encode()).hexdigest()[:16]
    return Path("/tmp") / f"ntg-softflowd-{digest}.ctl"


class SoftflowdSpec(MeterSpec):
    meter: ClassVar[str] = "softflowd"
    kind: Literal["softflowd"] = Field("softflowd", description="softflowd: NetFlow v5/v9/IPFIX.")


_COUNTERS = {
    "packets_processed": r"Packets processed: (\d+)",
    "flows_expired": r"Flows expired: (\d+)",
    "flows_exported": r"Flows exported: (\d+)",
    "records_exported": r"Flows exported: \d+ \((\d+) records\)",
    "export_packets": r"Flows exported: \d+ \(\d+ records\) in (\d+) packets",
    "export_failures": r"in \d+ packets \((\d+) failures\)",
    "packets_received": r"Packets received by libpcap: (\d+)",
    "packets_dropped": r"Packets dropped by libpcap: (\d+)",
    "dropped_by_interface": r"Packets dropped by interface: (\d+)",
    "flows_forced": r"Flows expired: \d+ \((\d+) forced\)",
}


def _version_flag(v: object) -> str:
    return "10" if v == "ipfix" else str(v)


class Softflowd(Meter):
    name = "softflowd"
    package = "softflowd"
    tools = (Tool("softflowd", "softflowd"), Tool("softflowctl", "softflowd"))
    spec = SoftflowdSpec
    summary = "softflowd: NetFlow v5/v9/IPFIX"

    def _common(self, spec: MeterSpec, collector: tuple[str, int]) -> list[str]:
        idle = str(spec.idle_s)
        argv = ["-d", "-n", f"{collector[0]}:{collector[1]}", "-v", _version_flag(spec.version)]
        if spec.version != 5:
            argv += ["-A", "milli"]
        for name in ("general", "tcp", "tcp.rst", "tcp.fin", "udp", "icmp"):
            argv += ["-t", f"{name}={idle}"]
        argv += ["-t", f"maxlife={spec.active_s}", "-t", "expint=1", "-m", str(spec.max_flows)]
        argv += ["-T", "vlan" if spec.key_vlan else "full"]
        return argv

    def clear(self, workdir: Path) -> None:
        """A control socket a killed softflowd left for this folder."""
        control_socket(workdir).unlink(missing_ok=True)

    def live_argv(self, spec, iface, collector, workdir) -> list[str]:
        return [
            "softflowd",
            "-i",
            iface,
            "-c",
            str(control_socket(workdir)),
            "-p",
            str(workdir / "softflowd.pid"),
            *self._common(spec, collector),
        ]

    def pcap_argv(self, spec, pcap, collector, workdir) -> list[str]:
        return ["softflowd", "-r", str(pcap), "-a", *self._common(spec, collector)]

    def _ctl(self, workdir: Path, argv_prefix: Callable[..., list[str]], command: str) -> str:
        proc = Process(
            f"softflowctl-{command}",
            argv_prefix("softflowctl", "-c", str(control_socket(workdir)), command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            out = proc.start().communicate(timeout=10)
        except OSError:
            return ""
        return out[0].decode(errors="replace") if out else ""

    def finish(
        self,
        proc: Process,
        workdir: Path,
        argv_prefix: Callable[..., list[str]],
        grace: float = 10.0,
    ) -> str:
        """softflowd 1.1.0 exports nothing when it stops: SIGTERM kills it at once, and
        `softflowctl shutdown` exits without expiring its flows. Hence `expire-all` (every
        tracked flow exported now), its statistics, then `shutdown`."""
        expired = self._ctl(workdir, argv_prefix, "expire-all")
        time.sleep(0.2)  # its export datagrams leave before the statistics are asked
        stats = self._ctl(workdir, argv_prefix, "statistics")
        self._ctl(workdir, argv_prefix, "shutdown")
        proc.wait(grace)
        proc.stop(grace=2)
        return expired + "\n" + stats

    def counters(self, workdir: Path, output: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, pattern in _COUNTERS.items():
            found = re.findall(pattern, output)
            if found:
                out[key] = int(found[-1])
        if "packets_received" in out and "packets_processed" in out:
            # live: libpcap hands it whole blocks; what is still in the ring when it stops is
            # received (by the kernel's socket) but never seen by softflowd
            out["packets_unprocessed"] = out["packets_received"] - out["packets_processed"]
        return out


METER = Softflowd()
KIND: DutKind = meter_kind(METER)
