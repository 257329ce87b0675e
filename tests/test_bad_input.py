"""The bad-input table: every /v1 operation, every kind of bad input, a 4xx problem.

The operations come from the committed ``api/openapi.yaml``, so a new endpoint joins
the table by existing: an operation with a body must have a valid example in
``VALID_BODIES`` (a test fails until it does), from which the mutations are derived
(every field dropped, retyped, made enormous; unknown fields; huge lists); the
byte-level cases (malformed JSON, invalid UTF-8, NaN, depth, size, media type,
duplicate keys) apply to every body as they are. Each case must answer a 4xx
``application/problem+json`` that names the problem, quickly, never a 5xx.
"""

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from tests.conftest import forget_keys, fresh_prefix
from tests.helpers import TINY_LLAMA, problem

SPEC = yaml.safe_load((Path(__file__).parent.parent / "api" / "openapi.yaml").read_text())
LIMIT = 1024 * 1024
SLOW_SECONDS = 5.0  # no bad input may take longer than this to refuse

VALID_BODIES: dict[str, dict[str, Any]] = {
    "estimate_memory": {
        "model": {"hf_config": TINY_LLAMA},
        "workload": {
            "mode": "finetune_lora",
            "batch_size": 2,
            "sequence_length": 256,
            "gradient_accumulation_steps": 1,
            "parallelism": {"tensor": 1, "data": 2, "zero_stage": 1},
            "lora": {"rank": 8, "target_modules": ["q_proj", "v_proj"]},
            "max_new_tokens": 0,
        },
        "gpu": "h100-sxm5-80gb",
    },
    "recommendations": {
        "model": {"parameters": 7_000_000_000},
        "workload": {"mode": "inference", "batch_size": 1, "sequence_length": 1024},
        "constraints": {"include": ["h100-sxm5-80gb"], "max_gpus_per_job": 8},
        "inference": {"requests_per_second": 2.0, "output_tokens": 128},
        "limit": 5,
    },
    "trace_memory": {
        "model": {"hf_config": TINY_LLAMA},
        "workload": {"batch_size": 1, "sequence_length": 16, "steps": 1},
        "runtime": "cpu",
    },
    "mig_validate": {
        "gpu": "h100-sxm5-80gb",
        "instances": [{"profile": "3g.40gb", "start": 0}, {"profile": "1g.10gb"}],
    },
    "mig_plan": {
        "gpu": "a100-sxm4-80gb",
        "workloads": [
            {"name": "small", "profile": "1g.10gb", "count": 3},
            {"name": "sized", "memory_gib": 15.0, "compute_slices": 2},
        ],
        "max_gpus": 4,
    },
    "place_workload": {
        "memory_gib": 20.0,
        "compute_slices": 2,
        "whole_gpu": True,
        "node": "node-a",
        "gpu": "h100-sxm5-80gb",
        "limit": 5,
    },
    "plan_job": {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "training", "sequence_length": 4096, "gradient_checkpointing": "full"},
        "training": {"training_tokens": 100_000_000},
        "targets": {
            "fits": {"gpu": "NVIDIA A100-SXM4-80GB", "count": 4},
            "max_cost_usd": 1000,
            "mig_profile_at_most": {"gpu": "a100-sxm4-80gb", "profile": "7g.80gb"},
        },
    },
}
"""A valid body per body operation (by operationId); the mutations start from it."""

# Leaves under these keys are free-form (a Hugging Face config): the estimator checks
# what it reads, the tracer hands them to transformers; mutating them is not a
# schema error, so the table leaves them to the targeted cases below.
FREE_FORM = ("hf_config",)


def _operations() -> list[tuple[str, str, str, dict[str, Any]]]:
    found = []
    for path, item in SPEC["paths"].items():
        if not path.startswith("/v1"):
            continue
        for method, op in item.items():
            found.append((method.upper(), path, op["operationId"], op))
    return found


OPERATIONS = _operations()
BODY_OPS = [o for o in OPERATIONS if "requestBody" in o[3]]
QUERY_OPS = [o for o in OPERATIONS if any(p["in"] == "query" for p in o[3].get("parameters", []))]
PATH_OPS = [o for o in OPERATIONS if "{" in o[1]]


