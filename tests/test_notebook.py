"""notebooks/generator_comparison.ipynb executes against a real comparison run (nbclient)."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "notebooks" / "generator_comparison.ipynb"


@pytest.mark.skipif(os.geteuid() != 0, reason="the comparison run creates network namespaces: need root")
def test_the_comparison_notebook_executes_on_a_real_run(tmp_path, run_scenario, flowengine_bin,
                                                        monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
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
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in outputs)
    assert "native" in text and "scapy" in text  # the comparison table names both generators
