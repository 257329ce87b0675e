"""Serving a mixture-of-experts model with expert parallelism and data-parallel attention.

The layout DeepSeek-V3/R1 and Qwen3-MoE are served with on a node of 8 GPUs (vLLM
``--data-parallel-size 8 --enable-expert-parallel``, where the expert-parallel size is
TP x DP; SGLang ``--tp-size 8 --dp-size 8 --enable-dp-attention --ep-size 8``): each GPU
runs attention for its own sequences with the attention weights whole (data parallel,
so each keeps only its own sequences' KV cache, and MLA's latent is not copied to every
rank as under tensor parallelism), and holds ``E / D`` of every MoE layer's ``E`` routed
experts. Each MoE layer sends every token's hidden state to the GPUs of its ``k`` experts
and back (dispatch and combine, an all-to-all; DeepEP's kernels in both engines).

One engine step on one GPU with ``b`` sequences in flight (the replica's ``B = D·b``):

- reads the weights that are not routed experts, and of its own experts only those some
  token of the step was routed to. With ``k`` of ``E`` experts per token chosen evenly,
  ``B`` tokens touch ``E·(1 − (1 − k/E)^B)`` distinct experts on average (each expert
  misses a token with probability ``1 − k/E``), so a small batch reads a fraction of the
  experts and a large one all of them;
- computes its tokens' FLOPs at the active parameters (the routing is assumed balanced,
  as the engines' expert-load balancers aim for);
- adds, per MoE layer, the dispatch and the combine: each token's hidden vector to ``k``
  experts, ``(D − 1)/D`` of them on other GPUs, over NVLink (α–β, as
  :mod:`gpuplan.core.perf.comm`).
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import msgspec

from gpuplan.core.memory.schema import Workload
from gpuplan.core.perf.collectives import library_for
from gpuplan.core.perf.kernels import kernels_used
from gpuplan.core.perf.link import Link
from gpuplan.core.perf.serve import Replica, Served, budget_concurrency, serve, step_seconds
from gpuplan.core.perf.serve_shape import ServeShape
from gpuplan.core.recommend.context import link_over, multi_gpu_allowed
from gpuplan.core.recommend.context_record import GpuContext
from gpuplan.core.recommend.engine import engine_spec, sequence_cap
from gpuplan.core.recommend.fit import MemoryOracle
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.launch import Plan
from gpuplan.core.recommend.option import breach, layout_breaches, priced
from gpuplan.core.recommend.option_record import Option
from gpuplan.core.recommend.replica import ReplicaMemory
from gpuplan.core.recommend.schema import (
    Breach,
    ConcurrencyLimit,
    Constraints,
    Latency,
    ParallelLayout,
    Throughput,
)
from gpuplan.core.recommend.serving import (
    EngineQueue,
    choose_concurrency,
    finisher,
    model_len,
    replica_memory,
    scale,
    serve_shape,
    slo_breaches,
)

EP_ENGINES = ("vllm", "sglang", "trtllm")
"""Engines whose launch command can say expert parallelism with DP attention."""


def distinct_experts(tokens: float, experts: int, per_token: int) -> float:
    """Expected distinct experts ``tokens`` tokens touch, each routed to ``per_token`` of
    ``experts`` evenly: ``E·(1 − (1 − k/E)^B)``."""
    if tokens <= 0 or experts <= 0:
        return 0.0
    return float(experts * (1 - (1 - per_token / experts) ** tokens))


def dispatch_combine_seconds(
    tokens: float, *, hidden: int, per_token: int, ranks: int, link: Link
) -> float:
    """One MoE layer's dispatch and combine on one GPU: ``tokens`` hidden vectors of 2
    bytes to ``per_token`` experts each, the share on other GPUs over ``link``, and back."""
    if ranks <= 1 or tokens <= 0:
        return 0.0
    nbytes = tokens * per_token * hidden * 2 * (ranks - 1) / ranks
    return 2 * (nbytes / link.bytes_per_s + link.latency_s)


class ExpertReplica(NamedTuple):
    """The expert-parallel replica of one scale-up domain on a GPU model: its ranks, one
    rank's memory and workload, and one rank's engine step."""

    ranks: int
    memory: ReplicaMemory
    w: Workload
    length: int
    """The ``max_model_len`` the plan sets."""

    link: Link
    base: ServeShape
    replica: Replica
    step: Callable[[float, float], float]
    """One rank's step with ``n`` decodes and ``p`` prompt tokens (every rank alike)."""


