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
import ipaddress
import json
import re
import signal
import struct
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ntgcore import packets as P
from ntgcore.errors import NtgError
from ntgcore.files import replacing, write_whole

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
    HOME_NET6,
    HTTP_HEADER_VALUE_BUFFERS,
    MAX_RULE_TRAFFIC,
    MAX_SESSION_BYTES,
    RESPONSE_BUFFERS,
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
URI_SAFE = set(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/?=&;:@!$'()*+,[]"
)


RULE_TIME_LIMIT_S = 1.0  # per rule: a pcre with catastrophic backtracking is given up


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


def _header_lines(text: bytes) -> list[bytes]:
    lines = []
    for line in text.replace(b"\r\n", b"\n").split(b"\n"):
        if not line.strip():
            continue
        if b":" not in line:
            # a bare token becomes a header name (trailing blanks would put a space before the
            # colon); a phrase becomes a value, of User-Agent when it reads like one
            if b" " not in line.strip() and line == line.rstrip():
                line = line + b": 1"
            else:
                line = (b"User-Agent: " if _UA_LIKE.search(line) else b"X-Data: ") + line
        if line[-1:] in (b" ", b"\t"):
            # libhtp trims blanks at the end of a value: keep the rule's blank inside the value
            line += b"1"
        lines.append(line)
    seen_ua = False
    for k, line in enumerate(lines):  # one User-Agent: later guesses become X-Data
        if line.lower().startswith(b"user-agent:"):
            if seen_ua and line.startswith(b"User-Agent: ") and line not in text:
                lines[k] = b"X-Data: " + line[len(b"User-Agent: ") :]
            seen_ua = True
    return lines


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


_DOT_SEGMENT = re.compile(rb"\.\./|/\./|\\")


def _query_for_dot_segments(uri: bytes, matches, opts) -> bytes:
    """libhtp removes `../` and `./` segments (and turns `\\` into `/`) in the path of the
    normalized URI but keeps the query as sent: when the rule's URI contents need such a sequence,
    start the query just before it, if the matches still hold."""
    path = uri.split(b"?", 1)[0]
    hit = _DOT_SEGMENT.search(path)
    if hit is None:
        return uri
    cand = uri[: hit.start()] + b"?" + uri[hit.start() :]
    return cand if verify(cand, matches, opts) else uri


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
    return _buf(model, "http.uri", prefix=b"/"), _buf(model, "http.uri.raw", prefix=b"/")


def _header_names(lines: list[bytes]) -> set[bytes]:
    """Lower-case names of `name: value` lines (the rule's own headers)."""
    return {ln.split(b":", 1)[0].strip().lower() for ln in lines if b":" in ln}


def http_request(model: RuleModel | None) -> bytes:
    b = (lambda n, **kw: _buf(model, n, **kw)) if model else (lambda n, **kw: None)
    rl = b("http.request_line")
    method = b("http.method")
    body = b("http.request_body")
    uri, raw_uri = _uris(model) if model else (None, None)
    proto = b("http.protocol") or b"HTTP/1.1"
    if rl:
        parts = rl.split(b" ")
        if len(parts) >= 3:
            method, raw_uri, proto = parts[0], b" ".join(parts[1:-1]), parts[-1]
    if method is None:
        method = b"POST" if body is not None else b"GET"
    if uri is not None and raw_uri is None:
        if not uri.startswith(b"/"):
            uri = b"/" + uri
        raw_uri = _uri_encode(uri)
    if raw_uri is None:
        raw_uri = b"/index.html"
    elif not raw_uri.startswith(b"/") and not raw_uri.lower().startswith(b"http"):
        raw_uri = b"/" + raw_uri
    headers: list[bytes] = []
    names_buf = b("http.header_names")
    host = b("http.host", prefix=b"www") or b("http.host.raw", prefix=b"www")
    values = {}
    for name, hname in HTTP_HEADER_VALUE_BUFFERS.items():
        if name in RESPONSE_ONLY or (model and not model.to_server and name not in REQUEST_ONLY):
            continue
        if name in ("http.host", "http.host.raw"):
            continue
        v = b(name, prefix=b"a")
        if v is not None:
            values[hname.encode()] = v
    hdr_text = b("http.header") if (model is None or model.to_server) else None
    hdr_raw = b("http.header.raw") if (model is None or model.to_server) else None
    if names_buf is not None:
        names = [n for n in names_buf.split(b"\r\n") if n.strip()]
        for n in names:
            key = n.strip()
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
    own_lines = [ln for text in (hdr_text, hdr_raw) if text for ln in _header_lines(text)]
    own_names = _header_names(own_lines)
    if own_names:
        # a header the rule writes itself replaces our default one: libhtp would merge the two
        # values (`User-Agent: Mozilla/5.0, rule's value`) and the rule's content would not match
        if b"user-agent" in own_names and values.get(b"User-Agent") == b"Mozilla/5.0":
            del values[b"User-Agent"]
        if b"host" in own_names and host_line is not None and host is None:
            headers.remove(host_line)
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
        headers.append(b"Content-Length: %d" % len(body))
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


