"""The flow meters as devices under test (testbed.meters): each real meter on a small pcap of
known flows, in its own pcap mode, for every export version it has; the export count against the
collected records; the options mapped to each meter's flags and refused where it has none; the
faults (not installed, crash, port taken, wrong port, nothing exported, kill -9 then cleanup)
and the live part with the collector part on a veth pair.

The expected records are computed here from the frames the test writes (ntgcore.packets), not
taken from a meter; where a meter departs from them on purpose of its design, the test says so
(the quirks in docs/flowmeters.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from ntgcore.errors import ToolMissing
from ntgcore.packets import (
    PCAP_GLOBAL,
    PCAP_REC,
    PcapWriter,
    addr,
    ether,
    icmp,
    ip,
    tcp_session,
    udp,
)
from ntgcore.proc import Process
from ntgcore.registry import DUT_KINDS
from ntgcore.scenario import ScenarioError, json_schema, parse_scenario
from testbed import cleanup
from testbed.endpoints.netns import NetnsEndpoint, NetnsSite
from testbed.endpoints.netns.topology import parse_topology
from testbed.meters import argus, nfpcapd, pmacct, softflowd
from testbed.meters.base import MeterError
from testbed.meters.collector import Collector, CollectorError
from testbed.meters.collector.part import CollectorPart
from testbed.meters.offline import namespace_prefix, run_on_pcap

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
A, B = "198.18.0.1", "198.18.0.2"
A6, B6 = "2001:db8::1", "2001:db8::2"
METERS = {m.METER.name: m.METER for m in (softflowd, pmacct, nfpcapd, argus)}
KINDS = [m.KIND for m in (softflowd, pmacct, nfpcapd, argus)]
RUNS = [
    ("softflowd", 5),
    ("softflowd", 9),
    ("softflowd", "ipfix"),
    ("pmacct", 5),
    ("pmacct", 9),
    ("pmacct", "ipfix"),
    ("nfpcapd", "nfdump"),
    ("argus", "argus"),
]


# --- the capture and what a meter should make of it ---------------------------------------


def _frames() -> list[tuple[int, tuple, bytes]]:
    """(time, key (src, dst, sport, dport, proto), Ethernet frame) of five flows: UDP both ways,
    a TCP session, ICMP echo requests, IPv6 UDP, UDP to port 53; all within half a second."""
    a, b, a6, b6 = addr(A), addr(B), addr(A6), addr(B6)
    out = []
    for i in range(5):
        frame = ether(ip(a, b, 17, udp(a, b, 1000, 2000, b"x" * (100 + i))), True)
        out.append((T0 + i * 10 * MS, (A, B, 1000, 2000, 17), frame))
    for i in range(3):
        frame = ether(ip(b, a, 17, udp(b, a, 2000, 1000, b"y" * 50)), False)
        out.append((T0 + 5 * MS + i * 10 * MS, (B, A, 2000, 1000, 17), frame))
    session = tcp_session(a, b, 40000, 80, [(True, b"GET / " * 5), (False, b"z" * 700)])
    for i, (from_client, frame) in enumerate(session):
        key = (A, B, 40000, 80, 6) if from_client else (B, A, 80, 40000, 6)
        out.append((T0 + 100 * MS + i * MS, key, frame))
    for i in range(2):
        frame = ether(ip(a, b, 1, icmp(8, 0, 7, i, b"p" * 24)), True)
        out.append((T0 + 200 * MS + i * 3 * MS, (A, B, 0, 8 * 256, 1), frame))
    for i in range(2):
        frame = ether(ip(a6, b6, 17, udp(a6, b6, 5000, 5353, b"q" * 30)), True)
        out.append((T0 + 300 * MS + i * MS, (A6, B6, 5000, 5353, 17), frame))
    for i in range(2):
        frame = ether(ip(a, b, 17, udp(a, b, 5300, 53, b"dns?")), True)
        out.append((T0 + 400 * MS + i * MS, (A, B, 5300, 53, 17), frame))
    return sorted(out, key=lambda f: f[0])


def _expected() -> dict[tuple, dict]:
    """Per direction: packets, L3 bytes, first/last time, TCP flags, and the first/last time of
    both directions together (what meters with bidirectional records stamp)."""
    recs: dict[tuple, dict] = {}
    for ts, key, frame in _frames():
        r = recs.setdefault(key, {"packets": 0, "bytes": 0, "first": ts, "flags": 0})
        r["packets"] += 1
        r["bytes"] += len(frame) - 14
        r["last"] = ts
        if key[4] == 6:
            r["flags"] |= frame[14 + 20 + 13]
    for key, r in recs.items():
        back = recs.get((key[1], key[0], key[3], key[2], key[4]), r)
        r["bi_first"], r["bi_last"] = min(r["first"], back["first"]), max(r["last"], back["last"])
    return recs


@pytest.fixture(scope="module")
def flows_pcap(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("meters") / "flows.pcap"
    with open(path, "wb") as f:
        w = PcapWriter(f)
        for ts, _key, frame in _frames():
            w.write(ts, frame)
    return path


def _leftovers(folder: Path) -> list[str]:
    """Processes working in FOLDER or naming it (pmacctd renames itself, its cwd stays), and
    our offline namespaces."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(p / "cwd")
        except OSError:
            continue
        if (str(folder) in cmd or cwd.startswith(str(folder))) and "pytest" not in cmd:
            found.append(cmd)
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    ours = {namespace_prefix(p) for p in [folder, *folder.iterdir()] if p.is_dir()}
    return found + [line for line in ns.splitlines() if line[:12] in ours]


