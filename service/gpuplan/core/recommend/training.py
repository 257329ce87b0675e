"""Training options of one GPU model: the layouts that fit at each count, timed, priced.

The job stays the job: its global batch (sequences per optimizer step) is the same on
every count, re-split into data-parallel ranks, micro-batches and accumulation steps;
a layout whose data-parallel ranks do not divide it is not tried. At each count the
search sizes a ladder of layouts, from the least to the most sharded, and keeps the
fastest that fits:

1. data parallel (DDP), every GPU a full replica;
2. ZeRO-2: optimizer states and gradients sharded (same traffic as DDP);
3. ZeRO-3 / FSDP full shard: parameters too;
4. tensor parallel inside the node, ZeRO-3 (FSDP) over the remaining data-parallel ranks;
5. tensor x pipeline parallel (interleaved when the micro-batches allow it), the
   distributed optimizer (ZeRO-1) over what remains;
6. for long sequences, tensor x context parallel.

Counts: every count from 1 to ``gpus_per_node`` and every whole number of nodes above,
up to ``max_gpus_per_job`` (or exactly ``constraints.gpu_counts``). Whole-node counts are
swept on a coarse geometric grid first and then every count around the best is tried,
so any count can be the answer without timing thousands.

``layout: given`` times exactly the request's parallelism instead (:func:`given_option`).
"""

import math
from collections.abc import Iterator
from typing import NamedTuple

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.memory import fsdp1
from gpuplan.core.memory.intervals import factors
from gpuplan.core.memory.kernels import materializes_scores
from gpuplan.core.memory.numerics import DTYPE_BYTES
from gpuplan.core.memory.schema import Framework as FrameworkName
from gpuplan.core.memory.schema import Workload
from gpuplan.core.memory.states import framework_of, gradient_reduce_dtype
from gpuplan.core.perf.comm import Link
from gpuplan.core.perf.efficiency import Framework, efficiency_data, framework
from gpuplan.core.perf.step import Step, StepLinks, StepShape, training_step
from gpuplan.core.recommend.context import TP_DEGREES, GpuContext, link_over, multi_gpu_allowed
from gpuplan.core.recommend.fit import MemoryOracle, with_layout
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.option import Option, layout_breaches, memory_breach, priced
from gpuplan.core.recommend.schema import (
    Constraints,
    Objective,
    ParallelLayout,
    StepTime,
    Throughput,
)

LONG_SEQUENCE = 16_384
"""From this sequence length on, the ladder also tries context parallelism."""

CONTEXT_CHUNK = 8_192
"""Context parallelism splits a long sequence into chunks of about this many tokens."""

REFINE_LIMIT = 16
"""Most whole-node counts tried around the coarse sweep's best."""


class Timing(NamedTuple):
    """How long a training job takes on one layout."""

    seconds: float
    tokens_per_s: float
    delivered_flops_per_s: float
    """Model FLOP/s the job's GPUs deliver together."""

    step: Step


class Sized(NamedTuple):
    """A layout and its ``required_bytes`` per GPU."""

    layout: ParallelLayout
    required: int


class Fitted(NamedTuple):
    """The fastest layout of a count that fits."""

    timing: Timing
    layout: ParallelLayout
    required: int


class ReplicaBounds(NamedTuple):
    """Lower bounds of ``required_bytes`` at any rank count, per data-parallel sharding."""

    ddp: float
    zero_1: float
    zero_2: float

    def of(self, layout: ParallelLayout) -> float:
        """The bound that applies to ``layout`` (0: none does)."""
        if (
            layout.tensor == layout.pipeline == layout.context == 1
            and layout.zero_stage <= 2
            and layout.micro_batch_size is None
        ):
            return (self.ddp, self.zero_1, self.zero_2)[layout.zero_stage]
        return 0.0


def default_framework(layout: ParallelLayout) -> FrameworkName:
    """The framework a layout implies when the request names none."""
    if layout.framework is not None:
        return layout.framework
    if layout.zero_stage == 3:
        return "fsdp2"
    if layout.tensor > 1 or layout.pipeline > 1 or layout.context > 1 or layout.expert > 1:
        return "megatron"
    return "deepspeed" if layout.zero_stage in (1, 2) else "ddp"


