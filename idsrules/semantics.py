"""Rule options -> a rule model the synthesizer can turn into traffic.

`analyze(raw) -> RuleModel`; `load_rules(rule_files) -> (models, problems)` reads and analyzes
whole rule files (a repeated sid is a problem, the later rule skipped). A model says which protocol and application, which side is the
client, the ports, and per inspection buffer (Suricata 7 names: ``pkt`` for the raw payload,
``http.uri``, ``http.header``, ``file.data``, ``dns.query``, ``tls.sni`` ...) the ordered list of
content and pcre matches with their positional modifiers. Buffers are understood in the three
syntaxes: Suricata sticky (``http.uri; content:...``), Snort 3 sticky (``http_uri; content:...``,
``content:"x",depth 4``) and legacy modifiers after the content (``content:"x"; http_uri;``).

Every model has `status` "supported" or "unsupported" and `reasons`; keywords we do not know are
listed in `unknown`. A rule that asks for more than MAX_SESSION_BYTES at a position or length
(`offset`, `distance`, `isdataat`, `dsize`, `bsize`, byte_* offsets), or for more than
MAX_SESSIONS sessions (threshold counts) is unsupported with that reason: the synthesis of one
rule stays bounded in memory.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ntgcore.packets import BENCHMARK_NETWORKS, in_benchmark_networks

from .regex_example import RegexUnsupported, split_pcre
from .syntax import Problem, RawRule, read_rules
from .variables import PORT_GROUPS

# --- address and port variables ---------------------------------------------------------------
HOME_NET4 = "198.18.0.0/16"
EXTERNAL_NET4 = "198.19.0.0/16"
HOME_NET6 = "2001:db8::/48"
EXTERNAL_NET6 = "2001:db8:1::/48"
ADDRESS_VARS = {
    "HOME_NET": f"[{HOME_NET4},{HOME_NET6}]",
    "EXTERNAL_NET": "!$HOME_NET",
    **{
        v: "$HOME_NET"
        for v in (
            "HTTP_SERVERS",
            "SMTP_SERVERS",
            "SQL_SERVERS",
            "DNS_SERVERS",
            "TELNET_SERVERS",
            "AIM_SERVERS",
            "DC_SERVERS",
            "DNP3_SERVER",
            "DNP3_CLIENT",
            "MODBUS_CLIENT",
            "MODBUS_SERVER",
            "ENIP_CLIENT",
            "ENIP_SERVER",
            "SIP_SERVERS",
            "FTP_SERVERS",
            "SSH_SERVERS",
            "SNMP_SERVERS",
            "SIP_SERVERS",
        )
    },
}
PORT_VARS = {**PORT_GROUPS, "SIP_PORTS": "[5060,5061,5600]"}
APP_PORTS = {
    "http": 80,
    "tls": 443,
    "ssl": 443,
    "dns": 53,
    "smtp": 25,
    "ftp": 21,
    "ssh": 22,
    "smb": 445,
    "pop3": 110,
    "imap": 143,
    "sip": 5060,
    "telnet": 23,
    "dcerpc": 135,
}
TRANSPORTS = {"tcp", "udp", "icmp", "ip", "tcp-pkt", "tcp-stream", "udp-pkt", "icmpv6", "ipv6"}
MAX_SESSION_BYTES = 1 << 20  # bytes one rule's session may carry (Suricata's stream depth: 1 MiB)
MAX_SESSIONS = 10_000  # sessions one rule may need (the largest ET Open count is 1,000)
MAX_RULE_TRAFFIC = 64 << 20  # bytes all sessions of one rule may carry together
SYNTH_APPS = {
    "http",
    "tls",
    "dns",
    "smtp",
    "ftp",
    "ssh",
    "ssl",
    "pop3",
    "imap",
    "telnet",
    "dcerpc",
    "sip",
}
# a raw rule whose server port can only be one of these speaks that protocol (FTP, SMTP, POP3, IMAP
# over TCP as a dialogue; SIP over UDP or TCP)
PORT_APPS = {21: "ftp", 25: "smtp", 110: "pop3", 143: "imap", 5060: "sip"}
UDP_APPS = {"dns", "sip"}

# --- buffers -----------------------------------------------------------------------------------
# legacy / Snort names -> Suricata 7 names
BUFFER_ALIASES = {
    "http_uri": "http.uri",
    "http_raw_uri": "http.uri.raw",
    "http_header": "http.header",
    "http_raw_header": "http.header.raw",
    "http_cookie": "http.cookie",
    "http_raw_cookie": "http.cookie",
    "http_method": "http.method",
    "http_client_body": "http.request_body",
    "http_stat_code": "http.stat_code",
    "http_stat_msg": "http.stat_msg",
    "http_user_agent": "http.user_agent",
    "http_host": "http.host",
    "http_raw_host": "http.host.raw",
    "http_server_body": "http.response_body",
    "file_data": "file.data",
    "pkt_data": "pkt",
    "raw_data": "pkt",
    "dns_query": "dns.query",
    "tls_sni": "tls.sni",
    "tls_cert_subject": "tls.cert_subject",
    "tls_cert_issuer": "tls.cert_issuer",
    "http_header_names": "http.header_names",
    "http_request_line": "http.request_line",
    "http_response_line": "http.response_line",
    "http_content_type": "http.content_type",
    "http_referer": "http.referer",
    "http_accept": "http.accept",
    "http_protocol": "http.protocol",
    "http_start": "http.start",
    "http_content_len": "http.content_len",
    "http_server": "http.server",
    "http_location": "http.location",
    "http_connection": "http.connection",
    "http_accept_enc": "http.accept_enc",
    "http_accept_lang": "http.accept_lang",
    "http.request_body": "http.request_body",
    "http_version": "http.protocol",
    "http_param": "http.uri",
    "js_data": "file.data",
    "file.data": "file.data",
}
HTTP_HEADER_VALUE_BUFFERS = {
    "http.user_agent": "User-Agent",
    "http.host": "Host",
    "http.host.raw": "Host",
    "http.cookie": "Cookie",
    "http.referer": "Referer",
    "http.content_type": "Content-Type",
    "http.accept": "Accept",
    "http.accept_enc": "Accept-Encoding",
    "http.accept_lang": "Accept-Language",
    "http.connection": "Connection",
    "http.content_len": "Content-Length",
    "http.server": "Server",
    "http.location": "Location",
}
HTTP_BUFFERS = {
    "http.method",
    "http.uri",
    "http.uri.raw",
    "http.header",
    "http.header.raw",
    "http.cookie",
    "http.user_agent",
    "http.host",
    "http.host.raw",
    "http.request_body",
    "http.stat_code",
    "http.stat_msg",
    "http.response_body",
    "http.header_names",
    "http.request_line",
    "http.response_line",
    "http.referer",
    "http.content_type",
    "http.accept",
    "http.accept_enc",
    "http.accept_lang",
    "http.connection",
    "http.protocol",
    "http.content_len",
    "http.server",
    "http.location",
    "http.start",
}
RESPONSE_BUFFERS = {
    "http.stat_code",
    "http.stat_msg",
    "http.response_body",
    "http.server",
    "http.location",
    "http.response_line",
}
SIP_BUFFERS = {
    "sip.method",
    "sip.uri",
    "sip.protocol",
    "sip.stat_code",
    "sip.stat_msg",
    "sip.request_line",
    "sip.response_line",
}
SIP_RESPONSE_BUFFERS = {"sip.stat_code", "sip.stat_msg", "sip.response_line"}
SUPPORTED_BUFFERS = (
    HTTP_BUFFERS
    | {
        "pkt",
        "file.data",
        "dns.query",
        "tls.sni",
        "tls.certs",
        "tls.cert_subject",
        "tls.cert_issuer",
        "ja3.string",
        "dcerpc.stub_data",
    }
    | SIP_BUFFERS
)
KNOWN_UNSYNTH_BUFFERS = {
    "tls.cert_serial",
    "tls.cert_fingerprint",
    "ja3.hash",
    "ja3s.hash",
    "tls.version",
    "ssh.proto",
    "ssh.software",
    "smb.named_pipe",
    "smb.share",
    "http2.header",
    "krb5.cname",
    "dcerpc",
}
PCRE_BUFFER_FLAGS = {
    "U": "http.uri",
    "I": "http.uri.raw",
    "P": "http.request_body",
    "Q": "file.data",
    "H": "http.header",
    "D": "http.header.raw",
    "M": "http.method",
    "C": "http.cookie",
    "K": "http.cookie",
    "S": "http.stat_code",
    "Y": "http.stat_msg",
    "V": "http.user_agent",
    "W": "http.host",
    "Z": "http.host.raw",
}

# keywords that carry no detection condition for us (informational, or accepted as is)
IGNORED = {
    "msg",
    "sid",
    "rev",
    "gid",
    "classtype",
    "reference",
    "metadata",
    "priority",
    "target",
    "fast_pattern",
    "rawbytes",
    "tag",
    "noalert",
    "service",
    "app-layer-protocol",
    "prefilter",
    "nocase",
    "depth",
    "offset",
    "distance",
    "within",
    "startswith",
    "endswith",
    "dotprefix",
    "content",
    "pcre",
    "uricontent",
    "flow",
    "flowbits",
    "threshold",
    "detection_filter",
    "dsize",
    "flags",
    "itype",
    "icode",
    "isdataat",
    "urilen",
    "bsize",
    "bufferlen",
    "xbits",
    "sticky_buffer",
    "byte_test",
    "byte_jump",
    "byte_extract",
    "http_encode",
    "ip_proto",
    "ttl",
    "id",
    "ack",
    "seq",
    "window",
    "fragbits",
    "stream_size",
    "icmp_id",
    "icmp_seq",
    "app-layer-event",
    "ssh_proto",
    "ssh.proto",
    "raw",
    "classification",
    "flowint",
    "pkt_data",
}
# what a rule of these asks for that no session can be made from
_JA3 = (
    "a JA3 hash cannot be inverted: a ClientHello hashes to it only if its JA3 string is known, "
    "and the rule gives the hash alone (a ja3.string rule is synthesized from its string; "
    "`ids-coverage --ja3-strings FILE` takes the JA3 strings you know)"
)
UNSYNTH_WHY = {
    "ja3.hash": _JA3,
    "ja3_hash": _JA3,
    "ja3s.hash": _JA3.replace("JA3", "JA3S").replace("ClientHello", "ServerHello"),
    "tls.cert_fingerprint": "a certificate fingerprint is a SHA-1 of the whole certificate: "
    "no certificate can be made to have a given one",
}
XBIT = "xbits:"  # an xbit's name among the flowbits (a bit of another table)
FLOWINT = "flowint:"  # a flow integer's name among the setters (`synth.flowbit_setters`)
# flowint operations: those that change the variable after the rule matched (they do not gate
# the match), and the conditions that gate it (Suricata 7: the conditions are checked with the
# rule's other matches, the changes made after it matched)
FLOWINT_CHANGES = ("+", "-", "=")
FLOWINT_CONDITIONS = ("isset", "notset", "isnotset", "==", "!=", "<", "<=", ">", ">=")
STREAM_SIDES = ("server", "client", "both", "either")
STREAM_OPS = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
}
# keywords we accept but cannot synthesize: rule unsupported with the keyword as reason
UNSYNTH = {
    "byte_extract",
    "app-layer-event",
    "ssh_proto",
    "ssh.proto",
    "ja3.hash",
    "ja3_hash",
    "tls.cert_serial",
    "fragbits",
    "ip_proto",
    "ttl",
    "id",
    "ack",
    "seq",
    "window",
    "asn1",
    "ssl_state",
    "ssl_version",
    "tls.version",
    "smb.named_pipe",
    "smb.share",
    "dcerpc",
    "dce_iface",
    "dce_opnum",
    "dce_stub_data",
    "krb5.cname",
    "ftpbounce",
    "http2.header",
    "sameip",
    "ipopts",
    "stream_reassemble",
    "tls.fingerprint",
    "tls.store",
    "filestore",
    "filemagic",
    "fileext",
    "filename",
    "file.name",
    "filemd5",
    "lua",
    "luajit",
    "entropy",
    "tls.cert_fingerprint",
    "icmp_id",
    "icmp_seq",
}


@dataclass
class Match:
    # "content" or "pcre" or "byte_test" / "byte_jump" / "isdataat", or "base64": a
    # base64_decode (args: bytes or None, offset, the base64_data matches on what it decodes)
    kind: str
    data: bytes = b""  # content bytes
    pattern: str = ""  # pcre pattern
    flags: str = ""  # pcre flags (without buffer letters)
    negated: bool = False
    nocase: bool = False
    offset: int | None = None
    depth: int | None = None
    distance: int | None = None
    within: int | None = None
    startswith: bool = False
    endswith: bool = False
    relative: bool = False  # pcre R / byte_* relative
    args: tuple = ()

    @property
    def is_relative(self) -> bool:
        return self.distance is not None or self.within is not None or self.relative


@dataclass
class RuleModel:
    raw: RawRule
    proto: str = "tcp"  # transport: tcp, udp, icmp
    app: str | None = None  # http, tls, dns, smtp, ftp, ssh or None
    to_server: bool = True  # the matching data goes client -> server
    src_is_client: bool = True  # the header's source is the client
    ipv6: bool = False  # the rule names IPv6 (icmpv6/ipv6 header, an IPv6 address)
    src_ports: str = "any"
    dst_ports: str = "any"
    src_addr: str = "any"
    dst_addr: str = "any"
    # the address of a side whose spec lists fixed addresses only (`listed_host`), else None
    src_host: str | None = None
    dst_host: str | None = None
    established: bool = True  # needs a handshake (flow:established or app-layer)
    stateless: bool = False
    buffers: dict[str, list[Match]] = field(default_factory=dict)
    buffer_opts: dict[str, dict] = field(default_factory=dict)
    dsize: tuple[int, int] | None = None
    tcp_flags: str | None = None
    itype: int | None = None
    icode: int | None = None
    flowbits_set: list[str] = field(default_factory=list)
    flowbits_isset: list[str] = field(default_factory=list)
    # flowint: (name, operation, operand) each; operand a number or another variable's name
    flowint_changes: list[tuple[str, str, str]] = field(default_factory=list)
    flowint_conditions: list[tuple[str, str, str]] = field(default_factory=list)
    noalert: bool = False
    events: int = 1  # sessions needed (threshold / detection_filter)
    # stream_size: (side, operator, bytes) each; a side's size counts its SYN (sequence space)
    stream_size: list[tuple[str, str, int]] = field(default_factory=list)
    track: str = "by_src"
    threshold_s: int = 0  # the threshold's or detection_filter's seconds (its window)
    status: str = "supported"
    reasons: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)

    @property
    def sid(self) -> int:
        return self.raw.sid or 0

    @property
    def supported(self) -> bool:
        return self.status == "supported"

    @property
    def offline_only(self) -> str:
        """Why the rule's session may go into pcaps only, never on a wire ("" when it may be
        sent): it carries a listed address outside the test ranges."""
        outside = [a for a in (self.src_host, self.dst_host) if a and not in_benchmark_networks(a)]
        if not outside:
            return ""
        nets = ", ".join(str(n) for n in BENCHMARK_NETWORKS)
        return (
            f"offline only: the rule's own address {outside[0]} lies outside the test ranges "
            f"({nets}); its session is written into pcaps, never sent live"
        )

    def unsupported(self, reason: str) -> None:
        self.status = "unsupported"
        if reason not in self.reasons:
            self.reasons.append(reason)


def resolve_ja3_hashes(models: list[RuleModel], known: Mapping[str, bytes]) -> dict[int, bytes]:
    """The rules whose only obstacle is their `ja3.hash` (one content: an MD5 in hex), when that
    hash is the MD5 of a JA3 string in `known` (MD5 hex -> string, `synth.read_ja3_strings`):
    the hash is matched as that string in `ja3.string` instead, so synthesis builds a ClientHello
    of it (Suricata, given the rule as it is, computes the same hash). Returns sid -> the string
    used; the other rules keep their reason."""
    used: dict[int, bytes] = {}
    for m in models:
        matches = m.buffers.get("ja3.hash") or []
        if m.reasons != [_JA3] or len(matches) != 1 or set(m.buffers) - {"ja3.hash", "tls.sni"}:
            continue
        (c,) = matches
        text = known.get(c.data.decode("ascii", "replace").lower())
        if c.kind != "content" or c.negated or text is None:
            continue
        m.buffers["ja3.string"] = [Match("content", data=text)]
        del m.buffers["ja3.hash"]
        m.buffer_opts.pop("ja3.hash", None)
        m.reasons, m.status = [], "supported"
        used[m.sid] = text
    return used


# --- content decoding ----------------------------------------------------------------------------
_HEX_RE = re.compile(r"\|([^|]*)\|")


def decode_content(text: str) -> bytes:
    """Content text (without the quotes) -> bytes: |hex| blocks and \\ escapes."""
    out = bytearray()
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "|":
            end = text.find("|", i + 1)
            if end < 0:
                raise ValueError("unclosed |hex| block")
            hexs = text[i + 1 : end].replace(" ", "").replace("\t", "")
            if len(hexs) % 2:
                raise ValueError(f"odd number of hex digits in |{text[i + 1 : end]}|")
            out += bytes.fromhex(hexs)
            i = end + 1
        elif ch == "\\" and i + 1 < n:
            out += text[i + 1].encode("latin-1", "replace")
            i += 2
        else:
            out += ch.encode("utf-8")
            i += 1
    return bytes(out)


def _int(v: str | None, what: str) -> int:
    if v is None:
        raise ValueError(f"{what} needs a value")
    v = v.strip()
    try:
        n = int(v, 0)
    except ValueError:
        raise ValueError(
            f"{what}:{v} is not a number (variables from byte_extract are not supported)"
        ) from None
    return _bounded(n, what)


def _bounded(n: int, what: str) -> int:
    """`n` when a session can hold it, else ValueError (the rule becomes unsupported)."""
    if abs(n) > MAX_SESSION_BYTES:
        raise ValueError(
            f"{what}:{n} asks for more than the {MAX_SESSION_BYTES:,} bytes a "
            "synthesized session may carry"
        )
    return n


def _split_snort3_content(value: str) -> tuple[str, list[str]]:
    """`"abc",depth 4,nocase` -> ('"abc"', ['depth 4', 'nocase'])."""
    v = value.strip()
    neg = ""
    if v.startswith("!"):
        neg, v = "!", v[1:].strip()
    if v.startswith('"'):
        i = 1
        while i < len(v):
            if v[i] == "\\":
                i += 2
                continue
            if v[i] == '"':
                break
            i += 1
        quoted, rest = v[: i + 1], v[i + 1 :]
    else:
        quoted, _, rest = v.partition(",")
        rest = "," + rest if rest else ""
    mods = [m.strip() for m in rest.split(",") if m.strip()]
    return neg + quoted, mods


def is_snort3(raw: RawRule) -> bool:
    if raw.is_service_rule or raw.has("service"):
        return True
    for v in raw.values("content"):
        if v and not v.rstrip().endswith('"'):
            return True
    return False


# --- ports and addresses ---------------------------------------------------------------------------
def expand_var(spec: str, table: dict[str, str], depth: int = 0) -> str:
    if depth > 8:
        return spec

    def sub(m: re.Match) -> str:
        name = m.group(1)
        return expand_var(table[name], table, depth + 1) if name in table else m.group(0)

    return re.sub(r"\$([A-Za-z_0-9]+)", sub, spec)


def _parse_port_spec(spec: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(included ranges, excluded ranges); `any` is 0..65535."""
    inc: list[tuple[int, int]] = []
    exc: list[tuple[int, int]] = []
    for neg, s in _spec_items(spec):
        if s == "any":
            rng = (0, 65535)
        elif ":" in s:
            lo, _, hi = s.partition(":")
            rng = (int(lo) if lo.strip() else 0, int(hi) if hi.strip() else 65535)
        else:
            p = int(s)
            rng = (p, p)
        (exc if neg else inc).append(rng)
    if not inc:
        inc = [(0, 65535)]
    return inc, exc


