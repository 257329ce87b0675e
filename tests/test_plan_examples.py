"""examples/: every plan file validates against api/plan.schema.json and exits as expected;
the committed schema is the one the code generates."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from gpuplan.cli import main
from gpuplan.cli.commands.plan import schema_text

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "api" / "plan.schema.json"

EXPECTED = {
    "resnet50-classification.yaml": 0,
    "yolov5-detection.yaml": 0,
    "llm-finetune.yaml": 0,
    "llm-finetune-one-gpu.yaml": 1,
    "gpt3-175b-inference.yaml": 0,
    "stable-diffusion-rtx4090.yaml": 0,
}


def test_committed_plan_schema_matches_the_code() -> None:
    assert SCHEMA.read_text(encoding="utf-8") == schema_text(), (
        "api/plan.schema.json is stale: run `gpuplan plan-schema -o api/plan.schema.json`"
    )


def test_every_example_is_listed() -> None:
    assert {p.name for p in (ROOT / "examples").glob("*.yaml")} == set(EXPECTED)


@pytest.mark.parametrize(("name", "code"), sorted(EXPECTED.items()))
def test_example(name: str, code: int) -> None:
    path = ROOT / "examples" / name
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.validate(yaml.safe_load(path.read_text(encoding="utf-8")), schema)
    result = CliRunner().invoke(main, ["plan", str(path), "--format", "markdown"])
    assert result.exit_code == code, result.output
    assert result.output.startswith("### ✅" if code == 0 else "### ❌")


def test_the_schema_refuses_what_the_api_refuses() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    doc = yaml.safe_load((ROOT / "examples" / "llm-finetune.yaml").read_text(encoding="utf-8"))
    doc["targets"]["fit"] = doc["targets"].pop("fits")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)
