"""Lay out one inspection buffer so that all of a rule's matches on it hold together.

`build_buffer(matches, opts)` returns bytes (or raises `LayoutError`): contents placed in order so
that offset, depth, distance, within, startswith, endswith, isdataat and the buffer length hold,
pcre examples placed where they still match; every candidate layout is checked with `verify`, a
small matcher with the IDS's semantics (first match, backtracking over later occurrences).
"""

from __future__ import annotations

import re
from functools import lru_cache

from .regex_example import RegexUnsupported, compile_pcre, example
from .semantics import Match


class LayoutError(ValueError):
    pass


FILL = b"a"
_NOPOS = 1 << 30


@lru_cache(maxsize=8192)
def _rx(pattern: str, flags: str) -> re.Pattern:
    return compile_pcre(pattern, flags)


@lru_cache(maxsize=8192)
def _example(pattern: str, flags: str, avoid: bytes) -> bytes:
    return example(pattern, flags, avoid)


def _eq(a: bytes, b: bytes, nocase: bool) -> bool:
    return a.lower() == b.lower() if nocase else a == b


def _find_all(buf: bytes, data: bytes, nocase: bool, lo: int, hi: int):
    """Start positions p, lo <= p, p + len(data) <= hi."""
    hay = buf.lower() if nocase else buf
    needle = data.lower() if nocase else data
    p = hay.find(needle, max(lo, 0), hi)
    while p >= 0:
        yield p
        p = hay.find(needle, p + 1, hi)


def verify(buf: bytes, matches: list[Match], opts: dict | None = None) -> bool:
    """True when `buf` satisfies every match in order (IDS semantics, simplified)."""
    if opts:
        rng = opts.get("len")
        if rng and not (rng[0] <= len(buf) <= rng[1]):
            return False
        if opts.get("dotprefix"):
            buf = b"." + buf
    budget = [2000]
    return _verify(buf, matches, 0, 0, budget)


def _verify(buf: bytes, matches: list[Match], i: int, prev_end: int, budget: list[int]) -> bool:
    if i == len(matches):
        return True
    budget[0] -= 1
    if budget[0] < 0:
        return False
    m = matches[i]
    n = len(buf)
    if m.kind == "content":
        L = len(m.data)
        if m.is_relative:
            lo = prev_end + (m.distance or 0)
            hi = prev_end + (m.distance or 0) + m.within if m.within is not None else n
            if m.offset is not None:
                lo = max(lo, m.offset)
        else:
            lo = m.offset or 0
            hi = lo + m.depth if m.depth is not None else n
        if m.startswith:
            hi = min(hi, L) if not m.is_relative else min(hi, lo + L)
        hi = min(hi, n)
        if m.negated:
            hit = next(_find_all(buf, m.data, m.nocase, lo, hi), None)
            return hit is None and _verify(buf, matches, i + 1, prev_end, budget)
        for p in _find_all(buf, m.data, m.nocase, lo, hi):
            if m.endswith and p + L != n:
                continue
            if _verify(buf, matches, i + 1, p + L, budget):
                return True
        return False
    if m.kind == "pcre":
        rx = _rx(m.pattern, m.flags)
        start = prev_end if m.relative else 0
        hit = rx.search(buf[start:])
        if m.negated:
            return hit is None and _verify(buf, matches, i + 1, prev_end, budget)
        if hit is None:
            return False
        return _verify(buf, matches, i + 1, start + hit.end(), budget)
    if m.kind == "isdataat":
        need = m.args[0]
        present = (n >= prev_end + need) if m.relative else (n > need)
        if present == m.negated:
            return False
        return _verify(buf, matches, i + 1, prev_end, budget)
    # byte_test / byte_jump: not checked
    return _verify(buf, matches, i + 1, prev_end, budget)


