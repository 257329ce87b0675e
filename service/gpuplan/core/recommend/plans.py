"""Plans for one GPU model: the layouts that fit at each count, timed, priced.

Training searches counts 1, 2, 4, … and at each count sizes a fixed ladder of
layouts, from the least to the most sharded, and takes the fastest that fits:

1. data parallel (DDP), every GPU a full replica;
2. ZeRO-2: optimizer states and gradients sharded (same traffic as DDP);
3. ZeRO-3 / FSDP full shard: parameters too (1.5x the traffic);
4. tensor parallel inside the node (largest power of two ≤ 8 dividing the heads),
   ZeRO-3 over the remaining data-parallel ranks;
5. tensor parallel × pipeline parallel, ZeRO-1 over what remains.

Inference tries tensor-parallel degrees 1, 2, 4, 8 per replica, and as many
replicas as the request rate needs.
"""

import math

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.estimate import HEADROOM
from gpuplan.core.memory.schema import Workload
from gpuplan.core.perf.comm import Link, group_link
from gpuplan.core.perf.cost import energy_kwh, on_prem_usd_per_gpu_hour
from gpuplan.core.perf.efficiency import efficiency_class, efficiency_data
from gpuplan.core.perf.speed import (
    LayoutLinks,
    Rate,
    ServingShape,
    TrainingShape,
    achieved_rate,
    serving,
    training_step,
)
from gpuplan.core.recommend.fit import MemoryOracle, with_layout
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.schema import Constraints, Latency, Layout, Objective, Throughput
from gpuplan.core.record import Record

TP_DEGREES = (2, 4, 8)


class Plan(Record, kw_only=True):
    """One (GPU, count, layout) with everything the ranking and the response need."""

    gpu: GpuSpec
    count: int
    layout: Layout | None
    required: int
    fits: bool
    admissible: bool
    time_hours: float | None = None
    speed_s: float | None = None
    """What ``fastest`` minimizes: job seconds (training) or request latency (inference)."""

    throughput: Throughput | None = None
    usd_per_hour: float | None = None
    cost_usd: float | None = None
    cost_basis: str | None = None
    energy_kwh: float | None = None
    flops_per_watt: float | None = None
    latency: Latency | None = None
    source: str = "catalog"
    reasons: list[str] = []
    unverified: list[str] = []

    @property
    def gpu_hours(self) -> float:
        return (self.time_hours or 0.0) * self.count


def objective_key(plan: Plan, objective: Objective) -> tuple[float, ...]:
    """Sort key, smaller is better; a plan without a price sorts after every priced one."""
    speed = plan.speed_s if plan.speed_s is not None else math.inf
    unpriced = 1.0 if plan.cost_usd is None else 0.0
    money = plan.cost_usd if plan.cost_usd is not None else plan.gpu_hours
    # Costs and energies are compared at 9 significant digits, so that two counts whose
    # GPU-hours agree up to rounding tie, and the tie goes to fewer GPUs.
    if objective == "cheapest":
        return (unpriced, _sig(money), plan.count, speed)
    if objective == "fastest":
        return (_sig(speed), unpriced, _sig(money), plan.count)
    if objective == "energy":
        energy = plan.energy_kwh if plan.energy_kwh is not None else math.inf
        return (_sig(energy), plan.count, speed)
    return (unpriced, _sig(money * speed), plan.count)


def _sig(value: float) -> float:
    return float(f"{value:.9g}") if math.isfinite(value) else value


class GpuContext(Record, kw_only=True):
    """What of a GPU the plans share: its rate, efficiency and price per GPU-hour."""

    gpu: GpuSpec
    rate: Rate | None
    mbu: float
    per_gpu_hour: float | None
    basis: str | None
    reasons: list[str]
    unverified: list[str]


