"""The plan: one call that sizes, recommends, fits MIG and checks a job's targets.

``plan`` resolves every name the targets use first (so a typo is a 422 naming
``$.targets.fits.gpu`` before any work is done), then runs the memory estimate, the
recommendation (its request is the plan's, the targets removed) and the MIG fit,
and checks each target against them. Everything is a pure function of the request,
the catalog, the MIG tables and the fleet's measurements: the same input gives the
same bytes out.
"""

from collections.abc import Callable, Sequence

import msgspec

from gpuplan.core.catalog import Catalog, GpuSpec, UnknownGpu
from gpuplan.core.catalog.model import PRECISIONS
from gpuplan.core.ci.errors import InvalidCiPlan
from gpuplan.core.ci.identity import plan_id
from gpuplan.core.ci.mig_fit import mig_capable, mig_fit, smallest_holding
from gpuplan.core.ci.schema import CiPlan, CiReport, Targets, Verdict
from gpuplan.core.ci.sizing import Sized, layouts_at, size_at
from gpuplan.core.ci.verdicts import (
    HeadroomBasis,
    cost_verdict,
    fits_verdict,
    headroom_verdict,
    mig_verdict,
    time_verdict,
)
from gpuplan.core.fleet import MeasuredFlops
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest
from gpuplan.core.mig.load import builtin_tables
from gpuplan.core.mig.model import MigGpu, MigProfile
from gpuplan.core.mig.tables import profile_index, resolve
from gpuplan.core.recommend import InvalidRecommendation, recommend
from gpuplan.core.recommend.fit import MemoryOracle
from gpuplan.core.recommend.job import Job, resolve_job
from gpuplan.core.recommend.schema import (
    Candidate,
    ParallelLayout,
    RecommendRequest,
    TrainingVolume,
)
from gpuplan.core.record import Record

ASSUMPTIONS = [
    "fits: per-GPU required_bytes (the 95% high end of what nvidia-smi will show) at the target count, in the least "
    "memory-hungry layout the recommendation sizes at that count, against usable memory",
    "max_cost_usd / max_time_hours: the recommendation's best plan on the fits GPU with at most "
    "its count of GPUs, else the top recommendation",
    "min_memory_headroom: 1 - required/usable on the fits GPU at its count, else the top recommendation",
    "MIG: the smallest plain profile whose usable memory (as the driver reports it) holds the "
    "job's one-GPU required_bytes",
]


class _Resolved(Record, kw_only=True):
    """The targets' names resolved against the catalog and the MIG tables."""

    fits_gpu: GpuSpec | None
    mig: tuple[GpuSpec, MigGpu, MigProfile] | None


def check(
    request: CiPlan,
    catalog: Catalog,
    measured: Sequence[MeasuredFlops] | None = None,
    mig_tables: Sequence[MigGpu] | None = None,
) -> CiReport:
    """Check the plan's targets; raises :class:`~gpuplan.core.errors.InvalidRequest`
    subclasses naming the offending field."""
    tables = builtin_tables() if mig_tables is None else mig_tables
    request = _with_measured(request, measured, catalog)
    names = _resolve_targets(request.targets, catalog, tables)
    rec_request = _recommend_request(request, names.fits_gpu)
    try:
        job = resolve_job(rec_request, catalog)
        rec = recommend(rec_request, catalog)
    except InvalidRecommendation as exc:
        raise InvalidCiPlan(exc.errors) from None
    oracle = MemoryOracle(request.model, catalog, job.given.fsdp1)
    one_gpu = oracle.laid_out(
        job.workload, ParallelLayout(tensor=1, pipeline=1, data=1, zero_stage=0)
    )

    def required_on(gpu: GpuSpec) -> int | None:
        return oracle.required(one_gpu[0], gpu, one_gpu[1])

    fits = (
        (names.fits_gpu, request.targets.fits.count)
        if names.fits_gpu and request.targets.fits
        else None
    )
    chosen = _chosen(rec_request, rec.recommendations, fits, catalog)
    verdicts = _verdicts(
        request,
        names,
        recs=rec.recommendations,
        chosen=chosen,
        job=job,
        oracle=oracle,
        required_on=required_on,
    )
    mig = []
    for spec, table in mig_capable(catalog, tables):
        need = required_on(spec)
        if need is not None:
            mig.append(mig_fit(spec, table, need))
    memory = estimate(
        EstimateRequest(model=request.model, workload=request.workload, runtime=request.runtime),
        catalog,
    )
    assumptions = [*ASSUMPTIONS, *rec.assumptions]
    candidates = rec.recommendations
    if request.training is None and request.workload.mode != "inference":
        candidates = _without_volume(candidates)
        assumptions.append(
            f"no training work in the plan: candidates are ranked for a nominal "
            f"{NOMINAL_SAMPLES:,} samples; their time, cost and energy are left out"
        )
    unverified = list(rec.unverified)
    shaky = [f"{m.gpu} {m.profile}" for m in mig if m.unverified]
    if shaky:
        unverified.append("MIG profiles not confirmed on hardware: " + ", ".join(shaky))
    return CiReport(
        plan_id=plan_id(request),
        passed=all(v.status == "pass" for v in verdicts),
        verdicts=verdicts,
        estimate=memory,
        recommendations=candidates,
        price_basis=rec.price_basis,
        scenario=rec.scenario,
        mig=mig,
        advice=rec.advice,
        advice_gpu=rec.advice_gpu,
        hybrid=rec.hybrid,
        assumptions=assumptions,
        unverified=unverified,
        warnings=rec.warnings,
    )


