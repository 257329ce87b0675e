"""Roofline speed of a training step and of inference serving.

Training is compute-bound: time = hardware FLOPs / (peak × MFU), plus what the
layout adds on the critical path (pipeline bubble, tensor-parallel all-reduces,
the part of data-parallel gradient traffic that backward compute cannot hide,
CPU-offload transfers). Inference prefill is compute-bound the same way; decode
reads every local weight and the KV cache once per generated token, so a step
takes the larger of bytes / (bandwidth × MBU) and FLOPs / (peak × MFU): batching
amortizes the weight reads until compute takes over (the roofline's ridge).
"""

from collections.abc import Mapping
from typing import Literal

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.catalog.model import Precision as CatalogPrecision
from gpuplan.core.memory.schema import Precision as WorkloadPrecision
from gpuplan.core.perf.comm import Link, all_gather_seconds, all_reduce_seconds, transfer_seconds
from gpuplan.core.perf.flops import TokenFlops, forward_flops_per_token, training_flops_per_token
from gpuplan.core.record import Record

RateSource = Literal["catalog", "measured"]


class Rate(Record, kw_only=True):
    """Achieved matmul rate of one GPU for the workload's precision."""

    precision: str
    """The catalog precision whose peak applies (``bf16``, ``fp8``, …)."""

    peak_flops: float
    """Datasheet peak, or the fleet's measured rate when ``source`` is ``measured``."""

    mfu: float
    flops_per_s: float
    """``peak_flops × mfu``."""

    source: RateSource
    note: str | None = None


def _paths(precision: WorkloadPrecision) -> tuple[CatalogPrecision, ...]:
    """Catalog precisions that can run the workload's matmuls, best first."""
    paths: dict[str, tuple[CatalogPrecision, ...]] = {
        "fp32": ("fp32",),
        "fp16": ("fp16",),
        "amp_fp16": ("fp16",),
        "bf16": ("bf16", "fp32"),
        "amp_bf16": ("bf16", "fp32"),
        "fp8": ("fp8", "bf16", "fp16"),
    }
    return paths[precision]


def achieved_rate(
    gpu: GpuSpec,
    precision: WorkloadPrecision,
    mfu: float,
    measured: Mapping[CatalogPrecision, float] | None = None,
) -> Rate | None:
    """The rate for ``precision`` on ``gpu``; None when the GPU has no usable path.

    fp32 uses the fp32 peak: PyTorch leaves TF32 matmuls off by default. bf16 on a
    part without bf16 (T4, V100) falls back to the fp32 rate (emulated); fp8 on a
    part without fp8 runs in 16 bits. A measured rate replaces the datasheet peak;
    MFU still applies, since a model step is not one large GEMM.
    """
    paths = _paths(precision)
    for index, key in enumerate(paths):
        peak = gpu.peak_flops.get(key)
        if peak is None:
            continue
        note = None
        if index:
            note = f"{gpu.id} has no {paths[0]} matmul path; timed at its {key} rate"
        if measured and key in measured:
            return Rate(
                precision=key,
                peak_flops=measured[key],
                mfu=mfu,
                flops_per_s=measured[key] * mfu,
                source="measured",
                note=note,
            )
        return Rate(
            precision=key,
            peak_flops=peak,
            mfu=mfu,
            flops_per_s=peak * mfu,
            source="catalog",
            note=note,
        )
    return None


class TrainingShape(Record, kw_only=True):
    """What of the workload the step time depends on."""

    batch_size: int
    seq: int
    accumulation: int
    checkpointing: str
    causal_skip: bool
    frozen_base: bool
    hidden_size: int
    num_layers: int
    activation_bytes: int
    trainable_parameters: int
    parameters: int
    """All parameters: a ZeRO-3 gather moves frozen ones too (LoRA's base)."""

    gradient_bytes: int
    """Bytes per gradient element the data-parallel collective moves."""

    weight_bytes: int
    """Bytes per parameter a ZeRO-3 all-gather moves."""


class LayoutLinks(Record, kw_only=True):
    tensor: Link
    pipeline: Link
    data: Link
    host: Link


class TrainingStep(Record, kw_only=True):
    seconds: float
    tokens: int
    compute_s: float
    bubble_s: float
    tensor_comm_s: float
    pipeline_comm_s: float
    data_comm_s: float
    """Data-parallel communication left exposed after overlap."""

    offload_s: float
    model_flops_per_token: float
    hardware_flops_per_token: float


