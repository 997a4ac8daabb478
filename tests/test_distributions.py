"""ntgcore.distributions: every YAML form, its engine bins, its mean and samples, and the errors
of hostile values."""

import math

import numpy as np
import pytest
from pydantic import ValidationError

from ntgcore.distributions import (
    MAX_BINS,
    MAX_VALUE,
    MAX_WEIGHT,
    TAIL,
    as_distribution,
    bins_mean,
    read_values,
)

FORMS = [
    (400, "bytes"),
    ("64k", "bytes"),
    ("2ms", "time"),
    ({"uniform": {"min": 100, "max": 900}}, "bytes"),
    ({"exponential": {"mean": "2ms"}}, "time"),
    ({"lognormal": {"median": 400, "sigma": 1.2}}, "bytes"),
    ({"pareto": {"scale": 1000, "shape": 1.3}}, "bytes"),
    ({"weibull": {"scale": "2s", "shape": 0.7}}, "time"),
    ({"empirical": {"values": [60, 1460, 9000], "weights": [5, 3, 1]}}, "bytes"),
    ({"histogram": {"edges": [0, 100, 1000, 10000], "counts": [10, 5, 1]}}, "bytes"),
    ({"quantiles": [40, 80, 200, 1000, 60000]}, "bytes"),
    ({"choices": {443: 70, 80: 25, 8080: 5}}, "count"),
]


def _valid_bins(bins):
    assert 1 <= len(bins) <= MAX_BINS
    for lo, hi, w in bins:
        assert all(isinstance(x, int) for x in (lo, hi, w))
        assert 0 <= lo <= hi <= MAX_VALUE
        assert 1 <= w <= MAX_WEIGHT


@pytest.mark.parametrize(("form", "unit"), FORMS, ids=[str(f)[:30] for f, _ in FORMS])
def test_every_form_makes_integer_bins_and_a_close_sample_mean(form, unit):
    d = as_distribution(form, unit)
    bins = d.to_bins()
    _valid_bins(bins)
    sample = d.sample(np.random.default_rng(7), 200_000)
    assert sample.min() >= 0
    # the sample's mean lies within 5 standard errors of the distribution's
    se = sample.std() / math.sqrt(len(sample))
    assert abs(sample.mean() - d.mean()) <= 5 * se + 1e-9 * d.mean()
    # the engine's bins have about the same mean (integer rounding, 4096 bins)
    assert bins_mean(bins) == pytest.approx(d.mean(), rel=0.02, abs=1)


def test_units_of_the_short_forms():
    assert as_distribution("64k", "bytes").to_bins() == [(65536, 65536, 1)]
    assert as_distribution("2ms", "time").to_bins() == [(2_000_000, 2_000_000, 1)]
    assert as_distribution(1500, "time").to_bins() == [(1500, 1500, 1)]  # a bare number is ns
    d = as_distribution({"exponential": {"mean": "1.5ms"}}, "time")
    assert d.exponential.mean == 1_500_000


def test_parametric_means_match_the_textbook_cut_at_the_tail():
    rng = np.random.default_rng(1)
    # exponential: E[X | X < c] = m - c (1 - TAIL) / TAIL
    m = 2_000_000.0
    c = -m * math.log(1 - TAIL)
    want = m - c * (1 - TAIL) / TAIL
    d = as_distribution({"exponential": {"mean": m}}, "time")
    assert d.mean() == pytest.approx(want, rel=1e-3)
    assert d.sample(rng, 300_000).mean() == pytest.approx(m, rel=0.01)
    # Pareto cut at c: alpha xm^alpha (xm^(1-alpha) - c^(1-alpha)) / ((alpha-1) (1-(xm/c)^alpha))
    xm, a, cap = 1000.0, 1.3, 1_000_000.0
    want = a * xm**a * (xm ** (1 - a) - cap ** (1 - a)) / ((a - 1) * (1 - (xm / cap) ** a))
    d = as_distribution({"pareto": {"scale": xm, "shape": a, "max": cap}}, "bytes")
    assert d.mean() == pytest.approx(want, rel=2e-3)
    # lognormal, barely cut: exp(mu + sigma^2 / 2)
    d = as_distribution({"lognormal": {"median": 400, "sigma": 0.5}}, "bytes")
    assert d.mean() == pytest.approx(400 * math.exp(0.125), rel=2e-3)
    assert d.sample(rng, 300_000).mean() == pytest.approx(400 * math.exp(0.125), rel=0.01)
    # Weibull: scale Gamma(1 + 1/shape)
    d = as_distribution({"weibull": {"scale": "2s", "shape": 1.5}}, "time")
    assert d.mean() == pytest.approx(2e9 * math.gamma(1 + 1 / 1.5), rel=2e-3)
    assert d.sample(rng, 300_000).mean() == pytest.approx(2e9 * math.gamma(1 + 1 / 1.5), rel=0.01)


