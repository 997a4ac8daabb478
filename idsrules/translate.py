"""Snort 3 rules rewritten in Suricata 7 syntax (text only: this module never runs Suricata).

Rules are split by `idsrules.syntax` (the one rule splitter); this module only rewrites
the option list and the header. Each rule keeps its sid, gid and rev, so an alert of the
translated rule maps back to the original.

API:

- ``translate_rule(rule: RawRule) -> Translation``: ``.text`` is the Suricata rule, or None with
  ``.reason`` (a short, groupable reason such as ``"keyword sip_header: no Suricata 7
  equivalent"``) when the rule cannot be translated. ``.notes`` list approximations.
- ``translate_rules(rules) -> list[Translation]``.
- ``translate_rules_file(in_path, out_path, *, app_header=False) -> TranslationReport``: reads
  the Snort 3 file and writes the translated rules (one a line, with a header comment).
  ``report.as_dict()`` is the JSON of ``--report``. Its ``load`` (a `LoadCheck`) is filled in on
  the Suricata side: `testbed.ids.suricata.check_load(rules_path, work_dir)` runs ``suricata -T``
  and records every sid Suricata refuses with Suricata's own error lines;
  `testbed.ids.suricata.translate_file(in_path, out_path, *, check=True, ...)` does both.

Header variables are kept when Suricata's configuration defines them
(`idsrules.variables.CONFIG_VARS`), else replaced by their Snort 3 default.

What is translated (Snort 3 → Suricata 7):

- sticky buffers: ``http_uri`` → ``http.uri``, ``http_raw_uri`` → ``http.uri.raw``,
  ``http_header`` → ``http.header``, ``http_raw_header`` → ``http.header.raw``,
  ``http_client_body`` → ``http.request_body``, ``http_cookie`` → ``http.cookie``,
  ``http_method``, ``http_stat_code``, ``http_stat_msg``, ``http_user_agent``, ``http_host``,
  ``http_raw_host``, ``http_version`` → ``http.protocol``, ``http_raw_request`` →
  ``http.request_line``, ``http_raw_status`` → ``http.response_line``, ``file_data`` →
  ``file.data``, ``pkt_data`` and ``raw_data`` → ``pkt_data``, ``dce_stub_data`` →
  ``dcerpc.stub_data``, ``base64_data``, ``dnp3_data`` → ``dnp3.data``;
- ``content:"x",offset 2,depth 5,nocase`` → ``content:"x"; offset:2; depth:5; nocase;``
  (``fast_pattern_offset``/``fast_pattern_length`` → ``fast_pattern:O,L``);
- ``bufferlen`` → ``bsize`` (on a buffer) or ``dsize`` (on the packet data); ``a<=>b`` →
  ``a-1<>b+1`` (Snort's inclusive range in Suricata's exclusive form);
- ``service:`` → dropped (kept as ``metadata: service NAME``; with ``app_header=True`` a single
  service Suricata parses becomes the header protocol, ``alert smtp ...``); a Snort 3 service header
  (``alert http (...)``) → the Suricata application-layer protocol (``alert http any any -> any
  any``), or tcp/udp with the service's well-known port when Suricata 7 has no parser for it;
- ``flowbits:set,a&b`` → one ``flowbits`` per bit; ``flowbits:isset,a|b`` kept (Suricata 7
  accepts ``|``);
- ``flags`` 1/2 → C/E; ``tag:session,packets 5`` → ``tag:session,5,packets``; ``dce_iface`` →
  ``dcerpc.iface``;
  ``dce_opnum`` → ``dcerpc.opnum``; ``sip_method``/``sip_stat_code`` → ``sip.method``/
  ``sip.stat_code`` with a content; ``regex`` → ``pcre``; ``rem`` dropped;
- kept as written: ``msg sid rev gid classtype reference metadata priority flow pcre byte_test
  byte_jump byte_extract byte_math isdataat dsize detection_filter itype icode icmp_id icmp_seq
  ttl tos id ip_proto fragbits ipopts sameip ssl_state ssl_version base64_decode stream_size
  asn1 rpc urilen target seq ack window`` ... (``seq``/``ack``/``window`` are Suricata 7 aliases of
  ``tcp.seq``/``tcp.ack``/``tcp.window``);

Untranslatable (the reason names the keyword): ``sip_header``, ``sip_body``, ``js_data``,
``vba_data``, ``file_type``, ``file_id``, ``sd_pattern``, ``so``/``soid`` (shared-object rules),
``cip_*``, ``modbus_*``, ``s7commplus_*``, ``gtp_*``, ``mms_*``, ``iec104_*``, ``ber_*``,
``http_header:field``/``http_uri:path`` sub-fields, ``bufferlen:...,relative``, Snort 3 ``file``
rules, and any keyword not listed above.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ntgcore.errors import NtgError
from ntgcore.files import replacing

from .syntax import Option, Problem, RawRule, read_rules
from .variables import CONFIG_VARS

# ---------------------------------------------------------------------------------------------
# tables

STICKY = {
    "http_uri": "http.uri",
    "http_raw_uri": "http.uri.raw",
    "http_header": "http.header",
    "http_raw_header": "http.header.raw",
    "http_client_body": "http.request_body",
    "http_cookie": "http.cookie",
    "http_raw_cookie": "http.cookie",
    "http_method": "http.method",
    "http_stat_code": "http.stat_code",
    "http_stat_msg": "http.stat_msg",
    "http_user_agent": "http.user_agent",
    "http_host": "http.host",
    "http_raw_host": "http.host.raw",
    "http_version": "http.protocol",
    "http_raw_request": "http.request_line",
    "http_raw_status": "http.response_line",
    "file_data": "file.data",
    "pkt_data": "pkt_data",
    "raw_data": "pkt_data",
    "dce_stub_data": "dcerpc.stub_data",
    "base64_data": "base64_data",
    "dnp3_data": "dnp3.data",
}
# kept exactly as written (Suricata 7 has the keyword with the same syntax)
KEEP = frozenset(
    {
        "msg",
        "sid",
        "rev",
        "gid",
        "classtype",
        "reference",
        "priority",
        "flow",
        "pcre",
        "byte_test",
        "byte_jump",
        "byte_extract",
        "byte_math",
        "isdataat",
        "detection_filter",
        "itype",
        "icode",
        "icmp_id",
        "icmp_seq",
        "ttl",
        "tos",
        "id",
        "ip_proto",
        "fragbits",
        "fragoffset",
        "ipopts",
        "sameip",
        "ssl_state",
        "ssl_version",
        "base64_decode",
        "stream_size",
        "asn1",
        "rpc",
        "urilen",
        "target",
        "replace",
        "dnp3_func",
        "dnp3_ind",
        "dnp3_obj",
        "threshold",
        "seq",
        "ack",
        "window",  # Suricata 7 names them tcp.seq/tcp.ack/tcp.window and keeps these aliases
    }
)
DROP = frozenset({"rem"})
NO_EQUIVALENT = {
    "sip_header": "Suricata 7 has no generic SIP header buffer",
    "sip_body": "Suricata 7 has no SIP body buffer",
    "js_data": "Suricata 7 has no normalized JavaScript buffer",
    "vba_data": "Suricata 7 has no VBA macro buffer",
    "file_type": "Suricata 7 has no file type identification (file_type)",
    "file_id": "Suricata 7 has no file type identification (file_id)",
    "file_meta": "Suricata 7 has no file_meta",
    "sd_pattern": "Suricata 7 has no sensitive-data patterns (sd_pattern)",
    "so": "shared-object (so) rules are compiled Snort code",
    "soid": "shared-object (so) rules are compiled Snort code",
    "http_trailer": "Suricata 7 has no HTTP trailer buffer",
    "http_raw_trailer": "Suricata 7 has no HTTP trailer buffer",
    "http_true_ip": "Suricata 7 has no true-client-IP buffer",
    "http_raw_body": "Suricata 7 has no raw (undechunked) HTTP body buffer",
    "http_param": "Suricata 7 has no HTTP parameter buffer",
    "http_num_headers": "Suricata 7 has no HTTP header count",
    "http_num_trailers": "Suricata 7 has no HTTP trailer count",
    "http_version_match": "Suricata 7 has no HTTP version match",
    "script_data": "Suricata 7 has no script buffer",
    "stream_reassemble": "Suricata 7 cannot switch reassembly from a rule",
    "ber_data": "Suricata 7 has no BER buffer",
    "ber_skip": "Suricata 7 has no BER keywords",
    "ssl_cert": "use tls.* buffers by hand",
}
NO_EQUIVALENT_PREFIXES = (
    "cip_",
    "modbus_",
    "s7commplus_",
    "gtp_",
    "mms_",
    "iec104_",
    "opcua_",
    "dce_smb",
    "sip_",
    "netflow_",
    "wizard_",
)
# Snort 3 service -> (Suricata app-layer protocol or None, transport, well-known port)
SERVICES = {
    "http": ("http", "tcp", "80"),
    "http2": ("http2", "tcp", "80"),
    "ssl": ("tls", "tcp", "443"),
    "smtp": ("smtp", "tcp", "25"),
    "ftp": ("ftp", "tcp", "21"),
    "ftp-data": ("ftp-data", "tcp", "20"),
    "dns": ("dns", "udp", "53"),
    "ssh": ("ssh", "tcp", "22"),
    "netbios-ssn": ("smb", "tcp", "139"),
    "dcerpc": ("dcerpc", "tcp", "135"),
    "imap": ("imap", "tcp", "143"),
    "pop3": (None, "tcp", "110"),
    "telnet": ("telnet", "tcp", "23"),
    "snmp": ("snmp", "udp", "161"),
    "sip": ("sip", "udp", "5060"),
    "irc": (None, "tcp", "6667"),
    "rdp": ("rdp", "tcp", "3389"),
    "kerberos": ("krb5", "udp", "88"),
    "dhcp": ("dhcp", "udp", "67"),
    "tftp": ("tftp", "udp", "69"),
    "nfs": ("nfs", "tcp", "2049"),
    "modbus": ("modbus", "tcp", "502"),
    "dnp3": ("dnp3", "tcp", "20000"),
    "mqtt": ("mqtt", "tcp", "1883"),
    "ntp": ("ntp", "udp", "123"),
    "mysql": (None, "tcp", "3306"),
    "ldap": (None, "tcp", "389"),
    "nntp": (None, "tcp", "119"),
    "sunrpc": (None, "tcp", "111"),
    "netbios-ns": (None, "udp", "137"),
    "netbios-dgm": (None, "udp", "138"),
    "ssdp": (None, "udp", "1900"),
    "wins": (None, "tcp", "42"),
}
SIP_METHOD_NAMES = {
    "invite",
    "cancel",
    "ack",
    "bye",
    "register",
    "options",
    "refer",
    "subscribe",
    "update",
    "join",
    "info",
    "message",
    "notify",
    "benotify",
    "do",
    "qauth",
    "sprack",
    "publish",
    "service",
    "unsubscribe",
    "prack",
}
# Snort 3 default variables that the Suricata configuration of testbed.ids.suricata may lack:
# replaced in the header by their Snort 3 default value when the configuration has no such variable
SNORT3_DEFAULT_VARS = {
    "SIP_SERVERS": "$HOME_NET",
    "SIP_PORTS": "[5060,5061,5600]",
    "SMTP_SERVERS": "$HOME_NET",
    "SQL_SERVERS": "$HOME_NET",
    "TELNET_SERVERS": "$HOME_NET",
    "HTTP_SERVERS": "$HOME_NET",
    "DNS_SERVERS": "$HOME_NET",
    "FTP_SERVERS": "$HOME_NET",
    "SSH_SERVERS": "$HOME_NET",
    "HTTP_PORTS": "[80,81,311,383,591,593,901,1220,1414,1741,1830,2301,2381,2809,3037,3128,3702,4343,4848,5250,6988,7000,7001,7144,7145,7510,7777,7779,8000,8008,8014,8028,8080,8085,8088,8090,8118,8123,8180,8181,8243,8280,8300,8800,8888,8899,9000,9060,9080,9090,9091,9443,9999,11371,34443,34444,41080,50002,55555]",
    "FTP_PORTS": "[21,2100,3535]",
    "ORACLE_PORTS": "1024:",
    "SSH_PORTS": "22",
    "FILE_DATA_PORTS": "[$HTTP_PORTS,110,143]",
    "SHELLCODE_PORTS": "!80",
    "GTP_PORTS": "[2123,2152,3386]",
    "AIM_SERVERS": "$EXTERNAL_NET",
}
# keywords that make a rule packet-based; Suricata refuses them together with app-layer buffers
PACKET_KEYWORDS = frozenset(
    {
        "dsize",
        "flags",
        "ttl",
        "id",
        "fragbits",
        "fragoffset",
        "tos",
        "ipopts",
        "seq",
        "ack",
        "window",
        "itype",
        "icode",
        "icmp_id",
        "icmp_seq",
    }
)
APP_BUFFERS = frozenset(v for v in STICKY.values() if v != "pkt_data") | {
    "sip.method",
    "sip.stat_code",
}
CONTENT_MODS_VALUE = {"offset", "depth", "distance", "within"}
CONTENT_MODS_FLAG = {"nocase", "fast_pattern", "rawbytes"}


class Untranslatable(NtgError):
    """`reason` is short and groupable ("keyword X: why"); `detail` says more."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(reason + (f" ({detail})" if detail else ""))


