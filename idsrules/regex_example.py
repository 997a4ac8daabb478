"""A small regex-to-example generator: one string that a PCRE from a rule matches.

It walks Python's own parse tree of the pattern (`re._parser`, formerly `sre_parse`) after a few
PCRE-to-Python rewrites, picks the shortest choices, prefers printable characters that are safe in
URIs and headers, and checks the result with `re`. `example(pcre_text)` returns bytes, or raises
`RegexUnsupported` with the reason.
"""

from __future__ import annotations

import re
import re._constants as sre_c  # Python >= 3.11 (pyproject.toml); formerly sre_constants
import re._parser as sre_parse  # formerly sre_parse
import string

from ntgcore.errors import NtgError


class RegexUnsupported(NtgError, ValueError):
    pass


_PCRE_RE = re.compile(r"^(!?)\"?/(.*)/([A-Za-z]*)\"?$", re.S)
_PREFERRED = [ord(c) for c in "aAb0Bc1xyz"] + [
    ord(c) for c in string.ascii_letters + string.digits + "-_.~/=&?%+,;:!*'()@$ "
]
_PREFERRED += [i for i in range(256) if i not in set(_PREFERRED)]
_CATEGORY_PICK = {
    sre_c.CATEGORY_DIGIT: ord("1"),
    sre_c.CATEGORY_NOT_DIGIT: ord("a"),
    sre_c.CATEGORY_SPACE: ord(" "),
    sre_c.CATEGORY_NOT_SPACE: ord("a"),
    sre_c.CATEGORY_WORD: ord("a"),
    sre_c.CATEGORY_NOT_WORD: ord("-"),
}


def split_pcre(value: str) -> tuple[str, str, bool]:
    """(pattern, flags, negated) of a rule's pcre value `"/.../flags"`."""
    v = value.strip()
    neg = v.startswith("!")
    if neg:
        v = v[1:].strip()
    if len(v) >= 2 and v[0] == '"' and v[-1] == '"':
        v = v[1:-1]
    if not v.startswith("/"):
        # Snort allows m{...} style delimiters rarely; we support the common /.../ form only
        raise RegexUnsupported("pcre not in /pattern/flags form")
    end = v.rfind("/")
    if end <= 0:
        raise RegexUnsupported("pcre without closing '/'")
    return v[1:end], v[end + 1 :], neg


def to_python(pattern: str) -> str:
    """Rewrite the PCRE constructs Python's re does not accept."""
    p = pattern.replace("\\;", ";").replace('\\"', '"')
    p = re.sub(r"\(\?<([A-Za-z_]\w*)>", r"(?P<\1>", p)
    p = re.sub(r"\(\?'([A-Za-z_]\w*)'", r"(?P<\1>", p)
    p = re.sub(r"\\k<([A-Za-z_]\w*)>", r"(?P=\1)", p)
    p = p.replace("\\z", "\\Z").replace("\\h", "[ \\t]").replace("\\H", "[^ \\t]")
    p = p.replace("\\R", "(?:\\r\\n|\\n)")
    p = re.sub(r"\\x\{([0-9a-fA-F]{1,2})\}", lambda m: f"\\x{int(m.group(1), 16):02x}", p)
    p = re.sub(r"\\e", r"\\x1b", p)
    # \Q...\E quoting
    p = re.sub(r"\\Q(.*?)(\\E|$)", lambda m: re.escape(m.group(1)), p)
    return p


def compile_pcre(pattern: str, flags: str) -> re.Pattern:
    f = re.DOTALL if "s" in flags else 0
    if "i" in flags:
        f |= re.IGNORECASE
    if "m" in flags:
        f |= re.MULTILINE
    if "x" in flags:
        f |= re.VERBOSE
    try:
        return re.compile(to_python(pattern).encode("latin-1"), f)
    except (re.error, UnicodeEncodeError, OverflowError) as exc:
        raise RegexUnsupported(f"pcre not understood: {exc}") from None


def _cases(c: int) -> set[int]:
    """`c` and its other ASCII case (what a pattern under the `i` flag treats as one)."""
    ch = bytes([c])
    return {c, ch.lower()[0], ch.upper()[0]}


