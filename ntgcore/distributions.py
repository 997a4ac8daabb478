"""Distributions of the quantities a scenario draws: bytes of a request, time between two session
starts, rounds of a session, a port, a host. Reference: docs/scenario.md, "Distributions".

One model, `Distribution`, holds any of the forms a scenario may write (fixed, uniform,
exponential, lognormal, Pareto, Weibull, empirical values, a histogram, quantiles, a file of values,
weighted choices), in the field's base unit (ns for times, bytes for sizes, plain numbers for
counts, ports and host offsets). A field declares its unit with `distribution(unit)`, whose
validator reads the YAML forms (`2ms`, `64k`, `{file: sizes.csv}`) into that model.

Every distribution becomes, for the engine, at most MAX_BINS integer bins `(lo, hi, weight)`: a
draw picks a bin with probability weight / sum of weights, then a value uniform in lo..hi
(`to_bins`). Parametric forms are cut at `max`, or without it at their TAIL (0.9999) quantile,
and become `n` equal-probability bins of the cut distribution; the other forms are exact (a value
or a range per bin), compressed into MAX_BINS equal-probability bins only when they have more.
`mean()` and `sample(rng, n)` describe the same cut distribution (for tests and `testbed learn`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from statistics import NormalDist
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)

from .errors import BadInput
from .files import read_bounded
from .units import parse_duration_ns, parse_size_bytes

Unit = Literal["time", "bytes", "count"]
MAX_VALUE = 2**63 - 1  # the engine's bins hold values below 2^63
MAX_WEIGHT = 2**32 - 1  # the engine's bin weights are 1 .. 2^32-1
MAX_BINS = 65536  # bins of one engine `dist` line
DEFAULT_BINS = 4096  # equal-probability bins of a parametric distribution (see to_bins)
TAIL = 0.9999  # where a parametric distribution without `max` is cut
MAX_VALUES = 65536  # values of a list written in the scenario
MAX_DECK = 2**20  # the engine's `P:` deck: at most this many values per cycle (sum of weights)
MAX_FILE_LINES = 1_000_000  # lines of a `file:` of values
MAX_FILE_BYTES = 64 * 2**20
_MEAN_POINTS = 1 << 16  # quantile points of the numerical mean of a parametric form
_NORMAL = NormalDist()
_FORMS = (
    "fixed",
    "uniform",
    "exponential",
    "lognormal",
    "pareto",
    "weibull",
    "empirical",
    "histogram",
    "quantiles",
    "file",
    "choices",
)
_PARAMETRIC = ("exponential", "lognormal", "pareto", "weibull")

Bin = tuple[int, int, int]
_QUANTITY_SCHEMA = WithJsonSchema(
    {
        "anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}],
        "description": "A number in the field's unit (ns, bytes, a count), or with its unit: "
        "2ms, 64k.",
    }
)
Value = Annotated[float, Field(ge=0, le=MAX_VALUE), _QUANTITY_SCHEMA]
Positive = Annotated[float, Field(gt=0, le=MAX_VALUE), _QUANTITY_SCHEMA]
Weight = Annotated[float, Field(ge=0, le=1e300)]


class _Form(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Uniform(_Form):
    """Any value in [min, max], equally likely."""

    min: Value
    max: Value

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.min > self.max:
            raise ValueError(f"min ({self.min:g}) is larger than max ({self.max:g})")
        return self


class Exponential(_Form):
    """Memoryless (Poisson arrivals): `mean`."""

    mean: Positive
    max: Value | None = Field(None, description="Cut here (default: the 0.9999 quantile).")


class Lognormal(_Form):
    """exp of a normal: `median` (= exp(mu)) and `sigma` (of the log)."""

    median: Positive
    sigma: Annotated[float, Field(gt=0, le=50)]
    max: Value | None = Field(None, description="Cut here (default: the 0.9999 quantile).")


class Pareto(_Form):
    """Heavy tail: `scale` is the minimum x_m, `shape` alpha; P(X > x) = (x_m / x)^alpha."""

    scale: Positive
    shape: Annotated[float, Field(gt=0, le=1e6)]
    max: Value | None = Field(None, description="Cut here (default: the 0.9999 quantile).")


class Weibull(_Form):
    """P(X > x) = exp(-(x / scale)^shape)."""

    scale: Positive
    shape: Annotated[float, Field(gt=0, le=1e6)]
    max: Value | None = Field(None, description="Cut here (default: the 0.9999 quantile).")


class Empirical(_Form):
    """These values, with these weights (default: equally likely)."""

    values: list[Value] = Field(min_length=1, max_length=MAX_FILE_LINES)
    weights: list[Weight] | None = Field(None, max_length=MAX_FILE_LINES)
    max: Value | None = Field(None, description="Values above it are left out.")

    @model_validator(mode="after")
    def _paired(self) -> Empirical:
        if self.weights is not None and len(self.weights) != len(self.values):
            raise ValueError(
                f"{len(self.values)} values but {len(self.weights)} weights: give one weight "
                f"per value"
            )
        return self


class Histogram(_Form):
    """Bin i holds [edges[i], edges[i+1]) (the last one its upper edge too), with counts[i]
    values spread evenly in it."""

    edges: list[Value] = Field(min_length=2, max_length=MAX_VALUES + 1)
    counts: list[Weight] = Field(min_length=1, max_length=MAX_VALUES)
    max: Value | None = Field(None, description="Values above it are left out.")

    @model_validator(mode="after")
    def _shape(self) -> Histogram:
        if len(self.counts) != len(self.edges) - 1:
            raise ValueError(
                f"{len(self.edges)} edges make {len(self.edges) - 1} bins but there are "
                f"{len(self.counts)} counts: give one count per bin"
            )
        if any(b <= a for a, b in zip(self.edges, self.edges[1:])):
            raise ValueError("edges must increase")
        return self


class Distribution(_Form):
    """One of the forms (exactly one key), plus an optional cap `max`."""

    fixed: Value | None = Field(None, description="Always this value (a plain number says it).")
    uniform: Uniform | None = None
    exponential: Exponential | None = None
    lognormal: Lognormal | None = None
    pareto: Pareto | None = None
    weibull: Weibull | None = None
    empirical: Empirical | None = None
    histogram: Histogram | None = None
    quantiles: list[Value] | None = Field(
        None,
        min_length=2,
        max_length=MAX_VALUES + 1,
        description="Values at equally spaced probabilities 0, 1/k, ..., 1 (evenly spread "
        "between two neighbours).",
    )
    file: str | None = Field(
        None,
        description="A file of values, one a line, or `value,weight` (relative to the "
        "scenario; `#` starts a comment).",
    )
    choices: dict[float, Weight] | None = Field(
        None, min_length=1, max_length=MAX_VALUES, description="value: weight."
    )
    max: Value | None = Field(None, description="A cap: values above it are left out.")
    cycle: bool = Field(
        False,
        description="Ports only, with `empirical` or `choices` of whole weights: draw without "
        "replacement, each value exactly `weight` times in every cycle of sum(weights) "
        "instances, in a shuffled order (no two instances of a cycle share a port).",
    )

    @model_validator(mode="after")
    def _one_form(self) -> Distribution:
        given = [f for f in _FORMS if getattr(self, f) is not None]
        if "file" in given and self.empirical is not None:
            given.remove("empirical")  # a file's values, read
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of {', '.join(_FORMS)}"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.file is not None and self.empirical is None:
            raise ValueError("`file`: its values were not read (a scenario field reads them)")
        if self.quantiles is not None and any(
            b < a for a, b in zip(self.quantiles, self.quantiles[1:])
        ):
            raise ValueError("quantiles must not decrease")
        self._check()
        if self.cycle:
            self._check_deck()
        return self

    def _check_deck(self) -> None:
        if self.form not in ("empirical", "choices", "file"):
            raise ValueError(f"cycle: needs `empirical` or `choices` (got {self.form})")
        values = (
            list(self.choices)
            if self.choices is not None
            else self.empirical.values
            if self.empirical is not None
            else []
        )
        bins = self.to_bins()
        if any(v != int(v) for v in values) or any(lo != hi for lo, hi, _ in bins):
            raise ValueError("cycle: needs whole values (a value that is not an integer)")
        given = (
            list(self.choices.values())
            if self.choices is not None
            else list(self.empirical.weights or [1] * len(self.empirical.values))
            if self.empirical is not None
            else []
        )
        if any(w != int(w) for w in given):
            raise ValueError("cycle: needs whole weights (each is how often its value is used)")
        total = sum(w for _, _, w in bins)
        if total > MAX_DECK:
            raise ValueError(
                f"cycle: the weights add up to {total:,}; at most {MAX_DECK:,} values a cycle"
            )

    # -- the distribution ------------------------------------------------------------------

    @property
    def form(self) -> str:
        if self.file is not None:
            return "file"
        return next(f for f in _FORMS if getattr(self, f) is not None)

    @property
    def parametric(self) -> bool:
        return self.form in _PARAMETRIC

    @property
    def is_fixed(self) -> bool:
        lo, hi = self.bounds
        return lo == hi

    @property
    def cap(self) -> float | None:
        inner = getattr(getattr(self, self.form), "max", None) if self.parametric else None
        if self.empirical is not None:
            inner = self.empirical.max
        if self.histogram is not None:
            inner = self.histogram.max
        caps = [c for c in (inner, self.max) if c is not None]
        return min(caps) if caps else None

    def _check(self) -> None:
        """Every problem the numbers can have, found now (validation), not at the first use."""
        if self.parametric:
            self._cut  # noqa: B018  (raises on a cut that is too far or below every value)
        else:
            self._pieces  # noqa: B018
        self.to_bins()

    @cached_property
    def _cut(self) -> tuple[float, float]:
        """(P, c): the cut value c and the probability P below it (uncut)."""
        cap = self.cap
        if cap is None:
            c = float(self._q0(np.array([TAIL]))[0])
            if not math.isfinite(c) or c > MAX_VALUE:
                raise ValueError(
                    f"{self.form}: its {TAIL} quantile is beyond 2^63 ({c:.3g}): "
                    f"give `max` to cut it"
                )
            return TAIL, c
        p = self._cdf0(cap)
        if p <= 0:
            raise ValueError(f"max ({cap:g}) is below every value of the {self.form}")
        return p, cap

    def _q0(self, p: np.ndarray) -> np.ndarray:
        """Quantiles of the parametric form, uncut."""
        out: np.ndarray
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            if self.exponential is not None:
                out = -self.exponential.mean * np.log1p(-p)
            elif self.lognormal is not None:
                z = np.array([_NORMAL.inv_cdf(x) if 0 < x < 1 else -math.inf for x in p.tolist()])
                out = self.lognormal.median * np.exp(self.lognormal.sigma * z)
            elif self.pareto is not None:
                out = self.pareto.scale * np.exp(-np.log1p(-p) / self.pareto.shape)
            else:
                assert self.weibull is not None
                out = self.weibull.scale * np.exp(np.log(-np.log1p(-p)) / self.weibull.shape)
        return out

    def _cdf0(self, x: float) -> float:
        if x <= 0:
            return 0.0
        if self.exponential is not None:
            return -math.expm1(-x / self.exponential.mean)
        if self.lognormal is not None:
            return _NORMAL.cdf(math.log(x / self.lognormal.median) / self.lognormal.sigma)
        if self.pareto is not None:
            return (
                0.0
                if x < self.pareto.scale
                else -math.expm1(self.pareto.shape * math.log(self.pareto.scale / x))
            )
        assert self.weibull is not None
        return -math.expm1(-math.exp(self.weibull.shape * math.log(x / self.weibull.scale)))

    @cached_property
    def _pieces(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(lo, hi, weight, closed) of a non-parametric form, sorted, cut at `max`, weights > 0:
        values spread evenly in [lo, hi) ([lo, hi] where closed; a point when lo == hi)."""
        if self.fixed is not None:
            lo = hi = np.array([self.fixed])
            w = np.ones(1)
        elif self.uniform is not None:
            lo, hi, w = np.array([self.uniform.min]), np.array([self.uniform.max]), np.ones(1)
        elif self.empirical is not None or self.choices is not None:
            if self.empirical is not None:
                v = np.array(self.empirical.values, dtype=float)
                ws = self.empirical.weights
                w = np.ones(len(v)) if ws is None else np.array(ws, dtype=float)
            else:
                assert self.choices is not None
                v = np.array(list(self.choices), dtype=float)
                w = np.array(list(self.choices.values()), dtype=float)
            lo, inverse = np.unique(v, return_inverse=True)
            w = np.bincount(inverse, weights=w, minlength=len(lo)).astype(float)
            hi = lo
        elif self.histogram is not None:
            e = np.array(self.histogram.edges, dtype=float)
            lo, hi, w = e[:-1], e[1:], np.array(self.histogram.counts, dtype=float)
        else:
            assert self.quantiles is not None
            q = np.array(self.quantiles, dtype=float)
            lo, hi, w = q[:-1], q[1:], np.ones(len(q) - 1)
        closed = np.zeros(len(lo), dtype=bool)
        closed[-1] = True
        if not np.all(np.isfinite(w)) or w.sum() <= 0 or not math.isfinite(float(w.sum())):
            raise ValueError(f"{self.form}: the weights sum to 0: give some a positive weight")
        cap = self.cap
        if cap is not None:
            keep = lo <= cap
            if not keep.any():
                raise ValueError(f"max ({cap:g}) is below every value of the {self.form}")
            lo, hi, w, closed = lo[keep], hi[keep], w[keep], closed[keep]
            over = hi > cap
            closed = closed | over
            width = np.where(hi > lo, hi - lo, 1.0)
            w = np.where(over, w * (cap - lo) / width, w)
            hi = np.minimum(hi, cap)
            w = np.where(over & (hi == lo), 0.0, w) if over.any() else w
        keep = w > 0
        if not keep.any():
            raise ValueError(f"{self.form}: no value with a positive weight below max")
        return lo[keep], hi[keep], w[keep], closed[keep]

    # -- what the engine and the tests use ----------------------------------------------

    def quantile(self, p: np.ndarray | list[float]) -> np.ndarray:
        """The values at probabilities `p` (0..1) of the (cut) distribution."""
        q = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
        if self.parametric:
            prob, c = self._cut
            cut: np.ndarray = np.minimum(np.maximum(self._q0(q * prob), 0.0), c)
            return cut
        lo, hi, w, _ = self._pieces
        cum = np.cumsum(w)
        total = cum[-1]
        i = np.minimum(np.searchsorted(cum, q * total, side="left"), len(w) - 1)
        before = cum[i] - w[i]
        frac = np.clip((q * total - before) / w[i], 0.0, 1.0)
        out: np.ndarray = lo[i] + frac * (hi[i] - lo[i])
        return out

    def mean(self) -> float:
        """The mean of the (cut) distribution: exact for the non-parametric forms, a midpoint
        sum over 65,536 equal-probability points of the quantile function for the others."""
        if self.parametric:
            return self._parametric_mean
        lo, hi, w, _ = self._pieces
        return float(np.sum(w * (lo + hi) / 2) / np.sum(w))

    @cached_property
    def _parametric_mean(self) -> float:
        p = (np.arange(_MEAN_POINTS) + 0.5) / _MEAN_POINTS
        return float(np.mean(self.quantile(p)))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n draws of the (cut) distribution, by its quantile function (float values)."""
        return self.quantile(rng.random(n))

    @cached_property
    def bounds(self) -> tuple[int, int]:
        """The smallest and the largest value the engine can draw."""
        bins = self.to_bins()
        return min(b[0] for b in bins), max(b[1] for b in bins)

    def to_bins(self, n: int = DEFAULT_BINS) -> list[Bin]:
        """The integer bins of the engine's `dist` line: equal-probability bins (n of them,
        neighbours that round to the same bin merged) for a parametric form or a form of more
        than MAX_BINS pieces, else one bin per value (or range) with its weight."""
        return self._bins(n)

    def _bins(self, n: int) -> list[Bin]:
        if n == DEFAULT_BINS:
            return self._default_bins
        return self._make_bins(n)

    @cached_property
    def _default_bins(self) -> list[Bin]:
        return self._make_bins(DEFAULT_BINS)

    def _make_bins(self, n: int) -> list[Bin]:
        if not 1 <= n <= MAX_BINS:
            raise ValueError(f"bins: 1 to {MAX_BINS} (got {n})")
        if self.parametric or len(self._pieces[0]) > MAX_BINS:
            edges = self.quantile(np.linspace(0.0, 1.0, (n if self.parametric else MAX_BINS) + 1))
            closed = np.zeros(len(edges) - 1, dtype=bool)
            closed[-1] = True
            bins = _integer_bins(edges[:-1], edges[1:], np.ones(len(edges) - 1), closed)
        else:
            bins = _integer_bins(*self._pieces)
        return bins

    def to_points(self, n: int) -> list[Bin]:
        """At most N single values with weights (bins LO == HI): the exact ones when the
        distribution has at most N values, else its N equal-probability slices each by its mean
        (rounded, at least 1), neighbours that round alike merged. For a field whose every value
        costs the engine a schedule of its own (a session's think and linger pauses)."""
        bins = self.to_bins()
        if len(bins) <= n and all(lo == hi for lo, hi, _ in bins):
            return bins
        lo = np.array([b[0] for b in bins], dtype=np.float64)
        hi = np.array([b[1] for b in bins], dtype=np.float64)
        w = np.array([b[2] for b in bins], dtype=np.float64)
        cum = np.cumsum(w) / w.sum()
        mid = (lo + hi) / 2
        slice_of = np.minimum((np.concatenate(([0.0], cum[:-1])) * n).astype(np.int64), n - 1)
        mass = np.bincount(slice_of, weights=w, minlength=n)
        total = np.bincount(slice_of, weights=w * mid, minlength=n)
        keep = mass > 0
        values = np.maximum(1, np.rint(total[keep] / mass[keep])).astype(np.int64)
        merged: dict[int, float] = {}
        for v, m in zip(values.tolist(), mass[keep].tolist()):
            merged[v] = merged.get(v, 0.0) + m
        top = max(merged.values())
        return [(v, v, max(1, round(m / top * MAX_WEIGHT))) for v, m in sorted(merged.items())]

    def scaled(self, factor: float) -> Distribution:
        """This distribution with every value multiplied by `factor` (> 0): an arrival made
        `factor` times longer; ValueError when a value leaves the bounds."""
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"scale factor must be a positive number (got {factor})")
        data = self.model_dump(exclude_none=True)
        form = self.form if self.form != "file" else "empirical"
        body = data[form]
        quantity = {"mean", "median", "scale", "min", "max", "values", "edges"}
        if form == "fixed":
            data[form] = body * factor
        elif form == "quantiles":
            data[form] = [x * factor for x in body]
        elif form == "choices":
            data[form] = {k * factor: w for k, w in body.items()}
        else:
            for k in quantity & set(body):
                body[k] = (
                    [x * factor for x in body[k]]
                    if isinstance(body[k], list)
                    else (body[k] * factor)
                )
        if "max" in data:
            data["max"] = data["max"] * factor
        return Distribution.model_validate(data)


