"""TCP classes: `tcp-seg` (tiny and reordered segments), `tcp-overlap` (segments that overlap
with other bytes: which copy wins), `insertion` (packets an IDS may take and the host drops),
`urgent` (an urgent byte inside the data) and `paws` (an old timestamp). Only TCP sessions."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ntgcore import packets as P

from .common import junk, rng
from .model import MSS, Seg, WirePlan, evolve, plain_segs

OUT_OF_WINDOW = 1 << 24  # bytes beyond any window a stack here offers (64 KiB scaled up to 16 MiB)
OLD_TS = 1 << 20  # ms older than the connection's clock: PAWS drops such a segment


def _rebuild(
    plan: WirePlan, name: str, cls: str, per_chunk: Callable[[int, bytes], Iterable[Seg]], **kw
) -> WirePlan | None:
    """`plan` with each client step cut into MSS chunks, each chunk's segments made by
    `per_chunk(offset, chunk)`. None for a UDP session."""
    if plan.proto != "tcp":
        return None
    steps = []
    off = 0
    for step in plan.steps:
        if step.from_client:
            segs: list[Seg] = []
            for i in range(0, len(step.data), MSS):
                segs += per_chunk(off + i, step.data[i : i + MSS])
            steps.append(evolve(step, segs=tuple(segs)))
            off += len(step.data)
        else:
            steps.append(step)
    return evolve(plan, variant=name, cls=cls, steps=tuple(steps), **kw)


def _keep(*plans: WirePlan | None) -> list[WirePlan]:
    return [p for p in plans if p is not None]


def segmentation(plan: WirePlan, seed: int) -> list[WirePlan]:
    r = rng(seed, "tcp-seg")

    def shuffled(off: int, chunk: bytes) -> list[Seg]:
        segs = list(plain_segs(chunk, off, 8))
        r.shuffle(segs)
        return segs

    return _keep(
        _rebuild(plan, "tcp-seg-1byte", "tcp-seg", lambda o, c: plain_segs(c, o, 1)),
        _rebuild(plan, "tcp-seg-reverse", "tcp-seg", lambda o, c: reversed(plain_segs(c, o, 8))),
        _rebuild(plan, "tcp-seg-random", "tcp-seg", shuffled),
    )


def _split(chunk: bytes) -> int:
    """Where a chunk is cut into a held-back head and a tail sent first (0: too short)."""
    return min(8, len(chunk) // 2)


def overlap(plan: WirePlan, seed: int) -> list[WirePlan]:
    """Out-of-order tails overlapped by junk, the head sent last (so both copies wait in the
    host's queue): `old` the real tail first, `new` the junk first, `covers` junk strictly inside
    the real tail, which then covers it; `retransmit` the whole chunk in order, then junk over it
    (data the host has already taken)."""

    def shape(kind: str) -> Callable[[int, bytes], list[Seg]]:
        def per_chunk(off: int, chunk: bytes) -> list[Seg]:
            a = _split(chunk)
            if kind == "retransmit":
                return [Seg(off, chunk), Seg(off, junk(chunk, seed + off))]
            if a == 0:
                return [Seg(off, chunk)]
            head, tail = Seg(off, chunk[:a]), Seg(off + a, chunk[a:])
            if kind == "covers":
                inner = chunk[a + 1 : -1]
                if not inner:
                    return [Seg(off, chunk)]
                return [Seg(off + a + 1, junk(inner, seed + off)), tail, head]
            bad = Seg(off + a, junk(chunk[a:], seed + off))
            return [tail, bad, head] if kind == "old" else [bad, tail, head]

        return per_chunk

    return _keep(
        *(
            _rebuild(plan, f"tcp-overlap-{k}", "tcp-overlap", shape(k))
            for k in ("old", "new", "covers", "retransmit")
        )
    )


def insertion(plan: WirePlan, seed: int) -> list[WirePlan]:
    """A packet the host drops ahead of the real data: junk at the same offset with a bad
    checksum, with a TTL that ends at the router, without ACK; junk beyond the window; a RST
    outside the window; a SYN in the established session."""

    def first(trick: Callable[[int, bytes], list[Seg]]) -> Callable[[int, bytes], list[Seg]]:
        return lambda o, c: [*trick(o, c), Seg(o, c)]

    def j(o: int, c: bytes) -> bytes:
        return junk(c, seed + o)

    return _keep(
        _rebuild(
            plan,
            "ins-bad-checksum",
            "insertion",
            first(lambda o, c: [Seg(o, j(o, c), bad_checksum=True)]),
        ),
        _rebuild(plan, "ins-ttl", "insertion", first(lambda o, c: [Seg(o, j(o, c), hops=1)])),
        _rebuild(
            plan, "ins-no-ack", "insertion", first(lambda o, c: [Seg(o, j(o, c), flags=P.PSH)])
        ),
        _rebuild(
            plan,
            "ins-outside-window",
            "insertion",
            first(lambda o, c: [Seg(o, j(o, c), seq_shift=OUT_OF_WINDOW)]),
        ),
        _rebuild(
            plan,
            "ins-rst-outside-window",
            "insertion",
            first(lambda o, c: [Seg(o, b"", P.RST | P.ACK, seq_shift=OUT_OF_WINDOW)]),
        ),
        _rebuild(
            plan,
            "ins-syn-established",
            "insertion",
            first(
                lambda o, c: [
                    Seg(o, b"", P.SYN, seq_shift=rng(seed, o).randrange(1 << 16, 1 << 30))
                ]
            ),
        ),
    )


def urgent(plan: WirePlan, seed: int) -> list[WirePlan]:
    """One junk byte in the middle of every client message, marked urgent (the urgent pointer one
    past it, as Linux reads it): a host that takes urgent data out of band hands its application
    the stream without it; one that keeps it inline, or ignores URG, has an extra byte in the
    attack. The bytes after it move one position up in sequence space. One a message, not one a
    segment: Linux keeps one urgent mark at a time, and a second mark that arrives before the
    application has read past the first leaves the first byte inline, so the host's stream would
    depend on how fast its reader is."""
    if plan.proto != "tcp":
        return []
    steps = []
    off = 0
    extra = 0
    for step in plan.steps:
        if not step.from_client:
            steps.append(step)
            continue
        data = step.data
        mid = len(data) // 2
        segs = []
        for i in range(0, len(data), MSS - 1):
            chunk = data[i : i + MSS - 1]
            if i <= mid < i + len(chunk):
                p = mid - i
                byte = junk(chunk[p : p + 1], seed + off + mid)
                segs.append(Seg(off + i + extra, chunk[:p] + byte + chunk[p:], urgent=p + 1))
                extra += 1
            else:
                segs.append(Seg(off + i + extra, chunk))
        steps.append(evolve(step, segs=tuple(segs)))
        off += len(data)
    return [evolve(plan, variant="urgent-byte", cls="urgent", steps=tuple(steps))]


def paws(plan: WirePlan, seed: int) -> list[WirePlan]:
    """Timestamps on; junk at the same offset with a timestamp older than the connection's, then
    the real data (RFC 7323's PAWS drops the old one)."""
    return _keep(
        _rebuild(
            plan,
            "paws-old-timestamp",
            "paws",
            lambda o, c: [Seg(o, junk(c, seed + o), ts_back=OLD_TS), Seg(o, c)],
            timestamps=True,
        )
    )