class _Gen:
    def __init__(self, dotall: bool, avoid: frozenset[int], nocase: bool = False) -> None:
        self.dotall = dotall
        self.avoid = avoid
        self.nocase = nocase
        self.groups: dict[int, bytes] = {}
        self.depth = 0
        self.grow = False  # optional repeats once (a `\b` between two pieces needs a separator)

    def pick(self, allowed) -> int:
        for c in _PREFERRED:
            if c not in self.avoid and allowed(c):
                return c
        for c in _PREFERRED:
            if allowed(c):
                return c
        raise RegexUnsupported("empty character class")

    def gen(self, parsed) -> bytes:
        self.depth += 1
        if self.depth > 200:
            raise RegexUnsupported("pattern too deep")
        out = bytearray()
        for op, av in parsed:
            out += self.item(op, av)
        self.depth -= 1
        return bytes(out)

    def in_set(self, items):
        neg = False
        tests = []
        for op, av in items:
            if op is sre_c.NEGATE:
                neg = True
            elif op is sre_c.LITERAL:
                tests.append(lambda c, v=av: c == v)
            elif op is sre_c.RANGE:
                tests.append(lambda c, lo=av[0], hi=av[1]: lo <= c <= hi)
            elif op is sre_c.CATEGORY:
                rx = _CAT_RX[av]
                tests.append(lambda c, rx=rx: rx.match(bytes([c])) is not None)
            elif op in (sre_c.RANGE_UNI_IGNORE,):
                tests.append(lambda c, lo=av[0], hi=av[1]: lo <= c <= hi)
            else:
                raise RegexUnsupported(f"character set item {op}")

        def ok(c: int) -> bool:
            # under `i` a class names both cases of a letter: `[^ABSC]` excludes `a` too
            variants = _cases(c) if self.nocase else (c,)
            hit = any(t(v) for t in tests for v in variants)
            return hit != neg

        return ok

    def item(self, op, av) -> bytes:
        if op is sre_c.LITERAL:
            return bytes([av]) if av < 256 else b"?"
        if op is sre_c.NOT_LITERAL:
            banned = _cases(av) if self.nocase and av < 256 else {av}
            return bytes([self.pick(lambda c: c not in banned)])
        if op is sre_c.ANY:
            return bytes([self.pick(lambda c: self.dotall or c != 10)])
        if op is sre_c.IN:
            return bytes([self.pick(self.in_set(av))])
        if op is sre_c.CATEGORY:
            return bytes([_CATEGORY_PICK.get(av, ord("a"))])
        if op is sre_c.BRANCH:
            options = av[1]
            best = None
            for alt in options:
                try:
                    s = self.gen(alt)
                except RegexUnsupported:
                    continue
                if best is None or (len(s) < len(best) and not best) or not best:
                    best = s
                if best:
                    break
            if best is None:
                raise RegexUnsupported("no alternative could be generated")
            return best
        if op is sre_c.SUBPATTERN:
            group, _add, _del, sub = av
            s = self.gen(sub)
            if group:
                self.groups[group] = s
            return s
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)):
            lo, hi, sub = av
            n = lo if not (self.grow and lo == 0 and hi >= 1) else 1
            if n > 5000:
                raise RegexUnsupported("repetition too long")
            one = self.gen(sub) if n else b""
            return one * n if n else b""
        if op is sre_c.AT:
            if av is sre_c.AT_BOUNDARY:
                return _BOUNDARY  # resolved once the bytes on both sides are known
            return b""
        if op is sre_c.GROUPREF:
            return self.groups.get(av, b"")
        if op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
            return b""  # lookarounds: generate nothing, the final check decides
        if op is getattr(sre_c, "ATOMIC_GROUP", None):
            return self.gen(av)
        if op is sre_c.GROUPREF_EXISTS:
            _g, yes, no = av
            return self.gen(yes)
        raise RegexUnsupported(f"regex construct {op} not supported")


_CAT_RX = {
    sre_c.CATEGORY_DIGIT: re.compile(rb"\d"),
    sre_c.CATEGORY_NOT_DIGIT: re.compile(rb"\D"),
    sre_c.CATEGORY_SPACE: re.compile(rb"\s"),
    sre_c.CATEGORY_NOT_SPACE: re.compile(rb"\S"),
    sre_c.CATEGORY_WORD: re.compile(rb"\w"),
    sre_c.CATEGORY_NOT_WORD: re.compile(rb"\W"),
}


# a marker for `\b` while generating (a byte no example uses: it is removed before the check)
_BOUNDARY = b"\x00\xff\x00"
_WORD = re.compile(rb"\w")