# --- each meter on the capture --------------------------------------------------------------


def _ms(ns: int) -> int:
    return ns // MS * MS


@pytest.mark.parametrize("name,version", RUNS, ids=[f"{m}-{v}" for m, v in RUNS])
def test_meter_on_pcap_gives_the_records_of_the_capture(root, flows_pcap, tmp_path, name, version):
    meter = METERS[name]
    run = run_on_pcap(meter, meter.spec(version=version), flows_pcap, tmp_path / name)
    assert _leftovers(tmp_path) == []
    got: dict[tuple, list[dict]] = {}
    for r in run.records.to_pylist():
        got.setdefault((r["src"], r["dst"], r["sport"], r["dport"], r["proto"]), []).append(r)
    want = _expected()
    if version == 5:  # NetFlow v5 has no IPv6 record
        want = {k: v for k, v in want.items() if ":" not in k[0]}
    icmp_key = (A, B, 0, 8 * 256, 1)
    if (name, version) == ("pmacct", 9):  # pmacct's v9 template has no ICMP type/code
        want[(A, B, 0, 0, 1)] = want.pop(icmp_key)
    assert sorted(got) == sorted(want), f"{name} v{version}: keys {sorted(got)}"
    for key, w in want.items():
        rows = got[key]
        if (name == "nfpcapd" and (key[4] == 1 or 53 in key[2:4])) or (
            name == "argus" and key[4] == 1
        ):  # nfpcapd 1.7.1: one record per packet for ICMP and for DNS (UDP port 53); argus:
            # one record per ICMP echo (sequence number)
            assert [r["packets"] for r in rows] == [1] * w["packets"]
            continue
        assert len(rows) == 1, f"{key}: {rows}"
        r = rows[0]
        l2 = 14 * w["packets"] if name == "argus" else 0  # argus counts frame bytes
        assert (r["packets"], r["bytes"]) == (w["packets"], w["bytes"] + l2), key
        assert r["tcp_flags"] == (0 if name == "argus" else w["flags"]), key
        if (name, version) == ("pmacct", 5):
            continue  # pmacct's v5 times come from the wall clock in pcap mode
        if name == "nfpcapd":  # per direction, milliseconds
            assert (r["first_ns"], r["last_ns"]) == (_ms(w["first"]), _ms(w["last"])), key
        elif name == "argus":  # one record both ways, microseconds
            assert (r["first_ns"], r["last_ns"]) == (w["bi_first"], w["bi_last"]), key
        else:  # softflowd, pmacct: both directions stamped with the pair's times
            assert (r["first_ns"], r["last_ns"]) == (_ms(w["bi_first"]), _ms(w["bi_last"])), key
    # the files a run leaves, the same as a live step's meter/
    assert pq.read_table(tmp_path / name / "records.parquet").equals(run.records)
    counters = json.loads((tmp_path / name / "counters.json").read_text())
    assert counters["collected"] == run.collected and counters["status"] == "exit status 0"
    assert (tmp_path / name / f"{name}.log").is_file()
    if meter.exports:  # nothing lost on loopback: what was on the wire is what was collected
        assert run.exported == run.collected and run.lost_in_export == 0
        assert counters["collector"]["nfcapd"]["flows"] == run.collected
        assert run.export_pcap is not None and run.export_pcap.stat().st_size > 24
    else:
        assert run.exported is None and run.export_pcap is None
    own = counters["own"]
    if name == "softflowd":  # with v5 it does not even count the IPv6 packets
        v4 = sum(1 for _ts, key, _f in _frames() if ":" not in key[0])
        assert own["packets_processed"] == (v4 if version == 5 else len(_frames()))
        assert own["records_exported"] == run.exported
    if name == "nfpcapd":
        assert own["packets_processed"] == len(_frames())
    assert run.seconds < (6 if name == "pmacct" else 3)


