"""A longer fuzzing session than CI's, outside the test suite.

Runs every target of tests/fuzz/targets.py in rounds of random (not the CI's fixed) examples, each
round in a child process under the same memory bound as CI, until the time given to the target
is spent. Every finding is stored in `--save` (default tests/fuzz_cases/<target>/) and the session
goes on; the summary lists rounds, examples and findings per target.

    python tests/fuzz/run_long.py [--minutes 10] [--targets scenario,rules,pcap] [--round 500]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGETS = Path(__file__).resolve().parent / "targets.py"
MEMORY_LIMIT = 2 * 2**30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="total time, shared by the targets")
    ap.add_argument("--targets", default="scenario,rules,pcap")
    ap.add_argument("--round", type=int, default=500, help="examples per child process")
    ap.add_argument("--save", type=Path, default=ROOT / "tests" / "fuzz_cases")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "fuzz_long.json")
    args = ap.parse_args()
    targets = args.targets.split(",")
    share = args.minutes * 60 / len(targets)
    summary = {}
    for target in targets:
        end = time.monotonic() + share
        rounds = examples = 0
        findings: list[str] = []
        while time.monotonic() < end:
            out = subprocess.run(
                [
                    sys.executable,
                    str(TARGETS),
                    target,
                    "--random",
                    "--examples",
                    str(args.round),
                    "--save",
                    str(args.save),
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
                preexec_fn=_limit_memory,
            )
            rounds += 1
            examples += args.round  # a round with a finding stops early: an upper bound
            if out.returncode != 0:
                stored = [line for line in out.stderr.splitlines() if ": stored " in line]
                findings += stored or [
                    out.stderr.strip().splitlines()[-1]
                    if out.stderr.strip()
                    else f"exit {out.returncode}"
                ]
                print(f"{target}: finding: {findings[-1]}", file=sys.stderr)
        summary[target] = {
            "seconds": round(share),
            "rounds": rounds,
            "examples_at_most": examples,
            "findings": findings,
        }
        print(f"{target}: {rounds} rounds, up to {examples:,} examples, {len(findings)} findings")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"written: {args.out}")
    return 1 if any(s["findings"] for s in summary.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
