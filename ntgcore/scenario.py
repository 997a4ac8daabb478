"""Scenario YAML v1: one typed model, and a loader whose errors name file, line and field.

The words follow what users know from Open Traffic Generator, TRex and Ostinato: a flow has a
`rate` (or `period`), a `packets` count (or `duration`), a payload `size`; a meta-flow is a flow
with `repeat: {count, period}`. Reference: docs/scenario.md.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    ModelWrapValidatorHandler,
    Tag,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from .distributions import Distribution, as_distribution, distribution
from .errors import BadInput, InputProblems
from .files import read_bounded
from .packets import BENCHMARK_NETWORKS
from .registry import DUT_KINDS, GENERATORS, METHODS
from .units import parse_duration_ns, parse_rate_pps, period_ns_from_rate
from .yamlread import MAX_BYTES, YamlProblem, gc_paused, read_yaml, yaml_lines

SCENARIO_VERSION = 1
MAX_FRAME = 65535  # the pcap snap length the engine writes
MAX_TIME_NS = 2**32 * 1_000_000_000  # pcap seconds are 32 bits
EPHEMERAL_PORTS = (49152, 65535)
MAX_ITEMS = 10_000  # items of a list other than `flows` (one error each could be millions)
MAX_FLOW_PROBLEMS = 100  # flows reported as wrong before the check stops
# The only addresses a live run may send from and to (network safety): RFC 2544's benchmarking
# range and the IPv6 documentation range.
_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")

Mode = Literal["random", "increment"]


@functools.lru_cache(maxsize=4096)
def _interface(text: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """Parsed once per distinct text: a flow asks for its addresses' version several times, and
    a large scenario repeats the same few addresses (ipaddress objects are immutable)."""
    return ipaddress.ip_interface(text)


def _rate_value(v: Any) -> Decimal:
    rate = parse_rate_pps(v)
    if rate <= 0:
        raise ValueError("must be > 0")
    if rate > 1_000_000_000:
        raise ValueError("at most 1e9 packets per second (a 1 ns period)")
    return rate


Duration = Annotated[
    int,
    BeforeValidator(parse_duration_ns),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": r"^\s*[0-9.eE+-]+\s*(ns|us|µs|ms|s|m|min|h)?\s*$"},
            ],
            "description": "A duration: 1.5s, 250ms, 10us, 5ns, 2m; a bare number is seconds.",
        }
    ),
]
Rate = Annotated[
    Decimal,
    BeforeValidator(_rate_value),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0},
                {"type": "string", "pattern": r"^\s*[0-9.eE+-]+\s*([kKmM]?pps)?\s*$"},
            ],
            "description": "Packets per second: 1000, 2.5kpps, 1Mpps.",
        }
    ),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_shared: dict[tuple[Any, ...], BaseModel] = {}


class _Shared(_Model):
    """A small frozen value that many flows repeat (an address, ports, a size, a payload): equal
    inputs give one shared instance, so 100,000 flows to one `dst` hold one Address, not 100,000
    (a model instance costs about 500 bytes, more than the YAML text that made it)."""

    @model_validator(mode="wrap")
    @classmethod
    def _one_instance(cls, v: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        try:
            key = (
                cls,
                type(v),
                frozenset((k, type(x), x) for k, x in v.items()) if isinstance(v, dict) else v,
            )
            hash(key)
        except TypeError:  # a nested mapping or list: not shared
            return handler(v)
        found = _shared.get(key)
        if found is None:
            found = handler(v)
            if len(_shared) >= 10_000:
                _shared.clear()
            _shared[key] = found
        return found


class Address(_Shared):
    """An address, or a CIDR block whose host part is drawn per flow instance."""

    cidr: str = Field(description="Address (198.18.0.1) or block (198.18.0.0/16, 2001:db8::/48).")
    mode: Mode = Field(
        "random",
        description="For a block: `random` draws the host part per flow instance; `increment` "
        "adds the repetition number to the given address, wrapping inside the block.",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return {"cidr": v} if isinstance(v, str) else v

    @field_validator("cidr")
    @classmethod
    def _valid_cidr(cls, v: str) -> str:
        try:
            _interface(v.strip())
        except ValueError:
            raise ValueError("not an IPv4 or IPv6 address or CIDR block") from None
        return v.strip()

    @property
    def interface(self) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
        return _interface(self.cidr)

    @property
    def version(self) -> int:
        return self.interface.version

    @property
    def is_single(self) -> bool:
        return self.interface.network.num_addresses == 1


class Ports(_Shared):
    """A port, or a range `LO-HI` drawn per flow instance (`random`) or stepped (`increment`)."""

    range: str = Field(description="`80`, `1024-2047`, or `random` (the ephemeral ports).")
    mode: Mode = "random"

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        if isinstance(v, bool):
            return v
        if isinstance(v, (int, str)):
            return {"range": str(v)}
        return v

    @field_validator("range")
    @classmethod
    def _valid_range(cls, v: str) -> str:
        v = v.strip()
        if v == "random":
            return f"{EPHEMERAL_PORTS[0]}-{EPHEMERAL_PORTS[1]}"
        m = re.fullmatch(r"(\d+)\s*(?:-\s*(\d+))?", v)
        if not m:
            raise ValueError("expected a port (80), a range (1024-2047) or `random`")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi > 65535:
            raise ValueError("ports go up to 65535")
        if lo > hi:
            raise ValueError("range must be LO-HI with LO <= HI")
        return f"{lo}-{hi}"

    @property
    def bounds(self) -> tuple[int, int]:
        lo, hi = self.range.split("-")
        return int(lo), int(hi)


class Size(_Shared):
    """Payload length in bytes, fixed or uniform per packet in [min, max]."""

    min: int = Field(ge=0)
    max: int = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        if isinstance(v, bool):
            return v
        if isinstance(v, int):
            return {"min": v, "max": v}
        if isinstance(v, str):
            m = re.fullmatch(r"\s*(\d+)\s*(?:(?:-|\.\.)\s*(\d+))?\s*", v)
            if not m:
                raise ValueError("expected a size in bytes (100), or a range (64-512)")
            return {"min": int(m.group(1)), "max": int(m.group(2) or m.group(1))}
        return v

    @model_validator(mode="after")
    def _ordered(self) -> Size:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class Payload(_Shared):
    size: Size | None = Field(None, description="L4 payload bytes: 100, `64-512` or {min, max}.")
    text: str | None = Field(None, description="Text placed at the start of every payload (UTF-8).")
    hex: str | None = Field(None, description="Bytes placed at the start of every payload, in hex.")

    @field_validator("hex")
    @classmethod
    def _valid_hex(cls, v: str | None) -> str | None:
        if v is None:
            return v
        cleaned = re.sub(r"[\s:]", "", v)
        if cleaned.lower().startswith("0x"):
            cleaned = cleaned[2:]
        try:
            bytes.fromhex(cleaned)
        except ValueError:
            raise ValueError("not an even number of hex digits") from None
        return cleaned.lower()

    @model_validator(mode="after")
    def _consistent(self) -> Payload:
        if self.text is not None and self.hex is not None:
            raise ValueError("give either text or hex, not both")
        if self.size is not None and self.size.max < len(self.content):
            raise ValueError(
                f"size.max ({self.size.max}) is shorter than the custom payload "
                f"({len(self.content)} bytes); raise size or shorten the payload"
            )
        return self

    @property
    def content(self) -> bytes:
        if self.text is not None:
            return self.text.encode()
        if self.hex is not None:
            return bytes.fromhex(self.hex)
        return b""

    @property
    def sizes(self) -> tuple[int, int]:
        if self.size is None:
            n = len(self.content)
            return n, n
        return self.size.min, self.size.max


class Repeat(_Model):
    """Makes a flow a meta-flow: `count` instances, one every `period`."""

    count: int = Field(ge=1, description="Number of flow instances.")
    period: Duration = Field(description="Time between the starts of two instances (e.g. 10ms).")


class Flow(_Model):
    name: str | None = None
    protocol: Literal["tcp", "udp", "icmp", "icmpv6"] = Field(
        description="IP version comes from the addresses; icmp needs IPv4, icmpv6 IPv6."
    )
    src: Address
    dst: Address
    src_port: Ports | None = Field(
        None, description="TCP/UDP only; default `random` (49152-65535)."
    )
    dst_port: Ports | None = Field(None, description="TCP/UDP only; required for them.")
    start: Duration = Field(0, description="Start of the first packet: 1.5s, 250ms, 10us, 5ns.")
    rate: Rate | None = Field(None, description="Packets per second: 1000, 2.5kpps, 1Mpps.")
    period: Duration | None = Field(None, description="Time between packets, instead of rate: 2s.")
    packets: int | None = Field(None, ge=1, description="Packets per flow instance.")
    duration: Duration | None = Field(None, description="Instead of packets: how long it lasts.")
    payload: Payload = Payload()
    repeat: Repeat | None = None

    @field_validator("period", "duration")
    @classmethod
    def _positive(cls, v: int | None) -> int | None:
        if v is not None and v <= 0:
            raise ValueError("must be > 0")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Flow:
        if (self.rate is None) == (self.period is None):
            raise ValueError("give exactly one of rate (packets per second) or period")
        if (self.packets is None) == (self.duration is None):
            raise ValueError("give exactly one of packets or duration")
        if self.src.version != self.dst.version:
            raise ValueError(
                f"src is IPv{self.src.version} but dst is IPv{self.dst.version}; use one family"
            )
        if self.protocol == "icmp" and self.ip_version != 4:
            raise ValueError("icmp needs IPv4 addresses; use icmpv6 for IPv6")
        if self.protocol == "icmpv6" and self.ip_version != 6:
            raise ValueError("icmpv6 needs IPv6 addresses; use icmp for IPv4")
        if self.protocol in ("icmp", "icmpv6"):
            if self.src_port is not None or self.dst_port is not None:
                raise ValueError(f"{self.protocol} has no ports; remove src_port and dst_port")
        elif self.dst_port is None:
            raise ValueError(f"{self.protocol} needs dst_port (a port, a range or `random`)")
        if self.last_due_ns >= MAX_TIME_NS:
            raise ValueError(
                f"the last packet would be due at {self.last_due_ns / 1e9:.6g} s; pcap time stamps "
                f"end at 2^32 s (about 136 years): lower packets, repeat.count or a period"
            )
        limit = MAX_FRAME - self.header_bytes
        if self.payload.sizes[1] > limit:
            raise ValueError(
                f"payload size {self.payload.sizes[1]} makes frames longer than {MAX_FRAME} "
                f"bytes; at most {limit} for {self.protocol} over IPv{self.ip_version}"
            )
        return self

    @property
    def ip_version(self) -> int:
        return self.src.version

    @property
    def header_bytes(self) -> int:
        l3 = 20 if self.ip_version == 4 else 40
        l4 = 20 if self.protocol == "tcp" else 8
        return 14 + l3 + l4

    @property
    def period_ns(self) -> int:
        if self.period is not None:
            return self.period
        assert self.rate is not None
        return max(1, period_ns_from_rate(self.rate))

    @property
    def packet_count(self) -> int:
        if self.packets is not None:
            return self.packets
        assert self.duration is not None
        return -(-self.duration // self.period_ns)  # packets due inside [start, start+duration)

    @property
    def last_due_ns(self) -> int:
        return (
            self.start
            + (self.repetitions - 1) * self.repeat_period_ns
            + (self.packet_count - 1) * self.period_ns
        )

    @property
    def repetitions(self) -> int:
        return self.repeat.count if self.repeat else 1

    @property
    def repeat_period_ns(self) -> int:
        return self.repeat.period if self.repeat else 0


# --------------------------------------------------------------------------------------------
# Two-way sessions: the `sessions:` section (docs/scenario.md, "Two-way sessions")

if TYPE_CHECKING:  # what mypy sees; at run time each is Distribution read in its unit
    TimeDist = Distribution
    PauseDist = Distribution
    BytesDist = Distribution
    CountDist = Distribution
    PortDist = Distribution
else:
    TimeDist = distribution("time")
    PauseDist = distribution("time", lambda v: _pause_shorthand(v))
    BytesDist = distribution("bytes")
    CountDist = distribution("count")


def _pause_shorthand(v: Any) -> Any:
    """A plain duration (`2s`, `250ms`, or a bare number of seconds, as every duration field
    of a scenario) as a fixed time in ns; a distribution as given (a bare number inside it is
    ns, as in every distribution)."""
    if isinstance(v, bool) or isinstance(v, dict):
        return v
    if isinstance(v, (int, float, str)):
        return {"fixed": parse_duration_ns(v)}
    return v


def _port_shorthand(v: Any) -> Any:
    """`random`, `80`, `1024-2047` as distributions (uniform over the range); others as given."""
    if isinstance(v, str):
        text = v.strip()
        if text == "random":
            return {"uniform": {"min": EPHEMERAL_PORTS[0], "max": EPHEMERAL_PORTS[1]}}
        m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", text)
        if m:
            return {"uniform": {"min": int(m.group(1)), "max": int(m.group(2))}}
    return v


if not TYPE_CHECKING:
    PortDist = distribution("count", _port_shorthand)

MAX_SESSION_COUNT = 2**40  # instances of one session entry
MAX_MESSAGE_BYTES = 2**40  # bytes of one request or response
MAX_ROUNDS = 2**20  # the engine's bound (sess.h SESS_MAX_ROUNDS)
MAX_PROFILE_STEPS = 1440


def _check_bounds(d: Distribution, lo: int, hi: int, what: str) -> None:
    low, high = d.bounds
    if low < lo or high > hi:
        raise ValueError(f"{what} must lie in {lo}..{hi} (this distribution gives {low}..{high})")


class SessionAddress(_Model):
    """A session's client or server: an address, a block whose host is drawn per instance
    (`random`, `increment`), or a block with `hosts`, the host offset's distribution."""

    network: str = Field(description="An address (198.18.0.1) or a block (198.18.0.0/16).")
    mode: Mode = Field("random", description="For a block without `hosts`: random or increment.")
    hosts: CountDist | None = Field(
        None,
        description="The host offset inside the block, drawn per instance (top talkers: "
        "{empirical: {values: [5, 9], weights: [9, 1]}}).",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return {"network": v} if isinstance(v, str) else v

    @field_validator("network")
    @classmethod
    def _valid(cls, v: str) -> str:
        try:
            _interface(v.strip())
        except ValueError:
            raise ValueError("not an IPv4 or IPv6 address or CIDR block") from None
        return v.strip()

    @model_validator(mode="after")
    def _inside(self) -> SessionAddress:
        if self.hosts is not None:
            net = self.interface.network
            if net.num_addresses == 1:
                raise ValueError("`hosts` needs a block (198.18.0.0/16) to draw the host from")
            if "mode" in self.model_fields_set:
                raise ValueError("give `hosts` or `mode`, not both")
            _check_bounds(self.hosts, 0, min(net.num_addresses, 2**63) - 1, "host offsets")
        return self

    @property
    def interface(self) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
        return _interface(self.network)

    @property
    def version(self) -> int:
        return self.interface.version


class ProtocolMix(_Model):
    """`tcp`, `udp`, or weighted `{choices: {tcp: 80, udp: 20}}`."""

    choices: dict[Literal["tcp", "udp"], Annotated[float, Field(gt=0, le=1e12)]] = Field(
        min_length=1
    )
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        if isinstance(v, str):
            if v not in ("tcp", "udp"):
                raise ValueError("expected tcp, udp or {choices: {tcp: 80, udp: 20}}")
            return {"choices": {v: 1}}
        return v

    def shares(self) -> list[tuple[str, float]]:
        total = sum(self.choices.values())
        return [(p, w / total) for p, w in self.choices.items()]


class CloseMix(_Model):
    """How TCP instances end: `fin`, `rst`, `none` (left open, as a connection a capture ends
    in), or weighted `{choices: {fin: 60, rst: 10, none: 30}}`."""

    choices: dict[Literal["fin", "rst", "none"], Annotated[float, Field(gt=0, le=1e12)]] = Field(
        min_length=1
    )
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        if isinstance(v, str):
            if v not in ("fin", "rst", "none"):
                raise ValueError("expected fin, rst, none or {choices: {fin: 60, none: 40}}")
            return {"choices": {v: 1}}
        return v

    def shares(self) -> list[tuple[str, float]]:
        total = sum(self.choices.values())
        return [(c, w / total) for c, w in self.choices.items()]


class RateStep(_Model):
    length: Duration = Field(alias="for", description="How long this step lasts.")
    rate: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = Field(
        description="Multiplies the arrival rate (1: as `arrival` says)."
    )

    @field_validator("length")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("must be > 0")
        return v


class Diurnal(_Model):
    """A day's shape: the rate multiplier goes as a cosine from `low` (at peak + period/2) to 1
    (at `peak`), held constant in each of `steps` equal steps (its value at the step's middle)."""

    period: Duration = Field(86_400_000_000_000, description="The length of one cycle.")
    low: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = Field(
        description="The lowest rate multiplier (0..1)."
    )
    peak: Duration = Field(description="When the rate is highest, from the start of the cycle.")
    steps: int = Field(24, ge=1, le=MAX_PROFILE_STEPS)

    @model_validator(mode="after")
    def _consistent(self) -> Diurnal:
        if self.period < self.steps:
            raise ValueError(f"period must be at least {self.steps} ns (one per step)")
        if self.peak >= self.period:
            raise ValueError("peak must lie inside the period")
        return self


class Profile(_Model):
    """The arrival rate over time: `steps` or `diurnal`."""

    steps: list[RateStep] | None = Field(None, min_length=1, max_length=MAX_PROFILE_STEPS)
    diurnal: Diurnal | None = None
    split: Literal["step", "even"] = Field(
        "step",
        description="How a protocol (or TCP close) choice meets the steps: `step` splits each "
        "step's instances by the shares; `even` splits the entry's instances by the shares "
        "and spreads each choice evenly over the steps (exact shares also when steps are "
        "small; what `testbed learn` writes).",
    )

    @model_validator(mode="after")
    def _one(self) -> Profile:
        if (self.steps is None) == (self.diurnal is None):
            raise ValueError("give `steps` or `diurnal`")
        if all(r == 0 for _, r in self.rate_steps()):
            raise ValueError("every step has rate 0: nothing would start")
        return self

    def rate_steps(self) -> list[tuple[int, float]]:
        """(length in ns, rate multiplier) of every step, in order."""
        if self.steps is not None:
            return [(s.length, s.rate) for s in self.steps]
        d = self.diurnal
        assert d is not None
        size = d.period // d.steps
        out = []
        for k in range(d.steps):
            length = size if k < d.steps - 1 else d.period - size * (d.steps - 1)
            mid = k * size + length / 2
            cos = math.cos(2 * math.pi * (mid - d.peak) / d.period)
            out.append((length, d.low + (1 - d.low) * (1 + cos) / 2))
        return out


@dataclass(frozen=True)
class SessionPart:
    """One engine `session` line of a session entry: one protocol (and TCP close) in one
    profile step."""

    protocol: str
    start: int
    count: int
    arrival: Distribution
    close: str = "fin"


def _spread(totals: list[int], step_counts: list[int]) -> list[list[int]]:
    """Per step, the instances of each choice (a protocol, a TCP close) whose instances are
    TOTALS, over steps of STEP_COUNTS instances (profile `split: even`): instance j of a choice
    of n takes the place floor((j + 1/2) x N / n) among the N instances in step order, so each
    choice is spread evenly over the steps and keeps its exact count (a split of each step by
    the shares gives every step of one instance to the largest share)."""
    n_all = sum(step_counts)
    out = [[0] * len(totals) for _ in step_counts]
    for k, n in enumerate(totals):
        before = end = 0  # instances of choice k at places below the step's end E:
        for i, c in enumerate(step_counts):  # those j with (2j + 1) N < 2 n E
            end += c
            upto = min(n, max(0, (2 * n * end - 1 - n_all) // (2 * n_all) + 1))
            out[i][k] = upto - before
            before = upto
    return out


def _split(total: int, shares: list[float]) -> list[int]:
    """`total` split by `shares` (summing to 1) into integers that sum to it (largest
    remainder, ties to the first)."""
    raw = [total * s for s in shares]
    counts = [int(x) for x in raw]
    rest = total - sum(counts)
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - counts[i]), i))
    for i in order[:rest]:
        counts[i] += 1
    return counts


