"""How sure a memory estimate is, and what "fits" then means.

The published real-GPU figures of ``bench/accuracy/published.toml`` are the estimator's
ground truth; no constant of the estimator is fitted to them, so their ratios measured /
estimated are out-of-sample as they stand. ``python -m bench.accuracy.intervals --write``
puts their finite-sample 5th and 95th percentiles (:mod:`gpuplan.core.memory.ratios`),
by measured figure and by regime, into ``data/residuals.toml``. An estimate's 90%
interval of a figure is then, as factors of the estimate:

- the figure's own percentiles (those of every case where the figure has fewer than the
  19 cases a 95% order statistic needs);
- for each regime axis (mode, split, quantization), the percentile of that figure's cases
  of the job's regime where there are at least 19 of them, pulled towards the figure's
  with ``PRIOR_CASES`` cases' weight; the axes' ends are averaged (in log);
- widened once for each regime no published case has, by the pooled ends in quadrature.

Two asymmetries, on purpose. A regime whose estimates ran *high* does not pull the
interval down (nor one that ran low pull its low end up): the corpus's over-estimates are
no evidence that another job of that regime will not run higher than estimated (held-out
checks found the opposite in places), and the side that matters is the one that ends in
an out-of-memory error; a regime that ran low pushes the high end up. And the interval
holds the estimate: the high end is never below it, the low end never above it.

``required_bytes`` is the high end of ``device_bytes``'s 90% interval: the 95th percentile
of what ``nvidia-smi`` will show. A job "fits" when that is within the GPU's usable memory,
so "fits" means fits with at least 95% confidence, not a flat 20% headroom.
"""

import math
import tomllib
from functools import cache
from importlib import resources
from statistics import fmean
from typing import Literal

import msgspec

from gpuplan.core.errors import DataError
from gpuplan.core.memory.ratios import QuantileGroup, QuantileTable
from gpuplan.core.memory.regime import memory_regime
from gpuplan.core.memory.schema import Workload

COVERAGE = 0.9
"""The estimate's intervals: 90% (5th to 95th percentile); the high end is the 95% one-sided
bound ``required_bytes`` stands on."""

PRIOR_CASES = 20.0
"""How many cases' weight the figure's percentile carries against a regime's (a modelling
choice, not fitted: a regime of 20 cases, about the least with a 95% order statistic, has
half the say)."""

Figure = Literal["peak_bytes", "reserved_bytes", "device_bytes"]
FIGURES: tuple[Figure, ...] = ("peak_bytes", "reserved_bytes", "device_bytes")


@cache
def quantile_table() -> QuantileTable:
    raw = resources.files("gpuplan.core.memory.data").joinpath("residuals.toml").read_text()
    try:
        table = msgspec.convert(tomllib.loads(raw), QuantileTable)
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise DataError(f"core/memory/data/residuals.toml: {exc}") from exc
    if not any(g.measure == "all" and g.high_ratio and g.low_ratio for g in table.groups):
        raise DataError("core/memory/data/residuals.toml: no pooled percentiles")
    return table


def _find(table: QuantileTable, measure: str, axis: str, name: str) -> QuantileGroup | None:
    return next(
        (g for g in table.groups if (g.measure, g.axis, g.name) == (measure, axis, name)), None
    )


def _ends(g: QuantileGroup | None) -> tuple[float, float] | None:
    """A group's (low, high) in log, where it has both."""
    if g is None or g.low_ratio is None or g.high_ratio is None:
        return None
    return math.log(g.low_ratio), math.log(g.high_ratio)


def outside_corpus(table: QuantileTable, figure: Figure, regime: dict[str, str]) -> list[str]:
    """The regimes of the request no published case has (a quantization, a split…)."""
    known = {(g.axis, g.name) for g in table.groups if g.axis != "all"}
    known |= {("measure", g.measure) for g in table.groups if g.axis == "all"}
    full = {"measure": figure, **regime}
    return [f"no published case of {a} {n}" for a, n in full.items() if (a, n) not in known]


def log_bounds(table: QuantileTable, figure: Figure, regime: dict[str, str]) -> tuple[float, float]:
    """(low, high) of log(measured / estimated) at 90% for ``figure`` in ``regime``
    (module docstring)."""
    pooled = _ends(_find(table, "all", "all", "all"))
    assert pooled is not None  # quantile_table checked it
    base = _ends(_find(table, figure, "all", "all")) or pooled
    lows, highs = [], []
    for axis, name in regime.items():
        g = _find(table, figure, axis, name)
        own = _ends(g)
        if g is None or own is None:
            lows.append(base[0])
            highs.append(base[1])
            continue
        w = g.cases / (g.cases + PRIOR_CASES)
        lows.append(min(base[0], w * own[0] + (1 - w) * base[0]))
        highs.append(max(base[1], w * own[1] + (1 - w) * base[1]))
    low = min(0.0, fmean(lows) if lows else base[0])
    high = max(0.0, fmean(highs) if highs else base[1])
    wider = len(outside_corpus(table, figure, regime))
    low = -math.sqrt(low**2 + wider * min(0.0, pooled[0]) ** 2)
    high = math.sqrt(high**2 + wider * max(0.0, pooled[1]) ** 2)
    return low, high


@cache
def _factors(regime: tuple[tuple[str, str], ...]) -> dict[Figure, tuple[float, float]]:
    return table_factors(quantile_table(), dict(regime))


def table_factors(
    table: QuantileTable, regime: dict[str, str]
) -> dict[Figure, tuple[float, float]]:
    """(low, high) factors of measured / estimated at 90%, per figure, from ``table``:
    what the service gives a job of ``regime`` and the bench judges without a source."""
    out: dict[Figure, tuple[float, float]] = {}
    for f in FIGURES:
        low, high = log_bounds(table, f, regime)
        out[f] = (math.exp(low), math.exp(high))
    return out


def factors(workload: Workload) -> dict[Figure, tuple[float, float]]:
    """(low, high) factors of measured / estimated at 90%, per figure, for ``workload``."""
    return _factors(tuple(sorted(memory_regime(workload).items())))


def byte_bounds(value: int, factor: tuple[float, float]) -> tuple[int, int]:
    """An interval of bytes: whole bytes, the low end down and the high end up."""
    return math.floor(value * factor[0]), math.ceil(value * factor[1])


def figure_intervals(
    peak: int, reserved: int, device: int, f: dict[Figure, tuple[float, float]]
) -> dict[Figure, tuple[int, int]]:
    """The three figures' intervals from their factors, made to nest: the reserve holds
    the peak and the cache, the device the reserve and what lies outside the allocator
    (each figure's percentiles come from other cases, so their ends need not agree)."""
    peak_i = byte_bounds(peak, f["peak_bytes"])
    reserved_i = byte_bounds(reserved, f["reserved_bytes"])
    device_i = byte_bounds(device, f["device_bytes"])
    reserved_i = (reserved_i[0], max(reserved_i[1], peak_i[1] + reserved - peak))
    device_i = (device_i[0], max(device_i[1], reserved_i[1] + device - reserved))
    return {"peak_bytes": peak_i, "reserved_bytes": reserved_i, "device_bytes": device_i}