def test_a_burst_of_50000_records_at_the_end_of_the_file_is_collected_whole(root, tmp_path):
    """softflowd flushes its table at the end of a pcap: 50,000 one-packet flows become ~1,900
    export packets at once. With the kernel's default socket buffer nfcapd lost ~8 % of them and
    the export capture dropped some: both are sized for it (collector/nfcapd.py)."""
    pcap, a = tmp_path / "many.pcap", addr(A)
    with open(pcap, "wb") as f:
        w = PcapWriter(f)
        for i in range(50_000):
            b = addr(f"198.19.{i >> 8 & 255}.{i & 255}")
            frame = ether(ip(a, b, 17, udp(a, b, 1000 + i % 50_000, 53, b"m")), True)
            w.write(T0 + i * 10_000, frame)
    run = run_on_pcap(softflowd.METER, softflowd.SoftflowdSpec(), pcap, tmp_path / "m")
    assert run.collector["export_complete"] and run.collector["nfcapd"]["sequence_errors"] == 0
    assert run.counters["own"]["records_exported"] == run.exported == run.collected == 50_000
    assert run.counters["own"]["flows_forced"] > 0  # the table (8192) overflowed on the way


def _timeouts_pcap(path: Path) -> None:
    """Flow 1001: packets at 0, 1 and 40 s (a 39 s gap: idle 15 s ends it); flow 1002: a packet
    every 5 s from 0 to 130 s (active 60 s cuts it)."""
    a, b, c = addr(A), addr(B), addr("198.18.0.3")
    frames = [(t * 1000 * MS, a, b, 1001) for t in (0, 1, 40)]
    frames += [(t * 1000 * MS + 1, a, c, 1002) for t in range(0, 131, 5)]
    with open(path, "wb") as f:
        w = PcapWriter(f)
        for t, src, dst, port in sorted(frames):
            w.write(T0 + t, ether(ip(src, dst, 17, udp(src, dst, port, 9999, b"t")), True))


# what each meter makes of it in pcap mode: packets per record, by source port
TIMEOUTS_SEEN = {
    "softflowd": {1001: [3], 1002: [27]},  # no timeout in pcap mode: one record each, at EOF
    "pmacct": {1001: [3], 1002: [27]},  # the same (its timeouts run on the wall clock)
    "nfpcapd": {1001: [2, 1], 1002: [16, 11]},  # packet time; its cache is checked every 10 s
    "argus": {1001: [3], 1002: [12, 12, 3]},  # status every 60 s (-S); its idle timeout > 39 s
}


@pytest.mark.parametrize("name", sorted(TIMEOUTS_SEEN))
def test_what_each_meter_does_with_timeouts_in_pcap_mode(root, tmp_path, name):
    pcap = tmp_path / "timeouts.pcap"
    _timeouts_pcap(pcap)
    meter = METERS[name]
    rules = {"active_timeout": "60s"} | ({} if name == "argus" else {"idle_timeout": "15s"})
    run = run_on_pcap(meter, meter.spec(**rules), pcap, tmp_path / "m")
    seen: dict[int, list[int]] = {}
    for r in sorted(run.records.to_pylist(), key=lambda r: r["first_ns"]):
        seen.setdefault(r["sport"], []).append(r["packets"])
    assert seen == TIMEOUTS_SEEN[name]