def expert_replica(
    job: Job, ctx: GpuContext, oracle: MemoryOracle, c: Constraints
) -> ExpertReplica | None:
    """The expert-parallel replica of one scale-up domain (the experts split over every
    GPU of a node, up to 8) for an MoE model on a paged engine that can run it; None
    when the model, engine, GPU or constraints rule it out."""
    arch, gpu = job.arch, ctx.gpu
    iv = job.inference
    if (
        arch is None
        or arch.moe is None
        or iv.engine not in EP_ENGINES
        or job.workload.batch_size > 1
        or ctx.rates is None
    ):
        return None
    link_cap = gpu.interconnect.gpu_link.max_gpus if gpu.interconnect.gpu_link else 1
    ranks = min(8, c.gpus_per_node, c.max_gpus_per_job, link_cap)
    if ranks < 2 or arch.moe.num_experts % ranks or not multi_gpu_allowed(gpu, ranks, c):
        return None
    if c.gpu_counts and not any(n % ranks == 0 for n in c.gpu_counts):
        return None
    layout = ParallelLayout(tensor=1, pipeline=1, data=ranks, zero_stage=0, expert=ranks)
    w, key = oracle.laid_out(job.workload, layout)
    memory = replica_memory(job, oracle, w, gpu, 1, key=key)
    if memory is None or memory.estimate_bytes > gpu.usable_memory_bytes:
        return None
    length, holds = model_len(job, memory, engine_spec(iv.engine), 1)
    if not memory.sequences or not holds:
        return None
    moe = arch.moe
    link = link_over(gpu, ranks, c)
    replica = Replica(
        tp=1,
        rates=ctx.rates,
        mbu=ctx.mbu,
        link=link,
        collectives=library_for(gpu.vendor),
        mbu_given=ctx.mbu_given,
    )
    base = serve_shape(job, w, memory)
    experts = _expert_bytes(job, memory, ranks)
    others = max(memory.weights_bytes - experts, 0.0)
    hidden = arch.hidden_size

    def step(n: float, p: float) -> float:
        """One rank's engine step with ``n`` decodes and ``p`` prompt tokens: the experts
        the replica's tokens touch, and the dispatch and combine of this rank's tokens."""
        tokens = n + p
        touched = distinct_experts(ranks * tokens, moe.num_experts, moe.experts_per_token)
        shape = msgspec.structs.replace(
            base, weights_bytes=others + experts * touched / moe.num_experts
        )
        seconds = step_seconds(job.flops, shape, replica, decode=round(n), prompt=p)[0]
        return seconds + job.moe_layers * dispatch_combine_seconds(
            tokens, hidden=hidden, per_token=moe.experts_per_token, ranks=ranks, link=link
        )

    return ExpertReplica(ranks, memory, w, length, link, base, replica, step)


def expert_parallel_options(
    job: Job, ctx: GpuContext, oracle: MemoryOracle, c: Constraints
) -> list[Option]:
    """The expert-parallel plan (:func:`expert_replica`), empty when there is none."""
    ep = expert_replica(job, ctx, oracle, c)
    return [] if ep is None else [_option(job, ctx, ep, c=c)]


def _expert_bytes(job: Job, memory: ReplicaMemory, ranks: int) -> float:
    """Bytes of routed-expert weights on one GPU (``E / D`` of each MoE layer's), at the
    bytes per parameter the estimate gives this GPU's weights."""
    arch = job.arch
    assert arch is not None
    assert arch.moe is not None
    moe = arch.moe
    matrices = 3 if arch.mlp_gated else 2
    experts = (
        job.moe_layers
        * moe.num_experts
        * matrices
        * arch.hidden_size
        * moe.expert_intermediate_size
    )
    local = job.parameters - experts * (1 - 1 / ranks)
    per_parameter = memory.weights_bytes / local if local > 0 else 0.0
    return experts / ranks * per_parameter


