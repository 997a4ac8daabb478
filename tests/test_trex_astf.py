"""TRex in advanced-stateful mode (`mode: astf`): the scenario's TCP flows and the `attacks:` TCP
sessions as an ASTF profile (offline: the mapping, its refusals, the profile file loaded by TRex's
own client), and live against the real TRex v3.08 server ($NTG_TREX_DIR, ../shared/trex).

Live topology (../shared/trex/README.md, ../shared/guide/NETWORK-SAFETY.md): one namespace made
for the test holding both ends of one veth pair (VethPair(split=False); through `testbed run`: the
packaged topology `astf`): TRex's client side
(port 0) on veth0, its server side (port 1) on veth1, the server started by the adapter inside
that namespace with --astf; addresses in 198.18.0.0/15; a tcpdump on each end (a tcpdump does not
see what TRex itself sends on its interface: veth1 shows the client's packets, veth0 the
server's). Bounded: a few hundred connections in about 2 s. Everything is torn down.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from generators.trex import PLUGIN, Trex, TrexSpec
from generators.trex.astf_profile import build_astf_profile
from idsrules.attacks import tcp_dialogues
from ntgcore.errors import GeneratorError
from ntgcore.proc import Process
from ntgcore.registry import GENERATORS
from ntgcore.scenario import parse_scenario

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "scenarios" / "rules" / "attacks-demo.rules"
HEAD = "version: 1\nname: t\nseed: 3\nflows:\n"
WEB = (
    "  - {name: web, protocol: tcp, src: 198.18.0.0/24, dst: 198.19.0.1, dst_port: 80, rate: 1000,"
    " packets: 1, payload: {text: 'GET / HTTP/1.1', size: 77}, repeat: {count: %d, period: %s}}\n"
)
ATTACKS = f"attacks: {{rules: ['{RULES}'], count: 12, rate: 20}}\n"
needs_client = pytest.mark.skipif(
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; raise SystemExit(u.find_spec('lbr_trex_client') is None)",
        ]
    ).returncode
    != 0,
    reason="lbr-trex-client is not installed",
)


@pytest.fixture(autouse=True)
def registered():
    if "trex" not in GENERATORS:
        GENERATORS.register("trex", PLUGIN)


# ---- offline ------------------------------------------------------------------------------


def dialogues(s):
    return tcp_dialogues(s.attacks, [RULES])


def test_tcp_flows_and_attack_rules_become_templates():
    s = parse_scenario(HEAD + WEB % (200, "5ms") + ATTACKS)
    p = build_astf_profile(s, response_bytes=112, attack_sessions=dialogues(s))
    web, *attacks = p.templates
    assert (web.client, web.server, web.port, web.cps, web.limit) == (
        ("198.18.0.1", "198.18.0.254"),
        ("198.19.0.1", "198.19.0.1"),
        80,
        200.0,
        200,
    )
    assert web.request_bytes == 77 and web.response_bytes == 112
    assert bytes.fromhex(web.messages[0][1]).startswith(b"GET / HTTP/1.1\0")
    # the demo file's four TCP rules (the two UDP ones stay in the attack pcap), 12 sessions cycled
    # on the rules' sides ($EXTERNAL_NET clients 198.19.254.x -> $HOME_NET servers 198.18.255.k)
    assert [(t.sid, t.port, t.limit, t.server[0]) for t in attacks] == [
        (9100001, 80, 3, "198.18.255.1"),
        (9100002, 80, 3, "198.18.255.2"),
        (9100003, 80, 3, "198.18.255.3"),
        (9100004, 7777, 3, "198.18.255.4"),
    ]
    assert {t.client for t in attacks} == {("198.19.254.1", "198.19.254.254")}
    assert sum(t.cps for t in attacks) == 20.0 and p.connections == 212
    first = bytes.fromhex(attacks[0].messages[0][1])
    assert first.startswith(b"GET /ntg-demo/admin") and b"debug=1" in first
    assert attacks[0].messages[1][0] is False and bytes.fromhex(
        attacks[0].messages[1][1]
    ).startswith(b"HTTP/1.")
    assert any("sid 9100005 (udp)" in a for a in p.approximations)
    assert any("`random` becomes TRex's sequential" in a for a in p.approximations)
    # without the dialogues (the orchestration gives them) the attacks stay with the attack pcap
    alone = build_astf_profile(s)
    assert len(alone.templates) == 1 and any(
        "the run's attack pcap carries them" in a for a in alone.approximations
    )


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 10, packets: 1}\n",
            r"flows\[0\]: protocol udp: ASTF mode carries TCP sessions only",
        ),
        (
            "  - {protocol: tcp, src: '2001:db8::1', dst: '2001:db8::2', dst_port: 80, rate: 10, packets: 1}\n",
            r"flows\[0\]: src: ASTF mode maps IPv4 sessions only",
        ),
        (
            "  - {protocol: tcp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 80-81, rate: 10, packets: 1}\n",
            r"flows\[0\]: dst_port: an ASTF template serves one server port, not the range 80-81",
        ),
        (
            "  - {name: d, protocol: tcp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 80, rate: 10, duration: 2s}\n",
            r"flows\[0\] \(d\): duration: an ASTF session carries a number of payloads",
        ),
        (
            "  - {protocol: tcp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 80, rate: 10, packets: 2000,"
            " payload: {size: 1000}}\n",
            r"flows\[0\]: packets × payload: 2,000,000 bytes in one connection",
        ),
        (
            "  - {protocol: tcp, src: 198.18.0.1, dst: 198.19.0.0/24, dst_port: 80, rate: 10, packets: 1}\n"
            "  - {name: b, protocol: tcp, src: 198.18.0.2, dst: 198.19.0.7, dst_port: 80, rate: 10, packets: 1}\n",
            r"flows\[1\] \(b\): dst/dst_port: serves port 80 on addresses that flows\[0\] serves too",
        ),
    ],
)
def test_what_astf_cannot_express_is_refused_naming_the_flow(text, message):
    with pytest.raises(GeneratorError, match=message):
        build_astf_profile(parse_scenario(HEAD + text))


def test_options_and_a_server_without_its_server_side_are_refused(tmp_path, monkeypatch):
    assert TrexSpec(mode="astf", server_iface="veth1", response_bytes=10).mode == "astf"
    with pytest.raises(Exception, match="mode"):
        TrexSpec(mode="stateful")
    with pytest.raises(GeneratorError, match="mode 'x': one of stl, astf"):
        Trex(mode="x")
    from testbed.endpoints.netns import NetnsEndpoint

    monkeypatch.setenv("NTG_TREX_DIR", str(tmp_path))
    (tmp_path / "_t-rex-64-o").write_text("#!/bin/sh\n")
    (tmp_path / "_t-rex-64-o").chmod(0o755)
    with pytest.raises(
        GeneratorError,
        match=r"mode astf with `server: start` needs `server_iface`: "
        r"TRex's server side \(port 1\), the other end of veth0's veth",
    ):
        Trex(mode="astf").prepare(
            parse_scenario(HEAD + WEB % (2, "1ms")),
            tmp_path / "r",
            3,
            NetnsEndpoint("nowhere", "veth0"),
        )


@needs_client
def test_the_profile_file_loads_in_trex_client(tmp_path):
    """trex-astf-profile.py is what trex-console's `start -f` loads: the worker loads it with
    ASTFProfile.load_py and writes TRex's JSON of it."""
    s = parse_scenario(HEAD + WEB % (200, "5ms") + ATTACKS)
    gen = Trex(mode="astf", response_bytes=112, attack_sessions=dialogues(s))
    gen.write_astf_profile(s, tmp_path)
    data = json.loads((tmp_path / "trex-astf-profile.json").read_text())
    assert data["tg_names"] == [
        "0-web",
        "1-sid9100001",
        "2-sid9100002",
        "3-sid9100003",
        "4-sid9100004",
    ]
    web = data["templates"][0]
    assert web["client_template"]["cps"] == 200.0 and web["client_template"]["limit"] == 200
    assert web["server_template"]["assoc"] == [
        {"port": 80, "ip_start": "198.19.0.1", "ip_end": "198.19.0.1"}
    ]
    assert data["ip_gen_dist_list"][0]["distribution"] == "seq"
    spec = json.loads((tmp_path / "trex-profile-spec.json").read_text())
    assert spec["mode"] == "astf" and spec["connections"] == 212
    assert "sid 9100005 (udp)" in (tmp_path / "trex-approximations.txt").read_text()