def http_response(model: RuleModel | None) -> bytes:
    b = (lambda n, **kw: _buf(model, n, **kw)) if model else (lambda n, **kw: None)
    code = b("http.stat_code") or b"200"
    msg = b("http.stat_msg") or b"OK"
    rline = b("http.response_line")
    body = b("http.response_body")
    if body is None:
        body = b"<html><body>ok</body></html>"
    status = rline if rline else b"HTTP/1.1 " + code + b" " + msg
    if not status.startswith(b"HTTP/"):
        status = b"HTTP/1.1 " + status
    headers = []
    for name, hname in HTTP_HEADER_VALUE_BUFFERS.items():
        if name in REQUEST_ONLY or (model and model.to_server and name not in RESPONSE_ONLY):
            continue
        v = b(name)
        if v is not None:
            headers.append(hname.encode() + b": " + v)
    if not any(h.lower().startswith(b"content-type:") for h in headers):
        headers.append(b"Content-Type: text/html")
    if model is not None and not model.to_server:
        for n in ("http.header", "http.header.raw"):
            text = b(n)
            if text:
                headers.extend(_header_lines(text))
    chunked = any(b"chunked" in h.lower() for h in headers)
    if chunked:
        body = b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n" if body else b"0\r\n\r\n"
    elif not any(h.lower().startswith(b"content-length:") for h in headers):
        headers.append(b"Content-Length: %d" % len(body))
    return status + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


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


