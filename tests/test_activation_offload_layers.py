"""``workload.activation_offload_layers``: only the first N layers' saved activations wait
in CPU memory (Megatron-core's ``cpu_offloading_num_layers``). One declaration
(``Workload.activation_offload_layers``) reaches the memory estimate, the API, the CLI and
plan files; Megatron-Bridge's Llama 3 70B runs on GB200 and GB300 offload 40 and 20 of
its 80 layers."""

from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest
from tests.helpers import run_plan_file

CATALOG = builtin_catalog()


def _job(layers: int, **workload: Any) -> dict[str, Any]:
    """A Llama-2-7B LoRA step at 4 x 4096 tokens: 2.5 GiB of activations a layer."""
    return {
        "model": {"name": "llama-2-7b"},
        "workload": {
            "mode": "finetune_lora", "sequence_length": 4096, "batch_size": 4,
            "precision": "bf16", "activation_offload_layers": layers, **workload,
        },
    }  # fmt: skip


def _estimate(layers: int, **workload: Any) -> Any:
    body = {**_job(layers, **workload), "gpu": "h100-sxm5-80gb"}
    return estimate(msgspec.convert(body, EstimateRequest), CATALOG)


def test_each_offloaded_layer_leaves_its_activations_off_the_gpu() -> None:
    """At the loss's backward every kept layer is alive: each layer offloaded takes one
    layer's saved activations off the GPU, and none offloaded is no offload at all."""
    none, one, ten = _estimate(0), _estimate(1), _estimate(10)
    assert none.peak_phase == one.peak_phase == ten.peak_phase == "backward (loss)"
    layer = none.breakdown.activations_bytes - one.breakdown.activations_bytes
    assert layer > 2 * 2**30
    assert none.breakdown.activations_bytes - ten.breakdown.activations_bytes == pytest.approx(
        10 * layer, rel=1e-9
    )
    plain = {**_job(0), "gpu": "h100-sxm5-80gb"}
    plain["workload"].pop("activation_offload_layers")
    assert none == estimate(msgspec.convert(plain, EstimateRequest), CATALOG)


def test_every_layer_offloaded_is_activation_offload() -> None:
    """Offloading all 32 layers cannot be asked (Megatron-core refuses as many as the
    model has); one fewer keeps the top layer's activations, which ``activation_offload``
    moves too."""
    most = _estimate(31)
    every = _estimate(0, activation_offload=True)
    assert most.peak_bytes > every.peak_bytes
    assert _estimate(31, activation_offload=True) == most  # the count wins


@pytest.mark.parametrize(
    ("workload", "says"),
    [
        ({"activation_offload_layers": -1}, ">= 0"),
        ({"activation_offload_layers": 32}, "fewer than the model's 32 layers"),
        (
            {"activation_offload_layers": 4, "parallelism": {"pipeline": 2}},
            "not split into pipeline stages",
        ),
        ({"activation_offload_layers": 4, "mode": "inference"}, "applies to training"),
    ],
)
def test_the_api_refuses_what_megatron_refuses_naming_the_field(
    client: TestClient,  # type: ignore[type-arg]
    workload: dict[str, Any],
    says: str,
) -> None:
    body = _job(0)
    body["workload"] = {**body["workload"], **workload}
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    (error,) = response.json()["errors"]
    assert error["path"] == "$.workload.activation_offload_layers"
    assert says in error["reason"]


def test_the_api_and_the_cli_give_the_same_offloaded_estimate(
    client: TestClient,  # type: ignore[type-arg]
) -> None:
    response = client.post("/v1/memory/estimate", json={**_job(16), "gpu": "h100-sxm5-80gb"})
    assert response.status_code == 200, response.text
    args = [
        "estimate", "--model", "llama-2-7b", "--mode", "finetune_lora", "--seq-len", "4096",
        "--batch-size", "4", "--precision", "bf16", "--gpu", "h100-sxm5-80gb",
        "--format", "json",
    ]  # fmt: skip
    result = CliRunner().invoke(main, [*args, "--activation-offload-layers", "16"])
    assert result.exit_code == 0, result.output
    cli = msgspec.json.decode(result.output)
    assert cli["required_bytes"] == response.json()["required_bytes"]
    refused = CliRunner().invoke(main, [*args, "--activation-offload-layers", "-3"])
    assert refused.exit_code == 2
    assert "activation_offload_layers" in refused.output


def test_a_plan_file_fits_the_gpu_with_enough_layers_offloaded(tmp_path: Path) -> None:
    """On an H100 80GB: 16 layers offloaded fit (75 GiB at 95%), 8 do not (100 GiB)."""

    def plan(layers: int) -> int:
        doc = {**_job(layers), "targets": {"fits": {"gpu": "h100-sxm5-80gb"}}}
        return run_plan_file(tmp_path, doc, f"offload-{layers}.yaml").exit_code

    assert plan(16) == 0
    assert plan(8) == 1
    doc = {**_job(-1), "targets": {"fits": {"gpu": "h100-sxm5-80gb"}}}
    refused = run_plan_file(tmp_path, doc, "bad.yaml")
    assert refused.exit_code == 2
    assert "$.workload.activation_offload_layers" in refused.output