def test_quantile_bins_are_equal_probability():
    d = as_distribution({"lognormal": {"median": 100_000, "sigma": 1.0}}, "bytes")
    bins = d.to_bins(256)
    assert len(bins) == 256 and len(d.to_bins()) == 4096
    assert {w for _, _, w in bins} == {1}
    assert all(b[0] > a[1] for a, b in zip(bins, bins[1:]))  # increasing, disjoint
    assert bins[-1][1] == round(d.quantile([1.0])[0])
    # each bin holds 1/256 of a large sample
    x = d.sample(np.random.default_rng(3), 256_000)
    edges = np.array([lo for lo, _, _ in bins[1:]])
    counts = np.bincount(np.searchsorted(edges, np.rint(x), side="right"), minlength=256)
    assert counts.min() > 700 and counts.max() < 1300  # mean 1000, sd about 32
    # a narrow one: equal neighbours merge, their weights add up
    narrow = as_distribution({"uniform": {"min": 10, "max": 12}}, "count")
    assert narrow.to_bins() == [(10, 12, 1)]
    tiny = as_distribution({"exponential": {"mean": 2}}, "count").to_bins(256)
    assert sum(w for _, _, w in tiny) == 256 and len(tiny) < 256


def test_exact_forms_keep_values_and_weights():
    d = as_distribution({"empirical": {"values": [9000, 60, 1460, 60], "weights": [1, 2, 3, 3]}})
    assert d.to_bins() == [(60, 60, 5), (1460, 1460, 3), (9000, 9000, 1)]
    h = as_distribution({"histogram": {"edges": [0, 100, 1000, 10000], "counts": [10, 5, 0]}})
    assert h.to_bins() == [(0, 99, 10), (100, 999, 5)]
    q = as_distribution({"quantiles": [40, 80, 200]})
    assert q.to_bins() == [(40, 79, 1), (80, 200, 1)]
    f = as_distribution({"empirical": {"values": [1, 2], "weights": [0.25, 0.75]}})
    (_, _, w1), (_, _, w2) = f.to_bins()
    assert w2 == MAX_WEIGHT and w1 / w2 == pytest.approx(1 / 3, rel=1e-9)


def test_max_cuts_every_form():
    d = as_distribution({"empirical": {"values": [60, 1460, 9000]}, "max": 2000})
    assert d.to_bins() == [(60, 60, 1), (1460, 1460, 1)]
    u = as_distribution({"uniform": {"min": 0, "max": 1000}, "max": 499}, "bytes")
    assert u.bounds == (0, 499)
    p = as_distribution({"pareto": {"scale": 1000, "shape": 0.5, "max": 5000}}, "bytes")
    assert p.bounds[1] == 5000
    e = as_distribution({"exponential": {"mean": 1000}}, "bytes")
    assert e.bounds[1] == round(-1000 * math.log(1 - TAIL))


def test_a_file_of_values(tmp_path):
    (tmp_path / "sizes.csv").write_text("# sizes\n60,5\n1460, 3\n\n9000 # jumbo\n")
    d = as_distribution({"file": "sizes.csv"}, "bytes", base=tmp_path)
    assert d.form == "file"
    assert d.to_bins() == [(60, 60, 5), (1460, 1460, 3), (9000, 9000, 1)]
    (tmp_path / "t.csv").write_text("1ms\n2ms,3\n")
    t = as_distribution({"file": "t.csv"}, "time", base=tmp_path)
    assert t.to_bins() == [(1_000_000, 1_000_000, 1), (2_000_000, 2_000_000, 3)]
    values, weights = read_values(tmp_path / "sizes.csv", "bytes")
    assert values == [60, 1460, 9000] and weights == [5, 3, 1]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("60\n1460\nabc\n", ":3: "),
        ("60\n-5\n", ":2: "),
        ("60\n1,2,3\n", ":2: "),
        ("60\n70,nan\n", ":2: "),
        ("60\n70,-1\n", ":2: "),
        ("60\n1e400\n", ":2: "),
        ("# nothing\n\n", "no values"),
    ],
)
def test_a_bad_file_line_is_named(tmp_path, text, where):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(ValidationError) as exc:
        as_distribution({"file": "bad.csv"}, "bytes", base=tmp_path)
    message = str(exc.value)
    assert "bad.csv" in message and where in message