def _place_contents(matches: list[Match], prefix: bytes, fill: bytes, avoid: bytes) -> bytearray:
    buf = bytearray(prefix)
    prev_end = 0
    ends_at: int | None = None
    for m in matches:
        if m.negated:
            continue
        if m.kind == "isdataat":
            base = prev_end if m.relative else 0
            if not m.negated:
                need = base + m.args[0] + (0 if m.relative else 1)
                if len(buf) < need:
                    buf += fill * (need - len(buf))
            continue
        if m.kind == "pcre":
            s = _example(m.pattern, m.flags, avoid)
            start = prev_end if m.relative else len(buf)
            if m.relative:
                rx = _rx(m.pattern, m.flags)
                hit = rx.search(bytes(buf[prev_end:]))
                if hit is not None:
                    prev_end = prev_end + hit.end()
                    continue
            pos = max(start, len(buf)) if not m.relative else len(buf)
            if not m.relative and _rx(m.pattern, m.flags).pattern[:1] == b"^":
                # anchored: only possible at the buffer start
                if len(buf) == 0:
                    pos = 0
            buf[pos:pos] = b""
            buf += s
            prev_end = pos + len(s)
            continue
        if m.kind != "content":
            continue
        data = m.data
        L = len(data)
        if m.is_relative:
            lo = prev_end + (m.distance or 0)
            hi = prev_end + (m.distance or 0) + m.within - L if m.within is not None else _NOPOS
        else:
            lo = m.offset or 0
            hi = lo + m.depth - L if m.depth is not None else _NOPOS
        if m.startswith:
            hi = lo
        lo = max(lo, 0)
        pos = None
        cand = max(lo, len(buf))
        if cand <= hi:
            pos = cand
        else:
            for p in range(lo, min(hi, len(buf)) + 1):
                seg = bytes(buf[p:p + L])
                if _eq(seg, data[:len(seg)], m.nocase):
                    pos = p
                    break
        if pos is None:
            raise LayoutError("contents cannot be placed with their offset/depth/distance/within")
        if pos > len(buf):
            buf += fill * (pos - len(buf))
        buf[pos:pos + L] = data
        prev_end = pos + L
        if m.endswith:
            ends_at = prev_end
    if ends_at is not None and len(buf) > ends_at:
        raise LayoutError("endswith conflicts with later data")
    return buf


def build_buffer(matches: list[Match], opts: dict | None = None, *, prefix: bytes = b"",
                 fill: bytes = FILL, avoid: bytes = b"") -> bytes:
    """Bytes satisfying all `matches` (and opts: len range, dotprefix)."""
    opts = opts or {}
    dotprefix = bool(opts.get("dotprefix"))
    lens = opts.get("len")
    contents = [m for m in matches if m.kind != "pcre"]
    pcres = [m for m in matches if m.kind == "pcre" and not m.negated]
    candidates: list[bytes] = []
    errors: list[str] = []
    prefixes = [prefix, b""] if prefix else [b""]
    for pre in prefixes:
        for order in _orders(matches, contents, pcres):
            try:
                buf = bytes(_place_contents(order, pre, fill, avoid))
            except (LayoutError, RegexUnsupported) as exc:
                errors.append(str(exc))
                continue
            candidates.append(buf)
            # pcre example first, then the contents after it
    for pre in prefixes:
        for p in pcres:
            try:
                s = _example(p.pattern, p.flags, avoid)
            except RegexUnsupported as exc:
                errors.append(str(exc))
                continue
            try:
                rest = bytes(_place_contents([m for m in contents if not m.is_relative or True], b"", fill, avoid))
            except LayoutError:
                rest = b""
            candidates.append(pre + s + rest)
            candidates.append(pre + rest + s)
            candidates.append(s)
    for buf in candidates:
        for b in _fix_len(buf, lens, fill, dotprefix):
            if verify(b, matches, opts):
                return b
    if errors:
        raise LayoutError(errors[0])
    raise LayoutError("no layout satisfies all matches of the buffer together")


def _orders(matches, contents, pcres):
    yield matches
    if pcres:
        yield contents + [m for m in pcres]


def _fix_len(buf: bytes, lens, fill: bytes, dotprefix: bool):
    if dotprefix:
        if buf.startswith(b"."):
            buf = buf[1:]
        yield buf
        return
    if not lens:
        yield buf
        return
    lo, hi = lens
    if len(buf) < lo:
        yield buf + fill * (lo - len(buf))
        yield fill * (lo - len(buf)) + buf
    elif len(buf) > hi:
        yield buf[:hi]
    else:
        yield buf
