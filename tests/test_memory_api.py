"""POST /v1/memory/estimate, GET /v1/models, and `gpuplan estimate`: the same schema."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli import main
from tests.helpers import TINY_LLAMA

LLAMA_INFERENCE = {
    "model": {"name": "llama-2-7b"},
    "workload": {"mode": "inference", "sequence_length": 4096, "precision": "bf16"},
    "gpu": "NVIDIA L4",
}


def test_estimate_answers_with_breakdown_and_fit(client: TestClient[Litestar]) -> None:
    response = client.post("/v1/memory/estimate", json=LLAMA_INFERENCE)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["parameters"] == 6_738_415_616
    assert body["breakdown"]["kv_cache_bytes"] == 2 << 30
    tensors = body["peak_bytes"] - body["breakdown"]["workspace_bytes"]
    assert body["total_bytes"] == tensors + body["breakdown"]["framework_overhead_bytes"]
    assert body["fit"]["gpu"] == "l4-24gb"
    assert body["fit"]["fits"] is True
    assert body["method"] == "analytic"
    assert body["assumptions"]


def test_same_input_gives_byte_identical_json(client: TestClient[Litestar]) -> None:
    first = client.post("/v1/memory/estimate", json=LLAMA_INFERENCE).content
    assert client.post("/v1/memory/estimate", json=LLAMA_INFERENCE).content == first


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"model": {"name": "llama-2-7b"}, "workload": {"mode": "training", "batch_size": 0}}, "$.workload.batch_size"),
        ({"model": {"name": "llama-2-7b"}, "workload": {"mode": "training", "batch_size": 10**18}}, "$.workload.batch_size"),
        ({"model": {"name": "llama-2-7b"}, "workload": {"mode": "dreaming"}}, "$.workload.mode"),
        ({"model": {"name": "llama-2-7b"}, "workload": {"mode": "training", "sequence_length": 10**12}}, "$.workload.sequence_length"),
        ({"model": {"parameters": 10**30}, "workload": {"mode": "training"}}, "$.model.parameters"),
        ({"model": {"name": "nope"}, "workload": {"mode": "training", "sequence_length": 8}}, "$.model.name"),
        ({"model": {"hf_config": {"model_type": "llama"}}, "workload": {"mode": "training", "sequence_length": 8}}, "$.model.hf_config.hidden_size"),
        ({"model": {"hf_config": {**TINY_LLAMA, "hidden_act": ["silu"]}}, "workload": {"mode": "training", "sequence_length": 8}}, "$.model.hf_config.hidden_act"),
        ({"model": {"name": "llama-2-7b"}, "workload": {"mode": "training", "sequence_length": 8}, "gpu": "nope"}, "$.gpu"),
        ({"workload": {"mode": "training"}}, "$.model"),
        ({"model": {"name": "llama-2-7b"}, "workload": {"mode": "training", "batch": 8}}, "$.workload.batch"),
    ],
)  # fmt: skip
def test_bad_input_is_422_naming_the_field(
    client: TestClient[Litestar],
    body: dict[str, object],
    path: str,
) -> None:
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert path in [e["path"] for e in problem["errors"]], problem
    assert problem["type"] == "urn:gpuplan:problem:validation"


def test_models_lists_presets(client: TestClient[Litestar]) -> None:
    body = client.get("/v1/models").json()
    assert body["count"] == len(body["models"]) >= 22
    by_name = {m["name"]: m for m in body["models"]}
    assert by_name["llama-2-7b"]["parameters"] == 6_738_415_616
    assert by_name["resnet-50"]["kind"] == "vision"
    assert all(m["source"] for m in body["models"])


def test_cli_flags_and_file_give_the_api_answer(
    client: TestClient[Litestar],
    tmp_path: Path,
) -> None:
    api = client.post("/v1/memory/estimate", json=LLAMA_INFERENCE).json()
    plan = tmp_path / "job.yaml"
    plan.write_text(
        "model: {name: llama-2-7b}\n"
        "workload: {mode: inference, sequence_length: 4096, precision: bf16}\n"
        "gpu: NVIDIA L4\n"
    )
    runner = CliRunner()
    from_file = runner.invoke(main, ["estimate", str(plan), "--format", "json"])
    assert from_file.exit_code == 0, from_file.output
    assert json.loads(from_file.output) == api
    flags = runner.invoke(
        main,
        ["estimate", "--model", "llama-2-7b", "--mode", "inference", "--sequence-length", "4096",
         "--precision", "bf16", "--gpu", "NVIDIA L4", "--format", "json"],
    )  # fmt: skip
    assert flags.exit_code == 0, flags.output
    assert json.loads(flags.output) == api
    table = runner.invoke(main, ["estimate", str(plan)])
    assert "GiB" in table.output
    assert "l4-24gb: fits" in table.output


def test_cli_invalid_input_exits_2_naming_the_field(tmp_path: Path) -> None:
    plan = tmp_path / "job.json"
    plan.write_text(
        json.dumps(
            {"model": {"name": "llama-2-7b"}, "workload": {"mode": "training", "batch_size": -1}}
        )
    )
    result = CliRunner().invoke(main, ["estimate", str(plan)])
    assert result.exit_code == 2
    assert "$.workload.batch_size" in result.output
    semantic = CliRunner().invoke(
        main,
        ["estimate", "--model", "llama-2-7b", "--sequence-length", "8", "--tensor-parallel", "3"],
    )
    assert semantic.exit_code == 2
    assert "$.workload.parallelism.tensor" in semantic.output