def _resolve_boundaries(s: bytes) -> list[bytes]:
    """The example with each `\b` marker resolved: nothing where the bytes on both sides already
    make a boundary, else a blank before/after it, so the word boundary the pattern needs exists
    (the final check decides which candidate holds)."""
    parts = s.split(_BOUNDARY)
    if len(parts) == 1:
        return [s]
    out = parts[0]
    for nxt in parts[1:]:
        left = _WORD.match(out[-1:]) is not None if out else False
        right = _WORD.match(nxt[:1]) is not None if nxt else False
        if not out or not nxt:
            # at an end of the example the neighbour is whatever the buffer has there: a blank
            # keeps the boundary when the example sits between other word bytes
            out += (b" " if not out and right else b"") + nxt + (b" " if not nxt and left else b"")
        elif left == right:
            # both word or both non-word: no boundary; a word byte or a blank in between
            out += (b"a" if not left and out and nxt else b" ") + nxt
        else:
            out += nxt
    plain = b"".join(parts)
    return [out, plain] if out != plain else [out]


def _constructs(parsed) -> set[str]:
    """Names of the constructs in a parse tree that the generator does not build bytes for."""
    found: set[str] = set()
    stack = [parsed]
    while stack:
        node = stack.pop()
        for op, av in node:
            if op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
                found.add("lookahead or lookbehind")
                stack.append(av[1])
            elif op is sre_c.GROUPREF or op is sre_c.GROUPREF_EXISTS:
                found.add("back-reference")
                if op is sre_c.GROUPREF_EXISTS:
                    stack += [x for x in av[1:] if x is not None]
            elif op is sre_c.AT and av in (sre_c.AT_BOUNDARY, sre_c.AT_NON_BOUNDARY):
                found.add("word boundary \\b" if av is sre_c.AT_BOUNDARY else "\\B")
            elif op is sre_c.AT and av not in (sre_c.AT_BEGINNING, sre_c.AT_BEGINNING_STRING):
                found.add("end anchor")
            elif op is sre_c.SUBPATTERN:
                stack.append(av[3])
            elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT) or op is getattr(
                sre_c, "POSSESSIVE_REPEAT", None
            ):
                stack.append(av[2])
            elif op is sre_c.BRANCH:
                stack += list(av[1])
            elif op is getattr(sre_c, "ATOMIC_GROUP", None):
                stack.append(av)
    return found


def example(pattern: str, flags: str = "", avoid: bytes = b"") -> bytes:
    """A byte string matched by /pattern/flags (PCRE as written in a rule)."""
    rx = compile_pcre(pattern, flags)
    py = to_python(pattern)
    try:
        parsed = sre_parse.parse(py.encode("latin-1"), rx.flags)
    except Exception as exc:
        raise RegexUnsupported(f"pcre not understood: {exc}") from None
    nocase = "i" in flags
    # tries: avoiding the given bytes, then not; then with optional repeats taken once
    for avoided, grow in ((frozenset(avoid), False), (frozenset(), False), (frozenset(), True)):
        gen = _Gen("s" in flags, avoided, nocase)
        gen.grow = grow
        try:
            raw = gen.gen(parsed)
        except RecursionError:
            raise RegexUnsupported("pattern too deep") from None
        for s in _resolve_boundaries(raw):
            if rx.search(s) is not None:
                return s
    what = sorted(_constructs(parsed))
    raise RegexUnsupported(
        "generated example does not match"
        + (f" (the pattern has {', '.join(what)})" if what else " (the shortest choices conflict)")
    )


def literal_runs(pattern: str, flags: str = "") -> tuple[list[bytes], bool]:
    """The runs of bytes every string the pcre matches carries as the example writes them: literal
    characters side by side at the pattern's top level, a whitespace class as the blank the
    example picks (`^MKD\\s[^\\n]{100}` -> `MKD `), a repeat of at least one of either once;
    anything else ends a run. With it, whether the last run ends the pattern (nothing but an
    anchor after it). ([], False) when the pattern is not understood."""
    try:
        py = to_python(pattern).encode("latin-1")
        parsed = sre_parse.parse(py, compile_pcre(pattern, flags).flags)
    except Exception:
        return [], False
    runs: list[bytes] = []
    cur = bytearray()
    for op, av in parsed:
        c = _one_byte(op, av)
        if c is None and op is sre_c.MAX_REPEAT and av[0] >= 1 and len(av[2]) == 1:
            c = _one_byte(*av[2][0])
        if c is not None:
            cur.append(c)
            continue
        if op is sre_c.AT:
            continue  # an anchor takes no byte
        if cur:
            runs.append(bytes(cur))
        cur = bytearray()
    if cur:
        runs.append(bytes(cur))
    return runs, bool(cur)


def _one_byte(op, av) -> int | None:
    """The byte a literal or a whitespace class stands for in an example, else None."""
    if op is sre_c.LITERAL:
        return av
    if op is sre_c.IN and av == [(sre_c.CATEGORY, sre_c.CATEGORY_SPACE)]:
        return ord(" ")
    return None