@pytest.fixture(scope="module")
def client(redis_url: str) -> Iterator[TestClient[Litestar]]:
    # Redis configured (the fleet routes then answer 404 for an unknown node, not 503).
    prefix = fresh_prefix("bad-input")
    settings = Settings(redis_url=redis_url, fleet_key_prefix=prefix, trace_timeout_seconds=30)
    with TestClient(app=create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client
    forget_keys(redis_url, prefix)


def _names_path(body: dict[str, Any], path: str) -> None:
    paths = [e["path"] for e in body.get("errors", [])]
    assert any(p == path or p.startswith(path) or path.startswith(p) for p in paths), (
        path,
        body,
    )


def _send(
    client: TestClient[Litestar],
    method: str,
    path: str,
    content: bytes,
    ctype: str = "application/json",
) -> httpx.Response:
    started = time.perf_counter()
    response = client.request(
        method, _concrete(path), content=content, headers={"content-type": ctype}
    )
    assert time.perf_counter() - started < SLOW_SECONDS, f"{method} {path} took too long"
    return response


def _concrete(path: str) -> str:
    return path.replace("{id_or_alias}", "h100-sxm5-80gb").replace("{node}", "no-node")


# ------------------------------------------------------------------ the table's shape


def test_every_body_operation_has_a_valid_example() -> None:
    missing = {op for _, _, op, _ in BODY_OPS} - VALID_BODIES.keys()
    assert not missing, f"add a valid body for {missing} to VALID_BODIES"


def test_the_valid_examples_are_valid(client: TestClient[Litestar]) -> None:
    for method, path, op, _ in BODY_OPS:
        if op == "trace_memory":
            continue  # a real trace takes seconds; test_trace_api covers valid bodies
        response = _send(client, method, path, json.dumps(VALID_BODIES[op]).encode())
        assert response.status_code == 200, (op, response.text[:300])


# ------------------------------------------------------------------ byte-level cases

RAW_CASES = {
    "malformed-json": (b'{"model": ', (400,), "not valid JSON"),
    "not-an-object": (b"[1, 2, 3]", (422,), "Expected `object`"),
    "empty": (b"", (400,), "empty"),
    "nan-literal": (b'{"model": NaN}', (400,), "malformed"),
    "infinity-literal": (b'{"model": -Infinity}', (400,), "malformed"),
    "invalid-utf8": (b'{"\xff\xfe": 1}', (400,), "UTF-8"),
    "lone-surrogate": (b'{"model": {"name": "\\ud800"}}', (400, 422), ""),
    "deep-nesting": (b'{"a": ' * 100 + b"1" + b"}" * 100, (400,), "nested deeper"),
    "very-deep-nesting": (b"[" * 200_000 + b"]" * 200_000, (400,), "nested deeper"),
    "over-the-limit": (b'{"model": "' + b"x" * (LIMIT + 10) + b'"}', (413,), "exceeds the limit"),
}


@pytest.mark.parametrize("case", sorted(RAW_CASES))
@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in BODY_OPS], ids=[o[2] for o in BODY_OPS]
)
def test_raw_bodies(
    client: TestClient[Litestar], method: str, path: str, op: str, case: str
) -> None:
    content, statuses, word = RAW_CASES[case]
    # The literal sits at a key the operation takes, so it is the literal that is refused.
    first = next(iter(VALID_BODIES[op]))
    content = content.replace(b'"model"', b'"%s"' % first.encode())
    problem(_send(client, method, path, content), statuses, word)


@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in BODY_OPS], ids=[o[2] for o in BODY_OPS]
)
def test_body_shapes(client: TestClient[Litestar], method: str, path: str, op: str) -> None:
    valid = VALID_BODIES[op]
    text = json.dumps(valid).encode()
    # Wrong content type, or none.
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "application/xml", ""):
        body = problem(_send(client, method, path, text, ctype), (415,), "application/json")
        assert body["type"].endswith("unsupported-media-type")
    # Duplicate keys, at the root and nested.
    first = next(iter(valid))
    dup = b'{"%s": %s, ' % (first.encode(), json.dumps(valid[first]).encode()) + text[1:]
    problem(_send(client, method, path, dup), (400,), "duplicate", first)
    # Unknown field at the root and in every nested object.
    for where in _objects(valid):
        mutated = copy.deepcopy(valid)
        _at(mutated, where)["no_such_field"] = 1
        body = problem(
            _send(client, method, path, json.dumps(mutated).encode()), (422,), "no_such_field"
        )
        _names_path(body, _jsonpath(where) + ".no_such_field")


