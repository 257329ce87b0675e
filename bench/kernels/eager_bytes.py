"""The memory-bound bytes of an eager decoder layer's training step, counted from the
model's own code rather than fitted to step times.

    python -m bench.kernels.eager_bytes            # count, write bench/results/eager_bytes.json
    python -m bench.kernels.eager_bytes --check    # exit 1 if efficiency.toml disagrees

The speed model times a layer's normalizations, rotary embedding, residual adds,
gated activation and layout copies at the memory bandwidth, by the bytes they move
(``kernels.eager_*_bytes`` in ``core/perf/data/efficiency.toml``). Those bytes are a
property of the model's code, so they are counted here, on the CPU, from Hugging Face
transformers' Llama (``LlamaForCausalLM``, SDPA attention, bf16 weights and
activations as FSDP's ``MixedPrecision(param_dtype=bfloat16)`` or a ``.to(bfloat16)``
model runs it): a ``TorchDispatchMode`` sees every aten operator of the forward and
the backward, and every operator that is not a GEMM, the attention kernel, the
embedding or the loss (each timed on its own) reads its inputs and writes its
outputs once. Views and factories move nothing; a broadcast input (the rotary table)
is read once, at its storage's size.

A layer's bytes are the difference of a 3-layer and a 1-layer model, halved, so the
embedding, the head and the loss drop out; per token, they are linear in the hidden
size ``h``, the key/value width ``kv`` (rotary on the keys, grouped-query attention's
``repeat_kv`` copies) and the MLP width ``m``: ``c_h·h + c_kv·kv + c_m·m``. Three
configurations solve for the three; two more (another width and twice the tokens)
check that the form holds.
"""

import argparse
import json
import sys
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "eager_bytes.json"
EFFICIENCY = ROOT / "service" / "gpuplan" / "core" / "perf" / "data" / "efficiency.toml"

MOVES_NOTHING = (
    "aten.view",
    "aten._unsafe_view",
    "aten.t.",
    "aten.transpose",
    "aten.expand",
    "aten.slice",
    "aten.select",
    "aten.unsqueeze",
    "aten.squeeze",
    "aten.permute",
    "aten.as_strided",
    "aten.detach",
    "aten.alias",
    "aten._reshape_alias",
    "aten.split",
    "aten.unbind",
    "aten.lift_fresh",
    "aten.empty",
    "aten.zeros",
    "aten.ones",
    "aten.arange",
    "aten.scalar_tensor",
    "aten.new_empty",
    "aten.new_zeros",
    "aten.full",
    "aten.sym_size",
    "aten.is_same_size",
)
"""Operators that only describe memory (views) or make a tensor from nothing."""

TIMED_APART = (
    "aten.mm",
    "aten.addmm",
    "aten.bmm",
    "aten.baddbmm",
    "aten.matmul",
    "aten._scaled_dot_product",
    "aten.scaled_dot_product",
    "aten.embedding",
    "aten.nll_loss",
    "aten._log_softmax",
)
"""GEMMs, the attention kernel, the embedding and the loss: the speed model times
these on their own (kernel tables, ``LOSS_BYTES_PER_LOGIT``)."""


def _bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return min(value.numel() * value.element_size(), value.untyped_storage().nbytes())
    if isinstance(value, list | tuple):
        return sum(_bytes(v) for v in value)
    return 0


class ByteCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Bytes read and written by the memory-bound operators, by operator."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.bytes: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func)
        if not name.startswith(MOVES_NOTHING + TIMED_APART):
            self.bytes[name] += _bytes(list(args)) + _bytes(list(kwargs.values())) + _bytes(out)
        return out


def step_bytes(layers: int, hidden: int, kv_heads: int, mlp: int, tokens: int) -> int:
    """Memory-bound bytes of one forward and backward of a bf16 Llama of ``layers``
    layers, 8 heads of ``hidden / 8``, over one sequence of ``tokens`` tokens."""
    import transformers

    torch.manual_seed(0)
    fields: dict[str, Any] = {
        "hidden_size": hidden,
        "intermediate_size": mlp,
        "num_attention_heads": 8,
        "num_key_value_heads": kv_heads,
        "num_hidden_layers": layers,
        "vocab_size": 256,
        "max_position_embeddings": tokens,
        "attn_implementation": "sdpa",
    }
    config = transformers.LlamaConfig(**fields)
    model: Any = transformers.LlamaForCausalLM(config)
    model = model.to(torch.bfloat16).train()
    ids = torch.randint(0, 256, (1, tokens))
    counter = ByteCounter()
    with counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return sum(counter.bytes.values())


def layer_bytes_per_token(hidden: int, kv_heads: int, mlp: int, tokens: int = 128) -> float:
    return (
        (
            step_bytes(3, hidden, kv_heads, mlp, tokens)
            - step_bytes(1, hidden, kv_heads, mlp, tokens)
        )
        / 2
        / tokens
    )


def constants() -> tuple[float, float, float]:
    """(bytes per unit of hidden size, of key/value width, of MLP width) per token per
    layer, solved from three configurations that differ in one width each."""
    # Small widths: the bytes are linear in them (count()'s checks say so), and the
    # CPU computes the step for real.
    h, m = 256, 768
    base = layer_bytes_per_token(h, 8, m)  # kv = h
    grouped = layer_bytes_per_token(h, 2, m)  # kv = h / 4
    wide = layer_bytes_per_token(h, 8, 2 * m)
    c_m = (wide - base) / m
    c_kv = (base - grouped) / (h - h // 4)
    c_h = (base - c_kv * h - c_m * m) / h
    return c_h, c_kv, c_m


def count() -> dict[str, Any]:
    import transformers

    c_h, c_kv, c_m = constants()
    checks = []
    for hidden, kv_heads, mlp, tokens in ((384, 4, 1024, 128), (256, 8, 768, 256)):
        counted = layer_bytes_per_token(hidden, kv_heads, mlp, tokens)
        kv = hidden * kv_heads // 8
        predicted = c_h * hidden + c_kv * kv + c_m * mlp
        checks.append(
            {
                "hidden": hidden,
                "kv_width": kv,
                "mlp": mlp,
                "tokens": tokens,
                "counted_bytes_per_token": round(counted, 1),
                "predicted_bytes_per_token": round(predicted, 1),
                "relative_error": round(predicted / counted - 1, 5),
            }
        )
    return {
        "what": "memory-bound bytes per token per decoder layer, forward and backward, bf16",
        "model": "transformers LlamaForCausalLM, attn_implementation='sdpa', .to(torch.bfloat16)",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "eager_hidden_bytes": round(c_h, 1),
        "eager_kv_bytes": round(c_kv, 1),
        "eager_mlp_bytes": round(c_m, 1),
        "checks": checks,
    }


def shipped() -> dict[str, float]:
    kernels = tomllib.loads(EFFICIENCY.read_text("utf-8"))["kernels"]
    return {k: kernels[k] for k in ("eager_hidden_bytes", "eager_kv_bytes", "eager_mlp_bytes")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with efficiency.toml")
    args = parser.parse_args()
    result = count()
    print(json.dumps(result, indent=1))
    if args.check:
        ship = shipped()
        off = {k: (v, result[k]) for k, v in ship.items() if abs(v - result[k]) > 0.5}
        if off:
            print(f"efficiency.toml differs from the count: {off}", file=sys.stderr)
            sys.exit(1)
        return
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
