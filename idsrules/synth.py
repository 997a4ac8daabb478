"""Rule models -> pseudo-stateful sessions in a pcap, one session (own 5-tuple) per rule.

`synthesize(models, pcap_path, manifest_path=None, *, ip_version=4) -> SynthResult`. Each supported
rule becomes a session between its own client and server address (HOME_NET in 198.18.0.0/16,
EXTERNAL_NET in 198.19.0.0/16; over IPv6, with `ip_version=6` or for a rule that names IPv6
(`RuleModel.ipv6`), 2001:db8::/48 and 2001:db8:1::/48): a TCP three-way handshake with correct
sequence and acknowledgement numbers, the data in the rule's direction (segmented, every segment
ACKed), an orderly FIN close; or UDP datagrams; or ICMP (ICMPv6 over IPv6). HTTP rules get a
request and a response with each content in its buffer and Content-Length framing, DNS rules a
query and a response (length-framed over TCP), TLS rules a ClientHello with the SNI (and the
server's certificate), SIP rules a request and a response; FTP, SMTP, POP3 and IMAP rules a
client/server dialogue with the rule's bytes as one line of it (`dialogue.py`). Each session
records its intended protocol (`app`), which `dissect.py` checks.
Flowbits checks get the packets of a rule that sets the bit first, in the same session; threshold
and detection_filter rules get as many sessions as the count needs, from one client.
One rule's work is bounded: RULE_TIME_LIMIT_S of planning (pcre backtracking), MAX_SESSION_BYTES
per session and MAX_RULE_TRAFFIC for all its sessions; a rule over one is in `failed` with the reason.

The manifest (JSON) maps each rule to its session(s): sid, related sids, protocol, app, client and
server address and port, first and last packet time (ns), and per rule the status and reasons.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import json
import re
import signal
import struct
import threading
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from ntgcore import packets as P
from ntgcore.errors import BadInput, NtgError
from ntgcore.files import read_bounded, replacing, write_whole

from .dialogue import (
    TEXT_APPS,
    dialogue,
    dns_tcp,
    pinned_to_start,
    sip_method_of,
    sip_request,
    sip_response,
    smtp_envelope,
)
from .layout import LayoutError, build_buffer, verify
from .regex_example import RegexUnsupported
from .semantics import (
    APP_PORTS,
    EXTERNAL_NET6,
    FLOWINT,
    HOME_NET6,
    HTTP_HEADER_VALUE_BUFFERS,
    MAX_RULE_TRAFFIC,
    MAX_SESSION_BYTES,
    RESPONSE_BUFFERS,
    STREAM_OPS,
    XBIT,
    RuleModel,
    address_side,
    choose_port,
)

MSS = 1400
T0_NS = 1_700_000_000_000_000_000
SESSION_GAP_NS = 1_000_000  # 1 ms between session starts
PKT_GAP_NS = 20_000  # 20 µs between the packets of a session
REQUEST_ONLY = {
    "http.user_agent",
    "http.host",
    "http.host.raw",
    "http.cookie",
    "http.referer",
    "http.accept",
    "http.accept_enc",
    "http.accept_lang",
}
RESPONSE_ONLY = {"http.server", "http.location"}
# header buffers that are the request's when the rule looks to the server, else the response's
EITHER_SIDE_HEADERS = frozenset(
    {
        "http.header",
        "http.header.raw",
        "http.content_type",
        "http.content_len",
        "http.cookie",
        "http.header_names",
        "http.start",
    }
)
URI_SAFE = set(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/?=&;:@!$'()*+,[]"
)


RULE_TIME_LIMIT_S = 1.0  # per rule: a pcre with catastrophic backtracking is given up
MAX_FLOWINT_MATCHES = 1_000  # a flow integer's setter repeated at most this often in one session


_LINE_TAIL = re.compile(rb"([!-~]*) (HTTP/1\.[01])\r\n")
_BARE_METHOD = re.compile(rb"[A-Z]{3,10} ")
_STATUS_START = re.compile(rb"HTTP/1\.[01] [1-5][0-9][0-9]")
_HTTP_METHOD = re.compile(
    rb"^(GET|POST|PUT|HEAD|DELETE|OPTIONS|PATCH|TRACE|CONNECT|PROPFIND|[A-Z]{3,10}) \S", re.I
)


class SynthError(NtgError, ValueError):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise SynthError when the block runs longer than `seconds` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(_sig, _frame):
        raise SynthError(f"synthesis took longer than {seconds:g} s (pcre backtracking)")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Session:
    sid: int
    related: list[int]
    proto: str
    client: str
    cport: int
    server: str
    sport: int
    start_ns: int = 0
    end_ns: int = 0
    packets: int = 0
    app: str = ""  # the protocol the session is meant to be: http, ftp, ..., or tcp/udp/icmp
    # it carries a rule's own address outside the test ranges: for pcaps, never sent live
    offline_only: bool = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SynthResult:
    pcap: Path
    sessions: list[Session] = field(default_factory=list)
    synthesized: dict[int, str] = field(default_factory=dict)  # sid -> "ok"
    failed: dict[int, str] = field(default_factory=dict)  # sid -> reason
    packets: int = 0
    bytes: int = 0


class _Addr:
    """A new address of a side per call: IPv4 198.18/198.19.x.y, IPv6 2001:db8::n / 2001:db8:1::n."""

    HOME6 = int(ipaddress.IPv6Network(HOME_NET6).network_address)
    EXT6 = int(ipaddress.IPv6Network(EXTERNAL_NET6).network_address)

    def __init__(self) -> None:
        self.home = 0
        self.ext = 0

    def take(self, side: str, v6: bool = False) -> str:
        if side == "home":
            self.home += 1
            n = self.home
            if v6:
                return str(ipaddress.IPv6Address(self.HOME6 + n))
            return f"198.18.{(n >> 8) & 255}.{n & 255}"
        self.ext += 1
        n = self.ext
        if v6:
            return str(ipaddress.IPv6Address(self.EXT6 + n))
        return f"198.19.{(n >> 8) & 255}.{n & 255}"


# --- application messages ------------------------------------------------------------------------
def _buf(model: RuleModel, name: str, **kw) -> bytes | None:
    matches = model.buffers.get(name)
    opts = model.buffer_opts.get(name)
    if not matches and not opts:
        return None
    return build_buffer(matches or [], opts, **kw)


def _uri_encode(uri: bytes) -> bytes:
    path, q, query = uri.partition(b"?")
    out = bytearray()
    for b in path:
        if b in URI_SAFE and b != ord("%"):
            out.append(b)
        else:
            out += b"%%%02X" % b
    if q:
        out += b"?"
        for b in query:
            out += bytes([b]) if b > 0x20 and b < 0x7F else b"%%%02X" % b
    return bytes(out)


_KNOWN_HEADERS = {
    b"host",
    b"user-agent",
    b"accept",
    b"accept-encoding",
    b"accept-language",
    b"accept-charset",
    b"authorization",
    b"cache-control",
    b"connection",
    b"content-disposition",
    b"content-encoding",
    b"content-length",
    b"content-type",
    b"cookie",
    b"set-cookie",
    b"location",
    b"pragma",
    b"range",
    b"referer",
    b"server",
    b"transfer-encoding",
    b"upgrade",
    b"x-forwarded-for",
    b"soapaction",
}
_HOST_LIKE = re.compile(rb"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")


def _line_ends(model: RuleModel | None, names: tuple[str, ...]) -> set[bytes]:
    """Bare tokens that the rule's header contents end with a CRLF (`tunein.com|0d 0a|`): the
    end of a value, since a header name is followed by a colon."""
    ends: set[bytes] = set()
    for name in names:
        for m in model.buffers.get(name, []) if model else []:
            if m.kind == "content" and not m.negated:
                ends.update(t.strip() for t in re.findall(rb"([^\r\n:]+)\r\n", m.data))
    return ends


_GLUED = re.compile(rb"(^|\r?\n)([!#$%&'*+\-.^_`|~0-9A-Za-z]+):(?=[^ \t\r\n])")


def _spaced_colons(model: RuleModel | None, text: bytes | None) -> bytes | None:
    """The rule's `http.header` text with a blank after each line's `name:` where its matches
    still hold with it (`User-Agent:` then `probe` at distance 0): Suricata reads a header as
    `name: value`, so the glued form could only be a value's."""
    if not text or model is None:
        return text
    at = 0
    while m := _GLUED.search(text, at):
        cand = text[: m.end()] + b" " + text[m.end() :]
        if _holds(model, "http.header", cand):
            text = cand
        at = m.end()
    return text


def header_lines(
    text: bytes, line_ends: set[bytes] = frozenset(), *, normalized: bool = False
) -> list[bytes]:
    """Header lines that carry `text`, the rule's header bytes. `normalized`: the text is of
    Suricata's `http.header`, where every header reads `name: value`; a `name:value` there (no
    blank after the colon) can only be inside a value, so it goes into one."""
    lines = []
    pieces = text.replace(b"\r\n", b"\n").split(b"\n")
    for n, line in enumerate(pieces):
        if not line.strip():
            continue
        if lines and line[:1] in (b" ", b"\t"):
            # a folded continuation (obsolete, RFC 7230 3.2.4): libhtp joins it to the header
            # above; we send it joined, as one line
            lines[-1] = lines[-1].rstrip() + b" " + line.strip()
            continue
        name, colon, rest = line.partition(b":")
        if (
            colon
            and rest[:1] not in (b" ", b"\t", b"")
            and (normalized or name.lower() not in _KNOWN_HEADERS)
        ):
            # `urn:x-org:service` is a value with colons, not a header `urn` (libhtp would give
            # it back as `urn: x-org...`, and the rule's bytes would be gone)
            line = b"X-Data: " + line
        elif b":" not in line:
            # a bare token becomes a header name (trailing blanks would put a space before the
            # colon), unless the rule's line ends right after it: then it ends a value (a host
            # name: the Host header's); a phrase becomes a value, of User-Agent when it reads
            # like one
            ends_line = n + 1 < len(pieces) or any(e and line.endswith(e) for e in line_ends)
            if ends_line and _HOST_LIKE.fullmatch(line.lstrip(b".")):
                line = b"Host: " + (b"www" + line if line.startswith(b".") else line)
            elif ends_line and b" " not in line.strip():
                line = b"X-Data: " + line
            elif _FIELD_NAME.fullmatch(line):
                line = line + b": 1"  # a token: a header name (`/`, `(`... make none: a value)
            else:
                line = (b"User-Agent: " if _UA_LIKE.search(line) else b"X-Data: ") + line
        if line[-1:] in (b" ", b"\t"):
            # libhtp trims blanks at the end of a value: keep the rule's blank inside the value
            # (Basic credentials: valid base64 of user:pass, which libhtp decodes)
            basic = line.lower().endswith(b"basic ")
            line += b"dXNlcjpwYXNz" if basic else b"1"
        lines.append(line)
    seen_ua = False
    for k, line in enumerate(lines):  # one User-Agent: later guesses become X-Data
        if line.lower().startswith(b"user-agent:"):
            if seen_ua and line.startswith(b"User-Agent: ") and line not in text:
                lines[k] = b"X-Data: " + line[len(b"User-Agent: ") :]
            seen_ua = True
    return lines


_FIELD_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a token (RFC 9110 5.1)
_FORM_BODY = re.compile(rb"(?:[!-$&-~]|%[0-9A-Fa-f]{2})*")
_UA_LIKE = re.compile(rb"MSIE|Mozilla|compatible;|Windows NT|Gecko|Opera", re.I)


def _uri_is_normal(uri: bytes) -> bool:
    """True when libhtp's normalization leaves `uri` as it is (so raw and normalized URI agree)."""
    path = uri.split(b"?", 1)[0]
    return (
        uri == _uri_encode(uri)
        and b"%" not in uri
        and b"\\" not in uri
        and b"//" not in path
        and b"/./" not in path + b"/"
        and b"/../" not in path + b"/"
    )


_DOT_SEGMENT = re.compile(rb"\.\./|/\./|\\|//")


def _query_for_dot_segments(uri: bytes, matches, opts) -> bytes:
    """libhtp removes `../` and `./` segments, collapses `//` (and turns `\\` into `/`) in the
    path of the normalized URI but keeps the query as sent. A `//` the rule does not need (two
    contents that each bring a slash) gets a filler segment between the slashes; a sequence the
    rule's URI contents need starts the query, if the matches still hold."""
    for _ in range(8):
        path = uri.split(b"?", 1)[0]
        hit = _DOT_SEGMENT.search(path)
        if hit is None:
            return uri
        if hit.group() == b"//":
            cand = uri[: hit.start()] + b"/a/" + uri[hit.start() + 2 :]
            if verify(cand, matches, opts):
                uri = cand
                continue
        for k in range(hit.start(), 0, -1):  # the query from as late as the matches allow
            cand = uri[:k] + b"?" + uri[k:]
            if verify(cand, matches, opts):
                return cand
        cand = b"?" + uri
        return cand if verify(cand, matches, opts) else uri
    return uri


