"""``training.evaluation``: the evaluations a training run holds, each a forward pass over
its tokens. One declaration (``Evaluation`` in the recommendation schema) reaches the
API, the CLI, plan files and OpenAPI; the DGX Cloud Hugging Face LoRA runs time them
inside Trainer's ``train_samples_per_second``."""

from pathlib import Path
from typing import Any

import msgspec
import pytest
from bench.published.runs import load_all, predict
from click.testing import CliRunner
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.recommend import RecommendRequest, recommend
from tests.helpers import run_plan_file

CATALOG = builtin_catalog()


def _job(evaluation: dict[str, int] | None = None, **workload: Any) -> dict[str, Any]:
    """A Llama-2-7B LoRA fine-tune on 8 H100s, its layout given."""
    training: dict[str, Any] = {"training_tokens": 200_000_000}
    if evaluation is not None:
        training["evaluation"] = evaluation
    return {
        "model": {"name": "llama-2-7b"},
        "workload": {
            "mode": "finetune_lora", "sequence_length": 2048, "batch_size": 2,
            "precision": "bf16", "parallelism": {"data": 8, "zero_stage": 3}, **workload,
        },
        "training": training,
        "layout": "given",
        "constraints": {"include": ["h100-sxm5-80gb"], "max_gpus_per_job": 8},
    }  # fmt: skip


def _top(body: dict[str, Any]) -> Any:
    response = recommend(msgspec.convert(body, RecommendRequest), CATALOG)
    return response.recommendations[0]


def test_evaluations_add_their_forward_passes_to_the_time_not_the_rate() -> None:
    """The training steps' rate is the same; the time grows by the evaluations, linearly
    in their tokens and count, and an evaluation token costs a forward: more than a
    quarter and less than half of a training token (LoRA's step is 2N forward and 2N
    backward, no weight gradients of the base)."""
    plain = _top(_job())
    one = _top(_job({"tokens": 10_000_000}))
    three = _top(_job({"tokens": 10_000_000, "count": 3}))
    double = _top(_job({"tokens": 20_000_000, "count": 3}))
    assert plain.evaluation_hours is None
    assert one.throughput == plain.throughput == three.throughput
    assert one.time_hours == pytest.approx(plain.time_hours + one.evaluation_hours, rel=1e-12)
    assert three.evaluation_hours == pytest.approx(3 * one.evaluation_hours, rel=1e-12)
    assert double.evaluation_hours == pytest.approx(2 * three.evaluation_hours, rel=1e-12)
    per_eval_token = one.evaluation_hours / 10_000_000
    per_train_token = plain.time_hours / 200_000_000
    assert 0.25 < per_eval_token / per_train_token < 0.5
    # Cost and energy are the time's, the evaluations' with it.
    assert one.cost_usd == pytest.approx(plain.cost_usd * one.time_hours / plain.time_hours)
    assert one.energy_kwh > plain.energy_kwh
    assert one.intervals["time_hours"].high > plain.intervals["time_hours"].high


def test_full_checkpointing_recomputes_in_training_not_in_evaluation() -> None:
    """An evaluation runs no backward, so no recomputation: checkpointing slows the
    training steps and leaves an evaluation's time as it was."""
    none = _top(_job({"tokens": 10_000_000}))
    full = _top(_job({"tokens": 10_000_000}, gradient_checkpointing="full"))
    assert full.throughput.value < none.throughput.value
    assert full.evaluation_hours == pytest.approx(none.evaluation_hours, rel=1e-9)


