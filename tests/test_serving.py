"""Serving as continuous-batching servers serve: concurrency from the KV cache, the
server's cap and the latency targets; replicas for the rate; what a plan that misses a
constraint says; and the new request fields through the API, the CLI and /v1/plan."""

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.recommend.engine import engine_spec
from gpuplan.core.recommend.schema import Candidate, Latency, RecommendResponse
from tests.helpers import problem_at, request_body

CATALOG = builtin_catalog()

SEVENTY_B: dict[str, Any] = {
    "model": {"name": "llama-3.1-70b"},
    "workload": {"mode": "inference", "sequence_length": 2048},
    "inference": {"prompt_tokens": 2048, "output_tokens": 512, "requests_per_second": 5},
    "objective": "cheapest",
}
"""The issue's question: Llama 3.1 70B, 2048 in, 512 out, 5 requests/s, cheapest."""


def ask(body: dict[str, Any]) -> RecommendResponse:
    return recommend(msgspec.convert(body, RecommendRequest), CATALOG)


def on(body: dict[str, Any], gpu: str, **constraints: Any) -> Candidate:
    answer = ask({**body, "constraints": {"include": [gpu], **constraints}})
    return answer.recommendations[0]


def latency(c: Candidate) -> Latency:
    assert c.latency is not None
    return c.latency


def test_the_70b_question_answers_a_few_nodes_at_a_real_batch() -> None:
    answer = ask(SEVENTY_B)
    assert all(c.fits and (c.score or 0) > 0 for c in answer.recommendations[:3])
    hbm = ("a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200-180gb")
    top = [answer.recommendations[0]] + [c for c in answer.recommendations if c.gpu in hbm]
    for c in top:
        lat = latency(c)
        assert c.count <= 24  # at most three 8-GPU nodes
        assert lat.concurrency > 32  # continuous batching, not batch 1
        assert c.throughput is not None
        assert c.throughput.value >= 5 * 512  # the rate's output tokens per second
        assert lat.requests_per_s * c.count / c.layout.tensor >= 5  # type: ignore[union-attr]
        assert 0 < lat.time_to_first_token_s < 2
        assert 0 < lat.time_per_output_token_s < 0.5
    a100 = on(SEVENTY_B, "a100-sxm4-80gb")
    assert a100.count <= 16


def test_the_kv_cache_left_after_the_weights_sets_the_concurrency() -> None:
    four = {
        **SEVENTY_B,
        "workload": {**SEVENTY_B["workload"], "parallelism": {"tensor": 4, "data": 3}},
        "layout": "given",
    }
    c = on(four, "a100-sxm4-80gb")
    lat = latency(c)
    assert lat.limited_by == "kv_cache"
    assert lat.concurrency == lat.kv_cache_sequences
    # The server fills its share of the GPU with cache, no more.
    share = engine_spec("vllm").memory_fraction
    assert share is not None
    assert c.required_bytes_per_gpu <= share * c.usable_memory_bytes
    assert c.required_bytes_per_gpu > 0.8 * share * c.usable_memory_bytes


def test_the_servers_sequence_cap_depends_on_the_gpu_as_vllms_does() -> None:
    small: dict[str, Any] = {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 256},
        "inference": {"prompt_tokens": 256, "output_tokens": 128},
    }
    assert latency(on(small, "h100-sxm5-80gb")).limited_by == "max_concurrency"
    assert latency(on(small, "h100-sxm5-80gb")).concurrency == 1024
    assert latency(on(small, "a100-sxm4-80gb")).concurrency == 256  # vLLM excludes A100
    capped = {**small, "inference": {**small["inference"], "max_concurrency": 24}}
    assert latency(on(capped, "h100-sxm5-80gb")).concurrency == 24


