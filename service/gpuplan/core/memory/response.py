"""The estimate's answer: the peak's parts in bytes, the overhead around them, the
headroom, the fit on a GPU, and the seed guide's rule of thumb for comparison.
"""

import math
from functools import cache

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.memory import fsdp1
from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.intervals import factors, figure_intervals
from gpuplan.core.memory.overhead import framework_overhead, module_loading, round_segment
from gpuplan.core.memory.peak import Peak
from gpuplan.core.memory.response_records import Measures
from gpuplan.core.memory.schema import (
    ArchitectureSummary,
    Breakdown,
    ByteInterval,
    EstimateRequest,
    EstimateResponse,
    Fit,
    Workload,
)
from gpuplan.core.memory.states import REDUCE_DTYPE_FRAMEWORKS, framework_of, gradient_reduce_dtype
from gpuplan.core.memory.states_records import ModelStates

HEADROOM = 0.20
"""The seed guide's planning headroom, kept for the rule of thumb (``method:
rule_of_thumb``) and the tracer, which have no residuals of their own: the analytic
estimate's ``required_bytes`` is the high end of its device interval instead."""

RULE_OF_THUMB_BUFFER = 0.30


_TRAINING_DEFAULTS = (
    "batch_size",
    "precision",
    "optimizer",
    "gradient_checkpointing",
    "attention",
    "gradient_accumulation_steps",
)
_INFERENCE_DEFAULTS = (
    "batch_size",
    "precision",
    "attention",
    "kv_cache_dtype",
    "kv_cache_layout",
    "max_new_tokens",
)


@cache
def _workload_defaults() -> dict[str, object]:
    """The schema's default of each workload field (read once: introspection is slow)."""
    return {f.name: f.default for f in msgspec.structs.fields(Workload)}


def defaults(w: Workload) -> str | None:
    """A sentence listing the workload settings that are at their default values."""
    known = _workload_defaults()
    at_default = [
        f"{name} {getattr(w, name)}"
        for name in (_INFERENCE_DEFAULTS if w.mode == "inference" else _TRAINING_DEFAULTS)
        if getattr(w, name) == known[name]
    ]
    if w.mode in ("finetune_lora", "finetune_qlora"):
        if w.lora is None or w.lora.rank == 16:
            at_default.append("lora rank 16")
        if w.lora is None or w.lora.dropout == 0.0:
            at_default.append("lora dropout 0.0")
    if (
        w.mode == "training"
        and w.parallelism.framework in REDUCE_DTYPE_FRAMEWORKS
        and w.parallelism.gradient_reduce_dtype is None
    ):
        at_default.append(f"gradient_reduce_dtype {gradient_reduce_dtype(w)}")
    return f"defaults used: {', '.join(at_default)}" if at_default else None


def describe(w: Workload, runtime: str) -> list[str]:
    notes = []
    used = defaults(w)
    if used:
        notes.append(used)
    if w.mode == "inference":
        notes.append(
            "inference: a no-grad prefill that keeps its KV cache and the last position's logits"
        )
    else:
        notes.append(
            "training: one steady-state step (forward, backward, optimizer step) after the first, "
            "gradients freed with zero_grad(set_to_none=True); the loss is cross-entropy over every position"
        )
    if w.precision.startswith("amp_"):
        notes.append(
            "autocast: fp32 weights; each linear keeps its own half-precision copy of an fp32 input"
        )
    framework = framework_of(w)
    if w.activation_func_fp8_input_store and framework != "megatron":
        notes.append(
            "activation_func_fp8_input_store counts under framework megatron only, the "
            f"fused activation's; this estimate's framework is {framework}"
        )
    if runtime == "cpu":
        notes.append(
            "runtime cpu: CPU kernels (dropout keeps a noise tensor; Adam loops over tensors)"
        )
    if w.precision == "fp8":
        notes.append(
            "fp8: Transformer Engine convention (bf16 weights, fp32 master, fp8 copies of linear inputs); not validated against a real run"
        )
    if w.parallelism.framework == "fsdp1" and w.mode != "inference":
        notes.append(_flat_parameters(w))
    return notes


