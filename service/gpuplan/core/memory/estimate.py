"""The memory estimate: one pure function from request to response.

``estimate`` resolves the model to an :class:`Architecture`, counts its parameters,
places the model states on one GPU, prices every layer's activations, walks the
step's timeline to its peak, and adds what lives outside the tensors. Nothing here
reads the clock, the environment or the network.
"""

import math
from functools import cache

import msgspec

from gpuplan.core.catalog import Catalog, GpuSpec, UnknownGpu
from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.dims import Dims, dims_for
from gpuplan.core.memory.errors import InvalidModel
from gpuplan.core.memory.head import head_cost
from gpuplan.core.memory.hf_config import from_hf_config
from gpuplan.core.memory.inference import (
    KV_BYTES,
    inference_peak,
    kv_bytes_per_token,
    mask_bytes,
)
from gpuplan.core.memory.layers import LayerCost, Step, Trainable, layer_cost
from gpuplan.core.memory.numerics import Numerics, numerics_for
from gpuplan.core.memory.overhead import framework_overhead
from gpuplan.core.memory.parameters import LayerParameters, ParameterCount, count_parameters
from gpuplan.core.memory.presets import VisionActivations, presets
from gpuplan.core.memory.schema import (
    ArchitectureSummary,
    Breakdown,
    EstimateRequest,
    EstimateResponse,
    Fit,
    ModelSpec,
    Parallelism,
    Workload,
)
from gpuplan.core.memory.states import ModelStates, adapted_modules, bare_states, model_states
from gpuplan.core.memory.training import LayerGrads, training_peak
from gpuplan.core.memory.vision import vision_peak
from gpuplan.core.record import Record

HEADROOM = 0.20
"""The seed guide's planning headroom on top of everything we can account for."""

RULE_OF_THUMB_BUFFER = 0.30


class _Peak(Record, kw_only=True):
    """What is alive at the peak, beyond the model states."""

    gradients: float
    activations: float
    temporary: float
    kv_cache: float
    phase: str


def estimate(request: EstimateRequest, catalog: Catalog) -> EstimateResponse:
    """Peak GPU memory of the request's job on one GPU.

    Raises :class:`InvalidModel`, naming the offending field.
    """
    w = request.workload
    gpu = _gpu(catalog, request.gpu)
    model = resolve_model(request.model)
    arch, bare, assumptions = model.arch, model.parameters, list(model.notes)
    _check_workload(arch, w, vision=model.vision is not None)
    if arch is None:
        assert bare is not None
        counts = None
    else:
        counts = model.counts or count_parameters(arch)
        if bare is not None:
            assumptions.append(
                f"the hinted shape has {counts.total:,} parameters; model states use the given {bare:,}"
            )
            counts = _scaled(counts, bare)
    total_parameters = counts.total if counts is not None else bare or 0
    if request.method == "rule_of_thumb":
        return _rule_of_thumb(request, total_parameters, assumptions, arch, gpu)
    num = numerics_for(w.precision, request.runtime)
    assumptions.extend(_describe(w, request.runtime))
    warnings: list[str] = []
    if model.vision is not None:
        states = bare_states(total_parameters, w, runtime=request.runtime)
        size = w.image_size or model.vision.reference_image_size
        seen = vision_peak(
            model.vision,
            states,
            num,
            training=w.mode != "inference",
            batch=w.batch_size,
            image_size=size,
            accumulating=w.gradient_accumulation_steps > 1,
        )
        peak = _Peak(
            gradients=seen.gradients,
            activations=seen.activations,
            temporary=seen.temporary,
            kv_cache=0.0,
            phase=seen.phase,
        )
        assumptions.append(
            f"activations: measured per sample at {model.vision.reference_image_size} px, "
            f"scaled to {size} px by area ({model.vision.source})"
        )
    elif arch is None or counts is None:
        states = bare_states(total_parameters, w, runtime=request.runtime)
        peak = _Peak(
            gradients=states.gradients,
            activations=0.0,
            temporary=states.optimizer_temporary,
            kv_cache=0.0,
            phase="optimizer step" if w.mode != "inference" else "weights",
        )
        warnings.append(
            "no architecture given: activations and the KV cache are not included; pass hints or an hf_config"
        )
    else:
        states = model_states(arch, counts, w, runtime=request.runtime)
        d = dims_for(
            arch,
            w.batch_size,
            w.sequence_length or 1,
            tp=w.parallelism.tensor,
            sp=w.parallelism.sequence_parallel,
        )
        costs = _layer_costs(arch, counts, d, num, w)
        if w.mode == "inference":
            peak = _inference(arch, d=d, num=num, w=w, costs=costs, assumptions=assumptions)
        else:
            peak = _training(
                arch,
                counts=counts,
                d=d,
                num=num,
                w=w,
                states=states,
                costs=costs,
                assumptions=assumptions,
            )
    return _response(
        request,
        parameters=total_parameters,
        states=states,
        peak=peak,
        arch=arch,
        assumptions=assumptions,
        warnings=warnings,
        gpu=gpu,
    )


