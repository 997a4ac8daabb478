"""Text-protocol sessions as real client/server dialogues, with a rule's bytes inside.

An IDS recognises FTP, SMTP, POP3, IMAP or SIP by the exchange (a server greeting, client commands
ending in CRLF, numbered or tagged replies), not by the port: a greeting followed by a bare payload
leaves the flow unrecognised and every `alert ftp` / `alert smtp` rule silent. `dialogue(app,
payload, to_server, ...)` writes the exchange and puts the rule's bytes where its flow direction
says, as one line of that side:

- the client logs in or announces itself first (`USER`, `EHLO`, `1 capability`: what Suricata
  recognises the protocol by), then the payload follows as a command, in a segment of its own, so
  that offset/depth, which Suricata applies per packet as well as on the stream, still hold; only
  a pcre anchored with `^` (no `m`), which Suricata anchors at the stream start, makes the payload
  the client's first line (Suricata then knows FTP by its greeting, SMTP not before EHLO);
- mail content that is no SMTP command (and not pinned by offset/depth) goes in a message body
  after `DATA`; server bytes pinned to their start are the greeting, other server bytes get a
  reply code (FTP, SMTP) or travel as a message (POP3 `RETR`, IMAP `FETCH` literal);
- a CRLF ends the payload's line unless the rule's own matches forbid it (checked with the
  layout's `verify`) or `dsize` bounds the packet.

`sip_request` / `sip_response` build SIP messages (RFC 3261 mandatory headers, Content-Length)
from the parts a rule's `sip.*` buffers give; `dns_tcp` frames DNS messages for TCP.
"""

from __future__ import annotations

import re
import struct

from .layout import verify
from .semantics import Match

CRLF = b"\r\n"
TEXT_APPS = ("ftp", "smtp", "pop3", "imap")
SMTP_VERBS = {
    b"HELO",
    b"EHLO",
    b"MAIL",
    b"RCPT",
    b"DATA",
    b"BDAT",
    b"VRFY",
    b"EXPN",
    b"RSET",
    b"NOOP",
    b"QUIT",
    b"AUTH",
    b"STARTTLS",
    b"HELP",
    b"ETRN",
    b"TURN",
    b"ATRN",
    b"XEXCH50",
    b"SAML",
    b"SEND",
    b"SOML",
    b"X-LINK2STATE",
}
IMAP_VERBS = {
    b"CAPABILITY",
    b"NOOP",
    b"LOGOUT",
    b"STARTTLS",
    b"AUTHENTICATE",
    b"LOGIN",
    b"SELECT",
    b"EXAMINE",
    b"CREATE",
    b"DELETE",
    b"RENAME",
    b"SUBSCRIBE",
    b"UNSUBSCRIBE",
    b"LIST",
    b"LSUB",
    b"STATUS",
    b"APPEND",
    b"CHECK",
    b"CLOSE",
    b"EXPUNGE",
    b"SEARCH",
    b"FETCH",
    b"STORE",
    b"COPY",
    b"UID",
    b"PARTIAL",
    b"ID",
    b"NAMESPACE",
    b"IDLE",
    b"GETACL",
    b"SETACL",
}
# "220 (": the FTP greeting Suricata recognises (as it does `USER ` from the client)
GREETING = {
    "ftp": b"220 (NtgFTPd 1.0) ready" + CRLF,
    "smtp": b"220 mail.example.com ESMTP ready" + CRLF,
    "pop3": b"+OK POP3 server ready" + CRLF,
    "imap": b"* OK [CAPABILITY IMAP4rev1] IMAP4 server ready" + CRLF,
}
OK_REPLY = {
    "ftp": b"200 Command okay." + CRLF,
    "smtp": b"250 OK" + CRLF,
    "pop3": b"+OK" + CRLF,
    "imap": b"2 OK completed" + CRLF,
}
BYE = {
    "ftp": [(True, b"QUIT" + CRLF), (False, b"221 Goodbye." + CRLF)],
    "smtp": [(True, b"QUIT" + CRLF), (False, b"221 bye" + CRLF)],
    "pop3": [(True, b"QUIT" + CRLF), (False, b"+OK bye" + CRLF)],
    "imap": [
        (True, b"9 LOGOUT" + CRLF),
        (False, b"* BYE" + CRLF + b"9 OK LOGOUT completed" + CRLF),
    ],
}
_REPLY_CODE = re.compile(rb"^[1-5][0-9][0-9][ -]")
_IMAP_TAG = re.compile(rb"^[A-Za-z0-9.]{1,12} ")
SIP_METHODS = (
    b"INVITE",
    b"ACK",
    b"BYE",
    b"CANCEL",
    b"OPTIONS",
    b"REGISTER",
    b"PRACK",
    b"SUBSCRIBE",
    b"NOTIFY",
    b"PUBLISH",
    b"INFO",
    b"REFER",
    b"MESSAGE",
    b"UPDATE",
)

