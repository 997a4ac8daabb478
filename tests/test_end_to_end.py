"""The quickstart from scenario to report, checked by real outside tools (tshark, Scapy)."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ntgcore.errors import RunSetupError
from ntgcore.expected import expected
from ntgcore.runfolder import make_run_dir
from ntgcore.scenario import load_scenario
from tests.conftest import skip_or_fail

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def run_testbed(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
        **kw,
    )


def only_run_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory, flowengine_bin) -> Path:
    out = tmp_path_factory.mktemp("runs")
    result = run_testbed("run", str(QUICKSTART), "--out", str(out), "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    return only_run_dir(out)


def test_run_folder_has_every_documented_file(quickstart):
    for name in [
        "scenario.yaml",
        "session.ntg",
        "manifest.json",
        "capture.pcap",
        "engine-stats.csv",
        "engine-summary.json",
        "engine-flows.csv",
        "engine.log",
        "metrics.json",
        "tables/flows.parquet",
        "report.md",
        "report.html",
        "plots/rate.png",
        "plots/throughput.png",
        "plots/packet-sizes.png",
        "plots/flows-started.png",
    ]:
        assert (quickstart / name).is_file(), name
    assert (quickstart / "scenario.yaml").read_bytes() == QUICKSTART.read_bytes()


def test_manifest_records_versions_commands_and_status(quickstart):
    m = json.loads((quickstart / "manifest.json").read_text())
    assert m["status"] == "completed" and m["seed"] == 1
    assert m["tools"]["flowengine"].startswith("flowengine ")
    (cmd,) = m["commands"]
    assert cmd["exit_code"] == 0 and cmd["argv"][1] == "gen" and cmd["ended_utc"]
    assert m["host"]["cpus"] >= 1 and m["scenario"]["name"] == "quickstart"
    sha = hashlib.sha256((quickstart / "capture.pcap").read_bytes()).hexdigest()
    assert m["files"]["capture.pcap"]["sha256"] == sha
    assert m["generators"]["flowengine"]["packets_sent"] == m["expected"]["packets"]


def test_tshark_reads_every_packet_with_no_bad_checksum(quickstart):
    tshark = shutil.which("tshark")
    if not tshark:
        pytest.skip("tshark is not installed (./bootstrap.sh test installs it)")
    pcap = str(quickstart / "capture.pcap")
    prefs = []
    for proto in ("ip", "tcp", "udp"):
        prefs += ["-o", f"{proto}.check_checksum:TRUE"]
    count = subprocess.run(
        [tshark, "-n", "-r", pcap, *prefs, "-T", "fields", "-e", "frame.number"],
        capture_output=True,
        text=True,
        check=True,
    )
    want = expected(load_scenario(QUICKSTART).scenario).packets
    assert len(count.stdout.split()) == want
    bad_filter = " || ".join(
        [f'{p}.checksum.status == "Bad"' for p in ("ip", "tcp", "udp", "icmp", "icmpv6")]
        + ["_ws.malformed", "_ws.expert.severity == error"]
    )
    bad = subprocess.run(
        [tshark, "-n", "-r", pcap, *prefs, "-Y", bad_filter],
        capture_output=True,
        text=True,
        check=True,
    )
    assert bad.stdout == "", bad.stdout[:2000]
    # and it really checked: the checksum fields were verified as good
    good = subprocess.run(
        [
            tshark,
            "-n",
            "-r",
            pcap,
            *prefs,
            "-Y",
            'udp.checksum.status == "Good"',
            "-T",
            "fields",
            "-e",
            "frame.number",
        ],
        capture_output=True,
        text=True,
    )
    assert len(good.stdout.split()) > 0


SCAPY_PER_KIND = 1000


def test_scapy_recomputes_the_same_checksums(quickstart):
    """A second checksum implementation on the first 1,000 frames of each kind (EtherType and IP
    protocol; tshark checks every frame of the capture above; Scapy takes about 1 ms a frame to
    dissect and rebuild, the capture's 100,000 took minutes)."""
    scapy_all = pytest.importorskip("scapy.all")
    from scapy.layers.inet import ICMP, IP, TCP, UDP
    from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6

    fields = [
        (IP, "chksum"),
        (TCP, "chksum"),
        (UDP, "chksum"),
        (ICMP, "chksum"),
        (ICMPv6EchoRequest, "cksum"),
    ]
    checked = collections.Counter()
    seen: collections.Counter = collections.Counter()
    with scapy_all.RawPcapReader(str(quickstart / "capture.pcap")) as reader:
        for raw, _ in reader:
            kind = (
                raw[12:14],
                raw[23] if raw[12:14] == b"\x08\x00" else raw[20],
            )  # EtherType, protocol
            seen[kind] += 1
            if (
                seen[kind] > SCAPY_PER_KIND
            ):  # dissected only up to the limit: Scapy is the slow part
                continue
            pkt = scapy_all.Ether(raw)
            present = [(layer, field) for layer, field in fields if layer in pkt]
            fresh = pkt.copy()  # Scapy fills in every deleted checksum and length when it builds
            for layer, field in present:
                delattr(fresh[layer], field)
            if IP in fresh:
                del fresh[IP].len
            if IPv6 in fresh:
                del fresh[IPv6].plen
            rebuilt = fresh.__class__(bytes(fresh))
            assert bytes(rebuilt) == bytes(pkt), pkt.summary()
            for layer, field in present:
                assert getattr(rebuilt[layer], field) == getattr(pkt[layer], field), pkt.summary()
                checked[layer.__name__] += 1
    assert set(checked) == {"IP", "TCP", "UDP", "ICMP", "ICMPv6EchoRequest"}


def test_analysis_counts_equal_the_scenario(quickstart):
    scenario = load_scenario(QUICKSTART).scenario
    want = expected(scenario)
    metrics = json.loads((quickstart / "metrics.json").read_text())
    assert metrics["packets"] == want.packets
    assert metrics["first_ns"] == want.first_ns and metrics["last_ns"] == want.last_ns
    assert metrics["flows"]["count"] == want.flows
    assert all(c["ok"] for c in metrics["checks"]), metrics["checks"]
    # packets per flow: as many flows of each length as the scenario defines
    import pandas as pd

    flows = pd.read_parquet(quickstart / "tables" / "flows.parquet")
    measured = collections.Counter(flows["packets"].tolist())
    wanted = collections.Counter()
    for f in scenario.flows:
        wanted[f.packet_count] += f.repetitions
    assert measured == wanted
    # bytes of the fixed-size flows: header + payload, exactly
    stream = flows[(flows["dport"] == 5004) & (flows["proto"] == 17)]
    assert stream["bytes"].tolist() == [20_000 * (14 + 20 + 8 + 1200)]


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path, flowengine_bin):
    digests = []
    for i, seed in enumerate(["7", "7", "8"]):
        out = tmp_path / str(i)
        r = run_testbed(
            "run", str(QUICKSTART), "--out", str(out), "--seed", seed, "--no-analyze", "-q"
        )
        assert r.returncode == 0, r.stderr
        digests.append(hashlib.sha256((only_run_dir(out) / "capture.pcap").read_bytes()).digest())
    assert digests[0] == digests[1]
    assert digests[0] != digests[2]


