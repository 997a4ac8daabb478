"""Sessions a real peer accepts: every synthesized TCP/UDP session replayed live, and judged by
the parser of its application on the bytes each side actually received (docs/ids-coverage.md,
"Real peers").

`check_peers` rebuilds the plain session of each chosen rule (the messages `synthesize` writes
for it, the server's answer included), sends them through the namespace lab of live host
labelling (`testbed.ids.hostlabel.label_live`: a raw client, a Linux router and a Linux host
whose server application reads the client's bytes and sends the dialogue's answers), and hands
what the server application read and what the client received to a real parser:

- HTTP: the server side is the standard library's request parser (`appview.read_requests`, the
  parser of `http.server`): every request must parse, an HTTP/1.1 request needs one `Host`,
  every header line is a field (a token, then the colon: RFC 9112 5.1); the
  client side is `http.client.HTTPResponse` reading the responses one after the other (status
  line, headers, a body of Content-Length bytes or de-chunked), nothing left over;
- TLS: the records walked (type, version, length; handshake messages inside, whole), the
  ClientHello's extensions and its SNI, every certificate of the Certificate message loaded by
  `cryptography.x509.load_der_x509_certificate`; then OpenSSL (`ssl` over memory BIOs) as a
  server must read the client's bytes and answer, and as a TLS 1.2 client that has sent its own
  hello must accept the server's flight. A small walker rather than Scapy's TLS layer for the
  lengths and the SNI: Scapy dissects what it cannot read as `Raw` and goes on, so a length that
  lies would pass;
- DNS: every message parsed by Scapy's `DNS` with nothing left over (TCP: the 2-byte framing);
- FTP, SMTP: the client stream cut into commands as `smtpd` reads them (`appview`), none cut
  short; the server's replies are lines of a 3-digit code and a space or a hyphen;
  POP3, IMAP: CRLF command lines with a known verb (IMAP: after a tag); replies `+OK`/`-ERR`
  (POP3; a message after RETR/TOP up to its `.` line), tagged or untagged lines (IMAP, literals
  `{n}` skipped);
- SIP: a start line, header fields, the mandatory Via/From/To/Call-ID/CSeq (RFC 3261 8.1.1),
  a body of Content-Length bytes (mandatory over TCP);
- any other application: the bytes arrived whole, both ways.

Beyond "it parses", the rule's intent: each sticky buffer of the rule that a parser above yields
(the method, URI, Host, a header, the status, a body, the SNI, a certificate's subject, the DNS
name...) is built from the parsed message as Suricata presents it, and must satisfy the rule's
matches on it (`idsrules.layout.verify`). A session is `ok`, or a reason naming what its peer
rejected (`http client: Content-Length 14 but 20 body bytes`).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import http.client
import io
import random
import re
import ssl
import struct
import tempfile
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from scapy.layers.dns import DNS
from scapy.packet import Padding, Raw

from idsrules.dialogue import IMAP_VERBS, SMTP_VERBS
from idsrules.evasion.appview import HttpRequest, TooLarge, command_items, read_requests, verb_arg
from idsrules.evasion.model import WirePlan, plain_plan
from idsrules.layout import LayoutError, verify
from idsrules.regex_example import RegexUnsupported
from idsrules.semantics import RESPONSE_BUFFERS, Match, RuleModel
from idsrules.synth import (
    EITHER_SIDE_HEADERS,
    SynthError,
    flowbit_setters,
    normalized_uri,
    plan,
    session_ports,
)

from .hostlabel import MAX_ITEMS, MTU, HostOutcome, label_live

UDP_MAX = MTU - 28  # a datagram the lab sends unfragmented (IPv4 and UDP headers)
POP3_VERBS = {
    "USER",
    "PASS",
    "APOP",
    "STAT",
    "LIST",
    "RETR",
    "DELE",
    "NOOP",
    "RSET",
    "QUIT",
    "TOP",
    "UIDL",
    "CAPA",
    "STLS",
    "AUTH",
}
# buffers that are the request's when the rule looks to the server, else the response's
EITHER_SIDE = EITHER_SIDE_HEADERS | {"file.data"}
HEADER_BUFFERS = {
    "http.user_agent": "user-agent",
    "http.referer": "referer",
    "http.content_type": "content-type",
    "http.accept": "accept",
    "http.accept_enc": "accept-encoding",
    "http.accept_lang": "accept-language",
    "http.connection": "connection",
    "http.content_len": "content-length",
    "http.server": "server",
    "http.location": "location",
}
SINGLE_HEADERS = ("host", "content-length", "content-type")  # at most once in a message
_FIELD = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:")
_CODED = re.compile(rb"[1-5][0-9][0-9][ -]")
_IMAP_LITERAL = re.compile(rb"\{(\d{1,9})\}\r\n$")
_IMAP_TAG = re.compile(rb"[A-Za-z0-9.]{1,12} ")
MAX_SHOWN = 60  # characters of a buffer quoted in a reason


@dataclass
class PeerSession:
    """One replayed session and its verdict: `ok`, or the peer's reason."""

    sid: int
    file: str
    app: str
    proto: str
    sport: int
    verdict: str
    host: str = ""  # what the live host said (hostlabel's detail)

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


