"""analyze(): report files, checks against the manifest and the engine, damaged captures."""

import csv
import json
import struct
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from analysis import CaptureError, analyze
from analysis.tables import read_table
from testbed.cli import main

pytestmark = pytest.mark.usefixtures("pcaplib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
E = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
# (template, packets, first second offset) of a small known run
FLOWS = [
    (
        E / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=5004, dport=5004) / Raw(b"v" * 200),
        40,
        0.0,
    ),
    (
        E
        / IP(src="198.18.0.2", dst="198.19.1.1")
        / TCP(sport=40000, dport=443, flags="PA")
        / Raw(b"w" * 600),
        25,
        0.5,
    ),
    (
        E
        / IPv6(src="2001:db8:1::1", dst="2001:db8:2::10")
        / TCP(sport=40001, dport=80, flags="A")
        / Raw(b"b" * 1000),
        30,
        1.0,
    ),
    (E / IP(src="198.18.0.3", dst="198.19.0.9") / ICMP(type=8, id=7), 10, 0.2),
]


def write_run(run: Path) -> dict:
    """A run folder as testbed writes it: capture, manifest, engine summary, flows and stats."""
    run.mkdir()
    pkts = []
    for tmpl, count, start in FLOWS:
        for k in range(count):
            p = tmpl.copy()
            p.time = Decimal(1_700_000_000) + Decimal(str(start)) + Decimal(k) / 10
            pkts.append(p)
    pkts.sort(key=lambda p: p.time)
    wrpcap(str(run / "capture.pcap"), pkts, nano=True)
    total = sum(len(p) for p in pkts)
    first, last = min(p.time for p in pkts), max(p.time for p in pkts)
    with open(run / "engine-flows.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "serial",
                "flow",
                "rep",
                "af",
                "proto",
                "src",
                "dst",
                "sport",
                "dport",
                "first_ns",
                "last_ns",
                "packets",
                "bytes",
            ]
        )
        for i, (tmpl, count, start) in enumerate(FLOWS):
            ip = tmpl.payload
            l4 = ip.payload
            sport = l4.id if isinstance(l4, ICMP) else l4.sport
            dport = 0 if isinstance(l4, ICMP) else l4.dport
            w.writerow(
                [
                    i,
                    i,
                    0,
                    4 if isinstance(ip, IP) else 6,
                    ip.proto if isinstance(ip, IP) else ip.nh,
                    ip.src,
                    ip.dst,
                    sport,
                    dport,
                    int(start * 1e9),
                    int((start + (count - 1) * 0.1) * 1e9),
                    count,
                    count * len(tmpl),
                ]
            )
    (run / "engine-summary.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "packets": len(pkts),
                "bytes": total,
                "flows_started": len(FLOWS),
                "flows_finished": len(FLOWS),
                "first_ns": 0,
                "last_ns": int((last - first) * 10**9),
            }
        )
    )
    manifest = {
        "manifest_version": 1,
        "run_id": "20261122T104512Z-unit",
        "status": "completed",
        "scenario": {"name": "unit"},
        "seed": 1,
        "expected": {
            "packets": len(pkts),
            "flows": len(FLOWS),
            "bytes": None,
            "first_ns": 0,
            "last_ns": int((last - first) * 10**9),
        },
        "generators": {
            "flowengine": {
                "packets_attempted": len(pkts),
                "packets_sent": len(pkts),
                "packets_failed": 0,
                "bytes_attempted": total,
                "bytes_sent": total,
                "bytes_failed": 0,
            }
        },
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_pcap_report_lands_next_to_the_capture(tmp_path):
    run = tmp_path / "r"
    write_run(run)
    pcap = tmp_path / "traffic.pcap"
    pcap.write_bytes((run / "capture.pcap").read_bytes())
    result = analyze(pcap)
    out = tmp_path / "traffic-analysis"
    assert result["report_dir"] == str(out)
    for name in (
        "metrics.json",
        "report.md",
        "report.html",
        "tables/run.parquet",
        "tables/steps.parquet",
        "tables/per_second.parquet",
        "tables/flows.parquet",
    ):
        assert (out / name).is_file(), name
    pngs = sorted((out / "plots").glob("*.png"))
    assert [p.name for p in pngs] == [
        "flows-started.png",
        "packet-sizes.png",
        "rate.png",
        "throughput.png",
    ]
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in pngs)
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["packets"] == result["packets"] == sum(c for _, c, _ in FLOWS)
    assert saved["checks"] == [] and saved["capture_problem"] is None
    flows = read_table(out, "flows")
    assert flows.num_rows == len(FLOWS) and set(flows.column("run_id").to_pylist()) == {out.name}
    md = (out / "report.md").read_text()
    assert "![Packet rate](plots/rate.png)" in md and "## Checks" not in md


