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


def cnn_channels_last() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A strided stem, a depthwise and a pointwise convolution, converted to channels
    last with ``.to(memory_format=...)`` (which converts parameters by swapping them)."""
    model = nn.Sequential(
        nn.Conv2d(3, 24, 7, stride=2, padding=3),
        nn.BatchNorm2d(24),
        nn.ReLU(),
        nn.Conv2d(24, 24, 3, padding=1, groups=24),
        nn.Conv2d(24, 40, 1),
        nn.ReLU(),
    ).to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # not in torch's overloads
    images = torch.randn(4, 3, 64, 64).contiguous(memory_format=torch.channels_last)
    return model, (images,)


def conv1d_bf16() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Dilated 1-D convolutions in bf16, made so with ``.to(torch.bfloat16)``."""
    model = nn.Sequential(
        nn.Conv1d(40, 64, 5, padding=2),
        nn.GELU(),
        nn.Conv1d(64, 64, 3, dilation=2),
    ).to(torch.bfloat16)
    return model, (torch.randn(3, 40, 200, dtype=torch.bfloat16),)


def conv_transpose() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A decoder: transposed 2-D convolution, then odd kernel shapes and strides, on a
    batch of one."""
    model = nn.Sequential(
        nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 5, (3, 5), stride=(1, 2), bias=False),
    )
    return model, (torch.randn(1, 16, 15, 17),)


def conv3d() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    model = nn.Sequential(nn.Conv3d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv3d(8, 8, 3))
    return model, (torch.randn(2, 4, 12, 16, 16),)


class RnnLoop(nn.Module):
    """A recurrent cell stepped in Python over ``x[:, t]``: each step's ``select``
    sends a full-size gradient back to ``x``, which the engine sums in place."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.cell, self.head = nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 4)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x = self.proj(inputs)
        h = torch.zeros(x.shape[0], 64)
        for t in range(x.shape[1]):
            h = torch.tanh(x[:, t] + self.cell(h))
        out: torch.Tensor = self.head(h)
        return out


def rnn_loop() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return RnnLoop(), (torch.randn(8, 40, 32),)


class GradTwice(nn.Module):
    """``z.add_(z)`` sends one gradient tensor to ``z`` twice: the engine holds it
    twice and must sum out of place, at the step's peak."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 1024, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z: torch.Tensor = self.a(x)
        z.add_(z)
        return z[:, :8].sum()


def grad_twice() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return GradTwice(), (torch.randn(1024, 64),)


class GradExpanded(nn.Module):
    """Two sums of one tensor: their gradients are expanded scalars, not dense, so
    the engine sums them out of place."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 1024, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z: torch.Tensor = self.a(x)
        return z.sum() + z.sum()


def grad_expanded() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return GradExpanded(), (torch.randn(1024, 64),)


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
        last: torch.Tensor = self.head(out[:, -1])
        return last


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


def _hf(
    config: dict[str, Any],
    dtype: torch.dtype = torch.float32,
    sequence: int = 32,
    checkpointing: bool = False,
    batch: int = 2,
    **extra: Any,
) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(config)
    hf = AutoConfig.for_model(config.pop("model_type"), **config)
    model = AutoModelForCausalLM.from_config(hf, dtype=dtype, **extra)  # type: ignore[no-untyped-call]
    if checkpointing:  # transformers 5 renamed it; the old name warns there
        enable = getattr(model, "activation_checkpointing_enable", None)
        (enable or model.gradient_checkpointing_enable)()
    ids = torch.randint(0, hf.vocab_size, (batch, sequence))
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


MAMBA = {
    "model_type": "mamba",
    "vocab_size": 256,
    "hidden_size": 64,
    "state_size": 8,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "conv_kernel": 4,
    "time_step_rank": 8,
}


def hf_mamba() -> Any:
    """Mamba's reference scan (no CUDA kernels here): a Python loop over time steps,
    whose gradients the autograd engine sums in place, and a depthwise convolution."""
    return _hf(MAMBA, attn_implementation="eager")


FALCON = {
    "model_type": "falcon",
    "vocab_size": 512,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 1024,
}


def hf_falcon() -> Any:
    """Falcon at sequence 512: its attention's softmax (``_safe_softmax``) takes a byte
    per score inside the kernel, beside the scores."""
    return _hf(FALCON, sequence=512)


def hf_llama_checkpointed() -> Any:
    """Activation checkpointing at sequence 256: where the real run of an ordinary
    batch passes ``is_causal`` to SDPA, a trace that took transformers' path for
    unreadable position ids built an explicit mask and expanded keys and values."""
    return _hf(LLAMA, sequence=256, checkpointing=True)


def _hf_generate(config: dict[str, Any], dtype: torch.dtype = torch.float32) -> Any:
    """A causal LM and a short prompt for 16 sequences: a prefill that keeps its KV
    cache and the last position's logits (decode steps follow it)."""
    model, inputs = _hf(config, dtype, sequence=2, batch=16)
    return model, {"input_ids": inputs["input_ids"], "use_cache": True, "logits_to_keep": 1}


def hf_llama_generate() -> Any:
    return _hf_generate(LLAMA)


def hf_mixtral_generate_bf16() -> Any:
    return _hf_generate(MIXTRAL, torch.bfloat16)


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


def hf_llama_step(model: Any, inputs: dict[str, Any], optimizer: Any) -> None:
    """A hand-written step that keeps the model's output through backward and the
    optimizer step (``gpuplan trace --step``)."""
    out = model(**inputs)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del out


def hf_llama_trainer_step(model: Any, inputs: dict[str, Any], optimizer: Any) -> None:
    """The built-in loop's step written out: the output dropped once the loss is read."""
    loss = model(**inputs).loss
    loss.backward()
    del loss
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def mlp_step(model: Any, inputs: tuple[torch.Tensor, ...], optimizer: Any) -> None:
    """The built-in loop's step for ``mlp`` written out (its default loss is the sum)."""
    loss = model(*inputs).sum()
    loss.backward()
    del loss  # as the loop drops it before the optimizer steps
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def widening() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Activations of 4.5 to 7.5 MiB: the default allocator serves each 1-10 MiB request
    from a 20 MiB segment, an expandable segment from pages of one range."""
    model = nn.Sequential(
        nn.Linear(1024, 3072), nn.GELU(), nn.Linear(3072, 5120), nn.GELU(), nn.Linear(5120, 1024)
    )
    return model, (torch.randn(384, 1024),)


class LstmLanguageModel(nn.Module):
    """Embedding, a 2-layer LSTM and a linear head over the vocabulary (issue 33: hidden 512):
    the head reads the LSTM's transposed (batch-first) output, which ATen's linear cannot
    flatten, and the summed loss hands its backward an expanded, stride-0 gradient."""

    def __init__(self, vocab: int = 8000, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(ids))
        logits: torch.Tensor = self.head(out)
        return logits


def lstm_lm() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The LSTM language model, its outputs dropped once the (summed) loss is taken."""
    return LstmLanguageModel(), (torch.randint(0, 8000, (4, 32)),)
