"""pmacct's pmacctd (Debian package pmacct, 1.7.7) with its `nfprobe` plugin as a flow meter:
NetFlow v5, v9 and IPFIX.

It takes a configuration file (written into the run's folder): `plugins: nfprobe`,
`nfprobe_version: 5|9|10`, `nfprobe_timeouts` (the idle timeout for tcp, tcp.rst, tcp.fin, udp,
icmp and general; `maxlife` the active one; `expint=1`: expiry checked every second),
`nfprobe_maxflows` (table size), `vlan` in `aggregate` to key on the VLAN. Reading a pcap
(`pcap_savefile`) it sleeps `pcap_savefile_delay` first (1 s, the least it takes: 0 means its
built-in 2 s) and about 2 s when it stops its plugin at the end, so a run takes about 3 s.
It prints its capture counters (`received_packets=N dropped_packets=M`) when it exits.
Stopped with SIGINT (its core then stops the plugin, which exports every flow).

What it does (1.7.7, found with these tests): reading a pcap its timeouts run on the wall clock,
so every flow is one record, exported at the end; both directions of a flow carry the pair's
first and last times; bytes are L3; ICMP dport = type * 256 + code in v5 and IPFIX, 0 in v9;
v5 drops IPv6, and v5 times from a pcap are wrong (its uptime base is the wall clock)."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from ntgcore.parts import DutKind
from ntgcore.proc import Process, Tool

from ..base import Meter, MeterSpec
from ..live import meter_kind


class PmacctSpec(MeterSpec):
    meter: ClassVar[str] = "pmacct"
    kind: Literal["pmacct"] = Field(
        "pmacct", description="pmacct: pmacctd with its nfprobe plugin, NetFlow v5/v9/IPFIX."
    )


class Pmacct(Meter):
    name = "pmacct"
    package = "pmacct"
    tools = (Tool("pmacctd", "pmacct"),)
    spec = PmacctSpec
    summary = "pmacct (pmacctd, nfprobe): NetFlow v5/v9/IPFIX"
    stop_signal = signal.SIGINT

    def config(self, spec: MeterSpec, source: dict[str, str], collector: tuple[str, int]) -> str:
        idle = spec.idle_s
        timeouts = ":".join(
            f"{n}={idle}" for n in ("tcp", "tcp.rst", "tcp.fin", "udp", "icmp", "general")
        )
        keys = {
            "daemonize": "false",
            **source,
            "plugins": "nfprobe",
            "nfprobe_receiver": f"{collector[0]}:{collector[1]}",
            "nfprobe_version": "10" if spec.version == "ipfix" else str(spec.version),
            "nfprobe_timeouts": f"{timeouts}:maxlife={spec.active_s}:expint=1",
            "nfprobe_maxflows": str(spec.max_flows),
        }
        if spec.version != 5 or spec.key_vlan:
            fields = "src_host, dst_host, src_port, dst_port, proto, tos, tcpflags"
            keys["aggregate"] = fields + (", vlan" if spec.key_vlan else "")
        return "".join(f"{k}: {v}\n" for k, v in keys.items())

    def _argv(self, workdir: Path, name: str, text: str) -> list[str]:
        path = workdir / name
        path.write_text(text)
        return ["pmacctd", "-f", str(path)]

    def live_argv(self, spec, iface, collector, workdir) -> list[str]:
        text = self.config(spec, {"pcap_interface": iface}, collector)
        return self._argv(workdir, "pmacctd.conf", text)

    def pcap_argv(self, spec, pcap, collector, workdir) -> list[str]:
        source = {"pcap_savefile": str(pcap), "pcap_savefile_delay": "1"}
        return self._argv(workdir, "pmacctd-pcap.conf", self.config(spec, source, collector))

    def finish(
        self,
        proc: Process,
        workdir: Path,
        argv_prefix: Callable[..., list[str]],
        grace: float = 10.0,
    ) -> str:
        """SIGINT to the core process only: it stops its plugin (which exports every flow) and
        prints its capture counters; the whole group signalled, the plugin ends first and the
        core exits without them."""
        if proc.pid is not None and proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            proc.wait(grace)
        proc.stop(signal.SIGTERM, grace=2)
        return ""

    def counters(self, workdir: Path, output: str) -> dict[str, Any]:
        found = re.findall(r"received_packets=(\d+) dropped_packets=(\d+)", output)
        if not found:
            return {}
        received, dropped = map(int, found[-1])
        return {"packets_received": received, "packets_dropped": dropped}


METER = Pmacct()
KIND: DutKind = meter_kind(METER)