# ---- live ---------------------------------------------------------------------------------


@pytest.fixture
def astf_ns(root, trex_dir):
    """One namespace with both ends of a veth pair (veth0: TRex's client side, veth1: its server
    side); a missing server build skips (fails under CI)."""
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump is not installed")
    from testbed.endpoints.netns.topology import VethPair

    p = VethPair(prefix="ntgtest", split=False)
    try:
        yield p.setup()
    finally:
        p.teardown()


class Tcpdump:
    def __init__(self, ns: str, iface: str, path: Path):
        self.path, self.err = path, path.with_suffix(".log")
        self.log = open(self.err, "wb")
        self.proc = Process(
            f"tcpdump-{iface}",
            [
                "ip",
                "netns",
                "exec",
                ns,
                "tcpdump",
                "-i",
                iface,
                "-n",
                "-B",
                "16384",
                "-s",
                "256",
                "-U",
                "-w",
                str(path),
                "tcp",
            ],
            stderr=self.log,
        ).start()
        deadline = time.monotonic() + 10
        while b"listening on" not in self.err.read_bytes():
            assert time.monotonic() < deadline and self.proc.poll() is None, self.err.read_text()
            time.sleep(0.05)

    def stop(self) -> str:
        time.sleep(0.3)
        self.proc.stop(signal.SIGINT, grace=5)
        self.log.close()
        return self.err.read_text()


