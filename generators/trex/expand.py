"""Offline expansion of a TRex stateless profile into packets, with our own code (no TRex import).

The input is the profile as plain data (`stl_profile.build_profile(...)`, or its `as_dict()`, the
run folder's `trex-profile-spec.json`); the output is every packet TRex sends for it, in the order
and at the times TRex's scheduler sends them, as numpy arrays or a nanosecond pcap. It follows
TRex v3.08's field engine (trex-core `src/stx/stl/trex_stl_stream_vm.{h,cpp}`,
`trex_stl_stream_node.h`, `trex_stl_dp_core.cpp`) instruction by instruction:

- flow variables: `inc`/`dec` step modulo the range starting from `init` (TRex keeps the value
  before `init` and updates before each packet), `random` from TRex's per-stream generator, the
  MSVC-style LCG `s = 214013 s + 2531011 (mod 2^32)`, output `(s >> 16) & 0x7FFF` (15 bits), seeded
  with `random_seed * 514229 (mod 2^32)` (one data-plane thread); one draw per packet for 1- and
  2-byte variables, two (`(r1 << 16) + r2`) for 4-byte, four for 8-byte ones, in program order,
  value = min + draw mod (max - min + 1). So a 2-byte random variable over more than 32,768 values
  only ever takes its lowest 32,768 (TRex's own behaviour).
- `next_var`: a variable runs only when the one before it wraps (TRex skips its instruction).
- writes: the variable plus `add`, big-endian, at the field's offset plus `offset_fixup`.
- `trim`: the frame is cut to the variable; TRex raises the variable's minimum to 60 and caps its
  maximum at the template's length.
- checksums: `fix_checksums` of TCP/UDP is TRex's `fix_chksum_hw`: with `checksums="wire"` the
  IPv4 header and TCP/UDP checksums are complete (what the server sends on a veth), with
  `checksums="offload"` the IPv4 header checksum is 0 and the TCP/UDP field holds the folded,
  uncomplemented pseudo-header sum (what TRex hands the NIC, and what its simulator writes);
  `fix_chksum` (IPv4 header) and the ICMPv6 fix are complete in both.
- times: packet j of burst b at `isg + b ((n - 1) / pps + ibg) + j / pps` (TRex adds the
  inter-burst gap after the last packet's slot, not after a full n / pps); streams are merged by
  time (ties: profile order).

Every value is a closed form of the packet index (no per-packet loop): variables, `next_var`
chains, the random generator (jumped ahead with precomputed tables), checksums (the payload's
share is a prefix sum of the template), so any range of packets is expanded independently and
the whole thing runs at numpy speed (see benchmarks/bench_trex_expand.py).

Not expanded (refused with the reason): streams with `pg_id` (TRex rewrites the IPv4 ID and TOS
for its per-stream counters; a latency probe carries TRex's send time), a `random_seed` of 0
(TRex seeds from the clock), several data-plane cores.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path

import numpy as np

NS = 1_000_000_000
ETH = 14
MIN_TRIM = 60  # TRex raises a trim variable's minimum to this
MIN_FRAME = 60  # and sends no shorter frame: a shorter template is padded with zeros
LCG_A, LCG_C = 214013, 2531011
SEED_MUL = 514229  # generate_random_seed(): seed * (thread + 1) * 514229
M32 = 0xFFFFFFFF
U64 = np.uint64
CHUNK = 1 << 16  # packets expanded at a time (their rows stay in the CPU's caches)
PCAP_HEADER = (
    np.array([0xA1B23C4D], "<u4").tobytes()
    + np.array([2, 4], "<u2").tobytes()
    + np.array([0, 0, 65535, 1], "<u4").tobytes()
)  # nanosecond pcap, Ethernet
CHECKSUM_MODES = ("wire", "offload")


class ExpandError(ValueError):
    """A profile (or a stream of it) this expansion cannot reproduce, with the reason."""


# ---- the template packet (byte for byte what TRex's Scapy 2.4.3 builds in worker.build_packet) --


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = int(np.frombuffer(data, ">u2").sum(dtype=np.uint64))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _be(value: int, size: int) -> bytes:
    return int(value).to_bytes(size, "big")


def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", "").replace("-", ""))


@dataclass(frozen=True)
class Template:
    data: bytes
    l3: int  # offset of the IP header
    l4: int  # offset of the L4 header
    l4_len: int  # L4 header length (UDP 8, TCP 20, ICMP/ICMPv6 8)
    version: int
    proto: str  # udp | tcp | icmp | icmpv6
    fields: dict  # "IP.src" -> offset, ...
    seg_len: int  # L4 header + payload (what the IP header counts; the frame may be padded)


def template(p: dict) -> Template:
    """The stream's base packet from its spec (`StreamSpec.packet`), as worker.build_packet builds
    it with TRex's Scapy: IPv4 TTL 64, DF, ID 0 / IPv6 hop limit 64; checksums of the template."""
    content = bytes.fromhex(p["payload_hex"])
    n = p["payload_len"]
    payload = (content + bytes(max(0, n - len(content))))[: max(n, len(content))]
    ip, l4 = p["ip"], p["l4"]
    proto = l4["proto"]
    src, dst = ipaddress.ip_address(ip["src"]).packed, ipaddress.ip_address(ip["dst"]).packed
    v = ip["version"]
    pnum = {"udp": 17, "tcp": 6, "icmp": 1, "icmpv6": 58}[proto]
    if proto == "udp":
        hdr = _be(l4["sport"], 2) + _be(l4["dport"], 2) + _be(8 + len(payload), 2) + b"\0\0"
    elif proto == "tcp":
        hdr = (
            _be(l4["sport"], 2)
            + _be(l4["dport"], 2)
            + _be(l4["seq"], 4)
            + _be(l4["ack"], 4)
            + bytes([0x50, l4["flags"]])
            + _be(l4["window"], 2)
            + b"\0\0\0\0"
        )
    else:
        hdr = bytes([l4["type"], l4["code"], 0, 0]) + _be(l4["id"], 2) + _be(l4["seq"], 2)
    seg = bytearray(hdr + payload)
    ck_at = {"udp": 6, "tcp": 16, "icmp": 2, "icmpv6": 2}[proto]
    if proto == "icmp":
        ck = _csum(bytes(seg))
    else:
        pseudo = (
            src
            + dst
            + (_be(pnum, 2) + _be(len(seg), 2) if v == 4 else _be(len(seg), 4) + _be(pnum, 4))
        )
        ck = _csum(pseudo + bytes(seg))
        if proto == "udp" and ck == 0:
            ck = 0xFFFF
    seg[ck_at : ck_at + 2] = _be(ck, 2)
    if v == 4:
        l3h = bytearray(
            bytes([0x45, 0])
            + _be(20 + len(seg), 2)
            + b"\0\0"
            + b"\x40\0"
            + bytes([64, pnum])
            + b"\0\0"
            + src
            + dst
        )
        l3h[10:12] = _be(_csum(bytes(l3h)), 2)
        etype = b"\x08\x00"
    else:
        l3h = bytearray(b"\x60\0\0\0" + _be(len(seg), 2) + bytes([pnum, 64]) + src + dst)
        etype = b"\x86\xdd"
    data = _mac(p["eth"]["dst"]) + _mac(p["eth"]["src"]) + etype + bytes(l3h) + bytes(seg)
    data += bytes(max(0, MIN_FRAME - len(data)))  # TRex pads short templates with zeros
    l4o = ETH + len(l3h)
    name = "IP" if v == 4 else "IPv6"
    fields = {
        f"{name}.src": ETH + (12 if v == 4 else 8),
        f"{name}.dst": ETH + (16 if v == 4 else 24),
    }
    fields["IP.len" if v == 4 else "IPv6.plen"] = ETH + (2 if v == 4 else 4)
    if v == 4:
        fields["IP.chksum"] = ETH + 10
    L4 = {"udp": "UDP", "tcp": "TCP", "icmp": "ICMP", "icmpv6": "ICMPv6EchoRequest"}[proto]
    if proto in ("udp", "tcp"):
        fields.update({f"{L4}.sport": l4o, f"{L4}.dport": l4o + 2})
        if proto == "udp":
            fields["UDP.len"] = l4o + 4
    else:
        fields.update({f"{L4}.id": l4o + 4, f"{L4}.seq": l4o + 6})
    fields[f"{L4}.chksum" if proto != "tcp" else "TCP.chksum"] = l4o + ck_at
    return Template(data, ETH, l4o, len(hdr), v, proto, fields, len(seg))


