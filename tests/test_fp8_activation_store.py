"""``activation_func_fp8_input_store``: Megatron-core's fused SwiGLU keeps its input for
the backward in fp8 (megatron/core/fusions/fused_bias_swiglu.py, ``SwiGLUFunction``:
``input.to(torch.float8_e4m3fn) if fp8_input_store``), a byte per element of the first
MLP linear's output instead of two. MLPerf's LoRA submissions turn it on
(``FP8_ACTIVATION=True``). One declaration reaches the API, the CLI, plan files and
OpenAPI; it is Megatron's, for training."""

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


def _job(model: str = "llama-2-7b", store: bool = False, **workload: Any) -> dict[str, Any]:
    return {
        "model": {"name": model},
        "workload": {
            "mode": "training", "sequence_length": 4096, "batch_size": 1, "precision": "fp8",
            "parallelism": {"framework": "megatron"},
            "activation_func_fp8_input_store": store, **workload,
        },
    }  # fmt: skip


def _activations(body: dict[str, Any]) -> int:
    response = estimate(msgspec.convert(body, EstimateRequest), CATALOG)
    return response.breakdown.activations_bytes


def test_the_fused_swiglu_keeps_its_input_in_one_byte() -> None:
    """Llama 2 7B: 32 layers, 11,008-wide gate and up, 4,096 tokens: fc1's output is
    2 x 11,008 elements a token, a byte less each."""
    saved = _activations(_job()) - _activations(_job(store=True))
    assert saved == 32 * 4096 * 2 * 11_008


def test_the_experts_fused_swiglu_keeps_less_too() -> None:
    layout = {"framework": "megatron", "data": 8, "expert": 8}
    plain = _activations(_job("mixtral-8x7b", parallelism=layout))
    stored = _activations(_job("mixtral-8x7b", store=True, parallelism=layout))
    assert stored < plain


@pytest.mark.parametrize(
    "workload",
    [
        {"parallelism": {"framework": "fsdp2"}},
        {"mode": "inference"},
    ],
)
def test_the_api_refuses_the_store_outside_megatron_training(
    client: TestClient,  # type: ignore[type-arg]
    workload: dict[str, Any],
) -> None:
    body = _job(store=True)
    body["workload"] = {**body["workload"], **workload}
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    paths = [e["path"] for e in response.json()["errors"]]
    assert "$.workload.activation_func_fp8_input_store" in paths


def test_with_no_framework_named_an_estimate_says_the_store_did_not_count() -> None:
    """No framework named: a plain estimate is DeepSpeed's under fp8 (its conventions),
    whose activation is not Megatron's fused one; the store counts nothing and the
    answer says so. A recommendation's search applies it to its Megatron layouts."""
    body = _job(store=True)
    body["workload"]["parallelism"] = {}
    response = estimate(msgspec.convert(body, EstimateRequest), CATALOG)
    plain = _job()
    plain["workload"]["parallelism"] = {}
    assert response.breakdown.activations_bytes == _activations(plain)
    assert any("counts under framework megatron only" in a for a in response.assumptions)


def test_the_api_the_cli_and_a_plan_file_take_the_store(
    client: TestClient,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    response = client.post("/v1/memory/estimate", json=_job(store=True))
    assert response.status_code == 200, response.text
    args = [
        "estimate", "--model", "llama-2-7b", "--mode", "training", "--seq-len", "4096",
        "--batch-size", "1", "--precision", "fp8", "--framework", "megatron",
        "--format", "json",
    ]  # fmt: skip
    result = CliRunner().invoke(main, [*args, "--activation-func-fp8-input-store"])
    assert result.exit_code == 0, result.output
    cli = msgspec.json.decode(result.output)
    assert (
        cli["breakdown"]["activations_bytes"] == response.json()["breakdown"]["activations_bytes"]
    )
    bad = {
        **_job(store=True),
        "training": {"training_tokens": 10**8},
        "targets": {"fits": {"gpu": "h100-sxm5-80gb", "count": 8}},
    }
    bad["workload"]["parallelism"] = {"framework": "ddp"}
    refused = run_plan_file(tmp_path, bad)
    assert refused.exit_code == 2
    assert "$.workload.activation_func_fp8_input_store" in refused.output


def test_the_mlperf_runs_that_set_it_carry_it_and_their_amd_layouts_fit() -> None:
    """Seven MLPerf LoRA submissions set ``FP8_ACTIVATION=True`` (NVIDIA's H200 runs of
    v4.0 and v4.1, AMD's and MangoBoost's); with it their MI300X and MI325X layouts fit
    at 95% confidence, as the runs did."""
    runs = [
        r for r in load_all() if r["request"]["workload"].get("activation_func_fp8_input_store")
    ]
    assert len(runs) == 7
    for run in runs:
        if not run["gpu"].startswith("mi3"):
            continue
        top = recommend(msgspec.convert(run["request"], RecommendRequest), CATALOG)
        assert top.recommendations[0].fits, run["id"]