@dataclass
class Translation:
    rule: RawRule
    text: str | None
    reason: str | None = None
    detail: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.text is not None

    @property
    def sid(self) -> int | None:
        return self.rule.sid


# ---------------------------------------------------------------------------------------------
# value helpers

_CONTENT_RE = re.compile(r'\s*(!?)\s*("(?:[^"\\]|\\.)*")\s*(.*)$', re.S)


def split_content(value: str) -> tuple[bool, str, list[tuple[str, str | None]]]:
    """(negated, quoted pattern, [(modifier, value)]) of a Snort 3 ``content`` value."""
    m = _CONTENT_RE.match(value or "")
    if not m:
        raise Untranslatable("malformed content", f"content:{value}")
    neg, quoted, rest = m.groups()
    mods: list[tuple[str, str | None]] = []
    rest = rest.strip()
    if rest:
        if not rest.startswith(","):
            raise Untranslatable("malformed content", f"text after the pattern: {rest[:40]!r}")
        for part in rest[1:].split(","):
            part = part.strip()
            if not part:
                continue
            key, _, val = part.partition(" ")
            mods.append((key.strip().lower(), val.strip() or None))
    return bool(neg), quoted, mods


def pattern_length(quoted: str) -> int:
    """Length in bytes of a content pattern written with ``|hex|`` parts and escapes."""
    body = quoted[1:-1]
    n = 0
    i = 0
    in_hex = False
    while i < len(body):
        ch = body[i]
        if ch == "|":
            in_hex = not in_hex
            i += 1
            continue
        if in_hex:
            j = i
            while j < len(body) and body[j] != "|":
                j += 1
            n += len(re.sub(r"\s+", "", body[i:j])) // 2
            i = j
            continue
        if ch == "\\" and i + 1 < len(body):
            i += 1
        n += len(body[i].encode("utf-8"))
        i += 1
    return n


