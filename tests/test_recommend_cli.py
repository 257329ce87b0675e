"""gpuplan recommend: flags, a request file with flags over it, and refused input."""

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from gpuplan.cli import main


def test_flags_print_a_ranked_table() -> None:
    result = CliRunner().invoke(
        main,
        ["recommend", "--model", "llama-2-7b", "--mode", "inference", "--seq-len", "3840",
         "--output-tokens", "256", "--objective", "cheapest", "--limit", "5"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "scenario: medium_training" in result.output
    lines = [line for line in result.output.splitlines() if line.strip().startswith(("1 ", "2 "))]
    assert len(lines) == 2


def test_file_with_flags_over_it_as_json(tmp_path: Path) -> None:
    request = {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "training", "sequence_length": 2048},
        "training": {"training_tokens": 100_000_000},
        "objective": "cheapest",
        "constraints": {"include": ["h100-sxm5-80gb", "a100-sxm4-80gb"]},
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(request))
    result = CliRunner().invoke(
        main, ["recommend", "-f", str(path), "--objective", "fastest", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["objective"] == "fastest"
    assert {r["gpu"] for r in body["recommendations"]} == {"h100-sxm5-80gb", "a100-sxm4-80gb"}


def test_refused_input_names_the_field(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["recommend", "--model", "llama-2-7b", "--mode", "training", "--seq-len", "2048"]
    )
    assert result.exit_code == 2
    assert "$.training" in result.output
    result = CliRunner().invoke(
        main, ["recommend", "--model", "llama-2-7b", "--mode", "inference", "--batch-size", "0"]
    )
    assert result.exit_code == 2
    assert "batch_size" in result.output


def test_help() -> None:
    result = CliRunner().invoke(main, ["recommend", "--help"])
    assert result.exit_code == 0
    assert "--objective" in result.output
