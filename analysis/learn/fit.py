"""Sessions -> a scenario's `sessions:` entries (design: docs/learn.md).

Everything here works on a SessionTable (analysis.learn.sessions) and plain numpy; the result is a
plain dict in the scenario's YAML form, validated later by ntgcore.scenario.

- Classes: (IP version, protocol, server port), the `classes` largest by session count; every
  other session goes to one "other" class per IP version and protocol, whose server port is a
  weighted choice of its ports. The baseline (Harpoon-style) is one class per IP version: every
  field from its marginal over all sessions, independently.
- Addresses: each real IPv4 /24 becomes one /24 of 198.18.0.0/15 in order of first use (client
  then server of each session, sessions by start), its host byte kept; past 512 /24s they fold
  (index mod 512, said in the report). Each real IPv6 /64 becomes a /80 of 2001:db8::/64, the low
  48 bits of the interface id kept (the engine draws host offsets below 2^63, so a /64 each would
  not fit; past 2^15 /64s they fold). `client:` and `server:` are {network, hosts}, hosts an
  empirical distribution of offsets: the MAX_HOSTS busiest hosts, weighted by sessions.
- Time: gaps between session starts longer than max(JUMP_MIN_NS, JUMP_FACTOR x their median), or
  than JUMP_MAX_NS, look like clock jumps (a capture pieced together, a clock reset). They are
  kept as pauses (the scenario spans the input's time, up to TIMELINE_MAX_NS; a warning when that
  is over LONG_SPAN_NS: a live run lasts as long); with `drop_jumps`, or past TIMELINE_MAX_NS,
  each is replaced by the median of the other gaps. The report says which.
- Timeline: the trace's activity as steps (fit_timeline): idle gaps (IDLE_FACTOR x the median
  gap) are pauses, the runs of starts between them steps of STEP_SESSIONS starts or more. Each
  class's profile is its own starts per step (class_profile), so the classes together start as
  many sessions in each step as the trace did.
- Arrival: inter-arrivals of a class's starts (after the profile is divided out): exponential with
  their mean when their coefficient of variation is within POISSON_CV of 1, else their quantiles.
- Rounds and bytes: a round's bytes are pooled over the class's rounds (each session's per-round
  value counts once per round; UDP: each datagram is a round's message), so that rounds x bytes a
  round is the class's payload a session (round_samples). think and linger: the means of the
  class's pauses (pauses). Client ports seen are dealt as a deck (`cycle: true`).
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ntgcore.distributions import MAX_DECK
from ntgcore.units import format_ns

from .sessions import SessionTable

V4_BASE = 0xC6120000  # 198.18.0.0
V4_NET = "198.18.0.0/15"
V4_SLOTS = 512  # /24s in 198.18.0.0/15
V6_NET = "2001:db8::/64"
V6_HI = 0x20010DB800000000
V6_SLOTS = 1 << 15
V6_IID_BITS = 48
MAX_HOSTS = 4096
MAX_PORTS = 4096
EPHEMERAL_SEEN = 256  # distinct client ports from which their own range is used
EPHEMERAL_RANGES = ((49152, 65535), (32768, 60999))
PORT_REUSE = 2  # instances per distinct client port up to which the ports seen are kept
MAX_HOST_COPIES = 1 << 16  # hosts of a class after --hosts-scale, at most
EMPIRICAL_MAX = 64  # distinct values up to which a distribution is given exactly
QUANTILES = 64  # bins of a `quantiles:` distribution otherwise
JUMP_MIN_NS = 60 * 1_000_000_000
JUMP_FACTOR = 1000
JUMP_MAX_NS = 30 * 86400 * 1_000_000_000  # a month without a session start: a clock jump
JUMP_FILL_NS = 1_000_000_000
POISSON_CV = 0.25
TIERS = 4  # a class's sessions of one close in up to this many tiers by duration
TIER_MIN = 3  # sessions a tier holds at least
IDLE_FACTOR = 20  # a gap between session starts this many median gaps long: an idle period
MAX_IDLE = 255  # idle periods kept as steps of a profile (the longest)
STEP_SESSIONS = 100  # session starts a profile step holds at least (segments cut in steps)
PROFILE_MIN_CV = 0.2  # a segment's steps are kept when their rates vary more than this
MAX_SUBSTEPS = 400  # steps of segments at most (with MAX_IDLE: within MAX_PROFILE_STEPS)
LONG_SPAN_NS = 86400 * 1_000_000_000  # kept clock jumps: a scenario longer than this is warned of
TIMELINE_MAX_NS = 2**31 * 1_000_000_000  # clock jumps are kept up to this (pcap time: 2^32 s)
DEFAULT_RTT_NS = 20_000_000
DEFAULT_GAP_NS = 12_000
DEFAULT_MSS = 1460
DEFAULT_WINDOW = 10
MIN_MSS = 64
MAX_WINDOW = 64
PROTO_NAME = {6: "tcp", 17: "udp"}
# the first size of pd.factorize's hash tables where few distinct values are expected (prefixes,
# classes: it grows when needed; the default, one the size of the input, is several times slower)
FACTORIZE_HINT = 1024
ENTRY_ORDER = (
    "name",
    "protocol",
    "client",
    "server",
    "client_port",
    "server_port",
    "start",
    "count",
    "arrival",
    "profile",
    "rtt",
    "gap",
    "mss",
    "window",
    "rounds",
    "think",
    "request_bytes",
    "response_bytes",
    "close",
    "open",
    "linger",
)


@dataclass
class FitOptions:
    duration_ns: int | None = None
    rate_scale: float = 1.0
    hosts_scale: float = 1.0
    classes: int = 12
    baseline: bool = False
    drop_jumps: bool = False
    tiers: int = TIERS  # tiers by duration of a TCP class's sessions of one close (1: none)


@dataclass
class Extras:
    """What the packets tell beyond the sessions (absent for flow records)."""

    wire_hist: np.ndarray | None = None
    # UDP datagrams counted by (ip_version, server_port, server, payload): `count`
    datagrams: pd.DataFrame | None = None


# -- distributions --------------------------------------------------------------------------


def dist_of(values: np.ndarray, weights: np.ndarray | None = None) -> Any:
    """A distribution of non-negative integers in the scenario's YAML form: the value itself
    when there is one, the exact `empirical` one up to EMPIRICAL_MAX distinct values, else
    QUANTILES + 1 `quantiles` (equal-probability bins)."""
    v = np.asarray(values, np.int64)
    if len(v) == 0:
        return 0
    w = np.ones(len(v), np.float64) if weights is None else np.asarray(weights, np.float64)
    uniq, inv = np.unique(v, return_inverse=True)
    if len(uniq) == 1:
        return int(uniq[0])
    counts = np.bincount(inv, weights=w)
    if len(uniq) <= EMPIRICAL_MAX:
        return {"empirical": {"values": uniq.tolist(), "weights": _int_weights(counts)}}
    cdf = np.cumsum(counts) / counts.sum()
    probs = np.linspace(0, 1, QUANTILES + 1)
    idx = np.minimum(np.searchsorted(cdf, probs, side="left"), len(uniq) - 1)
    q = uniq[idx]
    q[0] = uniq[0]
    return {"quantiles": np.maximum.accumulate(q).tolist()}


def _int_weights(counts: np.ndarray) -> list[int]:
    """Positive integer weights proportional to COUNTS (scaled down when they are huge)."""
    c = np.asarray(counts, np.float64)
    top = c.max()
    if top > 2**31:
        c = c * (2**31 / top)
    return np.maximum(np.rint(c), 1).astype(np.int64).tolist()


def _time(ns: float) -> str:
    return format_ns(max(1, int(round(ns))))


def time_dist(gaps: np.ndarray) -> tuple[Any, str]:
    """An inter-arrival distribution of GAPS (ns) and its kind (`fixed`, `exponential`,
    `empirical`)."""
    g = np.asarray(gaps, np.float64)
    if len(g) == 0:
        return _time(1_000_000), "fixed"
    mean = float(g.mean())
    std = float(g.std())
    if std <= 1e-9 * max(mean, 1.0):
        return _time(mean), "fixed"
    cv = std / mean if mean > 0 else math.inf
    if len(g) >= 3 and abs(cv - 1) <= POISSON_CV:
        return {"exponential": {"mean": _time(mean)}}, "exponential"
    d = dist_of(np.maximum(np.rint(g), 1).astype(np.int64))
    if isinstance(d, int):
        return _time(d), "fixed"
    return d, "empirical"


# -- addresses ------------------------------------------------------------------------------


@dataclass
class AddressMap:
    """Synthetic addresses (as host offsets from V4_NET / V6_NET) of every session's client and
    server, and what was folded."""

    client_offset: np.ndarray
    server_offset: np.ndarray
    prefixes: dict[int, int]  # IP version -> distinct real prefixes (/24, /64)
    folded: dict[int, int]  # IP version -> prefixes that share a slot with another


def map_addresses(t: SessionTable) -> AddressMap:
    n = len(t)
    c_off = np.zeros(n, np.int64)
    s_off = np.zeros(n, np.int64)
    prefixes, folded = {}, {}
    for ver in (4, 6):
        rows = np.flatnonzero(t.ip_version == ver)
        if len(rows) == 0:
            continue
        both_hi = np.stack([t.client_hi[rows], t.server_hi[rows]], axis=1).ravel()
        both_lo = np.stack([t.client_lo[rows], t.server_lo[rows]], axis=1).ravel()
        if ver == 4:
            key = both_lo >> np.uint64(8)
            codes, uniq = pd.factorize(key, size_hint=FACTORIZE_HINT)
            slots = codes.astype(np.int64) % V4_SLOTS
            off = (slots << 8) | (both_lo & np.uint64(0xFF)).astype(np.int64)
            cap = V4_SLOTS
        else:
            codes, uniq = pd.factorize(both_hi, size_hint=FACTORIZE_HINT)
            slots = codes.astype(np.int64) % V6_SLOTS
            iid = (both_lo & np.uint64((1 << V6_IID_BITS) - 1)).astype(np.int64)
            off = (slots << V6_IID_BITS) | iid
            cap = V6_SLOTS
        off = off.reshape(-1, 2)
        c_off[rows] = off[:, 0]
        s_off[rows] = off[:, 1]
        prefixes[ver] = len(uniq)
        folded[ver] = max(0, len(uniq) - cap)
    return AddressMap(c_off, s_off, prefixes, folded)


def offset_text(ver: int, offset: int) -> str:
    """The synthetic address at OFFSET (for the report and the tests)."""
    if ver == 4:
        return str(ipaddress.IPv4Address(V4_BASE + offset))
    return str(ipaddress.IPv6Address((V6_HI << 64) + offset))


def _hosts(ver: int, offsets: np.ndarray, hosts_scale: float) -> tuple[Any, dict[str, Any]]:
    """`client:`/`server:` of a class: its network and the distribution of host offsets, exact
    (`empirical`) up to MAX_HOSTS hosts; beyond, a `histogram` with a bin of its own for each of
    the MAX_HOSTS // 2 busiest hosts and one bin for the others between two of them (drawn
    evenly inside it). HOSTS_SCALE below 1 keeps that share of the hosts, the busiest; above 1,
    every host gets copies in the synthetic prefixes after those in use."""
    net = V4_NET if ver == 4 else V6_NET
    uniq, counts = np.unique(offsets, return_counts=True)
    info: dict[str, Any] = {"hosts": int(len(uniq))}
    if hosts_scale < 1:
        keep = max(1, int(math.ceil(len(uniq) * hosts_scale)))
        top = np.sort(np.argsort(-counts, kind="stable")[:keep])
        uniq, counts = uniq[top], counts[top]
    if hosts_scale > 1:
        copies = min(int(math.ceil(hosts_scale)), max(1, MAX_HOST_COPIES // len(uniq)))
        stride = 1 << (8 if ver == 4 else V6_IID_BITS)
        slots = V4_SLOTS if ver == 4 else V6_SLOTS
        slot, host = uniq // stride, uniq % stride
        used = int(slot.max()) + 1
        spread = np.concatenate(
            [((slot + j * used) % slots) * stride + host for j in range(copies)]
        )
        uniq, inv = np.unique(spread, return_inverse=True)
        counts = np.bincount(inv, weights=np.tile(counts, copies))
        info["copies"] = copies
    info["kept"] = int(len(uniq))
    if len(uniq) == 1:
        return offset_text(ver, int(uniq[0])), info
    if len(uniq) <= MAX_HOSTS:
        hosts: Any = {"empirical": {"values": uniq.tolist(), "weights": _int_weights(counts)}}
    else:
        busiest = np.sort(uniq[np.argsort(-counts, kind="stable")[: MAX_HOSTS // 2]])
        edges = np.unique(np.r_[busiest, busiest + 1, uniq[0], uniq[-1]])
        per_bin = np.bincount(
            np.minimum(np.searchsorted(edges, uniq, side="right") - 1, len(edges) - 2),
            weights=counts,
            minlength=len(edges) - 1,
        )
        hosts = {"histogram": {"edges": edges.tolist(), "counts": _int_weights0(per_bin)}}
        info["exact_hosts"] = int(len(busiest))
    return {"network": net, "hosts": hosts}, info


def _int_weights0(counts: np.ndarray) -> list[int]:
    """Non-negative integer weights proportional to COUNTS (0 stays 0)."""
    c = np.asarray(counts, np.float64)
    top = c.max()
    if top > 2**31:
        c = c * (2**31 / top)
    return np.where(c > 0, np.maximum(np.rint(c), 1), 0).astype(np.int64).tolist()


# -- time -----------------------------------------------------------------------------------


def effective_starts(starts: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """START_NS (sorted) with every clock jump replaced by the median of the other gaps (1 s
    when there is none), from 0. A jump: a gap longer than max(JUMP_MIN_NS, JUMP_FACTOR x the
    median gap), or than JUMP_MAX_NS whatever the median."""
    s = np.asarray(starts, np.int64)
    if len(s) < 2:
        return s - s[:1], {"jumps": 0, "removed_ns": 0}
    gaps = np.diff(s)
    med = float(np.median(gaps))
    jump = (gaps > max(JUMP_MIN_NS, JUMP_FACTOR * med)) | (gaps > JUMP_MAX_NS)
    fill = int(np.median(gaps[~jump])) if (~jump).any() else JUMP_FILL_NS
    fixed = np.where(jump, fill, gaps)
    out = np.r_[0, np.cumsum(fixed)]
    removed = int((gaps[jump].astype(np.float64) - fill).sum())
    return out, {"jumps": int(jump.sum()), "removed_ns": removed}


@dataclass
class Timeline:
    """The trace's activity as steps (design: docs/learn.md, "Why these rules"): step i starts
    at `edges[i]` (ns from the first session start) and lasts `lengths[i]`; `idle` steps are
    pauses in which no session starts. `span` is where the last step ends."""

    edges: np.ndarray
    lengths: np.ndarray
    idle: np.ndarray

    @property
    def span(self) -> int:
        return int(self.edges[-1] + self.lengths[-1]) if len(self.edges) else 0

    def step_of(self, starts: np.ndarray) -> np.ndarray:
        """The step of each start (ns from the first session start)."""
        at = np.searchsorted(self.edges, np.asarray(starts, np.int64), side="right") - 1
        return np.clip(at, 0, len(self.edges) - 1)


def fit_timeline(starts: np.ndarray) -> Timeline:
    """The activity steps of the session starts STARTS (sorted, ns, from 0). A gap between two
    starts longer than IDLE_FACTOR x the median (positive) gap is an idle period (the
    MAX_IDLE longest of them): it becomes a step of its own. The runs of starts between idle
    periods (segments) are cut into steps of STEP_SESSIONS starts or more, each beginning at a
    session start, when their rates vary (relative spread above PROFILE_MIN_CV; else the
    segment is one step); a segment of m starts from a to b lasts b - a plus its mean gap
    (b - a) / (m - 1) (one start: the median gap), so that m instances spread over it like its
    starts."""
    s = np.asarray(starts, np.int64)
    n = len(s)
    if n == 0:
        return Timeline(np.zeros(1, np.int64), np.ones(1, np.int64), np.zeros(1, bool))
    gaps = np.diff(s)
    pos = gaps[gaps > 0]
    med = int(np.median(pos)) if len(pos) else JUMP_FILL_NS
    idle_at = np.flatnonzero(gaps > IDLE_FACTOR * med)
    if len(idle_at) > MAX_IDLE:  # the longest ones
        idle_at = np.sort(idle_at[np.argsort(-gaps[idle_at], kind="stable")[:MAX_IDLE]])
    firsts = np.r_[0, idle_at + 1]
    lasts = np.r_[idle_at, n - 1]
    per = max(STEP_SESSIONS, -(-n // MAX_SUBSTEPS))
    edges: list[int] = []
    lengths: list[int] = []
    idle: list[bool] = []
    for k, (i, j) in enumerate(zip(firsts.tolist(), lasts.tolist())):
        a, b, m = int(s[i]), int(s[j]), j - i + 1
        end = b + max(1, (b - a) // (m - 1) if m > 1 and b > a else med)
        nxt = int(s[firsts[k + 1]]) if k + 1 < len(firsts) else None
        if nxt is not None:  # after an idle gap: nxt > b
            end = min(end, nxt)
        bounds = np.r_[np.unique(s[i : j + 1 : per]), end]
        if len(bounds) > 2:  # a steady rate (the counts' relative spread small) is one step
            seg = s[i : j + 1]
            counts = np.diff(np.searchsorted(seg, bounds, side="left"))
            counts[-1] += m - counts.sum()
            rate = counts / np.diff(bounds)
            if rate.std() <= PROFILE_MIN_CV * rate.mean():
                bounds = bounds[[0, -1]]
        bounds = bounds.tolist()
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            edges.append(lo)
            lengths.append(hi - lo)
            idle.append(False)
        if nxt is not None and nxt > end:
            edges.append(end)
            lengths.append(nxt - end)
            idle.append(True)
    return Timeline(np.array(edges, np.int64), np.array(lengths, np.int64), np.array(idle))


def varies(rates: np.ndarray) -> bool:
    """Whether a class's RATES per step, from its first busy step to its last (pauses inside
    included), spread more than PROFILE_MIN_CV relative to their mean: a profile is kept only
    then (a steady class is a start and its arrivals, whatever the other classes do)."""
    busy = np.flatnonzero(rates > 0)
    if len(busy) < 2:
        return False
    inner = rates[busy[0] : busy[-1] + 1]
    return bool(inner.std() > PROFILE_MIN_CV * inner.mean())


def class_profile(tl: Timeline, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A class's rate on the trace's timeline TL: its starts per step over the step's length,
    relative to its busiest step's; returned as (lengths, rates, the step of each
    start), with neighbouring steps of rate 0 merged and those after the last start dropped."""
    at = tl.step_of(starts)
    counts = np.bincount(at, minlength=len(tl.edges)).astype(np.float64)
    rel = counts / tl.lengths
    rel /= max(float(rel.max()), 1e-300)  # the busiest step 1 (a profile's rate is at most 1e6)
    last = int(at.max()) if len(at) else 0
    lengths, rates = tl.lengths[: last + 1], rel[: last + 1]
    zero = rates == 0
    keep = ~(zero & np.r_[False, zero[:-1]])  # a zero step after a zero step joins it
    group = np.cumsum(keep) - 1
    merged = np.bincount(group, weights=lengths.astype(np.float64)).astype(np.int64)
    return merged, rates[keep], group[at]


