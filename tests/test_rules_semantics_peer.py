"""Sessions a real client and server would exchange (issue 27), piece by piece: the side of each
buffer, the mandatory Host header, whole request and status lines, one line per header, nothing
after the body, certificate names with their usual attributes, regex examples under `i` and with
word boundaries, no command written twice; and miss reasons from what Suricata itself parsed.
The golden cases `http_peer_semantics` and `tls_cert_names` run the same rules through Suricata."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from idsrules.layout import build_buffer, verify
from idsrules.regex_example import RegexUnsupported, example
from idsrules.semantics import analyze
from idsrules.syntax import parse_rule_text, read_rules
from idsrules.synth import cert_name, dn_attributes, dns_records_end, rule_messages, synthesize
from testbed.ids.missreason import MISS_EVE_TYPES, SessionView, miss_reason

OUT = "alert http $HOME_NET any -> $EXTERNAL_NET any"
IN = "alert http $EXTERNAL_NET any -> $HOME_NET any"


def _model(options: str, header: str = IN):
    return analyze(parse_rule_text(f'{header} (msg:"t"; {options} sid:1; rev:1;)'))


def _http(options: str, header: str = IN) -> tuple[bytes, bytes]:
    msgs = rule_messages(_model(options, header), 1)
    req = b"".join(d for fc, d in msgs if fc)
    resp = b"".join(d for fc, d in msgs if not fc)
    return req, resp


def _head_and_body(message: bytes) -> tuple[list[bytes], bytes]:
    head, _, body = message.partition(b"\r\n\r\n")
    return head.split(b"\r\n"), body


# --- 1. response-side semantics -------------------------------------------------------------------
def test_to_client_cookie_is_a_set_cookie_of_the_response() -> None:
    req, resp = _http(
        'flow:established,to_client; http.stat_code; content:"302"; http.cookie; content:"k=v1";'
    )
    assert b"Cookie" not in req
    lines, _ = _head_and_body(resp)
    assert lines[0] == b"HTTP/1.1 302 Found" and b"Set-Cookie: k=v1" in lines


def test_file_data_with_a_status_code_and_no_flow_is_the_response_body() -> None:
    m = _model('http.stat_code; content:"403"; file.data; content:"stage2-body";')
    assert not m.to_server and "http.response_body" in m.buffers
    req, resp = _http('http.stat_code; content:"403"; file.data; content:"stage2-body";')
    assert req.startswith(b"GET ") and b"stage2-body" not in req
    assert resp.endswith(b"\r\n\r\nstage2-body")


# --- 2. mandatory headers ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        'http.uri; content:"/gate.php"; http.header_names; content:!"Referer";',
        'http.header_names; content:"|0d 0a|X-Id|0d 0a|";',
        'http.host; content:"c2.example"; http.header_names; content:"User-Agent";',
        'http.method; content:"POST"; http.request_body; content:"a=1"; '
        'http.header_names; content:"|0d 0a|X-A|0d 0a|";',
    ],
)
def test_every_http11_request_has_a_host_header(options: str) -> None:
    req, _ = _http("flow:established,to_server; " + options, OUT)
    lines, body = _head_and_body(req)
    assert lines[0].endswith(b" HTTP/1.1")
    hosts = [ln for ln in lines if ln.lower().startswith(b"host: ")]
    assert len(hosts) == 1
    if b"c2.example" in options.encode():
        assert hosts[0].endswith(b"c2.example")
    if body:
        assert f"Content-Length: {len(body)}".encode() in lines


def test_a_rule_that_forbids_host_gets_an_http10_request_without_one() -> None:
    req, _ = _http('flow:to_server; http.header_names; content:!"Host";', OUT)
    lines, _ = _head_and_body(req)
    assert lines[0].endswith(b" HTTP/1.0") and not any(b"Host" in ln for ln in lines[1:])


def test_no_double_slash_unless_the_uri_content_needs_one() -> None:
    req, _ = _http('http.uri; content:"/cgi/"; content:"/run.cgi"; distance:0;')
    assert req.split(b" ")[1] == b"/cgi/a/run.cgi"
    req, _ = _http('http.uri; content:"//payload";')
    uri = req.split(b" ")[1]
    assert b"//payload" in uri and b"//" not in uri.split(b"?")[0]  # in the query, as sent


# --- 3. request and response lines, one line per header, nothing after the body ------------------
def test_request_line_content_shapes_method_and_uri() -> None:
    req, _ = _http('http.request_line; content:"PUT /upload/"; startswith;')
    assert req.startswith(b"PUT /upload/ HTTP/1.1\r\n")
    req, _ = _http(r'http.request_line; pcre:"/^DELETE\s\/x[a-z]{3}\.php/";')
    assert re.match(rb"DELETE /x[a-z]{3}\.php HTTP/1\.1\r\n", req)


def test_response_line_is_always_whole() -> None:
    _, resp = _http(
        'flow:to_client; http.response_line; content:"HTTP/1."; http.stat_code; content:"418";'
    )
    assert re.match(rb"HTTP/1\.1 418 \S", resp)


def test_one_content_type_and_length_of_the_body() -> None:
    _, resp = _http(
        'flow:to_client; http.content_type; content:"application/zip"; '
        'http.header; content:"Content-Type|3a 20|";'
    )
    lines, body = _head_and_body(resp)
    assert [ln for ln in lines if ln.lower().startswith(b"content-type")] == [
        b"Content-Type: application/zip"
    ]
    _, resp = _http('flow:to_client; content:"RAWBYTES"; http.stat_code; content:"200";')
    lines, body = _head_and_body(resp)
    assert body.endswith(b"RAWBYTES") and f"Content-Length: {len(body)}".encode() in lines


@pytest.mark.parametrize("side", ["to_server", "to_client"])
def test_a_content_length_the_rule_names_is_digits_and_the_body_that_long(side: str) -> None:
    req, resp = _http(f'flow:established,{side}; http.content_len; content:"17"; ')
    lines, body = _head_and_body(req if side == "to_server" else resp)
    lengths = [ln for ln in lines if ln.lower().startswith(b"content-length")]
    assert lengths == [b"Content-Length: 17"] and len(body) == 17
    # a length no body can have (not digits) stays the rule's: that mismatch is the attack
    req, _ = _http('flow:established,to_server; http.content_len; content:"-1"; ')
    assert b"Content-Length: -1" in req


def test_words_of_a_text_protocol_line_stay_apart() -> None:
    # the gap `distance:1` asks for is a blank, so the server reads a command and its argument
    m = _model(
        'flow:established,to_server; content:"AUTHENTICATE"; nocase; content:"NTGMECH"; '
        "distance:1; within:20;",
        "alert tcp $EXTERNAL_NET any -> $HOME_NET 143",
    )
    client = b"".join(d for fc, d in rule_messages(m, 1) if fc)
    assert re.search(rb"AUTHENTICATE +NTGMECH", client), client


@pytest.mark.parametrize(
    "options",
    [  # raw bytes that end the question and start a TXT answer, then the answer's text
        'content:"|00 00 10 00 01 c0 0c 00 10 00 01|"; content:"ntg-txt-payload"; distance:0;',
        'content:"ntg-bare-bytes";',  # bytes that are no record at all: a TXT answer's text
    ],
)
def test_raw_dns_bytes_make_a_message_a_dns_parser_reads_whole(options: str) -> None:
    m = _model(options, "alert dns any any -> $HOME_NET any")
    answer = rule_messages(m, 1)[-1][1]  # the message that carries the rule's bytes
    assert dns_records_end(answer) == len(answer)  # no byte past the counted records
    qd, an = struct.unpack_from("!HH", answer, 4)
    assert (qd, an) == (1, 1) and answer.endswith(options.split('"')[-2].encode())
    assert verify(answer, m.buffers["pkt"], m.buffer_opts.get("pkt"))


@pytest.mark.parametrize(
    ("header", "start"),
    [
        ("alert tcp $HOME_NET 21 -> $EXTERNAL_NET any", b"220 "),
        ("alert tcp $HOME_NET 110 -> $EXTERNAL_NET any", b"+OK "),
        ("alert tcp $HOME_NET 143 -> $EXTERNAL_NET any", b"* OK "),
    ],
)
def test_a_greeting_the_rule_pins_starts_as_its_client_reads_one(header: str, start: bytes):
    m = _model(
        'flow:to_client,established; content:"NTG Print Server"; '
        'content:"use put"; offset:30; depth:120;',
        header,
    )
    first = rule_messages(m, 1)[0]
    assert first[0] is False and first[1].startswith(start + b"NTG Print Server")
    # pinned at the very start: the rule's bytes are the line, nothing goes before them
    m = _model('flow:to_client,established; content:"NTG"; depth:3;', header)
    assert rule_messages(m, 1)[0][1].startswith(b"NTG")


@pytest.mark.parametrize(
    ("options", "line"),
    [  # bytes a scanner rule pins at an offset: a header of their own, where the rule looks
        ('content:"sip|3a|ntgscan@"; offset:90;', rb"X-Ntg: a+sip:ntgscan@"),
        (
            'content:"REGISTER "; depth:9; content:"User-Agent|3a| NtgScan";',
            rb"User-Agent: NtgScan",
        ),
    ],
)
def test_sip_bytes_a_rule_pins_ride_in_a_message_a_sip_parser_reads(options: str, line: bytes):
    m = _model(options, "alert udp $EXTERNAL_NET any -> $HOME_NET 5060")
    request = rule_messages(m, 1)[0][1]
    head, sep, body = request.partition(b"\r\n\r\n")
    assert sep and body == b"" and re.fullmatch(rb"[A-Z]+ sip:\S+ SIP/2\.0", head.split(b"\r\n")[0])
    assert any(re.fullmatch(line, h) for h in head.split(b"\r\n")[1:]), head
    assert verify(request, m.buffers["pkt"], m.buffer_opts.get("pkt"))


# --- 4. certificate names ------------------------------------------------------------------------
def test_certificate_names_have_the_usual_attributes() -> None:
    m = _model(
        'flow:to_client; tls.cert_subject; content:"O=Rogue Org"; '
        'tls.cert_issuer; content:"CN=Tiny Root"; endswith; bsize:30;',
        "alert tls $EXTERNAL_NET any -> $HOME_NET any",
    )
    subject = cert_name(m, "tls.cert_subject", b"www.example.com")
    assert subject == [(b"C", b"US"), (b"O", b"Rogue Org"), (b"CN", b"www.example.com")]
    issuer = cert_name(m, "tls.cert_issuer", b"Example CA")
    text = b", ".join(k + b"=" + v for k, v in issuer)
    assert len(text) == 30 and text.endswith(b"CN=Tiny Root") and issuer[0][0] == b"C"
    assert dn_attributes(b"C=US, O=A, B, CN=x") == [(b"C", b"US"), (b"O", b"A, B"), (b"CN", b"x")]
    assert dn_attributes(b"no attributes") is None


# --- 5. regex examples ---------------------------------------------------------------------------
def test_negated_class_under_i_excludes_both_cases() -> None:
    s = example(r"^MODE\s+[^ABSC]{1}", "msi")
    assert s[5:6].lower() not in (b"a", b"b", b"s", b"c")
    assert re.search(rb"^MODE\s+[^ABSC]{1}", s, re.I | re.M | re.S)
    assert example(r"x[^q]y", "i")[1:2] not in (b"q", b"Q")


def test_word_boundaries_hold_beside_other_bytes() -> None:
    tail = example(r"(?:exec|run)\b")
    assert re.search(rb"(?:exec|run)\b", tail + b"aaaa")  # the layout's filler after it
    mid = example(r"foo\s*\bbar")
    assert re.search(rb"foo\s*\bbar", mid)


def test_an_example_failure_names_the_construct() -> None:
    with pytest.raises(RegexUnsupported) as exc:
        example(r"^[^\r\n]{3}\bX")
    assert "word boundary" in str(exc.value) and "back-reference" not in str(exc.value)
    with pytest.raises(RegexUnsupported, match="lookahead or lookbehind"):
        example(r"(?=abc)xyz")


# --- 6. dialogues: no command line twice ----------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        r'content:"MKD"; nocase; isdataat:100,relative; pcre:"/^MKD\s[^\n]{100}/smi";',
        r'content:"MKD"; nocase; pcre:"/MKD\s[^\n]{10}/i";',
        r'content:"MODE"; nocase; pcre:"/^MODE\s+[^ABSC]{1}/msi";',
    ],
)
def test_an_ftp_command_is_written_once(options: str) -> None:
    m = _model("flow:established,to_server; " + options, "alert ftp $EXTERNAL_NET any -> any 21")
    client = b"".join(d for fc, d in rule_messages(m, 1) if fc)
    verb = options.split('"')[1].encode()
    assert client.upper().count(verb) == 1


def test_shortest_layout_keeps_the_callers_prefix() -> None:
    # a dns.query layout asked for with prefix "www" keeps it (a name must not start with a dot)
    m = _model('dns.query; content:".exfil."; pcre:"/^[a-z0-9]{40,}\\.exfil\\./";', OUT)
    name = build_buffer(m.buffers["dns.query"], None, prefix=b"www")
    assert name.startswith(b"www") and name.count(b".exfil.") == 1


# --- 7. miss reasons -----------------------------------------------------------------------------
def _view(**events) -> SessionView:
    v = SessionView(app_protos={"http"}, flows=1)
    for kind, txs in events.items():
        v.events[kind] = txs
    return v


def test_miss_reasons_name_what_the_session_lacked() -> None:
    status = _model('flow:to_client; http.stat_code; content:"302";')
    assert miss_reason(status, _view(http=[{"url": "/", "status": 200}])) == (
        "the IDS saw the response status 200, the rule needs '302'"
    )
    host = _model('http.host; content:"c2.example";', OUT)
    assert miss_reason(host, _view(http=[{"url": "/"}])) == (
        "no http.host buffer: the request had no Host header"
    )
    assert miss_reason(host, _view()) == "the IDS parsed no HTTP transaction on the session"
    other = SessionView(app_protos={"failed"}, flows=1)
    assert (
        miss_reason(host, other) == "the IDS did not parse the session as HTTP (app_proto: failed)"
    )
    tls = _model(
        'tls.cert_subject; content:"CN=x";', "alert tls $EXTERNAL_NET any -> $HOME_NET any"
    )
    assert miss_reason(tls, SessionView({"tls"}, 1, {"tls": [{"sni": "a"}]})) == (
        "TLS: no certificate parsed"
    )
    assert miss_reason(host, None) is None  # no evidence: the caller keeps its blanket reason
    # raw stream data the rule needs past one of Suricata's inspection chunks: named as such,
    # with or without events; within a chunk, or not TCP, it says nothing of the kind
    raw = "alert tcp $EXTERNAL_NET any -> $HOME_NET 25"
    long = _model('flow:to_server; content:"EHLO "; isdataat:5000,relative;', raw)
    assert "5,000 bytes of the raw stream" in (miss_reason(long, None) or "")
    assert "toserver-chunk-size" in (miss_reason(long, _view()) or "")
    short = _model('flow:to_server; content:"EHLO "; isdataat:500,relative;', raw)
    assert miss_reason(short, None) is None
    udp = _model('content:"x"; isdataat:5000,relative;', "alert udp any any -> any 53")
    assert miss_reason(udp, None) is None
    # a byte_jump whose bytes a content pins lands past a chunk from the stream start
    jump = '"NTG|40 00|"; depth:5; byte_jump:2,-2,relative,from_beginning; content:"END"; within:3;'
    far = _model(f"flow:to_server; content:{jump}", raw)
    assert "16,387 bytes from the start of the raw stream" in (miss_reason(far, None) or "")
    near = _model(f"flow:to_server; content:{jump.replace('40 00', '04 00')}", raw)
    assert miss_reason(near, None) is None


def test_miss_reason_from_suricatas_own_events(tmp_path: Path, suricata: str) -> None:
    """Sessions written for one set of rules, scored against rules of the same sids that want
    something else: the reasons come from Suricata's eve.json on those very sessions."""
    from testbed.ids.coverage import score
    from testbed.ids.suricata import run_offline

    written = tmp_path / "written.rules"
    written.write_text(
        f'{IN} (msg:"a"; flow:established,to_client; http.stat_code; content:"302"; sid:91; rev:1;)\n'
        f'{OUT} (msg:"b"; flow:established,to_server; http.uri; content:"/nohost"; '
        f'http.header_names; content:!"Host"; sid:92; rev:1;)\n'
    )
    wanted = tmp_path / "wanted.rules"
    wanted.write_text(
        f'{IN} (msg:"a"; flow:established,to_client; http.stat_code; content:"301"; sid:91; rev:1;)\n'
        f'{OUT} (msg:"b"; flow:established,to_server; http.uri; content:"/nohost"; '
        f'http.host; content:"example"; sid:92; rev:1;)\n'
    )
    rules, _ = read_rules(written)
    synth = synthesize([analyze(r) for r in rules], tmp_path / "a.pcap")
    suri = run_offline(tmp_path / "a.pcap", [wanted], tmp_path / "suri", eve_types=MISS_EVE_TYPES)
    rules, _ = read_rules(wanted)
    doc = score([analyze(r) for r in rules], synth, suri)
    reasons = {r["sid"]: r["reason"] for r in doc["rows"]}
    assert reasons == {
        91: "no alert: the IDS saw the response status 302, the rule needs '301'",
        92: "no alert: no http.host buffer: the request had no Host header",
    }