def _gpu(catalog: Catalog, name: str | None) -> GpuSpec | None:
    if name is None:
        return None
    try:
        return catalog.get(name)
    except UnknownGpu as exc:
        closest = f"; closest: {', '.join(exc.suggestions)}" if exc.suggestions else ""
        raise InvalidModel(
            [("$.gpu", f"no GPU in the catalog is named {name!r}{closest}")]
        ) from None


class ResolvedModel(Record, kw_only=True):
    """A model spec, read: its architecture, or its bare size and measured activations."""

    arch: Architecture | None
    parameters: int | None
    """A parameter count given as such (bare, or overriding the hinted shape's)."""

    vision: VisionActivations | None = None
    counts: ParameterCount | None = None
    """The architecture's parameter count, when already known (presets are counted once)."""

    notes: list[str]


def resolve_model(spec: ModelSpec) -> ResolvedModel:
    """Read a model spec; raise :class:`InvalidModel` naming the field if it is unusable."""
    given = [k for k in ("hf_config", "name", "parameters") if getattr(spec, k) is not None]
    if len(given) != 1:
        raise InvalidModel(
            [
                (
                    "$.model",
                    f"give exactly one of hf_config, name, parameters (got {', '.join(given) or 'none'})",
                )
            ]
        )
    if spec.hints is not None and spec.parameters is None:
        raise InvalidModel([("$.model.hints", "hints describe a bare parameters count")])
    if spec.hf_config is not None:
        arch, notes = from_hf_config(spec.hf_config)
        return ResolvedModel(arch=arch, parameters=None, notes=notes)
    if spec.name is not None:
        return _preset_model(spec.name.lower())
    return _bare_model(spec)


@cache
def _preset_model(name: str) -> ResolvedModel:
    """A preset, read once per process (presets are immutable data)."""
    preset = presets().get(name)
    if preset is None:
        raise InvalidModel(
            [
                (
                    "$.model.name",
                    f"no preset named {name!r}; known: {', '.join(sorted(presets()))}",
                )
            ]
        )
    note = f"preset {preset.name}: {preset.source}"
    if preset.config is None:
        return ResolvedModel(
            arch=None, parameters=preset.parameters, vision=preset.activations, notes=[note]
        )
    arch, notes = from_hf_config(preset.config)
    return ResolvedModel(
        arch=arch, parameters=None, counts=count_parameters(arch), notes=[note, *notes]
    )