_RANGE_RE = re.compile(r"^\s*(\d+)\s*(<=>|<>)\s*(\d+)\s*$")
_CMP_RE = re.compile(r"^\s*(<=|>=|<|>|=|!)?\s*(\d+)\s*$")


def size_expr(value: str, keyword: str) -> str:
    """A Snort 3 size comparison (``5``, ``<5``, ``>=5``, ``a<>b``, ``a<=>b``) in Suricata form."""
    m = _RANGE_RE.match(value)
    if m:
        lo, op, hi = int(m.group(1)), m.group(2), int(m.group(3))
        if op == "<=>":
            lo, hi = lo - 1, hi + 1
        if hi - lo < 2:
            raise Untranslatable(f"keyword {keyword}: empty range", value)
        if lo < 0:
            return f"<{hi}"
        return f"{lo}<>{hi}"
    m = _CMP_RE.match(value)
    if not m:
        raise Untranslatable(f"keyword {keyword}: value not understood", value)
    op, n = m.group(1) or "", int(m.group(2))
    if op == "<=":
        return f"<{n + 1}"
    if op == ">=":
        return f">{n - 1}" if n > 0 else ">=0"
    if op == "=":
        return str(n)
    if op == "!":
        raise Untranslatable(f"keyword {keyword}: negated size has no Suricata form", value)
    return f"{op}{n}"


