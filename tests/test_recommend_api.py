"""POST /v1/recommendations end to end, and its problem+json answers to bad input."""

from typing import Any

from litestar import Litestar
from litestar.testing import TestClient

from tests.helpers import problem_at

PATH = "/v1/recommendations"


def _body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "inference", "sequence_length": 3840, "batch_size": 1},
        "inference": {"output_tokens": 256, "requests_per_second": 1.5},
        "objective": "cheapest",
    }
    body.update(over)
    return body


def test_recommendations(client: TestClient[Litestar]) -> None:
    response = client.post(PATH, json=_body())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["objective"] == "cheapest"
    assert body["workload_kind"] == "inference"
    assert body["scenario"]["class"] == "medium_training"
    first = body["recommendations"][0]
    assert first["fits"]
    assert first["score"] == 1.0
    assert first["throughput"]["unit"] == "tokens/s"
    assert first["cost_usd"] > 0
    assert first["latency"]["time_per_output_token_s"] > 0
    scores = [r["score"] for r in body["recommendations"]]
    # Scored plans best first, then the unpriced (unscored) ones, then the misses at 0.
    group = [0 if s else 1 if s is None else 2 for s in scores]
    assert group == sorted(group)
    scored = [s for s in scores if s]
    assert scored == sorted(scored, reverse=True)
    assert all(r["price"]["provider"] == "aws" for r in body["recommendations"] if r["score"])


def test_training_with_constraints(client: TestClient[Litestar]) -> None:
    body = _body(
        workload={"mode": "training", "sequence_length": 2048, "gradient_checkpointing": "full"},
        training={"training_tokens": 10**9},
        constraints={"vendors": ["nvidia"], "max_usd_per_hour": 40, "deployment": "hybrid"},
        objective="fastest",
    )
    del body["inference"]
    response = client.post(PATH, json=body)
    assert response.status_code == 200, response.text
    out = response.json()
    for r in out["recommendations"]:
        if r["score"] > 0:
            assert r["usd_per_hour"] <= 40
    assert {o["name"] for o in out["hybrid"]["options"]} == {"all_cloud", "all_on_prem", "hybrid"}


def test_schema_violation_names_the_field(client: TestClient[Litestar]) -> None:
    bad = _body(workload={"mode": "inference", "sequence_length": 4096, "batch_size": 0})
    problem_at(client.post(PATH, json=bad), "$.workload.batch_size")
    problem_at(client.post(PATH, json=_body(objective="cheap")), "$.objective")
    problem_at(client.post(PATH, json=_body(constraints={"pue": 0.5})), "$.constraints.pue")
    problem_at(client.post(PATH, json=_body(budget=3)), "$.budget")


def test_core_refusals_name_the_field(client: TestClient[Litestar]) -> None:
    missing_volume = _body(workload={"mode": "training", "sequence_length": 2048})
    del missing_volume["inference"]
    problem_at(client.post(PATH, json=missing_volume), "$.training")
    unknown = _body(constraints={"exclude": ["h100-sxm5-80gb", "quantum-9000"]})
    problem_at(client.post(PATH, json=unknown), "$.constraints.exclude[1]")
    problem_at(client.post(PATH, json=_body(model={"name": "llama-99b"})), "$.model.name")
    problem_at(client.post(PATH, json=_body(constraints={"vendors": ["intel"]})), "$.constraints")


def test_malformed_json(client: TestClient[Litestar]) -> None:
    response = client.post(PATH, content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/problem+json")


def test_measured_flops_use_catalog_precisions(client: TestClient[Litestar]) -> None:
    bad = _body(measured_flops={"h100-sxm5-80gb": {"bf17": 1e14}})
    response = client.post(PATH, json=bad)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    # msgspec reports a bad dict key as "at `key` in `$.measured_flops[...]`"
    assert "$.measured_flops" in response.json()["detail"]
    good = _body(measured_flops={"NVIDIA H100 80GB HBM3": {"bf16": 5e14}})
    body = client.post(PATH, json=good).json()
    sources = {r["gpu"]: r["source"] for r in body["recommendations"]}
    assert sources["h100-sxm5-80gb"] == "measured"
    assert sources["a100-sxm4-80gb"] == "catalog"