def _integer_bins(lo: np.ndarray, hi: np.ndarray, w: np.ndarray, closed: np.ndarray) -> list[Bin]:
    """Integer bins of sorted pieces: a point rounds to its integer, a range [a, b) to
    round(a)..round(b)-1 ([a, b]: ..round(b)); equal neighbours merged; weights scaled to integers
    1..MAX_WEIGHT (kept as they are when they already are such integers)."""
    lo_f = np.rint(lo)
    hi_f = np.rint(hi)
    ranged = hi > lo
    hi_f = np.where(ranged & ~closed, np.maximum(lo_f, hi_f - 1), np.maximum(lo_f, hi_f))
    if len(hi_f) and (hi_f.max() >= 2.0**63 or lo_f.min() < 0):
        raise ValueError("values must lie in 0 .. 2^63-1")
    top = float(w.max())
    if np.all(w == np.rint(w)) and top <= MAX_WEIGHT:
        wf = np.rint(w)
    else:
        wf = np.rint(w / top * MAX_WEIGHT)
    keep = wf > 0
    lo_i, hi_i, wf = lo_f[keep].astype(np.int64), hi_f[keep].astype(np.int64), wf[keep]
    if not len(lo_i):
        return []
    new = np.ones(len(lo_i), dtype=bool)  # a run of equal neighbours is one bin
    new[1:] = (lo_i[1:] != lo_i[:-1]) | (hi_i[1:] != hi_i[:-1])
    group = np.cumsum(new) - 1
    merged = np.bincount(group, weights=wf)  # at most 2^32 x 65,536: exact in a float
    if merged.max() > MAX_WEIGHT:  # merged weights grew: scale once more
        merged = np.maximum(1, np.floor(merged * MAX_WEIGHT / merged.max()))
    return list(zip(lo_i[new].tolist(), hi_i[new].tolist(), merged.astype(np.int64).tolist()))