def _flags(value: str) -> str:
    main, sep, mask = value.partition(",")
    conv = str.maketrans({"1": "C", "2": "E"})
    return main.strip().translate(conv) + (sep + mask.strip().translate(conv) if sep else "")


def _tag(value: str) -> str:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    kind = parts[0].lower()
    count = metric = None
    direction = None
    for p in parts[1:]:
        k, _, v = p.partition(" ")
        k = k.lower()
        if k in ("packets", "seconds", "bytes") and v.strip().isdigit() and count is None:
            count, metric = v.strip(), k
        elif k in ("src", "dst"):
            direction = k
    if kind not in ("session", "host") or (kind == "host" and direction is None):
        raise Untranslatable("keyword tag: form not understood", value)
    if count is None:
        return kind if kind == "session" else f"host,{direction}"
    return (
        f"session,{count},{metric}" if kind == "session" else f"host,{count},{metric},{direction}"
    )


def _quote(s: str) -> str:
    out = []
    for ch in s:
        if ch in '";\\' or not (32 <= ord(ch) < 127):
            out.append(f"|{ord(ch):02X}|")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


# ---------------------------------------------------------------------------------------------
# one rule

_VAR_RE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def _fill_vars(field_: str, known: frozenset[str], notes: list[str]) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name in known:
            return m.group(0)
        if name in SNORT3_DEFAULT_VARS:
            notes.append(f"${name} replaced by the Snort 3 default {SNORT3_DEFAULT_VARS[name]}")
            return SNORT3_DEFAULT_VARS[name]
        raise Untranslatable(f"variable ${name}: not defined in the Suricata configuration")

    return _VAR_RE.sub(sub, field_)


