"""The one way a route is declared: :func:`operation`.

A route names its input and output types once, here, and three things follow from
that declaration: the request is decoded strictly into those types
(:mod:`gpuplan.api.decode`), the response is serialised from the declared return
type, and the OpenAPI document (:mod:`gpuplan.api.openapi`) is generated from the
same types. Declaring a type twice, once for validation and once for the docs, is
how specs drift; here there is nothing to drift.
"""

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from litestar import Request, Response
from litestar.enums import MediaType
from litestar.handlers import HTTPRouteHandler, route

from gpuplan.api.answers import Encoded
from gpuplan.api.decode import check_path_parameters, decode_json, decode_query, read_body
from gpuplan.api.runtime import runtime

R = TypeVar("R")

Method = Literal["GET", "POST", "PUT", "DELETE"]

BODY_PROBLEMS = (400, 413, 415, 422)
QUERY_PROBLEMS = (422,)


def operation(
    method: Method,
    path: str,
    *,
    body: type | None = None,
    query: type | None = None,
    problems: Iterable[int] = (),
    tags: Iterable[str] = (),
    status_code: int = 200,
    media_type: str = MediaType.JSON,
    include_in_schema: bool = True,
    name: str | None = None,
    remember: bool = False,
    accepted: type | None = None,
) -> Callable[[Callable[..., Awaitable[Any]]], HTTPRouteHandler]:
    """Declare a route.

    The decorated coroutine is called as ``fn(request, **path_params, body=…, query=…)``
    with ``body`` and ``query`` decoded into the declared types (only those declared).
    Its first docstring line becomes the operation's summary, the rest its description.
    ``problems`` lists the 4xx/5xx statuses it can answer beyond those its inputs imply.
    ``name`` (default: the function's name) is the route's name for reverse lookups.

    A coroutine may return :class:`~gpuplan.api.answers.Encoded` ``[X]`` (what
    :func:`~gpuplan.api.compute.bounded` gives): the bytes are sent as they are, and the
    operation is documented as returning ``X``. ``remember`` declares the answer a pure
    function of the body: it is stored in the app's answer cache, which serves a
    repeated body (:mod:`gpuplan.api.answer_cache`). ``accepted`` declares that the
    operation honours ``Prefer: respond-async`` (RFC 7240) with a ``202 Accepted`` of
    this type (the coroutine returns that ``Response`` itself).
    """
    codes = set(problems)
    if "{" in path:
        codes.add(422)  # a path parameter over the length limit
    if body is not None:
        codes.update(BODY_PROBLEMS)
    if query is not None:
        codes.update(QUERY_PROBLEMS)

    if remember and (
        body is None
        or query is not None
        or "{" in path
        or (status_code, media_type) != (200, MediaType.JSON)
    ):
        # What the answer cache serves: 200 application/json for the body alone.
        raise ValueError(f"{path}: only a JSON answer the body alone determines is remembered")

    def decorate(fn: Callable[..., Awaitable[Any]]) -> HTTPRouteHandler:
        returns = get_type_hints(fn)["return"]
        if get_origin(returns) is Encoded:
            (returns,) = get_args(returns)

        def send(answer: Encoded[Any]) -> Response[bytes]:
            return Response(answer.json, media_type=media_type, status_code=status_code)

        async def handler(request: Request[Any, Any, Any]) -> Any:
            kwargs: dict[str, Any] = dict(request.path_params)
            check_path_parameters(kwargs)
            raw = b""
            if query is not None:  # before the body: a bad query needs no body read
                kwargs["query"] = decode_query(request, query)
            if body is not None:
                raw = await read_body(request)
                kwargs["body"] = decode_json(raw, body)
            result = await fn(request, **kwargs)
            if not isinstance(result, Encoded):
                return result
            if remember:
                runtime(request).answers.put(path, raw, result.json)
            return send(result)

        # Litestar reads the signature and hints of the handler it is given: show it
        # a handler of one parameter with the declared return type, named as ``fn``.
        handler.__annotations__ = {"request": Request, "return": returns}
        handler.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter(
                    "request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request
                )
            ],
            return_annotation=returns,
        )
        handler.__name__ = fn.__name__
        handler.__qualname__ = fn.__qualname__
        handler.__doc__ = fn.__doc__
        handler.__module__ = fn.__module__
        return route(
            path,
            http_method=[method],
            name=name or fn.__name__,
            status_code=status_code,
            media_type=media_type,
            include_in_schema=include_in_schema,
            opt={
                "body": body,
                "query": query,
                "returns": returns,
                "problems": tuple(sorted(codes | {500})),
                "tags": tuple(tags),
                "remember": remember,
                "accepted": accepted,
            },
        )(handler)

    return decorate
