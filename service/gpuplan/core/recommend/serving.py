"""Serving options of one GPU model: replicas of 1, 2, 4 or 8 tensor-parallel GPUs, each
running continuous batching, and as many replicas as the request rate needs.

A replica's concurrency (sequences in flight) is what a server would reach: as many as
its paged KV cache holds after the weights, at most the server's sequence cap, and no
more than keep the latency targets. More sequences per replica means fewer replicas
(the weights are read once per step for all of them) until the step turns compute-bound.
"""

import functools
import math
from collections.abc import Callable

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.memory.kernels import materializes_scores
from gpuplan.core.memory.schema import Workload
from gpuplan.core.perf.collectives import library_for
from gpuplan.core.perf.kernels import kernels_used
from gpuplan.core.perf.queueing import (
    LoadPoint,
    Scheduler,
    StepTable,
    chunk_jump_share,
    fewest_servers,
    max_rate,
    p95s,
    saturation_rate,
    slo_margin,
    under_load,
)
from gpuplan.core.perf.serve import (
    Replica,
    Served,
    Stepper,
    apart_step_seconds,
    budget_concurrency,
    serve,
)
from gpuplan.core.perf.serve_shape import ServeShape
from gpuplan.core.recommend.context import TP_DEGREES, link_over, multi_gpu_allowed
from gpuplan.core.recommend.context_record import GpuContext
from gpuplan.core.recommend.engine import (
    engine_spec,
    longest_fitting,
    needed_total,
    sequence_cap,
    step_factor,
    token_budget,
    whole_blocks,
)
from gpuplan.core.recommend.engine_records import EngineSpec
from gpuplan.core.recommend.fit import MemoryOracle, runtime_of
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.launch import Plan, launch
from gpuplan.core.recommend.option import breach, layout_breaches, memory_breach, pricing
from gpuplan.core.recommend.option_record import Option
from gpuplan.core.recommend.replica import Profile, ReplicaMemory
from gpuplan.core.recommend.schema import (
    Breach,
    ConcurrencyLimit,
    Constraints,
    InferenceVolume,
    Latency,
    LatencyKind,
    ParallelLayout,
    Percentiles,
    Slo,
    Throughput,
    UnderLoad,
)


def serving_options(
    job: Job,
    ctx: GpuContext,
    oracle: MemoryOracle,
    c: Constraints,
    *,
    given: bool = False,
    fewest: bool = False,
) -> tuple[list[Option], Option]:
    """Every tensor-parallel degree that fits, each with the replicas the rate needs;
    ``given``: only the workload's own degree and replica count, fitting or not.

    ``fewest``: the caller keeps only this GPU's best plan under an objective that ranks
    one GPU model's plans by their count first (``cheapest`` and ``energy``: cost, GPU-hours
    and energy are the count times one figure of the GPU, and ties go to fewer GPUs). A
    degree above the fewest GPUs of a plan already admissible needs more GPUs than that
    plan, so it cannot be chosen and is not served (the degrees rise)."""
    gpu = ctx.gpu
    options: list[Option] = []
    miss = Option(gpu=gpu, count=1, layout=None, required=0, fits=False, admissible=False)
    arch = job.arch
    spec = engine_spec(job.inference.engine)
    most = spec.max_tensor_parallel or TP_DEGREES[-1]
    degrees = (
        [job.given.tensor]
        if given
        else [1]
        + [
            t
            for t in TP_DEGREES
            if arch is not None
            and arch.num_heads % t == 0
            and t <= c.gpus_per_node
            and t <= c.max_gpus_per_job
            and t <= most
        ]
    )
    closest: tuple[int, int, Workload, ReplicaMemory] | None = None
    fewest_admissible: int | None = None
    for tp in degrees:
        if not given and not multi_gpu_allowed(gpu, tp, c):
            break
        if fewest and fewest_admissible is not None and tp > fewest_admissible:
            break
        if not given and c.gpu_counts and not any(n % tp == 0 for n in c.gpu_counts):
            continue
        layout = ParallelLayout(tensor=tp, pipeline=1, data=1, zero_stage=0)
        workload, key = oracle.laid_out(job.workload, layout)
        memory = replica_memory(job, oracle, workload, gpu, tp, key=key)
        if memory is None:
            continue
        if not given:
            # A replica that does not fit is only ever the GPU's closest miss, chosen by
            # its required bytes alone (which need no timing): only the one chosen is
            # served, after the loop (about half the options of a large model miss).
            length, fits = fit_of(job, gpu, memory, spec, workload.batch_size)
            if not fits:
                required = _unfit_required(memory, spec, length, workload.batch_size)
                if closest is None or required < closest[0]:
                    closest = (required, tp, workload, memory)
                continue
        option = serve_option(
            job,
            ctx,
            workload,
            tp=tp,
            memory=memory,
            c=c,
            oracle=oracle,
            replicas=job.given.data if given else None,
        )
        options.append(option)
        if option.admissible and (fewest_admissible is None or option.count < fewest_admissible):
            fewest_admissible = option.count
    # The closest miss is only ever shown when no plan of the GPU fits (a plan that fits
    # ranks before any that does not: miss_key), so it is served only then.
    if closest is not None and not any(o.fits for o in options):
        _, tp, workload, memory = closest
        miss = serve_option(job, ctx, workload, tp=tp, memory=memory, c=c, oracle=oracle)
    return options, miss


