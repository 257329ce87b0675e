"""How sure a memory estimate is, and what "fits" then means.

The published real-GPU figures of ``bench/accuracy/published.toml`` are the estimator's
ground truth; no constant of the estimator is fitted to them, so their residuals,
r = log(estimated / measured), are out-of-sample as they stand. ``python -m
bench.accuracy.intervals --write`` groups them by regime (which figure was measured, the
job's mode, how it is split over GPUs, quantized weights or not) into
``data/residuals.toml``; each estimate draws its 90% intervals from the residuals of its
own regimes (:mod:`gpuplan.core.uncertainty`), widened for each regime the corpus never
measured.

One asymmetry, on purpose: a regime whose estimates ran *high* in the corpus does not pull
the interval down. The corpus's over-estimates are no evidence that another job of that
regime will not run higher than estimated (held-out checks found the opposite in places),
and the side that matters is the one that ends in an out-of-memory error. A regime that
ran low pushes the interval up.

``required_bytes`` is the high end of ``device_bytes``'s 90% interval: the 95th percentile
of what ``nvidia-smi`` will show. A job "fits" when that is within the GPU's usable memory,
so "fits" means fits with at least 95% confidence, not a flat 20% headroom.
"""

import math
import tomllib
from functools import cache
from importlib import resources
from typing import Literal

import msgspec

from gpuplan.core.errors import DataError
from gpuplan.core.memory.regime import memory_regime
from gpuplan.core.memory.schema import Workload
from gpuplan.core.record import Record
from gpuplan.core.uncertainty import ResidualTable, Spread, bounds, spread

COVERAGE = 0.9
"""The estimate's intervals: 90% (5th to 95th percentile); the high end is the 95% one-sided
bound ``required_bytes`` stands on."""

Figure = Literal["peak_bytes", "reserved_bytes", "device_bytes"]
FIGURES: tuple[Figure, ...] = ("peak_bytes", "reserved_bytes", "device_bytes")


class _ResidualFile(Record):
    table: list[ResidualTable]


@cache
def residual_table() -> ResidualTable:
    raw = resources.files("gpuplan.core.memory.data").joinpath("residuals.toml").read_text()
    try:
        (table,) = msgspec.convert(tomllib.loads(raw), _ResidualFile).table
    except (tomllib.TOMLDecodeError, msgspec.ValidationError, ValueError) as exc:
        raise DataError(f"core/memory/data/residuals.toml: {exc}") from exc
    return table


def memory_spread(table: ResidualTable, figure: Figure, regime: dict[str, str]) -> Spread:
    """The residual distribution of ``figure`` in ``regime`` (:func:`memory_regime`): its
    regimes' spread, widened once for each regime no published case has (a quantization,
    a framework or a split the corpus never measured), and their mean only where it says
    the estimate runs low (module docstring)."""
    known = {(g.axis, g.name) for g in table.groups}
    full = {"measure": figure, **regime}
    outside = [f"no published case of {a} {n}" for a, n in full.items() if (a, n) not in known]
    s = spread(table, full, outside)
    return msgspec.structs.replace(s, mean_log_error=min(0.0, s.mean_log_error))


@cache
def _factors(regime: tuple[tuple[str, str], ...]) -> dict[Figure, tuple[float, float]]:
    table = residual_table()
    return {f: bounds(memory_spread(table, f, dict(regime)), COVERAGE) for f in FIGURES}


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
    (each figure's residuals come from other cases, so their ends need not agree)."""
    peak_i = byte_bounds(peak, f["peak_bytes"])
    reserved_i = byte_bounds(reserved, f["reserved_bytes"])
    device_i = byte_bounds(device, f["device_bytes"])
    reserved_i = (reserved_i[0], max(reserved_i[1], peak_i[1] + reserved - peak))
    device_i = (device_i[0], max(device_i[1], reserved_i[1] + device - reserved))
    return {"peak_bytes": peak_i, "reserved_bytes": reserved_i, "device_bytes": device_i}
