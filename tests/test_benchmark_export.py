"""`testbed export-benchmark`: run folders as pytest-benchmark JSON, read by the real pytest-benchmark."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pytest_benchmark.stats import Stats

from analysis.benchmark import sample_stats

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
STORAGE_MACHINE = "Linux-CPython-3.11-64bit"  # the folder pytest-benchmark's file storage uses


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def made_run(out: Path, *args: str) -> Path:
    result = run_cli("run", *args, "--out", str(out), "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, flowengine_bin) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("runs")
    return (
        made_run(base / "a", str(QUICKSTART), "--seed", "1"),
        made_run(base / "b", str(QUICKSTART), "--seed", "2"),
    )


def export(run_dir: Path, out: Path) -> dict:
    result = run_cli("export-benchmark", str(run_dir), "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text())


def test_the_real_pytest_benchmark_compares_two_exported_runs(two_runs, tmp_path):
    store = tmp_path / ".benchmarks" / STORAGE_MACHINE
    files = [store / "0001_seed1.json", store / "0002_seed2.json"]
    for run_dir, file in zip(two_runs, files):
        export(run_dir, file)
    result = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", *map(str, files)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for name in (
        "quickstart::packet_rate (0001_seed1)",
        "quickstart::packet_rate (0002_seed2)",
        "quickstart::byte_rate (0001_seed1)",
        "quickstart::byte_rate (0002_seed2)",
    ):
        assert name in result.stdout, result.stdout
    by_id = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", "0001", "0002"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert by_id.returncode == 0 and "quickstart::packet_rate (0002_seed2)" in by_id.stdout, (
        by_id.stderr
    )


def test_packet_rate_samples_are_seconds_per_packet_of_the_complete_seconds(two_runs, tmp_path):
    run_dir = two_runs[0]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    doc = export(run_dir, tmp_path / "out.json")
    bench = {b["name"]: b for b in doc["benchmarks"]}
    counts = (
        metrics["per_second"]["packets"][:-1]
        if metrics["per_second"]["last_partial"]
        else metrics["per_second"]["packets"]
    )
    stats = bench["quickstart::packet_rate"]["stats"]
    assert stats["data"] == pytest.approx([1 / c for c in counts])
    assert stats["rounds"] == metrics["seconds"]
    assert 1 / stats["min"] == pytest.approx(metrics["max_pps"])
    assert 1 / stats["max"] == pytest.approx(metrics["min_pps"])
    assert stats["mean"] == pytest.approx(sum(1 / c for c in counts) / len(counts))
    byte_counts = metrics["per_second"]["bytes"][: len(counts)]
    assert bench["quickstart::byte_rate"]["stats"]["ops"] == pytest.approx(
        len(byte_counts) / sum(1 / b for b in byte_counts)
    )


def test_commit_and_machine_come_from_the_manifest(two_runs, tmp_path):
    manifest = json.loads((two_runs[0] / "manifest.json").read_text())
    doc = export(two_runs[0], tmp_path / "out.json")
    assert doc["commit_info"]["id"] == manifest["git"]["revision"]
    assert doc["commit_info"]["dirty"] == manifest["git"]["dirty"]
    assert doc["machine_info"]["node"] == manifest["host"]["hostname"]
    assert doc["machine_info"]["cpu"]["count"] == manifest["host"]["cpus"]


def test_the_document_has_every_field_real_pytest_benchmark_writes(two_runs, tmp_path):
    (tmp_path / "test_tiny.py").write_text(
        "def test_tiny(benchmark):\n    benchmark(sum, range(10))\n"
    )
    real = tmp_path / "real.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:ntg_testbed",
            "test_tiny.py",
            f"--benchmark-json={real}",
            "--benchmark-max-time=0.01",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    want = json.loads(real.read_text())
    ours = export(two_runs[0], tmp_path / "ours.json")
    assert set(want) == set(ours)
    (real_bench,) = want["benchmarks"]
    for bench in ours["benchmarks"]:
        assert set(real_bench) <= set(bench)
        assert set(real_bench["stats"]) <= set(bench["stats"])
        assert set(real_bench["options"]) <= set(bench["options"])


@pytest.mark.parametrize(
    "data",
    [
        [3.0],
        [1.0, 2.0],
        [5.0, 1.0, 2.0],
        [4.0, 1.0, 9.0, 2.0, 2.5],
        [1, 2, 3, 4, 5, 6, 40],
        [2, 2, 2, 3, 1, 100, 7, 8, 9, 1],
    ],
)
def test_statistics_are_those_pytest_benchmark_computes(data):
    theirs = Stats()
    for value in data:
        theirs.update(value)
    ours = sample_stats(data)
    for field, value in theirs.as_dict().items():
        expected = pytest.approx(value) if isinstance(value, float) else value
        assert ours[field] == expected, field


def changed_copy(run_dir: Path, tmp_path: Path, **manifest_changes) -> Path:
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("*.pcap", "plots"))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest.update(manifest_changes)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def test_a_run_that_did_not_complete_is_refused(two_runs, tmp_path):
    copy = changed_copy(two_runs[0], tmp_path, status="interrupted")
    result = run_cli("export-benchmark", str(copy), "-o", str(tmp_path / "out.json"))
    assert result.returncode == 2
    assert "'interrupted', not completed" in result.stderr
    assert not (tmp_path / "out.json").exists()


def test_a_run_without_metrics_is_refused_with_the_command_that_makes_them(two_runs, tmp_path):
    copy = changed_copy(two_runs[0], tmp_path)
    (copy / "metrics.json").unlink()
    result = run_cli("export-benchmark", str(copy), "-o", str(tmp_path / "out.json"))
    assert result.returncode == 2
    assert f"testbed analyze {copy}" in result.stderr


def test_runs_of_different_commits_are_refused_in_one_file(two_runs, tmp_path):
    other = changed_copy(two_runs[1], tmp_path, git={"revision": "0" * 40, "dirty": False})
    result = run_cli(
        "export-benchmark", str(two_runs[0]), str(other), "-o", str(tmp_path / "out.json")
    )
    assert result.returncode == 2
    assert "different commits" in result.stderr


@pytest.mark.ntg_live
@pytest.mark.usefixtures("root")
def test_a_live_run_exports_each_step_with_its_loss(tmp_path, flowengine_bin):
    scenario = tmp_path / "livebench.yaml"
    scenario.write_text(
        "version: 1\nname: livebench\nflows:\n"
        "  - {protocol: udp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000, dst_port: 9, "
        "rate: 2000, packets: 7000, payload: {size: 18}}\n"
        'testbed:\n  dut: {kind: tcpdump, write: true}\n  capture: {at: "tap:tap0"}\n'
    )
    run_dir = made_run(tmp_path / "runs", str(scenario))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (step,) = manifest["steps"]
    doc = export(run_dir, tmp_path / "live.json")
    bench = {b["name"]: b for b in doc["benchmarks"]}
    label = f"livebench/{step['name']}"
    assert set(bench) == {f"{label}::packet_rate", f"{label}::byte_rate", f"{label}::loss"}
    assert bench[f"{label}::loss"]["stats"]["data"] == [step["loss"]["loss_rate"]]
    assert bench[f"{label}::packet_rate"]["stats"]["rounds"] >= 2
