"""The OTG flow compiler: an OTG config (the dict snappi's model gives) -> the frames and the engine
session that send its flows, one `stream` line per flow (generators/flowengine's session format).

`compile_config(config, ports)` reads every value through snappi's own classes (the deserialized
config), so a field the config leaves out has the OTG model's default; a few fields that the model
gives a fixed default but that a tester computes are computed when the config leaves them out
(`udp.length`, `tcp.data_offset`, `vlan.tpid`, `udp.dst_port` before a vxlan header), as the
conformance suite expects. Each field's pattern (value, values, increment, decrement, random,
auto) has a period; packet j carries value j mod period of every field, and the flow's cycle of
distinct frames is the lcm of the periods (and of the size pattern's). The frames are built as
numpy byte matrices, one per frame size: a template patched column-wise per field, the checksums
summed row-wise, the FCS (the frame's real CRC-32, its last 4 bytes) per row.

Network safety: every IPv4 address outside 198.18.0.0/15 and every IPv6 address outside
2001:db8::/32 is sent as an address inside them (`Plan.wire_of`), checksums made for the wire;
`restore_frame` gives a captured frame back the config's addresses and checksums.

Metrics: a flow with `metrics.enable` carries 12 bytes right after its last header (the start of
the L4 payload): `NTGO`, the flow's index (u32) and its sequence number (u32, big-endian), which
the engine writes per packet (`seq_off`) and whose checksum it updates (`csum_off`); a stack
where two checksums would cover it (VXLAN's outer UDP, GRE's) is refused unless one is custom.

Choices where OTG leaves them to the implementation: frame sizes include the 4-byte FCS, and the
bit rates (bps ... gbps) count the frame with its FCS; a percentage is of the port's layer1 speed
counting 20 more bytes a frame (preamble and minimum gap); a rate faster than `gap` allows at that
speed is slowed to it (with a warning); delays and inter-burst gaps in bytes are at that speed;
a burst's period is `burst * period + inter_burst_gap`. A "bad" generated checksum is the good one
with its last bit flipped. Random values and sizes come from numpy's PCG64 (seeded with the
pattern's seed; sizes with the CRC-32 of the flow's name): the same config, the same frames.
Weights of a weight_pairs size count to 1/100: IMIX's 7:4:1 is a 12-frame cycle, the 58.67%
sets a 10,000-frame one, each size spread evenly over it.
"""

from __future__ import annotations

import ipaddress
import math
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import snappi

from ntgcore.packets import ETH_IPV4, ETH_IPV6, ETH_QINQ, ETH_VLAN, checksum

from .refusal import OtgRefusal

CONTINUOUS = 2**62  # FlowPlan.packets of a flow that runs until stopped
MAX_CYCLE = 1_048_576  # frames in one flow's cycle
MAX_CYCLE_BYTES = 256 * 2**20  # bytes of one flow's cycle, and of all flows' together
MAGIC = b"NTGO"
SIG_LEN = 12
FCS_LEN = 4
L1_OVERHEAD = 20  # preamble (8) and the minimum inter-frame gap (12) of a frame at line rate
PREAMBLE = 8
ENGINE_TIME_LIMIT_NS = 2**32 * 10**9  # the engine's last due time must be before 2^32 s
IPV4_SAFE, IPV4_SAFE_MASK = 0xC6120000, 0xFFFE0000  # 198.18.0.0/15
IPV4_POOL = (0xC6128000, 0xC6140000)  # 198.18.128.0 up to 198.19.255.255
IPV6_SAFE = 0x20010DB8  # the top 32 bits of 2001:db8::/32
IPV6_POOL = 0x20010DB8FFFF << 80  # 2001:db8:ffff::N
VXLAN_PORT = 4789
ETH_TEB = 0x6558  # transparent Ethernet bridging: an Ethernet frame inside GRE
RANDOM_SIZES = 1024  # the cycle of a random size pattern

# OTG's predefined frame size distributions (snappi's FlowSizeWeightPairs.predefined doc).
IMIX = {
    "imix": ((64, 7.0), (570, 4.0), (1518, 1.0)),
    "ipsec_imix": ((90, 58.67), (92, 2.0), (594, 23.66), (1418, 15.67)),
    "ipv6_imix": ((60, 58.67), (496, 2.0), (594, 23.66), (1518, 15.67)),
    "standard_imix": ((58, 58.67), (62, 2.0), (594, 23.66), (1518, 15.67)),
    "tcp_imix": ((90, 58.67), (92, 2.0), (594, 23.66), (1518, 15.67)),
}

# Each header's fields in wire order: (name, bits); None is a reserved field sent as zeros.
LAYOUT: dict[str, tuple[tuple[str | None, int], ...]] = {
    "ethernet": (("dst", 48), ("src", 48), ("ether_type", 16)),
    "vlan": (("priority", 3), ("cfi", 1), ("id", 12), ("tpid", 16)),
    "vxlan": (("flags", 8), ("reserved0", 24), ("vni", 24), ("reserved1", 8)),
    "ipv4": (
        ("version", 4),
        ("header_length", 4),
        ("priority", 8),
        ("total_length", 16),
        ("identification", 16),
        ("reserved", 1),
        ("dont_fragment", 1),
        ("more_fragments", 1),
        ("fragment_offset", 13),
        ("time_to_live", 8),
        ("protocol", 8),
        ("header_checksum", 16),
        ("src", 32),
        ("dst", 32),
    ),
    "ipv6": (
        ("version", 4),
        ("traffic_class", 8),
        ("flow_label", 20),
        ("payload_length", 16),
        ("next_header", 8),
        ("hop_limit", 8),
        ("src", 128),
        ("dst", 128),
    ),
    "tcp": (
        ("src_port", 16),
        ("dst_port", 16),
        ("seq_num", 32),
        ("ack_num", 32),
        ("data_offset", 4),
        (None, 3),
        ("ecn_ns", 1),
        ("ecn_cwr", 1),
        ("ecn_echo", 1),
        ("ctl_urg", 1),
        ("ctl_ack", 1),
        ("ctl_psh", 1),
        ("ctl_rst", 1),
        ("ctl_syn", 1),
        ("ctl_fin", 1),
        ("window", 16),
        ("checksum", 16),
        (None, 16),
    ),
    "udp": (("src_port", 16), ("dst_port", 16), ("length", 16), ("checksum", 16)),
    "icmp": (
        ("type", 8),
        ("code", 8),
        ("checksum", 16),
        ("identifier", 16),
        ("sequence_number", 16),
    ),
    "gre": (
        ("checksum_present", 1),
        ("reserved0", 12),
        ("version", 3),
        ("protocol", 16),
        ("checksum", 16),
        ("reserved1", 16),
    ),
}
LAYOUT["icmpv6"] = LAYOUT["icmp"]
IPV4_PRIORITY = {
    "raw": (("raw", 8),),
    "tos": (
        ("precedence", 3),
        ("delay", 1),
        ("throughput", 1),
        ("reliability", 1),
        ("monetary", 1),
        ("unused", 1),
    ),
    "dscp": (("phb", 6), ("ecn", 2)),
}
SUPPORTED = (
    "ethernet",
    "vlan",
    "ipv4",
    "ipv6",
    "tcp",
    "udp",
    "icmp",
    "icmpv6",
    "custom",
    "vxlan",
    "gre",
)
NEXT_ETHERTYPE = {"vlan": ETH_VLAN, "ipv4": ETH_IPV4, "ipv6": ETH_IPV6}
NEXT_PROTOCOL = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "ipv4": 4, "ipv6": 41, "gre": 47}
ADDRESS_KIND = {("ipv4", "src"): 4, ("ipv4", "dst"): 4, ("ipv6", "src"): 6, ("ipv6", "dst"): 6}
L4_PSEUDO = ("tcp", "udp", "icmpv6")  # checksums over an IP pseudo header


