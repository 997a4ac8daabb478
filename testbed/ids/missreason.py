"""Why a written session raised no alert of its rule, in Suricata's own words.

A missed rule whose session was written used to get one blanket reason ("session written, the IDS
did not match"). Suricata logs what it parsed on every session: the flow's `app_proto`, and per
transaction an `http`, `tls`, `dns`, `ftp`, `smtp` or `fileinfo` event. `SessionViews.read(eve)`
gathers them per address pair (a rule's session has an address pair of its own); `miss_reason(
model, view)` compares what the rule needs with what Suricata saw and names the first thing the
session lacks ("the IDS parsed no HTTP transaction", "no http.host buffer: the request had no Host
header", "the IDS saw the response status 200, the rule needs 302", "TLS: no certificate
parsed"), or returns None when the events do not tell (then the blanket reason stays).

The events are there when the run's configuration logs them: `MISS_EVE_TYPES` is what the coverage
run asks of our own configuration (measured on the sessions of the shipped ET Open files, three runs
each: Suricata 3.23-3.40 s with alerts only, 3.41-3.56 s with these, about 5 % more); a user's
suricata.yaml logs what it logs, and without these events the blanket reason stays.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote_to_bytes

from idsrules.layout import LayoutError, build_buffer
from idsrules.regex_example import RegexUnsupported
from idsrules.semantics import RuleModel
from ntgcore.packets import short_address

from .suricata import read_eve

MISS_EVE_TYPES: tuple = (
    "alert",
    ("http", {"extended": "yes", "dump-all-headers": "both"}),
    ("tls", {"extended": "yes"}),
    "dns",
    "ftp",
    "smtp",
    ("files", {"force-magic": "no"}),
    "flow",
)
# rule application -> the app_proto Suricata gives a flow of it, and its name in a reason
APP_PROTO = {
    "http": "http",
    "tls": "tls",
    "dns": "dns",
    "ftp": "ftp",
    "smtp": "smtp",
    "sip": "sip",
    "ssh": "ssh",
    "dcerpc": "dcerpc",
    "pop3": "pop3",
    "imap": "imap",
}
APP_EVENTS = ("http", "tls", "dns", "ftp", "smtp", "fileinfo")
RESPONSE_SIDE = {
    "http.stat_code",
    "http.stat_msg",
    "http.response_body",
    "http.response_line",
    "http.server",
    "http.location",
}
# an HTTP buffer filled from one request header, and the eve.json `http` field that logs it
HEADER_FIELDS = {
    "http.host": ("Host", "hostname"),
    "http.user_agent": ("User-Agent", "http_user_agent"),
    "http.referer": ("Referer", "http_refer"),
    "http.content_type": ("Content-Type", "http_content_type"),
}


@dataclass
class SessionView:
    """What Suricata logged on one address pair: the flows' app_proto and the app events."""

    app_protos: set[str] = field(default_factory=set)
    flows: int = 0
    events: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))


class SessionViews(dict):
    """frozenset({client, server}) -> SessionView, from one eve.json."""

    @classmethod
    def read(cls, eve: str | Path | None) -> SessionViews:
        views = cls()
        if eve is None:
            return views
        for ev in read_eve(eve):
            kind = ev.get("event_type")
            if kind != "flow" and kind not in APP_EVENTS:
                continue
            pair = frozenset((short_address(ev.get("src_ip")), short_address(ev.get("dest_ip"))))
            view = views.setdefault(pair, SessionView())
            if kind == "flow":
                view.flows += 1
                if ev.get("app_proto"):
                    view.app_protos.add(str(ev["app_proto"]))
            elif isinstance(ev.get(kind), dict):
                view.events[kind].append(ev[kind])
        return views

    def of(self, pairs: list[frozenset]) -> SessionView | None:
        """The view of a rule's session(s): the first pair Suricata logged anything on."""
        for p in pairs:
            if p in self:
                return self[p]
        return None


def _contents(model: RuleModel, buffer: str) -> list[tuple[bytes, bool]]:
    """(bytes, nocase) of the rule's plain (not negated) contents on `buffer`."""
    return [
        (m.data, m.nocase)
        for m in model.buffers.get(buffer, [])
        if m.kind == "content" and not m.negated and m.data
    ]


def _has(text: str | bytes, data: bytes, nocase: bool) -> bool:
    hay = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return data.lower() in hay.lower() if nocase else data in hay


