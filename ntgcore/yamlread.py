"""Reading a YAML file that a user wrote, with bounds on what it may cost.

One pass over libyaml's event stream (the pure-Python parser where libyaml is missing) builds the
plain data a SafeLoader would build: the same scalars, anchors, aliases and `<<` merge keys. No
node graph is kept and nothing recurses, so the cost is linear in the text and memory is the data
alone. Refused, each as a `FILE:LINE: where: message` problem (docs/scenario.md, "Limits"):

- a text longer than `MAX_BYTES`;
- nesting deeper than `MAX_DEPTH` (a 5,000-deep `[[[[...` would exhaust the recursion of any
  recursive walk after the read);
- more than `MAX_ALIASES` aliases, or more than `MAX_NODES` nodes counting every alias as the
  whole node it stands for: a "billion laughs" text of a few hundred bytes stands for 10^9 nodes,
  and the validation that walks the data would visit them all;
- an alias to a node that contains it (a recursive structure);
- a key given twice in one mapping (a plain loader keeps the last one silently);
- complex keys (a mapping or a list as a key), tags other than YAML's standard scalar tags, and
  more than one document.

Lines are not recorded while reading: `yaml_lines` reads the text again when an error needs them,
which keeps the line map (several times the size of the data) out of every successful load.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from .errors import BadInput
from .files import size_text as _size

MAX_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 4_000_000
MAX_ALIASES = 10_000

_EventSource = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVER = Resolver()
_CONSTRUCTOR = SafeConstructor()
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_INT = "tag:yaml.org,2002:int"
_MAX_INT_DIGITS = sys.get_int_max_str_digits() or 4300  # Python's own limit on int(text)
_COLLECTION_TAGS = {None, "!", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"}
_PLAIN = (True, False)
_TOO_MANY = (
    f"more than {MAX_NODES:,} values, each alias counted as all the values it stands "
    f"for (nested aliases multiply); write fewer values or aliases"
)
_scalar_cache: dict[str, Any] = {}  # plain scalar text -> its value (values are immutable)


class YamlProblem(BadInput):
    """A YAML text that cannot be read; `problems` holds one `FILE:LINE: where: message` each."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def where(path: tuple[Any, ...]) -> str:
    """`flows[2].dst_port` for the path ("flows", 2, "dst_port"); a deep one shortened."""
    if len(path) > 12:
        return f"{where(path[:4])}...{where(path[-2:]) if isinstance(path[-2], int) else '.' + where(path[-2:])}"
    text = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "(top level)"


def check_size(n: int, file: str) -> None:
    """Refuse a text of `n` bytes up front when it is over `MAX_BYTES`."""
    if n > MAX_BYTES:
        raise YamlProblem(
            [
                f"{file}: the file is {_size(n)}; at most {_size(MAX_BYTES)} is read "
                f"(describe many similar flows with one flow and `repeat`)"
            ]
        )


def _scalar(event: Any) -> Any:
    """The value SafeLoader gives a scalar event; ValueError for a value its tag refuses."""
    tag = event.tag
    if tag is None or tag == "!":
        if event.implicit[0]:
            value = event.value
            try:
                return _scalar_cache[value]
            except KeyError:
                pass
            tag = _RESOLVER.resolve(yaml.ScalarNode, value, _PLAIN)
            result = value if tag == _STR else _construct(tag, event)
            if len(_scalar_cache) > 50_000:
                _scalar_cache.clear()
            _scalar_cache[value] = result
            return result
        return event.value
    return _construct(tag, event)


def _construct(tag: str, event: Any) -> Any:
    if tag == _MERGE:
        return _MergeKey
    if tag == _INT and len(event.value) > _MAX_INT_DIGITS:  # Python would say "not a valid int"
        digits = sum(c.isdigit() for c in event.value)
        if digits > _MAX_INT_DIGITS:
            raise ValueError(
                f"too large: an integer of {digits:,} digits (at most {_MAX_INT_DIGITS:,} "
                "digits are read; no value here needs as many)"
            )
    make = SafeConstructor.yaml_constructors.get(tag)
    if make is None or tag in (
        "tag:yaml.org,2002:seq",
        "tag:yaml.org,2002:map",
        "tag:yaml.org,2002:omap",
        "tag:yaml.org,2002:pairs",
        "tag:yaml.org,2002:set",
    ):
        raise ValueError(f"the tag {_short_tag(tag)} is not allowed here")
    try:
        return make(
            _CONSTRUCTOR, yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark)
        )
    except Exception as exc:
        # (`!!int` with no digits is an IndexError); every one means the value does not fit its tag
        problem = getattr(exc, "problem", None)
        raise ValueError(
            f"{event.value[:40]!r} is not a valid {tag.rsplit(':', 1)[-1]}"
            + (f": {problem}" if problem else "")
        ) from None


def _short_tag(tag: str) -> str:
    return "!!" + tag[len("tag:yaml.org,2002:") :] if tag.startswith("tag:yaml.org,2002:") else tag


class _MergeKey:
    """The `<<` key."""


