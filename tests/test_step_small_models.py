"""Small GPT-2-class models: eager attention under autocast moves its scores through
float32 copies, and ``torch.compile`` of a GPT-2 model is timed as compiled."""

from typing import Any

import msgspec
import pytest
from litestar.testing import TestClient

from gpuplan.core.memory.schema import Parallelism
from gpuplan.core.perf.efficiency import framework
from gpuplan.core.perf.flops import TokenFlops
from gpuplan.core.perf.step import AUTOCAST_SCORE_BYTES, StepShape, micro_batch
from tests.helpers import bf16_rates

GPT2 = TokenFlops(matmul_parameters=124_000_000, attention_per_context_token=4 * 768 * 12)


def _gpt2(**changes: Any) -> StepShape:
    """GPT-2 124M: 12 layers of 768, 12 heads of 64, eager attention, one GPU."""
    shape = StepShape(
        batch_size=16, seq=1024, accumulation=1, checkpointing="none", causal_skip=False,
        frozen_base=False, hidden_size=768, mlp_width=3072, kv_width=768, num_layers=12,
        num_heads=12, head_dim=64, moe_layers=0, experts_per_token=0, activation_bytes=2,
        trainable_parameters=124_000_000, parameters=124_000_000, gradient_bytes=4,
        weight_bytes=4, gather_bytes=4, compile=False, vocab_size=50257,
    )  # fmt: skip
    return msgspec.structs.replace(shape, **changes)


def test_eager_attention_under_autocast_moves_float32_scores() -> None:
    rates = bf16_rates("a100-sxm4-80gb", None)
    ddp = framework("ddp")
    pure = micro_batch(GPT2, _gpt2(), Parallelism(), rates, ddp)
    amp = micro_batch(GPT2, _gpt2(autocast=True), Parallelism(), rates, ddp)
    # the written-out attention's scores: heads x keys per token, every layer
    scores = 16 * 1024 * 12 * 12 * 1024
    speed = rates.bandwidth_bytes_per_s * rates.generation.bandwidth_efficiency
    per_score = AUTOCAST_SCORE_BYTES - rates.kernels.eager_score_bytes
    assert AUTOCAST_SCORE_BYTES == 72  # 32 forward, 40 backward
    assert amp.elementwise_s - pure.elementwise_s == pytest.approx(scores * per_score / speed)
    # a fused attention keeps its scores on chip, autocast or not
    fused = micro_batch(GPT2, _gpt2(causal_skip=True), Parallelism(), rates, ddp)
    fused_amp = micro_batch(GPT2, _gpt2(causal_skip=True, autocast=True), Parallelism(), rates, ddp)
    assert fused_amp.elementwise_s == fused.elementwise_s


def test_a_compiled_gpt2_is_timed_as_compiled(
    client: TestClient,  # type: ignore[type-arg]
) -> None:
    def speed(compile: bool) -> dict[str, Any]:
        body = {
            "model": {"name": "gpt2"},
            "workload": {
                "mode": "training", "sequence_length": 1024, "batch_size": 16,
                "precision": "amp_bf16", "attention": "flash", "compile": compile,
            },
            "training": {"training_tokens": 1_000_000_000},
            "constraints": {"include": ["a100-sxm4-80gb"], "max_gpus_per_job": 1},
            "limit": 1,
        }  # fmt: skip
        response = client.post("/v1/recommendations", json=body)
        assert response.status_code == 200, response.text
        return response.json()["recommendations"][0]  # type: ignore[no-any-return]

    eager, compiled = speed(False), speed(True)
    # fused memory-bound kernels and fewer launches: the same FLOPs in less time
    assert compiled["throughput"]["value"] > 1.1 * eager["throughput"]["value"]


def test_flash_attentions_fused_gpt_moves_its_kernels_bytes() -> None:
    rates = bf16_rates("a100-sxm4-80gb", None)
    ddp = framework("ddp")
    shape = _gpt2(causal_skip=True, autocast=True, fused_kernels=True, vocab_size=50264)
    fused = micro_batch(GPT2, shape, Parallelism(), rates, ddp)
    eager = micro_batch(GPT2, _gpt2(causal_skip=True, autocast=True), Parallelism(), rates, ddp)
    # two dropout-add-LayerNorms (30 bytes a hidden element each) and the MLP's
    # pre-activation (4 bytes an element) a layer; the loss's 8 bytes a logit
    per_token = 12 * (2 * 30 * 768 + 4 * 3072) + 8 * 50264
    speed = rates.bandwidth_bytes_per_s * rates.generation.bandwidth_efficiency
    assert fused.elementwise_s == pytest.approx(16 * 1024 * per_token / speed)
    assert fused.elementwise_s < 0.25 * eager.elementwise_s
    assert fused.gemm_s == eager.gemm_s  # the matmuls are the same


@pytest.mark.parametrize(
    ("model", "workload", "status"),
    [
        ("gpt2", {"mode": "training"}, 200),
        ("gpt2", {"mode": "training", "compile": True}, 422),
        ("gpt2", {"mode": "inference"}, 422),
        ("llama-2-7b", {"mode": "training"}, 422),
        ("gpt2", {"mode": "training", "fused_kernels": "yes"}, 422),
    ],
)
def test_fused_kernels_are_flash_attentions_gpt_training(
    client: TestClient,  # type: ignore[type-arg]
    model: str,
    workload: dict[str, object],
    status: int,
) -> None:
    body = {
        "model": {"name": model},
        "workload": {"sequence_length": 8, "fused_kernels": True, **workload},
    }
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == status, response.text
    if status == 422:
        assert [e["path"] for e in response.json()["errors"]] == ["$.workload.fused_kernels"]
