"""Owned pool + cloud burst, against all-cloud and all-on-premises, for a month of work.

The month's work is the request's job ``jobs_per_month`` times (inference: the
serving plan over its duration, capped at a month). It is priced three ways:

- **all cloud**: the burst GPU's GPU-hours for the work × its cloud price;
- **all on-premises**: enough owned GPUs to do the work at ``on_prem_utilization``,
  bought and amortized, plus electricity for the busy hours;
- **hybrid**: the given owned pool does what it can in the month at
  ``on_prem_utilization``; the rest bursts to the cloud GPU.

The break-even utilization is the busy share of an owned GPU's hours above which
owning is cheaper than renting the same work in the cloud (see
:func:`gpuplan.core.perf.cost.break_even_utilization`).
"""

import math

from gpuplan.core.catalog import Catalog, GpuSpec
from gpuplan.core.perf.cost import break_even_utilization, gpu_power_kw
from gpuplan.core.recommend.context import gpu_context
from gpuplan.core.recommend.fit import MemoryOracle
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.option_record import Option
from gpuplan.core.recommend.pricing import cloud_price
from gpuplan.core.recommend.schema import (
    HybridComparison,
    HybridOption,
    HybridSpec,
    RecommendRequest,
)
from gpuplan.core.recommend.serving import serving_options
from gpuplan.core.recommend.training import training_options
from gpuplan.core.record import Record

HOURS_PER_MONTH = 730.0


class _Month(Record, kw_only=True):
    """The month's work and prices, as the three options need them."""

    owned: GpuSpec
    burst: GpuSpec
    own_plan: Option | None
    own_hours: float | None
    burst_hours: float | None
    purchase: float | None
    cloud: float | None
    cloud_from: str
    """Whose price ``cloud`` is (a provider, ``request`` or ``catalog_file``)."""

    electricity_per_hour: float
    """Electricity of one busy owned GPU-hour."""

    inference: bool


def compare_hybrid(
    request: RecommendRequest, job: Job, catalog: Catalog, oracle: MemoryOracle, trainable: int
) -> HybridComparison:
    spec = request.hybrid or HybridSpec()
    owned = catalog.lookup(spec.owned_gpu, "$.hybrid.owned_gpu")
    burst = catalog.lookup(spec.burst_gpu, "$.hybrid.burst_gpu")
    own_plan = _plan(request, job, oracle, owned, trainable)
    burst_plan = _plan(request, job, oracle, burst, trainable)
    repeats = 1.0 if job.kind == "inference" else spec.jobs_per_month
    scale = min(HOURS_PER_MONTH / job.duration_hours, 1.0) if job.kind == "inference" else 1.0
    override_own = job.prices.get(owned.id)
    burst_price = cloud_price(burst, job)
    m = _Month(
        owned=owned,
        burst=burst,
        own_plan=own_plan,
        own_hours=own_plan.gpu_hours * repeats * scale if own_plan else None,
        burst_hours=burst_plan.gpu_hours * repeats * scale if burst_plan else None,
        purchase=(override_own.purchase_usd if override_own else None)
        or (owned.price.purchase.usd if owned.price.purchase else None),
        cloud=burst_price.usd_per_gpu_hour if burst_price else None,
        cloud_from=burst_price.provider if burst_price else "",
        electricity_per_hour=gpu_power_kw(owned, job.energy) * job.energy.electricity_usd_per_kwh,
        inference=job.kind == "inference",
    )
    options = [_all_cloud(m), _all_on_prem(m, job), _hybrid(m, job, spec.owned_count)]
    break_even = None
    if m.own_hours and m.burst_hours is not None and m.cloud is not None and m.purchase is not None:
        equivalent = m.cloud * m.burst_hours / m.own_hours
        break_even = break_even_utilization(
            m.purchase, owned, job.energy, job.owned.amortization_years, equivalent
        )
    return HybridComparison(
        owned_gpu=owned.id,
        burst_gpu=burst.id,
        owned_gpu_hours_per_month=m.own_hours,
        burst_gpu_hours_per_month=m.burst_hours,
        options=options,
        break_even_utilization=round(break_even, 4) if break_even is not None else None,
        detail=_summary(options, break_even, owned, burst),
    )