# --- options -------------------------------------------------------------------------------


def test_options_map_to_each_meters_flags(tmp_path):
    spec = softflowd.SoftflowdSpec(
        version="ipfix", active_timeout="2m", idle_timeout="5s", max_flows=100, key_vlan=True
    )
    argv = softflowd.METER.pcap_argv(spec, Path("x.pcap"), ("127.0.0.1", 9000), tmp_path)
    text = " ".join(argv)
    for part in ("-v 10", "-t maxlife=120", "-t udp=5", "-t general=5", "-m 100", "-T vlan"):
        assert part in text
    assert "-n 127.0.0.1:9000" in text and "-a" in argv and "-A milli" in text
    argv = pmacct.METER.pcap_argv(
        pmacct.PmacctSpec(version=5, idle_timeout=7), Path("x.pcap"), ("127.0.0.1", 9), tmp_path
    )
    conf = Path(argv[-1]).read_text()
    assert "nfprobe_version: 5" in conf and "maxlife=60" in conf and "udp=7" in conf
    assert "pcap_savefile: x.pcap" in conf and "nfprobe_receiver: 127.0.0.1:9" in conf
    argv = nfpcapd.METER.pcap_argv(
        nfpcapd.NfpcapdSpec(active_timeout=30, idle_timeout=4), Path("x.pcap"), ("", 0), tmp_path
    )
    assert argv[argv.index("-e") + 1] == "30,4"
    rules = softflowd.METER.rules(spec)
    assert (rules.idle_timeout_ns, rules.active_timeout_ns, rules.max_flows) == (5e9, 120e9, 100)
    assert nfpcapd.METER.rules(nfpcapd.NfpcapdSpec()).max_flows is None


@pytest.mark.parametrize(
    "model,fields,says",
    [
        (softflowd.SoftflowdSpec, {"version": 7}, "softflowd exports only 5 (NetFlow v5)"),
        (nfpcapd.NfpcapdSpec, {"version": 9}, "nfpcapd exports only nfdump"),
        (argus.ArgusSpec, {"version": "ipfix"}, "argus exports only argus"),
        (argus.ArgusSpec, {"idle_timeout": "5s"}, "argus cannot set it: argus's idle timeouts"),
        (argus.ArgusSpec, {"max_flows": 10}, "argus cannot set it"),
        (nfpcapd.NfpcapdSpec, {"max_flows": 10}, "nfpcapd cannot set it: its flow cache"),
        (nfpcapd.NfpcapdSpec, {"key_vlan": True}, "nfpcapd cannot set it"),
        (softflowd.SoftflowdSpec, {"idle_timeout": "1500ms"}, "softflowd takes whole seconds"),
        (pmacct.PmacctSpec, {"active_timeout": 0}, "must be more than 0"),
    ],
    ids=lambda v: v.meter if isinstance(v, type) else next(iter(v)) if isinstance(v, dict) else "",
)
def test_options_a_meter_does_not_have_are_refused_by_name(model, fields, says):
    with pytest.raises(ValidationError) as err:
        model(**fields)
    assert says in str(err.value) and next(iter(fields)) in str(err.value)


@pytest.fixture
def meter_kinds():
    """The meters' DUT kinds in the registry (as their entry points put them there)."""
    added = [k.name for k in KINDS if k.name not in DUT_KINDS]
    for kind in KINDS:
        DUT_KINDS.register(kind.name, kind)
    yield KINDS
    for name in added:
        DUT_KINDS.unregister(name)


