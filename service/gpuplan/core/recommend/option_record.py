"""One option of the search: one GPU model at one count and layout, timed and priced.

Kept apart from :mod:`gpuplan.core.recommend.option`, which is compiled and so holds no
Struct (docs/architecture.md, "The compiled core").
"""

import math
from collections.abc import Callable

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.recommend.schema import (
    Breach,
    Latency,
    Launch,
    ParallelLayout,
    PriceUsed,
    StepTime,
    Throughput,
)
from gpuplan.core.record import Record


class Option(Record, kw_only=True):
    """One (GPU, count, layout) with everything the ranking and the response need."""

    gpu: GpuSpec
    count: int
    layout: ParallelLayout | None
    required: int
    fits: bool
    admissible: bool
    time_hours: float | None = None
    evaluation_hours: float | None = None
    speed_s: float | None = None
    """What ``fastest`` minimizes: job seconds (training) or request latency (inference)."""

    throughput: Throughput | None = None
    usd_per_hour: float | None = None
    cost_usd: float | None = None
    cost_basis: str | None = None
    price: PriceUsed | None = None
    energy_kwh: float | None = None
    flops_per_watt: float | None = None
    latency: Latency | None = None
    launch: Launch | None = None
    mfu: float | None = None
    step: StepTime | None = None
    source: str = "catalog"
    kernel_source: str | None = None
    kernel_table: str | None = None
    reasons: list[str] = []
    breaches: list[Breach] = []
    unverified: list[str] = []
    finish: "Callable[[Option], Option] | None" = None
    """What the option leaves for the candidates a response shows (a serving plan's
    percentiles under load and launch command: they change no ranking, and a search
    times ~150 options): :func:`finished` applies it."""

    @property
    def gpu_hours(self) -> float:
        return (self.time_hours or 0.0) * self.count

    @property
    def severity(self) -> float:
        """How far the plan is from meeting every constraint: 0 when it meets them, else
        the log of the product of its breaches' factors (a GPU on which no layout could
        be sized at all ranks after every plan that was)."""
        if not self.breaches:
            return 0.0 if self.admissible else UNSIZED_SEVERITY
        return sum(math.log(b.factor) for b in self.breaches)


UNSIZED_SEVERITY = math.log(1e6)
