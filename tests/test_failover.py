"""Method `failover` on real namespaces with a real keepalived pair: the outage measured from the
client's capture, the fault in the manifest, nothing left running; and the plan (no root)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import skip_or_fail

import generators.probe
import testbed.methods.failover as failover
from generators.probe import probe_flows
from ntgcore.endpoint import Endpoint
from ntgcore.errors import GeneratorError
from ntgcore.registry import GENERATORS, METHODS
from ntgcore.scenario import ScenarioError, parse_scenario
from testbed.endpoints.netns import NetnsEndpoint, NetnsSite
from testbed.endpoints.netns.topology import load_topology
from testbed.parts.vrrp import VrrpError, VrrpPair

# The entry points of pyproject.toml register both; a venv installed before they existed has not.
if "probe" not in GENERATORS:
    GENERATORS.register("probe", generators.probe.PLUGIN)
if "failover" not in METHODS:
    METHODS.register("failover", failover.METHOD)

ROOT = pytest.mark.usefixtures("root")


def scenario_text(failover_section: str, duration: str = "1500ms") -> str:
    return textwrap.dedent(f"""\
        version: 1
        name: fo-test
        flows:
          - {{name: ping, protocol: icmp, src: 198.18.1.10, dst: 198.18.1.1, rate: 1000, duration: {duration}}}
          - {{name: udp, protocol: udp, src: 198.18.1.10, dst: 198.18.1.1, dst_port: 7777, rate: 1000,
              duration: {duration}}}
          - {{name: tcp, protocol: tcp, src: 198.18.1.10, dst: 198.18.1.1, dst_port: 7777, rate: 100,
              duration: {duration}, payload: {{size: 16}}}}
        testbed:
          topology: failover
          method: failover
          generators: [{{name: probe, at: "client:cl0"}}]
          capture: {{at: "client:cl0"}}
          failover:
        """) + textwrap.indent(textwrap.dedent(failover_section), "    ")


def test_the_plan_is_one_step_per_interval_fault_and_trial():
    sc = parse_scenario(
        scenario_text("""\
        advert_int: [1s, 100ms]
        fault: [link-down, kill]
        trials: 2
        fault_at: 700ms
    """),
        "fo.yaml",
    )
    again = failover.plan(
        parse_scenario(
            scenario_text(
                "advert_int: [1s, 100ms]\nfault: [link-down, kill]\ntrials: 2\nfault_at: 700ms\n"
            ),
            "fo.yaml",
        )
    )
    steps = failover.plan(sc)
    assert [s.name for s in steps] == [
        "adv1s-link-down-1",
        "adv1s-link-down-2",
        "adv1s-kill-1",
        "adv1s-kill-2",
        "adv100ms-link-down-1",
        "adv100ms-link-down-2",
        "adv100ms-kill-1",
        "adv100ms-kill-2",
    ]
    first, kill = steps[0].scenario.testbed, steps[2].scenario.testbed
    assert first.failover.advert_int == [1_000_000_000] and first.failover.vrrp_version == 3
    assert (first.faults[0].kind, first.faults[0].at) == ("link-down", "master:m0")
    assert (kill.faults[0].kind, kill.faults[0].process) == ("kill", "vrrp:master")
    # each trial meets the VRRP cycle at its own point: fault_at plus up to one interval, seeded
    starts = [s.scenario.testbed.faults[0].start for s in steps]
    assert all(
        700_000_000 <= t < 700_000_000 + s.params["advert_int_s"] * 1e9
        for t, s in zip(starts, steps)
    )
    assert len(set(starts)) == len(starts) and starts == [
        s.scenario.testbed.faults[0].start for s in again
    ]
    assert steps[4].params == {
        "advert_int_s": 0.1,
        "vrrp_version": 3,
        "trial": 1,
        "fault": "link-down",
        "fault_at_s": starts[4] / 1e9,
    }
    off = failover.plan(parse_scenario(scenario_text("fault: power-off\n"), "fo.yaml"))[
        0
    ].scenario.testbed
    assert (off.faults[0].kind, off.faults[0].at, off.faults[0].process) == (
        "power-off",
        "master:m0",
        None,
    )
    fixed = failover.plan(
        parse_scenario(scenario_text("fault_phase: fixed\ntrials: 2\nfault_at: 700ms\n"), "fo.yaml")
    )
    assert [s.scenario.testbed.faults[0].start for s in fixed] == [700_000_000, 700_000_000]


@pytest.mark.parametrize(
    "section, line, words",
    [
        (
            "advert_int: 150ms\nversion: 2\n",
            15,
            "VRRPv2 counts whole seconds",
        ),  # the section's line
        ("advert_int: 5ms\n", 15, "10 ms steps"),
        ("master_priority: 50\n", 15, "higher than `backup_priority`"),
        ("trials: 2\nvip: 10.0.0.1/24\n", 16, "198.18.0.0/15"),  # the field's line
        ("fault: netem\n", 15, "fault"),  # not a fail-over fault
        ("vip: 198.18.2.1/24\n", 4, "probes the virtual address 198.18.2.1 from 198.18.2.0/24"),
    ],
)
def test_bad_failover_settings_are_refused_with_file_and_line(section, line, words):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(scenario_text(section), "fo.yaml")
    text = "\n".join(err.value.problems)
    assert text.startswith(
        f"fo.yaml:{line}: testbed.failover" if line > 4 else f"fo.yaml:{line}: flows[0].dst"
    ), text
    assert words in text


def keepalived_pids(under: Path) -> list[int]:
    """The keepalived processes whose command line names a file below `under` (a run's)."""
    out = subprocess.run(["pgrep", "-x", "keepalived"], capture_output=True, text=True).stdout
    found = []
    for pid in map(int, out.split()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(under).encode() in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.fixture
def live(tmp_path, root):
    if shutil.which("keepalived") is None:
        skip_or_fail(
            "keepalived is not installed (apt-get install keepalived; ./bootstrap.sh test does)"
        )
    return tmp_path


def run(tmp_path: Path, run_scenario, section: str, duration: str = "1500ms"):
    path = tmp_path / "fo.yaml"
    path.write_text(scenario_text(section, duration))
    result = run_scenario(str(path))
    assert (Path(result.run_dir) / result.manifest["steps"][0]["dir"] / "vrrp").is_dir()
    assert not keepalived_pids(Path(result.run_dir)), "keepalived left running"
    made = set(result.manifest["testbed"]["namespaces"] or [])
    assert len(made) == 4 and not made & namespaces(), "namespaces left behind"
    return result


@ROOT
def test_a_link_down_on_the_master_is_an_outage_the_backup_ends(live, run_scenario):
    r = run(
        live,
        run_scenario,
        """\
        advert_int: 100ms
        fault: [link-down, kill]
        fault_at: 500ms
        trials: 2
    """,
    )
    assert r.ok, r.messages
    rows = {(x["step"], x["protocol"]): x for x in r.metrics["failover"]}
    master_down = 3 * 0.1 + (256 - 100) / 256 * 0.1  # RFC 5798: 3 adverts + the backup's skew
    for k in (1, 2):
        for proto in ("icmp", "udp"):
            row = rows[(f"adv100ms-link-down-{k}", proto)]
            assert row["requests"] >= 1400 and row["lost"] > 0, row
            # the outage is the backup's master-down interval less the time since the master's
            # last advertisement (up to one interval), measured to the ms by the probes
            assert master_down - 0.1 - 0.05 < row["max_gap_s"] < master_down + 0.5, row
            assert abs(row["loss_outage_s"] - row["max_gap_s"]) < 0.05, row
            assert (
                -0.2 < row["gap_start_s"] < 0.005
                and row["fault_to_recovery_s"] > master_down - 0.15
            ), row
            assert 0 < row["backup_master_after_s"] < row["fault_to_recovery_s"] + 0.05, row
        udp = rows[(f"adv100ms-link-down-{k}", "udp")]
        assert udp["master_answered_before"] and udp["backup_answered"], udp
        assert abs(udp["fault_to_first_backup_reply_s"] - udp["fault_to_recovery_s"]) < 0.01, udp
        # the backup has no state of the TCP session: it resets it once the address is its own
        tcp = rows[(f"adv100ms-link-down-{k}", "tcp")]
        assert (
            tcp["tcp_survived"] is False
            and tcp["tcp_reset_after_s"] >= udp["fault_to_recovery_s"] - 0.01
        ), tcp
    # kill -9 of the master's keepalived: the backup takes over, yet the master's kernel still
    # holds the address and answers, so the probes hardly notice
    kill = rows[("adv100ms-kill-1", "udp")]
    assert kill["backup_answered"] and kill["backup_master_after_s"] < 1.0, kill
    manifest = r.manifest
    for step in manifest["steps"]:
        (ev,) = step["faults"]["events"]
        assert (
            ev["kind"] == step["params"]["fault"]
            and 0 < ev["applied_realtime_ns"] <= ev["in_effect_realtime_ns"]
        )
        assert ev["undone"] is (True if ev["kind"] == "link-down" else None)
        assert step["vrrp"]["macs"]["master"] != step["vrrp"]["macs"]["backup"]
        expected = "killed by SIGKILL" if ev["kind"] == "kill" else "exit status 0"
        assert step["vrrp"]["keepalived"]["master"] == expected, step["vrrp"]
    run_dir = Path(r.run_dir)
    assert (run_dir / "failover-sequence.png").is_file()
    assert "adv100ms-link-down-1" in (run_dir / "report.md").read_text()
    assert (run_dir / "adv100ms-link-down-1" / "vrrp" / "master.conf").read_text().count(
        "advert_int 0.1"
    ) == 1
    for c in manifest["commands"]:
        assert c.get("exit_code") is not None or c["status"] != "running", c


@ROOT
def test_a_keepalived_that_never_becomes_master_fails_before_traffic(live, run_scenario):
    r = run(
        live,
        run_scenario,
        """\
        trials: 1
        ready_timeout: 10ms
    """,
    )
    assert not r.ok
    step = r.manifest["steps"][0]
    assert "keepalived never became ready within 0.01 s" in step["error"], step["error"]
    assert step["generators"] == {}  # the step ended before the probes were even prepared
    json.dumps(r.manifest)  # the manifest is written whole


# A driver for the CLI in a child process, with the two plugins registered as above.
DRIVER = (
    "import sys\n"
    "from ntgcore.registry import GENERATORS, METHODS\n"
    "import generators.probe, testbed.methods.failover as fo\n"
    "'probe' in GENERATORS or GENERATORS.register('probe', generators.probe.PLUGIN)\n"
    "'failover' in METHODS or METHODS.register('failover', fo.METHOD)\n"
    "from testbed.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
REPO = Path(__file__).resolve().parent.parent


def running_children(marks: Path) -> tuple[set[str], dict | None]:
    """The names of the children the live run's mark lists so far, and the mark."""
    for p in marks.glob("*.json"):
        try:
            doc = json.loads(p.read_text())
        except ValueError:  # being written
            continue
        return {c["name"] for c in doc["children"]}, doc
    return set(), None


def cli(*args: str, marks: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "NTG_RUN_MARKS": str(marks),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@ROOT
def test_kill_9_of_the_testbed_leaves_no_keepalived_after_cleanup(live):
    """keepalived's VRRP child may outlive the testbed (adopted by init when its parent ended);
    after `testbed cleanup` deleted the run's namespaces no keepalived of the run is left."""
    marks, out = live / "marks", live / "out"
    path = live / "fo.yaml"
    path.write_text(scenario_text("trials: 1\nfault_at: 25s\n", duration="30s"))
    run = cli("run", str(path), "--out", str(out), "--no-analyze", marks=marks)
    deadline, mark = time.monotonic() + 30, None
    try:
        while time.monotonic() < deadline and mark is None:
            names, doc = running_children(marks)
            if {"keepalived-master", "keepalived-backup", "probe"} <= names:
                mark = doc
            time.sleep(0.1)
        assert mark is not None, run.communicate(timeout=60)
    finally:
        run.kill()
        run.wait()
    time.sleep(0.5)
    done = cli("cleanup", marks=marks)
    stdout, stderr = done.communicate(timeout=120)
    assert done.returncode == 0, stderr
    assert all(f"deleted namespace {ns}" in stdout for ns in mark["locations"]), stdout
    deadline = time.monotonic() + 5
    while keepalived_pids(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not keepalived_pids(out), "keepalived left running after cleanup"
    assert not set(mark["locations"]) & namespaces()


@ROOT
def test_ctrl_c_undoes_the_fault_and_stops_keepalived(live):
    """Ctrl-C while the master's keepalived is frozen (SIGSTOP) and its link is down: the run ends
    `interrupted`, both faults are undone (SIGCONT, link up) before the pair stops, nothing stays."""
    marks, out = live / "marks", live / "out"
    path = live / "fo.yaml"
    path.write_text(
        scenario_text(
            "advert_int: 100ms\ntrials: 1\nfault: stop\nfault_at: 200ms\nfault_phase: fixed\n",
            duration="30s",
        )
        + '  faults:\n    - {kind: link-down, at: "master:m0", start: 300ms}\n'
    )
    run = cli("run", str(path), "--out", str(out), "--no-analyze", marks=marks)
    try:
        deadline, sending = time.monotonic() + 30, False
        while time.monotonic() < deadline and not sending:
            sending = "probe" in running_children(marks)[0]
            time.sleep(0.1)
        assert sending, run.communicate(timeout=60)
        time.sleep(1.5)  # both faults applied
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, stderr
    (manifest,) = [json.loads(p.read_text()) for p in out.glob("*/manifest.json")]
    assert manifest["status"] == "interrupted"
    step = manifest["steps"][0]
    events = step["faults"]["events"]
    assert sorted(e["kind"] for e in events) == ["link-down", "stop"]
    assert all(
        e["undone"] is True and e["undone_realtime_ns"] > e["in_effect_realtime_ns"] for e in events
    )
    assert step["vrrp"]["keepalived"] == {
        "master": "exit status 0",
        "backup": "exit status 0",
    }  # continued, then SIGTERM
    assert not keepalived_pids(out)
    assert not set(manifest["testbed"]["namespaces"]) & namespaces()


def test_the_probe_refuses_what_it_cannot_number(tmp_path):
    two = scenario_text("trials: 1\n").replace(
        "testbed:",
        "  - {protocol: udp, src: 198.18.1.10, dst: 198.18.1.1, dst_port: 9, rate: 10, packets: 5}\ntestbed:",
    )
    with pytest.raises(GeneratorError, match="at most one udp flow"):
        probe_flows(parse_scenario(two, "fo.yaml"))
    v6 = textwrap.dedent("""\
        version: 1
        name: v6
        flows: [{protocol: icmpv6, src: "2001:db8::1", dst: "2001:db8::2", rate: 10, packets: 5}]
        testbed: {generators: [{name: probe, at: "gen:gen0"}]}
    """)
    with pytest.raises(GeneratorError, match="IPv4 icmp, udp or tcp, not icmpv6 over IPv6"):
        probe_flows(parse_scenario(v6, "fo.yaml"))
    flows = probe_flows(parse_scenario(scenario_text("trials: 1\n"), "fo.yaml"))
    assert [(f["protocol"], f["dport"], f["period_ns"], f["packets"]) for f in flows] == [
        ("icmp", 0, 1_000_000, 1500),
        ("udp", 7777, 1_000_000, 1500),
        ("tcp", 7777, 10_000_000, 150),
    ]


@dataclass(frozen=True)
class SwitchedEndpoint(NetnsEndpoint):
    """A namespace's interface with a power switch, as a VM's endpoint has (ntgcore's PowerSwitch):
    the pair is only made, never started, so nothing is switched."""

    local_processes = False  # as a VM's: its processes would be the guest's

    def power_off(self) -> None:
        raise AssertionError("not switched in this test")

    def power_on(self) -> None:
        raise AssertionError("not switched in this test")


class MasterInAVm(NetnsSite):
    def endpoint(
        self, place: str, pace: str = "realtime", duration_s: float | None = None
    ) -> Endpoint:
        ep = super().endpoint(place, pace, duration_s)
        return SwitchedEndpoint(**vars(ep)) if place.startswith("master:") else ep


@pytest.mark.parametrize("kind", ["kill", "stop"])
def test_kill_or_stop_of_a_master_in_a_vm_is_refused_when_the_pair_is_made(kind, tmp_path):
    """They signal a process of this machine; a master in a VM runs keepalived in its guest."""
    site = MasterInAVm(load_topology("failover"))
    spec = parse_scenario(scenario_text(f"fault: {kind}\n"), "fo.yaml").testbed.failover
    with pytest.raises(
        VrrpError, match=f"`{kind}` signals the master's keepalived .* is a VM: use power-off"
    ):
        VrrpPair(spec, site, tmp_path)
    pair = VrrpPair(spec.model_copy(update={"fault": ["power-off"]}), site, tmp_path)
    assert pair.in_vm == {"master"} and pair.pids() == {}
