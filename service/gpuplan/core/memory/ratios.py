"""Empirical quantiles of measured / estimated: what the memory intervals are drawn from.

Distribution-free, on purpose: the published cases' errors are not normal (a few far-low
cases would inflate a fitted spread for every regime they share), and an order statistic
is not moved by how far those few lie.

The rule, at coverage 90% (ends at the 5th and 95th percentiles):

- **The finite-sample quantile.** Of n ratios sorted ascending, the high end is the
  ``ceil((n + 1) · 0.95)``-th, the low end the ``floor((n + 1) · 0.05)``-th (the
  split-conformal order statistics: a new case exchangeable with the n lies at or below
  the high end with probability at least 95%). With fewer than 19 ratios that order
  statistic does not exist, and the group has no quantile of its own.
- **Groups.** One per measured figure (``peak_bytes``, ``reserved_bytes``,
  ``device_bytes``), one per figure and regime of each axis of
  :func:`gpuplan.core.memory.regime.memory_regime` (mode, split, quantization), and one
  over every case (``all``), which stands in for a figure too thin for its own.

``python -m bench.accuracy.intervals --write`` computes them from the corpus and writes
``data/residuals.toml``; nothing here runs at request time except reading that file.
"""

import math
from collections import defaultdict
from collections.abc import Sequence

from gpuplan.core.record import Record
from gpuplan.core.uncertainty.build import toml_line

HIGH_P = 0.95
LOW_P = 0.05


class Ratio(Record):
    """One published case: its source, figure, regimes and measured / estimated."""

    source: str
    measure: str
    regime: dict[str, str]
    ratio: float


class QuantileGroup(Record):
    """The ratios of one group: how many, and their finite-sample 5th and 95th
    percentiles where the group is large enough to have them."""

    measure: str
    """``peak_bytes``, ``reserved_bytes``, ``device_bytes`` or ``all``."""

    axis: str
    """``all`` (the figure's every case) or a regime axis: ``mode``, ``split``…"""

    name: str
    cases: int
    low_ratio: float | None = None
    high_ratio: float | None = None


class QuantileTable(Record):
    written_by: str
    method: str
    cases: int
    sources: int
    groups: list[QuantileGroup]


def order_high(values: Sequence[float], p: float = HIGH_P) -> float | None:
    """The ``ceil((n + 1) p)``-th smallest of ``values`` (1-based), or None past n."""
    xs = sorted(values)
    k = math.ceil((len(xs) + 1) * p - 1e-9)
    return xs[k - 1] if 1 <= k <= len(xs) else None


def order_low(values: Sequence[float], p: float = LOW_P) -> float | None:
    """The ``floor((n + 1) p)``-th smallest of ``values`` (1-based), or None below 1."""
    xs = sorted(values)
    k = math.floor((len(xs) + 1) * p + 1e-9)
    return xs[k - 1] if 1 <= k <= len(xs) else None


def _rounded(x: float | None) -> float | None:
    """As the data file writes it (6 decimals), so a table built in memory and the one
    read back give the same intervals."""
    return None if x is None else round(x, 6)


def _group(measure: str, axis: str, name: str, ratios: list[float]) -> QuantileGroup:
    return QuantileGroup(
        measure=measure,
        axis=axis,
        name=name,
        cases=len(ratios),
        low_ratio=_rounded(order_low(ratios)),
        high_ratio=_rounded(order_high(ratios)),
    )


def build_quantiles(
    cases: Sequence[Ratio], axes: Sequence[str], *, written_by: str, method: str
) -> QuantileTable:
    """The groups of ``cases``: every case, each figure, each figure by regime of ``axes``."""
    groups = [_group("all", "all", "all", [c.ratio for c in cases])]
    by_measure: dict[str, list[Ratio]] = defaultdict(list)
    for c in cases:
        by_measure[c.measure].append(c)
    for measure, mine in sorted(by_measure.items()):
        groups.append(_group(measure, "all", "all", [c.ratio for c in mine]))
        for axis in axes:
            named: dict[str, list[float]] = defaultdict(list)
            for c in mine:
                named[c.regime[axis]].append(c.ratio)
            groups += [_group(measure, axis, n, rs) for n, rs in sorted(named.items())]
    return QuantileTable(
        written_by=written_by,
        method=method,
        cases=len(cases),
        sources=len({c.source for c in cases}),
        groups=groups,
    )


def quantiles_toml(table: QuantileTable, header: Sequence[str]) -> str:
    """The table as the TOML the core reads, under ``header``'s comment lines (a group
    without a quantile of its own omits it)."""
    lines = [f"# {h}" if h else "#" for h in header]
    lines += [toml_line(f, getattr(table, f)) for f in table.__struct_fields__ if f != "groups"]
    for g in table.groups:
        lines += ["", "[[groups]]"]
        lines += [
            toml_line(f, getattr(g, f)) for f in g.__struct_fields__ if getattr(g, f) is not None
        ]
    return "\n".join(lines) + "\n"