def _flags(path: Path) -> dict:
    """Counts of SYN, SYN-ACK, FIN segments and the payload bytes in a capture."""
    scapy = pytest.importorskip("scapy.all")
    out = {"syn": 0, "synack": 0, "fin": 0, "payload": b"", "packets": 0}
    for f in scapy.rdpcap(str(path)):
        if "TCP" not in f:
            continue
        t = f["TCP"]
        out["packets"] += 1
        fl = int(t.flags)
        if fl & 0x02:
            out["synack" if fl & 0x10 else "syn"] += 1
        if fl & 0x01:
            out["fin"] += 1
        out["payload"] += bytes(t.payload)
    return out


@needs_client
def test_astf_sessions_live_all_established_and_closed_and_seen_on_the_wire(astf_ns, tmp_path):
    from testbed.endpoints.netns import NetnsEndpoint

    n = 200
    caps = {i: Tcpdump(astf_ns.gen, i, tmp_path / f"{i}.pcap") for i in ("veth0", "veth1")}
    s = parse_scenario(HEAD + WEB % (n, "5ms") + ATTACKS)
    gen = Trex(mode="astf", server_iface="veth1", response_bytes=112, attack_sessions=dialogues(s))
    try:
        gen.prepare(s, tmp_path / "run", 3, NetnsEndpoint(astf_ns.gen, "veth0"))
        t0 = time.monotonic()
        gen.start()
        assert gen.wait(60), "the adapter did not finish in time"
        took = time.monotonic() - t0
    finally:
        gen.stop()
        logs = {i: c.stop() for i, c in caps.items()}
    assert gen.status() == "completed", gen.error()
    stats = gen.port_stats()
    a = stats["astf"]
    total = n + 12
    assert a["connections_expected"] == total
    assert (a["connections_attempted"], a["connections_established"], a["connections_closed"]) == (
        total,
    ) * 3, a
    assert (a["server_accepted"], a["server_closed"]) == (total, total), a
    assert a["drops"] == a["connection_drops"] == a["server_drops"] == 0 and not a["errors"], a
    groups = a["templates"]
    assert groups["0-web"]["client"]["tcps_connects"] == n
    assert all(groups[f"{k}-sid91000{k:02d}"]["client"]["tcps_closed"] == 3 for k in range(1, 5)), (
        groups
    )
    assert stats["trex"]["server_version"] == "v3.08"
    # the wire: veth1 receives the client side's segments, veth0 the server side's
    for i, log in logs.items():
        assert "\n0 packets dropped by kernel" in log, (i, log)
    client, server = _flags(tmp_path / "veth1.pcap"), _flags(tmp_path / "veth0.pcap")
    assert client["syn"] == a["connections_attempted"] and client["synack"] == 0
    assert server["synack"] == a["server_accepted"] and server["syn"] == 0
    assert client["fin"] == a["connections_closed"] and server["fin"] == a["server_closed"]
    assert client["payload"].count(b"GET / HTTP/1.1\0") == n
    assert (
        client["payload"].count(b"GET /ntg-demo/admin") == 3
        and b"ntg-demo-bot/0.1" in client["payload"]
    )
    assert client["payload"].count(b"NTGDEMO\x00\x01") == 3
    assert server["payload"].count(b"HTTP/1.1 200") + server["payload"].count(b"HTTP/1.0 200") == 9
    # the common counters: the client side's segments (sent on veth0, captured on veth1); the
    # server side's in port_stats
    c = gen.counters()
    assert c.packets_sent == stats["veth0"]["opackets"] == client["packets"]
    assert stats["veth1"]["opackets"] == server["packets"] and c.packets_failed == 0
    assert took < 15, took
    assert all(r.exit_code is not None for r in gen.commands())
    assert not (Path("/var/run/dpdk") / gen.server.prefix).exists()
    assert "--astf" in gen.server.proc.record.argv
    print(
        f"\nASTF live: {total} connections in {took:.2f}s (start to end), server up in "
        f"{stats['trex']['server_started_s']}s; {client['packets']} client + {server['packets']} "
        f"server segments captured"
    )


