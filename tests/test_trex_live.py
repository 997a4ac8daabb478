"""The TRex adapter against the real TRex v3.08 server ($NTG_TREX_DIR, ../shared/trex) on test veths.

Network safety (../shared/guide/NETWORK-SAFETY.md): every test makes its own namespaces with
VethPair (veth0 in `gen`, veth1 in `peer`); the server runs inside `gen` in software mode on
veth0 (its RPC on that namespace's loopback, and the client with it), addresses are in
198.18.0.0/15, rates are explicit pps <= 300 kpps and every run is bounded in packets and time.
Everything is torn down, also on failure. Under CI (NTG_CI=1) a missing server build fails.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from generators.trex import PLUGIN, Trex
from generators.trex.server import DPDK_RUN, TrexServer, server_binary
from ntgcore.errors import GeneratorError
from ntgcore.proc import Process
from ntgcore.registry import GENERATORS
from ntgcore.scenario import parse_scenario
from testbed.endpoints.netns import NetnsEndpoint as Endpoint

pytestmark = [
    pytest.mark.ntg_live,
    pytest.mark.usefixtures("root"),
    pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed"),
]

HEAD = "version: 1\nname: t\nseed: 3\nflows:\n"


@pytest.fixture(autouse=True)
def trex(monkeypatch, trex_dir):
    """The shared server build, the registered plugin; afterwards no TRex process may be left."""
    if "trex" not in GENERATORS:
        GENERATORS.register("trex", PLUGIN)
    made = []
    yield made
    import psutil

    left = []
    for gen in made:
        for rec in gen.commands():
            if rec.pid and psutil.pid_exists(rec.pid):
                try:
                    if psutil.Process(rec.pid).status() != psutil.STATUS_ZOMBIE:
                        left.append(rec)
                except psutil.Error:
                    pass
    for rec in left:
        os.kill(rec.pid, signal.SIGKILL)
    assert not left, f"left running: {[(r.name, r.pid) for r in left]}"


class Tcpdump:
    """tcpdump on veth1 in the peer namespace, until stop()."""

    def __init__(self, pair, path):
        self.path = path
        self.err = path.with_suffix(".log")
        self.log = open(self.err, "wb")
        self.proc = Process(
            "tcpdump",
            [
                "ip",
                "netns",
                "exec",
                pair.peer,
                "tcpdump",
                "-i",
                "veth1",
                "-n",
                "-B",
                "65536",
                "-s",
                "256",
                "-U",
                "--immediate-mode",
                "-w",
                str(path),
            ],
            stderr=self.log,
        ).start()
        deadline = time.monotonic() + 10
        while b"listening on" not in self.err.read_bytes():
            assert time.monotonic() < deadline and self.proc.poll() is None, self.err.read_text()
            time.sleep(0.05)

    def stop(self):
        time.sleep(0.3)
        self.proc.stop(signal.SIGINT, grace=5)
        self.log.close()
        return self.err.read_text()


def run(trex, gen, text, run_dir, endpoint, timeout=60):
    trex.append(gen)
    gen.prepare(parse_scenario(HEAD + text), run_dir, 3, endpoint)
    gen.start()
    assert gen.wait(timeout), "the adapter did not finish in time"
    return gen


def test_a_started_server_sends_what_the_peer_captures(trex, pair, tmp_path, pcaplib):
    from analysis.capture import read_capture

    n = 30_000
    cap = Tcpdump(pair, tmp_path / "peer.pcap")
    before = pair.rx()
    gen = run(
        trex,
        Trex(),
        (
            "  - protocol: udp\n    src: 198.18.0.0/24\n    dst: {cidr: 198.19.0.10/24, mode: increment}\n"
            "    dst_port: {range: 1000-1099, mode: increment}\n    rate: 100kpps\n    packets: 1\n"
            f"    repeat: {{count: {n}, period: 10us}}\n    payload: {{size: 18-100}}\n"
        ),
        tmp_path / "run",
        Endpoint(pair.gen, "veth0"),
    )
    log = cap.stop()
    assert gen.status() == "completed", gen.error()
    stats = gen.port_stats()
    assert stats["veth0"]["opackets"] == n and stats["veth0"]["oerrors"] == 0
    assert stats["trex"]["server_version"] == "v3.08" and stats["trex"]["client_api"] == "STL 5.1"
    assert 0.5 < stats["trex"]["server_started_s"] < 10
    c = read_capture(tmp_path / "peer.pcap")
    assert f"\n{n} packets captured" in log and "\n0 packets dropped by kernel" in log
    assert len(c) == n and pair.rx() - before == n
    assert gen.counters().packets_sent == n
    assert gen.counters().bytes_sent == int(c.wire_len.sum()) == stats["veth0"]["obytes"] - 4 * n
    dst = [ipaddress.ip_address(int(x)) for x in c.dst_lo[:300]]
    assert dst == [ipaddress.ip_address("198.19.0.0") + (10 + k) % 256 for k in range(300)]
    assert list(c.dport[:300]) == [1000 + k % 100 for k in range(300)]
    assert len(set(c.src_lo.tolist())) == 256  # random in the /24
    assert {int(x) for x in c.wire_len} <= set(range(60, 143)) and len(
        set(c.wire_len.tolist())
    ) > 50
    # every checksum right: TRex fixes them in software on a veth
    scapy = pytest.importorskip("scapy.all")
    for f in scapy.rdpcap(str(tmp_path / "peer.pcap"), count=200):
        raw = bytes(f)
        del f["IP"].chksum, f["UDP"].chksum  # rebuilt by Scapy: equal when TRex's were right
        assert bytes(f) == raw
    names = [r.name for r in gen.commands()]
    assert names == ["trex-build", "trex-server", "trex-worker"]
    assert all(r.exit_code is not None for r in gen.commands())
    assert not (DPDK_RUN / gen.server.prefix).exists()
    for f in (
        "trex-profile.py",
        "trex-stats.json",
        "trex-worker.jsonl",
        "trex_cfg.yaml",
        "trex-server.log",
    ):
        assert (tmp_path / "run" / f).is_file(), f


@pytest.fixture
def running_server(pair, tmp_path):
    """A TRex server already running in the pair's `gen` namespace (a user's own)."""
    srv = TrexServer(
        server_binary(os.environ["NTG_TREX_DIR"]),
        Endpoint(pair.gen, "veth0"),
        tmp_path,
        "02:00:00:00:00:01",
        "02:00:00:00:00:02",
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_a_running_server_at_an_address_and_a_version_mismatch(
    trex, pair, tmp_path, running_server
):
    text = (
        "  - {protocol: tcp, src: 198.18.0.1, dst: 198.19.0.1, src_port: 4000, dst_port: 80,"
        " rate: 20kpps, packets: 2000, payload: {size: 6}}\n"
    )
    before = pair.rx()
    gen = run(
        trex,
        Trex(server={"host": "127.0.0.1", "sync_port": 4501, "async_port": 4500}),
        text,
        tmp_path / "a",
        Endpoint(pair.gen, "veth0"),
    )
    assert gen.status() == "completed" and gen.counters().packets_sent == 2000
    time.sleep(0.2)
    assert pair.rx() - before == 2000
    assert running_server.alive()  # not ours to stop
    assert [r.name for r in gen.commands()] == ["trex-build", "trex-worker"]
    # The client claims another API version: the server's refusal, naming both, and what to install.
    bad = Trex(server={"host": "127.0.0.1"}, api_override={"major": 4, "minor": 9})
    trex.append(bad)
    with pytest.raises(
        GeneratorError,
        match=r"connect: RPC version mismatch.*server: '5.1', client: "
        r"'4.9'.*lbr-trex-client 3.4.0, API STL 5.1.*install the lbr-trex-client release",
    ):
        bad.prepare(parse_scenario(HEAD + text), tmp_path / "b", 3, Endpoint(pair.gen, "veth0"))
    assert bad.status() == "failed" and running_server.alive()
    # Nothing listens at this port: a clear error, nothing left.
    none = Trex(server={"host": "127.0.0.1", "sync_port": 4611, "async_port": 4610}, rpc_timeout=2)
    trex.append(none)
    with pytest.raises(
        GeneratorError, match=r"connect: .*Failed to get server response from tcp://127.0.0.1:4611"
    ):
        none.prepare(parse_scenario(HEAD + text), tmp_path / "c", 3, Endpoint(pair.gen, "veth0"))
    assert none.status() == "failed" and none.wait(1)


def test_server_killed_mid_run_fails_cleanly(trex, pair, tmp_path):
    gen = Trex()
    trex.append(gen)
    s = parse_scenario(
        HEAD + "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9,"
        " rate: 1000, duration: 30s}\n"
    )
    gen.prepare(s, tmp_path, 3, Endpoint(pair.gen, "veth0"))
    gen.start()
    time.sleep(1.5)
    pid = gen.server.proc.pid
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(GeneratorError, match=r"the TRex server exited during the run.*SIGKILL"):
        gen.wait(30)
    assert time.monotonic() - t0 < 15
    assert gen.status() == "failed" and gen.wait(1) is True  # raised once
    assert all(r.exit_code is not None for r in gen.commands())
    assert not (DPDK_RUN / gen.server.prefix).exists()
    assert (tmp_path / "trex-stats.json").is_file()
    assert "exited during the run" in gen.server.proc.record.note


def test_a_stop_on_request_stops_the_traffic_and_keeps_consistent_counters(trex, pair, tmp_path):
    gen = Trex()
    trex.append(gen)
    s = parse_scenario(
        HEAD + "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9,"
        " rate: 5000, packets: 100000}\n"
    )
    before = pair.rx()
    gen.prepare(s, tmp_path, 3, Endpoint(pair.gen, "veth0"))
    t0 = time.monotonic()
    gen.start()  # the server and the worker are up since prepare: start only says go
    assert time.monotonic() - t0 < 1.0
    time.sleep(0.5)
    gen.stop(interrupt=True)
    assert gen.wait(1) and gen.status() == "interrupted"
    sent = gen.counters().packets_sent
    time.sleep(0.2)
    assert 0 < sent < 100000 and pair.rx() - before == sent
    assert all(r.exit_code is not None for r in gen.commands())


def test_a_port_held_by_another_user_is_not_taken(trex, pair, tmp_path, running_server):
    """acquire without force: the other owner's port is refused with TRex's own words."""
    import sys

    holder = subprocess.Popen(
        pair.topology.exec_argv(
            "gen",
            sys.executable,
            "-W",
            "ignore",
            "-c",
            "import lbr_trex_client, sys, time\nfrom trex.stl.api import STLClient\n"
            "c = STLClient(server='127.0.0.1', username='someone-else', verbose_level='error')\n"
            "c.connect(); c.acquire(ports=[0]); print('held', flush=True); time.sleep(30)",
        ),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        gen = Trex(server={"host": "127.0.0.1"})
        trex.append(gen)
        with pytest.raises(GeneratorError, match=r"acquire: .*someone-else"):
            gen.prepare(
                parse_scenario(
                    HEAD + "  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.1,"
                    " rate: 10, packets: 1}\n"
                ),
                tmp_path,
                3,
                Endpoint(pair.gen, "veth0"),
            )
    finally:
        holder.kill()
        holder.wait()


def test_a_testbed_run_with_generator_trex(trex, tmp_path, run_scenario):
    """The whole lifecycle: `generator: trex` in a scenario, the default topology, tcpdump on the
    tap, the manifest with the common counters and TRex's port statistics, nothing left."""
    path = tmp_path / "trex.yaml"
    path.write_text(
        HEAD + "  - {protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000,"
        " dst_port: 9, rate: 20kpps, packets: 4000, payload: {size: 18}}\n"
        "generator: trex\ntestbed:\n  generators: [{name: trex, rate_unit: bps_L2}]\n"
    )
    run = run_scenario(path)
    assert run.ok, run.messages
    step = run.manifest["steps"][0]
    gen = step["generators"]["trex"]
    assert (
        gen["status"] == "completed"
        and gen["packets_sent"] == 4000
        and gen["bytes_sent"] == 4000 * 60
    )
    assert gen["port_stats"]["gen0"]["opackets"] == 4000
    assert gen["port_stats"]["trex"]["server_version"] == "v3.08"
    assert step["loss"]["wire"] == 4000
    folder = run.run_dir / step["dir"] / "gen-trex"
    assert "bps_L2 = 10240000.0" in (folder / "trex-profile.py").read_text()
    names = [c["name"] for c in run.manifest["commands"]]
    assert {"trex-build", "trex-server", "trex-worker"} <= set(names)
    for c in run.manifest["commands"]:
        if c.get("pid") and c["name"].startswith("trex"):
            assert c.get("exit_code") is not None, c