def bins_mean(bins: list[Bin]) -> float:
    """The mean value the engine draws from these bins."""
    total = sum(w for _, _, w in bins)
    return sum(w * (lo + hi) / 2 for lo, hi, w in bins) / total


# ------------------------------------------------------------------------------------------
# Reading the YAML forms in a field's unit


def _quantity(value: Any, unit: Unit, where: str) -> float:
    """A number in the unit's base (ns, bytes, a count): a bare number is taken as it is, a
    string is read with the unit (`2ms`, `64k`)."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected a number (got {value!r})")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where}: must be a finite number (got {value!r})")
        if value < 0:
            raise ValueError(f"{where}: must be >= 0 (got {value!r})")
        if value > MAX_VALUE:
            raise ValueError(f"{where}: at most 2^63-1 (got {value:.3g})")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            if unit == "time":
                # a bare number is ns here, as in the numbers above
                return float(
                    parse_duration_ns(text if re.search(r"[a-zA-Zµ]", text) else text + "ns")
                )
            if unit == "bytes":
                return float(parse_size_bytes(text))
            return _quantity(float(text), unit, where)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc} (got {value!r})") from None
    raise ValueError(f"{where}: expected a number (got {type(value).__name__})")


_QUANTITY_KEYS = {"mean", "median", "scale", "min", "max"}
_LIST_KEYS = {"values", "edges"}


def _convert(v: Any, unit: Unit, base: Path | None) -> Any:
    """The YAML form `v` with its quantities in the unit's base, a `file` read."""
    if isinstance(v, Distribution):
        return v
    if not isinstance(v, dict):
        if isinstance(v, list):
            raise ValueError("expected a number or one form such as {exponential: {mean: 2ms}}")
        return {"fixed": _quantity(v, unit, "value")}
    out = dict(v)
    for form, body in v.items():
        if form == "max" and body is not None:
            out[form] = _quantity(body, unit, "max")
        elif form == "fixed" and body is not None:
            out[form] = _quantity(body, unit, "fixed")
        elif form == "quantiles" and isinstance(body, list):
            out[form] = [_quantity(x, unit, f"quantiles[{i}]") for i, x in enumerate(body)]
        elif form == "choices" and isinstance(body, dict):
            out[form] = {_quantity(k, unit, f"choices key {k!r}"): w for k, w in body.items()}
        elif form == "file" and isinstance(body, str):
            values, weights = read_values(_resolve(body, base), unit)
            out["empirical"] = {"values": values, "weights": weights}
        elif isinstance(body, dict):
            inner = dict(body)
            for k, x in body.items():
                if k in _QUANTITY_KEYS and x is not None:
                    inner[k] = _quantity(x, unit, f"{form}.{k}")
                elif k in _LIST_KEYS and isinstance(x, list):
                    if len(x) > MAX_FILE_LINES:
                        raise ValueError(f"{form}.{k}: at most {MAX_FILE_LINES:,} values")
                    inner[k] = [_quantity(y, unit, f"{form}.{k}[{i}]") for i, y in enumerate(x)]
            out[form] = inner
    return out