@pytest.mark.parametrize(
    ("training", "path"),
    [
        ({"evaluation": {"tokens": 0}}, "$.training.evaluation.tokens"),
        ({"evaluation": {"tokens": 10, "count": 0}}, "$.training.evaluation.count"),
        ({"evaluation": {"count": 2}}, "$.training.evaluation.tokens"),
        ({"evaluation": {"tokens": 10, "every": 5}}, "$.training.evaluation.every"),
    ],
)
def test_the_api_refuses_a_bad_evaluation_naming_the_field(
    client: TestClient,  # type: ignore[type-arg]
    training: dict[str, Any],
    path: str,
) -> None:
    body = _job()
    body["training"] = {**body["training"], **training}
    response = client.post("/v1/recommendations", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    (error,) = response.json()["errors"]
    assert error["path"] == path


def test_the_api_and_the_cli_give_the_same_evaluation(
    client: TestClient,  # type: ignore[type-arg]
) -> None:
    response = client.post("/v1/recommendations", json=_job({"tokens": 10_000_000, "count": 2}))
    assert response.status_code == 200, response.text
    api = response.json()["recommendations"][0]
    assert api["evaluation_hours"] > 0
    args = [
        "recommend", "--model", "llama-2-7b", "--mode", "finetune_lora", "--seq-len", "2048",
        "--batch-size", "2", "--precision", "bf16", "--parallelism-data", "8",
        "--zero-stage", "3", "--layout", "given", "--include", "h100-sxm5-80gb",
        "--max-gpus", "8", "--tokens", "2e8", "--format", "json",
    ]  # fmt: skip
    result = CliRunner().invoke(
        main, [*args, "--evaluation-tokens", "1e7", "--evaluation-count", "2"]
    )
    assert result.exit_code == 0, result.output
    cli = msgspec.json.decode(result.output)["recommendations"][0]
    assert cli["evaluation_hours"] == api["evaluation_hours"]
    assert cli["time_hours"] == api["time_hours"]
    refused = CliRunner().invoke(main, [*args, "--evaluation-tokens", "-5"])
    assert refused.exit_code == 2
    assert "$.training.evaluation.tokens" in refused.output


def test_a_plan_file_checks_the_time_with_its_evaluations(tmp_path: Path) -> None:
    """A time target between the training steps' time and the time with the
    evaluations passes without them and fails with them."""
    plain = _top(_job())
    heavy = _top(_job({"tokens": 100_000_000, "count": 4}))
    target = (plain.time_hours + heavy.time_hours) / 2

    def plan(evaluation: dict[str, int] | None) -> int:
        doc = {**_job(evaluation), "targets": {"max_time_hours": target}}
        doc["targets"]["fits"] = {"gpu": "h100-sxm5-80gb", "count": 8}
        return run_plan_file(tmp_path, doc).exit_code

    assert plan(None) == 0
    assert plan({"tokens": 100_000_000, "count": 4}) == 1


def test_the_dgx_cloud_runs_are_predicted_with_their_evaluations() -> None:
    """Trainer's ``train_samples_per_second`` times the evaluations too: the DGX Cloud
    LoRA runs are predicted over the whole loop, slower than their steps alone."""
    runs = {r["id"]: r for r in load_all() if r["id"].startswith("dgxc2501-hf-")}
    assert len(runs) == 4
    for run in runs.values():
        assert run["request"]["training"]["evaluation"]["count"] >= 1
        steps_only = {**run, "request": {**run["request"], "training": {"training_tokens": 10**9}}}
        with_evaluations, without = predict(run), predict(steps_only)
        assert with_evaluations is not None
        assert without is not None
        assert with_evaluations < without


def test_a_pipeline_fills_once_a_step_in_an_evaluation_too() -> None:
    """A forward-only pipeline of p stages idles (p - 1) / v micro-batch forwards a
    step: an evaluation token costs less where a step holds more micro-batches."""

    def per_token(accumulation: int) -> float:
        body = _job({"tokens": 10_000_000}, mode="training", batch_size=1)
        body["workload"]["gradient_accumulation_steps"] = accumulation
        body["workload"]["parallelism"] = {"pipeline": 4, "data": 1}
        body["constraints"]["max_gpus_per_job"] = 4
        top = _top(body)
        assert top.fits, top.reasons
        return float(top.evaluation_hours) / 10_000_000

    one, eight = per_token(1), per_token(8)
    # (1 + 3) / 1 forwards a micro-batch's tokens against (8 + 3) / 8.
    assert one / eight == pytest.approx(4 / (11 / 8), rel=0.02)
