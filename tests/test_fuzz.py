"""Fuzzing in CI: the scenario loader, the rule parser and the capture reader take any input and
end only in their documented errors, within a time bound per input and a memory bound per run.

The targets and inputs are in tests/fuzz/targets.py; every finding is kept in
tests/fuzz_cases/<target>/ and replayed here. docs/fuzzing.md: the budget and longer runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import limit_memory

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ROOT / "tests" / "fuzz" / "targets.py"
CASES = ROOT / "tests" / "fuzz_cases"
SUFFIX = {"scenario": ".yaml", "rules": ".rules", "pcap": ".pcap"}

# Examples per target in CI: about 25 s for the three on the 2-core CI machine (the budget: 60 s).
EXAMPLES = {"scenario": 1500, "rules": 2000, "pcap": 2000}
MEMORY_LIMIT = 2 * 2**30  # address space of the fuzzing child; a MemoryError is a finding


def run_targets(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TARGETS), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        preexec_fn=limit_memory(MEMORY_LIMIT),
        timeout=300,
    )


@pytest.mark.parametrize("target", sorted(EXAMPLES))
def test_fuzzing_finds_nothing(target, pcaplib):
    out = run_targets(target, "--examples", str(EXAMPLES[target]))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no finding" in out.stdout


KEPT = [t for t, suffix in sorted(SUFFIX.items()) if any((CASES / t).glob(f"*{suffix}"))]


@pytest.mark.parametrize("target", KEPT)
def test_every_kept_finding_stays_fixed(target, pcaplib):
    out = run_targets(target, "--replay", str(CASES / target))
    assert out.returncode == 0, out.stdout + out.stderr
    assert " 0 failed" in out.stdout


def test_a_finding_is_reported_and_kept(tmp_path):
    """The harness itself: a target that raises an undocumented error fails and is stored."""
    out = run_targets("selftest", "--examples", "20", "--save", str(tmp_path))
    assert out.returncode == 1 and "ZeroDivisionError" in out.stderr
    (kept,) = (tmp_path / "selftest").iterdir()
    assert kept.read_bytes().startswith(b"\x00")