def _bare_model(spec: ModelSpec) -> ResolvedModel:
    assert spec.parameters is not None
    hints = spec.hints
    if hints is None or hints.num_layers is None or hints.hidden_size is None:
        return ResolvedModel(
            arch=None,
            parameters=spec.parameters,
            notes=["parameters only: model states, no activation or KV-cache terms"],
        )
    h = hints.hidden_size
    heads = hints.num_attention_heads or max(h // 128, 1)
    config: dict[str, object] = {
        "model_type": "llama",
        "hidden_size": h,
        "num_hidden_layers": hints.num_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": hints.num_key_value_heads or heads,
        "intermediate_size": hints.intermediate_size or (8 * h // 3 if hints.gated_mlp else 4 * h),
        "vocab_size": hints.vocab_size or 32000,
    }
    if hints.head_dim:
        config["head_dim"] = hints.head_dim
    arch, _ = from_hf_config(config)
    if not hints.gated_mlp:
        arch = msgspec.structs.replace(arch, mlp_gated=False, activation="gelu")
    shape = "a Llama-style decoder" if hints.gated_mlp else "a decoder with a GELU MLP"
    return ResolvedModel(
        arch=arch,
        parameters=spec.parameters,
        notes=[
            f"parameters with hints: read as {shape} of the hinted shape"
            + ("" if hints.vocab_size else ", vocabulary 32000")
            + ("" if hints.intermediate_size else ", feed-forward width from the hidden size")
        ],
    )


def _layer_costs(
    arch: Architecture, counts: ParameterCount, d: Dims, num: Numerics, w: Workload
) -> list[LayerCost]:
    step = Step(
        eager=w.attention == "eager",
        training=w.mode != "inference",
        selective=w.gradient_checkpointing == "selective",
        trainable=_trainable(w),
    )
    p = w.parallelism
    local = -(-arch.num_layers // p.pipeline)
    # Layers of one shape cost the same: price each distinct shape once (an 80-layer
    # model has one or two), which keeps an estimate well under 100 µs.
    priced: dict[tuple[int, int, int, int], LayerCost] = {}
    costs = []
    for index in range(local):
        layer = counts.layers[index]
        key = (layer.attention, layer.mlp, layer.norms, layer.active_mlp)
        cost = priced.get(key)
        if cost is None:
            cost = layer_cost(arch, d, num, step, moe_layer=_is_moe(layer))
            if num.amp and step.training:
                # Autocast caches a half-precision copy of each weight it casts; each
                # linear keeps that copy for its backward, until the layer's backward.
                split = _split(layer, p)
                cost = msgspec.structs.replace(
                    cost,
                    saved=cost.saved + 2 * (layer.attention + layer.mlp) / split,
                    mlp_saved=cost.mlp_saved + 2 * layer.mlp / split,
                )
            priced[key] = cost
        costs.append(cost)
    return costs


def _training(
    arch: Architecture,
    *,
    counts: ParameterCount,
    d: Dims,
    num: Numerics,
    w: Workload,
    states: ModelStates,
    costs: list[LayerCost],
    assumptions: list[str],
) -> _Peak:
    p = w.parallelism
    lora = w.mode in ("finetune_lora", "finetune_qlora")
    head = head_cost(arch, d, num, training=True, head_trains=not lora)
    if num.amp:
        head = msgspec.structs.replace(
            head, final_saved=head.final_saved + 2 * (counts.head or counts.embedding) / p.tensor
        )
    per_param = 0.0 if lora else states.gradients / max(states.parameters_local, 1)
    if lora:
        share = states.gradients / max(len(costs), 1) / 2
        grads = [LayerGrads(mlp=share, attention=share) for _ in costs]
    else:
        # One record per kind of layer: the layers of a kind share one LayerParameters.
        distinct = {id(layer): layer for layer in counts.layers}
        kinds = {
            key: LayerGrads(
                mlp=layer.mlp / _split(layer, p) * per_param,
                attention=(layer.attention / p.tensor + layer.norms) * per_param,
            )
            for key, layer in distinct.items()
        }
        grads = [kinds[id(layer)] for layer in counts.layers[: len(costs)]]
    if w.gradient_checkpointing == "selective":
        assumptions.append(
            "selective checkpointing recomputes the attention core (Korthikanti et al.): its s x s tensors are not kept"
        )
    moment = training_peak(
        states,
        costs,
        grads,
        head,
        checkpointing=w.gradient_checkpointing,
        accumulation_steps=w.gradient_accumulation_steps,
        in_flight=min(p.pipeline, w.gradient_accumulation_steps) if p.pipeline > 1 else 1,
        residual_grad=num.residual * d.hidden,
        head_grads=0.0 if lora else (counts.head or counts.embedding) / p.tensor * per_param,
        tied_embedding_grad=counts.embedding / p.tensor * per_param
        if arch.tie_word_embeddings
        else 0.0,
    )
    ddp = states.gradients if p.data > 1 and p.zero_stage == 0 else 0.0
    if ddp:
        assumptions.append(
            "DDP keeps flat gradient buckets beside the gradients (gradient_as_bucket_view=False)"
        )
    return _Peak(
        gradients=moment.gradients,
        activations=moment.activations,
        temporary=moment.temporary + ddp,
        kv_cache=0.0,
        phase=moment.phase,
    )


def _inference(
    arch: Architecture,
    *,
    d: Dims,
    num: Numerics,
    w: Workload,
    costs: list[LayerCost],
    assumptions: list[str],
) -> _Peak:
    p = w.parallelism
    kv_dtype = (
        w.kv_cache_dtype
        if w.kv_cache_dtype != "auto"
        else ("fp32" if w.precision == "fp32" else "bf16")
    )
    per_token = kv_bytes_per_token(arch, KV_BYTES[kv_dtype], p.tensor)
    peak = inference_peak(
        arch,
        d,
        max(costs, key=lambda c: c.forward_peak),
        local_layers=len(costs),
        kv_per_token=per_token,
        max_new_tokens=w.max_new_tokens,
        matmul_bytes=num.matmul,
        mask_bytes=mask_bytes(arch, num.matmul, eager=w.attention == "eager", cpu=num.cpu),
    )
    assumptions.append(
        f"KV cache: {per_token * len(costs) / 1024:.1f} KiB per token on this GPU ({kv_dtype})"
    )
    return _Peak(
        gradients=0.0,
        activations=peak.activations,
        temporary=peak.temporary,
        kv_cache=peak.kv_cache,
        phase=peak.phase,
    )


def _trainable(w: Workload) -> Trainable:
    if w.mode not in ("finetune_lora", "finetune_qlora"):
        return Trainable()
    lora = w.lora
    return Trainable(
        full=False,
        lora_rank=lora.rank if lora else 16,
        adapted=adapted_modules(lora.target_modules if lora else ["q_proj", "v_proj"]),
        upcast=w.mode == "finetune_qlora" or w.precision in ("fp16", "bf16"),
    )


def _is_moe(layer: LayerParameters) -> bool:
    return layer.mlp != layer.active_mlp


def _split(layer: LayerParameters, p: Parallelism) -> int:
    """How many GPUs share one layer's MLP weights."""
    return p.tensor * (p.expert if _is_moe(layer) else 1)


def _scaled(counts: ParameterCount, total: int) -> ParameterCount:
    factor = total / max(counts.total, 1)
    layers = [
        LayerParameters(
            attention=round(lp.attention * factor),
            mlp=round(lp.mlp * factor),
            norms=lp.norms,
            active_mlp=round(lp.active_mlp * factor),
        )
        for lp in counts.layers
    ]
    return ParameterCount(
        total=total,
        embedding=round(counts.embedding * factor),
        head=round(counts.head * factor),
        final=counts.final,
        layers=layers,
    )


def _check_workload(arch: Architecture | None, w: Workload, *, vision: bool) -> None:
    errors = _check_vision(w) if vision else _check_shape(arch, w)
    p = w.parallelism
    if p.cpu_offload.parameters and p.zero_stage < 3:
        errors.append(
            (
                "$.workload.parallelism.cpu_offload.parameters",
                "parameter offload needs zero_stage 3",
            )
        )
    if w.mode not in ("finetune_qlora", "inference") and w.weight_quantization != "none":
        errors.append(
            (
                "$.workload.weight_quantization",
                "quantized weights apply to inference (finetune_qlora implies nf4)",
            )
        )
    if errors:
        raise InvalidModel(errors)


def _check_vision(w: Workload) -> list[tuple[str, str]]:
    errors = []
    p = w.parallelism
    if w.sequence_length is not None:
        errors.append(("$.workload.sequence_length", "a vision model takes image_size"))
    if w.gradient_checkpointing != "none":
        errors.append(
            (
                "$.workload.gradient_checkpointing",
                "not modelled for vision presets (their activations are measured without it)",
            )
        )
    if p.tensor > 1 or p.pipeline > 1 or p.expert > 1:
        errors.append(("$.workload.parallelism", "vision presets support data parallelism only"))
    if w.mode in ("finetune_lora", "finetune_qlora"):
        errors.append(("$.workload.mode", "LoRA modes apply to transformer models"))
    return errors


def _check_shape(arch: Architecture | None, w: Workload) -> list[tuple[str, str]]:
    errors = []
    p = w.parallelism
    if w.image_size is not None:
        errors.append(("$.workload.image_size", "applies to vision presets only"))
    if arch is not None:
        if w.sequence_length is None:
            errors.append(("$.workload.sequence_length", "required for a transformer model"))
        if p.tensor > 1 and arch.num_heads % p.tensor:
            errors.append(
                (
                    "$.workload.parallelism.tensor",
                    f"{p.tensor} does not divide {arch.num_heads} attention heads",
                )
            )
        if p.pipeline > arch.num_layers:
            errors.append(
                (
                    "$.workload.parallelism.pipeline",
                    f"{p.pipeline} stages for {arch.num_layers} layers",
                )
            )
        if p.expert > 1 and (arch.moe is None or arch.moe.num_experts % p.expert):
            errors.append(
                (
                    "$.workload.parallelism.expert",
                    "expert parallelism needs an MoE model whose experts it divides",
                )
            )
    return errors


def _describe(w: Workload, runtime: str) -> list[str]:
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


def _response(
    request: EstimateRequest,
    *,
    parameters: int,
    states: ModelStates,
    peak: _Peak,
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


def _rule_of_thumb(
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
