"""Scenario flows -> drone streams on one port (the rules are in README.md, "Mapping").

Everything that Ostinato cannot express is refused here, before drone is started, with a
GeneratorError naming the flow and the field; what is expressed only approximately is listed in
`Plan.approximations` (written to the run folder by the adapter).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ntgcore.errors import GeneratorError
from ntgcore.scenario import Ports

from .rpc import msg

# Protocol ids (= drone's field numbers of the protocol messages).
MAC, PAYLOAD, HEXDUMP, ETH2, IP4, IP6, TCP, UDP, ICMP = 100, 101, 104, 200, 301, 302, 400, 401, 402
FCS = 4
SYN, FIN, PSH, ACK = 0x02, 0x01, 0x08, 0x10
IPV4_DF = 0x2
MAX_COUNT = 2**32 - 1
NS = 1_000_000_000


@dataclass
class StreamPlan:
    flow_index: int
    label: str
    stream: Any  # msg.Stream (our .proto's classes are built at run time)
    packets: int  # packets of this stream in one pass
    pps: float  # 0 = as fast as drone can (Ostinato's "packets/sec 0")


@dataclass
class Plan:
    streams: list[StreamPlan]
    transmit_mode: str  # "sequential" | "interleaved"
    continuous: bool  # True: drone loops until the adapter stops it after `duration_s`
    duration_s: float | None  # wall time after which the adapter stops transmission
    start_delay_s: float  # the first flow's `start`: the adapter waits before startTransmit
    approximations: list[str] = field(default_factory=list)

    @property
    def packets(self) -> int | None:
        """Packets drone will send by itself (None when it sends until stopped)."""
        return None if self.continuous else sum(s.packets for s in self.streams)

    @property
    def expected_seconds(self) -> float:
        if self.duration_s is not None:
            return self.duration_s
        total = 0.0
        for s in self.streams:
            total += s.packets / s.pps if s.pps else s.packets / 100_000.0
        return total


def _label(i: int, flow) -> str:
    return f"flows[{i}]" + (f" ({flow.name})" if flow.name else "")


def _mac(text: str) -> int:
    return int(text.replace(":", ""), 16)


class _Builder:
    def __init__(self, scenario, seed: int, topspeed: bool) -> None:
        self.scenario = scenario
        self.seed = seed
        self.topspeed = topspeed
        self.approx: list[str] = []

    def note(self, text: str) -> None:
        if text not in self.approx:
            self.approx.append(text)

    # ---- one flow -------------------------------------------------------------------------

    def stream(self, i: int, flow, stream_id: int) -> tuple[Any, int, float]:
        """(Stream, packets in one pass, pps) for flow `i`."""
        label = _label(i, flow)
        rng = random.Random(f"{self.seed}:{i}")
        meta = flow.repeat is not None and flow.repeat.count > 1
        if meta and flow.packet_count > 1:
            raise GeneratorError(
                f"{label}: repeat: a meta-flow whose instances have {flow.packet_count} packets "
                f"each cannot be expressed in Ostinato, which varies fields per packet and cannot "
                f"interleave flow instances; use one packet per instance (packets: 1), or "
                f"generator: flowengine"
            )
        if meta:
            if flow.repeat_period_ns == 0 and not self.topspeed:
                raise GeneratorError(
                    f"{label}: repeat.period: 0 starts all {flow.repetitions} instances at once, "
                    f"which a packet-rate stream cannot do; give a period > 0"
                )
            packets = flow.repetitions
            pps = NS / flow.repeat_period_ns if flow.repeat_period_ns else 0.0
        else:
            packets = flow.packet_count
            pps = float(NS / flow.period_ns)
        if self.topspeed:
            pps = 0.0

        s = msg.Stream()
        s.stream_id.id = stream_id
        s.core.name = (flow.name or f"flow{i}")[:64]
        s.core.is_enabled = True
        s.core.ordinal = stream_id
        header = flow.header_bytes
        lo, hi = flow.payload.sizes
        if lo == hi:
            s.core.len_mode = msg.StreamCore.e_fl_fixed
            s.core.frame_len = header + lo + FCS
        else:
            s.core.len_mode = msg.StreamCore.e_fl_random
            s.core.frame_len_min = header + lo + FCS
            s.core.frame_len_max = header + hi + FCS
            s.core.frame_len = header + lo + FCS
        s.control.unit = msg.StreamControl.e_su_packets
        s.control.mode = msg.StreamControl.e_sm_fixed
        s.control.num_packets = min(packets, MAX_COUNT)  # checked in build_plan
        s.control.packets_per_sec = pps
        s.control.next = msg.StreamControl.e_nw_goto_next

        eth = self.scenario.ethernet
        p = s.protocol.add()
        p.protocol_id.id = MAC
        p.mac.dst_mac, p.mac.dst_mac_mode = _mac(eth.dst), msg.Mac.e_mm_fixed
        p.mac.src_mac, p.mac.src_mac_mode = _mac(eth.src), msg.Mac.e_mm_fixed
        s.protocol.add().protocol_id.id = ETH2

        p = s.protocol.add()
        if flow.ip_version == 4:
            p.protocol_id.id = IP4
            p.ip4.ttl, p.ip4.flags, p.ip4.id = 64, IPV4_DF, 0
            for side in ("src", "dst"):
                self.address4(p.ip4, side, getattr(flow, side), meta, rng, label)
            if not meta and packets > 1:
                # A counter would make every frame distinct, and drone builds distinct frames one
                # by one before sending (about 0.13 ms each here): keep the ID constant.
                self.note(
                    "IPv4: the IP ID is 0 in every packet; the engine writes the packet "
                    "index mod 2^16"
                )
        else:
            p.protocol_id.id = IP6
            p.ip6.hop_limit = 64
            for side in ("src", "dst"):
                self.address6(p.ip6, side, getattr(flow, side), meta, rng, label)

        if flow.protocol in ("tcp", "udp"):
            p = s.protocol.add()
            p.protocol_id.id = TCP if flow.protocol == "tcp" else UDP
            l4 = p.tcp if flow.protocol == "tcp" else p.udp
            l4.is_override_src_port = l4.is_override_dst_port = True
            for side, offset, ports in (("src", 0, flow.src_port), ("dst", 2, flow.dst_port)):
                self.port(p, l4, side, offset, ports, meta, rng, label)
            if flow.protocol == "tcp":
                p.tcp.window = 65535
                p.tcp.seq_num = rng.getrandbits(32)
                if packets == 1 or meta:
                    p.tcp.flags, p.tcp.ack_num = SYN | FIN, 0
                else:
                    p.tcp.flags, p.tcp.ack_num = ACK | PSH, rng.getrandbits(32)
                    self.note(
                        "TCP: every packet of a multi-packet flow carries ACK|PSH and the same "
                        "sequence number; the engine marks the first SYN and the last FIN|ACK "
                        "and advances the sequence number by the payload"
                    )
        else:
            p = s.protocol.add()
            p.protocol_id.id = ICMP
            p.icmp.icmp_version = msg.Icmp.kIcmp4 if flow.protocol == "icmp" else msg.Icmp.kIcmp6
            p.icmp.type = 8 if flow.protocol == "icmp" else 128
            p.icmp.code = 0
            p.icmp.identifier = i % 65536
            p.icmp.sequence = 0
            if meta:  # identifier = instance number
                p.icmp.identifier = 0
                self.counter(p, 16, 4, 0, 65536, inc=True)
            elif packets > 1:  # sequence = packet index
                self.counter(p, 16, 6, 0, 65536, inc=True)
            self.note(
                "ICMP: the identifier counts instances within each flow (a one-instance flow "
                "uses the flow's index); the engine numbers instances across the session"
            )

        content = flow.payload.content
        p = s.protocol.add()
        if content:
            p.protocol_id.id = HEXDUMP
            p.hexdump.content = content
            p.hexdump.pad_until_end = True
        else:
            p.protocol_id.id = PAYLOAD
            p.payload.pattern_mode = msg.Payload.e_dp_fixed_word
            p.payload.pattern = 0
        return s, packets, pps

    # ---- fields ---------------------------------------------------------------------------

    @staticmethod
    def counter(
        proto,
        bits: int,
        offset: int,
        value: int,
        count: int,
        inc: bool,
        mask: int | None = None,
        random_mode: bool = False,
    ) -> None:
        vf = proto.variable_field.add()
        vf.type = {
            8: msg.VariableField.kCounter8,
            16: msg.VariableField.kCounter16,
            32: msg.VariableField.kCounter32,
        }[bits]
        vf.offset = offset
        vf.mask = mask if mask is not None else (1 << bits) - 1
        vf.value = value
        vf.mode = (
            msg.VariableField.kRandom
            if random_mode
            else (msg.VariableField.kIncrement if inc else msg.VariableField.kDecrement)
        )
        vf.count = min(count, MAX_COUNT)
        vf.step = 1

    def _fixed_host(self, addr, rng: random.Random):
        """The one address of a single-instance flow: as written (increment) or drawn (random)."""
        iface = addr.interface
        if addr.is_single or addr.mode == "increment":
            return iface.ip
        net = iface.network
        return net.network_address + rng.randrange(net.num_addresses)

    def address4(self, ip4, side: str, addr, meta: bool, rng, label: str) -> None:
        iface = addr.interface
        mask = int(iface.network.netmask)
        modes = msg.Ip4
        if not meta or addr.is_single:
            setattr(ip4, f"{side}_ip", int(self._fixed_host(addr, rng)))
            setattr(ip4, f"{side}_ip_mode", modes.e_im_fixed)
            if not addr.is_single and addr.mode == "random":
                self.note(
                    "random addresses of one-instance flows are drawn by this adapter from "
                    "the run's seed, not by the engine's generator: same block, other draw"
                )
            return
        setattr(ip4, f"{side}_ip", int(iface.ip))
        setattr(ip4, f"{side}_ip_mask", mask)
        setattr(ip4, f"{side}_ip_count", min(iface.network.num_addresses, MAX_COUNT))
        if addr.mode == "increment":
            setattr(ip4, f"{side}_ip_mode", modes.e_im_inc_host)
        else:
            setattr(ip4, f"{side}_ip_mode", modes.e_im_random_host)
            self.note(
                "random addresses of meta-flows use Ostinato's random-host mode: uniform in "
                "the block like the engine, but other draws"
            )

    def address6(self, ip6, side: str, addr, meta: bool, rng, label: str) -> None:
        iface = addr.interface
        pick = int(self._fixed_host(addr, rng) if (not meta or addr.is_single) else iface.ip)
        setattr(ip6, f"{side}_addr_hi", pick >> 64)
        setattr(ip6, f"{side}_addr_lo", pick & (2**64 - 1))
        modes = msg.Ip6
        if not meta or addr.is_single:
            setattr(ip6, f"{side}_addr_mode", modes.kFixed)
            return
        size = iface.network.num_addresses
        setattr(ip6, f"{side}_addr_prefix", iface.network.prefixlen)
        setattr(ip6, f"{side}_addr_count", min(size, MAX_COUNT))
        if addr.mode == "increment":
            setattr(ip6, f"{side}_addr_mode", modes.kIncHost)
            if size > MAX_COUNT:
                self.note(
                    "IPv6 increment over a block of more than 2^32 addresses wraps after "
                    "2^32 instances (Ostinato's count is 32 bits)"
                )
        else:
            setattr(ip6, f"{side}_addr_mode", modes.kRandomHost)
            self.note(
                "random addresses of meta-flows use Ostinato's random-host mode: uniform in "
                "the block like the engine, but other draws"
            )

    def port(self, proto, l4, side: str, offset: int, ports, meta: bool, rng, label: str) -> None:
        if ports is None:  # src_port default: the ephemeral ports, drawn per instance
            ports = Ports.model_validate("random")
        lo, hi = ports.bounds
        if lo == hi or not meta:
            value = lo if (lo == hi or ports.mode == "increment") else rng.randint(lo, hi)
            setattr(l4, f"{side}_port", value)
            return
        size = hi - lo + 1
        setattr(l4, f"{side}_port", lo)
        if ports.mode == "increment":
            self.counter(proto, 16, offset, lo, size, inc=True)
            return
        # Ostinato's random counter replaces the bits under `mask` with random bits, so only a
        # block of 2^k ports starting at a multiple of 2^k is drawn uniformly.
        if size & (size - 1) or lo % size:
            k = 1 << (size.bit_length() - 1)
            start = -(-lo // k) * k
            while start + k - 1 > hi:
                k //= 2
                start = -(-lo // k) * k
            raise GeneratorError(
                f"{label}: {side}_port: Ostinato draws random ports only in a block of 2^k ports "
                f"starting at a multiple of 2^k; {lo}-{hi} is not one (e.g. {start}-{start + k - 1} "
                f"is, and 49152-65535, the default, is); or use mode: increment"
            )
        self.counter(proto, 16, offset, lo, size, inc=False, mask=size - 1, random_mode=True)
        self.note(
            "random ports of meta-flows are drawn by drone: uniform in the range like the "
            "engine, but other draws"
        )


def build_plan(
    scenario, seed: int, pace: str = "realtime", duration_s: float | None = None
) -> Plan:
    """The streams for `scenario` on one port, or a GeneratorError saying what cannot be sent."""
    plan = _plan(scenario, seed, pace, duration_s)
    if not plan.continuous:
        for s in plan.streams:
            if s.packets > MAX_COUNT:
                raise GeneratorError(
                    f"{s.label}: {s.packets} packets are more than one drone stream counts "
                    f"({MAX_COUNT}); split the flow, or use a duration (sent continuously)"
                )
    return plan


def _plan(scenario, seed: int, pace: str, duration_s: float | None) -> Plan:
    topspeed = pace == "topspeed"
    b = _Builder(scenario, seed, topspeed)
    flows = list(scenario.flows)
    streams = []
    for i, flow in enumerate(flows):
        s, packets, pps = b.stream(i, flow, i + 1)
        streams.append(StreamPlan(i, _label(i, flow), s, packets, pps))
    if streams:
        streams[-1].stream.control.next = msg.StreamControl.e_nw_stop

    def span_ns(flow) -> int:
        if flow.repeat is not None and flow.repeat.count > 1:
            return flow.repetitions * flow.repeat_period_ns
        return flow.packet_count * flow.period_ns

    if topspeed:
        b.note(
            "pace topspeed: every stream at packets/sec 0 (drone sends as fast as it can), "
            "flows one after another in scenario order; flow start times are not used"
        )
        continuous = duration_s is not None
        if continuous:  # loop the whole chain until the adapter stops it after duration_s
            streams[-1].stream.control.next = msg.StreamControl.e_nw_goto_id
            streams[-1].stream.control.mode = msg.StreamControl.e_sm_continuous
        return Plan(streams, "sequential", continuous, duration_s, 0.0, b.approx)

    starts = [f.start for f in flows]
    if len(flows) > 1 and all(t == 0 for t in starts):
        # Concurrent flows: Ostinato's interleaved mode, which sends every stream at its rate
        # until stopped (it ignores packet counts).
        for i, flow in enumerate(flows):
            if flow.duration is None or (flow.repeat is not None and flow.repeat.count > 1):
                raise GeneratorError(
                    f"{_label(i, flow)}: packets: concurrent flows (all starting at 0) are sent in "
                    f"Ostinato's interleaved mode, which sends until stopped and ignores packet "
                    f"counts; give every flow a `duration` (and no repeat), or chain the flows "
                    f"with start times"
                )
        durations = {f.duration for f in flows}
        if len(durations) > 1:
            raise GeneratorError(
                f"{_label(1, flows[1])}: duration: concurrent flows must all last as long "
                f"(Ostinato stops a port, not a stream); got "
                f"{', '.join(f'{d / NS:g}s' for d in sorted(durations))}"
            )
        for s in streams:
            s.stream.control.mode = msg.StreamControl.e_sm_continuous
        return Plan(streams, "interleaved", True, flows[0].duration / NS, 0.0, b.approx)

    # Sequential: each flow must begin when the one before it ends (streams chained with next).
    for k in range(1, len(flows)):
        expected = flows[k - 1].start + span_ns(flows[k - 1])
        if flows[k].start != expected:
            raise GeneratorError(
                f"{_label(k, flows[k])}: start: Ostinato sends the streams of a port one after "
                f"another, so this flow can start only when the one before ends, at "
                f"{expected / NS:.9g}s (got {flows[k].start / NS:.9g}s); set start to that, start "
                f"every flow at 0 with a duration (concurrent flows), or use generator: flowengine"
            )
    last = flows[-1]
    continuous = (
        len(flows) == 1
        and last.duration is not None
        and not (last.repeat is not None and last.repeat.count > 1)
    )
    if continuous:
        streams[-1].stream.control.mode = msg.StreamControl.e_sm_continuous
        streams[-1].stream.control.next = msg.StreamControl.e_nw_goto_id
        duration = last.duration / NS
    else:
        duration = None
        if any(f.duration is not None for f in flows):
            b.note(
                "a `duration` flow chained with other flows is sent as its packet count "
                "(the packets due inside the duration), as the engine does"
            )
    if flows[0].start:
        b.note("the first flow's start is kept by waiting that long before startTransmit")
    return Plan(streams, "sequential", continuous, duration, flows[0].start / NS, b.approx)
