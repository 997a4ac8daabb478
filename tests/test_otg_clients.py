"""Real OTG clients against `testbed otg serve` (docs/otg.md, scenarios/otg/README.md).

One server per module, on a free loopback port over HTTPS, started as a user starts it. Against
it: the snappi script and the gosnappi program of scenarios/otg (their rx captures read back with
the one pcap reader), OTG's own conformance subset ($NTG_OTG_CONFORMANCE, run unchanged from a
copy), and one test per refusal class of the issue, each through snappi as a user meets it (the
OTG Error object: code, kind, the field named). The last test kills a server with SIGKILL and
checks that `testbed cleanup` removes what it made.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import snappi
import urllib3
import yaml

from analysis.capture import iter_frames
from ntgcore.proc import Process, same_process
from tests.conftest import skip_or_fail

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "scenarios" / "otg"
GO_MODULE = SCENARIO / "gosnappi"
READY_TIMEOUT = 120.0  # the site comes up first (namespaces, veths): seconds on a loaded machine

# what both example clients send (scenarios/otg/snappi_b2b.py, gosnappi/main.go)
TX_MAC = bytes.fromhex("020000000101")
RX_MAC = bytes.fromhex("020000000102")
TX_IP, RX_IP = bytes([198, 18, 0, 1]), bytes([198, 18, 0, 2])
FRAMES, FRAME_SIZE, RATE_PPS = 1000, 128, 1000


@dataclass
class Server:
    url: str
    proc: Process
    log: Path
    results: Path
    marks: Path

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def version_answers(url: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
        try:
            r = requests.get(f"{url}/capabilities/version", verify=False, timeout=2)
        except requests.RequestException:
            return False
    return r.status_code == 200


def start_server(tmp: Path, extra: tuple[str, ...] = ()) -> Server:
    """`testbed otg serve` on a free loopback port, its run marks and results in `tmp`, `extra`
    arguments after them; returns once GET /capabilities/version answers (fails with the server's
    output if it never does)."""
    port = free_port()
    marks, results, log = tmp / "marks", tmp / "results", tmp / "serve.log"
    argv = [
        "env",
        f"NTG_RUN_MARKS={marks}",  # its own marks: `testbed cleanup` here sees only this server
        sys.executable,
        "-m",
        "testbed",
        "otg",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--results",
        str(results),
        *extra,
    ]
    with open(log, "wb") as out:
        proc = Process("otg-serve", argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO).start()
    server = Server(f"https://127.0.0.1:{port}", proc, log, results, marks)
    deadline = time.monotonic() + READY_TIMEOUT
    while not version_answers(server.url):
        if proc.poll() is not None:
            pytest.fail(
                f"testbed otg serve exited ({proc.poll()}) before answering:\n{server.log_tail()}",
                pytrace=False,
            )
        if time.monotonic() > deadline:
            proc.stop(grace=10)
            pytest.fail(
                f"testbed otg serve did not answer within {READY_TIMEOUT:g} s:\n"
                f"{server.log_tail()}",
                pytrace=False,
            )
        time.sleep(0.3)
    return server


def kill_and_clean_up(s: Server) -> subprocess.CompletedProcess[str]:
    """SIGKILL the server, then `testbed cleanup` with its run marks: what cleanup said."""
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait(30)
    return subprocess.run(
        ["env", f"NTG_RUN_MARKS={s.marks}", sys.executable, "-m", "testbed", "cleanup"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def server(root, flowengine_bin, tmp_path_factory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("otg-serve"))
    try:
        yield s
    finally:
        code = s.proc.stop(signal.SIGTERM, grace=30)
    assert code == 0, f"testbed otg serve ended with {code} on SIGTERM:\n{s.log_tail()}"


@pytest.fixture(scope="session")
def gosnappi_bin(tmp_path_factory) -> Path:
    """The gosnappi example built once (`go build`, modules from the Go proxy or the module cache,
    go.sum as committed); no Go: skipped, or failed in CI."""
    go = shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go",) if os.access(p, os.X_OK)), None
    )
    if go is None:
        skip_or_fail("go is not installed (the gosnappi example needs Go >= 1.25)")
    out = tmp_path_factory.mktemp("gosnappi") / "otgexample"
    env = dict(os.environ, GOFLAGS="-mod=readonly")  # go.sum as committed; nothing in the tree
    done = subprocess.run(
        [str(go), "build", "-o", str(out), "."],
        cwd=GO_MODULE,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"go build failed:\n{done.stderr[-3000:]}"
    return out


def run_client(argv: list[str], timeout: float = 180) -> tuple[int, str, str]:
    proc = Process("otg-client", argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    got = proc.start().communicate(timeout=timeout)
    code = proc.poll()
    assert got is not None and code is not None, f"{argv[0]} did not finish within {timeout:g} s"
    return code, got[0].decode(errors="replace"), got[1].decode(errors="replace")


def check_b2b_run(code: int, out: str, err: str, pcap: Path) -> None:
    """What both example clients must have seen: exact metrics, and a capture of the rx port that
    holds the flow's 1,000 frames as configured (addresses, ports, size with a good FCS, rate)."""
    assert code == 0, f"exit {code}\nstdout:\n{out}\nstderr:\n{err}"
    row = re.search(r"^udp-b2b\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", out, re.M)
    assert row, f"no metrics row for udp-b2b in:\n{out}"
    state, ftx, frx, btx, brx = row.groups()
    assert (state, int(ftx), int(frx)) == ("stopped", FRAMES, FRAMES)
    assert int(btx) == int(brx) == FRAMES * FRAME_SIZE, "bytes count the frame size (FCS included)"

    ours = []
    for ts_ns, wire_len, data in iter_frames(pcap):
        if data[6:12] == TX_MAC:
            ours.append((ts_ns, wire_len, data))
    assert len(ours) == FRAMES, f"{len(ours)} of the flow's frames in the rx capture"
    for _ts, wire_len, data in ours:
        assert wire_len == len(data) == FRAME_SIZE
        assert data[0:6] == RX_MAC and data[12:14] == b"\x08\x00"
        assert (data[26:30], data[30:34]) == (TX_IP, RX_IP)
        assert data[23] == 17 and struct.unpack("!HH", data[34:38]) == (5000, 6000)
        assert struct.unpack("!H", data[16:18])[0] == FRAME_SIZE - 14 - 4  # IPv4 total length
    span_s = (ours[-1][0] - ours[0][0]) / 1e9
    expected = (FRAMES - 1) / RATE_PPS
    assert 0.9 * expected <= span_s <= 1.5 * expected, f"{FRAMES} frames spanned {span_s:.3f} s"
    # the design sends the FCS as the real CRC-32 of each frame as sent (seq patched in)
    bad = [i for i, (_, _, d) in enumerate(ours) if d[-4:] != struct.pack("<I", zlib.crc32(d[:-4]))]
    assert not bad, f"{len(bad)} of {FRAMES} frames have an FCS that is not their CRC-32: {bad[:5]}"


