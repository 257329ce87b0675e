"""Small GPT-2-class models: eager attention under autocast moves its scores through
float32 copies, and ``torch.compile`` of a GPT-2 model is timed as compiled."""

from typing import Any

import msgspec
import pytest
from litestar.testing import TestClient

from gpuplan.core.catalog.builtin import builtin_catalog
from gpuplan.core.memory.schema import Parallelism
from gpuplan.core.perf.efficiency import efficiency_data, framework, generation
from gpuplan.core.perf.flops import TokenFlops
from gpuplan.core.perf.step import (
    AUTOCAST_SCORE_BYTES,
    COMPILED_LOSS_BYTES_PER_LOGIT,
    gemm_plateau,
    micro_batch,
    reference_shape_share,
)
from gpuplan.core.perf.step_records import StepShape
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
    # the matmuls are the same (the head's 50264 against 50257 timed at its shape)
    assert fused.gemm_s == pytest.approx(eager.gemm_s, rel=1e-4)


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


def test_a_measured_card_replaces_its_generations_planning_assumptions() -> None:
    catalog = builtin_catalog()
    # the RTX 4090 measures 168 TFLOP/s of bf16 matmul (its datasheet: 165.2) and a
    # 912 GB/s copy (1008): the plateau at most the peak, realized as a measured table's
    rtx = generation(catalog.get("rtx-4090-24gb"))
    assert rtx.name == "gddr-professional-and-inference"
    assert rtx.measured_plateau
    assert rtx.gemm_efficiency == 1.0
    assert rtx.bandwidth_efficiency == pytest.approx(912 / 1008)
    rates = bf16_rates("rtx-4090-24gb")
    assert gemm_plateau(rates) == pytest.approx(efficiency_data().kernels.measured_kernel_share)
    # a power-limited data-center card reaches less than half its datasheet peak
    assert generation(catalog.get("a10-24gb")).gemm_efficiency == pytest.approx(56 / 125)
    # a card with no measurement keeps its generation's values
    a40 = generation(catalog.get("a40-48gb"))
    assert not a40.measured_plateau
    assert a40.gemm_efficiency == 0.65


def test_amds_measured_gemm_plateaus_set_the_mi300x_below_the_mi325x() -> None:
    """The two share the CDNA 3 die and the datasheet's peak; AMD's max-achievable FLOPs
    (rocm-blogs, 'Measuring Max-Achievable FLOPs - Part 2') measure 708 and 843 TFLOP/s of
    bf16 and 1273 and 1519 of fp8 under their 750 W and 1,000 W limits. The cards carry
    the fp8 rate, and no copy bandwidth: the generation's stands."""
    catalog = builtin_catalog()
    cdna = efficiency_data().generations
    (planned,) = [g for g in cdna if g.name == "cdna-instinct"]
    for gpu_id, bf16, fp8 in (("mi300x-192gb", 708e12, 1273e12), ("mi325x-256gb", 843e12, 1519e12)):
        gpu = catalog.get(gpu_id)
        gen = generation(gpu)
        assert gen.measured_plateau
        assert gen.gemm_efficiency == pytest.approx(bf16 / gpu.peak_flops["bf16"])
        assert gen.fp8_gemm_efficiency == pytest.approx(fp8 / gpu.peak_flops["fp8"])
        assert gen.bandwidth_efficiency == planned.bandwidth_efficiency
        assert gen.attention_efficiency == planned.attention_efficiency
    # the MI355X has no measurement: CDNA's planning assumption
    assert not generation(catalog.get("mi355x-288gb")).measured_plateau


def test_the_mi325x_trains_faster_than_the_mi300x_by_its_measured_clock() -> None:
    """MLPerf Training's Llama 2 70B LoRA layout of the MI325X submission, fp8, on both
    parts (AMD's v5.0 submissions measured 2,795 tokens/s per GPU on the MI325X and
    2,077 on the MI300X, which also recomputes 21 of its 80 layers;
    bench/published/runs.toml). With one planning assumption for both the model put
    them 1.004x apart (6.0 against 5.3 TB/s hardly moves a GEMM-bound step); the
    measured plateaus are 1.19x apart, of which the step, not all GEMMs, keeps 1.15x."""
    from bench.published.runs import load, predict

    runs = {r["id"]: r for r in load()}
    mi325x = runs["mlperf50-amd-llama2-70b-lora-mi325x8-fp8"]
    mi300x = msgspec.json.decode(msgspec.json.encode(mi325x))
    mi300x["request"]["constraints"]["include"] = ["mi300x-192gb"]
    faster, slower = predict(mi325x), predict(mi300x)
    assert faster is not None
    assert slower is not None
    assert 1.10 < faster / slower < 1.19


def test_every_measured_card_is_a_catalog_gpu_measured_in_a_precision_it_has() -> None:
    """A card's measurement applies by catalog id: a misspelt id, or a precision the
    GPU's datasheet does not list, would be silently ignored by generation()."""
    catalog = builtin_catalog()
    cards = efficiency_data().cards
    assert cards
    assert len({c.gpu for c in cards}) == len(cards)
    for card in cards:
        gpu = catalog.get(card.gpu)
        assert gpu.peak_flops.get(card.dtype), card.gpu
        if card.fp8_matmul_flops is not None:
            assert gpu.peak_flops.get("fp8"), card.gpu
        assert generation(gpu).measured_plateau, card.gpu
        assert card.quote.strip(), card.gpu
        assert card.source.strip(), card.gpu


def test_a_roofline_gpus_gemms_are_timed_at_the_reference_tables_shapes() -> None:
    # GPT-2's MLP and head GEMMs are far wider than its 768 hidden, and a micro-batch's
    # rows many: the A100 table measures 0.86 of its plateau where the width alone says 0.55
    shape = _gpt2(causal_skip=True, autocast=True, batch_size=32)
    share = reference_shape_share(shape, Parallelism(), 32 * 1024, fp8=False)
    assert share == pytest.approx(0.86, abs=0.01)
    half = efficiency_data().kernels.gemm_half_width
    assert share > 1.5 * 768 / (768 + half)
    rates = bf16_rates("rtx-4090-24gb")
    m = micro_batch(GPT2, shape, Parallelism(), rates, framework("ddp"))
    assert m.gemm_s == pytest.approx(6 * GPT2.matmul_parameters * 32 * 1024 / (
        rates.peak_flops * gemm_plateau(rates) * share
    ))  # fmt: skip


def test_a_compiled_loss_moves_eight_bytes_a_logit() -> None:
    rates = bf16_rates("a100-sxm4-80gb", None)
    ddp = framework("ddp")
    compiled = _gpt2(causal_skip=True, autocast=True, compile=True)
    without = micro_batch(
        GPT2, msgspec.structs.replace(compiled, vocab_size=0), Parallelism(), rates, ddp
    )
    with_loss = micro_batch(GPT2, compiled, Parallelism(), rates, ddp)
    speed = rates.bandwidth_bytes_per_s * rates.generation.bandwidth_efficiency
    loss = with_loss.elementwise_s - without.elementwise_s
    assert COMPILED_LOSS_BYTES_PER_LOGIT == 8  # two reads forward, a read and a write back
    assert loss == pytest.approx(16 * 1024 * 50257 * 8 / speed)