def test_a_meter_in_a_scenario_is_checked_where_it_is_written(meter_kinds):
    text = (
        "version: 1\nname: m\nflows:\n  - {protocol: udp, src: 198.18.0.1, dst: 198.18.0.2,"
        " src_port: 1, dst_port: 2, rate: 10, packets: 5}\ntestbed:\n  dut:\n"
    )
    ok = parse_scenario(text + "    kind: softflowd\n    version: ipfix\n    idle_timeout: 5s")
    assert isinstance(ok.testbed.dut, softflowd.SoftflowdSpec) and ok.testbed.dut.idle_s == 5
    assert "SoftflowdSpec" in json_schema()["$defs"]
    with pytest.raises(ScenarioError) as e:
        parse_scenario(text + "    kind: nfpcapd\n    version: 9", "s.yaml")
    assert e.value.problems[0].startswith("s.yaml:8: testbed.dut.version: ")
    assert "nfpcapd exports only nfdump" in e.value.problems[0]


def test_a_meter_not_installed_names_its_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without any of them
    for meter, package in (
        (softflowd.METER, "softflowd"),
        (pmacct.METER, "pmacct"),
        (nfpcapd.METER, "nfdump"),
        (argus.METER, "argus-server"),
    ):
        with pytest.raises(ToolMissing, match=f"apt-get install {package}"):
            meter.check_installed()
    with pytest.raises(ToolMissing, match="nfcapd \\(package nfdump\\)"):
        softflowd.METER.check_installed()


# --- faults --------------------------------------------------------------------------------


def test_export_to_a_wrong_port_is_an_error_naming_both_ports(root, flows_pcap, tmp_path):
    meter = softflowd.METER
    spec = meter.spec(collector_port=9995)
    with pytest.raises(MeterError, match="to port 9996, where no collector listens.*on 9995"):
        run_on_pcap(meter, spec, flows_pcap, tmp_path / "m", export_port=9996)
    assert _leftovers(tmp_path) == []
    assert (tmp_path / "m" / "records.parquet").is_file()  # what there was (nothing) is kept


def test_a_meter_that_exports_nothing_is_an_error(root, tmp_path):
    pcap = tmp_path / "v6.pcap"  # only IPv6: NetFlow v5 cannot carry it
    a6, b6 = addr(A6), addr(B6)
    with open(pcap, "wb") as f:
        w = PcapWriter(f)
        for i in range(3):
            w.write(T0 + i * MS, ether(ip(a6, b6, 17, udp(a6, b6, 1, 2, b"v6")), True))
    with pytest.raises(MeterError, match=r"softflowd exported nothing from .*v6.pcap \(3 IP"):
        run_on_pcap(softflowd.METER, softflowd.SoftflowdSpec(version=5), pcap, tmp_path / "m")
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("name", ["softflowd", "nfpcapd"])
def test_a_meter_that_fails_mid_run_keeps_what_was_collected(root, tmp_path, name):
    """A capture of a link type no meter reads (LINKTYPE_USER0): the meter exits with an
    error; the run fails naming its status and its output, the folder's files are written."""
    pcap = tmp_path / "user0.pcap"
    with open(pcap, "wb") as f:
        f.write(PCAP_GLOBAL.pack(0xA1B2C3D4, 2, 4, 0, 0, 65535, 147))
        f.write(PCAP_REC.pack(1, 0, 4, 4) + b"abcd")
    meter = METERS[name]
    with pytest.raises(MeterError, match=f"{name} ended with exit status .* kept: .*records"):
        run_on_pcap(meter, meter.spec(), pcap, tmp_path / "m")
    assert pq.read_table(tmp_path / "m" / "records.parquet").num_rows == 0
    assert json.loads((tmp_path / "m" / "counters.json").read_text())["status"] != "exit status 0"
    assert _leftovers(tmp_path) == []


def test_a_collector_port_already_taken_is_a_clear_error(root, tmp_path):
    topo = parse_topology({"name": "ntgtestcol", "namespaces": ["m"], "mtu": None})
    with topo.up():

        def inside(*argv: str) -> list[str]:
            return topo.exec_argv("m", *argv)

        first = Collector(inside, 9995, tmp_path / "a").start()
        try:
            second = Collector(inside, 9995, tmp_path / "b")
            with pytest.raises(CollectorError, match="port 9995 is taken .* `collector_port`"):
                second.start()
            assert second.proc.poll() is not None
            assert second.tcpdump is not None and second.tcpdump.record.exit_code is not None
        finally:
            first.stop()
    assert first.records().num_rows == 0 and _leftovers(tmp_path) == []