def test_snappi_script(server, root, pcaplib, tmp_path):
    pcap = tmp_path / "rx.pcap"
    script = SCENARIO / "snappi_b2b.py"
    code, out, err = run_client(
        [sys.executable, str(script), "--host", server.url, "--pcap", str(pcap)]
    )
    check_b2b_run(code, out, err, pcap)


def test_gosnappi_program(server, root, pcaplib, gosnappi_bin, tmp_path):
    pcap = tmp_path / "rx.pcap"
    code, out, err = run_client(
        [str(gosnappi_bin), "-host", server.url, "-ports", "p1,p2", "-pcap", str(pcap)]
    )
    check_b2b_run(code, out, err, pcap)


def no_server_refusal(argv_of: Any) -> None:
    """No server listening: one line naming the address, exit status 2, no traceback."""
    url = f"https://127.0.0.1:{free_port()}"
    code, _, err = run_client(argv_of(url), timeout=60)
    assert code == 2 and url in err and "Traceback" not in err, (code, err)
    assert len(err.strip().splitlines()) <= 2, err  # snappi adds its certificate warning line


def test_snappi_script_without_a_server():
    no_server_refusal(lambda url: [sys.executable, str(SCENARIO / "snappi_b2b.py"), "--host", url])


def test_gosnappi_program_without_a_server(gosnappi_bin):
    no_server_refusal(lambda url: [str(gosnappi_bin), "-host", url])


