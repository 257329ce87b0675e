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
from typing import NamedTuple

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.perf.collectives import library_for
from gpuplan.core.perf.comm import group_link
from gpuplan.core.perf.kv_transfer import KvTransfer, kv_transfer
from gpuplan.core.perf.serve import Replica, ServeShape, step_seconds
from gpuplan.core.recommend.context import TP_DEGREES, GpuContext, link_over, multi_gpu_allowed
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
from gpuplan.core.recommend.schema import Candidate, Constraints, InferenceVolume, ParallelLayout
from gpuplan.core.recommend.serving import ReplicaMemory, replica_memory, serve_shape


def missed_targets(ttft_s: float, tpot_s: float, iv: InferenceVolume) -> list[str]:
    """The latency targets that a time to first token and a time per output token miss
    (today the ``max_*`` targets; the one place a percentile target would join them)."""
    missed = []
    if iv.max_time_to_first_token_s is not None and ttft_s > iv.max_time_to_first_token_s:
        missed.append("inference.max_time_to_first_token_s")
    if iv.max_time_per_output_token_s is not None and tpot_s > iv.max_time_per_output_token_s:
        missed.append("inference.max_time_per_output_token_s")
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


class _Plan(NamedTuple):
    prefill: _Pool
    decode: _Pool
    x: int
    y: int
    transfer: KvTransfer
    ttft_s: float
    missed: list[str]

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
    capacity = latency.requests_per_s * layout.data
    rate = job.requests_per_second or capacity
    agg_missed = missed_targets(
        latency.time_to_first_token_s, latency.time_per_output_token_s, iv
    ) + (["inference.requests_per_second"] if capacity < rate * (1 - 1e-9) else [])
    aggregated = ServingSide(
        gpus=candidate.count,
        usd_per_hour=candidate.usd_per_hour,
        time_to_first_token_s=latency.time_to_first_token_s,
        time_per_output_token_s=latency.time_per_output_token_s,
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
        meets_targets=not dis_missed,
        missed=dis_missed,
    )
    prefill = ServingPool(
        role="prefill",
        replicas=plan.x,
        tensor_parallel=pre.tp,
        gpus=plan.x * pre.tp,
        concurrency=pre.concurrency,
        requests_per_s=pre.requests_per_s,
        busy=rate / (plan.x * pre.requests_per_s),
    )
    decode = ServingPool(
        role="decode",
        replicas=plan.y,
        tensor_parallel=dec.tp,
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
    replicas: list[tuple[int, ReplicaMemory, ServeShape, Replica]] = []
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
        )
        replicas.append((tp, memory, shape, replica))
    decodes = [_decode(job, gpu, m, s, r) for _, m, s, r in replicas]
    prefills = [p for _, m, s, r in replicas for p in _prefills(job, m, s, r)]
    best: tuple[tuple[int, int, float], _Plan] | None = None
    for d in decodes:
        y = max(math.ceil(rate / d.requests_per_s - 1e-12), 1)
        for p in prefills:
            x = max(math.ceil(rate / p.requests_per_s - 1e-12), 1)
            gpus = x * p.tp + y * d.tp
            if gpus > c.max_gpus_per_job:
                continue
            link = group_link(
                gpu,
                max(gpus, 2),
                gpus_per_node=c.gpus_per_node,
                network_bytes_per_s=c.network_bytes_per_s_per_gpu,
            )
            t = kv_transfer(
                prompt_tokens=job.prompt_tokens,
                kv_bytes_per_token=p.kv_bytes_per_token,
                tp_prefill=p.tp,
                tp_decode=d.tp,
                link=link,
                requests_per_s=rate,
                prefill_gpus=x * p.tp,
                decode_gpus=y * d.tp,
            )
            ttft = p.step_s + t.seconds + d.step_s
            missed = missed_targets(ttft, d.step_s, iv)
            if t.utilization > 1:
                missed.append("inference.requests_per_second")
            plan = _Plan(p, d, x, y, t, ttft, missed)
            rank = (len(missed), gpus, ttft)
            if best is None or rank < best[0]:
                best = (rank, plan)
    return best[1] if best else None


def _decode(job: Job, gpu: GpuSpec, m: ReplicaMemory, shape: ServeShape, r: Replica) -> _Pool:
    """A decode replica: the most sequences its cache, the engine's cap and a step's
    token budget allow whose pure decode step keeps the TPOT target (at least one)."""
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
    top = max(min(m.sequences or 1, cap, shape.token_budget), 1)

    def step(batch: int) -> float:
        return step_seconds(job.flops, shape, r, decode=batch, prompt=0)[0]

    target = iv.max_time_per_output_token_s
    batch = top
    if target is not None and step(top) > target:
        low, high = 1, top
        while high - low > 1:
            mid = (low + high) // 2
            if step(mid) <= target:
                low = mid
            else:
                high = mid
        batch = low
    seconds = step(batch)
    o = max(job.output_tokens, 1)
    return _Pool(
        tp=r.tp,
        concurrency=batch,
        step_s=seconds,
        requests_per_s=batch / (seconds * o),
        kv_bytes_per_token=_whole_cache_per_token(job, m, r.tp),
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


def _prefills(job: Job, m: ReplicaMemory, shape: ServeShape, r: Replica) -> list[_Pool]:
    """A prefill replica at each batch of whole prompts (powers of two up to the step's
    token budget, and the cache that holds their prompts): the batch's time is what a
    prompt waits for its cache. A prompt longer than the budget goes in chunks alone."""
    s = job.prompt_tokens
    budget = shape.token_budget
    whole = _whole_cache_per_token(job, m, r.tp)
    if s >= budget:
        chunks = math.ceil(s / budget)
        step, _ = step_seconds(job.flops, shape, r, decode=0, prompt=s / chunks)
        seconds = chunks * step
        return [_Pool(r.tp, 1, seconds, 1 / seconds, whole)]
    held = int(m.kv_budget_bytes // max(m.per_token_bytes * s, 1e-9))
    most = max(min(budget // s, held), 1)
    sizes = sorted({min(1 << i, most) for i in range(most.bit_length() + 1)} | {most})
    out = []
    for k in sizes:
        seconds, _ = step_seconds(job.flops, shape, r, decode=0, prompt=k * s)
        out.append(_Pool(r.tp, k, seconds, k / seconds, whole))
    return out


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
        f"{prefill.tensor_parallel} GPU(s) ({prefill.busy:.0%} busy), {decode.replicas} decode "
        f"replica(s) of {decode.tensor_parallel} ({decode.busy:.0%} busy)"
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
        if cand.fits
        and cand.latency is not None
        and cand.layout is not None
        and cand.layout.expert == 1  # expert-parallel pools: not modelled yet
        else cand
        for cand in candidates
    ]