def test_html_report_is_self_contained(tmp_path):
    run = tmp_path / "r"
    write_run(run)
    analyze(run)
    page = (run / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 4
    assert 'src="plots/' not in page and "<link" not in page
    assert "<style>" in page and "<table>" in page


def test_out_dir_is_honoured(tmp_path):
    run = tmp_path / "r"
    write_run(run)
    analyze(run, tmp_path / "elsewhere")
    assert (tmp_path / "elsewhere" / "report.html").is_file()
    assert not (run / "report.html").exists()


def test_run_folder_checks_agree(tmp_path):
    run = tmp_path / "r"
    write_run(run)
    m = analyze(run)
    names = [c["name"] for c in m["checks"]]
    assert names[:3] == ["packets", "bytes (frames on the wire)", "flows (distinct 5-tuples)"]
    assert "flows with the engine's packet count" in names
    assert all(c["ok"] for c in m["checks"]), m["checks"]
    assert all({"name", "expected", "measured", "ok"} <= c.keys() for c in m["checks"])
    packets = next(c for c in m["checks"] if c["name"] == "packets")
    assert packets["expected"] == packets["measured"] == packets["generator"] == 105
    assert m["run"]["run_id"] == "20261122T104512Z-unit"
    md = (run / "report.md").read_text()
    assert "## Checks" in md and "differs" not in md


def test_disagreements_are_reported(tmp_path):
    run = tmp_path / "r"
    manifest = write_run(run)
    manifest["expected"]["packets"] += 1
    (run / "manifest.json").write_text(json.dumps(manifest))
    rows = list(csv.reader(open(run / "engine-flows.csv")))
    rows[2][11] = str(int(rows[2][11]) + 3)  # the TCP flow: 3 packets more
    with open(run / "engine-flows.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    m = analyze(run)
    bad = {c["name"] for c in m["checks"] if not c["ok"]}
    assert bad == {
        "packets",
        "flows with the engine's packet count",
        "flows with the engine's byte count",
    }
    md = (run / "report.md").read_text()
    assert "**differs**" in md
    assert "1 flow(s) differ from the engine flow log" in md and "198.19.1.1" in md
    assert 'class="bad"' in (run / "report.html").read_text()


def test_damaged_capture_is_analysed_and_flagged_first(tmp_path):
    run = tmp_path / "r"
    write_run(run)
    data = (run / "capture.pcap").read_bytes()
    (run / "capture.pcap").write_bytes(data[: len(data) - 30])
    m = analyze(run)
    prob = m["capture_problem"]
    assert prob["packets_read"] == m["packets"] == 104
    assert "truncated" in prob["message"]
    saved = json.loads((run / "metrics.json").read_text())
    assert saved["capture_problem"] == prob
    md = (run / "report.md").read_text().splitlines()
    assert (
        md[2].startswith("> **⚠ Damaged capture: at byte offset") and f"{prob['offset']:,}" in md[2]
    )
    assert not next(c for c in m["checks"] if c["name"] == "packets")["ok"]
    assert 'class="warn"' in (run / "report.html").read_text()


def test_unreadable_side_file_is_a_warning(tmp_path):
    run = tmp_path / "r"
    write_run(run)
    (run / "manifest.json").write_text("{not json")
    m = analyze(run)
    assert any("manifest.json" in w for w in m["warnings"])
    assert m["run"] is None
    packets = next(c for c in m["checks"] if c["name"] == "packets")
    assert packets["expected"] is None and packets["generator"] == 105  # engine-summary.json


def test_folder_without_capture_is_a_capture_error(tmp_path):
    with pytest.raises(CaptureError, match="capture.pcap"):
        analyze(tmp_path)


def test_missing_path_is_a_capture_error(tmp_path):
    with pytest.raises(CaptureError, match="No such file"):
        analyze(tmp_path / "missing.pcap")


SESSION = """ntg-session 1
seed 7
flow af=4 proto=17 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 src=198.18.0.1/32 src_mode=fixed dst=198.19.0.0/24 dst_mode=increment sport=1024-65535 sport_mode=random dport=53-53 dport_mode=fixed start=0 period=1000000 packets=100 size=20-200 payload=- reps=40 rep_period=100000000
flow af=6 proto=6 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 src=2001:db8:1::/64 src_mode=random dst=2001:db8:2::10/128 dst_mode=fixed sport=1024-65535 sport_mode=random dport=443-443 dport_mode=fixed start=500000000 period=250000 packets=200 size=100-1400 payload=- reps=12 rep_period=250000000
flow af=4 proto=1 smac=02:00:00:00:00:01 dmac=02:00:00:00:00:02 src=198.18.0.5/32 src_mode=fixed dst=198.19.0.9/32 dst_mode=fixed sport=0-0 sport_mode=fixed dport=0-0 dport_mode=fixed start=0 period=10000000 packets=400 size=56-56 payload=- reps=1 rep_period=0
"""


def test_flowengine_run_folder_checks_agree(tmp_path, flowengine_bin):
    """The real engine's capture, summary, flow log and stats against our measurements."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "session.ntg").write_text(SESSION)
    subprocess.run(
        [
            str(flowengine_bin),
            "gen",
            str(run / "session.ntg"),
            "-o",
            str(run / "capture.pcap"),
            "--summary",
            str(run / "engine-summary.json"),
            "--flows",
            str(run / "engine-flows.csv"),
            "--stats",
            str(run / "engine-stats.csv"),
        ],
        check=True,
        capture_output=True,
    )
    last = max(
        0 + 39 * 100_000_000 + 99 * 1_000_000,
        500_000_000 + 11 * 250_000_000 + 199 * 250_000,
        399 * 10_000_000,
    )
    (run / "manifest.json").write_text(
        json.dumps(
            {
                "run_id": "engine",
                "status": "completed",
                "expected": {
                    "packets": 40 * 100 + 12 * 200 + 400,
                    "flows": 53,
                    "bytes": None,
                    "first_ns": 0,
                    "last_ns": last,
                },
            }
        )
    )
    m = analyze(run)
    assert m["capture_problem"] is None
    assert all(c["ok"] for c in m["checks"]), [c for c in m["checks"] if not c["ok"]]
    names = {c["name"] for c in m["checks"]}
    assert {
        "packets",
        "bytes (frames on the wire)",
        "flows (distinct 5-tuples)",
        "duration first→last packet (ns)",
        "flows with the engine's packet count",
        "flows with the engine's byte count",
    } <= names


def test_a_link_type_the_analysis_cannot_decode_is_said_and_exits_3(tmp_path, capsys):
    """An 802.11 capture (link type 105): its packets count, no flow can be read from them; the
    command says so and exits 3 instead of reporting 0 flows in silence."""
    pcap = tmp_path / "wifi.pcap"
    frames = [b"\x80\x00" + bytes(30) for _ in range(5)]
    with open(pcap, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 105))
        for i, frame in enumerate(frames):
            f.write(struct.pack("<IIII", 1_700_000_000 + i, 0, len(frame), len(frame)) + frame)
    code = main(["analyze", str(pcap), "--out", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "link type 105 is not one the analysis decodes" in err and "5 packets" in err
    doc = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert doc["packets"] == 5
    assert doc["undecoded_link_types"] == [{"path": str(pcap), "link_type": 105, "packets": 5}]
    assert any("link type 105" in w for w in doc["warnings"])
    ether = tmp_path / "ether.pcap"
    wrpcap(
        str(ether), [Ether() / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(dport=9) / Raw(b"x")]
    )
    assert main(["analyze", str(ether), "--out", str(tmp_path / "ok"), "-q"]) == 0
    assert json.loads((tmp_path / "ok" / "metrics.json").read_text())["undecoded_link_types"] == []