def choose_port(spec: str, preferred: list[int]) -> int:
    """A port that `spec` (variables expanded) allows, preferring `preferred`."""
    inc, exc = _parse_port_spec(expand_var(spec, PORT_VARS))

    def ok(p: int) -> bool:
        return any(lo <= p <= hi for lo, hi in inc) and not any(lo <= p <= hi for lo, hi in exc)

    for p in preferred:
        if ok(p):
            return p
    for lo, hi in inc:
        for p in range(max(lo, 1), min(hi, 65535) + 1):
            if ok(p):
                return p
            if p - lo > 70000:
                break
    raise ValueError(f"no port satisfies {spec!r}")


def _spec_items(spec: str) -> list[tuple[bool, str]]:
    """The entries of an address or port spec, lists flattened: (negated, entry) each, a `!`
    before a list negating every entry in it."""
    out: list[tuple[bool, str]] = []

    def walk(s: str, neg: bool) -> None:
        s = s.strip()
        if s.startswith("!"):
            walk(s[1:], not neg)
        elif s.startswith("[") and s.endswith("]"):
            depth, cur = 0, ""
            for ch in s[1:-1]:
                depth += (ch == "[") - (ch == "]")
                if ch == "," and depth == 0:
                    walk(cur, neg)
                    cur = ""
                else:
                    cur += ch
            if cur.strip():
                walk(cur, neg)
        elif s:
            out.append((neg, s))

    walk(spec.replace(" ", ""), False)
    return out