def training_step(
    t: TokenFlops,
    shape: TrainingShape,
    *,
    tp: int,
    pp: int,
    dp: int,
    zero_stage: int,
    offload_optimizer: bool,
    rate: float,
    links: LayoutLinks,
    overlap: float,
) -> TrainingStep:
    """One optimizer step of ``accumulation`` micro-batches on every data-parallel rank."""
    m = shape.accumulation
    model_f, hw_f = training_flops_per_token(
        t,
        shape.seq,
        causal_skip=shape.causal_skip,
        checkpointing=shape.checkpointing,
        frozen_base=shape.frozen_base,
    )
    micro_tokens = shape.batch_size * shape.seq
    micro = micro_tokens * hw_f / (tp * pp) / rate
    compute = m * micro
    # 1F1B schedule: (p − 1) idle slots of one micro-batch each (Narayanan et al. 2021).
    bubble = compute * (pp - 1) / m
    message = micro_tokens * shape.hidden_size * shape.activation_bytes
    layers = -(-shape.num_layers // pp)
    # Megatron: two all-reduces forward, two backward per layer; full recompute adds two.
    per_layer = 4 + (2 if shape.checkpointing == "full" else 0)
    tensor = m * layers * per_layer * all_reduce_seconds(message, tp, links.tensor)
    pipeline = m * 2 * transfer_seconds(message, links.pipeline) if pp > 1 else 0.0
    local = shape.trainable_parameters / (tp * pp)
    held = max(shape.parameters, shape.trainable_parameters) / (tp * pp)
    backward_share = (
        hw_f - forward_flops_per_token(t, shape.seq, causal_skip=shape.causal_skip)
    ) / hw_f
    if zero_stage == 3:
        # FSDP / ZeRO-3: gather parameters for forward and for backward, reduce-scatter
        # gradients, every micro-batch; prefetching hides them behind all compute.
        per_micro = 2 * all_gather_seconds(held * shape.weight_bytes, dp, links.data)
        per_micro += all_gather_seconds(local * shape.gradient_bytes, dp, links.data)
        data = max(0.0, m * per_micro - overlap * compute)
    else:
        # DDP (and ZeRO-1/2, same volume): one all-reduce per step, bucketed behind
        # the last micro-batch's backward.
        traffic = all_reduce_seconds(local * shape.gradient_bytes, dp, links.data)
        data = max(0.0, traffic - overlap * micro * backward_share)
    offload = 0.0
    if offload_optimizer:
        shard = local / (dp if zero_stage >= 1 else 1)
        offload = max(
            transfer_seconds(shard * shape.gradient_bytes, links.host),
            transfer_seconds(shard * shape.weight_bytes, links.host),
        )
    seconds = compute + bubble + tensor + pipeline + data + offload
    return TrainingStep(
        seconds=seconds,
        tokens=micro_tokens * m * dp,
        compute_s=compute,
        bubble_s=bubble,
        tensor_comm_s=tensor,
        pipeline_comm_s=pipeline,
        data_comm_s=data,
        offload_s=offload,
        model_flops_per_token=model_f,
        hardware_flops_per_token=hw_f,
    )


class ServingShape(Record, kw_only=True):
    batch_size: int
    """Sequences served together (the concurrency of one replica)."""

    prompt_tokens: int
    output_tokens: int
    cache_tokens: int
    """Tokens per sequence the estimate's KV cache holds (prompt + max_new_tokens)."""

    causal_skip: bool
    hidden_size: int
    num_layers: int
    activation_bytes: int


class Serving(Record, kw_only=True):
    prefill_s: float
    """Time to first token of a batch (its prefill)."""

    decode_step_s: float
    """Time per output token (one decode step for the whole batch)."""

    decode_bound: Literal["memory", "compute"]
    round_s: float
    requests_per_s: float
    output_tokens_per_s: float
    model_flops_per_s: float


def serving(
    t: TokenFlops,
    shape: ServingShape,
    *,
    tp: int,
    rate: float,
    bandwidth_bytes_per_s: float,
    mbu: float,
    weights_bytes: float,
    kv_cache_bytes: float,
    link: Link,
) -> Serving:
    """One replica (``tp`` GPUs) serving batches of ``batch_size`` requests.

    A round is the batch's prefill followed by ``output_tokens`` decode steps at the
    mean context length. ``weights_bytes`` and ``kv_cache_bytes`` are per GPU, from the
    memory estimate (the cache at ``cache_tokens`` per sequence).
    """
    b, s, o = shape.batch_size, shape.prompt_tokens, shape.output_tokens
    prefill_flops = b * s * forward_flops_per_token(t, s, causal_skip=shape.causal_skip)
    layers_ar = shape.num_layers * 2
    prefill = prefill_flops / tp / rate + layers_ar * all_reduce_seconds(
        b * s * shape.hidden_size * shape.activation_bytes, tp, link
    )
    context = s + o / 2
    read = weights_bytes + kv_cache_bytes * min(context / max(shape.cache_tokens, 1), 1.0)
    memory_s = read / (bandwidth_bytes_per_s * mbu)
    decode_flops = b * forward_flops_per_token(t, context, causal_skip=False)
    compute_s = decode_flops / tp / rate
    step = max(memory_s, compute_s) + layers_ar * all_reduce_seconds(
        b * shape.hidden_size * shape.activation_bytes, tp, link
    )
    round_s = prefill + o * step
    return Serving(
        prefill_s=prefill,
        decode_step_s=step,
        decode_bound="memory" if memory_s >= compute_s else "compute",
        round_s=round_s,
        requests_per_s=b / round_s,
        output_tokens_per_s=b * o / round_s,
        model_flops_per_s=(prefill_flops + o * decode_flops) / round_s,
    )