Messages = list[tuple[bool, bytes]]


def pinned_to_start(matches: list[Match]) -> bool:
    """True when a match must sit at the start of its buffer (offset/depth, or a ^ pcre without m)."""
    for m in matches:
        if m.negated or m.is_relative:
            continue
        if m.kind == "content" and (m.offset is not None or m.depth is not None or m.startswith):
            return True
        if m.kind == "pcre" and m.pattern.startswith("^") and "m" not in m.flags:
            return True
    return False


def anchored_to_stream(matches: list[Match]) -> bool:
    """True for a pcre anchored with ^ (no m): Suricata anchors it at the start of the
    reassembled stream, not of a packet (measured with 7.0.10; offset/depth hold per packet)."""
    return any(
        m.kind == "pcre"
        and not m.negated
        and not m.relative
        and m.pattern.startswith("^")
        and "m" not in m.flags
        for m in matches
    )


_FIELD = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:")  # a header field's name and colon


def line_of(payload: bytes, matches: list[Match], opts: dict | None, dsize) -> bytes:
    """The payload as one protocol line: CRLF added when the rule's matches still hold with it,
    else a bare LF (a pcre `$` with `m` matches before LF only), else nothing."""
    if payload.endswith(b"\n") or dsize is not None:
        return payload
    for end in (CRLF, b"\n"):
        if verify(payload + end, matches, opts):
            return payload + end
    return payload


def _verb(payload: bytes) -> bytes:
    return payload.lstrip().split(b" ", 1)[0].split(b"\r", 1)[0].split(b":", 1)[0].strip().upper()


def dialogue(
    app: str,
    payload: bytes,
    to_server: bool,
    *,
    matches: list[Match] | None = None,
    opts: dict | None = None,
    dsize=None,
) -> Messages:
    """(from_client, bytes) of one `app` session (ftp, smtp, pop3, imap) carrying `payload` from
    the client (`to_server`) or from the server."""
    matches = matches or []
    if app == "imap" and _verb(payload) == b"LOGIN" and len(payload.split()) == 2:
        # LOGIN takes a user and a password: complete the command when the rule allows it
        cand = payload + b" secret"
        if verify(cand + CRLF, matches, opts):
            payload = cand
    line = line_of(payload, matches, opts, dsize)

    def keep(framed: bytes) -> bytes:
        # a reply code, a tag or a message around the payload only when the rule still matches
        return framed if verify(framed, matches, opts) else line

    if to_server and anchored_to_stream(matches):
        # the payload must open the client's stream: the greeting, the payload, goodbye
        return [(False, GREETING[app]), (True, line), (False, OK_REPLY[app])] + BYE[app]
    build = {"ftp": _ftp, "smtp": _smtp, "pop3": _pop3, "imap": _imap}[app]
    return build(line, to_server, pinned_to_start(matches), keep)


GREETING_START = {"ftp": b"220 ", "smtp": b"220 ", "pop3": b"+OK ", "imap": b"* OK "}


def _greeting(app: str, line: bytes, keep) -> bytes:
    """The server's first line, which the rule pins near the stream's start, as a greeting its
    client reads: the reply code or status first (`220 `, `+OK `, `* OK `) where the rule's matches
    still hold with it (an `offset:40` leaves room; `offset:0` does not: the line as it is)."""
    start = GREETING_START[app]
    if app in ("ftp", "smtp") and _REPLY_CODE.match(line):
        return line
    if line.startswith((start.rstrip(), b"-ERR")):
        return line
    return keep(start + line)


