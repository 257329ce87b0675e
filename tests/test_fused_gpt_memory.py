"""What flash-attention's training GPT keeps (``workload.fused_kernels``): its fused
dropout-add-LayerNorm, fused dense and fused MLP kernels save a fixed list of tensors
(Dao-AILab/flash-attention at 0b037c2d, flash_attn/ops/layer_norm.py and
flash_attn/ops/fused_dense.py), and its cross-entropy writes the logits' gradient over
the 16-bit logits (flash_attn/losses/cross_entropy.py, ``inplace_backward``)."""

import msgspec
import pytest
from bench.published.runs import load

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.dims import dims_for
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.head import head_cost
from gpuplan.core.memory.hf_config import from_hf_config
from gpuplan.core.memory.layers import layer_cost
from gpuplan.core.memory.layers_records import Step
from gpuplan.core.memory.numerics import numerics_for
from gpuplan.core.memory.schema import EstimateRequest

GPT3_MEDIUM = {"model_type": "gpt2", "n_embd": 1024, "n_layer": 24, "n_head": 16,
               "vocab_size": 50264, "n_positions": 2048}  # fmt: skip
SEQ = 2048


def test_a_layer_keeps_the_fused_kernels_saved_tensors() -> None:
    """Per token, h = 1024, 16 heads: each of the two dropout-add-LayerNorms its fp32
    residual sum (4h), its dropout mask (h) and two fp32 statistics (8 B); the qkv
    projection its bf16 input (2h); FlashAttention the packed qkv (6h), its output (2h,
    the output projection's input) and a log-sum-exp per head (64 B); the fused MLP its
    input (2h), the pre-activation and the GELU's output (8h each)."""
    arch = from_hf_config(GPT3_MEDIUM)[0]
    d = dims_for(arch, 1, SEQ)
    num = numerics_for("amp_bf16", "cuda")
    fused = layer_cost(
        arch, d, num, Step(eager=False, training=True, fused_gpt=True), moe_layer=False
    )
    h = 1024
    norm = 4 * h + h + 8
    attention = norm + 2 * h + 6 * h + 2 * h + 4 * 16
    mlp = norm + 2 * h + 2 * 2 * 4 * h
    assert fused.saved / SEQ == pytest.approx(attention + mlp)
    assert fused.mlp_saved / SEQ == pytest.approx(mlp)
    eager = layer_cost(arch, d, num, Step(eager=False, training=True), moe_layer=False)
    assert eager.saved > 1.5 * fused.saved  # the written-out GELU, SDPA's copies


def test_the_fused_cross_entropy_keeps_only_the_half_precision_logits() -> None:
    arch = from_hf_config(GPT3_MEDIUM)[0]
    d = dims_for(arch, 1, SEQ)
    num = numerics_for("amp_bf16", "cuda")
    fused = head_cost(arch, d, num, training=True, head_trains=True, fused=True)
    assert fused.logits_saved == 2 * SEQ * 50264 + 4 * SEQ
    assert fused.loss_backward == 0.0  # the gradient overwrites the logits
    eager = head_cost(arch, d, num, training=True, head_trains=True)
    assert eager.logits_saved == 4 * SEQ * 50264  # transformers' fp32 log-softmax


@pytest.mark.parametrize(
    "run_id",
    [
        "flashattn-gpt3-125m-a100x8-bf16",
        "flashattn-gpt3-355m-a100x8-bf16",
        "flashattn-gpt3-760m-a100x8-bf16",
        "flashattn-gpt3-1.3b-a100x8-bf16",
    ],
)
def test_flash_attentions_gpt_runs_fit_the_a100s_they_ran_on(run_id: str) -> None:
    """The training README's runs on 8 x A100 80GB, each at the micro-batch its config
    picks for an 80 GB GPU. (The 2.7B run shards its optimizer with ZeRO-1, which a DDP
    request cannot say: its estimate holds every Adam state.)"""
    run = next(r for r in load() if r["id"] == run_id)
    request = run["request"]
    body = {"model": request["model"], "workload": request["workload"], "gpu": run["gpu"]}
    response = estimate(msgspec.convert(body, EstimateRequest), builtin_catalog())
    assert response.device_bytes < 80 * 2**30
