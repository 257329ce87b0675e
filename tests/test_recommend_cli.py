"""gpuplan recommend: flags, a request file with flags over it, and refused input."""

import json
import re
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


SERVING = ["recommend", "--model", "llama-2-7b", "--mode", "inference", "--seq-len", "2048",
           "--rps", "1"]  # fmt: skip


def _rows(output: str) -> list[str]:
    """The GPU of each ranked row of the table, in order."""
    return [m[1] for line in output.splitlines() if (m := re.match(r"^\s*\d+ (\S+) ", line))]


def test_the_table_shows_the_top_10_and_says_how_many_more() -> None:
    answer = json.loads(CliRunner().invoke(main, [*SERVING, "--format", "json"]).output)
    ranked = [c["gpu"] for c in answer["recommendations"]]
    assert len(ranked) > 10  # JSON, for scripts, is the whole answer
    result = CliRunner().invoke(main, SERVING)
    assert result.exit_code == 0, result.output
    assert _rows(result.output) == ranked[:10]
    assert f"    ... {len(ranked) - 10} more candidates: --all prints them" in result.output


def test_all_prints_every_candidate_and_names_why_it_has_no_score() -> None:
    answer = json.loads(CliRunner().invoke(main, [*SERVING, "--format", "json"]).output)
    result = CliRunner().invoke(main, [*SERVING, "--all"])
    assert result.exit_code == 0, result.output
    assert _rows(result.output) == [c["gpu"] for c in answer["recommendations"]]
    assert "more candidates" not in result.output
    rows = {line.split()[1]: line for line in result.output.splitlines() if _rows(line)}
    unpriced = [
        c["gpu"]
        for c in answer["recommendations"]
        if c["fits"] and not c["breaches"] and c["cost_usd"] is None
    ]
    assert unpriced  # the catalog prices some GPUs only
    for gpu in unpriced:
        assert rows[gpu].endswith(" - (no price)"), rows[gpu]
    # --all changes the table only: the machine formats are the answer either way.
    as_json = CliRunner().invoke(main, [*SERVING, "--all", "--format", "json"]).output
    assert json.loads(as_json) == answer


def test_a_limit_under_10_leaves_no_more_line() -> None:
    result = CliRunner().invoke(main, [*SERVING, "--limit", "3"])
    assert len(_rows(result.output)) == 3
    assert "more candidates" not in result.output
