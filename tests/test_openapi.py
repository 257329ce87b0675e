"""The committed api/openapi.yaml is what the code generates, and it is valid OpenAPI 3.1."""

from pathlib import Path

import yaml
from litestar import Litestar
from litestar.testing import TestClient
from openapi_spec_validator import validate

from gpuplan.api.app import create_app
from gpuplan.api.openapi import build_openapi, to_yaml
from gpuplan.config.settings import Settings

COMMITTED = Path(__file__).resolve().parent.parent / "api" / "openapi.yaml"


def test_committed_spec_matches_the_code() -> None:
    generated = to_yaml(build_openapi(create_app(Settings())))
    assert COMMITTED.read_text(encoding="utf-8") == generated, (
        "api/openapi.yaml is stale: run `gpuplan openapi -o api/openapi.yaml`"
    )


def test_spec_is_valid_openapi_31() -> None:
    document = yaml.safe_load(COMMITTED.read_text(encoding="utf-8"))
    validate(document)
    assert document["openapi"] == "3.1.0"


def test_served_spec_is_the_committed_one(client: TestClient[Litestar]) -> None:
    assert client.get("/schema/openapi.json").json() == yaml.safe_load(COMMITTED.read_text())


def test_every_route_is_documented_with_problem_responses() -> None:
    document = build_openapi(create_app(Settings()))
    assert {"/healthz", "/readyz", "/metrics", "/v1/version"} <= document["paths"].keys()
    for path, item in document["paths"].items():
        for method, op in item.items():
            assert op["summary"], f"{method} {path} has no summary"
            assert "500" in op["responses"]
            problem = op["responses"]["500"]["content"]["application/problem+json"]
            assert problem["schema"] == {"$ref": "#/components/schemas/Problem"}


def test_structs_are_closed_and_described() -> None:
    schemas = build_openapi(create_app(Settings()))["components"]["schemas"]
    problem = schemas["Problem"]
    assert problem["additionalProperties"] is False
    assert problem["properties"]["status"]["minimum"] == 400
    assert "JSONPath" in schemas["FieldError"]["properties"]["path"]["description"]


def test_every_object_schema_is_described() -> None:
    schemas = yaml.safe_load(COMMITTED.read_text(encoding="utf-8"))["components"]["schemas"]
    blank = sorted(
        name
        for name, schema in schemas.items()
        if schema.get("type") == "object" and not schema.get("description", "").strip()
    )
    assert not blank, f"give these Structs a class docstring (OpenAPI description): {blank}"


def test_every_reference_resolves() -> None:
    """A Struct that is a query and a body both (GET and POST /v1/fleet/placements) stays
    a component: the body's ``$ref`` must find it."""
    document = build_openapi(create_app(Settings()))
    schemas = document["components"]["schemas"]

    def refs(node: object) -> list[str]:
        if isinstance(node, dict):
            found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
            return found + [r for value in node.values() for r in refs(value)]
        if isinstance(node, list):
            return [r for value in node for r in refs(value)]
        return []

    dangling = sorted({r for r in refs(document) if r.rsplit("/", 1)[1] not in schemas})
    assert not dangling, dangling
    assert "PlacementQuery" in schemas
