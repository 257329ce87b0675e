"""The estimate's newer request fields, each declared once in core/memory/schema.py:
refused with a 422 naming it, a CLI flag, in the OpenAPI document and (workload
fields) in the plan file's schema."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from litestar.testing import TestClient

from gpuplan.cli import main

ROOT = Path(__file__).resolve().parent.parent
BASE = {"model": {"name": "llama-2-7b"}, "workload": {"mode": "inference", "sequence_length": 8}}

# (JSONPath, a refused value, the CLI flag, a workload field?)
FIELDS = [
    ("$.cuda_version", "12", "--cuda-version", False),
    ("$.module_loading", "sometimes", "--module-loading", False),
    ("$.workload.kv_cache_layout", "paged", "--kv-cache-layout", True),
    ("$.workload.weight_quantization", "fp3", "--weight-quantization", True),
    ("$.workload.double_quantization", "yes", "--double-quantization", True),
    ("$.workload.quantize_lm_head", 3, "--quantize-lm-head", True),
]


@pytest.mark.parametrize(
    ("workload", "path"),
    [
        ({"mode": "inference", "weight_quantization": "int8", "double_quantization": True},
         "$.workload.double_quantization"),
        ({"mode": "inference", "quantize_lm_head": True}, "$.workload.quantize_lm_head"),
        ({"mode": "finetune_qlora", "weight_quantization": "int4"}, "$.workload.weight_quantization"),
        ({"mode": "training", "weight_quantization": "nf4"}, "$.workload.weight_quantization"),
    ],
)  # fmt: skip
def test_rules_across_fields_name_the_field(
    client: TestClient,  # type: ignore[type-arg]
    workload: dict[str, object],
    path: str,
) -> None:
    body = {"model": {"name": "llama-2-7b"}, "workload": {"sequence_length": 8, **workload}}
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == 422, response.text
    assert path in [e["path"] for e in response.json()["errors"]]


def _with(path: str, value: object) -> dict[str, object]:
    body: dict[str, object] = json.loads(json.dumps(BASE))
    parts = path.removeprefix("$.").split(".")
    node: dict[str, object] = body
    for part in parts[:-1]:
        node = node.setdefault(part, {})  # type: ignore[assignment]
    node[parts[-1]] = value
    return body


@pytest.mark.parametrize(("path", "bad", "flag", "workload"), FIELDS)
def test_a_bad_value_is_422_naming_the_field(
    client: TestClient,  # type: ignore[type-arg]
    path: str,
    bad: object,
    flag: str,
    workload: bool,
) -> None:
    response = client.post("/v1/memory/estimate", json=_with(path, bad))
    assert response.status_code == 422, response.text
    assert path in [e["path"] for e in response.json()["errors"]]


@pytest.mark.parametrize(("path", "bad", "flag", "workload"), FIELDS)
def test_the_field_is_a_flag_and_in_the_documents(
    path: str, bad: object, flag: str, workload: bool
) -> None:
    name = path.rsplit(".", 1)[-1]
    assert flag in CliRunner().invoke(main, ["estimate", "--help"]).output
    assert f"{name}:" in (ROOT / "api" / "openapi.yaml").read_text(encoding="utf-8")
    plan_schema = (ROOT / "api" / "plan.schema.json").read_text(encoding="utf-8")
    assert (f'"{name}"' in plan_schema) is workload
