"""Benchmark: rule parsing + synthesis speed (rules/s) and a full coverage run per rule file.

.venv/bin/python benchmarks/bench_rules.py [RULES_DIR]   (default: $NTG_SHARED_DATA/rules/et-open)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from idsrules.semantics import analyze
from idsrules.syntax import read_rules
from idsrules.synth import synthesize
from testbed.ids.coverage import run_coverage


def main() -> int:
    default = Path(os.environ.get("NTG_SHARED_DATA", "/work/shared/data")) / "rules" / "et-open"
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    files = sorted(folder.glob("*.rules"))
    if not files:
        print(f"no .rules files in {folder}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        models = []
        for f in files:
            rules, _ = read_rules(f)
            models += [analyze(r) for r in rules]
        t_parse = time.perf_counter() - t
        res = synthesize(models, Path(tmp) / "all.pcap")
        t_all = time.perf_counter() - t
        print(
            f"parse+synthesize: {len(models):,} rules in {t_all:.2f} s = {len(models) / t_all:,.0f} rules/s "
            f"(parse {t_parse:.2f} s); {res.packets:,} packets"
        )
        print("| file | rules | loaded | alerted | coverage | extra sessions | time s |")
        print("|---|---|---|---|---|---|---|")
        t = time.perf_counter()
        doc = run_coverage(files, Path(tmp) / "all")
        total_s = time.perf_counter() - t
        for f in files:
            d = run_coverage([f], Path(tmp) / f.stem)
            print(
                f"| {f.name} | {d['rules']} | {d['loaded']} | {d['alerted']} | {100 * d['coverage']:.1f}% "
                f"| {100 * d['extra_fraction']:.1f}% | {d['timing_s']['total']:.1f} |"
            )
        print(
            f"| all | {doc['rules']} | {doc['loaded']} | {doc['alerted']} | {100 * doc['coverage']:.1f}% "
            f"| {100 * doc['extra_fraction']:.1f}% | {total_s:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