def _all_cloud(m: _Month) -> HybridOption:
    if m.burst_hours is None or m.cloud is None:
        return HybridOption(
            name="all_cloud",
            monthly_usd=None,
            detail=f"needs a fitting {m.burst.id} plan and its cloud price on the basis",
        )
    return HybridOption(
        name="all_cloud",
        monthly_usd=m.burst_hours * m.cloud,
        detail=f"{m.burst_hours:,.1f} {m.burst.id} GPU-hours x ${m.cloud:.2f} ({m.cloud_from})",
    )


def _all_on_prem(m: _Month, job: Job) -> HybridOption:
    if m.own_hours is None or m.purchase is None or m.own_plan is None:
        return HybridOption(
            name="all_on_prem",
            monthly_usd=None,
            detail=f"needs a fitting {m.owned.id} plan and its purchase price",
        )
    years = job.owned.amortization_years
    if m.inference:
        pool = m.own_plan.count  # serving replicas are busy all month
    else:
        pool = max(
            m.own_plan.count, math.ceil(m.own_hours / (HOURS_PER_MONTH * job.owned.utilization))
        )
    return HybridOption(
        name="all_on_prem",
        monthly_usd=pool * m.purchase / (years * 12) + m.own_hours * m.electricity_per_hour,
        detail=f"{pool} owned {m.owned.id} (${m.purchase:,.0f} each over {years:g} years) busy "
        f"{m.own_hours:,.1f} GPU-hours at ${m.electricity_per_hour:.3f}/h of electricity",
    )


def _hybrid(m: _Month, job: Job, owned_count: int) -> HybridOption:
    if m.own_hours is None or m.purchase is None or m.own_plan is None:
        return HybridOption(
            name="hybrid",
            monthly_usd=None,
            detail=f"needs a fitting {m.owned.id} plan and its purchase price",
        )
    capital = owned_count * m.purchase / (job.owned.amortization_years * 12)
    # A training job needs all its GPUs at once; a serving deployment is a set of
    # replicas, so the pool takes as many whole replicas as it holds, busy all month.
    plan = m.own_plan
    unit = plan.layout.tensor if m.inference and plan.layout else plan.count
    pool = owned_count // unit * unit
    busy = 1.0 if m.inference else job.owned.utilization
    taken = min(m.own_hours, pool * HOURS_PER_MONTH * busy)
    rest = 1.0 - taken / m.own_hours if m.own_hours else 0.0
    if rest > 1e-12 and (m.burst_hours is None or m.cloud is None):
        return HybridOption(
            name="hybrid",
            monthly_usd=None,
            detail=f"the pool covers {1 - rest:.0%} of the work; the rest needs a fitting "
            f"{m.burst.id} plan and its cloud price",
        )
    burst_cost = rest * (m.burst_hours or 0.0) * (m.cloud or 0.0)
    return HybridOption(
        name="hybrid",
        monthly_usd=capital + taken * m.electricity_per_hour + burst_cost,
        detail=f"{owned_count} owned {m.owned.id} do {taken:,.1f} of {m.own_hours:,.1f} GPU-hours "
        f"({1 - rest:.0%} of the work); the rest bursts to {m.burst.id} for ${burst_cost:,.2f}",
    )


def _plan(
    request: RecommendRequest, job: Job, oracle: MemoryOracle, gpu: GpuSpec, trainable: int
) -> Option | None:
    ctx = gpu_context(gpu, job, request.efficiency.mfu, request.efficiency.mbu, request.constraints)
    if ctx.rate is None:
        return None
    if job.kind == "inference":
        plans, _ = serving_options(job, ctx, oracle, request.constraints)
    else:
        plans, _ = training_options(
            job, ctx, oracle, request.constraints, objective="cheapest", trainable=trainable
        )
    plans = [p for p in plans if p.fits]
    if not plans:
        return None
    return min(plans, key=lambda p: (p.gpu_hours, p.count))


def _summary(
    options: list[HybridOption], break_even: float | None, owned: GpuSpec, burst: GpuSpec
) -> str:
    priced = [o for o in options if o.monthly_usd is not None]
    text = ""
    if priced:
        best = min(priced, key=lambda o: o.monthly_usd or 0.0)
        text = f"cheapest per month: {best.name} (${best.monthly_usd:,.2f})"
    if break_even is None:
        return (
            text
            + ("; " if text else "")
            + f"owning {owned.id} never beats renting {burst.id} for this work, or a price is missing"
        )
    if break_even > 1:
        return (
            text
            + f"; owning {owned.id} would need {break_even:.0%} utilization to beat {burst.id}: rent"
        )
    return text + f"; owning {owned.id} beats renting {burst.id} above {break_even:.0%} utilization"