LONG = """\
version: 1
name: long
flows:
  - protocol: udp
    src: 198.18.0.0/16
    dst: 198.19.0.1
    dst_port: 9
    rate: 1Mpps
    duration: 600s
    payload: {size: 18}
"""


def test_sigint_leaves_a_valid_pcap_and_an_interrupted_manifest(tmp_path, flowengine_bin):
    from analysis.capture import read_capture

    scenario = tmp_path / "long.yaml"
    scenario.write_text(LONG)
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed", "run", str(scenario), "--out", str(out), "-q"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    pcap = None
    while time.monotonic() < deadline:
        dirs = [p for p in out.glob("*") if p.is_dir()] if out.exists() else []
        if (
            dirs
            and (dirs[0] / "capture.pcap").exists()
            and (dirs[0] / "capture.pcap").stat().st_size > 1 << 20
        ):
            pcap = dirs[0] / "capture.pcap"
            break
        time.sleep(0.05)
    assert pcap is not None, "the run did not start writing"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    run_dir = pcap.parent
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["interrupted_by"] == "SIGINT"
    assert manifest["commands"][0]["exit_code"] == 130
    summary = json.loads((run_dir / "engine-summary.json").read_text())
    assert summary["status"] == "interrupted"
    cap = read_capture(pcap)
    assert cap.problem is None
    assert 0 < len(cap.ts_ns) == summary["packets"] < 600_000_000
    assert manifest["generators"]["flowengine"]["packets_sent"] == summary["packets"]