def _resolve(name: str, base: Path | None) -> Path:
    path = Path(name).expanduser()
    return path if path.is_absolute() or base is None else base / path


def read_values(path: Path, unit: Unit = "count") -> tuple[list[float], list[float]]:
    """The values of a file, one a line or `value,weight` (blank lines and `#` comments left
    out), in the unit's base; ValueError `FILE:LINE: what is wrong` for the first bad line."""
    try:
        text = read_bounded(path, MAX_FILE_BYTES, "file of values")
    except BadInput as exc:
        raise ValueError(str(exc)) from None
    values: list[float] = []
    weights: list[float] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if len(values) >= MAX_FILE_LINES:
            raise ValueError(f"{path}:{number}: more than {MAX_FILE_LINES:,} values")
        parts = [p.strip() for p in line.split(",")]
        if len(parts) > 2:
            raise ValueError(f"{path}:{number}: expected `value` or `value,weight` (got {line!r})")
        try:
            values.append(_quantity(_number(parts[0]), unit, "value"))
            weight = float(parts[1]) if len(parts) == 2 else 1.0
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: {exc}") from None
        if not (math.isfinite(weight) and weight >= 0):
            raise ValueError(
                f"{path}:{number}: the weight must be a finite number >= 0 (got {parts[1]!r})"
            )
        weights.append(weight)
    if not values:
        raise ValueError(f"{path}: no values (one a line, or `value,weight`)")
    return values, weights


