"""The one rule splitter for Snort 2.9, Snort 3 and Suricata rule text.

It only splits text; what the options mean is `idsrules.semantics`.

API (stable; other modules build on it):

- ``read_rules(path) -> (list[RawRule], list[Problem])``: every enabled rule of a file, with its
  line number. Lines ending in ``\\`` continue on the next line; a rule whose parenthesis is not
  closed at the end of a line continues too (Snort 3 style). Blank lines, comments and disabled
  rules (``# alert ...``) are ignored. A malformed rule becomes a `Problem` (``file:line: what``)
  and is skipped; reading goes on. So does a rule longer than MAX_RULE_BYTES (64 KiB; the longest
  ET Open or Snort 3 community rule is under 2.5 KiB): it is refused unsplit, so one huge line
  costs no more than its own text. The file itself is read by `read_rule_text`; what cannot be
  read as a rule file at all raises `BadInput` (exit 2).
- ``read_rule_text(path) -> str``: the one way a rule file is read (`ntgcore.files.read_bounded`):
  at most MAX_RULE_FILE_BYTES (128 MiB; ET Open's emerging-all.rules is tens of MB), UTF-8;
  `BadInput` for a missing path, a directory, a longer file or a device, and for bytes that are
  not UTF-8 (``FILE:LINE: the rule file is not UTF-8 text: ...``).
- ``parse_rule_text(text, file="<text>", line=1) -> RawRule``; raises `RuleSyntaxError` (its
  ``.problem`` is the `Problem`).
- ``RawRule``: ``action``, ``proto``, ``src``, ``sport``, ``direction``, ``dst``, ``dport`` (the
  five address/port fields and the direction are None for a Snort 3 service rule such as
  ``alert http (...)`` written without addresses), ``options: list[Option]``, ``file``, ``line``,
  ``text`` (the rule as one line), ``sid``, ``rev``, ``gid``, ``msg``; ``first(keyword)`` /
  ``values(keyword)`` / ``has(keyword)``; ``render(options=None, header=None)`` writes the rule
  back as text (for translation).
- ``Option``: ``keyword`` (lower case), ``value`` (the raw text after the first ``:``, stripped,
  quotes and escapes kept as written; None for a keyword without value such as ``nocase``).
  ``unquote(value)`` removes one pair of surrounding quotes and resolves ``\\"``, ``\\;`` and
  ``\\\\`` (content bytes such as ``|0d 0a|`` are decoded by the semantics, not here).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ntgcore.errors import NtgError
from ntgcore.files import read_bounded

ACTIONS = frozenset(
    {
        "alert",
        "drop",
        "reject",
        "pass",
        "log",
        "sdrop",
        "rejectsrc",
        "rejectdst",
        "rejectboth",
        "block",
        "react",
        "rewrite",
        "activate",
        "dynamic",
    }
)
DIRECTIONS = frozenset({"->", "<>", "<-"})
MAX_RULE_BYTES = 64 * 1024
MAX_RULE_FILE_BYTES = 128 * 2**20


@dataclass(frozen=True)
class Problem:
    """Something wrong with one rule (or one line), located in its file."""

    file: str
    line: int
    message: str
    sid: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        sid = f" (sid {self.sid})" if self.sid is not None else ""
        return f"{where}: {self.message}{sid}"


class RuleSyntaxError(NtgError, ValueError):
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        super().__init__(str(problem))


@dataclass(frozen=True)
class Option:
    keyword: str
    value: str | None = None

    def render(self) -> str:
        return self.keyword if self.value is None else f"{self.keyword}:{self.value}"


@dataclass
class RawRule:
    action: str
    proto: str
    src: str | None
    sport: str | None
    direction: str | None
    dst: str | None
    dport: str | None
    options: list[Option]
    file: str = "<text>"
    line: int = 1
    text: str = ""
    sid: int | None = None
    rev: int | None = None
    gid: int = 1
    msg: str = ""
    _index: dict[str, list[int]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for i, opt in enumerate(self.options):
            self._index.setdefault(opt.keyword, []).append(i)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def is_service_rule(self) -> bool:
        """A Snort 3 rule such as ``alert http (...)`` without addresses and ports."""
        return self.src is None

    def has(self, keyword: str) -> bool:
        return keyword in self._index

    def values(self, keyword: str) -> list[str | None]:
        return [self.options[i].value for i in self._index.get(keyword, ())]

    def first(self, keyword: str, default: str | None = None) -> str | None:
        idx = self._index.get(keyword)
        return self.options[idx[0]].value if idx else default

    def header(self) -> str:
        if self.src is None:
            return f"{self.action} {self.proto}"
        return " ".join(
            (self.action, self.proto, self.src, self.sport, self.direction, self.dst, self.dport)  # type: ignore[arg-type]  # all set with src
        )

    def render(self, options: list[Option] | None = None, header: str | None = None) -> str:
        opts = self.options if options is None else options
        body = " ".join(o.render() + ";" for o in opts)
        return f"{header if header is not None else self.header()} ({body})"


# One option: everything up to an unescaped ';' outside quotes.
_OPTION_RE = re.compile(r'\s*((?:[^;"\\]|\\.|"(?:[^"\\]|\\.)*")*?)\s*;', re.S)
_UNQUOTE_RE = re.compile(r'\\(["\\;:])')
_INT_RE = re.compile(r"\s*(\d+)\s*$")
_SID_RE = re.compile(r"[(;]\s*sid\s*:\s*(\d+)")


def unquote(value: str | None) -> str:
    """The text of a quoted option value, with ``\\"``, ``\\;``, ``\\\\`` resolved."""
    if value is None:
        return ""
    v = value.strip()
    if len(v) >= 2 and v[0] == '"' and v[-1] == '"':
        v = v[1:-1]
    return _UNQUOTE_RE.sub(r"\1", v) if "\\" in v else v


