"""LoRA targets against PEFT itself: the linear modules transformers builds for every
supported ``model_type`` are the ones the estimator names, and the adapters PEFT adds
(its defaults, and all-linear) have the parameter count the estimator reports."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.torch]

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from bench.accuracy import cases  # noqa: E402

from gpuplan.core.memory.hf_config import from_hf_config  # noqa: E402
from gpuplan.core.memory.modules import (  # noqa: E402
    PEFT_DEFAULT_TARGETS,
    linear_modules,
    lora_parameters,
    lora_targets,
)
from tests.helpers import seeded_model  # noqa: E402

CONFIGS = {
    "llama": cases.LLAMA, "qwen2": cases.QWEN2, "gpt2": cases.GPT2, "gpt_neox": cases.NEOX,
    "opt": cases.OPT, "bert": cases.BERT, "mixtral": cases.MIXTRAL, "gemma": cases.GEMMA,
    "qwen3": cases.QWEN3, "phi3": cases.PHI3, "qwen2_moe": cases.QWEN2_MOE,
    "deepseek_v3": cases.DEEPSEEK_V3, "falcon": cases.FALCON, "gemma2": cases.GEMMA2,
    "roberta": cases.ROBERTA, "gpt_bigcode": cases.GPT_BIGCODE, "starcoder2": cases.STARCODER2,
    "gemma3_text": cases.GEMMA3, "qwen3_moe": cases.QWEN3_MOE, "olmo2": cases.OLMO2,
}  # fmt: skip


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_the_linear_module_names_are_transformers(model_type: str) -> None:
    from transformers.pytorch_utils import Conv1D

    model = seeded_model(CONFIGS[model_type])
    built = {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear | Conv1D)
    }
    arch, _ = from_hf_config(CONFIGS[model_type])
    named = set(linear_modules(arch))
    if arch.moe is not None:
        # PEFT targets an MoE's router and fused experts as parameters, not modules.
        named -= {"gate", "experts"}
    assert named == built


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_the_adapter_count_is_peft_s(model_type: str) -> None:
    from peft import LoraConfig, get_peft_model

    arch, _ = from_hf_config(CONFIGS[model_type])
    arch_moe = arch.moe is not None
    # all-linear on an MoE adapts the fused experts in a PEFT-version-specific layout.
    tried = [[*PEFT_DEFAULT_TARGETS.get(model_type, ())] or None]
    attention = [n for n, m in linear_modules(arch).items() if m.attention and m.per_layer]
    tried += [attention[:2]] if arch_moe else [["all-linear"]]
    for targets in tried:
        if targets is None:
            continue
        given = "all-linear" if targets == ["all-linear"] else targets  # PEFT wants the string
        model = get_peft_model(
            seeded_model(CONFIGS[model_type]), LoraConfig(r=4, target_modules=given)
        )
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        names, _ = lora_targets(arch, targets)
        assert lora_parameters(arch, names, 4) == trainable, targets
