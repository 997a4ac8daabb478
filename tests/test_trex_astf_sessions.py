"""TRex `mode: astf` playing two-way `sessions:` (the kind `testbed learn` writes): each TCP
session entry becomes K representative dialogues per server port (generators/trex/astf_profile.py,
README.md "ASTF mode"); offline the profile's connections are written by astf_offline.py and
read back by tshark; live, the real TRex v3.08 server ($NTG_TREX_DIR) plays them between the two
ends of a veth pair in one namespace, its server side telling the dialogues of one port apart by
the first byte of the client's request (l7_map)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from test_trex_astf import Tcpdump, _flags, astf_ns, needs_client, registered  # noqa: F401
from test_trex_astf_offline import connections, fields

from generators.trex import Trex, TrexSpec
from generators.trex.astf_profile import (
    MAX_CONNECTIONS,
    MAX_DIALOGUES,
    NS,
    build_astf_profile,
    dialogues,
    stratum_means,
)
from generators.trex.stl_profile import build_profile
from ntgcore.errors import GeneratorError
from ntgcore.scenario import Scenario, ScenarioError, parse_scenario
from testbed.endpoints.netns import NetnsEndpoint

ROOT = Path(__file__).resolve().parent.parent
LEARNED = (ROOT / "scenarios" / "learned-web.yaml").read_text()
# the example's `mixed` entry made TCP only (its profile kept), to map both TCP entries
LEARNED_TCP = LEARNED.replace("protocol: {choices: {tcp: 70, udp: 30}}", "protocol: tcp")


def learned(text: str = LEARNED_TCP, *names: str) -> Scenario:
    """The example scenario keeping only the named session entries."""
    s = parse_scenario(text, "learned-web.yaml")
    keep = [e for e in s.sessions if e.name in names]
    return s.model_copy(update={"sessions": keep})


def by_entry(profile, name: str):
    return [t for t in profile.templates if t.label.split(" port ")[0].endswith(f"({name})")]


# ---- offline: the mapping ---------------------------------------------------------------------


def test_the_learned_tcp_entries_become_k_dialogues_per_port_at_the_entrys_rate():
    s = learned(LEARNED_TCP, "web", "mixed")
    p = build_astf_profile(s)
    web_entry, mixed_entry = s.sessions
    for entry, ports in ((web_entry, {443: 0.8, 80: 0.2}), (mixed_entry, {8080: 0.6, 9000: 0.4})):
        ts = by_entry(p, entry.name)
        # K = 8 dialogues (the sizes vary) on each of the two server ports
        assert len(ts) == MAX_DIALOGUES * 2
        assert sum(t.limit for t in ts) == entry.instances
        parts = entry.parts()
        if len(parts) == 1:  # web: the part's rate, 1 / mean arrival
            rate = NS / parts[0].arrival.mean()
        else:  # mixed: a profile of two 100 ms steps, its mean rate over them
            assert len(parts) == 2
            rate = entry.instances / 0.2
        assert sum(t.cps for t in ts) == pytest.approx(rate)
        for port, share in ports.items():
            on = [t for t in ts if t.port == port]
            assert sum(t.limit for t in on) == round(entry.instances * share)
            # the dialogues of one port share its server range: tagged for TRex's l7_map
            assert all(t.l7_map == [0] for t in on)
            assert sorted(bytes.fromhex(t.messages[0][1])[0] for t in on) == list(range(8))
            assert all(t.cps == pytest.approx(rate * t.limit / entry.instances) for t in on)
        # the dialogue: the client speaks first, the sides alternate, no empty message
        for t in ts:
            assert t.messages[0][0] is True
            assert all(a[0] != b[0] for a, b in zip(t.messages, t.messages[1:]))
            assert all(len(h) > 0 for _c, h in t.messages)
    web = by_entry(p, "web")
    assert {t.client for t in web} == {("198.18.0.1", "198.18.255.254")}
    # `hosts`: the span of the drawn offsets (.10 to .20), TRex's seq over it
    assert {t.server for t in web} == {("198.19.0.10", "198.19.0.20")}
    notes = "\n".join(p.approximations)
    for words in (
        "sessions[0] (web): server.hosts: the drawn host offsets (10..20)",
        "sessions[0] (web): rounds, request_bytes, response_bytes: 8 representative dialogues",
        "sessions[0] (web): rtt, gap, mss, window, think, linger: TRex's TCP stack",
        "sessions[1] (mixed): profile: 2 steps opened at their mean rate",
        "sessions[1] (mixed): rtt, gap, mss, window, think, linger: TRex's TCP stack paces and "
        "segments the dialogue; client ports: TRex's; close rst or none: TRex closes with FIN",
        "sessions: port 443: 8 templates told apart by the first 1 byte(s)",
    ):
        assert words in notes, (words, notes)


def test_the_dialogues_keep_each_distributions_mean_and_spread():
    s = parse_scenario(
        "version: 1\nname: d\nsessions:\n"
        "  - {name: a, protocol: tcp, client: 198.18.0.0/24, server: 198.19.0.1, server_port: 80,"
        " count: 100, arrival: 1ms, request_bytes: {lognormal: {median: 400, sigma: 1.2}},"
        " response_bytes: {pareto: {scale: 1000, shape: 1.3, max: 200k}}}\n"
    )
    entry = s.sessions[0]
    d = dialogues(entry, 8, seed=1)
    req = np.array([m[0][1] for m in d])
    resp = np.array([m[1][1] for m in d])
    # one round each, the stratum means: their average is the distribution's mean (rounding
    # to whole bytes aside), every stratum once (all different, spanning the distribution)
    assert np.mean(req) == pytest.approx(entry.request_bytes.mean(), rel=0.01)
    assert np.mean(resp) == pytest.approx(entry.response_bytes.mean(), rel=0.01)
    assert sorted(req) == sorted(np.rint(stratum_means(entry.request_bytes, 8)).astype(int))
    assert len(set(req)) == len(set(resp)) == 8
    # a Latin hypercube: requests and responses not ordered alike (not all the big ones together)
    assert list(np.argsort(req)) != list(np.argsort(resp))
    assert dialogues(entry, 8, seed=1) == d  # deterministic per seed
    # the same scenario, the same profile
    assert build_astf_profile(s).as_dict() == build_astf_profile(s).as_dict()


def test_fixed_sizes_are_one_dialogue_and_a_server_first_dialogue_needs_no_tag():
    s = parse_scenario(
        "version: 1\nname: d\nseed: 2\nsessions:\n"
        "  - {name: banner, protocol: tcp, client: 198.18.0.0/24, server: 198.19.0.2,"
        " server_port: 25, count: 10, arrival: 10ms, rounds: 2, request_bytes: 0,"
        " response_bytes: 120}\n"
    )
    (t,) = build_astf_profile(s).templates
    # two rounds of a 120-byte answer with empty requests: one 240-byte send from the server
    assert (t.limit, t.cps, t.port, t.l7_map) == (10, pytest.approx(100.0), 25, None)
    assert [(c, len(h) // 2) for c, h in t.messages] == [(False, 240)]


@needs_client
def test_the_offline_capture_has_every_session_as_a_complete_connection(tmp_path):
    s = learned(LEARNED_TCP, "web")
    gen = Trex(mode="astf")
    gen.prepare(s, tmp_path, s.seed, None)  # the worker loads the profile with TRex's client
    gen.start()
    assert gen.wait() and gen.status() == "completed", gen.error()
    pcap = tmp_path / "capture.pcap"
    conns = connections(pcap, server_ports=(443, 80))
    assert len(conns) == s.sessions[0].instances == 300
    assert all(
        (c["syn"], c["synack"], c["fin_c"], c["fin_s"]) == (1, 1, 1, 1) for c in conns.values()
    )
    assert (
        fields(pcap, "frame.number", where="tcp.checksum.status == 0 || ip.checksum.status == 0")
        == []
    )
    # the bytes each way: every template's dialogue, `limit` times
    want = Counter()
    for t in gen.astf.templates:
        want[(t.port, t.request_bytes, t.response_bytes)] += t.limit
    got = Counter((k[3], c["req"], c["resp"]) for k, c in conns.items())
    assert got == want
    # the same numbers `testbed validate` announces
    expected = TrexSpec(mode="astf").offline_expected(s)
    assert expected is not None and expected["flows"] == 600
    assert expected["packets"] == gen.counters().packets_sent
    assert "TCP connection(s) of 16 template(s)" in expected["what"]
    assert "sessions[0] (web)" in (tmp_path / "trex-approximations.txt").read_text()


# ---- refusals ---------------------------------------------------------------------------------

ENTRY = (
    "version: 1\nname: r\nsessions:\n"
    "  - {name: x, protocol: tcp, client: 198.18.0.0/24, server: 198.19.0.1, server_port: 80,"
    " count: 10, arrival: 1ms, request_bytes: 100, response_bytes: 200}\n"
)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            ("protocol: tcp", "protocol: udp"),
            r"sessions\[0\] \(x\): protocol: 10 UDP sessions; ASTF mode maps TCP sessions only",
        ),
        (
            ("protocol: tcp", "protocol: {choices: {tcp: 1, udp: 1}}"),
            r"sessions\[0\] \(x\): protocol: 5 UDP sessions",
        ),
        (
            (
                "client: 198.18.0.0/24, server: 198.19.0.1",
                "client: '2001:db8::1', server: '2001:db8::2'",
            ),
            r"sessions\[0\] \(x\): client: ASTF mode maps IPv4 sessions only",
        ),
        (
            ("server_port: 80", "server_port: 8000-8100"),
            r"sessions\[0\] \(x\): server_port: the range 8000-8100: an ASTF template serves one port",
        ),
        (
            ("response_bytes: 200", "response_bytes: 2M"),
            r"sessions\[0\] \(x\): rounds/request_bytes/response_bytes: a representative dialogue "
            r"of 2,097,252 bytes, more than 1,000,000 bytes in one connection",
        ),
        (
            ("request_bytes: 100", "rounds: {uniform: {min: 1, max: 5000}}, request_bytes: 100"),
            r"sessions\[0\] \(x\): rounds: a representative dialogue of 4,\d{3} rounds "
            r"\(\d,\d{3} messages\), more than 2,000 messages",
        ),
        (
            ("server_port: 80", "server_port: {choices: {0: 1, 80: 1}}"),
            r"sessions\[0\] \(x\): server_port: port 0 cannot be served",
        ),
        (
            ("count: 10", f"count: {MAX_CONNECTIONS + 1}"),
            r"sessions\[0\] \(x\): count: 10,000,001 sessions, more than 10,000,000 connections",
        ),
        (
            ("arrival: 1ms", "arrival: 0"),
            r"sessions\[0\] \(x\): arrival: a mean of 0 would open every connection at once",
        ),
    ],
)
def test_what_astf_cannot_play_is_refused_naming_the_entry(change, message):
    s = parse_scenario(ENTRY.replace(*change))
    with pytest.raises(GeneratorError, match=message):
        build_astf_profile(s)


def test_too_many_templates_and_stateless_mode_are_refused():
    """16 server ports × 8 dialogues: 128 templates an entry; two such entries pass the limit."""
    ports = "{choices: {" + ", ".join(f"{1000 + p}: 1" for p in range(16)) + "}}"
    body = (
        ENTRY.split("sessions:\n")[1]
        .replace("server_port: 80", f"server_port: {ports}")
        .replace("request_bytes: 100", "request_bytes: {uniform: {min: 1, max: 900}}")
        .replace("count: 10", "count: 128")
    )
    head = ENTRY.split("sessions:\n")[0] + "sessions:\n"
    one = build_astf_profile(parse_scenario(head + body))
    assert len(one.templates) == 16 * MAX_DIALOGUES and {t.limit for t in one.templates} == {1}
    two = body + body.replace("name: x", "name: y").replace("198.19.0.1", "198.19.1.1")
    with pytest.raises(
        GeneratorError, match=r"sessions\[1\] \(y\): 256 ASTF templates for the sessions so far"
    ):
        build_astf_profile(parse_scenario(head + two))
    # stateless streams are one-way: the sessions are refused there, pointing at mode astf
    with pytest.raises(GeneratorError, match=r"sessions\[0\] \(x\): mode stl .* need `mode: astf`"):
        build_profile(parse_scenario(ENTRY), 1)


# ---- live -------------------------------------------------------------------------------------


@needs_client
def test_sessions_live_through_trex_astf(astf_ns, tmp_path):  # noqa: F811 (the fixture)
    """40 sessions of a learned-like entry (two server ports, eight dialogues each: 16 templates
    on two ports told apart by l7_map) at 100/s: every connection established and closed on
    both sides, no template the server could not match, the dialogues' bytes on the wire."""
    s = parse_scenario(
        "version: 1\nname: live\nseed: 4\nsessions:\n"
        "  - {name: web, protocol: tcp, client: 198.18.0.0/24,"
        " server: {network: 198.19.0.0/24, hosts: {empirical: {values: [10, 12]}}},"
        " server_port: {choices: {443: 3, 80: 1}}, count: 40, arrival: {exponential: {mean: 10ms}},"
        " rounds: {empirical: {values: [1, 2], weights: [3, 1]}},"
        " request_bytes: {lognormal: {median: 300, sigma: 0.8, max: 4k}},"
        " response_bytes: {pareto: {scale: 800, shape: 1.2, max: 64k}}}\n"
    )
    caps = {i: Tcpdump(astf_ns.gen, i, tmp_path / f"{i}.pcap") for i in ("veth0", "veth1")}
    gen = Trex(mode="astf", server_iface="veth1")
    try:
        gen.prepare(s, tmp_path / "run", 4, NetnsEndpoint(astf_ns.gen, "veth0"))
        t0 = time.monotonic()
        gen.start()
        assert gen.wait(60), "the adapter did not finish in time"
        took = time.monotonic() - t0
    finally:
        gen.stop()
        logs = {i: c.stop() for i, c in caps.items()}
    assert gen.status() == "completed", gen.error()
    assert gen.astf is not None and len(gen.astf.templates) == 16
    a = gen.port_stats()["astf"]
    assert (a["connections_attempted"], a["connections_established"], a["connections_closed"]) == (
        40,
    ) * 3, a
    assert (a["server_accepted"], a["server_closed"]) == (40, 40), a
    assert a["drops"] == a["connection_drops"] == a["server_drops"] == 0 and not a["errors"], a
    for i, log in logs.items():
        assert "\n0 packets dropped by kernel" in log, (i, log)
    client, server = _flags(tmp_path / "veth1.pcap"), _flags(tmp_path / "veth0.pcap")
    assert client["syn"] == server["synack"] == client["fin"] == server["fin"] == 40
    # every dialogue's bytes, `limit` times, each way (tcp.len: the captures keep 256 bytes)
    templates = gen.astf.templates
    sent = {
        i: sum(int(n) for (n,) in fields(tmp_path / f"{i}.pcap", "tcp.len"))
        for i in ("veth0", "veth1")
    }
    assert sent["veth1"] == sum(t.limit * t.request_bytes for t in templates)
    assert sent["veth0"] == sum(t.limit * t.response_bytes for t in templates)
    # the tags: each connection's first client byte names its template on that port (l7_map),
    # and every template opened its `limit` connections
    first: dict[str, tuple[int, int]] = {}
    for stream, port, payload in fields(
        tmp_path / "veth1.pcap", "tcp.stream", "tcp.dstport", "tcp.payload", where="tcp.len > 0"
    ):
        first.setdefault(stream, (int(port), int(payload.replace(":", "")[:2], 16)))
    want = Counter({(t.port, bytes.fromhex(t.messages[0][1])[0]): t.limit for t in templates})
    assert Counter(first.values()) == want
    assert took < 20, took
    print(f"\nASTF sessions live: 40 connections of 16 templates in {took:.2f}s")


def test_a_sessions_scenario_for_trex_is_read_in_mode_astf_and_refused_in_mode_stl(tmp_path):
    tcp_only = "\n".join(
        line for line in LEARNED_TCP.splitlines() if not line.startswith("generator")
    ).replace("sessions:", "generator: trex\ngenerator_options: {mode: astf}\nsessions:", 1)
    tcp_only = (
        tcp_only.split("  - name: dns")[0]
        + "  - name: mixed"
        + tcp_only.split("  - name: mixed")[1]
    )
    s = parse_scenario(tcp_only, "trex-sessions.yaml")
    assert s.offline_generator().sends_sessions()
    path = tmp_path / "trex-sessions.yaml"
    path.write_text(tcp_only)
    done = subprocess.run(
        [sys.executable, "-m", "testbed", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    with pytest.raises(ScenarioError, match="sessions"):
        parse_scenario(tcp_only.replace("{mode: astf}", "{mode: stl}"), "stl.yaml")
