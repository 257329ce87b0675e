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

import heapq
import math
from collections.abc import Callable, Iterator
from typing import NamedTuple

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.memory import fsdp1
from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.intervals import factors
from gpuplan.core.memory.kernels import materializes_scores
from gpuplan.core.memory.modules import linear_modules, lora_targets
from gpuplan.core.memory.numerics import DTYPE_BYTES
from gpuplan.core.memory.schema import Framework as FrameworkName
from gpuplan.core.memory.schema import Parallelism, Workload
from gpuplan.core.memory.states import framework_of, gradient_reduce_dtype
from gpuplan.core.perf.efficiency import Framework, efficiency_data, framework
from gpuplan.core.perf.link import Link
from gpuplan.core.perf.step import (
    MicroBatch,
    micro_batch,
    reference_shape_share,
    step_floor,
    step_tokens,
    step_traffic_bytes,
    training_step,
)
from gpuplan.core.perf.step_records import Step, StepLinks, StepShape
from gpuplan.core.recommend.context import TP_DEGREES, link_over, multi_gpu_allowed
from gpuplan.core.recommend.context_record import GpuContext
from gpuplan.core.recommend.fit import MemoryOracle, with_layout
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.option import (
    FEWEST_FIRST,
    floor_key,
    layout_breaches,
    memory_breach,
    objective_key,
    pricing,
)
from gpuplan.core.recommend.option_record import Option
from gpuplan.core.recommend.rung import Rung
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
    """The training steps' and the evaluations'."""

    tokens_per_s: float
    """The training steps' own rate."""

    delivered_flops_per_s: float
    """Model FLOP/s the job's GPUs deliver together."""

    step: Step
    evaluation_seconds: float = 0.0
    """The evaluations' share of ``seconds`` (``training.evaluation``)."""


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
        adapter_units=0 if shared else 2 * sum(count for count, _, _, _ in shape.adapters),
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
        head_dim=arch.head_dim if arch and arch.mla is None else 0,
        vocab_size=(arch.vocab_size or 0) if arch else 0,
        moe_layers=job.moe_layers,
        experts_per_token=job.experts_per_token,
        experts=arch.moe.num_experts if arch and arch.moe else 0,
        deduplicated_dispatch=w.parallelism.expert_dispatcher != "alltoall",
        expert_width=arch.moe.expert_intermediate_size if arch and arch.moe else 0,
        dense_mlp_width=arch.intermediate_size if arch and arch.moe else 0,
        expert_parameters=_expert_parameters(job, w),
        adapters=_adapters(arch, w),
        adapter_rank=(w.lora.rank if w.lora else 16) if _lora(w) else 0,
        adapter_dropout=_lora(w) and w.lora is not None and w.lora.dropout > 0,
        activation_bytes=4 if w.precision == "fp32" else 2,
        trainable_parameters=trainable,
        parameters=job.parameters,
        gradient_bytes=_gradient_bytes(w, wide),
        weight_bytes=4 if wide else 2,
        gather_bytes=1 if w.precision == "fp8" else (4 if wide else 2),
        compile=w.compile,
        autocast=w.precision.startswith("amp_"),
        fused_kernels=w.fused_kernels,
        vision=job.vision,
        flash2=w.attention == "flash",
    )


def _expert_parameters(job: Job, w: Workload) -> int:
    """The routed experts' trained parameters, every MoE layer's (0 under LoRA: frozen)."""
    arch = job.arch
    if arch is None or arch.moe is None or _lora(w):
        return 0
    width = arch.moe.expert_intermediate_size
    one = (3 if arch.mlp_gated else 2) * arch.hidden_size * width
    return job.moe_layers * arch.moe.num_experts * one


def _lora(w: Workload) -> bool:
    return w.mode in ("finetune_lora", "finetune_qlora")


