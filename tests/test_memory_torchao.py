"""torchao weight-only quantization after a full 16-bit load (core/memory/torchao.py).

The recipes are checked against the torch ops torchao 61fef69dd runs
(``choose_qparams_affine``/``quantize_affine`` in torchao/quantization/
quant_primitives.py, ``AffineQuantizedTensor.from_float`` in torchao/dtypes/aqt.py),
replayed here on CPU on a weight that requires grad, as torchao's generate script
quantizes it (outside ``no_grad``): the live bytes they reach are the recipe's.
"""

import weakref
from typing import Any

import msgspec
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory import torchao
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.reserve import Pattern, quantization_reserve
from gpuplan.core.memory.schema import EstimateRequest, EstimateResponse

CATALOG = builtin_catalog()
MiB = 1 << 20


class _Live(TorchDispatchMode):  # type: ignore[misc]
    """Bytes of the storages the ops create, while they live (weak references)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: set[int] = set()
        self._refs: list[Any] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if key in self._seen or not size:
                continue
            self._seen.add(key)
            self.live += size
            self.peak = max(self.peak, self.live)
            self._refs.append(weakref.ref(storage, lambda _, k=key, n=size: self._free(k, n)))
        return out

    def _free(self, key: int, size: int) -> None:
        self.live -= size
        self._seen.discard(key)


def _int8_weight_only(w: torch.Tensor) -> torch.Tensor:
    """get_apply_int8wo_quant: symmetric per row, int8, zero point int64."""
    qmin, qmax = -128, 127
    x = w.view(w.shape)
    low, high = torch.amin(x, dim=[1]), torch.amax(x, dim=[1])
    low, high = torch.min(low, torch.zeros_like(low)), torch.max(high, torch.zeros_like(high))
    scale = torch.max(-low, high) / (float(qmax - qmin) / 2)
    scale = torch.clamp(scale, min=torch.finfo(torch.float32).eps).view(-1, 1)
    zero = torch.full_like(scale, 0).to(torch.int64)
    return torch.clamp(torch.round(x * (1.0 / scale)) + zero, qmin, qmax).to(torch.int8)


def _int4_weight_only(w: torch.Tensor, group: int = 64) -> torch.Tensor:
    """get_apply_int4wo_quant: padded copy, asymmetric groups, zero point in floats."""
    padded = torch.nn.functional.pad(w, (0, 0, 0, 0))
    rows, cols = padded.shape
    x = padded.view(rows, cols // group, group)
    low, high = torch.amin(x, dim=[2]), torch.amax(x, dim=[2])
    scale = torch.clamp((high - low) / 15.0, min=1e-6)
    zero = low + scale * 8
    scale, zero = scale.view(rows, -1, 1), zero.view(rows, -1, 1)
    minimum = zero - scale * 8.0
    q = torch.clamp(torch.round((x - minimum) / scale), 0, 15).to(torch.int32)
    return q.view(rows, cols)


@pytest.mark.parametrize(("fmt", "ops", "stored"), [("int8", _int8_weight_only, 1.0),
                                                     ("int4", _int4_weight_only, 0.5625)])  # fmt: skip
def test_recipes_hold_what_torch_keeps_alive(fmt: str, ops: Any, stored: float) -> None:
    """The recipe's peak bytes per element are torch's, and autograd is why: without
    grad the same ops keep less (int8: 4 bytes not 5; int4: 8 not 12)."""
    steps = torchao.quantize_steps(fmt, compute_bytes=2.0, stored_bytes=stored)
    for grad, dropped in ((True, 0.0), (False, 1.0 if fmt == "int8" else 4.0)):
        weight = torch.nn.Parameter(torch.randn(512, 2048, dtype=torch.bfloat16), grad)
        live = _Live()
        live._seen.add(weight.untyped_storage().data_ptr())
        with live:
            ops(weight)
        measured = live.peak / weight.numel()
        assert measured == pytest.approx(torchao.peak_per_element(steps) - dropped, rel=0.03)


def _run(model: str, fmt: str, load: str, **workload: Any) -> EstimateResponse:
    body = {
        "model": {"name": model},
        "workload": {
            "mode": "inference", "batch_size": 1, "sequence_length": 6, "max_new_tokens": 200,
            "precision": "bf16", "weight_quantization": fmt, "quantize_lm_head": True,
            "weight_quantization_load": load, **workload,
        },
    }  # fmt: skip
    return estimate(msgspec.convert(body, EstimateRequest), CATALOG)


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_the_16_bit_model_is_resident_before_it_is_quantized(fmt: str) -> None:
    """Llama-2-7B's 6.74 B parameters in bf16 are allocated before any is quantized, and
    their blocks stay reserved; a pre-quantized checkpoint never holds them."""
    sixteen = 2 * 6_738_415_616
    after = _run("llama-2-7b", fmt, "after_full_load")
    stored = _run("llama-2-7b", fmt, "as_stored")
    assert after.peak_bytes > sixteen > 1.8 * stored.reserved_bytes
    assert after.reserved_bytes > after.peak_bytes
    assert "quantizing" in after.peak_phase


def test_the_heads_temporaries_take_segments_of_their_own() -> None:
    """Llama-3-8B's head (128256 x 4096) is quantized last; its int4 temporaries, 12
    bytes per element at once, are larger than any freed layer block: the reserve grows
    by about that much beyond the 16-bit model's."""
    head = 128_256 * 4096
    with_head = _run("llama-3.1-8b", "int4", "after_full_load")
    without = _run("llama-3.1-8b", "int4", "after_full_load", quantize_lm_head=False)
    steps = torchao.quantize_steps("int4", compute_bytes=2.0, stored_bytes=0.52)
    grown = with_head.reserved_bytes - without.reserved_bytes
    assert grown > 0.9 * torchao.peak_per_element(steps) * head