# ---- TRex's random generator, jumped ahead -------------------------------------------------------


def _lcg_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """state_i = A_i s0 + C_i (mod 2^32) for i = lo (0..65535) and i = hi * 65536."""

    def run(a: int, c: int) -> tuple[np.ndarray, np.ndarray]:
        A = np.empty(1 << 16, np.uint64)
        C = np.empty(1 << 16, np.uint64)
        A[0], C[0] = 1, 0
        m = 1
        am, cm = a, c  # the step of m states
        while m < (1 << 16):  # doubling: state_{m+i} = A_i state_m + C_i
            A[m : 2 * m] = (A[:m] * U64(am)) & U64(M32)
            C[m : 2 * m] = (A[:m] * U64(cm) + C[:m]) & U64(M32)
            am, cm = (am * am) & M32, (am * cm + cm) & M32
            m *= 2
        return A, C

    A_lo, C_lo = run(LCG_A, LCG_C)
    a16 = (int(A_lo[-1]) * LCG_A) & M32  # 65536 steps
    c16 = (int(C_lo[-1]) * LCG_A + LCG_C) & M32
    A_hi, C_hi = run(a16, c16)
    return A_lo, C_lo, A_hi, C_hi


_TABLES: tuple | None = None


def fastrand(seed0: int, index: np.ndarray) -> np.ndarray:
    """TRex's `fastrand` output number `index` (0-based) of a generator seeded with seed0."""
    A_lo, C_lo, A_hi, C_hi = _tables()
    step = (index.astype(np.uint64) + U64(1)) & U64(M32)  # the state after index + 1 steps
    hi = (step >> U64(16)).astype(np.intp)
    lo = (step & U64(0xFFFF)).astype(np.intp)
    s = (A_hi[hi] * U64(seed0) + C_hi[hi]) & U64(M32)
    s = (A_lo[lo] * s + C_lo[lo]) & U64(M32)
    return (s >> U64(16)) & U64(0x7FFF)


