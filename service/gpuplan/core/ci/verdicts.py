"""One verdict per target, each with the numbers it compared and a sentence saying why.

Semantics (docs/ci.md):

- ``fits``: the job's per-GPU ``required_bytes`` (the estimator's: the 95% high end of
  what nvidia-smi will show) at ``count`` GPUs, in the least memory-hungry layout the recommendation
  sizes at that count, is at most the GPU's usable memory.
- ``max_cost_usd`` / ``max_time_hours``: the recommendation's best plan (for the
  objective) on the ``fits`` GPU using at most its ``count`` GPUs, or the top
  recommendation when no ``fits`` target is given. A plan that does not fit, or has
  no price, fails.
- ``min_memory_headroom``: 1 − required/usable on the ``fits`` GPU at its count (else
  of the top recommendation) is at least the value.
- ``mig_profile_at_most``: the job's one-GPU ``required_bytes`` fits the named
  profile's usable memory, so the smallest profile that holds it is no larger.
"""

from collections.abc import Callable
from typing import NamedTuple

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.ci.schema import CheckAt, FitsTarget, TargetName, Unit, Verdict
from gpuplan.core.ci.sizing import Sized, describe
from gpuplan.core.mig.model import MigProfile
from gpuplan.core.recommend.schema import Candidate, IntervalFigure

GiB = 2**30


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def fits_verdict(target: FitsTarget, gpu: GpuSpec, sized: Sized | None, why_not: str) -> Verdict:
    usable = gpu.usable_memory_bytes
    if sized is None:
        return Verdict(
            target="fits",
            status="fail",
            reason=f"the job cannot be laid out on {target.count} x {gpu.id}: {why_not}",
            actual=None,
            limit=usable,
            unit="bytes",
            gpu=gpu.id,
            count=target.count,
        )
    need = sized.required_bytes
    ok = need <= usable
    layout = describe(sized)
    verb = "fits" if ok else "does not fit"
    return Verdict(
        target="fits",
        status="pass" if ok else "fail",
        reason=(
            f"{verb} {target.count} x {gpu.id}: needs {_gib(need)} per GPU ({layout}, at 95% "
            f"confidence), {_gib(usable)} usable"
        ),
        actual=need,
        limit=usable,
        unit="bytes",
        gpu=gpu.id,
        count=target.count,
        layout=layout,
    )


def _unusable(rec: Candidate | None, what: str, basis: str) -> str | None:
    if rec is None:
        return f"no plan to take the {what} from ({basis})"
    if not rec.fits:
        return f"{rec.gpu} does not fit the job within the constraints, so it has no {what}"
    return None


def _at_most(
    target: TargetName,
    unit: Unit,
    limit: float,
    rec: Candidate | None,
    basis: str,
    *,
    what: str,
    value: Callable[[Candidate], float | None],
    missing: Callable[[Candidate], str],
    describe: Callable[[Candidate, float, str], str],
) -> Verdict:
    """A target that a candidate's ``value`` must not exceed; fails when there is none."""
    problem = _unusable(rec, what, basis)
    actual = value(rec) if rec is not None else None
    if problem is None and rec is not None and actual is None:
        problem = missing(rec)
    if problem is not None or rec is None or actual is None:
        return Verdict(
            target=target,
            status="fail",
            reason=problem or f"no {what}",
            actual=None,
            limit=limit,
            unit=unit,
            gpu=rec.gpu if rec else None,
            count=rec.count if rec else None,
        )
    ok = actual <= limit
    return Verdict(
        target=target,
        status="pass" if ok else "fail",
        reason=describe(rec, actual, "≤" if ok else ">"),
        actual=round(actual, 6),
        limit=limit,
        unit=unit,
        gpu=rec.gpu,
        count=rec.count,
    )


def _checked(
    r: Candidate, figure: IntervalFigure, central: float | None, at: CheckAt
) -> float | None:
    """The figure a target is checked against: the estimate, or the high end of its 80%
    interval (the estimate itself where the plan has no interval for it)."""
    if at == "pessimistic" and figure in r.intervals:
        return r.intervals[figure].high
    return central


def _at_words(r: Candidate, figure: IntervalFigure, at: CheckAt) -> str:
    if at != "pessimistic":
        return ""
    if figure not in r.intervals:
        return ", the estimate: no interval for it"
    return ", the pessimistic end of its 80% interval"


