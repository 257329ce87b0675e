"""Nothing a client sends makes a request run unbounded: time, depth, size, numbers."""

import json
import time
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.api.decode import MAX_JSON_DEPTH
from gpuplan.config.settings import Settings
from tests.helpers import problem_at

PROBLEM = "application/problem+json"

# The largest jobs the schemas admit (MIG: near it; an answer of 16,000 GPUs is megabytes):
# each must be answered (200 or 422) quickly.
WORST_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "estimate-max-hints": ("/v1/memory/estimate", {
        "model": {"parameters": 10**14, "hints": {"num_layers": 4096, "hidden_size": 1 << 20,
                  "num_attention_heads": 1 << 20, "vocab_size": 1 << 20}},
        "workload": {"mode": "training", "sequence_length": 10_000_000, "batch_size": 1 << 20,
                     "attention": "eager"}}),
    "estimate-deep-hf-config": ("/v1/memory/estimate", {
        "model": {"hf_config": {"model_type": "llama", "hidden_size": 1 << 24,
                  "intermediate_size": 1 << 24, "num_hidden_layers": 4096,
                  "num_attention_heads": 1 << 24, "vocab_size": 1 << 24}},
        "workload": {"mode": "inference", "sequence_length": 10_000_000,
                     "max_new_tokens": 10_000_000}}),
    "recommend-everything": ("/v1/recommendations", {
        "model": {"parameters": 10**14},
        "workload": {"mode": "training", "sequence_length": 10_000_000, "batch_size": 1 << 20},
        "constraints": {"max_gpus_per_job": 1024, "deployment": "hybrid"},
        "training": {"training_tokens": 10**16}, "all_counts": True, "limit": 500}),
    "recommend-7b-all-counts": ("/v1/recommendations", {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "training", "sequence_length": 4096},
        "constraints": {"max_gpus_per_job": 1024},
        "training": {"training_tokens": 10**12}, "all_counts": True, "limit": 500}),
    "recommend-70b-serving": ("/v1/recommendations", {
        "model": {"name": "llama-2-70b"},
        "workload": {"mode": "inference", "sequence_length": 4096, "max_new_tokens": 10_000_000},
        "constraints": {"max_gpus_per_job": 1024, "deployment": "hybrid"},
        "inference": {"requests_per_second": 1e7}, "all_counts": True, "limit": 500}),
    "mig-plan-1000-entries": ("/v1/mig/plan", {
        "gpu": "h100-sxm5-80gb",
        "workloads": [{"name": f"w{i}", "memory_gib": 1 + (i % 70), "compute_slices": 1 + (i % 7),
                       "count": 10} for i in range(1000)]}),
    "mig-plan-around-2000-gpus": ("/v1/mig/plan", {
        "gpu": "a100-sxm4-80gb",
        "workloads": [{"name": f"w{i}", "profile": ["1g.10gb", "2g.20gb", "3g.40gb"][i % 3],
                       "count": 4} for i in range(200)],
        "current": [{"index": i, "instances": [{"profile": "1g.10gb", "start": j} for j in range(7)]}
                    for i in range(2000)]}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(WORST_CASES))
def test_the_largest_admitted_requests_answer_quickly(
    client: TestClient[Litestar], case: str
) -> None:
    path, body = WORST_CASES[case]
    started = time.perf_counter()
    response = client.post(path, json=body)
    elapsed = time.perf_counter() - started
    assert response.status_code in (200, 422), response.text[:300]
    assert elapsed < 3.0, f"{case} took {elapsed:.2f} s"
    if response.status_code == 422:
        assert response.headers["content-type"].startswith(PROBLEM)


def test_an_answer_beyond_json_safe_integers_is_422(client: TestClient[Litestar]) -> None:
    path, body = WORST_CASES["estimate-max-hints"]
    response = client.post(path, json=body)
    assert response.status_code == 422
    problem = response.json()
    assert "too large to plan" in problem["detail"]
    assert "2^53" in problem["detail"]


