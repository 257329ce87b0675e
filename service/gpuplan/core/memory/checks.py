"""The workload rules a type cannot express: what a model and a layout allow together.

Each rule names the field to change; all are checked before any byte is counted, so a
refusal lists every problem of the request at once.
"""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.errors import InvalidModel
from gpuplan.core.memory.schema import Parallelism, Workload


def check_workload(arch: Architecture | None, w: Workload, *, vision: bool) -> None:
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
        if p.virtual_stages > 1 and p.pipeline * p.virtual_stages > arch.num_layers:
            errors.append(
                (
                    "$.workload.parallelism.virtual_stages",
                    f"{p.pipeline} stages x {p.virtual_stages} chunks is more than "
                    f"{arch.num_layers} layers",
                )
            )
        if w.sequence_length is not None and p.context > 1 and w.sequence_length % p.context:
            errors.append(
                (
                    "$.workload.parallelism.context",
                    f"{p.context} ranks do not divide the {w.sequence_length}-token sequence",
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
