"""The workload rules a type cannot express: what a model and a layout allow together.

Each rule names the field to change; all are checked before any byte is counted, so a
refusal lists every problem of the request at once.
"""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.errors import InvalidModel
from gpuplan.core.memory.modules import lora_targets
from gpuplan.core.memory.numerics import half_dtype
from gpuplan.core.memory.schema import Fsdp1, Parallelism, Workload
from gpuplan.core.memory.states import REDUCE_DTYPE_FRAMEWORKS, quantization_of, shard_stage


def check_workload(arch: Architecture | None, w: Workload, *, vision: bool) -> None:
    errors = _check_vision(w) if vision else _check_shape(arch, w)
    p = w.parallelism
    if p.cpu_offload.parameters and shard_stage(w) < 3:
        errors.append(
            (
                "$.workload.parallelism.cpu_offload.parameters",
                "parameter offload needs zero_stage 3",
            )
        )
    if w.mode == "finetune_lora" and w.weight_quantization not in ("none", "fp8"):
        errors.append(
            (
                "$.workload.weight_quantization",
                "finetune_lora keeps its frozen base in the compute dtype or in fp8 "
                "(Transformer Engine's fp8 parameters); use finetune_qlora for 4-bit",
            )
        )
    elif w.mode == "finetune_lora" and w.weight_quantization == "fp8" and w.precision != "fp8":
        errors.append(
            (
                "$.workload.weight_quantization",
                "an fp8 frozen base feeds Transformer Engine's fp8 GEMMs: set precision fp8",
            )
        )
    elif (
        w.mode not in ("finetune_qlora", "finetune_lora", "inference")
        and w.weight_quantization != "none"
    ):
        errors.append(
            (
                "$.workload.weight_quantization",
                "quantized weights apply to inference, finetune_qlora and (fp8) finetune_lora",
            )
        )
    if w.mode == "finetune_qlora" and w.weight_quantization not in ("none", "nf4", "fp4"):
        errors.append(
            (
                "$.workload.weight_quantization",
                "finetune_qlora trains adapters on bitsandbytes 4-bit weights: nf4 or fp4",
            )
        )
    four_bit = w.weight_quantization in ("nf4", "fp4") or (
        w.mode == "finetune_qlora" and w.weight_quantization == "none"
    )
    if w.double_quantization and not four_bit:
        errors.append(
            ("$.workload.double_quantization", "applies to bitsandbytes 4-bit weights (nf4, fp4)")
        )
    if w.gptq_kernel != "none" and (w.mode != "inference" or w.weight_quantization != "int4"):
        errors.append(("$.workload.gptq_kernel", "exllama kernels run inference on int4 weights"))
    errors.extend(_check_quantization_load(w))
    if w.quantize_lm_head and quantization_of(w) == "none":
        errors.append(("$.workload.quantize_lm_head", "needs quantized weights"))
    errors.extend(_check_rotary_cache(arch, w))
    errors.extend(_check_techniques(arch, w))
    lora_mode = w.mode in ("finetune_lora", "finetune_qlora")
    if w.lora is not None and not lora_mode:
        errors.append(("$.workload.lora", "adapters apply to finetune_lora and finetune_qlora"))
    if lora_mode and arch is not None:
        try:
            lora_targets(arch, w.lora.target_modules if w.lora else None)
        except InvalidModel as refused:
            errors.extend(refused.errors)
    if errors:
        raise InvalidModel(errors)


def _check_rotary_cache(arch: Architecture | None, w: Workload) -> list[tuple[str, str]]:
    """Per-layer rotary tables need a rotary model and the rows it precomputes."""
    if w.rotary_cache == "none":
        return []
    path = "$.workload.rotary_cache"
    if arch is None or arch.position != "rotary":
        return [(path, "per_layer applies to a model with rotary positions")]
    if arch.rotary_positions == 0:
        return [
            (
                path,
                "per_layer needs the model's max_position_embeddings (the tables' rows): "
                "give it in the hf_config",
            )
        ]
    return []


