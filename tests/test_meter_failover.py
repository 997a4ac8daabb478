"""A flow-meter pair under method `failover` (testbed.meters.pair, `failover.meter`): the same real
meter at the master and at the backup, a real keepalived pair, the master's link taken down; the
records lost across the handover counted from the client's capture (analysis.flowmeter.handover).
Plus the option's validation (no root) and the JSON schema."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import skip_or_fail
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

import generators.probe
import testbed.meters.pair as meterpair
import testbed.methods.failover as failover
from analysis.capture import read_capture
from analysis.flowmeter import records_table
from analysis.flowmeter.handover import COUNTS, handover_flows, handover_totals
from ntgcore.registry import GENERATORS, METHODS, PARTS
from ntgcore.scenario import ScenarioError, json_schema, parse_scenario

# The entry points of pyproject.toml register them; a venv installed before they existed has not.
if "probe" not in GENERATORS:
    GENERATORS.register("probe", generators.probe.PLUGIN)
if "failover" not in METHODS:
    METHODS.register("failover", failover.METHOD)
if "meterpair" not in PARTS:
    PARTS.register("meterpair", meterpair.PLUGIN)

VIP = "198.18.1.1"
MASTER_REPLY_PORT, BACKUP_REPLY_PORT = 7778, 7779  # failover.udp_port + 1, + 2


def scenario_text(failover_lines: str, duration: str = "3s") -> str:
    return textwrap.dedent(f"""\
        version: 1
        name: fo-meters
        flows:
          - {{name: ping, protocol: icmp, src: 198.18.1.10, dst: {VIP}, rate: 1000, duration: {duration}}}
          - {{name: udp, protocol: udp, src: 198.18.1.10, dst: {VIP}, dst_port: 7777, rate: 1000,
              duration: {duration}}}
        testbed:
          topology: failover
          method: failover
          generators: [{{name: probe, at: "client:cl0"}}]
          capture: {{at: "client:cl0"}}
          failover:
            trials: 1
        """) + textwrap.indent(textwrap.dedent(failover_lines), "    ")


# -- the option (no root) ----------------------------------------------------------------------


def test_the_meter_option_is_a_flow_meter_kind_with_its_own_options():
    sc = parse_scenario(
        scenario_text("meter: {kind: argus}\nmeter_dies_with_master: true\n"), "fo.yaml"
    )
    fo = sc.testbed.failover
    assert (fo.meter.kind, fo.meter_dies_with_master) == ("argus", True)
    (step,) = failover.METHOD.steps(sc)
    assert "meterpair" in step.parts
    # the master's meter is killed in the fault's instant, listed after the fault itself
    link, kill = step.scenario.testbed.faults
    assert (link.kind, link.at, kill.kind, kill.process) == (
        "link-down",
        "master:m0",
        "kill",
        meterpair.label("master"),
    )
    assert kill.start == link.start
    plain = failover.METHOD.steps(parse_scenario(scenario_text("fault_at: 1s\n"), "fo.yaml"))[0]
    assert "meterpair" not in plain.parts and len(plain.scenario.testbed.faults) == 1
    # the schema lists the flow meters' models, and only them
    meter = json_schema()["$defs"]["FailoverSpec"]["properties"]["meter"]
    refs = {m["$ref"].rsplit("/", 1)[1] for c in meter["anyOf"] for m in c.get("anyOf", [])}
    assert refs == {"SoftflowdSpec", "PmacctSpec", "NfpcapdSpec", "ArgusSpec"}, meter


@pytest.mark.parametrize(
    "lines, line, words",
    [
        ("meter: {kind: tcpdump}\n", 14, "meter.kind: Input should be a flow meter: 'argus'"),
        ("meter: {kind: softflowd, version: 7}\n", 14, "meter.version: softflowd exports only"),
        ("meter: {kind: pmacct, idle_timeout: 1500ms}\n", 14, "pmacct takes whole seconds"),
        ("meter:\n  kind: argus\n  idle_timeout: 30s\n", 16, "argus cannot set it"),
        ("meter: {kind: nfpcapd, colector_port: 9}\n", 14, "did you mean `collector_port`"),
        ("meter: {idle_timeout: 3s}\n", 14, "meter.kind: required field is missing"),
        ("meter_dies_with_master: true\n", 13, "`meter_dies_with_master` needs a `meter`"),
        ("meter: {kind: softflowd, at: 'master:m0'}\n", 13, "leave `at` out"),
    ],
)
def test_a_bad_meter_option_is_refused_with_file_and_line(lines, line, words):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(scenario_text(lines), "fo.yaml")
    text = "\n".join(err.value.problems)
    assert text.startswith(f"fo.yaml:{line}: testbed.failover"), text
    assert words in text, text


# -- the accounting (no root) ---------------------------------------------------------------------

T0 = 1_700_000_000  # s: the hand-made capture's start


def test_the_loss_is_split_into_lost_with_the_master_outage_and_rest(tmp_path):
    """A hand-made capture: three UDP probes answered (two by the master, then one by the
    backup), one in the outage, one ping; the master's meter died between them, the backup's
    recorded the outage's request too (flooded to it) and the ping without its ICMP type."""
    client = "198.18.1.10"

    def udp(src, dst, sport, dport, t):
        pkt = Ether() / IP(src=src, dst=dst) / UDP(sport=sport, dport=dport) / (b"x" * 8)
        pkt.time = T0 + t
        return pkt

    ping = Ether() / IP(src=client, dst=VIP) / ICMP(type=8, id=1, seq=1) / (b"y" * 8)
    ping.time = T0 + 0.040
    packets = [
        udp(client, VIP, 20000, 7777, 0.000),
        udp(VIP, client, MASTER_REPLY_PORT, 20000, 0.0005),
        udp(client, VIP, 20000, 7777, 0.010),
        udp(VIP, client, MASTER_REPLY_PORT, 20000, 0.0105),
        udp(client, VIP, 20000, 7777, 0.020),  # the outage: no answer
        udp(client, VIP, 20000, 7777, 0.030),
        udp(VIP, client, BACKUP_REPLY_PORT, 20000, 0.0305),
        ping,
    ]
    wrpcap(str(tmp_path / "c.pcap"), packets)
    cap = read_capture(tmp_path / "c.pcap")
    unanswered = np.zeros(len(cap), bool)
    unanswered[4] = True
    ns = 1_000_000

    def rec(src, dst, sport, dport, proto, packets, first_ms, last_ms):
        return dict(
            src=src, dst=dst, sport=sport, dport=dport, proto=proto, vlan=0, packets=packets,
            bytes=36 * packets, first_ns=T0 * 10**9 + first_ms * ns,
            last_ns=T0 * 10**9 + last_ms * ns, tcp_flags=0,
        )  # fmt: skip

    backup = records_table(
        [
            rec(client, VIP, 20000, 7777, 17, 2, 20, 30),
            rec(VIP, client, BACKUP_REPLY_PORT, 20000, 17, 1, 30, 30),
            rec(client, VIP, 0, 0, 1, 1, 40, 40),  # pmacct: no ICMP type
            rec("198.18.1.2", "224.0.0.18", 0, 0, 112, 9, 0, 40),  # VRRP: not the address's
        ]
    )
    flows = handover_flows(cap, VIP, records_table([]), backup, unanswered, T0 * 10**9 + 15 * ns)
    rows = {(r["sport"], r["dport"], r["proto"]): r for r in flows.to_pylist()}
    request = rows[(20000, 7777, 17)]
    assert {k: request[k] for k in COUNTS} == {
        "sent": 4,
        "unanswered": 1,
        "unanswered_recorded": 1,  # within the backup's record: it saw it
        "held": 2,
        "in_master": 0,
        "in_backup": 2,
        "records_master": 0,
        "records_backup": 1,
        "lost_with_master": 2,
        "outage": 0,
        "rest": 0,
        "extra": 0,
    }
    assert request["exported_by"] == "backup" and request["to_vip"]
    mine = rows[(MASTER_REPLY_PORT, 20000, 17)]
    assert (mine["held"], mine["lost_with_master"], mine["exported_by"]) == (2, 2, "neither")
    theirs = rows[(BACKUP_REPLY_PORT, 20000, 17)]
    assert (theirs["in_backup"], theirs["lost_with_master"], theirs["rest"]) == (1, 0, 0)
    assert rows[(0, 0, 1)]["in_backup"] == rows[(0, 0, 1)]["sent"] == 1
    assert len(rows) == 4  # the VRRP record is not one of the address's flows
    totals = handover_totals(flows)
    assert (totals["sent"], totals["recorded"], totals["missing"]) == (8, 4, 4)
    assert totals["lost_with_master"] == 4 and totals["exported_by"]["neither"] == 1
    # the master's meter alive to the end: nothing is lost with it; the request no record covers
    # is the outage
    alive = handover_flows(cap, VIP, records_table([]), backup.slice(1), unanswered, None)
    request = alive.filter(pc.equal(alive["dport"], 7777)).to_pylist()[0]
    assert (request["lost_with_master"], request["outage"], request["rest"]) == (0, 1, 3)


