"""Every error class answers RFC 9457 problem+json with the right status.

A route of the test's own, declared with the same ``operation`` as the service's,
exercises the body decoder until the planning endpoints land.
"""

from collections.abc import Iterator
from typing import Annotated, Any

import httpx
import msgspec
import pytest
from litestar import Litestar, Request
from litestar.testing import TestClient

from gpuplan.api.app import ROUTES, assemble
from gpuplan.api.routing import operation
from gpuplan.config.settings import Settings
from gpuplan.core.record import Record
from tests.helpers import PROBLEM
from tests.helpers import problem as problem_body


class Workload(Record):
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
    sequence_length: int = 2048


class Job(Record):
    workload: Workload
    tags: list[str] = []


class Filter(Record):
    vendor: list[str] = []
    min_memory_bytes: Annotated[int, msgspec.Meta(ge=0)] = 0


@operation("POST", "/test/jobs", body=Job)
async def create_job(request: Request[Any, Any, Any], body: Job) -> Job:
    """Echo a job."""
    return body


@operation("GET", "/test/filter", query=Filter)
async def filter_(request: Request[Any, Any, Any], query: Filter) -> Filter:
    """Echo a query."""
    return query


@operation("GET", "/test/boom")
async def boom(request: Request[Any, Any, Any]) -> Job:
    """Fail unexpectedly."""
    raise RuntimeError("secret internal detail /etc/passwd")


@pytest.fixture
def app_client() -> Iterator[TestClient[Litestar]]:
    app = assemble(Settings(max_body_bytes=2048), (*ROUTES, create_job, filter_, boom))
    with TestClient(app=app, raise_server_exceptions=False) as client:
        yield client


def _post(
    client: TestClient[Litestar], content: bytes, ctype: str = "application/json"
) -> httpx.Response:
    return client.post("/test/jobs", content=content, headers={"content-type": ctype})


def test_valid_body_is_decoded(app_client: TestClient[Litestar]) -> None:
    response = _post(app_client, b'{"workload": {"batch_size": 8}}')
    assert response.status_code == 200
    assert response.json() == {"workload": {"batch_size": 8, "sequence_length": 2048}, "tags": []}


@pytest.mark.parametrize(
    "body", [b"{bad", b'{"workload": ', b"", b"\xff\xfe{}", b'{"workload": {"batch_size": NaN}}']
)
def test_malformed_json_is_400(app_client: TestClient[Litestar], body: bytes) -> None:
    problem = problem_body(_post(app_client, body), 400)
    assert problem["type"] == "urn:gpuplan:problem:malformed-json"


@pytest.mark.parametrize(
    ("body", "path", "reason"),
    [
        (b'{"workload": {"batch_size": "8"}}', "$.workload.batch_size", "Expected `int`"),
        (b'{"workload": {"batch_size": 0}}', "$.workload.batch_size", ">= 1"),
        (
            b'{"workload": {"batch_size": 1000000000000000000}}',
            "$.workload.batch_size",
            "<= 1000000",
        ),
        (b'{"workload": {}}', "$.workload.batch_size", "missing required field"),
        (b"{}", "$.workload", "missing required field"),
        (b'{"workload": {"batch_size": 1}, "extra": 1}', "$.extra", "unknown field"),
        (b'{"workload": {"batch_size": 1}, "tags": ["a", 3]}', "$.tags[1]", "Expected `str`"),
        (b"[]", "$", "Expected `object`"),
    ],
)
def test_schema_violation_is_422_naming_the_field(
    app_client: TestClient[Litestar],
    body: bytes,
    path: str,
    reason: str,
) -> None:
    problem = problem_body(_post(app_client, body), 422)
    assert problem["type"] == "urn:gpuplan:problem:validation"
    [error] = problem["errors"]
    assert error["path"] == path
    assert reason in error["reason"]
    assert error["location"] == "body"
    assert path in problem["detail"]


def test_duplicate_key_is_refused(app_client: TestClient[Litestar]) -> None:
    body = b'{"workload": {"batch_size": 8, "batch_size": 16}}'
    problem = problem_body(_post(app_client, body), 400)
    assert problem["type"] == "urn:gpuplan:problem:duplicate-key"
    assert problem["errors"][0]["path"] == "$..batch_size"


def test_deep_nesting_is_a_client_error(app_client: TestClient[Litestar]) -> None:
    response = _post(app_client, b"[" * 1000 + b"]" * 1000)
    assert 400 <= response.status_code < 500
    assert response.headers["content-type"].startswith(PROBLEM)


