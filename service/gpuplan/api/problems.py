"""RFC 9457 problem details: the one shape of every 4xx and 5xx body, and the one table
that maps an exception to its problem.

Clients (CI pipelines, schedulers) branch on ``status`` and ``type`` and show
``detail`` to a person; a validation problem adds ``errors``, one entry per offending
field with its JSON path, so a plan file's author can find the line to fix. No
exception text or stack trace of ours ever reaches a client: unexpected errors are
logged with an incident id and answered with that id alone.

The core's errors (:mod:`gpuplan.core.errors`) and the few this adapter adds below are
mapped in :data:`PROBLEMS`, the most specific class first; :func:`answer_problem` is the
app's only exception handler.
"""

import logging
import uuid
from collections.abc import Callable
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
from gpuplan.core.errors import GpuplanError, InvalidRequest
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


class ApiProblem(GpuplanError):
    """A refusal only the HTTP adapter makes: its status, problem type and detail.

    Subclasses fix the status and type of a refusal raised in several places; a route's
    one-off refusal passes them (``ApiProblem(detail, status=504, kind="trace-timeout")``).
    """

    status: int = 500
    kind: str = "about:blank"
    retry_after: int | None = None

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        kind: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        if status is not None:
            self.status = status
        if kind is not None:
            self.kind = kind
        if retry_after is not None:
            self.retry_after = retry_after


class MalformedBody(ApiProblem):
    """The body is not a JSON document this API reads (not JSON, empty, too deep, a
    repeated key): 400. Parseable but invalid content is an ``InvalidRequest`` (422)."""

    status = 400
    kind = "malformed-json"

    def __init__(self, detail: str, kind: str = "malformed-json", repeated_key: str = "") -> None:
        super().__init__(detail, kind=kind)
        self.repeated_key = repeated_key


class UnsupportedMediaType(ApiProblem):
    """The request body is not in a media type the route reads: 415."""

    status = 415
    kind = "unsupported-media-type"

    def __init__(self, got: str, accepted: str) -> None:
        super().__init__(f"request body must be {accepted}, got {got or 'no Content-Type'}")
        self.accepted = accepted


class FleetUnavailable(ApiProblem):
    """The live-fleet store does not answer (a Redis outage): 503, worth a retry."""

    status = 503
    kind = "fleet-unavailable"
    retry_after = 10


class FleetNotConfigured(ApiProblem):
    """This deployment has no live-fleet store (``GPUPLAN_REDIS_URL`` unset): 404.

    Not a 503: nothing here is temporary, so a retry (what ``Retry-After`` invites) would
    never succeed, and a schema fuzzer rightly counts any 5xx as a server error. The
    fleet resources do not exist on such a server, as RFC 9110 §15.5.5 reads 404.
    """

    status = 404
    kind = "fleet-not-configured"


class UnknownNode(ApiProblem):
    """No live node goes by that name (never seen, or its agent stopped publishing): 404."""

    status = 404
    kind = "unknown-node"

    def __init__(self, node: str) -> None:
        super().__init__(
            f"no live node is named {node!r}: it never published, or its agent "
            "stopped and its keys expired"
        )
        self.node = node


class ComputationTimeout(ApiProblem):
    """A planning computation ran past ``GPUPLAN_PLANNING_TIMEOUT_SECONDS``: 503."""

    status = 503
    kind = "computation-timeout"
    retry_after = 5

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"the planning computation did not finish within {seconds:g} s "
            "(setting GPUPLAN_PLANNING_TIMEOUT_SECONDS); narrow the request or retry later"
        )
        self.seconds = seconds


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> Response[Problem]:
    return Response(
        problem, status_code=problem.status, media_type=PROBLEM_MEDIA_TYPE, headers=headers
    )


def title(status: int) -> str:
    """The HTTP reason phrase of ``status``: a problem's ``title``."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


Answer = tuple[Problem, dict[str, str]]
"""A problem and the headers that go with it."""


def _invalid_request(request: Request[Any, Any, Any] | None, exc: InvalidRequest) -> Answer:
    """The request's content is refused: 422, naming each field."""
    errors = [FieldError(path=p, reason=r, location=exc.location) for p, r in exc.errors]
    return Problem(
        type=TYPE_PREFIX + exc.kind,
        title=title(422),
        status=422,
        detail=exc.detail,
        errors=errors,
        suggestions=exc.suggestions or msgspec.UNSET,
    ), {}


def _unknown_gpu(request: Request[Any, Any, Any], exc: UnknownGpu) -> Answer:
    return Problem(
        type=TYPE_PREFIX + "unknown-gpu",
        title=title(404),
        status=404,
        detail=exc.reason,
        suggestions=exc.suggestions,
    ), {}


def _api_problem(request: Request[Any, Any, Any] | None, exc: ApiProblem) -> Answer:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else {}
    errors: list[FieldError] | msgspec.UnsetType = msgspec.UNSET
    if isinstance(exc, UnsupportedMediaType):
        headers["Accept-Post"] = exc.accepted
    if isinstance(exc, MalformedBody):
        errors = []
        if exc.repeated_key:
            errors = [FieldError(path=f"$..{exc.repeated_key}", reason="duplicate key")]
    kind = exc.kind if exc.kind == "about:blank" else TYPE_PREFIX + exc.kind
    problem = Problem(
        type=kind, title=title(exc.status), status=exc.status, detail=exc.detail, errors=errors
    )
    return problem, headers


def _http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Answer:
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
        # input themselves (gpuplan.api.decode).
        kind = TYPE_PREFIX + "invalid-request"
        return Problem(type=kind, title=title(status), status=status, detail=str(exc.detail)), {}
    else:
        detail = str(exc.detail) if exc.detail else title(status)
    if status >= 500:
        return _server_error(request, exc)
    return Problem(title=title(status), status=status, detail=detail), headers


def _server_error(request: Request[Any, Any, Any], exc: Exception) -> Answer:
    """The last resort: log everything, tell the client only an incident id."""
    incident = f"urn:uuid:{uuid.uuid4()}"
    log.error(
        "unhandled error in %s %s (incident %s)",
        request.method,
        request.url.path,
        incident,
        exc_info=exc,
    )
    return Problem(
        title=title(500),
        status=500,
        detail=f"an unexpected error occurred; quote incident {incident} when reporting it",
        instance=incident,
    ), {}


def problem_of(exc: GpuplanError) -> Problem:
    """The problem of one of our errors, outside a request (a queued job's failure)."""
    if isinstance(exc, InvalidRequest):
        return _invalid_request(None, exc)[0]
    if isinstance(exc, ApiProblem):
        return _api_problem(None, exc)[0]
    return Problem(title=title(500), status=500, detail=str(exc))


PROBLEMS: dict[type[Exception], Callable[[Request[Any, Any, Any], Any], Answer]] = {
    InvalidRequest: _invalid_request,
    UnknownGpu: _unknown_gpu,
    ApiProblem: _api_problem,
    HTTPException: _http_exception,
    Exception: _server_error,
}
"""Each exception class's problem; an exception takes the entry of its nearest class."""


def answer_problem(request: Request[Any, Any, Any], exc: Exception) -> Response[Problem]:
    """The app's exception handler: the problem of ``exc`` per :data:`PROBLEMS`."""
    to_problem = next(PROBLEMS[k] for k in type(exc).__mro__ if k in PROBLEMS)
    problem, headers = to_problem(request, exc)
    return problem_response(problem, headers or None)