def replica_memory(
    job: Job,
    oracle: MemoryOracle,
    workload: Workload,
    gpu: GpuSpec,
    tp: int,
    *,
    key: bytes | None = None,
) -> "ReplicaMemory | None":
    """One GPU of a replica of the laid-out ``workload`` as the request's engine fills
    it; None when the estimator refuses the layout."""
    key = key if key is not None else msgspec.json.encode(workload)
    # Memoized for the request: the serving search, the expert-parallel replicas, the
    # disaggregated comparison and the advice ask for the same replicas. A pure
    # function of its arguments (the oracle's estimates are memoized too, so a second
    # ask makes no estimate); the entry keeps ``job`` and ``gpu`` alive, so their ids
    # are not reused meanwhile.
    memo = (key, id(job), id(gpu), tp)
    hit = oracle.replicas.get(memo)
    if hit is not None:
        return hit[2]
    m = oracle.measures(workload, gpu, key)
    base = oracle.response(workload, key)
    if m is None or base is None:
        memory = None
    else:
        spec = engine_spec(job.inference.engine)
        memory = ReplicaMemory.of(
            job,
            workload,
            gpu,
            spec=spec,
            tp=tp,
            measures=m,
            base=base,
            profile=_profile(job, spec, oracle, workload, gpu, key=key),
        )
    oracle.replicas[memo] = (job, gpu, memory)
    return memory


def stepper_for(
    job: Job, oracle: MemoryOracle, memory: ReplicaMemory, shape: ServeShape, replica: Replica
) -> Stepper:
    """The replica's step function, one per request for each replica when the request
    compares disaggregated serving (memoized on the oracle: the serving search and the
    comparison's decode and prefill pools time the same replicas, and a stepper keeps the
    steps it timed).

    Keyed by ``id`` of the replica's memory, which :func:`replica_memory` memoizes by the
    job, the laid-out workload, the GPU and the degree (so it fixes ``shape``, the model's
    FLOPs and, the request's constraints given, the link and the collectives library; the
    entry keeps it alive, so its ``id`` is not reused), and by what the GPU context adds
    (its rates, kept alive by the stepper, and bandwidth share) and the engine's step
    factor."""
    if not job.inference.compare_disaggregated:
        # Only the comparison times a replica twice: kept to the end of the request, the
        # steppers cost the other serving answers about 1% (what they keep is collected).
        return Stepper(job.flops, shape, replica)
    key = (id(memory), id(replica.rates), replica.mbu, replica.mbu_given, replica.serial)
    hit = oracle.steppers.get(key)
    if hit is None:
        hit = oracle.steppers[key] = (memory, Stepper(job.flops, shape, replica))
    return hit[1]


def _profile(
    job: Job,
    spec: EngineSpec,
    oracle: MemoryOracle,
    workload: Workload,
    gpu: GpuSpec,
    *,
    key: bytes,
) -> Profile | None:
    """The profile step of ``spec`` estimated on ``gpu``; None for an engine without one,
    a model without a shape, or a step the estimator refuses. ``key``: the laid-out
    ``workload``'s; the step's estimate is memoized on the oracle by it, the step's tokens
    and what the estimate reads of the GPU (its architecture and runtime:
    ``MemoryOracle.measures``), so the GPUs of one architecture share it."""
    if spec.profile_tokens == "none" or job.arch is None or not spec.paged:
        return None
    tokens = token_budget(
        spec, gpu, job.inference.max_batched_tokens, job.prompt_tokens * workload.batch_size
    )
    memo = (key, tokens, gpu.architecture, runtime_of(gpu))
    if memo in oracle.profiles:
        return oracle.profiles[memo]
    profile = oracle.profiles[memo] = _profile_step(oracle, workload, gpu, tokens)
    return profile


def _profile_step(
    oracle: MemoryOracle, workload: Workload, gpu: GpuSpec, tokens: int
) -> Profile | None:
    """:func:`_profile`'s estimate: one forward of ``tokens`` on ``gpu``."""
    # The profile skips attention (vLLM) or runs it fused: no materialized scores.
    step = msgspec.structs.replace(
        workload,
        batch_size=1,
        sequence_length=tokens,
        max_new_tokens=0,
        attention="sdpa" if workload.attention == "eager" else workload.attention,
    )
    key = msgspec.json.encode(step)
    m = oracle.measures(step, gpu, key)
    r = oracle.response(step, key)
    if m is None or r is None:
        return None
    b = r.breakdown
    return Profile(
        non_kv_bytes=float(m.device - b.kv_cache_bytes),
        activation_bytes=float(b.activations_bytes + b.temporary_bytes),
        tokens=tokens,
    )