def test_body_over_the_limit_is_413(app_client: TestClient[Litestar]) -> None:
    body = b'{"workload": {"batch_size": 1}, "tags": ["' + b"x" * 4096 + b'"]}'
    problem = problem_body(_post(app_client, body), 413)
    assert "2048 bytes" in problem["detail"]
    assert "GPUPLAN_MAX_BODY_BYTES" in problem["detail"]


@pytest.mark.parametrize(
    "ctype", ["text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
def test_wrong_media_type_is_415(app_client: TestClient[Litestar], ctype: str) -> None:
    response = _post(app_client, b'{"workload": {"batch_size": 8}}', ctype)
    problem = problem_body(response, 415)
    assert "application/json" in problem["detail"]


def test_json_with_charset_and_suffix_types_are_accepted(app_client: TestClient[Litestar]) -> None:
    for ctype in ("application/json; charset=utf-8", "application/vnd.gpuplan+json"):
        assert _post(app_client, b'{"workload": {"batch_size": 8}}', ctype).status_code == 200


def test_unknown_route_is_404(app_client: TestClient[Litestar]) -> None:
    problem = problem_body(app_client.get("/v1/nothing-here"), 404)
    assert "/v1/nothing-here" in problem["detail"]
    assert problem["type"] == "about:blank"
    assert problem["title"] == "Not Found"


def test_wrong_method_is_405_with_allow(app_client: TestClient[Litestar]) -> None:
    response = app_client.delete("/v1/version")
    problem = problem_body(response, 405)
    assert "GET" in response.headers["allow"]
    assert "DELETE" in problem["detail"]


def test_unexpected_error_is_500_without_internals(app_client: TestClient[Litestar]) -> None:
    problem = problem_body(app_client.get("/test/boom"), 500)
    assert "secret" not in problem["detail"]
    assert "Traceback" not in str(problem)
    assert problem["instance"].startswith("urn:uuid:")


def test_query_is_decoded_with_repeats_for_lists(app_client: TestClient[Litestar]) -> None:
    response = app_client.get("/test/filter?vendor=nvidia&vendor=amd&min_memory_bytes=16")
    assert response.status_code == 200
    assert response.json() == {"vendor": ["nvidia", "amd"], "min_memory_bytes": 16}


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ("min_memory_bytes=-1", "$.min_memory_bytes"),
        ("min_memory_bytes=lots", "$.min_memory_bytes"),
        ("min_memory_bytes=1&min_memory_bytes=2", "$.min_memory_bytes"),
        ("min_memroy_bytes=1", "$.min_memroy_bytes"),
    ],
)
def test_bad_query_is_422_naming_the_parameter(
    app_client: TestClient[Litestar],
    query: str,
    path: str,
) -> None:
    problem = problem_body(app_client.get(f"/test/filter?{query}"), 422)
    [error] = problem["errors"]
    assert error == {"path": path, "reason": error["reason"], "location": "query"}


def test_the_duplicate_key_prefilter_never_misses_a_duplicate() -> None:
    """Random bodies with tricky strings: whenever an object really repeats a key, the
    fast scan sends the body to the exact check."""
    import json
    import random

    from gpuplan.api.decode import may_repeat_a_key

    rng = random.Random(7)
    atoms = ["a", "b", "", ":", '"', '\\"a\\":', "\\u0061", "a\\\\", " ", "{", "}", ","]

    def text() -> str:
        return json.dumps("".join(rng.choice(atoms) for _ in range(rng.randint(0, 4))))[1:-1]

    def obj(depth: int) -> str:
        items = []
        for _ in range(rng.randint(0, 4)):
            key = rng.choice(["a", "b", "\\u0061", text()])
            value = obj(depth + 1) if depth < 3 and rng.random() < 0.3 else f'"{text()}"'
            items.append(f'"{key}": {value}')
        return "{" + ", ".join(items) + "}"

    def repeats(pairs: list[tuple[str, object]]) -> dict[str, object]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise KeyError
        return dict(pairs)

    found = 0
    for _ in range(3000):
        body = obj(0).encode()
        try:
            json.loads(body, object_pairs_hook=repeats)
        except KeyError:
            found += 1
            assert may_repeat_a_key(body), body
        except json.JSONDecodeError:
            continue
    assert found > 100  # the generator does make duplicates
