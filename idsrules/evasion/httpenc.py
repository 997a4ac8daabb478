"""Application-level class `http-encoding`: the client's HTTP requests written with other bytes
(a chunked or gzip body, a percent-encoded, double-encoded or %u-encoded path, dot segments,
header names in another case, bare LF line ends). Each variant sets `app="http"` and `meant`
(the plain client stream): whether a server understood the same request is `appview.meaning`'s
to say (the double and %u encodings are, for a server that decodes once, other paths).

Only sessions whose every client message parses as whole HTTP requests; a request a variant
cannot change (no body for the body variants, a target not starting with `/` for the path
ones) is left as it was, and a session none of whose requests changed has no such variant. The
method is kept as sent: a lower-case method is another method (RFC 9110 9.1), not an encoding.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable

from .appview import HttpRequest, TooLarge, read_requests, split_target
from .common import rng
from .model import Step, WirePlan, evolve

CLS = "http-encoding"
# bytes a path or query keeps literal: the path's separators, the query's structure ("+" is a
# space to parse_qsl, %2B a plus), and an escape's own "%" (an existing %XX stays as it is)
KEEP_PATH = b"/"
KEEP_QUERY = b"&=+"


def _head(req: HttpRequest, target: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"{req.method} {target} {req.version}"] + [f"{n}: {v}" for n, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _units(text: str) -> list[tuple[bytes, bool]]:
    """`text` (a path or a query, as sent) as units: (byte, already escaped) for each byte; an
    existing %XX escape is one unit with its decoded byte."""
    raw = text.encode("latin-1", "replace")
    out: list[tuple[bytes, bool]] = []
    i = 0
    while i < len(raw):
        if raw[i : i + 1] == b"%" and _is_hex(raw[i + 1 : i + 3]):
            out.append((bytes([int(raw[i + 1 : i + 3], 16)]), True))
            i += 3
        else:
            out.append((raw[i : i + 1], False))
            i += 1
    return out


def _is_hex(b: bytes) -> bool:
    return len(b) == 2 and all(c in b"0123456789abcdefABCDEF" for c in b)


def _encode(text: str, keep: bytes, fmt: Callable[[int], str]) -> str:
    """Every byte of `text` not in `keep` written as `fmt(byte)`; an existing escape too (its
    decoded byte)."""
    out = []
    for b, escaped in _units(text):
        if b in keep and not escaped:
            out.append(b.decode("latin-1"))
        else:
            out.append(fmt(b[0]))
    return "".join(out)


def _target(req: HttpRequest, fmt: Callable[[int], str]) -> str | None:
    path, query = split_target(req.target)
    if not path.startswith("/"):
        return None
    new = _encode(path, KEEP_PATH, fmt)
    if "?" in req.target:
        new += "?" + _encode(query, KEEP_QUERY, fmt)
    return new


def _retarget(fmt: Callable[[int], str]) -> Callable[[HttpRequest, int], bytes | None]:
    def one(req: HttpRequest, seed: int) -> bytes | None:
        t = _target(req, fmt)
        if t is None:
            return None
        return _head(req, t, list(req.headers)) + req.raw_body

    return one


def _path_tricks(req: HttpRequest, seed: int) -> bytes | None:
    """`/./`, `//` and a `dir/../` pair ahead of the path: the same path once normalised."""
    if not req.target.startswith("/"):
        return None
    word = "ntg" + "".join(rng(seed, "http-path").choice("qzjxkvwy") for _ in range(3))
    return _head(req, f"/.//{word}/..{req.target}", list(req.headers)) + req.raw_body


def _case(req: HttpRequest, seed: int) -> bytes | None:
    """Header names in another case (upper, or lower when already upper)."""
    if not req.headers:
        return None
    heads = [(n.upper() if n != n.upper() else n.lower(), v) for n, v in req.headers]
    return _head(req, req.target, heads) + req.raw_body


def _bare_lf(req: HttpRequest, seed: int) -> bytes | None:
    """The request line and the headers ended by a bare LF (RFC 9112 2.2: a recipient MAY take
    it for CRLF; http.server does)."""
    head = _head(req, req.target, list(req.headers)).replace(b"\r\n", b"\n")
    return head + req.raw_body


def _body_ok(req: HttpRequest) -> bool:
    """A request whose body goes plainly (Content-Length, no transfer or content coding)."""
    return bool(req.body) and not any(
        req.header(h) for h in ("transfer-encoding", "content-encoding")
    )


def _no_length(req: HttpRequest) -> list[tuple[str, str]]:
    return [(n, v) for n, v in req.headers if n.lower() != "content-length"]


def _chunked(req: HttpRequest, seed: int) -> bytes | None:
    """The body in chunks of 3 to 7 bytes, Transfer-Encoding: chunked for Content-Length."""
    if not _body_ok(req):
        return None
    r = rng(seed, "http-chunked", len(req.body))
    parts = []
    i = 0
    while i < len(req.body):
        n = r.randint(3, 7)
        chunk = req.body[i : i + n]
        parts.append(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        i += n
    heads = _no_length(req) + [("Transfer-Encoding", "chunked")]
    return _head(req, req.target, heads) + b"".join(parts) + b"0\r\n\r\n"


def _gzip(req: HttpRequest, seed: int) -> bytes | None:
    """The body gzip-compressed, Content-Encoding: gzip, Content-Length its new length."""
    if not _body_ok(req):
        return None
    body = gzip.compress(req.body, mtime=0)
    heads = _no_length(req) + [("Content-Encoding", "gzip"), ("Content-Length", str(len(body)))]
    return _head(req, req.target, heads) + body


VARIANTS: dict[str, Callable[[HttpRequest, int], bytes | None]] = {
    "http-chunked": _chunked,
    "http-gzip": _gzip,
    "http-percent": _retarget(lambda b: f"%{b:02X}"),
    "http-double-percent": _retarget(lambda b: f"%25{b:02X}"),
    "http-path": _path_tricks,
    "http-case": _case,
    "http-lf": _bare_lf,
    "http-unicode": _retarget(lambda b: f"%u{b:04X}"),
}


def http_steps(plan: WirePlan) -> list[list[HttpRequest]] | None:
    """The requests of each client step (servers' steps: []); None when a client step is not
    whole HTTP requests (or the session is UDP)."""
    if plan.proto != "tcp":
        return None
    out: list[list[HttpRequest]] = []
    for step in plan.steps:
        if not step.from_client:
            out.append([])
            continue
        try:
            reqs, problem = read_requests(step.data)
        except TooLarge:
            return None
        if problem or not reqs:
            return None
        out.append(reqs)
    return out


def encodings(plan: WirePlan, seed: int) -> list[WirePlan]:
    """The http-encoding variants of `plan` (none when it is not HTTP requests)."""
    parsed = http_steps(plan)
    if parsed is None or not any(parsed):
        return []
    out = []
    for name, make in VARIANTS.items():
        steps: list[Step] = []
        changed = False
        for step, reqs in zip(plan.steps, parsed):
            if not step.from_client:
                steps.append(step)
                continue
            data = b""
            for k, req in enumerate(reqs):
                new = make(req, seed + k)
                changed |= new is not None
                data += new if new is not None else req.raw_head + req.raw_body
            steps.append(Step(True, data))
        if changed:
            out.append(
                evolve(
                    plan,
                    variant=name,
                    cls=CLS,
                    seed=seed,
                    steps=tuple(steps),
                    app="http",
                    meant=plan.client_stream(),
                )
            )
    return out
