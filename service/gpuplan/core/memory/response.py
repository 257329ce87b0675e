"""The estimate's answer: the peak's parts in bytes, the overhead around them, the
headroom, the fit on a GPU, and the seed guide's rule of thumb for comparison.
"""

import math

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.overhead import framework_overhead
from gpuplan.core.memory.schema import (
    ArchitectureSummary,
    Breakdown,
    EstimateRequest,
    EstimateResponse,
    Fit,
    Workload,
)
from gpuplan.core.memory.states import ModelStates
from gpuplan.core.record import Record

HEADROOM = 0.20
"""The seed guide's planning headroom on top of everything we can account for."""

RULE_OF_THUMB_BUFFER = 0.30


class Peak(Record, kw_only=True):
    """What is alive at the peak, beyond the model states."""

    gradients: float
    activations: float
    temporary: float
    kv_cache: float
    phase: str


def describe(w: Workload, runtime: str) -> list[str]:
    notes = []
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
    if runtime == "cpu":
        notes.append(
            "runtime cpu: CPU kernels (dropout keeps a noise tensor; Adam loops over tensors)"
        )
    if w.precision == "fp8":
        notes.append(
            "fp8: Transformer Engine convention (bf16 weights, fp32 master, fp8 copies of linear inputs); not validated against a real run"
        )
    return notes


def _b(value: float) -> int:
    return max(math.ceil(value), 0)


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
    peak_bytes = (
        states.weights
        + states.optimizer
        + states.master
        + peak.gradients
        + peak.activations
        + peak.temporary
        + peak.kv_cache
    )
    dynamic = peak.activations + peak.temporary + peak.gradients
    overhead = framework_overhead(
        request.runtime,
        gpu.architecture if gpu else None,
        [p.data, p.tensor, p.pipeline, p.expert],
        dynamic,
    )
    breakdown = Breakdown(
        weights_bytes=_b(states.weights),
        gradients_bytes=_b(peak.gradients),
        optimizer_state_bytes=_b(states.optimizer),
        master_weights_bytes=_b(states.master),
        activations_bytes=_b(peak.activations),
        kv_cache_bytes=_b(peak.kv_cache),
        temporary_bytes=_b(peak.temporary),
        framework_overhead_bytes=_b(overhead.total),
    )
    return _finish(
        request,
        parameters=parameters,
        trainable=states.trainable,
        breakdown=breakdown,
        peak_bytes=_b(peak_bytes),
        phase=peak.phase,
        arch=arch,
        assumptions=[*assumptions, *overhead.notes],
        warnings=warnings,
        gpu=gpu,
    )


def _finish(
    request: EstimateRequest,
    *,
    parameters: int,
    trainable: int,
    breakdown: Breakdown,
    peak_bytes: int,
    phase: str,
    arch: Architecture | None,
    assumptions: list[str],
    warnings: list[str],
    gpu: GpuSpec | None,
) -> EstimateResponse:
    total = peak_bytes + breakdown.framework_overhead_bytes
    required = _b(total * (1 + HEADROOM))
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
        peak_bytes=peak_bytes,
        total_bytes=total,
        required_bytes=required,
        headroom_fraction=HEADROOM,
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
    return _finish(
        request,
        parameters=parameters,
        trainable=0,
        breakdown=breakdown,
        peak_bytes=_b(per_gpu),
        phase="rule of thumb",
        arch=arch,
        assumptions=notes,
        warnings=warnings,
        gpu=gpu,
    )