@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in BODY_OPS], ids=[o[2] for o in BODY_OPS]
)
def test_required_fields_missing(
    client: TestClient[Litestar], method: str, path: str, op: str
) -> None:
    schema = _request_schema(path, method)
    for name in schema.get("required", []):
        mutated = {k: v for k, v in VALID_BODIES[op].items() if k != name}
        body = problem(_send(client, method, path, json.dumps(mutated).encode()), (422,), name)
        _names_path(body, f"$.{name}")


@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in BODY_OPS], ids=[o[2] for o in BODY_OPS]
)
def test_every_leaf_wrong_and_enormous(
    client: TestClient[Litestar], method: str, path: str, op: str
) -> None:
    valid = VALID_BODIES[op]
    for where, value in _leaves(valid):
        jsonpath = _jsonpath(where)
        replacements: list[Any] = [{"an": "object"}]
        if isinstance(value, bool):
            replacements += ["true", 1]
        elif isinstance(value, int | float):
            replacements += [str(value), 10**30, -(10**30), 1e300, -1e300, True]
        elif isinstance(value, str):
            replacements += [12, "x" * 100_000]
        for bad in replacements:
            mutated = copy.deepcopy(valid)
            _set(mutated, where, bad)
            response = _send(client, method, path, json.dumps(mutated).encode())
            body = problem(response, (422,), "")
            _names_path(body, jsonpath)


@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in BODY_OPS], ids=[o[2] for o in BODY_OPS]
)
def test_huge_lists(client: TestClient[Litestar], method: str, path: str, op: str) -> None:
    valid = VALID_BODIES[op]
    for where, value in _lists(valid):
        mutated = copy.deepcopy(valid)
        _set(mutated, where, [value[0]] * 100_000)
        response = _send(client, method, path, json.dumps(mutated).encode())
        body = problem(response, (413, 422), "")
        if response.status_code == 422:
            _names_path(body, _jsonpath(where))


# ------------------------------------------------------------------ targeted cases

ESTIMATE_LIKE = [o for o in BODY_OPS if o[2] in ("estimate_memory", "recommendations", "plan_job")]
MIG_OPS = [o for o in BODY_OPS if o[2] in ("mig_validate", "mig_plan")]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (("workload", "batch_size"), 10**18),
        (("workload", "sequence_length"), 10**12),
        (("model", "parameters"), 10**30),
        (("workload", "batch_size"), 0),
        (("workload", "batch_size"), -1),
        (("workload", "sequence_length"), 0),
        (("workload", "gradient_accumulation_steps"), 10**18),
        (("workload", "max_new_tokens"), 10**12),
        (("workload", "parallelism", "tensor"), 10**9),
    ],
)
@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in ESTIMATE_LIKE], ids=[o[2] for o in ESTIMATE_LIKE]
)
def test_enormous_job_numbers_are_422_naming_the_field(
    client: TestClient[Litestar],
    method: str,
    path: str,
    op: str,
    field: tuple[str, ...],
    value: int,
) -> None:
    body = {
        "model": {"parameters": 7_000_000_000},
        "workload": {"mode": "training", "sequence_length": 1024},
    }
    _set(body, list(field), value)
    answer = problem(_send(client, method, path, json.dumps(body).encode()), (422,), "")
    _names_path(answer, _jsonpath(list(field)))


@pytest.mark.parametrize(
    ("hf_patch", "field"),
    [
        ({"hidden_size": 10**30}, "hidden_size"),
        ({"num_hidden_layers": 10**18}, "num_hidden_layers"),
        ({"vocab_size": -5}, "vocab_size"),
        ({"hidden_size": 1e308}, "hidden_size"),
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"intermediate_size": "wide"}, "intermediate_size"),
        ({"model_type": "mixtral", "num_local_experts": 10**12}, "num_local_experts"),
    ],
)
@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in ESTIMATE_LIKE], ids=[o[2] for o in ESTIMATE_LIKE]
)
def test_enormous_hf_config_values_are_422(
    client: TestClient[Litestar],
    method: str,
    path: str,
    op: str,
    hf_patch: dict[str, Any],
    field: str,
) -> None:
    body = _job(
        op, {"hf_config": {**TINY_LLAMA, **hf_patch}}, {"mode": "training", "sequence_length": 128}
    )
    answer = problem(_send(client, method, path, json.dumps(body).encode()), (422,), field)
    _names_path(answer, "$.model.hf_config")


