"""Generator `probe`: a sequence-numbered probe stream through the kernel's IP stack (method
`failover`, docs/failover.md): ICMP echo requests and UDP datagrams at each flow's rate, and a
TCP session that carries one numbered message per packet (does it survive a fail-over?).

Unlike the other generators it does not write frames onto the interface: it sends from sockets
at the endpoint, so the kernel resolves the destination's MAC address and follows a virtual
address that moves from one device to another (gratuitous ARP), as a real client does. How each
packet is numbered, and how a reply names its request in a capture, is in worker.py. The worker
is a standalone script run with this Python inside the endpoint's namespace; it writes
`probe-plan.json`, `probe-summary.json` and `probe.log` into the generator's folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import Field

from ntgcore.endpoint import Endpoint
from ntgcore.errors import GeneratorError
from ntgcore.generator import Capabilities, Counters, GeneratorPlugin, ProcessGenerator
from ntgcore.proc import Process
from ntgcore.scenario import GeneratorSpec

PLAN, SUMMARY, LOG = "probe-plan.json", "probe-summary.json", "probe.log"
WORKER = Path(__file__).resolve().parent / "worker.py"
HEADER = 16  # the payload's magic, number and send time
EXIT_STATUS = {
    0: "completed",
    130: "interrupted",
    143: "interrupted",
    -2: "interrupted",
    -15: "interrupted",
}


class ProbeSpec(GeneratorSpec):
    """The probe stream's options."""

    name: Literal["probe"] = "probe"
    ports: int = Field(
        256,
        ge=1,
        le=1000,
        description="UDP: source ports cycled through, so a reply's "
        "destination port names its request (the window must exceed the round trip).",
    )
    base_port: int = Field(20000, ge=1024, le=64535, description="UDP: the first source port.")


def probe_flows(scenario) -> list[dict]:
    """The worker's flows; refuses what it cannot send (IPv6, blocks, meta-flows, SCTP) and a
    second icmp or udp flow, whose replies could not be told from the first's."""
    out = []
    for proto in ("icmp", "udp"):
        if sum(f.protocol == proto for f in scenario.flows) > 1:
            raise GeneratorError(
                f"probe: at most one {proto} flow: replies name their request by "
                f"{'identifier' if proto == 'icmp' else 'port'}, shared by every {proto} flow"
            )
    for i, f in enumerate(scenario.flows):
        where = f"flows[{i}]" + (f" ({f.name})" if f.name else "")
        if f.protocol not in ("icmp", "udp", "tcp") or f.ip_version != 4:
            raise GeneratorError(
                f"probe: {where}: the probe sends IPv4 icmp, udp or tcp, not "
                f"{f.protocol} over IPv{f.ip_version}"
            )
        if not (f.src.is_single and f.dst.is_single) or f.repeat is not None:
            raise GeneratorError(f"probe: {where}: single addresses and no `repeat`, please")
        out.append(
            {
                "name": f.name or f"flow{i}",
                "protocol": f.protocol,
                "src": str(f.src.interface.ip),
                "dst": str(f.dst.interface.ip),
                "dport": f.dst_port.bounds[0] if f.dst_port else 0,
                "size": max(HEADER, f.payload.sizes[0]),
                "start_ns": f.start,
                "period_ns": f.period_ns,
                "packets": f.packet_count,
            }
        )
    return out


class Probe(ProcessGenerator):
    name = "probe"
    EXIT_STATUS = EXIT_STATUS

    def version(self) -> str:
        return f"ntg probe (python {sys.version.split()[0]})"

    def prepare(self, scenario, run_dir: Path, seed: int, endpoint: Endpoint | None = None) -> None:
        if endpoint is None:
            raise GeneratorError("probe sends live only: the scenario needs a `testbed:` section")
        spec = self.spec if isinstance(self.spec, ProbeSpec) else ProbeSpec()
        self._run_dir = Path(run_dir)
        plan = {
            "ports": spec.ports,
            "base_port": spec.base_port,
            "summary": str(self._run_dir / SUMMARY),
            "flows": probe_flows(scenario),
        }
        (self._run_dir / PLAN).write_text(json.dumps(plan, indent=1) + "\n")
        argv = endpoint.argv(sys.executable, str(WORKER), str(self._run_dir / PLAN))
        self._proc = Process("probe", argv, stdout=self.open_log(LOG), stderr=subprocess.STDOUT)

    def on_exit(self) -> None:
        assert self._proc is not None
        if self.status() == "failed" and not self._proc.record.note:
            self._proc.record.note = self.last_log_line(LOG)

    def counters(self) -> Counters:
        s = self.read_json(SUMMARY)
        sent, failed, nbytes = s.get("sent", 0), s.get("failed", 0), s.get("bytes", 0)
        return Counters(sent + failed, sent, failed, nbytes, nbytes, 0)


PLUGIN = GeneratorPlugin(
    name="probe",
    options=ProbeSpec,
    adapter=Probe,
    capabilities=Capabilities(
        offline=False,
        live=True,
        counters=("packets_attempted", "packets_sent", "packets_failed", "bytes_sent"),
    ),
    summary="numbered ICMP echo, UDP and TCP probes through the kernel's stack (method failover)",
)

__all__ = ["PLUGIN", "Probe", "ProbeSpec", "probe_flows"]
