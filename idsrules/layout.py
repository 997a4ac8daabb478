"""Lay out one inspection buffer so that all of a rule's matches on it hold together.

`build_buffer(matches, opts)` returns bytes (or raises `LayoutError`): contents placed in order so
that offset, depth, distance, within, startswith, endswith, isdataat and the buffer length hold,
pcre examples placed where they still match; every candidate layout is checked with `verify`, a
small matcher with the IDS's semantics (first match, backtracking over later occurrences).
"""

from __future__ import annotations

import base64
import re
from functools import lru_cache

from ntgcore.errors import NtgError

from .regex_example import RegexUnsupported, compile_pcre, example
from .semantics import Match


class LayoutError(NtgError, ValueError):
    pass


FILL = b"a"
MAX_WINDOW_FILL = 1 << 16  # a negated content's window is written out up to this many bytes
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
    try:
        return _verify(buf, matches, 0, 0, budget)
    except _Decoded:
        return False


class _Decoded(Exception):
    """A base64_decode gave bytes its base64_data matches do not hold: Suricata inspects
    base64_data after the buffer's match list has matched, and tries no other place."""


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
    if m.kind == "base64":
        decoded = _decoded(buf, m, prev_end)
        if not decoded:
            return False  # no bytes: the decode does not match, an earlier match may move on
        if not verify(decoded, list(m.args[2])):
            raise _Decoded
        return _verify(buf, matches, i + 1, prev_end, budget)
    if m.kind in ("byte_test", "byte_jump"):
        spec = _byte_spec(m)
        pos = _byte_base(m, prev_end, spec)
        v = _read_value(buf, pos, spec)
        if v is None:
            return False
        if m.kind == "byte_test":
            return _test_holds(v, spec) and _verify(buf, matches, i + 1, prev_end, budget)
        target = _jump_target(pos, v, spec, n)
        if not 0 <= target < n:
            return False
        return _verify(buf, matches, i + 1, target, budget)
    return _verify(buf, matches, i + 1, prev_end, budget)


# --- base64_decode --------------------------------------------------------------------------
# Suricata: from the buffer start (or the end of the previous match with `relative`) plus
# `offset`, up to `bytes` bytes (all by default) are decoded as base64 (RFC 4648: the decoding
# ends at the first byte outside the alphabet); base64_data is what came out, and a decode that
# gives nothing does not match.
_B64 = re.compile(rb"[A-Za-z0-9+/]*={0,2}")


def _decoded(buf: bytes, m: Match, prev_end: int) -> bytes:
    start = (prev_end if m.relative else 0) + m.args[1]
    if start >= len(buf):
        return b""
    text = buf[start : start + m.args[0]] if m.args[0] else buf[start:]
    run = _B64.match(text)
    b64 = run.group(0) if run else b""
    b64 = b64[: len(b64) - len(b64) % 4] if not b64.endswith(b"=") else b64
    try:
        return base64.b64decode(b64 + b"=" * (-len(b64) % 4))
    except ValueError:
        return b""


def _encoded(m: Match) -> Match:
    """The content a base64_decode is laid out as: its base64_data matches' bytes (`ntg` when it
    has none: a decode must give something), base64-encoded, where the decode starts."""
    inner = list(m.args[2])
    plain = build_buffer(inner) if inner else b"ntg"
    text = base64.b64encode(plain)
    if m.args[0] is not None and len(text) > m.args[0]:
        raise LayoutError(
            f"base64 of the decoded matches is longer than base64_decode's {m.args[0]} bytes"
        )
    if m.relative:
        return Match("content", data=text, distance=m.args[1], within=m.args[1] + len(text))
    return Match("content", data=text, offset=m.args[1], depth=m.args[1] + len(text))


# --- byte_test / byte_jump ---------------------------------------------------------------------
# Suricata semantics: both read `nbytes` at `offset` (from the buffer start, or from the end of the
# previous match with `relative`), as big/little endian binary or as a string number. byte_test
# compares (`<`, `>`, `=`, `<=`, `>=`, `&`, `^`, each negatable with `!`); byte_jump moves the
# relative position: value * multiplier, aligned up to 4 with `align`, plus post_offset, counted
# from after the bytes read (or from the buffer start with `from_beginning`); the landing point
# must lie inside the buffer.