def _flat_parameters(w: Workload) -> str:
    """The FSDP1 conventions an estimate used, in one sentence."""
    f = w.parallelism.fsdp1
    strategy = "SHARD_GRAD_OP" if w.parallelism.zero_stage == 2 else "FULL_SHARD"
    text = (
        f"fsdp1: {strategy}, one flat parameter per decoder layer and a root unit "
        "(embeddings, final norm, head) kept gathered through the step; units gathered in "
        f"{fsdp1.param_dtype(w)}, gradients reduced in {gradient_reduce_dtype(w)}, "
        f"backward_prefetch {f.backward_prefetch}, use_orig_params {str(f.use_orig_params).lower()}"
    )
    if w.mode in ("finetune_lora", "finetune_qlora"):
        text += (
            "; adapters share their layer's flat parameter, so every layer's gradient is built, "
            "reduced and kept"
            if f.adapters == "in_layer_units"
            else "; adapters wrapped as units of their own"
        )
    if fsdp1.without_sync(w):
        text += "; micro-batches before the last keep unsharded gradients (no_sync)"
    return text


def _b(value: float) -> int:
    return max(math.ceil(value), 0)


def measures(
    tensor_bytes: int,
    allocator_gap: float,
    *,
    workload: Workload,
    runtime: str,
    architecture: str | None,
    communicators: list[int],
    training: bool,
    cuda_version: str | None = None,
    loading: str = "lazy",
) -> Measures:
    """The tensors alive at the peak (``tensor_bytes``) read as ``max_memory_allocated``,
    ``max_memory_reserved``, ``nvidia-smi``, each with its 90% interval for ``workload``'s
    regimes (:mod:`gpuplan.core.memory.intervals`), and ``required``: the high end of the
    device's interval.

    The cuBLAS workspaces come from the caching allocator, so ``max_memory_allocated``
    counts them beside the tensors: 17 training steps on an H200 (3B and 7B Llama
    shapes, bench/results/reserve_cuda.json) read 64 to 70 MiB above the tensors, the
    two 32 MiB workspaces of a training step. The recommendation's memory oracle
    re-prices a GPU-independent estimate with this function, so a GPU changes only
    these terms.
    """
    load = module_loading(cuda_version, "eager" if loading == "eager" else "lazy")
    overhead = framework_overhead(
        runtime, architecture, communicators, handles=2 if training else 1, loading=load
    )
    notes = list(overhead.notes)
    if load != loading:
        notes.append(f"CUDA {cuda_version} predates lazy module loading (11.7): eager")
    if runtime == "cpu":
        peak = reserved = device = tensor_bytes
        workspaces = cache = 0
    else:
        workspaces = _b(sum(round_segment(w) for w in [overhead.workspaces]))
        cache = _b(allocator_gap)
        peak = tensor_bytes + workspaces
        reserved = peak + cache
        device = reserved + _b(overhead.outside_allocator)
    intervals = figure_intervals(peak, reserved, device, factors(workload))
    return Measures(
        peak=peak,
        reserved=reserved,
        device=device,
        # Never below the estimate itself, whatever the intervals say.
        required=max(device, intervals["device_bytes"][1]),
        intervals=intervals,
        workspaces=workspaces,
        cache=cache,
        context=_b(overhead.context),
        nccl=_b(overhead.nccl),
        notes=notes,
    )


def respond(
    request: EstimateRequest,
    *,
    parameters: int,
    states: ModelStates,
    peak: Peak,
    arch: Architecture | None,
    assumptions: list[str],
    warnings: list[str],
    gpu: GpuSpec | None,
) -> EstimateResponse:
    w = request.workload
    p = w.parallelism
    optimizer = 0.0 if peak.without_optimizer else states.optimizer
    master = 0.0 if peak.without_optimizer else states.master
    peak_bytes = (
        states.weights
        + optimizer
        + master
        + peak.gradients
        + peak.activations
        + peak.temporary
        + peak.kv_cache
    )
    measured = measures(
        _b(peak_bytes),
        peak.allocator_gap,
        workload=w,
        runtime=request.runtime,
        architecture=gpu.architecture if gpu else None,
        communicators=[p.data, p.tensor, p.pipeline, p.expert],
        training=w.mode != "inference",
        cuda_version=request.cuda_version,
        loading=request.module_loading,
    )
    breakdown = Breakdown(
        weights_bytes=_b(states.weights),
        gradients_bytes=_b(peak.gradients),
        optimizer_state_bytes=_b(optimizer),
        master_weights_bytes=_b(master),
        activations_bytes=_b(peak.activations),
        kv_cache_bytes=_b(peak.kv_cache),
        temporary_bytes=_b(peak.temporary),
        framework_overhead_bytes=measured.device - measured.peak + measured.workspaces,
        workspace_bytes=measured.workspaces,
        allocator_cache_bytes=measured.cache,
        context_bytes=measured.context if request.runtime != "cpu" else 0,
        communication_buffers_bytes=measured.nccl if request.runtime != "cpu" else 0,
    )
    return _finish(
        request,
        parameters=parameters,
        trainable=states.trainable,
        breakdown=breakdown,
        measured=measured,
        phase=peak.phase,
        arch=arch,
        assumptions=[*assumptions, *measured.notes],
        warnings=warnings,
        gpu=gpu,
    )