def _breaches(
    job: Job,
    served: Served,
    *,
    queue: EngineQueue,
    replicas: int,
    needed: int,
    per_replica: float,
) -> list[Breach]:
    """The latency targets the plan misses (the ``max_*`` ones on the steady state, the
    SLO's on an attention rank's p95s under load) and the rate its replicas fall short of."""
    iv = job.inference
    out = []
    for name, value in (
        ("max_time_to_first_token_s", served.time_to_first_token_s),
        ("max_time_per_output_token_s", served.time_per_output_token_s),
    ):
        target = getattr(iv, name)
        if target is not None and value > target:
            out.append(
                breach(
                    f"inference.{name}",
                    value,
                    target,
                    "s",
                    f"{value:.3g} s at {served.batch} sequence(s) in flight per GPU, over {name} {target:g} s",
                )
            )
    out += slo_breaches(queue, replicas, iv.slo, True, "attention rank")
    if replicas < needed and job.requests_per_second:
        served_rate = replicas * per_replica
        out.append(
            breach(
                "inference.requests_per_second",
                served_rate,
                job.requests_per_second,
                "requests/s",
                f"{replicas} replica(s) serve {served_rate:.3g} requests/s, under the "
                f"{job.requests_per_second:g} requested: {needed} needed",
                at_least=True,
            )
        )
    return out


