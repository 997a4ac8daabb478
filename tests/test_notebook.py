"""The notebooks execute (nbclient) on real data: generator_comparison.ipynb on a real comparison
run, coverage_over_time.ipynb on real `testbed ids-coverage` runs, and on none."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "notebooks" / "generator_comparison.ipynb"
COVERAGE_NOTEBOOK = REPO / "notebooks" / "coverage_over_time.ipynb"


def execute(path: Path) -> str:
    """Run the notebook at PATH in a fresh kernel (cwd: the repository); its text output. Fails
    on any cell's error."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    ).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    return "".join(
        str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in outputs
    )


@pytest.mark.usefixtures("root")
def test_the_comparison_notebook_executes_on_a_real_run(
    tmp_path, run_scenario, flowengine_bin, monkeypatch
):
    scenario = tmp_path / "nb.yaml"
    scenario.write_text("""version: 1
name: nb-compare
flows:
  - {protocol: tcp, src: 198.18.0.1, dst: 198.18.0.2, src_port: 40000, dst_port: 80,
     rate: 10Mpps, duration: 1000s, payload: {size: 6}}
testbed:
  method: comparison
  duration: 2s
  generators: [{name: flowengine, label: native}, {name: scapy}]
  load_steps: {step_kbps: 100, count: 2, duration: 1s}
""")
    run = run_scenario(scenario)
    assert run.ok, run.messages
    monkeypatch.setenv("NTG_RUN_DIRS", str(run.run_dir))
    monkeypatch.setenv("NTG_PLOTS_DIR", str(tmp_path / "plots"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    text = execute(NOTEBOOK)
    assert "native" in text and "scapy" in text  # the comparison table names both generators
    assert "comparing 1 run(s) of nb-compare" in text
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "compare-cpu.png",
        "compare-memory.png",
        "compare-rate.png",
        "compare-variance.png",
    ]


def test_the_coverage_notebook_executes_on_real_coverage_runs(tmp_path, monkeypatch, suricata):
    root = tmp_path / "results"
    extra = tmp_path / "extra.rules"  # Suricata refuses it: a missed rule in the second run
    extra.write_text(
        'alert tcp any any -> any 80 (msg:"needs lua"; flow:to_server,established; '
        'content:"x"; lua:foo.lua; sid:9000001; rev:1;)\n'
    )
    http = REPO / "tests" / "rules_cases" / "http_request" / "rules.rules"
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
    last = json.loads((root / name / "coverage.json").read_text())
    monkeypatch.setenv("NTG_RUN_DIRS", str(root))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    text = execute(COVERAGE_NOTEBOOK)
    assert "2 ids-coverage run(s)" in text
    assert f"{last['coverage']:g}" in text  # the last run's coverage (0.875: 7 of 8 rules)
    assert "9000001" in text and "not loaded" in text  # the sid that changed


def test_the_coverage_notebook_says_so_when_there_are_no_coverage_runs(tmp_path, monkeypatch):
    (tmp_path / "results").mkdir()
    monkeypatch.setenv("NTG_RUN_DIRS", str(tmp_path / "results"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    text = execute(COVERAGE_NOTEBOOK)
    assert "No ids-coverage runs with a coverage table under" in text
