"""Aggregated against disaggregated serving on one GPU model, for the same targets.

An aggregated replica (the candidate) runs prefill and decode in the same engine steps:
each step decodes a token for every sequence in flight and carries chunks of arriving
prompts beside them, so its time per output token (TPOT) pays for those chunks, and a
TPOT target caps its concurrency. Disaggregated serving (xPyD: x prefill replicas, y
decode replicas, as Dynamo's planner and AIConfigurator's ``--estimate-mode disagg``
size them) splits the phases:

- a **decode** replica's steps carry no prompt chunks, so its TPOT is the pure decode
  step and it keeps the most sequences in flight that step allows (DistServe, Zhong et
  al. OSDI 2024, §2.2 "prefill-decoding interference"; vLLM's ``docs/features/
  disagg_prefill.md``: decode "without" prefill jobs inserted, to control tail ITL);
- a **prefill** replica runs batches of whole prompts sized so the first token still
  comes within the TTFT target (Splitwise, Patel et al. ISCA 2024, §IV: the prompt and
  token phases on separate machine pools, each batched for its own phase);
- every request's prompt cache crosses from prefill to decode
  (:mod:`gpuplan.core.perf.kv_transfer`), and the first token streams from the decode
  worker (Dynamo ``docs/design_docs/disagg_serving.md``, commit 66e265b: "Decode worker
  … Stream tokens"): TTFT = the prefill batch + the transfer + one decode step.

It costs whole replicas of each phase (a pool rounds up on its own) and the transfer.
Both are sized for the same rate; the winner keeps the targets at the lower price.
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.perf.collectives import library_for
from gpuplan.core.perf.comm import group_link
from gpuplan.core.perf.kv_transfer import KvTransfer, kv_transfer
from gpuplan.core.perf.queueing import (
    LoadPoint,
    Scheduler,
    StepTable,
    prefill_pool_wait,
    saturation_rate,
    under_load,
)
from gpuplan.core.perf.serve import Replica, Stepper
from gpuplan.core.recommend.context import TP_DEGREES, link_over, multi_gpu_allowed
from gpuplan.core.recommend.context_record import GpuContext
from gpuplan.core.recommend.disagg_schema import (
    Disaggregation,
    KvCacheTransfer,
    ServingMode,
    ServingPool,
    ServingSide,
)
from gpuplan.core.recommend.engine import engine_spec, sequence_cap
from gpuplan.core.recommend.fit import MemoryOracle
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.moe_serving import ExpertReplica, expert_replica
from gpuplan.core.recommend.replica import ReplicaMemory
from gpuplan.core.recommend.schema import Candidate, Constraints, InferenceVolume, ParallelLayout
from gpuplan.core.recommend.serving import (
    MAX_SLO_REPLICAS_FACTOR,
    replica_memory,
    serve_shape,
    stepper_for,
)


def missed_targets(
    ttft_s: float,
    tpot_s: float,
    iv: InferenceVolume,
    p95: tuple[float, float] | None = None,
) -> list[str]:
    """The latency targets that a time to first token and a time per output token miss:
    the ``max_*`` targets on the steady-state figures, and ``slo``'s on ``p95`` (TTFT,
    TPOT under the request rate; None: past what the replicas serve, every one missed)."""
    missed = []
    if iv.max_time_to_first_token_s is not None and ttft_s > iv.max_time_to_first_token_s:
        missed.append("inference.max_time_to_first_token_s")
    if iv.max_time_per_output_token_s is not None and tpot_s > iv.max_time_per_output_token_s:
        missed.append("inference.max_time_per_output_token_s")
    slo = iv.slo
    if slo is not None:
        ttft95, tpot95 = p95 if p95 is not None else (math.inf, math.inf)
        if slo.ttft_p95_s is not None and ttft95 > slo.ttft_p95_s:
            missed.append("inference.slo.ttft_p95_s")
        if slo.tpot_p95_s is not None and tpot95 > slo.tpot_p95_s:
            missed.append("inference.slo.tpot_p95_s")
    return missed


class _Pool(NamedTuple):
    """One phase's replica at one tensor-parallel degree."""

    tp: int
    concurrency: int
    step_s: float
    """Decode: one step. Prefill: one batch of ``concurrency`` prompts."""

    requests_per_s: float
    kv_bytes_per_token: float
    """The whole model's cache per token (every share)."""

    steps: StepTable | None = None
    """Decode, under an SLO: the replica's queue (pure decode steps, :func:`_queue`)."""

    single_s: float = 0.0
    """Prefill: one prompt's batch alone (a replica below saturation runs smaller ones)."""

    expert: int = 1
    """Expert-parallel ranks of one replica (data-parallel attention; ``tp`` is then its
    GPUs, each with its own sequences): 1 for a tensor-parallel replica."""

    @property
    def lanes(self) -> int:
        """GPUs a request's cache crosses in parallel: its shares under tensor
        parallelism; one under data-parallel attention (a rank holds its sequences whole)."""
        return 1 if self.expert > 1 else self.tp