def test_unwritable_output_is_refused_before_any_work(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = run_testbed("run", str(QUICKSTART), "--out", str(blocker / "runs"))
    assert r.returncode == 2
    assert "cannot create the output directory" in r.stderr and "Traceback" not in r.stderr


def test_a_generator_that_fails_fails_the_run(tmp_path, flowengine_bin):
    env = dict(os.environ, NTG_FLOWENGINE=shutil.which("false") or "/bin/false")
    r = run_testbed("run", str(QUICKSTART), "--out", str(tmp_path), "-q", env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    manifest = json.loads((only_run_dir(tmp_path) / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["commands"][0]["exit_code"] == 1


def test_run_folders_are_never_reused(tmp_path):
    first = make_run_dir(tmp_path, "x")
    second = make_run_dir(tmp_path, "x")
    assert first != second and first.is_dir() and second.is_dir()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(RunSetupError, match="cannot create the output directory"):
        make_run_dir(tmp_path / "a-file" / "runs", "x")


def test_analyze_reports_a_damaged_capture_without_traceback(quickstart, tmp_path):
    damaged = tmp_path / "cut.pcap"
    data = (quickstart / "capture.pcap").read_bytes()
    damaged.write_bytes(data[: len(data) // 2 + 7])
    r = run_testbed("analyze", str(damaged), "--out", str(tmp_path / "report"))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "damaged capture at byte offset" in r.stderr and "Traceback" not in r.stderr
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    assert metrics["capture_problem"]["packets_read"] > 0


def test_analyze_missing_file_is_bad_input(tmp_path):
    r = run_testbed("analyze", str(tmp_path / "nope.pcap"))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_a_run_shorter_than_a_second_reports_without_a_rate(tmp_path, flowengine_bin):
    scenario = tmp_path / "short.yaml"
    scenario.write_text(
        "version: 1\nname: short\nflows:\n"
        "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 100, packets: 5}\n"
    )
    r = run_testbed("run", str(scenario), "--out", str(tmp_path / "runs"), "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "capture: 5 packets, 210 bytes, 1 flows; no complete second for a rate" in r.stdout


# live examples that boot VMs run (and are analysed) in tests/test_vm.py only: a boot under TCG costs
# 30-60 s, and there they are checked more closely
RUN_ELSEWHERE = {
    "vm-quickstart.yaml",
    "vm-dut-poweroff.yaml",
    "seed002-failover-vm.yaml",
    "learned-web.yaml",  # tests/test_scenario_sessions.py (with its flow log's rows)
}  # tests/test_vm.py


def _examples(live: bool) -> list[str]:
    return sorted(
        p.name
        for p in (ROOT / "scenarios").glob("*.yaml")
        if p.name != "quickstart.yaml"
        and ("\ntestbed:" in p.read_text()) == live
        and p.name not in RUN_ELSEWHERE
    )


@pytest.mark.parametrize("scenario", _examples(live=False))
def test_every_example_scenario_runs_and_agrees_with_itself(scenario, tmp_path, flowengine_bin):
    r = run_testbed("run", str(ROOT / "scenarios" / scenario), "--out", str(tmp_path), "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    metrics = json.loads((only_run_dir(tmp_path) / "metrics.json").read_text())
    loaded = load_scenario(ROOT / "scenarios" / scenario)
    want = expected(loaded.scenario).packets
    if (
        loaded.scenario.attacks is not None
    ):  # plus the attack sessions, synthesized here on their own
        from idsrules.attacks import write_attacks
        from ntgcore.scenario import attack_rule_paths

        rules = attack_rule_paths(loaded.scenario.attacks, loaded.path)
        want += write_attacks(
            loaded.scenario.attacks, rules, tmp_path / "expected-attacks"
        ).synth.packets
        assert all(c["ok"] for c in metrics["checks"])
    assert metrics["packets"] == want
    assert metrics["timing"]["start_error"]["max_abs_ns"] == 0


def test_stochastic_planner_keeps_counts_and_shows_timing_errors(tmp_path, flowengine_bin):
    text = (ROOT / "scenarios" / "flor-interference.yaml").read_text()
    text = text.replace("seed: 1\n", "seed: 1\nflowengine: {planner: stochastic}\n")
    scenario = tmp_path / "stochastic.yaml"
    scenario.write_text(text)
    r = run_testbed("run", str(scenario), "--out", str(tmp_path / "runs"), "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    assert "--planner stochastic" in " ".join(
        json.loads((run_dir / "manifest.json").read_text())["commands"][0]["argv"]
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["packets"] == 10_000 and metrics["flows"]["count"] == 100
    assert all(c["ok"] for c in metrics["checks"])
    assert not any(c["name"].startswith("duration") for c in metrics["checks"])
    assert (
        metrics["timing"]["start_error"]["exact"] < 100
    )  # drawn at random, not at their due times


def test_checksum_offload_writes_pseudo_header_sums(tmp_path, flowengine_bin):
    import struct

    text = (ROOT / "scenarios" / "flor-interference.yaml").read_text()
    text = text.replace("seed: 1\n", "seed: 1\nflowengine: {checksum_offload: true}\n")
    scenario = tmp_path / "offload.yaml"
    scenario.write_text(text)
    r = run_testbed("run", str(scenario), "--out", str(tmp_path / "runs"), "--no-analyze", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    data = (only_run_dir(tmp_path / "runs") / "capture.pcap").read_bytes()
    frame = data[24 + 16 :]
    ip = frame[14:34]
    assert ip[10:12] == b"\x00\x00"  # no IPv4 header checksum
    udp_len = struct.unpack("!H", frame[38:40])[0]
    pseudo = ip[12:20] + struct.pack("!BBH", 0, 17, udp_len)
    total = sum(struct.unpack(f"!{len(pseudo) // 2}H", pseudo))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    assert struct.unpack("!H", frame[40:42])[0] == total  # folded, not complemented


def test_more_flows_than_memory_allows_is_refused_before_any_work(tmp_path):
    scenario = tmp_path / "huge.yaml"
    scenario.write_text(
        "version: 1\nname: huge\nflows:\n"
        "  - {protocol: udp, src: 198.18.0.0/15, dst: 198.19.0.1, dst_port: 9, rate: 1, packets: 10,\n"
        "     repeat: {count: 100000000000, period: 0s}}\n"
    )
    out = tmp_path / "runs"
    r = run_testbed("run", str(scenario), "--out", str(out))
    assert r.returncode == 2, r.stdout + r.stderr
    assert (
        "100,000,000,000 flows are alive at once" in r.stderr and "Lower repeat.count" in r.stderr
    )
    assert not out.exists()
    v = run_testbed("validate", str(scenario))
    assert v.returncode == 0 and "warning: up to 100,000,000,000 flows" in v.stderr


def test_validate_reports_the_peak_of_concurrent_flows():
    r = run_testbed("validate", str(QUICKSTART))
    assert "at most 36 flows at once (about 2.2 KiB of engine state)" in r.stdout


def test_two_engine_threads_give_the_same_capture(tmp_path, flowengine_bin):
    text = QUICKSTART.read_text().replace("seed: 1\n", "seed: 1\nflowengine: {threads: 2}\n")
    threaded = tmp_path / "threads.yaml"
    threaded.write_text(text)
    digests = []
    for i, path in enumerate([QUICKSTART, threaded]):
        r = run_testbed("run", str(path), "--out", str(tmp_path / str(i)), "--no-analyze", "-q")
        assert r.returncode == 0, r.stdout + r.stderr
        run_dir = only_run_dir(tmp_path / str(i))
        digests.append(hashlib.sha256((run_dir / "capture.pcap").read_bytes()).digest())
    assert "--threads" in json.loads((run_dir / "manifest.json").read_text())["commands"][0]["argv"]
    assert digests[0] == digests[1]


@pytest.mark.usefixtures("root")
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(s, marks=pytest.mark.trex)  # the trex lane, by hand: a parameter's own need
        if "name: trex" in (ROOT / "scenarios" / s).read_text()
        else s
        for s in _examples(live=True)
    ],
)
def test_every_live_example_runs_with_short_steps(scenario, tmp_path, flowengine_bin):
    if "name: trex" in (ROOT / "scenarios" / scenario).read_text() and not os.environ.get(
        "NTG_TREX_DIR"
    ):
        skip_or_fail(f"{scenario} needs a TRex build: NTG_TREX_DIR is not set (.ci/run sets it)")
    trials = (
        ["--trials", "1"]
        if "method: failover" in (ROOT / "scenarios" / scenario).read_text()
        else []
    )
    r = run_testbed(
        "run",
        str(ROOT / "scenarios" / scenario),
        "--out",
        str(tmp_path),
        "-q",
        "--duration",
        "1s",
        *trials,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run = only_run_dir(tmp_path)
    if trials:  # one trial of each advertisement interval and fault
        manifest = json.loads((run / "manifest.json").read_text())
        assert {s["name"].rsplit("-", 1)[1] for s in manifest["steps"]} == {"1"}
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] and all(s["status"] == "completed" for s in metrics["steps"])
    assert all(c["ok"] for c in metrics["checks"]), [c for c in metrics["checks"] if not c["ok"]]
    assert (run / "report.html").is_file()


def test_trials_is_refused_where_no_method_repeats_trials(tmp_path):
    r = run_testbed("run", str(QUICKSTART), "--out", str(tmp_path), "--trials", "1")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--trials applies to a method with repeated trials" in r.stderr
    assert not any(tmp_path.iterdir())  # nothing was written
