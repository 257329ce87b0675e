"""Calling a gpuplan server (``--api URL``): submit, wait on a queued job, report.

A request is sent with ``Prefer: respond-async`` (RFC 7240). A server that queues the
work answers ``202`` with the job's ``Location``, which is polled until the job is done;
a server that answers at once (a cached trace, a plan, a server without a job queue)
is read as it is (it ignores the preference, as RFC 7240 allows), and an older server
that refused it (501 ``async-unavailable``) is asked again without it. On a terminal, a progress line on stderr shows the job going
queued → running → done; Ctrl-C cancels a queued or running job before exiting.

Errors follow :mod:`gpuplan.cli.errors`: a refused input is an
:class:`~gpuplan.core.errors.InvalidRequest` naming the server's fields (exit 2), a
job that failed on its own account a :class:`JobFailed` (exit 1), an unreachable or
failing server :class:`~gpuplan.cli.errors.Unavailable` (exit 3).
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click

from gpuplan.cli.errors import Unavailable
from gpuplan.core.errors import GpuplanError, InvalidRequest

INVALID_STATUSES = frozenset({400, 413, 415, 422})
"""Answers that blame the input (malformed, too large, refused); others blame the server."""

FAILED_STATUSES = frozenset({409, 422, 501, 504})
"""A job's problem statuses that are its own outcome (cancelled, untraceable, too slow),
not the server's failure."""


class JobFailed(GpuplanError):
    """A job ran and failed (exit 1): the server's problem, for a person."""


F = TypeVar("F", bound=Callable[..., Any])


def token_file_option(command: F) -> F:
    """``--token-file FILE`` [env ``GPUPLAN_API_TOKEN_FILE``]; the command takes
    ``token_file`` and reads the token with :func:`token_from`."""
    return click.option(
        "--token-file",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar="GPUPLAN_API_TOKEN_FILE",
        help="--api: a file holding the server's bearer token [env GPUPLAN_API_TOKEN_FILE; "
        "or the token itself in GPUPLAN_API_TOKEN].",
    )(command)


def token_from(token_file: Path | None) -> str | None:
    """The bearer token: from ``--token-file`` (a mounted secret), else
    ``GPUPLAN_API_TOKEN`` (a CI secret variable). Never from the command line, where
    other users of the machine would see it in the process list."""
    if token_file is None:
        return os.environ.get("GPUPLAN_API_TOKEN", "").strip() or None
    try:
        token = token_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read it ({exc})", param_hint="--token-file") from None
    if not token or any(c.isspace() for c in token):
        raise click.BadParameter("must hold one token (no spaces)", param_hint="--token-file")
    return token


def check_url(api: str) -> None:
    if not api.startswith(("http://", "https://")):
        raise click.BadParameter("give an http:// or https:// URL", param_hint="--api")


def problem_text(status: int, body: bytes) -> str:
    """A problem+json body's detail; raw text when it is not one."""
    try:
        problem = json.loads(body)
        return f"HTTP {status}: {problem.get('detail') or problem.get('title') or ''}"
    except (ValueError, AttributeError):
        return f"HTTP {status}: {body.decode(errors='replace')[:500]}"


def refusal(status: int, body: bytes) -> InvalidRequest:
    """The server's refusal of the input, naming the fields it named."""
    try:
        problem = json.loads(body)
        errors = [(e.get("path", "$"), e.get("reason", "")) for e in problem.get("errors") or []]
    except (ValueError, AttributeError):
        errors = []
    return InvalidRequest(errors or [("$", problem_text(status, body))])


class Progress:
    """One line on a terminal's stderr, rewritten in place; silent elsewhere."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.on = self.stream.isatty()
        self.label = label
        self.started = time.monotonic()
        self.width = 0

    def show(self, state: str) -> None:
        if not self.on:
            return
        text = f"{self.label}: {state} ({time.monotonic() - self.started:.0f} s)"
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def done(self, state: str) -> None:
        if not self.on:
            return
        self.show(state)
        self.stream.write("\n")
        self.stream.flush()


class Server:
    """A gpuplan server at ``api``, called with an optional bearer token."""

    def __init__(self, api: str, token: str | None, timeout: float) -> None:
        self.api = api.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _request(
        self, method: str, path: str, body: bytes | None = None, prefer: str | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        headers = {"accept": "application/json"}
        if body is not None:
            headers["content-type"] = "application/json"
        if prefer is not None:
            headers["prefer"] = prefer
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(  # noqa: S310 (the scheme is checked by the command)
            self.api + path, data=body, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as response:  # noqa: S310
                return response.status, dict(response.headers.items()), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers.items()), exc.read()
        except (urllib.error.URLError, OSError) as exc:
            raise Unavailable(f"cannot reach {self.api}: {getattr(exc, 'reason', exc)}") from None

    def _failed(self, status: int, body: bytes) -> GpuplanError:
        if status in INVALID_STATUSES:
            return refusal(status, body)
        # 404/405: no such route there (a wrong URL, an older server); 5xx: it failed.
        return Unavailable(f"{self.api} answered {status}: {problem_text(status, body)}")

    def submit(
        self, path: str, body: bytes, progress: Progress, poll_seconds: float = 1.0
    ) -> bytes:
        """POST ``body`` to ``path``; the answer's JSON once it is done (waiting on a job)."""
        progress.show("submitting")
        status, headers, payload = self._request("POST", path, body, prefer="respond-async")
        if status == 501 and b"async-unavailable" in payload:
            progress.show("running on the server")  # no queue there: it traces while we wait
            status, headers, payload = self._request("POST", path, body)
        if status == 200:
            progress.done("done")
            return payload
        if status != 202:
            progress.done(f"failed ({status})")
            raise self._failed(status, payload)
        location = headers.get("Location") or headers.get("location")
        if not location:
            raise Unavailable(f"{self.api} answered 202 without a Location to poll")
        return self._wait(location, progress, poll_seconds)

    def _wait(self, location: str, progress: Progress, poll_seconds: float) -> bytes:
        job = location.rsplit("/", 1)[-1]
        progress.label = f"{progress.label} {job}"
        try:
            while True:
                status, _, payload = self._request("GET", location)
                if status != 200:
                    progress.done(f"failed ({status})")
                    raise self._failed(status, payload)
                state = json.loads(payload)
                progress.show(state["status"] + _runs(state))
                if state["status"] == "succeeded":
                    progress.done("done")
                    return json.dumps(state["result"]).encode()
                if state["status"] in ("failed", "expired"):
                    progress.done(state["status"])
                    raise _job_error(state)
                time.sleep(poll_seconds)
        except KeyboardInterrupt:
            self._request("DELETE", location)
            progress.done("cancelled")
            raise


def _runs(state: dict[str, Any]) -> str:
    runs = int(state.get("runs") or 0)
    return f", run {runs}" if runs > 1 else ""


def _job_error(state: dict[str, Any]) -> GpuplanError:
    """A failed or expired job's error: its problem, as the synchronous call would say."""
    if state["status"] == "expired":
        return Unavailable(f"job {state['id']} expired before its answer was read")
    problem = state.get("problem") or {}
    status = int(problem.get("status") or 500)
    if status in INVALID_STATUSES and problem.get("errors"):
        return InvalidRequest([(e["path"], e["reason"]) for e in problem["errors"]])
    detail = f"job {state['id']}: {problem.get('detail', 'failed')}"
    return JobFailed(detail) if status in FAILED_STATUSES else Unavailable(detail)