# -- classes --------------------------------------------------------------------------------


def _gap_ns(gaps: np.ndarray, rtt_ns: int, fallback: int) -> int:
    """The median of the sessions' smallest data spacings (-1: none) below rtt / 2."""
    g = gaps[(gaps > 0) & (gaps < rtt_ns / 2)]
    return int(np.median(g)) if len(g) else fallback


@dataclass
class _Class:
    name: str
    rows: np.ndarray
    ip_version: int
    protos: list[int]
    other: bool
    midstream: bool = False  # TCP sessions without a handshake seen: played without one


def _classes(t: SessionTable, n_classes: int, baseline: bool) -> list[_Class]:
    out: list[_Class] = []
    if baseline:
        for ver in (4, 6):
            rows = np.flatnonzero(t.ip_version == ver)
            if len(rows):
                protos = sorted(set(t.proto[rows].tolist()))
                out.append(
                    _Class("baseline" if ver == 4 else "baseline-v6", rows, ver, protos, True)
                )
        return out
    key = (
        t.ip_version.astype(np.int64) << 24
        | t.proto.astype(np.int64) << 16
        | t.server_port.astype(np.int64)
    )
    codes, uniq = pd.factorize(key, size_hint=FACTORIZE_HINT)
    counts = np.bincount(codes)
    order = np.argsort(-counts, kind="stable")  # ties: first seen first
    top = set(order[:n_classes].tolist())
    for c in order[:n_classes].tolist():
        k = int(uniq[c])
        ver, proto, port = k >> 24, k >> 16 & 0xFF, k & 0xFFFF
        name = f"{PROTO_NAME[proto]}-{port}" + ("-v6" if ver == 6 else "")
        out.append(_Class(name, np.flatnonzero(codes == c), ver, [proto], False))
    rest = ~np.isin(codes, list(top))
    for ver in (4, 6):
        for proto in (6, 17):
            rows = np.flatnonzero(rest & (t.ip_version == ver) & (t.proto == proto))
            if len(rows):
                name = f"{PROTO_NAME[proto]}-other" + ("-v6" if ver == 6 else "")
                out.append(_Class(name, rows, ver, [proto], True))
    return out


