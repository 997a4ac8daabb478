"""IP fragmentation classes: `ip4-frag` (the session over IPv4) and `ip6-frag` (over IPv6, with
atomic fragments and extension-header chains). Every client packet is cut; the server's are not."""

from __future__ import annotations

from ntgcore import packets as P

from .common import junk, rng
from .model import Frag, Seg, WirePlan, client_segs, evolve

TINY = 8  # bytes of payload per fragment: the smallest IP allows
CHAIN = (P.IP6_HOP_BY_HOP, P.IP6_DEST_OPTIONS, P.IP6_ROUTING)


def header_len(plan: WirePlan) -> int:
    """The transport header's length in the client's data packets."""
    if plan.proto == "udp":
        return 8
    return 20 + (12 if plan.timestamps else 0)


def _cut(length: int, size: int) -> list[Frag]:
    return [Frag(o, min(size, length - o)) for o in range(0, length, size)]


def _each_seg(plan: WirePlan, name: str, cls: str, how, **kw) -> WirePlan:
    """`plan` with every client segment's `frags` (and other fields) set by `how(seg, l4_len)`."""
    hdr = header_len(plan)
    steps = []
    segs_of = {id(step): segs for _o, step, segs in client_segs(plan)}
    for step in plan.steps:
        if step.from_client:
            segs = tuple(how(s, hdr + len(s.data), hdr) for s in segs_of[id(step)])
            step = evolve(step, segs=segs)
        steps.append(step)
    return evolve(plan, variant=name, cls=cls, steps=tuple(steps), **kw)


def _overlap(seg: Seg, length: int, hdr: int, seed: int, new_wins: bool) -> Seg:
    """The segment as three fragments: the head [0, h), the tail [h, L) and junk over the tail
    (the same checksum sum, so a host that keeps the junk still has a valid datagram). Old data
    wins: tail, junk, head; new data wins: junk, tail, head (the head last, so the datagram is
    complete only after the overlap)."""
    h = (hdr + 7) // 8 * 8
    if length <= h:
        return evolve(seg, frags=tuple(_cut(length, TINY)))
    tail = seg.data[h - hdr :]
    bad = Frag(h, length - h, junk(tail, seed + seg.off, same_sum=True))
    head, real = Frag(0, h), Frag(h, length - h)
    return evolve(seg, frags=(bad, real, head) if new_wins else (real, bad, head))


def variants(plan: WirePlan, seed: int, family: int) -> list[WirePlan]:
    """The fragmentation variants of `plan` over IPv4 (family 4) or IPv6 (6)."""
    cls = f"ip{family}-frag"
    pre = f"frag{family}"
    r = rng(seed, cls)

    def shuffled(frags: list[Frag]) -> tuple[Frag, ...]:
        out = list(frags)
        r.shuffle(out)
        return tuple(out)

    fam = {"family": 6} if family == 6 else {}
    out = [
        _each_seg(
            plan, f"{pre}-tiny", cls, lambda s, n, h: evolve(s, frags=tuple(_cut(n, TINY))), **fam
        ),
        _each_seg(
            plan,
            f"{pre}-reverse",
            cls,
            lambda s, n, h: evolve(s, frags=tuple(reversed(_cut(n, TINY)))),
            **fam,
        ),
        _each_seg(
            plan,
            f"{pre}-random",
            cls,
            lambda s, n, h: evolve(s, frags=shuffled(_cut(n, TINY))),
            **fam,
        ),
        _each_seg(
            plan,
            f"{pre}-duplicate",
            cls,
            lambda s, n, h: evolve(s, frags=tuple(f for f in _cut(n, 16) for _ in (0, 1))),
            **fam,
        ),
        _each_seg(
            plan, f"{pre}-overlap-old", cls, lambda s, n, h: _overlap(s, n, h, seed, False), **fam
        ),
        _each_seg(
            plan, f"{pre}-overlap-new", cls, lambda s, n, h: _overlap(s, n, h, seed, True), **fam
        ),
    ]
    if family == 6:
        out += [
            _each_seg(plan, "frag6-atomic", cls, lambda s, n, h: evolve(s, atomic=True), **fam),
            _each_seg(plan, "frag6-ext-chain", cls, lambda s, n, h: evolve(s, ext=CHAIN), **fam),
            _each_seg(
                plan,
                "frag6-ext-chain-tiny",
                cls,
                lambda s, n, h: evolve(s, ext=CHAIN[:2], frags=tuple(_cut(n, TINY))),
                **fam,
            ),
        ]
    return [evolve(p, seed=seed) for p in out]


def ip4(plan: WirePlan, seed: int) -> list[WirePlan]:
    return variants(plan, seed, 4)


def ip6(plan: WirePlan, seed: int) -> list[WirePlan]:
    return variants(plan, seed, 6)
