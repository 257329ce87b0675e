"""RFC 9457 problem details: the one shape of every 4xx and 5xx body.

Clients (CI pipelines, schedulers) branch on ``status`` and ``type`` and show
``detail`` to a person; a validation problem adds ``errors``, one entry per offending
field with its JSON path, so a plan file's author can find the line to fix. No
exception text or stack trace of ours ever reaches a client: unexpected errors are
logged with an incident id and answered with that id alone.
"""

import logging
import uuid
from http import HTTPStatus
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    ValidationException,
)
from litestar.status_codes import HTTP_413_REQUEST_ENTITY_TOO_LARGE

from gpuplan.api.runtime import runtime
from gpuplan.core.catalog import UnknownGpu
from gpuplan.core.errors import InvalidRequest
from gpuplan.core.mig import MigInputError
from gpuplan.core.record import Record

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:gpuplan:problem:"

log = logging.getLogger("gpuplan.api")


class FieldError(Record):
    """One offending field of a request."""

    path: str
    """JSONPath of the field, ``$.workload.batch_size``; ``$`` is the body or query root."""

    reason: str
    """What is wrong with it."""

    location: Literal["body", "query", "path"] = "body"
    """Which part of the request holds the field."""


class Problem(Record, kw_only=True):
    """An ``application/problem+json`` body (RFC 9457)."""

    type: str = "about:blank"
    """A URN naming the kind of problem (see docs/errors.md), or ``about:blank``."""

    title: str
    """Short summary of the kind of problem; the same for every occurrence."""

    status: Annotated[int, msgspec.Meta(ge=400, le=599)]
    """The HTTP status code."""

    detail: str
    """What went wrong with this request, for a person."""

    instance: str | msgspec.UnsetType = msgspec.UNSET
    """Identifies this occurrence (an incident id for server errors)."""

    errors: list[FieldError] | msgspec.UnsetType = msgspec.UNSET
    """The offending fields of a validation problem."""

    suggestions: list[str] | msgspec.UnsetType = msgspec.UNSET
    """For an unknown name: the closest known ones."""


class InvalidInput(Exception):
    """A request's body, query or path parameters are malformed or invalid.

    Raised by the request decoders; answered 400 (``malformed``: not parseable)
    or 422 (parseable but violates the schema).
    """

    def __init__(self, status: int, kind: str, detail: str, errors: list[FieldError]) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.errors = errors


class UnsupportedMediaType(Exception):
    """The request body is not in a media type the route reads."""

    def __init__(self, got: str, accepted: str) -> None:
        super().__init__(got)
        self.got = got
        self.accepted = accepted


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> Response[Problem]:
    return Response(
        problem, status_code=problem.status, media_type=PROBLEM_MEDIA_TYPE, headers=headers
    )


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def on_invalid_input(request: Request[Any, Any, Any], exc: InvalidInput) -> Response[Problem]:
    return problem_response(
        Problem(
            type=TYPE_PREFIX + exc.kind,
            title=_title(exc.status),
            status=exc.status,
            detail=exc.detail,
            errors=exc.errors,
        )
    )


def on_unsupported_media_type(
    request: Request[Any, Any, Any], exc: UnsupportedMediaType
) -> Response[Problem]:
    return problem_response(
        Problem(
            type=TYPE_PREFIX + "unsupported-media-type",
            title=_title(415),
            status=415,
            detail=f"request body must be {exc.accepted}, got {exc.got or 'no Content-Type'}",
        ),
        headers={"Accept-Post": exc.accepted},
    )


def on_invalid_request(request: Request[Any, Any, Any], exc: InvalidRequest) -> Response[Problem]:
    """The core refused the content of a well-formed request: 422, naming each field."""
    errors = [FieldError(path=path, reason=reason) for path, reason in exc.errors]
    first = errors[0] if errors else FieldError(path="$", reason=str(exc))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return problem_response(
        Problem(
            type=TYPE_PREFIX + "validation",
            title=_title(422),
            status=422,
            detail=f"invalid value at {first.path}: {first.reason}{more}",
            errors=errors or [first],
        )
    )


def on_unknown_gpu(request: Request[Any, Any, Any], exc: UnknownGpu) -> Response[Problem]:
    closest = f"; closest: {', '.join(exc.suggestions)}" if exc.suggestions else ""
    return problem_response(
        Problem(
            type=TYPE_PREFIX + "unknown-gpu",
            title=_title(404),
            status=404,
            detail=f"no GPU in the catalog is named {exc.query!r}{closest}",
            suggestions=exc.suggestions,
        )
    )


