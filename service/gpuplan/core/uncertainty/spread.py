"""From a residual table to an interval around one prediction.

The residual of a prediction is r = log(predicted / measured), taken as a split normal:
the mean of its regimes' cross-validated residuals, and one spread below the mean and
another above it (residuals are rarely symmetric: a model can run far high on a few runs
and only a little low, and the two tails set different ends of the interval).

- **Per axis** (framework, scale, precision, …) the regime's group is shrunk towards
  the pooled residuals with the weight of ``PRIOR_RUNS`` runs, so a regime measured by
  two runs does not claim the precision of two numbers.
- **Across axes** the means are averaged and the spreads combined as their root mean
  square: every regime the prediction falls in has its say.
- **Outside the corpus** (a GPU generation, framework or scale no measured run has)
  each reason adds the pooled spread once more, in quadrature.

The measured figure then lies in predicted · exp(−r); at coverage c, between the
(1−c)/2 and (1+c)/2 quantiles of that: its high end from the spread below the mean (the
model running low), its low end from the spread above.
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from statistics import NormalDist, fmean

from gpuplan.core.uncertainty.model import Interval, ResidualTable, Spread

PRIOR_RUNS = 4.0
"""How many runs' weight the pooled residuals carry in a regime's estimate (a modelling
choice, not fitted: it halves the say of a regime measured by four runs)."""


@lru_cache(maxsize=64)
def z_score(coverage: float) -> float:
    """The normal quantile of a two-sided interval of ``coverage`` (0.8: 1.2816);
    memoized: every interval of every candidate asks for the same few coverages."""
    if not 0 < coverage < 1:
        raise ValueError(f"coverage must be in (0, 1), got {coverage}")
    return NormalDist().inv_cdf((1 + coverage) / 2)


def semi_deviations(errors: Iterable[float]) -> tuple[float, float]:
    """(below, above) the mean of ``errors``: each the root of twice the mean squared
    shortfall on its side, which equals the standard deviation for normal residuals."""
    es = list(errors)
    if len(es) < 2:
        return 0.0, 0.0
    mu = fmean(es)
    below = math.sqrt(2 * fmean([min(e - mu, 0.0) ** 2 for e in es]))
    above = math.sqrt(2 * fmean([max(e - mu, 0.0) ** 2 for e in es]))
    return below, above


def _shrunk(n: int, value: float, pooled: float) -> float:
    """A regime's figure pulled towards the pooled one with ``PRIOR_RUNS`` runs' weight."""
    return (n * value + PRIOR_RUNS * pooled) / (n + PRIOR_RUNS)


def _shrunk_sd(n: int, sd: float, pooled: float) -> float:
    """A spread shrunk the same way, as a variance (the group's degrees of freedom)."""
    dof = max(n - 1, 0)
    return math.sqrt((dof * sd**2 + PRIOR_RUNS * pooled**2) / (dof + PRIOR_RUNS))


def _rms(values: list[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values))


def spread(table: ResidualTable, regime: Mapping[str, str], outside: Sequence[str] = ()) -> Spread:
    """The residual distribution of a prediction in ``regime`` (axis → name), widened
    once per reason in ``outside``."""
    means, below, above = [], [], []
    for axis, name in regime.items():
        g = next((g for g in table.groups if g.axis == axis and g.name == name), None)
        n = 0 if g is None else g.runs
        means.append(_shrunk(n, g.mean_log_error if g else 0.0, table.mean_log_error))
        below.append(_shrunk_sd(n, g.sd_below_log_error if g else 0.0, table.sd_below_log_error))
        above.append(_shrunk_sd(n, g.sd_above_log_error if g else 0.0, table.sd_above_log_error))
    if not means:
        means, below, above = (
            [table.mean_log_error],
            [table.sd_below_log_error],
            [table.sd_above_log_error],
        )
    wider = len(outside)
    return Spread(
        mean_log_error=fmean(means),
        sd_below_log_error=math.sqrt(_rms(below) ** 2 + wider * table.sd_below_log_error**2),
        sd_above_log_error=math.sqrt(_rms(above) ** 2 + wider * table.sd_above_log_error**2),
        widened=list(outside),
    )


def combined(first: Spread, second: Spread) -> Spread:
    """The spread of a prediction that carries two independent errors, as a figure
    under load carries the step time's and the queueing model's: the log errors add, so
    their means add and their spreads add in quadrature (each side with its side)."""
    return Spread(
        mean_log_error=first.mean_log_error + second.mean_log_error,
        sd_below_log_error=math.hypot(first.sd_below_log_error, second.sd_below_log_error),
        sd_above_log_error=math.hypot(first.sd_above_log_error, second.sd_above_log_error),
        widened=[*first.widened, *second.widened],
    )


def bounds(s: Spread, coverage: float) -> tuple[float, float]:
    """(low, high) factors of measured / predicted at ``coverage``."""
    z = z_score(coverage)
    return (
        math.exp(-(s.mean_log_error + z * s.sd_above_log_error)),
        math.exp(-(s.mean_log_error - z * s.sd_below_log_error)),
    )


def interval(value: float, s: Spread, coverage: float, inverse: bool = False) -> Interval:
    """The interval of ``value`` at ``coverage``. ``inverse``: the figure varies as
    1 / the predicted measure (a time or a cost from a throughput)."""
    low, high = bounds(s, coverage)
    if inverse:
        low, high = 1 / high, 1 / low
    return Interval(low=value * low, high=value * high)
