"""The OpenAPI 3.1 document, generated from the routes and their msgspec Structs.

The component schemas are msgspec's own JSON Schema of the types the routes decode
with, so the document says exactly what the decoder enforces (closed objects, bounds,
enums) and cannot drift from it. Field descriptions come from the attribute
docstrings of the Structs, the operations' summaries from the route docstrings.
``api/openapi.yaml`` is this document, committed; a test regenerates and compares it.
"""

import inspect
from http import HTTPStatus
from typing import Any, get_args, get_origin

import msgspec
import yaml
from litestar import Litestar, Response
from litestar.handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute

from gpuplan import __version__
from gpuplan.api.example_files import Example, examples
from gpuplan.api.problems import PROBLEM_MEDIA_TYPE, Problem
from gpuplan.core.describe import describe_components

REF = "#/components/schemas/{name}"

DESCRIPTION = (
    "Answers the hardware questions of ML teams: how much GPU memory a job needs, which "
    "GPUs and how many should run it, at what time, cost and energy, and how to partition "
    "MIG-capable GPUs. Every error is an RFC 9457 `application/problem+json` body."
)


def build_openapi(app: Litestar) -> dict[str, Any]:
    """The OpenAPI document of ``app``'s routes declared with ``operation``."""
    operations = [
        (route, handler, method)
        for route in app.routes
        if isinstance(route, HTTPRoute)
        for handler in route.route_handlers
        if handler.include_in_schema and "returns" in handler.opt
        for method in sorted(handler.http_methods)
    ]
    types: list[Any] = [Problem]
    for _, handler, _ in operations:
        for key in ("body", "query"):
            if handler.opt[key] is not None:
                types.append(handler.opt[key])
        payload = _payload(handler.opt["returns"])
        if _is_struct(payload):
            types.append(payload)
        if handler.opt.get("accepted") is not None:
            types.append(handler.opt["accepted"])
    unique = list(dict.fromkeys(types))
    _, components = msgspec.json.schema_components(unique, ref_template=REF)
    describe_components(unique, components)

    paths: dict[str, dict[str, Any]] = {}
    for route, handler, method in operations:
        paths.setdefault(route.path_format, {})[method.lower()] = _operation(
            route, handler, components
        )
    # Query Structs are parameters, not components, unless a body is one too
    # (GET and POST /v1/fleet/placements take one Struct either way).
    bodies = {handler.opt["body"] for _, handler, _ in operations}
    for _, handler, _ in operations:
        query = handler.opt["query"]
        if query is not None and query not in bodies:
            components.pop(query.__name__, None)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "gpuplan",
            "version": __version__,
            "description": DESCRIPTION,
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "servers": [{"url": "/"}],
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": dict(sorted(components.items()))},
    }


def to_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)


PREFER = {
    "name": "Prefer",
    "in": "header",
    "required": False,
    "description": "`respond-async` (RFC 7240): queue the work and answer `202 Accepted` with "
    "the job at once (needs a job queue; 501 without one). An answer already cached is "
    "given at once with 200 either way.",
    "schema": {"type": "string"},
    "example": "respond-async",
}
ACCEPTED_HEADERS = {
    "Location": {
        "description": "The job to poll: `/v1/jobs/{id}`.",
        "schema": {"type": "string"},
    },
    "Preference-Applied": {
        "description": "`respond-async`.",
        "schema": {"type": "string"},
    },
    "Retry-After": {
        "description": "Seconds to wait before the first poll.",
        "schema": {"type": "integer"},
    },
}

REMEMBERED = (
    "The answer depends on the body alone: each server worker remembers recent ones and "
    "answers a repeated body without computing again. Send `Cache-Control: no-cache` to "
    "have it computed anew."
)


def _operation(
    route: HTTPRoute, handler: HTTPRouteHandler, components: dict[str, Any]
) -> dict[str, Any]:
    opt = handler.opt
    summary, _, description = inspect.cleandoc(handler.fn.__doc__ or "").partition("\n")
    op: dict[str, Any] = {"operationId": handler.handler_name, "summary": summary.strip()}
    if opt.get("remember"):
        description = f"{description.strip()}\n\n{REMEMBERED}"
    if description.strip():
        op["description"] = description.strip()
    if opt["tags"]:
        op["tags"] = list(opt["tags"])
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": _scalar(param.type)}
        for name, param in route.path_parameters.items()
    ]
    if opt["query"] is not None:
        parameters.extend(_query_parameters(components[opt["query"].__name__]))
    if opt.get("accepted") is not None:
        parameters.append(PREFER)
    if parameters:
        op["parameters"] = parameters
    if opt["body"] is not None:
        op["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": REF.format(name=opt["body"].__name__)}}
            },
        }
    status = str(handler.status_code)
    payload = _payload(opt["returns"])
    media_type = getattr(handler.media_type, "value", handler.media_type).split(";")[0]
    if _is_struct(payload):
        content = {media_type: {"schema": {"$ref": REF.format(name=payload.__name__)}}}
    else:
        content = {media_type: {"schema": {"type": "string"}}}
    responses: dict[str, Any] = {
        status: {"description": HTTPStatus(handler.status_code).phrase, "content": content}
    }
    if opt.get("accepted") is not None:
        responses["202"] = {
            "description": "Accepted: queued as a job (with `Prefer: respond-async`)",
            "headers": ACCEPTED_HEADERS,
            "content": {
                "application/json": {"schema": {"$ref": REF.format(name=opt["accepted"].__name__)}}
            },
        }
    for code in opt["problems"]:
        responses[str(code)] = {
            "description": HTTPStatus(code).phrase,
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": REF.format(name="Problem")}}},
        }
    op["responses"] = responses
    example = examples().get(handler.handler_name)
    if example is not None:
        _add_example(op, example, route, media_type)
    return op


def _add_example(op: dict[str, Any], example: Example, route: HTTPRoute, media_type: str) -> None:
    """The operation's recorded example: its body, its parameters' values, its answer."""
    given = dict(example.request.query)
    template, actual = route.path_format.split("/"), example.request.path.split("/")
    given.update(
        (part[1:-1], value)
        for part, value in zip(template, actual, strict=False)
        if part.startswith("{")
    )
    for param in op.get("parameters", []):
        if param["name"] in given:
            param["example"] = given[param["name"]]
    if example.request.body is not None and "requestBody" in op:
        op["requestBody"]["content"]["application/json"]["example"] = example.request.body
    answer = op["responses"].get(str(example.response.status), {}).get("content", {})
    if media_type in answer:
        answer[media_type]["example"] = example.response.body


def _query_parameters(schema: dict[str, Any]) -> list[dict[str, Any]]:
    required = set(schema.get("required", ()))
    params = []
    for name, field_schema in schema.get("properties", {}).items():
        param: dict[str, Any] = {"name": name, "in": "query", "required": name in required}
        prop = dict(field_schema)
        if "description" in prop:
            param["description"] = prop.pop("description")
        param["schema"] = prop
        if prop.get("type") == "array":
            param["style"] = "form"
            param["explode"] = True
        params.append(param)
    return params


def _scalar(type_: type) -> dict[str, Any]:
    return {int: {"type": "integer"}, float: {"type": "number"}}.get(type_, {"type": "string"})


def _payload(returns: Any) -> Any:
    """The body type of a route's return annotation (``Response[X]`` is ``X``)."""
    if get_origin(returns) is Response:
        return get_args(returns)[0]
    return returns


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)