def _show(data: bytes | str, limit: int = 40) -> str:
    text = data if isinstance(data, str) else data.decode("latin-1")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _lacking(model: RuleModel, buffer: str, seen: list[str]) -> bytes | None:
    """The first content of the rule on `buffer` that none of the `seen` values holds."""
    for data, nocase in _contents(model, buffer):
        if not any(_has(v, data, nocase) for v in seen):
            return data
    return None


def _http_reason(model: RuleModel, txs: list[dict]) -> str | None:
    if not txs:
        return "the IDS parsed no HTTP transaction on the session"
    used = set(model.buffers)
    if used & RESPONSE_SIDE and not any("status" in t for t in txs):
        return "the IDS saw no HTTP response on the session"
    for buf, (header, key) in HEADER_FIELDS.items():
        if buf in used or (buf == "http.host" and "http.host.raw" in used):
            values = [str(t[key]) for t in txs if t.get(key) is not None]
            if not values:
                return f"no {buf} buffer: the request had no {header} header"
            miss = _lacking(model, buf, values)
            if miss is not None:
                return f"the IDS saw {header} {_show(values[0])}, the rule needs {_show(miss)}"
    if "http.header_names" in used and not any(t.get("hostname") for t in txs):
        return "the request had no Host header (an HTTP/1.1 request without it is malformed)"
    if "http.stat_code" in used:
        codes = [str(t["status"]) for t in txs if "status" in t]
        miss = _lacking(model, "http.stat_code", codes)
        if miss is not None:
            return f"the IDS saw the response status {codes[0]}, the rule needs {_show(miss)}"
    if "http.method" in used:
        methods = [str(t["http_method"]) for t in txs if t.get("http_method")]
        miss = _lacking(model, "http.method", methods)
        if miss is not None:
            seen = _show(methods[0]) if methods else "none"
            return f"the IDS saw the method {seen}, the rule needs {_show(miss)}"
    if "http.uri" in used:
        urls = [str(t["url"]) for t in txs if t.get("url") is not None]
        decoded = [unquote_to_bytes(u).decode("latin-1") for u in urls]
        miss = _lacking(model, "http.uri", urls + decoded)
        if miss is not None:
            seen = _show(urls[0]) if urls else "none"
            return (
                f"the IDS parsed the URI {seen}, without the rule's http.uri content {_show(miss)}"
            )
    if "http.protocol" in used:
        protos = [str(t["protocol"]) for t in txs if t.get("protocol")]
        miss = _lacking(model, "http.protocol", protos)
        if miss is not None:
            seen = _show(protos[0]) if protos else "none"
            return f"the IDS saw the version {seen}, the rule needs {_show(miss)}"
    side = "request" if model.to_server else "response"
    key = f"{side}_headers"
    heads: list[list] = [t[key] for t in txs if isinstance(t.get(key), list)]
    if heads and ("http.header" in used or "http.header_names" in used):
        why = _header_reason(model, side, heads)
        if why is not None:
            return why
    t = txs[0]
    return (
        f"the IDS parsed {t.get('http_method', '?')} {_show(str(t.get('url', '?')))}"
        + (f" -> {t['status']}" if "status" in t else " (no response)")
        + f"; the rule's {', '.join(sorted(used - {'pkt'})) or 'stream'} did not match it"
    )


def _header_reason(model: RuleModel, side: str, heads: list[list]) -> str | None:
    """What the logged headers (eve.json `request_headers` / `response_headers`, one list per
    transaction) lack for the rule's http.header and http.header_names contents."""
    texts, names = [], []
    for h in heads:
        pairs = [
            (str(x.get("name", "")), str(x.get("value", ""))) for x in h if isinstance(x, dict)
        ]
        texts.append("".join(f"{n}: {v}\r\n" for n, v in pairs))
        names.append("\r\n" + "".join(f"{n}\r\n" for n, _v in pairs) + "\r\n")
    miss = _lacking(model, "http.header", texts) if "http.header" in model.buffers else None
    if miss is not None:
        return (
            f"the {side} headers the IDS parsed lack the rule's http.header content {_show(miss)}"
        )
    if "http.header_names" in model.buffers:
        miss = _lacking(model, "http.header_names", names)
        if miss is not None:
            return f"the {side} has no header named as the rule's content {_show(miss)}"
        for m in model.buffers["http.header_names"]:
            if m.kind == "content" and m.negated and all(_has(n, m.data, m.nocase) for n in names):
                return f"the {side} has the header {_show(m.data)}, which the rule forbids"
    return None