@needs_client
def test_a_running_stateless_server_is_refused_for_astf_profiles(astf_ns, tmp_path):
    """A server of the user's own in STL mode: the ASTF worker says which mode it needs."""
    from generators.trex.server import TrexServer, server_binary
    from testbed.endpoints.netns import NetnsEndpoint

    where = NetnsEndpoint(astf_ns.gen, "veth0")
    srv = TrexServer(
        server_binary(os.environ["NTG_TREX_DIR"]),
        where,
        tmp_path,
        "02:00:00:00:00:01",
        "02:00:00:00:00:02",
    ).start()
    gen = Trex(mode="astf", server={"host": "127.0.0.1"})
    try:
        with pytest.raises(
            GeneratorError,
            match=r"trex: connect: RPC configuration mismatch - server RPC "
            r"configuration: 'STL', client RPC configuration: 'ASTF' \(the generator's "
            r"`mode: astf` needs a TRex server started with --astf",
        ):
            gen.prepare(parse_scenario(HEAD + WEB % (2, "1ms")), tmp_path / "run", 3, where)
        assert gen.status() == "failed" and srv.alive()  # not ours to stop
    finally:
        gen.stop()
        srv.stop()
    assert all(r.exit_code is not None for r in gen.commands())


@needs_client
def test_a_stop_mid_run_stops_the_connections_and_releases(astf_ns, tmp_path):
    from testbed.endpoints.netns import NetnsEndpoint

    gen = Trex(mode="astf", server_iface="veth1")
    try:
        gen.prepare(
            parse_scenario(HEAD + WEB % (2000, "5ms")),
            tmp_path,
            3,
            NetnsEndpoint(astf_ns.gen, "veth0"),
        )
        gen.start()
        time.sleep(1.0)
        gen.stop(interrupt=True)
        assert gen.wait(1) and gen.status() == "interrupted", gen.error()
    finally:
        gen.stop()
    a = gen.port_stats()["astf"]
    assert 50 < a["connections_attempted"] < 2000 and a["connections_expected"] == 2000
    assert gen.counters().packets_sent > 0
    assert all(r.exit_code is not None for r in gen.commands())
    assert not (Path("/var/run/dpdk") / gen.server.prefix).exists()


@needs_client
def test_astf_through_testbed_run_with_the_astf_topology(tmp_path, run_scenario, root, trex_dir):
    """`mode: astf` in a scenario, the packaged `astf` topology, the capture on the server side's
    interface: sent = wire, TRex's TCP counters in the manifest and the report."""
    path = tmp_path / "astf.yaml"
    path.write_text(
        HEAD + WEB % (100, "5ms") + "generator: trex\ntestbed:\n  topology: astf\n"
        "  generators: [{name: trex, at: 'gen:gen0', mode: astf, server_iface: gen1,"
        " response_bytes: 112}]\n  capture: {at: 'gen:gen1', snaplen: 128}\n"
    )
    run = run_scenario(path)
    assert run.ok, run.messages
    step = run.manifest["steps"][0]
    g = step["generators"]["trex"]
    a = g["port_stats"]["astf"]
    assert (
        a["connections_attempted"],
        a["connections_established"],
        a["connections_closed"],
        a["server_closed"],
        a["drops"],
    ) == (100, 100, 100, 100, 0)
    assert g["packets_sent"] == g["port_stats"]["gen0"]["opackets"] == step["loss"]["wire"]
    assert step["loss"]["loss_rate"] == 0
    report = (run.run_dir / "report.md").read_text()
    assert "TCP sessions (TRex ASTF): TRex's own counters" in report
    assert "| run | trex | 100 | 100 | 100 | 100 | 0 | 100 | 100 | 0 | none |" in report
    assert (run.run_dir / "gen-trex" / "trex-astf-profile.py").is_file()
