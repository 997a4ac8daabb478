"""The results catalogue (analysis/catalog.py, `testbed results list|show|compare|query`) on real
run folders: offline runs of scenarios/quickstart.yaml and a smaller scenario, analysed by the
real analysis, which writes their run tables. Live-shaped folders (seed 001's
comparison, repeated) come from benchmarks/bench_catalog.py, which writes them with
analysis.tables.write_table and a real comparison run's numbers."""

from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.catalog import Catalog, CatalogError, find_run_folders
from analysis.tables import SCHEMA_VERSION, read_table, write_table
from benchmarks.bench_catalog import make_runs
from ntgcore.scenario import load_scenario
from testbed.cli import main
from testbed.runner import run_scenario

REPO = Path(__file__).resolve().parent.parent
SMALL = """\
version: 1
name: small
flows:
  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 500, duration: 3s,
     payload: {size: 100}}
"""


def _run(scenario: Path, root: Path) -> Path:
    result = run_scenario(load_scenario(scenario), root, analyze=True, show_progress=False)
    assert result.status == "completed", result.messages
    return result.run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory, flowengine_bin):
    """Two real runs of the quickstart and one of another scenario, analysed, with run tables."""
    base = tmp_path_factory.mktemp("catalog")
    root = base / "results"
    (base / "small.yaml").write_text(SMALL)
    quick = [_run(REPO / "scenarios" / "quickstart.yaml", root) for _ in range(2)]
    small = _run(base / "small.yaml", root)
    return SimpleNamespace(root=root, quick=quick, small=small)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """Five repetitions of a seed 001 comparison (two generators, top speed and three loads)."""
    root = tmp_path_factory.mktemp("live") / "results"
    folders = make_runs(root, 5, seed=7)
    return SimpleNamespace(root=root, folders=folders)


def _metrics(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["results", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def copy_run(src: Path, dst_root: Path, name: str, **manifest_changes) -> Path:
    """A copy of run folder SRC as another run (its own run_id), the manifest changed as asked."""
    dst = dst_root / name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.pcap"))
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest.update(run_id=name, **manifest_changes)
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=2))
    for table in (dst / "tables").glob("*.parquet"):
        frame = read_table(dst, table.stem).to_pandas()
        write_table(dst, table.stem, frame.assign(run_id=name))
    return dst


# --------------------------------------------------------------------------------------------
# list, show


def test_list_has_one_line_per_run_with_the_analysis_numbers(runs, capsys):
    code, out, err = cli(capsys, "list", runs.root)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 1 + 3 and lines[0].split()[:4] == [
        "run_id",
        "scenario",
        "method",
        "status",
    ]
    code, out, _ = cli(capsys, "list", runs.root, "--json")
    rows = {r["folder"]: r for r in json.loads(out)}
    for folder in runs.quick:
        row, m = rows[str(folder)], _metrics(folder)
        assert (row["scenario"], row["method"], row["status"], row["steps"]) == (
            "quickstart",
            "offline",
            "completed",
            1,
        )
        assert row["packets"] == m["packets"] and row["mean_pps"] == pytest.approx(m["mean_pps"])
        assert row["variance_pct"] == pytest.approx(m["variance_pct"])
        assert row["generators"] == "flowengine"
    assert rows[str(runs.small)]["scenario"] == "small"


def test_show_gives_the_manifest_summary_and_the_steps(runs, capsys):
    folder = runs.quick[0]
    code, out, _ = cli(capsys, "show", folder)
    assert code == 0
    assert f"run_id           {folder.name}" in out and "status           completed" in out
    assert "steps (1 row)" in out and "per_second (" in out
    code, out, _ = cli(capsys, "show", folder.name, "--in", runs.root, "--json")
    doc = json.loads(out)
    assert (
        doc["summary"]["scenario"] == "quickstart"
        and doc["summary"]["schema_version"] == SCHEMA_VERSION
    )
    assert doc["steps"][0]["mean_pps"] == pytest.approx(_metrics(folder)["mean_pps"])
    code, _, err = cli(capsys, "show", "no-such-run", "--in", runs.root)
    assert code == 2 and "no-such-run: no such run folder" in err