def _header(rule: RawRule, services: list[str], notes: list[str], app_header: bool = False) -> str:
    if not rule.is_service_rule:
        known = CONFIG_VARS
        fields = [
            _fill_vars(f, known, notes) if f and "$" in f else f
            for f in (rule.src, rule.sport, rule.dst, rule.dport)
        ]
        proto = rule.proto
        if app_header and len(services) == 1 and services[0] in SERVICES:
            app, transport, _ = SERVICES[services[0]]
            file_data = any(o.keyword == "file_data" for o in rule.options)
            if (
                app
                and (proto == transport or (app == "dns" and proto in ("tcp", "udp")))
                and not (
                    file_data and app not in ("http", "smtp", "http2", "smb", "nfs", "ftp-data")
                )
            ):
                proto = app
        return " ".join(
            (rule.action, proto, fields[0], fields[1], rule.direction, fields[2], fields[3])  # type: ignore[arg-type]
        )
    proto = rule.proto
    if proto == "file":
        raise Untranslatable(
            "Snort 3 file rule",
            "file rules match files of any service; Suricata has no such header",
        )
    if proto in ("tcp", "udp", "icmp", "ip"):
        return f"{rule.action} {proto} any any -> any any"
    svc = SERVICES.get(proto)
    if svc is None:
        raise Untranslatable(f"service {proto}: unknown to the translator")
    app, transport, port = svc
    if app:
        return f"{rule.action} {app} any any -> any any"
    return f"{rule.action} {transport} any any <> any {port}"


