"""Live runs on real network namespaces: the lifecycle, loss accounting, the two seed methods,
and every way a run can end badly (all need root; skipped without it)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from analysis.tables import read_table

REPO = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.ntg_live,
    pytest.mark.usefixtures("root"),
]

UDP = (
    "{protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000, dst_port: 9, "
    "rate: %s, packets: %d, payload: {size: 18}}"
)


def scenario(tmp_path: Path, name: str, flow: str, testbed: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nflows:\n  - {flow}\ntestbed:\n"
        + textwrap.indent(textwrap.dedent(testbed).strip(), "  ")
        + "\n"
    )
    return path


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purposes
        return f.read().split(") ", 1)[1][0] != "Z"


def assert_nothing_left(manifest: dict, before: set[str]) -> None:
    ns = manifest["testbed"]["namespaces"] or []
    assert not set(ns) & namespaces(), f"namespaces left behind: {set(ns) & namespaces()}"
    assert namespaces() <= before | {
        n for n in namespaces() if not n.startswith(manifest["testbed"]["topology"])
    }
    for c in manifest["commands"]:
        if c.get("pid"):
            assert not alive(c["pid"]), f"{c['name']} (pid {c['pid']}) still running"


def test_loss_accounting_is_exact_when_nothing_is_lost(tmp_path, run_scenario, flowengine_bin):
    before = namespaces()
    path = scenario(
        tmp_path,
        "exact",
        UDP % (2000, 3000),
        """
        dut: {kind: tcpdump, write: true}
        capture: {at: "tap:tap0"}
        monitor: {hz: 2}
    """,
    )
    run = run_scenario(path)
    assert run.ok, run.messages
    loss = run.manifest["steps"][0]["loss"]
    assert (loss["sent"], loss["wire"], loss["dut"], loss["captured"]) == (3000, 3000, 3000, 3000)
    assert loss["dut_dropped"] == 0 and run.metrics.loss_rate == 0
    assert run.metrics.packets == 3000  # the tap's capture file, read back
    assert all(c["ok"] for c in run.metrics.checks)
    assert (run.run_dir / "report.html").is_file() and (run.run_dir / "samples.csv").is_file()
    steps = read_table(run.run_dir, "steps").to_pylist()
    assert [
        (s["step"], s["packets"], s["sent"], s["wire"], s["dut"], s["loss_rate"]) for s in steps
    ] == [("run", 3000, 3000, 3000, 3000, 0.0)]
    assert steps[0]["cpu_max"] is not None and steps[0]["rss_max"] > 0  # the generator's samples
    assert read_table(run.run_dir, "resources").num_rows > 0
    assert read_table(run.run_dir, "flows").to_pylist()[0]["packets"] == 3000
    assert_nothing_left(run.manifest, before)


def test_forced_dut_overload_shows_loss_consistent_across_the_counters(
    tmp_path, run_scenario, flowengine_bin
):
    # a 1 KiB kernel buffer and full frames written to disk: tcpdump cannot keep up at 500 kpps
    path = scenario(
        tmp_path,
        "overload",
        UDP % (1000, 1),
        """
        method: loss-sweep
        dut: {kind: tcpdump, buffer_kib: 1, write: true, snaplen: 65535}
        capture: null
        sweep: {packet_rates: [500000], step: 2s}
    """,
    )
    run = run_scenario(path)
    assert run.ok, run.messages
    loss = run.manifest["steps"][0]["loss"]
    assert loss["sent"] == loss["wire"] == 1_000_000
    assert loss["dut_dropped"] > 0 and loss["loss_rate"] > 0
    assert loss["dut"] + loss["dut_dropped"] == loss["wire"]
    assert loss["loss_rate"] == pytest.approx(loss["dut_dropped"] / loss["sent"])
    assert (run.run_dir / "loss-vs-rate.png").is_file()


def test_comparison_of_two_generators_produces_the_report(tmp_path, run_scenario, flowengine_bin):
    flow = (
        "{protocol: tcp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000, dst_port: 80, "
        "rate: 10Mpps, duration: 1000s, payload: {size: 6}}"
    )
    path = scenario(
        tmp_path,
        "compare",
        flow,
        """
        method: comparison
        duration: 2s
        generators: [{name: flowengine, label: native}, {name: tcpreplay}]
        load_steps: {step_kbps: 500, count: 1, duration: 1s}
    """,
    )
    run = run_scenario(path)
    assert run.ok, run.messages
    rows = {r["generator"]: r for r in run.metrics["comparison"]}
    assert set(rows) == {"native", "tcpreplay"}
    for r in rows.values():
        assert r["packets"] > 1000 and r["average_packet_size"] == 60
        assert r["throughput_Bps"] == pytest.approx(60 * r["mean_pps"])
    assert max(r["rate_ratio_to_best"] for r in rows.values()) == 1
    for png in (
        "compare-rates.png",
        "compare-throughput.png",
        "compare-rate-series.png",
        "compare-cpu.png",
        "compare-ram.png",
        "compare-cpu-vs-load.png",
    ):
        assert (run.run_dir / png).is_file(), png
    assert "Generator comparison" in (run.run_dir / "report.md").read_text()


def _start_cli(path: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed",
            "run",
            str(path),
            "--out",
            str(out),
            "--no-analyze",
            "-q",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(out: Path, name: str, timeout: float = 20) -> dict:
    """The manifest once the process NAME has started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in out.glob("*/manifest.json"):
            try:
                manifest = json.loads(m.read_text())
            except ValueError:
                continue
            for c in manifest.get("commands", []):
                if c["name"] == name and c.get("pid"):
                    return manifest
        time.sleep(0.1)
    raise AssertionError(f"{name} did not start")