Run = Callable[[int], Served]
"""One replica's steady state at a concurrency."""

_TARGETS: tuple[ConcurrencyLimit, ...] = (
    "max_time_to_first_token_s",
    "max_time_per_output_token_s",
)


def _breach(s: Served, iv: InferenceVolume) -> ConcurrencyLimit | None:
    """The first latency target ``s`` misses. ``slo.tpot_p95_s`` caps the concurrency
    at the saturated step: no request's time per output token exceeds that step's by
    more than the prefills beside it, whatever the load, so the p95 holds at any rate."""
    target = iv.max_time_to_first_token_s
    if target is not None and s.time_to_first_token_s > target:
        return "max_time_to_first_token_s"
    return _tpot_breach(s.time_per_output_token_s, iv)


def _tpot_breach(tpot: float, iv: InferenceVolume) -> ConcurrencyLimit | None:
    """The first target on the time per output token that ``tpot`` misses."""
    target = iv.max_time_per_output_token_s
    if target is not None and tpot > target:
        return "max_time_per_output_token_s"
    slo = iv.slo
    if slo is not None and slo.tpot_p95_s is not None and tpot > slo.tpot_p95_s:
        return "slo.tpot_p95_s"
    return None


MAX_SLO_REPLICAS_FACTOR = 64
"""The SLO search adds replicas up to this many times what the rate alone needs; a
target still missed there is a breach (the prefill alone outlasts it)."""


def slo_replicas(steps: StepTable, rate: float, needed: int, iv: InferenceVolume) -> int:
    """The fewest replicas, at least ``needed``, whose share of ``rate`` keeps the p95
    targets (percentiles fall as each replica's arrival rate falls): ``needed`` when it
    keeps them, the bound when even that many miss, else the search of the bracket
    between (:func:`fewest_servers`)."""
    slo = iv.slo
    ttft, tpot = (slo.ttft_p95_s, slo.tpot_p95_s) if slo is not None else (None, None)

    def probe(n: int) -> tuple[bool, float]:
        return slo_margin(steps, rate / n, ttft, tpot)

    kept, over = probe(needed)
    if kept:
        return needed
    most = needed * MAX_SLO_REPLICAS_FACTOR
    kept, over_most = probe(most)
    if not kept:
        return most

    def jump(kept: int, missed: int) -> float | None:
        return chunk_jump_share(steps, rate, kept, missed) if ttft is not None else None

    return fewest_servers(probe, needed, most, over, over_most, jump=jump)


def scale(
    queue: "EngineQueue | None",
    needed: int,
    given: int | None,
    *,
    fits: bool,
    tp: int,
    c: Constraints,
) -> tuple[int, int]:
    """The replicas (``given``, else what the rate and, under ``inference.slo``, its p95
    targets need) and the replicas needed. The load at that count is left to
    :func:`load_at`, for the candidates a response shows; the SLO's breaches read its
    p95s alone (:func:`slo_breaches`)."""
    search = queue is not None and fits and given is None
    rate = queue.rate if queue is not None else None
    if queue is not None and rate and search:
        # Chunked prefill's steps are slower than their average share (a prompt-carrying
        # step is compute-bound, a decode-only one reads the weights): past the queue's
        # own saturation rate, add replicas until the queue is stable.
        needed = max(needed, math.floor(rate / saturation_rate(queue.steps)) + 1)
        if queue.job.inference.slo is not None:
            needed = queue.replicas(needed)
    # A replica that does not fit is shown alone: how many it would take says nothing.
    replicas = given or (_allowed_replicas(needed, tp, c) if fits else 1)
    return replicas, needed


def load_at(queue: "EngineQueue | None", replicas: int, *, fits: bool) -> LoadPoint | None:
    """One replica's load at its share of the request rate; a plan that does not fit has
    no load to speak of."""
    rate = queue.rate if queue is not None else None
    if queue is None or not rate or not fits:
        return None
    return under_load(queue.steps, rate / replicas)


class EngineQueue:
    """An engine's scheduler as the queueing model sees it (``core/perf/queueing.py``):
    its step function, its caps, and the share of the request rate one scheduler takes.
    ``ways``: schedulers per replica, each taking an even share of the replica's
    arrivals (the data-parallel attention ranks of an expert-parallel replica, each of
    which admits and steps its own sequences); 1 for a tensor-parallel replica."""

    def __init__(
        self, job: Job, step: Callable[[float, float], float], cap: int, budget: int, ways: int = 1
    ) -> None:
        self.job = job
        self.step = step
        self.ways = ways
        self.sched = Scheduler(
            cap=cap,
            budget=budget,
            prompt_tokens=job.prompt_tokens,
            output_tokens=max(job.output_tokens, 1),
        )

    @property
    def rate(self) -> float | None:
        """Arrivals per second of one replica's worth of schedulers, per scheduler: the
        request rate over ``ways`` (a replica count divides it further)."""
        rps = self.job.requests_per_second
        return rps / self.ways if rps else None

    @functools.cached_property
    def steps(self) -> StepTable:
        """The step function tabulated, built only for a plan under a rate or an SLO."""
        return StepTable(self.step, self.sched)

    def replicas(self, needed: int) -> int:
        """Replicas for the request rate within ``inference.slo`` (at least ``needed``)."""
        rate, iv = self.rate, self.job.inference
        if not rate or iv.slo is None:
            return needed
        return slo_replicas(self.steps, rate, needed, iv)

    def slo_rate(self) -> float | None:
        """The highest rate one replica serves within ``inference.slo`` (all its
        schedulers)."""
        slo = self.job.inference.slo
        if slo is None:
            return None
        return max_rate(self.steps, slo.ttft_p95_s, slo.tpot_p95_s) * self.ways


