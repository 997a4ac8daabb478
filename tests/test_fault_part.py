"""The fault part (testbed/parts/fault.py): the schedule's validation (file:line), and every
fault kind applied and undone on real namespaces, on time and on every way a step ends."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time

import pytest

from analysis.capture import read_capture
from ntgcore.proc import Process
from ntgcore.scenario import FaultSpec, ScenarioError, parse_scenario
from testbed.endpoints.netns import NetnsSite
from testbed.endpoints.netns.topology import parse_topology
from testbed.parts.fault import FaultError, FaultPart, netem_args

ROOT = pytest.mark.usefixtures("root")

HEAD = """\
version: 1
name: faults
flows:
  - {protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, dst_port: 9, rate: 10, packets: 5}
testbed:
  faults:
"""


def faults(text: str):
    return parse_scenario(HEAD + textwrap.indent(textwrap.dedent(text), "    "), "s.yaml")


# -- the schedule in the scenario ---------------------------------------------------------------


def test_a_schedule_is_read_with_its_times():
    sc = faults("""\
        - {kind: stop, process: "vrrp:master", start: 2s, duration: 500ms, repeat: {count: 3, period: 2s}}
        - {kind: netem, at: "gen:gen0", start: 1s, loss: 2.5, delay: 10ms, jitter: 1ms}
    """)
    stop, netem = sc.testbed.faults
    assert stop.times_ns() == [2_000_000_000, 4_000_000_000, 6_000_000_000]
    assert stop.target == "vrrp:master"
    assert netem_args(netem) == ["loss", "2.5%", "delay", "10000us", "1000us"]


@pytest.mark.parametrize(
    "entry, line, words",
    [
        (
            '- {kind: kill, process: "vrrp:master", start: 1s, duration: 1s}',
            8,
            "cannot be brought back",
        ),
        ('- {kind: stop, at: "gen:gen0", start: 1s}', 8, "needs `process`"),
        ("- {kind: link-down, process: x, start: 1s}", 8, "needs `at`"),
        ('- {kind: netem, at: "gen:gen0", start: 1s}', 8, "needs `loss`"),
        ('- {kind: link-down, at: "gen:gen0", start: 1s, loss: 3}', 8, "belong to kind `netem`"),
        (
            "- {kind: stop, process: a, start: 1s, duration: 2s, repeat: {count: 2, period: 2s}}",
            8,
            "shorter than `repeat.period`",
        ),
        (
            "- {kind: stop, process: a, start: 1s, repeat: {count: 2, period: 2s}}",
            8,
            "needs `duration`",
        ),
        ('- {kind: unplug, at: "gen:gen0", start: 1s}', 8, "kind"),
        ('- {kind: kill, process: "a b", start: 1s}', 8, "process label"),
    ],
)
def test_a_bad_schedule_is_refused_with_file_and_line(entry, line, words):
    with pytest.raises(ScenarioError) as err:
        faults("- {kind: kill, process: ok, start: 1s}\n" + entry + "\n")
    text = "\n".join(err.value.problems)
    assert text.startswith(f"s.yaml:{line}: testbed.faults[1]"), text
    assert words in text


def test_a_fault_without_a_start_names_the_field():
    with pytest.raises(ScenarioError) as err:
        faults("- {kind: kill, process: ok}\n")
    assert "s.yaml:7: testbed.faults[0].start: required field is missing" in err.value.problems[0]


# -- on real namespaces -----------------------------------------------------------------------


@pytest.fixture
def site():
    topo = parse_topology(
        {
            "name": f"ntgf{os.getpid() % 100000}",
            "namespaces": ["a", "b"],
            "links": [
                {
                    "a": {"ns": "a", "iface": "va", "address": "198.18.7.1/24"},
                    "b": {"ns": "b", "iface": "vb", "address": "198.18.7.2/24"},
                }
            ],
        }
    )
    s = NetnsSite(topo)
    s.apply()
    try:
        yield s
    finally:
        s.remove()


@pytest.fixture
def sleeper(site):
    proc = Process("sleeper", site.endpoint("a:va").argv("sleep", "60"))
    proc.start()
    yield proc
    proc.stop(grace=1)


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def link_up(site, place: str) -> bool:
    ep = site.endpoint(place)
    out = subprocess.run(
        ep.argv("ip", "-o", "link", "show", ep.iface), capture_output=True, text=True
    ).stdout
    return "<" in out and ",UP" in out.split(">")[0] + ","


def qdisc(site, place: str) -> str:
    ep = site.endpoint(place)
    return subprocess.run(
        ep.argv("tc", "qdisc", "show", "dev", ep.iface), capture_output=True, text=True
    ).stdout


def wait_for(cond, timeout: float = 3.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


@ROOT
def test_kill_ends_the_process_group_and_is_recorded_on_the_capture_clock(site, sleeper):
    part = FaultPart(
        [FaultSpec(kind="kill", process="sleeper", start="100ms")],
        site,
        lambda: {"sleeper": sleeper.pid},
    )
    before = time.time_ns()
    part.start(lambda: False)
    assert wait_for(lambda: sleeper.poll() is not None)
    stats = part.stop()
    assert sleeper.record.status == "killed by SIGKILL"
    (ev,) = stats["events"]
    assert ev["kind"] == "kill" and ev["pid"] == sleeper.record.pid and ev["undone"] is None
    # CLOCK_REALTIME in ns, like tcpdump's nanosecond time stamps, and the schedule kept
    assert (
        before + 90_000_000
        <= ev["applied_realtime_ns"]
        <= ev["in_effect_realtime_ns"]
        <= time.time_ns()
    )
    assert ev["applied_mono_ns"] - stats["origin_mono_ns"] >= 100_000_000
    assert stats["all_undone"]


@ROOT
def test_stop_freezes_and_continues_after_its_duration(site, sleeper):
    part = FaultPart(
        [FaultSpec(kind="stop", process="sleep*", start="50ms", duration="300ms")],
        site,
        lambda: {"sleeper": sleeper.pid},
    )
    part.start(lambda: False)
    assert wait_for(lambda: state(sleeper.pid) == "T"), "not stopped"
    assert wait_for(lambda: state(sleeper.pid) == "S"), "not continued after its duration"
    (ev,) = part.stop()["events"]
    assert ev["undone"] is True
    assert 280_000_000 <= ev["undone_mono_ns"] - ev["applied_mono_ns"] < 2_000_000_000


@ROOT
def test_link_down_repeats_and_every_one_is_undone(site):
    part = FaultPart(
        [
            FaultSpec(
                kind="link-down",
                at="b:vb",
                start="50ms",
                duration="150ms",
                repeat={"count": 2, "period": "400ms"},
            )
        ],
        site,
        dict,
    )
    part.start(lambda: False)
    assert wait_for(lambda: not link_up(site, "b:vb")), "the link did not go down"
    assert wait_for(lambda: link_up(site, "b:vb")), "the link did not come back"
    assert wait_for(lambda: len(part.events) == 2 and part.events[1].undone is True, 3)
    stats = part.stop()
    assert [e["n"] for e in stats["events"]] == [0, 1]
    assert all(e["undone"] is True for e in stats["events"]) and link_up(site, "b:vb")
    assert [r.argv[-2:] for r in part.records()] == [["vb", "down"], ["vb", "up"]] * 2


@ROOT
def test_stopping_the_step_early_undoes_what_is_applied(site, sleeper):
    """Ctrl-C or a failure: the executor's exit stack calls stop() before any duration ran out."""
    part = FaultPart(
        [
            FaultSpec(kind="link-down", at="a:va", start="10ms"),
            FaultSpec(kind="stop", process="sleeper", start="10ms", duration="1h"),
        ],
        site,
        lambda: {"sleeper": sleeper.pid},
    )
    part.start(lambda: False)
    assert wait_for(
        lambda: len(part.events) == 2 and state(sleeper.pid) == "T" and not link_up(site, "a:va")
    )
    stats = part.stop()
    assert all(e["undone"] is True for e in stats["events"])
    assert link_up(site, "a:va") and state(sleeper.pid) == "S"