def _network(entry: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(entry, strict=False)
    except ValueError:
        raise ValueError(f"address {entry!r} not understood") from None


def listed_host(spec: str, version: int | None = None) -> str | None:
    """The address a session takes for an address spec that lists fixed addresses only (`[
    79.124.60.0/24,...]`, `192.0.2.7`): the first host of the first listed network (of IP
    `version` when the list has one) that no negated entry excludes. None when the spec allows a
    variable's addresses or any (the test ranges serve it: `address_side`). Such an address may
    lie outside the test ranges: a session on it goes into pcaps only (RuleModel.offline_only)."""
    items = _spec_items(spec)
    if any(not neg and (e == "any" or e.startswith("$")) for neg, e in items):
        return None
    nets = [_network(e) for neg, e in items if not neg]
    excluded = [_network(e) for neg, e in items if neg and not e.startswith("$")]
    if not nets:
        return None
    ordered = [n for n in nets if n.version == version] + [n for n in nets if n.version != version]
    for net in ordered:
        host = net.network_address + (1 if net.num_addresses > 2 else 0)
        for _ in range(64):  # past each excluded block inside the network, a bounded walk
            block = next((x for x in excluded if x.version == net.version and host in x), None)
            if block is None:
                return str(host)
            if int(block.broadcast_address) + 1 > int(net.broadcast_address):
                break
            host = block.broadcast_address + 1
    raise ValueError(f"no address of {spec!r} is left outside its negated entries")


def address_side(spec: str) -> str:
    """'home', 'external' or 'any' for an address spec. A spec of fixed addresses only is the
    side its session's address (`listed_host`) is on: home inside $HOME_NET, else external."""
    sides = set()
    for neg, e in _spec_items(spec):
        if e in ("$EXTERNAL_NET",):
            sides.add("home" if neg else "external")
        elif e.startswith("$"):
            if e[1:] not in ADDRESS_VARS:
                raise ValueError(f"address variable {e} is not defined by the testbed")
            # not a group of the home network's servers ($SMTP_SERVERS...): outside it
            sides.add("external" if neg else "home")
        elif neg:
            continue  # "not these fixed addresses": our test addresses qualify
        elif e == "any":
            sides.add("any")
    if not sides:
        host = listed_host(spec)
        if host is None:
            return "any"
        home = (ipaddress.ip_network(HOME_NET4), ipaddress.ip_network(HOME_NET6))
        addr = ipaddress.ip_address(host)
        return "home" if any(addr.version == n.version and addr in n for n in home) else "external"
    if len(sides) > 1:
        return "any" if "any" in sides else sorted(sides)[0]
    return sides.pop()


def _version(host: str | None) -> int | None:
    return None if host is None else ipaddress.ip_address(host).version


# --- the analysis --------------------------------------------------------------------------------
_FLAG_LETTERS = set("FSRPAUCE0")


def analyze(raw: RawRule) -> RuleModel:
    m = RuleModel(raw)
    m.keywords = sorted(
        {o.keyword for o in raw.options}
        - {"msg", "sid", "rev", "classtype", "metadata", "reference"}
    )
    try:
        _analyze(raw, m)
    except (ValueError, RegexUnsupported) as exc:
        m.unsupported(str(exc))
    return m


def load_rules(rule_files: Sequence[str | Path]) -> tuple[list[RuleModel], list[Problem]]:
    """Every rule of the files, analyzed, in file order; malformed rules and repeated sids are problems."""
    models: list[RuleModel] = []
    problems: list[Problem] = []
    seen: set[int | None] = set()
    for f in rule_files:
        rules, probs = read_rules(f)
        problems += probs
        for r in rules:
            if r.sid in seen:
                problems.append(
                    Problem(r.file, r.line, "duplicate sid; the later rule is skipped", r.sid)
                )
                continue
            seen.add(r.sid)
            models.append(analyze(r))
    return models, problems


def _analyze(raw: RawRule, m: RuleModel) -> None:
    proto = raw.proto
    snort3 = is_snort3(raw)
    service = _service(raw)
    # a service kept in metadata (the Snort 3 -> Suricata translation puts it there) only chooses
    # the application for rules with application buffers: a raw-payload rule stays raw, as
    # Suricata's header tcp/udp rule inspects the stream whatever the service
    meta_service = service if not raw.has("service") else ""
    if meta_service:
        service = ""
    m.ipv6 = proto in ("icmpv6", "ipv6") or any(":" in (a or "") for a in (raw.src, raw.dst))
    if proto in TRANSPORTS:
        m.proto = {
            "tcp-pkt": "tcp",
            "tcp-stream": "tcp",
            "udp-pkt": "udp",
            "icmpv6": "icmp",
            "ipv6": "ip",
        }.get(proto, proto)
        if service in SYNTH_APPS:
            m.app = service
    else:
        m.app = proto
        m.proto = "udp" if proto in UDP_APPS else "tcp"
        if proto not in SYNTH_APPS:
            m.unsupported(f"application protocol {proto!r} is not synthesized")
    if m.app == "ssl":
        m.app = "tls"
    if m.proto == "ip":
        m.proto = "tcp"  # an ip rule sees any transport; TCP carries the payload best

    # header
    if raw.is_service_rule:
        m.src_addr, m.dst_addr, m.src_ports, m.dst_ports = (
            "$EXTERNAL_NET",
            "$HOME_NET",
            "any",
            "any",
        )
    else:
        m.src_addr, m.dst_addr = raw.src or "any", raw.dst or "any"
        m.src_ports, m.dst_ports = raw.sport or "any", raw.dport or "any"
        if raw.direction == "<-":
            m.src_addr, m.dst_addr = m.dst_addr, m.src_addr
            m.src_ports, m.dst_ports = m.dst_ports, m.src_ports
    address_side(m.src_addr)
    address_side(m.dst_addr)
    m.src_host = listed_host(m.src_addr)
    m.dst_host = listed_host(m.dst_addr, _version(m.src_host))
    hosts = [h for h in (m.src_host, m.dst_host) if h]
    if len({_version(h) for h in hosts}) > 1:
        raise ValueError(
            f"the source {m.src_addr!r} and destination {m.dst_addr!r} share no IP version"
        )
    if hosts:
        m.ipv6 = _version(hosts[0]) == 6

    # flow
    flow = (raw.first("flow") or "").replace(" ", "").lower().split(",")
    flow_set = set(f for f in flow if f)
    if "to_client" in flow_set or "from_server" in flow_set:
        m.to_server = False
    if "stateless" in flow_set:
        m.stateless = True
    m.src_is_client = m.to_server
    if m.proto != "tcp" or (m.stateless and raw.has("flags")):
        m.established = m.proto == "tcp" and not raw.has("flags")

    sticky: str | None = None  # current buffer for Snort 3 / Suricata sticky keywords
    last: Match | None = None
    last_buffer = "pkt"
    buffers = m.buffers

    def add(buf: str, match: Match) -> None:
        buffers.setdefault(buf, []).append(match)

    for opt in raw.options:
        kw, val = opt.keyword, opt.value
        if kw in ("content", "uricontent"):
            text, mods = _split_snort3_content(val or "") if snort3 else (val or "", [])
            neg = text.strip().startswith("!")
            # the quotes off, the escapes left to decode_content (`\\PIPE` is `\PIPE`: resolving
            # `\\` first and then `\P` again lost the backslash)
            quoted = text.strip().lstrip("!").strip()
            if len(quoted) >= 2 and quoted[0] == quoted[-1] == '"':
                quoted = quoted[1:-1]
            data = decode_content(quoted)
            last = Match("content", data=data, negated=neg)
            last_buffer = "http.uri" if kw == "uricontent" else (sticky or "pkt")
            add(last_buffer, last)
            for mod in mods:
                name, _, arg = mod.partition(" ")
                _modifier(last, name.strip(), arg.strip() or None)
            continue
        if kw == "pcre":
            try:
                pat, flags, neg = split_pcre(val or "")
            except RegexUnsupported as exc:
                raise ValueError(str(exc)) from None
            buf = sticky or "pkt"
            plain = ""
            for f in flags:
                if f in PCRE_BUFFER_FLAGS:
                    buf = PCRE_BUFFER_FLAGS[f]
                elif f in "ismxR":
                    plain += f
                elif f in "BOGAEx":
                    pass
                else:
                    plain += ""
            last = Match(
                "pcre",
                pattern=pat,
                flags=plain.replace("R", ""),
                negated=neg,
                relative="R" in flags,
            )
            last_buffer = buf
            add(buf, last)
            continue
        if kw in ("nocase", "offset", "depth", "distance", "within", "startswith", "endswith"):
            if last is None or last.kind != "content":
                raise ValueError(f"{kw} without a content before it")
            _modifier(last, kw, val)
            continue
        # buffers: Suricata dotted sticky names
        if kw in SUPPORTED_BUFFERS or kw in KNOWN_UNSYNTH_BUFFERS or kw == "http.uri.raw":
            if kw in KNOWN_UNSYNTH_BUFFERS:
                m.unsupported(UNSYNTH_WHY.get(kw, f"buffer {kw} is not synthesized"))
            sticky = kw
            continue
        if kw == "http_header" and val and snort3:
            field_name = val.replace("field", "").strip().lower()
            sticky = {
                "user-agent": "http.user_agent",
                "host": "http.host",
                "cookie": "http.cookie",
                "referer": "http.referer",
                "content-type": "http.content_type",
            }.get(field_name, "http.header")
            continue
        if kw in BUFFER_ALIASES:
            canon = BUFFER_ALIASES[kw]
            sticky_kw = (
                kw
                in (
                    "file_data",
                    "pkt_data",
                    "raw_data",
                    "dns_query",
                    "tls_sni",
                    "js_data",
                    "tls_cert_subject",
                    "tls_cert_issuer",
                )
                or snort3
                or "." in kw
            )
            if sticky_kw:
                sticky = None if canon == "pkt" else canon
            else:
                # legacy modifier: moves the previous content into this buffer
                if last is None:
                    raise ValueError(f"{kw} without a content before it")
                lst = buffers.get(last_buffer, [])
                if last in lst:
                    lst.remove(last)
                    if not lst:
                        del buffers[last_buffer]
                last_buffer = canon
                add(canon, last)
            continue
        if kw in ("http.header_names",):
            sticky = kw
            continue
        if kw in ("dcerpc.iface", "dcerpc.opnum"):
            _dcerpc_option(m, kw, val or "")
            continue
        if kw == "dsize":
            m.dsize = _range(val or "", "dsize")
            _bounded(m.dsize[0], "dsize")
            continue
        if kw == "urilen":
            lo, hi = _range((val or "").split(",")[0], "urilen")
            m.buffer_opts.setdefault("http.uri", {})["len"] = (_bounded(lo, "urilen"), hi)
            continue
        if kw in ("bsize", "bufferlen"):
            lo, hi = _range((val or "").replace("=", ""), kw)
            m.buffer_opts.setdefault(sticky or "pkt", {})["len"] = (_bounded(lo, kw), hi)
            continue
        if kw == "dotprefix":
            m.buffer_opts.setdefault(sticky or "pkt", {})["dotprefix"] = True
            continue
        if kw == "isdataat":
            v = (val or "").replace(" ", "")
            neg = v.startswith("!")
            parts = v.lstrip("!").split(",")
            n = _int(parts[0], "isdataat")
            rel = "relative" in parts[1:]
            add(
                sticky or last_buffer if rel else (sticky or "pkt"),
                Match("isdataat", negated=neg, relative=rel, args=(n,)),
            )
            continue
        if kw in ("byte_test", "byte_jump"):
            parts = [p.strip() for p in (val or "").split(",")]
            rel = "relative" in parts
            where = parts[3:4] if kw == "byte_test" else parts[1:2]  # the offset argument
            if where and re.fullmatch(r"-?\d+", where[0]):
                _bounded(int(where[0]), f"{kw} offset")
            add(
                sticky or (last_buffer if rel else "pkt"),
                Match(kw, relative=rel, args=tuple(parts)),
            )
            continue
        if kw == "flags":
            m.tcp_flags = (val or "").split(",")[0].strip()
            if not set(m.tcp_flags.strip("!+*")) <= _FLAG_LETTERS | {"1", "2"}:
                raise ValueError(f"flags:{val} not understood")
            continue
        if kw == "itype":
            m.itype = _range(val or "", "itype")[0]
            continue
        if kw == "icode":
            m.icode = _range(val or "", "icode")[0]
            continue
        if kw == "flowbits":
            parts = [p.strip() for p in (val or "").split(",")]
            cmd = parts[0].lower()
            names = re.split(r"[|&]", parts[1]) if len(parts) > 1 else []
            if cmd == "set":
                m.flowbits_set.extend(names)
            elif cmd == "isset":
                if "|" in parts[1]:
                    names = names[:1]
                m.flowbits_isset.extend(names)
            elif cmd == "noalert":
                m.noalert = True
            continue
        if kw == "xbits":
            # set and isset as flowbits in one session (its client and server are the tracked
            # addresses), under names of their own; unset and toggle have no session to shape
            parts = [p.strip() for p in (val or "").split(",")]
            cmd = parts[0].lower()
            if len(parts) < 2 or not parts[1]:
                raise ValueError(f"xbits:{val} names no bit")
            if cmd == "set":
                m.flowbits_set.append(XBIT + parts[1])
            elif cmd == "isset":
                m.flowbits_isset.append(XBIT + parts[1])
            elif cmd == "noalert":
                m.noalert = True
            elif cmd not in ("unset", "toggle", "isnotset"):
                raise ValueError(f"xbits:{val}: no such command")
            continue
        if kw == "flowint":
            parts = [p.strip() for p in (val or "").split(",")]
            if len(parts) < 2 or not parts[0]:
                raise ValueError(f"flowint:{val} is not `name, operation[, value]`")
            name, op, operand = parts[0], parts[1], ",".join(parts[2:])
            if op in FLOWINT_CHANGES and operand:
                m.flowint_changes.append((name, op, operand))
            elif op in FLOWINT_CONDITIONS and (operand or op.isalpha()):
                m.flowint_conditions.append((name, op, operand))
            else:
                raise ValueError(f"flowint:{val}: no such operation")
            continue
        if kw == "noalert":
            m.noalert = True
            continue
        if kw in ("threshold", "detection_filter"):
            args = dict(re.findall(r"(\w+)\s+([\w.]+)", val or ""))
            count = int(args.get("count", "1"))
            kind = args.get("type", "detection_filter" if kw == "detection_filter" else "limit")
            need = count + 1 if kind == "detection_filter" else (1 if kind == "limit" else count)
            if need > MAX_SESSIONS:
                raise ValueError(
                    f"{kw} count {count} needs {need:,} sessions, more than the "
                    f"{MAX_SESSIONS:,} one rule may have"
                )
            m.events = max(m.events, need)
            m.track = args.get("track", "by_src")
            seconds = args.get("seconds", "0")
            m.threshold_s = max(m.threshold_s, int(seconds) if seconds.isdigit() else 0)
            continue
        if kw == "stream_size":
            parts = [x.strip() for x in (val or "").split(",")]
            if (
                len(parts) != 3
                or parts[0] not in STREAM_SIDES
                or parts[1] not in STREAM_OPS
                or not parts[2].isdigit()
            ):
                raise ValueError(
                    f"stream_size:{val} is not `server|client|both|either, <|<=|=|!=|>=|>, N`"
                )
            m.stream_size.append((parts[0], parts[1], _bounded(int(parts[2]), "stream_size")))
            continue
        if kw == "base64_decode":
            nbytes, off, rel = _base64_args(val or "")
            add(
                sticky or (last_buffer if rel else "pkt"),
                Match("base64", relative=rel, args=(nbytes, off, ())),
            )
            continue
        if kw == "base64_data":
            sticky = "base64_data"  # what the last base64_decode decoded: put back below
            continue
        if kw in UNSYNTH:
            m.unsupported(UNSYNTH_WHY.get(kw, f"keyword {kw} is not synthesized"))
            continue
        if kw in IGNORED:
            continue
        m.unknown.append(kw)
        m.unsupported(f"unknown keyword {kw}")

    decoders = [(n, k) for n, ms in buffers.items() for k, x in enumerate(ms) if x.kind == "base64"]
    inner = buffers.pop("base64_data", [])
    if inner and not decoders:
        m.unsupported("base64_data without a base64_decode before it")
    elif decoders:
        # the base64_data matches belong to the (last) decode: they judge what it decodes
        host, at = decoders[-1]
        dec = buffers[host][at]
        buffers[host][at] = replace(dec, args=(dec.args[0], dec.args[1], tuple(inner)))
    if m.noalert and m.status == "supported":
        m.unsupported("noalert: the rule only sets flowbits")
    if m.app is None and meta_service in SYNTH_APPS and any(b != "pkt" for b in buffers):
        m.app = "tls" if meta_service == "ssl" else meta_service
    if (
        m.app == "dcerpc"
        and m.proto == "udp"
        and {"iface", "opnum"} & set(m.buffer_opts.get("dcerpc", {}))
    ):
        # measured with Suricata 7.0.10: a connectionless (UDP) request with the right interface
        # and operation fires neither keyword (its stub data does); only TCP binds are tracked
        m.unsupported(
            "dcerpc.iface/dcerpc.opnum over UDP: Suricata 7 matches them only after a TCP bind"
        )
    if m.app in ("pop3", "imap", "ftp", "telnet", "ssh") and "file.data" in buffers:
        m.app = None  # Suricata 7 has file.data on HTTP and SMTP only: the HTTP body carries it
    if m.app is None:
        # infer the application from the buffers used
        if any(b in HTTP_BUFFERS or b == "file.data" for b in buffers):
            m.app = "http"
        elif "dns.query" in buffers:
            # DNS over TCP when the header says tcp (Suricata parses both on port 53)
            m.app, m.proto = "dns", "tcp" if raw.proto == "tcp" else "udp"
        elif any(b.startswith(("tls.", "ja3.")) for b in buffers):
            m.app = "tls"
        elif any(b in SIP_BUFFERS for b in buffers):
            m.app = "sip"
        elif (
            set(buffers) <= {"pkt"} and m.tcp_flags is None and (m.established or m.proto == "udp")
        ):
            app = _port_app(m.dst_ports if m.src_is_client else m.src_ports)
            if m.proto == "tcp" or app == "sip":
                m.app = app
    if m.app == "http":
        # the direction first: a rule with response buffers and no flow keyword inspects the
        # response, and so does its file.data (the body of that response, never of a POST)
        if (
            any(b in RESPONSE_BUFFERS for b in buffers)
            and m.to_server
            and raw.first("flow") is None
        ):
            m.to_server = False
            m.src_is_client = False
    if m.app == "http" and "http.start" in buffers and not m.to_server:
        m.unsupported(
            "buffer http.start of a response (status line and headers) is not synthesized"
        )
    if m.app == "http" and "file.data" in buffers:
        buffers[("http.response_body" if not m.to_server else "http.request_body")] = buffers.pop(
            "file.data"
        ) + buffers.get("http.response_body" if not m.to_server else "http.request_body", [])
    if (
        m.app == "sip"
        and any(b in SIP_RESPONSE_BUFFERS for b in buffers)
        and raw.first("flow") is None
    ):
        m.to_server = m.src_is_client = False
    if m.app == "sip" and m.proto == "tcp" and any(b in SIP_BUFFERS for b in buffers):
        # measured with Suricata 7.0.10: a SIP request over TCP is not recognised (the flow's
        # protocol detection fails), so no sip.* buffer is filled; over UDP it is
        m.unsupported("sip.* buffers over TCP: Suricata 7 parses SIP over UDP only")
    if m.app is None and any(b != "pkt" for b in buffers):
        m.unsupported(
            f"buffers {sorted(b for b in buffers if b != 'pkt')} without their application"
        )
    if m.tcp_flags and m.proto != "tcp":
        m.unsupported("flags on a non-TCP rule")


def _port_app(spec: str) -> str | None:
    """The protocol of a port spec that allows only its well-known port (21, 25, 110, 143, 5060)."""
    try:
        inc, exc = _parse_port_spec(expand_var(spec, PORT_VARS))
    except ValueError:
        return None
    if len(inc) == 1 and inc[0][0] == inc[0][1] and not exc:
        return PORT_APPS.get(inc[0][0])
    return None


_UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)


