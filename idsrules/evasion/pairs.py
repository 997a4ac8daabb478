"""Overlap pair tests (classes `tcp-pairs`, `ip4-pairs`, `ip6-pairs`): two chunks of the same
bytes, the real one R and a junk one J, placed by each of the nine Allen interval relations in
which two intervals share bytes, sent in both orders, ahead of a held-back head (so both wait in
the host's reassembly queue). The pair-test method is PYROLYSE's (2025): which copy a stack keeps
depends on how the two intervals relate, not just on which came first.

J carries junk only where it overlaps R and the real bytes elsewhere, so the outcome at the
overlap alone decides whether the host got the attack; the bytes neither covers go first as plain
real pieces. For IP fragments the unit is 8 bytes and the junk keeps the checksum's sum (a host
that keeps it still has a valid datagram).
"""

from __future__ import annotations

from .common import junk
from .ipfrag import header_len
from .model import MSS, Frag, Seg, WirePlan, client_segs, evolve

# name -> (R, J) as intervals over four points p0 < p1 < p2 < p3 (indices 0..3)
RELATIONS: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "equals": ((0, 3), (0, 3)),
    "starts": ((0, 3), (0, 1)),  # J starts R and ends inside it
    "started-by": ((0, 1), (0, 3)),
    "finishes": ((0, 3), (2, 3)),
    "finished-by": ((2, 3), (0, 3)),
    "during": ((0, 3), (1, 2)),  # J strictly inside R
    "contains": ((1, 2), (0, 3)),
    "overlaps": ((0, 2), (1, 3)),  # R starts first, J ends last
    "overlapped-by": ((1, 3), (0, 2)),
}
ORDERS = ("real-first", "junk-first")


def _points(start: int, end: int, unit: int) -> list[int] | None:
    """p0..p3 spread over [start, end) on multiples of `unit` (None: too short)."""
    units = (end - start) // unit
    if units < 3:
        return None
    step = units / 3
    pts = [start + round(i * step) * unit for i in range(3)] + [end]
    return pts if all(a < b for a, b in zip(pts, pts[1:])) else None


def _pieces(start: int, end: int, covered: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [start, end) outside every interval of `covered`."""
    out, at = [], start
    for a, b in sorted(covered):
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < end:
        out.append((at, end))
    return out


def _layout(
    length: int, head: int, unit: int, relation: str, order: str
) -> list[tuple[int, int, bool]] | None:
    """(start, end, is_junk) in send order over [0, length): the uncovered real pieces, the pair
    in `order`, the head [0, head) last. None when the chunk is too short."""
    pts = _points(head, length, unit)
    if pts is None:
        return None
    (r0, r1), (j0, j1) = RELATIONS[relation]
    real, bad = (pts[r0], pts[r1]), (pts[j0], pts[j1])
    first = [(a, b, False) for a, b in _pieces(head, length, [real, bad])]
    pair = [(*real, False), (*bad, True)]
    if order == "junk-first":
        pair.reverse()
    return first + pair + [(0, head, False)]


def _junk_over(data: bytes, a: int, b: int, real: tuple[int, int], seed: int, same_sum: bool):
    """data[a:b] with junk where it overlaps `real` (the real bytes elsewhere)."""
    lo, hi = max(a, real[0]), min(b, real[1])
    piece = bytearray(data[a:b])
    if lo < hi:
        piece[lo - a : hi - a] = junk(data[lo:hi], seed + lo, same_sum=same_sum)
    return bytes(piece)


def tcp_pairs(plan: WirePlan, seed: int) -> list[WirePlan]:
    """Every relation and order, over each MSS chunk of each client message."""
    if plan.proto != "tcp":
        return []
    out = []
    for relation in RELATIONS:
        for order in ORDERS:
            steps, off, ok = [], 0, False
            for step in plan.steps:
                if not step.from_client:
                    steps.append(step)
                    continue
                segs: list[Seg] = []
                for i in range(0, len(step.data), MSS):
                    chunk = step.data[i : i + MSS]
                    lay = _layout(len(chunk), min(8, len(chunk) // 4), 1, relation, order)
                    if lay is None:
                        segs.append(Seg(off + i, chunk))
                        continue
                    ok = True
                    (r0, r1), _j = RELATIONS[relation]
                    pts = _points(min(8, len(chunk) // 4), len(chunk), 1)
                    assert pts is not None
                    real = (pts[r0], pts[r1])
                    for a, b, is_junk in lay:
                        data = _junk_over(chunk, a, b, real, seed, False) if is_junk else chunk[a:b]
                        segs.append(Seg(off + i + a, data))
                steps.append(evolve(step, segs=tuple(segs)))
                off += len(step.data)
            if ok:
                name = f"tcp-pair-{relation}-{order}"
                out.append(evolve(plan, variant=name, cls="tcp-pairs", steps=tuple(steps)))
    return out


def _frag_pairs(plan: WirePlan, seed: int, family: int) -> list[WirePlan]:
    hdr = header_len(plan)
    head = (hdr + 7) // 8 * 8
    out = []
    for relation in RELATIONS:
        for order in ORDERS:
            ok = False

            def cut(seg: Seg, relation: str = relation, order: str = order) -> Seg:
                nonlocal ok
                length = hdr + len(seg.data)
                lay = _layout(length, head, 8, relation, order)
                if lay is None:
                    return seg
                ok = True
                (r0, r1), _j = RELATIONS[relation]
                pts = _points(head, length, 8)
                assert pts is not None
                real = (pts[r0], pts[r1])
                frags = []
                for a, b, is_junk in lay:
                    fill = None
                    if is_junk:  # junk over the data bytes the pair shares, the sum kept
                        fill = _junk_over(b"\0" * hdr + seg.data, a, b, real, seed + seg.off, True)
                        lo, hi = max(a, real[0]), min(b, real[1])
                        if lo >= hi:
                            fill = None
                    frags.append(Frag(a, b - a, fill))
                return evolve(seg, frags=tuple(frags))

            steps = []
            segs_of = {id(st): segs for _o, st, segs in client_segs(plan)}
            for step in plan.steps:
                if step.from_client:
                    step = evolve(step, segs=tuple(cut(s) for s in segs_of[id(step)]))
                steps.append(step)
            if ok:
                name = f"frag{family}-pair-{relation}-{order}"
                out.append(
                    evolve(
                        plan,
                        variant=name,
                        cls=f"ip{family}-pairs",
                        steps=tuple(steps),
                        family=6 if family == 6 else plan.family,
                    )
                )
    return out


def ip4_pairs(plan: WirePlan, seed: int) -> list[WirePlan]:
    return _frag_pairs(plan, seed, 4)


def ip6_pairs(plan: WirePlan, seed: int) -> list[WirePlan]:
    return _frag_pairs(plan, seed, 6)
