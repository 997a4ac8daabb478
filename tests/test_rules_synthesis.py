"""Synthesis details behind the Snort 3 community coverage (no IDS needed): byte_test / byte_jump
values, chains pinned by offset, HTTP headers the rule writes itself, raw URI length, the service
kept in metadata, SMTP attachments, UDP flows that the client opens."""

from __future__ import annotations

import struct

import pytest

from idsrules.layout import LayoutError, build_buffer, verify
from idsrules.semantics import Match, analyze, services_of
from idsrules.syntax import parse_rule_text
from idsrules.synth import (
    Ja3,
    SynthError,
    flowbit_setters,
    header_lines,
    http_request,
    plan,
    rule_messages,
    stream_size_problem,
    tls_client_hello,
    udp_session,
)


def _model(options: str, header: str = "alert tcp $EXTERNAL_NET any -> $HOME_NET 7000"):
    return analyze(parse_rule_text(f'{header} (msg:"t"; {options} sid:1; rev:1;)'))


def _bt(*args: str, relative: bool = False) -> Match:
    return Match("byte_test", relative=relative, args=args)


def test_byte_test_value_is_written_and_checked() -> None:
    m = [_bt("2", ">", "1000", "4")]
    buf = build_buffer(m, fill=b"\0")
    assert struct.unpack("!H", buf[4:6])[0] > 1000
    assert verify(buf, m)
    assert not verify(b"\0" * 6, m)  # the read value 0 fails the test
    assert not verify(b"\0" * 5, m)  # two bytes at 4 are not there


def test_byte_test_string_little_and_bitmask() -> None:
    s = [
        Match("content", data=b"LEN "),
        _bt("4", "=", "257", "0", "relative", "string", "dec", relative=True),
    ]
    assert build_buffer(s) == b"LEN 0257"
    little = [_bt("2", "=", "258", "0", "little")]
    assert build_buffer(little, fill=b"\0") == b"\x02\x01"
    masked = [_bt("1", "=", "3", "0", "bitmask 0x30")]
    assert build_buffer(masked, fill=b"\0") == b"\x30"
    negated = [_bt("1", "!&", "0x0f", "0")]
    assert build_buffer(negated, fill=b"\x0f")[0] & 0x0F == 0


def test_bit_tests_on_one_byte_keep_each_other() -> None:
    m = [_bt("1", "&", "2", "0"), _bt("1", "&", "0x80", "0"), _bt("1", "!&", "0x78", "0")]
    assert build_buffer(m, fill=b"\0") == b"\x82"


def test_contradictory_byte_tests_raise() -> None:
    with pytest.raises(LayoutError):
        build_buffer([_bt("1", ">", "10", "0"), _bt("1", "<", "5", "0")], fill=b"\0")


def test_byte_jump_moves_the_relative_position() -> None:
    m = [
        Match("content", data=b"AB"),
        Match("byte_jump", relative=True, args=("1", "0", "relative")),
        Match("content", data=b"CD", distance=0, within=2),
    ]
    buf = build_buffer(m, fill=b"\0")
    assert verify(buf, m)
    jump = buf[2]
    assert buf[3 + jump : 5 + jump] == b"CD"
    # a jump value that lands elsewhere makes the following `within` fail
    assert not verify(b"AB\x05CD\0\0\0\0\0", m)


def test_byte_jump_align_multiplier_from_beginning() -> None:
    rpc = _model(
        'content:"|00 01 86 A0|"; depth:4; offset:12; byte_jump:4,4,relative,align; '
        'byte_jump:4,4,relative,align; content:"|00 00 00 03|"; within:4;',
        "alert udp $EXTERNAL_NET any -> $HOME_NET 111",
    )
    payload = rule_messages(rpc, 1)[0][1]
    assert payload[12:16] == b"\x00\x01\x86\xa0" and payload.endswith(b"\x00\x00\x00\x03")
    fb = _model(
        'content:"HDR"; depth:3; byte_jump:2,3,little,from_beginning,post_offset 4,multiplier 2; '
        'content:"TAIL"; within:4;'
    )
    payload = rule_messages(fb, 1)[0][1]
    val = struct.unpack("<H", payload[3:5])[0]
    assert payload[val * 2 + 4 : val * 2 + 8] == b"TAIL"