def test_run_folders_are_found_in_trees_but_not_below_a_run_folder(runs, tmp_path):
    assert find_run_folders([runs.root]) == sorted(
        find_run_folders([runs.root]), key=lambda p: p.name
    )
    assert set(find_run_folders([runs.root.parent])) == {*runs.quick, runs.small}
    assert find_run_folders([runs.quick[0], runs.root]) == [
        runs.quick[0],
        *[p for p in find_run_folders([runs.root]) if p != runs.quick[0]],
    ]  # each once
    with pytest.raises(CatalogError, match="no such run folder or directory"):
        find_run_folders([tmp_path / "nothing"])


# --------------------------------------------------------------------------------------------
# compare


def test_compare_gives_the_spread_over_repeated_runs(runs, tmp_path, capsys):
    """Three runs whose steady rates are 9,000, 10,000 and 11,500 pps: n, mean, std, min, max and
    the 95 % confidence interval (t = 4.303 for 2 degrees of freedom)."""
    root = tmp_path / "results"
    rates = [9000.0, 10000.0, 11500.0]
    for i, rate in enumerate(rates):
        folder = copy_run(runs.quick[0], root, f"20261123T10000{i}Z-quickstart")
        steps = read_table(folder, "steps").to_pandas()
        write_table(folder, "steps", steps.assign(steady_mean_pps=rate))
    cmp = Catalog([root]).compare()
    row = cmp.table.iloc[0]
    assert (list(cmp.keys), row["generator"], row["n"]) == (["generator"], "flowengine", 3)
    assert row["steady_mean_pps_mean"] == pytest.approx(statistics.mean(rates))
    assert row["steady_mean_pps_std"] == pytest.approx(statistics.stdev(rates))
    assert (row["steady_mean_pps_min"], row["steady_mean_pps_max"]) == (9000.0, 11500.0)
    assert row["steady_mean_pps_ci95"] == pytest.approx(
        4.303 * statistics.stdev(rates) / math.sqrt(3)
    )
    assert row["mean_pps_std"] == 0 and row["mean_pps_mean"] == pytest.approx(
        _metrics(runs.quick[0])["mean_pps"]
    )
    code, out, _ = cli(capsys, "compare", root, "--no-plots")
    assert code == 0 and "flowengine" in out and "10,167 ± 1,258" in out
    code, out, _ = cli(capsys, "compare", root, "--no-plots", "--csv")
    assert out.splitlines()[0].startswith("generator,n,mean_pps_mean,mean_pps_std")


def test_compare_of_seed001_runs_per_generator_and_step_with_plots(live, tmp_path, capsys):
    cmp = Catalog([live.root]).compare(by="generator")
    assert list(cmp.table["generator"]) == ["native", "scapy"] and set(cmp.table["n"]) == {5}
    assert (
        cmp.table["steady_mean_pps_mean"].iloc[0] > 50 * cmp.table["steady_mean_pps_mean"].iloc[1]
    )
    assert any("--by step compares every step" in n for n in cmp.notes)  # the load steps
    steps = Catalog([live.root]).compare(by="step").table
    assert len(steps) == 8 and set(steps["kind"]) == {"topspeed", "load"}
    plots = tmp_path / "plots"
    code, out, _ = cli(capsys, "compare", live.root, "--plots", plots)
    assert code == 0 and "native" in out and "scapy" in out
    assert sorted(p.name for p in plots.iterdir()) == [
        "compare-cpu.png",
        "compare-memory.png",
        "compare-rate.png",
        "compare-variance.png",
    ]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots.iterdir())


def test_offline_runs_have_no_cpu_plots_and_say_so(runs, tmp_path, capsys):
    code, out, _ = cli(capsys, "compare", *runs.quick, "--plots", tmp_path / "p")
    assert code == 0
    assert "none of cpu, memory: these runs have no such numbers" in out
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        "compare-rate.png",
        "compare-variance.png",
    ]


def test_runs_of_different_scenarios_are_refused_unless_allowed(runs, capsys, tmp_path):
    code, out, err = cli(capsys, "compare", runs.root, "--no-plots")
    assert code == 2 and out == ""
    assert (
        "2 different scenarios" in err and "quickstart (sha256 " in err and "small (sha256 " in err
    )
    assert "--allow-mixed" in err
    for flags in (["--allow-mixed"], ["--by", "scenario"]):
        code, out, err = cli(capsys, "compare", runs.root, "--no-plots", *flags)
        assert code == 0, err
        assert "3 runs of 2 scenarios" in out and "quickstart@" in out and "small@" in out
    # the same name, another file: still two scenarios
    changed = copy_run(
        runs.quick[0],
        tmp_path / "r",
        "20261123T110000Z-quickstart",
        scenario={"name": "quickstart", "sha256": "0" * 64},
    )
    code, _, err = cli(capsys, "compare", runs.quick[0], changed, "--no-plots")
    assert code == 2 and "a scenario file changed between runs" in err


