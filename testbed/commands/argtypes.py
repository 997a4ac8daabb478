"""Argument types the commands share: each turns a word of the command line into a value or
raises `argparse.ArgumentTypeError` (argparse then prints usage and the message, exit 2)."""

from __future__ import annotations

import argparse

from ntgcore.units import parse_duration_ns, parse_size_bytes

MAX_SECONDS = 1_000_000  # about 11.6 days: more than any wait needs (poll() takes at most 2^31 ms)


def duration(text: str) -> int:
    try:
        value = parse_duration_ns(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def byte_size(text: str) -> int:
    try:
        value = parse_size_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def seed(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"must be between 0 and 2^64-1 (got {value})")
    return value


def names(text: str) -> list[str]:
    values = [t.strip() for t in text.split(",") if t.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"give names separated by commas (got {text!r})")
    return values


def ints(text: str) -> list[int]:
    try:
        return [int(t) for t in names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"give integers separated by commas (got {text!r})"
        ) from None


def flow_counts(text: str) -> list[int]:
    """ "250K,1M,1500000" -> [250000, 1000000, 1500000] (the study refuses 0 and too many)."""
    out = []
    for t in names(text):
        scale = {"K": 1_000, "M": 1_000_000}.get(t[-1].upper(), 1)
        try:
            out.append(int(float(t[:-1] if scale > 1 else t) * scale))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a flow count: {t!r} (e.g. 250K, 1M, 2000000)"
            ) from None
    return out


def count(text: str, maximum: int | None = None) -> int:
    digits = text.strip().removeprefix("+")
    if digits.isascii() and digits.isdigit() and len(digits) > 19:  # also past int()'s 4,300 digits
        raise argparse.ArgumentTypeError(
            f"too large: a number of {len(digits):,} digits"
            + (f"; at most {maximum:,}" if maximum is not None else "")
        )
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text[:40]!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {value})")
    if maximum is not None and value > maximum:
        raise argparse.ArgumentTypeError(f"too large: at most {maximum:,} (got {value:,})")
    return value


def count_upto(maximum: int):
    """An argparse type: a count 0..MAXIMUM (the command refuses 0 itself where it must)."""

    def count_at_most(text: str) -> int:
        return count(text, maximum)

    count_at_most.__name__ = "count"  # argparse names the type in its messages
    return count_at_most


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds > 0 and at most {MAX_SECONDS:,} (got {text[:40]})"
        )
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (got {value})")
    return value


def fractions(text: str) -> tuple[float, ...]:
    values = tuple(fraction(t) for t in text.split(",") if t.strip())
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("mix fractions must be > 0")
    return values