def test_hf_config_with_too_many_keys_is_422(client: TestClient[Litestar]) -> None:
    for _, path, _, _ in BODY_OPS:
        config = {**TINY_LLAMA, **{f"k{i}": i for i in range(2000)}}
        body = {"model": {"hf_config": config}, "workload": {"mode": "training"}}
        if path.endswith("/trace"):
            body = {"model": {"hf_config": config}}
        answer = problem(_send(client, "POST", path, json.dumps(body).encode()), (422,), "")
        _names_path(answer, "$.model.hf_config")


@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in ESTIMATE_LIKE], ids=[o[2] for o in ESTIMATE_LIKE]
)
def test_unknown_model_and_gpu_are_422_naming_the_field(
    client: TestClient[Litestar], method: str, path: str, op: str
) -> None:
    unknown_model = _job(op, {"name": "no-such-model"}, {"mode": "inference"})
    answer = problem(
        _send(client, method, path, json.dumps(unknown_model).encode()), (422,), "no-such-model"
    )
    _names_path(answer, "$.model.name")
    gpu = _job(op, {"parameters": 10**9}, {"mode": "inference"})
    if op == "estimate_memory":
        gpu["gpu"] = "no-such-gpu"
        where = "$.gpu"
    else:
        gpu["constraints"] = {"include": ["no-such-gpu"]}
        where = "$.constraints.include"
    answer = problem(_send(client, method, path, json.dumps(gpu).encode()), (422,), "no-such-gpu")
    _names_path(answer, where)


def test_100000_workloads_are_refused(client: TestClient[Litestar]) -> None:
    """A plan-style body of 100,000 workloads: over the body limit or a list bound, never a hang."""
    workload = {"mode": "inference", "sequence_length": 1024}
    for _, path, _, _ in ESTIMATE_LIKE:
        body = {"model": {"parameters": 10**9}, "workload": [workload] * 100_000}
        problem(_send(client, "POST", path, json.dumps(body).encode()), (413, 422), "")
        body = {
            "model": {"parameters": 10**9},
            "workloads": [{"mode": "inference"}] * 60_000,
            "workload": workload,
        }
        problem(_send(client, "POST", path, json.dumps(body).encode()), (413, 422), "")


# ------------------------------------------------------------------ query and path


@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in QUERY_OPS], ids=[o[2] for o in QUERY_OPS]
)
def test_bad_query_strings(client: TestClient[Litestar], method: str, path: str, op: str) -> None:
    params = [p for p in SPEC["paths"][path][method.lower()]["parameters"] if p["in"] == "query"]
    url = _concrete(path)
    answer = problem(
        client.request(method, url + "?no_such_parameter=1"), (422,), "no_such_parameter"
    )
    assert answer["errors"][0]["location"] == "query"
    for param in params:
        schema = param["schema"]
        name = param["name"]
        kinds = {schema.get("type")} | {s.get("type") for s in schema.get("anyOf", [])}
        if kinds & {"integer", "number"}:
            for bad in ("abc", str(10**30), "-1e400", "NaN"):
                problem(client.request(method, f"{url}?{name}={bad}"), (422,), name)
        if "array" in kinds:
            query = "&".join(f"{name}=nvidia" for _ in range(1000))
            problem(client.request(method, f"{url}?{query}"), (422,), name)
        if "boolean" in kinds:
            problem(client.request(method, f"{url}?{name}=maybe"), (422,), name)
        if schema.get("enum") or any(
            s.get("enum") for s in schema.get("items", {}).get("anyOf", [])
        ):
            problem(client.request(method, f"{url}?{name}=no-such-value"), (422,), name)


@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in PATH_OPS], ids=[o[2] for o in PATH_OPS]
)
def test_bad_path_parameters(client: TestClient[Litestar], method: str, path: str, op: str) -> None:
    name = path[path.index("{") + 1 : path.index("}")]
    long_url = path.replace("{" + name + "}", "x" * 5000)
    answer = problem(client.request(method, long_url), (422,), name)
    assert answer["errors"][0]["location"] == "path"
    unknown = path.replace("{" + name + "}", "no-such-thing")
    problem(client.request(method, unknown), (404,), "no-such-thing")
    odd = path.replace("{" + name + "}", "%00%ff%2e%2e%2f..%5c")
    assert client.request(method, odd).status_code in (404, 422)


