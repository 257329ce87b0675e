"""The recommendation: every candidate GPU's best plan, ranked by the objective.

``recommend`` resolves the job once, asks each candidate GPU for its plans (the
memory oracle shares estimator runs between GPUs, since a layout's memory is the
same on every card but for one overhead term), keeps each GPU's best plan for the
objective, scores the plans against the best one, and adds the scenario class, the
advice for the preferred or the top recommendation's GPU, and the hybrid comparison.
"""

from gpuplan.core.catalog import Catalog, GpuSpec
from gpuplan.core.recommend.advice import advice_target, advise
from gpuplan.core.recommend.context import gpu_context
from gpuplan.core.recommend.context_record import GpuContext
from gpuplan.core.recommend.disagg import with_disaggregation
from gpuplan.core.recommend.errors import InvalidRecommendation
from gpuplan.core.recommend.fit import MemoryOracle
from gpuplan.core.recommend.hybrid import compare_hybrid
from gpuplan.core.recommend.intervals import candidate_intervals, interval_reason
from gpuplan.core.recommend.job import Job, resolve_job
from gpuplan.core.recommend.moe_serving import expert_parallel_options
from gpuplan.core.recommend.option import (
    COST_OBJECTIVES,
    FEWEST_FIRST,
    finished,
    miss_key,
    objective_key,
    unpriced_key,
)
from gpuplan.core.recommend.option_record import Option
from gpuplan.core.recommend.pricing import basis_words, cloud_price, price_basis
from gpuplan.core.recommend.scenario import classify
from gpuplan.core.recommend.schema import (
    Candidate,
    Constraints,
    Objective,
    RecommendRequest,
    RecommendResponse,
    SearchStats,
)
from gpuplan.core.recommend.serving import serving_options
from gpuplan.core.recommend.training import given_option, training_options
from gpuplan.core.uncertainty import Spread


def recommend(request: RecommendRequest, catalog: Catalog) -> RecommendResponse:
    """Rank every candidate GPU and count for the request's job.

    Raises :class:`InvalidRecommendation` and the estimator's ``InvalidModel``, each
    naming the offending field.
    """
    job = resolve_job(request, catalog)
    c = request.constraints
    candidates = candidate_gpus(catalog, c)
    oracle = MemoryOracle(request.model, catalog, job.given.fsdp1)
    # The job as given, on one GPU: refused with the estimator's own field errors.
    base = oracle.first(job.workload)
    trainable = base.trainable_parameters
    contexts: dict[str, GpuContext] = {}
    best: list[Option] = []
    extra: list[Option] = []
    misses: list[Option] = []
    considered = 0
    for gpu in candidates:
        ctx = gpu_context(gpu, job, request.efficiency.mfu, request.efficiency.mbu, c)
        contexts[gpu.id] = ctx
        plans, miss = _plans(
            job,
            ctx,
            oracle,
            c,
            objective=request.objective,
            trainable=trainable,
            given=request.layout == "given",
            all_counts=request.all_counts,
        )
        considered += len(plans)
        admissible = [p for p in plans if p.admissible]
        if admissible:
            ranked = sorted(admissible, key=lambda p: objective_key(p, request.objective))
            best.append(ranked[0])
            if request.all_counts:
                extra.extend(ranked[1:])
        else:
            misses.append(min([*plans, miss], key=lambda p: miss_key(p, request.objective)))
    objective = request.objective
    meets = [*best, *extra]
    # Under a cost objective a plan without a price has no score against priced plans:
    # it is ranked apart, after them (COST_OBJECTIVES, unpriced_key).
    apart = [p for p in meets if objective in COST_OBJECTIVES and p.cost_usd is None]
    scored = _score([p for p in meets if p not in apart], objective)
    scored.sort(key=lambda r: (-r[1], objective_key(r[0], objective), r[0].gpu.id))
    apart.sort(key=lambda p: (*unpriced_key(p, objective), p.gpu.id))
    misses.sort(key=lambda p: (*miss_key(p, request.objective), p.gpu.id))
    by = "time" if objective == "balanced" else "GPU-hours"
    note = (
        f"unscored: no price on the basis ({basis_words(job)}); ranked after the priced "
        f"plans, by {by}"
    )
    ordered: list[tuple[Option, float | None, str | None]] = [
        *((p, s, None) for p, s in scored),
        *((p, None, note) for p in apart),
        *((p, 0.0, None) for p in misses),
    ]
    spreads: dict[tuple[object, ...], Spread] = {}  # the intervals' spreads, shared
    # Only the candidates returned get the figures their options deferred (finished).
    out = [
        _recommendation(finished(p), job, s, n, spreads=spreads)
        for p, s, n in ordered[: request.limit]
    ]
    target = advice_target(request, catalog, out[0].gpu if out else None)
    advice = advise(
        request, job, oracle=oracle, contexts=contexts, target=target.gpu, trainable=trainable
    )
    hybrid = (
        compare_hybrid(request, job, catalog, oracle, trainable)
        if c.deployment == "hybrid" or request.hybrid is not None
        else None
    )
    unverified = sorted({u for p in best for u in p.unverified})
    warnings = list(base.warnings)
    if job.batch.warning is not None:
        warnings.append(job.batch.warning)
    if not best:
        warnings.append(_closest(misses[0]) if misses else "no GPU in the candidate set")
    elif objective in COST_OBJECTIVES and all(p.cost_usd is None for p in best):
        warnings.append(
            f"no fitting plan has a price on the basis ({basis_words(job)}), so none is "
            "scored; choose pricing.providers that list these GPUs, or pass constraints.prices"
        )
    if oracle.exhausted:
        warnings.append(
            "the search reached its bound of memory estimates; larger counts or some advice may be missing"
        )
    return RecommendResponse(
        objective=request.objective,
        workload_kind="inference" if job.kind == "inference" else "training",
        recommendations=with_disaggregation(out, job, contexts, oracle, c),
        price_basis=price_basis(
            job, [g.id for g in candidates if contexts[g.id].price is None], c.deployment
        ),
        scenario=classify(base.required_bytes, catalog, lambda gpu: cloud_price(gpu, job)),
        advice=advice,
        advice_gpu=target.gpu.id if target.gpu is not None else None,
        hybrid=hybrid,
        assumptions=[*_assumptions(job, request), target.why],
        unverified=unverified,
        warnings=warnings,
        search=SearchStats(
            gpus=len(candidates), plans_considered=considered, estimates=oracle.calls
        ),
    )