def cost_verdict(
    limit: float, rec: Candidate | None, basis: str, at: CheckAt = "estimate"
) -> Verdict:
    return _at_most(
        "max_cost_usd",
        "usd",
        limit,
        rec,
        basis,
        what="cost",
        value=lambda r: _checked(r, "cost_usd", r.cost_usd, at),
        missing=lambda r: f"{r.gpu} has no price ({_why_unpriced(r)})",
        describe=lambda r, usd, cmp: (
            f"${usd:,.2f} on {r.count} x {r.gpu} ({basis}, {_priced_at(r)}"
            f"{_at_words(r, 'cost_usd', at)}) {cmp} ${limit:,.2f}"
        ),
    )


def _why_unpriced(r: Candidate) -> str:
    """The reason that says which price is missing (the recommendation's own words)."""
    said = [x for x in r.reasons if x.startswith("no ") and "price" in x]
    return "; ".join(said[:1] or r.reasons[-1:])


def _priced_at(r: Candidate) -> str:
    """Whose price a candidate's cost uses, e.g. "aws on_demand $6.88/GPU-h as of 2026-11-09"."""
    p = r.price
    if p is None:
        return f"{r.cost_basis} prices"
    kind = f" {p.kind}" if p.kind else ""
    term = f" {p.term}" if p.term else ""
    dated = f" as of {p.as_of}" if p.as_of else ""
    return f"{p.provider}{kind}{term} ${p.usd_per_gpu_hour:.2f}/GPU-h{dated}"


def time_verdict(
    limit: float, rec: Candidate | None, basis: str, at: CheckAt = "estimate"
) -> Verdict:
    return _at_most(
        "max_time_hours",
        "hours",
        limit,
        rec,
        basis,
        what="time",
        value=lambda r: _checked(r, "time_hours", r.time_hours, at),
        missing=lambda r: f"{r.gpu} has no time estimate",
        describe=lambda r, hours, cmp: (
            f"{hours:,.2f} h on {r.count} x {r.gpu} ({basis}{_at_words(r, 'time_hours', at)}) "
            f"{cmp} {limit:g} h"
        ),
    )


class HeadroomBasis(NamedTuple):
    """The GPUs the headroom is measured on: the ``fits`` target's, else the top
    recommendation's."""

    gpu: str
    gpu_count: int
    required_bytes: int | None
    """Per GPU at ``gpu_count``; None when the job cannot be laid out there."""

    usable_bytes: int


def headroom_verdict(limit: float, on: HeadroomBasis | None) -> Verdict:
    """``on`` None: no GPU fits the job."""
    if on is None or on.required_bytes is None:
        return Verdict(
            target="min_memory_headroom",
            status="fail",
            reason="the job does not fit, so it has no headroom"
            if on
            else "no GPU fits the job, so it has no headroom",
            actual=None,
            limit=limit,
            unit="fraction",
            gpu=on.gpu if on else None,
            count=on.gpu_count if on else None,
        )
    gpu, count, required, usable = on.gpu, on.gpu_count, on.required_bytes, on.usable_bytes
    headroom = round(1 - required / usable, 6)
    ok = headroom >= limit
    return Verdict(
        target="min_memory_headroom",
        status="pass" if ok else "fail",
        reason=(
            f"headroom {headroom:.1%} on {count} x {gpu} (needs {_gib(required)} per GPU of "
            f"{_gib(usable)} usable) {'≥' if ok else '<'} {limit:.1%}"
        ),
        actual=headroom,
        limit=limit,
        unit="fraction",
        gpu=gpu,
        count=count,
    )


def mig_verdict(
    gpu: GpuSpec, named: MigProfile, smallest: MigProfile | None, required: int
) -> Verdict:
    ok = required <= named.memory_bytes
    if smallest is None:
        reason = (
            f"no MIG profile of {gpu.id} holds the job's {_gib(required)}; "
            f"{named.name} offers {_gib(named.memory_bytes)} usable"
        )
    else:
        reason = (
            f"smallest profile holding {_gib(required)} on {gpu.id} is {smallest.name} "
            f"({_gib(smallest.memory_bytes)} usable); {named.name} ({_gib(named.memory_bytes)} usable) "
            f"{'holds' if ok else 'does not hold'} it"
        )
    return Verdict(
        target="mig_profile_at_most",
        status="pass" if ok else "fail",
        reason=reason,
        actual=required,
        limit=named.memory_bytes,
        unit="bytes",
        gpu=gpu.id,
        count=1,
        profile=smallest.name if smallest else None,
    )