class _Frame:
    __slots__ = ("data", "is_map", "key", "anchor", "start", "merges", "line")

    def __init__(self, data: Any, is_map: bool, anchor: str | None, start: int, line: int):
        self.data = data
        self.is_map = is_map
        self.key: Any = _NO_KEY
        self.anchor = anchor
        self.start = start
        self.merges: list[Any] | None = None
        self.line = line


_NO_KEY = object()


def _path(stack: list[_Frame]) -> tuple[Any, ...]:
    """Where the next value of the innermost container goes."""
    out: list[Any] = []
    for f in stack:
        if f.is_map:
            if f.key is not _NO_KEY:
                out.append("<<" if f.key is _MergeKey else f.key)
        else:
            out.append(len(f.data))
    return tuple(out)


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: reading and validating a large file create millions
    of containers and no cycles, and each collection would walk all of them again (the time grew
    faster than the file without this)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_yaml(text: str, file: str = "<yaml>") -> Any:
    """The data of a one-document YAML text, within the limits above; YamlProblem if not."""
    check_size(
        len(text.encode("utf-8", "surrogatepass")) if len(text) * 4 > MAX_BYTES else len(text), file
    )
    with gc_paused():
        return _read(text, file)


def _read(text: str, file: str, source: Any = _EventSource) -> Any:
    parser = source(text)
    anchors: dict[str, tuple[Any, int]] = {}  # name -> (value, nodes it stands for)
    open_anchors: set[str] = set()
    stack: list[_Frame] = []
    duplicates: list[tuple[tuple[Any, ...], int]] = []
    nodes = aliases = documents = 0
    root: Any = None
    ScalarEvent, AliasEvent = yaml.ScalarEvent, yaml.AliasEvent
    SequenceStartEvent, MappingStartEvent = yaml.SequenceStartEvent, yaml.MappingStartEvent
    CollectionEndEvent, DocumentStartEvent = yaml.CollectionEndEvent, yaml.DocumentStartEvent

    def fail(line: int, message: str, path: tuple[Any, ...] | None = None) -> YamlProblem:
        return YamlProblem(
            [f"{file}:{line}: {where(_path(stack) if path is None else path)}: {message}"]
        )

    try:
        while True:
            event = parser.get_event()
            if event is None or isinstance(event, yaml.StreamEndEvent):
                break
            cls = type(event)
            if cls is ScalarEvent:
                nodes += 1
                try:
                    value = _scalar(event)
                except ValueError as exc:
                    raise fail(event.start_mark.line + 1, str(exc)) from None
                if event.anchor is not None:
                    anchors[event.anchor] = (value, 1)
                    open_anchors.discard(event.anchor)  # redefined: later aliases mean this one
                size = 1
            elif cls is AliasEvent:
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise fail(
                        event.start_mark.line + 1,
                        f"more than {MAX_ALIASES:,} aliases; "
                        "write the values out or use fewer anchors",
                    )
                name = event.anchor
                if name in open_anchors:
                    raise fail(
                        event.start_mark.line + 1,
                        f"the alias *{name} is inside the node "
                        f"&{name} it refers to (a recursive structure)",
                    )
                if name not in anchors:
                    raise fail(
                        event.start_mark.line + 1, f"unknown alias *{name}; define &{name} before"
                    )
                value, size = anchors[name]
                nodes += size
            elif cls is SequenceStartEvent or cls is MappingStartEvent:
                nodes += 1
                line = event.start_mark.line + 1
                if len(stack) >= MAX_DEPTH:
                    raise fail(
                        line,
                        f"nested more than {MAX_DEPTH} levels deep (lists and mappings inside each other); flatten it",
                    )
                if event.tag not in _COLLECTION_TAGS:
                    raise fail(line, f"the tag {_short_tag(event.tag)} is not allowed here")
                top = stack[-1] if stack else None
                if top is not None and top.is_map and top.key is _NO_KEY:
                    raise fail(line, "a key must be a plain value, not a list or a mapping")
                is_map = cls is MappingStartEvent
                if event.anchor is not None:
                    open_anchors.add(event.anchor)
                stack.append(_Frame({} if is_map else [], is_map, event.anchor, nodes, line))
                if nodes > MAX_NODES:
                    raise fail(line, _TOO_MANY)
                continue
            elif issubclass(cls, CollectionEndEvent):
                frame = stack.pop()
                value = frame.data
                if frame.merges:
                    merged: dict[Any, Any] = {}
                    for m in reversed(frame.merges):
                        merged.update(m)
                    merged.update(value)
                    value = merged
                size = nodes - frame.start + 1
                if frame.anchor is not None:
                    open_anchors.discard(frame.anchor)
                    anchors[frame.anchor] = (value, size)
            elif cls is DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise fail(
                        event.start_mark.line + 1, "more than one YAML document; keep one", ()
                    )
                continue
            else:
                continue
            if nodes > MAX_NODES:
                raise fail(event.start_mark.line + 1, _TOO_MANY)
            # attach `value` to the container it belongs to
            if value is _MergeKey and not (stack and stack[-1].is_map and stack[-1].key is _NO_KEY):
                value = "<<"  # `<<` merges only as a key; elsewhere it is text
            if not stack:
                root = value
                continue
            top = stack[-1]
            if not top.is_map:
                top.data.append(value)
            elif top.key is _NO_KEY:
                if isinstance(value, (dict, list)):
                    raise fail(
                        event.start_mark.line + 1,
                        "a key must be a plain value, not a list or a mapping",
                    )
                top.key = value
            else:
                key = top.key
                if key is _MergeKey:
                    merges = value if isinstance(value, list) else [value]
                    if not all(isinstance(m, dict) for m in merges):
                        raise fail(
                            event.start_mark.line + 1, "`<<` merges a mapping or a list of mappings"
                        )
                    top.merges = (top.merges or []) + merges
                else:
                    try:
                        if key in top.data:
                            duplicates.append((_path(stack), event.start_mark.line + 1))
                        top.data[key] = value
                    except TypeError:  # an unhashable key
                        raise fail(
                            event.start_mark.line + 1, "a key must be a plain value"
                        ) from None
                top.key = _NO_KEY
    except yaml.YAMLError as exc:
        if source is not yaml.SafeLoader and "nesting depth" in _problem(exc):
            # libyaml 0.2.6 (PyYAML 6.0.3+) stops deep nesting in its scanner, ahead of the events:
            # the pure-Python parser reads lazily, so our own MAX_DEPTH names the path and the line.
            return _read(text, file, yaml.SafeLoader)
        raise YamlProblem(
            [f"{file}:{_error_line(exc, text)}: YAML syntax: {_problem(exc)}"]
        ) from None
    if duplicates:
        raise YamlProblem(_duplicate_problems(text, file, duplicates))
    return root