def translate_rule(rule: RawRule, *, app_header: bool = False) -> Translation:
    """The Suricata 7 form of one Snort 3 rule (or the reason there is none).

    By default the header keeps tcp/udp and its ports (Snort 3 evaluates a service rule on the
    service or, before the service is known, on the ports; Suricata's buffers such as ``http.uri``
    already restrict a tcp rule to their protocol). With ``app_header`` a rule with one
    ``service`` that Suricata 7 parses gets that application protocol as its header protocol
    (``alert tcp ... (service:smtp; ...)`` → ``alert smtp ...``), the ports kept: stricter, since
    Suricata must then recognise the protocol (on the Snort 3 community rules it lowered the
    measured coverage from 76.7% to 72.5%).
    """
    notes: list[str] = []
    try:
        text = _translate(rule, notes, app_header)
    except Untranslatable as exc:
        return Translation(rule, None, exc.reason, exc.detail, notes)
    except (
        ValueError,
        IndexError,
    ) as exc:  # a number or list the rule writes in a form we do not read
        return Translation(rule, None, "option value not understood", str(exc), notes)
    return Translation(rule, text, None, "", notes)


def _translate(rule: RawRule, notes: list[str], app_header: bool = False) -> str:
    out: list[Option] = []
    tail: list[Option] = []  # options that need their own sticky buffer: placed last
    services: list[str] = []
    buffer: str | None = None  # current Suricata sticky buffer (None: packet/stream data)
    for opt in rule.options:
        k, v = opt.keyword, opt.value
        if k in STICKY:
            if v is not None:
                raise Untranslatable(
                    f"keyword {k}: sub-field '{v.split()[0]}' has no Suricata buffer", f"{k}:{v}"
                )
            buffer = STICKY[k]
            out.append(Option(buffer))
            if k == "raw_data":
                notes.append("raw_data approximated by pkt_data")
            if k == "http_raw_cookie":
                notes.append("http_raw_cookie approximated by http.cookie")
        elif k == "content":
            neg, quoted, mods = split_content(v or "")
            out.append(Option("content", ("!" if neg else "") + quoted))
            start = len(out)
            fp_off = fp_len = None
            for mk, mv in mods:
                if mk in CONTENT_MODS_VALUE:
                    if mv is None:
                        raise Untranslatable(f"content modifier {mk}: no value", v or "")
                    out.append(Option(mk, mv))
                elif mk in CONTENT_MODS_FLAG:
                    out.append(Option(mk))
                elif mk == "fast_pattern_offset":
                    fp_off = int(mv or 0)
                elif mk == "fast_pattern_length":
                    fp_len = int(mv or 0)
                else:
                    raise Untranslatable(f"content modifier {mk}: not translated", v or "")
            if fp_off is not None or fp_len is not None:
                off = fp_off or 0
                length = fp_len if fp_len is not None else pattern_length(quoted) - off
                chop = Option("fast_pattern", f"{off},{length}")
                mine = out[start:]
                if any(o.keyword == "fast_pattern" for o in mine):
                    out[start:] = [chop if o.keyword == "fast_pattern" else o for o in mine]
                else:
                    out.append(chop)
        elif k == "service":
            services = [s.strip().lower() for s in (v or "").split(",") if s.strip()]
        elif k == "metadata":
            out.append(Option("metadata", v))
        elif k in KEEP:
            out.append(opt)
        elif k in DROP:
            continue
        elif k == "bufferlen":
            val, _, rel = (v or "").partition(",")
            if rel.strip():
                raise Untranslatable(
                    "keyword bufferlen: relative has no Suricata form", f"bufferlen:{v}"
                )
            if buffer in (None, "pkt_data"):
                if rule.has("dsize") or any(o.keyword == "dsize" for o in out):
                    raise Untranslatable(
                        "bufferlen on packet data besides dsize: Suricata allows one dsize"
                    )
                out.append(Option("dsize", size_expr(val, k)))
                notes.append("bufferlen on packet data approximated by dsize")
            else:
                out.append(Option("bsize", size_expr(val, k)))
        elif k == "dsize":
            out.append(Option("dsize", size_expr(v or "", k)))
        elif k == "flowbits":
            out.extend(_flowbits(v))
        elif k == "flags":
            out.append(Option("flags", _flags(v or "")))
        elif k == "tag":
            out.append(Option("tag", _tag(v or "")))
        elif k == "regex":
            out.append(Option("pcre", v))
            notes.append("regex (hyperscan) written as pcre")
        elif k == "dce_iface":
            out.append(Option("dcerpc.iface", _dce_iface(v or "")))
        elif k == "dce_opnum":
            out.append(Option("dcerpc.opnum", (v or "").strip().strip('"').replace(" ", "")))
        elif k == "sip_method":
            tail += _sip_method(v or "")
        elif k == "sip_stat_code":
            tail += _sip_stat_code(v or "")
        elif k in NO_EQUIVALENT:
            raise Untranslatable(f"keyword {k}: {NO_EQUIVALENT[k]}")
        elif k.startswith(NO_EQUIVALENT_PREFIXES):
            raise Untranslatable(f"keyword {k}: no Suricata 7 equivalent")
        else:
            raise Untranslatable(f"keyword {k}: unknown to the translator")
    used = {o.keyword for o in out + tail}
    packet = sorted(used & PACKET_KEYWORDS)
    app = sorted(used & APP_BUFFERS)
    if packet and app:
        raise Untranslatable(
            "packet-header match combined with an application-layer buffer",
            f"{', '.join(packet)} with {', '.join(app)}; Suricata refuses the mix",
        )
    header = _header(rule, services, notes, app_header)
    if (
        rule.is_service_rule
        and rule.proto not in ("tcp", "udp", "icmp", "ip")
        and rule.proto not in services
    ):
        services.insert(0, rule.proto)
    if services:
        meta = ", ".join(f"service {s}" for s in services)
        for i, o in enumerate(out):
            if o.keyword == "metadata":
                out[i] = Option("metadata", f"{o.value}, {meta}" if o.value else meta)
                break
        else:
            out.append(Option("metadata", meta))
    if tail:
        # they switch the sticky buffer, so they go after every other option (Suricata does not
        # care where msg, sid and the other non-detection options stand)
        out += tail
    return rule.render(options=out, header=header)