def engine_queue(
    job: Job, shape: ServeShape, replica: Replica, cap: int, stepper: Stepper | None = None
) -> EngineQueue:
    """A tensor-parallel replica's queue: the speed model's engine step (the same
    function the saturated plan uses; with SGLang's prefill batches apart from decodes,
    a decode step and the prefill batches between two of them). ``stepper``: the
    replica's, when the caller keeps one."""
    timed = stepper or Stepper(job.flops, shape, replica)
    mixed, flops = job.inference.mixed_chunk, job.flops  # read once: a search steps often

    def step(n: float, p: float) -> float:
        if not mixed:
            return apart_step_seconds(
                flops, shape, replica, decode=round(n), prompt=p, stepper=timed
            )
        return timed(round(n), p)[0]

    return EngineQueue(job, step, cap, shape.token_budget)


def _misfit(required: int, tp: int, what: str, engine: str, gpu: GpuSpec) -> str:
    return (
        f"does not fit: needs {required / 2**30:.1f} GiB per GPU at tensor parallel {tp} for the "
        f"weights, runtime and the KV cache of {what} (at 95% confidence, and as "
        f"{engine} shares the GPU), {gpu.usable_memory_bytes / 2**30:.1f} GiB usable"
    )


def _rate_breaches(job: Job, s: Served, replicas: int, needed: int, *, fits: bool) -> list[Breach]:
    """The request rate the replicas miss, and the queue-free ``max_*`` targets."""
    breaches: list[Breach] = []
    if replicas < needed and job.requests_per_second and fits:
        served = replicas * s.requests_per_s
        breaches.append(
            breach(
                "inference.requests_per_second",
                served,
                job.requests_per_second,
                "requests/s",
                f"{replicas} replica(s) serve {served:.3g} requests/s, under the "
                f"{job.requests_per_second:g} requested: {needed} needed",
                at_least=True,
            )
        )
    for name, value in zip(
        _TARGETS, (s.time_to_first_token_s, s.time_per_output_token_s), strict=True
    ):
        target = getattr(job.inference, name)
        if target is not None and value > target:
            breaches.append(
                breach(
                    f"inference.{name}",
                    value,
                    target,
                    "s",
                    f"{value:.3g} s at {s.batch} sequence(s) in flight, over {name} {target:g} s",
                )
            )
    return breaches


def _concurrency(
    run: Callable[[int], Served],
    job: Job,
    memory: ReplicaMemory,
    *,
    spec: EngineSpec,
    gpu: GpuSpec,
    shape: ServeShape,
    w: Workload,
    length: int,
    static_batch: bool,
    tpot: Callable[[int], float] | None = None,
    cap_by_tpot: bool = False,
) -> tuple[Served, ConcurrencyLimit, int]:
    """The replica served at its concurrency, what limits it, and its resident bytes: a
    static batch at ``batch_size``; else the largest concurrency the KV cache, the
    server's cap and its token budget allow within the latency targets."""
    if static_batch:
        return (
            run(w.batch_size),
            "batch_size",
            memory.resident(w.batch_size, static_batch=True),
        )
    held = memory.sequences
    kv: list[tuple[int, ConcurrencyLimit]] = [] if held is None else [(held, "kv_cache")]
    server_cap = sequence_cap(
        spec,
        gpu,
        given=job.inference.max_concurrency,
        batch=w.batch_size,
        pool_tokens=memory.fits_length().tokens(),
        length=length or memory.full_tokens,
    )
    limits: list[tuple[int, ConcurrencyLimit]] = [
        *kv,
        (server_cap, "max_concurrency"),
        (budget_concurrency(shape), "token_budget"),
    ]
    cap, limit = min(limits, key=lambda pair: pair[0])
    s, limit = choose_concurrency(
        run, max(cap, 1), limit, job.inference, tpot, cap_by_tpot=cap_by_tpot
    )
    return s, limit, memory.resident(s.batch, static_batch=False)


def _unfit_required(memory: ReplicaMemory, spec: EngineSpec, length: int, batch: int) -> int:
    """What a replica that does not fit would need: the engine's total for the weights,
    the runtime and the KV cache of one sequence at full length (a static batch: all)."""
    return max(
        memory.estimate_bytes,
        math.ceil(
            needed_total(
                spec,
                fraction=memory.fraction,
                static=memory.static_bytes,
                weights=memory.weights_bytes,
                runtime=memory.runtime_bytes,
                kv=memory.per_token_bytes
                * whole_blocks(max(length, memory.full_tokens), memory.block_tokens)
                * (1 if spec.paged else batch),
            )
        ),
    )