def _split_options(body: str, file: str, line: int) -> list[Option]:
    options: list[Option] = []
    pos = 0
    n = len(body)
    while pos < n:
        if body[pos:].strip() == "":
            break
        m = _OPTION_RE.match(body, pos)
        if not m:
            rest = body[pos:].strip()
            if rest.count('"') % 2:
                raise RuleSyntaxError(
                    Problem(
                        file,
                        line,
                        f"unterminated quoted string in options near {rest[:40]!r}; close the quote",
                    )
                )
            raise RuleSyntaxError(
                Problem(file, line, f"option {rest[:40]!r} is not ended by ';'; add the ';'")
            )
        text = m.group(1)
        pos = m.end()
        if not text:
            continue
        key, sep, value = text.partition(":")
        key = key.strip().lower()
        if not key or not re.fullmatch(r"[a-z0-9_.\-]+", key):
            raise RuleSyntaxError(
                Problem(file, line, f"bad option keyword {key[:40]!r} in {text[:60]!r}")
            )
        options.append(Option(key, value.strip() if sep else None))
    return options


def parse_rule_text(text: str, file: str = "<text>", line: int = 1) -> RawRule:
    """Split one rule (already joined into one line)."""
    text = text.strip()
    open_at = text.find("(")
    if open_at < 0:
        raise RuleSyntaxError(Problem(file, line, "no option list '( ... )' in the rule"))
    close_at = text.rfind(")")
    if close_at < open_at or text[close_at + 1 :].strip():
        raise RuleSyntaxError(
            Problem(file, line, "the option list is not closed by ')' at the end of the rule")
        )
    head = text[:open_at].split()
    if not head or head[0].lower() not in ACTIONS:
        raise RuleSyntaxError(
            Problem(
                file,
                line,
                f"unknown rule action {head[0] if head else ''!r}; expected one of alert, drop, pass, reject, log",
            )
        )
    if len(head) == 2:
        action, proto = head
        src = sport = direction = dst = dport = None
    elif len(head) == 7:
        action, proto, src, sport, direction, dst, dport = head
        if direction not in DIRECTIONS:
            raise RuleSyntaxError(
                Problem(file, line, f"bad direction {direction!r}; expected '->' or '<>'")
            )
    else:
        raise RuleSyntaxError(
            Problem(
                file,
                line,
                f"rule header has {len(head)} fields ({' '.join(head)!r}); expected "
                "'ACTION PROTO SRC SPORT -> DST DPORT' or the Snort 3 'ACTION SERVICE'",
            )
        )
    options = _split_options(text[open_at + 1 : close_at], file, line)
    rule = RawRule(
        action.lower(), proto.lower(), src, sport, direction, dst, dport, options, file, line, text
    )
    sid = rule.first("sid")
    if sid is None:
        raise RuleSyntaxError(Problem(file, line, "rule has no sid; every rule needs 'sid:N;'"))
    m = _INT_RE.match(sid)
    if not m:
        raise RuleSyntaxError(Problem(file, line, f"sid {sid!r} is not a number"))
    rule.sid = int(m.group(1))
    rev = rule.first("rev")
    if rev is not None and _INT_RE.match(rev):
        rule.rev = int(rev)
    gid = rule.first("gid")
    if gid is not None and _INT_RE.match(gid):
        rule.gid = int(gid)
    rule.msg = unquote(rule.first("msg"))
    return rule