@dataclass(frozen=True)
class PortInfo:
    """What the compiler needs of a port: its MTU and its layer1 speed (bits per second)."""

    mtu: int
    speed_bps: int


@dataclass(frozen=True)
class FlowPlan:
    """One flow as the engine sends it: a `stream` line over `frames` (the cycle of distinct
    frames as sent: wire addresses, FCS included). Packet i is frames[i mod len(frames)], due at
    `start_ns + i*period_ns` (burst 0), else `start_ns + (i // burst)*burst_period_ns +
    (i % burst)*period_ns`; `packets` is CONTINUOUS for a flow that runs until stopped."""

    name: str
    index: int
    tx_port: str
    rx_ports: tuple[str, ...]
    frames: tuple[bytes, ...]
    start_ns: int
    period_ns: int
    packets: int
    burst: int
    burst_period_ns: int
    seq_off: int | None
    csum_off: int | None
    sig_off: int | None
    metrics: bool
    latency: bool
    timestamps: bool


@dataclass(frozen=True)
class Plan:
    """The compiled config: its flows in config order, the address mapping (config address ->
    wire address, text) and the warnings to return with the config. `unwire` (wire address
    bytes -> config address bytes) is what `restore_frame` reads."""

    flows: tuple[FlowPlan, ...]
    wire_of: dict[str, str]
    warnings: tuple[str, ...]
    unwire: Mapping[bytes, bytes] = field(default_factory=dict, repr=False, compare=False)


# --------------------------------------------------------------------------------------------
# The parts of a flow before its frames are built


@dataclass
class _Field:
    """One header field: `bit` its offset in the frame (bits), `width` its bits, `values` its
    period (uint64 numpy array, or Python ints for 128-bit fields); `sized` a field whose value is
    the frame size minus `sized` (a length); `addr` 4 or 6 for an IP address."""

    path: str
    bit: int
    width: int
    values: Any = None
    sized: int | None = None
    addr: int | None = None

    @property
    def period(self) -> int:
        return 1 if self.values is None else len(self.values)


@dataclass
class _Checksum:
    """A generated checksum: `kind` ("ipv4", "l4", "icmp", "gre"), the 16-bit field at `off`,
    covering [start, end) of the frame (end None: up to the FCS), `ip` the header offset of the
    IP header of an L4 pseudo header, `bad` to send it wrong (the good value with its last bit
    flipped)."""

    path: str
    kind: str
    off: int
    start: int
    end: int | None
    ip: tuple[int, int] | None = None  # (offset, 4 or 6)
    bad: bool = False
    udp: bool = False


@dataclass
class _Spec:
    index: int
    name: str
    path: str
    tx_port: str
    rx_ports: tuple[str, ...]
    header: bytearray
    fields: list[_Field]
    checksums: list[_Checksum]
    sizes: np.ndarray
    size_path: str
    payload: Callable[[int], bytes]
    sig_off: int | None
    csum_off: int | None
    start_ns: int
    period_ns: int
    packets: int
    burst: int
    burst_period_ns: int
    metrics: bool
    latency: bool
    timestamps: bool

    def cycle(self) -> int:
        n = len(self.sizes)
        for f in self.fields:
            n = math.lcm(n, f.period)
        return n


def _int(text: Any, kind: int | str) -> int:
    """A pattern value as an integer: MAC, IPv4 and IPv6 addresses from their text."""
    if kind == "mac":
        return int(str(text).replace(":", "").replace("-", ""), 16)
    if kind == 4:
        return int(ipaddress.IPv4Address(text))
    if kind == 6:
        return int(ipaddress.IPv6Address(text))
    return int(text)


def _kind_of(header: str, name: str, width: int) -> int | str:
    if width == 48:
        return "mac"
    return ADDRESS_KIND.get((header, name), 0)


def _pattern(p: Any, path: str, width: int, kind: int | str) -> Any:
    """The period of one pattern object (snappi's PatternFlow...), as an array of values (the
    auto choice is `_computed`'s: here only an address's, which would need DHCP)."""
    choice = p.choice
    top = (1 << width) - 1
    if choice == "value":
        vals = [_int(p.value, kind)]
    elif choice == "values":
        vals = [_int(v, kind) for v in p.values or []]
        if not vals:
            raise OtgRefusal.bad(f"{path}.values", "an empty list: give at least one value")
    elif choice in ("increment", "decrement"):
        c = getattr(p, choice)
        start, step, count = _int(c.start, kind), _int(c.step, kind), int(c.count)
        if count < 1:
            raise OtgRefusal.bad(f"{path}.{choice}.count", f"{count}: at least 1")
        if count > MAX_CYCLE:
            raise OtgRefusal.unsupported(
                f"{path}.{choice}.count",
                f"{count} values: a flow's cycle holds at most {MAX_CYCLE} frames",
            )
        sign = 1 if choice == "increment" else -1
        if width <= 62 and start + step * count < 2**62:  # int64 holds every step
            k = np.arange(count, dtype=np.int64)
            arr = (start + sign * step * k) & top
            return arr.astype(np.uint64)
        vals = [(start + sign * step * k) & top for k in range(count)]
    elif choice == "random":
        r = p.random
        lo, hi, seed, count = _int(r.min, kind), _int(r.max, kind), int(r.seed), int(r.count)
        if lo > hi:
            raise OtgRefusal.bad(f"{path}.random", f"min {r.min} is above max {r.max}")
        if count < 1:
            raise OtgRefusal.bad(f"{path}.random.count", f"{count}: at least 1")
        if count > MAX_CYCLE:
            raise OtgRefusal.unsupported(
                f"{path}.random.count",
                f"{count} values: a flow's cycle holds at most {MAX_CYCLE} frames",
            )
        gen = np.random.Generator(np.random.PCG64(seed))
        return gen.integers(lo, hi, size=count, endpoint=True, dtype=np.uint64)
    elif choice == "auto":
        raise OtgRefusal.unsupported(
            f"{path}.auto", "no system-generated value here (no DHCP): give a value"
        )
    else:
        raise OtgRefusal.unsupported(f"{path}.{choice}", "this pattern is not supported")
    if width > 64:
        return [v & top for v in vals]
    return np.array([v & top for v in vals], dtype=np.uint64)


