"""Text-protocol sessions are written as client/server dialogues (no IDS needed): where the rule's
bytes go in FTP, SMTP, POP3 and IMAP, when a CRLF ends them, a raw rule on a well-known port
speaking that port's protocol, SIP messages from the sip.* buffers, DNS over TCP framing."""

from __future__ import annotations

import struct

from idsrules.dialogue import GREETING, dialogue, sip_request
from idsrules.semantics import analyze
from idsrules.syntax import parse_rule_text
from idsrules.synth import Session, rule_messages, synthesize


def _model(options: str, header: str = "alert ftp $EXTERNAL_NET any -> $HOME_NET any"):
    return analyze(parse_rule_text(f'{header} (msg:"t"; {options} sid:1; rev:1;)'))


def _client(msgs) -> bytes:
    return b"".join(d for fc, d in msgs if fc)


def test_ftp_command_follows_greeting_and_user_and_ends_in_crlf() -> None:
    m = _model(
        'flow:established,to_server; content:"SITE EXEC "; nocase; content:"%x"; distance:0;'
    )
    msgs = rule_messages(m, 1)
    assert msgs[0] == (False, GREETING["ftp"])
    assert msgs[1] == (True, b"USER alice\r\n") and msgs[2][1].startswith(b"331 ")
    assert (
        msgs[3][0] is True and msgs[3][1].startswith(b"SITE EXEC ") and msgs[3][1].endswith(b"\r\n")
    )
    assert msgs[-2:] == [(True, b"QUIT\r\n"), (False, b"221 Goodbye.\r\n")]


def test_pinned_payload_is_a_segment_of_its_own_after_the_login() -> None:
    """Suricata applies offset/depth per packet too: the protocol is recognised by USER/EHLO
    first, and the pinned payload still starts its own segment."""
    m = _model('flow:established,to_server; content:"CWD "; depth:4; content:"../"; distance:0;')
    msgs = rule_messages(m, 1)
    assert msgs[1] == (True, b"USER alice\r\n") and msgs[3][1].startswith(b"CWD ")
    smtp = rule_messages(
        _model(
            'flow:established,to_server; content:"|16|"; depth:1; content:"X"; distance:2;',
            "alert smtp any any -> $SMTP_SERVERS 25",
        ),
        1,
    )
    assert smtp[1] == (True, b"EHLO client.example.com\r\n") and smtp[3][1].startswith(b"\x16")


def test_server_payload_pinned_to_start_is_the_greeting() -> None:
    m = _model(
        'flow:established,to_client; content:"220 "; depth:4; content:"Evil"; distance:0;',
        "alert ftp $HOME_NET any -> $EXTERNAL_NET any",
    )
    msgs = rule_messages(m, 1)
    assert msgs[0][0] is False and msgs[0][1].startswith(b"220 ") and b"Evil" in msgs[0][1]
    assert msgs[1] == (True, b"USER alice\r\n")


def test_server_bytes_without_a_reply_code_get_one() -> None:
    msgs = dialogue("ftp", b"NTG-MARK", False)
    assert (False, b"200 NTG-MARK\r\n") in msgs


def test_line_ends_in_crlf_else_lf_else_nothing_as_the_rule_allows() -> None:
    def line(options: str) -> bytes:
        return [d for fc, d in rule_messages(_model(options), 1) if fc and d.startswith(b"STOR ")][
            0
        ]

    assert line('flow:established,to_server; content:"STOR "; content:"x.php";').endswith(
        b"x.php\r\n"
    )
    no_cr = line('flow:established,to_server; content:"STOR "; content:!"|0d|"; distance:0;')
    assert no_cr.endswith(b"\n") and not no_cr.endswith(b"\r\n")
    dollar = line('flow:established,to_server; content:"STOR "; pcre:"/^STOR[^\\n]*shadow$/mi";')
    assert dollar.endswith(b"shadow\n")  # `$` with m matches before LF, not CR LF
    bare = line('flow:established,to_server; content:"STOR "; content:!"|0a|"; distance:0;')
    assert not bare.endswith(b"\n")


def test_pcre_anchored_at_the_stream_start_makes_the_payload_the_first_line() -> None:
    m = _model(
        'flow:established,to_server; content:"MAIL"; pcre:"/^MAIL\\s+FROM\\x3a[^\\r\\n]*\\x28\\x29/i";',
        "alert tcp $EXTERNAL_NET any -> $SMTP_SERVERS 25",
    )
    assert m.app == "smtp"
    msgs = rule_messages(m, 1)
    assert msgs[0] == (False, GREETING["smtp"]) and msgs[1][1].startswith(b"MAIL")
    assert b"EHLO" not in _client(msgs)