@dataclass
class PeerReport:
    """The verdicts, counts per application and per rule file, the rules not replayed."""

    sessions: list[PeerSession] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)

    def failures(self) -> list[PeerSession]:
        return [s for s in self.sessions if not s.ok]

    def counts(self, key: str) -> dict[str, dict[str, int]]:
        """{app or file: {"accepted": n, "rejected": m}} (`key`: "app" or "file")."""
        out: dict[str, Counter] = defaultdict(Counter)
        for s in self.sessions:
            out[getattr(s, key)]["accepted" if s.ok else "rejected"] += 1
        return {
            k: {"accepted": c["accepted"], "rejected": c["rejected"]}
            for k, c in sorted(out.items())
        }

    def as_dict(self) -> dict:
        return {
            "sessions": len(self.sessions),
            "accepted": sum(s.ok for s in self.sessions),
            "per_app": self.counts("app"),
            "per_file": self.counts("file"),
            "failures": [asdict(s) for s in self.failures()],
            "skipped": {str(k): v for k, v in sorted(self.skipped.items())},
        }

    def markdown(self) -> list[str]:
        """The report's section in coverage.md."""
        doc = self.as_dict()
        lines = [
            "## Real peers",
            "",
            f"{doc['accepted']} of {doc['sessions']} sessions replayed live were accepted by "
            "their application's parser (HTTP server and client, TLS, DNS, SIP, FTP, SMTP, "
            f"POP3, IMAP); {len(self.skipped)} rules not replayed.",
            "",
            "| application | accepted | rejected |",
            "|---|---:|---:|",
        ]
        lines += [f"| {k} | {v['accepted']} | {v['rejected']} |" for k, v in doc["per_app"].items()]
        lines += ["", "| rule file | accepted | rejected |", "|---|---:|---:|"]
        names = [Path(k).name for k in doc["per_file"]]
        if len(set(names)) < len(names):  # `rules.rules` of every golden case: their folders too
            names = [f"{Path(k).parent.name}/{Path(k).name}" for k in doc["per_file"]]
        lines += [
            f"| {n} | {v['accepted']} | {v['rejected']} |"
            for n, v in zip(names, doc["per_file"].values())
        ]
        if self.failures():
            lines += ["", "| sid | application | what the peer rejected |", "|---:|---|---|"]
            lines += [
                f"| {s.sid} | {s.app} | {s.verdict.replace('|', '&#124;')} |"
                for s in self.failures()[:200]
            ]
        return lines + [""]


@dataclass(frozen=True)
class PeerItem:
    """One session to replay: the rule, its dialogue as a plan, the server port, its file."""

    model: RuleModel
    plan: WirePlan
    sport: int
    file: str


def peer_items(
    models: list[RuleModel], sids: set[int] | None = None
) -> tuple[list[PeerItem], dict[int, str]]:
    """The plain session of every supported TCP/UDP rule (of `sids`, default all), made as
    `synthesize` makes it (the same position, the same messages, the answers kept); the reasons
    of the rules that have none."""
    setters = flowbit_setters(models)
    items: list[PeerItem] = []
    skipped: dict[int, str] = {}
    for i, model in enumerate(models):
        if (sids is not None and model.sid not in sids) or not model.supported:
            continue
        if model.proto not in ("tcp", "udp"):
            skipped[model.sid] = f"{model.proto}: no peer application"
            continue
        if model.proto == "tcp" and model.tcp_flags is not None and not model.established:
            skipped[model.sid] = "a packet with flags, no conversation"
            continue
        if model.offline_only:
            skipped[model.sid] = model.offline_only
            continue
        try:
            pl = plan(model, setters, i + 1)
            _cport, sport = session_ports(model, i)
        except (SynthError, LayoutError, RegexUnsupported, ValueError) as exc:
            skipped[model.sid] = f"not synthesized: {exc}"
            continue
        if model.proto == "udp":
            big = [len(d) for _fc, d in pl.messages if len(d) > UDP_MAX]
            if big:
                skipped[model.sid] = f"a datagram of {big[0]} bytes: over the lab's MTU"
                continue
            if not pl.messages or not pl.messages[0][0]:
                # the lab's server application answers datagrams, it does not open a session
                skipped[model.sid] = "a UDP session the server opens: not replayed"
                continue
        session = plain_plan(model.proto, pl.messages, i + 1)
        items.append(PeerItem(model, session, sport, str(model.raw.file or "")))
    return items, skipped


