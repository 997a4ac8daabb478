"""Evasion variants of attack sessions (docs/ids-coverage.md, "Evasion variants").

`model` is the contract (a `WirePlan`: a session's messages and how each client message goes on
the wire); each other module holds variant classes, registered in `CLASSES` by the name
`--evasions` takes. A class is `make(plan, seed) -> [WirePlan, ...]`: no variant for a session it
does not apply to (a TCP class on a UDP session); the same plan and seed, the same variants.
"""

from __future__ import annotations

from collections.abc import Callable

from . import httpenc, ipfrag, lines, pairs, tcpseg
from .model import WirePlan

CLASSES: dict[str, Callable[[WirePlan, int], list[WirePlan]]] = {
    "ip4-frag": ipfrag.ip4,
    "ip6-frag": ipfrag.ip6,
    "ip4-pairs": pairs.ip4_pairs,
    "ip6-pairs": pairs.ip6_pairs,
    "tcp-pairs": pairs.tcp_pairs,
    "tcp-seg": tcpseg.segmentation,
    "tcp-overlap": tcpseg.overlap,
    "insertion": tcpseg.insertion,
    "urgent": tcpseg.urgent,
    "paws": tcpseg.paws,
    "http-encoding": httpenc.encodings,
    "line-variants": lines.line_variants,
}


class UnknownClass(ValueError):
    pass


def parse_classes(text: str) -> list[str]:
    """`all` or a comma-separated list of class names, in CLASSES' order; an unknown name is an
    error that lists the known ones."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UnknownClass("no evasion class given: use all or some of " + ", ".join(CLASSES))
    if "all" in names:
        return list(CLASSES)
    bad = [n for n in names if n not in CLASSES]
    if bad:
        raise UnknownClass(
            f"unknown evasion class {bad[0]!r}: use all or some of " + ", ".join(CLASSES)
        )
    return [n for n in CLASSES if n in names]


def variants(plan: WirePlan, classes: list[str], seed: int) -> list[WirePlan]:
    """Every variant of `plan` in the given classes, in a fixed order."""
    out: list[WirePlan] = []
    for name in classes:
        out += CLASSES[name](plan, seed)
    return out