def _uris(model: RuleModel) -> tuple[bytes | None, bytes | None]:
    """(normalized URI, raw URI) for a request; when a rule has matches or a length on both the
    raw and the normalized URI, one URI that satisfies both (libhtp leaves a plain URI as is)."""
    uri_m, uri_o = model.buffers.get("http.uri"), model.buffer_opts.get("http.uri")
    raw_m, raw_o = model.buffers.get("http.uri.raw"), model.buffer_opts.get("http.uri.raw")
    if not (raw_m or raw_o):
        if not (uri_m or uri_o):
            return None, None
        uri = None
        try:
            uri = _buf(model, "http.uri")
            if not uri.startswith(b"/"):  # the rule's own leading slash gets no second one
                uri = None
        except LayoutError:
            pass
        if uri is None:
            uri = _buf(model, "http.uri", prefix=b"/")
        return _query_for_dot_segments(uri, uri_m or [], uri_o), None
    if not (uri_m or uri_o):
        return None, _buf(model, "http.uri.raw", prefix=b"/")
    lens = [o["len"] for o in (uri_o, raw_o) if o and o.get("len")]
    opts = dict(uri_o or {})
    if lens:
        opts["len"] = (max(lo for lo, _ in lens), min(hi for _, hi in lens))
    tries = [uri_m or []] + ([(uri_m or []) + raw_m, raw_m + (uri_m or [])] if raw_m else [])
    for matches in tries:
        for prefix in (b"", b"/"):
            try:
                cand = build_buffer(matches, opts, prefix=prefix)
            except LayoutError:
                continue
            if (
                cand.startswith(b"/")
                and _uri_is_normal(cand)
                and verify(cand, uri_m or [], uri_o)
                and verify(cand, raw_m or [], raw_o)
            ):
                return None, cand
    uri, raw = _buf(model, "http.uri", prefix=b"/"), _buf(model, "http.uri.raw", prefix=b"/")
    if uri is not None and raw is not None:
        # one URI whose raw form holds the raw matches and whose normalized form the others:
        # the normalized URI's bytes and the raw ones one after the other
        enc = _uri_encode(uri)
        tail = raw[1:] if raw.startswith(b"/") else raw
        for cand in (enc + tail, enc + b"/" + tail, raw + enc, raw + enc[1:], raw + b"?" + enc):
            if verify(cand, raw_m or [], raw_o) and verify(
                normalized_uri(cand), uri_m or [], uri_o
            ):
                return None, cand
    return uri, raw


def normalized_uri(raw: bytes) -> bytes:
    """An approximation of libhtp's normalized URI: in the path, %XX decoded once, `\\` as `/`,
    `//` collapsed, `.` and `..` segments removed; the query as sent."""
    path, q, query = raw.partition(b"?")
    path = re.sub(rb"%([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), path)
    path = re.sub(rb"/+", b"/", path.replace(b"\\", b"/"))
    out: list[bytes] = []
    for seg in path.split(b"/")[1:] if path.startswith(b"/") else path.split(b"/"):
        if seg == b"..":
            if out:
                out.pop()
        elif seg != b".":
            out.append(seg)
    return b"/" + b"/".join(out) + q + query


def _header_names(lines: list[bytes]) -> set[bytes]:
    """Lower-case names of `name: value` lines (the rule's own headers)."""
    return {ln.split(b":", 1)[0].strip().lower() for ln in lines if b":" in ln}


def _rule_parts(model: RuleModel | None, name: str) -> tuple[list, dict | None]:
    if model is None:
        return [], None
    return model.buffers.get(name, []), model.buffer_opts.get(name)


def _holds(model: RuleModel | None, name: str, data: bytes) -> bool:
    """True when `data`, as the buffer `name`, satisfies the rule's matches on it."""
    matches, opts = _rule_parts(model, name)
    return verify(data, matches, opts)


def _complete_request_line(
    model: RuleModel, line: bytes, uri: bytes | None
) -> tuple[bytes, bytes, bytes] | None:
    """(method, URI, version) of a request line that holds the rule's `http.request_line`
    matches: the rule's own line, completed with a URI and a version when it lacks them."""
    parts = line.split(b" ")
    cands = [line]
    if len(parts) == 1:
        cands += [
            line + b" / HTTP/1.1",
            b"GET " + line + b" HTTP/1.1",
            b"GET /" + line + b" HTTP/1.1",
        ]
    elif len(parts) == 2:
        if uri and uri.startswith(parts[1]):
            cands.append(parts[0] + b" " + uri + b" HTTP/1.1")
        elif uri:  # the rule's URI contents go on where its request line content ends
            cands.append(line + uri.lstrip(b"/") + b" HTTP/1.1")
        cands += [line + b" HTTP/1.1", line + b"/ HTTP/1.1"]
    elif not _VERSION.fullmatch(parts[-1]):
        cands += [line + b" HTTP/1.1", line + b".1"[: 8 - len(parts[-1])]]
    for cand in cands:
        if _REQUEST_LINE.fullmatch(cand) and _holds(model, "http.request_line", cand):
            p = cand.split(b" ")
            return p[0], b" ".join(p[1:-1]), p[-1]
    if len(parts) >= 3:
        return parts[0], b" ".join(parts[1:-1]), parts[-1]
    return None


_START_TAIL = re.compile(rb"(?:([^ \r\n]*) )?(HTTP/\d\.\d)")


def _start_parts(start: bytes) -> tuple[bytes | None, list[bytes]]:
    """The rule's `http.start` bytes (Suricata: the request line, CRLF, each header as
    `name: value` and its CRLF, a final CRLF) as (the end of the request line or None, header
    lines): bytes before a CRLF, or with the version in them, end the request line; the rest are
    headers, written as `http.header` ones are."""
    tail, crlf, rest = start.partition(b"\r\n")
    if tail and not _START_TAIL.search(tail) and not _HTTP_METHOD.match(tail):
        return None, header_lines(start, normalized=True)  # no request line in it: headers
    return tail or None, header_lines(rest, normalized=True) if rest else []


def _names_text(names: list[bytes]) -> bytes:
    """Suricata's `http.header_names` buffer: CRLF, each name and CRLF, a final CRLF."""
    return b"\r\n" + b"".join(n + b"\r\n" for n in names) + b"\r\n"


def _add_name(model: RuleModel, names: list[bytes], name: bytes, first: bool) -> bool:
    """Insert `name` into `names` where the rule's header_names matches still hold (from the start
    when `first`, else from the end); False when no place does (the rule forbids the name)."""
    spots = range(len(names) + 1) if first else range(len(names), -1, -1)
    for k in spots:
        cand = names[:k] + [name] + names[k:]
        if _holds(model, "http.header_names", _names_text(cand)):
            names[:] = cand
            return True
    return False


def _header_name(line: bytes) -> bytes:
    return line.split(b":", 1)[0].strip().lower()


def _one_per_name(
    model: RuleModel | None, headers: list[bytes], own: list[bytes], kept: list[bytes]
) -> list[bytes]:
    """One line per header name. Of two lines with one name, the rule's own `http.header` line is
    dropped when the header buffer still satisfies the rule without it, else our default line is
    (never a line in `kept`: a value buffer's); when both are needed both stay."""
    out = list(headers)
    for i in range(len(out) - 1, -1, -1):
        if i >= len(out):
            continue
        name = _header_name(out[i])
        if b":" not in out[i] or name in (b"set-cookie",):
            continue
        twins = [j for j, h in enumerate(out) if j != i and b":" in h and _header_name(h) == name]
        if not twins:
            continue
        j = twins[0]
        if out[i] == out[j]:  # the same line twice (a value buffer's and the rule's header text)
            cand = out[:i] + out[i + 1 :]
            text = b"".join(h + b"\r\n" for h in cand)
            if _holds(model, "http.header", text) and _holds(model, "http.header.raw", text):
                out = cand
                continue
        pair = sorted((i, j), key=lambda k: (out[k] not in own, out[k] in kept))
        for k in pair:
            if out[k] in kept:
                continue
            cand = out[:k] + out[k + 1 :]
            text = b"".join(h + b"\r\n" for h in cand)
            if _holds(model, "http.header", text) and _holds(model, "http.header.raw", text):
                out = cand
                break
    return out


_VERSION = re.compile(rb"HTTP/\d\.\d")
_REQUEST_LINE = re.compile(rb"[!-~]+ [^\r\n]+ HTTP/\d\.\d")
_STATUS_LINE = re.compile(rb"HTTP/\d\.\d [1-5]\d\d(?: [^\r\n]*)?")
REASONS = {
    b"200": b"OK",
    b"201": b"Created",
    b"204": b"No Content",
    b"206": b"Partial Content",
    b"301": b"Moved Permanently",
    b"302": b"Found",
    b"303": b"See Other",
    b"304": b"Not Modified",
    b"307": b"Temporary Redirect",
    b"400": b"Bad Request",
    b"401": b"Unauthorized",
    b"403": b"Forbidden",
    b"404": b"Not Found",
    b"405": b"Method Not Allowed",
    b"500": b"Internal Server Error",
    b"502": b"Bad Gateway",
    b"503": b"Service Unavailable",
}


MAX_SIZED_BODY = 1 << 16  # a rule's Content-Length up to this is met by a body that long


def _sized_body(
    model: RuleModel, body_buf: str, length: bytes | None, body: bytes | None, *, own: bool
) -> bytes | None:
    """The body a rule's `http.content_len` (decimal digits) announces: padded to that length when
    shorter (and the pad keeps `body_buf`'s matches), or, when the body is none of the rule's
    (`own` false), that many bytes of filler. Any other length (not digits, too big, a rule's body
    longer than it) leaves the body as it is: the mismatch is then the rule's own."""
    if length is None or not length.isdigit() or int(length) > MAX_SIZED_BODY:
        return body
    want = int(length)
    have = body or b""
    if not own:
        return (have + b"a" * want)[:want]
    if len(have) >= want:
        return body
    padded = have + b"a" * (want - len(have))
    return padded if _holds(model, body_buf, padded) else body


_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]+)(?:;[^\r\n]*)?\r\n")


def _complete_chunks(body: bytes) -> bytes:
    """A chunked body the rule's bytes start (`0000000000000000FF|0d 0a 0d 0a|`), completed so the
    request ends: the last chunk's missing data as filler, its CRLF, then the zero-size chunk
    (libhtp leaves a request whose body is cut short open, and Suricata then inspects no part of
    it together with the raw stream). Unchanged when it does not read as chunks."""
    at = 0
    while at < len(body):
        size = _CHUNK_SIZE.match(body, at)
        if size is None:
            return body
        n = int(size.group(1), 16)
        at = size.end()
        if n == 0:
            return body if body.endswith(b"\r\n\r\n") or body[at:] else body + b"\r\n"
        if n > MAX_SIZED_BODY:
            return body
        have = len(body) - at
        if have < n + 2:
            fill = b"a" * max(0, n - have)
            tail = b"\r\n"[max(0, have - n) :]
            return body + fill + tail + b"0\r\n\r\n"
        if body[at + n : at + n + 2] != b"\r\n":
            return body
        at += n + 2
    return body + b"0\r\n\r\n"


def _cookie_in_response(model: RuleModel | None) -> bool:
    """A `to_client` rule's http.cookie is the response's Set-Cookie (Suricata's reading)."""
    return model is not None and not model.to_server


