"""Training options of one GPU model: the layouts that fit at each count, timed, priced.

Training searches counts 1, 2, 4, … and at each count sizes a fixed ladder of
layouts, from the least to the most sharded, and takes the fastest that fits:

1. data parallel (DDP), every GPU a full replica;
2. ZeRO-2: optimizer states and gradients sharded (same traffic as DDP);
3. ZeRO-3 / FSDP full shard: parameters too (1.5x the traffic);
4. tensor parallel inside the node (largest power of two ≤ 8 dividing the heads),
   ZeRO-3 over the remaining data-parallel ranks;
5. tensor parallel × pipeline parallel, ZeRO-1 over what remains.
"""

import math
from typing import NamedTuple

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.response import HEADROOM
from gpuplan.core.memory.schema import Workload
from gpuplan.core.perf.comm import Link, group_link
from gpuplan.core.perf.efficiency import efficiency_data
from gpuplan.core.perf.speed import LayoutLinks, TrainingShape, training_step
from gpuplan.core.recommend.context import TP_DEGREES, GpuContext, multi_gpu_allowed
from gpuplan.core.recommend.fit import MemoryOracle, with_layout
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.option import Option, priced
from gpuplan.core.recommend.schema import Constraints, Objective, ParallelLayout, Throughput


class Timing(NamedTuple):
    """How long a training job takes on one layout."""

    seconds: float
    tokens_per_s: float
    delivered_flops_per_s: float
    """Model FLOP/s the job's GPUs deliver together."""


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
        if layout.tensor == layout.pipeline == 1 and layout.zero_stage <= 2:
            return (self.ddp, self.zero_1, self.zero_2)[layout.zero_stage]
        return 0.0


def training_ladder(job: Job, count: int, c: Constraints) -> list[ParallelLayout]:
    if count == 1:
        return [ParallelLayout(tensor=1, pipeline=1, data=1, zero_stage=0)]
    out = [
        ParallelLayout(tensor=1, pipeline=1, data=count, zero_stage=0),
        ParallelLayout(tensor=1, pipeline=1, data=count, zero_stage=2),
        ParallelLayout(tensor=1, pipeline=1, data=count, zero_stage=3),
    ]
    arch = job.arch
    if arch is None:
        return out
    tps = [t for t in TP_DEGREES if t <= count and t <= c.gpus_per_node and arch.num_heads % t == 0]
    if tps:
        t = max(tps)
        dp = count // t
        out.append(ParallelLayout(tensor=t, pipeline=1, data=dp, zero_stage=3 if dp > 1 else 0))
        pp = 1
        while pp * 2 <= count // t and pp * 2 <= arch.num_layers:
            pp *= 2
        if pp > 1:
            dp = count // (t * pp)
            out.append(
                ParallelLayout(tensor=t, pipeline=pp, data=dp, zero_stage=1 if dp > 1 else 0)
            )
    return out


def _links(
    gpu: GpuSpec, layout: ParallelLayout, c: Constraints, oracle: MemoryOracle | None
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
    layout: ParallelLayout,
    trainable: int,
    c: Constraints,
    *,
    oracle: MemoryOracle | None = None,
) -> Timing:
    """Job seconds, trained tokens/s and delivered model FLOP/s of ``layout``."""
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
    return Timing(
        job.tokens / tokens_per_s, tokens_per_s, tokens_per_s * step.model_flops_per_token
    )


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
    usable = gpu.usable_memory_bytes
    options: list[Option] = []
    miss = Option(gpu=gpu, count=1, layout=None, required=0, fits=False, admissible=False)
    count = 1
    first_fit: int | None = None
    best_speed = math.inf
    stale = 0
    bounds = _replica_bounds(oracle, job, gpu)
    while count <= c.max_gpus_per_job:
        if first_fit is not None and objective in ("cheapest", "energy") and count > 2 * first_fit:
            break
        if not multi_gpu_allowed(gpu, count, c):
            break
        ladder = training_ladder(job, count, c)
        if bounds.ddp > usable:
            # DDP keeps a full replica per GPU: more ranks never shrink it.
            ladder = [lay for lay in ladder if not _is_ddp(lay)] or ladder
        chosen, smallest = _fit_at(
            job, ctx, oracle, c, ladder=ladder, bounds=bounds, trainable=trainable
        )
        if chosen is None:
            if smallest is not None:
                miss = Option(
                    gpu=gpu,
                    count=count,
                    layout=smallest.layout,
                    required=smallest.required,
                    fits=False,
                    admissible=False,
                )
            count *= 2
            continue
        first_fit = first_fit or count
        (seconds, tokens_per_s, delivered), layout, required = (
            chosen.timing,
            chosen.layout,
            chosen.required,
        )
        option = Option(
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
        options.append(priced(option, ctx, job, c, delivered))
        # More GPUs stop paying once the time no longer falls by 10% per doubling.
        if seconds < best_speed * 0.9:
            best_speed, stale = seconds, 0
        else:
            stale += 1
            if stale >= 2:
                break
        count *= 2
    return options, miss


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
    # The most sharded layouts need the least memory: when neither fits, none does,
    # and the rest of the ladder is not estimated for this GPU.
    tail = [
        _size(oracle, job, gpu=gpu, ladder=ladder, index=i, sized=sized)
        for i in range(max(len(ladder) - 2, 0), len(ladder))
    ]
    if not any(r is not None and r <= usable for r in tail):
        known = [Sized(ladder[i], r) for i, r in sized.items() if r is not None]
        return None, min(known, key=lambda x: x.required) if known else None
    # Time every layout (no estimate needed), then size them fastest first: the
    # first that fits is the fastest that fits.
    # Layouts that keep more per GPU than fits, whatever the rank count, are left out.
    timed = sorted(
        (time_training(job, ctx, lay, trainable, c, oracle=oracle), i)
        for i, lay in enumerate(ladder)
        if i in sized or bounds.of(lay) <= usable
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
    """
    base = oracle.response(job.workload)
    if base is None:
        return ReplicaBounds(0.0, 0.0, 0.0)
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
        laid, key = oracle.laid_out(job.workload, ladder[index])
        sized[index] = oracle.required(laid, gpu, key)
    return sized[index]


def _is_ddp(layout: ParallelLayout) -> bool:
    return layout.data > 1 and layout.zero_stage == 0 and layout.tensor == layout.pipeline == 1


def _describe_layout(layout: ParallelLayout, gpu: GpuSpec, c: Constraints) -> str:
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