class _Plan(NamedTuple):
    prefill: _Pool
    decode: _Pool
    x: int
    y: int
    transfer: KvTransfer
    ttft_s: float
    missed: list[str]
    p95: tuple[float, float] | None = None
    """TTFT and TPOT p95 under the rate (with ``inference.slo``)."""

    @property
    def gpus(self) -> int:
        return self.x * self.prefill.tp + self.y * self.decode.tp


def compare_disaggregated(
    candidate: Candidate, job: Job, ctx: GpuContext, oracle: MemoryOracle, c: Constraints
) -> Disaggregation:
    """The candidate's aggregated plan against the best xPyD plan of its GPU model."""
    iv = job.inference
    latency, layout = candidate.latency, candidate.layout
    assert latency is not None
    assert layout is not None
    per_gpu = candidate.usd_per_hour / candidate.count if candidate.usd_per_hour else None
    capacity = latency.requests_per_s * (layout.data // max(layout.expert, 1))
    rate = job.requests_per_second or capacity
    load = latency.under_load
    agg_p95 = (
        (load.time_to_first_token_s.p95, load.time_per_output_token_s.p95)
        if load is not None and iv.slo is not None
        else None
    )
    agg_missed = missed_targets(
        latency.time_to_first_token_s, latency.time_per_output_token_s, iv, agg_p95
    ) + (["inference.requests_per_second"] if capacity < rate * (1 - 1e-9) else [])
    aggregated = ServingSide(
        gpus=candidate.count,
        usd_per_hour=candidate.usd_per_hour,
        time_to_first_token_s=latency.time_to_first_token_s,
        time_per_output_token_s=latency.time_per_output_token_s,
        time_to_first_token_p95_s=agg_p95[0] if agg_p95 else None,
        time_per_output_token_p95_s=agg_p95[1] if agg_p95 else None,
        requests_per_s=capacity,
        meets_targets=not agg_missed,
        missed=agg_missed,
    )
    spec = engine_spec(iv.engine)
    refusal = None
    if not spec.paged or job.workload.batch_size > 1:
        refusal = (
            f"{iv.engine} has no disaggregated mode"
            if not spec.paged
            else "a static batch (workload.batch_size) is not disaggregated"
        )
    plan = None if refusal else _best_plan(job, ctx, oracle, c, rate)
    if plan is None:
        return Disaggregation(
            requests_per_s=rate,
            aggregated=aggregated,
            disaggregated=None,
            ratio=None,
            prefill=None,
            decode=None,
            kv_transfer=None,
            winner="aggregated",
            why=refusal or f"no prefill and decode replicas of {ctx.gpu.id} fit this model",
        )
    pre, dec = plan.prefill, plan.decode
    dis_missed = list(plan.missed)
    disaggregated = ServingSide(
        gpus=plan.gpus,
        usd_per_hour=plan.gpus * per_gpu if per_gpu is not None else None,
        time_to_first_token_s=plan.ttft_s,
        time_per_output_token_s=dec.step_s,
        requests_per_s=min(plan.x * pre.requests_per_s, plan.y * dec.requests_per_s),
        time_to_first_token_p95_s=plan.p95[0] if plan.p95 else None,
        time_per_output_token_p95_s=plan.p95[1] if plan.p95 else None,
        meets_targets=not dis_missed,
        missed=dis_missed,
    )
    prefill = ServingPool(
        role="prefill",
        replicas=plan.x,
        tensor_parallel=pre.tp // pre.expert,
        expert_parallel=pre.expert,
        gpus=plan.x * pre.tp,
        concurrency=pre.concurrency,
        requests_per_s=pre.requests_per_s,
        busy=rate / (plan.x * pre.requests_per_s),
    )
    decode = ServingPool(
        role="decode",
        replicas=plan.y,
        tensor_parallel=dec.tp // dec.expert,
        expert_parallel=dec.expert,
        gpus=plan.y * dec.tp,
        concurrency=dec.concurrency,
        requests_per_s=dec.requests_per_s,
        busy=rate / (plan.y * dec.requests_per_s),
    )
    t = plan.transfer
    transfer = KvCacheTransfer(
        bytes_per_request=t.bytes,
        link=t.link.kind,
        seconds=t.seconds,
        link_utilization=t.utilization,
    )
    winner = _winner(aggregated, disaggregated)
    return Disaggregation(
        requests_per_s=rate,
        aggregated=aggregated,
        disaggregated=disaggregated,
        ratio=f"{plan.x}P{plan.y}D",
        prefill=prefill,
        decode=decode,
        kv_transfer=transfer,
        winner=winner,
        why=_why(winner, aggregated, disaggregated, latency.concurrency, prefill, decode, transfer),
    )


def _winner(agg: ServingSide, dis: ServingSide) -> ServingMode:
    if agg.meets_targets != dis.meets_targets:
        return "aggregated" if agg.meets_targets else "disaggregated"
    if agg.usd_per_hour is not None and dis.usd_per_hour is not None:
        cheaper = dis.usd_per_hour < agg.usd_per_hour * (1 - 1e-9)
    else:
        cheaper = dis.gpus < agg.gpus
    return "disaggregated" if cheaper else "aggregated"


def _degrees(job: Job, gpu: GpuSpec, c: Constraints) -> list[int]:
    """The tensor-parallel degrees a replica may take: those the serving search tries."""
    arch = job.arch
    most = engine_spec(job.inference.engine).max_tensor_parallel or TP_DEGREES[-1]
    out = [1]
    for t in TP_DEGREES:
        if (
            arch is not None
            and arch.num_heads % t == 0
            and t <= min(c.gpus_per_node, c.max_gpus_per_job, most)
            and multi_gpu_allowed(gpu, t, c)
        ):
            out.append(t)
    return out


def _best_plan(
    job: Job, ctx: GpuContext, oracle: MemoryOracle, c: Constraints, rate: float
) -> _Plan | None:
    """The xPyD plan that keeps the targets on the fewest GPUs (else the one that misses
    fewest), over every degree of each pool and the prefill batches that fit."""
    gpu = ctx.gpu
    assert ctx.rates is not None
    iv = job.inference
    replicas: list[tuple[ReplicaMemory, Stepper]] = []
    for tp in _degrees(job, gpu, c):
        layout = ParallelLayout(tensor=tp, pipeline=1, data=1, zero_stage=0)
        w, key = oracle.laid_out(job.workload, layout)
        memory = replica_memory(job, oracle, w, gpu, tp, key=key)
        if memory is None or memory.estimate_bytes > gpu.usable_memory_bytes:
            continue
        if not memory.sequences or memory.per_token_bytes <= 0:
            continue
        shape = serve_shape(job, w, memory)
        replica = Replica(
            tp=tp,
            rates=ctx.rates,
            mbu=ctx.mbu,
            link=link_over(gpu, tp, c),
            collectives=library_for(gpu.vendor),
            mbu_given=ctx.mbu_given,
        )
        replicas.append((memory, stepper_for(job, oracle, memory, shape, replica)))
    decodes = [_decode(job, gpu, m, stepper) for m, stepper in replicas]
    prefills = [p for m, stepper in replicas for p in _prefills(job, m, stepper)]
    ep = expert_replica(job, ctx, oracle, c)
    if ep is not None:
        decodes.append(_expert_decode(job, gpu, ep))
        prefills += _expert_prefills(job, ep)
    if iv.slo is not None:
        return _slo_plan(job, gpu, c, rate, decodes, prefills)
    best: tuple[tuple[int, int, float], _Plan] | None = None
    for d in decodes:
        y = max(math.ceil(rate / d.requests_per_s - 1e-12), 1)
        for p in prefills:
            x = max(math.ceil(rate / p.requests_per_s - 1e-12), 1)
            gpus = x * p.tp + y * d.tp
            if gpus > c.max_gpus_per_job:
                continue
            if best is not None and best[0][0] == 0 and gpus > best[0][1]:
                # Ranked behind the best whatever it misses: (misses, GPUs, TTFT) with
                # no miss in the best and more GPUs here (the plan is a pure function:
                # leaving it out changes nothing else).
                continue
            plan = _at(job, gpu, c, rate, p, d, x, y)
            rank = (len(plan.missed), plan.gpus, plan.ttft_s)
            if best is None or rank < best[0]:
                best = (rank, plan)
    return best[1] if best else None


def _at(  # noqa: PLR0917 - the plan's pools and replicas
    job: Job, gpu: GpuSpec, c: Constraints, rate: float, p: _Pool, d: _Pool, x: int, y: int
) -> _Plan:
    """The plan of ``x`` prefill and ``y`` decode replicas: its transfer over the link
    its GPUs share, its steady-state TTFT and the ``max_*`` targets it misses."""
    gpus = x * p.tp + y * d.tp
    link = group_link(
        gpu,
        max(gpus, 2),
        gpus_per_node=c.gpus_per_node,
        network_bytes_per_s=c.network_bytes_per_s_per_gpu,
    )
    t = kv_transfer(
        prompt_tokens=job.prompt_tokens,
        kv_bytes_per_token=p.kv_bytes_per_token,
        tp_prefill=p.lanes,
        tp_decode=d.lanes,
        link=link,
        requests_per_s=rate,
        prefill_gpus=x * p.tp,
        decode_gpus=y * d.tp,
    )
    ttft = p.step_s + t.seconds + d.step_s
    missed = missed_targets(ttft, d.step_s, job.inference)
    if t.utilization > 1:
        missed.append("inference.requests_per_second")
    return _Plan(p, d, x, y, t, ttft, missed)


def _slo_plan(  # noqa: PLR0917 - the search's inputs
    job: Job,
    gpu: GpuSpec,
    c: Constraints,
    rate: float,
    decodes: list[_Pool],
    prefills: list[_Pool],
) -> _Plan | None:
    """Under ``inference.slo``: the xPyD plan on the fewest GPUs whose p95s under
    ``rate`` keep the targets (else the one that misses fewest). Each pool starts at the
    replicas that keep its queue stable; the decode pool grows until its p95 TPOT holds,
    then (a few more decode replicas shorten the admission wait too) the prefill pool
    until the p95 TTFT does. Pairs are tried in the order of the fewest GPUs they could
    take, and the search stops once no later pair can take fewer."""
    loads: dict[tuple[int, int], LoadPoint] = {}

    def decode_load(i: int, y: int) -> LoadPoint:
        hit = loads.get((i, y))
        if hit is None:
            steps = decodes[i].steps
            assert steps is not None
            ways = decodes[i].expert
            hit = loads[i, y] = under_load(steps, rate / (y * ways), serial_prompts=False)
        return hit

    starts = []
    for i, d in enumerate(decodes):
        assert d.steps is not None
        # One queue per attention rank of an expert-parallel replica (``expert`` of them).
        y = max(math.floor(rate / (saturation_rate(d.steps) * d.expert)) + 1, 1)
        for p in prefills:
            x = max(math.floor(rate * p.step_s / p.concurrency) + 1, 1)
            starts.append((x * p.tp + y * d.tp, i, p, x, y))
    starts.sort(key=lambda s: s[0])
    best: tuple[tuple[int, int, float], _Plan] | None = None
    for least, i, p, x, y in starts:
        if least > c.max_gpus_per_job:
            break
        if best is not None and not best[1].missed and least > best[1].gpus:
            break
        plan = _fewest(job, gpu, c, rate, p, (i, decodes[i]), x, y, decode_load)
        rank = (len(plan.missed), plan.gpus, plan.ttft_s)
        if best is None or rank < best[0]:
            best = (rank, plan)
    return best[1] if best else None


DECODE_EXTRA = (0, 1, 2)
"""Decode replicas tried beyond the fewest that keep the p95 TPOT: each shortens the
admission wait in the TTFT, so one more decode replica can save several prefill ones."""


def _fewest(  # noqa: PLR0917 - the pair and the memo of decode loads
    job: Job,
    gpu: GpuSpec,
    c: Constraints,
    rate: float,
    p: _Pool,
    decode: tuple[int, _Pool],
    x0: int,
    y0: int,
    decode_load: Callable[[int, int], LoadPoint],
) -> _Plan:
    """The pair's plan on the fewest GPUs that keeps the p95 targets, from ``x0`` prefill
    and ``y0`` decode replicas (at those when none does, with what it misses)."""
    slo = job.inference.slo
    assert slo is not None
    i, d = decode
    bound = MAX_SLO_REPLICAS_FACTOR

    def plan_at(x: int, y: int) -> _Plan:
        plan = _at(job, gpu, c, rate, p, d, x, y)
        load = decode_load(i, y)
        pw = prefill_pool_wait(rate / x, p.step_s, p.concurrency, p.single_s)
        dt = load.ttft_s
        ttft95 = (
            pw.batch_s
            + plan.transfer.seconds
            + max(pw.wait_s.p95 + dt.p50, dt.p95 + pw.mean_wait_s)
        )
        p95 = (ttft95, load.tpot_s.p95)
        missed = [
            *missed_targets(plan.ttft_s, d.step_s, job.inference, p95),
            *(["inference.requests_per_second"] if plan.transfer.utilization > 1 else []),
        ]
        return plan._replace(missed=missed, p95=p95)

    def keeps(plan: _Plan, target: str) -> bool:
        return f"inference.slo.{target}" not in plan.missed

    y = y0
    if slo.tpot_p95_s is not None:
        y = _least(lambda n: keeps(plan_at(x0, n), "tpot_p95_s"), y0, y0 * bound)
    best = plan_at(x0, y)
    if slo.ttft_p95_s is None:
        return best
    for extra in DECODE_EXTRA:
        decoders = y + extra

        def ttft_kept(n: int, decoders: int = decoders) -> bool:
            return keeps(plan_at(n, decoders), "ttft_p95_s")

        plan = plan_at(_least(ttft_kept, x0, x0 * bound), decoders)
        if (len(plan.missed), plan.gpus) < (len(best.missed), best.gpus):
            best = plan
    return best


def _least(ok: Callable[[int], bool], low: int, high: int) -> int:
    """The least ``n`` in ``low..high`` with ``ok(n)`` (``ok`` monotone): doubling, then
    a bisection; ``low`` when none is."""
    if ok(low):
        return low
    n, last = low, low
    while n < high:
        last, n = n, min(n * 2, high)
        if ok(n):
            break
    else:
        return low
    while n - last > 1:
        mid = (n + last) // 2
        if ok(mid):
            n = mid
        else:
            last = mid
    return n


def _decode(job: Job, gpu: GpuSpec, m: ReplicaMemory, stepper: Stepper) -> _Pool:
    """A tensor-parallel decode replica (:func:`_decode_pool`), timed by the replica's
    ``stepper``."""
    shape, r = stepper.shape, stepper.r

    def step(batch: int) -> float:
        return stepper(batch, 0)[0]

    return _decode_pool(
        job,
        gpu,
        m,
        step,
        budget=shape.token_budget,
        tp=r.tp,
        whole=_whole_cache_per_token(job, m, r.tp),
    )


def _decode_pool(
    job: Job,
    gpu: GpuSpec,
    m: ReplicaMemory,
    step: Callable[[int], float],
    *,
    budget: int,
    tp: int,
    whole: float,
    expert: int = 1,
) -> _Pool:
    """A decode replica: the most sequences (per attention rank, ``expert`` of them) its
    cache, the engine's cap and a step's token budget allow whose pure decode step keeps
    the TPOT target (at least one)."""
    iv = job.inference
    spec = engine_spec(iv.engine)
    cap = sequence_cap(
        spec,
        gpu,
        given=iv.max_concurrency,
        batch=1,
        pool_tokens=m.fits_length().tokens(),
        length=m.full_tokens,
    )
    top = max(min(m.sequences or 1, cap, budget), 1)
    # A decode-only step is the longest a sequence waits for a token at that occupancy,
    # so a p95 target on TPOT caps the concurrency as the steady-state target does.
    slo = iv.slo.tpot_p95_s if iv.slo is not None else None
    targets = [t for t in (iv.max_time_per_output_token_s, slo) if t is not None]
    target = min(targets) if targets else None
    batch = top
    if target is not None and step(top) > target:
        batch = _most_within(step, target, 1, top)
    seconds = step(batch)
    o = max(job.output_tokens, 1)
    return _Pool(
        tp=tp,
        concurrency=batch * expert,
        step_s=seconds,
        requests_per_s=batch * expert / (seconds * o),
        kv_bytes_per_token=whole,
        steps=_queue(step, batch, o) if iv.slo is not None else None,
        expert=expert,
    )


def _most_within(step: Callable[[int], float], target: float, low: int, high: int) -> int:
    """The largest batch in ``[low, high)`` whose step keeps ``target``, ``high``'s
    missing it (``low`` when none above it does): each probe where the line through the
    bracket's ends crosses the target (a decode step reads the weights once and each
    sequence's cache, nearly linear in the batch), rounded down to land on the keeping
    side; a bisection after two probes that fail to halve the bracket. Exact whatever
    the guesses, the step growing with the batch: it ends on a batch that keeps next to
    one that misses (a bisection alone took about eight steps a pool)."""
    t_low, t_high = step(low), step(high)
    stalls = 0
    while high - low > 1:
        width = high - low
        mid = (low + high) // 2
        if stalls < 2 and t_high > t_low:
            guess = low + (target - t_low) * width / (t_high - t_low)
            mid = min(max(int(guess), low + 1), high - 1)
        else:
            stalls = 0
        t = step(mid)
        if t <= target:
            low, t_low = mid, t
        else:
            high, t_high = mid, t
        stalls = stalls + 1 if 2 * (high - low) > width else 0
    return low


def _queue(step: Callable[[int], float], cap: int, output_tokens: int) -> StepTable:
    """A decode replica's queue: its steps are pure decode (a request's cache arrives
    prefilled and joins the next step), so its "prompt" is one token that changes no
    step, and its first token takes one step (``under_load(..., serial_prompts=False)``)."""
    return StepTable(
        lambda n, _p: step(max(round(n), 1)),
        Scheduler(cap=cap, budget=cap + 1, prompt_tokens=1, output_tokens=output_tokens),
    )


def _expert_decode(job: Job, gpu: GpuSpec, ep: ExpertReplica) -> _Pool:
    """An expert-parallel decode replica: each attention rank decodes its own sequences
    in pure decode steps (the experts they touch, the dispatch and combine)."""
    m = ep.memory

    def step(batch: int) -> float:
        return ep.step(float(batch), 0.0)

    return _decode_pool(
        job,
        gpu,
        m,
        step,
        budget=ep.base.token_budget,
        tp=ep.ranks,
        whole=m.per_token_bytes,
        expert=ep.ranks,
    )


def _expert_prefills(job: Job, ep: ExpertReplica) -> list[_Pool]:
    """Expert-parallel prefill replicas: every attention rank prefills its own batch of
    prompts in the same steps (their tokens route to every rank's experts)."""

    def step(tokens: float) -> float:
        return ep.step(0.0, tokens)

    m = ep.memory
    return _prefill_pools(
        job,
        m,
        step,
        budget=ep.base.token_budget,
        tp=ep.ranks,
        whole=m.per_token_bytes,
        expert=ep.ranks,
    )


def _whole_cache_per_token(job: Job, m: ReplicaMemory, tp: int) -> float:
    """The model's KV cache of one token, every layer, once: the GPUs' shares together
    (a KV head copied to several ranks counted once; MLA's latent, which every rank
    holds whole, once)."""
    arch = job.arch
    if arch is None:
        return m.per_token_bytes * tp
    copies = 1 if arch.mla is not None else min(tp, max(arch.num_kv_heads, 1))
    return m.per_token_bytes * copies


def _prefills(job: Job, m: ReplicaMemory, stepper: Stepper) -> list[_Pool]:
    """Tensor-parallel prefill replicas (:func:`_prefill_pools`), timed by the replica's
    ``stepper``."""
    shape, r = stepper.shape, stepper.r

    def step(tokens: float) -> float:
        return stepper(0, tokens)[0]

    whole = _whole_cache_per_token(job, m, r.tp)
    return _prefill_pools(job, m, step, budget=shape.token_budget, tp=r.tp, whole=whole)


def _prefill_pools(
    job: Job,
    m: ReplicaMemory,
    step: Callable[[float], float],
    *,
    budget: int,
    tp: int,
    whole: float,
    expert: int = 1,
) -> list[_Pool]:
    """A prefill replica at each batch of whole prompts (powers of two up to the step's
    token budget, and the cache that holds their prompts; per attention rank, ``expert``
    of them stepping together): the batch's time is what a prompt waits for its cache. A
    prompt longer than the budget goes in chunks alone."""
    s = job.prompt_tokens
    if s >= budget:
        chunks = math.ceil(s / budget)
        seconds = chunks * step(s / chunks)
        return [
            _Pool(tp, expert, seconds, expert / seconds, whole, single_s=seconds, expert=expert)
        ]
    held = int(m.kv_budget_bytes // max(m.per_token_bytes * s, 1e-9))
    most = max(min(budget // s, held), 1)
    sizes = sorted({min(1 << i, most) for i in range(most.bit_length() + 1)} | {most})
    times = {k: step(k * s) for k in sizes}
    return [
        _Pool(tp, k * expert, t, k * expert / t, whole, single_s=times[1], expert=expert)
        for k, t in times.items()
    ]


def _why(  # noqa: PLR0917 - the figures the sentence is made of
    winner: str,
    agg: ServingSide,
    dis: ServingSide,
    agg_concurrency: int,
    prefill: ServingPool,
    decode: ServingPool,
    t: KvCacheTransfer,
) -> str:
    ms = 1000.0
    transfer = (
        f"each request's {t.bytes_per_request / 2**20:,.0f} MiB of KV cache crosses {t.link} "
        f"in {t.seconds * ms:.1f} ms"
    )
    split = (
        f"{prefill.replicas}P{decode.replicas}D: {prefill.replicas} prefill replica(s) of "
        f"{_shape(prefill)} ({prefill.busy:.0%} busy), {decode.replicas} decode "
        f"replica(s) of {_shape(decode)} ({decode.busy:.0%} busy)"
    )
    if winner == "disaggregated":
        if not agg.meets_targets:
            lead = (
                f"aggregated misses {', '.join(agg.missed)} (TTFT {agg.time_to_first_token_s * ms:.0f} ms, "
                f"TPOT {agg.time_per_output_token_s * ms:.1f} ms); "
            )
        else:
            lead = f"disaggregated needs {dis.gpus} GPUs against {agg.gpus} aggregated; "
        return (
            lead + f"decode steps carry no prompt chunks, so TPOT is the pure decode step "
            f"({dis.time_per_output_token_s * ms:.1f} ms against {agg.time_per_output_token_s * ms:.1f} ms) "
            f"and a decode replica keeps {decode.concurrency} sequences in flight against "
            f"{agg_concurrency}; prefill batches of {prefill.concurrency} prompt(s) keep TTFT at "
            f"{dis.time_to_first_token_s * ms:.0f} ms; {transfer}; {split}"
        )
    if not dis.meets_targets and agg.meets_targets:
        return (
            f"disaggregated misses {', '.join(dis.missed)} (TTFT {dis.time_to_first_token_s * ms:.0f} ms "
            f"with the transfer, TPOT {dis.time_per_output_token_s * ms:.1f} ms); {transfer}; {split}"
        )
    return (
        f"aggregated needs {agg.gpus} GPUs, disaggregated {dis.gpus}: at this rate the "
        f"separate pools each round up to whole replicas ({split}), which saves nothing over the "
        f"prompt chunks in aggregated steps (TPOT {agg.time_per_output_token_s * ms:.1f} ms "
        f"against {dis.time_per_output_token_s * ms:.1f} ms pure decode); {transfer}"
    )


def _shape(pool: ServingPool) -> str:
    """A pool's replica in words: its GPUs, and its expert parallelism when it has one."""
    gpus = pool.tensor_parallel * pool.expert_parallel
    if pool.expert_parallel > 1:
        return f"{gpus} GPU(s) with expert parallelism {pool.expert_parallel}"
    return f"{gpus} GPU(s)" if pool.role == "prefill" else f"{gpus}"


def with_disaggregation(
    candidates: list[Candidate],
    job: Job,
    contexts: dict[str, GpuContext],
    oracle: MemoryOracle,
    c: Constraints,
) -> list[Candidate]:
    """Each fitting serving candidate with its comparison (the others as they are);
    the candidates unchanged unless the request asks for it."""
    if job.kind != "inference" or not job.inference.compare_disaggregated:
        return candidates
    return [
        msgspec.structs.replace(
            cand, disaggregation=compare_disaggregated(cand, job, contexts[cand.gpu], oracle, c)
        )
        if cand.fits and cand.latency is not None and cand.layout is not None
        else cand
        for cand in candidates
    ]