def http_request(
    model: RuleModel | None,
    *,
    extra_body: bytes = b"",
    target: tuple[bytes, bytes] | None = None,
) -> bytes:
    """An HTTP/1.1 request with the rule's request-side buffers; `extra_body` goes at the end of
    the body (Content-Length counts it); `target` (URI, version) sets the request line's end."""
    b = (lambda n, **kw: _buf(model, n, **kw)) if model else (lambda n, **kw: None)
    rl = b("http.request_line")
    method = b("http.method")
    body = b("http.request_body")
    if extra_body:
        body = (body or b"") + extra_body
    if model is not None and model.to_server:
        body = _sized_body(model, "http.request_body", b("http.content_len"), body, own=True)
    uri, raw_uri = _uris(model) if model else (None, None)
    proto = b("http.protocol") or b"HTTP/1.1"
    line = _complete_request_line(model, rl, uri or raw_uri) if (model and rl) else None
    start = b("http.start") if (model is not None and model.to_server) else None
    start_lines: list[bytes] = []
    start_line, lead = None, b""  # lead: what the request line's URI starts with
    if start:
        start_line, start_lines = _start_parts(start)
        if start_line is not None and line is None:
            if _REQUEST_LINE.fullmatch(start_line):
                p = start_line.split(b" ")
                line = p[0], b" ".join(p[1:-1]), p[-1]
            elif (tail := _START_TAIL.fullmatch(start_line)) and target is None:
                end = tail.group(1) or b""
                target = (end if end.startswith(b"/") or not end else b"/a" + end, tail.group(2))
            elif _HTTP_METHOD.match(start_line) and not _START_TAIL.search(start_line):
                # the request line starts with the rule's bytes: its method, its URI's start
                method, _, lead = start_line.partition(b" ")
    if line is not None:
        method, raw_uri, proto = line
    elif target is not None:
        raw_uri, proto = target
        raw_uri = raw_uri or None
    if not method:  # none, or only negated contents (`content:!"GET"`): a usual method it allows
        usual = (b"POST", b"GET") if body is not None else (b"GET", b"POST")
        allowed = [m for m in (*usual, b"PUT", b"OPTIONS") if _holds(model, "http.method", m)]
        method = allowed[0] if allowed else usual[0]
    if uri is not None and raw_uri is None:
        if not uri.startswith(b"/"):
            uri = b"/" + uri
        raw_uri = _uri_encode(uri)
    if raw_uri is None:
        raw_uri = b"/index.html"
    elif line is None and not raw_uri.startswith(b"/") and not raw_uri.lower().startswith(b"http"):
        raw_uri = b"/" + raw_uri
    if lead and not raw_uri.startswith(lead):
        raw_uri = lead + raw_uri.lstrip(b"/")
    headers: list[bytes] = []
    names_buf = b("http.header_names") if (model is None or model.to_server) else None
    host = b("http.host", prefix=b"www") or b("http.host.raw", prefix=b"www")
    values = {}
    for name, hname in HTTP_HEADER_VALUE_BUFFERS.items():
        if name in RESPONSE_ONLY or (model and not model.to_server and name not in REQUEST_ONLY):
            continue
        if name in ("http.host", "http.host.raw"):
            continue
        if name == "http.cookie" and _cookie_in_response(model):
            continue
        v = b(name, prefix=b"" if name == "http.content_len" else b"a")  # a length is digits
        if v is not None:
            if v[-1:] in (b" ", b"\t") and _holds(model, name, v + b"1"):
                v += b"1"  # libhtp trims blanks at the end of a value: keep the rule's inside it
            values[hname.encode()] = v
    crlf = {"suffix": b"\r\n"}  # a header line is followed by its CRLF in the buffer
    hdr_text = b("http.header", **crlf) if (model is None or model.to_server) else None
    hdr_text = _spaced_colons(model, hdr_text)
    hdr_raw = b("http.header.raw", **crlf) if (model is None or model.to_server) else None
    if names_buf is not None and model is not None:
        names = [n.strip() for n in names_buf.split(b"\r\n") if n.strip()]
        lower = {n.lower() for n in names}
        # HTTP/1.1 requires Host (and a body needs its length): add them where the rule allows
        if b"host" not in lower and not _add_name(model, names, b"Host", True):
            if proto == b"HTTP/1.1" and line is None and "http.protocol" not in model.buffers:
                proto = b"HTTP/1.0"  # the rule forbids a Host header: a request without one
        if body is not None and b"content-length" not in lower:
            _add_name(model, names, b"Content-Length", False)
        if not names:  # no header at all leaves Suricata no header_names buffer
            for spare in (b"Accept", b"Connection", b"X-Requested-With"):
                if _add_name(model, names, spare, False):
                    break
        for key in names:
            val = values.pop(key, None)
            if key.lower() == b"host":
                val = host or b"www.example.com"
                host = None
            elif key.lower() == b"content-length":
                val = b"%d" % len(body or b"")
                body = body or b""
            headers.append(key + b": " + (val if val is not None else b"1"))
        host_line = None
    else:
        host_line = b"Host: " + (host if host is not None else b"www.example.com")
        headers.append(host_line)
        if b"User-Agent" not in values:
            values[b"User-Agent"] = b"Mozilla/5.0"
    ends = _line_ends(model, ("http.header", "http.header.raw"))
    own_lines = start_lines + [
        ln
        for text, norm in ((hdr_text, True), (hdr_raw, False))
        if text
        for ln in header_lines(text, ends, normalized=norm)
    ]
    own_names = _header_names(own_lines)
    if own_names:
        # a header the rule writes itself replaces our default one: libhtp would merge the two
        # values (`User-Agent: Mozilla/5.0, rule's value`) and the rule's content would not match
        if b"user-agent" in own_names and values.get(b"User-Agent") == b"Mozilla/5.0":
            del values[b"User-Agent"]
        if b"host" in own_names and host_line is not None and host is None:
            headers.remove(host_line)
    kept = [k + b": " + v for k, v in values.items() if k != b"User-Agent" or v != b"Mozilla/5.0"]
    for k, v in values.items():
        headers.append(k + b": " + v)
    if (
        own_lines
        and model is not None
        and pinned_to_start(model.buffers.get("http.header", []))
        and not (hdr_text or b"").startswith((b"\r\n", b"\n"))
    ):
        headers[:0] = own_lines  # `depth`/`^` on the header buffer: the rule's lines first
    else:
        headers.extend(own_lines)
    if body is not None and names_buf is None:
        if not any(h.lower().startswith(b"content-type:") for h in headers):
            # a form only when the body reads as one (a bad %-escape is no form for a dissector)
            form = _FORM_BODY.fullmatch(body) is not None
            headers.append(
                b"Content-Type: "
                + (b"application/x-www-form-urlencoded" if form else b"application/octet-stream")
            )
        cl = [h for h in headers if h.lower().startswith(b"content-length:")]
        if any(
            _header_name(h) == b"transfer-encoding" and b"chunked" in h.lower() for h in headers
        ):
            # the rule's own `Transfer-Encoding: chunked`: no Content-Length beside it (RFC 9112
            # 6.1); its request_body (what libhtp de-chunks) goes as one chunk, the raw stream
            # bytes it wants after it as they are (they may be the chunk framing itself)
            own_body = body[: len(body) - len(extra_body)]
            head_chunk = b"%x\r\n%s\r\n0\r\n\r\n" % (len(own_body), own_body) if own_body else b""
            body = _complete_chunks(head_chunk + extra_body)
            headers = [h for h in headers if h not in cl]
        elif not cl:
            headers.append(b"Content-Length: %d" % len(body))
        elif extra_body:
            headers[headers.index(cl[0])] = b"Content-Length: %d" % len(body)
    headers = _own_last(model, _one_per_name(model, headers, own_lines, kept), own_lines)
    block = [h for h in start_lines if h in headers]
    if block:
        # the rule's http.start header lines stay together: right after the request line when
        # its bytes run on from that line, else where the first of them is
        at = 0 if start_line is not None else headers.index(block[0])
        rest = [h for h in headers if h not in block]
        headers = rest[:at] + block + rest[at:]
    head = (
        method
        + b" "
        + raw_uri
        + b" "
        + proto
        + b"\r\n"
        + b"".join(h + b"\r\n" for h in headers)
        + b"\r\n"
    )
    return head + (body or b"")


def _status_code(model: RuleModel | None) -> bytes:
    code = _buf(model, "http.stat_code") if model else None
    if code is None:
        return b"200"
    if len(code) < 3 and code.isdigit():
        # a status code has three digits (`content:"30"; startswith;` is any 30x)
        for full in (code.ljust(3, b"0"), code.ljust(3, b"2")):
            if _holds(model, "http.stat_code", full):
                return full
    return code


def _status_line(model: RuleModel | None, code: bytes, msg: bytes) -> bytes:
    """`HTTP/1.1 <code> <message>` holding the rule's `http.response_line` matches when it has
    some: the rule's own line, completed when it lacks a part."""
    default = b"HTTP/1.1 " + code + b" " + msg
    rline = _buf(model, "http.response_line") if model else None
    if not rline:
        return default
    cands = [rline, default, b"HTTP/1.1 " + rline, b"HTTP/1.1 " + code + b" " + rline]
    if rline.startswith(b"HTTP/"):
        ver = b"HTTP/1.1"[len(rline) :] if len(rline) < 8 else b""
        cands += [rline + ver + b" " + code + b" " + msg, rline + b" " + code + b" " + msg]
        cands += [rline + b" " + msg]
    for cand in cands:
        if _STATUS_LINE.fullmatch(cand) and _holds(model, "http.response_line", cand):
            return cand
    return rline if rline.startswith(b"HTTP/") else b"HTTP/1.1 " + rline


def http_response(model: RuleModel | None, *, extra_body: bytes = b"") -> bytes:
    """An HTTP/1.1 response with the rule's response-side buffers; `extra_body` goes at the end of
    the body (Content-Length counts it)."""
    b = (lambda n, **kw: _buf(model, n, **kw)) if model else (lambda n, **kw: None)
    code = _status_code(model)
    msg = b("http.stat_msg") or REASONS.get(code, b"OK")
    body = b("http.response_body")
    own_body = body is not None
    if body is None:
        body = b"<html><body>ok</body></html>"
    body += extra_body
    if model is not None and not model.to_server:
        body = _sized_body(
            model,
            "http.response_body",
            b("http.content_len"),
            body,
            own=own_body or bool(extra_body),
        )
        body = body if body is not None else b""
    status = _status_line(model, code, msg)
    headers = []
    kept = []
    for name, hname in HTTP_HEADER_VALUE_BUFFERS.items():
        if name == "http.cookie" and _cookie_in_response(model):
            hname = "Set-Cookie"
        elif name in REQUEST_ONLY or (model and model.to_server and name not in RESPONSE_ONLY):
            continue
        v = b(name)
        if v is not None:
            if v[-1:] in (b" ", b"\t") and _holds(model, name, v + b"1"):
                v += b"1"  # libhtp trims blanks at the end of a value: keep the rule's inside it
            headers.append(hname.encode() + b": " + v)
            kept.append(headers[-1])
    if not any(h.lower().startswith(b"content-type:") for h in headers):
        headers.append(b"Content-Type: text/html")
    own: list[bytes] = []
    if model is not None and not model.to_server:
        for n in ("http.header", "http.header.raw"):
            norm = n == "http.header"
            text = b(n, suffix=b"\r\n")
            text = _spaced_colons(model, text) if norm else text
            if text:
                own.extend(header_lines(text, _line_ends(model, (n,)), normalized=norm))
    headers.extend(own)
    headers = _one_per_name(model if own else None, headers, own, kept)
    names_buf = b("http.header_names") if model is not None and not model.to_server else None
    if names_buf is not None:
        # the rule's header names in the response, each once, where its matches hold
        names = [h.split(b":", 1)[0] for h in headers]
        have = {x.lower() for x in names}
        missing = [x.strip() for x in names_buf.split(b"\r\n") if x.strip()]
        missing = [x for x in dict.fromkeys(missing) if x.lower() not in have]
        if _holds(model, "http.header_names", _names_text(names + missing)):
            headers += [n + b": 1" for n in missing]
        else:
            for n in missing:
                if _add_name(model, names, n, False):
                    headers.insert(names.index(n), n + b": 1")
    chunked = any(b"chunked" in h.lower() for h in headers)
    chunked = any(b"chunked" in h.lower() for h in headers)
    if chunked:
        body = b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n" if body else b"0\r\n\r\n"
    elif not any(h.lower().startswith(b"content-length:") for h in headers):
        headers.append(b"Content-Length: %d" % len(body))
    headers = _own_last(model, headers, own)
    return status + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


def _own_last(model: RuleModel | None, headers: list[bytes], own: list[bytes]) -> list[bytes]:
    """`headers` with the rule's own header lines last when a match on the header buffer has
    `endswith` (the buffer must end with them: no Content-Type or Content-Length of ours after
    them); else as they are."""
    ends = model is not None and any(
        m.endswith for n in ("http.header", "http.header.raw") for m in model.buffers.get(n, [])
    )
    if not ends or not own:
        return headers
    mine = set(own)
    return [h for h in headers if h not in mine] + [h for h in headers if h in mine]