def _rung_framework(job: Job, layout: ParallelLayout) -> FrameworkName:
    """The framework a search layout runs under: FSDP1, when the request names it, for
    the data-parallel layouts it shards (``FULL_SHARD``, ``SHARD_GRAD_OP``); else what
    the layout implies."""
    flat = (
        job.given.framework == "fsdp1"
        and layout.zero_stage in (2, 3)
        and layout.tensor == layout.pipeline == layout.context == 1
    )
    return "fsdp1" if flat else default_framework(layout)


def split_batch(global_batch: int, data: int, micro: int) -> tuple[int, int] | None:
    """(micro-batch, accumulation) of ``data`` ranks sharing ``global_batch`` sequences:
    the largest micro-batch up to ``micro`` that divides each rank's share; None when
    the ranks do not divide the batch."""
    if global_batch % data:
        return None
    share = global_batch // data
    for size in range(min(micro, share), 0, -1):
        if share % size == 0:
            return size, share // size
    return None


def _split(
    job: Job, layout: ParallelLayout, framework_name: FrameworkName | None = None
) -> ParallelLayout | None:
    """``layout`` with the job's global batch split over its data-parallel ranks."""
    split = split_batch(job.global_batch, layout.data, job.workload.batch_size)
    if split is None:
        return None
    micro, accumulation = split
    virtual = layout.virtual_stages
    if virtual > 1 and accumulation % layout.pipeline:
        virtual = 1  # interleaving needs the micro-batches in whole rounds of the stages
    return msgspec.structs.replace(
        layout,
        micro_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        global_batch_size=job.global_batch,
        virtual_stages=virtual,
        framework=framework_name or layout.framework,
    )


def _virtual_stages(layers: int, pipeline: int) -> int:
    """Model chunks per pipeline rank: the most up to 4 that split the layers evenly."""
    per_stage = layers // pipeline
    return max((v for v in (4, 3, 2, 1) if per_stage % v == 0 and per_stage >= v), default=1)


