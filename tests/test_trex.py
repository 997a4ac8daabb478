"""The TRex adapter without a server: the scenario -> STL profile mapping, its refusals, the
worker that builds and dumps the profile with the real client library (lbr-trex-client, in its
own process), and, with the shared TRex build ($NTG_TREX_DIR), TRex's own simulator expanding the
dumped profile into a pcap that our reader checks."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from generators.trex import PLUGIN, WORKER, Trex
from generators.trex.server import server_binary, write_config
from generators.trex.stl_profile import MAX_INSTANCE_STREAMS, build_profile, icmp_checksum
from ntgcore.errors import GeneratorError
from ntgcore.registry import GENERATORS
from ntgcore.scenario import load_scenario, parse_scenario
from testbed.endpoints.netns import NetnsEndpoint

ROOT = Path(__file__).resolve().parent.parent
HEAD = "version: 1\nname: t\nseed: 3\nflows:\n"
NO_CLIENT = "lbr-trex-client is not installed"
needs_client = pytest.mark.skipif(
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; raise SystemExit(u.find_spec('lbr_trex_client') is None)",
        ]
    ).returncode
    != 0,
    reason=NO_CLIENT,
)


@pytest.fixture(autouse=True)
def registered():
    """The plugin, also when the installed distribution predates its entry point."""
    if "trex" not in GENERATORS:
        GENERATORS.register("trex", PLUGIN)
    yield


def flows(text: str):
    return parse_scenario(HEAD + text)


def profile(text: str, **kw):
    return build_profile(flows(text), 3, **kw)


# ---- the mapping ------------------------------------------------------------------------------


def test_one_packet_meta_flow_is_one_burst_with_the_field_engine():
    p = profile(
        "  - {protocol: udp, src: {cidr: 198.18.0.250/24, mode: increment}, dst: 198.19.7.0/28,"
        " dst_port: {range: 1000-1009, mode: increment}, rate: 1000, packets: 1,"
        " repeat: {count: 300, period: 50us}, payload: {size: 10-40}}\n"
    )
    (s,) = p.streams
    assert s.mode == {"type": "single_burst", "total_pkts": 300} and s.rate == {"pps": 20000.0}
    vars_ = {v["name"]: v for v in s.vm if v["op"] == "var"}
    assert vars_["ip_src"]["kind"] == "inc" and vars_["ip_src"]["init"] == int(
        ipaddress.ip_address("198.18.0.250")
    )
    assert vars_["ip_src"]["min"] == int(ipaddress.ip_address("198.18.0.0"))
    assert vars_["ip_src"]["max"] == int(ipaddress.ip_address("198.18.0.255"))
    assert vars_["ip_dst"]["kind"] == "random"
    assert (vars_["port_dport"]["min"], vars_["port_dport"]["max"]) == (1000, 1009)
    assert vars_["port_sport"]["kind"] == "random"  # the default: ephemeral ports per instance
    assert vars_["frame_len"]["min"] == 42 + 10 and vars_["frame_len"]["max"] == 42 + 40
    ops = [i["op"] for i in s.vm]
    assert "trim" in ops and ops[-1] == "fix_checksums"
    writes = {i["field"] for i in s.vm if i["op"] == "write"}
    assert {"IP.src", "IP.dst", "UDP.sport", "UDP.dport", "IP.len", "UDP.len"} <= writes
    assert s.packet["payload_len"] == 40 and p.packets == 300
    assert p.expected_seconds == pytest.approx(300 / 20000)


def test_multi_packet_instances_are_a_multi_burst_with_a_counter_stepping_one_field():
    p = profile(
        "  - {protocol: udp, src: {cidr: 198.18.4.1/24, mode: increment}, dst: 198.19.0.1,"
        " src_port: 5000, dst_port: 53, rate: 10000, packets: 3, repeat: {count: 4, period: 1ms}}\n"
    )
    (s,) = p.streams
    assert s.mode == {
        "type": "multi_burst",
        "pkts_per_burst": 3,
        "ibg_us": pytest.approx(800.0),
        "count": 4,
    }
    counter = s.vm[0]
    assert (
        counter["name"] == "pkt_in_instance"
        and counter["max"] == 2
        and counter["next_var"] == "ip_src"
    )
    assert p.packets == 12


def test_overlapping_instances_become_one_stream_each_with_their_starts_as_gaps():
    p = profile(
        "  - {protocol: tcp, src: {cidr: 198.18.0.0/23, mode: increment}, dst: 198.19.1.0/24,"
        " dst_port: 443, rate: 200, packets: 100, start: 1ms, repeat: {count: 5, period: 20ms}}\n"
    )
    assert len(p.streams) == 5
    assert [s.isg_us for s in p.streams] == pytest.approx([1000 + 20000 * r for r in range(5)])
    assert [s.packet["ip"]["src"] for s in p.streams] == [f"198.18.0.{r}" for r in range(5)]
    assert all(s.mode == {"type": "single_burst", "total_pkts": 100} for s in p.streams)
    assert len({s.random_seed for s in p.streams}) == 5
    assert any("5 streams, one per instance" in a for a in p.approximations)


def test_start_offsets_are_inter_stream_gaps_and_rates_in_other_units():
    text = (
        "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 1000, packets: 10}\n"
        "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 1000, packets: 10,"
        " start: 2.5ms, payload: {size: 18}}\n"
    )
    p = profile(text)
    assert [s.isg_us for s in p.streams] == [0.0, 2500.0]
    assert p.streams[0].vm == []  # nothing varies: the template's checksums stand
    b = profile(text, rate_unit="bps_L2")
    assert b.streams[1].rate == {"bps_L2": pytest.approx(1000 * 64 * 8)}
    pct = profile(text, rate_unit="percent")
    assert pct.streams[1].rate["percentage"] == pytest.approx(100 * 1000 * 84 * 8 / 1e10)


def test_topspeed_is_continuous_at_an_explicit_rate():
    s = load_scenario(ROOT / "scenarios" / "seed001-comparison.yaml").scenario
    p = build_profile(s, 1, pace="topspeed", duration_s=5.0, topspeed_pps=200_000)
    assert p.continuous and p.duration_s == 5.0 and p.packets is None
    assert all(st.mode == {"type": "continuous"} for st in p.streams)
    assert sum(st.rate["pps"] for st in p.streams) == pytest.approx(200_000)


def test_icmp_checksum_counts_down_with_the_sequence():
    p = profile(
        "  - {protocol: icmp, src: 198.18.2.1, dst: 198.19.0.1, rate: 1000, packets: 20,"
        " payload: {text: hi}}\n"
    )
    (s,) = p.streams
    ck = next(v for v in s.vm if v.get("name") == "icmp_chksum")
    assert ck["kind"] == "dec" and (ck["min"], ck["max"]) == (1, 0xFFFF)
    l4 = dict(s.packet["l4"])
    for seq in (0, 1, 7):  # the template's checksum minus the sequence, modulo 0xFFFF
        l4["seq"] = seq
        want = icmp_checksum(l4, b"hi", 2) or 0xFFFF
        assert (ck["init"] - 1 - seq) % 0xFFFF + 1 == want


SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_scenarios_map_or_are_refused_naming_flow_and_field(path, monkeypatch):
    monkeypatch.setenv("NTG_SHARED_DATA", os.environ.get("NTG_SHARED_DATA", "/nonexistent"))
    try:
        s = load_scenario(path).scenario
    except Exception as exc:  # a scenario that needs data this machine lacks
        pytest.skip(f"{path.name} does not load here: {exc}")
    topspeed = s.testbed is not None and any(g.pace == "topspeed" for g in s.live_generators())
    try:
        p = build_profile(
            s,
            s.seed,
            pace="topspeed" if topspeed else "realtime",
            duration_s=s.testbed.duration / 1e9 if topspeed else None,
        )
    except GeneratorError as exc:
        assert re.match(
            r"flows\[\d+\][^:]*: (repeat\.\w+|packets): |sessions\[0\][^:]*: mode stl sends one-way",
            str(exc),
        ), exc
        return
    assert p.streams and all(st.label.startswith("flows[") for st in p.streams)


REFUSED = [
    (
        "  - {protocol: udp, src: 2001:db8::/48, dst: 2001:db8::1, dst_port: 9, rate: 10, packets: 1,"
        " repeat: {count: 2, period: 1ms}}\n",
        r"flows\[0\]: src: .*at most 63 bits.*80 host bits",
    ),
    (
        "  - {name: burst, protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 10, packets: 1,"
        " repeat: {count: 5, period: 0s}}\n",
        r"flows\[0\] \(burst\): repeat.period: 0 starts all 5",
    ),
    (
        "  - {protocol: udp, src: 198.18.0.0/24, dst: 198.19.0.1, dst_port: 9, rate: 1000, packets: 5,"
        f" repeat: {{count: {MAX_INSTANCE_STREAMS + 1}, period: 1ms}}}}\n",
        r"flows\[0\]: repeat.count: its instances of 5 packets .* overlap.*at most 1000",
    ),
    (
        "  - {protocol: udp, src: 198.18.0.0/24, dst: 198.19.0.0/24, dst_port: 9, rate: 1000, packets: 2,"
        f" repeat: {{count: {MAX_INSTANCE_STREAMS + 1}, period: 10ms}}}}\n",
        r"flows\[0\]: repeat.count: src and dst and src_port vary per instance",
    ),
    (
        "  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.1, rate: 1000, packets: 70000}\n",
        r"flows\[0\]: packets: the ICMP seq counts 70000 values",
    ),
    (
        "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 10, packets: 10,"
        " payload: {size: 10-20}}\n",
        None,
    ),  # fine in pps ...
]


@pytest.mark.parametrize("text,message", REFUSED[:-1])
def test_what_trex_cannot_send_is_refused_naming_flow_and_field(text, message):
    with pytest.raises(GeneratorError, match=message):
        profile(text)


def test_bit_rates_of_random_lengths_and_percent_for_a_duration_are_refused():
    text = REFUSED[-1][0]
    assert profile(text).streams  # ... in pps
    with pytest.raises(
        GeneratorError, match=r"flows\[0\]: payload.size: rate_unit bps_L2 with a random"
    ):
        profile(text, rate_unit="bps_L2")
    s = load_scenario(ROOT / "scenarios" / "seed001-ostinato.yaml").scenario
    with pytest.raises(GeneratorError, match=r"flows\[0\] \(tcp\): rate_unit: percent .*161 s"):
        build_profile(s, 1, pace="topspeed", duration_s=5.0, rate_unit="percent")


# ---- the scenario model and the adapter's own refusals -----------------------------------------


def test_scenario_accepts_the_trex_options_and_names_wrong_ones():
    s = parse_scenario(
        HEAD + "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 10,"
        " packets: 1}\ntestbed:\n  generators:\n    - {name: trex, server: {host: 198.51.100.7,"
        " sync_port: 4601}, rate_unit: bps_L2, port: 1}\n"
    )
    spec = s.testbed.generators[0]
    gen = Trex(spec)
    assert gen.server_spec == {"host": "198.51.100.7", "sync_port": 4601, "async_port": 4500}
    assert (gen.port, gen.rate_unit) == (1, "bps_L2")
    assert Trex(
        parse_scenario(
            HEAD + "  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.1, rate: 1,"
            " packets: 1}\ntestbed: {generators: [{name: trex}]}\n"
        ).testbed.generators[0]
    ).starts_server
    from ntgcore.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="rate_unit"):
        parse_scenario(
            HEAD + "  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.1, rate: 1, packets: 1}\n"
            "testbed: {generators: [{name: trex, rate_unit: kbps}]}\n"
        )


def test_prepare_refuses_a_missing_server_build(tmp_path, monkeypatch):
    s = flows("  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.1, rate: 10, packets: 1}\n")
    monkeypatch.delenv("NTG_TREX_DIR", raising=False)
    with pytest.raises(GeneratorError, match="NTG_TREX_DIR"):
        Trex().prepare(s, tmp_path, 3, NetnsEndpoint("nowhere", "veth0"))
    with pytest.raises(GeneratorError, match=r"no executable _t-rex-64-o in /nonexistent"):
        server_binary("/nonexistent")


def test_a_missing_client_library_says_how_to_install_it(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "lbr_trex_client" else real(name, *a),
    )
    s = flows("  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.1, rate: 10, packets: 1}\n")
    with pytest.raises(GeneratorError, match=r"pip install lbr-trex-client==3.4.0"):
        Trex(server={"host": "127.0.0.1"}).prepare(s, tmp_path, 3, NetnsEndpoint("x", "veth0"))


def test_server_config_has_the_interface_the_macs_and_its_own_dpdk_prefix(tmp_path):
    text = write_config(
        tmp_path / "c.yaml", "gen0", "02:00:00:00:00:01", "02:00:00:00:00:02", "ntgab12"
    ).read_text()
    assert "interfaces: ['gen0', 'dummy']" in text and "prefix: ntgab12" in text
    assert (
        "low_end: true" in text
        and "{src_mac: '02:00:00:00:00:01', dest_mac: '02:00:00:00:00:02'}" in text
    )


def test_the_main_process_never_imports_trex_or_its_scapy():
    code = (
        "import sys; from generators.trex import Trex; from generators.trex.stl_profile import build_profile;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('trex', 'lbr_trex_client')];"
        "print(bad); raise SystemExit(bool(bad))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert res.returncode == 0, res.stdout + res.stderr


# ---- the worker with the real client library ---------------------------------------------------

MIX = (
    "  - {protocol: udp, src: 198.18.0.0/24, dst: 198.19.0.1, src_port: 4000,"
    " dst_port: {range: 1000-1009, mode: increment}, rate: 10000, packets: 1,"
    " repeat: {count: 300, period: 100us}, payload: {size: 10-40}}\n"
    "  - {protocol: tcp, src: 198.18.1.1, dst: 198.19.0.1, src_port: 4000, dst_port: 80, rate: 10000,"
    " packets: 20, start: 5ms}\n"
    "  - {protocol: icmp, src: {cidr: 198.18.3.250/24, mode: increment}, dst: 198.19.0.1, rate: 10000,"
    " packets: 1, repeat: {count: 10, period: 1ms}}\n"
    "  - {protocol: udp, src: {cidr: 198.18.4.1/24, mode: increment}, dst: 198.19.0.1, src_port: 5000,"
    " dst_port: 53, rate: 10000, packets: 3, repeat: {count: 4, period: 1ms}}\n"
    "  - {protocol: icmpv6, src: 2001:db8::1, dst: 2001:db8::2, rate: 1000, packets: 3}\n"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The MIX scenario's profile as the adapter's prepare writes it (no server)."""
    if "trex" not in GENERATORS:
        GENERATORS.register("trex", PLUGIN)
    d = tmp_path_factory.mktemp("trex")
    gen = Trex(server={"host": "127.0.0.1"})
    gen.write_profile(flows(MIX), d, 3)
    return gen, d


