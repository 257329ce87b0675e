"""From a residual table to an interval around one prediction.

The residual of a prediction is r = log(predicted / measured), taken as normal with the
mean and spread of its regime's cross-validated residuals:

- **Per axis** (framework, scale, precision, …) the regime's group is shrunk towards
  the pooled residuals with the weight of ``PRIOR_RUNS`` runs, so a regime measured by
  two runs does not claim the precision of two numbers.
- **Across axes** the means are averaged and the largest spread is kept: a prediction
  is as uncertain as the least understood of its regimes.
- **Outside the corpus** (a GPU generation, framework or scale no measured run has)
  each reason adds the pooled spread once more, in quadrature.

The measured figure then lies in predicted · exp(−r); at coverage c, between the
(1−c)/2 and (1+c)/2 quantiles of that.
"""

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

from gpuplan.core.uncertainty.model import Interval, ResidualTable, Spread

PRIOR_RUNS = 4.0
"""How many runs' weight the pooled residuals carry in a regime's estimate (a modelling
choice, not fitted: it halves the say of a regime measured by four runs)."""


def z_score(coverage: float) -> float:
    """The normal quantile of a two-sided interval of ``coverage`` (0.8: 1.2816)."""
    if not 0 < coverage < 1:
        raise ValueError(f"coverage must be in (0, 1), got {coverage}")
    return NormalDist().inv_cdf((1 + coverage) / 2)


def _shrunk(n: int, mean: float, sd: float, table: ResidualTable) -> tuple[float, float]:
    k = PRIOR_RUNS
    pooled_mean = (n * mean + k * table.mean_log_error) / (n + k)
    # Within-group variance shrunk the same way, around the pooled variance.
    var = (max(n - 1, 0) * sd**2 + k * table.sd_log_error**2) / (max(n - 1, 0) + k)
    return pooled_mean, math.sqrt(var)


def spread(table: ResidualTable, regime: Mapping[str, str], outside: Sequence[str] = ()) -> Spread:
    """The residual distribution of a prediction in ``regime`` (axis → name), widened
    once per reason in ``outside``."""
    means, sds = [], []
    for axis, name in regime.items():
        group = next((g for g in table.groups if g.axis == axis and g.name == name), None)
        n, mean, sd = (
            (0, 0.0, 0.0)
            if group is None
            else (
                group.runs,
                group.mean_log_error,
                group.sd_log_error,
            )
        )
        m, s = _shrunk(n, mean, sd, table)
        means.append(m)
        sds.append(s)
    mean = sum(means) / len(means) if means else table.mean_log_error
    sd = max(sds) if sds else table.sd_log_error
    sd = math.sqrt(sd**2 + len(outside) * table.sd_log_error**2)
    return Spread(mean_log_error=mean, sd_log_error=sd, widened=list(outside))


def bounds(s: Spread, coverage: float) -> tuple[float, float]:
    """(low, high) factors of measured / predicted at ``coverage``."""
    z = z_score(coverage)
    return (
        math.exp(-(s.mean_log_error + z * s.sd_log_error)),
        math.exp(-(s.mean_log_error - z * s.sd_log_error)),
    )


def interval(value: float, s: Spread, coverage: float, inverse: bool = False) -> Interval:
    """The interval of ``value`` at ``coverage``. ``inverse``: the figure varies as
    1 / the predicted measure (a time or a cost from a throughput)."""
    low, high = bounds(s, coverage)
    if inverse:
        low, high = 1 / high, 1 / low
    return Interval(low=value * low, high=value * high)