def _manifest(out: Path) -> dict:
    return json.loads(next(out.glob("*/manifest.json")).read_text())


def _long_run(tmp_path: Path, dut: str = "none") -> Path:
    return scenario(tmp_path, "long", UDP % (1000, 60000), f"dut: {{kind: {dut}}}")


def _kill_during_run(tmp_path: Path, name: str) -> dict:
    """Start a long live run with a tcpdump DUT, SIGKILL its process NAME once it is sending;
    the run must exit 1. Returns the manifest."""
    out = tmp_path / "results"
    cli = _start_cli(_long_run(tmp_path, "tcpdump"), out)
    live = _wait_for(out, "flowengine")
    time.sleep(1)
    os.kill(next(c["pid"] for c in live["commands"] if c["name"] == name), signal.SIGKILL)
    _, stderr = cli.communicate(timeout=60)
    assert cli.returncode == 1, stderr
    return _manifest(out)


def test_a_generator_killed_mid_run_fails_the_run_and_tears_everything_down(
    tmp_path, flowengine_bin
):
    before = namespaces()
    m = _kill_during_run(tmp_path, "flowengine")
    assert m["status"] == "failed"
    assert "flowengine" in m["error"] and "SIGKILL" in m["error"]
    assert m["steps"][0]["loss"]["sent"] is not None  # what was sent so far is kept
    assert (tmp_path / "results" / m["run_id"] / "capture.pcap").stat().st_size > 24
    assert_nothing_left(m, before)


def test_a_dut_that_dies_mid_run_is_recorded_and_the_data_kept(tmp_path, flowengine_bin):
    before = namespaces()
    m = _kill_during_run(tmp_path, "dut-tcpdump")
    step = m["steps"][0]
    assert m["status"] == "failed" and "device under test" in step["error"]
    assert step["dut"]["died"] and step["loss"]["sent"] > 0
    assert_nothing_left(m, before)


def test_ctrl_c_stops_in_order_and_keeps_the_partial_run(tmp_path, flowengine_bin):
    before = namespaces()
    out = tmp_path / "results"
    cli = _start_cli(_long_run(tmp_path), out)
    _wait_for(out, "flowengine")
    time.sleep(1.5)
    cli.send_signal(signal.SIGINT)
    _, stderr = cli.communicate(timeout=60)
    assert cli.returncode == 130, stderr
    m = _manifest(out)
    assert m["status"] == "interrupted" and m["interrupted_by"] == "SIGINT"
    loss = m["steps"][0]["loss"]
    assert 0 < loss["sent"] < 60000 and loss["sent"] == loss["wire"]
    assert_nothing_left(m, before)


def test_missing_tools_name_the_command_that_installs_them(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    path = scenario(tmp_path, "tools", UDP % (1000, 10), "dut: {kind: tcpdump}")
    res = subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(path), "--out", str(tmp_path / "r")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(bare)},
    )
    assert res.returncode == 2
    assert "apt-get install iproute2 ethtool tcpdump" in res.stderr
    assert "Traceback" not in res.stderr
    path = scenario(tmp_path, "suri", UDP % (1000, 10), "dut: {kind: suricata}")
    import shutil

    for tool in ("ip", "ethtool", "tc", "tcpdump"):  # everything but suricata
        (bare / tool).symlink_to(shutil.which(tool))
    res = subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(path), "--out", str(tmp_path / "r")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(bare)},
    )
    assert res.returncode == 2  # Suricata 7 is only in bookworm-backports: say so
    assert "apt-get install -t bookworm-backports suricata" in res.stderr, res.stderr