# -- live (root) ---------------------------------------------------------------------------------


@pytest.fixture
def live(tmp_path, root):
    for tool, package in (
        ("keepalived", "keepalived"),
        ("pmacctd", "pmacct"),
        ("nfcapd", "nfdump"),
    ):
        if shutil.which(tool) is None:
            skip_or_fail(f"{tool} is not installed (apt-get install {package})")
    return tmp_path


def left_running(run_dir: Path) -> list[str]:
    """The processes whose command line names the run's folder (meters, collectors, keepalived)."""
    out = subprocess.run(["pgrep", "-af", str(run_dir)], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "pgrep" not in ln]


def run(tmp_path: Path, run_scenario, lines: str) -> tuple:
    path = tmp_path / "fo.yaml"
    path.write_text(
        scenario_text(
            "advert_int: 100ms\nfault: link-down\nfault_at: 1s\nfault_phase: fixed\n" + lines
        )
    )
    r = run_scenario(str(path))
    assert r.ok, r.messages
    run_dir = Path(r.run_dir)
    assert not left_running(run_dir), left_running(run_dir)
    made = set(r.manifest["testbed"]["namespaces"] or [])
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert made and not made & {ln.split()[0] for ln in listed.splitlines() if ln.strip()}
    (step,) = r.manifest["steps"]
    step_dir = run_dir / step["dir"]
    (row,) = r.metrics["failover_meters"]
    flows = pq.read_table(step_dir / "handover.parquet")
    assert not row["problems"], row["problems"]
    return step, step_dir, row, flows, run_dir