def test_more_sequences_in_flight_trade_latency_for_throughput() -> None:
    runs = []
    for n in (1, 8, 64):
        body = {**SEVENTY_B, "inference": {**SEVENTY_B["inference"], "max_concurrency": n}}
        # On one replica shape, given (TP 4, one replica): the cheapest plan's degree may
        # change with the concurrency, and a wider replica has a shorter step.
        body["workload"] = {**SEVENTY_B["workload"], "parallelism": {"tensor": 4}}
        body["layout"] = "given"
        c = on(body, "h100-sxm5-80gb")
        assert c.layout is not None
        assert c.layout.tensor == 4
        runs.append(latency(c))
    tpot = [r.time_per_output_token_s for r in runs]
    tokens = [r.output_tokens_per_s for r in runs]
    assert tpot == sorted(tpot)
    assert tpot[0] < tpot[-1]
    assert tokens == sorted(tokens)
    assert tokens[-1] > 10 * tokens[0]


def test_latency_targets_bound_the_concurrency() -> None:
    free = latency(on(SEVENTY_B, "h100-sxm5-80gb"))
    target = free.time_per_output_token_s / 2
    body = {
        **SEVENTY_B,
        "inference": {**SEVENTY_B["inference"], "max_time_per_output_token_s": target},
    }
    c = on(body, "h100-sxm5-80gb")
    lat = latency(c)
    assert c.fits
    assert (c.score or 0) > 0
    assert lat.limited_by == "max_time_per_output_token_s"
    assert lat.time_per_output_token_s <= target
    assert lat.concurrency < free.concurrency
    # One more sequence would miss the target: the largest concurrency that keeps it.
    more = {**body["inference"], "max_concurrency": lat.concurrency + 1}
    over = latency(on({**body, "inference": more}, "h100-sxm5-80gb"))
    assert over.concurrency == lat.concurrency


def test_a_target_no_concurrency_meets_is_a_named_breach() -> None:
    body = {
        **SEVENTY_B,
        "inference": {**SEVENTY_B["inference"], "max_time_per_output_token_s": 0.001},
        "constraints": {"include": ["h100-sxm5-80gb", "a100-sxm4-80gb"], "max_gpus_per_job": 8192},
    }
    answer = ask(body)
    for c in answer.recommendations:
        assert c.score == 0
        assert latency(c).concurrency == 1
        (tpot,) = [b for b in c.breaches if b.constraint == "inference.max_time_per_output_token_s"]
        assert tpot.factor > 1
    # The nearest plan first: the smaller time per output token.
    tpots = [latency(c).time_per_output_token_s for c in answer.recommendations]
    assert tpots == sorted(tpots)
    assert "inference.max_time_per_output_token_s" in answer.warnings[-1]


def test_an_explicit_batch_fixes_the_concurrency() -> None:
    body = {**SEVENTY_B, "workload": {**SEVENTY_B["workload"], "batch_size": 16}}
    lat = latency(on(body, "h100-sxm5-80gb"))
    assert (lat.concurrency, lat.limited_by) == (16, "batch_size")


def test_a_given_serving_layout_is_timed_fitting_or_not() -> None:
    body = {
        **SEVENTY_B,
        "workload": {**SEVENTY_B["workload"], "parallelism": {"tensor": 4, "data": 1}},
        "layout": "given",
    }
    h100 = on(body, "h100-sxm5-80gb")
    assert h100.count == 4
    assert h100.layout is not None
    assert h100.layout.tensor == 4
    # One replica does not serve 5 requests/s: the plan says how far it falls short.
    assert [b.constraint for b in h100.breaches] == ["inference.requests_per_second"]
    assert h100.breaches[0].actual is not None
    assert h100.breaches[0].actual < 5
    l4 = on(body, "l4-24gb")
    assert not l4.fits
    assert l4.breaches[0].constraint == "memory"
    assert l4.latency is not None
    assert l4.time_hours is not None


def test_a_miss_names_the_constraint_and_the_factor() -> None:
    body = {
        **SEVENTY_B,
        "constraints": {"include": ["a10-24gb", "a100-sxm4-80gb"], "max_gpus_per_job": 8},
    }
    answer = ask(body)
    assert not any(c.score for c in answer.recommendations)
    nearest = answer.recommendations[0]
    assert nearest.fits
    assert nearest.breaches[0].constraint == "constraints.max_gpus_per_job"
    assert nearest.breaches[0].factor == pytest.approx(nearest.count / 8)
    warning = answer.warnings[-1]
    assert "constraints.max_gpus_per_job" in warning
    assert f"{nearest.count} GPUs" in warning
    # Ordered by how far each plan misses.
    fitting = [c for c in answer.recommendations if c.fits]
    factors = [c.breaches[0].factor for c in fitting]
    assert factors == sorted(factors)