def test_conformance_subset(server, root, tmp_path):
    """OTG's own data-plane tests (feature/b2b/packet: tcp and udp ports, value, values,
    increment/decrement), unchanged, from a copy of $NTG_OTG_CONFORMANCE."""
    source = os.environ.get("NTG_OTG_CONFORMANCE")
    if not source or not (Path(source) / "feature" / "b2b" / "packet").is_dir():
        skip_or_fail(
            "NTG_OTG_CONFORMANCE does not name the OTG conformance subset "
            "(.ci/run sets it to ../shared/otg-conformance)"
        )
    work = tmp_path / "otg-conformance"
    shutil.copytree(source, work, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    (work / "test-config.yaml").write_text(
        yaml.safe_dump({"otg_host": server.url, "otg_ports": ["p1", "p2"]})
    )
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "dp",
        "feature/b2b/packet",
        "-p",
        "no:cacheprovider",
    ]
    proc = Process(
        "otg-conformance", argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=work
    )
    got = proc.start().communicate(timeout=600)
    assert got is not None, "the conformance subset did not finish within 600 s"
    text = got[0].decode(errors="replace")
    summary = text.strip().splitlines()[-1] if text.strip() else ""
    assert proc.poll() == 0 and re.search(r"\b5 passed\b", summary), (
        f"conformance subset: {summary}\n{text[-6000:]}\nserver:\n{server.log_tail()}"
    )
    assert not re.search(r"\b(failed|error|skipped|deselected)\b", summary.replace("5 passed", ""))


# --- refusals: one per class, as a snappi user meets them ------------------------------------


def api_for(server: Server) -> Any:
    return snappi.api(location=server.url, verify=False, version_check=True)


def base_config(api: Any, rx_location: str = "p2", continuous: bool = False) -> tuple[Any, Any]:
    """Two ports and one UDP flow (documentation addresses); returns (config, flow)."""
    c = api.config()
    c.ports.add(name="p1", location="p1")
    c.ports.add(name="p2", location=rx_location)
    f = c.flows.add(name="f1")
    f.tx_rx.port.tx_name = "p1"
    f.tx_rx.port.rx_names = ["p2"]
    f.size.fixed = 128
    f.rate.pps = 100
    if continuous:
        f.duration.continuous.gap = 12
    else:
        f.duration.fixed_packets.packets = 10
    f.metrics.enable = True
    eth, ip, udp = f.packet.ethernet().ipv4().udp()
    eth.src.value, eth.dst.value = "02:00:00:00:02:01", "02:00:00:00:02:02"
    ip.src.value, ip.dst.value = "198.18.1.1", "198.18.1.2"
    udp.src_port.value, udp.dst_port.value = 7000, 7001
    return c, f


def refusal(api: Any, call: Any, *args: Any) -> Any:
    """The OTG Error a refused call raised, checked to be one both clients decode: printable,
    kind one of the model's (validation, internal), the errors a list the server wrote (not
    snappi's fallback of the whole body)."""
    with pytest.raises(Exception) as info:
        call(*args)
    text = str(info.value)  # snappi's own str() fails on an Error whose kind is not in the model
    error = api.from_exception(info.value)
    assert error is not None, f"not an OTG error: {text}"
    assert error.kind in ("validation", "internal"), f"kind {error.kind!r}: {text}"
    assert error.errors and not any(e.startswith("{") for e in error.errors), error.errors
    return error


def transmit(api: Any, state: str) -> None:
    cs = api.control_state()
    cs.traffic.flow_transmit.state = state
    api.set_control_state(cs)


def flow_state(api: Any, name: str = "f1") -> Any:
    req = api.metrics_request()
    req.flow.flow_names = [name]
    return next(m for m in api.get_metrics(req).flow_metrics if m.name == name)


def test_refuses_an_unsupported_header(server, root):
    api = api_for(server)
    c, f = base_config(api)
    f.packet.igmpv1()
    error = refusal(api, api.set_config, c)
    assert error.code == 501
    assert any("flows[0].packet[3]" in e and "igmpv1" in e for e in error.errors), error.errors


def test_refuses_an_unsupported_pattern_field(server, root):
    """A pattern field the compiler does not do (metric tags: tagged metrics are not offered)."""
    api = api_for(server)
    c, f = base_config(api)
    f.packet[1].src.metric_tags.add(name="src-tag", offset=0, length=8)
    error = refusal(api, api.set_config, c)
    assert error.code == 501
    assert any("flows[0].packet[1].ipv4.src.metric_tags" in e for e in error.errors), error.errors


