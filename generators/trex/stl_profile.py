"""Scenario flows -> a TRex stateless profile, as plain data (the rules are in README.md, "Mapping").

This module runs in the main process and never imports the TRex client (it bundles an old Scapy
that must be the first Scapy of its process): it produces a `Profile`, a JSON-able description
of one `STLStream` per flow (the packet's header fields, the field-engine instructions, the
transmit mode and rate), which the worker (`worker.py`, its own process) turns into the real
`STLProfile` and dumps as Python (`dump_to_code`), JSON and YAML.

Everything the field engine cannot express is refused here, before any process starts, with a
GeneratorError naming the flow and the field; what is expressed only approximately is listed in
`Profile.approximations` (written to the run folder by the adapter).
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from ntgcore.errors import GeneratorError
from ntgcore.scenario import Ports

NS = 1_000_000_000
US_PER_NS = 1e-3
SYN, FIN, PSH, ACK = 0x02, 0x01, 0x08, 0x10
FCS = 4
L1_OVERHEAD = 20  # preamble + inter-frame gap, bytes (TRex's L1 rates count them)
# The widest range of a flow variable: 63 bits. A size-8 variable over all 2^64 values (a /64
# block) makes the server compute its range as max - min + 1 = 0 in 64 bits and die dividing by
# it (SIGFPE, seen with TRex v3.08).
MAX_VAR_BITS = 63
MAX_BURST = 2**32 - 1
LINE_RATE_BPS = 10_000_000_000  # what a software-mode port reports; percent is of this
RATE_UNITS = ("pps", "bps_L2", "percent")
MAX_INSTANCE_STREAMS = 1000  # streams one meta-flow may become (one per instance)
MAX_STREAMS = 5000  # streams of one profile
# Latency probes (`latency_pps`): TRex keeps at most 128 payload-type (latency) packet groups
# (MAX_FLOW_STATS_PAYLOAD in trex-core's trex_defs.h); its receive side reads every probe in
# software, so the probes together are kept to a rate that leaves the traffic its core.
MAX_LATENCY_STREAMS = 128
MAX_LATENCY_PPS = 100_000  # all probes together
LATENCY_TRAILER = 16  # bytes TRex writes at the end of a probe (magic, group, sequence, time stamp)


@dataclass
class StreamSpec:
    """One STLStream as data (see worker.build_stream for how each key is used)."""

    flow_index: int
    label: str
    name: str
    packet: dict  # eth / ip / l4 / payload_hex / payload_len
    vm: list[dict]  # field-engine instructions, in order
    mode: dict  # {"type": continuous|single_burst|multi_burst, ...counts}
    rate: dict  # {"pps": x} | {"bps_L2": x} | {"percentage": x}
    isg_us: float  # the flow's start, as the stream's inter-stream gap
    random_seed: int
    packets: int | None  # packets it sends by itself (None: until stopped)
    pps: float  # its packet rate, whatever unit TRex is given
    frame_bytes: tuple[int, int]  # frame length without FCS: min, max
    pg_id: int | None = None  # TRex's per-stream statistics (STLFlowStats), when asked for
    latency: bool = (
        False  # a latency probe (STLFlowLatencyStats with pg_id), not the flow's traffic
    )


@dataclass
class Profile:
    streams: list[StreamSpec]
    continuous: bool  # True: the adapter stops the traffic after duration_s
    duration_s: float | None
    approximations: list[str] = field(default_factory=list)

    @property
    def packets(self) -> int | None:
        if self.continuous:
            return None
        return sum(s.packets or 0 for s in self.streams)

    @property
    def expected_seconds(self) -> float:
        """When the last stream ends (from TRex's start), or the duration of a continuous run."""
        if self.duration_s is not None:
            return self.duration_s
        return max((stream_end_s(s) for s in self.streams), default=0.0)

    @property
    def traffic(self) -> list[StreamSpec]:
        """The streams that carry the scenario's flows (without the latency probes)."""
        return [s for s in self.streams if not s.latency]

    def as_dict(self) -> dict:
        return {
            "continuous": self.continuous,
            "duration_s": self.duration_s,
            "approximations": list(self.approximations),
            "streams": [asdict(s) for s in self.streams],
        }


def stream_end_s(s: StreamSpec) -> float:
    """When a burst stream sends its last packet, in seconds from TRex's start."""
    m = s.mode
    if m["type"] == "single_burst":
        span = m["total_pkts"] / s.pps
    else:  # multi_burst
        span = m["count"] * ((m["pkts_per_burst"] - 1) / s.pps + m["ibg_us"] / 1e6)
    return s.isg_us / 1e6 + span


def _label(i: int, flow) -> str:
    return f"flows[{i}]" + (f" ({flow.name})" if flow.name else "")


def stream_seed(seed: int, i: int) -> int:
    """The stream's random seed (TRex's uint32 `random_seed`; 0 would mean "not repeatable")."""
    digest = hashlib.sha256(f"ntg-trex:{seed}:{i}".encode()).digest()
    return int.from_bytes(digest[:4], "big") or 1


class _Builder:
    def __init__(self, scenario, seed: int, rate_unit: str, topspeed_pps: float | None) -> None:
        self.scenario = scenario
        self.seed = seed
        self.rate_unit = rate_unit
        self.topspeed_pps = topspeed_pps
        self.approx: list[str] = []

    def note(self, text: str) -> None:
        if text not in self.approx:
            self.approx.append(text)

    # ---- one flow -------------------------------------------------------------------------

    def streams(self, i: int, flow, continuous: bool) -> list[StreamSpec]:
        """The stream(s) of flow `i`: one, or one per instance of a meta-flow whose instances
        have several packets and cannot be one multi-burst (they overlap, or more than one header
        field varies per instance)."""
        label = _label(i, flow)
        n, count = flow.packet_count, flow.repetitions
        if count == 1 or n == 1:
            return [self.stream(i, flow, continuous)]
        varying = [side for side in ("src", "dst") if not getattr(flow, side).is_single]
        for side, ports in (("src_port", flow.src_port), ("dst_port", flow.dst_port)):
            if flow.protocol in ("tcp", "udp"):
                lo, hi = (ports or Ports.model_validate("random")).bounds
                varying += [side] if lo != hi else []
        if flow.protocol in ("icmp", "icmpv6"):
            varying.append("the ICMP identifier")
        overlap = flow.repeat_period_ns < n * flow.period_ns
        if not overlap and len(varying) <= 1 and flow.protocol in ("tcp", "udp"):
            return [self.stream(i, flow, continuous)]  # one multi-burst, the field engine steps
        why = (
            f"its instances of {n} packets ({n * flow.period_ns / NS:.9g}s) overlap (one every "
            f"{flow.repeat_period_ns / NS:.9g}s)"
            if overlap
            else f"{' and '.join(varying)} vary per instance, and TRex's field engine steps one "
            f"field per instance of a multi-packet meta-flow (a packet counter's `next_var`)"
        )
        if count > MAX_INSTANCE_STREAMS:
            raise GeneratorError(
                f"{label}: repeat.count: {why}; such a meta-flow is sent as one stream per "
                f"instance, at most {MAX_INSTANCE_STREAMS} of them, and it has {count}; lower "
                f"repeat.count, fix all but one field per instance and space the instances, or "
                f"use generator: flowengine"
            )
        self.note(
            f"{label}: {why}: sent as {count} streams, one per instance (each a burst "
            f"starting at the instance's start), the per-instance fields chosen here"
        )
        rng = random.Random(f"{self.seed}:{i}:instances")
        return [self.stream(i, flow, continuous, instance=(r, rng)) for r in range(count)]

    def stream(self, i: int, flow, continuous: bool, instance: tuple | None = None) -> StreamSpec:
        """One stream: the whole flow, or (`instance` = (r, rng)) the r-th instance of a
        meta-flow with its per-instance fields fixed (drawn from rng, or stepped by r)."""
        label = _label(i, flow) + (f" instance {instance[0]}" if instance else "")
        rng = random.Random(f"{self.seed}:{i}")
        meta = flow.repeat is not None and flow.repeat.count > 1 and instance is None
        per_instance = meta  # fields vary per instance
        n = flow.packet_count
        vm: list[dict] = []
        if meta and n > 1:
            # Multi-packet instances: a multi-burst (one burst per instance); a counter over the
            # packets of one instance steps the instance's field when it wraps (next_var).
            period_ns = flow.period_ns
            span_ns = (n - 1) * period_ns
            # TRex waits ibg after a burst's last packet (not after its slot): instances start
            # every repeat.period when ibg = repeat.period - (n - 1) packet periods
            gap_ns = flow.repeat_period_ns - span_ns
            if gap_ns < 0:
                raise GeneratorError(
                    f"{label}: repeat.period: instances of {n} packets every "
                    f"{period_ns / NS:.9g}s last {(span_ns + period_ns) / NS:.9g}s, longer than "
                    f"repeat.period ({flow.repeat_period_ns / NS:.9g}s); TRex sends the instances "
                    f"of one stream one after another (a multi-burst), so they cannot overlap; "
                    f"lengthen repeat.period, or use generator: flowengine"
                )
            pps = NS / period_ns
            mode = {
                "type": "multi_burst",
                "pkts_per_burst": n,
                "ibg_us": gap_ns * US_PER_NS,
                "count": flow.repetitions,
            }
            packets = n * flow.repetitions
        elif meta:
            if flow.repeat_period_ns == 0:
                raise GeneratorError(
                    f"{label}: repeat.period: 0 starts all {flow.repetitions} instances at once, "
                    f"which a packet-rate stream cannot do; give a period > 0"
                )
            pps = NS / flow.repeat_period_ns
            packets = flow.repetitions
            mode = {"type": "single_burst", "total_pkts": packets}
        else:
            pps = NS / flow.period_ns
            packets = n
            mode = {"type": "single_burst", "total_pkts": packets}
        if continuous:
            mode = {"type": "continuous"}
            packets = None
            if self.topspeed_pps is not None:
                pps = self.topspeed_pps
        if packets is not None and packets > MAX_BURST:
            raise GeneratorError(
                f"{label}: packets: {packets} packets are more than one TRex burst "
                f"counts ({MAX_BURST}); split the flow"
            )

        lo, hi = flow.payload.sizes
        header = flow.header_bytes
        eth = self.scenario.ethernet
        pkt: dict = {
            "eth": {"src": eth.src, "dst": eth.dst},
            "payload_hex": flow.payload.content.hex(),
            "payload_len": hi,
        }
        l3 = "IP" if flow.ip_version == 4 else "IPv6"
        pkt["ip"] = {"version": flow.ip_version, "src": "", "dst": ""}
        counter = None
        if meta and n > 1:
            counter = {
                "op": "var",
                "name": "pkt_in_instance",
                "size": 2,
                "kind": "inc",
                "min": 0,
                "max": n - 1,
                "init": 0,
                "step": 1,
                "next_var": None,
            }
            vm.append(counter)
        stepped: list[str] = []  # fields that vary per instance

        def per_instance_var(var: dict, where: str) -> None:
            if counter is not None:
                if stepped:
                    raise GeneratorError(
                        f"{label}: {where}: a meta-flow whose instances have {n} packets each "
                        f"can vary only one header field per instance in TRex's field engine "
                        f"(a packet counter steps one variable when it wraps, `next_var`), and "
                        f"{stepped[0]} varies already; fix one of them (a single address, or a "
                        f"single port such as `src_port: 50000`), use `packets: 1` per instance, "
                        f"or use generator: flowengine"
                    )
                counter["next_var"] = var["name"]
            stepped.append(where)
            vm.append(var)

        for side in ("src", "dst"):
            addr = getattr(flow, side)
            iface = addr.interface
            if instance is not None and not addr.is_single:
                pkt["ip"][side] = str(self._instance_host(addr, *instance))
                continue
            if not per_instance or addr.is_single:
                pkt["ip"][side] = str(self._fixed_host(addr, rng))
                if not addr.is_single and addr.mode == "random":
                    self.note(
                        "random addresses of one-instance flows are drawn by this adapter "
                        "from the run's seed, not by the engine's generator: same block, "
                        "other draw"
                    )
                continue
            net = iface.network
            host_bits = net.max_prefixlen - net.prefixlen
            if host_bits > MAX_VAR_BITS:
                raise GeneratorError(
                    f"{label}: {side}: TRex's field engine varies at most {MAX_VAR_BITS} bits of "
                    f"a field's range (its server dies on a whole 64-bit range), and {addr.cidr} "
                    f"has {host_bits} host bits; use a /65 or a smaller block"
                )
            pkt["ip"][side] = str(iface.ip)
            size = 4 if host_bits <= 32 else 8
            width = 8 * size
            base = int(net.network_address) & ~((1 << width) - 1)  # the part that stays
            var = {
                "op": "var",
                "name": f"ip_{side}",
                "size": size,
                "kind": "inc" if addr.mode == "increment" else "random",
                "min": int(net.network_address) - base,
                "max": int(net.broadcast_address) - base,
                "init": int(iface.ip) - base,
                "step": 1,
                "next_var": None,
            }
            per_instance_var(var, side)
            offset_fixup = (4 if flow.ip_version == 4 else 16) - size
            vm.append(
                {
                    "op": "write",
                    "var": var["name"],
                    "field": f"{l3}.{side}",
                    "offset_fixup": offset_fixup,
                }
            )
            if addr.mode == "random":
                self.note(
                    "random addresses of meta-flows are drawn by TRex's field engine "
                    "(uniform in the block like the engine, other draws; repeatable: the "
                    "stream's random_seed comes from the scenario's seed)"
                )

        proto = flow.protocol
        if proto in ("tcp", "udp"):
            l4name = proto.upper()
            l4: dict = {"proto": proto}
            for side, ports in (("sport", flow.src_port), ("dport", flow.dst_port)):
                if ports is None:  # src_port default: the ephemeral ports, drawn per instance
                    ports = Ports.model_validate("random")
                plo, phi = ports.bounds
                if instance is not None and plo != phi:
                    r, irng = instance
                    l4[side] = (
                        plo + r % (phi - plo + 1)
                        if ports.mode == "increment"
                        else irng.randint(plo, phi)
                    )
                    continue
                if plo == phi or not per_instance:
                    l4[side] = (
                        plo if (plo == phi or ports.mode == "increment") else rng.randint(plo, phi)
                    )
                    continue
                l4[side] = plo
                var = {
                    "op": "var",
                    "name": f"port_{side}",
                    "size": 2,
                    "kind": "inc" if ports.mode == "increment" else "random",
                    "min": plo,
                    "max": phi,
                    "init": plo,
                    "step": 1,
                    "next_var": None,
                }
                where = "src_port" if side == "sport" else "dst_port"
                per_instance_var(var, where)
                vm.append(
                    {
                        "op": "write",
                        "var": var["name"],
                        "field": f"{l4name}.{side}",
                        "offset_fixup": 0,
                    }
                )
            if proto == "tcp":
                l4["window"] = 65535
                l4["seq"] = rng.getrandbits(32)
                if n == 1:
                    l4["flags"], l4["ack"] = SYN | FIN, 0
                else:
                    l4["flags"], l4["ack"] = ACK | PSH, rng.getrandbits(32)
                    self.note(
                        "TCP: every packet of a multi-packet flow carries ACK|PSH and the "
                        "same sequence number; the engine marks the first SYN and the last "
                        "FIN|ACK and advances the sequence number by the payload"
                    )
        else:
            l4 = {
                "proto": proto,
                "type": 8 if proto == "icmp" else 128,
                "code": 0,
                "id": (instance[0] if instance else i) % 65536,
                "seq": 0,
            }
            if counter is not None:
                raise GeneratorError(
                    f"{label}: repeat: an ICMP meta-flow whose instances have {n} packets each "
                    f"would vary the identifier per instance and the sequence per packet, and "
                    f"TRex's field engine cannot keep the ICMP checksum right for both; use "
                    f"`packets: 1` per instance, or generator: flowengine"
                )
            varied = None
            if meta:  # identifier = instance number
                l4["id"], varied, count = 0, "id", flow.repetitions
            elif n > 1:  # sequence = packet index
                varied, count = "seq", n
            if varied is not None:
                if proto == "icmp" and count > 65535:
                    raise GeneratorError(
                        f"{label}: {'repeat.count' if meta else 'packets'}: the ICMP {varied} "
                        f"counts {count} values, and past 65,535 TRex's field engine cannot keep "
                        f"the ICMP checksum right (it has no ICMPv4 checksum fix); split the flow"
                    )
                vm.append(
                    {
                        "op": "var",
                        "name": f"icmp_{varied}",
                        "size": 2,
                        "kind": "inc",
                        "min": 0,
                        "max": 65535,
                        "init": 0,
                        "step": 1,
                        "next_var": None,
                    }
                )
                # TRex's Scapy names no ICMPv6 echo fields: their offsets (id 4, seq 6 into it)
                field_at: str | int = (
                    f"ICMP.{varied}" if proto == "icmp" else 14 + 40 + (4 if varied == "id" else 6)
                )
                vm.append(
                    {"op": "write", "var": f"icmp_{varied}", "field": field_at, "offset_fixup": 0}
                )
                if proto == "icmp":
                    # The field engine has no ICMPv4 checksum fix: the checksum is a second
                    # variable that counts down in step with the counted field (a ones-complement
                    # sum: one more in the field is one less in the checksum, modulo 0xFFFF).
                    c0 = icmp_checksum(l4, flow.payload.content, hi) or 0xFFFF
                    vm.append(
                        {
                            "op": "var",
                            "name": "icmp_chksum",
                            "size": 2,
                            "kind": "dec",
                            "min": 1,
                            "max": 0xFFFF,
                            "init": c0,
                            "step": 1,
                            "next_var": None,
                        }
                    )
                    vm.append(
                        {
                            "op": "write",
                            "var": "icmp_chksum",
                            "field": "ICMP.chksum",
                            "offset_fixup": 0,
                        }
                    )
            self.note(
                "ICMP: the identifier counts instances within each flow (a one-instance "
                "flow uses the flow's index); the engine numbers instances across the session"
            )
        pkt["l4"] = l4

        if lo != hi:  # a random frame length, the template's tail trimmed per packet
            vm.append(
                {
                    "op": "var",
                    "name": "frame_len",
                    "size": 2,
                    "kind": "random",
                    "min": header + lo,
                    "max": header + hi,
                    "init": header + lo,
                    "step": 1,
                    "next_var": None,
                }
            )
            vm.append({"op": "trim", "var": "frame_len"})
            if flow.ip_version == 4:
                vm.append({"op": "write", "var": "frame_len", "field": "IP.len", "add": -14})
            else:
                vm.append({"op": "write", "var": "frame_len", "field": "IPv6.plen", "add": -54})
            if proto == "udp":
                vm.append(
                    {
                        "op": "write",
                        "var": "frame_len",
                        "field": "UDP.len",
                        "add": -(14 + (20 if flow.ip_version == 4 else 40)),
                    }
                )
        if vm:  # what varies: the checksums are recomputed per packet (IPv4 header, L4)
            vm.append({"op": "fix_checksums", "l3": l3, "l4": proto})

        frame = (header + lo, header + hi)
        rate = self.rate(label, pps, frame, continuous)
        name = (flow.name or f"flow{i}")[:48] + (f"#{instance[0]}" if instance else "")
        start_ns = flow.start + (instance[0] * flow.repeat_period_ns if instance else 0)
        seed_key = i if instance is None else i * 1_000_003 + instance[0] + 1
        return StreamSpec(
            i,
            label,
            name,
            pkt,
            vm,
            mode,
            rate,
            start_ns * US_PER_NS if not continuous else 0.0,
            stream_seed(self.seed, seed_key),
            packets,
            pps,
            frame,
        )

    def rate(self, label: str, pps: float, frame: tuple[int, int], continuous: bool) -> dict:
        unit = self.rate_unit
        if unit == "pps":
            return {"pps": pps}
        if frame[0] != frame[1]:
            raise GeneratorError(
                f"{label}: payload.size: rate_unit {unit} with a random frame length would not "
                f"give the scenario's packet rate (TRex converts a bit rate with the template's "
                f"length); use rate_unit: pps, or a fixed size"
            )
        if unit == "bps_L2":
            # TRex's L2 bit rate counts the frame with its FCS.
            return {"bps_L2": pps * (frame[0] + FCS) * 8}
        if continuous:
            raise GeneratorError(
                f"{label}: rate_unit: percent is of the port's nominal line rate (10 Gbit/s in "
                f"software mode, whatever a veth carries), and a stream sent for a duration at a "
                f"percentage is scheduled for that rate: a 5 s run sent 74 M packets and took "
                f"161 s (../shared/trex/README.md); use rate_unit: pps"
            )
        self.note(
            "rate_unit percent: the percentage is of the nominal 10 Gbit/s line rate that a "
            "software-mode port reports, computed from the scenario's packet rate"
        )
        return {"percentage": 100.0 * pps * (frame[0] + FCS + L1_OVERHEAD) * 8 / LINE_RATE_BPS}

    @staticmethod
    def _instance_host(addr, r: int, rng: random.Random):
        """Instance r's address: the given one plus r, wrapping inside the block (increment),
        or drawn (random)."""
        net = addr.interface.network
        if addr.mode == "increment":
            offset = int(addr.interface.ip) - int(net.network_address)
            return net.network_address + (offset + r) % net.num_addresses
        return net.network_address + rng.randrange(net.num_addresses)

    def _fixed_host(self, addr, rng: random.Random):
        """The one address of a single-instance flow: as written (increment) or drawn (random)."""
        iface = addr.interface
        if addr.is_single or addr.mode == "increment":
            return iface.ip
        net = iface.network
        return net.network_address + rng.randrange(net.num_addresses)


def build_profile(
    scenario,
    seed: int,
    *,
    pace: str = "realtime",
    duration_s: float | None = None,
    rate_unit: str = "pps",
    topspeed_pps: float = 300_000.0,
    stream_stats: bool = False,
    latency_pps: float | None = None,
) -> Profile:
    """The profile for `scenario` on one TRex port, or a GeneratorError saying what cannot be sent.

    `pace` topspeed (with `duration_s`): every stream continuous, together at `topspeed_pps`
    (an explicit rate: TRex's "100 %" is the nominal 10 Gbit/s of a software-mode port and would
    be scheduled as such), stopped by the adapter after the duration.

    `latency_pps`: one latency probe stream per flow beside its traffic (`latency_probe`)."""
    if rate_unit not in RATE_UNITS:
        raise GeneratorError(f"rate_unit {rate_unit!r}: expected one of {', '.join(RATE_UNITS)}")
    if scenario.sessions:  # stateless streams are one-way: TCP sessions need mode astf
        first = scenario.sessions[0]
        raise GeneratorError(
            "sessions[0]" + (f" ({first.name})" if first.name else "") + ": mode stl sends "
            "one-way streams; two-way `sessions:` need `mode: astf` (TCP sessions on TRex's own "
            "stack) or the flowengine"
        )
    check_latency_pps(latency_pps, len(scenario.flows))
    flows = list(scenario.flows)
    topspeed = pace == "topspeed"
    if topspeed and duration_s is None:
        raise GeneratorError("pace topspeed needs a duration (testbed.duration)")
    b = _Builder(scenario, seed, rate_unit, topspeed_pps if topspeed else None)
    streams = [s for i, f in enumerate(flows) for s in b.streams(i, f, continuous=topspeed)]
    if len(streams) > MAX_STREAMS:
        raise GeneratorError(
            f"flows: the scenario needs {len(streams)} TRex streams; at most "
            f"{MAX_STREAMS} are sent on one port (fewer flows or instances)"
        )
    if stream_stats:
        for k, st in enumerate(streams):
            st.pg_id = k + 1
        b.note(
            "stream_stats: TRex counts every stream (STLFlowStats) by marking its packets: on "
            "the wire the IPv4 ID is TRex's (0xFC00 and up, not 0) and the TOS field's lowest "
            "bit is set"
        )
    if topspeed:  # the explicit rate shared by all streams (a meta-flow may have become several)
        each = topspeed_pps / len(streams)
        for st in streams:
            st.pps = each
            st.rate = b.rate(st.label, each, st.frame_bytes, True)
        b.note(
            f"pace topspeed: every stream continuous at {each:g} pps ({topspeed_pps:g} pps in "
            f"all: TRex's top speed is the nominal 10 Gbit/s line rate of a software-mode "
            f"port, not what a veth carries), stopped after {duration_s:g}s; flow start "
            f"times are not used"
        )
        return Profile(
            streams + latency_probes(b, flows, streams, latency_pps, True),
            True,
            duration_s,
            b.approx,
        )
    if any(f.start for f in flows):
        b.note(
            "flow start times are the streams' inter-stream gaps (isg): every stream starts "
            "when the traffic starts and waits its flow's start before its first packet"
        )
    if any(f.duration is not None for f in flows):
        b.note(
            "a `duration` flow is sent as its packet count (the packets due inside the "
            "duration), as the engine does"
        )
    if len(flows) > 1:
        b.note(
            "concurrent streams of one port are interleaved by TRex's scheduler; each keeps its "
            "rate, but packets due at the same instant leave in TRex's order, not the engine's"
        )
    total = sum(s.pps for s in streams)
    if total > 450_000:
        b.note(
            f"the streams add up to {total:,.0f} pps; a software-mode TRex on a veth tops out "
            f"at about 430-480 kpps of 64-byte frames (../shared/trex/README.md)"
        )
    return Profile(
        streams + latency_probes(b, flows, streams, latency_pps, False), False, None, b.approx
    )


def check_latency_pps(latency_pps: float | None, flows: int) -> None:
    """`latency_pps` refused unless it is a rate TRex's receive side can time: > 0, and the
    probes (one per flow) together at most MAX_LATENCY_PPS, at most MAX_LATENCY_STREAMS of them."""
    if latency_pps is None:
        return
    if (
        isinstance(latency_pps, bool)
        or not isinstance(latency_pps, (int, float))
        or not latency_pps > 0
    ):
        raise GeneratorError(
            f"latency_pps: {latency_pps!r}: the latency probes' rate in packets "
            f"per second of each flow's probe; give a number > 0 (e.g. 1000)"
        )
    if flows > MAX_LATENCY_STREAMS:
        raise GeneratorError(
            f"latency_pps: one latency probe per flow, and TRex times at most "
            f"{MAX_LATENCY_STREAMS} latency streams; the scenario has {flows} flows"
        )
    flows = max(flows, 1)
    if latency_pps * flows > MAX_LATENCY_PPS:
        raise GeneratorError(
            f"latency_pps: {latency_pps:g} pps for each of {flows} flow(s) is "
            f"{latency_pps * flows:,.0f} probes/s; TRex reads and times every probe in software "
            f"on its receive side, so the probes together are kept to {MAX_LATENCY_PPS:,} pps; "
            f"give at most {MAX_LATENCY_PPS / flows:g}"
        )


def latency_probes(
    b: _Builder, flows: list, streams: list[StreamSpec], latency_pps: float | None, continuous: bool
) -> list[StreamSpec]:
    """One latency probe per flow (`latency_pps`): the flow's first packet as its first stream
    builds it (fixed fields: no field engine), at `latency_pps` from the flow's first packet to
    its last (continuous with the traffic at pace topspeed), counted by TRex with
    STLFlowLatencyStats; its pg_id follows the traffic's (stream_stats) ones."""
    if latency_pps is None:
        return []
    first_pg = max((s.pg_id or 0 for s in streams), default=0) + 1
    probes = []
    for i, flow in enumerate(flows):
        mine = [s for s in streams if s.flow_index == i]
        head = mine[0]
        pkt = dict(head.packet, payload_len=max(head.packet["payload_len"], LATENCY_TRAILER))
        if flow.protocol == "udp" and flow.ip_version == 4:
            # TRex writes its trailer after the checksum is computed: UDP over IPv4 says "no
            # checksum" (0) instead, which stays right on the wire
            pkt["l4"] = dict(pkt["l4"], chksum=0)
        header = flow.header_bytes
        frame = (header + pkt["payload_len"],) * 2
        mode: dict[str, Any]
        if continuous:
            mode, packets, isg = {"type": "continuous"}, None, 0.0
        else:
            isg = min(s.isg_us for s in mine)
            span = max(stream_end_s(s) for s in mine) - isg / 1e6
            packets = max(1, math.ceil(span * latency_pps))
            mode = {"type": "single_burst", "total_pkts": packets}
        label = _label(i, flow) + " latency"
        probes.append(
            StreamSpec(
                i,
                label,
                (flow.name or f"flow{i}")[:40] + "-latency",
                pkt,
                [],
                mode,
                {"pps": float(latency_pps)},
                isg,
                stream_seed(b.seed, -1 - i),
                packets,
                float(latency_pps),
                frame,
                pg_id=first_pg + i,
                latency=True,
            )
        )
    b.note(
        f"latency_pps: one latency probe per flow beside its traffic ({len(probes)} in all, "
        f"{latency_pps:g} pps each, in pps whatever rate_unit says), its flow's first packet "
        f"with fixed fields, at least {LATENCY_TRAILER} payload bytes; TRex writes its sequence "
        f"number and send time over the last {LATENCY_TRAILER} payload bytes, marks the IPv4 "
        f"header (ID 0xFFFF, the TOS field's lowest bit; its checksum fixed) and leaves the L4 "
        f"checksum as the template had it (wrong for TCP, ICMP and IPv6 UDP; IPv4 UDP probes "
        f"carry 0, no checksum), and times the probe on the TRex port that receives it; the probes' "
        f"packets are sent on the same port as the traffic and counted with it (packets_sent, "
        f"the capture); the offline expansion (capture.pcap, expand.py) leaves them out: "
        f"their bytes carry TRex's send times"
    )
    return probes


def latency_by_label(profile: Profile, by_pg: dict) -> dict:
    """The worker's latency numbers (by pg_id) under the probes' labels, each with its name,
    pg_id and flow index; `global` as TRex gave it."""
    probes = {str(s.pg_id): s for s in profile.streams if s.latency}
    out = {
        probes[pg].label: dict(v, name=probes[pg].name, pg_id=int(pg), flow=probes[pg].flow_index)
        for pg, v in by_pg.items()
        if pg in probes
    }
    if "global" in by_pg:
        out["global"] = by_pg["global"]
    return out


def icmp_checksum(l4: dict, content: bytes, payload_len: int) -> int:
    """The ICMPv4 echo checksum of the template (type, code, id, seq, the padded payload)."""
    payload = (content + bytes(max(0, payload_len - len(content))))[
        : max(payload_len, len(content))
    ]
    data = (
        bytes([l4["type"], l4["code"], 0, 0])
        + l4["id"].to_bytes(2, "big")
        + l4["seq"].to_bytes(2, "big")
        + payload
    )
    if len(data) % 2:
        data += b"\0"
    total = sum(int.from_bytes(data[k : k + 2], "big") for k in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


__all__ = [
    "Profile",
    "StreamSpec",
    "build_profile",
    "check_latency_pps",
    "latency_by_label",
    "latency_probes",
    "stream_end_s",
    "stream_seed",
    "RATE_UNITS",
    "MAX_LATENCY_PPS",
    "MAX_LATENCY_STREAMS",
]