class Session(_Model):
    """Two-way sessions: `count` instances of a client talking to a server (docs/scenario.md,
    "Two-way sessions")."""

    name: str | None = None
    protocol: ProtocolMix = Field(description="tcp, udp or {choices: {tcp: 80, udp: 20}}.")
    client: SessionAddress
    server: SessionAddress
    client_port: PortDist = Field(
        default_factory=lambda: _port_dist("random"),
        description="A port, a range, `random` (49152-65535), or a distribution.",
    )
    server_port: PortDist = Field(description="A port, a range, or {choices: {443: 70, 80: 30}}.")
    start: Duration = Field(0, description="Arrival of the first instance.")
    count: int | None = Field(None, ge=1, le=MAX_SESSION_COUNT, description="Instances.")
    duration: Duration | None = Field(
        None, description="Instead of count: count = duration / mean arrival."
    )
    arrival: TimeDist = Field(
        description="Time between two instance starts (a bare number is ns): 1ms or "
        "{exponential: {mean: 1ms}}."
    )
    profile: Profile | None = Field(None, description="The arrival rate over time.")
    rtt: Duration = Field(20_000_000, description="Round-trip time seen in the middle.")
    gap: Duration = Field(12_000, description="Spacing of one side's packets in a flight.")
    mss: int = Field(1460, ge=1, le=65535, description="Largest payload of one segment.")
    window: int = Field(10, ge=1, le=65535, description="Segments per flight (TCP).")
    rounds: CountDist = Field(
        default_factory=lambda: _count_dist(1),
        description="Request/response exchanges per instance (a drawn 0 counts as 1).",
    )
    request_bytes: BytesDist = Field(description="Bytes of the client's request per round.")
    response_bytes: BytesDist = Field(description="Bytes of the server's response per round.")
    close: CloseMix = Field(
        default_factory=lambda: CloseMix.model_validate("fin"),
        description="TCP teardown: fin, rst, none (left open) or {choices: {fin: 60, none: 40}}.",
    )
    open: Literal["syn", "none"] = Field(
        "syn",
        description="TCP: `syn`, a handshake first; `none`, no handshake: the instance starts "
        "with its first data segment (a connection opened before a capture began; a capture "
        "of selected segments).",
    )
    think: PauseDist = Field(
        default_factory=lambda: _pause_dist(0),
        description="Pause before every later round's first packet (a user, a keep-alive "
        "connection reused): a duration (2s) or a distribution of times, played as at most 64 "
        "values; 0: the round starts as the rtt and gap rule says.",
    )
    linger: PauseDist = Field(
        default_factory=lambda: _pause_dist(0),
        description="TCP: pause before the close's first packet (a connection kept open), drawn "
        "per instance: a duration or a distribution (at most 64 values); 0: the rtt and gap rule.",
    )

    @field_validator("client_port", "server_port")
    @classmethod
    def _port(cls, v: Distribution, info: ValidationInfo) -> Distribution:
        _check_bounds(v, 0, 65535, str(info.field_name))
        return v

    @field_validator("think", "linger")
    @classmethod
    def _pause(cls, v: Distribution, info: ValidationInfo) -> Distribution:
        _check_bounds(v, 0, MAX_TIME_NS - 1, str(info.field_name))
        return v

    @field_validator("rounds")
    @classmethod
    def _rounds(cls, v: Distribution) -> Distribution:
        _check_bounds(v, 0, MAX_ROUNDS, "rounds")
        return v

    @field_validator("request_bytes", "response_bytes")
    @classmethod
    def _message(cls, v: Distribution, info: ValidationInfo) -> Distribution:
        _check_bounds(v, 0, MAX_MESSAGE_BYTES, str(info.field_name))
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Session:
        if self.client.version != self.server.version:
            raise ValueError(
                f"client is IPv{self.client.version} but server is IPv{self.server.version}; "
                f"use one family"
            )
        if self.rtt < 2:
            raise ValueError("rtt must be at least 2ns")
        if self.gap < 1:
            raise ValueError("gap must be at least 1ns")

        limit = MAX_FRAME - self.header_bytes
        if self.mss > limit:
            raise ValueError(
                f"mss {self.mss} makes frames longer than {MAX_FRAME} bytes; at most {limit}"
            )
        if self.profile is not None:
            if self.duration is not None:
                raise ValueError("a profile's steps give the duration: remove `duration`")
        elif (self.count is None) == (self.duration is None):
            raise ValueError("give exactly one of count (instances) or duration")
        mean = self.arrival.mean()
        if self.count is None and mean <= 0:
            raise ValueError("the mean arrival is 0: give `count` instead of a duration")
        total = self.instances
        if total < 1:
            raise ValueError(
                f"the mean arrival ({mean:.6g} ns) is longer than the time given: no instance "
                f"would start; give `count` or a shorter arrival"
            )
        if total > MAX_SESSION_COUNT:
            raise ValueError(f"{total:,} instances: at most {MAX_SESSION_COUNT:,}")
        parts = self.parts()
        if not parts:  # pragma: no cover - total >= 1 gives a part
            raise ValueError("no instance would start")
        if self.horizon_ns >= MAX_TIME_NS:
            raise ValueError(
                f"the last instance would start around {self.horizon_ns / 1e9:.6g} s; pcap time "
                f"stamps end at 2^32 s: lower count or the arrival"
            )
        return self

    @property
    def ip_version(self) -> int:
        return self.client.version

    @property
    def header_bytes(self) -> int:
        """Ethernet, IP and the larger L4 header of the session's protocols."""
        l4 = 20 if "tcp" in self.protocol.choices else 8
        return 14 + (20 if self.ip_version == 4 else 40) + l4

    @property
    def instances(self) -> int:
        """Instances of all the session's engine lines together (exact)."""
        if self.count is not None:
            return self.count
        mean = self.arrival.mean()
        if self.profile is not None:
            span = sum(length * rate for length, rate in self.profile.rate_steps())
        else:
            assert self.duration is not None
            span = self.duration
        return int(span / mean) if mean > 0 else 0

    def parts(self) -> list[SessionPart]:
        """The engine lines (computed once; see _parts)."""
        return list(self._parts)

    @functools.cached_property
    def _parts(self) -> tuple[SessionPart, ...]:
        """The engine lines: one per protocol (TCP: per close) without a profile, or per profile
        step and protocol, with their instance counts (summing to `instances`) and arrivals. A
        protocol (or TCP close) of share s keeps the arrival distribution stretched by 1/s (exact thinning for an
        exponential arrival, the same mean rate for the others); a profile step of length L with
        n instances stretches it so that its mean is L / n."""
        protocols: list[tuple[str, str, float]] = []  # (protocol, TCP close, share)
        for proto, share in self.protocol.shares():
            if proto == "tcp":
                protocols += [(proto, c, share * cs) for c, cs in self.close.shares()]
            else:  # UDP ignores the close; its line carries the first one given
                protocols.append((proto, next(iter(self.close.choices)), share))
        total = self.instances
        mean = self.arrival.mean()
        out: list[SessionPart] = []
        if self.profile is None:
            counts = _split(total, [s for _, _, s in protocols])
            for (proto, close, share), n in zip(protocols, counts):
                if n:
                    arrival = self.arrival if share == 1 else self.arrival.scaled(1 / share)
                    out.append(SessionPart(proto, self.start, n, arrival, close))
            return tuple(out)
        steps = self.profile.rate_steps()
        weight = sum(length * rate for length, rate in steps)
        step_counts = _split(total, [length * rate / weight for length, rate in steps])
        shares = [s for _, _, s in protocols]
        if self.profile.split == "even":
            per_step = _spread(_split(total, shares), step_counts)
        else:
            per_step = [_split(n_step, shares) for n_step in step_counts]
        begin = self.start
        for (length, _), counts in zip(steps, per_step):
            for (proto, close, _), n in zip(protocols, counts):
                if not n:
                    continue
                if mean > 0:
                    arrival = self.arrival.scaled(length / (n * mean))
                else:
                    arrival = self.arrival
                out.append(SessionPart(proto, begin, n, arrival, close))
            begin += length
        return tuple(out)

    @property
    def horizon_ns(self) -> int:
        """About when the last instance ends: its mean start plus a generous instance span (for
        deadlines and progress; the exact times come from the engine)."""
        last = max(p.start + p.count * p.arrival.mean() for p in self.parts())
        return int(last) + self.instance_span_ns()

    def instance_span_ns(self) -> int:
        """An estimate of how long an instance lasts, from the largest rounds and messages
        the distributions allow: per message, its flights each take about their segments and
        ACKs spaced by `gap` plus two half round trips; each round its `think`, the close its
        `linger`."""
        h = self.rtt // 2
        rounds = max(1, self.rounds.bounds[1])

        def message(size: int) -> int:
            segments = -(-size // self.mss)
            flights = -(-segments // self.window)
            return flights * (2 * h + (self.window + 1) * self.gap) if size else h

        per_round = message(self.request_bytes.bounds[1]) + message(self.response_bytes.bounds[1])
        per_round += self.think.bounds[1]
        linger = self.linger.bounds[1]
        return 4 * h + 2 * self.gap + linger + min(rounds * per_round, MAX_TIME_NS)


def _port_dist(v: Any) -> Distribution:
    return as_distribution(_port_shorthand(v), "count")


def _pause_dist(v: Any) -> Distribution:
    return as_distribution(_pause_shorthand(v), "time")


def _count_dist(v: Any) -> Distribution:
    return as_distribution(v, "count")


class Ethernet(_Model):
    src: str = Field("02:00:00:00:00:01", description="Source MAC of every frame.")
    dst: str = Field("02:00:00:00:00:02", description="Destination MAC of every frame.")

    @field_validator("src", "dst")
    @classmethod
    def _mac(cls, v: str) -> str:
        if not _MAC.match(v):
            raise ValueError("expected a MAC address like 02:00:00:00:00:01")
        return v.lower()


class ScenarioSection(_Model):
    """A top-level section of the scenario that a generator plugin contributes
    (`GeneratorPlugin.section`: its key and this model, e.g. the engine's `flowengine:`);
    ensure_models adds it to `Scenario`, optional, its defaults when the YAML has none."""

    def keeps_due_times(self) -> bool:
        """False when these options make the packets leave at other times than their flows' due
        times (the engine's stochastic planner): a run's expected first and last times are then
        unknown (ntgcore.expected)."""
        return True


def scenario_sections(scenario: Scenario) -> list[ScenarioSection]:
    """The generators' sections of a scenario (`GeneratorPlugin.section`)."""
    return [v for v in scenario.__dict__.values() if isinstance(v, ScenarioSection)]


# --------------------------------------------------------------------------------------------
# Live runs: the `testbed:` section

_PLACE = re.compile(r"^[a-z0-9][a-z0-9-]{0,15}:[A-Za-z0-9_.-]{1,15}$")  # topology role : iface


def _place(v: str) -> str:
    if not isinstance(v, str) or not _PLACE.match(v):
        raise ValueError("expected NAMESPACE-ROLE:INTERFACE of the topology, like gen:gen0")
    return v


Place = Annotated[str, BeforeValidator(_place)]


class GeneratorSpec(_Model):
    """One generator of a live run, placed on an interface of the topology: the fields every
    generator has. Each generator plugin subclasses it with `name: Literal["<its name>"]` and its
    own options; `testbed.generators` is the union of the registered models, told apart by `name`."""

    name: str = Field(
        description="A registered generator: flowengine, tcpreplay, scapy, ostinato, ..."
    )
    label: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        max_length=32,
        description="Name in reports and folder names (default: the generator's name).",
    )
    at: Place = Field("gen:gen0", description="Where it sends: `ROLE:IFACE` of the topology.")
    pace: Literal["realtime", "topspeed"] = Field(
        "realtime",
        description="`realtime`: the scenario's timestamps; `topspeed`: as fast as it can "
        "(seed 001), for `testbed.duration`.",
    )
    start: Duration = Field(
        0,
        description="Live: when this generator is started, after the "
        "step's generators start (the attack replay uses `attacks.start`).",
    )

    @property
    def role(self) -> str:
        return self.at.split(":", 1)[0]

    @property
    def iface(self) -> str:
        return self.at.split(":", 1)[1]

    @property
    def title(self) -> str:
        return self.label or self.name

    def plays_attacks(self) -> bool:
        """True when this generator, so configured, plays the scenario's `attacks:` TCP sessions
        over a TCP stack of its own: a live run then hands it their dialogues
        (`Generator.give_attack_sessions`) instead of replaying the attack pcap."""
        return False

    def sends_sessions(self) -> bool:
        """True when this generator, so configured, sends the scenario's two-way `sessions:`:
        its plugin's `sessions` capability, unless a mode of its own decides (trex: mode astf)."""
        return bool(GENERATORS.get(self.name).capabilities.sessions)

    def offline_expected(self, scenario: Scenario) -> dict[str, Any] | None:
        """What this generator, so configured, writes offline for `scenario` when that is not
        the flows as ntgcore.expected.expected counts them: that function's keys (packets, bytes,
        flows, first_ns, last_ns) and `what`, one line for `testbed validate`; the run's
        manifest `expected` then. A GeneratorError: what it refuses. None: the scenario's counts."""
        return None

    def fits(self, scenario: Scenario) -> str | None:
        """Why this generator, so configured, cannot run `scenario` on this machine (the
        engine: more flows alive at once than its memory holds), or None if it can. Checked
        before a run that uses it starts anything (exit 2), a warning from `testbed validate`."""
        return None

    def state_bytes(self, scenario: Scenario) -> int | None:
        """About how much memory this generator holds for `scenario` (`testbed validate` says
        it), or None when it does not say."""
        return None


def generator_spec(data: dict[str, Any] | GeneratorSpec) -> GeneratorSpec:
    """`data` as the options model of the generator it names (a registered plugin's)."""
    if isinstance(data, GeneratorSpec):
        return data
    name = data.get("name") if isinstance(data, dict) else None
    options: type[GeneratorSpec] = GENERATORS.get(name).options
    return options.model_validate(data)


def _registered_generator(v: Any) -> str:
    if not isinstance(v, str) or v not in GENERATORS:
        raise ValueError(f"unknown generator {v!r}; available: {', '.join(GENERATORS.names())}")
    return v


GeneratorName = Annotated[
    str,
    AfterValidator(_registered_generator),
    WithJsonSchema({"type": "string", "description": "A registered generator."}),
]


class CaptureSpec(_Model):
    """tcpdump on one interface: what was seen on the wire."""

    at: Place = Field("tap:tap0", description="Interface to capture on (`ROLE:IFACE`).")
    snaplen: int = Field(128, ge=64, le=65535, description="Bytes kept of every frame.")
    buffer_kib: int = Field(
        65536, ge=1, le=4_194_304, description="Kernel buffer, tcpdump -B (KiB)."
    )
    also_at: list[Place] = Field(
        [],
        max_length=8,
        description="More interfaces captured the same way, each into "
        "capture-ROLE-IFACE.pcap (TRex ASTF: `gen:gen0`, the server side's segments); only "
        "`at`'s capture.pcap counts in the rates and checks.",
    )


class DutSpec(_Model):
    """The device under test, listening on one interface: the fields every DUT kind has. Each DUT
    kind plugin (ntgcore.parts.DutKind) subclasses it with `kind: Literal["<its kind>"]` and its
    own options; `testbed.dut` is the union of the registered models, told apart by `kind`
    (omitted: `none`)."""

    kind: str = Field("none", description="A registered DUT kind: none, tcpdump, suricata, ...")
    at: Place = Field("dut:dut0", description="Interface it reads (`ROLE:IFACE`).")
    name: str | None = Field(
        None,
        pattern=r"^[a-z][a-z0-9_-]{0,31}$",
        description="With `testbed.duts`: its name in step folders, tables and figures "
        "(default: its kind).",
    )

    @property
    def label(self) -> str:
        return self.name or self.kind


class CommonDutSpec(DutSpec):
    """The options of the kinds none, tcpdump and suricata (each accepts the others', as always)."""

    buffer_kib: int = Field(
        2048, ge=1, le=4_194_304, description="tcpdump: kernel buffer (-B, KiB)."
    )
    snaplen: int = Field(256, ge=64, le=65535, description="tcpdump: snap length.")
    write: bool = Field(False, description="tcpdump: keep what it received as dut.pcap.")
    rules: list[str] = Field(
        [], max_length=MAX_ITEMS, description="suricata: rule files (relative to the scenario)."
    )


class NoDutSpec(CommonDutSpec):
    """No device under test (`dut:` omitted)."""

    kind: Literal["none"] = Field("none", description="none: no device under test.")


_UNKNOWN = "?"  # the union tag of a `kind`/`name` that names no registered plugin


def _one_of(names: list[str]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def _registered_dut_kind(v: Any) -> Any:
    if v not in DUT_KINDS:  # worded as the closed set of kinds was (a Literal)
        raise ValueError(f"Input should be {_one_of(DUT_KINDS.declared())}")
    return v


# What `testbed.dut` is read as when its `kind` is not registered: the error names `kind` (and
# the model is called DutSpec, as the errors of a `dut:` that is no mapping have always said).
_UnknownDutSpec = create_model(
    "DutSpec",
    __base__=CommonDutSpec,
    kind=(Annotated[Any, AfterValidator(_registered_dut_kind)], "none"),
)


def _dut_tag(v: Any) -> str:
    kind = v.get("kind", "none") if isinstance(v, dict) else getattr(v, "kind", _UNKNOWN)
    return kind if isinstance(kind, str) and kind in DUT_KINDS else _UNKNOWN


def meter_kinds() -> list[str]:
    """The registered DUT kinds that are flow meters (testbed.meters: their DutKind carries the
    `meter` it runs), by name: what `testbed.failover.meter.kind` may be."""
    return [k.name for k in DUT_KINDS if getattr(k, "meter", None) is not None]


def _registered_meter_kind(v: Any) -> Any:
    meters = meter_kinds()
    if v not in meters:
        raise ValueError(
            f"Input should be a flow meter: {_one_of(meters)}"
            if meters
            else "no flow meter is registered: install the project (pip install .)"
        )
    return v


class _UnknownMeterSpec(DutSpec):
    """What `testbed.failover.meter` is read as when its `kind` is no flow meter: only the
    `kind` error is given."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    kind: Annotated[Any, AfterValidator(_registered_meter_kind)]


def _meter_tag(v: Any) -> str:
    kind = v.get("kind") if isinstance(v, dict) else getattr(v, "kind", _UNKNOWN)
    return kind if isinstance(kind, str) and kind in meter_kinds() else _UNKNOWN


class MonitorSpec(_Model):
    hz: float = Field(1.0, gt=0, le=10, description="Samples per second (1 to 10).")


class SweepSpec(_Model):
    """Seed 002's loss method: a packet-rate sweep and a flow-rate (hosts) sweep."""

    packet_rates: list[Literal["max"] | Rate] = Field(
        [],
        max_length=MAX_ITEMS,
        description="Packet rates of the rate sweep, one UDP flow each: [1000, 5000, max]; "
        "`max`: the generators at top speed.",
    )
    hosts: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        [], max_length=MAX_ITEMS, description="Host counts of the flow-rate sweep: [1, 10, 25, 50]."
    )
    sessions_per_host: int = Field(
        50, ge=1, le=100_000, description="UDP sessions per host, one after another."
    )
    host_rate: Rate = Field(
        Decimal(2000), description="Packets per second of one host (seed 002: 0.5 ms IAT)."
    )
    frame_size: int = Field(
        60, ge=60, le=9000, description="Frame bytes without the FCS (60 = 64 on the wire)."
    )
    step: Duration = Field(2_000_000_000, description="How long every step sends.")

    @model_validator(mode="after")
    def _something(self) -> SweepSpec:
        if not self.packet_rates and not self.hosts:
            raise ValueError("give `packet_rates`, `hosts` or both")
        for name in ("packet_rates", "hosts"):
            values = [str(v) for v in getattr(self, name)]
            dup = sorted({v for v in values if values.count(v) > 1})
            if dup:  # two steps would share one folder
                raise ValueError(f"`{name}` lists {dup[0]} twice; every step needs its own value")
        return self


class LoadStepsSpec(_Model):
    """Seed 001's figures 2-7: each generator at fixed offered loads, CPU and RAM measured."""

    step_kbps: int = Field(500, ge=1, description="Load step in KB/s (seed 001: 500).")
    count: int = Field(3, ge=1, le=100, description="Number of steps: step, 2*step, ...")
    duration: Duration = Field(2_000_000_000, description="How long each load step lasts.")


FAULT_KINDS = ("kill", "stop", "link-down", "netem", "power-off")
_PROCESS_LABEL = re.compile(r"^[A-Za-z0-9_.:*?-]{1,64}$")


class FaultSpec(_Model):
    """A fault the step injects on a schedule (testbed/parts/fault.py, docs/failover.md): the time
    counts from the start of the step's generators, like a generator's `start`."""

    kind: Literal["kill", "stop", "link-down", "netem", "power-off"] = Field(
        description="`kill`: SIGKILL a process of the run; `stop`: SIGSTOP it (SIGCONT when undone); "
        "`link-down`: `ip link set down` on an interface of the run (up when undone); `netem`: loss "
        "and/or delay on an interface (removed when undone); `power-off`: a VM's power (VM back end)."
    )
    process: str | None = Field(
        None,
        description="kill, stop: the label of a process of the run, "
        "as the step's parts name them (`vrrp:master`); * and ? match.",
    )
    at: Place | None = Field(
        None, description="link-down, netem, power-off: `ROLE:IFACE` of the topology."
    )
    start: Duration = Field(description="When, after the step's generators start: 2s, 500ms.")
    duration: Duration | None = Field(
        None,
        description="How long until it is undone (stop, link-down, "
        "netem, power-off); default: at the end of the step. Not for kill.",
    )
    repeat: Repeat | None = Field(
        None, description="`{count, period}`: the fault again every period."
    )
    loss: float | None = Field(None, ge=0, le=100, description="netem: packets lost, in percent.")
    delay: Duration | None = Field(None, description="netem: added delay.")
    jitter: Duration | None = Field(None, description="netem: delay variation (needs delay).")

    @field_validator("process")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        if v is not None and not _PROCESS_LABEL.match(v):
            raise ValueError("a process label is 1-64 of A-Z a-z 0-9 _ . : - (and * ? to match)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> FaultSpec:
        k = self.kind
        if k in ("kill", "stop") and (self.process is None or self.at is not None):
            raise ValueError(
                f"`{k}` needs `process` (the label of a process of the run) and no `at`"
            )
        if k in ("link-down", "netem", "power-off") and (
            self.at is None or self.process is not None
        ):
            raise ValueError(f"`{k}` needs `at` (ROLE:IFACE of the topology) and no `process`")
        if k == "kill" and self.duration is not None:
            raise ValueError("a killed process cannot be brought back: remove `duration`")
        netem = (self.loss, self.delay, self.jitter)
        if k == "netem" and self.loss is None and self.delay is None:
            raise ValueError("`netem` needs `loss` (percent) or `delay`, or both")
        if k != "netem" and any(x is not None for x in netem):
            raise ValueError("`loss`, `delay` and `jitter` belong to kind `netem`")
        if self.jitter is not None and self.delay is None:
            raise ValueError("`jitter` needs `delay`")
        if self.repeat is not None and self.repeat.count > 1:
            if self.duration is None and k != "kill":
                raise ValueError(
                    "a repeated fault needs `duration`: each one is undone before the next"
                )
            if self.duration is not None and self.duration >= self.repeat.period:
                raise ValueError(
                    f"`duration` ({self.duration / 1e9:g} s) must be shorter than "
                    f"`repeat.period` ({self.repeat.period / 1e9:g} s)"
                )
        return self

    def times_ns(self) -> list[int]:
        """When each repetition is applied, from the step's start."""
        reps = self.repeat.count if self.repeat else 1
        period = self.repeat.period if self.repeat else 0
        return [self.start + i * period for i in range(reps)]

    @property
    def target(self) -> str:
        return self.process or self.at or ""


def _one_or_many_schema(item: dict[str, Any]) -> WithJsonSchema:
    """The JSON schema of a list field that also takes one value (`advert_int: 1s`)."""
    return WithJsonSchema({"anyOf": [item, {"type": "array", "items": item, "minItems": 1}]})


FaultKind = Literal["kill", "stop", "link-down", "power-off"]


class FailoverSpec(_Model):
    """Method `failover` (seed 002's CARP test, with VRRP): two DUTs running keepalived share a
    virtual address on a bridged segment; a probe stream goes to it while a fault hits the master."""

    master: Place = Field(
        "master:m0", description="The master DUT's interface on the shared segment."
    )
    backup: Place = Field(
        "backup:b0", description="The backup DUT's interface on the shared segment."
    )
    lan: str = Field(
        "lan",
        pattern=r"^[a-z0-9][a-z0-9-]{0,15}$",
        description="Role of the namespace whose interfaces are bridged into the segment.",
    )
    vip: str = Field(
        "198.18.1.1/24", description="The virtual address with prefix (198.18.0.0/15)."
    )
    vrid: int = Field(51, ge=1, le=255, description="VRRP virtual router id.")
    version: Literal[2, 3] | None = Field(
        None,
        description="VRRP version; default 2, or 3 when an "
        "advertisement interval is below 1 s or not whole seconds.",
    )
    advert_int: Annotated[
        list[Duration],
        _one_or_many_schema(
            {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}]}
        ),
    ] = Field(
        [1_000_000_000],
        min_length=1,
        max_length=8,
        description="Advertisement interval(s) (keepalived's default "
        "1s); several: each one's trials in turn.",
    )
    master_priority: int = Field(200, ge=1, le=254, description="VRRP priority of the master.")
    backup_priority: int = Field(100, ge=1, le=254, description="VRRP priority of the backup.")
    fault: Annotated[
        list[FaultKind],
        _one_or_many_schema({"type": "string", "enum": ["kill", "stop", "link-down", "power-off"]}),
    ] = Field(
        ["link-down"],
        min_length=1,
        max_length=4,
        description="`link-down`: the master's interface on the segment down (the device gone, as "
        "when powered off); `kill`: SIGKILL the master's keepalived; `stop`: SIGSTOP it; "
        "`power-off`: the master's VM switched off (VM back end, the seed's own fault). Several: "
        "each one's trials in turn.",
    )
    fault_at: Duration = Field(
        2_000_000_000, description="When the fault hits, after the probes start."
    )
    fault_phase: Literal["random", "fixed"] = Field(
        "random",
        description="`random`: each trial adds a random part of one advertisement interval "
        "to `fault_at` (drawn from the scenario's seed), so the trials meet the VRRP cycle at "
        "different points, as a power cut does; `fixed`: exactly `fault_at`.",
    )
    trials: int = Field(3, ge=1, le=100, description="Repetitions per advertisement interval.")
    udp_port: int = Field(7777, ge=1, le=65535, description="Port the DUTs' UDP echo listens on.")
    ready_timeout: Duration = Field(
        15_000_000_000,
        description="How long keepalived may take to "
        "reach MASTER (master) and BACKUP (backup) before the step fails.",
    )
    # its type is the union of the registered flow-meter DUT kinds' models (ensure_models)
    meter: Any = Field(
        None,
        description="A flow meter pair: the same meter (`kind`: a flow-meter DUT kind, with its "
        "options) on the master's and on the backup's segment interface, each exporting to a "
        "collector in its own namespace; the analysis counts the records lost across the "
        "handover (docs/failover.md).",
    )
    meter_dies_with_master: bool = Field(
        False,
        description="The master's meter is killed (SIGKILL) right after the fault, so the flows "
        "it held unexported are lost, as on a power cut (its collector stands for a remote one "
        "and stays).",
    )

    @field_validator("advert_int", "fault", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return v if isinstance(v, list) else [v]

    @field_validator("vip")
    @classmethod
    def _vip(cls, v: str) -> str:
        try:
            iface = ipaddress.ip_interface(v.strip())
        except ValueError:
            raise ValueError("expected an IPv4 address with prefix, like 198.18.1.1/24") from None
        if iface.version != 4 or "/" not in v or _outside(iface.network):
            raise ValueError("the virtual address is IPv4 with a prefix inside 198.18.0.0/15")
        return str(iface)

    @model_validator(mode="after")
    def _consistent(self) -> FailoverSpec:
        for a in self.advert_int:
            if a < 10_000_000 or a > 40_950_000_000 or a % 10_000_000:
                raise ValueError(
                    f"advert_int {a / 1e9:g} s: VRRP counts 10 ms steps from 10 ms to 40.95 s"
                )
            if self.version == 2 and a % 1_000_000_000:
                raise ValueError(
                    f"advert_int {a / 1e9:g} s: VRRPv2 counts whole seconds; use `version: 3`"
                )
        for name in ("advert_int", "fault"):
            if len(set(getattr(self, name))) != len(getattr(self, name)):
                raise ValueError(f"`{name}` lists a value twice")
        if self.master_priority <= self.backup_priority:
            raise ValueError("`master_priority` must be higher than `backup_priority`")
        if self.master.split(":")[0] == self.backup.split(":")[0]:
            raise ValueError("`master` and `backup` must be different namespaces")
        if self.meter_dies_with_master and self.meter is None:
            raise ValueError("`meter_dies_with_master` needs a `meter` (the pair's flow meter)")
        if self.meter is not None and "at" in self.meter.model_fields_set:
            raise ValueError(
                "`meter.at`: the meter pair runs at `master` and `backup`; leave `at` out"
            )
        return self

    @property
    def vrrp_version(self) -> int:
        if self.version is not None:
            return self.version
        return 2 if all(a % 1_000_000_000 == 0 for a in self.advert_int) else 3


class HostSpec(_Model):
    """One generator host of a run spread over several (docs/multihost.md)."""

    at: Place = Field(
        description="Where this host's generator sends: `ROLE:IFACE` of the topology."
    )
    capture: Place | None = Field(
        None,
        description="Where this host's frames are captured on their "
        "own (the receiver's port facing it): its counts and first packet.",
    )


class HostsSpec(_Model):
    """Several generator hosts started together: the generator of `testbed.generators` (one
    entry, the template) runs on every host, each sending its own share of the flows, split by
    flow hash; all start at one agreed time (docs/multihost.md)."""

    hosts: list[HostSpec] = Field(
        min_length=1,
        max_length=64,
        description="The hosts, in order: host i sends the flows whose key hash modulo N is i.",
    )
    hash: str = Field(
        "murmur3_32",
        pattern=r"^[a-z0-9_]{1,32}$",
        description="The flow-key hash of the split (`testbed hash-study --list`).",
    )
    start_lead: Duration = Field(
        1_000_000_000,
        description="The agreed start: this long after the "
        "step begins preparing the hosts' generators.",
    )

    @model_validator(mode="after")
    def _distinct(self) -> HostsSpec:
        for what, values in (
            ("at", [h.at for h in self.hosts]),
            ("capture", [h.capture for h in self.hosts if h.capture]),
        ):
            dup = sorted({v for v in values if values.count(v) > 1})
            if dup:
                raise ValueError(f"two hosts have the same `{what}` {dup[0]}")
        return self

    def label(self, i: int) -> str:
        """Host i's name in reports and folders: its namespace role, or host<i> when two share one."""
        roles = [h.at.split(":", 1)[0] for h in self.hosts]
        return roles[i] if roles.count(roles[i]) == 1 else f"host{i}"


if TYPE_CHECKING:  # at run time, ensure_models() sets it to the registered generators' union
    AnyGeneratorSpec = GeneratorSpec
    AnyDutSpec = DutSpec  # and this to the registered DUT kinds' union


class TestbedSpec(_Model):
    """Live run: topology, generators, capture point, device under test, monitor, method."""

    topology: str | dict[Any, Any] = Field(
        "default",
        description="A packaged topology name, a YAML file (relative to the scenario) "
        "or the topology itself as a mapping.",
    )
    backend: str = Field(
        "netns",
        pattern=r"^[a-z][a-z0-9_-]{0,31}$",
        description="The endpoint back end that makes the topology's places: `netns` (namespaces "
        "and veths) or `vm` (some roles are qemu VMs; `topology` is then a VM topology, docs/vm.md).",
    )
    method: str = Field(  # ensure_models() makes it a Literal of the registered methods
        "run",
        description="`run`: the generators send the scenario together; `comparison`: "
        "seed 001, each generator in turn; `loss-sweep`: seed 002 against the DUT; `failover`: "
        "seed 002's redundancy test (a VRRP pair, a fault on the master, the outage measured); "
        "`multiply`: seed 003's inline multiplier, one step per T (docs/multiplier.md).",
    )
    duration: Duration | None = Field(None, description="How long topspeed generators send.")
    generators: list[AnyGeneratorSpec] = Field(
        [], max_length=MAX_ITEMS, description="Default: the scenario's `generator`."
    )
    capture: CaptureSpec | None = Field(CaptureSpec(), description="`null` turns the capture off.")
    dut: AnyDutSpec = NoDutSpec()  # ensure_models(): the registered DUT kinds' union
    duts: list[AnyDutSpec] = Field(  # ensure_models(): a list of the same union
        [],
        max_length=16,
        description="Several devices under test in one run, one after another: every step of "
        "the method runs once per DUT, in folder `NAME-STEP` (instead of `dut`).",
    )
    monitor: MonitorSpec = MonitorSpec()
    sweep: SweepSpec | None = None
    load_steps: LoadStepsSpec | None = None
    faults: list[FaultSpec] = Field(
        [],
        max_length=100,
        description="Faults injected in every step on a schedule (docs/failover.md).",
    )
    failover: FailoverSpec | None = Field(
        None, description="Method `failover`: the VRRP pair and the fault."
    )
    inline: InlineMultiplySpec | None = Field(
        None,
        description="Method `multiply`: the inline multiplier, its real sessions and its T values.",
    )
    spread: HostsSpec | None = Field(
        None,
        description="Method `run` over several generator hosts "
        "started together (docs/multihost.md).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> TestbedSpec:
        if self.duts:
            if self.dut.kind != "none":
                raise ValueError("give `dut` or `duts`, not both")
            labels = [d.label for d in self.duts]
            dup = sorted({x for x in labels if labels.count(x) > 1})
            if dup:
                raise ValueError(f"two DUTs named {dup[0]} in `duts`: give them different `name`s")
        for tb in self.each_dut():
            for method in METHODS:  # each method's rules: its sections, what it needs when chosen
                problem = method.check(tb)
                if problem:
                    raise ValueError(problem)
        if any(g.pace == "topspeed" for g in self.generators) and self.duration is None:
            raise ValueError("a `topspeed` generator needs `duration`")
        for g in self.generators:
            if not GENERATORS.get(g.name).capabilities.live:
                raise ValueError(f"generator `{g.name}` cannot send live: choose another")
        titles = [g.title for g in self.generators]
        dup = sorted({t for t in titles if titles.count(t) > 1})
        if dup:
            raise ValueError(f"two generators named {dup[0]}: give them different `label`s")
        return self

    def each_dut(self) -> list[TestbedSpec]:
        """This testbed once per device under test: itself, or with `duts`, a copy per DUT with
        that DUT as its `dut`."""
        if not self.duts:
            return [self]
        return [self.model_copy(update={"dut": d, "duts": []}) for d in self.duts]


class AttackSelect(_Model):
    """Which rules of the `attacks.rules` files become attack sessions; the given keys are ANDed."""

    sids: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, max_length=MAX_ITEMS, description="Only these sids."
    )
    classtypes: list[str] | None = Field(
        None, max_length=MAX_ITEMS, description="Only rules with one of these classtypes."
    )
    msg: str | None = Field(
        None, description="Only rules whose msg matches this regular expression."
    )
    keywords: list[str] | None = Field(
        None,
        max_length=MAX_ITEMS,
        description="Only rules that use every one of these keywords (content, pcre, http.uri, ...).",
    )

    @field_validator("msg")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return v


# The evasion classes `attacks.evasions` takes: idsrules.evasion.CLASSES' names in its order (this
# bottom layer cannot import the rule library; tests/test_attack_evasions.py keeps them equal).
EVASION_CLASSES = (
    "ip4-frag",
    "ip6-frag",
    "ip4-pairs",
    "ip6-pairs",
    "tcp-pairs",
    "tcp-seg",
    "tcp-overlap",
    "insertion",
    "urgent",
    "paws",
    "http-encoding",
    "line-variants",
)


def _evasions_schema(schema: dict[str, Any]) -> None:
    """`attacks.evasions` in the JSON Schema: `all`, or a list of the class names."""
    items = {"enum": ["all", *EVASION_CLASSES]}
    array = {"type": "array", "items": items, "maxItems": schema.pop("maxItems", None)}
    schema.pop("type", None)
    schema.pop("items", None)
    schema["anyOf"] = [{"const": "all"}, array]


class AttacksSpec(_Model):
    """Attack sessions synthesized from IDS rules and mixed into the run (docs/ids-coverage.md)."""

    rules: list[str] = Field(
        max_length=MAX_ITEMS,
        min_length=1,
        description="Rule files, relative to the scenario; "
        "$VARIABLES of the environment are expanded ($NTG_SHARED_DATA).",
    )
    select: AttackSelect = AttackSelect()
    count: int = Field(
        10,
        ge=1,
        le=1_000_000,
        description="Attack sessions: the selected rules in "
        "file order, cycled when there are fewer rules.",
    )
    rate: Decimal = Field(
        Decimal(10), gt=0, le=1_000_000, description="Attack sessions per second."
    )
    start: Duration = Field(
        0,
        description="When the first attack session starts, from the start of "
        "the run (offline: the capture's time; live: after the generators start).",
    )
    ip_version: Literal[4, 6] = Field(
        4,
        description="6: every attack session over IPv6 "
        "(2001:db8::/32); 4: IPv4, IPv6 only for rules that name it.",
    )
    ids: Literal["none", "suricata"] = Field(
        "none",
        description="`suricata`: after an offline run, Suricata reads the mixed capture "
        "and the coverage of the attack sessions is written into the run folder.",
    )
    evasions: list[str] = Field(
        [],
        max_length=len(EVASION_CLASSES) + 1,
        json_schema_extra=_evasions_schema,
        description="Evasion classes (or `all`): every attack session is also sent as each "
        "variant of these classes, a session of its own (docs/ids-coverage.md, Evasion variants).",
    )
    plain: bool = Field(
        True,
        description="With `evasions`: send each attack's plain session too, the control the "
        "variants are compared with.",
    )

    @field_validator("evasions", mode="before")
    @classmethod
    def _evasion_classes(cls, v: Any) -> Any:
        names = [v] if isinstance(v, str) else v
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return v  # the type error says what is wanted
        known = "all or some of " + ", ".join(EVASION_CLASSES)
        if "all" in names:
            return list(EVASION_CLASSES)
        bad = [n for n in names if n not in EVASION_CLASSES]
        if bad:
            close = difflib.get_close_matches(bad[0], EVASION_CLASSES, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"unknown evasion class {bad[0]!r}: {hint}use {known}")
        return [n for n in EVASION_CLASSES if n in names]

    @field_validator("rules")
    @classmethod
    def _files(cls, v: list[str]) -> list[str]:
        for f in v:
            if not isinstance(f, str) or not f.strip():
                raise ValueError("rule files are paths (strings)")
        return v


MULTIPLY_MAX_COPIES = 1024  # the engine's bound (generators/flowengine/src/multiply/mult.h)
MULTIPLY_MAX_RANGES = 16


def _networks(v: list[str]) -> list[str]:
    nets = []
    for text in v:
        try:
            nets.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(
                f"{text!r} is not an IPv4 or IPv6 CIDR range (198.18.0.0/16, 2001:db8:1::/48)"
            ) from None
    for i, a in enumerate(nets):
        for b in nets[i + 1 :]:
            if a.version == b.version and a.overlaps(b):
                raise ValueError(f"{a} and {b} overlap")
    return v


class MultiplySpec(_Model):
    """The traffic multiplier (seed 003, docs/multiplier.md): `testbed multiply RUN` rewrites the
    run's capture into T shadow copies of every packet plus the original."""

    copies: int = Field(
        ge=1,
        le=MULTIPLY_MAX_COPIES,
        description="T: shadow copies of every packet; egress = (T+1) x ingress.",
    )
    ranges: list[str] = Field(
        min_length=1,
        max_length=MULTIPLY_MAX_RANGES,
        description="Shadow address "
        "ranges (CIDR, IPv4 and/or IPv6), disjoint and holding no original address.",
    )
    original: list[str] = Field(
        [],
        max_length=MULTIPLY_MAX_RANGES,
        description="The originals' own "
        "ranges: every original address must lie in them, no shadow range may overlap them.",
    )
    order: Literal["spfo", "interleaved"] = Field(
        "spfo",
        description="spfo: the T copies, then the "
        "original; interleaved: the original's place rotates.",
    )
    ports: Literal["keep", "shift"] = Field(
        "keep",
        description="shift: a flow's ephemeral port "
        "(>= 1024, the higher) moves by a per-copy offset.",
    )
    urls: str | None = Field(
        None,
        description="File of request targets, one a line (relative to the "
        "scenario): copy c's HTTP requests get line (c-1) mod n.",
    )
    mtu: int = Field(
        1500, ge=68, le=65535, description="Largest IP packet a substituted request may become."
    )
    seed: int | None = Field(
        None, ge=0, lt=2**64, description="Seed of the plan; default the scenario's."
    )
    home: list[str] = Field(
        [],
        max_length=MULTIPLY_MAX_RANGES,
        description="The sided plan: original "
        "addresses in these CIDRs (the home side) take their shadows from home_ranges, "
        "the others from ranges; give both or neither.",
    )
    home_ranges: list[str] = Field(
        [],
        max_length=MULTIPLY_MAX_RANGES,
        description="Shadow ranges of the "
        "home side: the shadows of home addresses, as few CIDRs (an IDS's HOME_NET).",
    )

    @field_validator("home", "home_ranges")
    @classmethod
    def _home(cls, v: list[str]) -> list[str]:
        return _networks(v)

    @field_validator("ranges")
    @classmethod
    def _ranges(cls, v: list[str]) -> list[str]:
        return _networks(v)

    @field_validator("original")
    @classmethod
    def _original(cls, v: list[str]) -> list[str]:
        return _networks(v)

    @model_validator(mode="after")
    def _apart(self) -> MultiplySpec:
        if bool(self.home) != bool(self.home_ranges):
            raise ValueError(
                "give home (the home side's original CIDRs) and home_ranges (its shadow ranges) "
                "together, or neither"
            )
        _networks(self.ranges + self.home_ranges)  # every shadow range apart from every other
        shadow = [ipaddress.ip_network(t, strict=False) for t in self.ranges + self.home_ranges]
        for o in (ipaddress.ip_network(t, strict=False) for t in self.original + self.home):
            for r in shadow:
                if r.version == o.version and r.overlaps(o):
                    raise ValueError(f"the shadow range {r} overlaps the original range {o}")
        return self


class InlineMultiplySpec(_Model):
    """Method `multiply` (seed 003, Fig. 6): real HTTP sessions from `client` to a server at
    `server` pass through `flowengine multiply --live` in the multiplier's namespace, which
    forwards them both ways (`at` <-> `out`) and sends T shadow copies to `dut`; one step per T."""

    copies: Annotated[
        list[Annotated[int, Field(ge=1, le=MULTIPLY_MAX_COPIES)]],
        _one_or_many_schema({"type": "integer", "minimum": 1}),
    ] = Field(
        [1, 10, 22],
        min_length=1,
        max_length=16,
        description="T of each step (the seed: 1, 10, 22).",
    )
    ranges: list[str] = Field(
        min_length=1,
        max_length=MULTIPLY_MAX_RANGES,
        description="Shadow address ranges (CIDR), disjoint, holding no original address.",
    )
    original: list[str] = Field(
        [], max_length=MULTIPLY_MAX_RANGES, description="The originals' own ranges."
    )
    both: bool = Field(False, description="Multiply the server->client direction too.")
    order: Literal["spfo", "interleaved"] = Field(
        "spfo", description="spfo: copies first, original last."
    )
    ports: Literal["keep", "shift"] = Field(
        "keep", description="shift: the ephemeral port moves per copy."
    )
    seed: int | None = Field(
        None, ge=0, lt=2**64, description="Seed of the plan; default the scenario's."
    )
    max_flows: int = Field(
        65536,
        ge=1,
        le=2**30,
        description="Flow table bound (refused up front "
        "when the tables would exceed half the free memory).",
    )
    max_addrs: int = Field(
        256,
        ge=1,
        le=2**30,
        description="Address table bound per family; the ranges must hold T x max_addrs addresses.",
    )
    at: Place = Field("mult:m-in", description="The multiplier's ingress (client side).")
    out: Place = Field("mult:m-out", description="The multiplier's egress towards the server.")
    dut: Place = Field("mult:m-dut", description="Where the shadow copies leave, towards the DUT.")
    client: Place = Field("client:cl0", description="The client's interface.")
    server: Place = Field("server:sv0", description="The server's interface.")
    server_address: str = Field(
        "198.18.3.2", description="The server's address (in 198.18.0.0/15)."
    )
    port: int = Field(8080, ge=1, le=65535, description="The HTTP server's port.")
    pages: list[Annotated[int, Field(ge=0, le=100_000_000)]] = Field(
        [512, 4096, 65536, 1_000_000],
        min_length=1,
        max_length=64,
        description="Sizes of the pages served (bytes); the client fetches each in turn.",
    )
    rounds: int = Field(
        5, ge=1, le=100_000, description="How many times the client fetches every page."
    )
    parallel: int = Field(1, ge=1, le=64, description="Clients fetching at the same time.")
    request_pad: list[Annotated[int, Field(ge=0, le=1300)]] = Field(
        [0, 100, 300, 800, 1200],
        max_length=16,
        description="Bytes of query string padding the "
        "requests' URLs, one value per fetch in turn: requests of several frame sizes, for the "
        "latency per size (seed 003 Figs. 14 and 16).",
    )

    @field_validator("ranges", "original")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        return _networks(v)

    @model_validator(mode="after")
    def _apart(self) -> InlineMultiplySpec:
        for r in self.ranges:
            for o in self.original:
                a, b = ipaddress.ip_network(r, strict=False), ipaddress.ip_network(o, strict=False)
                if a.version == b.version and a.overlaps(b):
                    raise ValueError(
                        f"ranges: {r} overlaps the original range {o}: the shadows need "
                        f"addresses of their own"
                    )
        return self


def _sends_sessions(name: str, spec: GeneratorSpec | dict[str, Any] | None) -> bool:
    """Whether generator NAME with options SPEC (a spec, its options, or None) sends sessions;
    options that do not validate: its capability alone (their own check reports them)."""
    if not isinstance(spec, GeneratorSpec):
        try:
            spec = generator_spec({"name": name, **(spec or {})})
        except (ValidationError, ValueError):
            return bool(GENERATORS.get(name).capabilities.sessions)
    return spec.sends_sessions()


class Scenario(_Model):
    version: Literal[1] = Field(description="Scenario format version; this is 1.")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    description: str = ""
    seed: int = Field(1, ge=0, lt=2**64, description="Seed of every random choice in the run.")
    generator: GeneratorName = Field(
        "flowengine",
        description="Which generator produces the flows (offline: flowengine, or trex "
        "expanded by generators/trex/expand.py).",
    )
    generator_options: dict[str, Any] | None = Field(
        None,
        description="Options of `generator` for an offline run, as in a `testbed.generators` "
        "entry (e.g. trex: {mode: astf, response_bytes: 112}); live, the default generator's too.",
    )
    ethernet: Ethernet = Ethernet()
    flows: list[Flow] = Field(
        [], description="One-way flows (at least one of `flows` and `sessions`)."
    )
    testbed: TestbedSpec | None = Field(
        None, description="Live run on network namespaces (docs/live.md); absent: offline."
    )
    attacks: AttacksSpec | None = Field(
        None,
        description="Attack sessions from IDS rules mixed with the flows (docs/ids-coverage.md).",
    )
    multiply: MultiplySpec | None = Field(
        None,
        description="The traffic multiplier applied to the run's capture (docs/multiplier.md).",
    )
    sessions: list[Session] = Field(
        [],
        max_length=MAX_ITEMS,
        description="Two-way sessions (TCP handshake, requests and responses, teardown; UDP "
        "request/response) whose sizes, arrivals and addresses are drawn from distributions.",
    )

    @field_validator("sessions")
    @classmethod
    def _sessions_sent(cls, v: list[Session], info: ValidationInfo) -> list[Session]:
        """Only generators with the `sessions` capability send them."""
        if not v:
            return v
        specs: list[tuple[Any, Any]] = [
            (info.data.get("generator", "flowengine"), info.data.get("generator_options"))
        ]
        testbed = info.data.get("testbed")
        if isinstance(testbed, TestbedSpec) and testbed.generators:
            specs = [(g.name, g) for g in testbed.generators]
        for name, spec in specs:
            if isinstance(name, str) and name in GENERATORS:
                if not _sends_sessions(name, spec):
                    able = [
                        p.name for p in GENERATORS if getattr(p.capabilities, "sessions", False)
                    ]
                    raise ValueError(
                        f"generator `{name}` cannot send two-way sessions; use "
                        f"{' or '.join(able) or 'another generator'}, or describe the traffic "
                        f"as `flows`"
                    )
        return v

    @model_validator(mode="after")
    def _something_to_send(self) -> Scenario:
        if not self.flows and not self.sessions:
            raise ValueError("give `flows`, `sessions` or both: there is nothing to send")
        return self

    @model_validator(mode="after")
    def _offline_generator(self) -> Scenario:
        if self.testbed is None and not GENERATORS.get(self.generator).capabilities.offline:
            raise ValueError(f"generator `{self.generator}` sends live: add a `testbed:` section")
        if self.generator_options is not None:
            if "name" in self.generator_options:
                raise ValueError("generator_options: `name` is `generator`'s")
            try:
                self.offline_generator()  # its model's checks
            except ValidationError as exc:
                raise ValueError(
                    "generator_options: "
                    + "; ".join(
                        f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()
                    )
                ) from None
        return self

    def offline_generator(self) -> GeneratorSpec:
        """`generator` with its `generator_options`: what an offline run runs."""
        return generator_spec({"name": self.generator, **(self.generator_options or {})})

    def each_dut(self) -> list[Scenario]:
        """The scenario once per device under test (`testbed.duts`; itself without it)."""
        if self.testbed is None or not self.testbed.duts:
            return [self]
        return [self.model_copy(update={"testbed": tb}) for tb in self.testbed.each_dut()]

    def live_generators(self) -> list[GeneratorSpec]:
        """The live generators; with `testbed.spread`, the template once per host (at its place,
        labelled with its name)."""
        if self.testbed is None:
            return []
        gens = list(self.testbed.generators) or [self.offline_generator()]
        spread = self.testbed.spread
        if spread is None:
            return gens
        return [
            gens[0].model_copy(update={"at": h.at, "label": spread.label(i)})
            for i, h in enumerate(spread.hosts)
        ]


_SCENARIO_FIELDS = frozenset(Scenario.model_fields)  # the core's own; the generators' are added


# --------------------------------------------------------------------------------------------
# Loading with file:line error messages


class ScenarioError(InputProblems):
    """A scenario that cannot be used; `problems` holds one `FILE:LINE: field: message` each."""


@dataclass(frozen=True)
class LoadedScenario:
    scenario: Scenario
    path: Path
    text: str


class _LazyLines:
    """The line map of a text, read only when a problem needs a line (see ntgcore.yamlread)."""

    def __init__(self, text: str):
        self.text = text
        self.lines: dict[tuple[Any, ...], int] | None = None

    def get(self, path: tuple[Any, ...], default: int | None = None) -> int | None:
        if self.lines is None:
            self.lines = yaml_lines(self.text)
        return self.lines.get(path, default)


def _prefixes(locs: list[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    return {loc[:k] for loc in locs for k in range(len(loc) + 1)}


def _dotted(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "(top level)"


def _model_at(loc: tuple[Any, ...], root: type[BaseModel] | None = None) -> type[BaseModel] | None:
    """The model class that holds the field at `loc` (for suggesting known keys)."""
    model: Any = root or Scenario
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = _inner_model(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (list, Union) or str(get_origin(annotation)) == "types.UnionType":
        for arg in get_args(annotation):
            found = _inner_model(arg)
            if found is not None:
                return found
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def format_error(
    err: Mapping[str, Any],
    file: str,
    lines: dict[tuple[Any, ...], int],
    root: type[BaseModel] | None = None,
) -> str:
    loc, tagged = _untagged(tuple(err["loc"]))
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if err["type"] == "extra_forbidden":
        key = loc[-1]
        parent = tagged or _model_at(loc[:-1], root)
        known = list(parent.model_fields) if parent else []
        tag = "name" if tagged is not None and issubclass(tagged, GeneratorSpec) else "kind"
        plugins = GENERATORS if tag == "name" else DUT_KINDS
        owners = [p.name for p in plugins if key in p.options.model_fields] if tagged else []
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        listing = f" (known keys: {', '.join(known)})" if known and not close else ""
        message = f"unknown key `{key}`{hint}{listing}"
        if owners and tagged is not None:  # an option of another generator
            message = f"`{key}` is an option of {' and '.join(owners)}, not of {tagged.model_fields[tag].default}"
        line = lines.get(loc) or lines.get(loc[:-1], 1)
        return f"{file}:{line}: {_dotted(loc)}: {message}"
    if err["type"] == "missing":
        line = lines.get(loc[:-1], 1)
        return f"{file}:{line}: {_dotted(loc)}: required field is missing"
    probe = loc
    while probe and probe not in lines:  # `dst_port: 99999` is reported at dst_port, not .range
        probe = probe[:-1]
    line = lines.get(probe + ("__value__",)) or lines.get(probe, 1)
    got = (
        f" (got {_short(err['input'])})"
        if "input" in err and not isinstance(err["input"], (dict, list))
        else ""
    )
    return f"{file}:{line}: {_dotted(probe)}: {message}{got}"


def _untagged(loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], type[BaseModel] | None]:
    """`loc` without the union tag pydantic puts after `generators[i]`, `testbed.dut` and
    `testbed.duts[i]`, and the
    tagged model (None for a `kind` that is not registered)."""
    for k in range(2, len(loc)):
        if loc[k - 2] == "generators" and isinstance(loc[k - 1], int) and loc[k] in GENERATORS:
            return loc[:k] + loc[k + 1 :], GENERATORS.get(loc[k]).options
        dut = (
            loc[k - 2 : k] == ("testbed", "dut")
            or (
                k >= 3 and loc[k - 3 : k - 1] == ("testbed", "duts") and isinstance(loc[k - 1], int)
            )
            or (k >= 3 and loc[k - 3 : k] == ("testbed", "failover", "meter"))
        )
        if dut and isinstance(loc[k], str):
            if loc[k] == _UNKNOWN:
                return loc[:k] + loc[k + 1 :], None
            if loc[k] in DUT_KINDS:
                return loc[:k] + loc[k + 1 :], DUT_KINDS.get(loc[k]).options
    return loc, None


_built_for: tuple[Any, ...] = ()
_method_sections: set[str] = set()  # `testbed` fields added by ensure_models (Method.options)


def ensure_models() -> None:
    """Join the registered plugins' option models into the scenario: `testbed.generators` is the
    union of the generators' (told apart by `name`), `testbed.dut` of the DUT kinds' (by `kind`),
    `testbed.method` one of the methods' names, and a method's own sections (`Method.options`,
    beyond the built-in ones) fields of `testbed`.

    The models depend on what is registered, so they are rebuilt whenever a plugin was registered
    since the last build (entry points at first use, a test's own plugin later)."""
    global _built_for
    registries = (GENERATORS, DUT_KINDS, METHODS)
    for registry in registries:
        registry.load()
    if _built_for == tuple(r.version for r in registries):
        return
    models = tuple(p.options for p in GENERATORS)
    if not models:
        raise BadInput("no generator is registered: install the project (pip install .)")
    if "none" not in DUT_KINDS or not METHODS.names():
        raise BadInput("no DUT kind or method is registered: install the project (pip install .)")
    union = models[0] if len(models) == 1 else Annotated[Union[models], Field(discriminator="name")]  # noqa: UP007
    duts = tuple(Annotated[k.options, Tag(k.name)] for k in DUT_KINDS)
    dut = Annotated[
        Union[(*duts, Annotated[_UnknownDutSpec, Tag(_UNKNOWN)])],  # type: ignore[valid-type]  # noqa: UP007  (built at run time)
        Discriminator(_dut_tag),
    ]
    # The fields' annotations are set anew (a forward reference is resolved only once).
    fields = TestbedSpec.model_fields
    fields["generators"].annotation = list[union]  # type: ignore[valid-type]
    # no stale discriminator; `dut` is a type built at run time, which mypy cannot follow
    fields["dut"] = FieldInfo.from_annotated_attribute(dut, NoDutSpec())  # type: ignore[arg-type]
    fields["duts"] = FieldInfo.from_annotated_attribute(
        list[dut],
        Field([], max_length=16, description=fields["duts"].description),
    )
    fields["method"].annotation = Literal[tuple(METHODS.declared())]  # type: ignore[assignment]
    # `testbed.failover.meter`: one of the flow-meter kinds' models, told apart by `kind`
    meters = tuple(Annotated[k.options, Tag(k.name)] for k in DUT_KINDS if k.name in meter_kinds())
    meter = Annotated[
        Union[(*meters, Annotated[_UnknownMeterSpec, Tag(_UNKNOWN)])],  # type: ignore[valid-type]  # noqa: UP007  (built at run time)
        Discriminator(_meter_tag),
    ]
    fo_fields = FailoverSpec.model_fields
    fo_fields["meter"] = FieldInfo.from_annotated_attribute(
        Optional[meter],  # type: ignore[arg-type]  # noqa: UP045  (a run-time type)
        Field(None, description=fo_fields["meter"].description),
    )
    FailoverSpec.model_rebuild(force=True)
    for section in _method_sections:  # the sections of methods registered before
        fields.pop(section, None)
    _method_sections.clear()
    for method in METHODS:  # a method's own section: `testbed.<section>`, absent by default
        for section, model in getattr(method, "options", {}).items():
            if section in fields:
                raise BadInput(f"method {method.name}: `testbed.{section}` is taken")
            fields[section] = FieldInfo(
                annotation=Optional[model],  # type: ignore[arg-type]  # noqa: UP045  (a run-time type)
                default=None,
                description=f"Method `{method.name}`: {getattr(method, 'summary', '')}",
            )
            _method_sections.add(section)
    TestbedSpec.model_rebuild(
        force=True, _types_namespace={"AnyGeneratorSpec": union, "AnyDutSpec": dut}
    )
    _add_generator_sections()
    Scenario.model_rebuild(force=True)
    _built_for = tuple(r.version for r in registries)


def _add_generator_sections() -> None:
    """The generators' own top-level sections (`GeneratorPlugin.section`, e.g. the engine's
    `flowengine:`) as fields of `Scenario` with their models' defaults, placed before `flows`;
    the section of a generator no longer registered is gone again."""
    sections = {p.section[0]: (p.name, p.section[1]) for p in GENERATORS if p.section is not None}
    for key, (name, _) in sections.items():
        if key in _SCENARIO_FIELDS:
            raise BadInput(f"generator {name}: its section `{key}` is a field of every scenario")
    fields = Scenario.model_fields
    if {k: f.annotation for k, f in fields.items() if k not in _SCENARIO_FIELDS} == {
        k: model for k, (_, model) in sections.items()
    }:
        return
    core = {k: f for k, f in fields.items() if k in _SCENARIO_FIELDS}
    fields.clear()
    for key, field in core.items():
        if key == "flows":
            for section, (_, model) in sections.items():
                fields[section] = FieldInfo.from_annotated_attribute(model, model())
        fields[key] = field


def parse_scenario(text: str, file: str = "<scenario>", base: Path | None = None) -> Scenario:
    """The scenario of a YAML text; ScenarioError with every problem as `FILE:LINE: ...`.

    The text is read within the limits of ntgcore.yamlread (size, depth, values, aliases,
    duplicate keys); lines are looked up only when there is a problem to report. Files the
    scenario names (a distribution's `file:`) are relative to `base`, by default FILE's folder
    (the working directory for a FILE in angle brackets)."""
    ensure_models()
    if base is None:
        base = Path.cwd() if file.startswith("<") else Path(file).parent
    try:
        data = read_yaml(text, file)
    except YamlProblem as exc:
        raise ScenarioError(exc.problems) from None
    if not isinstance(data, dict):
        raise ScenarioError(
            [f"{file}:1: (top level): expected a mapping with version, name and flows"]
        )
    try:
        with gc_paused():
            _flows_first(data, text, file)
            scenario = Scenario.model_validate(data, context={"base": base})
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        lines = yaml_lines(text, _prefixes([_untagged(tuple(e["loc"]))[0] for e in errors]))
        problems = [format_error(e, file, lines) for e in errors]
        problems.sort(key=lambda p: int(p[len(file) + 1 :].split(":", 1)[0]))
        raise ScenarioError(problems) from None
    problems = _live_address_problems(scenario, file, _LazyLines(text))
    if problems:
        raise ScenarioError(problems)
    return scenario


def _flows_first(data: dict[str, Any], text: str, file: str) -> None:
    """Validate the flow entries one by one, each replacing its YAML data: the data of a flow
    is freed as its model is made, so a large file never holds both whole (the peak memory was
    their sum). A flow that fails stays as it was and is reported with every other problem;
    past MAX_FLOW_PROBLEMS failing flows the check stops there (a list of a million wrong flows
    made a million messages and gigabytes)."""
    flows = data.get("flows")
    if not isinstance(flows, list):
        return
    failed: list[tuple[int, ValidationError]] = []
    for i, item in enumerate(flows):
        try:
            flows[i] = Flow.model_validate(item)
        except ValidationError as exc:
            failed.append((i, exc))
            if len(failed) > MAX_FLOW_PROBLEMS:
                errors: list[dict[str, Any]] = [
                    dict(e, loc=("flows", j, *e["loc"]))
                    for j, x in failed[:-1]
                    for e in x.errors(include_url=False)
                ]
                lines = yaml_lines(
                    text, _prefixes([tuple(e["loc"]) for e in errors] + [("flows", i)])
                )
                problems = [format_error(e, file, lines) for e in errors]
                raise ScenarioError(
                    problems
                    + [
                        f"{file}:{lines.get(('flows', i), 1)}: flows[{i}]: and more: the check stops after "
                        f"{MAX_FLOW_PROBLEMS} wrong flows (of {len(flows):,})"
                    ]
                ) from None


def _outside(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    return not any(network.subnet_of(n) for n in BENCHMARK_NETWORKS if n.version == network.version)  # type: ignore[arg-type]  # same version


def _live_address_problems(scenario: Scenario, file: str, lines: _LazyLines) -> list[str]:
    """A live run sends what the flows say: every address must lie in the benchmark ranges."""
    if scenario.testbed is None:
        return []
    out = []
    for i, flow in enumerate(scenario.flows):
        for key in ("src", "dst"):
            net = getattr(flow, key).interface.network
            if _outside(net):
                line = lines.get(("flows", i, key, "__value__")) or lines.get(("flows", i), 1)
                out.append(
                    f"{file}:{line}: flows[{i}].{key}: a live run sends only inside "
                    f"198.18.0.0/15 and 2001:db8::/32 (got {getattr(flow, key).cidr})"
                )
    for i, session in enumerate(scenario.sessions):
        for key in ("client", "server"):
            net = getattr(session, key).interface.network
            if _outside(net):
                line = (
                    lines.get(("sessions", i, key, "__value__"))
                    or lines.get(("sessions", i, key))
                    or lines.get(("sessions", i), 1)
                )
                out.append(
                    f"{file}:{line}: sessions[{i}].{key}: a live run sends only inside "
                    f"198.18.0.0/15 and 2001:db8::/32 (got {getattr(session, key).network})"
                )
    fo = scenario.testbed.failover
    if fo is not None:  # the probes go to the virtual address, from its segment
        vip = ipaddress.ip_interface(fo.vip)
        for i, flow in enumerate(scenario.flows):
            if flow.dst.interface.ip != vip.ip or flow.src.interface.ip not in vip.network:
                line = lines.get(("flows", i, "dst", "__value__")) or lines.get(("flows", i), 1)
                out.append(
                    f"{file}:{line}: flows[{i}].dst: method failover probes the virtual address "
                    f"{vip.ip} from {vip.network} (got {flow.src.cidr} -> {flow.dst.cidr})"
                )
    sweep = scenario.testbed.sweep
    if sweep is not None and sweep.hosts and not scenario.flows:
        line = lines.get(("testbed", "sweep", "hosts"), 1)
        out.append(
            f"{file}:{line}: testbed.sweep.hosts: the host sweep copies the first flow: add one to `flows`"
        )
    elif sweep is not None and sweep.hosts:
        first = scenario.flows[0].src.interface.ip
        last = int(first) + max(sweep.hosts) - 1  # the host sweep counts source addresses up
        if last >= 2**first.max_prefixlen or _outside(ipaddress.ip_network(type(first)(last))):
            line = lines.get(("testbed", "sweep", "hosts"), 1)
            out.append(
                f"{file}:{line}: testbed.sweep.hosts: {max(sweep.hosts)} hosts counting up "
                f"from {first} leave 198.18.0.0/15 / 2001:db8::/32; start lower"
            )
    return out


def load_scenario(path: str | Path) -> LoadedScenario:
    path = Path(path)
    try:  # also a device or a pipe (/dev/stdin), whose size is known only by reading it
        text = read_bounded(
            path, MAX_BYTES, "file", "describe many similar flows with one flow and `repeat`"
        )
    except BadInput as exc:
        raise ScenarioError([str(exc)]) from None
    scenario = parse_scenario(text, str(path))
    if scenario.attacks is not None:
        _check_attack_files(scenario.attacks, path, text)
    return LoadedScenario(scenario, path, text)


def attack_rule_paths(attacks: AttacksSpec, scenario_path: Path) -> list[Path]:
    """The rule files of `attacks:`, environment variables expanded, relative to the scenario."""
    return [scenario_path.parent / os.path.expandvars(f) for f in attacks.rules]


def _check_attack_files(attacks: AttacksSpec, path: Path, text: str) -> None:
    found = []
    for i, (given, resolved) in enumerate(zip(attacks.rules, attack_rule_paths(attacks, path))):
        if "$" in str(resolved):
            found.append(
                (
                    i,
                    f"{given!r} names an environment variable that is not set; set it "
                    "(e.g. NTG_SHARED_DATA=/work/shared/data) or give a path",
                )
            )
        elif not resolved.is_file():
            found.append((i, f"no such rule file {resolved} (paths are relative to the scenario)"))
    if found:
        lines = _LazyLines(text)
        raise ScenarioError(
            [
                f"{path}:{lines.get(('attacks', 'rules', i)) or lines.get(('attacks',), 1)}: "
                f"attacks.rules[{i}]: {message}"
                for i, message in found
            ]
        )


_SHORTHANDS = {
    "Distribution": {
        "anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}],
        "description": "A fixed value: 400, 64k, 2ms (a bare number of a time is ns)",
    },
    "SessionAddress": {"type": "string", "description": "198.18.0.1, or a block: 198.18.0.0/16"},
    "ProtocolMix": {"type": "string", "enum": ["tcp", "udp"]},
    "CloseMix": {"type": "string", "enum": ["fin", "rst", "none"]},
    "Address": {"type": "string", "description": "198.18.0.1, or a block: 198.18.0.0/16"},
    "Ports": {
        "anyOf": [
            {"type": "integer", "minimum": 0, "maximum": 65535},
            {"type": "string", "pattern": r"^(random|\d+(\s*-\s*\d+)?)$"},
        ]
    },
    "Size": {
        "anyOf": [
            {"type": "integer", "minimum": 0},
            {"type": "string", "pattern": r"^\s*\d+\s*((-|\.\.)\s*\d+)?\s*$"},
        ]
    },
}


def json_schema() -> dict[str, Any]:
    """JSON Schema for editors; the short forms (`src: 198.18.0.1`, `size: 64-512`) included."""
    ensure_models()
    schema = Scenario.model_json_schema(mode="validation")
    # `testbed.dut`: one of the registered kinds' models (the one of an unregistered kind, which
    # only words the error, is not one; a kind's `kind` may be omitted: `none`)
    dut = schema["$defs"]["TestbedSpec"]["properties"]["dut"]
    unknown = f"#/$defs/{_UnknownDutSpec.__name__}"
    dut["anyOf"] = [m for m in dut.pop("oneOf") if m.get("$ref") != unknown]
    items = schema["$defs"]["TestbedSpec"]["properties"]["duts"][
        "items"
    ]  # `testbed.duts`: the same
    items["anyOf"] = [m for m in items.pop("oneOf") if m.get("$ref") != unknown]
    items.pop("discriminator", None)
    schema["$defs"].pop(_UnknownDutSpec.__name__, None)
    # `testbed.failover.meter`: the flow-meter kinds' models (or null)
    meter = schema["$defs"]["FailoverSpec"]["properties"]["meter"]
    unknown_meter = f"#/$defs/{_UnknownMeterSpec.__name__}"
    for choice in meter.get("anyOf", []):
        if "oneOf" in choice:
            choice["anyOf"] = [m for m in choice.pop("oneOf") if m.get("$ref") != unknown_meter]
            choice.pop("discriminator", None)
    schema["$defs"].pop(_UnknownMeterSpec.__name__, None)
    for name, short in _SHORTHANDS.items():
        full = schema["$defs"][name]
        schema["$defs"][name] = {"anyOf": [short, full], "description": full.get("description", "")}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "ntg-testbed scenario v1"
    return schema