def test_a_missing_or_binary_file(tmp_path):
    with pytest.raises(ValidationError, match="no such file"):
        as_distribution({"file": "nope.csv"}, base=tmp_path)
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValidationError, match="not UTF-8"):
        as_distribution({"file": "bin.csv"}, base=tmp_path)


@pytest.mark.parametrize(
    ("form", "message"),
    [
        (float("nan"), "finite"),
        (-1, ">= 0"),
        (2**64, r"2\^63"),
        ("1e999k", "between"),
        ({"exponential": {"mean": float("inf")}}, "finite"),
        ({"exponential": {"mean": 0}}, "greater than 0"),
        ({"lognormal": {"median": 400, "sigma": float("nan")}}, "finite"),
        ({"lognormal": {"median": 400, "sigma": -1}}, "greater than 0"),
        ({"pareto": {"scale": 1000, "shape": 0.05}}, "give `max`"),
        ({"weibull": {"scale": 1e18, "shape": 0.01}}, "give `max`"),
        ({"pareto": {"scale": 1000, "shape": 1.2, "max": 10}}, "below every value"),
        ({"empirical": {"values": []}}, "at least 1"),
        ({"empirical": {"values": [1, 2], "weights": [0, 0]}}, "sum to 0"),
        ({"empirical": {"values": [1, 2], "weights": [1]}}, "one weight per value"),
        ({"choices": {}}, "at least 1"),
        ({"choices": {80: 0}}, "sum to 0"),
        ({"histogram": {"edges": [0, 10], "counts": [1, 2]}}, "one count per bin"),
        ({"histogram": {"edges": [10, 10], "counts": [1]}}, "increase"),
        ({"quantiles": [5, 3]}, "must not decrease"),
        ({"quantiles": [5]}, "at least 2"),
        ({"uniform": {"min": 9, "max": 3}}, "larger than max"),
        ({"exponential": {"mean": 5}, "uniform": {"min": 1, "max": 2}}, "exactly one"),
        ({}, "exactly one"),
        ({"gamma": {"k": 1}}, "Extra inputs"),
        ({"uniform": {"min": 1, "max": 9}, "cycle": True}, "cycle: needs `empirical` or"),
        ({"choices": {80: 1.5, 443: 1}, "cycle": True}, "cycle: needs whole weights"),
        ({"empirical": {"values": [1.5, 2]}, "cycle": True}, "cycle: needs whole values"),
        ({"choices": {80: 2**20, 443: 1}, "cycle": True}, "at most 1,048,576 values a cycle"),
        ([1, 2], "expected a number"),
        (True, "expected a number"),
    ],
)
def test_hostile_values_are_refused(form, message):
    with pytest.raises(ValidationError, match=message):
        as_distribution(form, "bytes")


def test_scaled_stretches_every_value():
    d = as_distribution({"exponential": {"mean": "1ms"}}, "time")
    assert d.scaled(2.5).mean() == pytest.approx(2.5 * d.mean(), rel=1e-9)
    e = as_distribution({"empirical": {"values": [10, 20], "weights": [1, 3]}, "max": 15})
    assert e.scaled(2).to_bins() == [(20, 20, 1)]
    with pytest.raises(ValueError):
        d.scaled(float("nan"))
    with pytest.raises(ValidationError):
        as_distribution(2**62).scaled(4.0)


def test_many_distinct_values_are_compressed_to_the_engine_limit():
    values = list(range(MAX_BINS + 10))
    d = as_distribution({"empirical": {"values": values}})
    bins = d.to_bins()
    _valid_bins(bins)
    assert len(bins) <= MAX_BINS
    assert bins_mean(bins) == pytest.approx(d.mean(), rel=1e-3)
