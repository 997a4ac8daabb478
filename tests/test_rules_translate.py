"""Snort 3 -> Suricata 7 rule translation (generators/rules/translate.py).

Small inline rules are checked against the expected Suricata text, then all of those expected
texts are loaded by the real Suricata (`suricata -T`) so the expectations themselves are valid
Suricata 7; a crafted HTTP session checks that the translated rules alert in Suricata (ranges,
buffers, flowbits); and the translated community ruleset must load without a single refused rule.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import skip_or_fail

from idsrules.syntax import parse_rule_text
from idsrules.translate import pattern_length, size_expr, translate_rule
from testbed.ids.suricata import check_load, parse_test_output, translate_file

needs_suricata = pytest.mark.usefixtures("suricata")

H = "alert tcp $EXTERNAL_NET any -> $HOME_NET $HTTP_PORTS"

# (Snort 3 rule, expected Suricata 7 rule)
CASES = {
    "sticky_buffers": (
        f'{H} ( msg:"t1"; flow:to_server,established; http_uri; content:"/a.php",fast_pattern,nocase; '
        'http_header; content:"X-Y|3A| z"; http_client_body; content:"q="; http_cookie; content:"s=1"; '
        'http_raw_uri; content:"%2e"; http_method; content:"POST"; service:http; sid:1000001; rev:2; )',
        f'{H} (msg:"t1"; flow:to_server,established; http.uri; content:"/a.php"; fast_pattern; nocase; '
        'http.header; content:"X-Y|3A| z"; http.request_body; content:"q="; http.cookie; content:"s=1"; '
        'http.uri.raw; content:"%2e"; http.method; content:"POST"; sid:1000001; rev:2; metadata:service http;)',
    ),
    "response_buffers": (
        'alert tcp $EXTERNAL_NET $HTTP_PORTS -> $HOME_NET any ( msg:"t2"; flow:to_client,established; '
        'http_stat_code; content:"200"; http_stat_msg; content:"OK"; file_data; content:"<html",depth 5; '
        'pkt_data; content:"HTTP/1."; metadata:policy balanced-ips drop,ruleset community; service:http; '
        "classtype:misc-activity; sid:1000002; rev:1; )",
        'alert tcp $EXTERNAL_NET $HTTP_PORTS -> $HOME_NET any (msg:"t2"; flow:to_client,established; '
        'http.stat_code; content:"200"; http.stat_msg; content:"OK"; file.data; content:"<html"; depth:5; '
        'pkt_data; content:"HTTP/1."; metadata:policy balanced-ips drop,ruleset community, service http; '
        "classtype:misc-activity; sid:1000002; rev:1;)",
    ),
    "content_modifiers": (
        'alert tcp any any -> any 9 ( msg:"t3"; content:"abc",offset 2,depth 5; '
        'content:!"def",distance 1,within 10,nocase; content:"|00 01 02 03|",fast_pattern,'
        "fast_pattern_offset 1,fast_pattern_length 2; sid:1000003; )",
        'alert tcp any any -> any 9 (msg:"t3"; content:"abc"; offset:2; depth:5; content:!"def"; '
        'distance:1; within:10; nocase; content:"|00 01 02 03|"; fast_pattern:1,2; sid:1000003;)',
    ),
    "service_header": (
        'alert http ( msg:"t4"; flow:to_server,established; http_uri; content:"/x"; sid:1000004; )',
        'alert http any any -> any any (msg:"t4"; flow:to_server,established; http.uri; content:"/x"; '
        "sid:1000004; metadata:service http;)",
    ),
    "service_without_parser": (
        'alert pop3 ( msg:"t5"; content:"USER "; sid:1000005; )',
        'alert tcp any any <> any 110 (msg:"t5"; content:"USER "; sid:1000005; metadata:service pop3;)',
    ),
    "pcre_and_regex": (
        'alert tcp any any -> any 80 ( msg:"t6"; flow:to_server; http_uri; pcre:"/\\/[a-f0-9]{8}\\.php/Ri"; '
        'regex:"/x+y/s"; sid:1000006; )',
        'alert tcp any any -> any 80 (msg:"t6"; flow:to_server; http.uri; pcre:"/\\/[a-f0-9]{8}\\.php/Ri"; '
        'pcre:"/x+y/s"; sid:1000006;)',
    ),
    "byte_keywords": (
        'alert tcp any any -> any 111 ( msg:"t7"; content:"|00 00 00 01|",depth 4; '
        "byte_test:4,>,1024,0,relative,little; byte_jump:4,4,relative,align; "
        'byte_extract:2,0,len,relative; content:"A",within len; isdataat:!10,relative; '
        "byte_test:1,!&,128,6,relative; sid:1000007; )",
        'alert tcp any any -> any 111 (msg:"t7"; content:"|00 00 00 01|"; depth:4; '
        "byte_test:4,>,1024,0,relative,little; byte_jump:4,4,relative,align; "
        'byte_extract:2,0,len,relative; content:"A"; within:len; isdataat:!10,relative; '
        "byte_test:1,!&,128,6,relative; sid:1000007;)",
    ),
    "flowbits": (
        'alert tcp any any -> any 80 ( msg:"t8"; flowbits:set,k.a&k.b; flowbits:isset,k.c|k.d; '
        "flowbits:noalert; sid:1000008; )",
        'alert tcp any any -> any 80 (msg:"t8"; flowbits:set,k.a; flowbits:set,k.b; '
        "flowbits:isset,k.c|k.d; flowbits:noalert; sid:1000008;)",
    ),
    "sizes_and_flags": (
        'alert tcp any any -> any 80 ( msg:"t9"; flow:to_server,established; http_uri; bufferlen:11<=>20; '
        "http_header; bufferlen:>=7; sid:1000009; )",
        'alert tcp any any -> any 80 (msg:"t9"; flow:to_server,established; http.uri; bsize:10<>21; '
        "http.header; bsize:>6; sid:1000009;)",
    ),
    "packet_keywords": (
        'alert tcp any any -> any 80 ( msg:"t10"; flags:12FS,12; bufferlen:5<=>9; seq:0; ack:0; '
        'tag:session,packets 5; detection_filter:track by_src,count 5,seconds 2; rem:"ignored"; sid:1000010; )',
        'alert tcp any any -> any 80 (msg:"t10"; flags:CEFS,CE; dsize:4<>10; seq:0; ack:0; '
        "tag:session,5,packets; detection_filter:track by_src,count 5,seconds 2; sid:1000010;)",
    ),
    "dcerpc": (
        'alert tcp any any -> any 445 ( msg:"t11"; flow:to_server,established; '
        'dce_iface:uuid 4b324fc8-1670-01d3-1278-5a47bf6ee188; dce_opnum:"1-2"; dce_stub_data; '
        'content:"|00 00|",depth 2; service:netbios-ssn; sid:1000011; )',
        'alert tcp any any -> any 445 (msg:"t11"; flow:to_server,established; '
        "dcerpc.iface:4b324fc8-1670-01d3-1278-5a47bf6ee188; dcerpc.opnum:1-2; dcerpc.stub_data; "
        'content:"|00 00|"; depth:2; sid:1000011; metadata:service netbios-ssn;)',
    ),
    "sip_and_vars": (
        'alert udp $EXTERNAL_NET any -> $SIP_SERVERS $SIP_PORTS ( msg:"t12"; flow:to_server; '
        'content:"INVITE",nocase; sip_method:invite; sid:1000012; )',
        'alert udp $EXTERNAL_NET any -> $HOME_NET [5060,5061,5600] (msg:"t12"; flow:to_server; '
        'content:"INVITE"; nocase; sid:1000012; sip.method; content:"INVITE"; bsize:6;)',
    ),
    "ssl": (
        'alert tcp any any -> any 443 ( msg:"t13"; flow:to_server,established; ssl_state:client_hello; '
        'ssl_version:sslv2; content:"|16 03|",depth 2; service:ssl; sid:1000013; )',
        'alert tcp any any -> any 443 (msg:"t13"; flow:to_server,established; ssl_state:client_hello; '
        'ssl_version:sslv2; content:"|16 03|"; depth:2; sid:1000013; metadata:service ssl;)',
    ),
}

UNTRANSLATABLE = {
    'alert udp any any -> any 5060 ( msg:"u1"; sip_header; content:"From"; sid:1000101; )': "keyword sip_header",
    'alert tcp any any -> any 80 ( msg:"u2"; js_data; content:"eval("; sid:1000102; )': "keyword js_data",
    'alert file ( msg:"u3"; file_data; content:"MZ"; sid:1000103; )': "Snort 3 file rule",
    'alert tcp any any -> any 80 ( msg:"u4"; http_uri; bufferlen:>5,relative; sid:1000104; )': "bufferlen: relative",
    'alert tcp any any -> any 80 ( msg:"u5"; frobnicate:3; sid:1000105; )': "keyword frobnicate: unknown",
    'alert tcp any any -> any 80 ( msg:"u6"; ttl:1; http_uri; content:"x"; sid:1000106; )': "packet-header match combined with an application-layer buffer",
    'alert tcp any any -> any 80 ( msg:"u7"; http_header:field user-agent; content:"x"; sid:1000107; )': "sub-field",
    'alert tcp any any -> any 80 ( msg:"u8"; sd_pattern:"credit_card"; sid:1000108; )': "keyword sd_pattern",
    'alert tcp any any -> any 502 ( msg:"u9"; modbus_func:read_coils; sid:1000109; )': "keyword modbus_func",
    'alert tcp any any -> any 80 ( msg:"u10"; dsize:>5; bufferlen:<30; sid:1000110; )': "one dsize",
    'alert tcp any any -> any 80 ( msg:"u11"; http_uri; bufferlen:4<>5; sid:1000111; )': "empty range",
    'alert tcp any any -> any 80 ( msg:"u12"; content:"ab",fast_pattern,fast_pattern_length x; sid:1000112; )': "value not understood",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_translation_text(name):
    snort, expected = CASES[name]
    tr = translate_rule(parse_rule_text(snort))
    assert tr.ok, tr.reason
    assert tr.text == expected
    assert tr.sid == parse_rule_text(expected).sid


def test_app_header_mode():
    snort = (
        'alert tcp $EXTERNAL_NET any -> $SMTP_SERVERS 25 ( msg:"a"; flow:to_server,established; '
        'content:"MAIL FROM"; service:smtp; sid:1000200; )'
    )
    rule = parse_rule_text(snort)
    assert translate_rule(rule).text.startswith("alert tcp $EXTERNAL_NET any -> $SMTP_SERVERS 25 (")
    assert translate_rule(rule, app_header=True).text.startswith(
        "alert smtp $EXTERNAL_NET any -> $SMTP_SERVERS 25 ("
    )
    # two services, or a service Suricata 7 does not parse: the header stays tcp
    for svc in ("ftp-data,http", "pop3"):
        other = parse_rule_text(snort.replace("service:smtp", f"service:{svc}"))
        assert translate_rule(other, app_header=True).text.startswith("alert tcp ")


@pytest.mark.parametrize("snort", sorted(UNTRANSLATABLE))
def test_untranslatable_reason(snort):
    tr = translate_rule(parse_rule_text(snort))
    assert not tr.ok and tr.text is None
    assert UNTRANSLATABLE[snort] in tr.reason


def test_helpers():
    assert pattern_length('"ab|00 01|c\\"d"') == 7
    assert size_expr("5<=>9", "dsize") == "4<>10"
    assert size_expr("5<>9", "dsize") == "5<>9"
    assert size_expr("0<=>9", "dsize") == "<10"
    assert size_expr("<=3", "bufferlen") == "<4"
    assert size_expr("=7", "bufferlen") == "7"


def test_parse_test_output_pairs_errors_with_sids():
    text = (
        "E: detect-content: within argument must be larger than content\n"
        'E: detect: error parsing signature "alert tcp any any -> any any (msg:\\"x\\"; sid:7;)" '
        "from file /r.rules at line 3\n"
        "i: detect: 1 rule files processed. 4 rules successfully loaded, 1 rules failed, 0\n"
    )
    failures, errors, loaded, failed = parse_test_output(text)
    assert failures == {7: ["detect-content: within argument must be larger than content"]}
    assert (loaded, failed) == (4, 1) and len(errors) == 2


@needs_suricata
def test_expected_texts_load_and_refusals_are_attributed(tmp_path):
    """Every expected Suricata text above loads in the real Suricata; a bad rule is named by sid."""
    bad = 'alert tcp any any -> any any (msg:"bad"; content:"abcdef"; within:2; sid:1000999;)'
    rules = tmp_path / "expected.rules"
    rules.write_text("\n".join([exp for _, exp in CASES.values()] + [bad]) + "\n")
    res = check_load(rules, tmp_path / "chk")
    assert set(res.failures) == {1000999}, res.failures
    assert res.failures[1000999] and "error parsing signature" not in res.failures[1000999][0]
    good = tmp_path / "good.rules"
    good.write_text("\n".join(exp for _, exp in CASES.values()) + "\n")
    res = check_load(good, tmp_path / "chk2")
    assert res.exit_code == 0 and res.failures == {}
    assert res.rules_loaded == len(CASES) and res.rules_failed == 0


def _http_session_pcap(path: Path) -> None:
    """One HTTP request/response over a TCP handshake, with scapy (documentation addresses)."""
    from scapy.all import IP, TCP, Ether, wrpcap

    c, s, cp, sp = "198.19.0.10", "198.18.0.10", 40000, 80
    req = (
        b"POST /abcdefghij HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: tester\r\n"
        b"X-Probe: yes\r\nContent-Length: 8\r\n\r\nid=12345"
    )
    rsp = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    e1, e2 = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02"),
        Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01"),
    )
    cs, ss = 1000, 5000
    pkts = [
        e1 / IP(src=c, dst=s) / TCP(sport=cp, dport=sp, flags="S", seq=cs),
        e2 / IP(src=s, dst=c) / TCP(sport=sp, dport=cp, flags="SA", seq=ss, ack=cs + 1),
        e1 / IP(src=c, dst=s) / TCP(sport=cp, dport=sp, flags="A", seq=cs + 1, ack=ss + 1),
        e1 / IP(src=c, dst=s) / TCP(sport=cp, dport=sp, flags="PA", seq=cs + 1, ack=ss + 1) / req,
        e2
        / IP(src=s, dst=c)
        / TCP(sport=sp, dport=cp, flags="A", seq=ss + 1, ack=cs + 1 + len(req)),
        e2
        / IP(src=s, dst=c)
        / TCP(sport=sp, dport=cp, flags="PA", seq=ss + 1, ack=cs + 1 + len(req))
        / rsp,
        e1
        / IP(src=c, dst=s)
        / TCP(sport=cp, dport=sp, flags="A", seq=cs + 1 + len(req), ack=ss + 1 + len(rsp)),
        e1
        / IP(src=c, dst=s)
        / TCP(sport=cp, dport=sp, flags="FA", seq=cs + 1 + len(req), ack=ss + 1 + len(rsp)),
        e2
        / IP(src=s, dst=c)
        / TCP(sport=sp, dport=cp, flags="FA", seq=ss + 1 + len(rsp), ack=cs + 2 + len(req)),
        e1
        / IP(src=c, dst=s)
        / TCP(sport=cp, dport=sp, flags="A", seq=cs + 2 + len(req), ack=ss + 2 + len(rsp)),
    ]
    for i, p in enumerate(pkts):
        p.time = 1_700_000_000 + i * 0.001
    wrpcap(str(path), pkts)


@needs_suricata
def test_translated_rules_alert_in_suricata(tmp_path):
    """The translated rules keep their meaning: inclusive/exclusive ranges, buffers, flowbits."""
    pytest.importorskip("scapy")
    from testbed.ids.suricata import run_offline

    uri = "/abcdefghij"  # 11 bytes
    snort = [
        # should alert
        f'{H} ( msg:"uri"; flow:to_server,established; http_uri; content:"{uri}",depth 11; '
        'http_header; content:"X-Probe|3A| yes",nocase; http_method; content:"POST"; sid:2000001; )',
        f'{H} ( msg:"incl"; flow:to_server,established; http_raw_uri; bufferlen:11<=>12; sid:2000002; )',
        f'{H} ( msg:"body"; flow:to_server,established; http_client_body; content:"id=",depth 3; '
        'byte_test:5,>,12344,0,relative,string,dec; pcre:"/^\\d{5}$/R"; sid:2000003; )',
        f'{H} ( msg:"set"; flow:to_server,established; http_uri; content:"/abc"; flowbits:set,t.a&t.b; '
        "flowbits:noalert; sid:2000004; )",
        'alert tcp $HOME_NET $HTTP_PORTS -> $EXTERNAL_NET any ( msg:"isset"; flow:to_client,established; '
        'flowbits:isset,t.a; flowbits:isset,t.b; http_stat_code; content:"200"; file_data; '
        'content:"hello"; bufferlen:5; sid:2000005; )',
        # should not alert
        f'{H} ( msg:"excl"; flow:to_server,established; http_raw_uri; bufferlen:11<>13; sid:2000006; )',
        f'{H} ( msg:"depth"; flow:to_server,established; http_uri; content:"bcd",depth 3; sid:2000007; )',
    ]
    src = tmp_path / "snort3.rules"
    src.write_text("\n".join(snort) + "\n")
    out = tmp_path / "suricata.rules"
    rep = translate_file(src, out, check=False)
    assert len(rep.translated) == len(snort)
    pcap = tmp_path / "s.pcap"
    _http_session_pcap(pcap)
    res = run_offline(pcap, [out], tmp_path / "run")
    assert res.load_errors == []
    sids = {a.sid for a in res.alerts}
    assert sids == {2000001, 2000002, 2000003, 2000005}, sids


def test_cli_translate_rules(tmp_path, capsys):
    from testbed.cli import main

    src = tmp_path / "in.rules"
    src.write_text(
        CASES["sticky_buffers"][0]
        + "\n"
        + next(iter(UNTRANSLATABLE))
        + "\n"
        + 'alert tcp any any -> any 80 (msg:"broken"; content:"x";\n'
    )
    out, report = tmp_path / "out.rules", tmp_path / "r.json"
    code = main(
        ["translate-rules", str(src), "-o", str(out), "--report", str(report), "--no-check"]
    )
    assert code == 0
    printed = capsys.readouterr()
    assert "1 translated, 1 untranslatable, 1 malformed" in printed.out
    assert f"{src}:2: sid 1000101: untranslatable: keyword sip_header" in printed.err
    assert f"{src}:3:" in printed.err
    rules = [ln for ln in out.read_text().splitlines() if ln and not ln.startswith("#")]
    assert rules == [CASES["sticky_buffers"][1]]
    doc = json.loads(report.read_text())
    assert doc["translated"] == 1 and doc["untranslatable_rules"][0]["sid"] == 1000101
    assert main(["translate-rules", str(tmp_path / "nope.rules"), "-o", str(out)]) == 2
    assert "no such rule file" in capsys.readouterr().err


@needs_suricata
def test_community_rules_translate_and_load(tmp_path):
    """Every rule we call translatable in the Snort 3 community set loads in Suricata 7."""
    data = os.environ.get("NTG_SHARED_DATA")
    if not data:
        skip_or_fail("NTG_SHARED_DATA is not set (CI sets it to the shared data folder)")
    src = Path(data) / "rules" / "snort3-community.rules"
    if not src.is_file():
        pytest.skip(f"{src} is missing")
    rep = translate_file(src, tmp_path / "community.rules", work_dir=tmp_path / "chk")
    assert rep.total == 4004 and not rep.problems
    assert len(rep.translated) >= 0.99 * rep.total
    assert all(t.reason for t in rep.untranslatable)
    assert rep.load is not None and rep.load.exit_code == 0
    assert rep.load_failures == {}, list(rep.load_failures.items())[:5]
    assert rep.load.rules_loaded == len(rep.translated) and rep.load.rules_failed == 0