def gpu_context(
    gpu: GpuSpec,
    job: Job,
    request_mfu: float | None,
    request_mbu: float | None,
    constraints: Constraints,
) -> GpuContext:
    cls = efficiency_class(gpu)
    mfu = request_mfu if request_mfu is not None else cls.mfu
    vision = efficiency_data().vision
    if job.vision and request_mfu is None:
        mfu *= vision.mfu_factor
    mbu = request_mbu if request_mbu is not None else cls.mbu
    precision = job.workload.precision
    if job.kind == "inference" and job.workload.weight_quantization in ("int8", "int4", "nf4"):
        # Weight-only quantization dequantizes to 16 bits before the matmul.
        precision = "bf16" if precision in ("fp32", "amp_bf16") else precision
    rate = achieved_rate(gpu, precision, mfu, job.measured.get(gpu.id))
    reasons: list[str] = []
    unverified: list[str] = []
    uses_class = request_mfu is None or (job.kind == "inference" and request_mbu is None)
    if uses_class and not cls.verified:
        unverified.append(
            f"efficiency class {cls.name} (MFU {cls.mfu:.0%}, MBU {cls.mbu:.0%}): {cls.source}"
        )
    if job.vision and request_mfu is None and not vision.verified:
        unverified.append(f"vision MFU factor {vision.mfu_factor}: {vision.source}")
    unverified.extend(f"catalog {field}" for field in gpu.unverified)
    if rate is not None and rate.note:
        reasons.append(rate.note)
    per_hour, basis, price_note = _price(gpu, job, constraints)
    if price_note:
        reasons.append(price_note)
    return GpuContext(
        gpu=gpu,
        rate=rate,
        mbu=mbu,
        per_gpu_hour=per_hour,
        basis=basis,
        reasons=reasons,
        unverified=unverified,
    )


def _price(gpu: GpuSpec, job: Job, c: Constraints) -> tuple[float | None, str | None, str]:
    override = job.prices.get(gpu.id)
    cloud = override.cloud_usd_per_gpu_hour if override else None
    cloud_note = "cloud price from the request"
    if cloud is None and gpu.price.cloud_on_demand is not None:
        p = gpu.price.cloud_on_demand
        cloud = p.usd_per_gpu_hour
        cloud_note = f"cloud ${cloud:.2f}/GPU-h as of {p.as_of} ({p.source})"
    purchase = override.purchase_usd if override else None
    purchase_note = "purchase price from the request"
    if purchase is None and gpu.price.purchase is not None:
        purchase = gpu.price.purchase.usd
        purchase_note = f"purchase ${purchase:,.0f} as of {gpu.price.purchase.as_of}"
    owned = on_prem_usd_per_gpu_hour(purchase, gpu, job.energy, job.owned) if purchase else None
    options: list[tuple[float, str, str]] = []
    if cloud is not None and c.deployment in ("cloud", "hybrid"):
        options.append((cloud, "cloud", cloud_note))
    if owned is not None and c.deployment in ("on_prem", "hybrid"):
        options.append(
            (
                owned,
                "on_prem",
                f"on-prem ${owned:.3f}/GPU-h: {purchase_note} over {job.owned.amortization_years:g} years at "
                f"{job.owned.utilization:.0%} busy, plus electricity",
            )
        )
    if not options:
        need = {
            "cloud": "a cloud price",
            "on_prem": "a purchase price",
            "hybrid": "a cloud or purchase price",
        }[c.deployment]
        return (
            None,
            None,
            f"no {need} for {gpu.id} in the catalog; pass constraints.prices to cost it",
        )
    value, basis, note = min(options)
    return value, basis, note


def _multi_ok(gpu: GpuSpec, count: int, c: Constraints) -> bool:
    return count == 1 or c.required_interconnect == "any" or gpu.interconnect.gpu_link is not None


def training_ladder(job: Job, count: int, c: Constraints) -> list[Layout]:
    if count == 1:
        return [Layout(tensor=1, pipeline=1, data=1, zero_stage=0)]
    out = [
        Layout(tensor=1, pipeline=1, data=count, zero_stage=0),
        Layout(tensor=1, pipeline=1, data=count, zero_stage=2),
        Layout(tensor=1, pipeline=1, data=count, zero_stage=3),
    ]
    arch = job.arch
    if arch is None:
        return out
    tps = [t for t in TP_DEGREES if t <= count and t <= c.gpus_per_node and arch.num_heads % t == 0]
    if tps:
        t = max(tps)
        dp = count // t
        out.append(Layout(tensor=t, pipeline=1, data=dp, zero_stage=3 if dp > 1 else 0))
        pp = 1
        while pp * 2 <= count // t and pp * 2 <= arch.num_layers:
            pp *= 2
        if pp > 1:
            dp = count // (t * pp)
            out.append(Layout(tensor=t, pipeline=pp, data=dp, zero_stage=1 if dp > 1 else 0))
    return out


