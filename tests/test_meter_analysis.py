"""A flow meter's live step, analysed (analysis/flowmeter/steps.py, analysis/live.py, the
loss-sweep method's tables and figures): step folders built here by hand, with a capture written
by ntgcore/packets.py's PcapWriter and the meter's records made from the reference records with
known changes, so that every number of the score and of the loss by stage is known."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.flowmeter import COLLECTED_SCHEMA, MeterRules, conform, reference_records
from analysis.flowmeter.score import FLOW_SCHEMA
from analysis.flowmeter.steps import meter_step
from analysis.live import analyze_live
from ntgcore.packets import ACK, FIN, SYN, PcapWriter, addr, ether, ipv4, tcp, udp
from testbed.methods.loss_sweep import analysis as sweep

pytestmark = pytest.mark.usefixtures("pcaplib")

S = 1_000_000_000
MS = 1_000_000
T0 = 1_700_000_000 * S
A, B, C = addr("198.18.0.1"), addr("198.18.0.2"), addr("198.18.0.3")
RULES = MeterRules(idle_timeout_ns=10 * S, active_timeout_ns=30 * S, tcp_end=True)
DELAY = 5 * MS  # every collected record arrives this long after its reference record expired


def u4(sport: int, dport: int, src: bytes = A, dst: bytes = B) -> bytes:
    """Ethernet/IPv4/UDP, 10 bytes of payload: 38 L3 bytes."""
    return ether(ipv4(src, dst, 17, udp(src, dst, sport, dport, b"x" * 10)), True)


def t4(flags: int) -> bytes:
    """Ethernet/IPv4/TCP without payload: 40 L3 bytes."""
    return ether(ipv4(A, B, 6, tcp(A, B, 40000, 80, 1, 1, flags)), True)


def wire() -> list[tuple[int, bytes]]:
    """Five flows, 16 packets: 1000->53 (4), 1001->53 (3), 1002->53 to C (4), TCP 40000->80
    ending in FIN (3), 53->1000 from C (2)."""
    pk = [(i * S, u4(1000, 53)) for i in range(4)]
    pk += [(i * S + S // 2, u4(1001, 53)) for i in range(3)]
    pk += [(i * S + 1, u4(1002, 53, A, C)) for i in range(4)]
    pk += [(2, t4(SYN)), (S + 2, t4(ACK)), (2 * S + 2, t4(FIN | ACK))]
    pk += [(3, u4(53, 1000, C, A)), (S + 3, u4(53, 1000, C, A))]
    return sorted(pk, key=lambda p: p[0])


def write_capture(path: Path) -> Path:
    with path.open("wb") as f:
        w = PcapWriter(f, nanosecond=True)
        for ts, frame in wire():
            w.write(T0 + ts, frame)
    return path


def meter_records(ref: pa.Table, lose: bool = True) -> pa.Table:
    """What the meter exported, from the reference: 1001->53 dropped (with LOSE), 1002->53
    split in two (2 + 2 packets), the TCP flow with L2 bytes (+14 a packet), the others as
    they are."""
    rows = []
    for r in ref.to_pylist():
        r["received_ns"] = r["expire_ns"] + DELAY
        if r["sport"] == 1001 and lose:
            continue
        if r["sport"] == 1002:
            half = dict(r, packets=2, bytes=76, last_ns=r["first_ns"] + S)
            rows += [half, dict(r, packets=2, bytes=76, first_ns=r["first_ns"] + 2 * S)]
            continue
        if r["proto"] == 6:
            r["bytes"] += 14 * r["packets"]
        rows.append(r)
    return conform(pa.Table.from_pylist(rows), COLLECTED_SCHEMA)


def make_step(
    step: Path,
    dropped: int | None = 2,
    exported: int | None = 6,
    own_records: bool = False,
    lose: bool = True,
    kind: str = "softflowd",
) -> dict:
    """A meter step's folder (capture.pcap, meter/records.parquet, meter/counters.json) and its
    manifest entry's `dut`. DROPPED: the meter's own pcap drop counter (None: it has none);
    EXPORTED: records in the export capture (None: no export capture)."""
    (step / "meter").mkdir(parents=True)
    pcap = write_capture(step / "capture.pcap")
    records = meter_records(reference_records(pcap, RULES), lose)
    pq.write_table(records, step / "meter" / "records.parquet")
    own = {"packets_received": 16} | ({"packets_dropped": dropped} if dropped is not None else {})
    counters: dict = {"meter": kind, "status": "exit 0", "own": own}
    counters["collected"] = records.num_rows
    if not own_records:
        collector: dict = {"port": 2055, "status": "exit 0"}
        if exported is not None:
            collector["export"] = {"packets": 2, "records": exported}
            collector["export_complete"] = True
        counters["collector"] = collector
    (step / "meter" / "counters.json").write_text(json.dumps(counters))
    return {
        "kind": kind,
        "status": "exit 0",
        "counters": own,
        "log": f"meter/{kind}.log",
        "rules": dataclasses.asdict(RULES),
        "meter": True,
    }


def test_meter_step_scores_the_records_and_separates_the_loss_by_stage(tmp_path):
    step = tmp_path / "step"
    dut = make_step(step)
    m = meter_step(step, dut, step / "capture.pcap", {"dropped_by_kernel": 0})
    assert m["missing"] == [] and m["kind"] == "softflowd"
    assert m["rules"] == dataclasses.asdict(RULES)
    assert m["reference"] == {
        "capture": "capture.pcap",
        "packets": 16,
        "ip_packets": 16,
        "records": 5,
        "problem": None,
    }
    t = m["totals"]
    assert (t["reference_records"], t["collected_records"]) == (5, 5)
    assert [t[s] for s in ("exact", "differs", "missing", "split", "merged", "spurious")] == [
        2,  # 1000->53, 53->1000
        1,  # the TCP flow: its bytes are L2
        1,  # 1001->53
        1,  # 1002->53
        0,
        0,
    ]
    assert (t["packets_reference"], t["packets_collected"], t["packets_missing"]) == (16, 13, 3)
    assert (t["bytes_reference"], t["bytes_collected"]) == (614, 614 - 114 + 42)
    assert t["bytes_layer"] == {"L3": 3, "L2": 1, "other": 0}
    assert (t["packet_error_flows"], t["packet_error_sum"]) == (0, 0)
    assert (t["byte_error_flows"], t["byte_error_sum"]) == (1, 42)
    assert t["first_error_ns"]["max"] == t["last_error_ns"]["max"] == 0
    assert t["export_delay_ns"]["p50"] == t["export_delay_ns"]["max"] == DELAY
    flows = pq.read_table(step / "meter" / "score.parquet")
    assert flows.schema.equals(FLOW_SCHEMA) and flows.num_rows == 5
    assert m["files"] == {"score": "meter/score.parquet"}
    by_port = {r["sport"]: r["status"] for r in flows.to_pylist()}
    assert by_port == {1000: "exact", 1001: "missing", 1002: "split", 40000: "differs", 53: "exact"}
    st = m["stages"]
    assert st["wire"] == {"packets": 16, "flows": 5, "packets_fraction": 1.0, "flows_fraction": 1.0}
    # 2 packets dropped by the pcap buffer; which flows lost them the counter cannot say
    assert (st["capture"]["packets"], st["capture"]["flows"]) == (2, None)
    assert "counts packets" in st["capture"]["why"]
    # 6 records exported, 5 collected: one flow lost in export, its packets not known
    assert (st["export"]["packets"], st["export"]["flows"]) == (None, 1)
    assert "1 exported record(s) not collected" in st["export"]["why"]
    # 16 on the wire - 13 collected - 2 dropped at capture = 1 in processing (and export)
    assert (st["processing"]["packets"], st["processing"]["flows"]) == (1, 0)
    assert st["processing"]["why"] == (
        "its packets include those lost at export (unknown there); "
        "its flows include those lost at capture (unknown there)"
    )
    assert st["collected"]["packets"] == 13 and st["collected"]["flows"] == 4
    assert st["total"] == {
        "packets": 3,
        "flows": 1,
        "packets_fraction": 3 / 16,
        "flows_fraction": 1 / 5,
        "by_stage": False,
    }
    assert st["capture"]["packets_fraction"] == 2 / 16 and st["export"]["flows_fraction"] == 1 / 5


def test_nothing_dropped_or_lost_in_export_gives_every_stage(tmp_path):
    step = tmp_path / "step"
    m = meter_step(step, make_step(step, dropped=0, exported=5), step / "capture.pcap")
    st = m["stages"]
    assert [(st[s]["packets"], st[s]["flows"]) for s in ("capture", "processing", "export")] == [
        (0, 0),
        (3, 1),  # the dropped record: lost inside the meter
        (0, 0),
    ]
    assert st["total"]["by_stage"] and st["processing"]["why"] is None
    assert m["counters"] == {
        "own": {"packets_received": 16, "packets_dropped": 0},
        "exported": 5,
        "collected": 5,
        "export_complete": True,
    }


def test_a_drop_counter_above_what_is_missing_counts_only_the_missing(tmp_path):
    """nfpcapd's libpcap statistics count some packets twice: a counter saying more were dropped
    than the records lack is capped at what they lack, and says so."""
    step = tmp_path / "step"
    m = meter_step(step, make_step(step, dropped=40, exported=5), step / "capture.pcap")
    cap, proc = m["stages"]["capture"], m["stages"]["processing"]
    assert (cap["said"], cap["packets"], proc["packets"]) == (40, 3, 0)
    assert "says 40 dropped, more than the 3 packets missing" in cap["why"]
    collected = m["stages"]["collected"]["packets"]
    assert collected + cap["packets"] + proc["packets"] == m["stages"]["wire"]["packets"]


def test_an_unread_capture_buffer_counts_as_dropped_at_capture(tmp_path):
    """softflowd's packets left in libpcap's buffer at its stop (received, never processed)."""
    step = tmp_path / "step"
    dut = make_step(step, dropped=0, exported=5)
    counters = json.loads((step / "meter" / "counters.json").read_text())
    counters["own"]["packets_unprocessed"] = 3
    (step / "meter" / "counters.json").write_text(json.dumps(counters))
    m = meter_step(step, dut, step / "capture.pcap")
    assert (m["stages"]["capture"]["packets"], m["stages"]["processing"]["packets"]) == (3, 0)


def test_a_meter_without_a_drop_counter_or_an_export_capture_says_so(tmp_path):
    step = tmp_path / "step"
    m = meter_step(step, make_step(step, dropped=None, exported=None), step / "capture.pcap")
    st = m["stages"]
    assert st["capture"]["packets"] is None and st["capture"]["flows"] is None
    assert st["capture"]["why"] == "softflowd reports no capture drop counter"
    assert st["export"]["why"].startswith("no export count")
    assert (st["processing"]["packets"], st["processing"]["flows"]) == (3, 1)
    assert m["missing"] == []  # nothing missing: the meter has no such counters


def test_a_meter_that_writes_its_own_records_loses_nothing_in_export(tmp_path):
    step = tmp_path / "step"
    m = meter_step(step, make_step(step, dropped=0, own_records=True), step / "capture.pcap")
    assert m["stages"]["export"] == {
        "packets": 0,
        "flows": 0,
        "why": "the meter writes its own records: no export",
        "packets_fraction": 0.0,
        "flows_fraction": 0.0,
    }


def test_a_missing_records_file_is_named_and_the_rest_analysed(tmp_path):
    step = tmp_path / "step"
    dut = make_step(step)
    (step / "meter" / "records.parquet").unlink()
    m = meter_step(step, dut, step / "capture.pcap")
    assert m["missing"] == [
        "meter/records.parquet: not there (the collector did not write the meter's records: "
        "no score)"
    ]
    assert m["totals"] is None and m["files"] == {}
    assert not (step / "meter" / "score.parquet").exists()
    st = m["stages"]
    assert (st["wire"]["packets"], st["wire"]["flows"]) == (16, 5)
    assert st["collected"]["packets"] is None and st["processing"]["packets"] is None
    assert m["counters"]["collected"] == 5  # what counters.json says


def test_damaged_files_and_an_unrecorded_step_are_analysed_from_what_is_there(tmp_path):
    step = tmp_path / "step"
    make_step(step)
    (step / "meter" / "records.parquet").write_bytes(b"not parquet")
    (step / "meter" / "counters.json").write_text("{")
    m = meter_step(step, {}, step / "capture.pcap")  # a killed run's step: no manifest entry
    assert len(m["missing"]) == 3
    assert m["missing"][0].startswith("meter/counters.json: unreadable")
    assert m["missing"][1].startswith("the meter's rules: the manifest entry has none")
    assert m["missing"][2].startswith("meter/records.parquet: unreadable")
    assert m["reference"]["packets"] == 16 and m["reference"]["records"] is None
    st = m["stages"]
    assert (st["wire"]["packets"], st["wire"]["flows"]) == (16, None)
    assert st["capture"]["why"] == (
        "the meter reports no capture drop counter (no readable meter/counters.json)"
    )
    m = meter_step(tmp_path / "nothing", None, None)
    assert m["missing"][:2] == [
        "meter/counters.json: not there (no meter or export counters)",
        "the meter's rules: the manifest entry has none (a step the run did not record): "
        "no reference records, only the packet counts",
    ]
    assert "capture.pcap: not there" in m["missing"][2] and m["stages"]["wire"]["packets"] is None


def test_a_damaged_capture_gives_the_reference_before_the_damage(tmp_path):
    step = tmp_path / "step"
    dut = make_step(step, dropped=0, exported=5)
    pcap = step / "capture.pcap"
    pcap.write_bytes(pcap.read_bytes()[:-20])  # the last packet cut short
    m = meter_step(step, dut, pcap)
    assert m["reference"]["packets"] == 15 and m["reference"]["problem"] is not None
    assert m["missing"][0].startswith("the capture is damaged at byte ")
    # the last packet (1002->53 at 3 s) is not in the reference: the meter's two records of
    # that flow now hold one packet more than it
    t = m["totals"]
    assert (t["split"], t["packet_error_flows"], t["packet_error_sum"]) == (1, 1, 1)
    assert m["stages"]["wire"]["packets"] == 15 and m["stages"]["processing"]["packets"] == 2
    pcap.write_bytes(b"nothing like a capture")
    m = meter_step(step, dut, pcap)
    assert m["missing"][0].startswith("the capture: ") and m["totals"] is None


# ---- a loss sweep over two meters ------------------------------------------------------------

# (DUT label, kind, its loss in each step: the meter drops the flow 1001->53 or not)
DUTS = (("soft", "softflowd", True), ("pm", "pmacct", False))
SWEEP = (("rate-1000pps", "rate", {"packet_rate": 1000.0}), ("hosts-2", "hosts", {"hosts": 2}))


def sweep_run(run: Path) -> dict:
    """A loss-sweep run folder of two meter DUTs (testbed.duts) with two steps each."""
    entries = []
    for label, kind, lose in DUTS:
        for step, step_kind, params in SWEEP:
            name = f"{label}-{step}"
            dut = make_step(run / name, dropped=0, exported=5, lose=lose, kind=kind)
            params = {**params, "step_s": 1.0}
            if step_kind == "hosts":
                params["flows_per_second"] = 100.0
            entries.append(
                {
                    "name": name,
                    "kind": step_kind,
                    "params": params,
                    "dir": name,
                    "status": "completed",
                    "generators": {},
                    "dut": dut,
                    "capture": {"captured": 16, "dropped_by_kernel": 0},
                    "loss": {"sent": 16, "wire": 16, "dut": None, "loss_rate": 0.0},
                }
            )
    manifest = {
        "run_id": "20261128T000000Z-meters",
        "status": "completed",
        "mode": "live",
        "method": "loss-sweep",
        "scenario": {"name": "meters"},
        "steps": entries,
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_a_sweep_over_two_meters_has_a_line_and_stages_per_dut(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    sweep_run(run)
    m = analyze_live(run, method=sweep)
    rows = m["loss_sweep"]
    assert [(r["step"], r["dut_label"], r["dut_kind"]) for r in rows] == [
        ("soft-rate-1000pps", "soft", "softflowd"),
        ("soft-hosts-2", "soft", "softflowd"),
        ("pm-rate-1000pps", "pm", "pmacct"),
        ("pm-hosts-2", "pm", "pmacct"),
    ]
    soft, pm = rows[0], rows[2]
    assert (soft["meter_loss"], soft["meter_flow_loss"], soft["processing_loss"]) == (
        3 / 16,
        1 / 5,
        3 / 16,
    )
    assert (soft["capture_loss"], soft["export_loss"]) == (0.0, 0.0)
    assert (pm["meter_loss"], pm["meter_flow_loss"], pm["processing_loss"]) == (0.0, 0.0, 0.0)
    assert sweep.loss_series([r for r in rows if r["kind"] == "rate"], "packet_rate") == {
        "soft": [(1000.0, 100 * 3 / 16)],
        "pm": [(1000.0, 0.0)],
    }
    assert sweep.loss_series([r for r in rows if r["kind"] == "hosts"], "hosts") == {
        "soft": [(2, 100 * 3 / 16)],
        "pm": [(2, 0.0)],
    }
    for png in ("loss-vs-rate.png", "loss-vs-hosts.png", "meter-loss-stages.png"):
        assert (run / png).read_bytes().startswith(b"\x89PNG"), png
    # soft collected 5 of 5 exported records, pm 6 of 5: more than the meter sent
    collected = {c["name"]: c["ok"] for c in m["checks"] if "collected ≤" in c["name"]}
    assert collected == {
        "soft-rate-1000pps: records collected ≤ records exported": True,
        "soft-hosts-2: records collected ≤ records exported": True,
        "pm-rate-1000pps: records collected ≤ records exported": False,
        "pm-hosts-2: records collected ≤ records exported": False,
    }
    assert (run / "pm-hosts-2" / "meter" / "score.parquet").is_file()
    md = (run / "report.md").read_text()
    assert "## Flow meter" in md and "| DUT | kind | step |" in md
    assert "| soft-rate-1000pps | softflowd | 5 | 5 | 2 | 1 | 1 | 1 | 0 | 0 |" in md
    assert "| pm-rate-1000pps | pmacct | 5 | 6 | 3 | 1 | 0 | 1 | 0 | 0 |" in md
    saved = json.loads((run / "metrics.json").read_text())
    assert saved["steps"][0]["meter"]["stages"]["processing"]["packets"] == 3


def test_one_dut_keeps_the_sweep_table_as_it_was():
    steps = [
        {
            "name": "rate-1000pps",
            "kind": "rate",
            "params": {"packet_rate": 1000.0},
            "loss": {"sent": 10, "wire": 10, "dut": 9, "dut_dropped": 1, "loss_rate": 0.1},
            "resources": {"dut": {"cpu_mean": 5.0, "rss_max": 1e6}},
            "dut": {"kind": "tcpdump"},
        }
    ]
    (row,) = sweep.sweep_table(steps)
    assert (row["dut"], row["dut_label"], row["dut_kind"]) == (9, None, "tcpdump")
    assert "meter_loss" not in row
    doc = {"loss_sweep": [row]}
    (_, (_, heads, _)) = sweep.report(doc)
    assert heads[:6] == ["step", "pps offered", "hosts", "sent", "wire", "DUT"]
    assert sweep.loss_series([row], "packet_rate") == {None: [(1000.0, 10.0)]}


def test_a_killed_runs_meter_step_is_analysed_from_its_folder(tmp_path):
    run = tmp_path / "run"
    make_step(run / "soft-rate-1000pps")  # the run died during the step: no manifest entry
    manifest = {
        "run_id": "20261128T000000Z-killed",
        "status": "abandoned",
        "mode": "live",
        "method": "loss-sweep",
        "scenario": {"name": "killed"},
        "steps": [],
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    m = analyze_live(run, method=sweep)
    (step,) = m["steps"]
    assert step["status"] == "unrecorded" and step["meter"]["kind"] == "softflowd"
    assert step["meter"]["missing"][0].startswith("the meter's rules: the manifest entry has none")
    assert step["meter"]["stages"]["wire"]["packets"] == 16
    assert step["meter"]["stages"]["collected"]["packets"] == 13
    (row,) = m["loss_sweep"]
    assert (row["dut_label"], row["meter_loss"]) == ("soft", 3 / 16)
    assert "the manifest entry has none" in (run / "report.md").read_text()