def _tables() -> tuple:
    global _TABLES
    if _TABLES is None:
        _TABLES = _lcg_tables()
    return _TABLES


def lcg_state(seed0: int, steps: int) -> int:
    """The generator's state after `steps` steps from seed0."""
    A_lo, C_lo, A_hi, C_hi = _tables()
    steps &= M32
    hi, lo = steps >> 16, steps & 0xFFFF
    s = (int(A_hi[hi]) * seed0 + int(C_hi[hi])) & M32
    return (int(A_lo[lo]) * s + int(C_lo[lo])) & M32


_RUN: list = [np.zeros(0, np.uint64), np.zeros(0, np.uint64)]


def fastrand_run(seed0: int, start: int, count: int) -> np.ndarray:
    """Outputs start .. start + count - 1 of the generator: one multiply-add per output (the
    states j = 1..count steps after the start's, A_j s + C_j, are tabulated once)."""
    if len(_RUN[0]) < count:
        A_lo, C_lo, A_hi, C_hi = _tables()
        j = np.arange(1, count + 1, dtype=np.uint64)
        hi = (j >> U64(16)).astype(np.intp)
        lo = (j & U64(0xFFFF)).astype(np.intp)
        _RUN[0] = (A_lo[lo] * A_hi[hi]) & U64(M32)
        _RUN[1] = (A_lo[lo] * C_hi[hi] + C_lo[lo]) & U64(M32)
    s = U64(lcg_state(seed0, start))
    states = (_RUN[0][:count] * s + _RUN[1][:count]) & U64(M32)
    return (states >> U64(16)) & U64(0x7FFF)


def fastrand_reference(seed0: int, count: int) -> list[int]:
    """The generator as TRex runs it, one step at a time (for the tests)."""
    out, s = [], seed0 & M32
    for _ in range(count):
        s = (LCG_A * s + LCG_C) & M32
        out.append((s >> 16) & 0x7FFF)
    return out


# ---- the field-engine program --------------------------------------------------------------------


@dataclass
class Var:
    name: str
    size: int
    kind: str  # inc | dec | random
    lo: int
    hi: int
    init: int
    step: int
    next_var: str | None
    prev: Var | None = None  # the variable whose wrap runs this one (next_var)
    pos: int = 0  # order among the variables

    @property
    def range(self) -> int:
        return self.hi - self.lo + 1

    @property
    def draws(self) -> int:
        return {1: 1, 2: 1, 4: 2, 8: 4}[self.size]

    @property
    def bss(self) -> int:
        """The value TRex stores before the first packet (peek_prev of init; random: init)."""
        if self.kind == "random":
            return self.init
        s = self.step % self.range
        off = self.init - self.lo
        return self.lo + ((off - s) if self.kind == "inc" else (off + s)) % self.range


@dataclass
class Program:
    tpl: Template
    vars: list[Var]
    writes: list[tuple[Var, int, int, int]]  # var, packet offset, size, add
    trim: Var | None
    fixes: list[str]  # ipv4 | hw | icmpv6
    seed0: int | None  # the generator's seed (random variables only)