def _links(
    gpu: GpuSpec, layout: Layout, c: Constraints, oracle: MemoryOracle | None
) -> LayoutLinks:
    key = (gpu.id, layout.tensor, layout.pipeline, layout.data)
    if oracle is not None and key in oracle.links:
        return oracle.links[key]

    def link(size: int) -> Link:
        return group_link(
            gpu,
            size,
            gpus_per_node=c.gpus_per_node,
            network_bytes_per_s=c.network_bytes_per_s_per_gpu,
        )

    n = layout.tensor * layout.pipeline * layout.data
    pcie = gpu.interconnect.pcie
    lat = efficiency_data().latency
    host = Link(
        kind="pcie",
        bytes_per_s=float(pcie.per_direction_bytes_per_s)
        if pcie
        else c.network_bytes_per_s_per_gpu,
        latency_s=lat.pcie_seconds,
    )
    links = LayoutLinks(
        tensor=link(layout.tensor),
        pipeline=link(layout.tensor * layout.pipeline),
        data=link(n),
        host=host,
    )
    if oracle is not None:
        oracle.links[key] = links
    return links


def _training_shape(
    w: Workload, arch: Architecture | None, trainable: int, parameters: int
) -> TrainingShape:
    wide = w.precision == "fp32" or w.precision.startswith("amp_")
    return TrainingShape(
        batch_size=w.batch_size,
        seq=w.sequence_length or 1,
        accumulation=w.gradient_accumulation_steps,
        checkpointing=w.gradient_checkpointing,
        causal_skip=w.attention != "eager",
        frozen_base=w.mode in ("finetune_lora", "finetune_qlora"),
        hidden_size=arch.hidden_size if arch else 0,
        num_layers=arch.num_layers if arch else 1,
        activation_bytes=4 if w.precision == "fp32" else 2,
        trainable_parameters=trainable,
        parameters=parameters,
        gradient_bytes=4 if wide else 2,
        weight_bytes=4 if wide else 2,
    )


def time_training(
    job: Job,
    ctx: GpuContext,
    layout: Layout,
    trainable: int,
    c: Constraints,
    *,
    oracle: MemoryOracle | None = None,
) -> tuple[float, float, float]:
    """(job seconds, trained tokens/s, delivered model FLOP/s) of ``layout``."""
    assert ctx.rate is not None
    laid = oracle.laid_out(job.workload, layout)[0] if oracle else with_layout(job.workload, layout)
    step = training_step(
        job.flops,
        _training_shape(laid, job.arch, trainable, job.parameters),
        tp=layout.tensor,
        pp=layout.pipeline,
        dp=layout.data,
        zero_stage=layout.zero_stage,
        offload_optimizer=layout.cpu_offload_optimizer,
        rate=ctx.rate.flops_per_s,
        links=_links(ctx.gpu, layout, c, oracle),
        overlap=job.overlap,
    )
    tokens_per_s = step.tokens / step.seconds
    return job.tokens / tokens_per_s, tokens_per_s, tokens_per_s * step.model_flops_per_token


def _finish(plan: Plan, ctx: GpuContext, job: Job, c: Constraints, delivered_flops: float) -> Plan:
    gpu = ctx.gpu
    hours = plan.time_hours or 0.0
    usd_h = ctx.per_gpu_hour * plan.count if ctx.per_gpu_hour is not None else None
    cost = usd_h * hours if usd_h is not None else None
    kwh = energy_kwh(gpu, hours * plan.count, job.energy)
    watts = plan.count * gpu.tdp_watts * job.energy.power_fraction_of_tdp
    admissible = True
    reasons = list(plan.reasons)
    if c.max_usd_per_hour is not None and usd_h is not None and usd_h > c.max_usd_per_hour:
        admissible = False
        reasons.append(f"${usd_h:.2f}/h is over max_usd_per_hour ${c.max_usd_per_hour:.2f}")
    if c.max_total_usd is not None and cost is not None and cost > c.max_total_usd:
        admissible = False
        reasons.append(f"${cost:,.2f} is over max_total_usd ${c.max_total_usd:,.2f}")
    if (c.max_usd_per_hour is not None or c.max_total_usd is not None) and usd_h is None:
        admissible = False
        reasons.append("no price to check the budget against")
    return msgspec.structs.replace(
        plan,
        usd_per_hour=usd_h,
        cost_usd=cost,
        cost_basis=ctx.basis,
        energy_kwh=kwh,
        flops_per_watt=delivered_flops / watts if watts else None,
        admissible=admissible,
        reasons=reasons,
    )