def udp_replies(step_dir: Path) -> dict[int, int]:
    """The UDP echo replies in the client's capture, by the DUT's reply port (who answered)."""
    cap = read_capture(step_dir / "capture.pcap")
    vip = int.from_bytes(bytes(map(int, VIP.split("."))), "big")
    back = (cap.proto == 17) & (cap.src_lo == vip)
    ports, counts = np.unique(cap.sport[back], return_counts=True)
    return dict(zip(ports.tolist(), counts.tolist()))


def udp_from_address(flows, port: int):
    """The handover rows of the UDP replies from PORT."""
    return flows.filter(pc.and_(pc.equal(flows["proto"], 17), pc.equal(flows["sport"], port)))


@pytest.mark.usefixtures("root")
def test_link_down_the_pair_records_every_answered_packet(live, run_scenario):
    """pmacct on both DUTs, the master's link down: every packet a DUT answered is in the
    master's or the backup's records, the flows that crossed the handover are split between
    them, and the outage's requests are counted apart."""
    step, step_dir, row, flows, _ = run(
        live, run_scenario, "meter: {kind: pmacct, idle_timeout: 30s}\n"
    )
    pair = step["meter_pair"]
    assert pair["master"]["status"] == pair["backup"]["status"] == "exit status 0", pair
    assert (step_dir / "meter-master" / "records.parquet").is_file()
    assert (step_dir / "meter-backup" / "export.pcap").is_file()
    # `rest`: what a loaded machine costs pmacct (a packet or two of libpcap's last block at its
    # stop); the accounting stays exact whatever it is
    assert row["lost_with_master"] == 0 and row["rest"] <= 0.001 * row["sent"], row
    assert row["unanswered"] > 50, row  # 100 ms adverts: a few hundred ms without an answer
    answered = np.array(flows["sent"]) - np.array(flows["unanswered"])
    recorded = np.array(flows["in_master"]) + np.array(flows["in_backup"])
    rest = np.array(flows["rest"])
    assert (recorded + rest >= answered).all() and (recorded <= np.array(flows["sent"])).all()
    assert row["missing"] == row["outage"] + row["rest"] == row["sent"] - row["recorded"], row
    # who answered is the reply's source port: the master's replies are in its records, the
    # backup's in the backup's, each exactly
    replies = udp_replies(step_dir)
    assert replies[MASTER_REPLY_PORT] > 500 and replies[BACKUP_REPLY_PORT] > 500, replies
    mine = udp_from_address(flows, MASTER_REPLY_PORT)
    theirs = udp_from_address(flows, BACKUP_REPLY_PORT)
    assert (
        pc.sum(mine["in_master"]).as_py() + pc.sum(mine["rest"]).as_py()
        == replies[MASTER_REPLY_PORT]
    )
    assert pc.sum(mine["in_backup"]).as_py() == 0
    assert (
        pc.sum(theirs["in_backup"]).as_py() + pc.sum(theirs["rest"]).as_py()
        == replies[BACKUP_REPLY_PORT]
    )
    # the requests to each UDP port went to both, one after the other: split across the handover
    requests = flows.filter(pc.and_(pc.equal(flows["proto"], 17), flows["to_vip"]))
    assert set(requests["exported_by"].to_pylist()) == {"both"}, requests
    assert row["score"]["split"] >= 256, row["score"]