def compile_stream(s: dict) -> Program:
    """A stream's spec -> the program as TRex compiles it (trim clamps, offsets, the seed)."""
    if s.get("latency"):
        raise ExpandError(
            f"{s['label']}: latency_pps: a latency probe carries TRex's sequence "
            f"number and send time in its last 16 bytes; not expanded"
        )
    if s.get("pg_id"):
        raise ExpandError(
            f"{s['label']}: stream_stats: TRex rewrites the IPv4 ID and TOS of a "
            f"counted stream (pg_id); not expanded"
        )
    tpl = template(s["packet"])
    byname: dict[str, Var] = {}
    vars_: list[Var] = []
    writes, fixes, trim = [], [], None
    for ins in s["vm"]:
        op = ins["op"]
        if op == "var":
            v = Var(
                ins["name"],
                ins["size"],
                ins["kind"],
                ins["min"],
                ins["max"],
                ins["init"],
                ins.get("step", 1),
                ins.get("next_var"),
                pos=len(vars_),
            )
            if vars_ and vars_[-1].next_var == v.name:
                v.prev = vars_[-1]
            elif any(u.next_var == v.name for u in vars_):
                raise ExpandError(
                    f"{s['label']}: {v.name}: next_var must name the next variable "
                    f"(TRex refuses it otherwise)"
                )
            if v.range == 1 << 64:
                raise ExpandError(
                    f"{s['label']}: {v.name}: a variable over all 2^64 values: TRex's "
                    f"server computes its range as max - min + 1 in 64 bits (0) and "
                    f"dies dividing by it (SIGFPE, seen with a /64 address block)"
                )
            byname[v.name] = v
            vars_.append(v)
        elif op == "write":
            v = byname.get(ins["var"])
            if v is None:
                raise ExpandError(
                    f"{s['label']}: write of {ins['var']!r} before (or without) its variable"
                )
            field = ins["field"]
            off = field if isinstance(field, int) else tpl.fields.get(field)
            if off is None:
                raise ExpandError(f"{s['label']}: field {field!r} is not in the packet")
            writes.append((v, off + ins.get("offset_fixup", 0), v.size, ins.get("add", 0)))
        elif op == "trim":
            trim = byname[ins["var"]]
        elif op == "fix_checksums":
            fixes.append("hw" if ins["l4"] in ("tcp", "udp") else ins["l4"])
        else:
            raise ExpandError(f"{s['label']}: unknown field-engine instruction {op!r}")
    if trim is not None:  # StreamVm::build_flow_var_table
        L = len(tpl.data)
        trim.hi = min(trim.hi, L)
        trim.lo = min(trim.lo, L)
        if trim.lo >= trim.hi:
            raise ExpandError(f"{s['label']}: trim: min packet size {trim.lo} >= max {trim.hi}")
        trim.lo = max(trim.lo, MIN_TRIM)
        if trim.lo > trim.hi:
            raise ExpandError(
                f"{s['label']}: trim: frames of at most {trim.hi} bytes: TRex raises "
                f"the minimum to {MIN_TRIM} and cannot send this range"
            )
        trim.init = min(max(trim.init, trim.lo), trim.hi)
    seed0 = None
    if any(v.kind == "random" for v in vars_):
        if not s.get("random_seed"):
            raise ExpandError(
                f"{s['label']}: random_seed 0: TRex seeds its generator from the "
                f"clock, nothing to reproduce"
            )
        seed0 = (s["random_seed"] * SEED_MUL) & M32  # one data-plane thread (low_end)
    return Program(tpl, vars_, writes, trim, fixes, seed0)


# ---- closed forms of the packet index --------------------------------------------------------------


def _mod_add(off: np.ndarray, R: int) -> np.ndarray:
    if R == 1 << 64:
        return off  # uint64 arithmetic wraps by itself
    return off % U64(R)


def _runs(v: Var, k: np.ndarray) -> np.ndarray:
    """How many times v's instruction has run in packets 0..k (k may be -1)."""
    if v.prev is None:
        return (k + 1).astype(np.uint64)
    p = v.prev
    u = _runs(p, k)
    if p.kind == "random":  # a random variable never skips the next one
        return u
    return _wraps(p, u)


def _wraps(p: Var, u: np.ndarray) -> np.ndarray:
    """How many of p's first u updates wrapped around its range."""
    R, s = p.range, p.step % p.range
    off = (p.bss - p.lo) if p.kind == "inc" else (p.hi - p.bss)
    if R == 1 << 64:
        return ((U64(off) + u * U64(s)) < U64(off)).astype(np.uint64)  # at most one wrap
    return (U64(off) + u * U64(s)) // U64(R)


def _first_packet_of_run(v: Var, u: np.ndarray) -> np.ndarray:
    """The packet in which v's instruction runs for the u-th time (u >= 1)."""
    if v.prev is None:
        return u.astype(np.int64) - 1
    p = v.prev
    if p.kind == "random":
        return _first_packet_of_run(p, u)
    R, s = p.range, p.step % p.range
    if R == 1 << 64 or s == 0:
        raise ExpandError(f"{v.name}: stepped by a 64-bit or zero-step variable; not expanded")
    off = (p.bss - p.lo) if p.kind == "inc" else (p.hi - p.bss)
    r = (u * U64(R) - U64(off) + U64(s - 1)) // U64(s)  # fewest updates of p with u wraps
    return _first_packet_of_run(p, r)


def _ran_at(v: Var, k: np.ndarray) -> np.ndarray:
    return _runs(v, k) > _runs(v, k - 1)


def _compose(v: Var, r: list) -> np.ndarray:
    if v.size <= 2:
        raw = r[0]
    elif v.size == 4:
        raw = (r[0] << U64(16)) + r[1]
    else:
        raw = (((r[0] << U64(16)) + r[1]) << U64(32)) + (r[2] << U64(16)) + r[3]
    if v.size == 8 and v.range == 1 << 64:
        return raw
    return U64(v.lo) + raw % U64(v.range)