def training_plans(
    job: Job,
    ctx: GpuContext,
    oracle: MemoryOracle,
    c: Constraints,
    *,
    objective: Objective,
    trainable: int,
) -> tuple[list[Plan], Plan]:
    """(fitting plans, the smallest-memory miss) of one GPU over the counts."""
    gpu = ctx.gpu
    usable = gpu.usable_memory_bytes
    plans: list[Plan] = []
    miss = Plan(gpu=gpu, count=1, layout=None, required=0, fits=False, admissible=False)
    count = 1
    first_fit: int | None = None
    best_speed = math.inf
    stale = 0
    bounds = _replica_bounds(oracle, job, gpu)
    while count <= c.max_gpus_per_job:
        if first_fit is not None and objective in ("cheapest", "energy") and count > 2 * first_fit:
            break
        if not _multi_ok(gpu, count, c):
            break
        ladder = training_ladder(job, count, c)
        if bounds[0] > usable:
            # DDP keeps a full replica per GPU: more ranks never shrink it.
            ladder = [lay for lay in ladder if not _is_ddp(lay)] or ladder
        chosen, smallest = _fit_at(
            job, ctx, oracle, c, ladder=ladder, bounds=bounds, trainable=trainable
        )
        if chosen is None:
            if smallest is not None:
                miss = Plan(
                    gpu=gpu,
                    count=count,
                    layout=smallest[0],
                    required=smallest[1],
                    fits=False,
                    admissible=False,
                )
            count *= 2
            continue
        first_fit = first_fit or count
        (seconds, tokens_per_s, delivered), layout, required = chosen
        plan = Plan(
            gpu=gpu,
            count=count,
            layout=layout,
            required=required,
            fits=True,
            admissible=True,
            time_hours=seconds / 3600,
            speed_s=seconds,
            throughput=Throughput(
                value=tokens_per_s, unit="samples/s" if job.vision else "tokens/s"
            ),
            source=ctx.rate.source if ctx.rate else "catalog",
            reasons=[*ctx.reasons, _describe_layout(layout, gpu, c)],
            unverified=ctx.unverified,
        )
        plans.append(_finish(plan, ctx, job, c, delivered))
        # More GPUs stop paying once the time no longer falls by 10% per doubling.
        if seconds < best_speed * 0.9:
            best_speed, stale = seconds, 0
        else:
            stale += 1
            if stale >= 2:
                break
        count *= 2
    return plans, miss


_Timing = tuple[float, float, float]


def _fit_at(
    job: Job,
    ctx: GpuContext,
    oracle: MemoryOracle,
    c: Constraints,
    *,
    ladder: list[Layout],
    bounds: tuple[float, float, float],
    trainable: int,
) -> tuple[tuple[_Timing, Layout, int] | None, tuple[Layout, int] | None]:
    """(the fastest layout of ``ladder`` that fits, else None; the smallest one sized)."""
    gpu = ctx.gpu
    usable = gpu.usable_memory_bytes
    sized: dict[int, int | None] = {}
    # The most sharded layouts need the least memory: when neither fits, none does,
    # and the rest of the ladder is not estimated for this GPU.
    tail = [
        _size(oracle, job, gpu=gpu, ladder=ladder, index=i, sized=sized)
        for i in range(max(len(ladder) - 2, 0), len(ladder))
    ]
    if not any(r is not None and r <= usable for r in tail):
        known = [(ladder[i], r) for i, r in sized.items() if r is not None]
        return None, min(known, key=lambda x: x[1]) if known else None
    # Time every layout (no estimate needed), then size them fastest first: the
    # first that fits is the fastest that fits.
    # Layouts that keep more per GPU than fits, whatever the rank count, are left out.
    timed = sorted(
        (time_training(job, ctx, lay, trainable, c, oracle=oracle), i)
        for i, lay in enumerate(ladder)
        if i in sized or _bound(lay, bounds) <= usable
    )
    for timing, index in timed:
        size = _size(oracle, job, gpu=gpu, ladder=ladder, index=index, sized=sized)
        if size is not None and size <= usable:
            return (timing, ladder[index], size), None
    raise AssertionError("unreachable: a tail layout fits")


def _replica_bounds(oracle: MemoryOracle, job: Job, gpu: GpuSpec) -> tuple[float, float, float]:
    """Lower bounds of ``required_bytes`` under DDP, ZeRO-1 and ZeRO-2 at any rank count.

    DDP shards nothing, so it needs at least what one unsharded GPU needs. ZeRO-1/2 keep
    the full weights and every activation: at the unsharded peak's moment they hold at
    least its bytes less the optimizer states, master weights and gradients they shard.
    A bound only ever skips estimating a layout that cannot fit; it never claims a fit.
    """
    base = oracle.response(job.workload)
    if base is None:
        return (0.0, 0.0, 0.0)
    b = base.breakdown
    required = oracle.required(job.workload, gpu) or 0
    # Weights, activations and cache at the unsharded peak; what ZeRO shards (states,
    # gradients) and the temporaries that shrink with them are left out.
    kept = (
        base.peak_bytes
        - b.optimizer_state_bytes
        - b.master_weights_bytes
        - b.gradients_bytes
        - b.temporary_bytes
    )
    zero_2 = kept * (1 + HEADROOM)
    zero_1 = (kept + b.gradients_bytes) * (1 + HEADROOM)
    return (float(required), zero_1, zero_2)