def _parts(t: SessionTable, cl: _Class, packets: bool, max_tiers: int) -> list[_Class]:
    """A TCP class as entries of sessions alike: from packets, by how they ended (FIN, RST, none
    seen; those whose SYN was not seen apart, played without a handshake), then each of those by its sessions' durations in up to MAX_TIERS tiers of at least
    TIER_MIN sessions (quantiles of the duration), so that what goes with a session's length
    (its rounds, bytes, pauses, its close) stays together. UDP classes stay whole."""
    if cl.protos != [6]:  # UDP: a round's bytes are the class's datagrams (round_samples)
        return [cl]
    out: list[_Class] = []
    kinds = [cl.rows]
    if packets:
        code = t.close[cl.rows]
        mid = t.midstream[cl.rows]
        kinds = [cl.rows[(code == c) & ~mid] for c in (1, 2, 0)] + [cl.rows[mid]]
    for rows, kind in zip(kinds, ("fin", "rst", "none", "mid")):
        if not len(rows):
            continue
        name = f"{cl.name}-{kind}" if out else cl.name  # the first kind: the class's name
        mid = kind == "mid"
        tiers = min(max_tiers, len(rows) // TIER_MIN)
        if tiers < 2:
            out.append(_Class(name, rows, cl.ip_version, cl.protos, cl.other, mid))
            continue
        dur = t.end_ns[rows] - t.start_ns[rows]
        edges = np.quantile(dur, np.arange(1, tiers) / tiers, method="lower")
        tier = np.searchsorted(edges, dur, side="right")
        used = np.unique(tier)
        for j in used.tolist():
            tname = f"{name}-t{j + 1}" if len(used) > 1 else name
            out.append(_Class(tname, rows[tier == j], cl.ip_version, cl.protos, cl.other, mid))
    return out


def _ports(ports: np.ndarray) -> Any:
    uniq, counts = np.unique(ports, return_counts=True)
    if len(uniq) == 1:
        return int(uniq[0])
    order = np.argsort(-counts, kind="stable")[:MAX_PORTS]
    return {"choices": {int(uniq[i]): int(counts[i]) for i in sorted(order.tolist())}}


def _client_ports(ports: np.ndarray, count: int) -> Any:
    """Client ports. A port that several sessions and at least half of them use (mDNS 5353 ->
    5353, NetBIOS): a choice among the ports seen. Else they are ephemeral ports: exactly the ports seen, with their weights,
    dealt as a deck (`cycle: true`: each port its weight times in every cycle of sum(weights)
    instances, in a shuffled order, as a client stack hands out free ports; drawn with
    replacement, a class with one client host would put two sessions on one 5-tuple, which a
    meter sees as one longer flow), as long as COUNT (the instances to make) stays within
    PORT_REUSE times their number; beyond it,
    a sample of a range the clients draw from: with many distinct ones (EPHEMERAL_SEEN), a
    histogram of up to 64 bins over the range seen, with few, uniform over the systems' range that
    holds them (IANA's 49152-65535, Linux's 32768-60999, else 1024-65535). So more sessions than
    were seen do not crowd onto a few 5-tuples (each reuse merges sessions into one flow for a
    meter)."""
    uniq, counts = np.unique(ports, return_counts=True)
    if len(uniq) == 1 or (counts.max() >= 2 and counts.max() * 2 >= len(ports)):
        return _ports(ports)
    lo, hi = int(uniq[0]), int(uniq[-1])
    if count <= PORT_REUSE * len(uniq):  # dealt out as a deck: no port twice in a cycle
        room = MAX_DECK - len(uniq)  # each weight at least 1: the deck stays within MAX_DECK
        if counts.sum() > room:
            counts = np.maximum(counts * room // counts.sum(), 1)
        deck = {"values": uniq.tolist(), "weights": counts.astype(np.int64).tolist()}
        return {"empirical": deck, "cycle": True}
    if len(uniq) < EPHEMERAL_SEEN:
        for a, b in EPHEMERAL_RANGES:
            if a <= lo and hi <= b:
                return {"uniform": {"min": a, "max": b}}
        return {"uniform": {"min": 1024, "max": 65535}}
    bins = min(64, max(1, -(-(hi - lo) // 1024)))
    edges = np.unique(np.rint(np.linspace(lo, hi, bins + 1)).astype(np.int64))
    counts = np.histogram(ports, bins=edges)[0]  # the last bin holds its upper edge, as ours
    return {"histogram": {"edges": edges.tolist(), "counts": counts.tolist()}}


def _per_round(payload: np.ndarray, rounds: np.ndarray) -> np.ndarray:
    return (payload + rounds // 2) // np.maximum(rounds, 1)


def pauses(t: SessionTable, rows: np.ndarray) -> tuple[Any, Any, int, int]:
    """think and linger of the sessions ROWS in the scenario's form (None: no pause), and their
    means (ns). think: each session's mean pause before a later round's first packet, one sample
    per such pause (so a session of many rounds counts for each); linger: the pause before the
    close of each session whose close was seen. Distributions, not one value a class: a class's
    pauses vary (an HTTP keep-alive timeout of 5 s on used connections, 6 s on unused ones; users
    reading for a second or a minute), and the durations of its sessions with them."""
    cnt = t.think_count[rows]
    has = cnt > 0
    think = linger = None
    think_mean = linger_mean = 0
    if has.any():
        total = t.think_ns[rows][has]
        think_mean = int(total.sum() // cnt[has].sum())
        if think_mean > 0:
            think = _time_form(dist_of(total // cnt[has], cnt[has]))
    lg = t.linger_ns[rows]
    lg = lg[lg >= 0]
    if len(lg):
        linger_mean = int(lg.sum() // len(lg))
        if linger_mean > 0:
            linger = _time_form(dist_of(lg))
    return think, linger, think_mean, linger_mean


def _time_form(d: Any) -> Any:
    """A time distribution for a duration field: one value as a duration text (a bare number
    there would be seconds), a distribution as it is (inside one a bare number is ns)."""
    return _time(d) if isinstance(d, int) else d


def round_samples(
    t: SessionTable, rows: np.ndarray, server: bool, datagrams: pd.DataFrame | None
) -> tuple[np.ndarray, np.ndarray]:
    """The bytes one side sends in one round, as values and weights, pooled over the sessions
    ROWS, so that E[rounds] x E[bytes a round] is the side's mean payload a session:
    - TCP: each session's payload / its rounds, weighted by its rounds (a session of many
      rounds has as many rounds in the pool: one sample a session would overweight the big
      sessions of few rounds);
    - UDP: a round is one datagram a side (rounds: the busier side's datagrams), so the samples
      are the side's datagram payloads (DATAGRAMS, counted from the packets; without them, from
      records, each session's mean datagram) and a 0 ("nothing this round") for each round in
      which that side sent none."""
    payload = t.server_payload if server else t.client_payload
    packets = t.server_packets if server else t.client_packets
    tcp = rows[t.proto[rows] != 17]
    values = [_per_round(payload[tcp], t.rounds[tcp])]
    weights = [t.rounds[tcp].astype(np.float64)]
    udp = rows[t.proto[rows] == 17]
    if len(udp):
        zeros = float(np.maximum(t.rounds[udp] - packets[udp], 0).sum())
        sent = udp[packets[udp] > 0]
        if datagrams is not None and len(datagrams):
            d = datagrams[datagrams["server"].to_numpy() == int(server)]
            pairs = pd.MultiIndex.from_arrays(
                [t.ip_version[udp].astype(np.int64), t.server_port[udp].astype(np.int64)]
            ).unique()
            mine = pd.MultiIndex.from_arrays(
                [d["ip_version"].to_numpy(np.int64), d["server_port"].to_numpy(np.int64)]
            ).isin(pairs)
            values.append(d["payload"].to_numpy(np.int64)[mine])
            weights.append(d["count"].to_numpy(np.float64)[mine])
        else:
            values.append(_per_round(payload[sent], packets[sent]))
            weights.append(packets[sent].astype(np.float64))
        values.append(np.zeros(1, np.int64))
        weights.append(np.array([zeros]))
    v, w = np.concatenate(values), np.concatenate(weights)
    keep = w > 0
    return v[keep], w[keep]


def fit_sessions(
    t: SessionTable, extras: Extras, opts: FitOptions
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The `sessions:` entries learned from T, and the report of what was fitted."""
    report: dict[str, Any] = {"sessions": len(t), "warnings": []}
    eff, jumps = effective_starts(t.start_ns)
    real = t.start_ns - (t.start_ns[0] if len(t) else 0)
    last = int(real[-1]) if len(real) else 0
    keep = not opts.drop_jumps and last <= TIMELINE_MAX_NS
    if keep:
        eff = real
    jumps["kept"] = bool(keep and jumps["jumps"])
    report["clock_jumps"] = jumps
    if jumps["jumps"]:
        what = (
            f"{jumps['jumps']} gap(s) between session starts longer than "
            f"max({JUMP_MIN_NS // 10**9} s, {JUMP_FACTOR} x the median gap) or than "
            f"{JUMP_MAX_NS // (86400 * 10**9)} days (clock jumps, a capture pieced together?)"
        )
        if keep:
            long = (
                f" ({last / 86400e9:,.1f} days: a live run lasts as long; --drop-jumps leaves "
                "them out, --duration scales the whole timeline)"
                if last > LONG_SPAN_NS
                else ""
            )
            report["warnings"].append(
                f"{what}: kept as pauses of the arrival profile, so the scenario spans "
                f"{last / 1e9:,.0f} s like the input{long}"
            )
        else:
            how = "--drop-jumps" if opts.drop_jumps else "too long for a pcap's time stamps"
            report["warnings"].append(
                f"{what}: {jumps['removed_ns'] / 1e9:,.0f} s of the capture's time left out ({how})"
            )
    tl = fit_timeline(eff)
    span = tl.span if len(eff) else 0
    report["span_ns"] = span
    report["timeline"] = {"steps": len(tl.edges), "idle": int(tl.idle.sum())}
    addr = map_addresses(t)
    report["prefixes"] = {f"ipv{v}": n for v, n in addr.prefixes.items()}
    for ver, n in addr.folded.items():
        if n:
            report["warnings"].append(
                f"{addr.prefixes[ver]:,} IPv{ver} prefixes but {V4_SLOTS if ver == 4 else V6_SLOTS:,} "
                f"synthetic ones: {n:,} share a synthetic prefix with another (folded)"
            )
    # the time scale of the output: rate_scale compresses it, duration stretches the count
    factor = opts.rate_scale
    if opts.duration_ns:  # the same rate (times rate_scale) for DURATION instead of the span
        factor = opts.rate_scale * opts.duration_ns / max(span, 1)
    report["count_factor"] = factor
    # the output lasts as long as the input (or DURATION): profile steps and starts scale by it
    tscale = (opts.duration_ns or span) / max(span, 1)
    report["profiles"] = {}
    rtt_known = t.rtt_ns[t.rtt_ns >= 2]
    rtt_all = int(np.median(rtt_known)) if len(rtt_known) else DEFAULT_RTT_NS
    gap_all = _gap_ns(t.min_gap_ns, rtt_all, DEFAULT_GAP_NS)
    entries: list[dict[str, Any]] = []
    report["classes"] = []
    classes = _classes(t, opts.classes, opts.baseline)
    if not opts.baseline:
        packets = extras.wire_hist is not None
        classes = [p for cl in classes for p in _parts(t, cl, packets, opts.tiers)]
    for cl in classes:
        rows = cl.rows
        n = len(rows)
        e: dict[str, Any] = {"name": cl.name}
        if len(cl.protos) == 1:
            e["protocol"] = PROTO_NAME[cl.protos[0]]
        else:
            pc = np.bincount(t.proto[rows], minlength=18)
            e["protocol"] = {"choices": {PROTO_NAME[p]: int(pc[p]) for p in cl.protos}}
        e["client"], c_info = _hosts(cl.ip_version, addr.client_offset[rows], opts.hosts_scale)
        e["server"], s_info = _hosts(cl.ip_version, addr.server_offset[rows], opts.hosts_scale)
        starts = eff[rows]
        lengths, rel, at = class_profile(tl, starts)
        profiled = varies(rel)  # else: a start and the arrivals
        first = 0.0 if profiled else float(starts[0]) * tscale
        e["start"] = format_ns(int(first))
        e["count"] = max(1, int(round(n * factor)))
        e["client_port"] = _client_ports(t.client_port[rows], e["count"])
        e["server_port"] = _ports(t.server_port[rows]) if cl.other else int(t.server_port[rows[0]])
        g = np.diff(starts).astype(np.float64)
        if profiled:  # inter-arrivals inside one step, the step's rate divided out
            same = at[1:] == at[:-1]
            g = g[same] * rel[at[1:][same]]
        g = g / opts.rate_scale
        if n == 1:  # one session in the trace: one a trace's span
            g = np.array([max(span, 1) / opts.rate_scale])
        e["arrival"], arrival_kind = time_dist(g)
        if profiled:
            rates = [float(f"{r:.6g}") for r in rel]
            e["profile"] = {
                "steps": [
                    {"for": _time(length * tscale), "rate": r}
                    for length, r in zip(lengths.tolist(), rates)
                ],
                "split": "even",
            }
            report["profiles"][cl.name] = rates
        rtt = t.rtt_ns[rows]
        rtt = rtt[rtt >= 2]
        rtt_ns = int(np.median(rtt)) if len(rtt) else rtt_all
        e["rtt"] = _time(max(rtt_ns, 2))
        e["gap"] = _time(_gap_ns(t.min_gap_ns[rows], rtt_ns, gap_all))
        mp = t.max_payload[rows]
        mp = mp[mp >= 0]
        hdr = 14 + (20 if cl.ip_version == 4 else 40) + 20
        e["mss"] = int(min(max(int(mp.max()) if len(mp) else DEFAULT_MSS, MIN_MSS), 65535 - hdr))
        fl = t.max_flight[rows]
        fl = fl[fl > 0]
        e["window"] = int(
            min(max(int(np.median(fl)) if len(fl) else DEFAULT_WINDOW, 1), MAX_WINDOW)
        )
        rounds = t.rounds[rows]
        e["rounds"] = dist_of(rounds)
        e["request_bytes"] = dist_of(*round_samples(t, rows, False, extras.datagrams))
        e["response_bytes"] = dist_of(*round_samples(t, rows, True, extras.datagrams))
        closes = t.close[rows]
        e["close"] = close_mix(closes, packets=extras.wire_hist is not None)
        if cl.midstream:
            e["open"] = "none"
        think, linger, think_ns, linger_ns = pauses(t, rows)
        if think is not None:
            e["think"] = think
        if linger is not None and cl.protos != [17]:
            e["linger"] = linger
        entries.append({k: e[k] for k in ENTRY_ORDER if k in e})
        report["classes"].append(
            {
                "name": cl.name,
                "sessions": n,
                "share": n / max(len(t), 1),
                "count": e["count"],
                "arrival": arrival_kind,
                "mean_request_bytes": float(t.client_payload[rows].mean()),
                "mean_response_bytes": float(t.server_payload[rows].mean()),
                "response_per_request_byte": float(
                    t.server_payload[rows].sum() / max(int(t.client_payload[rows].sum()), 1)
                ),
                "rtt_ns": rtt_ns,
                "think_ns": think_ns,
                "linger_ns": linger_ns,
                "rtt_measured": int(len(rtt)),
                "client_hosts": c_info,
                "server_hosts": s_info,
                "close_fin": int(np.count_nonzero(closes == 1)),
                "close_rst": int(np.count_nonzero(closes == 2)),
            }
        )
    if extras.wire_hist is not None and extras.wire_hist.sum():
        report["packet_sizes"] = _size_summary(extras.wire_hist)
    return entries, report


def close_mix(closes: np.ndarray, packets: bool) -> Any:
    """How a class's TCP sessions end, as the share of each: FIN (code 1), RST (2), and, from
    packets, none seen (0: still open when the capture ended, or begun before it and never
    closed in it); flow records without TCP flags cannot tell, so they count only what they saw
    (no close seen at all: `fin`)."""
    counts = {
        "fin": int(np.count_nonzero(closes == 1)),
        "rst": int(np.count_nonzero(closes == 2)),
        "none": int(np.count_nonzero(closes == 0)) if packets else 0,
    }
    counts = {k: v for k, v in counts.items() if v}
    if len(counts) <= 1:
        return next(iter(counts), "fin")
    return {"choices": counts}


def _size_summary(hist: np.ndarray) -> dict[str, float]:
    """Mean and quantiles of the frame sizes counted in HIST (index: bytes)."""
    cdf = np.cumsum(hist) / hist.sum()
    out = {"mean": float((np.arange(len(hist)) * hist).sum() / hist.sum())}
    for q in (0.05, 0.25, 0.5, 0.75, 0.95):
        out[f"p{int(q * 100)}"] = float(np.searchsorted(cdf, q))
    return out


__all__ = [
    "FitOptions",
    "Extras",
    "AddressMap",
    "dist_of",
    "time_dist",
    "map_addresses",
    "offset_text",
    "effective_starts",
    "Timeline",
    "fit_timeline",
    "class_profile",
    "fit_sessions",
]