def test_absolute_content_listed_later_is_placed_first() -> None:
    m = _model('content:".exe&h="; content:"p="; depth:2;')
    payload = rule_messages(m, 1)[0][1]
    assert payload.startswith(b"p=") and b".exe&h=" in payload


def test_rule_user_agent_replaces_the_default() -> None:
    req = http_request(
        _model(
            'flow:to_server,established; http.header; content:"User-Agent|3A 20|Evil/1.0|0D 0A|";'
        )
    )
    assert req.count(b"User-Agent") == 1 and b"User-Agent: Evil/1.0\r\n" in req
    plain = http_request(_model('flow:to_server,established; http.uri; content:"/x";'))
    assert b"User-Agent: Mozilla/5.0\r\n" in plain  # no rule header: the default stays


def test_header_lines_blanks_and_names() -> None:
    assert header_lines(b"Opera/10 ") == [b"User-Agent: Opera/10 1"]  # no blank before a colon
    assert header_lines(b"X-Token") == [b"X-Token: 1"]
    assert header_lines(b"Accept: a \r\n") == [b"Accept: a 1"]  # libhtp trims end blanks
    assert header_lines(b"text without a colon") == [b"X-Data: text without a colon"]


def test_header_pinned_to_start_goes_first() -> None:
    m = _model(
        'flow:to_server,established; http.header; content:"User-Agent|3A|"; content:"probe"; '
        'distance:0; pcre:"/^User-Agent\\x3a[^\\r\\n]*probe/i";'
    )
    req = http_request(m)
    assert req.split(b"\r\n")[1].startswith(b"User-Agent:")


def test_raw_uri_length_with_normalized_contents() -> None:
    m = _model(
        'flow:to_server,established; http.uri.raw; bsize:12; http.uri; content:"/pid/pid.txt";'
    )
    assert http_request(m).startswith(b"GET /pid/pid.txt HTTP/1.1\r\n")
    longer = _model(
        'flow:to_server,established; http.uri; content:"/swc"; content:"ctr="; distance:0; '
        "http.uri.raw; bsize:>50;"
    )
    uri = http_request(longer).split(b" ")[1]
    assert uri.startswith(b"/swcctr=") and len(uri) > 50


def test_service_from_metadata() -> None:
    raw = parse_rule_text(
        'alert tcp any any -> any 25 (msg:"m"; file.data; content:"x"; '
        "metadata:ruleset community, service smtp, service pop3; sid:5;)"
    )
    assert services_of(raw) == ["smtp", "pop3"]
    assert analyze(raw).app == "smtp"
    # a raw-payload rule stays raw whatever the service says
    assert _model('content:"LOCK "; depth:5; metadata:ruleset community, service http;').app is None
    imap = _model('file.data; content:"x"; metadata:service imap;')
    assert imap.app == "http"  # Suricata 7 has no IMAP file.data


def test_smtp_file_data_is_a_base64_attachment() -> None:
    import base64

    m = _model(
        'flow:to_server,established; file.data; content:"MARK-123"; metadata:service smtp;',
        "alert tcp $EXTERNAL_NET any -> $SMTP_SERVERS 25",
    )
    msgs = rule_messages(m, 1)
    client = b"".join(d for fc, d in msgs if fc)
    assert msgs[0] == (False, b"220 mail.example.com ESMTP ready\r\n")
    assert b"DATA\r\n" in client and client.endswith(b"QUIT\r\n")
    assert base64.b64encode(b"MARK-123") in client.replace(b"\r\n", b"")


class _Rec:
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.t = 0
        self.count = 0

    def emit(self, frame: bytes) -> None:
        self.frames.append(frame)


def test_udp_server_datagram_follows_a_client_one() -> None:
    from idsrules.synth import Session

    s = Session(1, [], "udp", "198.19.0.1", 40000, "198.18.0.1", 7410)
    em = _Rec()
    udp_session(em, s, [(False, b"REPLY")])
    assert len(em.frames) == 2
    src_of = [f[14 + 12 : 14 + 16] for f in em.frames]  # IPv4 source address
    assert src_of[0] == bytes([198, 19, 0, 1]) and src_of[1] == bytes([198, 18, 0, 1])


