"""Errors that help: every offending field at once, the closest name, numbers as meant.

The same conversion serves the API's bodies, the CLI's files and flags, and plan files,
so each behaviour is checked through the core and through one adapter of each kind.
"""

from pathlib import Path

import pytest
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.config.documents import read_document
from gpuplan.core.ci import CiPlan
from gpuplan.core.convert import closest, convert
from gpuplan.core.errors import InvalidRequest
from gpuplan.core.memory.schema import EstimateRequest
from gpuplan.core.recommend.schema import RecommendRequest

THREE_MISTAKES = {
    "model": {"name": "llama-2-7b"},
    "workload": {"mode": "trainin", "batch_size": 0, "quantization": "int8"},
}


def _errors(document: object, type_: type) -> dict[str, str]:
    with pytest.raises(InvalidRequest) as info:
        convert(document, type_)
    return dict(info.value.errors)


def test_every_offending_field_is_reported() -> None:
    errors = _errors(THREE_MISTAKES, EstimateRequest)
    assert set(errors) == {
        "$.workload.mode",
        "$.workload.batch_size",
        "$.workload.quantization",
    }
    assert "did you mean `training`" in errors["$.workload.mode"]
    assert "one of: training, finetune_lora" in errors["$.workload.mode"]
    assert ">= 1" in errors["$.workload.batch_size"]
    assert "did you mean `weight_quantization`" in errors["$.workload.quantization"]


def test_nested_lists_and_missing_fields_are_named() -> None:
    errors = _errors(
        {"workload": {"mode": "training", "lora": {"target_modules": ["q", 3]}}}, EstimateRequest
    )
    assert errors == {
        "$.model": "Object missing required field `model`",
        "$.workload.lora.target_modules[1]": "Expected `str`, got `int`",
    }


def test_a_misspelt_target_gets_the_closest_name() -> None:
    plan = {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "training", "sequence_length": 2048},
        "targets": {"fit": {"gpu": "l4"}},
    }
    errors = _errors(plan, CiPlan)
    assert errors == {"$.targets.fit": "Object contains unknown field `fit` (did you mean `fits`?)"}


@pytest.mark.parametrize("written", [2e8, 1.5e9 / 7.5])
def test_a_whole_number_with_an_exponent_is_an_integer(written: float) -> None:
    body = {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "training", "sequence_length": 2048},
    }
    request = convert({**body, "training": {"training_tokens": written}}, RecommendRequest)
    assert request.training is not None
    assert request.training.training_tokens == 200_000_000
    assert isinstance(request.training.training_tokens, int)


def test_a_fraction_is_not_an_integer() -> None:
    body = {
        "model": {"name": "x"},
        "workload": {"mode": "training"},
        "training": {"training_tokens": 2.5},
    }
    assert _errors(body, RecommendRequest) == {
        "$.training.training_tokens": "Expected `int | null`, got `float`"
    }


def test_yaml_reads_exponents_as_numbers(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("a: 2e8\nb: 1.5E-3\nc: 12\nd: e5\ne: 1_000\n")
    assert read_document(path) == {"a": 2e8, "b": 1.5e-3, "c": 12, "d": "e5", "e": 1000}


def test_closest_names() -> None:
    assert closest("fit", ["fits", "cost"]) == "fits"
    assert (
        closest("quantization", ["weight_quantization", "kv_cache_dtype"]) == "weight_quantization"
    )
    assert closest("zzz", ["fits", "cost"]) is None


def test_the_api_names_every_field(client: TestClient[Litestar]) -> None:
    response = client.post("/v1/memory/estimate", json=THREE_MISTAKES)
    assert response.status_code == 422
    problem = response.json()
    assert {e["path"] for e in problem["errors"]} == set(_errors(THREE_MISTAKES, EstimateRequest))
    assert problem["detail"].endswith("(and 2 more)")


def test_the_api_takes_2e8_where_an_integer_is_meant(client: TestClient[Litestar]) -> None:
    body = (
        b'{"model":{"name":"llama-2-7b"},"workload":{"mode":"training","sequence_length":2048},'
        b'"training":{"training_tokens":2e8},"limit":1}'
    )
    response = client.post(
        "/v1/recommendations", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text


def test_the_cli_names_every_field_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "model: {name: llama-2-7b}\nworkload: {mode: trainin, batch_size: 0, quantization: int8}\n"
    )
    result = CliRunner().invoke(main, ["estimate", str(path)])
    assert result.exit_code == 2
    for field in ("$.workload.mode", "$.workload.batch_size", "$.workload.quantization"):
        assert field in result.stderr
    assert f"invalid input in {path}" in result.stderr


def test_flags_are_validated_by_the_schema_with_their_paths() -> None:
    result = CliRunner().invoke(
        main, ["estimate", "--model", "llama-2-7b", "--batch-size", "0", "--seq-len", "2e3"]
    )
    assert result.exit_code == 2
    assert "$.workload.batch_size: Expected `int` >= 1" in result.stderr


def test_tokens_flag_takes_an_exponent() -> None:
    args = ["recommend", "--model", "llama-2-7b", "--mode", "training", "--seq-len", "2048"]
    result = CliRunner().invoke(
        main, [*args, "--tokens", "2e8", "--limit", "1", "--format", "json"]
    )
    assert result.exit_code == 0, result.output


def test_a_plan_file_given_to_recommend_is_named_as_such() -> None:
    result = CliRunner().invoke(main, ["recommend", "-f", "examples/llm-finetune.yaml"])
    assert result.exit_code == 2
    assert "$.targets: Object contains unknown field `targets`" in result.stderr
    assert "gpuplan plan FILE" in result.stderr


def test_local_commands_ignore_server_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # The variables docs/ci.md sets for `gpuplan plan --api`, and a server-only setting.
    monkeypatch.setenv("GPUPLAN_API_TOKEN", "a-token-for-the-server-only")
    monkeypatch.setenv("GPUPLAN_PORT", "abc")
    result = CliRunner().invoke(
        main, ["estimate", "--model", "llama-2-7b", "--mode", "inference", "--seq-len", "512"]
    )
    assert result.exit_code == 0, result.output
