"""The matmul peak a job runs at, and the roofline speed of inference serving.

A training step is timed in :mod:`gpuplan.core.perf.step`. Inference prefill is
compute-bound; decode
reads every local weight and the KV cache once per generated token, so a step
takes the larger of bytes / (bandwidth × MBU) and FLOPs / (peak × MFU): batching
amortizes the weight reads until compute takes over (the roofline's ridge).
"""

from collections.abc import Mapping
from typing import Literal

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.catalog.model import Precision as CatalogPrecision
from gpuplan.core.memory.schema import Precision as WorkloadPrecision
from gpuplan.core.perf.comm import Link, all_reduce_seconds
from gpuplan.core.perf.flops import TokenFlops, forward_flops_per_token
from gpuplan.core.record import Record

RateSource = Literal["catalog", "measured"]


class Rate(Record, kw_only=True):
    """The matmul peak of one GPU for the workload's precision."""

    precision: str
    """The catalog precision whose peak applies (``bf16``, ``fp8``, …)."""

    peak_flops: float
    """Datasheet dense peak, or the fleet's measured rate when ``source`` is ``measured``."""

    attention_peak_flops: float
    """The peak attention runs at: the matmul peak, or the 16-bit one in an fp8 job."""

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


def _sixteen_bit(gpu: GpuSpec, measured: Mapping[CatalogPrecision, float]) -> float:
    for key in ("bf16", "fp16", "fp32"):
        if key in gpu.peak_flops:
            return measured.get(key) or gpu.peak_flops[key]
    return 0.0


def achieved_rate(
    gpu: GpuSpec,
    precision: WorkloadPrecision,
    measured: Mapping[CatalogPrecision, float] | None = None,
) -> Rate | None:
    """The peak for ``precision`` on ``gpu``; None when the GPU has no usable path.

    fp32 uses the fp32 peak: PyTorch leaves TF32 matmuls off by default. bf16 on a
    part without bf16 (T4, V100) falls back to the fp32 rate (emulated); fp8 on a
    part without fp8 runs in 16 bits. A measured rate replaces the datasheet peak; the
    speed model's efficiencies still apply, since a model step is not one large GEMM.
    """
    measured = measured or {}
    paths = _paths(precision)
    for index, key in enumerate(paths):
        if key not in gpu.peak_flops:
            continue
        note = None
        if index:
            note = f"{gpu.id} has no {paths[0]} matmul path; timed at its {key} rate"
        peak = measured.get(key) or gpu.peak_flops[key]
        return Rate(
            precision=key,
            peak_flops=peak,
            attention_peak_flops=_sixteen_bit(gpu, measured) if key == "fp8" else peak,
            source="measured" if key in measured else "catalog",
            note=note,
        )
    return None


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
