"""An option of the search: one GPU model at one count and layout, timed and priced.

:class:`Option` is what the search produces and the ranking orders; the response shows
each as a :class:`~gpuplan.core.recommend.schema.Candidate`.
"""

import math

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.perf.cost import energy_kwh
from gpuplan.core.recommend.context import GpuContext
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.schema import (
    Constraints,
    Latency,
    Objective,
    ParallelLayout,
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
    speed_s: float | None = None
    """What ``fastest`` minimizes: job seconds (training) or request latency (inference)."""

    throughput: Throughput | None = None
    usd_per_hour: float | None = None
    cost_usd: float | None = None
    cost_basis: str | None = None
    energy_kwh: float | None = None
    flops_per_watt: float | None = None
    latency: Latency | None = None
    mfu: float | None = None
    step: StepTime | None = None
    source: str = "catalog"
    reasons: list[str] = []
    unverified: list[str] = []

    @property
    def gpu_hours(self) -> float:
        return (self.time_hours or 0.0) * self.count


def objective_key(option: Option, objective: Objective) -> tuple[float, ...]:
    """Sort key, smaller is better; a option without a price sorts after every priced one."""
    speed = option.speed_s if option.speed_s is not None else math.inf
    unpriced = 1.0 if option.cost_usd is None else 0.0
    money = option.cost_usd if option.cost_usd is not None else option.gpu_hours
    # Costs and energies are compared at 9 significant digits, so that two counts whose
    # GPU-hours agree up to rounding tie, and the tie goes to fewer GPUs.
    if objective == "cheapest":
        return (unpriced, _sig(money), option.count, speed)
    if objective == "fastest":
        return (_sig(speed), unpriced, _sig(money), option.count)
    if objective == "energy":
        energy = option.energy_kwh if option.energy_kwh is not None else math.inf
        return (_sig(energy), option.count, speed)
    return (unpriced, _sig(money * speed), option.count)


def _sig(value: float) -> float:
    return float(f"{value:.9g}") if math.isfinite(value) else value


def priced(
    option: Option, ctx: GpuContext, job: Job, c: Constraints, delivered_flops: float
) -> Option:
    gpu = ctx.gpu
    hours = option.time_hours or 0.0
    usd_h = ctx.per_gpu_hour * option.count if ctx.per_gpu_hour is not None else None
    cost = usd_h * hours if usd_h is not None else None
    kwh = energy_kwh(gpu, hours * option.count, job.energy)
    watts = option.count * gpu.tdp_watts * job.energy.power_fraction_of_tdp
    admissible = True
    reasons = list(option.reasons)
    if c.max_usd_per_hour is not None and usd_h is not None and usd_h > c.max_usd_per_hour:
        admissible = False
        reasons.append(f"${usd_h:.2f}/h is over max_usd_per_hour ${c.max_usd_per_hour:.2f}")
    if c.max_total_usd is not None and cost is not None and cost > c.max_total_usd:
        admissible = False
        reasons.append(f"${cost:,.2f} is over max_total_usd ${c.max_total_usd:,.2f}")
    if (c.max_usd_per_hour is not None or c.max_total_usd is not None) and usd_h is None:
        admissible = False
        reasons.append("no price to check the budget against")
    return msgspec.structs.replace(
        option,
        usd_per_hour=usd_h,
        cost_usd=cost,
        cost_basis=ctx.basis,
        energy_kwh=kwh,
        flops_per_watt=delivered_flops / watts if watts else None,
        admissible=admissible,
        reasons=reasons,
    )
