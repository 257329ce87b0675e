"""Every operation has a recorded example, and the examples say what the service says."""

import msgspec
import pytest
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.api.example_files import examples
from gpuplan.api.openapi import build_openapi
from gpuplan.config.settings import Settings
from tests.examples import DOC, FROM_REQUEST_ALONE, REQUESTS, answer, render_doc

APP = create_app(Settings(answer_cache_bytes=0))
SPEC = build_openapi(APP)
OPERATIONS = {op["operationId"]: op for ops in SPEC["paths"].values() for op in ops.values()}
RETURNS = {
    handler.handler_name: handler.opt["returns"]
    for route in APP.routes
    for handler in getattr(route, "route_handlers", ())
    if "returns" in handler.opt
}


def test_every_operation_has_one() -> None:
    assert set(examples()) == set(OPERATIONS) == set(REQUESTS)


@pytest.mark.parametrize("name", sorted(FROM_REQUEST_ALONE))
def test_the_recorded_answer_is_the_services(name: str) -> None:
    example = examples()[name]
    with TestClient(APP) as client:
        live = answer(client, example.request)
    assert live == example.response, f"{name}: re-record with `python -m tests.examples`"


@pytest.mark.parametrize("name", sorted(set(REQUESTS) - FROM_REQUEST_ALONE - {"metrics"}))
def test_a_live_answer_fits_its_schema(name: str) -> None:
    # Fleet, trace, readiness and version answers change from run to run: the recorded
    # one must still decode as the operation's answer.
    example = examples()[name]
    assert example.response.status == 200
    msgspec.convert(example.response.body, RETURNS[name])


def test_the_document_carries_each_example() -> None:
    op = OPERATIONS["mig_plan"]
    example = examples()["mig_plan"]
    assert op["requestBody"]["content"]["application/json"]["example"] == example.request.body
    assert op["responses"]["200"]["content"]["application/json"]["example"] == example.response.body
    params = {p["name"]: p.get("example") for p in OPERATIONS["get_gpu"]["parameters"]}
    assert params == {"id_or_alias": "NVIDIA-H100-80GB-HBM3"}


def test_docs_show_the_recorded_examples() -> None:
    assert DOC.read_text(encoding="utf-8") == render_doc(examples()), (
        "docs/api-examples.md is stale: run `python -m tests.examples`"
    )