TARGET_OPTIONS = frozenset({"check_at"})
"""Fields of ``targets`` that say how targets are checked, not targets themselves."""


def _resolve_targets(t: Targets, catalog: Catalog, tables: Sequence[MigGpu]) -> _Resolved:
    """Every name the targets use, resolved before any work (a typo is a 422 at once)."""
    names = [name for name in t.__struct_fields__ if name not in TARGET_OPTIONS]
    if all(getattr(t, name) is None for name in names):
        raise InvalidCiPlan([("$.targets", "name at least one target: " + ", ".join(names))])
    fits_gpu = catalog.lookup(t.fits.gpu, "$.targets.fits.gpu") if t.fits else None
    mig = None
    if t.mig_profile_at_most is not None:
        where = "$.targets.mig_profile_at_most"
        spec, table = resolve(catalog, tables, t.mig_profile_at_most.gpu, f"{where}.gpu")
        index = profile_index(table, t.mig_profile_at_most.profile, f"{where}.profile")
        mig = (spec, table, table.profiles[index])
    return _Resolved(fits_gpu=fits_gpu, mig=mig)


def _verdicts(
    request: CiPlan,
    names: _Resolved,
    *,
    recs: list[Candidate],
    chosen: tuple[Candidate | None, str],
    job: Job,
    oracle: MemoryOracle,
    required_on: Callable[[GpuSpec], int | None],
) -> list[Verdict]:
    """One verdict per target present, in the order of the schema's fields."""
    t = request.targets
    fits_gpu = names.fits_gpu
    verdicts: list[Verdict] = []
    sized: Sized | None = None
    if t.fits is not None and fits_gpu is not None:
        sized = size_at(job, oracle, fits_gpu, t.fits.count, request.constraints)
        why = "the estimator refuses every layout at this count"
        if job.kind == "training" and not layouts_at(job, t.fits.count, request.constraints):
            why = (
                f"no layout of {t.fits.count} GPUs keeps the job's global batch of "
                f"{job.global_batch} sequence(s): data-parallel ranks must divide it, tensor and "
                "pipeline degrees the model's heads and layers"
            )
        if (
            t.fits.count > 1
            and request.constraints.required_interconnect == "nvlink"
            and fits_gpu.interconnect.gpu_link is None
        ):
            sized, why = None, "constraints.required_interconnect is nvlink and it has none"
        verdicts.append(fits_verdict(t.fits, fits_gpu, sized, why))
    if t.max_cost_usd is not None:
        verdicts.append(cost_verdict(t.max_cost_usd, *chosen, at=t.check_at))
    if t.max_time_hours is not None:
        verdicts.append(time_verdict(t.max_time_hours, *chosen, at=t.check_at))
    if names.mig is not None:
        spec, table, named = names.mig
        need = required_on(spec)
        if need is None:
            raise InvalidCiPlan([("$.workload", "the estimator cannot size the job on one GPU")])
        verdicts.append(mig_verdict(spec, named, smallest_holding(table, need), need))
    if t.min_memory_headroom is not None:
        if fits_gpu is not None and t.fits is not None:
            on: HeadroomBasis | None = HeadroomBasis(
                fits_gpu.id,
                t.fits.count,
                sized.required_bytes if sized else None,
                fits_gpu.usable_memory_bytes,
            )
        else:
            top = recs[0] if recs and recs[0].fits else None
            on = (
                HeadroomBasis(
                    top.gpu, top.count, top.required_bytes_per_gpu, top.usable_memory_bytes
                )
                if top
                else None
            )
        verdicts.append(headroom_verdict(t.min_memory_headroom, on))
    return verdicts


