"""Application-level evasion variants (idsrules/evasion/httpenc.py, lines.py) and the yardstick
they are labelled with (appview.meaning: what the server application reads): every variant
differs in bytes, the ones a decode-once server reads as the same request mean the same, and
hostile input (a huge chunk, a gzip bomb) ends in an error, never a hang or a huge allocation.

The other classes: tests/test_evasion_variants.py; the live labels: tests/test_ids_hostlabel.py.
"""

from __future__ import annotations

import gzip
import select
import shutil
import socket
import subprocess
import warnings
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idsrules.evasion import CLASSES, variants
from idsrules.evasion.appview import MAX_BODY, TooLarge, meaning, read_requests
from idsrules.evasion.model import (
    plain_plan,
    plan_from_dict,
    plan_to_dict,
    reached,
    render,
)
from ntgcore import packets as P
from testbed.ids.evasion_host import (
    APP_PROBES,
    PROBE_SID,
    probe_items,
    probe_messages,
    probe_rules,
)
from testbed.ids.hostlabel import label_live
from testbed.ids.suricata import run_offline

BODY = b"cmd=" + b"id;uname -a;" * 20
POST = (
    b"POST /cgi-bin/run.cgi?x=cat%20/etc/passwd&a=b+c HTTP/1.1\r\nHost: h.example\r\n"
    b"Content-Type: application/x-www-form-urlencoded\r\n"
    + b"Content-Length: %d\r\n\r\n" % len(BODY)
    + BODY
)
GET = b"GET /admin/config.php HTTP/1.1\r\nHost: h.example\r\nUser-Agent: t\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
HTTP = plain_plan("tcp", [(True, POST), (False, OK), (True, GET), (False, OK)], 3)
SAME = {"http-chunked", "http-gzip", "http-percent", "http-path", "http-case", "http-lf"}
OTHER = {"http-double-percent", "http-unicode"}  # other paths for a server that decodes once
FTP = plain_plan("tcp", probe_messages("ftp"))
SMTP = plain_plan("tcp", probe_messages("smtp"))


def by_name(plan, cls):
    return {v.variant: v for v in variants(plan, [cls], 7)}


def test_http_variants_differ_in_bytes_and_decode_as_named():
    got = by_name(HTTP, "http-encoding")
    assert set(got) == SAME | OTHER
    for name, v in got.items():
        assert v.app == "http" and v.meant == HTTP.client_stream(), name
        assert v.client_stream() != HTTP.client_stream(), name
        assert [s.data for s in v.steps if not s.from_client] == [OK, OK]  # answers as they were
        assert reached(v, v.client_stream()) == (name in SAME), name
        assert not reached(v, v.client_stream()[:-1]), name  # a byte short: not the request
        assert plan_from_dict(plan_to_dict(v)) == v, name
    assert variants(HTTP, ["http-encoding"], 7) == variants(HTTP, ["http-encoding"], 7)
    chunked = got["http-chunked"].client_stream()
    assert b"Transfer-Encoding: chunked" in chunked and b"Content-Length" not in chunked[:300]
    gz = got["http-gzip"].client_stream()
    assert b"Content-Encoding: gzip" in gz and BODY not in gz
    assert b"/%63%67%69%2D%62%69%6E/" in got["http-percent"].client_stream()
    assert b"/%2563%2567" in got["http-double-percent"].client_stream()
    assert b"/%u0063%u0067" in got["http-unicode"].client_stream()
    assert b"/.//ntg" in got["http-path"].client_stream()
    assert b"HOST: h.example" in got["http-case"].client_stream()
    assert b"\r" not in got["http-lf"].client_stream().split(b"\n\n")[0]


def test_a_request_without_a_body_gets_no_body_variant_and_non_http_none():
    get_only = plain_plan("tcp", [(True, GET), (False, OK)], 1)
    assert set(by_name(get_only, "http-encoding")) == (SAME | OTHER) - {"http-chunked", "http-gzip"}
    assert variants(FTP, ["http-encoding"], 1) == []
    tls = plain_plan("tcp", [(True, b"\x16\x03\x01\x00\x05hello"), (False, b"\x16\x03")])
    app_classes = {"http-encoding", "line-variants"}
    assert not {v.cls for v in variants(tls, list(CLASSES), 1)} & app_classes
    assert variants(plain_plan("udp", [(True, GET)]), ["http-encoding", "line-variants"], 1) == []