def _ftp(line: bytes, to_server: bool, pinned: bool, keep) -> Messages:
    bye = BYE["ftp"]
    login = [(True, b"USER alice" + CRLF), (False, b"331 Password required for alice." + CRLF)]
    if to_server:
        own_login = _verb(line) == b"USER"
        return (
            [(False, GREETING["ftp"])]
            + ([] if own_login else login)
            + [(True, line), (False, OK_REPLY["ftp"])]
            + bye
        )
    if pinned:
        return [(False, _greeting("ftp", line, keep))] + login + bye
    reply = line if _REPLY_CODE.match(line) else keep(b"200 " + line)
    return [(False, GREETING["ftp"]), (True, b"USER alice" + CRLF), (False, reply)] + bye


def _smtp(line: bytes, to_server: bool, pinned: bool, keep) -> Messages:
    greet = [(False, GREETING["smtp"])]
    ehlo = [(True, b"EHLO client.example.com" + CRLF), (False, b"250 mail.example.com" + CRLF)]
    bye = BYE["smtp"]
    if not to_server:
        if pinned:
            return [(False, _greeting("smtp", line, keep))] + ehlo + bye
        reply = line if _REPLY_CODE.match(line) else keep(b"250 " + line)
        return greet + [(True, b"EHLO client.example.com" + CRLF), (False, reply)] + bye
    verb = _verb(line)
    if verb in (b"EHLO", b"HELO"):
        return greet + [(True, line), (False, b"250 OK" + CRLF)] + bye
    if verb in SMTP_VERBS or pinned:
        return greet + ehlo + [(True, line), (False, b"250 OK" + CRLF)] + bye
    # mail content: the payload in the body of a message; a payload with a blank line in it
    # ends the message's headers there (what follows it is the body a decoder reads), its lines
    # before it made header fields
    body = line if line.endswith(b"\n") else line + CRLF
    head, blank, rest = body.partition(CRLF + CRLF)
    fields = b"From: <alice@example.com>" + CRLF + b"To: <bob@example.com>" + CRLF
    fields += b"Subject: note" + CRLF
    own = (
        CRLF.join(ln if _FIELD.match(ln) else b"X-Data: " + ln for ln in head.split(CRLF))
        if blank and head
        else b""
    )
    message = b""
    if own:
        message = keep(fields + own + CRLF + CRLF + rest + b"." + CRLF)
    if message in (b"", line):
        message = keep(fields + CRLF + body + b"." + CRLF)
    if message == line:
        return greet + ehlo + [(True, line), (False, OK_REPLY["smtp"])] + bye
    return (
        greet + ehlo + smtp_envelope() + [(True, message), (False, b"250 OK queued" + CRLF)] + bye
    )


def smtp_envelope() -> Messages:
    """MAIL FROM, RCPT TO and DATA with the server's replies, up to the message itself."""
    return [
        (True, b"MAIL FROM:<alice@example.com>" + CRLF),
        (False, b"250 OK" + CRLF),
        (True, b"RCPT TO:<bob@example.com>" + CRLF),
        (False, b"250 OK" + CRLF),
        (True, b"DATA" + CRLF),
        (False, b"354 Start mail input; end with <CRLF>.<CRLF>" + CRLF),
    ]


def _pop3(line: bytes, to_server: bool, pinned: bool, keep) -> Messages:
    login = [(True, b"USER alice" + CRLF), (False, b"+OK" + CRLF)]
    bye = BYE["pop3"]
    if to_server:
        own_login = _verb(line) == b"USER"
        return (
            [(False, GREETING["pop3"])]
            + ([] if own_login else login)
            + [(True, line), (False, OK_REPLY["pop3"])]
            + bye
        )
    if pinned:
        return [(False, _greeting("pop3", line, keep))] + login + bye
    if line.startswith((b"+OK", b"-ERR")):
        return [(False, GREETING["pop3"]), (True, b"USER alice" + CRLF), (False, line)] + bye
    body = line if line.endswith(b"\n") else line + CRLF
    message = keep(b"+OK %d octets" % len(body) + CRLF + body + b"." + CRLF)
    return (
        [(False, GREETING["pop3"])]
        + login
        + [
            (True, b"PASS secret" + CRLF),
            (False, b"+OK" + CRLF),
            (True, b"RETR 1" + CRLF),
            (False, message),
        ]
        + bye
    )