def training_ladder(job: Job, count: int, c: Constraints) -> list[ParallelLayout]:
    """The layouts tried at ``count`` GPUs, the global batch split over each."""
    rungs = [ParallelLayout(tensor=1, pipeline=1, data=count, zero_stage=0)]
    if count > 1:
        rungs += [
            ParallelLayout(tensor=1, pipeline=1, data=count, zero_stage=2),
            ParallelLayout(tensor=1, pipeline=1, data=count, zero_stage=3),
        ]
    arch = job.arch
    if arch is not None and count > 1:
        tps = [
            t
            for t in TP_DEGREES
            if t <= count and t <= c.gpus_per_node and arch.num_heads % t == 0 and count % t == 0
        ]
        if tps:
            t = max(tps)
            dp = count // t
            rungs.append(
                ParallelLayout(tensor=t, pipeline=1, data=dp, zero_stage=3 if dp > 1 else 0)
            )
            # Tensor x pipeline: the split of the rest whose data-parallel ranks divide
            # the global batch with the fewest stages (the smallest bubble), and the one
            # with the most (the least memory per GPU).
            rest = count // t
            splits = [
                (pp, rest // pp)
                for pp in range(2, min(rest, arch.num_layers) + 1)
                if rest % pp == 0 and job.global_batch % (rest // pp) == 0
            ]
            chosen = sorted({splits[0], splits[-1]}) if splits else []
            for pp, dp in chosen:
                rungs.append(
                    ParallelLayout(
                        tensor=t,
                        pipeline=pp,
                        data=dp,
                        zero_stage=1 if dp > 1 else 0,
                        virtual_stages=_virtual_stages(arch.num_layers, pp),
                    )
                )
            seq = job.workload.sequence_length or 0
            if seq >= LONG_SEQUENCE:
                cp = min(rest, 1 << max(0, math.ceil(math.log2(seq / CONTEXT_CHUNK))))
                while cp > 1 and (rest % cp or job.global_batch % (rest // cp)):
                    cp //= 2
                if cp > 1:
                    dp = rest // cp
                    rungs.append(
                        ParallelLayout(
                            tensor=t, pipeline=1, data=dp, context=cp, zero_stage=1 if dp > 1 else 0
                        )
                    )
    p = job.given
    if p.tensor * p.pipeline * p.data * p.context == count and count > 1:
        # The request's own layout competes at its count: the search never answers
        # slower than what the user already runs.
        rungs.append(given_layout(job))
    out = []
    for rung in rungs:
        split = _split(job, rung, _rung_framework(job, rung))
        if split is not None:
            out.append(split)
    return out


def step_shape(job: Job, w: Workload, trainable: int) -> StepShape:
    wide = w.precision == "fp32" or w.precision.startswith("amp_")
    shape = _shape(job, w, trainable, wide)
    return _flat_units(job, w, shape) if framework_of(w) == "fsdp1" else shape


def _flat_units(job: Job, w: Workload, shape: StepShape) -> StepShape:
    """FSDP1's timing (``framework: fsdp1``, gpuplan.core.perf.step's
    ``_flat_units_exposed``): units gathered in ``MixedPrecision.param_dtype``, gradients
    reduced in its ``reduce_dtype``, the root gathered once a micro-batch, the backward
    overlapped only with prefetch, one reduce-scatter a step under ``no_sync()``; LoRA
    adapters inside their layers' units make every base weight's gradient computed and
    reduced (the flat parameter requires grad)."""
    f = w.parallelism.fsdp1
    shared = fsdp1.adapters_in_layers(w)
    root = job.root_parameters
    return msgspec.structs.replace(
        shape,
        frozen_base=shape.frozen_base and not shared,
        gather_bytes=int(fsdp1.gather_bytes(w)),
        gradient_bytes=DTYPE_BYTES[gradient_reduce_dtype(w)],
        flat_units=True,
        root_parameters=root,
        backward_overlap=f.backward_prefetch != "none",
        reduce_once=fsdp1.without_sync(w),
        reduced_parameters=(job.parameters - root + shape.trainable_parameters) if shared else None,
    )


def _shape(job: Job, w: Workload, trainable: int, wide: bool) -> StepShape:
    arch = job.arch
    return StepShape(
        batch_size=w.batch_size,
        seq=w.sequence_length or 1,
        accumulation=w.gradient_accumulation_steps,
        checkpointing=w.gradient_checkpointing,
        checkpoint_every=w.checkpoint_every_n_layers,
        causal_skip=not materializes_scores(arch, w),
        frozen_base=w.mode in ("finetune_lora", "finetune_qlora"),
        hidden_size=arch.hidden_size if arch else 0,
        mlp_width=job.mlp_width,
        kv_width=job.kv_width,
        num_layers=arch.num_layers if arch else 1,
        num_heads=arch.num_heads if arch else 0,
        moe_layers=job.moe_layers,
        experts_per_token=job.experts_per_token,
        activation_bytes=4 if w.precision == "fp32" else 2,
        trainable_parameters=trainable,
        parameters=job.parameters,
        gradient_bytes=_gradient_bytes(w, wide),
        weight_bytes=4 if wide else 2,
        gather_bytes=1 if w.precision == "fp8" else (4 if wide else 2),
        compile=w.compile,
        vision=job.vision,
    )


def _gradient_bytes(w: Workload, wide: bool) -> int:
    """Bytes per gradient on the wire: the reduce dtype the job names. Unnamed under
    Megatron, Megatron-LM's default, the dtype the memory estimate keeps the gradient
    buffer in (fp32 for bf16: ``states.gradient_reduce_dtype``); unnamed elsewhere, the
    bytes the efficiencies were fitted with (fp32 beside fp32 weights, else the compute
    dtype).

    FSDP2 with fp8 is the one place this parts from the memory estimate, which keeps
    torchao's fp32 shards and so an fp32 reduce: sending 4 bytes there and refitting
    (``python -m bench.published.fit``, tried 2026-12-04) leaves the float8 blog's three
    fp8 runs 19% to 36% slow, the held-out 405B among them, while their bf16 twins stay
    within 8%. Those runs paid for their reduce as the bf16 ones did, so the wire keeps
    the compute dtype's bytes until a run names its reduce dtype."""
    if w.parallelism.gradient_reduce_dtype is not None or framework_of(w) == "megatron":
        return DTYPE_BYTES[gradient_reduce_dtype(w)]
    return 4 if wide else 2


def _links(
    gpu: GpuSpec, layout: ParallelLayout, c: Constraints, oracle: MemoryOracle | None
) -> StepLinks:
    key = (gpu.id, msgspec.json.encode(layout))
    if oracle is not None and key in oracle.links:
        return oracle.links[key]

    def link(size: int) -> Link:
        return link_over(gpu, size, c)

    t, cp = layout.tensor, layout.context
    n = t * layout.pipeline * layout.data * cp
    pcie = gpu.interconnect.pcie
    lat = efficiency_data().latency
    host = Link(
        kind="pcie",
        bytes_per_s=float(pcie.per_direction_bytes_per_s)
        if pcie
        else c.network_bytes_per_s_per_gpu,
        latency_s=lat.pcie_seconds,
    )
    # Megatron's rank order: tensor innermost, then context, expert (within data),
    # pipeline, data outermost; a group's link is that of the span it covers.
    links = StepLinks(
        tensor=link(t),
        context=link(t * cp),
        expert=link(t * cp * layout.expert),
        pipeline=link(t * cp * layout.pipeline),
        data=link(n),
        host=host,
    )
    if oracle is not None:
        oracle.links[key] = links
    return links


def _framework(job: Job, layout: ParallelLayout) -> Framework:
    """The framework a layout is timed with. Megatron's fused kernels are assumed only
    when the request names it: a tensor-parallel layout the search chose may run on
    anything, and a job must not get faster per GPU by being spread over more of them."""
    chosen = framework(default_framework(layout))
    if job.given.framework is None and chosen.elementwise_factor != 1.0:
        return msgspec.structs.replace(chosen, elementwise_factor=1.0)
    return chosen


def time_training(
    job: Job,
    ctx: GpuContext,
    layout: ParallelLayout,
    trainable: int,
    c: Constraints,
    *,
    oracle: MemoryOracle | None = None,
) -> Timing:
    """Job seconds, trained tokens/s, delivered model FLOP/s and the step of ``layout``."""
    assert ctx.rates is not None
    if oracle is None:
        laid = with_layout(job.workload, layout, job.given.gradient_reduce_dtype, job.given.fsdp1)
        shape = step_shape(job, laid, trainable)
    else:
        laid, key = oracle.laid_out(job.workload, layout, job.given.gradient_reduce_dtype)
        shape = oracle.shapes.get(key) or oracle.shapes.setdefault(
            key, step_shape(job, laid, trainable)
        )
    step = training_step(
        job.flops,
        shape,
        laid.parallelism,
        rates=ctx.rates,
        links=_links(ctx.gpu, layout, c, oracle),
        framework=_framework(job, layout),
        comm_overlap=job.overlap,
    )
    tokens_per_s = step.tokens / step.seconds
    return Timing(
        job.tokens / tokens_per_s, tokens_per_s, tokens_per_s * step.model_flops_per_token, step
    )


def counts(c: Constraints) -> Iterator[int]:
    """The GPU counts the search may answer, smallest first: every count inside a node,
    whole nodes above (or exactly ``constraints.gpu_counts``)."""
    if c.gpu_counts:
        yield from sorted(set(c.gpu_counts))
        return
    node = c.gpus_per_node
    yield from range(1, min(node, c.max_gpus_per_job) + 1)
    yield from range(2 * node, c.max_gpus_per_job + 1, node)


def _coarse(c: Constraints) -> list[int]:
    """A geometric grid of the counts: 1, 2, 3, 4, 6, 8, 12, 16, 24, … (powers of two and
    three times them) inside a node, rounded to whole nodes above, and the largest count.
    Computed, not picked from the list of every count (a 65,536-GPU bound is a long
    list); the search refines around its best."""
    node, top = c.gpus_per_node, c.max_gpus_per_job
    picked = {min(node, top)}
    if top >= 2 * node:
        picked.add(top // node * node)
    k = 0
    while (1 << k) <= top:
        for n in (1 << k, 3 << k >> 1 if k else 1):
            whole = n if n <= node else max(2, round(n / node)) * node
            if whole <= top:
                picked.add(whole)
        k += 1
    return sorted(picked)


def training_options(
    job: Job,
    ctx: GpuContext,
    oracle: MemoryOracle,
    c: Constraints,
    *,
    objective: Objective,
    trainable: int,
) -> tuple[list[Option], Option]:
    """(fitting options, the smallest-memory miss) of one GPU over the counts."""
    gpu = ctx.gpu
    miss = Option(gpu=gpu, count=1, layout=None, required=0, fits=False, admissible=False)
    bounds = _replica_bounds(oracle, job, gpu)
    tried: dict[int, Option | None] = {}

    def at(count: int) -> Option | None:
        nonlocal miss
        if count not in tried:
            option, smallest = _option_at(
                job, ctx, oracle, c, count=count, bounds=bounds, trainable=trainable
            )
            tried[count] = option
            if (
                option is None
                and smallest is not None
                and (miss.layout is None or smallest.required < miss.required)
            ):
                miss = Option(
                    gpu=gpu,
                    count=count,
                    layout=smallest.layout,
                    required=smallest.required,
                    fits=False,
                    admissible=False,
                    breaches=[memory_breach(smallest.required, gpu.usable_memory_bytes)],
                )
        return tried[count]

    coarse = list(counts(c)) if c.gpu_counts else _coarse(c)
    best: Option | None = None
    first_fit: int | None = None
    stale = 0
    for count in coarse:
        if not multi_gpu_allowed(gpu, count, c):
            break
        if first_fit is not None and objective in ("cheapest", "energy") and count > 2 * first_fit:
            break
        option = at(count)
        if option is None:
            continue
        first_fit = first_fit or count
        if best is None or (option.speed_s or math.inf) < (best.speed_s or math.inf) * 0.95:
            best, stale = option, 0
        else:
            stale += 1
            if stale >= 3 and objective in ("fastest", "balanced"):
                break
    if best is not None and not c.gpu_counts:
        for count in _around(best.count, coarse, c.gpus_per_node):
            if multi_gpu_allowed(gpu, count, c):
                at(count)
    options = [o for o in tried.values() if o is not None]
    return options, miss


def _around(count: int, coarse: list[int], node: int) -> Iterator[int]:
    """Every count strictly between the coarse neighbours of ``count`` (at most
    :data:`REFINE_LIMIT`, spread evenly when there are more)."""
    i = coarse.index(count)
    low = coarse[i - 1] if i else 0
    high = coarse[i + 1] if i + 1 < len(coarse) else count
    inside = range(low + 1, min(high, node + 1))
    above = range(max(2 * node, (low // node + 1) * node), high, node)
    between = [r for r in (inside, above) if len(r)]
    total = sum(len(r) for r in between)
    stride = max(1, math.ceil(total / REFINE_LIMIT))
    for r in between:
        yield from (n for n in r[::stride] if n not in coarse)


def _option_at(
    job: Job,
    ctx: GpuContext,
    oracle: MemoryOracle,
    c: Constraints,
    *,
    count: int,
    bounds: ReplicaBounds,
    trainable: int,
) -> tuple[Option | None, Sized | None]:
    usable = ctx.gpu.usable_memory_bytes
    ladder = oracle.ladders.get(count)
    if ladder is None:
        ladder = oracle.ladders[count] = training_ladder(job, count, c)
    if not ladder:
        return None, None
    if bounds.ddp > usable:
        # DDP keeps a full replica per GPU: more ranks never shrink it.
        ladder = [lay for lay in ladder if not _is_ddp(lay)] or ladder
    chosen, smallest = _fit_at(
        job, ctx, oracle, c, ladder=ladder, bounds=bounds, trainable=trainable
    )
    if chosen is None:
        return None, smallest
    option = _option(
        job,
        ctx,
        c,
        count=count,
        layout=chosen.layout,
        required=chosen.required,
        timing=chosen.timing,
    )
    return option, None


def _option(
    job: Job,
    ctx: GpuContext,
    c: Constraints,
    *,
    count: int,
    layout: ParallelLayout,
    required: int,
    timing: Timing,
    fits: bool = True,
) -> Option:
    step = timing.step
    option = Option(
        gpu=ctx.gpu,
        count=count,
        layout=layout,
        required=required,
        fits=fits,
        admissible=fits,
        breaches=[] if fits else [memory_breach(required, ctx.gpu.usable_memory_bytes)],
        time_hours=timing.seconds / 3600,
        speed_s=timing.seconds,
        throughput=Throughput(
            value=timing.tokens_per_s, unit="samples/s" if job.vision else "tokens/s"
        ),
        mfu=round(step.mfu, 4),
        step=StepTime(
            seconds=step.seconds,
            compute_s=step.compute_s,
            recompute_s=step.recompute_s,
            exposed_comm_s=step.exposed_comm_s,
            bubble_s=step.bubble_s,
            optimizer_s=step.optimizer_s,
        ),
        source=ctx.rate.source if ctx.rate else "catalog",
        reasons=[*ctx.reasons, describe_layout(layout, ctx.gpu, c)],
        unverified=ctx.unverified,
    )
    return priced(option, ctx, job, c, timing.delivered_flops_per_s)


def given_layout(job: Job) -> ParallelLayout:
    """The request's own parallelism as a layout, its micro-batch and accumulation as given."""
    p, w = job.given, job.workload
    layout = ParallelLayout(
        tensor=p.tensor,
        pipeline=p.pipeline,
        data=p.data,
        # FSDP1's default sharding strategy is FULL_SHARD: zero_stage 0 means 3 there.
        zero_stage=3 if p.framework == "fsdp1" and p.zero_stage == 0 else p.zero_stage,
        cpu_offload_optimizer=p.cpu_offload.optimizer,
        context=p.context,
        expert=p.expert,
        virtual_stages=p.virtual_stages,
        framework=p.framework,
        micro_batch_size=w.batch_size,
        gradient_accumulation_steps=w.gradient_accumulation_steps,
        global_batch_size=w.batch_size * w.gradient_accumulation_steps * p.data,
    )
    return msgspec.structs.replace(layout, framework=default_framework(layout))


def given_option(
    job: Job, ctx: GpuContext, oracle: MemoryOracle, c: Constraints, trainable: int
) -> Option:
    """The job on exactly the request's parallelism, fitting or not (``layout: given``)."""
    p = job.given
    w = msgspec.structs.replace(job.workload, parallelism=p)
    job = msgspec.structs.replace(job, workload=w)
    layout = given_layout(job)
    count = p.tensor * p.pipeline * p.data * p.context
    laid, key = oracle.laid_out(w, layout)
    required = oracle.required(laid, ctx.gpu, key) or 0
    fits = 0 < required <= ctx.gpu.usable_memory_bytes
    timing = time_training(job, ctx, layout, trainable, c, oracle=oracle)
    option = _option(
        job, ctx, c, count=count, layout=layout, required=required, timing=timing, fits=fits
    )
    reasons = list(option.reasons)
    if not fits:
        reasons.insert(
            0,
            f"does not fit: needs {required / 2**30:.1f} GiB per GPU, "
            f"{ctx.gpu.usable_memory_bytes / 2**30:.1f} GiB usable (timed as given)"
            if required
            else "the estimator refused this layout (timed as given)",
        )
    breaches = [*option.breaches, *layout_breaches(ctx.gpu, count, c)]
    reasons += [b.detail for b in breaches if b.constraint != "memory"]
    return msgspec.structs.replace(
        option, admissible=option.admissible and not breaches, reasons=reasons, breaches=breaches
    )


def _fit_at(
    job: Job,
    ctx: GpuContext,
    oracle: MemoryOracle,
    c: Constraints,
    *,
    ladder: list[ParallelLayout],
    bounds: ReplicaBounds,
    trainable: int,
) -> tuple[Fitted | None, Sized | None]:
    """(the fastest layout of ``ladder`` that fits, else None; the smallest one sized)."""
    gpu = ctx.gpu
    usable = gpu.usable_memory_bytes
    sized: dict[int, int | None] = {}
    # The most sharded layouts need the least memory: when none of the last three
    # fits, none does, and the rest of the ladder is not estimated for this GPU.
    tail = [
        _size(oracle, job, gpu=gpu, ladder=ladder, index=i, sized=sized)
        for i in range(max(len(ladder) - 3, 0), len(ladder))
    ]
    if not any(r is not None and r <= usable for r in tail):
        known = [Sized(ladder[i], r) for i, r in sized.items() if r is not None]
        return None, min(known, key=lambda x: x.required) if known else None
    # Time every layout (no estimate needed), then size them fastest first: the
    # first that fits is the fastest that fits. Layouts that keep more per GPU than
    # fits, whatever the rank count, are left out.
    timed = sorted(
        (
            (time_training(job, ctx, lay, trainable, c, oracle=oracle), i)
            for i, lay in enumerate(ladder)
            if i in sized or bounds.of(lay) <= usable
        ),
        key=lambda pair: (pair[0].seconds, pair[1]),
    )
    for timing, index in timed:
        size = _size(oracle, job, gpu=gpu, ladder=ladder, index=index, sized=sized)
        if size is not None and size <= usable:
            return Fitted(timing, ladder[index], size), None
    raise AssertionError("unreachable: a tail layout fits")


def _replica_bounds(oracle: MemoryOracle, job: Job, gpu: GpuSpec) -> ReplicaBounds:
    """Lower bounds of ``required_bytes`` under DDP, ZeRO-1 and ZeRO-2 at any rank count.

    DDP shards nothing, so it needs at least what one unsharded GPU needs. ZeRO-1/2 keep
    the full weights and every activation: at the unsharded peak's moment they hold at
    least its bytes less the optimizer states, master weights and gradients they shard.
    A bound only ever skips estimating a layout that cannot fit; it never claims a fit.
    The bounds hold for the workload's own micro-batch; a re-split one has none.
    """
    base = oracle.response(job.workload)
    if base is None:
        return ReplicaBounds(0.0, 0.0, 0.0)
    b = base.breakdown
    required = oracle.required(job.workload, gpu) or 0
    kept = (
        base.peak_bytes
        - b.optimizer_state_bytes
        - b.master_weights_bytes
        - b.gradients_bytes
        - b.temporary_bytes
    )
    # required_bytes is at least the device's bytes times the high end of its interval,
    # in the regime of a sharded job (ZeRO-1/2 shard over data-parallel ranks).
    sharded = msgspec.structs.replace(
        job.workload,
        parallelism=msgspec.structs.replace(job.workload.parallelism, zero_stage=1, data=2),
    )
    headroom = max(1.0, factors(sharded)["device_bytes"][1])
    zero_2 = kept * headroom
    zero_1 = (kept + b.gradients_bytes) * headroom
    return ReplicaBounds(float(required), zero_1, zero_2)


def _size(
    oracle: MemoryOracle,
    job: Job,
    *,
    gpu: GpuSpec,
    ladder: list[ParallelLayout],
    index: int,
    sized: dict[int, int | None],
) -> int | None:
    """``required_bytes`` of ``ladder[index]`` on ``gpu``, remembered in ``sized``."""
    if index not in sized:
        laid, key = oracle.laid_out(job.workload, ladder[index], job.given.gradient_reduce_dtype)
        sized[index] = oracle.required(laid, gpu, key)
    return sized[index]


def _is_ddp(layout: ParallelLayout) -> bool:
    return (
        layout.data > 1
        and layout.zero_stage == 0
        and layout.tensor == layout.pipeline == layout.context == 1
    )


def describe_layout(layout: ParallelLayout, gpu: GpuSpec, c: Constraints) -> str:
    n = layout.tensor * layout.pipeline * layout.data * layout.context
    batch = ""
    if layout.global_batch_size is not None:
        batch = (
            f"; global batch {layout.global_batch_size} = micro-batch {layout.micro_batch_size}"
            f" x {layout.gradient_accumulation_steps} accumulation x {layout.data} ranks"
        )
    if n == 1:
        return "fits one GPU unsharded" + batch

    def over(size: int) -> str:
        return link_over(gpu, size, c).kind

    parts = []
    if layout.tensor > 1:
        parts.append(f"tensor parallel {layout.tensor} over {over(layout.tensor)}")
    if layout.context > 1:
        parts.append(f"context parallel {layout.context}")
    if layout.pipeline > 1:
        interleave = (
            f" ({layout.virtual_stages} virtual stages each)" if layout.virtual_stages > 1 else ""
        )
        parts.append(f"pipeline {layout.pipeline} stages{interleave}")
    if layout.data > 1:
        kind = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3/FSDP"}[layout.zero_stage]
        parts.append(f"{kind} over {layout.data} data-parallel ranks ({over(n)})")
    name = f" [{layout.framework}]" if layout.framework else ""
    return "sharded: " + ", ".join(parts) + name + batch