def test_normalized_uri_approximates_libhtp() -> None:
    from idsrules.synth import normalized_uri

    assert normalized_uri(b"/a//b/./c/../d%2e%2e/?q=%2F//x") == b"/a/b/d../?q=%2F//x"
    assert normalized_uri(b"/../vpns/") == b"/vpns/"


def test_a_host_name_that_ends_a_header_line_is_the_host() -> None:
    req, _ = _http('http.uri; content:"/s?id="; http.header; content:"cdn.example|0d 0a|";', OUT)
    lines, _ = _head_and_body(req)
    assert [ln for ln in lines if ln.lower().startswith(b"host:")] == [b"Host: cdn.example"]


def test_a_colon_inside_a_value_is_no_header_name() -> None:
    req, _ = _http('http.header; content:"urn|3a|ntg-org|3a|service|3a|Clock|3a|1#Set";', OUT)
    lines, _ = _head_and_body(req)
    assert b"X-Data: urn:ntg-org:service:Clock:1#Set" in lines


def test_response_header_names_are_all_written() -> None:
    _, resp = _http(
        'flow:to_client; http.header_names; content:"|0d 0a|X-A|0d 0a|"; '
        'content:"|0d 0a|X-B|0d 0a|"; content:"|0d 0a|X-C|0d 0a|";'
    )
    lines, _ = _head_and_body(resp)
    assert {b"X-A: 1", b"X-B: 1", b"X-C: 1"} <= set(lines)


def test_a_long_certificate_spans_several_tls_records() -> None:
    from idsrules.synth import TLS_RECORD_MAX, tls_server_flight, x509_certificate

    flight = tls_server_flight(x509_certificate(b"x" * 40_000))
    sizes, k, payload = [], 0, b""
    while k < len(flight):
        assert flight[k : k + 3] == b"\x16\x03\x03"
        n = int.from_bytes(flight[k + 3 : k + 5], "big")
        sizes.append(n)
        payload += flight[k + 5 : k + 5 + n]
        k += 5 + n
    assert k == len(flight) and len(sizes) == 3 and max(sizes) <= TLS_RECORD_MAX
    assert payload[:1] == b"\x02" and b"x" * 40_000 in payload  # ServerHello first, then the cert