def _byte_spec(m: Match) -> dict:
    a = [x.strip() for x in m.args]
    if m.kind == "byte_test":
        if len(a) < 4:
            raise LayoutError(f"byte_test:{','.join(a)} needs nbytes, operator, value, offset")
        op = a[1].replace(" ", "")
        neg = op.startswith("!")
        op = op.lstrip("!") or "="
        spec = {"n": _num(a[0]), "op": op, "neg": neg, "value": _num(a[2]), "offset": _num(a[3])}
        rest = a[4:]
    else:
        if len(a) < 2:
            raise LayoutError(f"byte_jump:{','.join(a)} needs nbytes and offset")
        spec = {"n": _num(a[0]), "offset": _num(a[1])}
        rest = a[2:]
    spec.update(
        little=False,
        string=False,
        base=10,
        mult=1,
        align=False,
        begin=False,
        end=False,
        post=0,
        mask=None,
    )
    for opt in rest:
        word, _, arg = opt.partition(" ")
        if word == "little" or word == "dce":
            spec["little"] = True
        elif word == "string":
            spec["string"] = True
        elif word in ("hex", "dec", "oct"):
            spec["base"] = {"hex": 16, "dec": 10, "oct": 8}[word]
        elif word == "multiplier":
            spec["mult"] = _num(arg)
        elif word == "align":
            spec["align"] = True
        elif word == "from_beginning":
            spec["begin"] = True
        elif word == "from_end":
            spec["end"] = True
        elif word == "post_offset":
            spec["post"] = _num(arg)
        elif word == "bitmask":
            spec["mask"] = _num(arg)
    if spec["string"] and spec["n"] > 20 or not spec["string"] and not 1 <= spec["n"] <= 8:
        raise LayoutError(f"{m.kind} reads {spec['n']} bytes: not supported")
    return spec


def _num(text: str) -> int:
    try:
        return int(text.strip(), 0)
    except ValueError:
        raise LayoutError(
            f"{text!r} is not a number (byte_extract variables are not synthesized)"
        ) from None


def _shift(mask: int) -> int:
    return (mask & -mask).bit_length() - 1 if mask else 0


def _read_value(buf: bytes | bytearray, pos: int, spec: dict) -> int | None:
    n = spec["n"]
    if pos < 0 or pos + n > len(buf):
        return None
    # `nbytes` 0 (a string): the number is what the buffer holds from `pos` on
    raw = bytes(buf[pos : pos + n]) if n else bytes(buf[pos:])
    if spec["string"]:
        found = re.match(rb"\s*([0-9a-fA-F]*)", raw)  # matches any bytes (maybe empty)
        digits = found.group(1) if found else b""
        valid = b"0123456789abcdefABCDEF"[: {16: 22, 10: 10, 8: 8}[spec["base"]]]
        k = 0
        while k < len(digits) and digits[k] in valid:
            k += 1
        if k == 0:
            return None
        v = int(digits[:k], spec["base"])
    else:
        v = int.from_bytes(raw, "little" if spec["little"] else "big")
    if spec["mask"]:
        v = (v & spec["mask"]) >> _shift(spec["mask"])
    return v


def _encode_value(v: int, spec: dict) -> bytes | None:
    if v < 0:
        return None
    n = spec["n"]
    if spec["mask"]:
        v <<= _shift(spec["mask"])
        if v & ~spec["mask"]:
            return None
    if spec["string"]:
        text = {16: "%x", 10: "%d", 8: "%o"}[spec["base"]] % v
        if n == 0:
            return text.encode()  # as long as the number is
        return text.rjust(n, "0").encode() if len(text) <= n else None
    if v >= 1 << (8 * n):
        return None
    return v.to_bytes(n, "little" if spec["little"] else "big")


def _test_holds(v: int, spec: dict) -> bool:
    op, x = spec["op"], spec["value"]
    ok = {
        "<": v < x,
        ">": v > x,
        "=": v == x,
        "<=": v <= x,
        ">=": v >= x,
        "&": (v & x) != 0,
        "^": (v ^ x) != 0,
    }.get(op)
    if ok is None:
        raise LayoutError(f"byte_test operator {op!r} not understood")
    return ok != spec["neg"]


def _test_candidates(existing: int | None, spec: dict) -> list[int]:
    x = spec["value"]
    e = existing if existing is not None else 0
    if spec["op"] == "&":
        # bit tests keep the bits other tests of the same byte set or cleared
        c = [e & ~x, 0] if spec["neg"] else [e | x, x]
    else:
        c = [x, x + 1, x - 1, 0, 1, x ^ 1]
    return [v for v in dict.fromkeys(c) if v >= 0]