def test_unfinished_runs_are_listed_and_left_out_of_compare(runs, tmp_path, capsys):
    root = tmp_path / "results"
    copy_run(runs.quick[0], root, "20261123T120000Z-quickstart")
    copy_run(runs.quick[1], root, "20261123T120001Z-quickstart", status="abandoned")
    code, out, _ = cli(capsys, "list", root)
    assert code == 0 and "abandoned" in out
    code, out, err = cli(capsys, "compare", root, "--no-plots", "--json")
    assert code == 0 and json.loads(out)[0]["n"] == 1
    assert (
        "left out 1 run(s) that did not complete" in err
        and "20261123T120001Z-quickstart (abandoned)" in err
    )
    code, out, _ = cli(capsys, "compare", root, "--no-plots", "--json", "--include-unfinished")
    assert code == 0 and json.loads(out)[0]["n"] == 2


def test_a_run_without_tables_is_not_analysed(runs, tmp_path, capsys):
    root = tmp_path / "results"
    copy_run(runs.quick[0], root, "20261123T130000Z-quickstart")
    bare = copy_run(runs.quick[1], root, "20261123T130001Z-quickstart")
    shutil.rmtree(bare / "tables")
    code, out, _ = cli(capsys, "list", root)
    assert code == 0 and f"not analysed: testbed analyze {bare}" in out
    for action in (["compare", root, "--no-plots"], ["query", "SELECT count(*) FROM steps", root]):
        code, _, err = cli(capsys, *action)
        assert code == 2 and f"{bare}: not analysed" in err and f"`testbed analyze {bare}`" in err


