"""An option of the search: one GPU model at one count and layout, timed and priced.

:class:`~gpuplan.core.recommend.option_record.Option` is what the search produces and the
ranking orders; the response shows each as a
:class:`~gpuplan.core.recommend.schema.Candidate`.
"""

import math
from functools import lru_cache
from typing import Any

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.perf.cost import energy_kwh
from gpuplan.core.recommend.context_record import GpuContext
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.option_record import Option
from gpuplan.core.recommend.schema import (
    Breach,
    Constraints,
    Objective,
)

UNKNOWN_FACTOR = 10.0
"""The factor of a breach whose size cannot be measured (no price, a zero limit)."""


def finished(option: Option) -> Option:
    """``option`` with the figures it deferred (itself when it deferred none)."""
    return option.finish(option) if option.finish is not None else option


def breach(
    constraint: str,
    actual: int | float,
    limit: int | float,
    unit: str,
    detail: str,
    *,
    at_least: bool = False,
) -> Breach:
    """``actual`` over ``limit`` (or, ``at_least``, under it). Both are kept as given:
    compiled, a parameter declared ``float`` would turn an int (bytes, a GPU count) into
    a float, and the answer would read ``76.0`` GPUs."""
    if at_least:
        factor = limit / actual if actual > 0 else UNKNOWN_FACTOR
    else:
        factor = actual / limit if limit > 0 else UNKNOWN_FACTOR
    return Breach(
        constraint=constraint,
        actual=actual,
        limit=limit,
        unit=unit,
        factor=max(factor, 1.0),
        detail=detail,
    )


def layout_breaches(gpu: GpuSpec, count: int, c: Constraints) -> list[Breach]:
    """What a layout the request fixed (``layout: given``) misses of the constraints the
    search would have kept to."""
    out = []
    if count > c.max_gpus_per_job:
        out.append(
            breach(
                "constraints.max_gpus_per_job",
                count,
                c.max_gpus_per_job,
                "GPUs",
                f"needs {count} GPUs, over max_gpus_per_job {c.max_gpus_per_job}",
            )
        )
    if count > 1 and c.required_interconnect == "nvlink" and gpu.interconnect.gpu_link is None:
        out.append(
            Breach(
                constraint="constraints.required_interconnect",
                actual=None,
                limit=1.0,
                unit="link",
                factor=UNKNOWN_FACTOR,
                detail=f"{gpu.id} has no NVLink or Infinity Fabric for {count} GPUs",
            )
        )
    return out


def memory_breach(required: int, usable: int) -> Breach:
    """A plan that does not fit; ``required`` 0: the estimator refused its layout."""
    if required <= 0:
        return Breach(
            constraint="memory",
            actual=None,
            limit=usable,
            unit="bytes",
            factor=UNKNOWN_FACTOR,
            detail="the estimator refused this layout",
        )
    return breach(
        "memory",
        required,
        usable,
        "bytes",
        f"needs {required / 2**30:.1f} GiB per GPU, {usable / 2**30:.1f} GiB usable",
    )


def miss_key(option: Option, objective: Objective) -> tuple[float, ...]:
    """Sort key of plans that miss a constraint: a plan that fits before one that does not
    (memory is not a knob the user can turn), then the nearest to meeting the constraints;
    under ``cheapest`` a plan without a price never before one with a price."""
    unpriced = 1.0 if objective == "cheapest" and option.cost_usd is None else 0.0
    unfit = 0.0 if option.fits else 1.0
    return (unpriced, unfit, _sig(option.severity), *objective_key(option, objective))


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


def floor_key(
    objective: Objective, ctx: GpuContext, job: Job, *, seconds: float, count: int
) -> tuple[float, ...]:
    """:func:`objective_key` of a plan of ``count`` GPUs of ``ctx`` that takes
    ``seconds``, in the same operations as :func:`pricing` and
    :class:`~gpuplan.core.recommend.option_record.Option`.

    Every term of the key is non-decreasing in the time (floating-point rounding is
    monotone), so for a lower bound of a count's time this is a lower bound of the key
    of any plan at that count: a count whose bound sorts after a plan already found
    cannot hold the GPU's best plan."""
    hours = seconds / 3600
    unpriced = 1.0 if ctx.per_gpu_hour is None else 0.0
    money = ctx.per_gpu_hour * count * hours if ctx.per_gpu_hour is not None else hours * count
    if objective == "cheapest":
        return (unpriced, _sig(money), count, seconds)
    if objective == "fastest":
        return (_sig(seconds), unpriced, _sig(money), count)
    if objective == "energy":
        return (_sig(energy_kwh(ctx.gpu, hours * count, job.energy)), count, seconds)
    return (unpriced, _sig(money * seconds), count)


