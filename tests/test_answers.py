"""Planning answers: encoded once, screened for numbers JSON cannot carry, and
remembered by the body that asked, within a byte budget."""

import json
import math
import random
from typing import Any

import httpx
import msgspec
import pytest
from litestar import Litestar
from litestar.testing import TestClient
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.api.answer_cache import AnswerCache
from gpuplan.api.answers import _first_unsafe, _maybe_unsafe, encode_answer
from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from gpuplan.core.errors import InvalidRequest
from tests.test_gpus_api import OVERRIDE


class Answer(msgspec.Struct):
    name: str
    value: Any
    items: list[Any] = []


UNSAFE = [2**53, -(2**53), 10**17, 2**63, math.inf, -math.inf, math.nan, 1e301, -1e301]
SAFE = [2**53 - 1, -(2**53 - 1), 0, 1e300, 1e-300, 0.30000000000000004, 1234567890123456.0,
        1.2345678901234568e17, 9007199254740993.0, "null", "e100", "0000000000000000000"]  # fmt: skip


@pytest.mark.parametrize("value", UNSAFE, ids=repr)
def test_an_unsafe_number_anywhere_is_422(value: Any) -> None:
    for answer in (
        Answer("x", value),
        Answer("x", 1, items=[0, {"deep": [value]}]),
        Answer("x", {"a": 1, "b": value}),
    ):
        assert _maybe_unsafe(msgspec.json.encode(answer))
        with pytest.raises(InvalidRequest) as info:
            encode_answer(answer)
        assert info.value.kind == "validation"
        assert "2^53" in info.value.detail


@pytest.mark.parametrize("value", SAFE, ids=repr)
def test_a_safe_answer_encodes_to_the_same_json(value: Any) -> None:
    answer = Answer("x", value, items=[value, {"k": value}])
    assert encode_answer(answer).json == msgspec.json.encode(answer)


def test_the_screen_never_passes_what_the_exact_walk_refuses() -> None:
    """Random nested answers: whenever the walk finds an unsafe number, the screen
    flagged the encoded bytes (it may flag safe ones: those get the walk)."""
    rng = random.Random(11)

    def number() -> Any:
        kind = rng.randrange(6)
        if kind == 0:
            return rng.randrange(-(2**62), 2**62) >> rng.randrange(63)
        if kind == 1:
            return rng.choice([2**53 - 1, 2**53, 2**53 + 1, -(2**53), 10**15, 10**16])
        if kind == 2:
            return rng.uniform(-1, 1) * 10 ** rng.uniform(-320, 308)
        if kind == 3:
            return rng.choice([math.inf, -math.inf, math.nan, 1e300, 1.0000001e300])
        if kind == 4:
            return rng.random()
        return rng.choice([True, False, None, "n", "null"])

    def tree(depth: int) -> Any:
        if depth == 0 or rng.random() < 0.4:
            return number()
        if rng.random() < 0.5:
            return [tree(depth - 1) for _ in range(rng.randrange(4))]
        return {f"k{i}": tree(depth - 1) for i in range(rng.randrange(4))}

    flagged_unsafe = 0
    for _ in range(3000):
        value = tree(4)
        unsafe = _first_unsafe(msgspec.to_builtins(value), "$") is not None
        if unsafe:
            flagged_unsafe += 1
            assert _maybe_unsafe(msgspec.json.encode(value)), value
    assert flagged_unsafe > 300  # the generator does reach the unsafe cases


def test_cache_keeps_recent_answers_within_its_budget() -> None:
    cache = AnswerCache(max_bytes=64 * 1024)
    for i in range(200):
        cache.put("/r", f"body {i}".encode(), b"x" * 1000)
        assert cache.bytes <= cache.max_bytes
    assert 0 < len(cache) < 200
    assert cache.get("/r", b"body 199") == b"x" * 1000
    assert cache.get("/r", b"body 0") is None  # evicted first
    assert cache.get("/other", b"body 199") is None  # the route is part of the key


def test_cache_evicts_the_least_recently_used() -> None:
    cache = AnswerCache(max_bytes=16 * 2000)  # room for a few entries of ~1.3 KB
    cache.put("/r", b"a", b"1" * 1000)
    cache.put("/r", b"b", b"2" * 1000)
    assert cache.get("/r", b"a") is not None  # a is now the more recent of the two
    filler = 0
    while ("/r", b"b") in cache:
        cache.put("/r", f"filler {filler}".encode(), b"3" * 1000)
        filler += 1
        assert cache.bytes <= cache.max_bytes
    assert filler > 10
    assert ("/r", b"a") in cache  # the first eviction took b, the least recently used