_NDR = uuid.UUID("8a885d04-1ceb-11c9-9fe8-08002b104860").bytes_le + struct.pack("<I", 2)


def _dce_pdu(ptype: int, call_id: int, body: bytes) -> bytes:
    """A connection-oriented DCE/RPC PDU (little endian data representation, one fragment)."""
    return (
        struct.pack("<BBBB4sHHI", 5, 0, ptype, 0x03, b"\x10\0\0\0", 16 + len(body), 0, call_id)
        + body
    )


def dcerpc_tcp(iface: str, version: int, opnum: int, stub: bytes) -> list[tuple[bool, bytes]]:
    """DCE/RPC over TCP (ncacn_ip_tcp): bind to `iface`, the server's acceptance, one request."""
    syntax = uuid.UUID(iface).bytes_le + struct.pack("<HH", version & 0xFFFF, 0)
    bind = _dce_pdu(
        11,
        1,
        struct.pack("<HHI", 4280, 4280, 0)
        + struct.pack("<BBH", 1, 0, 0)
        + struct.pack("<HBB", 0, 1, 0)
        + syntax
        + _NDR,
    )
    sec = b"135\0"
    ack_body = struct.pack("<HHIH", 4280, 4280, 0x1234, len(sec)) + sec
    ack_body += b"\0" * (-(16 + len(ack_body)) % 4)
    ack_body += struct.pack("<BBH", 1, 0, 0) + struct.pack("<HH", 0, 0) + _NDR
    request = _dce_pdu(0, 2, struct.pack("<IHH", len(stub), 0, opnum) + stub)
    response = _dce_pdu(2, 2, struct.pack("<IHBB", 4, 0, 0, 0) + b"\0" * 4)
    return [(True, bind), (False, _dce_pdu(12, 1, ack_body)), (True, request), (False, response)]


def dcerpc_udp_request(iface: str, version: int, opnum: int, stub: bytes) -> bytes:
    """A connectionless DCE/RPC request (ncadg_ip_udp): the interface is in the 80-byte header."""
    return (
        struct.pack("<BBBB3sB", 4, 0, 0x22, 0, b"\x10\0\0", 0)
        + b"\0" * 16
        + uuid.UUID(iface).bytes_le
        + uuid.UUID(int=0x4E5447).bytes_le
        + struct.pack("<IIIHHHHHBB", 0, version, 1, opnum, 0xFFFF, 0xFFFF, len(stub), 0, 0, 0)
        + stub
    )


def smtp_mail(attachment: bytes, extra: bytes = b"") -> list[tuple[bool, bytes]]:
    """An SMTP session that mails `attachment` as a base64 MIME part (Suricata's `file.data` on
    SMTP is the decoded attachment); `extra` raw bytes go after the message (stream contents)."""
    b64 = base64.encodebytes(attachment).replace(b"\n", b"\r\n")
    message = (
        b"From: <alice@example.com>\r\nTo: <bob@example.com>\r\nSubject: report\r\n"
        b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="NTGBOUNDARY"\r\n\r\n'
        b"--NTGBOUNDARY\r\nContent-Type: text/plain\r\n\r\nsee attachment\r\n"
        b"--NTGBOUNDARY\r\nContent-Type: application/octet-stream\r\n"
        b"Content-Transfer-Encoding: base64\r\n"
        b'Content-Disposition: attachment; filename="report.bin"\r\n\r\n'
        + b64
        + b"--NTGBOUNDARY--\r\n.\r\n"
    )
    msgs = [
        (False, b"220 mail.example.com ESMTP ready\r\n"),
        (True, b"EHLO client.example.com\r\n"),
        (False, b"250 mail.example.com\r\n"),
        *smtp_envelope(),
        (True, message),
        (False, b"250 OK queued\r\n"),
    ]
    if extra:
        msgs.append((True, extra))
    return msgs + [(True, b"QUIT\r\n"), (False, b"221 bye\r\n")]


def dns_query(name: bytes, ident: int) -> bytes:
    return (
        struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + _qname(name) + struct.pack("!HH", 1, 1)
    )


def _qname(name: bytes) -> bytes:
    labels = [lab for lab in name.split(b".") if lab] or [b"example"]
    out = bytearray()
    for lab in labels:
        while len(lab) > 63:
            out += bytes([63]) + lab[:63]
            lab = lab[63:]
        out += bytes([len(lab)]) + lab
    return bytes(out) + b"\0"


def _dns_name_end(msg: bytes, at: int) -> int | None:
    """Where the name at `at` ends (after its root label or its compression pointer)."""
    while at < len(msg):
        n = msg[at]
        if n == 0:
            return at + 1
        if n & 0xC0 == 0xC0:
            return at + 2 if at + 2 <= len(msg) else None
        if n & 0xC0:
            return None
        at += 1 + n
    return None


def dns_records_end(msg: bytes, sections: int = 4) -> int | None:
    """Where the first `sections` counted sections of a DNS message end (4: all of them; 1: the
    questions), or None when a name or record runs past its bytes. A message is well formed when
    this is its length."""
    if len(msg) < 12:
        return None
    counts = struct.unpack_from("!HHHH", msg, 4)
    at = 12
    for _ in range(counts[0]):
        end = _dns_name_end(msg, at)
        if end is None or end + 4 > len(msg):
            return None
        at = end + 4
    for _ in range(sum(counts[1:sections])):
        end = _dns_name_end(msg, at)
        if end is None or end + 10 > len(msg):
            return None
        at = end + 10 + struct.unpack_from("!H", msg, end + 8)[0]
        if at > len(msg):
            return None
    return at


DNS_TXT = 16


def _txt_rdata(data: bytes) -> bytes:
    """`data` as TXT character strings (a length byte, at most 255 bytes each)."""
    chunks = [data[i : i + 255] for i in range(0, len(data), 255)] or [b""]
    return b"".join(bytes([len(c)]) + c for c in chunks)


def _dns_shapes(raw: bytes) -> list[bytes]:
    """`raw` (a header, its questions, then the rule's bytes) as well-formed messages: the bytes
    after the questions as one answer record. When they start with a record's owner, type and
    class (`|c0 0c 00 10 00 01|`), its TTL, length (and, for TXT, the string's length) go in after
    them, or the length in them is set right; other bytes become a TXT answer's text."""
    counts = struct.unpack_from("!HHHH", raw, 4) if len(raw) >= 12 else None
    if counts is None:
        return []
    head = raw[:4] + struct.pack("!H", counts[0])
    q_end = dns_records_end(head + b"\0\0\0\0\0\0" + raw[12:], 1)
    if q_end is None:
        return []
    tail = raw[q_end:]
    one = head + struct.pack("!HHH", 1, 0, 0)
    if not tail:
        return [head + b"\0" * 6 + raw[12:]]
    out = []
    owner = _dns_name_end(tail, 0)
    if owner is not None and owner + 4 <= len(tail):
        rr, rest = tail[: owner + 4], tail[owner + 4 :]
        rtype = struct.unpack_from("!H", rr, owner)[0]
        rdata = _txt_rdata(rest) if rtype == DNS_TXT else rest
        out.append(one + raw[12:q_end] + rr + struct.pack("!IH", 3600, len(rdata)) + rdata)
        if len(rest) >= 6:  # a TTL and a length of the rule's own: the length made right
            inner = rest[6:]
            out.append(one + raw[12:q_end] + rr + rest[:4] + struct.pack("!H", len(inner)) + inner)
    rdata = _txt_rdata(tail)
    answer = b"\xc0\x0c" + struct.pack("!HHIH", DNS_TXT, 1, 3600, len(rdata)) + rdata
    out.append(one + raw[12:q_end] + answer)
    return [m for m in out if dns_records_end(m) == len(m)]


def _dns_raw(model: RuleModel, ident: int, from_client: bool) -> bytes:
    """A DNS message that starts with a header and a question for www.example.com and carries
    the rule's raw bytes, as a DNS server or client parses it: the rule's bytes placed after the
    question name (which they may end: `|00 00 10 00 01|`) or after its root label, the message
    then made well formed (`_dns_shapes`), or else the rule's bytes as the text of a TXT answer,
    where the rule's matches still hold; the bytes as placed when nothing keeps them."""
    hdr = struct.pack(
        "!HHHHHH", ident, 0x8180 if not from_client else 0x0100, 1, 0 if from_client else 1, 0, 0
    )
    placed: list[tuple[bytes, bytes]] = []  # (question name, message)
    for name in (b"\x03www\x07example\x03com", b"\x03www\x07example\x03com\0"):
        try:
            raw = build_buffer(
                model.buffers.get("pkt", []),
                model.buffer_opts.get("pkt"),
                prefix=hdr + name,
                fill=b"\0",
            )
        except (LayoutError, RegexUnsupported):
            continue
        placed.append((name, raw))
    if not placed:  # the layout's own error
        return _buf(model, "pkt", prefix=hdr + b"\x03www\x07example\x03com", fill=b"\0") or b""
    ours = [(name, raw) for name, raw in placed if raw.startswith(hdr + name)]
    for _name, raw in ours:
        if dns_records_end(raw) == len(raw):
            return raw
    shaped = [m for _name, raw in ours for m in _dns_shapes(raw)]
    for name, raw in ours:  # the rule's bytes, whole, as a TXT answer's text
        rdata = _txt_rdata(raw[len(hdr + name) :])
        question = name.rstrip(b"\0") + b"\0" + struct.pack("!HH", DNS_TXT, 1)
        shaped.append(
            hdr[:6]
            + struct.pack("!HHH", 1, 0, 0)
            + question
            + b"\xc0\x0c"
            + struct.pack("!HHIH", DNS_TXT, 1, 3600, len(rdata))
            + rdata
        )
    for m in shaped:
        if _holds(model, "pkt", m):
            return m
    return placed[0][1]


def dns_response(name: bytes, ident: int) -> bytes:
    q = _qname(name)
    return (
        struct.pack("!HHHHHH", ident, 0x8180, 1, 1, 0, 0)
        + q
        + struct.pack("!HH", 1, 1)
        + b"\xc0\x0c"
        + struct.pack("!HHIH", 1, 1, 60, 4)
        + bytes([198, 18, 255, 1])
    )


@dataclass(frozen=True)
class Ja3:
    """What a ClientHello's JA3 string says (Salesforce's JA3, as Suricata computes it): the
    version field, the cipher suites, the extension types in their order, the supported groups
    and the EC point formats, GREASE values never among them."""

    version: int = 0x0303
    ciphers: tuple[int, ...] = (0x1301, 0xC02F, 0x009C)
    extensions: tuple[int, ...] = (0, 10, 13)
    groups: tuple[int, ...] = (23,)
    formats: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: bytes) -> Ja3:
        """`771,4865-4866,0-10-11,29-23,0` as a Ja3; ValueError when it is not one."""
        shown = text.decode("ascii", "replace")
        parts = shown.split(",")
        if len(parts) != 5:
            raise ValueError(
                f"'{shown}' is not a JA3 string (version,ciphers,extensions,groups,formats)"
            )
        try:
            nums = [tuple(int(v) for v in p.split("-")) if p else () for p in parts]
        except ValueError:
            raise ValueError(
                f"'{shown}' is not a JA3 string (decimal numbers joined by -)"
            ) from None
        versions, ciphers, extensions, groups, formats = nums
        if len(versions) != 1:
            raise ValueError(f"'{shown}': the version is one number")
        wide = (*versions, *ciphers, *extensions, *groups)
        if any(not 0 <= v <= 0xFFFF for v in wide) or any(not 0 <= v <= 0xFF for v in formats):
            raise ValueError(f"'{shown}': a JA3 value out of its field's range")
        if len(ciphers) > 0x7FFF or len(groups) > 0x7FFF or len(formats) > 0xFF:
            raise ValueError(f"'{shown}': more values than a ClientHello's list holds")
        version = versions[0]
        if len(set(extensions)) != len(extensions):
            raise ValueError(f"'{shown}': an extension twice (a ClientHello has each once)")
        if 41 in extensions[:-1]:
            raise ValueError(f"'{shown}': pre_shared_key (41) must be the last extension")
        return cls(version, ciphers, extensions, groups, formats)


MAX_JA3_FILE_BYTES = 16 << 20