def test_kill_9_of_an_offline_run_leaves_nothing_after_cleanup(
    root, flows_pcap, tmp_path, monkeypatch
):
    marks = tmp_path / "marks"
    code = (
        "import sys; from pathlib import Path; from testbed.meters import pmacct;"
        "from testbed.meters.offline import namespace_prefix, run_on_pcap;"
        f"run_on_pcap(pmacct.METER, pmacct.PmacctSpec(), Path({str(flows_pcap)!r}),"
        f" Path({str(tmp_path / 'run')!r}))"
    )
    argv = ["env", f"NTG_RUN_MARKS={marks}", sys.executable, "-c", code]
    proc = Process("victim", argv, cwd=Path(__file__).resolve().parent.parent)  # not in tmp
    proc.start()
    deadline = time.monotonic() + 20
    while not any("pmacctd" in c for c in _leftovers(tmp_path)):
        assert time.monotonic() < deadline and proc.poll() is None, "pmacctd never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(5)
    assert list(marks.glob("*.json")), "the run left no mark"
    monkeypatch.setattr(cleanup, "RUN_MARKS", marks)
    done = cleanup.cleanup()
    prefix = namespace_prefix(tmp_path / "run")
    assert any(f"deleted namespace {prefix}" in line for line in done), done
    deadline = time.monotonic() + 5
    while _leftovers(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _leftovers(tmp_path) == []


# --- live: the collector part and the meter part on a veth pair ----------------------------


def _replay(pair, pcap: Path, loops: int) -> None:
    argv = ["tcpreplay", "-q", "-t", "-l", str(loops), "-i", "veth0", str(pcap)]
    out = pair.run_in(pair.gen, *argv)
    assert out.returncode == 0, out.stderr


def _live_parts(pair, spec, step_dir: Path):
    site = NetnsSite(pair.topology)
    ctx = SimpleNamespace(
        testbed=SimpleNamespace(dut=spec), site=site, step_dir=step_dir, seed=0, pids=dict
    )
    col = CollectorPart(ctx)  # type: ignore[arg-type]
    kind = {"softflowd": softflowd.KIND, "pmacct": pmacct.KIND}[spec.kind]
    dut = kind.part(spec, NetnsEndpoint(pair.peer, "veth1"), step_dir, step_dir)
    return col, dut


@pytest.mark.parametrize("name,loops", [("pmacct", 1), ("softflowd", 300)])
def test_live_meter_exports_to_the_collector_part(pair, flows_pcap, tmp_path, name, loops):
    """softflowd gets its packets from libpcap in whole blocks (a few thousand packets): at a
    low rate it sees nothing, hence 300 loops of the capture for it."""
    meter = METERS[name]
    spec = meter.spec(version="ipfix", at="peer:veth1", idle_timeout=1)
    col, dut = _live_parts(pair, spec, tmp_path)
    col.start(lambda: False)
    try:
        dut.start(lambda: False)
        _replay(pair, flows_pcap, loops)
        time.sleep(0.5)
        assert dut.problem() is None and col.problem() is None
    finally:
        dut_stats = dut.stop()
        stats = col.stop()
    folder = tmp_path / "meter"
    table = pq.read_table(folder / "records.parquet")
    assert stats["collected"] == table.num_rows == stats["exported"] >= len(_expected())
    assert stats["lost_in_export"] == 0 and stats["export_complete"] and "note" not in stats
    assert dut_stats["counters"]["packets_received"] == loops * len(_frames())
    assert dut_stats["counters"]["packets_dropped"] == 0
    counters = json.loads((folder / "counters.json").read_text())
    assert counters["own"] == dut_stats["counters"] and counters["collector"]["port"] == 9995
    assert (folder / "export.pcap").is_file() and (folder / f"{name}.log").is_file()
    assert _leftovers(tmp_path) == []


def test_live_meter_crash_keeps_what_was_collected(pair, flows_pcap, tmp_path):
    """softflowd killed by SIGSEGV after its first export (1 s idle timeout, expiry every
    second): the DUT reports its end, the collector still stores what came before it."""
    spec = softflowd.SoftflowdSpec(version=9, at="peer:veth1", idle_timeout=1)
    col, dut = _live_parts(pair, spec, tmp_path)
    col.start(lambda: False)
    try:
        dut.start(lambda: False)
        _replay(pair, flows_pcap, 300)  # libpcap hands softflowd whole blocks: fill some
        deadline = time.monotonic() + 10
        while col.collector.flows.exists() and time.monotonic() < deadline:
            export = subprocess.run(
                ["tcpdump", "-nr", str(col.collector.pcap)], capture_output=True, text=True
            )
            if export.stdout.strip():
                break
            time.sleep(0.2)
        assert dut.proc is not None
        os.kill(dut.proc.pid, signal.SIGSEGV)  # `ip netns exec` has exec'd softflowd
        deadline = time.monotonic() + 5
        while dut.problem() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "ended during the step" in (dut.problem() or "")
        assert "SIGSEGV" in (dut.problem() or "") or "signal 11" in (dut.problem() or "")
    finally:
        dut_stats = dut.stop()
        stats = col.stop()
    assert "died" in dut_stats
    assert stats["collected"] == stats["exported"] > 0
    assert pq.read_table(tmp_path / "meter" / "records.parquet").num_rows == stats["collected"]
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("name", ["nfpcapd", "argus"])
def test_live_meter_with_its_own_records(pair, flows_pcap, tmp_path, name):
    """nfpcapd and argus have no export: no collector part; the meter part writes the records
    it read back from its own files."""
    meter = METERS[name]
    spec = meter.spec(at="peer:veth1")
    kind = {"nfpcapd": nfpcapd.KIND, "argus": argus.KIND}[name]
    assert kind.name == name and kind.options is meter.spec
    dut = kind.part(spec, NetnsEndpoint(pair.peer, "veth1"), tmp_path, tmp_path)
    dut.start(lambda: False)
    try:
        time.sleep(0.5)  # argus opens its interface after it starts
        _replay(pair, flows_pcap, 1)
        time.sleep(0.3)
        assert dut.problem() is None
    finally:
        stats = dut.stop()
    table = pq.read_table(tmp_path / "meter" / "records.parquet")
    assert stats["collected"] == table.num_rows
    keys = {(r["src"], r["dst"], r["sport"], r["dport"], r["proto"]) for r in table.to_pylist()}
    assert (A, B, 1000, 2000, 17) in keys and (B, A, 80, 40000, 6) in keys
    tcp = [r for r in table.to_pylist() if r["proto"] == 6]
    assert sum(r["packets"] for r in tcp) == sum(1 for _t, k, _f in _frames() if k[4] == 6)
    if name == "nfpcapd":
        assert stats["counters"]["packets_received"] == len(_frames())
        assert stats["counters"]["packets_dropped"] == 0
    assert _leftovers(tmp_path) == []


def test_frames_that_are_not_ip_give_no_record(root, tmp_path):
    """argus keys a non-IP frame by its ethertype (an Ethernet loopback frame, 0x9000, is its
    "protocol 36864"): no flow record of ours; the IP flow beside it is read whole."""
    pcap = tmp_path / "mixed.pcap"
    a, b = addr(A), addr(B)
    loop = bytes.fromhex("020000000001") * 2 + b"\x90\x00" + bytes(46)
    with open(pcap, "wb") as f:
        w = PcapWriter(f)
        for i in range(3):
            w.write(T0 + i * MS, ether(ip(a, b, 17, udp(a, b, 1000, 2000, b"ip")), True))
            w.write(T0 + i * MS + 1000, loop)
    for name in ("argus", "softflowd"):
        spec = METERS[name].spec(**({"version": 9} if name == "softflowd" else {}))
        run = run_on_pcap(METERS[name], spec, pcap, tmp_path / name)
        rows = run.records.to_pylist()
        assert [(r["src"], r["dst"], r["proto"], r["packets"]) for r in rows] == [(A, B, 17, 3)], (
            name,
            rows,
        )
    assert _leftovers(tmp_path) == []