def test_unpriced_plans_never_outrank_priced_ones_under_cheapest() -> None:
    body = {
        **SEVENTY_B,
        "constraints": {"include": ["a100-sxm4-80gb", "mi300x-192gb"], "max_gpus_per_job": 1},
    }
    ranked = ask(body).recommendations
    priced = [c.cost_usd is not None for c in ranked]
    assert priced == sorted(priced, reverse=True)


# ---------------------------------------------------------------- through every door


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"inference": {"max_time_to_first_token_s": 0}}, "$.inference.max_time_to_first_token_s"),
        (
            {"inference": {"max_time_per_output_token_s": -1}},
            "$.inference.max_time_per_output_token_s",
        ),
        ({"inference": {"max_concurrency": 0}}, "$.inference.max_concurrency"),
        ({"layout": "mine"}, "$.layout"),
        ({"constraints": {"gpu_counts": [0]}}, "$.constraints.gpu_counts[0]"),
        ({"workload": {"parallelism": {"framework": "jax"}}}, "$.workload.parallelism.framework"),
        ({"workload": {"parallelism": {"context": 0}}}, "$.workload.parallelism.context"),
        (
            {"workload": {"parallelism": {"pipeline_schedule": "zb"}}},
            "$.workload.parallelism.pipeline_schedule",
        ),
        (
            {"workload": {"parallelism": {"virtual_stages": 0}}},
            "$.workload.parallelism.virtual_stages",
        ),
        ({"workload": {"compile": "yes"}}, "$.workload.compile"),
        ({"training": {"global_batch_size": 0}}, "$.training.global_batch_size"),
        # Degrees that contradict each other or the model.
        (
            {"workload": {"parallelism": {"virtual_stages": 2}}},
            "$.workload.parallelism.virtual_stages",
        ),
        (
            {"workload": {"parallelism": {"pipeline": 2, "pipeline_schedule": "interleaved_1f1b"}}},
            "$.workload.parallelism.virtual_stages",
        ),
        (
            {
                "workload": {
                    "parallelism": {
                        "pipeline": 2,
                        "virtual_stages": 2,
                        "pipeline_schedule": "gpipe",
                    }
                }
            },
            "$.workload.parallelism.pipeline_schedule",
        ),
        (
            {"workload": {"parallelism": {"pipeline": 40, "virtual_stages": 4}}},
            "$.workload.parallelism.virtual_stages",
        ),
        ({"workload": {"parallelism": {"context": 3}}}, "$.workload.parallelism.context"),
        ({"workload": {"parallelism": {"expert": 2, "data": 3}}}, "$.workload.parallelism.expert"),
    ],
)
def test_bad_values_of_the_new_fields_are_422_naming_them(
    client: TestClient[Litestar], patch: dict[str, Any], path: str
) -> None:
    body: dict[str, Any] = json.loads(json.dumps(SEVENTY_B))
    for key, value in patch.items():
        body[key] = {**body[key], **value} if key in body and isinstance(value, dict) else value
    problem_at(client.post("/v1/recommendations", json=body), path)


def test_the_cli_plans_a_given_layout_at_any_count(tmp_path: Path) -> None:
    args = [
        "recommend",
        "--model", "llama-2-7b", "--mode", "training", "--seq-len", "2048",
        "--batch-size", "2", "--training-tokens", "100000000",
        "--include", "h100-sxm5-80gb", "--format", "json",
    ]  # fmt: skip
    searched = CliRunner().invoke(main, [*args, "--gpu-counts", "24", "--max-gpus", "64"])
    assert searched.exit_code == 0, searched.output
    assert json.loads(searched.output)["recommendations"][0]["count"] == 24
    given = CliRunner().invoke(
        main,
        [*args, "--layout", "given", "--parallelism-data", "12", "--parallelism-framework", "ddp"],
    )
    assert given.exit_code == 0, given.output
    top = json.loads(given.output)["recommendations"][0]
    assert top["count"] == 12
    assert top["layout"]["framework"] == "ddp"
    assert top["layout"]["global_batch_size"] == 24