def _plans(
    job: Job,
    ctx: GpuContext,
    oracle: MemoryOracle,
    c: Constraints,
    *,
    objective: Objective,
    trainable: int,
    given: bool,
    all_counts: bool,
) -> tuple[list[Option], Option]:
    if ctx.rate is None:
        miss = Option(
            gpu=ctx.gpu,
            count=1,
            layout=None,
            required=0,
            fits=False,
            admissible=False,
            reasons=[f"{ctx.gpu.id} has no matmul path for {job.workload.precision}"],
        )
        return [], miss
    if job.kind == "inference":
        # Without all_counts only the GPU's best plan is kept (serving_options' fewest).
        fewest = not all_counts and objective in FEWEST_FIRST
        plans, miss = serving_options(job, ctx, oracle, c, given=given, fewest=fewest)
        return (plans if given else [*plans, *expert_parallel_options(job, ctx, oracle, c)]), miss
    if given:
        option = given_option(job, ctx, oracle, c, trainable)
        return [option], option
    return training_options(
        job, ctx, oracle, c, objective=objective, trainable=trainable, all_counts=all_counts
    )


def candidate_gpus(catalog: Catalog, c: Constraints) -> list[GpuSpec]:
    include = {catalog.lookup(n, f"$.constraints.include[{i}]").id for i, n in enumerate(c.include)}
    exclude = {catalog.lookup(n, f"$.constraints.exclude[{i}]").id for i, n in enumerate(c.exclude)}
    gpus = [
        g
        for g in catalog
        if (not include or g.id in include)
        and g.id not in exclude
        and (not c.vendors or g.vendor in c.vendors)
    ]
    if not gpus:
        raise InvalidRecommendation([("$.constraints", "the constraints leave no GPU to consider")])
    return gpus


def _score(plans: list[Option], objective: Objective) -> list[tuple[Option, float]]:
    """Score in (0, 1]: the best plan's figure over this plan's (balanced: geometric mean
    of the cost and time ratios). Under a cost objective every plan given has a cost."""
    if not plans:
        return []

    def ratio(value: float | None, best: float) -> float:
        if value is None or value <= 0:
            return 0.0 if value is None else 1.0
        return best / value

    speeds = [p.speed_s for p in plans if p.speed_s is not None]
    fastest = min(speeds) if speeds else 0.0
    costs = [p.cost_usd for p in plans if p.cost_usd is not None]
    cheapest = min(costs) if costs else 0.0
    out = []
    for p in plans:
        if objective == "fastest":
            s = ratio(p.speed_s, fastest)
        elif objective == "energy":
            s = ratio(p.energy_kwh, min(q.energy_kwh or 0.0 for q in plans))
        else:
            money = ratio(p.cost_usd, cheapest)
            s = money if objective == "cheapest" else (money * ratio(p.speed_s, fastest)) ** 0.5
        out.append((p, round(s, 6)))
    return out


def _closest(p: Option) -> str:
    """The warning when no plan meets the constraints: what the nearest one misses."""
    where = f"{p.count} x {p.gpu.id}"
    if not p.breaches:
        return (
            f"no plan meets the constraints; no layout could be sized on any GPU (nearest: {where})"
        )
    misses = "; ".join(
        f"{b.constraint}: {b.detail}" + (f" ({b.factor:.3g}x)" if b.actual is not None else "")
        for b in p.breaches
    )
    return f"no plan meets the constraints; the nearest, {where}, misses {misses}; see advice"


