"""Expected results of an IDS run: a YAML list of checks on the EVE events, in the shape of
suricata-verify's `checks` (our own code; the format is its public idea).

    checks:
      - filter:
          count: 1                      # or min / max / lt / gt, alone or together
          match:
            event_type: alert
            alert.signature_id: 1000001 # dotted keys reach into nested objects
            src_ip: 192.0.2.10          # addresses compare as addresses (2001:db8::1 = 2001:0db8:...:0001)

`load_expect(path) -> ExpectFile` validates the file (errors as ``FILE:LINE: field: message``,
raised as `ExpectError`); `evaluate(expect, events) -> list[CheckResult]` counts the events each
check's `match` selects and compares the count with its bounds. A failing check says what it
expected, what it found, and which one of its `match` keys left out the events the others select.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ntgcore.errors import BadInput, InputProblems
from ntgcore.files import read_bounded
from ntgcore.scenario import format_error
from ntgcore.yamlread import MAX_BYTES, YamlProblem, read_yaml, yaml_lines

Scalar = str | int | float | bool | None
BOUNDS = ("count", "min", "max", "lt", "gt")


class ExpectError(InputProblems):
    """An expect file that cannot be used; `problems` holds one `FILE:LINE: field: message` each."""


class Filter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    count: int | None = Field(None, ge=0, description="exactly this many events")
    min: int | None = Field(None, ge=0, description="at least this many")
    max: int | None = Field(None, ge=0, description="at most this many")
    lt: int | None = Field(None, ge=1, description="fewer than this many")
    gt: int | None = Field(None, ge=0, description="more than this many")
    match: dict[str, Scalar] = Field(
        min_length=1, description="dotted EVE key -> value; all must hold"
    )

    @model_validator(mode="after")
    def _one_bound(self) -> Filter:
        if all(getattr(self, b) is None for b in BOUNDS):
            raise ValueError("give the expected number of events: count, min, max, lt or gt")
        if self.count is not None and any(getattr(self, b) is not None for b in BOUNDS[1:]):
            raise ValueError("count is exact: do not combine it with min, max, lt or gt")
        return self

    def holds(self, n: int) -> bool:
        return (
            (self.count is None or n == self.count)
            and (self.min is None or n >= self.min)
            and (self.max is None or n <= self.max)
            and (self.lt is None or n < self.lt)
            and (self.gt is None or n > self.gt)
        )

    def wanted(self) -> str:
        words = {
            "count": "exactly",
            "min": "at least",
            "max": "at most",
            "lt": "fewer than",
            "gt": "more than",
        }
        return " and ".join(
            f"{words[b]} {getattr(self, b)}" for b in BOUNDS if getattr(self, b) is not None
        )


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(None, description="shown in the report instead of the match")
    filter: Filter


class ExpectFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    checks: list[Check] = Field(min_length=1)


@dataclass(frozen=True)
class CheckResult:
    index: int
    name: str
    ok: bool
    expected: str  # "exactly 1 event(s) with event_type=alert, alert.signature_id=1000001"
    found: int
    hint: str = ""  # for a failure: which match key excluded the events the others select

    def as_dict(self) -> dict:
        return {
            "check": self.index,
            "name": self.name,
            "ok": self.ok,
            "expected": self.expected,
            "found": self.found,
            "hint": self.hint,
        }

    def __str__(self) -> str:
        head = f"check {self.index} ({self.name}): " if self.name else f"check {self.index}: "
        return (
            head
            + f"expected {self.expected}; found {self.found}"
            + (f" ({self.hint})" if self.hint else "")
        )


def load_expect(path: str | Path) -> ExpectFile:
    file = str(path)
    try:  # at most what a YAML text may be: also /dev/zero or a pipe stops there
        text = read_bounded(path, MAX_BYTES, "expect file")
    except BadInput as exc:
        raise ExpectError([str(exc)]) from None
    try:
        data = read_yaml(text, file)
    except YamlProblem as exc:
        raise ExpectError(exc.problems) from None
    if not isinstance(data, dict):
        raise ExpectError(
            [
                f"{file}:1: (top level): expected a mapping with `checks:`, a list of "
                "{filter: {count: N, match: {KEY: VALUE}}}"
            ]
        )
    lines = yaml_lines(text)
    try:
        return ExpectFile.model_validate(data)
    except ValidationError as exc:
        problems = [format_error(e, file, lines, ExpectFile) for e in exc.errors(include_url=False)]
        problems.sort(key=lambda p: int(p[len(file) + 1 :].split(":", 1)[0]))
        raise ExpectError(problems) from None


def lookup(event: dict, key: str) -> tuple[bool, object]:
    """(present, value) of a dotted key in an EVE event."""
    value: object = event
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def same(expected: Scalar, actual: object) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return expected == actual
    if isinstance(expected, str) and isinstance(actual, str):
        if expected == actual:
            return True
        try:
            return ipaddress.ip_address(expected) == ipaddress.ip_address(actual)
        except ValueError:
            return False
    return expected is None and actual is None


def matches(event: dict, match: dict[str, Scalar]) -> bool:
    for key, want in match.items():
        present, got = lookup(event, key)
        if not present or not same(want, got):
            return False
    return True


def evaluate(expect: ExpectFile, events: list[dict]) -> list[CheckResult]:
    results = []
    for i, check in enumerate(expect.checks):
        f = check.filter
        found = sum(1 for ev in events if matches(ev, f.match))
        what = ", ".join(f"{k}={v}" for k, v in f.match.items())
        expected = f"{f.wanted()} event(s) with {what}"
        ok = f.holds(found)
        results.append(
            CheckResult(
                i, check.name or "", ok, expected, found, "" if ok else _hint(f.match, events)
            )
        )
    return results


def _hint(match: dict[str, Scalar], events: list[dict]) -> str:
    """Which single keys of `match` left out events that all its other keys select, and the values
    those events had there."""
    if len(match) < 2:
        return ""
    parts = []
    for key in match:
        rest = {k: v for k, v in match.items() if k != key}
        values = Counter(
            _shown(ev, key)
            for ev in events
            if matches(ev, rest) and not matches(ev, {key: match[key]})
        )
        if values:
            got = ", ".join(f"{v} ({n})" for v, n in values.most_common(3))
            parts.append(f"{sum(values.values())} more event(s) without {key}: {key} was {got}")
    return "; ".join(parts)


def _shown(event: dict, key: str) -> str:
    present, value = lookup(event, key)
    return str(value) if present else "(absent)"
