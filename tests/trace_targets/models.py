"""Tiny real models for the tracer's exactness tests; each function is a trace target.

Each returns ``(model, inputs)`` or ``(model, inputs, loss_fn)`` and creates every
tensor inside the call, so the tracer can build it under fake tensors and the
measurement with real ones.
"""

from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def mlp() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
    return model, (torch.randn(64, 256),)


def cnn() -> tuple[nn.Module, tuple[torch.Tensor, ...], Any]:
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    images = torch.randn(8, 3, 32, 32)
    labels = torch.randint(0, 10, (8,))
    return model, (images,), lambda logits: nn.functional.cross_entropy(logits, labels)


def transformer() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    return model, (torch.randn(4, 64, 128),)


class Lstm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(64, 128, num_layers=2, batch_first=True)
        self.head = nn.Linear(128, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def lstm() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return Lstm(), (torch.randn(4, 32, 64),)


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)) for _ in range(4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + checkpoint(block, x, use_reentrant=False)
        return x


def checkpointed() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    return Checkpointed(), {"x": torch.randn(32, 256)}


def _hf(config: dict[str, Any], dtype: torch.dtype = torch.float32, **extra: Any) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(config)
    hf = AutoConfig.for_model(config.pop("model_type"), **config)
    model = AutoModelForCausalLM.from_config(hf, dtype=dtype, **extra)
    ids = torch.randint(0, hf.vocab_size, (2, 32))
    return model, {"input_ids": ids, "labels": ids}


LLAMA = {
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 172,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}
MIXTRAL = {
    "model_type": "mixtral",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 256,
}


def hf_llama() -> Any:
    return _hf(LLAMA)


def hf_llama_bf16() -> Any:
    return _hf(LLAMA, torch.bfloat16)


def hf_llama_eager() -> Any:
    return _hf(LLAMA, attn_implementation="eager")


def hf_mixtral() -> Any:
    return _hf(MIXTRAL)


def hf_mixtral_bf16() -> Any:
    return _hf(MIXTRAL, torch.bfloat16)


def not_a_pair() -> int:
    return 3


def raises() -> Any:
    raise ValueError("no model today")