def _recommendation(
    p: Option,
    job: Job,
    score: float | None,
    note: str | None = None,
    *,
    spreads: dict[tuple[object, ...], Spread] | None = None,
) -> Candidate:
    """The candidate of a plan; ``score`` None: an unpriced plan under a cost objective,
    with ``note`` saying so. ``spreads``: the request's memo of interval spreads."""
    usable = p.gpu.usable_memory_bytes
    reasons = list(p.reasons)
    if note is not None:
        reasons.append(note)
    intervals, widened = candidate_intervals(p, job, spreads)
    said = interval_reason(p, intervals, widened)
    if said is not None:
        reasons.append(said)
    if not p.fits and not (reasons and reasons[0].startswith("does not fit")):
        if p.layout is not None:
            reasons.insert(
                0,
                f"does not fit: needs {p.required / 2**30:.1f} GiB per GPU even at {p.count} GPU(s) "
                f"(most sharded layout tried), {usable / 2**30:.1f} GiB usable",
            )
        elif not reasons:
            reasons.append("no layout could be estimated for this GPU")
    return Candidate(
        gpu=p.gpu.id,
        name=p.gpu.name,
        count=p.count,
        fits=p.fits,
        layout=p.layout,
        required_bytes_per_gpu=p.required,
        usable_memory_bytes=usable,
        memory_utilization=round(p.required / usable, 4),
        throughput=p.throughput,
        time_hours=p.time_hours,
        evaluation_hours=p.evaluation_hours,
        usd_per_hour=p.usd_per_hour,
        cost_usd=p.cost_usd,
        cost_basis=p.cost_basis,  # type: ignore[arg-type]
        price=p.price,
        energy_kwh=p.energy_kwh,
        flops_per_watt=p.flops_per_watt,
        mfu=p.mfu,
        step=p.step,
        latency=p.latency,
        launch=p.launch,
        source=p.source,  # type: ignore[arg-type]
        kernel_source=p.kernel_source,  # type: ignore[arg-type]
        kernel_table=p.kernel_table,
        score=None if score is None else score if p.fits and p.admissible else 0.0,
        reasons=reasons,
        breaches=p.breaches,
        unverified=p.unverified,
        intervals=intervals,
    )


def _assumptions(job: Job, request: RecommendRequest) -> list[str]:
    c = request.constraints
    if request.layout == "given":
        layout = "every GPU is timed at exactly workload.parallelism (layout: given)"
    else:
        layout = (
            "the search chooses the layout: every count from 1 to gpus_per_node and every whole "
            "number of nodes above, up to max_gpus_per_job; at each, the fastest fitting of DDP, "
            "ZeRO-2, ZeRO-3/FSDP, tensor parallel in the node + FSDP, tensor x pipeline parallel, "
            "and for long sequences tensor x context parallel"
        )
    notes = [
        "memory per GPU is the estimator's required_bytes (the 95% high end of what nvidia-smi will show) for the layout chosen",
        layout,
        f"energy: board power = TDP x {c.power_fraction_of_tdp:.0%}, x PUE {c.pue:g}; host CPUs and network not included",
    ]
    if job.kind == "training":
        notes.append(
            f"training: {job.tokens:,.0f} tokens in steps of {job.batch.text}: the global batch, "
            "the same on every plan; time per step = matmuls at the GEMM efficiency of their "
            "width, attention, memory-bound kernels at the bandwidth, launches, recomputation, plus "
            "the communication the framework does not hide and the pipeline bubble "
            "(docs/recommendation.md); MFU counts model FLOPs (6N + attention), not recomputation"
        )
        ev = request.training.evaluation if request.training is not None else None
        if ev is not None:
            notes.append(
                f"evaluations: {ev.count:,} of {ev.tokens:,} tokens, each a forward pass on "
                "the plan's layout and micro-batch (no backward, recomputation or optimizer "
                "step), inside time_hours, cost and energy (evaluation_hours); throughput is "
                "the training steps' own"
            )
        if job.moe_layers:
            dispatcher = job.workload.parallelism.expert_dispatcher
            notes.append(
                f"MoE: routing assumed balanced; with expert parallelism the {dispatcher} "
                "dispatcher (parallelism.expert_dispatcher) sends "
                + (
                    "a copy of a token per routed expert"
                    if dispatcher == "alltoall"
                    else "a token once to each rank, and across nodes once to each node, "
                    "that holds any of its experts"
                )
            )
    else:
        notes.append(
            f"inference: prompt {job.prompt_tokens} and output {job.output_tokens} tokens per request; "
            + (
                f"{job.workload.batch_size} sequences in flight per replica (workload.batch_size)"
                if job.workload.batch_size > 1
                else "each replica batches continuously: as many sequences in flight as its paged KV "
                "cache holds after the weights, up to the server's cap (vLLM's max_num_seqs default) "
                "and the latency targets"
            )
            + f"; cost and energy over {job.duration_hours:g} h"
        )
    return notes
