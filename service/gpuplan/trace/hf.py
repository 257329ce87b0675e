"""Build a Hugging Face model from a ``config.json`` mapping, for tracing.

Only the model classes transformers itself ships are used: ``auto_map`` entries
(custom code on the hub) are ignored and ``trust_remote_code`` is never passed, so
a config cannot make the server run code it supplies. Nothing is downloaded.
"""

from collections.abc import Callable
from typing import Any

import torch

from gpuplan.core.trace.schema import TraceWorkload
from gpuplan.trace.step import TraceError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MASKED_LM = ("bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2")


class InvalidConfig(TraceError):
    """transformers refuses the configuration."""


def builder(hf_config: dict[str, Any], workload: TraceWorkload) -> Callable[[], Any]:
    """A trace target for ``hf_config`` with inputs of the workload's shape."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    values = {k: v for k, v in hf_config.items() if k not in ("auto_map", "_name_or_path")}
    model_type = values.pop("model_type", None)
    if not isinstance(model_type, str):
        raise InvalidConfig("hf_config has no model_type")
    try:
        config = AutoConfig.for_model(model_type, **values)
    except Exception as exc:  # transformers' validation errors have no common base
        raise InvalidConfig(f"transformers cannot read this config: {exc}") from None
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 1:
        raise InvalidConfig("hf_config has no vocab_size")
    cls = AutoModelForMaskedLM if model_type in MASKED_LM else AutoModelForCausalLM

    def build() -> tuple[torch.nn.Module, dict[str, Any]]:
        try:
            model = cls.from_config(  # type: ignore[no-untyped-call]
                config, dtype=DTYPES[workload.dtype], attn_implementation=workload.attention
            )
        except Exception as exc:  # a config transformers accepted but cannot build
            raise InvalidConfig(f"transformers cannot build this model: {exc}") from None
        if workload.gradient_checkpointing:
            # transformers 5 renamed it; the old name warns there.
            enable = getattr(model, "activation_checkpointing_enable", None)
            (enable or model.gradient_checkpointing_enable)()
        ids = torch.randint(0, vocab, (workload.batch_size, workload.sequence_length))
        if workload.mode == "inference":
            inputs: dict[str, Any] = {"input_ids": ids}
            if cls is AutoModelForCausalLM:
                inputs.update(use_cache=True, logits_to_keep=1)
            return model, inputs
        return model, {"input_ids": ids, "labels": ids}

    return build