def test_the_plugin_runs_a_benchmark_written_as_a_test(tmp_path, flowengine_bin):
    path = scenario(tmp_path, "plugin", UDP % (1000, 500), "dut: {kind: tcpdump}")
    test = tmp_path / "test_user_bench.py"
    test.write_text(
        textwrap.dedent(f"""
        def test_dut_loses_nothing(run_scenario):
            run = run_scenario({str(path)!r})
            assert run.ok, run.messages
            assert run.metrics.loss_rate < 0.01
            assert run.metrics.dut == 500
    """)
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            str(test),
            "--ntg-results",
            str(tmp_path / "r"),
            "-c",
            "/dev/null",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 passed" in res.stdout
    assert len(list((tmp_path / "r").glob("*-plugin/manifest.json"))) == 1


def test_suricata_live_on_af_packet_as_the_dut(tmp_path, run_scenario, flowengine_bin, suricata):
    (tmp_path / "probe.rules").write_text(
        'alert udp any any -> any 9 (msg:"ntg probe"; content:"NTGPROBE"; sid:9000001; rev:1;)\n'
    )
    flow = (
        "{protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000, dst_port: 9, "
        "rate: 1000, packets: 1500, payload: {size: 18, text: NTGPROBE}}"
    )
    path = scenario(
        tmp_path,
        "suricata",
        flow,
        """
        dut: {kind: suricata, rules: [probe.rules]}
        capture: null
        monitor: {hz: 2}
    """,
    )
    run = run_scenario(path)
    assert run.ok, run.messages
    step = run.manifest["steps"][0]
    assert step["dut"]["received"] == step["loss"]["wire"] == 1500 and step["dut"]["dropped"] == 0
    assert step["dut"]["alerts"] == 1500  # every packet carries the content; no threshold
    alerts = read_table(run.run_dir, "alerts").to_pandas()
    assert (
        len(alerts) == 1500 and set(alerts["sid"]) == {9000001} and set(alerts["step"]) == {"run"}
    )
    assert read_table(run.run_dir, "steps").to_pylist()[0]["alerts"] == 1500
    assert any(name.startswith("W#") for name in run.metrics.steps[0].dut_threads)


def test_ostinato_in_a_live_run_counts_with_drone_and_captures_with_drone(tmp_path, run_scenario):
    import shutil

    if not shutil.which("drone"):
        pytest.skip("drone is not installed (apt-get install ostinato, or ./bootstrap.sh test)")
    path = scenario(
        tmp_path,
        "ostinato",
        UDP % (2000, 2000),
        """
        generators: [{name: ostinato, capture_port: gen0, rate_accuracy: High}]
        dut: {kind: tcpdump}
    """,
    )
    run = run_scenario(path)
    assert run.ok, run.messages
    step = run.manifest["steps"][0]
    gen = step["generators"]["ostinato"]
    assert gen["packets_sent"] == 2000 and gen["port_stats"]["gen0"]["tx_pkts"] == 2000
    assert step["loss"]["wire"] == step["loss"]["dut"] == 2000
    from analysis.capture import read_capture

    drone_pcap = run.run_dir / "gen-ostinato" / "drone-capture.pcap"
    assert len(read_capture(drone_pcap).ts_ns) == 2000  # drone's own capture, instead of tcpdump


@pytest.mark.serial  # compares every namespace of the machine before and after
def test_a_place_that_is_not_in_the_topology_is_refused_before_anything_starts(tmp_path):
    before = namespaces()
    path = scenario(tmp_path, "badplace", UDP % (1000, 10), "topology: pair\ndut: {kind: tcpdump}")
    res = subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(path), "--out", str(tmp_path / "r")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2, res.stderr
    assert "`gen:gen0` is not an interface of topology ntg-pair" in res.stderr
    assert "gen:veth0, peer:veth1" in res.stderr and "Traceback" not in res.stderr
    m = _manifest(tmp_path / "r")
    assert m["status"] == "failed" and namespaces() == before


def test_ctrl_c_while_suricata_starts_ends_the_run_at_once(tmp_path, flowengine_bin, suricata):
    before = namespaces()
    out = tmp_path / "results"
    # many rules, so that Suricata is still loading when Ctrl-C comes
    (tmp_path / "many.rules").write_text(
        "".join(
            f'alert udp any any -> any {1000 + i % 60000} (msg:"load {i}"; content:"ntg{i:06d}"; '
            f"sid:{8000000 + i}; rev:1;)\n"
            for i in range(20000)
        )
    )
    path = scenario(
        tmp_path, "suri-int", UDP % (1000, 60000), "dut: {kind: suricata, rules: [many.rules]}"
    )
    cli = _start_cli(path, out)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # suricata's process exists, still loading
        found = subprocess.run(["pgrep", "-f", f"suricata -c {out}"], capture_output=True)
        if found.returncode == 0:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("suricata did not start")
    cli.send_signal(signal.SIGINT)
    _, stderr = cli.communicate(timeout=60)
    assert cli.returncode == 130, stderr
    m = _manifest(out)
    assert m["status"] == "interrupted" and m["steps"][0]["status"] == "interrupted"
    assert all(c["name"] != "flowengine" for c in m["commands"])  # nothing was sent
    assert_nothing_left(m, before)