@pytest.mark.parametrize(
    "case", ["newer manifest", "older file", "no version", "damaged", "another table"]
)
def test_unreadable_tables_are_refused_naming_the_file(runs, tmp_path, capsys, case):
    root = tmp_path / "results"
    good = copy_run(runs.quick[0], root, "20261123T140000Z-quickstart")
    bad = copy_run(runs.quick[1], root, "20261123T140001Z-quickstart")
    steps = bad / "tables" / "steps.parquet"
    if case == "newer manifest":
        manifest = json.loads((bad / "manifest.json").read_text())
        (bad / "manifest.json").write_text(json.dumps({**manifest, "schema_version": "2.0"}))
        expected = [f"{bad / 'manifest.json'}: run tables of schema 2.0", "use a newer testbed"]
    else:
        table = pq.read_table(steps)
        if case == "older file":
            pq.write_table(table.replace_schema_metadata({b"ntg.schema_version": b"0.9"}), steps)
            expected = [f"{steps}: run tables of schema 0.9", "run `testbed analyze`"]
        elif case == "no version":
            pq.write_table(table.replace_schema_metadata({}), steps)
            expected = [f"{steps}: no schema version"]
        elif case == "another table":
            pq.write_table(
                table.replace_schema_metadata(
                    {b"ntg.schema_version": b"1.0", b"ntg.table": b"flows"}
                ),
                steps,
            )
            expected = [f"{steps}: holds the run table 'flows', not 'steps'"]
        else:
            steps.write_bytes(steps.read_bytes()[: steps.stat().st_size // 2])
            expected = [f"{steps}: not a readable Parquet file", f"testbed analyze {bad}"]
    for action in (
        ["compare", root, "--no-plots"],
        ["query", "SELECT count(*) AS n FROM steps", root],
    ):
        code, out, err = cli(capsys, *action)
        assert code == 2 and out == "", (action, out)
        assert all(e in err for e in expected), err
    code, out, err = cli(capsys, "list", root)  # the others are still listed
    assert code == 2 and good.name in out and bad.name in out
    assert all(e in err for e in expected), err


def test_a_newer_minor_version_is_read_with_its_added_columns(runs, tmp_path, capsys):
    root = tmp_path / "results"
    copy_run(runs.quick[0], root, "20261123T150000Z-quickstart")
    newer = copy_run(runs.quick[1], root, "20261123T150001Z-quickstart")
    steps = newer / "tables" / "steps.parquet"
    table = pq.read_table(steps)
    table = table.append_column("new_column", pa.array([1.5] * table.num_rows))
    pq.write_table(
        table.replace_schema_metadata({b"ntg.schema_version": b"1.7", b"ntg.table": b"steps"}),
        steps,
    )
    code, out, err = cli(
        capsys,
        "query",
        "SELECT run_id, new_column, mean_pps FROM steps ORDER BY run_id",
        root,
        "--json",
    )
    assert code == 0, err
    rows = json.loads(out)
    assert [r["new_column"] for r in rows] == [None, 1.5]
    assert (
        rows[0]["mean_pps"]
        == rows[1]["mean_pps"]
        == pytest.approx(_metrics(runs.quick[1])["mean_pps"])
    )
    code, out, _ = cli(capsys, "compare", root, "--no-plots", "--json")
    assert code == 0 and json.loads(out)[0]["n"] == 2


def test_the_same_run_twice_would_count_twice(runs, tmp_path, capsys):
    shutil.copytree(runs.quick[0], tmp_path / "copy", ignore=shutil.ignore_patterns("*.pcap"))
    code, _, err = cli(capsys, "compare", runs.quick[0], tmp_path / "copy", "--no-plots")
    assert code == 2 and "the same run in several folders" in err


# --------------------------------------------------------------------------------------------
# query


def test_query_sees_the_tables_as_views(runs, capsys):
    sql = (
        "SELECT r.scenario, count(DISTINCT p.run_id) AS runs, sum(p.packets) AS packets "
        "FROM per_second p JOIN run r USING (run_id) GROUP BY ALL ORDER BY 1"
    )
    code, out, err = cli(capsys, "query", sql, runs.root, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["scenario"] for r in rows] == ["quickstart", "small"] and rows[0]["runs"] == 2
    assert rows[0]["packets"] == sum(_metrics(f)["packets"] for f in runs.quick)
    code, out, _ = cli(capsys, "query", "SELECT count(*) AS n FROM alerts", runs.root, "--csv")
    assert (code, out) == (0, "n\n0\n")  # no run has alerts: an empty view, not an error
    code, out, _ = cli(capsys, "query", "SELECT * FROM flows LIMIT 0", runs.quick[0], "--csv")
    assert out.strip() == ",".join(pq.read_schema(runs.quick[0] / "tables" / "flows.parquet").names)
    code, _, err = cli(capsys, "query", "SELECT nonsense FROM steps", runs.root)
    assert code == 2 and "testbed results query: the query failed: Binder Error" in err


@pytest.mark.parametrize(
    "sql, refused",
    [
        ("COPY (SELECT 42) TO '{tmp}/x.csv'", "this is a COPY statement"),
        ("SELECT * FROM read_text('/etc/shadow')", "Permission Error"),
        ("SELECT * FROM read_csv('/etc/passwd')", "Permission Error"),
        ("SELECT * FROM glob('/etc/*')", "Permission Error"),
        (
            "SELECT * FROM read_parquet('{other}')",
            "Permission Error",
        ),  # a run outside the catalogue
        ("ATTACH '{tmp}/x.db' AS x", "this is a ATTACH statement"),
        ("CREATE TABLE x AS SELECT 1", "this is a CREATE statement"),
        ("COPY (SELECT * FROM steps) TO '{steps}' (FORMAT parquet)", "this is a COPY statement"),
        ("INSTALL httpfs", "this is a LOAD statement"),
        ("LOAD httpfs", "this is a LOAD statement"),
        ("SET enable_external_access = true", "this is a SET statement"),
        ("PRAGMA enable_profiling", "this is a PRAGMA statement"),
        ("EXPORT DATABASE '{tmp}/exp'", "this is a EXPORT statement"),
        ("SELECT 1; COPY (SELECT 42) TO '{tmp}/x.csv'", "one SELECT statement, not 2"),
    ],
)
def test_a_query_is_one_read_only_select_confined_to_the_run_tables(
    runs, tmp_path, capsys, sql, refused
):
    """A query runs as root (the README runs the testbed under sudo): it may read the catalogue's
    run tables and nothing else, write nothing, install nothing, change no setting."""
    root = tmp_path / "results"
    run = copy_run(runs.quick[0], root, "victim")
    steps = run / "tables" / "steps.parquet"
    before = steps.read_bytes()
    sql = sql.format(tmp=tmp_path, steps=steps, other=runs.small / "tables" / "steps.parquet")
    code, out, err = cli(capsys, "query", sql, root)
    assert code == 2 and refused in err and out == "", (code, out, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]  # nothing written or attached
    assert steps.read_bytes() == before
    code, out, err = cli(capsys, "list", root)  # the run is still readable
    assert code == 0 and "victim" in out, err
    code, out, err = cli(capsys, "query", "SELECT count(*) AS n FROM steps", root, "--csv")
    assert (code, out) == (0, "n\n1\n"), err


def test_every_catalogue_connection_is_locked(runs):
    """Also the connection behind list/compare/show, which SQL of our own uses: no file but its
    tables, no extension, no setting changed."""
    cat = Catalog([runs.root])
    cat.list()
    for sql in (
        "SELECT * FROM read_text('/etc/hostname')",
        "SET enable_external_access = true",
        "INSTALL httpfs",
        "SET memory_limit = '100GB'",
    ):
        with pytest.raises(Exception, match="Permission Error|locked"):
            cat.con.sql(sql)


def test_the_command_exits_2_for_bad_input():
    p = subprocess.run(
        [sys.executable, "-m", "testbed", "results", "list", "/nonexistent/place"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert (
        p.returncode == 2
        and "testbed results list: /nonexistent/place: no such run folder" in p.stderr
    )


# --------------------------------------------------------------------------------------------
# coverage over time


def test_coverage_over_time_from_ids_coverage_runs(tmp_path, suricata):
    root = tmp_path / "results"
    extra = tmp_path / "extra.rules"  # a rule Suricata refuses to load: counted as missed
    extra.write_text(
        'alert tcp any any -> any 80 (msg:"needs lua"; flow:to_server,established; '
        'content:"x"; lua:foo.lua; sid:9000001; rev:1;)\n'
    )
    http = REPO / "tests" / "rules_cases" / "http_request" / "rules.rules"
    docs = []
    for name, rules in (
        ("20261120T100000Z-ids-coverage", [http]),
        ("20261121T100000Z-ids-coverage", [http, extra]),
    ):
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "testbed",
                "ids-coverage",
                *map(str, rules),
                "--out",
                str(root / name),
                "-q",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert p.returncode == 0, p.stderr
        docs.append(json.loads((root / name / "coverage.json").read_text()))
    overall, per_sid = Catalog([root]).coverage()
    assert list(overall["run"]) == [
        "20261120T100000Z-ids-coverage",
        "20261121T100000Z-ids-coverage",
    ]
    assert list(overall["coverage"]) == pytest.approx([d["coverage"] for d in docs])
    assert overall["coverage"].iloc[1] < 1
    assert set(per_sid[per_sid["sid"] == 9000001]["state"]) == {"not loaded"}


# --------------------------------------------------------------------------------------------
# the real writer (no stand-in)


def test_real_runs_write_the_run_tables_the_catalogue_reads(tmp_path, flowengine_bin, capsys):
    """`testbed run` (its analysis) writes tables/*.parquet, and the catalogue reads them: this
    uses no stand-in, so it passes once the analysis writes the run tables (issue 16)."""
    root = tmp_path / "results"
    folders = [_run(REPO / "scenarios" / "quickstart.yaml", root) for _ in range(2)]
    for folder in folders:
        for table in ("run", "steps", "per_second", "flows"):
            assert (folder / "tables" / f"{table}.parquet").is_file(), (
                f"{folder}: no tables/{table}.parquet"
            )
    code, out, err = cli(capsys, "compare", root, "--no-plots", "--json")
    assert code == 0, err
    row = json.loads(out)[0]
    assert row["n"] == 2 and row["mean_pps_mean"] == pytest.approx(_metrics(folders[0])["mean_pps"])
    code, out, err = cli(
        capsys, "query", "SELECT sum(packets) AS n FROM per_second", root, "--json"
    )
    assert code == 0 and json.loads(out)[0]["n"] == sum(_metrics(f)["packets"] for f in folders)