def _adapters(arch: Architecture | None, w: Workload) -> tuple[tuple[int, int, int, bool], ...]:
    """The adapted linears of one layer (how many, in, out, row-parallel), as the memory
    estimate reads them (:func:`gpuplan.core.memory.modules.lora_targets`)."""
    if arch is None or not _lora(w):
        return ()
    targets, _ = lora_targets(arch, w.lora.target_modules if w.lora else None)
    return tuple(
        (m.per_layer, m.in_features, m.out_features, m.inner)
        for name, m in linear_modules(arch).items()
        if name in targets and m.per_layer
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


def _spans(layout: ParallelLayout) -> tuple[int, int, int, int, int]:
    """GPUs each group of ``layout`` spans in Megatron's rank order, ``tp-cp-ep-dp-pp``
    (tensor innermost, then context, expert within data, data, pipeline outermost:
    ``initialize_model_parallel(order="tp-cp-ep-dp-pp")``, NVIDIA/Megatron-LM
    megatron/core/parallel_state.py at 0014f13713bf; torchtitan's device mesh and
    DeepSpeed's ``PipeDataParallelTopology`` put the pipeline outermost too): a group
    talks over the link of the span it covers. A data-parallel group stays inside one
    pipeline stage's ``t · cp · dp`` GPUs; a pipeline group strides over the whole job."""
    t, cp = layout.tensor, layout.context
    stage = t * cp * layout.data
    return (
        t,
        t * cp,
        t * cp * layout.expert,
        stage * layout.pipeline if layout.pipeline > 1 else t * cp,
        stage,
    )


def _step_links(spans: tuple[int, int, int, int, int], link: Callable[[int], Link]) -> StepLinks:
    """The links of a layout's groups: each the link of the GPUs it spans
    (:func:`_spans`); ``link``: the link of so many of the GPU."""
    t, cp, e, pp, n = spans
    expert = link(e)
    local, local_link = e // cp, expert
    if expert.kind == "network":
        # The expert group's ranks stride ``cp`` GPUs apart: those that share a GPU's
        # scale-up domain are the most whose span stays off the network.
        local = next((k for k in range(e // cp, 1, -1) if link(k * cp).kind != "network"), 1)
        local_link = link(local * cp)
    return StepLinks(
        tensor=link(t),
        context=link(cp),
        expert=expert,
        pipeline=link(pp),
        data=link(n),
        host=link(HOST),
        expert_local=local,
        expert_local_link=local_link,
    )


HOST = 0
"""The size :func:`_link_of` answers the host link for: the GPU's PCIe to the CPU."""


def _link_of(gpu: GpuSpec, size: int, c: Constraints) -> Link:
    """The link of ``size`` of these GPUs (:func:`link_over`), or ``size`` :data:`HOST`:
    the GPU's link to its host (an optimizer offloaded to the CPU). Of the GPU, both
    read its interconnect alone (tests/test_search_shortcuts.py checks every GPU)."""
    if size != HOST:
        return link_over(gpu, size, c)
    pcie = gpu.interconnect.pcie
    return Link(
        kind="pcie",
        bytes_per_s=float(pcie.per_direction_bytes_per_s)
        if pcie
        else c.network_bytes_per_s_per_gpu,
        latency_s=efficiency_data().latency.pcie_seconds,
    )


def _framework(job: Job, layout: ParallelLayout) -> Framework:
    """The framework a layout is timed with. Megatron's fused kernels are assumed only
    when the request names it: a tensor-parallel layout the search chose may run on
    anything, and a job must not get faster per GPU by being spread over more of them.
    For the same reason Megatron's tensor-parallel communication overlap
    (``tensor_exposed``, fitted on Megatron runs) is assumed only then: without it a
    tensor-parallel layout over PCIe would hide its all-reduces and beat one GPU per GPU."""
    chosen = framework(default_framework(layout))
    if chosen.name != "megatron" or job.given.framework == "megatron":
        return chosen
    return msgspec.structs.replace(chosen, elementwise_factor=1.0, tensor_exposed=1.0)


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
    rung = _rung(job, layout, trainable, oracle)
    links = _step_links(rung.spans, lambda n: _link_of(ctx.gpu, n, c))
    return _timing(job, ctx, rung, links, None)


def _rung(job: Job, layout: ParallelLayout, trainable: int, oracle: MemoryOracle | None) -> Rung:
    """``layout`` prepared for timing and sizing (memoized by the oracle when given)."""
    if oracle is None:
        laid = with_layout(job.workload, layout, job.given.gradient_reduce_dtype, job.given.fsdp1)
        key = b""
        shape = step_shape(job, laid, trainable)
    else:
        laid, key = oracle.laid_out(job.workload, layout, job.given.gradient_reduce_dtype)
        shape = oracle.shapes.get(key) or oracle.shapes.setdefault(
            key, step_shape(job, laid, trainable)
        )
    framework = _framework(job, layout)
    p = laid.parallelism
    alike = msgspec.json.encode(msgspec.structs.replace(shape, accumulation=1))
    micro = (
        alike, p.tensor, p.pipeline, p.context, p.expert, framework.elementwise_factor,
        framework.name == "megatron",
    )  # fmt: skip
    return Rung(layout, laid, key, shape, framework, _spans(layout), micro)


def _timing(
    job: Job, ctx: GpuContext, rung: Rung, links: StepLinks, micro: MicroBatch | None
) -> Timing:
    """The job on ``rung`` (``micro``: its micro-batch on this GPU, when known)."""
    assert ctx.rates is not None
    step = training_step(
        job.flops,
        rung.shape,
        rung.laid.parallelism,
        rates=ctx.rates,
        links=links,
        framework=rung.framework,
        comm_overlap=job.overlap,
        micro=micro,
    )
    tokens_per_s = step.tokens / step.seconds
    # Evaluations: forward passes over their tokens, at the step's forward per token.
    evaluation = job.evaluation_tokens / step.tokens * step.forward_s
    return Timing(
        job.tokens / tokens_per_s + evaluation,
        tokens_per_s,
        tokens_per_s * step.model_flops_per_token,
        step,
        evaluation,
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
    all_counts: bool = False,
) -> tuple[list[Option], Option]:
    """(fitting options, the smallest-memory miss) of one GPU over the counts; with
    ``all_counts``, every count of the grid and around the best, else only those that
    may hold the GPU's best plan under ``objective``."""
    gpu = ctx.gpu
    miss = Option(gpu=gpu, count=1, layout=None, required=0, fits=False, admissible=False)
    search = GpuSearch(job, ctx, oracle, c, trainable)
    tried: dict[int, Option | None] = {}

    def at(count: int) -> Option | None:
        nonlocal miss
        if count not in tried:
            option, smallest = search.option_at(count)
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
    allowed = [n for n in coarse if multi_gpu_allowed(gpu, n, c)]
    # Refinement: every count strictly between the coarse neighbours of the centre.
    refine = [] if c.gpu_counts else coarse
    if objective in FEWEST_FIRST:
        centre = _cost_walk(allowed, at)
        if centre is not None and refine:
            for count in _around(centre.count, refine, c.gpus_per_node):
                if multi_gpu_allowed(gpu, count, c):
                    at(count)
    else:
        _best_first(allowed, refine, at, search, objective, prune=not all_counts)
    options = [o for o in tried.values() if o is not None]
    return options, miss


def _cost_walk(allowed: list[int], at: Callable[[int], Option | None]) -> Option | None:
    """Under a cost objective: the counts smallest first, up to twice the first that
    fits; the fastest plan found (a later one only when 5% faster) is the centre of the
    refinement. A count's floor is no guide here: its cost, the count times its time,
    is about the same at every count (:func:`_best_first`)."""
    best: Option | None = None
    first_fit: int | None = None
    for count in allowed:
        if first_fit is not None and count > 2 * first_fit:
            break
        option = at(count)
        if option is None:
            continue
        first_fit = first_fit or count
        if best is None or (option.speed_s or math.inf) < (best.speed_s or math.inf) * 0.95:
            best = option
    return best


TOKEN_FLOOR_MARGIN = 1e-9
"""Relative margin under :meth:`GpuSearch.token_floor`'s bound of a count: far above the
rounding of its few operations and of :meth:`GpuSearch.floor`'s (about 1e-15), far
below any difference of two plans' times (keys compare them at 9 significant digits)."""


def _best_first(
    allowed: list[int],
    coarse: list[int],
    at: Callable[[int], Option | None],
    search: "GpuSearch",
    objective: Objective,
    *,
    prune: bool,
) -> None:
    """Under ``fastest`` and ``balanced``: the ``allowed`` counts in the order of the key
    a lower bound of their floor would have (:func:`~gpuplan.core.recommend.option.
    floor_key` of :meth:`GpuSearch.token_floor`), until a count's lower bound sorts after
    the best plan admitted so far, since neither it nor any count after it can hold a
    better plan. A count before that is tried unless its own floor (:meth:`GpuSearch.
    bound`) sorts after the best plan. Then every count between the ``coarse``
    neighbours of the best plan (admitted, else found) whose floor does not sort after
    it. With ``prune`` False (``all_counts``), or no plan admitted, every count is
    tried. The floor falls about as one over the count, so under these objectives the
    largest counts come first and most smaller ones are never sized or timed, nor
    their floors computed."""
    ctx, job, c = search.ctx, search.job, search.c
    best: Option | None = None
    found: Option | None = None

    def bound(count: int) -> tuple[float, ...]:
        return floor_key(objective, ctx, job, seconds=search.bound(count), count=count)

    # A cheaper key below each count's bound orders the walk; a count's own bound is
    # computed only when the cheap key does not already sort after the best plan. The
    # margin keeps the cheap key below the bound's through the rounding of the two
    # computations (a relative error of a few units in the last place).
    per_token = search.token_floor(allowed) * (1 - TOKEN_FLOOR_MARGIN)

    def lower(count: int) -> tuple[float, ...]:
        return floor_key(objective, ctx, job, seconds=job.tokens * per_token / count, count=count)

    def visit(count: int) -> None:
        """Try ``count``, unless its floor sorts after the best plan admitted."""
        nonlocal best, found
        if prune and best is not None and bound(count) > objective_key(best, objective):
            return
        option = at(count)
        if option is not None:
            mine = objective_key(option, objective)
            if found is None or mine < objective_key(found, objective):
                found = option
            if option.admissible and (best is None or mine < objective_key(best, objective)):
                best = option

    keys = {n: lower(n) for n in allowed}
    for count in sorted(allowed, key=keys.__getitem__):
        if prune and best is not None and keys[count] > objective_key(best, objective):
            break
        visit(count)
    centre = best or found
    if centre is not None and coarse:
        for count in _around(centre.count, coarse, c.gpus_per_node):
            if multi_gpu_allowed(ctx.gpu, count, c):
                visit(count)


class GpuSearch:
    """One job's search over the counts of one GPU model. What its counts share is
    computed once: the link of a group by the GPUs it spans (shared by the GPUs of the
    same interconnect), the compute of a micro-batch by what ``micro_batch`` reads
    (:attr:`Rung.micro`: every count's data-parallel layouts alike), the GPU's sizer,
    and the replica bounds. Each is a pure function of its key, so the memos change no
    figure."""

    def __init__(
        self, job: Job, ctx: GpuContext, oracle: MemoryOracle, c: Constraints, trainable: int
    ) -> None:
        self.job, self.ctx, self.oracle, self.c, self.trainable = job, ctx, oracle, c, trainable
        self.usable = ctx.gpu.usable_memory_bytes
        self.required = oracle.sizer(ctx.gpu)
        self.bounds = _replica_bounds(oracle, job, self.required)
        # Links depend on the GPU only through its interconnect: GPUs alike in it share
        # them, for the request's constraints (kept alive in the entry).
        shared = (msgspec.json.encode(ctx.gpu.interconnect), id(c))
        hit = oracle.links.get(shared)
        if hit is None:
            hit = oracle.links[shared] = (c, {}, {})
        self._links, self._step_links = hit[1], hit[2]
        self._micros: dict[tuple[bytes, int, int, int, int, float, bool], MicroBatch] = {}

    def link(self, size: int) -> Link:
        """The link of ``size`` of these GPUs (:func:`_link_of`)."""
        link = self._links.get(size)
        if link is None:
            link = self._links[size] = _link_of(self.ctx.gpu, size, self.c)
        return link

    def micro(self, rung: Rung) -> MicroBatch:
        """The compute of one of ``rung``'s micro-batches on this GPU. On a GPU without a
        kernel table its GEMMs run at the share of the plateau the reference table
        measures for their shapes, the same on every such GPU: computed once per
        micro-batch for the request (``oracle.shape_shares``)."""
        micro = self._micros.get(rung.micro)
        if micro is None:
            assert self.ctx.rates is not None
            key = rung.micro
            shares = self.oracle.shape_shares

            def shape_share(shape: StepShape, lay: Parallelism, tokens: float, fp8: bool) -> float:
                hit = shares.get((key, fp8))
                if hit is None:
                    hit = shares[key, fp8] = reference_shape_share(shape, lay, tokens, fp8)
                return hit

            rates = self.ctx.rates
            traffic = self.oracle.traffic

            def traffic_of() -> float:
                hit = traffic.get(key)
                if hit is None:
                    hit = traffic[key] = step_traffic_bytes(
                        rung.shape, rung.laid.parallelism, k=rates.kernels, framework=rung.framework
                    )
                return hit

            micro = self._micros[rung.micro] = micro_batch(
                self.job.flops,
                rung.shape,
                rung.laid.parallelism,
                rates,
                rung.framework,
                shape_share=shape_share,
                traffic_of=traffic_of,
            )
        return micro

    def time(self, rung: Rung) -> Timing:
        links = self._step_links.get(rung.spans)
        if links is None:
            links = self._step_links[rung.spans] = _step_links(rung.spans, self.link)
        return _timing(self.job, self.ctx, rung, links, self.micro(rung))

    def floor(self, rung: Rung) -> float:
        """A lower bound of ``time(rung).seconds``: the job at the step's floor
        (:func:`~gpuplan.core.perf.step.step_floor`), in :func:`_timing`'s operations
        (the job's tokens over the step's tokens per second), which keep the order."""
        p = rung.laid.parallelism
        floor = step_floor(rung.shape, p, self.micro(rung))
        if floor <= 0:
            return 0.0
        return self.job.tokens / (step_tokens(rung.shape, p) / floor)

    def token_floor(self, counts: list[int]) -> float:
        """GPU-seconds per token that no layout at any of ``counts`` beats: at ``n`` GPUs,
        ``job.tokens x token_floor / n`` is at or below :meth:`bound` (``n``).

        A rung's floor (:meth:`floor`) is the job's tokens times its micro-batch's work
        (compute and recomputation) times ``accumulation + bubble`` over ``micro-batch
        sequences x sequence x accumulation x data ranks``. Leaving the bubble out, it is
        at least the tokens times ``work x factor`` over ``n``, with ``factor = n / (
        sequences x sequence x data ranks)``. The work depends on the rung only through
        its micro-batch and the factor not on the GPU, so the least ``work x factor`` over
        the rungs of every count takes one ``micro_batch`` per distinct micro-batch on this
        GPU (the ones :meth:`bound` and the fits would time), not a floor per rung and
        count."""
        memo = (id(self.job.workload), tuple(counts))
        hit = self.oracle.token_floors.get(memo)
        if hit is None:
            least: dict[tuple[bytes, int, int, int, int, float, bool], tuple[Rung, float]] = {}
            for n in counts:
                for rung in _ladder(self.job, self.oracle, self.c, n, self.trainable)[0]:
                    shape = rung.shape
                    factor = n / (shape.batch_size * shape.seq * rung.laid.parallelism.data)
                    held = least.get(rung.micro)
                    if held is None or factor < held[1]:
                        least[rung.micro] = (rung, factor)
            # The entry keeps the workload alive, so its id cannot be reused meanwhile.
            hit = self.oracle.token_floors[memo] = (self.job.workload, list(least.values()))
        floor = math.inf
        for rung, factor in hit[1]:
            micro = self.micro(rung)
            shape = rung.shape
            work = micro.compute_s + micro.recompute_s(shape.checkpointing, shape.checkpoint_every)
            floor = min(floor, work * factor)
        return floor

    def bound(self, count: int) -> float:
        """A lower bound of the time of any layout :meth:`option_at` may choose at
        ``count``: the least floor of its rungs but those over the replica bound
        (``inf`` with none). Rungs sized already that do not fit are kept: leaving
        them out tightens the bound too little to pay for the look-ups."""
        rungs, sharded = _ladder(self.job, self.oracle, self.c, count, self.trainable)
        if self.bounds.ddp > self.usable:
            rungs = sharded
        usable, bound_of = self.usable, self.bounds.of
        return min((self.floor(r) for r in rungs if bound_of(r.layout) <= usable), default=math.inf)

    def option_at(self, count: int) -> tuple[Option | None, Sized | None]:
        """The fastest layout at ``count`` that fits, as an option; else the smallest
        layout sized."""
        rungs, sharded = _ladder(self.job, self.oracle, self.c, count, self.trainable)
        if not rungs:
            return None, None
        if self.bounds.ddp > self.usable:
            # DDP keeps a full replica per GPU: more ranks never shrink it.
            rungs = sharded
        chosen, smallest = self.fit(rungs)
        if chosen is None:
            return None, smallest
        option = _option(
            self.job,
            self.ctx,
            self.c,
            count=count,
            layout=chosen.layout,
            required=chosen.required,
            timing=chosen.timing,
            describe=self.describe,
        )
        return option, None

    def describe(self, layout: ParallelLayout) -> str:
        """:func:`describe_layout` of a rung's layout on this GPU. The words depend on the
        GPU only through the kinds of link of the tensor-parallel group and of all the
        job's GPUs, so GPUs alike in those share them."""
        n = layout.tensor * layout.pipeline * layout.data * layout.context
        key = (id(layout), self.link(layout.tensor).kind, self.link(n).kind)
        hit = self.oracle.descriptions.get(key)
        if hit is None:
            text = describe_layout(layout, self.ctx.gpu, self.c, link=self.link)
            # The entry keeps the layout alive, so its id cannot be reused meanwhile.
            hit = self.oracle.descriptions[key] = (layout, text)
        return hit[1]

    def fit(self, rungs: list[Rung]) -> tuple[Fitted | None, Sized | None]:
        """(the fastest rung that fits, else None; the smallest one sized)."""
        usable, required = self.usable, self.required
        sized: dict[int, int | None] = {}
        # The most sharded layouts need the least memory: when none of the last three
        # fits, none does, and the rest of the ladder is not estimated for this GPU.
        fits = False
        for i in range(max(len(rungs) - 3, 0), len(rungs)):
            need = sized[i] = required(rungs[i].laid, rungs[i].key)
            fits = fits or (need is not None and need <= usable)
        if not fits:
            known = [Sized(rungs[i].layout, r) for i, r in sized.items() if r is not None]
            return None, min(known, key=lambda x: x.required) if known else None
        # The fastest layout that fits: time the layouts (no estimate needed), then size
        # them fastest first (ties: in ladder order). Left out untimed: layouts that keep
        # more per GPU than fits whatever the rank count, and those already sized or
        # estimated (for another GPU or count) that do not fit: sizing one of those
        # makes no estimate, so leaving it out changes neither the choice nor the
        # estimates made, nor their order.
        #
        # Best first: a layout with model parallelism enters the queue with its floor
        # (its compute alone) and is timed only when the floor comes first. Every
        # layout timed leaves in the order of its time, as sorting them all did, and a
        # floor behind the layout chosen means a time behind it: that layout would
        # have been neither chosen nor sized.
        queue = self._queue(rungs, sized)
        heapq.heapify(queue)
        while queue:
            _, i, timed = heapq.heappop(queue)
            if timed is None:
                timed = self.time(rungs[i])
                heapq.heappush(queue, (timed.seconds, i, timed))
                continue
            need = sized[i] if i in sized else required(rungs[i].laid, rungs[i].key)
            if need is not None and need <= usable:
                return Fitted(timed, rungs[i].layout, need), None
        raise AssertionError("unreachable: a tail layout fits")

    def _queue(
        self, rungs: list[Rung], sized: dict[int, int | None]
    ) -> list[tuple[float, int, Timing | None]]:
        """:meth:`fit`'s queue: each rung that may fit with its time (its floor, with
        model parallelism); ``sized`` gains the rungs sized on the way."""
        usable, required = self.usable, self.required
        bound_of, estimated = self.bounds.of, self.oracle.estimated
        queue: list[tuple[float, int, Timing | None]] = []
        for i, rung in enumerate(rungs):
            if i in sized:
                need = sized[i]
                if need is None or need > usable:
                    continue
            else:
                if bound_of(rung.layout) > usable:
                    continue
                if estimated(rung.key):
                    need = sized[i] = required(rung.laid, rung.key)
                    if need is None or need > usable:
                        continue
            p = rung.laid.parallelism
            if p.tensor * p.pipeline * p.context > 1:
                queue.append((self.floor(rung), i, None))
            else:
                timing = self.time(rung)
                queue.append((timing.seconds, i, timing))
        return queue


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


def _rungs(
    job: Job, oracle: MemoryOracle, c: Constraints, *, count: int, trainable: int
) -> list[Rung]:
    """The ladder at ``count``, prepared for every GPU. The layouts are memoized by count
    for the request (they do not depend on the GPU), the rungs by count and workload."""
    return _ladder(job, oracle, c, count, trainable)[0]


def _ladder(
    job: Job, oracle: MemoryOracle, c: Constraints, count: int, trainable: int
) -> tuple[list[Rung], list[Rung]]:
    """:func:`_rungs`, and those of them that are not DDP (all of them when all are):
    what a GPU on which DDP's replica cannot fit sizes (the same on every GPU, so kept
    with the rungs)."""
    memo = (count, id(job.workload))
    hit = oracle.rungs.get(memo)
    if hit is None:
        ladder = oracle.ladders.get(count)
        if ladder is None:
            ladder = oracle.ladders[count] = training_ladder(job, count, c)
        rungs = [_rung(job, lay, trainable, oracle) for lay in ladder]
        sharded = [r for r in rungs if not _is_ddp(r.layout)] or rungs
        # The entry keeps the workload alive, so its id cannot be reused meanwhile.
        hit = oracle.rungs[memo] = (job.workload, rungs, sharded)
    return hit[1], hit[2]


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
    describe: Callable[[ParallelLayout], str] | None = None,
) -> Option:
    step = timing.step
    time_hours = timing.seconds / 3600
    reasons = [*ctx.reasons, describe(layout) if describe else describe_layout(layout, ctx.gpu, c)]
    # Built priced (the fields priced() would set, without copying the option).
    return Option(
        gpu=ctx.gpu,
        count=count,
        layout=layout,
        required=required,
        fits=fits,
        time_hours=time_hours,
        evaluation_hours=timing.evaluation_seconds / 3600 if job.evaluation_tokens else None,
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
        kernel_source=step.kernel_source,
        kernel_table=step.kernel_table,
        unverified=ctx.unverified,
        **pricing(
            ctx,
            job,
            c,
            count=count,
            time_hours=time_hours,
            admissible=fits,
            reasons=reasons,
            breaches=[] if fits else [memory_breach(required, ctx.gpu.usable_memory_bytes)],
            delivered_flops=timing.delivered_flops_per_s,
        ),
    )


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


def _replica_bounds(
    oracle: MemoryOracle, job: Job, required: Callable[[Workload, bytes], int | None]
) -> ReplicaBounds:
    """Lower bounds of ``required_bytes`` under DDP, ZeRO-1 and ZeRO-2 at any rank count.

    DDP shards nothing, so it needs at least what one unsharded GPU needs. ZeRO-1/2 keep
    the full weights and every activation: at the unsharded peak's moment they hold at
    least its bytes less the optimizer states, master weights and gradients they shard.
    A bound only ever skips estimating a layout that cannot fit; it never claims a fit.
    The bounds hold for the workload's own micro-batch; a re-split one has none.
    ``required``: the GPU's sizer.
    """
    sharded = _sharded_bounds(oracle, job.workload)
    if sharded is None:
        return ReplicaBounds(0.0, 0.0, 0.0)
    key, zero_1, zero_2 = sharded
    return ReplicaBounds(float(required(job.workload, key) or 0), zero_1, zero_2)


def _sharded_bounds(oracle: MemoryOracle, w: Workload) -> tuple[bytes, float, float] | None:
    """(``w``'s memo key, the ZeRO-1 bound, the ZeRO-2 bound): they do not depend on the
    GPU, so they are computed once per workload. The first GPU asks for the estimate;
    when it is refused or the estimates are spent, every later GPU's ask would have
    answered None too (and made no estimate)."""
    hit = oracle.sharded.get(id(w))
    if hit is not None:
        return hit[1]
    key = msgspec.json.encode(w)
    base = oracle.response(w, key)
    out = None
    if base is not None:
        b = base.breakdown
        kept = (
            base.peak_bytes
            - b.optimizer_state_bytes
            - b.master_weights_bytes
            - b.gradients_bytes
            - b.temporary_bytes
        )
        # required_bytes is at least the device's bytes times the high end of its
        # interval, in the regime of a sharded job (ZeRO-1/2 shard over data-parallel
        # ranks).
        sharded = msgspec.structs.replace(
            w, parallelism=msgspec.structs.replace(w.parallelism, zero_stage=1, data=2)
        )
        headroom = max(1.0, factors(sharded)["device_bytes"][1])
        out = (key, (kept + b.gradients_bytes) * headroom, kept * headroom)
    # The entry keeps ``w`` alive, so its id cannot be reused meanwhile.
    oracle.sharded[id(w)] = (w, out)
    return out


def _is_ddp(layout: ParallelLayout) -> bool:
    return (
        layout.data > 1
        and layout.zero_stage == 0
        and layout.tensor == layout.pipeline == layout.context == 1
    )


def describe_layout(
    layout: ParallelLayout,
    gpu: GpuSpec,
    c: Constraints,
    *,
    link: Callable[[int], Link] | None = None,
) -> str:
    """The layout in words; ``link``: the link of so many of the GPU, when the caller
    has them (else :func:`link_over`)."""
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
        return (link or (lambda n: link_over(gpu, n, c)))(size).kind

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