def _tls_reason(model: RuleModel, txs: list[dict]) -> str | None:
    if not txs:
        return "TLS: the IDS parsed no handshake on the session"
    used = set(model.buffers)
    cert = used & {"tls.cert_subject", "tls.cert_issuer", "tls.certs", "tls.cert_serial"}
    if cert and not any(t.get("subject") or t.get("issuerdn") for t in txs):
        return "TLS: no certificate parsed"
    for buf, key, what in (
        ("tls.sni", "sni", "SNI"),
        ("tls.cert_subject", "subject", "subject"),
        ("tls.cert_issuer", "issuerdn", "issuer"),
    ):
        if buf not in used:
            continue
        values = [str(t[key]) for t in txs if t.get(key)]
        if not values:
            return f"TLS: the handshake the IDS parsed has no {what}"
        miss = _lacking(model, buf, values)
        if miss is not None:
            return f"TLS: the IDS parsed the {what} {_show(values[0])}, without {_show(miss)}"
    return None


def _dns_reason(model: RuleModel, txs: list[dict]) -> str | None:
    names = [str(t["rrname"]) for t in txs if t.get("rrname")]
    if not names:
        return "DNS: the IDS parsed no query name on the session"
    miss = _lacking(model, "dns.query", names)
    if miss is not None:
        return f"DNS: the IDS parsed the query {_show(names[0])}, without {_show(miss)}"
    return None


# Suricata's stream.reassembly.toserver-chunk-size when a configuration does not set it: the raw
# stream of a TCP session is inspected in chunks of about this many bytes
RAW_CHUNK = 2560


def raw_window_reason(model: RuleModel) -> str | None:
    """A TCP rule on the raw stream that needs more data after a match than Suricata inspects
    in one chunk (`isdataat:5000,relative`): the session holds the bytes, the IDS never looks at
    them at once (measured: such rules alert with stream.reassembly.toserver-chunk-size 65535)."""
    if model.proto != "tcp":
        return None
    need = max(
        (m.args[0] for m in model.buffers.get("pkt", []) if m.kind == "isdataat" and not m.negated),
        default=0,
    )
    if need > RAW_CHUNK:
        return (
            f"the rule needs {need:,} bytes of the raw stream after its content (isdataat), more "
            f"than Suricata inspects at once (stream.reassembly.toserver-chunk-size, "
            f"{RAW_CHUNK:,} unless the configuration sets it): the session carries them"
        )
    span = _anchored_span(model)
    if span <= RAW_CHUNK:
        return None
    return (
        f"the rule's matches span {span:,} bytes from the start of the raw stream (a byte_jump "
        f"lands that far, where the bytes it reads say), more than Suricata inspects at once "
        f"({RAW_CHUNK:,}; measured: a landing 2,048 bytes on alerts, 4,096 does not): the "
        "session carries them"
    )


def _anchored_span(model: RuleModel) -> int:
    """How many bytes the rule's raw matches take from the stream start when the first of them
    is pinned there (`content:"|00|"; depth:1;`), 0 when it is not or no layout fits."""
    matches = model.buffers.get("pkt") or []
    first = matches[0] if matches else None
    if first is None or first.kind != "content" or first.negated or first.is_relative:
        return 0
    if first.depth is None and first.offset is None and not first.startswith:
        return 0
    try:
        return len(build_buffer(matches, model.buffer_opts.get("pkt"), fill=b"\0"))
    except (LayoutError, RegexUnsupported, ValueError):
        return 0


def miss_reason(model: RuleModel, view: SessionView | None) -> str | None:
    """What the rule's session lacked, as Suricata saw it; None when its events do not tell."""
    raw = raw_window_reason(model)
    if raw:
        return raw
    if view is None or not (view.flows or view.events):
        return None
    app = model.app or ""
    want = APP_PROTO.get(app)
    if want and view.flows and want not in view.app_protos:
        seen = ", ".join(sorted(view.app_protos)) or "none"
        return f"the IDS did not parse the session as {app.upper()} (app_proto: {seen})"
    if app == "http":
        return _http_reason(model, view.events.get("http", []))
    if app == "tls" and any(b.startswith("tls.") for b in model.buffers):
        return _tls_reason(model, view.events.get("tls", []))
    if app == "dns" and "dns.query" in model.buffers:
        return _dns_reason(model, view.events.get("dns", []))
    if app in ("ftp", "smtp") and not view.events.get(app):
        return f"{app.upper()}: the IDS parsed no command on the session"
    return None