@pytest.mark.usefixtures("root")
def test_a_meter_that_dies_with_the_master_loses_what_it_held(live, run_scenario):
    """With `meter_dies_with_master`, the master's pmacctd is killed (SIGKILL) as its link goes
    down: with an idle timeout longer than the run it had exported nothing, so every packet it
    had taken in is lost with it; the analysis counts exactly those as lost with the master."""
    step, step_dir, row, flows, run_dir = run(
        live,
        run_scenario,
        "meter: {kind: pmacct, idle_timeout: 30s}\nmeter_dies_with_master: true\n",
    )
    pair = step["meter_pair"]
    events = step["faults"]["events"]
    assert [(e["kind"], e["target"]) for e in events] == [
        ("link-down", "master:m0"),
        ("kill", "vrrp:master:meter"),
    ]
    assert pair["master"]["status"] == "killed by SIGKILL" and pair["master"]["killed"], pair
    assert pair["backup"]["status"] == "exit status 0", pair
    # nothing exported before the kill: no record, no export packet
    assert pair["master"]["collected"] == 0 and pair["master"]["exported"] == 0, pair["master"]
    assert row["in_master"] == 0 and row["master_killed"] and row["lost_with_master"] > 1000, row
    assert 0 <= row["died_after_fault_s"] < 0.5, row
    # what it held: every packet a DUT answered before the kill; for the UDP replies that is
    # exactly the master's, told by their source port
    replies = udp_replies(step_dir)
    mine = udp_from_address(flows, MASTER_REPLY_PORT)
    assert pc.sum(mine["lost_with_master"]).as_py() == replies[MASTER_REPLY_PORT] > 500
    assert pc.sum(mine["held"]).as_py() == replies[MASTER_REPLY_PORT]
    theirs = udp_from_address(flows, BACKUP_REPLY_PORT)
    assert (
        pc.sum(theirs["in_backup"]).as_py() + pc.sum(theirs["rest"]).as_py()
        == replies[BACKUP_REPLY_PORT]
    )
    assert pc.sum(theirs["lost_with_master"]).as_py() == 0
    held = np.array(flows["held"])
    assert (np.array(flows["lost_with_master"]) == held).all()
    # a late ICMP error of the client's, and what a loaded machine costs the backup's pmacct
    assert row["rest"] <= 2 + 0.001 * row["sent"], row
    assert "Records lost across the handover" in (run_dir / "report.md").read_text()
    assert (run_dir / "failover-meters.png").is_file()