FEWEST_FIRST: frozenset[Objective] = frozenset({"cheapest", "energy"})
"""Objectives under which, of one GPU model's plans of equal time, the fewer GPUs always
win: cost, GPU-hours and energy are the count times a figure of the GPU and the time
(:func:`objective_key`). A serving plan's time is the request's duration, the same on
every plan, so a serving search may leave out degrees above an admissible count."""


COST_OBJECTIVES: frozenset[Objective] = frozenset({"cheapest", "balanced"})
"""Objectives with a cost term: under them a plan without a price cannot be scored
against priced plans, and is ranked apart after them (:func:`unpriced_key`)."""


def unpriced_key(option: Option, objective: Objective) -> tuple[float, ...]:
    """Sort key, across GPUs, of plans without a price under a cost objective: by the
    objective's other term, time, under ``balanced``; under ``cheapest``, which has
    none, by GPU-hours (what the plans would cost at equal prices), then GPUs."""
    speed = option.speed_s if option.speed_s is not None else math.inf
    if objective == "balanced":
        return (_sig(speed), option.count)
    return (_sig(option.gpu_hours), option.count, _sig(speed))


@lru_cache(maxsize=8192)
def _sig(value: float) -> float:
    """``value`` at 9 significant digits (correctly rounded, as ``format`` rounds).
    Memoized: a search's keys ask for the same figure several times (the 8,192-GPU case
    about four times each of its 1,250 values), and formatting costs more than a look-up."""
    return float(f"{value:.9g}") if math.isfinite(value) else value


def priced(
    option: Option, ctx: GpuContext, job: Job, c: Constraints, delivered_flops: float
) -> Option:
    return msgspec.structs.replace(
        option,
        **pricing(
            ctx,
            job,
            c,
            count=option.count,
            time_hours=option.time_hours,
            admissible=option.admissible,
            reasons=option.reasons,
            breaches=option.breaches,
            delivered_flops=delivered_flops,
        ),
    )


def pricing(
    ctx: GpuContext,
    job: Job,
    c: Constraints,
    *,
    count: int,
    time_hours: float | None,
    admissible: bool,
    reasons: list[str],
    breaches: list[Breach],
    delivered_flops: float,
) -> dict[str, Any]:
    """The fields :func:`priced` sets on an option of these fields (a caller building
    the option passes them to its constructor instead of copying it)."""
    gpu = ctx.gpu
    hours = time_hours or 0.0
    usd_h = ctx.per_gpu_hour * count if ctx.per_gpu_hour is not None else None
    cost = usd_h * hours if usd_h is not None else None
    kwh = energy_kwh(gpu, hours * count, job.energy)
    watts = count * gpu.tdp_watts * job.energy.power_fraction_of_tdp
    given = breaches
    breaches = list(given)
    if c.max_usd_per_hour is not None and usd_h is not None and usd_h > c.max_usd_per_hour:
        breaches.append(
            breach(
                "constraints.max_usd_per_hour",
                usd_h,
                c.max_usd_per_hour,
                "USD/h",
                f"${usd_h:.2f}/h is over max_usd_per_hour ${c.max_usd_per_hour:.2f}",
            )
        )
    if c.max_total_usd is not None and cost is not None and cost > c.max_total_usd:
        breaches.append(
            breach(
                "constraints.max_total_usd",
                cost,
                c.max_total_usd,
                "USD",
                f"${cost:,.2f} is over max_total_usd ${c.max_total_usd:,.2f}",
            )
        )
    if (c.max_usd_per_hour is not None or c.max_total_usd is not None) and usd_h is None:
        budget = "max_usd_per_hour" if c.max_usd_per_hour is not None else "max_total_usd"
        breaches.append(
            Breach(
                constraint=f"constraints.{budget}",
                actual=None,
                limit=float(getattr(c, budget)),
                unit="USD/h" if budget == "max_usd_per_hour" else "USD",
                factor=UNKNOWN_FACTOR,
                detail="no price to check the budget against",
            )
        )
    return {
        "usd_per_hour": usd_h,
        "cost_usd": cost,
        "cost_basis": ctx.basis,
        "price": ctx.price,
        "energy_kwh": kwh,
        "flops_per_watt": delivered_flops / watts if watts else None,
        "admissible": admissible and not breaches,
        "reasons": list(reasons) + [b.detail for b in breaches[len(given) :]],
        "breaches": breaches,
    }
