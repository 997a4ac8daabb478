"""The score (analysis/flowmeter/score.py): each status, L2-or-L3 bytes, time errors against the
tolerance, TCP flags, export delay, totals; and properties (Hypothesis): a reference scored
against itself is all exact, and records dropped, split or merged are classified as such,
whether a key is settled by the fast path or by the full matching."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.flowmeter import COLLECTED_SCHEMA, REFERENCE_SCHEMA, records_table
from analysis.flowmeter.score import DEFAULT_TOLERANCE_NS, FLOW_SCHEMA, score

S = 1_000_000_000
MS = 1_000_000
T0 = 1_700_000_000 * S


def rec(
    sport: int = 1000,
    first: float = 0.0,
    last: float = 1.0,
    packets: int = 10,
    nbytes: int = 1000,
    flags: int = 0,
    proto: int = 17,
    vlan: int = 0,
    src: str = "198.18.0.1",
    **extra,
) -> dict:
    """A record; times in seconds after T0 (floats are fine to the ns at this scale)."""
    return {
        "src": src,
        "dst": "198.19.0.1",
        "sport": sport,
        "dport": 80,
        "proto": proto,
        "vlan": vlan,
        "packets": packets,
        "bytes": nbytes,
        "first_ns": T0 + round(first * S),
        "last_ns": T0 + round(last * S),
        "tcp_flags": flags,
        **extra,
    }


def ref_table(*records: dict) -> pa.Table:
    rows = [{"end": "idle", "expire_ns": r["last_ns"] + 15 * S} | r for r in records]
    return records_table(rows, REFERENCE_SCHEMA)


def col_table(*records: dict) -> pa.Table:
    return records_table(list(records), COLLECTED_SCHEMA)


def statuses(result) -> list[str]:
    return result.flows.column("status").to_pylist()


def ms_floor(r: dict) -> dict:
    """A record as a meter with millisecond times reports it."""
    return r | {k: r[k] // MS * MS for k in ("first_ns", "last_ns")}


# ---- statuses -------------------------------------------------------------------------------


def test_each_status():
    reference = ref_table(
        rec(1, 0.0004, 2.0007),  # exact: times cut to the ms
        rec(2, 0, 1, nbytes=1000),  # differs: bytes
        rec(3, 0, 1, packets=10),  # differs: a packet lost
        rec(4, 0, 1),  # missing
        rec(5, 0, 10, packets=20, nbytes=2000),  # split in two
        rec(6, 0, 1, packets=5, nbytes=500),  # merged with the next
        rec(6, 3, 4, packets=5, nbytes=500),
    )
    collected = col_table(
        ms_floor(rec(1, 0.0004, 2.0007)),
        rec(2, 0, 1, nbytes=999),
        rec(3, 0, 1, packets=9),
        rec(5, 0, 4, packets=8, nbytes=800),
        rec(5, 5, 10, packets=12, nbytes=1200),
        rec(6, 0, 4, packets=10, nbytes=1000),
        rec(7, 0, 1),  # spurious: no such key
    )
    result = score(reference, collected)
    assert statuses(result) == [
        "exact",
        "differs",
        "differs",
        "missing",
        "split",
        "merged",
        "merged",
        "spurious",
    ]
    f = result.flows.to_pylist()
    assert [r["byte_error"] for r in f[:5]] == [0, -1, 0, None, 0]
    assert [r["packet_error"] for r in f[:5]] == [0, 0, -1, None, 0]
    assert (f[4]["collected"], f[4]["packets_c"], f[4]["collected_index"]) == (2, 20, None)
    assert f[5]["collected_index"] == f[6]["collected_index"] == 5
    assert f[7]["ref_index"] is None and f[7]["collected_index"] == 6
    t = result.totals
    assert {s: t[s] for s in ("exact", "differs", "missing", "split", "merged", "spurious")} == {
        "exact": 1,
        "differs": 2,
        "missing": 1,
        "split": 1,
        "merged": 2,
        "spurious": 1,
    }
    assert (t["packets_missing"], t["bytes_missing"]) == (10, 1000)
    assert (t["reference_records"], t["collected_records"]) == (7, 7)
    assert t["packets_reference"] == 70 and t["packets_collected"] == 69
    assert result.flows.schema == FLOW_SCHEMA


def test_nothing_collected_is_all_missing_and_nothing_expected_all_spurious():
    reference = ref_table(rec(1), rec(2))
    assert statuses(score(reference, col_table())) == ["missing", "missing"]
    assert statuses(score(ref_table(), col_table(rec(1)))) == ["spurious"]


def test_vlan_in_the_key_only_when_asked():
    reference = ref_table(rec(1, vlan=10))
    collected = col_table(rec(1, vlan=0))
    assert statuses(score(reference, collected)) == ["exact"]
    assert statuses(score(reference, collected, key_vlan=True)) == ["missing", "spurious"]


# ---- bytes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vlan", "per_packet", "layer"),
    [(0, 0, "L3"), (0, 14, "L2"), (10, 18, "L2"), (10, 22, "L2"), (0, 4, "other")],
)
def test_l2_or_l3_bytes(vlan, per_packet, layer):
    reference = ref_table(rec(1, packets=10, nbytes=1000, vlan=vlan))
    collected = col_table(rec(1, packets=10, nbytes=1000 + 10 * per_packet, vlan=vlan))
    result = score(reference, collected)
    row = result.flows.to_pylist()[0]
    assert row["bytes_layer"] == layer
    assert row["status"] == ("exact" if per_packet == 0 else "differs")
    assert result.totals["bytes_layer"][layer] == 1


def test_no_layer_judgement_when_packets_differ():
    result = score(ref_table(rec(1, packets=10)), col_table(rec(1, packets=9, nbytes=1126)))
    assert result.flows.column("bytes_layer").to_pylist() == [None]


# ---- times ----------------------------------------------------------------------------------


def test_times_within_the_tolerance_are_exact_and_beyond_are_not():
    reference = ref_table(rec(1, 10.0, 11.0), rec(2, 10.0, 11.0))
    collected = col_table(rec(1, 10.0 - 0.0009, 11.0), rec(2, 10.0 - 0.0011, 11.0))
    result = score(reference, collected)
    assert statuses(result) == ["exact", "differs"]
    errors = result.flows.column("first_error_ns").to_pylist()
    assert errors == [-900_000, -1_100_000]
    assert statuses(score(reference, collected, tolerance_ns=2 * MS)) == ["exact", "exact"]
    assert DEFAULT_TOLERANCE_NS == MS


def test_time_error_and_delay_quantiles():
    n = 101
    reference = ref_table(*(rec(i, 0, 1) for i in range(n)))
    collected = col_table(
        *(rec(i, -i / 1e6, 1, received_ns=T0 + 16 * S + i * MS) for i in range(n))
    )  # first error -i us; expiry at last + 15 s = 16 s: delay i ms
    t = score(reference, collected).totals
    assert t["first_error_ns"] == {
        "min": -100_000,
        "p50": -50_000,
        "p90": -10_000,
        "p99": -1_000,
        "max": 0,
    }
    assert t["last_error_ns"]["max"] == 0
    assert t["export_delay_ns"] == {
        "min": 0,
        "p50": 50 * MS,
        "p90": 90 * MS,
        "p99": 99 * MS,
        "max": 100 * MS,
    }


def test_no_received_time_no_delay():
    t = score(ref_table(rec(1)), col_table(rec(1))).totals
    assert t["export_delay_ns"] is None and t["exact"] == 1


# ---- flags ----------------------------------------------------------------------------------


def test_tcp_flag_unions():
    reference = ref_table(rec(1, proto=6, flags=0x1B), rec(2, proto=6, flags=0x1B), rec(3))
    collected = col_table(rec(1, proto=6, flags=0x1B), rec(2, proto=6, flags=0x12), rec(3))
    result = score(reference, collected)
    assert result.flows.column("flags_equal").to_pylist() == [True, False, None]
    assert (result.totals["flags_equal"], result.totals["flags_differ"]) == (1, 1)
    assert statuses(result) == ["exact", "exact", "exact"]  # flags are reported, not judged


# ---- inputs ---------------------------------------------------------------------------------


def test_a_plain_record_table_as_reference():
    plain = ref_table(rec(1)).drop_columns(["end", "expire_ns"])
    result = score(plain, col_table(rec(1, received_ns=T0)))
    assert statuses(result) == ["exact"]
    assert result.flows.column("export_delay_ns").to_pylist() == [None]


def test_bad_arguments():
    with pytest.raises(ValueError, match="tolerance_ns"):
        score(ref_table(), col_table(), tolerance_ns=-1)
    with pytest.raises(ValueError, match="'packets'"):
        score(ref_table(rec(1)), col_table(rec(1)).drop_columns(["packets"]))


def test_ports_out_of_range_take_the_full_matching():
    """A collector that gave a negative port: no fast path, the same statuses."""
    reference = ref_table(rec(1), rec(2))
    collected = col_table(rec(1), rec(-5))
    assert statuses(score(reference, collected)) == ["exact", "missing", "spurious"]


# ---- properties -----------------------------------------------------------------------------


@st.composite
def references(draw) -> pa.Table:
    """Records of a few keys, each key's records apart in time (as a meter cuts them)."""
    records = []
    for key in range(draw(st.integers(1, 6))):
        t = draw(st.integers(0, 5)) * 1.0
        for _ in range(draw(st.integers(1, 4))):
            length = draw(st.integers(0, 20)) / 2
            packets = draw(st.integers(2, 50))
            records.append(rec(key, t, t + length, packets, packets * 60, proto=6, flags=0x10))
            t += length + draw(st.integers(1, 30))
    return ref_table(*records)


