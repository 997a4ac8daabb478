"""What a server application makes of a client byte stream: the yardstick of the
application-level evasion variants (docs/ids-coverage.md, "Evasion variants").

An application-level variant sends other bytes than the plain session (a chunked body, a
percent-encoded path, commands in lower case); the attack reached the host when the server
application understood the same request, so `meaning(app, stream)` returns a comparable value
(tuples) of what the server reads, and two streams mean the same when their values are equal.

HTTP (`app="http"`) is read with the standard library's server parser
(`http.server.BaseHTTPRequestHandler.parse_request`, which reads the headers with
`http.client.parse_headers`); per request: the method as sent (methods are case-sensitive,
RFC 9110 9.1), the path percent-decoded once (`urllib.parse.unquote_to_bytes`, as servers do) and
normalised as `SimpleHTTPRequestHandler.translate_path` does (dot segments and empty segments
gone), the query decoded once into its pairs (`urllib.parse.parse_qsl`), the version, the
headers with case-insensitive names (the framing headers Content-Length, Transfer-Encoding and
Content-Encoding left out: they describe the encoding, not the request), and the body
de-chunked (`Transfer-Encoding: chunked`, RFC 9112 7.1; the standard library has no request-side
de-chunker, so it is done here) and decompressed (`Content-Encoding: gzip`/`deflate`): the model
is an application that decodes request bodies. Decodings only some servers make (a second
percent-decoding, IIS's `%uXXXX`) are not made: the model is a server that decodes once.

SMTP and FTP (`app="smtp"`, `"ftp"`) are read as the standard library's `smtpd` reads commands
(measured: it ends a line at CRLF only, `set_terminator(b"\\r\\n")`; the verb is what precedes
the first space, upper-cased, RFC 5321 2.4 and RFC 959 5.3 make verbs case-insensitive; the
argument is the rest with the surrounding white space stripped). A bare LF therefore ends no
line, and a tab between verb and argument makes another verb. SMTP's message (after `DATA`, up
to the line `.`) is one item, dot-unstuffed. FTP is read by the same rule.

Hostile input gives `TooLarge` (a declared size or a decompressed body over `MAX_BODY`), never a
huge allocation or a hang; `reached` (model.py) counts it as "not the same request".
"""

from __future__ import annotations

import http.server
import io
import posixpath
import re
import zlib
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote_to_bytes

MAX_BODY = 16 << 20  # bytes: a body (declared, de-chunked or decompressed) larger than this
MAX_LINE = 65536  # bytes of a request line, as http.server takes
FRAMING = ("content-length", "transfer-encoding", "content-encoding")
APPS = ("http", "smtp", "ftp")
CRLF = b"\r\n"
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


class TooLarge(ValueError):
    """A size beyond MAX_BODY: the stream is not read further."""


@dataclass(frozen=True)
class HttpRequest:
    """One request as the server parsed it: the target and headers as sent (names in their
    case), `raw_body` the bytes that followed the headers as framed, `body` decoded."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]
    raw_body: bytes
    body: bytes
    raw_head: bytes = b""  # the request line and headers as sent

    def header(self, name: str) -> str | None:
        for n, v in self.headers:
            if n.lower() == name:
                return v
        return None

    def key(self) -> tuple:
        """What the application reads: comparable, encodings undone."""
        path, query = split_target(self.target)
        heads = tuple(sorted((n.lower(), v) for n, v in self.headers if n.lower() not in FRAMING))
        return (self.method, norm_path(path), query_pairs(query), self.version, heads, self.body)


class _Parser(http.server.BaseHTTPRequestHandler):
    """The standard library's request parser on a byte stream: no socket, no answer written;
    an error it would send is kept in `error`."""

    raw_requestline: bytes

    def __init__(self, rfile: io.BytesIO) -> None:  # the base handles a socket in __init__
        self.rfile = rfile
        self.wfile = io.BytesIO()
        self.client_address = ("0.0.0.0", 0)
        self.error = ""

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        self.error = f"{code} {message or ''}".strip()

    def log_message(self, format: str, *args: object) -> None:
        pass


def split_target(target: str) -> tuple[str, str]:
    """The path and the query of a request target (the fragment dropped)."""
    target = target.split("#", 1)[0]
    path, _, query = target.partition("?")
    return path, query


def norm_path(path: str) -> str:
    """The path decoded once and normalised as translate_path does: no `.`, `..` or empty
    segments; a trailing slash kept. On bytes (`unquote_to_bytes`), as a server reads them: a
    raw byte and its %XX are the same (translate_path's str decoding would make an escaped
    non-UTF-8 byte U+FFFD); the result as Latin-1 text."""
    raw = unquote_to_bytes(path.encode("latin-1", "replace"))
    trailing = raw.rstrip().endswith(b"/")
    words = [w for w in posixpath.normpath(raw).split(b"/") if w and w not in (b".", b"..")]
    return "/" + b"/".join(words).decode("latin-1") + ("/" if trailing and words else "")


def query_pairs(query: str) -> tuple[tuple[str, str], ...]:
    """The query's pairs decoded once, byte for byte (Latin-1: a raw byte and its %XX alike)."""
    return tuple(parse_qsl(query, keep_blank_values=True, encoding="latin-1"))