def test_layer_counts_are_bounded_in_hf_config(client: TestClient[Litestar]) -> None:
    """Work is per layer: 16 million layers would take a minute; refused at once."""
    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 1 << 24, "num_attention_heads": 4, "vocab_size": 100}  # fmt: skip
    started = time.perf_counter()
    response = client.post("/v1/memory/estimate", json={"model": {"hf_config": config},
                                                       "workload": {"mode": "training"}})  # fmt: skip
    assert time.perf_counter() - started < 1.0
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "$.model.hf_config.num_hidden_layers"
    hints = {"parameters": 10**9, "hints": {"num_layers": 5000}}
    response = client.post(
        "/v1/memory/estimate", json={"model": hints, "workload": {"mode": "training"}}
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "$.model.hints.num_layers"


@pytest.mark.parametrize("path", ["/v1/memory/estimate", "/v1/recommendations"])
def test_a_computation_past_the_time_bound_is_503(path: str) -> None:
    body = WORST_CASES["recommend-7b-all-counts"][1]
    if path.endswith("estimate"):
        body = {"model": body["model"], "workload": body["workload"]}
    with TestClient(app=create_app(Settings(planning_timeout_seconds=1e-6))) as client:
        response = client.post(path, json=body)
        assert response.status_code == 503, response.text
        assert response.headers["content-type"].startswith(PROBLEM)
        assert response.headers["retry-after"] == "5"
        problem = response.json()
        assert problem["type"] == "urn:gpuplan:problem:computation-timeout"
        assert "GPUPLAN_PLANNING_TIMEOUT_SECONDS" in problem["detail"]
        assert client.get("/healthz").status_code == 200  # the loop stayed free


def test_depth_limit_counts_brackets_outside_strings_only(client: TestClient[Litestar]) -> None:
    # Brackets inside strings (and escaped quotes) do not nest anything.
    name = '[[[[{{{{\\"' * 40
    body = json.dumps({"model": {"name": name}, "workload": {"mode": "inference"}}).encode()
    response = client.post(
        "/v1/memory/estimate", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422  # too long a name: the depth check let it through
    assert response.json()["errors"][0]["path"] == "$.model.name"
    at_limit = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    response = client.post(
        "/v1/memory/estimate", content=at_limit, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422  # not an object, but not too deep either
    over = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    response = client.post(
        "/v1/memory/estimate", content=over, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400


@pytest.mark.parametrize(
    "content",
    [b'"' + b"\\" * (1 << 20) + b'"', b'"\\"' * 300_000, b"[" * 1_000_000, b'"' * 1_000_000,
     b'{"a":' + b'"x",' * 250_000 + b"}"],
    ids=["backslashes", "escaped-quotes", "brackets", "quotes", "many-keys"],
)  # fmt: skip
def test_adversarial_megabyte_bodies_are_refused_quickly(
    client: TestClient[Litestar], content: bytes
) -> None:
    started = time.perf_counter()
    response = client.post("/v1/memory/estimate", content=content[: (1 << 20) - 16],
                           headers={"content-type": "application/json"})  # fmt: skip
    assert time.perf_counter() - started < 1.0
    assert 400 <= response.status_code < 500
    assert response.headers["content-type"].startswith(PROBLEM)


@pytest.mark.parametrize(
    "config", [{}, {"model_type": 7}, {"model_type": "../../etc"}, {"model_type": "x" * 100}]
)
def test_trace_refuses_a_config_without_a_model_type_before_starting_a_worker(
    client: TestClient[Litestar],
    config: dict[str, Any],
) -> None:
    started = time.perf_counter()
    response = client.post("/v1/memory/trace", json={"model": {"hf_config": config}})
    assert time.perf_counter() - started < 0.5  # no worker process was started
    assert response.status_code == 422
    problem = response.json()
    assert problem["type"] == "urn:gpuplan:problem:invalid-model"
    assert problem["errors"][0]["path"] == "$.model.hf_config.model_type"


def test_trace_refuses_expandable_segments_on_the_cpu_runtime(
    client: TestClient[Litestar],
) -> None:
    """The CPU has no caching allocator to configure: refused before any worker starts,
    naming the field."""
    body = {
        "model": {"hf_config": {"model_type": "llama"}},
        "workload": {"expandable_segments": True},
        "runtime": "cpu",
    }
    response = client.post("/v1/memory/trace", json=body)
    problem_at(response, "$.workload.expandable_segments")