def test_auto_keeps_bitsandbytes_per_weight_loading() -> None:
    """``auto`` is ``per_weight`` for nf4 (transformers' 16-bit copies), and a saved
    4-bit checkpoint (``as_stored``) skips them."""
    auto = _run("llama-2-13b", "nf4", "auto", quantize_lm_head=False, sequence_length=1,
                max_new_tokens=0)  # fmt: skip
    per = _run("llama-2-13b", "nf4", "per_weight", quantize_lm_head=False, sequence_length=1,
               max_new_tokens=0)  # fmt: skip
    stored = _run("llama-2-13b", "nf4", "as_stored", quantize_lm_head=False, sequence_length=1,
                  max_new_tokens=0)  # fmt: skip
    assert auto == per
    assert stored.peak_bytes < per.peak_bytes


def _pattern(layers: int, head: int) -> Pattern:
    w = 64 * MiB  # elements of one layer weight
    return Pattern(
        outer_weights=(2 * 4 * w, 2 * 4 * w), layer_weights=(w,) * 4, layer_loads=(2 * w,) * 4,
        layers=layers, layer_grads=(), attention_grads=0, outer_grads=(), states_per_grad=0,
        state_scale=0.0, optimizer_temporaries=False, attention_saved=(), mlp_saved=(),
        attention_backward=(), mlp_backward=(), checkpoint_input=0, head_saved=(), logits=0,
        upcast=0, loss_saved=0, loss_backward=(), accumulation=1, inference=True,
        kv_per_layer=(), forward_transient=(),
        quantize_steps=torchao.quantize_steps("int8", compute_bytes=2.0, stored_bytes=1.0),
        layer_elements=(w,) * 4, head_elements=head,
    )  # fmt: skip


def test_layers_reuse_their_freed_blocks_so_the_growth_does_not_scale() -> None:
    """The first weight's temporaries need segments; later ones fit the freed 16-bit
    blocks and cached temporaries: 2 layers grow the reserve as much as 8. The head,
    four times a layer weight, needs its own (int8: 2 + 2 + 1 bytes per element)."""
    w = 64 * MiB
    assert quantization_reserve(_pattern(2, 0)) == quantization_reserve(_pattern(8, 0))
    first = quantization_reserve(_pattern(8, 0))
    assert 0 < first <= 5 * w
    assert quantization_reserve(_pattern(8, 4 * w)) - first >= 5 * 4 * w - first
