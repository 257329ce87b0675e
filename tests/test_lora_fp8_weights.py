"""``weight_quantization: fp8`` under ``finetune_lora``: the frozen base held in fp8, as
Transformer Engine's fp8 parameters keep it (NeMo's ``fp8_params``, which every MLPerf
Llama 2 70B LoRA submission turns on with ``FP8=True``). One byte per linear weight
instead of two; the adapters, norms and embeddings keep theirs. The same field reaches
the API, the CLI (``--quantization``) and plan files; a frozen base in fp8 needs
``precision: fp8`` (TE's fp8 GEMMs read it), and LoRA takes no other format."""

from pathlib import Path
from typing import Any

import msgspec
import pytest
from bench.published.runs import load_all
from click.testing import CliRunner
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest
from gpuplan.core.recommend import RecommendRequest, recommend
from tests.helpers import run_plan_file

CATALOG = builtin_catalog()


def _lora(quantization: str = "none", precision: str = "fp8") -> dict[str, Any]:
    """Llama 2 70B LoRA at 8,192 tokens on one GPU of 8, as MLPerf runs it (TP 1)."""
    return {
        "model": {"name": "llama-2-70b"},
        "workload": {
            "mode": "finetune_lora", "sequence_length": 8192, "batch_size": 1,
            "precision": precision, "weight_quantization": quantization,
            "parallelism": {"data": 8, "framework": "megatron"},
            "lora": {"rank": 16, "dropout": 0.1,
                     "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
        },
    }  # fmt: skip


def _estimate(body: dict[str, Any]) -> Any:
    return estimate(msgspec.convert(body, EstimateRequest), CATALOG)


def test_an_fp8_frozen_base_halves_the_linear_weights_and_nothing_else() -> None:
    fp8, bf16 = _estimate(_lora("fp8")), _estimate(_lora())
    linear = bf16.parameters - 2 * 32_000 * 8192  # Llama 2's embedding and head stay 16-bit
    saved = bf16.breakdown.weights_bytes - fp8.breakdown.weights_bytes
    assert saved == pytest.approx(linear, rel=0.01)  # a byte per linear weight
    assert fp8.breakdown.activations_bytes == bf16.breakdown.activations_bytes
    assert fp8.breakdown.optimizer_state_bytes == bf16.breakdown.optimizer_state_bytes


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"weight_quantization": "fp8", "precision": "bf16"}, "set precision fp8"),
        ({"weight_quantization": "nf4"}, "use finetune_qlora for 4-bit"),
        ({"weight_quantization": "int8"}, "in fp8"),
        ({"weight_quantization": "fp8", "mode": "training", "lora": None}, "(fp8) finetune_lora"),
    ],
)
def test_the_api_refuses_a_base_lora_cannot_hold_naming_the_field(
    client: TestClient,  # type: ignore[type-arg]
    workload: dict[str, Any],
    message: str,
) -> None:
    body = _lora()
    body["workload"] = {k: v for k, v in {**body["workload"], **workload}.items() if v is not None}
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    errors = response.json()["errors"]
    assert [e["path"] for e in errors] == ["$.workload.weight_quantization"]
    assert message in errors[0]["reason"]


def test_the_api_and_the_cli_give_the_same_fp8_base(
    client: TestClient,  # type: ignore[type-arg]
) -> None:
    response = client.post("/v1/memory/estimate", json=_lora("fp8"))
    assert response.status_code == 200, response.text
    api = response.json()
    args = [
        "estimate", "--model", "llama-2-70b", "--mode", "finetune_lora", "--seq-len", "8192",
        "--batch-size", "1", "--parallelism-data", "8", "--framework", "megatron",
        "--lora-rank", "16", "--lora-dropout", "0.1", "--lora-target-modules", "q_proj",
        "--lora-target-modules", "k_proj", "--lora-target-modules", "v_proj",
        "--lora-target-modules", "o_proj", "--format", "json",
    ]  # fmt: skip
    result = CliRunner().invoke(main, [*args, "--precision", "fp8", "--quantization", "fp8"])
    assert result.exit_code == 0, result.output
    cli = msgspec.json.decode(result.output)
    assert cli["breakdown"]["weights_bytes"] == api["breakdown"]["weights_bytes"]
    assert cli["device_bytes"] == api["device_bytes"]
    refused = CliRunner().invoke(main, [*args, "--precision", "bf16", "--quantization", "fp8"])
    assert refused.exit_code == 2
    assert "$.workload.weight_quantization" in refused.output


def test_a_plan_file_takes_the_fp8_base(tmp_path: Path) -> None:
    """A plan file's job with its base in fp8 needs a byte less per linear weight as
    written, and one whose precision cannot read fp8 weights is refused naming the
    field (exit 2)."""

    def plan(quantization: str, precision: str = "fp8") -> Any:
        doc = {
            **_lora(quantization, precision),
            "training": {"training_tokens": 100_000_000},
            "layout": "given",
            "targets": {"fits": {"gpu": "mi325x-256gb", "count": 8}},
        }
        return run_plan_file(tmp_path, doc, options=("--format", "json"))

    fp8, bf16 = plan("fp8"), plan("none")
    assert fp8.exit_code == bf16.exit_code == 0, fp8.output
    written = [msgspec.json.decode(r.output)["estimate"]["device_bytes"] for r in (fp8, bf16)]
    assert written[1] - written[0] > 60 * 2**30  # Llama 2 70B's linear weights, a byte each
    refused = plan("fp8", precision="bf16")
    assert refused.exit_code == 2
    assert "$.workload.weight_quantization" in refused.output


def test_the_mlperf_lora_runs_carry_their_fp8_base_and_fit_at_the_centre() -> None:
    """Every MLPerf Llama 2 70B LoRA run keeps its frozen base in fp8 (the yaml's
    ``fp8_params``), and with it the estimate's centre fits every one of them."""
    runs = [r for r in load_all() if r["id"].startswith("mlperf") and "lora" in r["id"]]
    assert len(runs) == 13
    for run in runs:
        workload = run["request"]["workload"]
        assert workload["weight_quantization"] == "fp8", run["id"]
        top = recommend(msgspec.convert(run["request"], RecommendRequest), CATALOG)
        plan = top.recommendations[0]
        assert plan.required_bytes_per_gpu is not None
        centre = _estimate({"model": run["request"]["model"], "workload": workload})
        assert centre.device_bytes <= CATALOG.get(run["gpu"]).usable_memory_bytes, run["id"]