def _dcerpc_option(m: RuleModel, kw: str, val: str) -> None:
    """`dcerpc.iface:UUID[,<N|>N|=N|!N][,any_frag]` and `dcerpc.opnum:N|A-B|A,B,...`: a DCE/RPC
    bind to that interface and a request with that operation (in buffer_opts["dcerpc"])."""
    opts = m.buffer_opts.setdefault("dcerpc", {})
    m.app = "dcerpc"
    parts = [p.strip() for p in val.split(",") if p.strip()]
    if kw == "dcerpc.iface":
        if not parts or not _UUID_RE.match(parts[0]):
            raise ValueError(f"dcerpc.iface:{val} needs an interface UUID")
        opts["iface"] = parts[0].lower()
        version = 1
        for p in parts[1:]:
            op, num = p[:1], p[1:]
            if op in "<>=!" and num.isdigit():
                n = int(num)
                version = {"<": max(n - 1, 0), ">": n + 1, "=": n, "!": n + 1}[op]
        opts["version"] = version
    else:
        first = parts[0] if parts else ""
        try:
            opts["opnum"] = int(first.split("-")[0])
        except ValueError:
            raise ValueError(f"dcerpc.opnum:{val} not understood") from None


def services_of(raw: RawRule) -> list[str]:
    """The rule's services: Snort 3 `service:a,b`, or `metadata: ..., service a, service b` (where
    the Snort 3 -> Suricata translation keeps them)."""
    if raw.has("service"):
        return [x.strip().lower() for x in (raw.first("service") or "").split(",") if x.strip()]
    out = []
    for meta in raw.values("metadata"):
        for item in (meta or "").split(","):
            key, _, val = item.strip().partition(" ")
            if key.lower() == "service" and val.strip():
                out.append(val.strip().lower())
    return out