def _rand_values(
    prog: Program, v: Var, k: np.ndarray, block: np.ndarray | None = None
) -> np.ndarray:
    """v's value in packet k: drawn in the packet where it last ran. `block`: the draws of
    contiguous packets k, one row each (every random variable runs in every packet)."""
    if block is not None:
        at = sum(w.draws for w in prog.vars if w.kind == "random" and w.pos < v.pos)
        return _compose(v, [block[:, at + j] for j in range(v.draws)])
    u = _runs(v, k)
    fresh = u > 0
    kk = _first_packet_of_run(v, np.maximum(u, U64(1))) if v.prev is not None else k
    draws = prog.vars
    base = np.zeros(len(k), np.uint64)  # draws made in packets before kk
    inpkt = np.zeros(len(k), np.uint64)  # draws made in kk before v's
    for w in draws:
        if w.kind != "random":
            continue
        base += U64(w.draws) * _runs(w, kk - 1)
        if w.pos < v.pos:
            inpkt += U64(w.draws) * _ran_at(w, kk).astype(np.uint64)
    idx = base + inpkt
    val = _compose(v, [fastrand(prog.seed0, idx + U64(j)) for j in range(v.draws)])
    return np.where(fresh, val, U64(v.init)) if v.prev is not None else val


def var_values(prog: Program, v: Var, k: np.ndarray, block: np.ndarray | None = None) -> np.ndarray:
    """v's value after its instruction in packet k (uint64)."""
    if v.kind == "random":
        return _rand_values(prog, v, k, block)
    u = _runs(v, k)
    R, s = v.range, v.step % v.range
    if v.kind == "inc":
        off = _mod_add(U64(v.bss - v.lo) + u * U64(s), R)
        return U64(v.lo) + off
    off = _mod_add(U64(v.hi - v.bss) + u * U64(s), R)
    return U64(v.hi) - off


# ---- packets ----------------------------------------------------------------------------------------


def _words(m: np.ndarray, a: int, b: int) -> np.ndarray:
    """Sum of the big-endian 16-bit words of columns a..b (b - a even) of each row."""
    cols = m[:, a:b].astype(np.uint32)
    return (cols[:, 0::2] << 8).sum(axis=1, dtype=np.uint64) + cols[:, 1::2].sum(
        axis=1, dtype=np.uint64
    )


def _fold(total: np.ndarray) -> np.ndarray:
    for _ in range(3):
        total = (total & U64(0xFFFF)) + (total >> U64(16))
    return total


def _field(buf: np.ndarray, off: int, size: int) -> np.ndarray:
    """Column `off`..`off + size` of every row of the C-contiguous uint8 matrix buf as one
    big-endian integer field: assigning to it writes all rows in one pass (no byte-swapped copy)."""
    dt = np.dtype(
        {"names": ["f"], "formats": [f">u{size}"], "offsets": [off], "itemsize": buf.shape[1]}
    )
    return buf.view(dt).reshape(len(buf))["f"]


def _prefix_sums(data: bytes, start: int) -> np.ndarray:
    """P[j] = ones'-complement (unfolded) sum of data[start:start + j] as 16-bit words."""
    tail = np.frombuffer(data[start:], np.uint8).astype(np.uint64)
    w = np.zeros(len(tail) + 1, np.uint64)
    w[1:] = np.where(np.arange(len(tail)) % 2 == 0, tail << U64(8), tail)
    return np.cumsum(w)


def _contrib(off: int, size: int, w: np.ndarray) -> np.ndarray:
    """What `size` big-endian bytes of w at packet offset `off` add to a 16-bit word sum taken
    from an even offset (unfolded)."""
    if off % 2 == 0:
        if size == 1:
            return w << U64(8)
        if size == 2:
            return w
        if size == 4:
            return (w >> U64(16)) + (w & U64(0xFFFF))
        return (
            (w >> U64(48))
            + ((w >> U64(32)) & U64(0xFFFF))
            + ((w >> U64(16)) & U64(0xFFFF))
            + (w & U64(0xFFFF))
        )
    total = np.zeros(len(w), np.uint64)
    for i in range(size):  # odd offset: byte by byte
        b = (w >> U64(8 * (size - 1 - i))) & U64(0xFF)
        total += b << U64(8) if (off + i) % 2 == 0 else b
    return total