def _open_paren_depth(s: str) -> int:
    """Parenthesis depth at the end of `s`, ignoring quoted text (rough, for line joining)."""
    depth = 0
    in_q = False
    esc = False
    for ch in s:
        if esc:
            esc = False
        elif ch == "\\":
            esc = True
        elif ch == '"':
            in_q = not in_q
        elif not in_q:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
    return depth


def iter_rule_texts(lines: list[str]):
    """(line number, joined text) for every non-comment rule in `lines` (1-based numbers)."""
    i = 0
    n = len(lines)
    while i < n:
        raw = lines[i].rstrip("\r\n")
        start = i + 1
        i += 1
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        parts = [s]
        # backslash continuation
        while parts[-1].endswith("\\") and i < n:
            parts[-1] = parts[-1][:-1]
            parts.append(lines[i].strip())
            i += 1
        text = " ".join(parts)
        # Snort 3: a rule may span lines until its parenthesis closes
        if "(" in text and _open_paren_depth(text) > 0:
            while i < n:
                nxt = lines[i].strip()
                first = nxt.split(None, 1)[0].lower() if nxt else ""
                if nxt.startswith("#") and not nxt.startswith("#)"):
                    i += 1
                    continue
                if first in ACTIONS:
                    break
                text = f"{text} {nxt}" if nxt else text
                i += 1
                if len(text) > MAX_RULE_BYTES or _open_paren_depth(text) <= 0:
                    break
        yield start, text


def read_rule_text(path: str | os.PathLike) -> str:
    """The text of a rule file; BadInput when it cannot be read as one (module docstring)."""
    return read_bounded(
        path,
        MAX_RULE_FILE_BYTES,
        "rule file",
        "split it into several rule files, each given on the command line",
    )


def read_rules(path: str | os.PathLike) -> tuple[list[RawRule], list[Problem]]:
    """All enabled rules of one file, and a Problem for each malformed one (which is skipped);
    BadInput when the file cannot be read as a rule file (`read_rule_text`)."""
    name = str(path)
    data = read_rule_text(path)
    rules: list[RawRule] = []
    problems: list[Problem] = []
    for line, text in iter_rule_texts(data.splitlines()):
        if len(text) > MAX_RULE_BYTES:
            sid = _SID_RE.search(text)
            problems.append(
                Problem(
                    name,
                    line,
                    f"rule of {len(text):,} bytes is longer than the "
                    f"{MAX_RULE_BYTES:,} a rule may have; refused",
                    int(sid.group(1)) if sid else None,
                )
            )
            continue
        try:
            rules.append(parse_rule_text(text, name, line))
        except RuleSyntaxError as exc:
            problems.append(exc.problem)
    return rules, problems