def finisher(
    queue: EngineQueue | None,
    *,
    replicas: int,
    at: int,
    plan: Plan,
    job: Job,
    gpu: GpuSpec,
    w: Workload,
    fits: bool,
) -> Callable[[Option], Option]:
    """What a serving plan defers until it is shown: one replica's load, the rate it
    sustains within the SLO, their reason line (at ``at``, where the reasons of the load
    belong) and the launch command. None of them changes a ranking; the SLO's breaches
    were decided by the search (:func:`slo_breaches`, from the same p95s)."""

    def finish(option: Option) -> Option:
        iv = job.inference
        slo_rate = queue.slo_rate() if queue is not None and fits else None
        at_load = load_at(queue, replicas, fits=fits)
        per = "attention rank" if queue is not None and queue.ways > 1 else "replica"
        figure, load_reasons, _ = load_notes(at_load, iv.slo, slo_rate, replicas, fits, per)
        assert option.latency is not None
        return msgspec.structs.replace(
            option,
            latency=msgspec.structs.replace(
                option.latency, under_load=figure, max_requests_per_s_within_slo=slo_rate
            ),
            launch=launch(
                plan,
                engine=iv.engine,
                version=iv.engine_version,
                gpu=gpu,
                w=w,
                model=job.model_path,
                mixed_chunk=iv.mixed_chunk,
            ),
            reasons=[*option.reasons[:at], *load_reasons, *option.reasons[at:]],
            finish=None,
        )

    return finish


def _kind_words(kind: LatencyKind, s: Served) -> str:
    """What the plan's TTFT is, in words (issue 34: both figures are called TTFT)."""
    ttft = f"{s.time_to_first_token_s * 1000:.0f} ms"
    if kind == "static_batch":
        return (
            f"static batch of {s.batch}: TTFT {ttft} is the whole batch's prefill (every "
            "prompt at once), "
        )
    return f"steady state, one arriving request at this concurrency, queueing aside: TTFT {ttft}, "


def load_notes(  # noqa: PLR0917 - the load and what it is judged against
    load: LoadPoint | None,
    slo: Slo | None,
    slo_rate: float | None,
    replicas: int,
    fits: bool,
    per: str = "replica",
) -> tuple[UnderLoad | None, list[str], list[Breach]]:
    """The figure under load, its reason line, and the p95 targets it misses; ``per``:
    what one queue is (a replica, or an attention rank of an expert-parallel one)."""
    if load is None:
        return None, [], []
    figure = _under_load(load)
    if figure is None:
        return (
            None,
            [
                f"under load: {load.rate_per_s:.3g} requests/s per {per} is at or past the "
                f"{load.saturation_rate_per_s:.3g} one {per} can serve; the queue grows "
                "without bound"
            ],
            [],
        )
    ft, fp = figure.time_to_first_token_s, figure.time_per_output_token_s
    within_slo = (
        f"; one replica sustains {slo_rate:.3g} requests/s within the SLO"
        if slo_rate is not None
        else ""
    )
    reasons = [
        f"under load ({figure.requests_per_s:.3g} requests/s per {per}, Poisson; "
        f"{figure.utilization:.0%} of saturation, {figure.wait_probability:.0%} of "
        f"arrivals queue for a slot): TTFT p50/p95/p99 {ft.p50 * 1000:.0f}/"
        f"{ft.p95 * 1000:.0f}/{ft.p99 * 1000:.0f} ms, TPOT {fp.p50 * 1000:.1f}/"
        f"{fp.p95 * 1000:.1f}/{fp.p99 * 1000:.1f} ms{within_slo}"
    ]
    if slo is None or not fits:
        return figure, reasons, []
    p95 = (ft.p95, fp.p95)
    return figure, reasons, _slo_breaches(p95, figure.requests_per_s, slo, replicas, per)


def slo_breaches(
    queue: "EngineQueue | None", replicas: int, slo: Slo | None, fits: bool, per: str = "replica"
) -> list[Breach]:
    """The p95 targets one replica's share of the rate misses (:func:`load_notes`'s,
    from the p95s alone: the SLO search read them, and the rest of the figure is left to
    the candidates a response shows)."""
    rate = queue.rate if queue is not None else None
    if queue is None or not rate or slo is None or not fits:
        return []
    share = rate / replicas
    p95 = p95s(queue.steps, share)
    return [] if p95 is None else _slo_breaches(p95, share, slo, replicas, per)