def _service(raw: RawRule) -> str:
    """The one service the synthesis follows: http when the rule lists it (its buffers are HTTP
    ones), else the first one we synthesize, else the first listed."""
    services = services_of(raw)
    if "http" in services:
        return "http"
    for sv in services:
        if sv in SYNTH_APPS:
            return sv
    return services[0] if services else ""


def _base64_args(val: str) -> tuple[int | None, int, bool]:
    """(bytes or None, offset, relative) of `base64_decode:[bytes N][, offset N][, relative]`."""
    nbytes = re.search(r"\bbytes\s+(\d+)", val)
    off = re.search(r"\boffset\s+(\d+)", val)
    return (
        _bounded(int(nbytes.group(1)), "base64_decode bytes") if nbytes else None,
        _bounded(int(off.group(1)), "base64_decode offset") if off else 0,
        bool(re.search(r"\brelative\b", val)),
    )


def _modifier(match: Match, name: str, arg: str | None) -> None:
    if name == "nocase":
        match.nocase = True
    elif name in ("offset", "depth", "distance", "within"):
        setattr(match, name, _int(arg, name))
    elif name == "startswith":
        match.startswith = True
    elif name == "endswith":
        match.endswith = True
    elif name in ("fast_pattern", "rawbytes", "fast_pattern:only"):
        pass
    else:
        raise ValueError(f"content modifier {name} not understood")


def _range(v: str, what: str) -> tuple[int, int]:
    v = v.strip().replace(" ", "")
    try:
        if "<>" in v:
            lo, hi = v.split("<>")
            return int(lo) + 1, int(hi) - 1
        if v.startswith(">="):
            return int(v[2:]), 1 << 30
        if v.startswith("<="):
            return 0, int(v[2:])
        if v.startswith(">"):
            return int(v[1:]) + 1, 1 << 30
        if v.startswith("<"):
            return 0, int(v[1:]) - 1
        if v.startswith("!"):
            n = int(v[1:])
            return (n + 1, 1 << 30)
        if "-" in v:
            lo, hi = v.split("-")
            return int(lo), int(hi)
        n = int(v)
        return n, n
    except ValueError:
        raise ValueError(f"{what}:{v} not understood") from None
