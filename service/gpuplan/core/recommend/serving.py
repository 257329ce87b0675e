"""Serving options of one GPU model: tensor-parallel degrees 1, 2, 4, 8 per replica,
and as many replicas as the request rate needs.
"""

import math

import msgspec

from gpuplan.core.memory.schema import Workload
from gpuplan.core.perf.comm import group_link
from gpuplan.core.perf.speed import ServingShape, serving
from gpuplan.core.recommend.context import TP_DEGREES, GpuContext, multi_gpu_allowed
from gpuplan.core.recommend.fit import MemoryOracle
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.option import Option, priced
from gpuplan.core.recommend.schema import Constraints, Latency, ParallelLayout, Throughput


def serving_options(
    job: Job, ctx: GpuContext, oracle: MemoryOracle, c: Constraints
) -> tuple[list[Option], Option]:
    gpu = ctx.gpu
    usable = gpu.usable_memory_bytes
    options: list[Option] = []
    miss = Option(gpu=gpu, count=1, layout=None, required=0, fits=False, admissible=False)
    arch = job.arch
    degrees = [1] + [
        t
        for t in TP_DEGREES
        if arch is not None
        and arch.num_heads % t == 0
        and t <= c.gpus_per_node
        and t <= c.max_gpus_per_job
    ]
    for tp in degrees:
        if not multi_gpu_allowed(gpu, tp, c):
            break
        layout = ParallelLayout(tensor=tp, pipeline=1, data=1, zero_stage=0)
        workload, key = oracle.laid_out(job.workload, layout)
        required = oracle.required(workload, gpu, key)
        base = oracle.response(workload, key)
        if required is None or base is None:
            continue
        if required > usable:
            if miss.required == 0 or required < miss.required:
                miss = Option(
                    gpu=gpu,
                    count=tp,
                    layout=layout,
                    required=required,
                    fits=False,
                    admissible=False,
                )
            continue
        option = serve_option(
            job,
            ctx,
            workload,
            tp=tp,
            required=required,
            weights=base.breakdown.weights_bytes,
            kv=base.breakdown.kv_cache_bytes,
            c=c,
        )
        if option is not None:
            options.append(option)
    return options, miss


def serve_option(
    job: Job,
    ctx: GpuContext,
    w: Workload,
    *,
    tp: int,
    required: int,
    weights: int,
    kv: int,
    c: Constraints,
) -> Option | None:
    gpu = ctx.gpu
    assert ctx.rates is not None
    r = ctx.rates
    prefill_efficiency = (
        r.mfu
        if r.mfu is not None
        else (r.generation.fp8_gemm_efficiency if r.fp8 else r.generation.gemm_efficiency)
    )
    arch = job.arch
    link = group_link(
        gpu, tp, gpus_per_node=c.gpus_per_node, network_bytes_per_s=c.network_bytes_per_s_per_gpu
    )
    s = serving(
        job.flops,
        ServingShape(
            batch_size=w.batch_size,
            prompt_tokens=job.prompt_tokens,
            output_tokens=job.output_tokens,
            cache_tokens=job.prompt_tokens + (w.max_new_tokens or 0),
            causal_skip=w.attention != "eager",
            hidden_size=arch.hidden_size if arch else 0,
            num_layers=arch.num_layers if arch else 1,
            activation_bytes=4 if w.precision == "fp32" else 2,
        ),
        tp=tp,
        rate=r.peak_flops * prefill_efficiency,
        bandwidth_bytes_per_s=float(gpu.memory_bandwidth_bytes_per_s),
        mbu=ctx.mbu,
        weights_bytes=weights,
        kv_cache_bytes=kv,
        link=link,
    )
    replicas = (
        math.ceil(job.requests_per_second / s.requests_per_s - 1e-12)
        if job.requests_per_second
        else 1
    )
    replicas = max(replicas, 1)
    count = replicas * tp
    layout = ParallelLayout(tensor=tp, pipeline=1, data=replicas, zero_stage=0)
    reasons = [*ctx.reasons]
    reasons.append(
        f"{replicas} replica(s) of {tp} GPU(s) at batch {w.batch_size}: {s.requests_per_s:.2f} requests/s and "
        f"{s.output_tokens_per_s:.0f} output tokens/s each; decode is {s.decode_bound}-bound"
        + (f" (tensor parallel over {link.kind})" if tp > 1 else "")
    )
    admissible = count <= c.max_gpus_per_job
    if not admissible:
        reasons.append(
            f"needs {count} GPUs for {job.requests_per_second:g} requests/s, over max_gpus_per_job {c.max_gpus_per_job}"
        )
    option = Option(
        gpu=gpu,
        count=count,
        layout=layout,
        required=required,
        fits=True,
        admissible=admissible,
        time_hours=job.duration_hours,
        speed_s=s.round_s,
        throughput=Throughput(value=s.output_tokens_per_s * replicas, unit="tokens/s"),
        latency=Latency(
            time_to_first_token_s=s.prefill_s,
            time_per_output_token_s=s.decode_step_s,
            decode_bound=s.decode_bound,
        ),
        source=ctx.rate.source if ctx.rate else "catalog",
        reasons=reasons,
        unverified=ctx.unverified,
    )
    finished = priced(option, ctx, job, c, s.model_flops_per_s * replicas)
    if not admissible:
        finished = msgspec.structs.replace(finished, admissible=False)
    return finished