@ROOT
def test_netem_is_added_and_removed(site):
    ep = site.endpoint("a:va")
    probe = subprocess.run(
        ep.argv("tc", "qdisc", "add", "dev", "va", "root", "netem", "delay", "1ms"),
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:  # a kernel without sch_netem (this project's VMs): nothing to test
        pytest.skip(f"this kernel has no netem: {probe.stderr.strip()}")
    subprocess.run(ep.argv("tc", "qdisc", "del", "dev", "va", "root"), check=True)
    part = FaultPart(
        [FaultSpec(kind="netem", at="a:va", start="10ms", loss=10, delay="5ms")], site, dict
    )
    part.start(lambda: False)
    assert wait_for(lambda: "netem" in qdisc(site, "a:va"))
    assert "loss 10%" in qdisc(site, "a:va")
    assert part.stop()["events"][0]["undone"] is True
    assert "netem" not in qdisc(site, "a:va")


@ROOT
def test_a_kernel_without_netem_fails_the_fault_clearly(site):
    ep = site.endpoint("a:va")
    probe = subprocess.run(
        ep.argv("tc", "qdisc", "add", "dev", "va", "root", "netem", "delay", "1ms"),
        capture_output=True,
        text=True,
    )
    subprocess.run(ep.argv("tc", "qdisc", "del", "dev", "va", "root"), capture_output=True)
    if probe.returncode == 0:
        pytest.skip("this kernel has netem (test_netem_is_added_and_removed covers it)")
    part = FaultPart([FaultSpec(kind="netem", at="a:va", start="10ms", loss=10)], site, dict)
    part.start(lambda: False)
    assert wait_for(lambda: part.problem() is not None)
    assert "this kernel has no netem" in part.problem()
    assert part.stop()["events"][0]["error"]


@ROOT
def test_what_is_not_the_runs_is_refused_before_anything_happens(site, sleeper):
    with pytest.raises(FaultError, match="not an interface of topology"):
        FaultPart([FaultSpec(kind="link-down", at="a:eth0", start="1s")], site, dict)
    with pytest.raises(FaultError, match="`power-off` needs a VM back end"):
        FaultPart([FaultSpec(kind="power-off", at="a:va", start="1s")], site, dict)
    part = FaultPart(
        [FaultSpec(kind="kill", process="keepalived", start="10ms")],
        site,
        lambda: {"sleeper": sleeper.pid},
    )
    with pytest.raises(
        FaultError, match=r"no process `keepalived` in this step \(its processes: sleeper\)"
    ):
        part.start(lambda: False)
    assert link_up(site, "a:va") and state(sleeper.pid) == "S"


@ROOT
def test_any_method_can_inject_faults_and_the_loss_lines_up_with_them(
    tmp_path, run_scenario, flowengine_bin
):
    """Method `run` with a link-down of the DUT's interface for 0.5 s while the native engine sends
    1,000 pps: the generator's interface drops what it sends meanwhile (the engine sends each frame
    again until it leaves), and the gap in the capture is the recorded fault, to a few ms
    (CLOCK_REALTIME on both sides)."""
    path = tmp_path / "run-faults.yaml"
    path.write_text(
        textwrap.dedent("""\
        version: 1
        name: run-faults
        flows:
          - {protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, dst_port: 9, rate: 1000, packets: 2000}
        testbed:
          capture: {at: "tap:tap0"}
          faults:
            - {kind: link-down, at: "dut:dut0", start: 700ms, duration: 500ms}
    """)
    )
    run = run_scenario(str(path))
    assert run.ok, run.messages
    step = run.manifest["steps"][0]
    (ev,) = step["faults"]["events"]
    assert ev["undone"] is True and step["faults"]["all_undone"]
    down_s = (ev["undone_realtime_ns"] - ev["in_effect_realtime_ns"]) / 1e9
    assert step["loss"]["sent"] == step["loss"]["wire"] == 2000
    assert (
        step["wire"]["gen:gen0"]["tx_dropped"] > 0
    )  # what the kernel refused while the link was down
    ts = read_capture(run.run_dir / "capture.pcap").ts_ns
    gaps = ts[1:] - ts[:-1]
    i = int(gaps.argmax())
    assert abs(gaps[i] / 1e9 - down_s) < 0.05, (gaps[i], down_s)
    assert ev["applied_realtime_ns"] - 5_000_000 <= ts[i] <= ev["in_effect_realtime_ns"] + 1_000_000
    assert (
        ev["undone_realtime_ns"] - 50_000_000 <= ts[i + 1] <= ev["undone_realtime_ns"] + 20_000_000
    )