def sample(items: list[PeerItem], per_file: int | None, seed: int) -> list[PeerItem]:
    """At most `per_file` items of each rule file, drawn with `seed` (None: all), in order."""
    if per_file is None:
        return items
    by_file: dict[str, list[int]] = defaultdict(list)
    for k, it in enumerate(items):
        by_file[it.file].append(k)
    rng = random.Random(seed)
    keep: set[int] = set()
    for _f, ks in sorted(by_file.items()):
        keep.update(ks if len(ks) <= per_file else rng.sample(ks, per_file))
    return [it for k, it in enumerate(items) if k in keep]


def replay(items: list[PeerItem], out_dir: Path, **live) -> list[PeerSession]:
    """Send `items` live (IPv4; a lab per MAX_ITEMS sessions, one client port each) and judge
    each; `live`: label_live's keyword options."""
    outcomes: list[HostOutcome] = []
    for k in range(0, len(items), MAX_ITEMS):
        part = items[k : k + MAX_ITEMS]
        where = Path(out_dir) / (f"part{k // MAX_ITEMS}" if len(items) > MAX_ITEMS else "")
        outcomes += label_live([(it.plan, it.sport) for it in part], where, **live).outcomes
    out = []
    for it, oc in zip(items, outcomes):
        out.append(
            PeerSession(
                it.model.sid,
                it.file,
                it.model.app or it.model.proto,
                it.plan.proto,
                it.sport,
                judge(it.model, it.plan, oc),
                oc.detail,
            )
        )
    return out


def check_peers(
    models: list[RuleModel],
    sids: set[int] | None,
    out_dir: Path,
    *,
    sample_per_file: int | None = None,
    seed: int = 1,
    on_places: Callable[[list[str]], None] | None = None,
) -> PeerReport:
    """Replay the sessions of `sids` (None: every rule), or a seeded sample of
    `sample_per_file` per rule file, against real peers (`replay`), in `out_dir`."""
    items, skipped = peer_items(models, sids)
    chosen = sample(items, sample_per_file, seed)
    return PeerReport(replay(chosen, Path(out_dir), on_places=on_places), skipped)


# --- the judge -----------------------------------------------------------------------------------


def judge(model: RuleModel, pl: WirePlan, oc: HostOutcome) -> str:
    """`ok`, or what the peer of `model`'s application rejected in what it received."""
    want_server = b"".join(s.data for s in pl.steps if not s.from_client)
    if pl.proto == "tcp":
        if not oc.reached:
            return f"host: the client's bytes did not arrive whole ({oc.detail})"
        if oc.server_data != want_server:
            return (
                f"client: received {len(oc.server_data)} of the server's {len(want_server)} "
                f"bytes ({oc.detail})"
            )
        client, server = [oc.received], [oc.server_data]
    else:
        wanted_c = [s.data for s in pl.steps if s.from_client]
        wanted_s = [s.data for s in pl.steps if not s.from_client]
        if not oc.reached:
            return f"host: {oc.detail}"
        if not all(w in oc.server_datagrams for w in wanted_s):
            got = len(oc.server_datagrams)
            return f"client: received {got} datagram(s), not the server's {len(wanted_s)}"
        client, server = wanted_c, wanted_s
    try:
        return _judge_app(model, pl.proto, client, server) or "ok"
    except TooLarge as exc:
        return f"{model.app} server: {exc}"
    except ValueError as exc:  # a number past int()'s 4,300 digits, in a parser of the library
        return f"{model.app} peer: {_show(str(exc).encode())}"


def _judge_app(model: RuleModel, proto: str, client: list[bytes], server: list[bytes]) -> str:
    app = model.app or ""
    if app == "http" and proto == "tcp":
        return _judge_http(model, client[0], server[0])
    if app == "tls" and proto == "tcp":
        return _judge_tls(model, client[0], server[0])
    if app == "dns":
        return _judge_dns(model, proto, client, server)
    if app in ("ftp", "smtp") and proto == "tcp":
        return _judge_commands(app, client[0], server[0])
    if app == "sip":
        return _judge_sip(model, proto, client, server)
    if app == "pop3" and proto == "tcp":
        return _judge_pop3(client[0], server[0])
    if app == "imap" and proto == "tcp":
        return _judge_imap(client[0], server[0])
    return ""


def _show(data: bytes) -> str:
    text = repr(data)[2:-1]
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def _intent(model: RuleModel, name: str, side: str, candidates: list[bytes]) -> str:
    """Empty when one of `candidates` (the buffer `name` as a parser gave it) satisfies the rule's
    matches on it; else the reason."""
    matches: list[Match] = model.buffers.get(name, [])
    opts = model.buffer_opts.get(name)
    if not matches and not opts:
        return ""
    if not candidates:
        return f"{side}: no {name} in what it parsed"
    if any(verify(c, matches, opts) for c in candidates):
        return ""
    return f"{side}: {name} {_show(candidates[0])!r} does not hold the rule's matches"


# HTTP