def _number(text: str) -> float | str:
    """A plain number as a float (its unit is the base), anything else left to the unit."""
    try:
        return float(text)
    except ValueError:
        return text


def distribution(unit: Unit, shorthand: Callable[[Any], Any] | None = None) -> Any:
    """The type of a field that takes a distribution in `unit` (`arrival: {exponential: ...}`);
    `shorthand` turns the field's own short forms (a port range) into a form first. A `file:` is
    read relative to the validation context's `base` (the scenario's folder)."""

    def read(v: Any, info: ValidationInfo) -> Any:
        base = info.context.get("base") if isinstance(info.context, dict) else None
        return _convert(shorthand(v) if shorthand else v, unit, base)

    return Annotated[Distribution, BeforeValidator(read)]


def as_distribution(v: Any, unit: Unit = "count", base: Path | None = None) -> Distribution:
    """`v` (a YAML form, in `unit`) as a Distribution: for scripts and `testbed learn`."""
    adapter: TypeAdapter[Distribution] = TypeAdapter(distribution(unit))
    return adapter.validate_python(v, context={"base": base})


__all__ = [
    "DEFAULT_BINS",
    "MAX_BINS",
    "MAX_VALUE",
    "MAX_WEIGHT",
    "TAIL",
    "Bin",
    "Distribution",
    "Empirical",
    "Exponential",
    "Histogram",
    "Lognormal",
    "Pareto",
    "Uniform",
    "Unit",
    "Weibull",
    "as_distribution",
    "bins_mean",
    "distribution",
    "read_values",
]