@settings(max_examples=80, deadline=None)
@given(reference=references())
def test_a_reference_against_itself_is_all_exact(reference):
    collected = reference.drop_columns(["end", "expire_ns"])
    result = score(reference, collected)
    assert set(statuses(result)) == {"exact"}
    assert result.totals["exact"] == reference.num_rows


@settings(max_examples=80, deadline=None)
@given(reference=references(), data=st.data())
def test_dropped_split_and_merged_records_are_classified(reference, data):
    rows = reference.drop_columns(["end", "expire_ns"]).to_pylist()
    n = len(rows)
    action = data.draw(st.lists(st.sampled_from(["keep", "drop", "split"]), min_size=n, max_size=n))
    merge = data.draw(st.booleans())
    collected: list[dict] = []
    want: list[str] = []
    for r, what in zip(rows, action, strict=True):
        if what == "drop":
            want.append("missing")
        elif what == "split" and r["last_ns"] - r["first_ns"] >= 4 * MS:
            half = r["packets"] // 2
            mid = (r["first_ns"] + r["last_ns"]) // 2
            collected.append(r | {"packets": half, "bytes": half * 60, "last_ns": mid})
            rest = r["packets"] - half
            collected.append(r | {"packets": rest, "bytes": rest * 60, "first_ns": mid + MS + 1})
            want.append("split")
        else:
            collected.append(dict(r))
            want.append("exact")
    if merge and n >= 2 and rows[0]["sport"] == rows[1]["sport"] and action[:2] == ["keep"] * 2:
        # the first two records of key 0, merged into one
        a, b = collected[0], collected[1]
        collected[:2] = [
            a
            | {
                "packets": a["packets"] + b["packets"],
                "bytes": a["bytes"] + b["bytes"],
                "last_ns": b["last_ns"],
            }
        ]
        want[:2] = ["merged", "merged"]
    order = data.draw(st.permutations(range(len(collected))))
    result = score(reference, col_table(*(collected[i] for i in order)))
    assert statuses(result) == want
    assert result.totals["missing"] == want.count("missing")
    if collected:
        packets = np.array([c["packets"] for c in collected]).sum()
        assert result.totals["packets_collected"] == packets
