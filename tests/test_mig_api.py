"""/v1/mig/profiles, /v1/mig/validate and /v1/mig/plan over HTTP, errors included."""

from typing import Any
from urllib.parse import quote

import httpx
import pytest
from litestar import Litestar
from litestar.testing import TestClient

PROBLEM = "application/problem+json"


def _validate(client: TestClient[Litestar], gpu: str, *profiles: str) -> httpx.Response:
    """POST /v1/mig/validate: one instance of each of ``profiles`` on one ``gpu``."""
    instances = [{"profile": p} for p in profiles]
    return client.post("/v1/mig/validate", json={"gpu": gpu, "instances": instances})


@pytest.mark.parametrize(
    "name",
    [
        "a100-sxm4-80gb",
        "A100 SXM4 80GB",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "0x20b2",
        "10de:20b2",
    ],
)
def test_profiles_by_every_lookup_form(client: TestClient[Litestar], name: str) -> None:
    response = client.get(f"/v1/mig/profiles?gpu={quote(name)}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["gpu"] == "a100-sxm4-80gb"
    assert body["table"] == "a100-80gb"
    profile = next(p for p in body["profiles"] if p["name"] == "1g.10gb+me")
    assert profile["resource"] == "nvidia.com/mig-1g.10gb.me"
    assert profile["placements"][0] == {"start": 0, "size": 1}
    assert profile["memory_bytes"] == 9728 * 2**20
    assert body["valid_layouts"] == 127
    assert body["unverified"] is False


def test_profiles_show_unverified_fields(client: TestClient[Litestar]) -> None:
    body = client.get("/v1/mig/profiles?gpu=NVIDIA%20GB200").json()
    assert body["unverified"] is True
    assert all("placements" in p["unverified"] for p in body["profiles"])
    assert body["profiles"][0]["sources"]["placements"][0]["kind"] == "derived"
    # B200's memory and placements are captured on hardware now.
    body = client.get("/v1/mig/profiles?gpu=NVIDIA%20B200").json()
    assert body["unverified"] is False


@pytest.mark.parametrize(
    ("method", "url", "body", "location"),
    [("GET", "/v1/mig/profiles?gpu=A1000", None, "query"),
     ("POST", "/v1/mig/plan", {"gpu": "A1000", "workloads": [{"name": "a", "profile": "1g.10gb"}]}, "body")],
)  # fmt: skip
def test_unknown_gpu_is_422_problem_with_suggestions(
    client: TestClient[Litestar],
    method: str,
    url: str,
    body: Any,
    location: str,
) -> None:
    response = client.request(method, url, json=body)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith(PROBLEM)
    problem = response.json()
    assert problem["errors"][0]["path"] == "$.gpu"
    assert problem["errors"][0]["location"] == location
    assert "a100-sxm4-80gb" in problem["suggestions"]


def test_gpu_without_mig_is_422_problem(client: TestClient[Litestar]) -> None:
    response = client.post(
        "/v1/mig/plan",
        json={"gpu": "NVIDIA L40S", "workloads": [{"name": "a", "profile": "1g.10gb"}]},
    )
    assert response.status_code == 422
    body = response.json()
    assert body["type"] == "urn:gpuplan:problem:mig-unsupported"
    assert body["errors"][0]["path"] == "$.gpu"
    assert "a100-sxm4-80gb" in body["suggestions"]


def test_unknown_profile_is_422_with_path_and_suggestions(client: TestClient[Litestar]) -> None:
    response = _validate(client, "h100-sxm5-80gb", "3g.40gb", "3g.4gb")
    assert response.status_code == 422
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["type"] == "urn:gpuplan:problem:unknown-profile"
    assert body["errors"][0]["path"] == "$.instances[1].profile"
    assert "3g.40gb" in body["suggestions"]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"gpu": "a100-sxm4-80gb", "workloads": []}, "$.workloads"),
        (
            {
                "gpu": "a100-sxm4-80gb",
                "workloads": [{"name": "a", "count": 0, "profile": "1g.10gb"}],
            },
            "$.workloads[0].count",
        ),
        (
            {"gpu": "a100-sxm4-80gb", "workloads": [{"name": "a", "memory_gib": -1}]},
            "$.workloads[0].memory_gib",
        ),
        (
            {
                "gpu": "a100-sxm4-80gb",
                "workloads": [{"name": "a", "profile": "1g.10gb"}],
                "max_gpus": 0,
            },
            "$.max_gpus",
        ),
        (
            {
                "gpu": "a100-sxm4-80gb",
                "workloads": [{"name": "a", "profile": "1g.10gb", "colour": 1}],
            },
            "$.workloads[0].colour",
        ),
        ({"gpu": "a100-sxm4-80gb", "workloads": [{"name": "a"}]}, "$.workloads[0]"),
        (
            {
                "gpu": "a100-sxm4-80gb",
                "workloads": [{"name": f"w{i}", "profile": "1g.10gb"} for i in range(1001)],
            },
            "$.workloads",
        ),
    ],
)
def test_bad_plan_bodies_are_422(
    client: TestClient[Litestar], body: dict[str, Any], path: str
) -> None:
    response = client.post("/v1/mig/plan", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["errors"][0]["path"] == path


@pytest.mark.parametrize("query", ["", "?gpu=", "?gpu=a100&gpu=h100"])
def test_profiles_query_errors(client: TestClient[Litestar], query: str) -> None:
    response = client.get(f"/v1/mig/profiles{query}")
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "$.gpu"


def test_validate_instance_list_is_bounded(client: TestClient[Litestar]) -> None:
    response = _validate(client, "a100-sxm4-80gb", *["1g.10gb"] * 17)
    assert response.status_code == 422


def test_validate_over_http(client: TestClient[Litestar]) -> None:
    body = _validate(client, "a100-sxm4-80gb", "4g.40gb", "4g.40gb").json()
    assert body["valid"] is False
    assert body["reasons"][0]["kind"] == "too-many-of-profile"
    body = _validate(client, "a100-sxm4-80gb", "3g.40gb", "3g.40gb").json()
    assert body["valid"] is True
    assert body["stranded_compute_slices"] == 1


def test_plan_over_http(client: TestClient[Litestar]) -> None:
    response = client.post("/v1/mig/plan", json={"gpu": "NVIDIA H100 80GB HBM3", "workloads": [
        {"name": "infer", "memory_gib": 18, "count": 4}, {"name": "train", "profile": "3g.40gb", "count": 2}]})  # fmt: skip
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["gpus_used"] == body["lower_bound"] == 2
    assert body["optimal"] is True
    assert body["mig_parted_config"].startswith("version: v1\n")
    assert {r["resource"] for r in body["resources"]} >= {"nvidia.com/mig-3g.40gb"}
    assert body["utilization"]["memory_slices_total"] == 16


def test_malformed_json_is_400(client: TestClient[Litestar]) -> None:
    response = client.post(
        "/v1/mig/plan", content=b"{", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.headers["content-type"].startswith(PROBLEM)