def run_py(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter where lbr_trex_client comes first (as in the worker)."""
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-c", "import lbr_trex_client\n" + code],
        capture_output=True,
        text=True,
        timeout=120,
    )


@needs_client
def test_the_run_folder_keeps_the_profile_as_python_json_and_yaml(built):
    gen, d = built
    for name in (
        "trex-profile.py",
        "trex-profile.json",
        "trex-profile.yaml",
        "trex-profile-spec.json",
        "trex-approximations.txt",
    ):
        assert (d / name).is_file(), name
    assert (
        gen.commands()[0].status == "exit status 0"
    )  # the worker built it and loaded the .py back
    res = run_py(f"""
from trex.stl.api import STLProfile
py = STLProfile.load_py({str(d / "trex-profile.py")!r})
js = STLProfile.load_json({str(d / "trex-profile.json")!r})
print(len(py.get_streams()), len(js.get_streams()))
print(py.get_streams()[0].to_json()['mode'])
""")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "5 5"
    # The client's own load_yaml cannot run on Python >= 3.10 (its bundled PyYAML 3.11 uses
    # collections.Hashable); the YAML is the same document as the JSON.
    import yaml

    assert yaml.safe_load((d / "trex-profile.yaml").read_text()) == json.loads(
        (d / "trex-profile.json").read_text()
    )
    assert "'total_pkts': 300" in lines[1] and "'type': 'pps', 'value': 10000.0" in lines[1]
    code = (d / "trex-profile.py").read_text()
    assert "STLTXMultiBurst(pkts_per_burst = 3" in code and "next_var='ip_src'" in code
    assert "isg = 5000.0" in code and "ICMPv6EchoRequest." not in code


@needs_client
def test_a_profile_the_client_refuses_names_the_stream(tmp_path):
    gen = Trex(server={"host": "127.0.0.1"})
    gen.write_profile(flows(MIX), tmp_path, 3)
    spec = json.loads((tmp_path / "trex-profile-spec.json").read_text())
    spec["streams"][1]["vm"] = [{"op": "write", "var": "nosuch", "field": "IP.src"}]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(spec))
    with pytest.raises(
        GeneratorError, match=r"flows\[1\]: the TRex client refused the profile: .*nosuch"
    ):
        gen._build(bad)


@needs_client
def test_the_simulator_expands_the_dumped_profile(built, tmp_path, pcaplib, trex_sim_dir):
    from analysis.capture import read_capture

    sim = trex_sim_dir / "sim"
    gen, d = built
    out = tmp_path / "sim.pcap"
    res = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            str(WORKER),
            "sim",
            str(d / "trex-profile.py"),
            str(out),
            str(sim),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert '"event": "simulated"' in res.stdout, res.stdout + res.stderr
    c = read_capture(out)
    assert len(c) == 300 + 20 + 10 + 12 + 3 == gen.profile.packets
    src = [str(ipaddress.ip_address(int(x))) for x in c.src_lo[c.ip_version == 4]]
    # the 4 instances of 3 packets step the source once per instance (a counter's next_var)
    assert [a for a in src if a.startswith("198.18.4.")] == [
        f"198.18.4.{1 + k // 3}" for k in range(12)
    ]
    assert [a for a in src if a.startswith("198.18.3.")] == [
        f"198.18.3.{250 + k}" for k in range(6)
    ] + ["198.18.3.0", "198.18.3.1", "198.18.3.2", "198.18.3.3"]  # wraps inside the /24
    udp = (c.proto == 17) & (c.dport != 53)
    assert list(c.dport[udp]) == [1000 + k % 10 for k in range(300)]
    assert {int(x) for x in c.wire_len[udp]} <= set(range(52, 83)) and len(
        set(c.wire_len[udp].tolist())
    ) > 10
    assert len(set(c.src_lo[udp].tolist())) > 100  # random sources in the /24
    # repeatable: the same profile expands to the same packets
    again = tmp_path / "again.pcap"
    subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            str(WORKER),
            "sim",
            str(d / "trex-profile.py"),
            str(again),
            str(sim),
        ],
        capture_output=True,
        timeout=120,
    )
    assert read_capture(again).src_lo.tolist() == c.src_lo.tolist()


EXAMPLES = sorted((ROOT / "generators" / "trex" / "examples").glob("*.yaml"))


@needs_client
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_offline_examples_validate_and_run_without_a_server(path, tmp_path):
    """The README's TRex examples: `testbed validate` and an offline `testbed run` (STL: our own
    field-engine expansion; ASTF: the profile's TCP connections), no TRex build involved."""
    env = {k: v for k, v in os.environ.items() if k != "NTG_TREX_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    run = [sys.executable, "-m", "testbed"]
    res = subprocess.run(
        run + ["validate", str(path)], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert res.returncode == 0 and ": ok: " in res.stdout, res.stdout + res.stderr
    res = subprocess.run(
        run + ["run", str(path), "--out", str(tmp_path), "-q"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    run_dir = next(tmp_path.glob("*/manifest.json")).parent
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["packets"] > 1000 and all(c["ok"] for c in metrics["checks"]), metrics["checks"]
    profile = "trex-astf-profile.py" if "astf" in path.name else "trex-profile.py"
    assert (run_dir / profile).is_file()  # what trex-console loads