def _dechunk(f: io.BytesIO) -> tuple[bytes, str]:
    """A chunked body from `f` (RFC 9112 7.1: hex size, optional extensions, CRLF, data, CRLF;
    size 0, trailers, an empty line); the problem when it is cut or malformed."""
    out = bytearray()
    while True:
        line = f.readline(MAX_LINE + 1)
        if not line.endswith(b"\n"):
            return bytes(out), "chunked body cut in a chunk-size line"
        size_text = line.split(b";", 1)[0].strip()
        if not _HEX.fullmatch(size_text):
            return bytes(out), f"bad chunk size {size_text[:20]!r}"
        size = int(size_text, 16)
        if size + len(out) > MAX_BODY:
            raise TooLarge(f"a chunk of {size:,} bytes: the body would exceed {MAX_BODY:,}")
        if size == 0:
            while True:  # trailers up to the empty line
                t = f.readline(MAX_LINE + 1)
                if not t.endswith(b"\n"):
                    return bytes(out), "chunked body cut in its trailers"
                if t in (b"\r\n", b"\n"):
                    return bytes(out), ""
        data = f.read(size)
        out += data
        if len(data) < size:
            return bytes(out), "chunked body cut in a chunk"
        if f.readline(3) not in (b"\r\n", b"\n"):
            return bytes(out), "no CRLF after a chunk"


def _inflate(data: bytes, coding: str) -> bytes:
    """`data` decompressed (gzip, or deflate: zlib format, else raw), at most MAX_BODY bytes."""
    waves = (31,) if coding in ("gzip", "x-gzip") else (15, -15)
    err: zlib.error | None = None
    for wbits in waves:
        d = zlib.decompressobj(wbits)
        try:
            out = d.decompress(data, MAX_BODY + 1)
        except zlib.error as exc:
            err = exc
            continue
        if len(out) > MAX_BODY or d.unconsumed_tail:
            raise TooLarge(f"the {coding} body inflates beyond {MAX_BODY:,} bytes")
        if not d.eof:
            raise zlib.error(f"the {coding} body ends before its compressed stream")
        return out
    raise err or zlib.error(coding)


