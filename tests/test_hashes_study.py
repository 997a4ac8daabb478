"""Seed 002's hash study (analysis/hashstudy.py, `testbed hash-study`): the flows it builds, its
statistics against closed forms, what it writes, and the errors it gives before running."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import limit_memory

from analysis import hashstudy as hs
from ntgcore.errors import BadInput
from testbed.cli import main


@pytest.fixture(scope="module", autouse=True)
def _lib(hashlib_path):
    return hashlib_path


# --- the flows -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix,first,last",
    [(24, "100.100.0.1", "100.100.0.254"), (16, "100.100.0.1", "100.100.255.254")],
)
def test_sources_run_through_the_prefixs_hosts_as_in_seed_002(prefix, first, last):
    n = hs.hosts(prefix) * 2 + 3
    cols = hs.flow_columns(prefix, n, seed=1)
    as_ip = lambda v: ".".join(str((int(v) >> s) & 255) for s in (24, 16, 8, 0))
    assert as_ip(cols["src"].min()) == first and as_ip(cols["src"].max()) == last
    # the destination port is one per block of flows, one up for the next block
    assert cols["dport"][0] == cols["dport"][hs.hosts(prefix) - 1] == hs.DPORT0
    assert cols["dport"][hs.hosts(prefix)] == hs.DPORT0 + 1
    # the source port goes up by one per flow
    assert np.all(np.diff(cols["sport"][:1000].astype(int)) == 1)


def test_every_flow_of_a_long_24_run_is_distinct_even_without_the_random_destination():
    cols = hs.flow_columns(24, 254 * 300, seed=0)
    triples = np.stack(
        [cols["src"], cols["sport"].astype(np.uint32), cols["dport"].astype(np.uint32)], axis=1
    )
    assert len(np.unique(triples, axis=0)) == len(triples)


def test_the_flowid_puts_the_smaller_address_first_so_both_directions_are_one_key():
    cols = hs.flow_columns(16, 1000, seed=5)
    back = {"src": cols["dst"], "dst": cols["src"], "sport": cols["dport"], "dport": cols["sport"]}
    keys, keys_back = hs.flow_keys(cols, "flowid"), hs.flow_keys(back, "flowid")
    assert keys.shape == (1000, 37)
    assert np.array_equal(keys, keys_back)
    lo = keys[:, 0:4].copy().view(">u4").ravel()
    hi = keys[:, 18:22].copy().view(">u4").ravel()
    assert np.all(lo <= hi)
    assert np.all(keys[:, 4:16] == 0) and np.all(keys[:, 36] == hs.PROTO)


def test_the_tuple_key_is_the_engines_packed_5_tuple():
    from analysis import hashing

    cols = hs.flow_columns(24, 3, seed=5)
    keys = hs.flow_keys(cols, "tuple")
    t = hashing.make_tuple(
        int(cols["src"][2]).to_bytes(4, "big"),
        int(cols["dst"][2]).to_bytes(4, "big"),
        int(cols["sport"][2]),
        int(cols["dport"][2]),
        hs.PROTO,
    )
    assert keys[2].tobytes() == hashing.tuple_key(t)


# --- the statistics ------------------------------------------------------------------------------


def test_the_birthday_expectation_is_about_n_squared_over_2m():
    for n in (1000, 250_000, 1_000_000, 16_000_000):
        approx = n * (n - 1) / 2 / 2**32
        assert hs.birthday_expected(n) == pytest.approx(approx, rel=n / 2**32 + 1e-6)
    assert hs.birthday_expected(1_000_000) == pytest.approx(116.4, abs=0.1)


def test_chi_square_tail_matches_closed_forms_and_tables():
    for x in (0.5, 2.0, 10.0):
        assert hs.chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-12)
    assert hs.chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-9)
    assert hs.chi2_sf(123.2252, 99) == pytest.approx(0.05, abs=1e-4)  # the 5 % point of 99 df
    assert hs.chi2_sf(0.0, 99) == 1.0


def test_the_poisson_test_equals_its_sums():
    lam = 3.0
    pmf = [math.exp(-lam) * lam**k / math.factorial(k) for k in range(60)]
    for k in (0, 1, 3, 7, 12):
        lower, upper = sum(pmf[: k + 1]), sum(pmf[k:])
        assert hs.poisson_two_sided(k, lam) == pytest.approx(
            min(1.0, 2 * min(lower, upper)), rel=1e-9
        )


def test_spread_bins_split_the_32_bit_range_in_100():
    edges = [-(-k * 2**32 // 100) for k in range(100)]
    v = np.array([0, 2**32 - 1] + edges + [e - 1 for e in edges[1:]], dtype=np.uint32)
    counts = hs.spread_counts(v)
    assert counts[0] == 3 and counts[99] == 2 and counts.sum() == len(v)
    assert hs.bin_expected(10**6).sum() == pytest.approx(10**6)


def test_memory_beyond_the_machine_is_refused_with_what_it_needs():
    assert hs.memory_problem([1_000_000], available=2**40) is None
    msg = hs.memory_problem([16_000_000], available=2**30)
    assert "--flows 16,000,000 needs about 2.4 GiB and 1.0 GiB are available" in msg


# --- the study -----------------------------------------------------------------------------------


def test_a_small_study_finds_the_symmetric_toeplitz_key_far_above_the_bound(tmp_path):
    # The key 0x6d5a repeated has a 16-bit period: Toeplitz with it depends only on the XOR of
    # the input's 16-bit words, so 20K flows share at most 65536 values.
    req = hs.StudyRequest(
        hashes=["crc32c", "toeplitz", "superfasthash"],
        flows=[10_000, 20_000],
        prefixes=[16, 24],
        repeats=2,
    )
    study = hs.run_study(req)
    assert len(study.rows) == 3 * 2 * 2 * 2
    v = study.verdicts.set_index("hash")
    assert v.loc["toeplitz", "verdict"] == "above the bound"
    assert v.loc["toeplitz", "collision_ratio"] > 100
    assert v.loc["crc32c", "verdict"] == "at the bound"  # far too few keys to tell it apart
    paths = hs.write_study(study, tmp_path / "study")
    for p in paths.values():
        assert p.is_file() and p.stat().st_size > 0, p
    rows = pd.read_parquet(paths["rows"])
    assert set(rows["flows"]) == {10_000, 20_000}
    assert (rows["collisions"] == rows["flows"] - rows["distinct"]).all()
    spread = pd.read_parquet(paths["spread"])
    assert len(spread) == 3 * 2 * 2 * hs.BINS
    assert (spread.groupby(["hash", "prefix", "repeat"])["count"].sum() == 20_000).all()
    metrics = json.loads(paths["metrics"].read_text())
    assert metrics["seed_002"]["collision_pct_per_million"] == 0.015
    report = paths["report"].read_text()
    assert "0.015 %" in report and "2.5 M hashes/s" in report and "| toeplitz |" in report


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--flows", "0"], "--flows 0: a collision needs at least 2 flows"),
        (["--flows", "17M"], "--flows 17000000: at most 16,000,000"),
        (["--hashes", "crc32c,md5"], "unknown hash 'md5'; known: coralreef, lookup3"),
        (["--prefixes", "12"], "--prefixes 12: the study has /8, /16 and /24"),
        (["--keys", "packet"], "--keys packet: known keys are flowid, tuple"),
        (["--repeats", "0"], "--repeats 0: must be >= 1"),
    ],
)
def test_bad_requests_exit_2_before_anything_is_written(argv, message, tmp_path, capsys):
    out = tmp_path / "study"
    assert main(["hash-study", *argv, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_the_command_writes_the_study_and_prints_a_verdict_per_hash(tmp_path, capsys):
    out = tmp_path / "study"
    rc = main(
        [
            "hash-study",
            "--hashes",
            "lookup3,toeplitz",
            "--flows",
            "5K,10K",
            "--prefixes",
            "24",
            "--keys",
            "flowid,tuple",
            "--repeats",
            "1",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "toeplitz       flowid  above the bound" in text
    assert "toeplitz       tuple   above the bound" in text
    assert (out / "report.md").is_file() and (out / "collisions.png").is_file()


def test_bad_input_raises_bad_input_from_the_api_too():
    with pytest.raises(BadInput, match="no hashes"):
        hs.check_request(hs.StudyRequest(hashes=[]))


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--repeats", "1000000000"],
            "argument --repeats: too large: at most 100 (got 1,000,000,000)",
        ),
        (
            ["--repeats", "7" * 100_001],
            "argument --repeats: too large: a number of 100,001 digits; at most 100",
        ),
        (["--repeats", "-1"], "argument --repeats: must be >= 0 (got -1)"),
        (
            [
                "--hashes",
                "lookup3,crc32c",
                "--keys",
                "flowid,tuple",
                "--repeats",
                "100",
                "--flows",
                ",".join(str(n) for n in range(2, 900)),
            ],
            "the study would make 1,197,600 result rows",
        ),  # 2x2x3x100x(898+100)
    ],
)
def test_counts_are_refused_before_anything_is_allocated(args, message, tmp_path):
    """`hash-study --repeats 1000000000` held 2.9 GB after 60 s, before writing anything; now exit 2
    at once, in a child held to 2 GiB of address space."""
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "study"
    p = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "hash-study", *args, "--out", str(out), "-q"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit_memory(),
    )
    assert p.returncode == 2, p.stderr[-2000:]
    assert message in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()


def test_the_api_refuses_too_many_repeats_too():
    with pytest.raises(BadInput, match=r"--repeats 1,000,000,000: too large: at most 100$"):
        hs.check_request(hs.StudyRequest(hashes=["crc32c"], repeats=10**9))