def _option(job: Job, ctx: GpuContext, ep: ExpertReplica, *, c: Constraints) -> Option:
    arch = job.arch
    assert arch is not None
    assert arch.moe is not None
    assert ctx.rates is not None
    moe, gpu, iv = arch.moe, ctx.gpu, job.inference
    memory, w, ranks, length, link = ep.memory, ep.w, ep.ranks, ep.length, ep.link
    held = memory.sequences
    assert held is not None
    spec = engine_spec(iv.engine)
    replica, base = ep.replica, ep.base
    experts = _expert_bytes(job, memory, ranks)
    others = max(memory.weights_bytes - experts, 0.0)
    s, o = job.prompt_tokens, max(job.output_tokens, 1)

    def run(batch: int) -> Served:
        tokens = batch * (1 + s / o)  # a step's decodes and prompt tokens on one GPU
        touched = distinct_experts(ranks * tokens, moe.num_experts, moe.experts_per_token)
        shape = msgspec.structs.replace(
            base, weights_bytes=others + experts * touched / moe.num_experts
        )
        one = serve(job.flops, shape, replica, batch)
        a2a = job.moe_layers * dispatch_combine_seconds(
            tokens, hidden=arch.hidden_size, per_token=moe.experts_per_token, ranks=ranks, link=link
        )
        step = one.step_s + a2a
        scale = step / one.step_s
        tokens_per_s = batch / step
        return Served(
            batch=batch,
            step_s=step,
            bound=one.bound,
            time_to_first_token_s=one.time_to_first_token_s * scale,
            time_per_output_token_s=step,
            output_tokens_per_s=tokens_per_s,
            requests_per_s=tokens_per_s / o,
            model_flops_per_s=one.model_flops_per_s / scale,
        )

    cap_server = sequence_cap(
        spec,
        gpu,
        given=iv.max_concurrency,
        batch=1,
        pool_tokens=memory.fits_length().tokens(),
        length=memory.full_tokens,
    )
    limits: list[tuple[int, ConcurrencyLimit]] = [
        (held, "kv_cache"),
        (cap_server, "max_concurrency"),
        (budget_concurrency(base), "token_budget"),
    ]
    cap, limit = min(limits, key=lambda pair: pair[0])
    served, limit = choose_concurrency(run, max(cap, 1), limit, iv)
    per_replica = served.requests_per_s * ranks
    needed = (
        max(math.ceil(job.requests_per_second / per_replica - 1e-12), 1)
        if job.requests_per_second
        else 1
    )
    # Each attention rank admits and steps its own sequences: ``ranks`` queues per
    # replica, each at its share of the rate (the SLO search and the percentiles).
    queue = EngineQueue(job, ep.step, served.batch, base.token_budget, ways=ranks)
    replicas, needed = scale(queue, needed, None, fits=True, tp=ranks, c=c)
    count = replicas * ranks
    touched = distinct_experts(
        ranks * served.batch * (1 + s / o), moe.num_experts, moe.experts_per_token
    )
    a2a = job.moe_layers * dispatch_combine_seconds(
        served.batch * (1 + s / o),
        hidden=arch.hidden_size,
        per_token=moe.experts_per_token,
        ranks=ranks,
        link=link,
    )
    reasons = [
        *ctx.reasons,
        *memory.notes,
        f"{replicas} replica(s) of {ranks} GPU(s) with expert parallelism {ranks} and data-parallel "
        f"attention: each GPU keeps {served.batch} sequences in flight with their KV cache "
        f"(limited by {limit}; its cache holds {held}) and {moe.num_experts // ranks} of the "
        f"{moe.num_experts} experts of each MoE layer; a step's {ranks * served.batch * (1 + s / o):,.0f} "
        f"tokens touch {touched:.0f} of {moe.num_experts} experts (E(1-(1-k/E)^B), k = "
        f"{moe.experts_per_token}); dispatch and combine {a2a * 1000:.1f} ms per step over {link.kind}: "
        f"{per_replica:.3g} requests/s per replica, TTFT {served.time_to_first_token_s * 1000:.0f} ms, "
        f"TPOT {served.time_per_output_token_s * 1000:.1f} ms; decode is {served.bound}-bound",
    ]
    breaches = layout_breaches(gpu, count, c) + _breaches(
        job, served, queue=queue, replicas=replicas, needed=needed, per_replica=per_replica
    )
    at = len(reasons)
    reasons += [b.detail for b in breaches]
    plan = Plan(
        tp=1,
        replicas=replicas,
        max_model_len=length,
        concurrency=served.batch,
        token_budget=memory.token_budget,
        fraction=memory.fraction,
        kv_cache_bytes=memory.kv_budget_bytes,
        kv_cache_tokens=memory.fits_length().tokens() * ranks,
        output_tokens=job.output_tokens,
        expert=ranks,
    )
    request_latency = (
        served.time_to_first_token_s
        + max(job.output_tokens - 1, 0) * served.time_per_output_token_s
    )
    kernel_source, kernel_id = kernels_used(ctx.rates, job.arch is not None)
    option = Option(
        gpu=gpu,
        count=count,
        layout=ParallelLayout(tensor=1, pipeline=1, data=count, zero_stage=0, expert=ranks),
        required=memory.resident(served.batch, static_batch=False),
        fits=True,
        admissible=not breaches,
        time_hours=job.duration_hours,
        speed_s=request_latency,
        throughput=Throughput(value=served.output_tokens_per_s * count, unit="tokens/s"),
        latency=Latency(
            concurrency=served.batch * ranks,
            limited_by=limit,
            kv_cache_sequences=held * ranks,
            time_to_first_token_s=served.time_to_first_token_s,
            time_per_output_token_s=served.time_per_output_token_s,
            request_latency_s=request_latency,
            output_tokens_per_s=served.output_tokens_per_s * ranks,
            requests_per_s=per_replica,
            decode_bound=served.bound,
        ),
        source=ctx.rate.source if ctx.rate else "catalog",
        kernel_source=kernel_source,
        kernel_table=kernel_id,
        reasons=reasons,
        breaches=breaches,
        unverified=ctx.unverified,
        finish=finisher(
            queue, replicas=replicas, at=at, plan=plan, job=job, gpu=gpu, w=w, fits=True
        ),
    )
    return priced(option, ctx, job, c, served.model_flops_per_s * count)
