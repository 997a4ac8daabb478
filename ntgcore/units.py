"""Parsing of the quantities a scenario is written in: durations and packet rates.

Durations are kept as integer nanoseconds, parsed with Decimal so that `1.1s` is exactly
1_100_000_000 ns and not what a float would make of it.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

NS_PER_S = 1_000_000_000

_DURATION_UNITS = {
    "ns": Decimal(1),
    "us": Decimal(1_000),
    "µs": Decimal(1_000),
    "ms": Decimal(1_000_000),
    "s": Decimal(NS_PER_S),
    "m": Decimal(60 * NS_PER_S),
    "min": Decimal(60 * NS_PER_S),
    "h": Decimal(3600 * NS_PER_S),
}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_RATE_UNITS = {"pps": Decimal(1), "kpps": Decimal(1_000), "mpps": Decimal(1_000_000)}
# Amounts outside 1e-30 .. 1e30 are refused before any arithmetic: nothing a scenario means is
# that large or that small, and exact Decimal arithmetic on 1e999999 overflows or makes an integer
# of a million digits (a hang).
_MAX_EXPONENT = 30
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Zµ]*)\s*$")


def _bounded(amount: Decimal) -> Decimal:
    """`amount` if it is a finite number of moderate size; ValueError if not."""
    if not amount.is_finite():
        raise ValueError("must be a finite number")
    if amount and not -_MAX_EXPONENT <= amount.adjusted() <= _MAX_EXPONENT:
        raise ValueError(f"must lie between 1e-{_MAX_EXPONENT} and 1e{_MAX_EXPONENT}")
    return amount


def _split(value: str) -> tuple[Decimal, str]:
    m = _QUANTITY.match(value)
    if not m:
        raise ValueError("expected a number followed by a unit")
    try:
        return Decimal(m.group(1)), m.group(2)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise ValueError("not a number") from exc


def parse_duration_ns(value: object) -> int:
    """`1.5s`, `250ms`, `10us`, `5ns`, `2m`, or a bare number of seconds -> integer ns."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 1.5s, 250ms, 10us or 5ns")
    if isinstance(value, int):
        amount, unit = Decimal(value), "s"
    elif isinstance(value, float):
        amount, unit = Decimal(repr(value)), "s"
    elif isinstance(value, str):
        try:
            amount, unit = _split(value)
        except ValueError:
            raise ValueError("expected a duration such as 1.5s, 250ms, 10us or 5ns") from None
        unit = unit or "s"
    else:
        raise ValueError("expected a duration such as 1.5s, 250ms, 10us or 5ns")
    scale = _DURATION_UNITS.get(unit if unit in _DURATION_UNITS else unit.lower())
    if scale is None:
        raise ValueError(f"unknown time unit {unit!r}; use ns, us, ms, s, m or h")
    ns = _bounded(amount) * scale
    if ns != ns.to_integral_value():
        raise ValueError("finer than one nanosecond")
    return int(ns)


def parse_rate_pps(value: object) -> Decimal:
    """`1000`, `1000pps`, `2.5kpps`, `1Mpps` -> packets per second as a Decimal."""
    if isinstance(value, bool):
        raise ValueError("expected a packet rate such as 1000, 2.5kpps or 1Mpps")
    if isinstance(value, int):
        return _bounded(Decimal(value))
    if isinstance(value, float):
        return _bounded(Decimal(repr(value)))
    if isinstance(value, str):
        try:
            amount, unit = _split(value)
        except ValueError:
            raise ValueError("expected a packet rate such as 1000, 2.5kpps or 1Mpps") from None
        scale = _RATE_UNITS.get((unit or "pps").lower())
        if scale is None:
            raise ValueError(f"unknown rate unit {unit!r}; use pps, kpps or Mpps")
        return _bounded(amount) * scale
    raise ValueError("expected a packet rate such as 1000, 2.5kpps or 1Mpps")


def parse_size_bytes(value: object) -> int:
    """`512M`, `1.5GiB`, `64k`, `2GB`, `1048576` -> bytes. K, M, G, T (with or without `iB`)
    are powers of 1024 (as in `docker --memory`), kB, MB, GB, TB powers of 1000; a
    bare number is bytes. Fractions of a byte are refused."""
    wanted = "expected a size such as 512M, 1.5GiB, 64k or a number of bytes"
    if isinstance(value, bool):
        raise ValueError(wanted)
    if isinstance(value, int):
        amount, unit = Decimal(value), ""
    elif isinstance(value, str):
        try:
            amount, unit = _split(value)
        except ValueError:
            raise ValueError(wanted) from None
    else:
        raise ValueError(wanted)
    scale = _SIZE_UNITS.get(unit.lower())
    if scale is None:
        raise ValueError(
            f"unknown size unit {unit!r}; use K, M, G, T (powers of 1024), "
            f"kB, MB, GB, TB (powers of 1000) or none (bytes)"
        )
    size = _bounded(amount) * scale
    if size != size.to_integral_value():
        raise ValueError("not a whole number of bytes")
    return int(size)


def period_ns_from_rate(rate_pps: Decimal) -> int:
    """The engine schedules with an integer period; the rate is rounded to the nearest ns."""
    return int((Decimal(NS_PER_S) / rate_pps).to_integral_value(rounding=ROUND_HALF_EVEN))


def format_ns(ns: int) -> str:
    """The shortest exact text for a duration, e.g. 1500000000 -> '1.5s'."""
    for unit, scale in (("s", NS_PER_S), ("ms", 1_000_000), ("us", 1_000)):
        if ns >= scale:
            text = format(Decimal(ns) / Decimal(scale), "f")
            if "." in text:
                text = text.rstrip("0").rstrip(".")
            return f"{text}{unit}"
    return f"{ns}ns"