def _request_buffers(req: HttpRequest) -> dict[str, list[bytes]]:
    raw = lambda s: s.encode("latin-1", "replace")  # noqa: E731
    heads = [(n.lower(), raw(v)) for n, v in req.headers]
    line = req.raw_head.split(b"\n", 1)[0].rstrip(b"\r")
    words = line.split()
    # the target as sent: http.server's own `path` has a leading `//` made `/`
    target = words[1] if len(words) >= 2 else raw(req.target)
    out = {
        "http.method": [raw(req.method)],
        "http.uri": [normalized_uri(target), _decoded(normalized_uri(target)), target],
        "http.uri.raw": [target],
        "http.protocol": [raw(req.version)],
        "http.request_line": [line],
        "http.request_body": [req.body],
        "http.cookie": [v for n, v in heads if n == "cookie"],
        "http.host": [h for n, v in heads if n == "host" for h in (v.lower(), _no_port(v))],
        "http.host.raw": [v for n, v in heads if n == "host"],
    }
    out.update(_header_family(heads, req.raw_head))
    # http.start: the request line, then the headers as http.header has them, a final CRLF
    out["http.start"] = [line + b"\r\n" + h + b"\r\n" for h in out["http.header"][:2]]
    return out


def _no_port(host: bytes) -> bytes:
    """A Host value as Suricata's http.host has it: lower case, without its port."""
    return re.sub(rb":\d*$", b"", host.lower())