def _bound(layout: Layout, bounds: tuple[float, float, float]) -> float:
    """The lower bound of ``_replica_bounds`` that applies to ``layout`` (0: none)."""
    if layout.tensor == layout.pipeline == 1 and layout.zero_stage <= 2:
        return bounds[layout.zero_stage]
    return 0.0


def _size(
    oracle: MemoryOracle,
    job: Job,
    *,
    gpu: GpuSpec,
    ladder: list[Layout],
    index: int,
    sized: dict[int, int | None],
) -> int | None:
    """``required_bytes`` of ``ladder[index]`` on ``gpu``, remembered in ``sized``."""
    if index not in sized:
        laid, key = oracle.laid_out(job.workload, ladder[index])
        sized[index] = oracle.required(laid, gpu, key)
    return sized[index]


def _is_ddp(layout: Layout) -> bool:
    return layout.data > 1 and layout.zero_stage == 0 and layout.tensor == layout.pipeline == 1


def _describe_layout(layout: Layout, gpu: GpuSpec, c: Constraints) -> str:
    n = layout.tensor * layout.pipeline * layout.data
    if n == 1:
        return "fits one GPU unsharded"
    parts = []
    if layout.tensor > 1:
        link = group_link(
            gpu,
            layout.tensor,
            gpus_per_node=c.gpus_per_node,
            network_bytes_per_s=c.network_bytes_per_s_per_gpu,
        )
        parts.append(f"tensor parallel {layout.tensor} over {link.kind}")
    if layout.pipeline > 1:
        parts.append(f"pipeline {layout.pipeline} stages")
    if layout.data > 1:
        kind = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3/FSDP"}[layout.zero_stage]
        link = group_link(
            gpu, n, gpus_per_node=c.gpus_per_node, network_bytes_per_s=c.network_bytes_per_s_per_gpu
        )
        parts.append(f"{kind} over {layout.data} data-parallel ranks ({link.kind})")
    return "sharded: " + ", ".join(parts)


def inference_plans(
    job: Job, ctx: GpuContext, oracle: MemoryOracle, c: Constraints
) -> tuple[list[Plan], Plan]:
    gpu = ctx.gpu
    usable = gpu.usable_memory_bytes
    plans: list[Plan] = []
    miss = Plan(gpu=gpu, count=1, layout=None, required=0, fits=False, admissible=False)
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
        if not _multi_ok(gpu, tp, c):
            break
        layout = Layout(tensor=tp, pipeline=1, data=1, zero_stage=0)
        workload, key = oracle.laid_out(job.workload, layout)
        required = oracle.required(workload, gpu, key)
        base = oracle.response(workload, key)
        if required is None or base is None:
            continue
        if required > usable:
            if miss.required == 0 or required < miss.required:
                miss = Plan(
                    gpu=gpu,
                    count=tp,
                    layout=layout,
                    required=required,
                    fits=False,
                    admissible=False,
                )
            continue
        plan = _serve(
            job,
            ctx,
            workload,
            tp=tp,
            required=required,
            weights=base.breakdown.weights_bytes,
            kv=base.breakdown.kv_cache_bytes,
            c=c,
        )
        if plan is not None:
            plans.append(plan)
    return plans, miss


def _serve(
    job: Job,
    ctx: GpuContext,
    w: Workload,
    *,
    tp: int,
    required: int,
    weights: int,
    kv: int,
    c: Constraints,
) -> Plan | None:
    gpu = ctx.gpu
    assert ctx.rate is not None
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
        rate=ctx.rate.flops_per_s,
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
    layout = Layout(tensor=tp, pipeline=1, data=replicas, zero_stage=0)
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
    plan = Plan(
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
        source=ctx.rate.source,
        reasons=reasons,
        unverified=ctx.unverified,
    )
    finished = _finish(plan, ctx, job, c, s.model_flops_per_s * replicas)
    if not admissible:
        finished = msgspec.structs.replace(finished, admissible=False)
    return finished
