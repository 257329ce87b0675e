"""The records of uncertainty: an interval, and the residual table it is drawn from."""

from typing import Annotated

import msgspec

from gpuplan.core.record import Record

Count = Annotated[int, msgspec.Meta(ge=0)]
NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class Interval(Record):
    """Where the measured figure is expected to fall, at the coverage the answer states
    (e.g. 80%: ``low`` and ``high`` are its 10th and 90th percentiles)."""

    low: float
    high: float


class ResidualGroup(Record):
    """Cross-validated residuals of one regime: the log of predicted / measured."""

    axis: str
    """What the regimes of this axis tell apart: ``framework``, ``scale``, ``precision``…"""

    name: str
    runs: Count
    mean_log_error: float
    """Mean of log(predicted / measured): above 0, the model predicts high."""

    sd_log_error: NonNegative
    """Standard deviation of the same (0 for a single run)."""

    sd_below_log_error: NonNegative
    """The spread of the residuals below their mean (the semi-deviation, scaled to equal
    the standard deviation for normal residuals): how far the model runs *low*, which sets
    the high end of the measured figure's interval."""

    sd_above_log_error: NonNegative
    """The same above the mean: how far the model runs high, which sets the low end."""


class ResidualTable(Record):
    """One measure's residuals, as ``bench/`` wrote them from its cross-validation."""

    measure: str
    """What was predicted: ``tokens_per_s_per_gpu``, ``ttft_s``, ``device_bytes``…"""

    written_by: str
    """The command that wrote the table (rerun it to refresh the file)."""

    method: str
    """How the residuals were obtained, in words."""

    runs: Count
    sources: Count
    max_gpus: Count
    """The most GPUs any measured run used: past it, a prediction is extrapolated."""

    mean_log_error: float
    """Over every run: the pooled residual a thin regime is shrunk towards."""

    sd_log_error: NonNegative
    sd_below_log_error: NonNegative
    sd_above_log_error: NonNegative
    groups: list[ResidualGroup]


class Spread(Record):
    """The residual distribution a prediction is taken to have: log(predicted/measured)
    as a split normal with this mean and the spreads below and above it, and the reasons
    it was widened."""

    mean_log_error: float
    sd_below_log_error: NonNegative
    sd_above_log_error: NonNegative
    widened: list[str] = []