def test_refuses_tx_rx_device(server, root):
    api = api_for(server)
    c, f = base_config(api)
    f.tx_rx.device.tx_names = ["d1"]
    f.tx_rx.device.rx_names = ["d2"]
    error = refusal(api, api.set_config, c)
    assert error.code == 501
    assert any("flows[0].tx_rx.device" in e for e in error.errors), error.errors


def test_refuses_an_unknown_port_location(server, root):
    api = api_for(server)
    c, _ = base_config(api, rx_location="p9")
    error = refusal(api, api.set_config, c)
    assert error.code == 400
    text = " ".join(error.errors)
    assert "ports[1].location" in text and "p9" in text, error.errors
    assert "p1" in text and "p2" in text, f"the known locations are not named: {error.errors}"


def test_refuses_malformed_json(server, root):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
        r = requests.post(
            f"{server.url}/config",
            data=b'{"ports": [{"name": "p1", "location": ',
            headers={"Content-Type": "application/json"},
            verify=False,
            timeout=30,
        )
    assert r.status_code == 400
    assert r.headers["Content-Type"].startswith("application/json")
    body = r.json()
    assert body["code"] == 400 and body["kind"] == "validation" and body["errors"], body
    snappi.Error().deserialize(r.text)  # an Error both clients read as one, not as raw text


def test_refuses_a_config_while_traffic_runs(server, root):
    api = api_for(server)
    c, _ = base_config(api, continuous=True)
    api.set_config(c)
    transmit(api, "start")
    try:
        assert flow_state(api).transmit == "started"
        error = refusal(api, api.set_config, c)
        assert error.code == 409
        assert any("traffic" in e or "transmit" in e for e in error.errors), error.errors
    finally:
        transmit(api, "stop")
    deadline = time.monotonic() + 10
    while flow_state(api).transmit != "stopped" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert flow_state(api).transmit == "stopped"
    api.set_config(c)  # accepted again once stopped


def test_second_client_is_refused_while_the_first_sends(server, root):
    """Two clients, two connections: the second's set_config is refused (409) while the first's
    traffic runs, and the first's flow goes on undisturbed until the first stops it."""
    first, second = api_for(server), api_for(server)
    c, _ = base_config(first, continuous=True)
    first.set_config(c)
    transmit(first, "start")
    try:
        before = flow_state(first).frames_tx
        other, _ = base_config(second)
        error = refusal(second, second.set_config, other)
        assert error.code == 409
        time.sleep(0.5)
        after = flow_state(second)  # reading is allowed to anyone
        assert after.transmit == "started" and after.frames_tx > before
        assert first.get_config().flows[0].duration.choice == "continuous"  # still the first's
    finally:
        transmit(first, "stop")


def test_cleanup_after_the_server_is_killed(root, tmp_path):
    """SIGKILL while a flow runs: `testbed cleanup` (reading the run mark the server wrote)
    removes its namespaces, and nothing it started is left running."""
    s = start_server(tmp_path)
    try:
        (mark_path,) = s.marks.glob("*.json")
        api = api_for(s)
        c, _ = base_config(api, continuous=True)
        api.set_config(c)
        transmit(api, "start")
        assert flow_state(api).transmit == "started"
        mark = json.loads(mark_path.read_text())
    finally:
        done = kill_and_clean_up(s)
    namespaces = mark["locations"]
    children = [c for c in mark.get("children", []) if c.get("pid")]
    assert namespaces and children, f"the mark names no namespaces or no engine: {mark}"
    assert done.returncode == 0, done.stderr
    for ns in namespaces:
        assert f"deleted namespace {ns}" in done.stdout, done.stdout
    present = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left = [ns for ns in namespaces if re.search(rf"^{re.escape(ns)}\b", present, re.M)]
    assert not left, f"namespaces left after cleanup: {left}\n{done.stdout}"
    alive = [c for c in children if same_process(c["pid"], c.get("start_ticks"), c.get("argv", []))]
    assert not alive, f"still running after cleanup: {alive}"
    assert not list(s.marks.glob("*.json")), "the dead server's mark is still there"
    manifest = json.loads((Path(mark["run_dir"]) / "manifest.json").read_text())
    assert manifest["status"] == "abandoned", manifest["status"]