def _flowbits(value: str | None) -> list[Option]:
    parts = [p.strip() for p in (value or "").split(",")]
    cmd = parts[0].lower() if parts else ""
    if cmd == "noalert" and len(parts) == 1:
        return [Option("flowbits", "noalert")]
    if cmd not in ("set", "unset", "isset", "isnotset", "toggle") or len(parts) < 2:
        raise Untranslatable("keyword flowbits: form not understood", f"flowbits:{value}")
    if len(parts) > 2:
        raise Untranslatable("keyword flowbits: groups have no Suricata form", f"flowbits:{value}")
    bits = parts[1]
    if "&" in bits:
        if cmd in ("isnotset",):
            # not (a and b) is an OR of isnotset; Suricata has no such form
            raise Untranslatable(
                "keyword flowbits: isnotset of a&b has no Suricata form", f"flowbits:{value}"
            )
        return [Option("flowbits", f"{cmd},{b.strip()}") for b in bits.split("&")]
    if "|" in bits and cmd not in ("isset",):
        raise Untranslatable(
            f"keyword flowbits: {cmd} of a|b has no Suricata form", f"flowbits:{value}"
        )
    return [Option("flowbits", f"{cmd},{bits}")]


def _dce_iface(value: str) -> str:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    uuid = version = None
    any_frag = False
    for p in parts:
        k, _, v = p.partition(" ")
        k = k.lower()
        if k == "uuid":
            uuid = v.strip()
        elif k == "version":
            version = v.replace(" ", "")
        elif k == "any_frag":
            any_frag = True
        elif re.fullmatch(r"[0-9a-fA-F-]{36}", k):
            uuid = k
        elif re.fullmatch(r"[<>=!]?\d+", k):
            version = k
        else:
            raise Untranslatable("keyword dce_iface: form not understood", value)
    if not uuid:
        raise Untranslatable("keyword dce_iface: no uuid", value)
    out = uuid
    if version:
        out += "," + (version if version[0] in "<>=!" else "=" + version)
    if any_frag:
        out += ",any_frag"
    return out


def _sip_method(value: str) -> list[Option]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    if any(n.startswith("!") for n in names):
        raise Untranslatable("keyword sip_method: negation has no simple Suricata form", value)
    if len(names) == 1:
        return [
            Option("sip.method"),
            Option("content", _quote(names[0].upper())),
            Option("bsize", str(len(names[0]))),
        ]
    alt = "|".join(re.escape(n.upper()) for n in names)
    return [Option("sip.method"), Option("pcre", f'"/^(?:{alt})$/"')]