def test_cache_skips_an_entry_that_would_crowd_out_the_rest() -> None:
    cache = AnswerCache(max_bytes=16 * 1024)
    cache.put("/r", b"small", b"1")
    cache.put("/r", b"big", b"x" * 2000)  # over a sixteenth of the budget
    assert cache.get("/r", b"big") is None
    assert cache.get("/r", b"small") == b"1"
    off = AnswerCache(max_bytes=0)
    off.put("/r", b"small", b"1")
    assert len(off) == 0


ESTIMATE = {
    "model": {"name": "llama-3.1-8b"},
    "workload": {"mode": "training", "sequence_length": 4096, "batch_size": 4},
    "gpu": "h100-sxm5-80gb",
}
MIG_PLAN = {"gpu": "a100-sxm4-80gb", "workloads": [{"name": "n", "profile": "1g.10gb", "count": 9}]}
ROUTES = [("/v1/memory/estimate", ESTIMATE), ("/v1/mig/plan", MIG_PLAN)]


def _lookups(client: TestClient[Litestar]) -> dict[tuple[str, str], float]:
    found = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "gpuplan_answer_cache_lookups_total" and sample.value:
                found[(sample.labels["route"], sample.labels["result"])] = sample.value
    return found


@pytest.mark.parametrize(("path", "body"), ROUTES)
def test_a_repeated_body_gets_the_same_bytes_from_the_cache(path: str, body: Any) -> None:
    with TestClient(app=create_app(Settings())) as client:
        raw = json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        first = client.post(path, content=raw, headers=headers)
        second = client.post(path, content=raw, headers=headers)
        assert first.status_code == second.status_code == 200
        assert first.content == second.content
        assert second.headers["content-type"] == "application/json"
        assert _lookups(client) == {(path, "miss"): 1, (path, "hit"): 1}
        # Another spelling of the same request is computed again, to the same answer.
        respaced = client.post(path, content=json.dumps(body, indent=2), headers=headers)
        assert respaced.content == first.content
        assert _lookups(client)[(path, "miss")] == 2


def test_a_cached_body_still_needs_a_json_content_type_and_errors_are_not_kept() -> None:
    with TestClient(app=create_app(Settings())) as client:
        raw = json.dumps(ESTIMATE).encode()
        assert client.post("/v1/memory/estimate", content=raw,
                           headers={"content-type": "application/json"}).status_code == 200  # fmt: skip
        refused = client.post(
            "/v1/memory/estimate", content=raw, headers={"content-type": "text/plain"}
        )
        assert refused.status_code == 415
        bad = {**ESTIMATE, "workload": {"mode": "training", "batch_size": 0}}
        for _ in range(2):
            response = client.post("/v1/memory/estimate", json=bad)
            assert response.status_code == 422
            assert response.json()["errors"][0]["path"] == "$.workload.batch_size"


def test_each_app_remembers_the_answers_of_its_own_catalog(tmp_path: Any) -> None:
    path = tmp_path / "catalog.toml"
    path.write_text(OVERRIDE)  # H100 at a contract price, and one more GPU
    body = {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "training", "sequence_length": 4096},
        "training": {"training_tokens": 10**9},
        "constraints": {"include": ["h100-sxm5-80gb"]},
    }
    with (
        TestClient(app=create_app(Settings())) as stock,
        TestClient(app=create_app(Settings(catalog_file=str(path)))) as contract,
    ):
        listed = [stock.post("/v1/recommendations", json=body) for _ in range(2)]
        ours = [contract.post("/v1/recommendations", json=body) for _ in range(2)]
        assert listed[0].status_code == ours[0].status_code == 200, listed[0].text
        assert listed[0].content == listed[1].content
        assert ours[0].content == ours[1].content
        assert listed[0].content != ours[0].content


def test_cache_off_computes_every_time() -> None:
    with TestClient(app=create_app(Settings(answer_cache_bytes=0))) as client:
        for _ in range(3):
            assert client.post("/v1/memory/estimate", json=ESTIMATE).status_code == 200
        assert _lookups(client) == {}  # no cache, no lookups