def read_ja3_strings(path: str | Path) -> dict[str, bytes]:
    """A file of JA3 strings the user knows (one a line; blank lines and `#` comments skipped)
    as MD5 hex -> string, what `resolve_ja3_hashes` takes: a `ja3.hash` rule whose hash is one of
    them gets a ClientHello of that string. BadInput naming the file and line of a line that is
    not a JA3 string (`Ja3.parse`), or of a file that cannot be read as text."""
    text = read_bounded(path, MAX_JA3_FILE_BYTES, "JA3 strings file", "keep the strings you need")
    known: dict[str, bytes] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        data = line.encode("ascii", "replace")
        try:
            Ja3.parse(data)
        except ValueError as exc:
            raise BadInput(f"{path}:{n}: {exc}; expected one JA3 string a line") from None
        known[hashlib.md5(data).hexdigest()] = data
    return known


def _hello_extension(kind: int, ja3: Ja3, sni: bytes) -> bytes:
    """Extension `kind` with a body its parsers (Suricata, OpenSSL) read: the values the JA3
    string names (groups, point formats), else a short valid body, else none."""
    if kind == 0:
        if len(sni) > 0xFFFF - 16:
            raise SynthError(f"an SNI of {len(sni):,} bytes does not fit a ClientHello extension")
        entry = b"\0" + struct.pack("!H", len(sni)) + sni
        body = struct.pack("!H", len(entry)) + entry
    elif kind == 10:
        body = struct.pack(f"!H{len(ja3.groups)}H", 2 * len(ja3.groups), *ja3.groups)
    elif kind == 11:
        body = bytes([len(ja3.formats), *ja3.formats])
    elif kind in (13, 50):
        # ECDSA P-256, RSA-PSS and RSA PKCS#1 with SHA-256 (with ECDSA alone no server with an
        # RSA certificate can answer: OpenSSL refuses the hello)
        body = struct.pack("!HHHH", 6, 0x0403, 0x0804, 0x0401)
    else:
        body = {
            5: b"\x01\x00\x00\x00\x00",  # status_request: OCSP, no responders, no extensions
            16: b"\x00\x09\x08http/1.1",  # ALPN
            27: b"\x02\x00\x02",  # compress_certificate: brotli
            28: b"\x40\x01",  # record_size_limit
            43: b"\x04\x03\x04\x03\x03",  # supported_versions: TLS 1.3, 1.2
            45: b"\x01\x01",  # psk_key_exchange_modes: psk_dhe_ke
            51: b"\x00\x00",  # key_share: none offered (a server asks again)
            17513: b"\x00\x03\x02h2",  # application settings
            65281: b"\x00",  # renegotiation_info
        }.get(kind, b"")
    return struct.pack("!HH", kind, len(body)) + body


