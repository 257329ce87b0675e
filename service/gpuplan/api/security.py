"""Bearer-token authentication and security headers, outside the router.

Authentication is optional: on a private network behind a mesh the service runs open,
as a CI pipeline or scheduler expects. Once any token is configured
(``GPUPLAN_API_TOKENS`` or a mounted ``GPUPLAN_API_TOKENS_FILE``), every ``/v1`` request
needs ``Authorization: Bearer <token>``, checked before routing so that a stranger
learns nothing, not even which paths exist (an unknown ``/v1`` path answers 401 too).
Tokens are compared with :func:`hmac.compare_digest` against every configured token,
so the time taken says nothing about how much of a guess was right.

The headers go on every answer: ``nosniff`` so a browser never runs a JSON body as
script, ``no-store`` so no proxy keeps a plan (API answers are cheap to recompute and
may name private models), a CSP that forbids everything for JSON, and no referrer. The
two pages, the planner (``/ui``) and the API reference (``/schema``), get a CSP that
admits scripts, styles and requests from the service's own origin and nothing else:
their files are shipped in the package (:mod:`gpuplan.api.ui`). Those files are the one
exception to ``no-store``: they carry an entity tag and ``no-cache`` (revalidate).
"""

import hmac
from collections.abc import Iterable
from typing import Any

import msgspec

from gpuplan.api.problems import PROBLEM_MEDIA_TYPE, TYPE_PREFIX, Problem

ASGIApp = Any

OPERATIONS_PATHS = ("/healthz", "/readyz", "/metrics", "/schema", "/ui")
"""Open even with tokens, unless ``protect_operations`` is set: probes and scrapers
rarely carry tokens, and these paths reveal no plan (the planner page asks for a token
before it calls ``/v1``)."""

JSON_CSP = b"default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
_PAGE = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
UI_CSP = _PAGE + b"; img-src 'self'"
"""The planner: its script draws SVG through the DOM, with no inline script or style."""
DOCS_CSP = _PAGE + b"; img-src 'self' data:"
"""Swagger UI: its style sheet draws its icons as ``data:`` SVG images."""
ASSETS_PREFIX = "/ui/assets/"

_ALWAYS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


def _csp(path: str) -> bytes:
    if path == "/ui":
        return UI_CSP
    if path == "/schema":
        return DOCS_CSP
    return JSON_CSP


def _needs_token(path: str, protect_operations: bool) -> bool:
    if path == "/v1" or path.startswith("/v1/"):
        return True
    return protect_operations


def _is_preflight(scope: dict[str, Any]) -> bool:
    return scope.get("method") == "OPTIONS" and any(
        name == b"access-control-request-method" for name, _ in scope.get("headers", ())
    )


def _bearer(scope: dict[str, Any]) -> bytes | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return bytes(token.strip())
            return None
    return None


def _unauthorized(detail: str, error: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = msgspec.json.encode(
        Problem(type=TYPE_PREFIX + "unauthorized", title="Unauthorized", status=401, detail=detail)
    )
    challenge = b'Bearer realm="gpuplan"'
    if error:
        challenge += b', error="' + error.encode() + b'"'
    return body, [
        (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", challenge),
    ]


class Guard:
    """The ASGI wrapper: checks tokens, then adds the security headers to every answer."""

    def __init__(self, tokens: Iterable[str], protect_operations: bool, cors: bool = False) -> None:
        self._tokens = tuple(t.encode() for t in tokens)
        self._protect_operations = protect_operations
        self._cors = cors

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def authorized(self, presented: bytes | None) -> bool:
        """Whether ``presented`` is one of the tokens, in time independent of the match."""
        if presented is None:
            return False
        ok = False
        for token in self._tokens:  # no early exit: every token is compared
            ok |= hmac.compare_digest(presented, token)
        return ok

    def wrap(self, app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            path: str = scope.get("path", "")
            csp = _csp(path)
            dropped: tuple[bytes, ...] = (b"content-security-policy",)
            if not path.startswith(ASSETS_PREFIX):
                dropped += (b"cache-control",)

            async def with_headers(message: Any) -> None:
                if message["type"] == "http.response.start":
                    headers = [
                        (k, v) for k, v in message.get("headers", ()) if k.lower() not in dropped
                    ]
                    headers.extend(_ALWAYS)
                    headers.append((b"content-security-policy", csp))
                    if not any(k.lower() == b"cache-control" for k, _ in headers):
                        headers.append((b"cache-control", b"no-store"))
                    message = {**message, "headers": headers}
                await send(message)

            if (
                self.enabled
                and not (self._cors and _is_preflight(scope))  # preflights carry no credentials
                and _needs_token(path, self._protect_operations)
            ):
                presented = _bearer(scope)
                if not self.authorized(presented):
                    if presented is None:
                        body, headers = _unauthorized(
                            "this endpoint needs an Authorization: Bearer token", ""
                        )
                    else:
                        body, headers = _unauthorized(
                            "the bearer token is not valid", "invalid_token"
                        )
                    await with_headers(
                        {"type": "http.response.start", "status": 401, "headers": headers}
                    )
                    await send({"type": "http.response.body", "body": body})
                    return
            await app(scope, receive, with_headers)

        return guarded
