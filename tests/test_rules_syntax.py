"""The rule splitter and the option semantics, on small texts (no IDS needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from idsrules.layout import build_buffer, verify
from idsrules.regex_example import example
from idsrules.semantics import analyze, choose_port, decode_content
from idsrules.syntax import parse_rule_text, read_rules, unquote


def test_malformed_rules_are_reported_with_file_line_and_skipped(tmp_path: Path) -> None:
    f = tmp_path / "bad.rules"
    f.write_text(
        "# a comment\n"
        '#alert tcp any any -> any any (msg:"disabled"; sid:1;)\n'
        'alert tcp any any -> any any (msg:"ok"; content:"a\\;b"; sid:2;)\n'
        'alert tcp any any any -> any (msg:"bad header"; sid:3;)\n'
        'alert tcp any any -> any any (msg:"unterminated; sid:4;)\n'
        'alert tcp any any -> any any (msg:"no sid";)\n'
        'alert tcp any any -> any any (msg:"multi"; \\\n'
        '  content:"x"; sid:5;)\n'
    )
    rules, problems = read_rules(f)
    assert [r.sid for r in rules] == [2, 5]
    assert [r.line for r in rules] == [3, 7]
    assert [p.line for p in problems] == [4, 5, 6]
    assert all(str(p).startswith(f"{f}:") for p in problems)
    assert "sid" in problems[2].message
    assert unquote(rules[0].first("content")) == "a;b"


def test_snort3_service_rule_and_sticky_buffers() -> None:
    r = parse_rule_text(
        'alert http (msg:"s3"; flow:to_server,established; http_uri; '
        'content:"/x.php",fast_pattern,nocase; content:"id=",distance 0; '
        "service:http; sid:7; rev:1;)"
    )
    assert r.is_service_rule and r.proto == "http"
    m = analyze(r)
    assert m.supported, m.reasons
    assert [c.data for c in m.buffers["http.uri"]] == [b"/x.php", b"id="]
    assert m.buffers["http.uri"][0].nocase and m.buffers["http.uri"][1].distance == 0


def test_legacy_modifier_moves_the_content_into_its_buffer() -> None:
    m = analyze(
        parse_rule_text('alert tcp any any -> any 80 (content:"/a"; http_uri; content:"b"; sid:9;)')
    )
    assert [c.data for c in m.buffers["http.uri"]] == [b"/a"]
    assert [c.data for c in m.buffers["pkt"]] == [b"b"]


def test_unknown_keyword_makes_the_rule_unsupported_with_reason() -> None:
    m = analyze(
        parse_rule_text('alert tcp any any -> any any (content:"a"; frobnicate:3; sid:10;)')
    )
    assert not m.supported and m.unknown == ["frobnicate"]


def test_content_decoding_and_ports() -> None:
    assert decode_content('GET |20 2f|x\\"y') == b'GET  /x"y'
    assert choose_port("![0:1023,5000:6000]", [80, 5555]) not in range(0, 1024)
    assert choose_port("$HTTP_PORTS", [8080]) == 80
    with pytest.raises(ValueError):
        decode_content("|0|")


def test_layout_satisfies_positions_and_pcre() -> None:
    m = analyze(
        parse_rule_text(
            'alert tcp any any -> any any (content:"AB"; offset:3; depth:5; content:"CD"; distance:1; within:4; '
            'pcre:"/^x\\d{3}/R"; sid:11;)'
        )
    )
    buf = build_buffer(m.buffers["pkt"])
    assert verify(buf, m.buffers["pkt"])
    assert buf.index(b"AB") >= 3 and b"CD" in buf
    assert not verify(b"ABxxCD", m.buffers["pkt"])


def test_regex_example_matches() -> None:
    import re

    for pat in (r"^/[a-z]{3,}\.php\?id=\d+$", r"(?:foo|bar)\s+\x41[^\r\n]{2}", r"(?<n>ab)\k<n>"):
        s = example(pat)
        assert re.search(pat.replace("(?<n>", "(?P<n>").replace("\\k<n>", "(?P=n)").encode(), s), (
            pat,
            s,
        )
