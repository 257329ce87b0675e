"""Serving options of one GPU model: replicas of 1, 2, 4 or 8 tensor-parallel GPUs, each
running continuous batching, and as many replicas as the request rate needs.

A replica's concurrency (sequences in flight) is what a server would reach: as many as
its paged KV cache holds after the weights, at most the server's sequence cap, and no
more than keep the latency targets. More sequences per replica means fewer replicas
(the weights are read once per step for all of them) until the step turns compute-bound.
"""

import math
from collections.abc import Callable
from typing import NamedTuple

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.memory.kernels import materializes_scores
from gpuplan.core.memory.schema import Workload
from gpuplan.core.perf.efficiency import efficiency_data
from gpuplan.core.perf.serve import Replica, Served, ServeShape, budget_concurrency, serve
from gpuplan.core.recommend.context import TP_DEGREES, GpuContext, link_over, multi_gpu_allowed
from gpuplan.core.recommend.fit import MemoryOracle
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.option import Option, breach, layout_breaches, memory_breach, priced
from gpuplan.core.recommend.schema import (
    ConcurrencyLimit,
    Constraints,
    InferenceVolume,
    Latency,
    ParallelLayout,
    Throughput,
)


def serving_options(
    job: Job, ctx: GpuContext, oracle: MemoryOracle, c: Constraints, *, given: bool = False
) -> tuple[list[Option], Option]:
    """Every tensor-parallel degree that fits, each with the replicas the rate needs;
    ``given``: only the workload's own degree and replica count, fitting or not."""
    gpu = ctx.gpu
    options: list[Option] = []
    miss = Option(gpu=gpu, count=1, layout=None, required=0, fits=False, admissible=False)
    arch = job.arch
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
        ]
    )
    for tp in degrees:
        if not given and not multi_gpu_allowed(gpu, tp, c):
            break
        if not given and c.gpu_counts and not any(n % tp == 0 for n in c.gpu_counts):
            continue
        layout = ParallelLayout(tensor=tp, pipeline=1, data=1, zero_stage=0)
        workload, key = oracle.laid_out(job.workload, layout)
        m = oracle.measures(workload, gpu, key)
        base = oracle.response(workload, key)
        if m is None or base is None:
            continue
        option = serve_option(
            job,
            ctx,
            workload,
            tp=tp,
            memory=ReplicaMemory.of(
                job,
                workload,
                gpu,
                total=m.device,
                required=m.required,
                weights=base.breakdown.weights_bytes,
                kv=base.breakdown.kv_cache_bytes,
            ),
            c=c,
            replicas=job.given.data if given else None,
        )
        if option.fits or given:
            options.append(option)
        elif miss.required == 0 or option.required < miss.required:
            miss = option
    return options, miss