def test_smtp_command_after_ehlo_and_mail_content_in_a_message() -> None:
    hdr = "alert smtp $EXTERNAL_NET any -> $SMTP_SERVERS 25"
    cmd = rule_messages(
        _model('flow:established,to_server; content:"VRFY "; content:"root";', hdr), 1
    )
    assert cmd[1] == (True, b"EHLO client.example.com\r\n") and cmd[3][1].startswith(b"VRFY ")
    body = rule_messages(_model('flow:established,to_server; content:"NTG-BODY-MARK";', hdr), 1)
    client = _client(body)
    assert client.index(b"DATA\r\n") < client.index(b"NTG-BODY-MARK") < client.index(b"\r\n.\r\n")
    assert (False, b"354 Start mail input; end with <CRLF>.<CRLF>\r\n") in body


def test_pop3_retr_carries_server_content_as_a_message() -> None:
    msgs = dialogue("pop3", b"X-Mark: 1", False)
    assert (True, b"RETR 1\r\n") in msgs
    retr = [d for fc, d in msgs if not fc and b"X-Mark" in d][0]
    assert retr.startswith(b"+OK %d octets\r\n" % len(b"X-Mark: 1\r\n")) and retr.endswith(
        b"\r\n.\r\n"
    )


def test_imap_starts_with_the_capability_command_suricata_detects() -> None:
    msgs = dialogue("imap", b"LOGIN aaaa", True)
    assert msgs[1] == (True, b"1 capability\r\n")
    assert (True, b"2 LOGIN aaaa secret\r\n") in msgs  # LOGIN completed with a password


def test_raw_tcp_rule_on_a_well_known_port_speaks_its_protocol() -> None:
    for port, app in ((21, "ftp"), (25, "smtp"), (110, "pop3"), (143, "imap")):
        m = _model(
            'flow:established,to_server; content:"X";',
            f"alert tcp $EXTERNAL_NET any -> $HOME_NET {port}",
        )
        assert m.app == app
    assert (
        _model('flow:established,to_server; content:"X";', "alert tcp any any -> any [21,22]").app
        is None
    )
    assert _model('content:"X";', "alert udp any any -> any 5060").app == "sip"


def test_dns_over_tcp_messages_carry_their_length() -> None:
    m = _model(
        'flow:established,to_server; dns.query; content:"evil.example";',
        "alert tcp any any -> any 53",
    )
    assert (m.app, m.proto) == ("dns", "tcp")
    for _fc, data in rule_messages(m, 7):
        assert struct.unpack("!H", data[:2])[0] == len(data) - 2
        assert struct.unpack("!H", data[2:4])[0] == 7
    assert _model('dns.query; content:"x";', "alert dns any any -> any any").proto == "udp"


def test_sip_buffers_fill_request_and_response() -> None:
    req = _model(
        'sip.method; content:"INVITE"; sip.uri; content:"@pbx.example";',
        "alert sip any any -> any any",
    )
    (c1, request), (c2, response) = rule_messages(req, 3)
    assert (c1, c2) == (True, False) and req.proto == "udp"
    line = request.split(b"\r\n", 1)[0]
    assert (
        line.startswith(b"INVITE sip:") and b"@pbx.example" in line and line.endswith(b" SIP/2.0")
    )
    assert b"Content-Length: 0\r\n\r\n" in request and response.startswith(b"SIP/2.0 200 OK\r\n")
    resp = _model(
        'sip.stat_code; content:"486"; sip.stat_msg; content:"Busy Here";',
        "alert sip any any -> any any",
    )
    assert not resp.to_server
    (_c, _r), (_s, response) = rule_messages(resp, 3)
    assert response.startswith(b"SIP/2.0 486 Busy Here\r\n")


def test_sip_body_is_counted_in_content_length() -> None:
    msg = sip_request(b"INVITE", None, None, b"v=0\r\nm=audio 4000 RTP/AVP 0\r\n")
    head, body = msg.split(b"\r\n\r\n", 1)
    assert b"Content-Length: %d" % len(body) in head and b"Content-Type: application/sdp" in head


def test_sessions_carry_their_intended_protocol(tmp_path) -> None:
    models = [
        _model('flow:established,to_server; content:"X";'),
        _model('content:"Y";', "alert udp any any -> any 7000"),
        _model('flags:S; content:"Z";', "alert tcp any any -> any 80"),
    ]
    res = synthesize(models, tmp_path / "a.pcap", tmp_path / "a.json")
    assert [s.app for s in res.sessions] == ["ftp", "udp", "tcp"]
    assert isinstance(res.sessions[0], Session) and res.sessions[0].as_dict()["app"] == "ftp"
    assert '"app": "ftp"' in (tmp_path / "a.json").read_text()


def test_sip_status_code_gets_three_digits_and_sip_over_tcp_is_unsupported() -> None:
    m = _model(
        'flow:to_client; sip.stat_code; content:"4"; startswith;', "alert udp any 5060 -> any any"
    )
    (_c, _r), (_s, response) = rule_messages(m, 1)
    assert response.startswith(b"SIP/2.0 400 ")
    tcp = _model(
        'flow:to_server,established; sip.method; content:"OPTIONS";',
        "alert tcp any any -> any 5060",
    )
    assert not tcp.supported and "UDP only" in tcp.reasons[0]
