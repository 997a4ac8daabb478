"""Flow meters as devices under test: the record table, the exact reference and the score.

```python
from analysis.flowmeter import MeterRules, reference_records, score

rules = MeterRules(idle_timeout_ns=15 * 10**9, active_timeout_ns=60 * 10**9, tcp_end=True)
ref = reference_records("wire.pcap", rules)  # what a conforming meter exports (pa.Table)
result = score(ref, collected)  # collected: the meter's records read back from the collector
result.flows  # one row per reference record (status, errors) and per spurious record
result.totals  # counts per status, packet/byte totals, time error and delay quantiles
```

| module | what |
|---|---|
| `records.py` | `RECORD_SCHEMA`, `REFERENCE_SCHEMA` (+ `end`, `expire_ns`), `COLLECTED_SCHEMA` (+ `received_ns`), `MeterRules`, `records_table`, `conform` |
| `reference.py` | `reference_records(pcap, rules, chunk_packets) -> pa.Table`: the records a conforming meter exports, from the capture in chunks (numpy; a per-packet loop only for keys whose time goes back and for a table that overflows) |
| `score.py` | `score(reference, collected, tolerance_ns=..., key_vlan=False) -> Score`: statuses exact / differs / missing / split / merged / spurious, packet and byte errors, L2-or-L3 bytes, time errors, TCP flags, export delay (DuckDB) |
| `steps.py` | `meter_step(step_dir, dut_entry, capture)`: a live meter step scored (`meter/score.parquet`) and its loss by stage (dropped at capture, lost in processing, lost in export); read by analysis.live |
| `handover.py` | `handover_flows(cap, vip, master, backup, unanswered, died_ns) -> pa.Table`, `handover_totals`: a meter pair across a fail-over, the packets per meter and the loss split into lost with the master, outage and rest |

Pure: no processes, no network. The semantics are written up in docs/flowmeters.md
("Reference records", "Score").
"""

from .records import (
    COLLECTED_SCHEMA,
    END_REASONS,
    RECORD_SCHEMA,
    REFERENCE_SCHEMA,
    MeterRules,
    conform,
    empty_table,
    records_table,
)
from .reference import ReferenceStats, reference_records, reference_records_with_stats

__all__ = [
    "COLLECTED_SCHEMA",
    "END_REASONS",
    "MeterRules",
    "RECORD_SCHEMA",
    "REFERENCE_SCHEMA",
    "ReferenceStats",
    "conform",
    "empty_table",
    "records_table",
    "reference_records",
    "reference_records_with_stats",
]