def _check_techniques(arch: Architecture | None, w: Workload) -> list[tuple[str, str]]:
    """Checkpointing variants, compile and framework settings the model and mode allow."""
    errors = []
    p = w.parallelism
    llama = arch is not None and arch.family == "llama"
    if w.gradient_checkpointing == "selective_op" and not llama:
        errors.append(
            (
                "$.workload.gradient_checkpointing",
                "selective_op follows torchtitan's Llama block; modelled for Llama-style models",
            )
        )
    if w.compile and not (llama or (arch is not None and arch.family == "gpt2")):
        errors.append(
            (
                "$.workload.compile",
                "modelled for Llama-style and GPT-2 models (their fused blocks)",
            )
        )
    if w.fused_kernels and (
        arch is None or arch.family != "gpt2" or w.mode == "inference" or w.compile
    ):
        errors.append(
            (
                "$.workload.fused_kernels",
                "flash-attention's fused GPT kernels: training a GPT-2 model, without compile",
            )
        )
    errors.extend(_check_fp8_activation_store(w))
    if w.checkpoint_every_n_layers > 1 and w.gradient_checkpointing not in ("full", "selective_op"):
        errors.append(
            (
                "$.workload.checkpoint_every_n_layers",
                "applies to full or selective_op checkpointing",
            )
        )
    if p.framework in ("fsdp1", "fsdp2") and p.zero_stage == 1:
        errors.append(
            (
                "$.workload.parallelism.zero_stage",
                "FSDP shards parameters (3, or 0 for its default) or keeps them gathered "
                "through backward (2); it has no optimizer-only sharding",
            )
        )
    errors.extend(_check_fsdp1(w))
    if p.framework == "ddp" and p.zero_stage > 0:
        errors.append(
            ("$.workload.parallelism.zero_stage", "DDP does not shard; use fsdp2 or deepspeed")
        )
    training = w.mode != "inference"
    for name in (
        "keep_outputs",
        "optimizer_in_backward",
        "activation_offload",
        "activation_offload_layers",
    ):
        if getattr(w, name) and not training:
            errors.append((f"$.workload.{name}", "applies to training"))
    errors.extend(_check_offload_layers(arch, w))
    if w.loss_chunks > 1 and (
        not training or (arch is not None and (arch.encoder or arch.classifier))
    ):
        errors.append(("$.workload.loss_chunks", "applies to training a causal LM"))
    if w.optimizer_in_backward and (w.gradient_accumulation_steps > 1 or shard_stage(w) > 0):
        errors.append(
            (
                "$.workload.optimizer_in_backward",
                "steps each gradient as it is made: no gradient accumulation or sharding",
            )
        )
    errors.extend(_check_gradient_reduce(w))
    if p.init == "materialized" and shard_stage(w) < 2:
        errors.append(
            ("$.workload.parallelism.init", "applies to sharded models (FSDP1, FSDP2, ZeRO-3)")
        )
    if p.context > 1 and w.sequence_length is not None and w.sequence_length % p.context:
        errors.append(
            (
                "$.workload.parallelism.context",
                f"{p.context} does not divide sequence_length {w.sequence_length}",
            )
        )
    return errors


def _check_fp8_activation_store(w: Workload) -> list[tuple[str, str]]:
    """Megatron-core's fp8 input store is its fused activation's: training under it."""
    if w.activation_func_fp8_input_store and (
        w.parallelism.framework not in (None, "megatron") or w.mode == "inference"
    ):
        return [
            (
                "$.workload.activation_func_fp8_input_store",
                "Megatron-core's fused activation keeps its input in fp8: training under "
                "framework megatron",
            )
        ]
    return []


def _check_gradient_reduce(w: Workload) -> list[tuple[str, str]]:
    """A reduce dtype is a choice Megatron and FSDP2 offer full training, in fp32 or in
    the half precision the step computes in."""
    given = w.parallelism.gradient_reduce_dtype
    if given is None:
        return []
    path = "$.workload.parallelism.gradient_reduce_dtype"
    if w.parallelism.framework not in REDUCE_DTYPE_FRAMEWORKS:
        return [(path, "applies to framework megatron, fsdp1 or fsdp2 (their gradient buffers)")]
    if w.mode == "inference":
        return [(path, "applies to training")]
    if w.mode != "training":
        return [(path, "applies to full training: adapters keep fp32 gradients")]
    half = half_dtype(w.precision)
    if given != "fp32" and (w.precision == "fp32" or given != half):
        allowed = "fp32" if w.precision == "fp32" else f"fp32 or {half}"
        return [(path, f"{given} gradients under precision {w.precision}: use {allowed}")]
    return []