def tls_client_hello(sni: bytes | None, ja3: Ja3 | None = None) -> bytes:
    """A ClientHello with SNI `sni` (None: no server_name extension) and the fields of `ja3`
    (the default: TLS 1.2, AES-128-GCM suites, server_name, supported_groups and
    signature_algorithms). With a JA3 string that names server_name (0), its SNI is `sni` or
    www.example.com."""
    if ja3 is None:
        ja3 = Ja3(extensions=(0, 10, 13) if sni is not None else (10, 13))
    name = sni if sni is not None else b"www.example.com"
    ext = b"".join(_hello_extension(k, ja3, name) for k in ja3.extensions)
    if len(ext) > 0xFFFF:
        raise SynthError("the ClientHello's extensions are longer than 65,535 bytes")
    body = (
        struct.pack("!H", ja3.version)
        + bytes(range(32))
        + b"\0"
        + struct.pack(f"!H{len(ja3.ciphers)}H", 2 * len(ja3.ciphers), *ja3.ciphers)
        + b"\x01\x00"
        + struct.pack("!H", len(ext))
        + ext
    )
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    return tls_records(hs, b"\x03\x01")


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 128:
        ln = bytes([n])
    else:
        b = n.to_bytes((n.bit_length() + 7) // 8, "big")
        ln = bytes([0x80 | len(b)]) + b
    return bytes([tag]) + ln + content


# distinguished-name attributes as Suricata prints them (`C=US, O=Example Ltd, CN=host`)
DN_OIDS = {
    b"C": "550406",
    b"ST": "550408",
    b"L": "550407",
    b"O": "55040a",
    b"OU": "55040b",
    b"CN": "550403",
    b"emailAddress": "2a864886f70d010901",
}
_DN_KEY = re.compile(rb"(?:^|(?<=, ))(C|ST|L|O|OU|CN|emailAddress)=")


def dn_attributes(text: bytes, *, empty: bool = False) -> list[tuple[bytes, bytes]] | None:
    """`C=US, O=Example, CN=x` as [(b"C", b"US"), ...]; None when `text` does not start with an
    attribute or an attribute's value is empty (unless `empty`: `C=, CN=` as empty values)."""
    hits = list(_DN_KEY.finditer(text))
    if not hits or hits[0].start() != 0:
        return None
    out = []
    for k, h in enumerate(hits):
        end = hits[k + 1].start() - 2 if k + 1 < len(hits) else len(text)
        value = text[h.end() : end]
        if not value and not empty:
            return None
        out.append((h.group(1), value))
    return out


def _name(attrs: bytes | list[tuple[bytes, bytes]]) -> bytes:
    """A DER Name: one RDN per attribute (a bare value is a CN)."""
    if isinstance(attrs, bytes):
        attrs = [(b"CN", attrs)]
    rdns = b""
    for key, value in attrs:
        tag = 0x13 if key == b"C" and value.isalnum() else 0x0C  # PrintableString / UTF8String
        atv = _der(0x06, bytes.fromhex(DN_OIDS[key])) + _der(tag, value)
        rdns += _der(0x31, _der(0x30, atv))
    return _der(0x30, rdns)


_DN_EMPTY = re.compile(rb"(?:^|(?<=, ))(C|ST|L|O|OU|CN)=(, |$)")
_DN_PREFIXES = (b"C=US, O=Example Ltd, CN=", b"O=Example Ltd, CN=", b"CN=")


def _dn_candidates(text: bytes, default_cn: bytes) -> list[bytes]:
    """`text` (a rule's subject/issuer bytes that name attributes) with C first and a CN last
    added when it lacks them, the richest first."""
    keys = {k for k, _v in dn_attributes(text) or []}
    head = b"" if b"C" in keys else b"C=US, "
    tail = b"" if b"CN" in keys else b", CN=" + default_cn
    return list(dict.fromkeys([head + text + tail, head + text, text + tail, text]))


def cert_name(model: RuleModel, name: str, default_cn: bytes) -> list[tuple[bytes, bytes]]:
    """The attributes of a certificate's subject or issuer (`name`: tls.cert_subject or
    tls.cert_issuer) such that Suricata's rendering of it holds the rule's matches: the rule's
    content in the attribute it names (`O=...`), the usual C, O and CN around it where the
    rule's positions and bsize allow, else a CN of the rule's bytes."""
    matches, opts = _rule_parts(model, name)
    if not matches and not opts:
        return [(b"C", b"US"), (b"O", b"Example Ltd"), (b"CN", default_cn)]
    texts: list[bytes] = []
    lens = (opts or {}).get("len")
    bare = {k: v for k, v in (opts or {}).items() if k != "len"}
    for pre in (b"",) + _DN_PREFIXES:
        with contextlib.suppress(LayoutError, RegexUnsupported):
            if lens:
                # a bsize is met by an O attribute of the right length, not by filler
                core = _DN_EMPTY.sub(b"\\1=x\\2", build_buffer(matches, bare, prefix=pre))
                for head, tail in ((b"C=US, O=", b", "), (b"", b", O=")):
                    pad = lens[0] - len(core) - len(head) - len(tail)
                    if pad >= 1 and dn_attributes(core):
                        filler = (b"Example" * (pad // 7 + 1))[:pad]
                        texts.append(head + filler + tail + core if head else core + tail + filler)
            texts.append(build_buffer(matches, opts, prefix=pre))
    texts += [_DN_EMPTY.sub(b"\\1=x\\2", t) for t in texts]
    for text in dict.fromkeys(texts):
        cands = _dn_candidates(text, default_cn) if dn_attributes(text) else [text]
        for cand in cands:
            attrs = dn_attributes(cand)
            if attrs is not None and verify(cand, matches, opts):
                return attrs
    for text in dict.fromkeys(texts):
        # last: attributes with empty values, when the rule spells them (`C=, ST=, ... CN=`
        # with its bsize); Suricata renders an empty value as `C=`
        attrs = dn_attributes(text, empty=True)
        if attrs is not None and verify(text, matches, opts):
            return attrs
    if not texts:
        raise LayoutError(f"no {name} satisfies the rule's matches on it")
    text = texts[0]
    return [(b"CN", text[3:] if text.startswith(b"CN=") else text)]


def x509_certificate(
    extra: bytes = b"",
    subject_cn: bytes | list[tuple[bytes, bytes]] = b"www.example.com",
    issuer_cn: bytes | list[tuple[bytes, bytes]] = b"Example CA",
) -> bytes:
    """A structurally valid DER certificate (not signed by anyone) carrying `extra` bytes in a
    private extension, so that contents on the raw certificate buffer are present."""
    algo = _der(0x30, _der(0x06, bytes.fromhex("2a864886f70d01010b")) + b"\x05\x00")
    modulus = b"\x00\xc1" + bytes(range(1, 64))
    spki = _der(
        0x30,
        _der(0x30, _der(0x06, bytes.fromhex("2a864886f70d010101")) + b"\x05\x00")
        + _der(0x03, b"\x00" + _der(0x30, _der(0x02, modulus) + _der(0x02, b"\x01\x00\x01"))),
    )
    validity = _der(0x30, _der(0x17, b"240101000000Z") + _der(0x17, b"340101000000Z"))
    # the extension's value is itself DER (an OCTET STRING), as a certificate parser expects
    ext = _der(
        0x30,
        _der(0x06, bytes.fromhex("2b0601040182b75c01")) + _der(0x04, _der(0x04, extra or b"x")),
    )
    tbs = _der(
        0x30,
        _der(0xA0, _der(0x02, b"\x02"))
        + _der(0x02, b"\x01\x23")
        + algo
        + _name(issuer_cn)
        + validity
        + _name(subject_cn)
        + spki
        + _der(0xA3, _der(0x30, ext)),
    )
    return _der(0x30, tbs + algo + _der(0x03, b"\x00" + bytes(64)))


def tls_server_flight(cert: bytes) -> bytes:
    """ServerHello, Certificate, ServerHelloDone: a whole TLS 1.2 flight. The suite is RSA key
    exchange (TLS_RSA_WITH_AES_128_GCM_SHA256), which needs no ServerKeyExchange, and the hello
    has the empty renegotiation_info extension (RFC 5746) that OpenSSL 3 clients require: a real
    client accepts the flight and parses the certificate (tests/test_ids_peers.py)."""
    reneg = b"\xff\x01\x00\x01\x00"
    sh_body = (
        b"\x03\x03"
        + bytes(range(32, 64))
        + b"\x00"
        + b"\x00\x9c"
        + b"\x00"
        + struct.pack("!H", len(reneg))
        + reneg
    )
    sh = b"\x02" + len(sh_body).to_bytes(3, "big") + sh_body
    certs = len(cert).to_bytes(3, "big") + cert
    cm = b"\x0b" + (len(certs) + 3).to_bytes(3, "big") + len(certs).to_bytes(3, "big") + certs
    done = b"\x0e\x00\x00\x00"
    return tls_records(sh + cm + done, b"\x03\x03")


TLS_RECORD_MAX = 1 << 14  # a record carries at most 2^14 bytes (RFC 8446 5.1)


def tls_records(handshake: bytes, version: bytes) -> bytes:
    """Handshake bytes as TLS records of at most TLS_RECORD_MAX bytes each (a long certificate
    spans several records, as a real server sends it)."""
    out = bytearray()
    for k in range(0, max(len(handshake), 1), TLS_RECORD_MAX):
        part = handshake[k : k + TLS_RECORD_MAX]
        out += b"\x16" + version + struct.pack("!H", len(part)) + part
    return bytes(out)


# --- sessions ------------------------------------------------------------------------------------
class _Emitter:
    def __init__(self, writer: P.PcapWriter, t_ns: int) -> None:
        self.w = writer
        self.t = t_ns
        self.count = 0

    def emit(self, frame: bytes) -> None:
        self.w.write(self.t, frame)
        self.t += PKT_GAP_NS
        self.count += 1


def _tcp_session(
    em: _Emitter,
    s: Session,
    messages: list[tuple[bool, bytes]],
    *,
    handshake: bool = True,
    flags: int | None = None,
    seed: int = 0,
    server_closes: bool = False,
) -> None:
    for _from_client, frame in P.tcp_session(
        P.addr(s.client),
        P.addr(s.server),
        s.cport,
        s.sport,
        messages,
        mss=MSS,
        seed=seed,
        handshake=handshake,
        flags=flags,
        server_closes=server_closes,
    ):
        em.emit(frame)


def udp_session(em: _Emitter, s: Session, messages: list[tuple[bool, bytes]]) -> None:
    c, sv = P.addr(s.client), P.addr(s.server)
    if messages and not messages[0][0]:
        # a flow starts with its first datagram: a server datagram first would make the server
        # the flow's client and a `flow:to_client` rule would not see it; the client asks first
        messages = [
            (True, dns_query(b"www.example.com", 1) if s.sport == 53 else b"\x00\x00\x00\x01")
        ] + messages
    for n, (from_client, data) in enumerate(messages):
        if from_client:
            em.emit(P.ether(P.ip(c, sv, 17, P.udp(c, sv, s.cport, s.sport, data), n + 1), True))
        else:
            em.emit(P.ether(P.ip(sv, c, 17, P.udp(sv, c, s.sport, s.cport, data), n + 1), False))


def _icmp_session(em: _Emitter, s: Session, model: RuleModel, payload: bytes) -> None:
    c, sv = P.addr(s.client), P.addr(s.server)
    v6 = len(c) == 16
    itype = model.itype if model.itype is not None else (128 if v6 else 8)  # echo request
    code = model.icode if model.icode is not None else 0
    src, dst = (c, sv) if model.src_is_client else (sv, c)
    if v6:
        frame = P.ipv6(src, dst, P.ICMPV6, P.icmpv6(src, dst, itype, code, 0x1234, 1, payload))
    else:
        frame = P.ipv4(src, dst, 1, P.icmp(itype, code, 0x1234, 1, payload), 1)
    em.emit(P.ether(frame, model.src_is_client))


def _pkt_payload(model: RuleModel, fill: bytes = b"\0") -> bytes:
    """The packet's payload: its contents laid out, as long as `dsize` asks: filled at the end,
    or, when that breaks the contents (an `endswith` content), where they allow it."""
    data = _buf(model, "pkt", fill=fill)
    if data is None:
        data = b""
    if model.dsize:
        lo, hi = model.dsize
        if len(data) < lo:
            padded = data + b"a" * (lo - len(data))
            matches = model.buffers.get("pkt") or []
            opts = {**(model.buffer_opts.get("pkt") or {}), "len": model.dsize}
            if matches and not verify(padded, matches, opts):
                try:
                    padded = build_buffer(matches, opts, fill=fill)
                except LayoutError:
                    pass  # as it was: the IDS's verdict says what is missing
            data = padded
        if len(data) > hi:
            raise SynthError(f"payload of {len(data)} bytes is longer than dsize allows ({hi})")
    return data


RESPONSE_BODIES = {"http.response_body", "file.data"}


def _answer_to(request: bytes, response: bytes) -> bytes:
    """`response` as the answer to `request`: without its body after HEAD (RFC 9110 9.3.2; a
    client reads none, so the body's bytes would be taken for the next response)."""
    if request.startswith(b"HEAD "):
        head, sep, _body = response.partition(b"\r\n\r\n")
        return head + sep
    return response


def rule_messages(model: RuleModel, ident: int) -> list[tuple[bool, bytes]]:
    """(from_client, bytes) of one rule's part of a session."""
    app = model.app
    fc = model.to_server
    if app == "http":
        has_req = any(
            n not in RESPONSE_BUFFERS and (model.to_server or n not in EITHER_SIDE_HEADERS)
            for n in model.buffers
            if n != "pkt"
        )
        req = http_request(model if (model.to_server or has_req) else None)
        pkt = model.buffers.get("pkt")
        if pkt and model.to_server and not has_req:
            raw = _pkt_payload(model)
            bare = _BARE_METHOD.match(raw)
            if _BARE_METHOD.fullmatch(raw):
                raw += b"/ HTTP/1.1\r\n"  # a method and its blank: the request line goes on
            elif bare and raw[bare.end() :].startswith(b"\r\n"):
                # a method, its blank, then the rule's header line (`DEBUG `, `|0d 0a|Command|3a|`):
                # the request line's URI and version between them, where the rule allows it
                line = raw[: bare.end()] + b"/ HTTP/1.1" + raw[bare.end() :]
                raw = line if _holds(model, "pkt", line) else raw
            if _HTTP_METHOD.match(raw):
                # the raw content is a request line: send it as the request itself
                if b"\r\n\r\n" not in raw:
                    raw += (
                        b"" if raw.endswith(b"\r\n") else b"\r\n"
                    ) + b"Host: www.example.com\r\n\r\n"
                return [(True, raw), (False, _answer_to(raw, http_response(None)))]
            carried = _head_carrying(model, raw, http_request(None))
            if carried is not None:
                return [(True, carried), (False, _answer_to(carried, http_response(None)))]
        if pkt and not model.to_server and not has_req:
            raw = _pkt_payload(model)
            if _STATUS_START.match(raw) and not any(n in RESPONSE_BUFFERS for n in model.buffers):
                # the raw content is a status line: the response starts with it
                if b"\r\n\r\n" not in raw:
                    raw += (
                        b"" if raw.endswith(b"\r\n") else b"\r\n"
                    ) + b"Content-Length: 0\r\n\r\n"
                return [(True, req), (False, raw)]
        tail = _LINE_TAIL.fullmatch(_pkt_payload(model)) if pkt and model.to_server else None
        if tail is not None and "http.request_line" not in model.buffers:
            # raw bytes that end a request line (`/notify.php HTTP/1.0|0d 0a|`): the URI's end
            # and the version of this request's line
            uri = tail.group(1) if tail.group(1).startswith(b"/") else b"/a" + tail.group(1)
            req = http_request(model, target=(uri, tail.group(2)))
            pkt = None
        if pkt and model.to_server:
            # raw stream content on an HTTP rule: carried at the end of the request body; bytes
            # that start with the head's blank line (`|0d 0a 0d 0a|0000FF...`) go right after
            # the head, the body starting with the rest
            raw = _pkt_payload(model)
            if raw.startswith(b"\r\n\r\n") and "http.request_body" not in model.buffers:
                raw = raw[4:]
            req = http_request(model if (model.to_server or has_req) else None, extra_body=raw)
        extra = _pkt_payload(model) if pkt and not model.to_server else b""
        resp = http_response(model if not model.to_server else None, extra_body=extra)
        if not extra and (model.to_server or not RESPONSE_BODIES & model.buffers.keys()):
            resp = _answer_to(req, resp)
        return [(True, req), (False, resp)]
    if app == "dns":
        name = _buf(model, "dns.query", prefix=b"www")
        if name is not None and name.endswith(b".") and _holds(model, "dns.query", name + b"com"):
            name += b"com"  # a name ends in a label: a final dot is no part of the query name
        if name is not None and name.startswith(b"."):
            for label in (b"ns1", b"a", b"x1"):  # nor is a leading one
                if _holds(model, "dns.query", label + name):
                    name = label + name
                    break
        if name is None:
            if model.buffers.get("pkt"):
                # raw DNS bytes: a real query first (so the flow is DNS), then a message that
                # starts with a DNS header and question and goes on with the rule's bytes
                raw = _dns_raw(model, ident, fc)
                msgs = [(True, dns_query(b"www.example.com", ident)), (fc, raw)]
                return dns_tcp(msgs) if model.proto == "tcp" else msgs
            name = b"www.example.com"
        msgs = [(True, dns_query(name, ident)), (False, dns_response(name, ident))]
        return dns_tcp(msgs) if model.proto == "tcp" else msgs
    if app == "sip":
        return _sip_messages(model, ident)
    if app == "tls":
        sni = _buf(model, "tls.sni", prefix=b"www")
        ja3 = _buf(model, "ja3.string", fill=b"0")
        try:
            fields = Ja3.parse(ja3) if ja3 is not None else None
        except ValueError as exc:
            raise SynthError(f"ja3.string: {exc}") from None
        if fields is not None and sni is not None and 0 not in fields.extensions:
            raise SynthError("the rule's tls.sni needs server_name (0), which its JA3 lacks")
        hello = tls_client_hello(sni if sni is not None or fields else b"www.example.com", fields)
        msgs = [(True, hello)]
        certs = _buf(model, "tls.certs")
        if certs is not None or any(
            n in model.buffers or n in model.buffer_opts
            for n in ("tls.cert_subject", "tls.cert_issuer")
        ):
            subj = cert_name(model, "tls.cert_subject", b"www.example.com")
            issuer = cert_name(model, "tls.cert_issuer", b"Example CA")
            msgs.append((False, tls_server_flight(x509_certificate(certs or b"", subj, issuer))))
        raw = _pkt_payload(model) if model.buffers.get("pkt") else b""
        if raw:
            msgs.append((fc, raw))
        return msgs
    if app == "dcerpc":
        stub = _buf(model, "dcerpc.stub_data", fill=b"\0") or b""
        opts = model.buffer_opts.get("dcerpc", {})
        iface = opts.get("iface", "4b324fc8-1670-01d3-1278-5a47bf6ee188")
        if model.proto == "udp":
            return [
                (
                    True,
                    dcerpc_udp_request(iface, opts.get("version", 1), opts.get("opnum", 0), stub),
                )
            ]
        return dcerpc_tcp(iface, opts.get("version", 1), opts.get("opnum", 0), stub)
    if app == "smtp" and "file.data" in model.buffers:
        return smtp_mail(
            _buf(model, "file.data", fill=b"\0"),
            _pkt_payload(model) if model.buffers.get("pkt") else b"",
        )
    payload = _pkt_payload(model, fill=b" " if app in TEXT_APPS else b"\0")
    if app in TEXT_APPS:
        return dialogue(
            app,
            payload,
            fc,
            matches=model.buffers.get("pkt"),
            opts=model.buffer_opts.get("pkt"),
            dsize=model.dsize,
        )
    if app == "telnet":
        return [(False, b"\xff\xfd\x18"), (fc, payload)]
    if app == "ssh":
        return [
            (False, b"SSH-2.0-OpenSSH_9.2\r\n"),
            (True, b"SSH-2.0-OpenSSH_9.2\r\n"),
            (fc, payload),
        ]
    if model.proto == "udp" and session_ports(model, 0)[1] == APP_PORTS["dns"]:
        payload = _dns_header_padded(model, payload)
    return [(fc, payload)] if payload or model.proto != "tcp" else [(fc, b"")]


DNS_HEADER = 12


def _dns_header_padded(model: RuleModel, payload: bytes) -> bytes:
    """A raw UDP rule's payload to the DNS port that is shorter than a DNS header (`byte_test`
    on the flags of byte 2, nothing after): made a whole header, with one question for
    www.example.com when the rule leaves the question count free, else with no question or
    record, which a DNS server parses (and answers, NOTIMP for an odd opcode) and tshark
    dissects, where 3 bytes are a malformed message (and a bare header with opcode 6, DSO, too);
    as it is when that breaks a match or the rule's dsize."""
    if len(payload) >= DNS_HEADER:
        return payload
    header = payload + bytes(DNS_HEADER - len(payload))
    shapes = [header]
    if len(payload) <= 4:  # the question count is ours
        question = dns_query(b"www.example.com", 0)[DNS_HEADER:]
        shapes.insert(0, header[:4] + b"\x00\x01" + header[6:] + question)
    for shape in shapes:
        fits = not model.dsize or model.dsize[0] <= len(shape) <= model.dsize[1]
        if fits and _holds(model, "pkt", shape):
            return shape
    return payload


def _head_carrying(model: RuleModel, raw: bytes, request: bytes) -> bytes | None:
    """`request` with a header line that puts the rule's raw stream bytes where their `offset`
    pins them in the stream (`offset:60; depth:60`: a scanner's text in the head, not at the end
    of a body): `raw` is laid out from the stream's start, filler up to its first content, so the
    request line and the header's name take that filler's place. None when the offset leaves no
    room for them, the bytes would break the line, or the rule's matches do not hold."""
    first = next((m for m in model.buffers.get("pkt", []) if m.kind == "content"), None)
    if first is None or first.negated or first.is_relative or not first.offset:
        return None
    line, _, rest = request.partition(b"\r\n")
    lead = line + b"\r\nX-Data: "
    value = raw[len(lead) :]
    if len(lead) > first.offset or not value or b"\r" in value or b"\n" in value:
        return None
    carried = lead + value + b"\r\n" + rest
    return carried if _holds(model, "pkt", carried) else None


def _sip_carrying(model: RuleModel, message: bytes) -> bytes | None:
    """`message` (a SIP request or response) with the rule's raw bytes, which it pins at an offset
    (`content:"sip|3a|scanner@"; offset:90`), in a header line of their own after the start line
    (`X-Ntg: `, letters before them up to the offset): a message a SIP parser reads, the bytes
    where the rule looks. None when the rule's matches do not hold in such a message."""
    if _holds(model, "pkt", message):  # `content:"INVITE sip|3a|"; depth:11`: as it is
        return message
    first, _, rest = message.partition(b"\r\n")
    prefix = first + b"\r\nX-Ntg: "
    try:
        carried = build_buffer(
            model.buffers.get("pkt", []), model.buffer_opts.get("pkt"), prefix=prefix, fill=b"a"
        )
    except (LayoutError, RegexUnsupported):
        return None
    if not carried.startswith(prefix):
        return None
    value = carried[len(prefix) :]
    candidates = [carried + b"\r\n" + rest]
    if _SIP_HEADER.match(value):  # a header already (`User-Agent|3a| x`): a line of its own
        candidates.insert(0, first + b"\r\n" + value + b"\r\n" + rest)
    return next((c for c in candidates if _holds(model, "pkt", c)), None)


_SIP_HEADER = re.compile(rb"[A-Za-z0-9.!%*_+`'~-]+:[^\r\n]*\Z")


def _sip_messages(model: RuleModel, ident: int) -> list[tuple[bool, bytes]]:
    """A SIP request and its response; the rule's `sip.*` buffers in the request (to_server) or
    the response (to_client), raw contents as the message body (or as the message itself when
    they must start it)."""
    transport = b"TCP" if model.proto == "tcp" else b"UDP"
    method, proto = _buf(model, "sip.method"), _buf(model, "sip.protocol")
    uri = _buf(model, "sip.uri", prefix=b"sip:")
    rl = _buf(model, "sip.request_line")
    if rl:
        parts = rl.split(b" ")
        method = parts[0]
        if len(parts) >= 3:
            uri, proto = b" ".join(parts[1:-1]), parts[-1]
        elif len(parts) == 2:
            uri = parts[1] + (b"bob@example.com" if parts[1].endswith(b":") else b"")
    code, reason = _buf(model, "sip.stat_code"), _buf(model, "sip.stat_msg")
    if code is not None and len(code) < 3 and code.isdigit():
        # a status code has three digits (`content:"4"; startswith;` is any 4xx)
        full = code.ljust(3, b"0")
        code = (
            full
            if verify(
                full, model.buffers.get("sip.stat_code", []), model.buffer_opts.get("sip.stat_code")
            )
            else code
        )
    status = _buf(model, "sip.response_line")
    rproto = proto if not model.to_server else None
    if status:
        parts = status.split(b" ", 2)
        if len(parts) == 3:
            rproto, code, reason = parts
    raw = _pkt_payload(model) if model.buffers.get("pkt") else b""
    if method is None and raw:
        method = sip_method_of(raw)
    method = method or b"MESSAGE"  # a method scanner rules do not look for (OPTIONS, INVITE)
    kw = {"ident": ident, "transport": transport}
    # raw bytes that must start the message are the message itself, or a header of one
    pinned = bool(raw) and pinned_to_start(model.buffers["pkt"])
    if pinned and not raw.startswith(b"SIP/2.0 ") and b"\r\n\r\n" not in raw:
        if model.to_server:
            plain = sip_request(method, uri, proto, **kw)
        else:
            plain = sip_response(code, reason, rproto, method=method, **kw)
        raw = _sip_carrying(model, plain) or raw
    if model.to_server:
        request = raw if pinned else sip_request(method, uri, proto, raw, **kw)
        return [(True, request), (False, sip_response(None, None, None, method=method, **kw))]
    response = raw if pinned else sip_response(code, reason, rproto, raw, method=method, **kw)
    return [(True, sip_request(method, None, None, **kw)), (False, response)]


@dataclass
class _Plan:
    model: RuleModel
    messages: list[tuple[bool, bytes]]
    related: list[int]
    # the server closes first: a flowbit set by the server's bytes on the raw stream, which
    # Suricata 7 inspects when the server's FIN comes (measured), before the client's are read
    server_closes: bool = False


def _setter_for(
    name: str,
    setters: dict[str, list[RuleModel]],
    exclude: int,
    app: str | None = None,
    ports: tuple[int, int] | None = None,
) -> RuleModel | None:
    """A rule that sets flowbit `name` in the session of rule `exclude`, whose (client, server)
    ports are `ports`: of the setters, those whose own header allows the server port first (a
    DCERPC rule on port 135 and the bind rules setting its bit on 135, 139 and 445), then those
    that allow the client's (a setter that matches the other way: the query to memcached's
    11211 before the checker's answer from it)."""
    found = [m for m in setters.get(name, ()) if m.sid != exclude]
    if ports is not None:
        found.sort(key=lambda m: (not _serves(m, ports[1]), not _serves(m, ports[0])))
    if app == "smtp":
        # an SMTP rule needs a setter that speaks SMTP too (one conversation)
        for m in found:
            if not m.flowbits_isset and m.app == app:
                return m
    for m in found:
        if not m.flowbits_isset:
            return m
    return found[0] if found else None


def _serves(model: RuleModel, port: int) -> bool:
    """True when `model`'s header allows `port` as its session's server port."""
    spec = model.dst_ports if model.src_is_client else model.src_ports
    try:
        return choose_port(spec, [port]) == port
    except ValueError:
        return False


FLOW_DIRECTIONS = {"to_server", "to_client", "from_server", "from_client"}


def _facing(setter: RuleModel, model: RuleModel) -> RuleModel:
    """The flowbit `setter` as it goes into `model`'s session: a setter on the raw stream with no
    direction of its own whose source is the side of that session's server (`$HOME_NET any ->
    any` setting a bit for `any -> $HOME_NET`: an SMTP server's "ESMTP Exim" greeting) sends its
    bytes from the server; its messages on the client side would come from the wrong host."""
    flow = set((setter.raw.first("flow") or "").replace(" ", "").lower().split(","))
    if not setter.to_server or flow & FLOW_DIRECTIONS or set(setter.buffers) - {"pkt"}:
        return setter
    cside, sside = session_sides(model)
    own_client, own_server = session_sides(setter)
    if own_client == sside and own_client != cside:
        return replace(setter, to_server=False, src_is_client=False)
    return setter


def stream_size_problem(model: RuleModel, messages: list[tuple[bool, bytes]]) -> str | None:
    """Why the session's stream sizes break the rule's `stream_size` at its match (the first
    message in the rule's direction: each side's bytes so far and its SYN, as Suricata counts
    sequence space), or None when they hold."""
    if not model.stream_size or model.proto != "tcp":
        return None
    size = {"client": 1, "server": 1}
    for from_client, data in messages:
        size["client" if from_client else "server"] += len(data)
        if from_client == model.to_server and data:
            break
    for side, op, n in model.stream_size:
        sides = ("client", "server") if side in ("both", "either") else (side,)
        held = [STREAM_OPS[op](size[x], n) for x in sides]
        if not (any(held) if side == "either" else all(held)):
            got = ", ".join(f"{x} {size[x]:,}" for x in sides)
            return f"stream_size:{side},{op},{n} does not hold at the match ({got} bytes)"
    return None


def _head_holds(model: RuleModel, head: bytes) -> bool:
    """True when an HTTP request head (request line, header lines, blank line) still holds the
    rule's header-side matches (`http.header`, `.raw`, `http.header_names`, `http.start`)."""
    line, _, rest = head.partition(b"\r\n")
    lines = [ln for ln in rest.split(b"\r\n") if ln]
    text = b"".join(ln + b"\r\n" for ln in lines)
    names = _names_text([ln.split(b":", 1)[0] for ln in lines])
    return (
        _holds(model, "http.header", text)
        and _holds(model, "http.header.raw", text)
        and _holds(model, "http.header_names", names)
        and _holds(model, "http.start", line + b"\r\n" + text + b"\r\n")
    )


def _padded_request(
    model: RuleModel, pre: list[tuple[bool, bytes]], own: list[tuple[bool, bytes]]
) -> list[tuple[bool, bytes]]:
    """`own` with a padding header in the rule's last request before its match, long enough
    for a `stream_size:client,>,N` (or `>=`, `both`, `either`) that the request's bytes fall
    short of (Fortigate exploits: `stream_size:client,>,1800`), where the rule's header matches
    still hold; `own` unchanged when no such place is."""
    need = 0
    for side, op, n in model.stream_size:
        if side in ("client", "both", "either") and op in (">", ">="):
            need = max(need, n + (op == ">"))
    at = None
    for k, (from_client, data) in enumerate(own):
        if from_client and _HTTP_METHOD.match(data):
            at = k
        if from_client == model.to_server and data:
            break
    if not need or at is None:
        return own
    have = 1 + sum(len(d) for fc, d in pre + own[: at + 1] if fc)
    head, sep, body = own[at][1].partition(b"\r\n\r\n")
    if have >= need or not sep:
        return own
    pad = b"X-Padding: " + b"a" * max(1, need - have - len(b"X-Padding: \r\n"))
    first, _, rest = head.partition(b"\r\n")
    for cand in (head + b"\r\n" + pad, first + b"\r\n" + pad + (b"\r\n" + rest if rest else b"")):
        if _head_holds(model, cand + b"\r\n\r\n"):
            return [*own[:at], (True, cand + sep + body), *own[at + 1 :]]
    return own


def _flowint_value(setter: RuleModel, name: str, times: int) -> int | None:
    """Flow integer `name` after `setter` matched `times` times in a flow where it was unset
    (Suricata 7: `=` sets, `+` adds, to 0 when unset; None: unset, or a change this does not
    follow, `-` below zero or from another variable)."""
    value: int | None = None
    for _ in range(times):
        for var, op, operand in setter.flowint_changes:
            if var != name:
                continue
            if not operand.isdigit():
                return None
            k = int(operand)
            if op == "=":
                value = k
            elif op == "+":
                value = (value or 0) + k
            elif value is None or value < k:
                return None
            else:
                value -= k
    return value


def _flowint_holds(value: int | None, op: str, target: int | None) -> bool:
    if op == "isset":
        return value is not None
    if op in ("notset", "isnotset"):
        return value is None
    if value is None or target is None:
        return False
    return STREAM_OPS["=" if op == "==" else op](value, target)


def _flowint_setters(
    model: RuleModel, setters: dict[str, list[RuleModel]]
) -> list[tuple[RuleModel, int]]:
    """The setters whose messages go ahead of `model`'s in its session, each with how many times,
    so that all its flowint conditions hold at its match; SynthError naming the variable and the
    value it needs when no rule given gets it there."""
    need: list[tuple[RuleModel, int]] = []
    by_var: dict[str, list[tuple[str, int | None]]] = {}
    for name, op, operand in model.flowint_conditions:
        target = int(operand) if operand.isdigit() else None
        if operand and target is None:  # compared with another variable: set that one first
            other = next(iter(_flowint_candidates(model, operand, setters)), None)
            target = None if other is None else _flowint_value(other, operand, 1)
            if other is None or target is None:
                raise SynthError(
                    f"flowint {operand!r} must be set before the match (the rule compares "
                    f"{name} {op} {operand}), and no rule given sets it"
                )
            if (other, 1) not in need:
                need.append((other, 1))
        by_var.setdefault(name, []).append((op, target))
    for name, conditions in by_var.items():
        if all(op in ("notset", "isnotset") for op, _t in conditions):
            continue  # unset until a setter runs: nothing goes ahead
        wanted = " and ".join(
            "set" if op == "isset" else "unset" if op.endswith("notset") else f"{op} {t}"
            for op, t in conditions
        )
        candidates = _flowint_candidates(model, name, setters)
        if not candidates:
            raise SynthError(
                f"flowint {name!r} must be {wanted} before the match, and no rule given sets it"
            )
        found = next(
            (
                (setter, times)
                for setter in candidates
                for times in range(1, MAX_FLOWINT_MATCHES + 1)
                if _flowint_value(setter, name, times) is not None
                and all(
                    _flowint_holds(_flowint_value(setter, name, times), op, t)
                    for op, t in conditions
                )
            ),
            None,
        )
        if found is None:
            sids = ", ".join(str(s.sid) for s in candidates[:5])
            raise SynthError(
                f"flowint {name!r} must be {wanted} before the match; the rules given that "
                f"change it (sid {sids}) do not get it there in {MAX_FLOWINT_MATCHES:,} matches"
            )
        setter, times = found
        if times > 1 and setter.proto == "tcp" and setter.app is None:
            # measured with Suricata 7.0.10: the raw stream of a session whose protocol it does
            # not know is inspected in one piece, at its close: a content there counts once
            raise SynthError(
                f"flowint {name!r} must be {wanted} before the match: {times} matches of sid "
                f"{setter.sid} in one session, whose raw TCP stream Suricata 7 inspects in one "
                "piece (a setter on the raw stream counts once)"
            )
        need.append(found)
    return need


def _flowint_candidates(
    model: RuleModel, name: str, setters: dict[str, list[RuleModel]]
) -> list[RuleModel]:
    """The rules that change flow integer `name`, other than `model`, those that match without
    conditions of their own first (a change happens only when its rule matched)."""
    found = [m for m in setters.get(FLOWINT + name, ()) if m.sid != model.sid]
    return sorted(found, key=lambda m: bool(m.flowint_conditions or m.flowbits_isset))


def plan(
    model: RuleModel, setters: dict[str, list[RuleModel]], ident: int, depth: int = 0
) -> _Plan:
    """The messages of `model`'s session: those of the rules that set the flowbits it checks, or
    drive the flow integers it compares, first (`times` over for a flow integer), then its own."""
    pre: list[tuple[bool, bytes]] = []
    related: list[int] = []
    setter = None
    server_closes = False

    def ahead(first: RuleModel, times: int = 1) -> RuleModel:
        nonlocal pre, server_closes
        if depth > 3:
            raise SynthError("flowbits chain too deep")
        first = _facing(first, model)
        sp = plan(first, setters, ident, depth + 1)
        pre += sp.messages * times
        related.extend([first.sid, *sp.related])
        raw_server = not first.to_server and not set(first.buffers) - {"pkt"}
        server_closes = server_closes or sp.server_closes or raw_server
        return first

    ports = session_ports(model, 0) if model.flowbits_isset else None
    for name in model.flowbits_isset:
        found = _setter_for(name, setters, model.sid, model.app, ports)
        kind, bit = ("xbit", name[len(XBIT) :]) if name.startswith(XBIT) else ("flowbit", name)
        if found is None:
            raise SynthError(f"{kind} {bit!r} is set by no rule given")
        if ports and kind == "flowbit" and not any(_serves(found, p) for p in ports):
            # a flowbit lives in one flow (an xbit, per host pair, may come from another)
            raise SynthError(
                f"{kind} {bit!r} is set only by rules for other ports than this session's "
                f"{ports[1]} and {ports[0]} (sid {found.sid}: "
                f"{found.dst_ports if found.src_is_client else found.src_ports})"
            )
        setter = ahead(found)
    for found, times in _flowint_setters(model, setters):
        setter = ahead(found, times)
    own = rule_messages(model, ident)
    if pre and model.app == "http":
        # one transaction when the setter sent the request and this rule checks the response;
        # a to_client setter's response carries its own bytes and stays (two transactions)
        assert setter is not None
        if not model.to_server and setter.to_server and pre[-1][0] is False and len(pre) >= 2:
            pre = pre[:-1]
            own = [m for m in own if m[0] is False]
    if (
        pre
        and model.app == "smtp"
        and own[:1] == [(False, b"220 mail.example.com ESMTP ready\r\n")]
    ):
        # one SMTP conversation: no second greeting, the setter's mail is not followed by QUIT
        if pre[-2:] == [(True, b"QUIT\r\n"), (False, b"221 bye\r\n")]:
            pre = pre[:-2]
        if any(d.startswith(b"EHLO") for _fc, d in pre):
            own = own[3:] if own[1][1].startswith(b"EHLO") else own[1:]
    why = stream_size_problem(model, pre + own)
    if why and model.app == "http":
        own = _padded_request(model, pre, own)
        why = stream_size_problem(model, pre + own)
    if why:
        raise SynthError(why)
    size = sum(len(d) for _fc, d in pre + own)
    if size > MAX_SESSION_BYTES:
        raise SynthError(
            f"the session would carry {size:,} bytes, more than the "
            f"{MAX_SESSION_BYTES:,} one rule may have"
        )
    if depth == 0 and size * model.events > MAX_RULE_TRAFFIC:
        raise SynthError(
            f"{model.events:,} sessions of {size:,} bytes would carry more than the "
            f"{MAX_RULE_TRAFFIC:,} bytes one rule may have"
        )
    return _Plan(model, pre + own, related, server_closes and model.to_server)


def icmpv4_only(model: RuleModel) -> bool:
    """An ICMP rule that names an ICMPv4 type: over IPv6 the type would be an ICMPv6 one, which
    Suricata decodes differently (type 8 is no echo there: measured, its dsize is 4 bytes short)."""
    return model.proto == "icmp" and model.itype is not None and not model.ipv6


def session_ports(model: RuleModel, index: int) -> tuple[int, int]:
    """(client port, server port) of the session of `model`, the `index`-th rule written."""
    server_spec = model.dst_ports if model.src_is_client else model.src_ports
    client_spec = model.src_ports if model.src_is_client else model.dst_ports
    pref = [APP_PORTS[model.app]] if model.app in APP_PORTS else []
    pref += [5555, 8080, 80]
    sport = choose_port(server_spec, pref)
    cport = choose_port(client_spec, [49152 + index % 16000, 1024 + index % 60000])
    if cport == sport:
        cport = choose_port(client_spec, [cport + 1, 40000])
    return cport, sport


def event_ports(model: RuleModel, cport: int, sport: int, k: int) -> tuple[int, int]:
    """The ports of the `k`-th of the sessions a threshold rule needs (a new connection each):
    the client port moves on where the rule allows it, else the server port (`any 53 ->
    $DNS_SERVERS any`: the answers come from port 53 each time), else neither (both ports
    pinned: the same five-tuple again)."""
    if k == 0:
        return cport, sport
    server_spec = model.dst_ports if model.src_is_client else model.src_ports
    client_spec = model.src_ports if model.src_is_client else model.dst_ports
    c, s = cport + k, sport + k
    if c < 65536 and c != sport and choose_port(client_spec, [c]) == c:
        return c, sport
    if s < 65536 and s != cport and choose_port(server_spec, [s]) == s:
        return cport, s
    return cport, sport


def session_sides(model: RuleModel) -> tuple[str, str]:
    """The sides (`home` or `external`, as $HOME_NET and $EXTERNAL_NET) of the client and the
    server of `model`'s session: the rule's own, `any` becoming the other side's opposite."""
    cside = address_side(model.src_addr if model.src_is_client else model.dst_addr)
    sside = address_side(model.dst_addr if model.src_is_client else model.src_addr)
    if cside == "any":
        cside = "external" if sside != "external" else "home"
    if sside == "any":
        sside = "home" if cside != "home" else "external"
    return cside, sside


def session_hosts(model: RuleModel) -> tuple[str | None, str | None]:
    """The fixed addresses of the client and the server of `model`'s session: those its rule
    lists (`RuleModel.src_host`, `dst_host`), None for a side the test ranges serve."""
    if model.src_is_client:
        return model.src_host, model.dst_host
    return model.dst_host, model.src_host


def flowbit_setters(models: list[RuleModel]) -> dict[str, list[RuleModel]]:
    """flowbit name -> the rules that set it and can be synthesized, and FLOWINT + a flow
    integer's name -> the rules that change it (a setter's messages go ahead of a checker's in
    its session: `plan`)."""
    setters: dict[str, list[RuleModel]] = {}
    for m in models:
        if m.status == "supported" or (m.noalert and len(m.reasons) == 1):
            for name in m.flowbits_set:
                setters.setdefault(name, []).append(m)
            for name in dict.fromkeys(var for var, _op, _v in m.flowint_changes):
                setters.setdefault(FLOWINT + name, []).append(m)
    return setters


def synthesize(
    models: list[RuleModel],
    pcap_path: str | Path,
    manifest_path: str | Path | None = None,
    *,
    all_models: list[RuleModel] | None = None,
    progress=None,
    t0_ns: int = T0_NS,
    starts_ns: list[int] | None = None,
    ip_version: int = 4,
    live: bool = False,
) -> SynthResult:
    """Write one session per supported model into `pcap_path`.

    `ip_version` 6 puts every session on IPv6 addresses; with 4 only rules that name IPv6
    (`RuleModel.ipv6`) get IPv6 sessions. An `icmp` rule with `itype` stays on IPv4 (`icmpv4_only`).
    A rule that lists its own addresses gets them (`session_hosts`), in their IP version;
    `live` (the pcap is to be sent) leaves out, in `failed`, the rules whose addresses lie
    outside the test ranges (`RuleModel.offline_only`).

    `starts_ns[i]`, if given, is when the session(s) of models[i] are due; a session starts then,
    or right after the one before it when that one is still running (the pcap stays in time order).
    Without it the sessions follow each other SESSION_GAP_NS apart from `t0_ns`."""
    setters = flowbit_setters(all_models if all_models is not None else models)
    res = SynthResult(Path(pcap_path))
    addrs = _Addr()
    t = t0_ns
    with replacing(pcap_path) as tmp, open(tmp, "wb") as f:  # whole or not at all (a full disk)
        w = P.PcapWriter(f)
        for i, model in enumerate(models):
            if progress and i % 500 == 0:
                progress(i, len(models))
            if not model.supported:
                continue
            if live and model.offline_only:
                res.failed[model.sid] = model.offline_only
                continue
            try:
                with _time_limit(RULE_TIME_LIMIT_S):
                    pl = plan(model, setters, i + 1)
                cport, sport = session_ports(model, i)
                cside, sside = session_sides(model)
            except (SynthError, LayoutError, RegexUnsupported, ValueError) as exc:
                res.failed[model.sid] = str(exc)
                continue
            fixed_client, fixed_server = session_hosts(model)
            fixed = fixed_client or fixed_server
            if fixed:
                v6 = ":" in fixed  # the listed address's version
            else:
                v6 = (ip_version == 6 or model.ipv6) and not icmpv4_only(model)
            client = fixed_client or addrs.take(cside, v6)
            server = fixed_server or addrs.take(sside, v6)
            if starts_ns is not None:
                t = max(t if res.sessions else 0, starts_ns[i])
            for k in range(model.events):
                kc, ks = event_ports(model, cport, sport, k)
                s = Session(
                    model.sid,
                    pl.related,
                    model.proto,
                    client,
                    kc,
                    server,
                    ks,
                    app=model.app or model.proto,
                    offline_only=bool(model.offline_only),
                )
                em = _Emitter(w, t)
                s.start_ns = t
                if model.proto == "udp":
                    udp_session(em, s, pl.messages)
                elif model.proto == "icmp":
                    payload = b"".join(d for _fc, d in pl.messages)
                    _icmp_session(em, s, model, payload)
                elif model.tcp_flags is not None and not model.established:
                    fl = 0
                    for ch in model.tcp_flags.strip("!+*"):
                        fl |= P.FLAG_BITS.get(ch, 0)
                    if model.tcp_flags.startswith("!"):
                        fl = P.ACK
                    data = b"".join(d for _fc, d in pl.messages)
                    _tcp_session(
                        em, s, [(model.src_is_client, data)], handshake=False, flags=fl, seed=i + 1
                    )
                    s.app = "tcp"  # a packet with flags, no conversation
                else:
                    _tcp_session(em, s, pl.messages, seed=i + 1, server_closes=pl.server_closes)
                s.end_ns = em.t - PKT_GAP_NS
                s.packets = em.count
                res.sessions.append(s)
                t = em.t + SESSION_GAP_NS
            res.synthesized[model.sid] = "ok"
        res.packets, res.bytes = w.packets, w.bytes
    if manifest_path is not None:
        write_manifest(res, models, manifest_path)
    return res


def write_manifest(res: SynthResult, models: list[RuleModel], path: str | Path) -> None:
    rules = []
    listed: set[int] = set()
    for m in models:
        if m.sid in listed:  # a rule scheduled more than once (scenario attacks) is listed once
            continue
        listed.add(m.sid)
        entry = {"sid": m.sid, "file": m.raw.file, "line": m.raw.line, "status": m.status}
        if m.reasons:
            entry["reasons"] = m.reasons
        if m.sid in res.failed:
            entry["status"] = "unsynthesizable"
            entry["reasons"] = [res.failed[m.sid]]
        rules.append(entry)
    doc = {
        "pcap": str(res.pcap),
        "packets": res.packets,
        "bytes": res.bytes,
        "sessions": [s.as_dict() for s in res.sessions],
        "rules": rules,
    }
    write_whole(path, json.dumps(doc, indent=1) + "\n")