@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in OPERATIONS], ids=[o[2] for o in OPERATIONS]
)
def test_wrong_method_is_405(client: TestClient[Litestar], method: str, path: str, op: str) -> None:
    served = {m.upper() for m in SPEC["paths"][path]}
    other = next(m for m in ("DELETE", "PUT", "PATCH") if m not in served)
    problem(client.request(other, _concrete(path)), (405,), other)


# ------------------------------------------------------------------ helpers


def _job(op: str, model: dict[str, Any], workload: dict[str, Any]) -> dict[str, Any]:
    """The operation's valid body with this model and workload (and matching work volume)."""
    body = copy.deepcopy(VALID_BODIES[op])
    body["model"], body["workload"] = model, workload
    for key in ("training", "inference"):
        body.pop(key, None)
    if op != "estimate_memory":
        if workload.get("mode") == "inference":
            body["inference"] = {"requests_per_second": 1.0}
        else:
            body["training"] = {"training_tokens": 10**9}
    return body


def _request_schema(path: str, method: str) -> dict[str, Any]:
    ref = SPEC["paths"][path][method.lower()]["requestBody"]["content"]["application/json"][
        "schema"
    ]["$ref"]
    schema: dict[str, Any] = SPEC["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return schema


def _walk(value: Any, where: list[Any]) -> Iterator[tuple[list[Any], Any]]:
    yield where, value
    if isinstance(value, dict):
        for key, item in value.items():
            if key in FREE_FORM:
                continue
            yield from _walk(item, [*where, key])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, [*where, index])


def _objects(value: Any) -> list[list[Any]]:
    return [w for w, v in _walk(value, []) if isinstance(v, dict)]


def _leaves(value: Any) -> list[tuple[list[Any], Any]]:
    return [(w, v) for w, v in _walk(value, []) if not isinstance(v, dict | list)]


def _lists(value: Any) -> list[tuple[list[Any], Any]]:
    return [(w, v) for w, v in _walk(value, []) if isinstance(v, list) and v]


def _at(value: Any, where: list[Any]) -> Any:
    for key in where:
        value = value[key]
    return value


def _set(value: Any, where: list[Any], new: Any) -> None:
    parent = value
    for key in where[:-1]:
        parent = parent.setdefault(key, {}) if isinstance(parent, dict) else parent[key]
    parent[where[-1]] = new


def _jsonpath(where: list[Any]) -> str:
    return "$" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in where)


@pytest.mark.parametrize(
    ("method", "path", "op"), [o[:3] for o in MIG_OPS], ids=[o[2] for o in MIG_OPS]
)
def test_unknown_mig_profile_and_gpu_are_422_naming_the_field(
    client: TestClient[Litestar],
    method: str,
    path: str,
    op: str,
) -> None:
    valid = VALID_BODIES[op]
    items = "instances" if op == "mig_validate" else "workloads"
    body = copy.deepcopy(valid)
    body[items][0]["profile"] = "9g.999gb"
    answer = problem(_send(client, method, path, json.dumps(body).encode()), (422,), "9g.999gb")
    assert answer["type"] == "urn:gpuplan:problem:unknown-profile"
    _names_path(answer, f"$.{items}[0].profile")
    for gpu, kind in (("no-such-gpu", ""), ("NVIDIA L40S", "mig-unsupported")):
        body = {**copy.deepcopy(valid), "gpu": gpu}
        answer = problem(_send(client, method, path, json.dumps(body).encode()), (422,), "")
        _names_path(answer, "$.gpu")
        assert answer["type"].endswith(kind)


def test_unknown_mig_profile_in_a_ci_plan_target(client: TestClient[Litestar]) -> None:
    body = copy.deepcopy(VALID_BODIES["plan_job"])
    body["targets"]["mig_profile_at_most"]["profile"] = "9g.999gb"
    answer = problem(
        _send(client, "POST", "/v1/plan", json.dumps(body).encode()), (422,), "9g.999gb"
    )
    _names_path(answer, "$.targets.mig_profile_at_most")
    answer = problem(client.get("/v1/mig/profiles?gpu=no-such-gpu"), (422,), "no-such-gpu")
    _names_path(answer, "$.gpu")