def tls_client_hello(sni: bytes | None) -> bytes:
    ext = b""
    if sni is not None:
        entry = b"\0" + struct.pack("!H", len(sni)) + sni
        lst = struct.pack("!H", len(entry)) + entry
        ext += struct.pack("!HH", 0, len(lst)) + lst
    ext += struct.pack("!HH", 10, 4) + struct.pack("!HH", 2, 23)  # supported groups
    ext += struct.pack("!HH", 13, 4) + struct.pack("!HH", 2, 0x0403)  # signature algorithms
    body = (
        b"\x03\x03"
        + bytes(range(32))
        + b"\0"
        + struct.pack("!H", 4)
        + b"\x13\x01\xc0\x2f"
        + b"\x01\x00"
        + struct.pack("!H", len(ext))
        + ext
    )
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + struct.pack("!H", len(hs)) + hs


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 128:
        ln = bytes([n])
    else:
        b = n.to_bytes((n.bit_length() + 7) // 8, "big")
        ln = bytes([0x80 | len(b)]) + b
    return bytes([tag]) + ln + content


def _name(cn: bytes) -> bytes:
    return _der(0x30, _der(0x31, _der(0x30, _der(0x06, b"\x55\x04\x03") + _der(0x0C, cn))))


def x509_certificate(
    extra: bytes = b"", subject_cn: bytes = b"www.example.com", issuer_cn: bytes = b"Example CA"
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
    sh_body = b"\x03\x03" + bytes(range(32, 64)) + b"\x00" + b"\xc0\x2f" + b"\x00"
    sh = b"\x02" + len(sh_body).to_bytes(3, "big") + sh_body
    certs = len(cert).to_bytes(3, "big") + cert
    cm = b"\x0b" + (len(certs) + 3).to_bytes(3, "big") + len(certs).to_bytes(3, "big") + certs
    done = b"\x0e\x00\x00\x00"
    hs = sh + cm + done
    return b"\x16\x03\x03" + struct.pack("!H", len(hs)) + hs


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
    ):
        em.emit(frame)


def _udp_session(em: _Emitter, s: Session, messages: list[tuple[bool, bytes]]) -> None:
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
    data = _buf(model, "pkt", fill=fill)
    if data is None:
        data = b""
    if model.dsize:
        lo, hi = model.dsize
        if len(data) < lo:
            data = data + b"a" * (lo - len(data))
        if len(data) > hi:
            raise SynthError(f"payload of {len(data)} bytes is longer than dsize allows ({hi})")
    return data


def _messages(model: RuleModel, ident: int) -> list[tuple[bool, bytes]]:
    """(from_client, bytes) of one rule's part of a session."""
    app = model.app
    fc = model.to_server
    if app == "http":
        has_req = any(
            n not in RESPONSE_BUFFERS
            and not (
                not model.to_server
                and n in ("http.header", "http.header.raw", "http.content_type", "http.content_len")
            )
            for n in model.buffers
            if n != "pkt"
        )
        req = http_request(model if (model.to_server or has_req) else None)
        pkt = model.buffers.get("pkt")
        if pkt and model.to_server and not has_req:
            raw = _pkt_payload(model)
            if _HTTP_METHOD.match(raw):
                # the raw content is a request line: send it as the request itself
                if b"\r\n\r\n" not in raw:
                    raw += (
                        b"" if raw.endswith(b"\r\n") else b"\r\n"
                    ) + b"Host: www.example.com\r\n\r\n"
                return [(True, raw), (False, http_response(None))]
        if pkt and model.to_server:
            # raw stream content on an HTTP rule: carried in a request body
            body = _pkt_payload(model)
            req = (
                req.replace(b"\r\n\r\n", b"\r\nContent-Length: %d\r\n\r\n" % len(body), 1) + body
                if b"Content-Length" not in req
                else req + body
            )
        resp = http_response(model if not model.to_server else None)
        if pkt and not model.to_server:
            resp = resp + _pkt_payload(model)
        return [(True, req), (False, resp)]
    if app == "dns":
        name = _buf(model, "dns.query", prefix=b"www")
        if name is None:
            if model.buffers.get("pkt"):
                # raw DNS bytes: a real query first (so the flow is DNS), then a message that
                # starts with a DNS header and question and goes on with the rule's bytes
                hdr = struct.pack(
                    "!HHHHHH", ident, 0x8180 if not fc else 0x0100, 1, 1 if not fc else 0, 0, 0
                )
                raw = _buf(model, "pkt", prefix=hdr + b"\x03www\x07example\x03com", fill=b"\0")
                msgs = [(True, dns_query(b"www.example.com", ident)), (fc, raw)]
                return dns_tcp(msgs) if model.proto == "tcp" else msgs
            name = b"www.example.com"
        msgs = [(True, dns_query(name, ident)), (False, dns_response(name, ident))]
        return dns_tcp(msgs) if model.proto == "tcp" else msgs
    if app == "sip":
        return _sip_messages(model, ident)
    if app == "tls":
        sni = _buf(model, "tls.sni", prefix=b"www")
        msgs = [(True, tls_client_hello(sni if sni is not None else b"www.example.com"))]
        certs = _buf(model, "tls.certs")
        subj = _buf(model, "tls.cert_subject")
        issuer = _buf(model, "tls.cert_issuer")
        if certs is not None or subj is not None or issuer is not None:

            def cn(v, default):
                if v is None:
                    return default
                return v[3:] if v.startswith(b"CN=") else v

            msgs.append(
                (
                    False,
                    tls_server_flight(
                        x509_certificate(
                            certs or b"", cn(subj, b"www.example.com"), cn(issuer, b"Example CA")
                        )
                    ),
                )
            )
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
    payload = _pkt_payload(model, fill=b"a" if app in TEXT_APPS else b"\0")
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
    return [(fc, payload)] if payload or model.proto != "tcp" else [(fc, b"")]


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
    # raw bytes that must start the message are the message itself
    pinned = bool(raw) and pinned_to_start(model.buffers["pkt"])
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


def _setter_for(
    name: str, setters: dict[str, list[RuleModel]], exclude: int, app: str | None = None
) -> RuleModel | None:
    if app == "smtp":
        # an SMTP rule needs a setter that speaks SMTP too (one conversation)
        for m in setters.get(name, ()):
            if m.sid != exclude and not m.flowbits_isset and m.app == app:
                return m
    for m in setters.get(name, ()):
        if m.sid != exclude and not m.flowbits_isset:
            return m
    for m in setters.get(name, ()):
        if m.sid != exclude:
            return m
    return None


def plan(
    model: RuleModel, setters: dict[str, list[RuleModel]], ident: int, depth: int = 0
) -> _Plan:
    pre: list[tuple[bool, bytes]] = []
    related: list[int] = []
    setter = None
    for name in model.flowbits_isset:
        setter = _setter_for(name, setters, model.sid, model.app)
        if setter is None:
            raise SynthError(f"flowbit {name!r} is set by no rule given")
        if depth > 3:
            raise SynthError("flowbits chain too deep")
        sp = plan(setter, setters, ident, depth + 1)
        pre += sp.messages
        related += [setter.sid] + sp.related
    own = _messages(model, ident)
    if pre and model.app == "http":
        # one transaction when the setter sent the request and this rule checks the response;
        # a to_client setter's response carries its own bytes and stays (two transactions)
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
    return _Plan(model, pre + own, related)


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
) -> SynthResult:
    """Write one session per supported model into `pcap_path`.

    `ip_version` 6 puts every session on IPv6 addresses; with 4 only rules that name IPv6
    (`RuleModel.ipv6`) get IPv6 sessions. An `icmp` rule with `itype` stays on IPv4 (`icmpv4_only`).

    `starts_ns[i]`, if given, is when the session(s) of models[i] are due; a session starts then,
    or right after the one before it when that one is still running (the pcap stays in time order).
    Without it the sessions follow each other SESSION_GAP_NS apart from `t0_ns`."""
    setters: dict[str, list[RuleModel]] = {}
    for m in all_models if all_models is not None else models:
        if m.status == "supported" or (m.noalert and len(m.reasons) == 1):
            for name in m.flowbits_set:
                setters.setdefault(name, []).append(m)
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
            try:
                with _time_limit(RULE_TIME_LIMIT_S):
                    pl = plan(model, setters, i + 1)
                cport, sport = session_ports(model, i)
                cside, sside = session_sides(model)
            except (SynthError, LayoutError, RegexUnsupported, ValueError) as exc:
                res.failed[model.sid] = str(exc)
                continue
            v6 = (ip_version == 6 or model.ipv6) and not icmpv4_only(model)
            client, server = addrs.take(cside, v6), addrs.take(sside, v6)
            if starts_ns is not None:
                t = max(t if res.sessions else 0, starts_ns[i])
            for k in range(model.events):
                s = Session(
                    model.sid,
                    pl.related,
                    model.proto,
                    client,
                    cport + k if model.events > 1 else cport,
                    server,
                    sport,
                    app=model.app or model.proto,
                )
                em = _Emitter(w, t)
                s.start_ns = t
                if model.proto == "udp":
                    _udp_session(em, s, pl.messages)
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
                    _tcp_session(em, s, pl.messages, seed=i + 1)
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