def _imap(line: bytes, to_server: bool, pinned: bool, keep) -> Messages:
    greet = [(False, GREETING["imap"])]
    capa = [
        (True, b"1 capability" + CRLF),  # Suricata 7 detects IMAP by this exact command
        (False, b"* CAPABILITY IMAP4rev1" + CRLF + b"1 OK CAPABILITY completed" + CRLF),
    ]
    bye = BYE["imap"]
    if to_server:
        tagged = _IMAP_TAG.match(line) and _verb(line.split(b" ", 1)[1]) in IMAP_VERBS
        if not (tagged or pinned):
            line = keep((b"2" if line[:1].isspace() else b"2 ") + line)  # a tagged command
        return greet + capa + [(True, line), (False, OK_REPLY["imap"])] + bye
    if pinned:
        return [(False, _greeting("imap", line, keep))] + capa + bye
    if line.startswith((b"* ", b"+ ")):
        return greet + [(True, b"1 NOOP" + CRLF), (False, line)] + bye
    fetch = keep(
        b"* 1 FETCH (BODY[] {%d}" % len(line)
        + CRLF
        + line
        + b")"
        + CRLF
        + b"3 OK FETCH completed"
        + CRLF
    )
    return (
        greet
        + capa
        + [
            (True, b"2 SELECT INBOX" + CRLF),
            (False, b"2 OK SELECT completed" + CRLF),
            (True, b"3 FETCH 1 BODY[]" + CRLF),
            (False, fetch),
        ]
        + bye
    )


# --- SIP -----------------------------------------------------------------------------------------
def _sip_headers(method: bytes, ident: int, transport: bytes, to_tag: bool) -> list[bytes]:
    return [
        b"Via: SIP/2.0/%s client.example.com:5060;branch=z9hG4bKntg%d" % (transport, ident),
        b"Max-Forwards: 70",
        b"From: <sip:alice@example.com>;tag=ntg%d" % ident,
        b"To: <sip:bob@example.com>" + (b";tag=srv%d" % ident if to_tag else b""),
        b"Call-ID: ntg%d@client.example.com" % ident,
        b"CSeq: 1 %s" % method,
        b"Contact: <sip:alice@client.example.com:5060>",
    ]


def _sip_message(start: bytes, headers: list[bytes], body: bytes) -> bytes:
    if body:
        headers = headers + [b"Content-Type: application/sdp"]
    return (
        start
        + CRLF
        + b"".join(h + CRLF for h in headers)
        + b"Content-Length: %d" % len(body)
        + CRLF
        + CRLF
        + body
    )


def sip_request(
    method: bytes | None,
    uri: bytes | None,
    proto: bytes | None,
    body: bytes = b"",
    *,
    ident: int = 1,
    transport: bytes = b"UDP",
) -> bytes:
    method = method or b"MESSAGE"
    uri = uri or b"sip:bob@example.com"
    return _sip_message(
        method + b" " + uri + b" " + (proto or b"SIP/2.0"),
        _sip_headers(method, ident, transport, False),
        body,
    )


def sip_response(
    code: bytes | None,
    reason: bytes | None,
    proto: bytes | None,
    body: bytes = b"",
    *,
    method: bytes = b"MESSAGE",
    ident: int = 1,
    transport: bytes = b"UDP",
) -> bytes:
    return _sip_message(
        (proto or b"SIP/2.0") + b" " + (code or b"200") + b" " + (reason or b"OK"),
        _sip_headers(method, ident, transport, True),
        body,
    )


def sip_method_of(request_line: bytes) -> bytes | None:
    word = request_line.split(b" ", 1)[0]
    return word if word in SIP_METHODS else None


# --- DNS over TCP --------------------------------------------------------------------------------
def dns_tcp(messages: Messages) -> Messages:
    """DNS messages framed for TCP: each with its two-byte length (RFC 1035 4.2.2)."""
    return [(fc, struct.pack("!H", len(data)) + data) for fc, data in messages]
