"""Method `failover` on real namespaces with a real keepalived pair: the outage measured from the
client's capture, the fault in the manifest, nothing left running; and the plan (no root)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import skip_or_fail
from ntgcore.registry import GENERATORS, METHODS
from ntgcore.scenario import ScenarioError, parse_scenario

import generators.probe
import testbed.methods.failover as failover

# The entry points of pyproject.toml register both; a venv installed before they existed has not.
if "probe" not in GENERATORS:
    GENERATORS.register("probe", generators.probe.PLUGIN)
if "failover" not in METHODS:
    METHODS.register("failover", failover.METHOD)

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="fail-over runs create network namespaces: need root")


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
    sc = parse_scenario(scenario_text("""\
        advert_int: [1s, 100ms]
        fault: [link-down, kill]
        trials: 2
        fault_at: 700ms
    """), "fo.yaml")
    steps = failover.plan(sc)
    assert [s.name for s in steps] == ["adv1s-link-down-1", "adv1s-link-down-2", "adv1s-kill-1", "adv1s-kill-2",
                                       "adv100ms-link-down-1", "adv100ms-link-down-2", "adv100ms-kill-1",
                                       "adv100ms-kill-2"]
    first, kill = steps[0].scenario.testbed, steps[2].scenario.testbed
    assert first.failover.advert_int == [1_000_000_000] and first.failover.vrrp_version == 3
    assert (first.faults[0].kind, first.faults[0].at, first.faults[0].start) == ("link-down", "master:m0", 700_000_000)
    assert (kill.faults[0].kind, kill.faults[0].process) == ("kill", "vrrp:master")
    assert steps[4].params == {"advert_int_s": 0.1, "vrrp_version": 3, "trial": 1, "fault": "link-down",
                               "fault_at_s": 0.7}


@pytest.mark.parametrize("section, line, words", [
    ("advert_int: 150ms\nversion: 2\n", 15, "VRRPv2 counts whole seconds"),   # the section's line
    ("advert_int: 5ms\n", 15, "10 ms steps"),
    ("master_priority: 50\n", 15, "higher than `backup_priority`"),
    ("trials: 2\nvip: 10.0.0.1/24\n", 16, "198.18.0.0/15"),                 # the field's line
    ("fault: power-off\n", 15, "fault"),
])
def test_bad_failover_settings_are_refused_with_file_and_line(section, line, words):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(scenario_text(section), "fo.yaml")
    text = "\n".join(err.value.problems)
    assert text.startswith(f"fo.yaml:{line}: testbed.failover"), text
    assert words in text


def keepalived_pids() -> list[int]:
    out = subprocess.run(["pgrep", "-x", "keepalived"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.fixture
def live(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("fail-over runs create network namespaces: need root")
    if shutil.which("keepalived") is None:
        skip_or_fail("keepalived is not installed (apt-get install keepalived; ./bootstrap.sh test does)")
    if keepalived_pids():
        pytest.skip("a keepalived runs on this machine already: the leftover check would be meaningless")
    return tmp_path


def run(tmp_path: Path, run_scenario, section: str, duration: str = "1500ms"):
    path = tmp_path / "fo.yaml"
    path.write_text(scenario_text(section, duration))
    result = run_scenario(str(path))
    assert not keepalived_pids(), "keepalived left running"
    made = set(result.manifest["testbed"]["namespaces"] or [])
    assert len(made) == 4 and not made & namespaces(), "namespaces left behind"
    return result


@ROOT
def test_a_link_down_on_the_master_is_an_outage_the_backup_ends(live, run_scenario):
    r = run(live, run_scenario, """\
        advert_int: 100ms
        fault: [link-down, kill]
        fault_at: 500ms
        trials: 2
    """)
    assert r.ok, r.messages
    rows = {(x["step"], x["protocol"]): x for x in r.metrics["failover"]}
    master_down = 3 * 0.1 + (256 - 100) / 256 * 0.1   # RFC 5798: 3 adverts + the backup's skew
    for k in (1, 2):
        for proto in ("icmp", "udp"):
            row = rows[(f"adv100ms-link-down-{k}", proto)]
            assert row["requests"] >= 1400 and row["lost"] > 0, row
            # the outage is the backup's master-down interval, measured to the ms by the probes
            assert master_down - 0.05 < row["max_gap_s"] < master_down + 0.5, row
            assert abs(row["loss_outage_s"] - row["max_gap_s"]) < 0.05, row
            assert -0.03 < row["gap_start_s"] < 0.005 and row["fault_to_recovery_s"] > master_down - 0.05, row
            assert 0 < row["backup_master_after_s"] < row["fault_to_recovery_s"] + 0.05, row
        udp = rows[(f"adv100ms-link-down-{k}", "udp")]
        assert udp["master_answered_before"] and udp["backup_answered"], udp
        assert abs(udp["fault_to_first_backup_reply_s"] - udp["fault_to_recovery_s"]) < 0.01, udp
        # the backup has no state of the TCP session: it resets it once the address is its own
        tcp = rows[(f"adv100ms-link-down-{k}", "tcp")]
        assert tcp["tcp_survived"] is False and tcp["tcp_reset_after_s"] >= udp["fault_to_recovery_s"] - 0.01, tcp
    # kill -9 of the master's keepalived: the backup takes over, yet the master's kernel still
    # holds the address and answers, so the probes hardly notice
    kill = rows[("adv100ms-kill-1", "udp")]
    assert kill["backup_answered"] and kill["backup_master_after_s"] < 1.0, kill
    manifest = r.manifest
    for step in manifest["steps"]:
        (ev,) = step["faults"]["events"]
        assert ev["kind"] == step["params"]["fault"] and 0 < ev["applied_realtime_ns"] <= ev["in_effect_realtime_ns"]
        assert ev["undone"] is (True if ev["kind"] == "link-down" else None)
        assert step["vrrp"]["macs"]["master"] != step["vrrp"]["macs"]["backup"]
        expected = "killed by SIGKILL" if ev["kind"] == "kill" else "exit status 0"
        assert step["vrrp"]["keepalived"]["master"] == expected, step["vrrp"]
    run_dir = Path(r.run_dir)
    assert (run_dir / "failover-sequence.png").is_file()
    assert "adv100ms-link-down-1" in (run_dir / "report.md").read_text()
    assert (run_dir / "adv100ms-link-down-1" / "vrrp" / "master.conf").read_text().count("advert_int 0.1") == 1
    for c in manifest["commands"]:
        assert c.get("exit_code") is not None or c["status"] != "running", c


@ROOT
def test_a_keepalived_that_never_becomes_master_fails_before_traffic(live, run_scenario):
    r = run(live, run_scenario, """\
        trials: 1
        ready_timeout: 10ms
    """)
    assert not r.ok
    step = r.manifest["steps"][0]
    assert "keepalived never became ready within 0.01 s" in step["error"], step["error"]
    assert step["generators"] == {}  # the step ended before the probes were even prepared
    json.dumps(r.manifest)  # the manifest is written whole