class ReplicaMemory(NamedTuple):
    """One GPU of a replica as a server fills it: the weights, what is not KV cache, and
    how many sequences the cache left over holds."""

    weights_bytes: float
    """What a decode step reads besides the KV cache."""

    static_bytes: float
    """Weights, runtime, activations: everything but the KV cache."""

    per_token_bytes: float
    """KV cache of one token of one sequence on this GPU."""

    budget_bytes: float
    """What the server takes of the GPU (vLLM's ``gpu_memory_utilization``)."""

    mean_tokens: int
    """Tokens a sequence in flight holds on average: its prompt and half its output,
    in whole blocks."""

    full_tokens: int
    """Tokens of a finished sequence (prompt + output)."""

    estimate_bytes: int
    """The estimator's ``required_bytes`` (``device_bytes`` with the planning headroom) of
    the workload as written: what decides the fit, as it does for a CI plan's ``fits``."""

    @classmethod
    def of(
        cls,
        job: Job,
        w: Workload,
        gpu: GpuSpec,
        *,
        total: int,
        required: int,
        weights: int,
        kv: int,
    ) -> "ReplicaMemory":
        """From the estimate of ``w.batch_size`` sequences of ``prompt + output`` tokens."""
        serving = efficiency_data().serving
        full = job.prompt_tokens + job.output_tokens
        block = serving.kv_block_tokens
        return cls(
            weights_bytes=float(weights),
            static_bytes=float(total - kv),
            per_token_bytes=kv / (w.batch_size * full) if full else 0.0,
            budget_bytes=gpu.usable_memory_bytes * serving.memory_fraction,
            mean_tokens=math.ceil((job.prompt_tokens + job.output_tokens / 2) / block) * block,
            full_tokens=full,
            estimate_bytes=required,
        )

    @property
    def sequences(self) -> int | None:
        """Sequences in flight the cache holds at their mean length; None for a model
        whose cache is not known (a bare parameter count)."""
        if self.per_token_bytes <= 0:
            return None
        room = self.budget_bytes - self.static_bytes
        return max(int(room // (self.per_token_bytes * self.mean_tokens)), 0)

    def resident(self, sequences: int, *, static_batch: bool) -> int:
        """Bytes per GPU with ``sequences`` in flight (a static batch holds every
        sequence at its full length)."""
        tokens = self.full_tokens if static_batch else self.mean_tokens
        return math.ceil(self.static_bytes + sequences * tokens * self.per_token_bytes)


Run = Callable[[int], Served]
"""One replica's steady state at a concurrency."""

_TARGETS: tuple[ConcurrencyLimit, ...] = (
    "max_time_to_first_token_s",
    "max_time_per_output_token_s",
)


def _breach(s: Served, iv: InferenceVolume) -> ConcurrencyLimit | None:
    """The first latency target ``s`` misses."""
    values = (s.time_to_first_token_s, s.time_per_output_token_s)
    for name, value in zip(_TARGETS, values, strict=True):
        target = getattr(iv, name)
        if target is not None and value > target:
            return name
    return None


def choose_concurrency(
    run: Run, cap: int, limit: ConcurrencyLimit, iv: InferenceVolume
) -> tuple[Served, ConcurrencyLimit]:
    """The largest concurrency up to ``cap`` that keeps the latency targets; both
    latencies grow with the concurrency, so a bisection finds it. At 1 when none does."""
    top = run(cap)
    missed = _breach(top, iv)
    if missed is None:
        return top, limit
    first = run(1)
    if _breach(first, iv) is not None:
        return first, missed
    low, high = 1, cap
    while high - low > 1:
        mid = (low + high) // 2
        if _breach(run(mid), iv) is None:
            low = mid
        else:
            high = mid
    # The target that one more sequence would miss is the one that binds.
    return run(low), _breach(run(high), iv) or missed


def _allowed_replicas(needed: int, tp: int, c: Constraints) -> int:
    """``needed`` replicas, or with ``constraints.gpu_counts`` the fewest replicas of an
    allowed count that are enough (else the most an allowed count holds)."""
    if not c.gpu_counts:
        return needed
    options = sorted({n // tp for n in c.gpu_counts if n % tp == 0 and n >= tp})
    if not options:
        return needed
    return next((r for r in options if r >= needed), options[-1])


def serve_option(
    job: Job,
    ctx: GpuContext,
    w: Workload,
    *,
    tp: int,
    memory: ReplicaMemory,
    c: Constraints,
    replicas: int | None = None,
) -> Option:
    """Replicas of ``tp`` GPUs served as a server would, ``replicas`` of them (default:
    as many as the request rate needs); timed even when they do not fit."""
    gpu = ctx.gpu
    assert ctx.rates is not None
    iv = job.inference
    arch = job.arch
    link = link_over(gpu, tp, c)
    shape = ServeShape(
        prompt_tokens=job.prompt_tokens,
        output_tokens=job.output_tokens,
        hidden_size=arch.hidden_size if arch else 0,
        mlp_width=job.mlp_width,
        num_layers=arch.num_layers if arch else 1,
        activation_bytes=4 if w.precision == "fp32" else 2,
        causal_skip=not materializes_scores(arch, w),
        weights_bytes=memory.weights_bytes,
        kv_bytes_per_token=memory.per_token_bytes,
        token_budget=efficiency_data().serving.token_budget(gpu),
    )
    replica = Replica(tp=tp, rates=ctx.rates, mbu=ctx.mbu, link=link)

    static_batch = w.batch_size > 1

    def run(batch: int) -> Served:
        return serve(job.flops, shape, replica, batch, static=static_batch)

    held = memory.sequences
    limit: ConcurrencyLimit
    fits = memory.estimate_bytes <= gpu.usable_memory_bytes
    if static_batch:
        s, limit = run(w.batch_size), "batch_size"
        required = memory.resident(w.batch_size, static_batch=True)
    else:
        kv: list[tuple[int, ConcurrencyLimit]] = [] if held is None else [(held, "kv_cache")]
        limits: list[tuple[int, ConcurrencyLimit]] = [
            *kv,
            (
                iv.max_concurrency or efficiency_data().serving.max_concurrency(gpu),
                "max_concurrency",
            ),
            (budget_concurrency(shape), "token_budget"),
        ]
        cap, limit = min(limits, key=lambda pair: pair[0])
        s, limit = choose_concurrency(run, max(cap, 1), limit, iv)
        required = memory.resident(s.batch, static_batch=False)
    if not fits:
        required = memory.estimate_bytes
    needed = (
        max(math.ceil(job.requests_per_second / s.requests_per_s - 1e-12), 1)
        if job.requests_per_second
        else 1
    )
    # A replica that does not fit is shown alone: how many it would take says nothing.
    replicas = replicas or (_allowed_replicas(needed, tp, c) if fits else 1)
    count = replicas * tp
    layout = ParallelLayout(tensor=tp, pipeline=1, data=replicas, zero_stage=0)
    reasons = [*ctx.reasons]
    if not fits:
        what = (
            f"{w.batch_size} sequences of {memory.full_tokens} tokens"
            if static_batch
            else f"one sequence of {memory.full_tokens} tokens"
        )
        reasons.insert(
            0,
            f"does not fit: needs {required / 2**30:.1f} GiB per GPU at tensor parallel {tp} for the "
            f"weights, runtime and the KV cache of {what} (at 95% confidence), "
            f"{gpu.usable_memory_bytes / 2**30:.1f} GiB usable",
        )
    reasons.append(
        f"{replicas} replica(s) of {tp} GPU(s), each {s.batch} sequences in flight "
        f"(limited by {limit}; the KV cache holds {held if held is not None else 'an unknown number'}): "
        f"{s.requests_per_s:.3g} requests/s, "
        f"{s.output_tokens_per_s:,.0f} output tokens/s, TTFT {s.time_to_first_token_s * 1000:.0f} ms, "
        f"TPOT {s.time_per_output_token_s * 1000:.1f} ms; decode is {s.bound}-bound"
        + (f" (tensor parallel over {link.kind})" if tp > 1 else "")
    )
    breaches = [memory_breach(required, gpu.usable_memory_bytes)] if not fits else []
    breaches += layout_breaches(gpu, count, c)
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
        target = getattr(iv, name)
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
    reasons += [b.detail for b in breaches if b.constraint != "memory"]
    request_latency = (
        s.time_to_first_token_s + max(job.output_tokens - 1, 0) * s.time_per_output_token_s
    )
    option = Option(
        gpu=gpu,
        count=count,
        layout=layout,
        required=required,
        fits=fits,
        admissible=not breaches,
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
        ),
        source=ctx.rate.source if ctx.rate else "catalog",
        reasons=reasons,
        breaches=breaches,
        unverified=ctx.unverified,
    )
    return priced(option, ctx, job, c, s.model_flops_per_s * replicas)