def _slo_breaches(
    p95: tuple[float, float], rate: float, slo: Slo, replicas: int, per: str
) -> list[Breach]:
    breaches: list[Breach] = []
    each = "each" if per == "replica" else f"per {per}"
    for field, target, value in (
        ("ttft_p95_s", slo.ttft_p95_s, p95[0]),
        ("tpot_p95_s", slo.tpot_p95_s, p95[1]),
    ):
        if target is not None and value > target:
            breaches.append(
                breach(
                    f"inference.slo.{field}",
                    value,
                    target,
                    "s",
                    f"p95 {value:.3g} s with {replicas} replica(s) at "
                    f"{rate:.3g} requests/s {each}, over slo.{field} {target:g} s",
                )
            )
    return breaches


def _under_load(point: LoadPoint) -> UnderLoad | None:
    """The schema's figure; None past saturation (the queue has no steady state)."""
    if not math.isfinite(point.ttft_s.p99) or not math.isfinite(point.tpot_s.p99):
        return None
    return UnderLoad(
        requests_per_s=point.rate_per_s,
        utilization=point.rate_per_s / point.saturation_rate_per_s,
        mean_in_flight=point.mean_in_flight,
        wait_probability=point.wait_probability,
        time_to_first_token_s=Percentiles(**point.ttft_s._asdict()),
        time_per_output_token_s=Percentiles(**point.tpot_s._asdict()),
    )


def choose_concurrency(
    timed: Run,
    cap: int,
    limit: ConcurrencyLimit,
    iv: InferenceVolume,
    tpot: Callable[[int], float] | None = None,
    *,
    cap_by_tpot: bool = False,
) -> tuple[Served, ConcurrencyLimit]:
    """The largest concurrency up to ``cap`` that keeps the latency targets; both
    latencies grow with the concurrency, so a search of the bracket between one that keeps
    them and one that misses finds it (each probe where the last two say the latencies
    cross their targets). At 1 when none does.
    ``tpot``: the time per output token alone at a concurrency (what ``timed`` gives as
    ``time_per_output_token_s``, without the TTFT's steps): the search's probes use it
    when no target is on the TTFT. ``cap_by_tpot``: ``tpot`` is exactly the TPOT
    ``timed`` gives (prompt chunks mixed into the decode steps), so the cap is judged by
    it too, and timed in full only where it keeps the targets."""
    seen: dict[int, Served] = {}
    decided: dict[int, ConcurrencyLimit | None] = {}
    over: dict[int, float] = {}  # each probe's latency over its target, to guide the next

    def run(batch: int) -> Served:  # each concurrency timed once (the bracket's ends)
        hit = seen.get(batch)
        if hit is None:
            hit = seen[batch] = timed(batch)
        return hit

    def misses(batch: int) -> "ConcurrencyLimit | None":  # quoted: no typing union built per call
        if batch in decided:
            return decided[batch]
        if tpot is not None and iv.max_time_to_first_token_s is None and batch not in seen:
            t = tpot(batch)
            over[batch] = _over(iv, None, t)
            miss = decided[batch] = _tpot_breach(t, iv)
            return miss
        s = run(batch)
        over[batch] = _over(iv, s.time_to_first_token_s, s.time_per_output_token_s)
        miss = decided[batch] = _breach(s, iv)
        return miss

    # The cap is judged on its full timing (which an engine that prefills apart, SGLang's,
    # times differently from ``tpot``), as it always was; the probes below it on ``tpot``.
    # Where ``tpot`` is that timing's TPOT and the targets are on the TPOT alone, the
    # cap's TPOT decides it, and the TTFT's steps are timed only for a cap that keeps.
    on_tpot = iv.max_time_per_output_token_s is not None or (
        iv.slo is not None and iv.slo.tpot_p95_s is not None
    )
    if cap_by_tpot and on_tpot and tpot is not None and iv.max_time_to_first_token_s is None:
        missed = misses(cap)
        if missed is None:
            return run(cap), limit
    else:
        top = run(cap)
        missed = decided[cap] = _breach(top, iv)
        if missed is None:
            return top, limit
        over[cap] = _over(iv, top.time_to_first_token_s, top.time_per_output_token_s)
    if misses(1) is not None:
        return run(1), missed
    # Keeps at ``low``, misses at ``high``: the boundary is found by the misses alone, so
    # any order of probes ends on the same pair (the latencies grow with the
    # concurrency). Each probe goes where the line through the last two probes crosses
    # the targets (a secant: a step reads the weights once and each sequence's cache,
    # so the latencies are nearly linear near the boundary), rounded down to land on the
    # keeping side; after two probes that fail to halve the bracket, a bisection's.
    low, high = 1, cap
    last, latest = cap, 1
    stalls = 0
    while high - low > 1:
        mid = (low + high) // 2
        if stalls < 2:
            r0, r1 = over[last], over[latest]
            guess = latest + (1.0 - r1) * (latest - last) / (r1 - r0) if r1 != r0 else mid
            if math.isfinite(guess):
                mid = min(max(int(guess), low + 1), high - 1)
        else:
            stalls = 0
        width = high - low
        if misses(mid) is None:
            low = mid
        else:
            high = mid
        last, latest = latest, mid
        stalls = stalls + 1 if 2 * (high - low) > width else 0
    # The target that one more sequence would miss is the one that binds.
    return run(low), misses(high) or missed