def test_the_ci_plan_is_not_cached() -> None:
    """With Redis, /v1/plan follows the live fleet, so its answer is not the body's alone."""
    body = {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 4096, "batch_size": 8},
        "targets": {"fits": {"gpu": "NVIDIA L4", "count": 1}},
    }
    with TestClient(app=create_app(Settings())) as client:
        for _ in range(2):
            assert client.post("/v1/plan", json=body).status_code == 200
        assert not any(route == "/v1/plan" for route, _ in _lookups(client))


def _post(client: TestClient[Litestar], body: bytes, **headers: str) -> httpx.Response:
    return client.post(
        "/v1/memory/estimate?verbose=1" if headers.pop("query", "") else "/v1/memory/estimate",
        content=body,
        headers={"content-type": "application/json", **headers},
    )


def test_a_repeat_looks_like_the_first_answer_to_the_client() -> None:
    """Same status, bytes and headers (the security headers included), and counted
    under the route's own label."""
    raw = json.dumps(ESTIMATE).encode()
    with TestClient(app=create_app(Settings())) as client:
        first, second = _post(client, raw), _post(client, raw)
        assert _lookups(client)[("/v1/memory/estimate", "hit")] == 1
        assert (first.status_code, first.content) == (second.status_code, second.content)
        assert dict(first.headers) == dict(second.headers)
        metrics = client.get("/metrics").text
        assert (
            'gpuplan_http_requests_total{method="POST",route="/v1/memory/estimate",status="200"} 2.0'
            in metrics
        )


def test_repeats_still_need_a_token() -> None:
    token = "t" * 32
    raw = json.dumps(ESTIMATE).encode()
    with TestClient(app=create_app(Settings(api_tokens=token))) as client:
        assert _post(client, raw, authorization=f"Bearer {token}").status_code == 200
        assert _post(client, raw).status_code == 401
        assert _post(client, raw, authorization="Bearer " + "x" * 32).status_code == 401
        assert _post(client, raw, authorization=f"Bearer {token}").status_code == 200


def test_browser_requests_go_through_the_framework_for_their_cors_headers() -> None:
    raw = json.dumps(ESTIMATE).encode()
    origin = "https://dash.example"
    with TestClient(app=create_app(Settings(cors_allow_origins=origin))) as client:
        for _ in range(2):
            response = _post(client, raw, origin=origin)
            assert response.status_code == 200
            assert response.headers["access-control-allow-origin"] == origin
        assert ("/v1/memory/estimate", "hit") not in _lookups(client)


def test_oversized_and_queried_requests_are_left_to_the_framework() -> None:
    raw = json.dumps(ESTIMATE).encode()
    padded = raw[:-1] + b',"gpu":"h100-sxm5-80gb"' + b" " * 2000 + b"}"
    with TestClient(app=create_app(Settings(max_body_bytes=1024))) as client:
        for _ in range(2):
            assert _post(client, padded).status_code == 413
        assert _post(client, raw).status_code == 200
        assert _post(client, raw, query="1").status_code == 200
        assert _lookups(client) == {("/v1/memory/estimate", "miss"): 1}


async def _call(app: Any, messages: list[dict[str, Any]]) -> tuple[int, bytes]:
    """One POST /v1/memory/estimate straight into the ASGI app, its body in ``messages``."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/memory/estimate", "raw_path": b"/v1/memory/estimate",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80), "headers": [(b"content-type", b"application/json")],
    }  # fmt: skip
    pending = list(messages)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_body_in_chunks_is_read_whole_and_replayed_on_a_miss() -> None:
    import asyncio

    app = create_app(Settings())
    raw = json.dumps(ESTIMATE).encode()
    chunks = [raw[:10], raw[10:50], raw[50:]]
    messages = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    miss = asyncio.run(_call(app, messages))
    hit = asyncio.run(_call(app, [{"type": "http.request", "body": raw, "more_body": False}]))
    assert miss[0] == hit[0] == 200
    assert miss[1] == hit[1]
    assert app.state.runtime.answers.get("/v1/memory/estimate", raw) == hit[1]


def test_no_cache_asks_for_a_fresh_computation() -> None:
    raw = json.dumps(ESTIMATE).encode()
    with TestClient(app=create_app(Settings())) as client:
        first = _post(client, raw)
        fresh = _post(client, raw, **{"cache-control": "no-cache"})
        assert first.content == fresh.content
        assert _lookups(client) == {("/v1/memory/estimate", "miss"): 1}
        assert _post(client, raw).content == first.content
        assert _lookups(client)[("/v1/memory/estimate", "hit")] == 1
