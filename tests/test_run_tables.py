"""The run tables (analysis/tables.py, analysis/runtables.py, docs/run-tables.md): what an
analysed run folder holds as Parquet, their schema version, and the DuckDB queries of the docs."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis import analyze
from analysis.live import analyze_live
from analysis.tables import (
    META_TABLE,
    META_VERSION,
    SCHEMA_VERSION,
    SCHEMAS,
    SchemaError,
    read_table,
    table_path,
    write_table,
)
from tests.test_analysis_report import FLOWS, write_run

pytestmark = pytest.mark.usefixtures("pcaplib")

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "run-tables.md"
RUN_TABLES = ("run", "steps", "per_second", "flows", "timing", "resources", "alerts")

EVE = [
    {
        "timestamp": "2023-11-14T22:13:20.500000+0000",
        "event_type": "alert",
        "src_ip": "198.18.0.1",
        "src_port": 5004,
        "dest_ip": "198.19.0.1",
        "dest_port": 5004,
        "proto": "UDP",
        "alert": {
            "action": "allowed",
            "gid": 1,
            "signature_id": 9000001,
            "rev": 2,
            "signature": "probe",
            "category": "test",
            "severity": 3,
        },
    },
    {
        "timestamp": "2023-11-14T22:13:21.000000+0000",
        "event_type": "alert",
        "src_ip": "2001:0db8:0001:0000:0000:0000:0000:0001",
        "src_port": 40001,
        "dest_ip": "2001:0db8:0002:0000:0000:0000:0000:0010",
        "dest_port": 80,
        "proto": "TCP",
        "alert": {
            "action": "allowed",
            "gid": 1,
            "signature_id": 9000002,
            "rev": 1,
            "signature": "v6",
            "category": "",
            "severity": 2,
        },
    },
    {"timestamp": "2023-11-14T22:13:22.000000+0000", "event_type": "stats", "stats": {}},
]


def rows(run: Path, name: str) -> list[dict]:
    return read_table(run, name).to_pylist()


def test_an_offline_run_has_every_table_with_run_id_and_step(tmp_path):
    run = tmp_path / "r"
    manifest = write_run(run)
    manifest.update(
        schema_version=SCHEMA_VERSION,
        created_utc="2026-11-22T10:45:12.123456Z",
        git={"revision": "abc", "dirty": False},
        host={"hostname": "h", "cpus": 2},
    )
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "suricata").mkdir()
    (run / "suricata" / "eve.json").write_text(
        "".join(json.dumps(e) + "\n" for e in EVE) + "not json\n"
    )
    m = analyze(run)
    written = {p.stem for p in (run / "tables").glob("*.parquet")}
    assert written == {"run", "steps", "per_second", "flows", "alerts"}  # no session.ntg: no timing
    assert {f"tables/{t}.parquet" for t in written} <= set(m["files"])
    assert not (run / "flows.csv").exists() and not (run / "timing.csv").exists()
    for name in written:
        table = read_table(run, name)
        assert table.schema.names == SCHEMAS[name].names
        assert set(table.column("run_id").to_pylist()) == {"20261122T104512Z-unit"}
        if name != "run":
            assert set(table.column("step").to_pylist()) == {"run"}
    (r,) = rows(run, "run")
    assert (
        r["scenario"],
        r["status"],
        r["seed"],
        r["mode"],
        r["schema_version"],
        r["git_revision"],
        r["cpus"],
    ) == ("unit", "completed", 1, "offline", SCHEMA_VERSION, "abc", 2)
    assert r["created_utc"].isoformat() == "2026-11-22T10:45:12.123456+00:00"
    (s,) = rows(run, "steps")
    assert (s["kind"], s["generator"], s["packets"], s["bytes"], s["flows"], s["sent"]) == (
        "offline",
        "flowengine",
        m["packets"],
        m["bytes"],
        len(FLOWS),
        m["packets"],
    )
    assert s["mean_pps"] == m["mean_pps"] and s["warmup_s"] == m["warmup"]["seconds"]
    assert s["loss_rate"] is None and s["cpu_mean"] is None
    ps = read_table(run, "per_second")
    assert ps.column("second").to_pylist() == m["per_second"]["second"]
    assert sum(ps.column("packets").to_pylist()) == m["packets"]
    flows = read_table(run, "flows").to_pandas()
    assert len(flows) == m["flows"]["count"] and flows["packets"].sum() == m["ip_packets"]
    assert "2001:db8:1::1" in set(flows["src"])
    alerts = rows(run, "alerts")
    assert [(a["sid"], a["src"], a["dst"], a["source"]) for a in alerts] == [
        (9000001, "198.18.0.1", "198.19.0.1", "suricata/eve.json"),
        (9000002, "2001:db8:1::1", "2001:db8:2::10", "suricata/eve.json"),
    ]
    assert alerts[0]["ts_ns"] == 1_700_000_000_500_000_000


def test_analysing_again_rewrites_the_tables_and_drops_the_ones_that_no_longer_apply(tmp_path):
    run = tmp_path / "r"
    write_run(run)
    (run / "flows.csv").write_text("left by an analysis before the run tables\n")
    (run / "suricata").mkdir()
    (run / "suricata" / "eve.json").write_text(json.dumps(EVE[0]) + "\n")
    analyze(run)
    first = rows(run, "run")[0]["analysed_utc"]
    assert table_path(run, "alerts").is_file() and not (run / "flows.csv").exists()
    write_table(run, "coverage", [])  # another command's table in the same folder: kept
    shutil.rmtree(run / "suricata")
    analyze(run)
    assert rows(run, "run")[0]["analysed_utc"] > first
    assert not table_path(run, "alerts").exists() and table_path(run, "coverage").is_file()
    assert sorted(p.name for p in (run / "tables").iterdir()) == [
        "coverage.parquet",
        "flows.parquet",
        "per_second.parquet",
        "run.parquet",
        "steps.parquet",
    ]


def test_a_capture_analysed_on_its_own_is_a_run_named_after_its_report_folder(tmp_path):
    write_run(tmp_path / "r")
    pcap = tmp_path / "traffic.pcap"
    shutil.copy(tmp_path / "r" / "capture.pcap", pcap)
    analyze(pcap)
    out = tmp_path / "traffic-analysis"
    (r,) = rows(out, "run")
    assert (r["run_id"], r["mode"], r["scenario"]) == ("traffic-analysis", "capture", None)
    assert rows(out, "steps")[0]["kind"] == "capture"


def test_a_live_run_has_a_row_per_step_with_loss_resources_and_dut_alerts(tmp_path):
    run = tmp_path / "live"
    write_run(run)  # its capture stands for step `fast`'s; step `slow` captured nothing
    fast, slow = run / "steps" / "fast", run / "steps" / "slow"
    fast.mkdir(parents=True)
    slow.mkdir(parents=True)
    (run / "capture.pcap").rename(fast / "capture.pcap")
    (fast / "samples.csv").write_text(
        "t,kind,label,pid,tid,name,cpu_percent,rss_bytes,mem_percent,num_threads\n"
        "0.0,process,gen:a:flowengine,10,,flowengine,,1000,0.1,1\n"
        "0.5,process,gen:a:flowengine,10,,flowengine,50.0,3000,0.1,1\n"
        "0.5,process,gen:b:tcpreplay,11,,tcpreplay,30.0,1000,0.1,1\n"
        "0.5,thread,dut,12,13,W#01,20.0,,,\n"
        "0.5,process,dut,12,,suricata,25.0,9000,1.0,4\n"
    )
    (fast / "dut").mkdir()
    (fast / "dut" / "eve.json").write_text("".join(json.dumps(e) + "\n" for e in EVE))
    gens = {"a": {"name": "flowengine"}, "b": {"name": "tcpreplay"}}
    manifest = {
        "run_id": "20261123T000000Z-live",
        "status": "completed",
        "mode": "live",
        "method": "loss-sweep",
        "scenario": {"name": "live"},
        "steps": [
            {
                "name": "fast",
                "kind": "rate",
                "params": {"packet_rate": 1000},
                "dir": "steps/fast",
                "status": "completed",
                "generators": gens,
                "dut": {"kind": "suricata", "alerts": 2},
                "loss": {"sent": 100, "wire": 100, "dut": 90, "dut_dropped": 10, "loss_rate": 0.1},
            },
            {
                "name": "slow",
                "kind": "rate",
                "params": {"packet_rate": 10},
                "dir": "steps/slow",
                "status": "failed",
                "error": "boom",
                "generators": {},
            },
        ],
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    analyze_live(run)
    assert {p.stem for p in (run / "tables").glob("*.parquet")} == {
        "run",
        "steps",
        "per_second",
        "flows",
        "resources",
        "alerts",
    }
    (r,) = rows(run, "run")
    assert (r["mode"], r["method"]) == ("live", "loss-sweep")
    fast_row, slow_row = rows(run, "steps")
    assert (fast_row["step"], fast_row["generator"], fast_row["packets"], fast_row["flows"]) == (
        "fast",
        "flowengine,tcpreplay",
        sum(c for _, c, _ in FLOWS),
        len(FLOWS),
    )
    assert (
        fast_row["sent"],
        fast_row["wire"],
        fast_row["dut"],
        fast_row["loss_rate"],
        fast_row["dut_dropped"],
        fast_row["alerts"],
    ) == (100, 100, 90, 0.1, 10, 2)
    assert json.loads(fast_row["params"]) == {"packet_rate": 1000}
    assert (fast_row["cpu_max"], fast_row["rss_max"]) == (80.0, 4000.0)  # both generators at t=0.5
    assert (fast_row["dut_cpu_mean"], fast_row["dut_rss_max"]) == (25.0, 9000.0)
    assert (slow_row["status"], slow_row["error"], slow_row["packets"]) == ("failed", "boom", None)
    assert {x["step"] for x in rows(run, "flows")} == {"fast"}
    assert len(rows(run, "resources")) == 5 and {x["step"] for x in rows(run, "resources")} == {
        "fast"
    }
    assert [(a["step"], a["sid"], a["source"]) for a in rows(run, "alerts")] == [
        ("fast", 9000001, "steps/fast/dut/eve.json"),
        ("fast", 9000002, "steps/fast/dut/eve.json"),
    ]
    assert sum(x["packets"] for x in rows(run, "per_second")) == fast_row["packets"]


# ---- refusals ------------------------------------------------------------------------------


def _write_raw(run: Path, name: str, meta: dict[bytes, bytes] | None) -> Path:
    path = table_path(run, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    t = pa.table({"run_id": ["x"], "step": ["run"]})
    pq.write_table(t.replace_schema_metadata(meta), path)
    return path


@pytest.mark.parametrize(
    "version, words",
    [
        ("0.9", "run `testbed analyze"),
        ("2.0", "use a newer testbed"),
        ("11.3", "use a newer testbed"),
    ],
)
def test_a_table_of_another_major_is_refused_saying_what_to_do(tmp_path, version, words):
    path = _write_raw(tmp_path, "steps", {META_VERSION: version.encode(), META_TABLE: b"steps"})
    with pytest.raises(SchemaError) as e:
        read_table(tmp_path, "steps")
    assert (
        str(path) in str(e.value) and f"schema {version}" in str(e.value) and words in str(e.value)
    )


def test_a_newer_minor_of_the_same_major_is_read(tmp_path):
    major = SCHEMA_VERSION.split(".")[0]
    _write_raw(tmp_path, "steps", {META_VERSION: f"{major}.99".encode(), META_TABLE: b"steps"})
    assert read_table(tmp_path, "steps").num_rows == 1


def test_a_table_without_a_version_is_refused(tmp_path):
    path = _write_raw(tmp_path, "steps", None)
    with pytest.raises(SchemaError, match="no schema version") as e:
        read_table(tmp_path, "steps")
    assert str(path) in str(e.value)


def test_a_corrupt_or_truncated_parquet_file_is_refused(tmp_path):
    path = write_table(tmp_path, "steps", [{"run_id": "x", "step": "run", "packets": 1}])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SchemaError, match="not a readable Parquet file") as e:
        read_table(tmp_path, "steps")
    assert str(path) in str(e.value)
    path.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
    with pytest.raises(SchemaError, match=re.escape(str(path))):
        read_table(tmp_path, "steps")
    path.unlink()
    with pytest.raises(SchemaError, match="no such run table"):
        read_table(tmp_path, "steps")


def test_a_file_holding_another_table_is_refused(tmp_path):
    steps = write_table(tmp_path, "steps", [{"run_id": "x", "step": "run"}])
    steps.replace(table_path(tmp_path, "flows"))
    with pytest.raises(SchemaError, match="holds the run table 'steps', not 'flows'"):
        read_table(tmp_path, "flows")


def test_writing_is_atomic_and_leaves_no_temporary_file(tmp_path):
    write_table(tmp_path, "run", [{"run_id": "a"}])
    write_table(tmp_path, "run", [{"run_id": "b"}])
    assert [p.name for p in (tmp_path / "tables").iterdir()] == ["run.parquet"]
    assert rows(tmp_path, "run")[0]["run_id"] == "b"
    meta = pq.read_schema(table_path(tmp_path, "run")).metadata
    assert meta[META_VERSION] == SCHEMA_VERSION.encode() and meta[META_TABLE] == b"run"


# ---- the documented DuckDB queries on a real analysed run ------------------------------------


def doc_queries() -> list[str]:
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S)
    run_tables = [b for b in blocks if "results/*/tables/" in b]
    assert len(run_tables) >= 3, "docs/run-tables.md lost its DuckDB examples"
    return run_tables


def test_the_documented_duckdb_queries_run_on_real_analysed_runs(
    tmp_path, monkeypatch, flowengine_bin
):
    import subprocess

    out = tmp_path / "results"
    for scenario in ("quickstart.yaml", "attacks-mixed.yaml"):
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "testbed",
                "run",
                str(ROOT / "scenarios" / scenario),
                "--out",
                str(out),
                "-q",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if (
            scenario == "attacks-mixed.yaml"
            and p.returncode != 0
            and "suricata" in p.stderr.lower()
        ):
            continue  # without Suricata: no run with alerts
        assert p.returncode == 0, p.stdout + p.stderr
    runs = sorted(out.iterdir())
    monkeypatch.chdir(tmp_path)
    con = duckdb.connect()
    with_alerts = any(table_path(r, "alerts").is_file() for r in runs)
    results = []
    for sql in doc_queries():
        if sql.startswith("-- needs a run with alerts") and not with_alerts:
            continue
        results.append(con.sql(sql).fetchall())
    steps = results[0]
    assert [r[1] for r in steps] == [r.name for r in runs]
    quick = next(r for r in steps if r[0] == "quickstart")
    metrics = json.loads((out / quick[1] / "metrics.json").read_text())
    assert (quick[2], quick[3], quick[4]) == ("run", "flowengine", metrics["packets"])
    per_second = {r[0]: r for r in results[1]}
    assert per_second[quick[1]][3] <= metrics["packets"]
    flows = [r for r in results[2] if r[0] == quick[1]]
    assert sum(r[2] for r in flows) == metrics["flows"]["count"]
    if with_alerts:
        assert sum(r[4] for r in results[3]) == len(
            rows(next(r for r in runs if "attacks" in r.name), "alerts")
        )
