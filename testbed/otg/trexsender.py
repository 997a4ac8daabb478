"""OTG flows sent by TRex: the ports whose config location says `trex:` (`trex:p1`).

The choice is the port's `location`, as on hardware testers, where a location names the back end
of the port (a chassis, card and port; ixia-c's `service:port`): `p1` is the native engine on
place p1, `trex:p1` a TRex server on the same place. Nothing else in the config changes, and one
config may mix both kinds of port.

At set_config, each TRex port gets the trex generator's `otg_port` (generators/trex/otgport.py,
reached through the registry as the orchestration reaches every generator): a TRex server in the
port's namespace on its interface, and a worker (TRex's client in its own process: it bundles
its own Scapy) that has acquired the port and added the flow's streams; a start only tells it
when to send. The worker keeps a counters file in the engine's `--counters` layout from TRex's
port counters, so the service holds it as an `Engine`: the same counters, pause (SIGUSR1),
resume (SIGUSR2) and stop (SIGTERM). Servers and workers stop when the config is replaced or the
service closes.

A flow becomes one stream per distinct frame of its cycle (stream k: frames[k] at 1/N of the
flow's rate, first at the flow's start + k periods, so packet i = k + jN leaves at its due time);
with metrics, the signature's sequence number is a field-engine variable (4 bytes, +1 a packet)
and the one checksum over it is fixed by TRex (`fix_chksum_hw` for UDP and TCP,
`fix_chksum_icmpv6`), which needs a cycle of one frame (see `streams`). What TRex cannot send as
the native engine would is refused at set_config (501, naming the flow).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ntgcore.endpoint import Endpoint
from ntgcore.errors import NtgError
from ntgcore.proc import Process
from ntgcore.registry import GENERATORS

from .flows import CONTINUOUS, FCS_LEN, FlowPlan, _good, _parse
from .refusal import OtgRefusal

PREFIX = "trex:"
MAX_STREAMS = 64  # frames in a flow's cycle that TRex sends as streams of their own


def split_location(location: str) -> tuple[str, str]:
    """(`engine` or `trex`, the location without the back end's prefix)."""
    if location.startswith(PREFIX):
        return "trex", location[len(PREFIX) :]
    return "engine", location


def _refuse(f: FlowPlan, why: str) -> OtgRefusal:
    return OtgRefusal(
        501, "unimplemented", [f"flows[{f.index}] ({f.name!r}) on TRex port {f.tx_port!r}: {why}"]
    )


def _fix(f: FlowPlan) -> dict[str, Any] | None:
    """TRex's checksum fix for the signature's checksum (csum_off), or None when there is none;
    refused when TRex cannot keep it as the compiler made it."""
    if f.seq_off is None or f.csum_off is None:
        return None
    _, sums = _parse(f.frames[0])
    at = [s for s in sums if s.off == f.csum_off]
    if not at or at[0].ip is None:
        raise _refuse(
            f,
            "TRex's field engine fixes only TCP, UDP and ICMPv6 checksums over the "
            "signature's sequence number (ICMP and GRE ones are not)",
        )
    s = at[0]
    kind = "udp" if s.udp else ("tcp" if s.off - s.start == 16 else "icmpv6")
    ip, l4 = at[0].ip, at[0].start
    assert ip is not None
    ip_off, fam = ip
    for frame in f.frames:
        sums = _parse(frame)[1]
        s = next(x for x in sums if x.off == f.csum_off)  # its `end` is this frame's
        if int.from_bytes(frame[s.off : s.off + 2], "big") != _good(frame, s):
            raise _refuse(
                f,
                "a bad or custom checksum over the signature: TRex's field engine "
                "only recomputes it good",
            )
        if fam == 4:  # fix_chksum_hw redoes this IPv4 header's checksum too
            hdr = [x for x in sums if x.start == ip_off and x.ip is None]
            if hdr and int.from_bytes(frame[ip_off + 10 : ip_off + 12], "big") != _good(
                frame, hdr[0]
            ):
                raise _refuse(
                    f, "a bad or custom IPv4 header checksum: TRex's checksum fix makes it good"
                )
    return {"kind": kind, "l3": ip_off, "l4": l4}


def streams(f: FlowPlan) -> list[dict[str, Any]]:
    """The flow as TRex STL streams (plain data for the worker's `otg_stream`), refused (501)
    where TRex cannot send it as the native engine would."""
    n = len(f.frames)
    if n > MAX_STREAMS:
        raise _refuse(
            f,
            f"a cycle of {n} distinct frames; TRex sends at most {MAX_STREAMS} "
            "(one stream each): make the patterns' lengths smaller",
        )
    if n > 1 and f.seq_off is not None:
        raise _refuse(
            f,
            f"metrics on a cycle of {n} distinct frames: one TRex stream per frame, and TRex "
            "v3.08 gives the sequence number variables of several streams (start k, step "
            f"{n}) wrong values (measured: 2, 1, 2, 5, 2, 5, ... for 0, 1, 2, 3, 4, 5, ...); "
            "use fixed fields and size, or the native engine",
        )
    if min(len(x) for x in f.frames) < 64:
        raise _refuse(f, "frames under 64 bytes: TRex pads them to 60 bytes plus its own FCS")
    fix = _fix(f)
    pps = 1e9 / (f.period_ns * n)
    out: list[dict[str, Any]] = []
    for k, frame in enumerate(f.frames):
        if fix is not None:
            # TRex's software checksum (veth: no offload) sums to the end of the buffer, the FCS
            # bytes too (measured: off by their one's-complement sum): zeros add nothing. Its
            # field engine cannot redo a CRC-32 per packet anyway.
            frame = frame[:-FCS_LEN] + bytes(FCS_LEN)
        mode: dict[str, Any]
        if f.burst:
            if f.burst % n or (f.packets != CONTINUOUS and f.packets % f.burst):
                raise _refuse(
                    f,
                    f"bursts of {f.burst} frames over a cycle of {n} frames: TRex "
                    "needs the cycle to divide the burst and the burst the packets",
                )
            if f.packets == CONTINUOUS:
                raise _refuse(f, "bursts without end: give the burst count")
            per = f.burst // n
            gap_ns = f.burst_period_ns - (per - 1) * n * f.period_ns  # TRex: (n-1)/pps + ibg
            mode = {
                "type": "multi_burst",
                "pkts_per_burst": per,
                "ibg_us": gap_ns / 1000,
                "count": f.packets // f.burst,
            }
        elif f.packets == CONTINUOUS:
            mode = {"type": "continuous"}
        else:
            count = math.ceil((f.packets - k) / n)
            if count <= 0:
                continue
            mode = {"type": "single_burst", "total_pkts": count}
        seq = None if f.seq_off is None else {"off": f.seq_off, "init": k, "step": n}
        out.append(
            {
                "name": f"{f.name}-{k}",
                "frame_hex": frame.hex(),
                "pps": pps,
                "isg_us": (f.start_ns + k * f.period_ns) / 1000,
                "mode": mode,
                "seq": seq,
                "fix": fix,
            }
        )
    return out


@dataclass
class TrexPorts:
    """The config's TRex ports: the trex generator's `otg_port` (generators/trex/otgport.py,
    reached through the registry) per port, prepared at set_config and stopped by `stop` (a
    new config, the service's close)."""

    ports: dict[str, Any] = field(default_factory=dict)

    def start(
        self, flows: Sequence[FlowPlan], endpoints: dict[str, Endpoint], folder: Path
    ) -> None:
        """Bring each TRex port up with its flow's streams (TRex's server start-up, ~1.5 s, the
        client's import, ~1 s, and the port's acquisition happen here, not at a start)."""
        plugin = GENERATORS.get("trex")
        for port, endpoint in endpoints.items():
            mine = [f for f in flows if f.tx_port == port]
            self.ports[port] = op = plugin.otg_port(port, endpoint, folder)
            if mine:
                try:
                    op.prepare(streams(mine[0]))
                except NtgError as exc:
                    raise OtgRefusal(500, "internal", [f"port {port}: {exc}"]) from None

    def stop(self) -> list[Any]:
        """Stop every port's waiting worker and server; their process records."""
        records: list[Any] = []
        for op in self.ports.values():
            records += op.stop()
        self.ports.clear()
        return records


def check(flows: Sequence[FlowPlan], trex_ports: set[str]) -> None:
    """Refuse (501) at set_config what TRex cannot send: a TRex port's flows as `streams` says,
    and more than one flow on one TRex port (TRex's port counters give one flow's frames_tx
    exactly; per-stream counters would rewrite the frames' IPv4 ID and TOS)."""
    per: dict[str, list[str]] = {}
    for f in flows:
        if f.tx_port in trex_ports:
            per.setdefault(f.tx_port, []).append(f.name)
            streams(f)
    for port, names in per.items():
        if len(names) > 1:
            raise OtgRefusal(
                501,
                "unimplemented",
                [
                    f"flows {', '.join(map(repr, names))} on TRex port {port!r}: one flow per "
                    "TRex port (its port counters are the flow's frames_tx); send the others "
                    "from another port or the native engine"
                ],
            )


def start(
    ports: TrexPorts, port: str, flows: list[FlowPlan], step: Path, start_ns: int
) -> tuple[Process, Path, Path, Path]:
    """Hand the port's flow (check: one per TRex port) to its TRex worker, to start at
    `start_ns` (at once when it is ready later): (the worker, the counters file, the summary,
    the file where it writes when it started the traffic)."""
    op = ports.ports.get(port)
    if op is None or not flows:
        raise OtgRefusal(500, "internal", [f"port {port}: TRex was not prepared for it"])
    counters, summary = step / f"{port}.counters", step / f"{port}.summary.json"
    started, log = step / f"{port}.started", step / f"{port}.err"
    log.touch()
    try:
        total = None if flows[0].packets == CONTINUOUS else flows[0].packets
        proc = op.start(start_ns, counters, summary, started, log, total)
    except NtgError as exc:
        raise OtgRefusal(500, "internal", [f"port {port}: {exc}"]) from None
    return proc, counters, summary, started


def real_start(started: Path, fallback: int) -> int:
    """When the worker started TRex's traffic (CLOCK_REALTIME ns), once it has."""
    try:
        return int(started.read_text())
    except (OSError, ValueError):
        return fallback


def finished(counters: Path) -> bool:
    """TRex's worker has written its summary and final counters (state 2 in the counters
    file); it releases the port and exits right after."""
    try:
        with open(counters, "rb") as f:
            head = f.read(24)
    except OSError:
        return False
    return (
        len(head) == 24 and head[:8] == b"NTGCNT01" and struct.unpack_from("=Q", head, 16)[0] == 2
    )