def read_requests(stream: bytes) -> tuple[list[HttpRequest], str]:
    """The requests in a client stream, in order, and what stops the reading ("" when the
    stream ends right after a whole request)."""
    f = io.BytesIO(stream)
    out: list[HttpRequest] = []
    while f.tell() < len(stream):
        p = _Parser(f)
        p.raw_requestline = f.readline(MAX_LINE + 1)
        if len(p.raw_requestline) > MAX_LINE:
            return out, "request line too long"
        if not p.raw_requestline.endswith(b"\n"):
            return out, "request line cut"
        at = f.tell()
        if not p.parse_request():
            return out, f"request refused: {p.error}"
        if p.request_version == "HTTP/0.9":  # a simple request: no headers, no body
            head = p.raw_requestline
            out.append(HttpRequest(p.command or "", p.path, p.request_version, (), b"", b"", head))
            continue
        if f.tell() == at or not _headers_ended(stream, f.tell()):
            return out, "headers cut"
        heads = tuple((n, v.strip()) for n, v in p.headers.items())
        start = f.tell()
        te = (p.headers.get("Transfer-Encoding") or "").lower()
        problem = ""
        if te:
            if te.split(",")[-1].strip() != "chunked":
                return out, f"transfer coding {te!r} not read"
            body, problem = _dechunk(f)
        else:
            cl = (p.headers.get("Content-Length") or "0").strip()
            if not cl.isdigit():
                return out, f"bad Content-Length {cl[:20]!r}"
            if len(cl) > len(str(MAX_BODY)):  # before int(): 4,300 digits and more raise there
                raise TooLarge(f"Content-Length of {len(cl):,} digits beyond {MAX_BODY:,}")
            n = int(cl)
            if n > MAX_BODY:
                raise TooLarge(f"Content-Length {n:,} beyond {MAX_BODY:,}")
            body = f.read(n)
            if len(body) < n:
                problem = "body cut"
        raw = stream[start : f.tell()]
        if problem:
            return out, problem
        coding = (p.headers.get("Content-Encoding") or "").strip().lower()
        if coding in ("gzip", "x-gzip", "deflate"):
            try:
                body = _inflate(body, coding)
            except zlib.error as exc:
                return out, f"{coding} body unreadable: {exc}"
        elif coding and coding != "identity":
            return out, f"content coding {coding!r} not read"
        head = stream[at - len(p.raw_requestline) : start]
        out.append(HttpRequest(p.command or "", p.path, p.request_version, heads, raw, body, head))
    return out, ""


def _headers_ended(stream: bytes, at: int) -> bool:
    """The header block the parser took ends with an empty line (not the stream's end)."""
    return stream[:at].endswith((b"\r\n\r\n", b"\n\n", b"\n\r\n"))


def command_items(
    stream: bytes, smtp: bool, in_data: bool = False
) -> tuple[list[tuple[str, bytes]], bool]:
    """The client stream of an SMTP or FTP session cut as the server reads it: (`command`,
    line), (`data`, line) for an SMTP message's lines (the `.` line included), (`tail`, bytes)
    for what no CRLF ends; each with its CRLF. `in_data`: the stream starts inside a message; the
    state after the stream is returned too."""
    items: list[tuple[str, bytes]] = []
    pos = 0
    while pos < len(stream):
        end = stream.find(CRLF, pos)
        if end < 0:
            items.append(("tail", stream[pos:]))
            break
        line = stream[pos : end + 2]
        pos = end + 2
        if in_data:
            items.append(("data", line))
            in_data = line != b".\r\n"
            continue
        items.append(("command", line))
        if smtp and verb_arg(line)[0] == "DATA":
            in_data = True
    return items, in_data


def verb_arg(line: bytes) -> tuple[str, str]:
    """A command line's verb (upper-cased) and argument (stripped), as smtpd splits it."""
    text = line.removesuffix(CRLF).decode("utf-8", "surrogateescape")
    verb, sep, arg = text.partition(" ")
    return verb.upper(), arg.strip() if sep else ""


def _commands(stream: bytes, smtp: bool) -> tuple:
    items, _ = command_items(stream, smtp)
    out: list[tuple] = []
    message = bytearray()
    for kind, line in items:
        if kind == "command":
            out.append(verb_arg(line))
        elif kind == "data":
            if line == b".\r\n":
                out.append(("message", bytes(message)))
                message.clear()
            else:  # RFC 5321 4.5.2: a leading dot doubled by the client
                message += line[1:] if line.startswith(b".") else line
        else:
            out.append(("cut", line))
    if message:
        out.append(("message cut", bytes(message)))
    return tuple(out)


def meaning(app: str, stream: bytes) -> tuple:
    """What the server application `app` (http, smtp, ftp) reads in the client `stream`, as a
    comparable tuple. TooLarge on a size beyond MAX_BODY; ValueError for an unknown app."""
    if app == "http":
        reqs, problem = read_requests(stream)
        return tuple(r.key() for r in reqs) + ((("stopped", problem),) if problem else ())
    if app in ("smtp", "ftp"):
        return _commands(stream, app == "smtp")
    raise ValueError(f"unknown application {app!r}: use one of {', '.join(APPS)}")