def _check_offload_layers(arch: Architecture | None, w: Workload) -> list[tuple[str, str]]:
    """Megatron-core's own rules for ``cpu_offloading_num_layers``
    (megatron/core/transformer/transformer_config.py at d98e8a64dd): fewer than the
    model's layers, and no pipeline parallelism."""
    n = w.activation_offload_layers
    if n <= 0:
        return []
    field = "$.workload.activation_offload_layers"
    if w.parallelism.pipeline > 1:
        return [(field, "offloads the layers of a model that is not split into pipeline stages")]
    if arch is not None and n >= arch.num_layers:
        return [(field, f"must be fewer than the model's {arch.num_layers} layers")]
    return []


def _check_fsdp1(w: Workload) -> list[tuple[str, str]]:
    """FSDP1's settings: only under ``framework: fsdp1``, and only what it can run."""
    p = w.parallelism
    f = p.fsdp1
    path = "$.workload.parallelism.fsdp1"
    if p.framework != "fsdp1":
        return [(path, "applies to framework fsdp1")] if f != Fsdp1() else []
    errors = []
    if w.precision == "fp8":
        errors.append(
            ("$.workload.precision", "fp8 all-gathers are FSDP2's (torchao); use fsdp2 for fp8")
        )
    if p.pipeline > 1 or p.expert > 1:
        errors.append(
            (
                "$.workload.parallelism",
                "fsdp1 is modelled for data (and tensor) parallelism: no pipeline or expert "
                "parallelism",
            )
        )
    if f.param_dtype is not None:
        half = half_dtype(w.precision)
        allowed = (
            ("fp32", half)
            if w.precision.startswith("amp_")
            else ("fp32" if w.precision == "fp32" else half,)
        )
        if f.param_dtype not in allowed:
            errors.append(
                (
                    f"{path}.param_dtype",
                    f"{f.param_dtype} parameters under precision {w.precision}: use "
                    + " or ".join(allowed),
                )
            )
    if f.adapters == "in_layer_units":
        if w.mode != "finetune_lora":
            errors.append(
                (
                    f"{path}.adapters",
                    "in_layer_units applies to finetune_lora (4-bit weights and adapters "
                    "cannot share a flat parameter's dtype)",
                )
            )
        elif not f.use_orig_params:
            errors.append(
                (
                    f"{path}.adapters",
                    "adapters inside a layer's unit need use_orig_params: with it false a "
                    "flat parameter must be uniformly requires_grad",
                )
            )
    return errors


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
        if p.virtual_stages > 1 and p.pipeline * p.virtual_stages > arch.num_layers:
            errors.append(
                (
                    "$.workload.parallelism.virtual_stages",
                    f"{p.pipeline} stages x {p.virtual_stages} chunks is more than "
                    f"{arch.num_layers} layers",
                )
            )
    return errors + _check_schedule(p)


def _check_schedule(p: Parallelism) -> list[tuple[str, str]]:
    """Degrees that contradict each other whatever the model."""
    errors = []
    if p.expert > 1 and p.data % p.expert:
        errors.append(
            (
                "$.workload.parallelism.expert",
                f"expert-parallel ranks come from the data-parallel ones: {p.expert} does not "
                f"divide data {p.data}",
            )
        )
    if p.virtual_stages > 1 and p.pipeline == 1:
        errors.append(
            ("$.workload.parallelism.virtual_stages", "model chunks per rank need pipeline > 1")
        )
    if p.virtual_stages > 1 and p.pipeline_schedule == "gpipe":
        errors.append(
            (
                "$.workload.parallelism.pipeline_schedule",
                "virtual stages interleave a 1F1B schedule: use interleaved_1f1b",
            )
        )
    if p.pipeline_schedule == "interleaved_1f1b" and p.virtual_stages == 1:
        errors.append(
            (
                "$.workload.parallelism.virtual_stages",
                "interleaved_1f1b needs the chunks per pipeline rank (2 or more)",
            )
        )
    return errors


def _check_quantization_load(w: Workload) -> list[tuple[str, str]]:
    """Which loading paths a stored format has: per-weight 16-bit copies are
    bitsandbytes 4-bit's, quantizing after a full 16-bit load is torchao's (int8, int4)."""
    load, fmt = w.weight_quantization_load, quantization_of(w)
    where = "$.workload.weight_quantization_load"
    if load == "auto":
        return []
    if fmt == "none":
        return [(where, "needs quantized weights")]
    if load == "per_weight" and fmt not in ("nf4", "fp4"):
        return [(where, "per_weight loading is bitsandbytes 4-bit's (nf4, fp4)")]
    if load == "after_full_load" and (w.mode != "inference" or fmt not in ("int8", "int4")):
        return [(where, "after_full_load is torchao's weight-only int8/int4 for inference")]
    return []