def on_mig_input(request: Request[Any, Any, Any], exc: MigInputError) -> Response[Problem]:
    return problem_response(
        Problem(
            type=TYPE_PREFIX + exc.kind,
            title=_title(422),
            status=422,
            detail=f"invalid value at {exc.path}: {exc.reason}",
            errors=[FieldError(path=exc.path, reason=exc.reason, location=exc.location)],
            suggestions=exc.suggestions if exc.suggestions else msgspec.UNSET,
        )
    )


def on_http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Problem]:
    """Litestar's own errors: routing misses, wrong methods, oversized bodies."""
    status = exc.status_code
    headers = dict(exc.headers or {})
    if isinstance(exc, NotFoundException):
        detail = f"no route matches {request.method} {request.url.path}"
    elif isinstance(exc, MethodNotAllowedException):
        allowed = headers.get("Allow") or headers.get("allow") or ""
        detail = f"{request.method} is not allowed on {request.url.path}"
        if allowed:
            detail += f"; allowed: {allowed}"
    elif status == HTTP_413_REQUEST_ENTITY_TOO_LARGE:
        limit = runtime(request).settings.max_body_bytes
        detail = f"request body exceeds the limit of {limit} bytes (setting GPUPLAN_MAX_BODY_BYTES)"
        headers["Connection"] = "close"
    elif isinstance(exc, ValidationException):
        # Only reached by Litestar's own parameter parsing; our routes decode their
        # input themselves (gpuplan.api.decode) and raise InvalidInput instead.
        return problem_response(
            Problem(
                type=TYPE_PREFIX + "invalid-request",
                title=_title(status),
                status=status,
                detail=str(exc.detail),
            )
        )
    else:
        detail = str(exc.detail) if exc.detail else _title(status)
    if status >= 500:
        return on_server_error(request, exc)
    return problem_response(Problem(title=_title(status), status=status, detail=detail), headers)


def on_server_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Problem]:
    """The last resort: log everything, tell the client only an incident id."""
    incident = f"urn:uuid:{uuid.uuid4()}"
    log.error(
        "unhandled error in %s %s (incident %s)",
        request.method,
        request.url.path,
        incident,
        exc_info=exc,
    )
    return problem_response(
        Problem(
            title=_title(500),
            status=500,
            detail=f"an unexpected error occurred; quote incident {incident} when reporting it",
            instance=incident,
        )
    )


class FleetUnavailable(Exception):
    """The live-fleet store is not configured or does not answer."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class UnknownNode(LookupError):
    """No live node goes by that name (never seen, or its agent stopped publishing)."""

    def __init__(self, node: str) -> None:
        super().__init__(node)
        self.node = node


def on_fleet_unavailable(
    request: Request[Any, Any, Any], exc: FleetUnavailable
) -> Response[Problem]:
    return problem_response(
        Problem(
            type=TYPE_PREFIX + "fleet-unavailable", title=_title(503), status=503, detail=exc.detail
        ),
        headers={"Retry-After": "10"},
    )


def on_unknown_node(request: Request[Any, Any, Any], exc: UnknownNode) -> Response[Problem]:
    return problem_response(
        Problem(
            type=TYPE_PREFIX + "unknown-node",
            title=_title(404),
            status=404,
            detail=f"no live node is named {exc.node!r}: it never published, or its agent "
            "stopped and its keys expired",
        )
    )


class ComputationTimeout(Exception):
    """A planning computation ran past ``GPUPLAN_PLANNING_TIMEOUT_SECONDS``."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def on_computation_timeout(
    request: Request[Any, Any, Any], exc: ComputationTimeout
) -> Response[Problem]:
    seconds = exc.seconds
    return problem_response(
        Problem(
            type=TYPE_PREFIX + "computation-timeout",
            title=_title(503),
            status=503,
            detail=f"the planning computation did not finish within {seconds:g} s "
            "(setting GPUPLAN_PLANNING_TIMEOUT_SECONDS); narrow the request or retry later",
        ),
        headers={"Retry-After": "5"},
    )


EXCEPTION_HANDLERS = {
    InvalidInput: on_invalid_input,
    FleetUnavailable: on_fleet_unavailable,
    UnknownNode: on_unknown_node,
    UnsupportedMediaType: on_unsupported_media_type,
    ComputationTimeout: on_computation_timeout,
    InvalidRequest: on_invalid_request,
    UnknownGpu: on_unknown_gpu,
    MigInputError: on_mig_input,
    HTTPException: on_http_exception,
    Exception: on_server_error,
}
