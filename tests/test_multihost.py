"""Several generator hosts started together (testbed.spread, docs/multihost.md): the split by flow
hash (no root), the start barrier (ntgcore.startat), and real runs on the two-hosts topology: the
merged capture's count equals the sum of the hosts' counters exactly, the start skew is reported,
and an inventory naming a host the topology does not have fails before any traffic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import skip_or_fail

from analysis.capture import read_capture
from analysis.hashing import hash_tuple, make_tuple
from generators.flowengine import engine_options
from generators.flowengine.session import compile_session
from ntgcore.errors import BadInput, RunSetupError
from ntgcore.scenario import ScenarioError, load_scenario, parse_scenario
from ntgcore.startat import AtTime
from testbed.endpoints.netns import NetnsEndpoint
from testbed.endpoints.netns.topology import netns_argv
from testbed.methods import PROTOCOL_NUMBERS
from testbed.methods.run import plan
from testbed.runner import run_scenario as run_live

REPO = Path(__file__).resolve().parent.parent
ROOT = pytest.mark.usefixtures("root")


def scenario_text(
    flows: int = 8,
    hosts: str = '[{at: "h0:eth0", capture: "rx:rx0"}, {at: "h1:eth0", capture: "rx:rx1"}]',
    capture: str = '{at: "tap:tap0"}',
    duration: str = "1s",
    rate: int = 1000,
    method: str = "run",
) -> str:
    lines = [
        f"  - {{name: u{i}, protocol: udp, src: 198.18.20.{i + 1}, dst: 198.19.20.1, src_port: {40000 + i}, "
        f"dst_port: 5000, rate: {rate}, duration: {duration}, payload: {{size: 100}}}}"
        for i in range(flows)
    ]
    return (
        textwrap.dedent("""\
        version: 1
        name: mh-test
        flows:
        """)
        + "\n".join(lines)
        + textwrap.dedent(f"""
        testbed:
          topology: two-hosts
          method: {method}
          generators: [{{name: flowengine}}]
          spread: {{hash: murmur3_32, start_lead: 500ms, hosts: {hosts}}}
          capture: {capture}
        """)
    )


# -- the split (no root) -----------------------------------------------------------------------


def test_the_split_gives_each_flow_to_the_host_its_hash_names_and_is_stable():
    sc = parse_scenario(scenario_text(flows=12), "mh.yaml")
    step = plan(sc)[0]
    hosts = step.params["spread"]["hosts"]
    # derived again here from the hash library itself: host = murmur3_32(first 5-tuple) mod 2
    want = [
        int(
            hash_tuple(
                "murmur3_32",
                make_tuple(
                    f.src.interface.ip.packed,
                    f.dst.interface.ip.packed,
                    f.src_port.bounds[0],
                    f.dst_port.bounds[0],
                    PROTOCOL_NUMBERS[f.protocol],
                ),
            )
        )
        % 2
        for f in sc.flows
    ]
    assert [h["flows"] for h in hosts] == [
        [i for i, w in enumerate(want) if w == k] for k in (0, 1)
    ]
    assert sorted(hosts[0]["flows"] + hosts[1]["flows"]) == list(range(12))
    assert [g.title for g in step.generators] == ["h0", "h1"]
    assert [g.at for g in step.generators] == ["h0:eth0", "h1:eth0"]
    assert [f.name for f in step.shares["h1"].flows] == hosts[1]["flow_names"]
    assert hosts[0]["packets_planned"] + hosts[1]["packets_planned"] == 12 * 1000
    assert step.scenario.testbed.capture.also_at == ["rx:rx0", "rx:rx1"]
    assert step.params["start_lead_s"] == 0.5 and "mod 2" in step.params["spread"]["rule"]
    assert plan(parse_scenario(scenario_text(flows=12), "mh.yaml"))[0].params == step.params


def test_a_host_left_without_flows_or_a_bad_spread_is_refused_with_what_to_do():
    with pytest.raises(
        BadInput, match=r"hosts\[\d\].*none of the 1 flows; give more flows or fewer hosts"
    ):
        plan(parse_scenario(scenario_text(flows=1), "mh.yaml"))
    with pytest.raises(ScenarioError) as e:
        parse_scenario(scenario_text(hosts='[{at: "h0:eth0"}, {at: "h0:eth0"}]'), "mh.yaml")
    assert "two hosts have the same `at` h0:eth0" in str(e.value)
    with pytest.raises(ScenarioError, match="belongs to method `run`"):
        parse_scenario(
            scenario_text(method="comparison").replace("testbed:\n", "testbed:\n  duration: 1s\n"),
            "mh.yaml",
        )
    with pytest.raises(BadInput, match="testbed.spread.hash"):
        plan(parse_scenario(scenario_text().replace("murmur3_32", "nohash"), "mh.yaml"))


def catches_sigterm(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), 16)
    return bool(mask & (1 << (15 - 1)))


def test_the_start_barrier_holds_a_command_until_the_agreed_time(tmp_path):
    at_ns = time.time_ns() + 300_000_000
    wrapped = AtTime(NetnsEndpoint("ntgmh-h0", "eth0"), at_ns)  # any back end's endpoint, held
    assert wrapped.argv("x", "-y") == netns_argv(
        "ntgmh-h0", sys.executable, "-m", "ntgcore.startat", str(at_ns), "--", "x", "-y"
    )
    assert (wrapped.iface, wrapped.pace, wrapped.where) == (
        "eth0",
        "realtime",
        "network namespace 'ntgmh-h0'",
    )
    cmd = [
        sys.executable,
        "-m",
        "ntgcore.startat",
        str(at_ns),
        "--",
        sys.executable,
        "-c",
        "import time; print(time.time_ns())",
    ]
    out = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert int(out.stdout) >= at_ns
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    waiting = subprocess.Popen(
        [sys.executable, "-m", "ntgcore.startat", str(time.time_ns() + 60 * 10**9), "--", "true"],
        env=env,
    )
    while not catches_sigterm(waiting.pid):  # its handler is installed: it is waiting now
        time.sleep(0.05)
    waiting.terminate()  # stopped while it waits: the status of a command stopped by SIGTERM
    assert waiting.wait(timeout=10) == 143
    bad = subprocess.run(
        [sys.executable, "-m", "ntgcore.startat", "soon", "--", "true"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_the_engine_waits_for_start_at_after_its_set_up(tmp_path, flowengine_bin):
    if "--start-at" not in engine_options(Path(flowengine_bin)):
        skip_or_fail(
            f"{flowengine_bin} predates `gen --start-at`: reinstall the project (pip install .)"
        )
    session = tmp_path / "s.ntg"
    sc = parse_scenario(scenario_text(flows=2), "mh.yaml")
    session.write_text(compile_session(sc.model_copy(update={"testbed": None}), 1))
    at_ns = time.time_ns() + 300_000_000
    out = subprocess.run(
        [
            str(flowengine_bin),
            "gen",
            str(session),
            "--null",
            "--start-at",
            str(at_ns),
            "--summary",
            str(tmp_path / "sum.json"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert (
        time.time_ns() >= at_ns
        and json.loads((tmp_path / "sum.json").read_text())["packets"] == 2000
    )
    assert "after --start-at" not in out.stderr, out.stderr
    late = subprocess.run(  # a start time already past: sent at once, and said
        [str(flowengine_bin), "gen", str(session), "--null", "--start-at", str(at_ns - 2 * 10**9)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert late.returncode == 0 and "s after --start-at; the schedule starts now" in late.stderr
    bad = subprocess.run(
        [str(flowengine_bin), "gen", str(session), "--null", "--start-at", "soon"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "--start-at: expected ns since the epoch" in bad.stderr


# -- live runs on the two-hosts topology --------------------------------------------------------


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def run(tmp_path: Path, run_scenario, text: str):
    path = tmp_path / "mh.yaml"
    path.write_text(text)
    result = run_scenario(str(path))
    made = set(result.manifest["testbed"]["namespaces"] or [])
    assert len(made) == 4 and not made & namespaces(), "namespaces left behind"
    return result, Path(result.run_dir)


@ROOT
def test_two_hosts_merged_counts_equal_the_hosts_counters_and_the_skew_is_measured(
    tmp_path, run_scenario
):
    result, run_dir = run(tmp_path, run_scenario, scenario_text())
    step = result.manifest["steps"][0]
    spread = step["spread"]
    assert result.manifest["status"] == "completed", result.manifest.get("error")
    hosts = spread["hosts"]
    for h in hosts:  # every host sent its own share, all of it
        assert h["status"] == "completed" and h["packets_sent"] == h["packets_planned"] > 0
        own = read_capture(run_dir / h["capture_file"])
        assert len(own) == h["captured"] == h["packets_sent"]
        assert int(own.ts_ns[0]) == h["first_packet_ns"]
        share = {f"198.18.20.{i + 1}" for i in h["flows"]}
        assert {f"198.18.20.{int(x) & 0xFF}" for x in set(own.src_lo.tolist())} == share
    merged = read_capture(run_dir / spread["merged"]["file"])
    total = sum(h["packets_sent"] for h in hosts)
    assert len(merged) == total == 8 * 1000 and (merged.ts_ns[1:] >= merged.ts_ns[:-1]).all()
    assert step["capture"]["captured"] == total  # the tap sees both hosts: the analysis's capture
    assert all(c["ok"] for c in spread["checks"]) and len(spread["checks"]) == 3
    assert spread["start_at_ns"] == step["start_at_ns"] and spread["start_skew_ms"] >= 0
    offsets = [h["start_offset_ms"] for h in hosts]
    assert spread["start_skew_ms"] == pytest.approx(max(offsets) - min(offsets))
    assert all(
        h["first_packet_ns"] >= spread["start_at_ns"] for h in hosts
    )  # no host started early
    held = [
        c["argv"]
        for c in result.manifest["commands"]
        if any(a.endswith("flowengine") for a in c["argv"])
    ]
    assert len(held) == 2 and all(
        str(spread["start_at_ns"]) in argv for argv in held
    )  # engine or waiter holds it
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert [r["host"] for r in metrics["spread"]] == ["h0", "h1", "merged"]
    assert any(
        "merged capture = sum of the hosts' generator counters" in c["name"] and c["ok"]
        for c in metrics["checks"]
    )
    assert "Generator hosts" in (run_dir / "report.md").read_text()
    assert result.exit_code == 0


@ROOT
def test_without_a_tap_the_merged_capture_is_the_one_the_analysis_reads(tmp_path, run_scenario):
    result, run_dir = run(tmp_path, run_scenario, scenario_text(capture='{at: "rx:rx0"}', flows=6))
    step = result.manifest["steps"][0]
    spread = step["spread"]
    assert result.manifest["status"] == "completed", result.manifest.get("error")
    assert spread["merged"]["file"] == "capture.pcap" and spread["merged"]["is_step_capture"]
    total = sum(h["packets_sent"] for h in spread["hosts"])
    assert len(read_capture(run_dir / "capture.pcap")) == total == 6000
    assert (run_dir / "capture-rx-rx0.pcap").is_file() and (
        run_dir / "capture-rx-rx1.pcap"
    ).is_file()
    assert step["capture"]["captured"] == total and step["loss"]["wire"] == total
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"][0]["traffic"]["packets"] == total
    assert all(c["ok"] for c in metrics["checks"]) and result.exit_code == 0


@ROOT
@pytest.mark.serial  # compares every namespace of the machine before and after
def test_an_inventory_naming_a_host_the_topology_lacks_fails_before_traffic(tmp_path):
    path = tmp_path / "mh.yaml"
    path.write_text(scenario_text(hosts='[{at: "h0:eth0", capture: "rx:rx0"}, {at: "h7:eth0"}]'))
    before = namespaces()
    with pytest.raises(RunSetupError) as e:
        run_live(load_scenario(path), tmp_path / "out", show_progress=False)
    assert "testbed.generators: `h7:eth0` is not an interface of topology" in str(e.value)
    assert e.value.exit_status == 2
    (folder,) = (tmp_path / "out").iterdir()  # the run folder is kept, saying why
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "h7:eth0" in manifest["error"]
    assert namespaces() == before


# -- the Ansible side: site.yml's multihost plays, run for real on this machine ----------------


def ansible_playbook() -> str:
    path = Path(sys.executable).parent / "ansible-playbook"
    if not path.exists():
        pytest.skip("ansible-playbook is not installed (pip install '.[test]')")
    return str(path)


def play(
    inventory: Path,
    results: Path,
    hosts: list[str],
    scenario: Path = REPO / "scenarios" / "two-hosts.yaml",
):
    extra = json.dumps(
        {
            "multihost_scenario": str(scenario),
            "multihost_results": str(results),
            "multihost_hosts": hosts,
            "multihost_start_lead_s": 1,
            "multihost_connect_timeout": 3,
        }
    )
    # explicit: the provisioning plays before would gather facts on every host first (slow, not needed)
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "PYTHONPATH": str(REPO),
        "ANSIBLE_GATHERING": "explicit",
    }
    return subprocess.run(
        [
            ansible_playbook(),
            "-i",
            str(inventory),
            "playbooks/site.yml",
            "--tags",
            "multihost",
            "-e",
            extra,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=180,
    )


def inventory(tmp_path: Path, lines: list[str], engine: Path) -> Path:
    path = tmp_path / "inventory.ini"
    path.write_text(
        "\n".join(
            [
                "[generators]",
                *lines,
                "",
                "[all:vars]",
                f"ansible_python_interpreter={sys.executable}",
                f"multihost_python={sys.executable}",
                f"multihost_flowengine={engine}",
                f"multihost_pythonpath={REPO}",
                "",
            ]
        )
    )
    return path


@ROOT
def test_site_yml_starts_two_hosts_at_one_time_and_fetches_what_collect_merges(
    tmp_path, topology, flowengine_bin
):
    topo = topology("two-hosts")
    inv = inventory(
        tmp_path,
        [
            f"""mh{i} ansible_connection=local multihost_iface=eth0 multihost_dir={tmp_path}/host{i} """
            f"""multihost_exec_prefix='["ip", "netns", "exec", "{topo.netns(f"h{i}")}"]'"""
            for i in (0, 1)
        ],
        flowengine_bin,
    )
    results = tmp_path / "results"
    dumps = []
    for share, port in (
        ("h0", "rx0"),
        ("h1", "rx1"),
    ):  # the collector: the receiver's port facing each host
        (results / share).mkdir(parents=True)
        dumps.append(
            subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    topo.netns("rx"),
                    "tcpdump",
                    "-q",
                    "-n",
                    "-i",
                    port,
                    "-s",
                    "96",
                    "-w",
                    str(results / share / "capture.pcap"),
                    "--time-stamp-precision",
                    "nano",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )
    time.sleep(1.0)  # tcpdump listening
    scenario = tmp_path / "mh.yaml"
    scenario.write_text(scenario_text())  # 8 flows of 1,000 packets/s for 1 s
    try:
        p = play(inv, results, ["mh0", "mh1"], scenario)
    finally:
        time.sleep(0.5)
        for d in dumps:
            d.send_signal(2)
            d.wait(timeout=10)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    c = subprocess.run(
        [sys.executable, "-m", "testbed", "spread", "--out", str(results), "--collect"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert c.returncode == 0, c.stdout + c.stderr
    doc = json.loads((results / "spread-collected.json").read_text())
    planned = sum(h["packets_planned"] for h in doc["hosts"])
    assert doc["packets_sent"] == planned == 8000
    assert doc["merged"]["packets"] == planned and all(c["ok"] for c in doc["checks"])
    assert doc["start_skew_ms"] is not None and doc["start_at_ns"] == int(
        (results / "start_at_ns").read_text()
    )
    assert all(h["first_packet_ns"] >= doc["start_at_ns"] for h in doc["hosts"])


@ROOT
def test_site_yml_stops_before_traffic_for_a_host_not_in_the_inventory_or_unreachable(
    tmp_path, flowengine_bin
):
    inv = inventory(
        tmp_path,
        [
            "mh0 ansible_connection=local multihost_iface=eth0",
            # sshd is not listening on loopback port 1: refused at once
            "far ansible_host=127.0.0.1 ansible_port=1 ansible_connection=ssh multihost_iface=eth0",
        ],
        flowengine_bin,
    )
    p = play(inv, tmp_path / "r1", ["mh0", "ghost"])
    assert (
        p.returncode != 0
        and "multihost_hosts names ghost that the inventory does not have" in p.stdout
    )
    assert (
        not (tmp_path / "r1" / "spread.json").exists()
        and not (tmp_path / "r1" / "start_at_ns").exists()
    )
    p = play(inv, tmp_path / "r2", ["mh0", "far"])
    assert (
        p.returncode != 0
        and "far is not usable" in p.stdout
        and "no host has sent anything" in p.stdout
    )
    assert (tmp_path / "r2" / "spread.json").is_file()  # what was done is kept
    assert not (
        tmp_path / "r2" / "start_at_ns"
    ).exists()  # no start time was agreed: nothing started