def _over(iv: InferenceVolume, ttft: float | None, tpot: float) -> float:
    """The largest of the latencies over their targets (1: at a target), as
    :func:`_breach` reads the targets; a guide for the concurrency search, which decides
    by :func:`_breach` alone."""
    ratios = [0.0]
    if ttft is not None and iv.max_time_to_first_token_s:
        ratios.append(ttft / iv.max_time_to_first_token_s)
    if iv.max_time_per_output_token_s:
        ratios.append(tpot / iv.max_time_per_output_token_s)
    slo = iv.slo
    if slo is not None and slo.tpot_p95_s:
        ratios.append(tpot / slo.tpot_p95_s)
    return max(ratios)


def _allowed_replicas(needed: int, tp: int, c: Constraints) -> int:
    """``needed`` replicas, or with ``constraints.gpu_counts`` the fewest replicas of an
    allowed count that are enough (else the most an allowed count holds)."""
    if not c.gpu_counts:
        return needed
    options = sorted({n // tp for n in c.gpu_counts if n % tp == 0 and n >= tp})
    if not options:
        return needed
    return next((r for r in options if r >= needed), options[-1])


MAX_MODEL_LEN = 10_000_000
"""The longest ``max_model_len`` searched when the model states no context."""


def model_len(job: Job, memory: ReplicaMemory, spec: EngineSpec, batch: int) -> tuple[int, bool]:
    """The ``max_model_len`` the plan sets, and whether the engine's cache holds it: one
    sequence of it (vLLM refuses to start otherwise; a static cache: its whole batch).
    ``auto``: the longest that fits, at most the model's context (vLLM's
    ``--max-model-len auto``), searched over the KV budget in whole blocks."""
    iv = job.inference
    full = memory.full_tokens
    if memory.per_token_bytes <= 0:
        return (iv.max_model_len if isinstance(iv.max_model_len, int) else full), True
    fits = memory.fits_length(1 if spec.paged else batch)
    if iv.max_model_len == "auto":
        high = max(job.model_context or MAX_MODEL_LEN, full)
        length = longest_fitting(
            fits, block=memory.block_tokens, low=memory.block_tokens, high=high
        )
        return length, length >= full
    length = iv.max_model_len if iv.max_model_len is not None else full
    return length, fits(length)


def fit_of(
    job: Job, gpu: GpuSpec, memory: ReplicaMemory, spec: EngineSpec, batch: int
) -> tuple[int, bool]:
    """The ``max_model_len`` the plan sets, and whether the replica fits: the estimate
    within the GPU's usable memory and the engine's cache holding that length."""
    length, holds = model_len(job, memory, spec, batch)
    return length, memory.estimate_bytes <= gpu.usable_memory_bytes and holds


def serve_shape(job: Job, w: Workload, memory: ReplicaMemory) -> ServeShape:
    """What of the model, its requests and one replica's memory the step time reads."""
    arch = job.arch
    return ServeShape(
        prompt_tokens=job.prompt_tokens,
        output_tokens=job.output_tokens,
        hidden_size=arch.hidden_size if arch else 0,
        mlp_width=job.mlp_width,
        num_layers=arch.num_layers if arch else 1,
        activation_bytes=4 if w.precision == "fp32" else 2,
        causal_skip=not materializes_scores(arch, w),
        weights_bytes=memory.weights_bytes,
        kv_bytes_per_token=memory.per_token_bytes,
        token_budget=memory.token_budget,
        num_heads=arch.num_heads if arch else 0,
        kv_width=job.kv_width,
        head_dim=arch.head_dim if arch and arch.mla is None else 0,
        vocab_size=(arch.vocab_size or 0) if arch else 0,
        kv_cache_16bit=w.kv_cache_dtype in ("bf16", "fp16")
        or (w.kv_cache_dtype == "auto" and w.precision in ("bf16", "fp16", "fp8")),
    )


def serve_option(
    job: Job,
    ctx: GpuContext,
    w: Workload,
    *,
    tp: int,
    memory: ReplicaMemory,
    c: Constraints,
    oracle: MemoryOracle,
    replicas: int | None = None,
) -> Option:
    """Replicas of ``tp`` GPUs served as a server would, ``replicas`` of them (default:
    as many as the request rate needs); timed even when they do not fit. ``oracle``: the
    request's memo (the replica's step function, :func:`stepper_for`)."""
    gpu = ctx.gpu
    assert ctx.rates is not None
    iv = job.inference
    link = link_over(gpu, tp, c)
    shape = serve_shape(job, w, memory)
    spec = engine_spec(iv.engine)
    replica = Replica(
        tp=tp,
        rates=ctx.rates,
        mbu=ctx.mbu,
        link=link,
        collectives=library_for(gpu.vendor),
        serial=step_factor(spec, iv.engine_version),
        mbu_given=ctx.mbu_given,
    )
    static_batch = w.batch_size > 1 or not spec.paged
    stepper = stepper_for(job, oracle, memory, shape, replica)  # every step this option times

    def run(batch: int) -> Served:
        return serve(
            job.flops,
            shape,
            replica,
            batch,
            static=static_batch,
            mixed=iv.mixed_chunk,
            stepper=stepper,
        )

    def tpot(batch: int) -> float:  # serve()'s steady-state step, alone
        o = max(shape.output_tokens, 1)
        return stepper(batch, batch * shape.prompt_tokens / o)[0]

    held = memory.sequences
    length, fits = fit_of(job, gpu, memory, spec, w.batch_size)
    s, limit, required = _concurrency(
        run,
        job,
        memory,
        spec=spec,
        gpu=gpu,
        shape=shape,
        w=w,
        length=length,
        static_batch=static_batch,
        tpot=tpot,
        # serve() with chunks mixed in times the TPOT as ``tpot`` does, the same step.
        cap_by_tpot=iv.mixed_chunk,
    )
    if not fits:
        required = _unfit_required(memory, spec, length, w.batch_size)
    needed = (
        max(math.ceil(job.requests_per_second / s.requests_per_s - 1e-12), 1)
        if job.requests_per_second
        else 1
    )

    queue = None if static_batch else engine_queue(job, shape, replica, s.batch, stepper)
    # The percentiles under load (but where the SLO needs them), the rate within the SLO
    # and the launch command change no ranking: ``Option.finish`` adds them to the
    # candidates a response shows (a search times ~150 options, a response shows a few).
    replicas, needed = scale(queue, needed, replicas, fits=fits, tp=tp, c=c)
    count = replicas * tp
    layout = ParallelLayout(tensor=tp, pipeline=1, data=replicas, zero_stage=0)
    reasons = [*ctx.reasons]
    if not fits:
        tokens = max(length, memory.full_tokens)
        what = f"{w.batch_size} sequences" if static_batch else "one sequence"
        reasons.insert(0, _misfit(required, tp, f"{what} of {tokens} tokens", iv.engine, gpu))
    reasons += list(memory.notes)
    kind: LatencyKind = "static_batch" if static_batch and w.batch_size > 1 else "steady_state"
    reasons.append(
        f"{replicas} replica(s) of {tp} GPU(s), each {s.batch} sequences in flight "
        f"(limited by {limit}; the KV cache holds {held if held is not None else 'an unknown number'}): "
        f"{s.requests_per_s:.3g} requests/s, "
        f"{s.output_tokens_per_s:,.0f} output tokens/s; {_kind_words(kind, s)}"
        f"TPOT {s.time_per_output_token_s * 1000:.1f} ms; decode is {s.bound}-bound"
        + (f" (tensor parallel over {link.kind})" if tp > 1 else "")
    )
    kernel_source, kernel_id = kernels_used(ctx.rates, job.arch is not None)
    at = len(reasons)
    load_breaches = slo_breaches(queue, replicas, iv.slo, fits) if iv.slo is not None else []
    breaches = [memory_breach(required, gpu.usable_memory_bytes)] if not fits else []
    breaches += layout_breaches(gpu, count, c)
    breaches += _rate_breaches(job, s, replicas, needed, fits=fits)
    breaches += load_breaches
    reasons += [b.detail for b in breaches if b.constraint != "memory"]
    request_latency = (
        s.time_to_first_token_s + max(job.output_tokens - 1, 0) * s.time_per_output_token_s
    )
    plan = Plan(
        tp=tp,
        replicas=replicas,
        max_model_len=length or memory.full_tokens,
        concurrency=s.batch,
        token_budget=memory.token_budget,
        fraction=memory.fraction,
        kv_cache_bytes=memory.kv_budget_bytes,
        kv_cache_tokens=memory.fits_length().tokens(),
        output_tokens=job.output_tokens,
    )
    # Built priced (the fields priced() would set, without copying the option).
    return Option(
        gpu=gpu,
        count=count,
        layout=layout,
        required=required,
        fits=fits,
        time_hours=job.duration_hours,
        speed_s=request_latency,
        throughput=Throughput(value=s.output_tokens_per_s * replicas, unit="tokens/s"),
        latency=Latency(
            concurrency=s.batch,
            limited_by=limit,
            kv_cache_sequences=held,
            time_to_first_token_s=s.time_to_first_token_s,
            time_per_output_token_s=s.time_per_output_token_s,
            request_latency_s=request_latency,
            output_tokens_per_s=s.output_tokens_per_s,
            requests_per_s=s.requests_per_s,
            decode_bound=s.bound,
            kind=kind,
        ),
        source=ctx.rate.source if ctx.rate else "catalog",
        kernel_source=kernel_source,
        kernel_table=kernel_id,
        unverified=ctx.unverified,
        finish=finisher(
            queue, replicas=replicas, at=at, plan=plan, job=job, gpu=gpu, w=w, fits=fits
        ),
        **pricing(
            ctx,
            job,
            c,
            count=count,
            time_hours=job.duration_hours,
            admissible=not breaches,
            reasons=reasons,
            breaches=breaches,
            delivered_flops=s.model_flops_per_s * replicas,
        ),
    )