def _finish(
    request: EstimateRequest,
    *,
    parameters: int,
    trainable: int,
    breakdown: Breakdown,
    measured: Measures,
    phase: str,
    arch: Architecture | None,
    assumptions: list[str],
    warnings: list[str],
    gpu: GpuSpec | None,
) -> EstimateResponse:
    required = measured.required
    fit = None
    if gpu is not None:
        usable = gpu.usable_memory_bytes
        fit = Fit(
            gpu=gpu.id,
            usable_memory_bytes=usable,
            required_bytes=required,
            fits=required <= usable,
            utilization=round(required / usable, 4),
        )
    return EstimateResponse(
        method=request.method,
        parameters=parameters,
        trainable_parameters=trainable,
        peak_bytes=measured.peak,
        reserved_bytes=measured.reserved,
        device_bytes=measured.device,
        total_bytes=measured.device,
        required_bytes=required,
        headroom_fraction=round(required / measured.device - 1, 4) if measured.device else 0.0,
        intervals={
            name: ByteInterval(low=low, high=high)
            for name, (low, high) in measured.intervals.items()
        },
        peak_phase=phase,
        breakdown=breakdown,
        architecture=_summary(arch),
        assumptions=assumptions,
        warnings=warnings,
        fit=fit,
    )


def _summary(arch: Architecture | None) -> ArchitectureSummary | None:
    if arch is None:
        return None
    return ArchitectureSummary(
        model_type=arch.model_type,
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        num_attention_heads=arch.num_heads,
        num_key_value_heads=arch.num_kv_heads,
        head_dim=arch.head_dim,
        intermediate_size=arch.intermediate_size,
        vocab_size=arch.vocab_size,
        num_experts=arch.moe.num_experts if arch.moe else 0,
        experts_per_token=arch.moe.experts_per_token if arch.moe else 0,
        tie_word_embeddings=arch.tie_word_embeddings,
    )


def _bare_measures(value: int) -> Measures:
    """The rule of thumb has no measures beyond its one figure."""
    return Measures(
        peak=value,
        reserved=value,
        device=value,
        required=_b(value * (1 + HEADROOM)),
        workspaces=0,
        cache=0,
        context=0,
        nccl=0,
        notes=[],
    )


def rule_of_thumb(
    request: EstimateRequest,
    parameters: int,
    assumptions: list[str],
    arch: Architecture | None,
    gpu: GpuSpec | None,
) -> EstimateResponse:
    """The seed guide: parameter bytes x 2 (fp16) x parallel degree, + 30%, spread over the GPUs."""
    p = request.workload.parallelism
    degree = p.tensor * p.pipeline * p.data
    per_gpu = parameters * 2 * degree * (1 + RULE_OF_THUMB_BUFFER) / degree
    weights = parameters * 2
    breakdown = Breakdown(
        weights_bytes=weights,
        gradients_bytes=0,
        optimizer_state_bytes=0,
        master_weights_bytes=0,
        activations_bytes=0,
        kv_cache_bytes=0,
        temporary_bytes=_b(per_gpu - weights),
        framework_overhead_bytes=0,
    )
    warnings = [
        "rule_of_thumb is the seed guide's formula, kept for comparison: it ignores gradients, optimizer states and "
        "activations, and underestimates training by more than half on real runs; plan with method analytic"
    ]
    notes = [
        *assumptions,
        "rule of thumb: parameters x 2 bytes x parallel degree x 1.3, divided over the GPUs",
    ]
    value = _b(per_gpu)
    return _finish(
        request,
        parameters=parameters,
        trainable=0,
        breakdown=breakdown,
        measured=_bare_measures(value),
        phase="rule of thumb",
        arch=arch,
        assumptions=notes,
        warnings=warnings,
        gpu=gpu,
    )