def _given_layout(parallelism: dict[str, Any], **training: Any) -> dict[str, Any]:
    """Llama 2 7B trained on 2,048-token sequences in batches of two, laid out as given."""
    return {
        **request_body(
            "llama-2-7b",
            mode="training",
            sequence_length=2048,
            batch_size=2,
            parallelism=parallelism,
        ),
        "training": training,
        "layout": "given",
    }


def test_a_plan_file_times_its_own_layout(client: TestClient[Litestar]) -> None:
    plan = {
        **_given_layout({"data": 6, "zero_stage": 2}, training_tokens=100_000_000),
        "constraints": {"include": ["h100-sxm5-80gb"]},
        "targets": {"max_time_hours": 1000},
    }
    response = client.post("/v1/plan", json=plan)
    assert response.status_code == 200, response.text
    top = response.json()["recommendations"][0]
    assert top["count"] == 6
    assert top["layout"]["zero_stage"] == 2
    assert top["step"]["compute_s"] > 0


def test_a_step_carries_its_prompt_chunks_beside_the_decodes() -> None:
    # A short-prompt, short-answer job: each step reads the weights once for every
    # sequence and the prompt chunks of the arriving ones together.
    small: dict[str, Any] = {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 16},
        "inference": {"prompt_tokens": 16, "output_tokens": 16},
    }
    lat = latency(on(small, "h100-sxm5-80gb"))
    assert lat.time_per_output_token_s < 0.2
    # A prompt four times longer costs more per step: the prompts are computed, not only read.
    longer = {**small, "inference": {"prompt_tokens": 64, "output_tokens": 16}}
    assert latency(on(longer, "h100-sxm5-80gb")).time_per_output_token_s > (
        lat.time_per_output_token_s
    )


def test_the_first_token_waits_for_a_whole_step() -> None:
    body = {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 1024},
        "inference": {"prompt_tokens": 1024, "output_tokens": 16},
    }
    lat = latency(on(body, "h100-sxm5-80gb"))
    assert lat.time_to_first_token_s >= 0.95 * lat.time_per_output_token_s
    # Decodes and prompt chunks share vLLM's token budget per step (8,192 on an H100).
    assert lat.concurrency * (1 + 1024 / 16) <= 8192
    assert lat.limited_by == "token_budget"


def test_one_output_token_is_the_first_token() -> None:
    body = {**SEVENTY_B, "inference": {**SEVENTY_B["inference"], "output_tokens": 1}}
    lat = latency(on(body, "h100-sxm5-80gb"))
    assert lat.request_latency_s == pytest.approx(lat.time_to_first_token_s)


def test_serving_keeps_to_the_allowed_counts() -> None:
    body = {**SEVENTY_B, "constraints": {"include": ["h100-sxm5-80gb"], "gpu_counts": [16]}}
    assert ask(body).recommendations[0].count == 16


def test_a_count_over_the_bound_is_refused(client: TestClient[Litestar]) -> None:
    body = {**SEVENTY_B, "constraints": {"gpu_counts": [8, 128], "max_gpus_per_job": 64}}
    problem_at(client.post("/v1/recommendations", json=body), "$.constraints.gpu_counts[1]")


def test_pipeline_serving_is_refused_as_given(client: TestClient[Litestar]) -> None:
    body = {
        **SEVENTY_B,
        "workload": {**SEVENTY_B["workload"], "parallelism": {"tensor": 2, "pipeline": 4}},
        "layout": "given",
    }
    problem_at(client.post("/v1/recommendations", json=body), "$.workload.parallelism.pipeline")


def test_a_given_global_batch_must_be_the_layouts(client: TestClient[Litestar]) -> None:
    body = _given_layout({"data": 8}, training_tokens=10**9, global_batch_size=1024)
    problem_at(client.post("/v1/recommendations", json=body), "$.training.global_batch_size")