def test_dot_segment_in_normalized_uri_goes_to_the_query() -> None:
    m = _model('flow:to_server,established; http.uri; content:".nsf/"; content:"../";')
    uri = http_request(m).split(b" ")[1]
    path, _, query = uri.partition(b"?")
    assert b"../" not in path and b"../" in query and b".nsf/" in uri


def test_dcerpc_bind_and_request() -> None:
    import uuid

    m = _model(
        "flow:to_server,established; dcerpc.iface:12345678-1234-abcd-ef00-0123456789ab,=2; "
        'dcerpc.opnum:7-9; dcerpc.stub_data; content:"AB";',
        "alert tcp $EXTERNAL_NET any -> $HOME_NET 135",
    )
    assert m.supported and m.app == "dcerpc"
    assert m.buffer_opts["dcerpc"] == {
        "iface": "12345678-1234-abcd-ef00-0123456789ab",
        "version": 2,
        "opnum": 7,
    }
    (c1, bind), (c2, ack), (c3, req), _resp = rule_messages(m, 1)
    assert (c1, c2, c3) == (True, False, True)
    assert bind[2] == 11 and uuid.UUID("12345678-1234-abcd-ef00-0123456789ab").bytes_le in bind
    assert ack[2] == 12 and req[2] == 0
    assert struct.unpack("<H", req[22:24])[0] == 7 and req[24:] == b"AB"
    assert struct.unpack("<H", req[8:10])[0] == len(req)  # frag_length
    udp = _model(
        "dcerpc.iface:12345678-1234-abcd-ef00-0123456789ab;",
        "alert udp $EXTERNAL_NET any -> $HOME_NET 135",
    )
    assert not udp.supported and "UDP" in udp.reasons[0]


def test_stream_size_is_checked_at_the_match() -> None:
    def model(opts: str):
        return analyze(
            parse_rule_text(
                'alert tcp $EXTERNAL_NET any -> $HOME_NET 7000 (msg:"s"; flow:established,'
                f'to_server; content:"hello"; {opts} sid:9; rev:1;)'
            )
        )

    quiet = model("stream_size:server,<,5;")
    assert quiet.supported and quiet.stream_size == [("server", "<", 5)]
    assert stream_size_problem(quiet, [(True, b"hello"), (False, b"a long answer")]) is None
    # the server spoke first: its 7 bytes and its SYN are counted at the client's match
    assert stream_size_problem(quiet, [(False, b"banner\n"), (True, b"hello")]) == (
        "stream_size:server,<,5 does not hold at the match (server 8 bytes)"
    )
    both = model("stream_size:both,>,3;")
    assert stream_size_problem(both, [(False, b"ok"), (True, b"hello")]) is not None
    either = model("stream_size:either,>,3;")
    assert stream_size_problem(either, [(False, b"ok"), (True, b"hello")]) is None
    with pytest.raises(SynthError, match="stream_size:client,>,9999"):
        plan(model("stream_size:client,>,9999;"), {}, 1)
    bad = model("stream_size:sideways,<,5;")
    assert not bad.supported and "stream_size:sideways" in " ".join(bad.reasons)


def test_xbits_are_set_and_checked_as_bits_of_their_own() -> None:
    def model(opts: str):
        return analyze(
            parse_rule_text(
                f'alert tcp any any -> $HOME_NET 7000 (msg:"x"; content:"a"; {opts} sid:9; rev:1;)'
            )
        )

    setter = model("xbits:set,stage,track ip_src,expire 30; noalert;")
    checker = model("xbits:isset,stage,track ip_src;")
    assert setter.flowbits_set == ["xbits:stage"] and setter.noalert
    assert checker.flowbits_isset == ["xbits:stage"] and checker.supported
    with pytest.raises(SynthError, match="xbit 'stage' is set by no rule given"):
        plan(checker, {}, 1)
    assert not model("xbits:flip,stage,track ip_src;").supported
    assert not model("xbits:set;").supported