def _test_bytes(old: bytes, held: list[bool], v: int | None, spec: dict) -> list[bytes]:
    """The bytes a byte_test reads, written so that the test holds and the bytes another match
    wrote or read (`held`) stay: a test of the first four bytes where a content pins the first
    one (`content:"|00|"; depth:1;` then `byte_test:4,>,1024,0,little`, SMB over NetBIOS)."""
    encs = [_encode_value(c, spec) for c in _test_candidates(v, spec) if _test_holds(c, spec)]
    if not spec["string"]:
        encs += [bytes([b]) * spec["n"] for b in (0xFF, 0x01, 0x00, 0x7F, 0x80)]
    out: list[bytes] = []
    for enc in encs:
        if enc is not None and not spec["n"]:
            return [enc]  # a string number as long as it is (nbytes 0)
        if enc is None or len(enc) != len(old):
            continue
        kept = bytes(o if h else e for o, e, h in zip(old, enc, held, strict=True))
        got = _read_value(kept, 0, spec)
        if got is not None and _test_holds(got, spec) and kept not in out:
            out.append(kept)
    return out


def _jump_bytes(
    old: bytes, held: list[bool], pos: int, want: int, spec: dict, buf_len: int
) -> list[bytes]:
    """The bytes a byte_jump reads, written so that it lands at `want` or a few bytes on, the
    bytes another match wrote (`held`) kept: when they fix the value, the jump lands where it
    says (`byte_jump:2,-10,relative,from_beginning` reading back into a pipe name)."""
    v0 = 0
    if spec["mult"] > 0:
        base = 0 if spec["begin"] else pos + spec["n"]
        v0 = max(0, -(-(want - base - spec["post"]) // spec["mult"]))
    out: list[bytes] = []
    for v in range(v0, v0 + (8 if spec["mult"] > 0 else 1)):
        enc = _encode_value(v, spec)
        if enc is None or len(enc) != len(old) and spec["n"]:
            continue
        kept = bytes(o if h else e for o, e, h in zip(old, enc, held, strict=True)) if held else enc
        got = _read_value(kept, 0, spec)
        if got is None:
            continue
        target = _jump_target(pos, got, spec, buf_len)
        if 0 <= target <= want + MAX_WINDOW_FILL and kept not in out:
            out.append(kept)
    return out


def _window(m: Match, prev_end: int) -> tuple[Match, int, int]:
    """A negated content and the bytes it must be absent from."""
    if m.is_relative:
        lo = prev_end + (m.distance or 0)
        return m, lo, lo + m.within if m.within is not None else _NOPOS
    lo = m.offset or 0
    return m, lo, lo + m.depth if m.depth is not None else _NOPOS


def _allowed(
    buf: bytearray, pos: int, old: bytes, encs: list[bytes], negs: list[tuple[Match, int, int]]
) -> bytes:
    """Of the bytes a byte_test or byte_jump may read (`encs`, best first), the first that puts
    no negated content seen so far inside its window (`content:!"|00 00 00 00|"; within:4;` and
    then a jump reading those four bytes); the first when each does."""

    def hits(data: bytes) -> bool:
        b = bytes(buf[:pos]) + data + bytes(buf[pos + len(old) :])
        return any(
            next(_find_all(b, m.data, m.nocase, lo, hi), None) is not None for m, lo, hi in negs
        )

    if not negs or hits(old):
        return encs[0]
    return next((e for e in encs if not hits(e)), encs[0])


def _jump_target(pos: int, v: int, spec: dict, buf_len: int) -> int:
    v *= spec["mult"]
    if spec["align"] and v % 4:
        v += 4 - v % 4
    v += spec["post"]
    if spec["begin"]:
        return v
    if spec["end"]:
        return buf_len + v
    return pos + spec["n"] + v


def _byte_base(m: Match, prev_end: int, spec: dict) -> int:
    return (prev_end if m.relative else 0) + spec["offset"]


def _place_contents(
    matches: list[Match],
    prefix: bytes,
    fill: bytes,
    avoid: bytes,
    jump_past: bool = False,
    fill_windows: bool = False,
) -> bytearray:
    """The matches laid out in order. A byte_jump lands right after the bytes it reads; with
    `jump_past`, past every byte written so far and far enough that a relative content after it
    with a negative distance (`distance:-64`: the PE header an MZ header's offset points to) starts
    in fresh bytes. Filler that only pads up to a later position (before a byte_test's read,
    between contents) is not pinned: a content that can go nowhere else may take its place."""
    buf = bytearray(prefix)
    pinned = set(range(len(prefix)))  # positions whose byte a match wrote or read
    tested: set[int] = set()  # of those, the ones only a byte_test read: another test may rewrite
    negs: list[tuple[Match, int, int]] = []  # negated contents and their windows so far
    prev_end = 0
    ends_at: int | None = None
    min_len = 0  # a byte_jump must land inside the buffer
    free: tuple[int, int] | None = None  # filler a jump passed over, free for the next content
    for k, m in enumerate(matches):
        if m.kind in ("byte_test", "byte_jump"):
            spec = _byte_spec(m)
            pos = _byte_base(m, prev_end, spec)
            if pos < 0 and jump_past and not prefix and m.kind == "byte_jump":
                buf[0:0] = fill * -pos  # the contents so far move on: the read starts at 0
                pinned = {x - pos for x in pinned}
                tested = {x - pos for x in tested}
                prev_end, ends_at, pos = (
                    prev_end - pos,
                    None if ends_at is None else ends_at - pos,
                    0,
                )
            if pos < 0:
                raise LayoutError(f"{m.kind} reads before the buffer start")
            if len(buf) < pos + spec["n"]:
                buf += fill * (pos + spec["n"] - len(buf))
            v = _read_value(buf, pos, spec)
            held = [j in pinned and j not in tested for j in range(pos, pos + spec["n"])]
            if m.kind == "byte_test":
                tested.update(j for j in range(pos, pos + spec["n"]) if j not in pinned)
            pinned.update(range(pos, pos + spec["n"]))
            old = bytes(buf[pos : pos + spec["n"]])
            if m.kind == "byte_test":
                if v is None or not _test_holds(v, spec):
                    encs = _test_bytes(old, held, v, spec)
                    if not encs:
                        raise LayoutError("no value satisfies the byte_test")
                    buf[pos : pos + spec["n"]] = _allowed(buf, pos, old, encs, negs)
                continue
            # byte_jump: a value that lands right after the bytes read (or there from the start)
            want = pos + spec["n"]
            if jump_past:
                nxt = next((x for x in matches[k + 1 :] if x.kind == "content"), None)
                back = max(0, -((nxt.distance or 0) if nxt is not None else 0))
                # past the bytes a match wrote or read (filler an earlier jump passed over may
                # take the content: two BER lengths jumped over in turn, SNMP)
                want = max(want, max(pinned, default=-1) + 1) + back
            if v is None or not want <= _jump_target(pos, v, spec, len(buf)) <= want + 4096:
                encs = _jump_bytes(old, held, pos, want, spec, len(buf))
                if not encs:
                    raise LayoutError("no value satisfies the byte_jump")
                buf[pos : pos + spec["n"]] = _allowed(buf, pos, old, encs, negs)
                v = _read_value(buf, pos, spec)
                assert v is not None
            target = _jump_target(pos, v, spec, len(buf))
            if target < 0:
                raise LayoutError("byte_jump lands before the buffer start")
            if len(buf) < target:
                if jump_past:
                    free = (len(buf), target)
                buf += fill * (target - len(buf))
            prev_end = target
            min_len = max(min_len, target + 1)
            continue
        if m.negated:
            if m.kind == "content":
                negs.append(_window(m, prev_end))
            if fill_windows and m.kind == "content":
                # the bytes the negated content must be absent from are all there, filler (a
                # header value `within:500` long without a CRLF: the line's own CRLF after it)
                if m.is_relative and m.within is not None:
                    end = prev_end + (m.distance or 0) + m.within
                else:
                    end = (m.offset or 0) + m.depth if m.depth is not None else 0
                if len(buf) < end <= len(buf) + MAX_WINDOW_FILL:
                    buf += fill * (end - len(buf))
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
                tail = len(buf) - prev_end
                if 0 < tail < len(s):
                    # bytes already written after the last match (a byte_test value): keep them
                    # and let the example supply the rest
                    hit = rx.search(bytes(buf[prev_end:]) + s[tail:])
                    if hit is not None:
                        pinned.update(range(len(buf), len(buf) + len(s) - tail))
                        buf += s[tail:]
                        prev_end = prev_end + hit.end()
                        continue
            pos = max(start, len(buf)) if not m.relative else len(buf)
            if not m.relative and _rx(m.pattern, m.flags).pattern[:1] == b"^":
                # anchored: only possible at the buffer start
                if len(buf) == 0:
                    pos = 0
            buf[pos:pos] = b""
            pinned.update(range(len(buf), len(buf) + len(s)))
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
        at: int | None = None
        cand = max(lo, len(buf))
        if cand <= hi:
            at = cand
        else:
            for p in range(lo, min(hi, len(buf)) + 1):
                seg = bytes(buf[p : p + L])
                if _eq(seg, data[: len(seg)], m.nocase) or (
                    free is not None and free[0] <= p and p + L <= free[1]
                ):
                    at = p  # bytes already there, or filler a jump left behind it
                    break
            else:  # filler nothing pinned: padding up to a later match (a byte_test's read)
                for p in range(lo, min(hi, len(buf)) + 1):
                    if all(
                        j not in pinned
                        or _eq(bytes(buf[j : j + 1]), data[j - p : j - p + 1], m.nocase)
                        for j in range(p, min(p + L, len(buf)))
                    ):
                        at = p
                        break
        if at is None:
            raise LayoutError("contents cannot be placed with their offset/depth/distance/within")
        free = None
        if at > len(buf):
            buf += fill * (at - len(buf))
        buf[at : at + L] = data
        pinned.update(range(at, at + L))
        tested.difference_update(range(at, at + L))
        prev_end = at + L
        if m.endswith:
            ends_at = prev_end
    if len(buf) < min_len:
        buf += fill * (min_len - len(buf))
    if ends_at is not None and len(buf) > ends_at:
        raise LayoutError("endswith conflicts with later data")
    return buf


def build_buffer(
    matches: list[Match],
    opts: dict | None = None,
    *,
    prefix: bytes = b"",
    fill: bytes = FILL,
    avoid: bytes = b"",
    suffix: bytes = b"",
) -> bytes:
    """Bytes satisfying all `matches` (and opts: len range, dotprefix); with `suffix`, the bytes
    that follow in the buffer (a header line's CRLF) are part of the check."""
    opts = opts or {}
    dotprefix = bool(opts.get("dotprefix"))
    lens = opts.get("len")
    checked = matches  # what the layouts are verified against
    if any(m.kind == "base64" for m in matches):
        matches = [_encoded(m) if m.kind == "base64" else m for m in matches]
    contents = [m for m in matches if m.kind != "pcre"]
    pcres = [m for m in matches if m.kind == "pcre" and not m.negated]
    candidates: list[tuple[bytes, bytes]] = []  # (prefix, layout)
    errors: list[str] = []
    prefixes = [prefix, b""] if prefix else [b""]
    for pre in prefixes:
        for order in _orders(matches, contents, pcres, checked is not matches):
            jumps = any(x.kind == "byte_jump" for x in order)
            windows = any(x.negated and (x.within or x.depth) for x in order)
            for past in (False, True) if jumps else (False,):
                for full in (False, True) if windows else (False,):
                    try:
                        buf = bytes(_place_contents(order, pre, fill, avoid, past, full))
                    except (LayoutError, RegexUnsupported) as exc:
                        errors.append(str(exc))
                        continue
                    candidates.append((pre, buf))
            # pcre example first, then the contents after it
    for pre in prefixes:
        for p in pcres:
            try:
                s = _example(p.pattern, p.flags, avoid)
            except RegexUnsupported as exc:
                errors.append(str(exc))
                continue
            try:
                rest = bytes(
                    _place_contents(
                        [m for m in contents if not m.is_relative or True], b"", fill, avoid
                    )
                )
            except LayoutError:
                rest = b""
            # the example alone first: it often holds the contents too (`content:"MKD";
            # pcre:"/^MKD\s.../"`), and a second copy of a command line is bytes no rule asked for
            candidates.append((pre, pre + s))
            candidates.append((b"", s))
            candidates.append((pre, pre + s + rest))
            candidates.append((pre, pre + rest + s))
            if rest:
                # the example laid over the contents' filler: a pcre that pins what the filler
                # between two contents must be (`13`, `=MSG` 11 bytes on, `/^13\d{11}/`)
                over = _overlay(rest, s, fill)
                candidates.append((pre, pre + over))
                candidates.append((b"", over))
    # the caller's prefix first; of the layouts with it that hold, the shortest (a content that
    # the pcre example already holds is not written a second time)
    for pre in prefixes:
        best: bytes | None = None
        for cpre, buf in candidates:
            if cpre != pre:
                continue
            for b in _fix_len(buf, lens, fill, dotprefix):
                # a layout that ends with the start of the suffix (a pcre's `\r$`) shares it
                shared = [b[:-k] for k in range(len(suffix), 0, -1) if b.endswith(suffix[:k])]
                for v in [b] + shared:
                    if (best is None or len(v) < len(best)) and verify(v + suffix, checked, opts):
                        best = v
        if best is not None:
            return best
    if fill != b"a" and any(m.negated and m.kind == "content" for m in matches):
        # the filler itself may be what a negated content forbids (`content:!"|00|"`)
        try:
            return build_buffer(checked, opts, prefix=prefix, fill=b"a", avoid=avoid, suffix=suffix)
        except (LayoutError, RegexUnsupported):
            pass
    if errors:
        raise LayoutError(errors[0])
    raise LayoutError("no layout satisfies all matches of the buffer together")


def _overlay(layout: bytes, example: bytes, fill: bytes) -> bytes:
    """`layout` with `example` written over it from its first byte where the layout has filler
    (its own bytes elsewhere), and the example's bytes past the layout's end."""
    out = bytearray(layout)
    for i, c in enumerate(example):
        if i >= len(out):
            out += example[i:]
            break
        if out[i] == fill[0]:
            out[i] = c
    return bytes(out)


def _orders(matches, contents, pcres, decodes: bool = False):
    yield matches
    if pcres:
        yield contents + [m for m in pcres]
    anchored = _anchored_first(matches)
    if anchored is not None:
        yield anchored
    if decodes:
        # Suricata decodes where the chain before the decode first matches and tries no other
        # place: that chain may have to come first in the buffer (its content occurs in an
        # earlier chain too, `'SAMLResponse'` and then `'`)
        chains = _chains(matches)
        for k in range(1, min(len(chains), 4)):
            yield [m for c in [chains[k], *chains[:k], *chains[k + 1 :]] for m in c]


def _chains(matches: list[Match]) -> list[list[Match]]:
    """The matches as chains: an absolute match and the relative ones after it."""
    chains: list[list[Match]] = []
    for m in matches:
        if chains and m.is_relative:
            chains[-1].append(m)
        else:
            chains.append([m])
    return chains


_BYTE_OPS = ("byte_test", "byte_jump")


def _anchor(m: Match) -> int | None:
    """Where a match that starts a chain is pinned in the buffer (offset/depth/startswith), or None."""
    if m.kind == "content" and not m.negated and not m.is_relative:
        if m.offset is not None or m.depth is not None or m.startswith:
            return m.offset or 0
    if m.kind in _BYTE_OPS and not m.relative:
        try:
            return _num(str(m.args[3] if m.kind == "byte_test" else m.args[1]))
        except (LayoutError, IndexError):
            return None
    return None


def _anchored_first(matches: list[Match]) -> list[Match] | None:
    """The matches as chains (an absolute match and the relative ones after it), the chains pinned
    by offset/depth first in offset order: a rule may list `content:"x"; content:"y"; depth:2;`
    where y must come first in the buffer. None when that is the rule's own order."""
    chains = _chains(matches)
    keyed = [(_anchor(c[0]), i, c) for i, c in enumerate(chains)]
    pinned = sorted((k for k in keyed if k[0] is not None), key=lambda k: (k[0], k[1]))
    order = pinned + [k for k in keyed if k[0] is None]
    if [k[1] for k in order] == list(range(len(chains))):
        return None
    return [m for _a, _i, c in order for m in c]


MAX_PAD_POSITIONS = 512  # places tried for the filler a length needs, inside a layout


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
        pad = fill * (lo - len(buf))
        yield buf + pad
        yield pad + buf
        # then inside: between a `startswith` content and an `endswith` one, or where a
        # relative content leaves room (the caller keeps the first that verifies)
        for i in range(1, min(len(buf), MAX_PAD_POSITIONS)):
            yield buf[:i] + pad + buf[i:]
    elif len(buf) > hi:
        yield buf[:hi]
    else:
        yield buf