def _hexbytes(text: str, path: str) -> bytes:
    s = text.strip()
    if s[:2] in ("0x", "0X"):
        s = s[2:]
    s = s.replace(":", "").replace(" ", "")
    if len(s) % 2:
        raise OtgRefusal.bad(path, f"{len(s)} hex digits: bytes need an even number")
    return bytes.fromhex(s)


def _metric_tags(d: Any, path: str) -> None:
    """Refuse metric tags anywhere in a header (we count per flow, not per tag value)."""
    if isinstance(d, dict):
        for k, v in d.items():
            if k == "metric_tags" and v:
                raise OtgRefusal.unsupported(
                    f"{path}.metric_tags", "metric tags are not supported (metrics are per flow)"
                )
            _metric_tags(v, f"{path}.{k}")


def _headers(fobj: Any, fdict: dict[str, Any], path: str, spec: _Spec) -> None:
    """Lay out the flow's headers: the header template, its fields and checksums."""
    hdicts = fdict.get("packet") or []
    if not hdicts:
        raise OtgRefusal.bad(f"{path}.packet", "no headers: give at least an ethernet header")
    choices = [h.get("choice", "ethernet") for h in hdicts]
    for i, c in enumerate(choices):
        if c not in SUPPORTED:
            raise OtgRefusal.unsupported(
                f"{path}.packet[{i}].{c}",
                f"the {c} header is not supported (supported: {', '.join(SUPPORTED)})",
            )
    if choices[0] not in ("ethernet", "custom"):
        raise OtgRefusal.unsupported(
            f"{path}.packet[0].{choices[0]}", "the first header must be ethernet (or custom)"
        )
    off = 0
    last_ip: tuple[int, int] | None = None
    for i, c in enumerate(choices):
        hpath = f"{path}.packet[{i}].{c}"
        hd = hdicts[i].get(c) or {}
        _metric_tags(hd, hpath)
        obj = fobj.packet[i]
        nxt = choices[i + 1] if i + 1 < len(choices) else None
        if c == "custom":
            raw = _hexbytes(obj.bytes or "", f"{hpath}.bytes")
            spec.header += raw
            off += len(raw)
            continue
        if c == "icmp" or c == "icmpv6":
            if obj.choice != "echo":
                raise OtgRefusal.unsupported(f"{hpath}.{obj.choice}", "only echo is supported")
            obj, hd = obj.echo, hd.get("echo") or {}
        if c in L4_PSEUDO:
            prev = choices[i - 1] if i else None
            want = ("ipv6",) if c == "icmpv6" else ("ipv4", "ipv6")
            if prev not in want or last_ip is None:
                raise OtgRefusal.bad(hpath, f"needs an {' or '.join(want)} header right before it")
        layout = LAYOUT[c]
        if c == "gre":
            present = _pattern(obj.checksum_present, f"{hpath}.checksum_present", 1, 0)
            if len(present) != 1:
                raise OtgRefusal.unsupported(
                    f"{hpath}.checksum_present", "must be one value (it sets the header's length)"
                )
            if not int(present[0]):
                layout = layout[:4]
                for k in ("checksum", "reserved1"):
                    if k in hd:
                        raise OtgRefusal.bad(
                            f"{hpath}.{k}", "sent only with checksum_present 1: set it"
                        )
        known = {n for n, _ in layout if n} | {"choice"}
        for k in hd:
            if k not in known:
                raise OtgRefusal.unsupported(f"{hpath}.{k}", f"{c}.{k} is not supported")
        start = off
        bit = off * 8
        for name, width in layout:
            if name is None:
                bit += width
                continue
            fpath = f"{hpath}.{name}"
            if c == "ipv4" and name == "priority":
                pr = obj.priority
                for sub, w in IPV4_PRIORITY[pr.choice]:
                    p = getattr(getattr(pr, pr.choice), sub) if pr.choice != "raw" else pr.raw
                    sp = f"{fpath}.{pr.choice}" + ("" if pr.choice == "raw" else f".{sub}")
                    spec.fields.append(_Field(sp, bit, w, _pattern(p, sp, w, 0)))
                    bit += w
                continue
            p = getattr(obj, name)
            if name in ("checksum", "header_checksum"):
                if p.choice == "custom":
                    spec.fields.append(_Field(fpath, bit, 16, np.array([p.custom], np.uint64)))
                else:
                    spec.fields.append(_Field(fpath, bit, 16, np.array([0], np.uint64)))
                    ck = _checksum(c, fpath, bit // 8, start, last_ip)
                    ck.bad = p.generated == "bad"
                    spec.checksums.append(ck)
                bit += width
                continue
            f = _Field(fpath, bit, width)
            kind = _kind_of(c, name, width)
            computed = _computed(c, name, hd, p, nxt, start, kind)
            if isinstance(computed, tuple):
                f.sized = computed[0]
            elif computed is not None:
                f.values = np.array([computed & ((1 << width) - 1)], np.uint64)
            else:
                f.values = _pattern(p, fpath, width, kind)
                if isinstance(kind, int) and kind:
                    f.addr = kind
            spec.fields.append(f)
            bit += width
        length = (bit - start * 8) // 8
        spec.header += bytes(length)
        off += length
        if c in ("ipv4", "ipv6"):
            last_ip = (start, 4 if c == "ipv4" else 6)


def _checksum(c: str, path: str, off: int, start: int, ip: tuple[int, int] | None) -> _Checksum:
    if c == "ipv4":
        return _Checksum(path, "ipv4", off, start, start + 20)
    if c in L4_PSEUDO:
        return _Checksum(path, "l4", off, start, None, ip, udp=c == "udp")
    return _Checksum(path, "icmp" if c == "icmp" else "gre", off, start, None)


def _computed(
    c: str, name: str, hd: dict[str, Any], p: Any, nxt: str | None, start: int, kind: int | str
) -> int | tuple[int] | None:
    """A field's computed value: an int (auto, or what a tester puts there when the config
    leaves the field out), (n,) for a length (the frame size minus n), None: the pattern's own."""
    auto = p.choice == "auto"
    if c == "ethernet" and name == "ether_type" and auto:
        return NEXT_ETHERTYPE.get(nxt or "", int(p.auto))
    if c == "vlan" and name == "tpid" and "tpid" not in hd:
        return NEXT_ETHERTYPE.get(nxt or "", int(p.value))
    if c == "gre" and name == "protocol" and auto:
        return {**NEXT_ETHERTYPE, "ethernet": ETH_TEB}.get(nxt or "", int(p.auto))
    if c == "ipv4":
        if name == "header_length" and auto:
            return 5
        if name == "total_length" and auto:
            return (FCS_LEN + start,)
        if name == "protocol" and auto:
            return NEXT_PROTOCOL.get(nxt or "", int(p.auto))
    if c == "ipv6":
        if name == "payload_length" and auto:
            return (FCS_LEN + start + 40,)
        if name == "next_header" and auto:
            return NEXT_PROTOCOL.get(nxt or "", int(p.auto))
    if c == "udp":
        if name == "length" and "length" not in hd:
            return (FCS_LEN + start,)
        if name == "dst_port" and "dst_port" not in hd and nxt == "vxlan":
            return VXLAN_PORT
    if c == "tcp" and name == "data_offset" and "data_offset" not in hd:
        return 5
    if auto:
        if c in ("ipv4", "ipv6") and name in ("src", "dst"):
            return None  # FlowIpv4Auto / FlowIpv6Auto: DHCP, refused by _pattern
        return _int(p.auto, kind)
    return None


# --------------------------------------------------------------------------------------------
# Sizes, rates, durations


def _sizes(fobj: Any, path: str, name: str) -> tuple[np.ndarray, str]:
    """The cycle of frame sizes (FCS included) and the path of the size setting."""
    s = fobj.size
    choice = s.choice
    p = f"{path}.size.{choice}"
    if choice == "fixed":
        return np.array([int(s.fixed)], np.int64), p
    if choice == "increment":
        inc = s.increment
        lo, hi, step = int(inc.start), int(inc.end), int(inc.step)
        if step < 1:
            raise OtgRefusal.bad(f"{p}.step", f"{step}: at least 1")
        if lo > hi:
            raise OtgRefusal.bad(p, f"start {lo} is above end {hi}")
        return np.arange(lo, hi + 1, step, dtype=np.int64), p
    if choice == "random":
        r = s.random
        lo, hi = int(r.min), int(r.max)
        if lo > hi:
            raise OtgRefusal.bad(p, f"min {lo} is above max {hi}")
        gen = np.random.Generator(np.random.PCG64(zlib.crc32(name.encode())))
        return gen.integers(lo, hi, size=RANDOM_SIZES, endpoint=True, dtype=np.int64), p
    if choice == "weight_pairs":
        wp = s.weight_pairs
        if wp.choice == "predefined":
            pairs = IMIX[wp.predefined]
            p = f"{p}.predefined"
        else:
            pairs = tuple((int(c.size), float(c.weight)) for c in wp.custom)
            p = f"{p}.custom"
            if not pairs:
                raise OtgRefusal.bad(p, "an empty list: give at least one size and weight")
        return _weighted(pairs, p), p
    raise OtgRefusal.unsupported(p, "this size pattern is not supported")


def _weighted(pairs: Sequence[tuple[int, float]], path: str) -> np.ndarray:
    """A cycle whose counts follow the weights exactly (weights to 1/100), each size spread
    evenly over it: size k's n-th frame sits at (n + 1/2) / count_k of the cycle."""
    counts = [round(w * 100) for _, w in pairs]
    if any(c < 0 for c in counts) or not sum(counts):
        raise OtgRefusal.bad(path, "the weights must be positive (to 1/100)")
    g = 0
    for c in counts:
        g = math.gcd(g, c)
    counts = [c // g for c in counts]
    total = sum(counts)
    if total > MAX_CYCLE:
        raise OtgRefusal.unsupported(path, f"a cycle of {total} frames: at most {MAX_CYCLE}")
    keys = np.concatenate([(np.arange(c) + 0.5) / c for c in counts if c])
    sizes = np.concatenate([np.full(c, s, np.int64) for (s, _), c in zip(pairs, counts) if c])
    return sizes[np.argsort(keys, kind="stable")]


def _delay_ns(d: Any, speed: int) -> float:
    choice = d.choice
    if choice == "nanoseconds":
        return float(d.nanoseconds)
    if choice == "microseconds":
        return float(d.microseconds) * 1e3
    return float(d.bytes) * 8e9 / speed


def _timing(fobj: Any, path: str, spec: _Spec, port: PortInfo, warnings: list[str]) -> None:
    """Rate and duration -> start, period, packets and bursts."""
    rate = fobj.rate
    choice = rate.choice
    avg = float(spec.sizes.mean())
    speed = int(port.speed_bps)
    if speed <= 0:
        raise OtgRefusal.bad(f"{path}.tx_rx.port.tx_name", f"port {spec.tx_port} has no speed")
    if choice == "pps":
        pps = float(rate.pps)
    elif choice in ("bps", "kbps", "mbps", "gbps"):
        scale = {"bps": 1, "kbps": 10**3, "mbps": 10**6, "gbps": 10**9}[choice]
        pps = float(getattr(rate, choice)) * scale / (8 * avg)
    elif choice == "percentage":
        pps = float(rate.percentage) / 100 * speed / (8 * (avg + L1_OVERHEAD))
    else:
        raise OtgRefusal.unsupported(f"{path}.rate.{choice}", "this rate is not supported")
    if pps <= 0:
        raise OtgRefusal.bad(f"{path}.rate.{choice}", "a rate of 0 sends nothing")
    period = max(1, round(1e9 / pps))
    dur = fobj.duration
    dchoice = dur.choice
    d = getattr(dur, dchoice)
    dpath = f"{path}.duration.{dchoice}"
    gap = int(d.gap)
    fastest = (avg + PREAMBLE + gap) * 8e9 / speed
    if period < fastest - 0.5:
        warnings.append(
            f"{dpath}.gap: {gap} bytes between frames at {speed} b/s allow one frame every "
            f"{fastest:.0f} ns: the flow is sent at that rate, not every {period} ns"
        )
        period = math.ceil(fastest)
    spec.period_ns = period
    spec.burst = spec.burst_period_ns = 0
    if dchoice in ("fixed_packets", "fixed_seconds", "continuous"):
        spec.start_ns = round(_delay_ns(d.delay, speed))
    if dchoice == "fixed_packets":
        spec.packets = int(d.packets)
    elif dchoice == "fixed_seconds":
        spec.packets = math.ceil(float(d.seconds) * 1e9 / period)
        if spec.packets < 1:
            raise OtgRefusal.bad(f"{dpath}.seconds", f"{d.seconds} s sends nothing")
    elif dchoice == "continuous":
        spec.packets = CONTINUOUS
    elif dchoice == "burst":
        spec.burst = int(d.packets)
        spec.burst_period_ns = spec.burst * period + round(_delay_ns(d.inter_burst_gap, speed))
        spec.packets = CONTINUOUS if int(d.bursts) == 0 else int(d.bursts) * spec.burst
    else:
        raise OtgRefusal.unsupported(dpath, "this duration is not supported")
    if spec.packets != CONTINUOUS and _due(spec.packets - 1, spec) >= ENGINE_TIME_LIMIT_NS:
        raise OtgRefusal.bad(dpath, "the last packet would be due after 2^32 s")


def _due(i: int, f: _Spec | FlowPlan) -> int:
    if f.burst:
        return f.start_ns + (i // f.burst) * f.burst_period_ns + (i % f.burst) * f.period_ns
    return f.start_ns + i * f.period_ns


def _payload(fobj: Any, path: str) -> Callable[[int], bytes]:
    """The payload after the headers, as a function of its length."""
    pl = fobj.payload
    choice = pl.choice
    if choice == "fixed":
        pattern = _hexbytes(pl.fixed.pattern or "00", f"{path}.payload.fixed.pattern")
        repeat = bool(pl.fixed.repeat)

        def fixed(n: int) -> bytes:
            if not pattern:
                return bytes(n)
            if repeat:
                return (pattern * (n // len(pattern) + 1))[:n]
            return (pattern + bytes(n))[:n]

        return fixed
    if choice in ("increment_byte", "decrement_byte"):
        base = np.arange(256, dtype=np.uint8)
        if choice == "decrement_byte":
            base = base[::-1]
        return lambda n: np.resize(base, n).tobytes()
    if choice in ("increment_word", "decrement_word"):
        words = np.arange(65536, dtype=">u2").view(np.uint8)
        if choice == "decrement_word":
            words = np.arange(65535, -1, -1, dtype=">u2").view(np.uint8)
        return lambda n: np.resize(words, n).tobytes()
    raise OtgRefusal.unsupported(f"{path}.payload.{choice}", "this payload is not supported")


# --------------------------------------------------------------------------------------------
# The compiler


def compile_config(config: dict[str, Any], ports: Mapping[str, PortInfo]) -> Plan:
    """Compile an OTG config (snappi's `serialize(encoding="dict")` form, validated by snappi)
    for the ports it names; raises OtgRefusal (400, 501) naming the field."""
    cfg = snappi.Config()
    try:
        cfg.deserialize(config)
    except Exception as exc:  # snappi's own validation: any of its exceptions
        raise OtgRefusal.bad(
            "config", str(exc).splitlines()[0] if str(exc) else "invalid"
        ) from None
    warnings: list[str] = []
    refusals: list[OtgRefusal] = []
    specs: list[_Spec] = []
    for i, fdict in enumerate(config.get("flows") or []):
        try:
            specs.append(_flow(i, cfg.flows[i], fdict, ports, warnings))
        except OtgRefusal as r:
            refusals.append(r)
    if refusals:
        errors = [e for r in refusals for e in r.errors]
        if all(r.code == 501 for r in refusals):
            raise OtgRefusal(501, "unimplemented", errors)
        raise OtgRefusal(400, "validation", errors)
    total = sum(_check_cycle(s) for s in specs)
    if total > MAX_CYCLE_BYTES:
        raise OtgRefusal.unsupported(
            "flows", f"the flows' cycles hold {total} bytes together: at most {MAX_CYCLE_BYTES}"
        )
    wire_of, unwire = _map_addresses(specs, warnings)
    flows = tuple(_plan(s) for s in specs)
    return Plan(flows, wire_of, tuple(warnings), unwire)


def _flow(
    i: int, fobj: Any, fdict: dict[str, Any], ports: Mapping[str, PortInfo], warnings: list[str]
) -> _Spec:
    path = f"flows[{i}]"
    txrx = fobj.tx_rx
    if txrx.choice != "port":
        raise OtgRefusal.unsupported(
            f"{path}.tx_rx.{txrx.choice}", "flows between devices are not supported: use tx_rx.port"
        )
    tx = txrx.port.tx_name
    if tx not in ports:
        raise OtgRefusal.bad(
            f"{path}.tx_rx.port.tx_name", f"no port {tx!r} (ports: {', '.join(ports) or 'none'})"
        )
    rx_names = list(txrx.port.rx_names or [])
    if not rx_names and txrx.port.rx_name:
        rx_names = [txrx.port.rx_name]
    for k, r in enumerate(rx_names):
        if r not in ports:
            raise OtgRefusal.bad(f"{path}.tx_rx.port.rx_names[{k}]", f"no port {r!r}")
    if fdict.get("egress_packet"):
        raise OtgRefusal.unsupported(f"{path}.egress_packet", "egress tracking is not supported")
    m = fobj.metrics
    if (
        "predefined_metric_tags" in (fdict.get("metrics") or {})
        and m.predefined_metric_tags.rx_name
    ):
        raise OtgRefusal.unsupported(
            f"{path}.metrics.predefined_metric_tags.rx_name", "metric tags are not supported"
        )
    name = fobj.name
    sizes, size_path = _sizes(fobj, path, name)
    spec = _Spec(
        index=i,
        name=name,
        path=path,
        tx_port=tx,
        rx_ports=tuple(rx_names),
        header=bytearray(),
        fields=[],
        checksums=[],
        sizes=sizes,
        size_path=size_path,
        payload=_payload(fobj, path),
        sig_off=None,
        csum_off=None,
        start_ns=0,
        period_ns=1,
        packets=1,
        burst=0,
        burst_period_ns=0,
        metrics=bool(m.enable),
        latency=bool(m.enable and "latency" in (fdict.get("metrics") or {}) and m.latency.enable),
        timestamps=bool(m.enable and m.timestamps),
    )
    _headers(fobj, fdict, path, spec)
    hdr = len(spec.header)
    port = ports[tx]
    need = hdr + FCS_LEN + (SIG_LEN if spec.metrics else 0)
    smallest, largest = int(sizes.min()), int(sizes.max())
    if smallest < need:
        what = "the headers, the 12-byte signature" if spec.metrics else "the headers"
        raise OtgRefusal.bad(
            size_path,
            f"a {smallest}-byte frame has no room for {what} and the 4-byte FCS "
            f"({need} bytes): make the frames at least {need} bytes",
        )
    if largest > port.mtu + 14:
        raise OtgRefusal.bad(
            size_path,
            f"a {largest}-byte frame (FCS included) does not fit port {tx} "
            f"(MTU {port.mtu}: at most {port.mtu + 14} bytes)",
        )
    if spec.metrics:
        spec.sig_off = hdr
        spec.csum_off = _seq_checksum(spec)
    _timing(fobj, path, spec, port, warnings)
    return spec


def _seq_checksum(spec: _Spec) -> int | None:
    """The one checksum over the signature's sequence number that the engine keeps right."""
    covering = [c for c in spec.checksums if c.kind != "ipv4"]
    if len(covering) > 1:
        outer = covering[0]
        raise OtgRefusal.unsupported(
            outer.path,
            "with metrics.enable only one checksum may cover the signature's sequence number: "
            "make this one custom (0 for no UDP checksum, as RFC 7348 advises for VXLAN)",
        )
    return covering[0].off if covering else None


def _check_cycle(s: _Spec) -> int:
    """Refuse a cycle above the caps, naming the fields that make it; its bytes."""
    n = s.cycle()
    total = n // len(s.sizes) * int(s.sizes.sum())
    if n > MAX_CYCLE or total > MAX_CYCLE_BYTES:
        parts = [f"{f.path} ({f.period})" for f in s.fields if f.period > 1]
        if len(s.sizes) > 1:
            parts.append(f"{s.size_path} ({len(s.sizes)})")
        raise OtgRefusal.unsupported(
            s.path,
            f"a cycle of {n} frames ({total} bytes), the lcm of the periods of "
            f"{', '.join(parts)}: at most {MAX_CYCLE} frames and {MAX_CYCLE_BYTES} bytes",
        )
    return total


# --------------------------------------------------------------------------------------------
# Address mapping


def _map_addresses(
    specs: list[_Spec], warnings: list[str]
) -> tuple[dict[str, str], dict[bytes, bytes]]:
    """Replace the addresses outside the documentation ranges, one-to-one, in order of first
    appearance (flows in order, their address fields in header order, each field's values in
    cycle order)."""
    v4 = [f for s in specs for f in s.fields if f.addr == 4 and f.values is not None]
    v6 = [f for s in specs for f in s.fields if f.addr == 6 and f.values is not None]
    wire_of: dict[str, str] = {}
    unwire: dict[bytes, bytes] = {}
    pairs: list[tuple[str, str]] = []
    if v4:
        allv = np.concatenate([f.values for f in v4])
        outside = (allv & IPV4_SAFE_MASK) != IPV4_SAFE
        used = np.unique(allv[~outside])
        uniq, first = np.unique(allv[outside], return_index=True)
        ordered = uniq[np.argsort(first)]
        pool = np.arange(IPV4_POOL[0], IPV4_POOL[1], dtype=np.uint64)
        pool = pool[~np.isin(pool, used)]
        if len(ordered) > len(pool):
            culprit = next(f for f in v4 if ((f.values & IPV4_SAFE_MASK) != IPV4_SAFE).any())
            raise OtgRefusal.unsupported(
                culprit.path,
                f"{len(ordered)} IPv4 addresses outside 198.18.0.0/15: at most {len(pool)} can "
                "be mapped into it",
            )
        wire = pool[: len(ordered)]
        order = np.argsort(ordered)
        keys, vals = ordered[order], wire[order]
        for f in v4:
            vs = f.values
            mask = (vs & IPV4_SAFE_MASK) != IPV4_SAFE
            if mask.any():
                vs = vs.copy()
                vs[mask] = vals[np.searchsorted(keys, vs[mask])]
                f.values = vs
        for a, b in zip(ordered.tolist(), wire.tolist()):
            ca, wb = str(ipaddress.IPv4Address(a)), str(ipaddress.IPv4Address(b))
            wire_of[ca] = wb
            unwire[int(b).to_bytes(4, "big")] = int(a).to_bytes(4, "big")
            if len(pairs) < 16:
                pairs.append((ca, wb))
    if v6:
        used6 = {v for f in v6 for v in f.values if v >> 96 == IPV6_SAFE}
        m6: dict[int, int] = {}
        nxt = 1
        for f in v6:
            out = []
            for v in f.values:
                if v >> 96 != IPV6_SAFE:
                    w = m6.get(v)
                    if w is None:
                        while IPV6_POOL + nxt in used6:
                            nxt += 1
                        w = m6[v] = IPV6_POOL + nxt
                        nxt += 1
                    v = w
                out.append(v)
            f.values = out
        for a, b in m6.items():
            ca, wb = str(ipaddress.IPv6Address(a)), str(ipaddress.IPv6Address(b))
            wire_of[ca] = wb
            unwire[b.to_bytes(16, "big")] = a.to_bytes(16, "big")
            if len(pairs) < 16:
                pairs.append((ca, wb))
    if wire_of:
        more = len(wire_of) - len(pairs)
        listed = ", ".join(f"{a} -> {b}" for a, b in pairs)
        warnings.append(
            "network safety: addresses outside 198.18.0.0/15 and 2001:db8::/32 are sent as "
            f"addresses inside them: {listed}"
            + (f" (and {more} more)" if more > 0 else "")
            + "; captures are returned with the config's addresses"
        )
    return wire_of, unwire


# --------------------------------------------------------------------------------------------
# Frames


def _span(f: _Field) -> tuple[int, int, int]:
    """(first byte, byte count, left shift) of a field inside its bytes."""
    lead = f.bit % 8
    nb = (lead + f.width + 7) // 8
    return f.bit // 8, nb, nb * 8 - lead - f.width


def _value_bytes(f: _Field, values: Any) -> np.ndarray:
    """The field's values shifted into place, as a (period, byte count) uint8 matrix."""
    _, nb, shift = _span(f)
    if nb <= 8 and isinstance(values, np.ndarray):
        arr = (values.astype(np.uint64) << np.uint64(shift)).astype(">u8")
        return arr.view(np.uint8).reshape(-1, 8)[:, 8 - nb :]
    raw = b"".join((int(v) << shift).to_bytes(nb, "big") for v in values)
    return np.frombuffer(raw, np.uint8).reshape(-1, nb)


def _put(buf: bytearray, f: _Field, value: int) -> None:
    b0, nb, shift = _span(f)
    mask = ((1 << f.width) - 1) << shift
    cur = int.from_bytes(buf[b0 : b0 + nb], "big")
    buf[b0 : b0 + nb] = ((cur & ~mask) | ((value << shift) & mask)).to_bytes(nb, "big")


def _sum16(m: np.ndarray, a: int, b: int) -> np.ndarray:
    """Row-wise 16-bit big-endian word sums of columns [a, b) (unfolded, uint64)."""
    even = (b - a) & ~1
    words = np.ascontiguousarray(m[:, a : a + even]).view(">u2")
    s = words.sum(axis=1, dtype=np.uint64)
    if (b - a) & 1:
        s += m[:, b - 1].astype(np.uint64) << np.uint64(8)
    return s


def _fold(s: np.ndarray) -> np.ndarray:
    for _ in range(4):
        s = (s & np.uint64(0xFFFF)) + (s >> np.uint64(16))
    return (~s) & np.uint64(0xFFFF)


def _checksums(m: np.ndarray, size: int, checks: Sequence[_Checksum]) -> None:
    """Fill the generated checksums of the rows of `m` (frames of `size` bytes), the innermost
    first (an outer checksum covers the inner ones)."""
    end_all = size - FCS_LEN
    for ck in reversed(checks):
        end = ck.end if ck.end is not None else end_all
        m[:, ck.off : ck.off + 2] = 0
        s = _sum16(m, ck.start, end)
        if ck.kind == "l4" and ck.ip is not None:
            ipoff, fam = ck.ip
            if fam == 4:
                s += _sum16(m, ipoff + 12, ipoff + 20) + m[:, ipoff + 9].astype(np.uint64)
            else:
                s += _sum16(m, ipoff + 8, ipoff + 40) + m[:, ipoff + 6].astype(np.uint64)
            s += np.uint64(end - ck.start)
        c = _fold(s)
        if ck.udp:
            c[c == 0] = 0xFFFF
        if ck.bad:
            c ^= np.uint64(1)
        m[:, ck.off] = (c >> np.uint64(8)).astype(np.uint8)
        m[:, ck.off + 1] = (c & np.uint64(0xFF)).astype(np.uint8)


def _template(s: _Spec, size: int) -> bytearray:
    """One frame of `size` bytes: the header with its one-value and length fields, the payload,
    the signature's magic and flow index; FCS zero."""
    buf = bytearray(s.header)
    for f in s.fields:
        if f.sized is not None:
            _put(buf, f, size - f.sized)
        elif f.period == 1:
            _put(buf, f, int(f.values[0]))
    hdr = len(buf)
    buf += s.payload(size - FCS_LEN - hdr)
    if s.sig_off is not None:
        buf[s.sig_off : s.sig_off + 8] = MAGIC + struct.pack("!I", s.index)
    buf += bytes(FCS_LEN)
    return buf


CHUNK_BYTES = 32 * 2**20


def _frames(s: _Spec) -> tuple[bytes, ...]:
    n = s.cycle()
    out: list[bytes] = [b""] * n
    cyc = np.arange(n, dtype=np.int64)
    row_sizes = s.sizes[cyc % len(s.sizes)]
    order = np.argsort(row_sizes, kind="stable")
    sorted_sizes = row_sizes[order]
    distinct, starts = np.unique(sorted_sizes, return_index=True)
    bounds = list(starts) + [n]
    varying = [
        (
            f,
            _value_bytes(f, f.values),
            ~_value_bytes(f, [(1 << f.width) - 1])[0],
        )
        for f in s.fields
        if f.period > 1
    ]
    for k, size in enumerate(distinct.tolist()):
        rows_all = order[bounds[k] : bounds[k + 1]]
        tmpl = np.frombuffer(bytes(_template(s, size)), np.uint8)
        per = max(1, CHUNK_BYTES // size)
        for c0 in range(0, len(rows_all), per):
            rows = rows_all[c0 : c0 + per]
            m = np.empty((len(rows), size), np.uint8)
            m[:] = tmpl
            for f, vb, keep in varying:
                b0, nb, _ = _span(f)
                vals = vb[rows % f.period]
                if f.bit % 8 == 0 and f.width % 8 == 0:
                    m[:, b0 : b0 + nb] = vals
                else:  # a field sharing its bytes: keep the others' bits
                    m[:, b0 : b0 + nb] &= keep
                    m[:, b0 : b0 + nb] |= vals
            if s.sig_off is not None:
                seq = (rows & 0xFFFFFFFF).astype(">u4").view(np.uint8).reshape(-1, 4)
                m[:, s.sig_off + 8 : s.sig_off + 12] = seq
            _checksums(m, size, s.checksums)
            body = size - FCS_LEN
            flat = m.reshape(-1).data
            crcs = np.fromiter(
                (zlib.crc32(flat[o : o + body]) for o in range(0, len(rows) * size, size)),
                dtype="<u4",
                count=len(rows),
            )
            m[:, body:] = crcs.view(np.uint8).reshape(-1, 4)
            data = m.tobytes()
            for j, r in enumerate(rows.tolist()):
                out[r] = data[j * size : (j + 1) * size]
    return tuple(out)


def _plan(s: _Spec) -> FlowPlan:
    return FlowPlan(
        name=s.name,
        index=s.index,
        tx_port=s.tx_port,
        rx_ports=s.rx_ports,
        frames=_frames(s),
        start_ns=s.start_ns,
        period_ns=s.period_ns,
        packets=s.packets,
        burst=s.burst,
        burst_period_ns=s.burst_period_ns,
        seq_off=None if s.sig_off is None else s.sig_off + 8,
        csum_off=s.csum_off,
        sig_off=s.sig_off,
        metrics=s.metrics,
        latency=s.latency,
        timestamps=s.timestamps,
    )


# --------------------------------------------------------------------------------------------
# The engine session


def _max_packets(f: FlowPlan) -> int:
    """The most packets whose last is due before the engine's time limit."""
    room = ENGINE_TIME_LIMIT_NS - 1 - f.start_ns
    if f.burst:
        q = room // f.burst_period_ns
        n = q * f.burst + min(f.burst, (room - q * f.burst_period_ns) // f.period_ns + 1)
    else:
        n = room // f.period_ns + 1
    return min(CONTINUOUS, n)


def session_text(flows: Sequence[FlowPlan], frames_path: str, seed: int) -> tuple[str, list[bytes]]:
    """The engine session for one tx port's flows (one `stream` line each, in order) and the
    frames to write to `frames_path` in order (ntgcore.packets.PcapWriter). A continuous flow
    is sent until the engine's time limit (2^32 s) or until stopped."""
    if any(ch.isspace() for ch in frames_path):
        raise OtgRefusal(500, "internal", [f"frames path {frames_path!r} has blanks"])
    if len({f.tx_port for f in flows}) > 1:
        raise OtgRefusal(500, "internal", ["session_text: flows of more than one tx port"])
    lines = ["ntg-session 1", f"seed {seed}", f"frames {frames_path}"]
    frames: list[bytes] = []
    for f in flows:
        packets = _max_packets(f) if f.packets == CONTINUOUS else f.packets
        seq = "-" if f.seq_off is None else str(f.seq_off)
        csum = "-" if f.csum_off is None else str(f.csum_off)
        lines.append(
            f"stream first={len(frames)} count={len(f.frames)} start={f.start_ns} "
            f"period={f.period_ns} packets={packets} burst={f.burst} "
            f"burst_period={f.burst_period_ns} seq_off={seq} csum_off={csum}"
            + (" fcs=1" if f.seq_off is not None else "")  # the FCS stays the frame's CRC-32
        )
        frames.extend(f.frames)
    return "\n".join(lines) + "\n", frames


# --------------------------------------------------------------------------------------------
# Received frames


def signature(frame: bytes) -> tuple[int, int] | None:
    """(flow index, sequence number) of a frame that carries our signature, else None."""
    k = frame.find(MAGIC, 14)
    if k < 0 or k + SIG_LEN > len(frame):
        return None
    idx, seq = struct.unpack_from("!II", frame, k + 4)
    return idx, seq


@dataclass
class _Seen:
    """A checksum found in a received frame: where, over what, and how it was sent."""

    off: int
    start: int
    end: int
    ip: tuple[int, int] | None
    udp: bool
    how: str = "custom"  # good, bad, none (UDP 0), custom (kept), partial (cut frame)


def _parse(frame: bytes) -> tuple[list[tuple[int, int]], list[_Seen]]:
    """The IP addresses (offset, length) and the checksums of a frame, outermost first: the
    shapes the compiler sends (Ethernet, VLAN tags, IPv4/IPv6, TCP/UDP/ICMP/ICMPv6, VXLAN and
    GRE with what they carry). A checksum's `end` is where its IP header says the packet ends
    (past the frame's end when the capture cut it)."""
    n = len(frame)
    addrs: list[tuple[int, int]] = []
    sums: list[_Seen] = []
    off, limit = 0, n
    etype: int | None = None  # None: an Ethernet header at off
    while True:
        if etype is None:
            if off + 14 > min(limit, n):
                break
            etype = int.from_bytes(frame[off + 12 : off + 14], "big")
            off += 14
            while etype in (ETH_VLAN, ETH_QINQ, 0x9100) and off + 4 <= n:
                etype = int.from_bytes(frame[off + 2 : off + 4], "big")
                off += 4
        if etype == ETH_IPV4 and off + 20 <= n:
            hl = max((frame[off] & 0xF) * 4, 20)
            limit = off + int.from_bytes(frame[off + 2 : off + 4], "big")
            addrs += [(off + 12, 4), (off + 16, 4)]
            sums.append(_Seen(off + 10, off, off + hl, None, False))
            ip = (off, 4)
            proto, off = frame[off + 9], off + hl
        elif etype == ETH_IPV6 and off + 40 <= n:
            limit = off + 40 + int.from_bytes(frame[off + 4 : off + 6], "big")
            addrs += [(off + 8, 16), (off + 24, 16)]
            ip = (off, 6)
            proto, off = frame[off + 6], off + 40
        else:
            break
        etype = None
        if proto == 6 and off + 18 <= n:
            sums.append(_Seen(off + 16, off, limit, ip, False))
        elif proto in (1, 17, 58) and off + 8 <= n:
            at = off + (6 if proto == 17 else 2)
            sums.append(_Seen(at, off, limit, None if proto == 1 else ip, proto == 17))
            if proto == 17 and int.from_bytes(frame[off + 2 : off + 4], "big") == VXLAN_PORT:
                off += 16  # UDP and VXLAN: an Ethernet frame follows
                continue
        elif proto == 47 and off + 4 <= n:
            flags = frame[off]
            gproto = int.from_bytes(frame[off + 2 : off + 4], "big")
            if flags & 0x80:
                sums.append(_Seen(off + 4, off, limit, None, False))
            off += 8 if flags & 0x80 else 4
            if gproto in (ETH_IPV4, ETH_IPV6):
                etype = gproto
            if gproto in (ETH_IPV4, ETH_IPV6, ETH_TEB):
                continue
        elif proto in (4, 41):
            etype = ETH_IPV4 if proto == 4 else ETH_IPV6
            continue
        break
    return addrs, sums


def _good(frame: bytes | bytearray, s: _Seen) -> int:
    data = bytearray(frame[s.start : s.end])
    data[s.off - s.start : s.off - s.start + 2] = b"\0\0"
    if s.ip is not None:
        ipoff, fam = s.ip
        if fam == 4:
            pseudo = frame[ipoff + 12 : ipoff + 20] + bytes([0, frame[ipoff + 9]])
        else:
            pseudo = frame[ipoff + 8 : ipoff + 40] + bytes([0, frame[ipoff + 6]])
        data = bytearray(pseudo + struct.pack("!H", (s.end - s.start) & 0xFFFF)) + data
    c = checksum(bytes(data))
    if s.udp and c == 0:
        c = 0xFFFF
    return c


def restore_frame(frame: bytes, plan: Plan) -> bytes:
    """A captured wire frame with the config's addresses again, its checksums made for them
    (a good checksum good, a bad one bad, a custom one kept) and its FCS redone when it carried
    one: the bytes the config describes."""
    unwire = plan.unwire
    if not unwire:
        return frame
    addrs, sums = _parse(frame)
    hits = [(o, n) for o, n in addrs if frame[o : o + n] in unwire]
    if not hits:
        return frame
    has_fcs = len(frame) > 18 and (
        signature(frame) is not None or struct.unpack("<I", frame[-4:])[0] == zlib.crc32(frame[:-4])
    )
    for s in sums:
        field_v = int.from_bytes(frame[s.off : s.off + 2], "big")
        if s.end > len(frame):
            s.how = "partial"
            continue
        good = _good(frame, s)
        if s.udp and field_v == 0:
            s.how = "none"
        elif field_v == good or (not s.udp and {field_v, good} == {0, 0xFFFF}):
            s.how = "good"
        elif field_v == good ^ 1:
            s.how = "bad"
    out = bytearray(frame)
    for o, n in hits:
        out[o : o + n] = unwire[bytes(frame[o : o + n])]
    for s in reversed(sums):
        if s.how in ("good", "bad"):
            c = _good(out, s)
            out[s.off : s.off + 2] = struct.pack("!H", c ^ (1 if s.how == "bad" else 0))
        elif s.how == "partial":
            old = int.from_bytes(out[s.off : s.off + 2], "big")
            out[s.off : s.off + 2] = struct.pack("!H", _adjust(old, frame, out, hits, s))
    if has_fcs:
        out[-4:] = struct.pack("<I", zlib.crc32(bytes(out[:-4])))
    return bytes(out)


def _adjust(
    old: int, before: bytes, after: bytearray, hits: list[tuple[int, int]], s: _Seen
) -> int:
    """RFC 1624's incremental update of a checksum over a cut frame for the changed addresses
    it covers (through its IP header or pseudo header)."""
    covered = []
    for o, n in hits:
        inside = s.start <= o and o + n <= s.end
        pseudo = s.ip is not None and s.ip[0] <= o < s.ip[0] + (20 if s.ip[1] == 4 else 40)
        if inside or pseudo:
            covered.append((o, n))
    acc = (~old) & 0xFFFF
    for o, n in covered:
        for k in range(o, o + n, 2):
            acc += (~int.from_bytes(before[k : k + 2], "big")) & 0xFFFF
            acc += int.from_bytes(after[k : k + 2], "big")
    while acc >> 16:
        acc = (acc & 0xFFFF) + (acc >> 16)
    return (~acc) & 0xFFFF
