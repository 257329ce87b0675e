"""How sure a prediction is: intervals from cross-validated residuals.

A predicted figure is a central value and an interval. The interval comes from how far
the model's predictions fell from published measurements it was not fitted to (the
leave-one-source-out residuals ``bench/`` writes as a data file), in the regime the
prediction falls in, widened where the request lies outside what was measured.
"""

from gpuplan.core.uncertainty.build import Residual, build_table, tables_toml
from gpuplan.core.uncertainty.model import Interval, ResidualGroup, ResidualTable, Spread
from gpuplan.core.uncertainty.spread import (
    bounds,
    combined,
    interval,
    semi_deviations,
    spread,
    z_score,
)

__all__ = [
    "Interval",
    "Residual",
    "ResidualGroup",
    "ResidualTable",
    "Spread",
    "bounds",
    "build_table",
    "combined",
    "interval",
    "semi_deviations",
    "spread",
    "tables_toml",
    "z_score",
]