def _problem(exc: yaml.YAMLError) -> str:
    return getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)


def _error_line(exc: yaml.YAMLError, text: str) -> int:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return int(mark.line) + 1
    position = getattr(exc, "position", None)  # a ReaderError: a character YAML does not allow
    if isinstance(position, int):
        return text.count("\n", 0, position) + 1
    return 1


def _duplicate_problems(
    text: str, file: str, duplicates: list[tuple[tuple[Any, ...], int]]
) -> list[str]:
    first = yaml_lines(text, {path for path, _ in duplicates})
    out = []
    for path, second in duplicates:
        key = path[-1]
        out.append(
            f"{file}:{second}: {where(path)}: the key `{key}` is given twice, at {file}:"
            f"{first.get(path, '?')} and {file}:{second}; keep one (YAML would keep the last)"
        )
    return out


def yaml_lines(
    text: str, wanted: Collection[tuple[Any, ...]] | None = None
) -> dict[tuple[Any, ...], int]:
    """Lines (1-based) of a text `read_yaml` accepted, by path: `path` is the line of a key (or of
    a list item), `path + ("__value__",)` the line of a key's value. `wanted`: only these paths
    (and their `__value__`), else all. The first occurrence of a path wins. An aliased node is
    not entered: paths inside it take the alias's line through their prefix."""
    parser = _EventSource(text)
    out: dict[tuple[Any, ...], int] = {}
    anchors: dict[str | None, Any] = {}  # (an alias always names its anchor)
    # each open container: [path, is_map, pending key or _NO_KEY, next index]
    stack: list[list[Any]] = []

    def record(path: tuple[Any, ...], line: int) -> None:
        if wanted is None or path in wanted:
            out.setdefault(path, line)

    def position(line: int) -> tuple[Any, ...] | None:
        """The path of a value starting at `line`, recording it; None for a key."""
        if not stack:
            out.setdefault((), line)
            return ()
        top = stack[-1]
        if top[1]:
            if top[2] is _NO_KEY:
                return None
            path: tuple[Any, ...] = top[0] + (top[2],)
            if wanted is None or path in wanted:
                out.setdefault(path + ("__value__",), line)
            top[2] = _NO_KEY
            return path
        path = top[0] + (top[3],)
        top[3] += 1
        record(path, line)
        return path

    try:
        while True:
            event = parser.get_event()
            if event is None or isinstance(event, yaml.StreamEndEvent):
                break
            line = event.start_mark.line + 1
            if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
                if isinstance(event, yaml.ScalarEvent):
                    try:
                        value = _scalar(event)
                    except ValueError:
                        value = event.value
                    if event.anchor is not None:
                        anchors[event.anchor] = value
                else:
                    value = anchors.get(event.anchor)
                if stack and stack[-1][1] and stack[-1][2] is _NO_KEY:
                    top = stack[-1]
                    key = "<<" if value is _MergeKey else value
                    try:
                        hash(key)
                    except TypeError:
                        key = str(key)
                    top[2] = key
                    record(top[0] + (key,), line)
                else:
                    position(line)
            elif isinstance(event, yaml.CollectionStartEvent):
                path = position(line)
                if path is None:  # a complex key: read_yaml refuses it; keep the walk going
                    path = stack[-1][0] + ("?",)
                    stack[-1][2] = "?"
                stack.append([path, isinstance(event, yaml.MappingStartEvent), _NO_KEY, 0])
            elif isinstance(event, yaml.CollectionEndEvent):
                stack.pop()
    except yaml.YAMLError:
        pass  # lines of the text before the error are what there is
    return out