def _with_measured(
    request: CiPlan, measured: Sequence[MeasuredFlops] | None, catalog: Catalog
) -> CiPlan:
    """The fleet's measured FLOP/s merged under the request's own, per GPU and precision.

    The request's names are resolved to catalog ids first, so ``NVIDIA H100 80GB HBM3``
    in the request and ``h100-sxm5-80gb`` from the fleet are one GPU; the request wins.
    A name the catalog does not know is kept, for the recommendation to refuse by path.
    """
    if not measured:
        return request
    merged: dict[str, dict[str, float]] = {}
    for m in sorted(measured, key=lambda m: (m.catalog_id, m.dtype)):
        if m.dtype in PRECISIONS and m.median_flops_per_second > 0:
            merged.setdefault(m.catalog_id, {})[m.dtype] = m.median_flops_per_second
    for name, rates in request.measured_flops.items():
        try:
            key = catalog.get(name).id
        except UnknownGpu:
            key = name
        for dtype, value in rates.items():
            merged.setdefault(key, {})[dtype] = value
    return msgspec.convert({**msgspec.to_builtins(request), "measured_flops": merged}, CiPlan)


NOMINAL_SAMPLES = 1_000_000
"""The work a plan without ``training`` is ranked for: only its time and cost depend on
it, and those are left out of such a plan's answer."""

VOLUME_TARGETS = ("max_cost_usd", "max_time_hours")


def _needs_nominal_volume(request: CiPlan) -> bool:
    """A training plan that gives no work: its candidates are ranked per unit of work. A
    time or cost target needs the real volume, so then the request is refused."""
    if request.workload.mode == "inference" or request.training is not None:
        return False
    wanting = [name for name in VOLUME_TARGETS if getattr(request.targets, name) is not None]
    if wanting:
        raise InvalidCiPlan(
            [
                (
                    "$.training",
                    f"training work is required for the {' and '.join(wanting)} "
                    "target(s): training_tokens, samples, or epochs with dataset_samples",
                )
            ]
        )
    return True


def _without_volume(candidates: list[Candidate]) -> list[Candidate]:
    """Candidates of a nominal volume, with what depends on the volume left out."""
    return [
        msgspec.structs.replace(c, time_hours=None, cost_usd=None, energy_kwh=None)
        for c in candidates
    ]


def _recommend_request(request: CiPlan, fits_gpu: GpuSpec | None) -> RecommendRequest:
    fields = {name: getattr(request, name) for name in RecommendRequest.__struct_fields__}
    if _needs_nominal_volume(request):
        fields["training"] = TrainingVolume(samples=NOMINAL_SAMPLES)
    constraints = request.constraints
    if fits_gpu is not None and constraints.preferred_gpu is None:
        # Advice then explains how to make the job fit the GPU the plan targets.
        constraints = msgspec.structs.replace(constraints, preferred_gpu=fits_gpu.id)
    fields["constraints"] = constraints
    return RecommendRequest(**fields)


def _chosen(
    rec_request: RecommendRequest,
    recs: list[Candidate],
    fits: tuple[GpuSpec, int] | None,
    catalog: Catalog,
) -> tuple[Candidate | None, str]:
    """The plan the cost and time targets are checked against, and how it was chosen.

    With a ``fits`` target: the recommendation's best plan on that GPU using at most
    its ``count`` GPUs (the recommendation asked with ``include`` = that GPU and
    ``max_gpus_per_job`` = the count), which is how it answers "we have N of these".
    Without: the top recommendation.
    """
    target = rec_request.constraints
    if fits is None:
        return (recs[0] if recs else None), "top recommendation"
    fits_gpu, count = fits[0], min(fits[1], target.max_gpus_per_job)
    narrowed = msgspec.structs.replace(
        rec_request,
        constraints=msgspec.structs.replace(target, include=[fits_gpu.id], max_gpus_per_job=count),
        hybrid=None,
        all_counts=False,
        limit=1,
    )
    basis = f"best plan on at most {count} x {fits_gpu.id}"
    try:
        found = recommend(narrowed, catalog).recommendations
    except InvalidRecommendation:
        return None, f"{fits_gpu.id} is ruled out by the constraints"
    return (found[0] if found else None), basis