class StreamExpander:
    """One stream's packets for any packet indices: frames, lengths, times."""

    def __init__(self, s: dict, checksums: str = "wire") -> None:
        if checksums not in CHECKSUM_MODES:
            raise ExpandError(f"checksums={checksums!r}: expected one of {CHECKSUM_MODES}")
        self.spec = s
        self.prog = compile_stream(s)
        self.checksums = checksums
        t = self.prog.tpl
        self.width = len(t.data)
        self.row = np.frombuffer(t.data, np.uint8)
        self.hdr_end = t.l4 + t.l4_len
        if any(off + size > self.hdr_end for _, off, size, _ in self.prog.writes):
            raise ExpandError(f"{s['label']}: a write into the payload; not expanded")
        self.payload_sums = _prefix_sums(t.data, self.hdr_end)
        ck = [f for f in t.fields if f.endswith("chksum") and not f.startswith("IP.")]
        self.l4_ck = t.fields[ck[0]]
        self._plan_sums()
        self._plan_puts()
        rnd = [v for v in self.prog.vars if v.kind == "random"]
        self.draws = sum(v.draws for v in rnd)
        self.heads_only = all(v.prev is None for v in rnd)
        m = s["mode"]
        self.ipg_ns = NS / s["pps"]
        self.isg_ns = s["isg_us"] * 1000.0
        if m["type"] == "multi_burst":
            self.burst, self.count = m["pkts_per_burst"], m["count"]
            self.ibg_ns = m["ibg_us"] * 1000.0
        else:
            self.burst, self.count, self.ibg_ns = None, 1, 0.0

    def _plan_sums(self) -> None:
        """The checksums as sums of known parts: each region's template words with the written
        bytes (and the checksum fields) zeroed, plus what the written values add. Overlapping or
        region-straddling writes fall back to summing the built frames."""
        t = self.prog.tpl
        z = bytearray(t.data)
        covered: set[int] = set()
        self.fast = True
        for _, off, size, _ in self.prog.writes:
            span = set(range(off, off + size))
            if span & covered:
                self.fast = False
            covered |= span
            z[off : off + size] = bytes(size)
        ip_ck = {24, 25} if t.version == 4 else set()
        l4_ck = {self.l4_ck, self.l4_ck + 1}
        for a in ip_ck | l4_ck:
            z[a] = 0
        self.regions = {}
        spans = {
            "ip": (14, 34),
            "pseudo": (26, 34) if t.version == 4 else (22, 54),
            "l4": (t.l4, self.hdr_end),
        }
        for name, (a, b) in spans.items():
            const = int(np.frombuffer(bytes(z[a:b]), ">u2").sum(dtype=np.uint64))
            inside = []
            for i, (_, off, size, _) in enumerate(self.prog.writes):
                span = set(range(off, off + size))
                if span & (ip_ck | l4_ck):
                    if not span <= (ip_ck | l4_ck):
                        self.fast = False
                    continue  # the fix zeroes the field first
                if a <= off and off + size <= b:
                    inside.append(i)
                elif off < b and off + size > a:
                    self.fast = False
            self.regions[name] = (const, inside)

    def _plan_puts(self) -> None:
        """Writes to adjacent bytes are put as one value of 2, 4 or 8 bytes (when they do not
        overlap: else each in program order)."""
        w = self.prog.writes
        self.puts = [(off, size, [(i, 0)]) for i, (_, off, size, _) in enumerate(w)]
        if not self.fast:
            return
        order = sorted(range(len(w)), key=lambda i: w[i][1])
        groups: list[list[int]] = []
        for i in order:
            g = groups[-1] if groups else None
            if (
                g
                and w[g[-1]][1] + w[g[-1]][2] == w[i][1]
                and sum(w[j][2] for j in g) + w[i][2] <= 8
            ):
                g.append(i)
            else:
                groups.append([i])
        puts = []
        for g in groups:
            size = sum(w[j][2] for j in g)
            if len(g) > 1 and size in (2, 4, 8):
                puts.append((w[g[0]][1], size, [(g[0], 0)] + [(j, 8 * w[j][2]) for j in g[1:]]))
            else:
                puts += [(w[j][1], w[j][2], [(j, 0)]) for j in g]
        self.puts = puts

    def _sum(self, region: str, written: list[np.ndarray], n: int) -> np.ndarray:
        const, inside = self.regions[region]
        total = np.full(n, const, np.uint64)
        for i in inside:
            _, off, size, _ = self.prog.writes[i]
            total += _contrib(off, size, written[i])
        return total

    def packets(self, duration_s: float | None = None) -> int:
        m = self.spec["mode"]
        if m["type"] == "single_burst":
            return m["total_pkts"]
        if m["type"] == "multi_burst":
            return m["pkts_per_burst"] * m["count"]
        if duration_s is None:
            raise ExpandError(f"{self.spec['label']}: a continuous stream needs a duration")
        return max(0, int(np.ceil((duration_s * NS - self.isg_ns) / self.ipg_ns - 1e-9)))

    def times_ns(self, k: np.ndarray) -> np.ndarray:
        if self.burst is None:
            t = self.isg_ns + k * self.ipg_ns
        else:
            b, j = np.divmod(k, self.burst)
            t = self.isg_ns + b * ((self.burst - 1) * self.ipg_ns + self.ibg_ns) + j * self.ipg_ns
        return np.rint(t).astype(np.int64)

    def frames(
        self, k: np.ndarray, buf: np.ndarray | None = None, headroom: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows (len(k), width) of frames (bytes past each length are not part of it), lengths.
        `buf`: a C-contiguous (len(k), headroom + at least width) uint8 matrix to build them in,
        from column `headroom` on (the rows returned are a view of it)."""
        prog = self.prog
        n = len(k)
        if buf is None:
            buf, headroom = np.empty((n, self.width), np.uint8), 0
        m = buf[:, headroom : headroom + self.width]
        self._dst = (buf, headroom)
        m[:] = self.row
        k = np.asarray(k, np.int64)
        if not prog.vars:
            return m, np.full(n, self.width, np.int64)
        block = None
        if self.draws and self.heads_only and n and k[-1] - k[0] + 1 == n:
            block = fastrand_run(prog.seed0, int(k[0]) * self.draws, n * self.draws).reshape(
                n, self.draws
            )
        values = {v.name: var_values(prog, v, k, block) for v in prog.vars}
        written = []
        for v, _off, size, add in prog.writes:
            val = values[v.name]
            if add:
                val = (val + U64(add % (1 << (8 * size)))) if add > 0 else val - U64(-add)
            if size < 8 and (add or v.hi >> (8 * size)):
                val = val & U64((1 << (8 * size)) - 1)
            written.append(val)
        for off, size, parts in self.puts:  # adjacent writes as one
            val = written[parts[0][0]]
            for i, shift in parts[1:]:
                val = (val << U64(shift)) | written[i]
            self._set(off, size, val)
        length = (
            values[prog.trim.name].astype(np.int64)
            if prog.trim is not None
            else np.full(n, self.width, np.int64)
        )
        for fix in prog.fixes:
            if fix == "icmp":  # fix_chksum: the IPv4 header
                self._ipv4(m, written, full=True)
            elif fix == "hw":
                self._ipv4(m, written, full=self.checksums == "wire")
                self._l4(m, written, length, full=self.checksums == "wire")
            elif fix == "icmpv6":
                self._l4(m, written, length, full=True)
        return m, length

    def _set(self, off: int, size: int, values: np.ndarray) -> None:
        buf, headroom = self._dst
        _field(buf, headroom + off, size)[...] = values

    def _ipv4(self, m: np.ndarray, written: list, full: bool) -> None:
        if self.prog.tpl.version != 4:
            return
        if not full:
            m[:, 24:26] = 0
            return
        if self.fast:
            total = self._sum("ip", written, len(m))
        else:
            m[:, 24:26] = 0
            total = _words(m, 14, 34)
        self._set(24, 2, ~_fold(total) & U64(0xFFFF))

    def _l4(self, m: np.ndarray, written: list, length: np.ndarray, full: bool) -> None:
        t = self.prog.tpl
        at = self.l4_ck
        n = len(m)
        if self.prog.trim is None:  # the IP header's length, not the (padded) frame's
            length = np.full(n, t.l4 + t.seg_len, np.int64)
        seg = (length - t.l4).astype(np.uint64)
        pnum = {"udp": 17, "tcp": 6, "icmpv6": 58}[t.proto]
        if not self.fast:
            m[:, at : at + 2] = 0
        if t.version == 4:
            base = self._sum("pseudo", written, n) if self.fast else _words(m, 26, 34)
            pseudo = base + U64(pnum) + seg
        else:
            base = self._sum("pseudo", written, n) if self.fast else _words(m, 22, 54)
            pseudo = base + U64(pnum) + (seg >> U64(16)) + (seg & U64(0xFFFF))
        if not full:
            self._set(at, 2, _fold(pseudo))
            return
        hdr = self._sum("l4", written, n) if self.fast else _words(m, t.l4, self.hdr_end)
        total = pseudo + hdr + self.payload_sums[length - self.hdr_end]
        c = ~_fold(total) & U64(0xFFFF)
        if t.proto == "udp":
            c[c == 0] = 0xFFFF
        self._set(at, 2, c)


# ---- a whole profile ---------------------------------------------------------------------------------


def _streams(profile) -> list[dict]:
    if is_dataclass(profile):
        return [asdict(s) for s in profile.streams]
    if isinstance(profile, dict):
        return list(profile["streams"])
    return [asdict(s) if is_dataclass(s) else s for s in profile]


def _duration(profile, duration_s: float | None) -> float | None:
    if duration_s is not None:
        return duration_s
    if is_dataclass(profile):
        return profile.duration_s
    if isinstance(profile, dict):
        return profile.get("duration_s")
    return None


@dataclass
class Chunk:
    frames: np.ndarray  # (n, width) uint8
    lengths: np.ndarray  # int64
    times_ns: np.ndarray  # int64, from the start of the traffic
    stream: np.ndarray  # int32 index of the stream
    index: np.ndarray  # int64 packet index inside its stream
    buffer: np.ndarray | None = None  # the rows with their headroom (frames is a view of it)

    def frame(self, i: int) -> bytes:
        return self.frames[i, : self.lengths[i]].tobytes()


def expand(
    profile,
    *,
    checksums: str = "wire",
    duration_s: float | None = None,
    chunk: int = CHUNK,
    max_packets: int | None = None,
    headroom: int = 0,
) -> Iterator[Chunk]:
    """The profile's packets in TRex's sending order, in chunks of at most `chunk` packets.

    `duration_s` bounds continuous streams (default: the profile's duration); `max_packets`
    stops after that many packets (in time order); `headroom` bytes are left free before each
    frame's row (the pcap writer puts its record header there: no copy)."""
    streams = _streams(profile)
    dur = _duration(profile, duration_s)
    ex = [StreamExpander(s, checksums) for s in streams]
    counts = [e.packets(dur) for e in ex]
    width = max((e.width for e in ex), default=0)

    def rows(n: int) -> tuple[np.ndarray, np.ndarray]:
        buf = np.empty((n, headroom + width), np.uint8)
        return buf, buf[:, headroom:]

    if len(ex) == 1:  # one stream: its own order is the time order
        total = counts[0] if max_packets is None else min(counts[0], max_packets)
        for a in range(0, total, chunk):
            k = np.arange(a, min(total, a + chunk), dtype=np.int64)
            buf, _ = rows(len(k))
            f, n = ex[0].frames(k, buf, headroom)
            yield Chunk(f, n, ex[0].times_ns(k), np.zeros(len(k), np.int32), k, buf)
        return
    times = np.concatenate([e.times_ns(np.arange(c, dtype=np.int64)) for e, c in zip(ex, counts)])
    sid = np.concatenate([np.full(c, i, np.int32) for i, c in enumerate(counts)])
    idx = np.concatenate([np.arange(c, dtype=np.int64) for c in counts])
    order = np.lexsort((sid, times))  # by time, ties in profile order
    if max_packets is not None:
        order = order[:max_packets]
    for a in range(0, len(order), chunk):
        sel = order[a : a + chunk]
        s, k, t = sid[sel], idx[sel], times[sel]
        buf, f = rows(len(sel))
        n = np.empty(len(sel), np.int64)
        for i in np.unique(s):
            r = np.flatnonzero(s == i)
            fi, ni = ex[i].frames(k[r])
            f[r, : fi.shape[1]] = fi
            n[r] = ni
        yield Chunk(f, n, t, s, k, buf)


def frames(profile, **kw) -> list[tuple[int, bytes]]:
    """Every packet as (time in ns from the start, frame bytes): small profiles and tests."""
    return [
        (int(c.times_ns[i]), c.frame(i))
        for c in expand(profile, **kw)
        for i in range(len(c.lengths))
    ]


def pcap_records(c: Chunk, t0_ns: int = 0) -> np.ndarray:
    """The chunk as pcap records (16-byte header + frame each), one flat uint8 buffer (in place
    when the chunk was expanded with 16 bytes of headroom)."""
    n, w = c.frames.shape
    if c.buffer is not None and c.buffer.shape[1] == 16 + w:
        rec = c.buffer
    else:
        rec = np.empty((n, 16 + w), np.uint8)
        rec[:, 16:] = c.frames
    ts = t0_ns + c.times_ns
    hdr = np.empty((n, 4), "<u4")
    hdr[:, 0] = ts // NS
    hdr[:, 1] = ts % NS
    hdr[:, 2] = c.lengths
    hdr[:, 3] = c.lengths
    rec[:, :16] = hdr.view(np.uint8).reshape(n, 16)
    if (c.lengths == w).all():
        return rec.reshape(-1)
    keep = (np.arange(16 + w) < (16 + c.lengths)[:, None]).reshape(-1)
    return rec.reshape(-1)[keep]


def write_pcap(profile, path: str | Path, *, t0_ns: int = 0, **kw) -> dict:
    """Expand the profile into a nanosecond pcap at `path`; returns packets and bytes written."""
    packets = byts = 0
    with open(path, "wb") as out:
        out.write(PCAP_HEADER)
        for c in expand(profile, headroom=16, **kw):
            buf = pcap_records(c, t0_ns)
            out.write(buf.data)
            packets += len(c.lengths)
            byts += int(c.lengths.sum())
    return {"packets": packets, "bytes": byts, "path": str(path)}


__all__ = [
    "CHECKSUM_MODES",
    "Chunk",
    "ExpandError",
    "StreamExpander",
    "compile_stream",
    "expand",
    "fastrand",
    "fastrand_reference",
    "frames",
    "template",
    "write_pcap",
]