def _sip_stat_code(value: str) -> list[Option]:
    codes = [c.strip() for c in value.split(",") if c.strip()]
    if not codes or not all(c.isdigit() and len(c) in (1, 3) for c in codes):
        raise Untranslatable("keyword sip_stat_code: form not understood", value)
    if len(codes) == 1:
        c = codes[0]
        if len(c) == 3:
            return [Option("sip.stat_code"), Option("content", f'"{c}"'), Option("bsize", "3")]
        return [Option("sip.stat_code"), Option("content", f'"{c}"'), Option("startswith")]
    alt = "|".join(c if len(c) == 3 else c + r"\d\d" for c in codes)
    return [Option("sip.stat_code"), Option("pcre", f'"/^(?:{alt})$/"')]


def translate_rules(rules: list[RawRule], *, app_header: bool = False) -> list[Translation]:
    return [translate_rule(r, app_header=app_header) for r in rules]


# ---------------------------------------------------------------------------------------------
# a whole file


@dataclass
class LoadCheck:
    """What ``suricata -T`` said of a translated file (made by `testbed.ids.suricata.check_load`)."""

    rules_loaded: int | None
    rules_failed: int | None
    failures: dict[int, list[str]]  # sid -> Suricata's own error lines for that rule
    errors: list[str]  # every E: line
    exit_code: int | None
    command: list[str]
    seconds: float = 0.0


@dataclass
class TranslationReport:
    source: str
    output: str
    total: int
    translations: list[Translation]
    problems: list[Problem]
    load: LoadCheck | None = None

    @property
    def translated(self) -> list[Translation]:
        return [t for t in self.translations if t.ok]

    @property
    def untranslatable(self) -> list[Translation]:
        return [t for t in self.translations if not t.ok]

    def reasons(self) -> Counter:
        return Counter(t.reason for t in self.untranslatable)

    @property
    def load_failures(self) -> dict[int, list[str]]:
        return self.load.failures if self.load else {}

    def as_dict(self) -> dict:
        d = {
            "source": self.source,
            "output": self.output,
            "total": self.total,
            "malformed": len(self.problems),
            "translated": len(self.translated),
            "untranslatable": len(self.untranslatable),
            "untranslatable_by_reason": dict(self.reasons().most_common()),
            "untranslatable_rules": [
                {"sid": t.sid, "where": t.rule.where, "reason": t.reason, "detail": t.detail}
                for t in self.untranslatable
            ],
            "approximations": dict(
                Counter(n for t in self.translated for n in t.notes).most_common()
            ),
            "problems": [str(p) for p in self.problems],
        }
        if self.load is not None:
            d["suricata_check"] = {
                "command": self.load.command,
                "exit_code": self.load.exit_code,
                "rules_loaded": self.load.rules_loaded,
                "rules_failed": self.load.rules_failed,
                "seconds": round(self.load.seconds, 2),
                "load_failures": {str(s): e for s, e in sorted(self.load.failures.items())},
            }
        return d


def write_rules(translations: list[Translation], out_path: str | Path, source: str = "") -> None:
    """The translated rules into `out_path`, whole or not at all (`replacing`: a full disk leaves
    no half-written file)."""
    lines = [
        f"# Suricata 7 translation of {source} by idsrules.translate",
        "# untranslatable rules are listed in the report, not here",
    ]
    lines += [t.text for t in translations if t.ok]  # type: ignore[misc]
    with replacing(out_path) as tmp:
        tmp.write_text("\n".join(lines) + "\n")


def translate_rules_file(
    in_path: str | Path, out_path: str | Path, *, app_header: bool = False
) -> TranslationReport:
    """Translate a Snort 3 rule file into `out_path`; the report's `load` is left unset."""
    rules, problems = read_rules(in_path)
    translations = translate_rules(rules, app_header=app_header)
    write_rules(translations, out_path, str(in_path))
    return TranslationReport(
        str(in_path), str(out_path), len(rules) + len(problems), translations, problems
    )


def report_json(report: TranslationReport) -> str:
    return json.dumps(report.as_dict(), indent=2) + "\n"