def test_the_wire_rendering_is_read_back_by_tshark(tmp_path: Path):
    """tshark (a real HTTP dissector) de-chunks and gunzips the body variants to the plain body,
    and sees the encoded targets as sent."""
    if not shutil.which("tshark"):
        pytest.skip("tshark is not installed")
    got = by_name(HTTP, "http-encoding")
    names = ["http-chunked", "http-gzip", "http-percent"]
    pcap = tmp_path / "app.pcap"
    with open(pcap, "wb") as f:
        w = P.PcapWriter(f)
        for k, name in enumerate(names):
            for i, (_fc, frame) in enumerate(
                render(got[name], f"198.19.0.{k + 1}", "198.18.0.1", 40000, 80, k + 1)
            ):
                w.write(1_700_000_000_000_000_000 + k * 10**9 + i * 1000, frame)
    out = subprocess.run(
        ["tshark", "-n", "-r", str(pcap), "-Y", "http.request.method == POST", "-T", "fields"]
        + ["-e", "ip.src", "-e", "http.request.uri", "-e", "http.file_data"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    rows = {r.split("\t")[0]: r.split("\t")[1:] for r in out.splitlines()}
    assert len(rows) == 3
    for k in (1, 2):  # chunked, gzip: the plain body after decoding
        assert rows[f"198.19.0.{k}"] == [
            "/cgi-bin/run.cgi?x=cat%20/etc/passwd&a=b+c",
            BODY.decode(),
        ]
    assert rows["198.19.0.3"][0].startswith("/%63%67%69%2D")


def test_meaning_decodes_once_normalises_paths_and_keeps_the_method():
    m = meaning("http", b"GET /a/%2e%2e/b//c/./d?q=%41+b HTTP/1.1\r\nhOsT: x\r\n\r\n")
    assert m == (("GET", "/b/c/d", (("q", "A b"),), "HTTP/1.1", (("host", "x"),), b""),)
    lower = meaning("http", b"get /b/c/d?q=A+b HTTP/1.1\r\nHost: x\r\n\r\n")
    assert lower[0][0] == "get" and lower != m  # another method
    assert meaning("http", b"GET /x%252e HTTP/1.1\r\n\r\n")[0][1] == "/x%2e"  # once, not twice
    # pipelined requests, a chunk extension and a trailer, deflate in raw and zlib form
    chunked = (
        b"POST /u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    raw = zlib.compressobj(wbits=-15)
    deflated = raw.compress(b"abcde") + raw.flush()
    for body in (deflated, zlib.compress(b"abcde")):
        plain = b"POST /u HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcde"
        coded = b"POST /u HTTP/1.1\r\nContent-Encoding: deflate\r\nContent-Length: %d\r\n\r\n"
        assert meaning("http", coded % len(body) + body) == meaning("http", plain)
        assert meaning("http", chunked + GET) == meaning("http", plain + GET)
    reqs, problem = read_requests(POST + GET)
    assert problem == "" and [r.method for r in reqs] == ["POST", "GET"]
    assert reqs[0].body == BODY and reqs[0].raw_head + reqs[0].raw_body == POST


@pytest.mark.parametrize(
    "stream, stop",
    [
        (b"GET / HTTP/1.1\r\nHost: h\r\n", "headers cut"),
        (b"GET / HTTP/1.1\r\n", "headers cut"),
        (b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc", "body cut"),
        (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "bad Content-Length '-1'"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size b'zz'"),
        (b"NOT HTTP AT ALL\r\n\r\n", "request refused: 400"),
        (b"GET / HTTP/1.1\r\nContent-Encoding: br\r\n\r\n", "content coding 'br' not read"),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", "request line too long"),
    ],
)
def test_broken_requests_stop_the_reading_with_a_reason(stream, stop):
    m = meaning("http", stream)
    assert m[-1][0] == "stopped" and m[-1][1].startswith(stop)


def test_hostile_sizes_are_refused_not_read():
    ten_mb = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\nabc" % (10 << 20)
    assert meaning("http", ten_mb)[-1] == ("stopped", "chunked body cut in a chunk")
    for size in (MAX_BODY + 1, 1 << 62):
        with pytest.raises(TooLarge):
            meaning("http", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % size)
        with pytest.raises(TooLarge):
            meaning("http", b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % size)
    digits = b"POST / HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n"
    with pytest.raises(TooLarge):  # int() alone would raise ValueError past 4,300 digits
        meaning("http", digits)
    assert not reached(by_name(HTTP, "http-encoding")["http-gzip"], digits)
    bomb = gzip.compress(bytes(MAX_BODY + 4096), mtime=0)  # ~16 KiB that inflate to 16 MiB+
    head = b"POST / HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb)
    with pytest.raises(TooLarge):
        meaning("http", head + bomb)
    assert not reached(by_name(HTTP, "http-encoding")["http-gzip"], head + bomb)
    with pytest.raises(ValueError, match="unknown application 'gopher'"):
        meaning("gopher", b"")


def test_line_variants_of_ftp_and_smtp():
    for plan, app in ((FTP, "ftp"), (SMTP, "smtp")):
        got = by_name(plan, "line-variants")
        assert set(got) == {"line-lf", "line-case", "line-space", "line-tab", "line-split"}
        for name, v in got.items():
            assert plan_from_dict(plan_to_dict(v)) == v
            if name == "line-split":  # the same bytes, each command line in two segments
                assert v.client_stream() == plan.client_stream() and not v.app
                segs = [s for st in v.steps if st.from_client for s in st.segs]
                assert b"".join(s.data for s in segs) == plan.client_stream()
                assert segs[0].data == b"USER ano" if app == "ftp" else b"EHLO pro"
                continue
            assert v.app == app and v.meant == plan.client_stream(), name
            assert v.client_stream() != plan.client_stream(), name
            # smtpd's rule: CRLF ends a line, a tab is part of the verb
            assert reached(v, v.client_stream()) == (name in ("line-case", "line-space")), name
    smtp = by_name(SMTP, "line-variants")
    # the message is not a command: its lines keep their case, its dot-stuffing is read
    assert b"Subject: probe\r\n" in smtp["line-case"].client_stream()
    assert b"rcpt TO:" in smtp["line-case"].client_stream()
    assert ("message", b"Subject: probe\r\n\r\nline one\r\n.a dot line\r\n") in meaning(
        "smtp", SMTP.client_stream()
    )
    assert b"\r\n" not in smtp["line-lf"].client_stream()
    assert variants(HTTP, ["line-variants"], 1) == []


def test_the_probes_exercise_the_application_classes():
    items = probe_items(["http-encoding", "line-variants"])
    names = [(p.variant, port) for p, port in items[4]]
    assert ("http-chunked", 8080) in names and ("http-gzip", 8080) in names
    for app in APP_PROBES["line-variants"]:
        port = {"ftp": 21, "smtp": 25}[app]
        assert ("plain", port) in names and ("line-lf", port) in names
    assert 6 not in items  # no IPv6 class chosen


_path_byte = st.sampled_from(list(b"abcXYZ019-._~!$'()*,;:@/%+ \xe9\xc3\xa9"))
_query_byte = st.sampled_from(list(b"abz09-._~=&+%/?\xe9"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path=st.lists(_path_byte, max_size=24).map(bytes),
    query=st.none() | st.lists(_query_byte, max_size=16).map(bytes),
    body=st.binary(max_size=300),
    name=st.sampled_from([b"Host", b"X-Forwarded-For", b"content-type", b"X-a"]),
)
def test_the_same_request_whatever_the_target_body_and_headers(path, query, body, name):
    """Any origin-form target (raw bytes, stray %, existing escapes), any body: the variants a
    decode-once server reads as the same request do mean the same."""
    target = b"/" + path.replace(b" ", b"%20") + (b"?" + query if query is not None else b"")
    req = b"POST " + target + b" HTTP/1.1\r\n" + name + b": v\r\n"
    req += b"Content-Length: %d\r\n\r\n" % len(body) + body
    plan = plain_plan("tcp", [(True, req), (False, OK)], 1)
    got = by_name(plan, "http-encoding")
    assert meaning("http", req)[0][0] == "POST"  # the plain request reads whole
    for variant in SAME & set(got):
        assert reached(got[variant], got[variant].client_stream()), (variant, req)


class _Mailbox:
    """The server object smtpd's channel hands a message to."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []

    def process_message(self, peer, mailfrom, rcpttos, data, **kw):
        self.messages.append(data)


def smtpd_view(stream: bytes, monkeypatch) -> tuple[list[str], list[bytes]]:
    """The replies and messages of the standard library's smtpd (Python <= 3.11) reading
    `stream`: its real line splitting and command parsing, over a socket pair."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        smtpd = pytest.importorskip("smtpd")
    monkeypatch.setattr(smtpd.socket, "getfqdn", lambda: "mx.test")  # no DNS lookup

    base: Any = smtpd.SMTPChannel

    class Channel(base):
        replies: list[str] = []

        def push(self, msg):
            self.replies.append(msg)

    box = _Mailbox()
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ch = Channel(box, theirs, ("198.19.0.1", 40000), map={})
        ch.replies = []
        ours.sendall(stream)
        while select.select([theirs], [], [], 0)[0]:
            ch.handle_read()
    return ch.replies, box.messages


def test_the_smtp_rule_is_what_stdlib_smtpd_does(monkeypatch):
    """meaning("smtp") says two streams are the same exactly when smtpd answers them alike."""
    plain_replies, plain_mail = smtpd_view(SMTP.client_stream(), monkeypatch)
    assert plain_replies[-1].startswith("221") and plain_mail == [
        b"Subject: probe\n\nline one\n.a dot line"  # smtpd joins the lines with LF
    ]
    for name, v in by_name(SMTP, "line-variants").items():
        replies, mail = smtpd_view(v.client_stream(), monkeypatch)
        same = (replies, mail) == (plain_replies, plain_mail)
        assert same == reached(v, v.client_stream()), (name, replies)


def test_live_the_host_reads_the_variant_bytes_and_the_label_is_their_meaning(root, tmp_path):
    """The FTP and SMTP probes (the server speaks first) and their line variants, and the HTTP
    probe's encodings, sent live into the Linux host: it reads each variant's bytes whole, and
    the label is what those bytes mean to the server application."""
    items = [
        (p, port)
        for p, port in probe_items(["http-encoding", "line-variants"])[4]
        if p.proto == "tcp"
    ]
    res = label_live(items, tmp_path, ip_version=4)
    labels = {}
    for (plan, port), o in zip(items, res.outcomes):
        assert o.received == plan.client_stream(), (plan.variant, port, o.detail)
        labels.setdefault(plan.variant, set()).add(reached(plan, o.received))
    assert labels == {
        "plain": {True},
        **{name: {True} for name in SAME},
        **{name: {False} for name in OTHER},
        "line-case": {True},
        "line-space": {True},
        "line-split": {True},
        "line-lf": {False},
        "line-tab": {False},
    }


@settings(max_examples=150, deadline=None)
@given(
    head=st.sampled_from([b"", b"POST / HTTP/1.1\r\n", b"GET /x HTTP/1.1\r\nHost: h\r\n"]),
    junk=st.binary(max_size=400),
    framing=st.sampled_from(
        [b"", b"Transfer-Encoding: chunked\r\n\r\n", b"Content-Encoding: gzip\r\n", b"\r\n"]
    ),
)
def test_any_bytes_give_a_value_or_too_large_never_a_crash(head, junk, framing):
    stream = head + framing + junk
    for app in ("http", "smtp", "ftp"):
        try:
            assert isinstance(meaning(app, stream), tuple)
        except TooLarge:
            assert app == "http"


def test_a_plan_written_before_the_app_fields_reads_back_plain():
    d = plan_to_dict(HTTP)
    del d["app"], d["meant"]
    old = plan_from_dict(d)
    assert old == HTTP and old.app == "" and reached(old, b"xx" + HTTP.client_stream())


def test_suricata_loads_the_probe_rules_and_each_fires_on_its_plain_probe(suricata, tmp_path):
    """The live table's probe rules: every one loads and alerts on its own plain probe (so a
    missing alert on a variant is the variant's doing); the HTTP ones read the decoded request."""
    probes = {"tcp": 8080, "ftp": 21, "smtp": 25}
    pcap = tmp_path / "probes.pcap"
    with open(pcap, "wb") as f:
        w = P.PcapWriter(f)
        t = 1_700_000_000_000_000_000
        for k, (app, port) in enumerate(probes.items()):
            plan = plain_plan("tcp", probe_messages(app), 1)
            for _fc, frame in render(plan, f"198.19.0.{k + 1}", "198.18.0.1", 40000, port, k + 1):
                w.write(t, frame)
                t += 20_000
            t += 10**9
    (tmp_path / "probe.rules").write_text(probe_rules())
    res = run_offline(pcap, [tmp_path / "probe.rules"], tmp_path / "suricata")
    assert not res.load_errors and res.rules_failed in (0, None)
    got: dict[str, set[int]] = {}
    for a in res.alerts:
        got.setdefault(P.short_address(a.src), set()).add(a.sid)
    assert got == {
        "198.19.0.1": {PROBE_SID["tcp"], PROBE_SID["http-uri"], PROBE_SID["http-body"]},
        "198.19.0.2": {PROBE_SID["ftp"]},
        "198.19.0.3": {PROBE_SID["smtp"]},
    }