def test_topspeed_is_continuous_at_its_explicit_rate_and_stopped_after_the_duration(
    trex, pair, tmp_path
):
    from ntgcore.scenario import load_scenario

    s = load_scenario(
        Path(__file__).resolve().parent.parent / "scenarios" / "seed001-ostinato.yaml"
    ).scenario
    gen = Trex(topspeed_pps=50_000)
    trex.append(gen)
    before = pair.rx()
    gen.prepare(s, tmp_path, 1, Endpoint(pair.gen, "veth0", pace="topspeed", duration_s=1.0))
    gen.start()
    assert gen.wait(30) and gen.status() == "completed"
    sent = gen.counters().packets_sent
    time.sleep(0.2)
    assert (
        40_000 < sent < 65_000 and pair.rx() - before == sent
    )  # 1 s at 50 kpps, give or take a poll
    assert gen.counters().bytes_sent == 60 * sent


def test_a_server_killed_in_a_testbed_run_fails_the_run_and_finalises_its_folder(
    trex, tmp_path, run_scenario, ntg_results
):
    import threading

    import psutil

    path = tmp_path / "trexkill.yaml"
    path.write_text(
        HEAD + "  - {protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, dst_port: 9, rate: 2000,"
        " duration: 20s}\ngenerator: trex\ntestbed: {capture: null}\n"
    )
    out: dict = {}
    runner = threading.Thread(target=lambda: out.setdefault("run", run_scenario(path)), daemon=True)
    runner.start()
    victim = None
    deadline = time.monotonic() + 30
    while victim is None and time.monotonic() < deadline:
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            if any(a.endswith("_t-rex-64-o") for a in cmd) and any(
                str(ntg_results) in a for a in cmd
            ):
                victim = p
        time.sleep(0.1)
    assert victim is not None, "the run's TRex server did not appear"
    time.sleep(4.0)  # the server up, the worker connected, the traffic running
    victim.kill()
    runner.join(60)
    assert not runner.is_alive()
    run = out["run"]
    assert not run.ok and run.manifest["status"] == "failed"
    step = run.manifest["steps"][0]
    assert "the TRex server exited during the run (killed by SIGKILL)" in step["error"]
    server = next(c for c in run.manifest["commands"] if c["name"] == "trex-server")
    assert server["status"] == "killed by SIGKILL" and "exited during the run" in server["note"]
    for c in run.manifest["commands"]:
        assert c.get("exit_code") is not None or c["status"] != "running", c
        if c.get("pid"):
            assert (
                not psutil.pid_exists(c["pid"])
                or psutil.Process(c["pid"]).status() == psutil.STATUS_ZOMBIE
            )
    now = set(
        subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    )
    assert (
        run.manifest["testbed"]["namespaces"]
        and not set(run.manifest["testbed"]["namespaces"]) & now
    )
    assert (run.run_dir / "manifest.json").is_file() and (
        run.run_dir / "gen-trex" / "trex-stats.json"
    ).is_file()


def test_per_stream_statistics(trex, pair, tmp_path):
    gen = Trex(stream_stats=True)
    flow = (
        "  - {{name: {name}, protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: {port},"
        " rate: 10kpps, packets: {n}}}\n"
    )
    run(
        trex,
        gen,
        flow.format(name="a", port=1, n=1500) + flow.format(name="b", port=2, n=700),
        tmp_path,
        Endpoint(pair.gen, "veth0"),
    )
    streams = gen.port_stats()["streams"]
    assert {k: v["tx_pkts"] for k, v in streams.items()} == {
        "flows[0] (a)": 1500,
        "flows[1] (b)": 700,
    }
    assert streams["flows[1] (b)"]["tx_bytes"] == 700 * 64 and streams["flows[1] (b)"]["pg_id"] == 2
    assert gen.counters().packets_sent == 2200
    assert "stream_stats" in (tmp_path / "trex-approximations.txt").read_text()