def test_flowint_conditions_drive_the_variable_or_say_which_value_is_missing() -> None:
    def http(opts: str, sid: int):
        return analyze(
            parse_rule_text(
                'alert http $EXTERNAL_NET any -> $HOME_NET any (msg:"x"; flow:established,'
                f"to_server; {opts} sid:{sid}; rev:1;)"
            )
        )

    counter = http('http.uri; content:"/count"; flowint:hits,+,1; noalert;', 1)
    checker = http('http.uri; content:"/check"; flowint:hits,>,2;', 2)
    counting = http('http.uri; content:"/both"; flowint:hits,+,1;', 3)
    assert counter.flowint_changes == [("hits", "+", "1")] and not counter.flowint_conditions
    assert counting.supported and checker.flowint_conditions == [("hits", ">", "2")]
    setters = flowbit_setters([counter, checker])
    requests = [d for fc, d in plan(checker, setters, 1).messages if fc]
    assert [r.split(b" ")[1].startswith(b"/count") for r in requests] == [True] * 3 + [False]
    with pytest.raises(SynthError, match=r"flowint 'hits' must be > 2 before the match, and no"):
        plan(checker, {}, 1)
    raw = _model('content:"knock"; flowint:knocks,+,1; noalert;')
    door = analyze(
        parse_rule_text(
            'alert tcp any any -> any 7000 (content:"open"; flowint:knocks,>=,2; sid:2;)'
        )
    )
    with pytest.raises(SynthError, match=r"Suricata 7 inspects in one piece"):
        plan(door, flowbit_setters([raw, door]), 1)
    assert not _model("flowint:knocks,**,2;").supported


def test_what_no_session_can_carry_says_why() -> None:
    def reasons(opts: str) -> str:
        rule = f'alert tls any any -> any any (msg:"j"; {opts} sid:5; rev:1;)'
        return " ".join(analyze(parse_rule_text(rule)).reasons)

    assert "cannot be inverted" in reasons('ja3.hash; content:"e7d705a3286e19ea42f587b344ee6865";')
    assert "ServerHello" in reasons('ja3s.hash; content:"e7d705a3286e19ea42f587b344ee6865";')
    assert "SHA-1" in reasons('tls.cert_fingerprint; content:"aa:bb";')
    assert reasons('content:"x"; byte_extract:1,0,v;') == "keyword byte_extract is not synthesized"
    assert reasons('content:"k="; base64_decode:relative; base64_data; content:"x";') == ""
    assert "without a base64_decode" in reasons('base64_data; content:"x";')


TLS_HEADER = "alert tls $HOME_NET any -> $EXTERNAL_NET any"


def test_a_ja3_string_becomes_the_client_hellos_fields() -> None:
    """The ClientHello carries the JA3 string's version, suites, extensions in order, groups and
    formats (Suricata's own JA3 of it is the golden case ja3_string); default hello unchanged."""
    text = b"771,49195-49199,0-23-10-11-16,29-23,0"
    ja3 = Ja3.parse(text)
    assert (ja3.version, ja3.ciphers, ja3.extensions) == (771, (49195, 49199), (0, 23, 10, 11, 16))
    hello = rule_messages(_model(f'ja3.string; content:"{text.decode()}";', TLS_HEADER), 1)[0][1]
    body = hello[9:]
    assert body[:2] == b"\x03\x03" and body[35:41] == b"\x00\x04\xc0\x2b\xc0\x2f"
    assert tls_client_hello(b"www.example.com") == tls_client_hello(
        b"www.example.com", Ja3(extensions=(0, 10, 13))
    )


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("771,4865", "is not a JA3 string"),
        ("771-772,4865,0,29,0", "the version is one number"),
        ("771,4865,0-0,29,0", "an extension twice"),
        ("771,4865,41-0,29,0", r"pre_shared_key \(41\) must be the last"),
        ("771,4865,0,29,256", "out of its field's range"),
    ],
)
def test_a_ja3_string_that_no_client_hello_has_is_refused_with_why(content, why) -> None:
    with pytest.raises(SynthError, match=why):
        rule_messages(
            _model(f'ja3.string; content:"{content}"; bsize:{len(content)};', TLS_HEADER), 1
        )