def _decoded(uri: bytes) -> bytes:
    """`uri` with every %XX decoded, the query too (libhtp's normalised URI decodes both)."""
    return re.sub(rb"%([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), uri)


def _header_family(heads: list[tuple[str, bytes]], raw_head: bytes) -> dict[str, list[bytes]]:
    """The header buffers as Suricata presents them: one header's value, all headers as
    `Name: value` lines (with and without the cookies), the raw block, the names."""
    lines = raw_head.split(b"\r\n")[1:]
    names = [ln.split(b":", 1)[0] for ln in lines if b":" in ln]
    joined = b"".join(n.encode() + b": " + v + b"\r\n" for n, v in heads)
    no_cookie = b"".join(
        n.encode() + b": " + v + b"\r\n" for n, v in heads if n not in ("cookie", "set-cookie")
    )
    proper = b"".join(ln + b"\r\n" for ln in lines if b":" in ln)
    out = {
        "http.header": [proper, joined, no_cookie],
        "http.header.raw": [b"\r\n".join(lines[: max(len(lines) - 2, 0)]) + b"\r\n", proper],
        "http.header_names": [b"\r\n" + b"\r\n".join(names) + b"\r\n\r\n"],
    }
    for buf, name in HEADER_BUFFERS.items():
        out[buf] = [v for n, v in heads if n == name]
    return out


def _bad_field(head: bytes) -> bytes | None:
    """The first header line of a request's or response's head (its first line skipped) that is
    no field: a token name, a colon straight after it (RFC 9112 5.1: a server rejects a space
    before the colon with 400); obs-fold continuation lines are refused too (RFC 9112 5.2)."""
    for line in head.split(b"\r\n")[1:]:
        if line and not _FIELD.match(line):
            return line
    return None


def _twice(heads: list[tuple[str, str]]) -> str:
    seen = Counter(n.lower() for n, _v in heads)
    return next((n for n in SINGLE_HEADERS if seen[n] > 1), "")


class _Stream(io.BytesIO):
    """The received bytes as a file that a response's end does not close (http.client closes
    its file after a body: the next response is read from the same one)."""

    def close(self) -> None:
        pass


class _Sock:
    """What http.client.HTTPResponse reads from: a socket whose file is the received bytes."""

    def __init__(self, f: _Stream) -> None:
        self.f = f

    def makefile(self, mode: str) -> _Stream:
        return self.f


def _responses(data: bytes, methods: list[str]) -> tuple[list[dict], str]:
    """The responses in the client's received bytes as http.client reads them, one per request
    (HEAD: no body), and what it rejected ("" when they parse and nothing is left over)."""
    f = _Stream(data)
    out: list[dict] = []
    for k, method in enumerate(methods):
        if f.tell() == len(data):
            return out, f"http client: no response to request {k + 1} of {len(methods)}"
        at = f.tell()
        resp = http.client.HTTPResponse(_Sock(f), method=method)  # type: ignore[arg-type]
        try:
            resp.begin()
            declared = resp.length
            body = resp.read()
        except http.client.IncompleteRead as exc:
            got = len(exc.partial)
            if exc.expected is None:  # a chunked body cut
                return out, f"http client: a chunked body cut after {got} bytes"
            return out, f"http client: Content-Length {got + exc.expected} but {got} body bytes"
        except OverflowError:
            return out, f"http client: a length beyond any in response {k + 1}"
        except (http.client.HTTPException, ValueError) as exc:
            return out, f"http client: {type(exc).__name__}: {_show(str(exc).encode())}"
        heads = list(resp.msg.items())
        cl = (resp.getheader("content-length") or "0").strip()
        if not (cl.isdigit() and len(cl) <= 12):  # http.client takes a bad one for none
            return (
                out,
                f"http client: bad Content-Length {_show(cl.encode())!r} in response {k + 1}",
            )
        out.append(
            {
                "status": resp.status,
                "reason": resp.reason,
                "version": resp.version,
                "headers": heads,
                "body": body,
                "head": data[at : at + data[at:].find(b"\r\n\r\n") + 4],
            }
        )
        twice = _twice(heads)
        if twice:
            return out, f"http client: {twice} header twice in response {k + 1}"
        bad = _bad_field(out[-1]["head"])
        if bad is not None:
            return (
                out,
                f"http client: a header line that is no field in response {k + 1}: {_show(bad)!r}",
            )
        if resp.status == 101:
            # switching protocols: what follows is the new protocol's (Suricata hands it to
            # file.data), not a body the headers frame
            out[-1]["body"] = body + data[f.tell() :]
            return out, ""
        rest = data[f.tell() :]
        last = k == len(methods) - 1
        if rest and method == "HEAD" and (last or not rest.startswith(b"HTTP/")):
            return out, f"http client: the response to HEAD carries {len(rest)} body bytes"
        if rest and (last or not rest.startswith(b"HTTP/")) and declared is not None:
            return out, (
                f"http client: Content-Length {len(body)} but {len(body) + len(rest)} body bytes"
            )
        if rest and last:
            return out, f"http client: {len(rest)} bytes after the last response"
    return out, ""


def _response_buffers(r: dict) -> dict[str, list[bytes]]:
    raw = lambda s: s.encode("latin-1", "replace")  # noqa: E731
    heads = [(n.lower(), raw(v)) for n, v in r["headers"]]
    line = r["head"].split(b"\r\n", 1)[0]
    out = {
        "http.stat_code": [str(r["status"]).encode()],
        "http.stat_msg": [raw(r["reason"])],
        "http.response_line": [line],
        "http.response_body": [r["body"]],
        "file.data": [r["body"]],
        "http.cookie": [v for n, v in heads if n == "set-cookie"],
    }
    out.update(_header_family(heads, r["head"]))
    return out


def _judge_http(model: RuleModel, received: bytes, server_data: bytes) -> str:
    reqs, problem = read_requests(received)
    if problem:
        return f"http server: {problem} (after {len(reqs)} request(s))"
    if not reqs:
        return "http server: no request"
    for k, req in enumerate(reqs, 1):
        if req.version == "HTTP/1.1" and req.header("host") is None:
            return f"http server: HTTP/1.1 request {k} without Host"
        twice = _twice(list(req.headers))
        if twice:
            return f"http server: {twice} header twice in request {k}"
        bad = _bad_field(req.raw_head)
        if bad is not None:
            return f"http server: a header line that is no field in request {k}: {_show(bad)!r}"
    resps, problem = _responses(server_data, [r.method for r in reqs])
    if problem:
        return problem
    req_bufs = [_request_buffers(r) for r in reqs]
    resp_bufs = [_response_buffers(r) for r in resps]
    for name in model.buffers.keys() | model.buffer_opts.keys():
        if not name.startswith("http.") and name != "file.data":
            continue
        response = name in RESPONSE_BUFFERS or (name in EITHER_SIDE and not model.to_server)
        bufs, side = (resp_bufs, "http client") if response else (req_bufs, "http server")
        cands = [c for b in bufs for c in b.get(name, [])]
        if name not in (req_bufs[0] if not response else (resp_bufs or [{}])[0]) and not cands:
            continue  # a buffer this judge does not build
        why = _intent(model, name, side, cands)
        if why:
            return why
    return ""


# TLS


def _records(data: bytes, side: str) -> tuple[bytes, str]:
    """The handshake bytes of the TLS records in `data` (one side's stream), or the problem."""
    hs = bytearray()
    pos = 0
    while pos < len(data):
        if len(data) - pos < 5:
            return bytes(hs), f"{side}: a record header cut at byte {pos}"
        ctype, major, minor, length = struct.unpack_from("!BBBH", data, pos)
        if ctype not in (20, 21, 22, 23) or major != 3 or minor > 4:
            return bytes(hs), f"{side}: no TLS record at byte {pos} (type {ctype}, {major}.{minor})"
        if length > (1 << 14) + 2048:
            return bytes(hs), f"{side}: a record of {length} bytes (at most 18432)"
        body = data[pos + 5 : pos + 5 + length]
        if len(body) < length:
            return bytes(hs), f"{side}: a record of {length} bytes cut at {len(body)}"
        if ctype == 22:
            hs += body
        pos += 5 + length
    return bytes(hs), ""


def rule_messages(hs: bytes, side: str) -> tuple[list[tuple[int, bytes]], str]:
    out: list[tuple[int, bytes]] = []
    pos = 0
    while pos < len(hs):
        if len(hs) - pos < 4:
            return out, f"{side}: a handshake message header cut"
        mtype, length = hs[pos], int.from_bytes(hs[pos + 1 : pos + 4], "big")
        body = hs[pos + 4 : pos + 4 + length]
        if len(body) < length:
            return out, f"{side}: handshake message {mtype} of {length} bytes cut at {len(body)}"
        out.append((mtype, body))
        pos += 4 + length
    return out, ""


def _vector(data: bytes, pos: int, width: int) -> tuple[bytes, int]:
    if pos + width > len(data):
        raise ValueError(f"a length at byte {pos} cut")
    n = int.from_bytes(data[pos : pos + width], "big")
    if pos + width + n > len(data):
        raise ValueError(f"a vector of {n} bytes at byte {pos} overruns its message")
    return data[pos + width : pos + width + n], pos + width + n


def _client_hello_sni(body: bytes) -> bytes | None:
    """The SNI of a ClientHello body (None: no server_name extension); ValueError when the
    hello does not parse (RFC 8446 4.1.2)."""
    pos = 2 + 32
    _sid, pos = _vector(body, pos, 1)
    suites, pos = _vector(body, pos, 2)
    if not suites or len(suites) % 2:
        raise ValueError(f"cipher suites of {len(suites)} bytes")
    _comp, pos = _vector(body, pos, 1)
    if pos == len(body):
        return None
    exts, end = _vector(body, pos, 2)
    if end != len(body):
        raise ValueError(f"{len(body) - end} bytes after the extensions")
    sni = None
    p = 0
    while p < len(exts):
        if p + 4 > len(exts):
            raise ValueError("an extension header cut")
        etype = int.from_bytes(exts[p : p + 2], "big")
        data, p = _vector(exts, p + 2, 2)
        if etype == 0:
            names, e = _vector(data, 0, 2)
            if e != len(data) or len(names) < 3 or names[0] != 0:
                raise ValueError("a server_name extension without a host name")
            sni, _e = _vector(names, 1, 2)
    return sni


def _dn(name: x509.Name) -> bytes:
    """A Name as Suricata prints it: `C=US, O=Example Ltd, CN=host`, in the certificate's order."""
    parts = []
    for rdn in name.rdns:
        for attr in rdn:
            key = attr.rfc4514_attribute_name
            key = "emailAddress" if key == "1.2.840.113549.1.9.1" else key
            value = attr.value if isinstance(attr.value, str) else attr.value.decode("latin-1")
            parts.append(f"{key}={value}")
    return ", ".join(parts).encode("utf-8", "replace")


@functools.cache
def _tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """OpenSSL as a TLS server (an RSA key and a certificate made here; any version from TLS 1.0)
    and as a TLS 1.2 client that verifies nothing: security level 0, so that a synthesized
    certificate's small key or a rule's old client is no reason to refuse (parsing it is the
    question)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "peer.test")])
    start = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as tmp:
        pem = Path(tmp) / "peer.pem"
        pem.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            + cert.public_bytes(serialization.Encoding.PEM)
        )
        server.load_cert_chain(pem)
    server.set_ciphers("ALL:@SECLEVEL=0")
    server.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED  # a rule's TLS 1.0 client too
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    client.set_ciphers("ALL:@SECLEVEL=0")
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    return server, client


def openssl_refuses(data: bytes, server_side: bool) -> str:
    """Why OpenSSL, as the server (`data`: what the client sent) or as a client that has sent
    its own hello (`data`: the server's flight), refuses `data` ("" when it reads it and answers,
    waiting for the peer's next message)."""
    server, client = _tls_contexts()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = (server if server_side else client).wrap_bio(inc, out, server_side=server_side)
    if not server_side:
        with contextlib.suppress(ssl.SSLWantReadError):
            obj.do_handshake()  # its ClientHello, answered by `data`
    inc.write(data)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        return ""
    except ssl.SSLError as exc:
        return str(exc.reason or exc).lower().replace("_", " ")
    return ""


def _judge_tls(model: RuleModel, received: bytes, server_data: bytes) -> str:
    hs, problem = _records(received, "tls server")
    if problem:
        return problem
    msgs, problem = rule_messages(hs, "tls server")
    if problem:
        return problem
    hellos = [b for t, b in msgs if t == 1]
    if not hellos:
        return "tls server: no ClientHello"
    try:
        sni = _client_hello_sni(hellos[0])
    except ValueError as exc:
        return f"tls server: the ClientHello does not parse: {exc}"
    why = _intent(model, "tls.sni", "tls server", [sni] if sni is not None else [])
    if why:
        return why
    refused = openssl_refuses(received, server_side=True)
    if refused:
        return f"tls server: OpenSSL refuses the client's bytes: {refused}"
    if not server_data:
        return ""
    hs, problem = _records(server_data, "tls client")
    if problem:
        return problem
    msgs, problem = rule_messages(hs, "tls client")
    if problem:
        return problem
    certs: list[x509.Certificate] = []
    ders: list[bytes] = []
    for mtype, body in msgs:
        if mtype != 11:
            continue
        try:
            chain, end = _vector(body, 0, 3)
            if end != len(body):
                raise ValueError(f"{len(body) - end} bytes after the certificate list")
            p = 0
            while p < len(chain):
                der, p = _vector(chain, p, 3)
                ders.append(der)
                certs.append(x509.load_der_x509_certificate(der))
        except ValueError as exc:
            return f"tls client: the certificate does not parse: {_show(str(exc).encode())}"
    if not certs and ({"tls.cert_subject", "tls.cert_issuer", "tls.certs"} & model.buffers.keys()):
        return "tls client: no certificate"
    refused = openssl_refuses(server_data, server_side=False)
    if refused:
        return f"tls client: OpenSSL refuses the server's flight: {refused}"
    with warnings.catch_warnings():
        # cryptography warns of a country name that is not 2 letters (`C=`, which a rule may
        # ask for); the client reads it all the same, and so does Suricata
        warnings.simplefilter("ignore", UserWarning)
        subjects = [_dn(c.subject) for c in certs]
        issuers = [_dn(c.issuer) for c in certs]
    for name, cands in (
        ("tls.cert_subject", subjects),
        ("tls.cert_issuer", issuers),
        ("tls.certs", ders),
    ):
        why = _intent(model, name, "tls client", cands)
        if why:
            return why
    return ""


# DNS


def _dns_messages(proto: str, stream: list[bytes], side: str) -> tuple[list[bytes], str]:
    if proto == "udp":
        return stream, ""
    data = b"".join(stream)
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        try:
            msg, pos = _vector(data, pos, 2)
        except ValueError as exc:
            return out, f"{side}: TCP framing: {exc}"
        out.append(msg)
    return out, ""


def _judge_dns(model: RuleModel, proto: str, client: list[bytes], server: list[bytes]) -> str:
    names: list[bytes] = []
    for stream, side in ((client, "dns server"), (server, "dns client")):
        msgs, problem = _dns_messages(proto, stream, side)
        if problem:
            return problem
        for k, raw in enumerate(msgs, 1):
            try:
                msg = DNS(raw)
            except Exception as exc:  # scapy raises what its fields raise  # noqa: BLE001
                return f"{side}: message {k} does not parse: {type(exc).__name__}"
            extra = msg.getlayer(Raw) or msg.getlayer(Padding)
            if extra is not None:
                return f"{side}: message {k}: {len(bytes(extra))} bytes past its records"
            if msg.qdcount != len(msg.qd or []):
                return f"{side}: message {k}: {msg.qdcount} questions announced"
            names += [bytes(q.qname).rstrip(b".") for q in (msg.qd or [])]
    return _intent(model, "dns.query", "dns server", names)


# FTP, SMTP, POP3, IMAP


def _lines(data: bytes) -> tuple[list[bytes], bytes]:
    """CRLF-ended lines (without it) and what no CRLF ends."""
    parts = data.split(b"\r\n")
    return parts[:-1], parts[-1]


def _judge_commands(app: str, received: bytes, server_data: bytes) -> str:
    items, _in_data = command_items(received, app == "smtp")
    for kind, line in items:
        if kind == "tail":
            return f"{app} server: a command without CRLF: {_show(line)!r}"
        if kind == "command" and not verb_arg(line)[0]:
            return f"{app} server: an empty command line"
    if app == "smtp":
        first = next((verb_arg(ln)[0] for k, ln in items if k == "command"), "")
        if first and first.encode() not in SMTP_VERBS:
            return f"smtp server: the first command {first!r} is no SMTP verb"
    lines, tail = _lines(server_data)
    if tail:
        return f"{app} client: a reply without CRLF: {_show(tail)!r}"
    for ln in lines:
        if not _CODED.match(ln) and not (len(ln) == 3 and ln.isdigit()):
            return f"{app} client: a reply line without a 3-digit code: {_show(ln)!r}"
    return ""


def _judge_pop3(received: bytes, server_data: bytes) -> str:
    lines, tail = _lines(received)
    if tail:
        return f"pop3 server: a command without CRLF: {_show(tail)!r}"
    for ln in lines:
        verb = ln.split(b" ", 1)[0].upper().decode("latin-1")
        if verb not in POP3_VERBS:
            return f"pop3 server: unknown command {_show(ln)!r}"
    lines, tail = _lines(server_data)
    if tail:
        return f"pop3 client: a reply without CRLF: {_show(tail)!r}"
    in_message = False
    for ln in lines:
        if in_message:
            in_message = ln != b"."
        elif ln.startswith(b"+OK") and re.match(rb"\+OK \d+ octets", ln):
            in_message = True
        elif not ln.startswith((b"+OK", b"-ERR")):
            return f"pop3 client: a reply that is neither +OK nor -ERR: {_show(ln)!r}"
    if in_message:
        return "pop3 client: a message without its final '.' line"
    return ""


def _judge_imap(received: bytes, server_data: bytes) -> str:
    lines, tail = _lines(received)
    if tail:
        return f"imap server: a command without CRLF: {_show(tail)!r}"
    for ln in lines:
        if not _IMAP_TAG.match(ln):
            return f"imap server: a command without a tag: {_show(ln)!r}"
        verb = ln.split(b" ", 2)[1].upper() if b" " in ln else b""
        if verb not in IMAP_VERBS:
            return f"imap server: unknown command {_show(ln)!r}"
    pos = 0
    while pos < len(server_data):
        end = server_data.find(b"\r\n", pos)
        if end < 0:
            return f"imap client: a reply without CRLF: {_show(server_data[pos:])!r}"
        line = server_data[pos : end + 2]
        if not (line.startswith((b"* ", b"+ ")) or _IMAP_TAG.match(line)):
            return f"imap client: neither a tagged nor an untagged reply: {_show(line)!r}"
        pos = end + 2
        lit = _IMAP_LITERAL.search(line)
        while lit:  # a literal's bytes, then the rest of the response line
            pos += int(lit.group(1))
            end = server_data.find(b"\r\n", pos)
            if end < 0:
                return "imap client: a literal cut short"
            lit = _IMAP_LITERAL.search(server_data[pos : end + 2])
            pos = end + 2
    return ""


# SIP

SIP_MANDATORY = ("via", "from", "to", "call-id", "cseq")  # RFC 3261 8.1.1, 8.2.6
_SIP_REQUEST = re.compile(rb"([A-Za-z]+) (\S+) (SIP/2\.0)$")
_SIP_STATUS = re.compile(rb"(SIP/2\.0) ([1-6]\d\d) (.*)$")


def _sip_messages(proto: str, stream: list[bytes], side: str) -> tuple[list[dict], str]:
    """The SIP messages of one side (UDP: one a datagram; TCP: framed by Content-Length, which
    RFC 3261 18.3 makes mandatory there), each {"line", "headers", "body"}; or the problem."""
    out: list[dict] = []
    for datagram in stream if proto == "udp" else [b"".join(stream)]:
        rest = datagram
        while rest:
            head, sep, tail = rest.partition(b"\r\n\r\n")
            if not sep:
                return out, f"{side}: a message without the empty line that ends its headers"
            line, *fields = head.split(b"\r\n")
            if not (_SIP_REQUEST.match(line) or _SIP_STATUS.match(line)):
                return out, f"{side}: no SIP start line: {_show(line)!r}"
            bad = _bad_field(head)
            if bad is not None:
                return out, f"{side}: a header line that is no field: {_show(bad)!r}"
            heads = {
                f.split(b":", 1)[0].strip().lower().decode(): f.split(b":", 1)[1].strip()
                for f in fields
            }
            missing = [h for h in SIP_MANDATORY if h not in heads]
            if missing:
                return out, f"{side}: no {', '.join(missing)} header"
            length = heads.get("content-length", heads.get("l"))
            if length is None and proto == "tcp":
                return out, f"{side}: no Content-Length over TCP"
            if length is not None and not (length.isdigit() and len(length) <= 12):
                return out, f"{side}: bad Content-Length {_show(length)!r}"
            n = int(length) if length is not None else len(tail)
            if n > len(tail) or (proto == "udp" and n != len(tail)):
                return out, f"{side}: Content-Length {n} but {len(tail)} body bytes"
            out.append({"line": line, "body": tail[:n]})
            rest = tail[n:]
    return out, ""


def _judge_sip(model: RuleModel, proto: str, client: list[bytes], server: list[bytes]) -> str:
    requests, problem = _sip_messages(proto, client, "sip server")
    if problem:
        return problem
    responses, problem = _sip_messages(proto, server, "sip client")
    if problem:
        return problem
    bufs: dict[str, list[bytes]] = defaultdict(list)
    for msg in requests + responses:
        req, status = _SIP_REQUEST.match(msg["line"]), _SIP_STATUS.match(msg["line"])
        if req:
            bufs["sip.method"].append(req.group(1))
            bufs["sip.uri"].append(req.group(2))
            bufs["sip.request_line"].append(msg["line"])
            bufs["sip.protocol"].append(req.group(3))
        elif status:
            bufs["sip.stat_code"].append(status.group(2))
            bufs["sip.stat_msg"].append(status.group(3))
            bufs["sip.response_line"].append(msg["line"])
            bufs["sip.protocol"].append(status.group(1))
    for name, cands in sorted(bufs.items()):
        side = (
            "sip server" if name in ("sip.method", "sip.uri", "sip.request_line") else "sip client"
        )
        why = _intent(model, name, side, cands)
        if why:
            return why
    return ""
