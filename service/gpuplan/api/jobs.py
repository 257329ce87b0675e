"""Jobs over HTTP: ``Prefer: respond-async``, the job resource, and waiting on a job.

The queue (:mod:`gpuplan.jobs.queue`) speaks blocking Redis; every call here runs in
a thread with a time bound, so a slow Redis costs a request a 503, never the event
loop. A job's record becomes :class:`JobView`: its result as the synchronous route
answers it, or its failure as the problem the synchronous route would have answered.
"""

import asyncio
import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, TypeVar

import msgspec
from litestar import Request, Response

from gpuplan.api.problems import ApiProblem, Problem, problem_of
from gpuplan.api.runtime import Runtime
from gpuplan.core.errors import GpuplanError, InvalidRequest
from gpuplan.core.record import Record
from gpuplan.core.trace.schema import TraceResult
from gpuplan.jobs.queue import JobQueue, JobRecord, QueueError

T = TypeVar("T")

JobStatus = Literal["queued", "running", "succeeded", "failed", "expired"]
Priority = Literal["high", "normal", "low"]


class JobView(Record, kw_only=True):
    """A job of the queue: a trace submitted with ``Prefer: respond-async``."""

    id: str
    kind: Literal["trace"]
    status: JobStatus
    """``queued``, ``running``, ``succeeded`` (``result`` holds the answer), ``failed``
    (``problem`` says why: the trace's own error, the time limit, a lost worker, a
    cancellation) or ``expired`` (finished longer ago than answers are kept:
    ``GPUPLAN_JOB_RESULT_TTL_SECONDS``)."""

    priority: Priority = "normal"
    submitted_at: datetime
    started_at: datetime | None = None
    """When a worker started its last run."""

    finished_at: datetime | None = None
    runs: int = 0
    """Times a worker started it: 2 when its first worker was lost and it was retried."""

    result: TraceResult | msgspec.UnsetType = msgspec.UNSET
    """The answer, as ``POST /v1/memory/trace`` answers it without ``Prefer``."""

    problem: Problem | msgspec.UnsetType = msgspec.UNSET
    """Why it failed, as the synchronous route would have answered (RFC 9457)."""


class TraceJobOptions(Record):
    """How a trace is queued (query parameters of ``POST /v1/memory/trace``)."""

    priority: Priority = "normal"
    """Queue: a worker takes the oldest trace of the highest priority first (with a job
    queue; without one, traces run as they come)."""


class UnknownJob(ApiProblem):
    status = 404
    kind = "unknown-job"


def prefers_async(request: Request[Any, Any, Any]) -> bool:
    """Whether a ``Prefer`` header (RFC 7240) asks for ``respond-async``."""
    return any(
        preference.split(";")[0].split("=")[0].strip().lower() == "respond-async"
        for header in request.headers.getall("prefer", [])
        for preference in header.split(",")
    )


async def call(state: Runtime, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A queue call in a thread, bounded; 503 when Redis does not answer."""
    try:
        async with asyncio.timeout(max(state.settings.redis_timeout_seconds * 10, 5.0)):
            return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))
    except (*QueueError, TimeoutError):
        raise ApiProblem(
            "the job queue (Redis) does not answer; retry later",
            status=503,
            kind="queue-unavailable",
            retry_after=5,
        ) from None


def queue_of(state: Runtime, job_id: str) -> JobQueue:
    if state.jobs is None:
        raise UnknownJob(
            f"no job {job_id}: this server has no job queue (setting GPUPLAN_JOB_QUEUE is off)"
        )
    return state.jobs


FAILURES: dict[str, tuple[int, str]] = {
    "lost": (500, "worker-lost"),
    "cancelled": (409, "job-cancelled"),
    "vanished": (503, "job-lost"),
}
"""Status and problem type of each way a job fails outside its own answer."""


def failure(record: JobRecord) -> GpuplanError | None:
    """The error a finished job stands for; ``None`` when it succeeded or is not done."""
    if record.status != "failed":
        return None
    if record.failure is None:
        return answer_error(record.answer if isinstance(record.answer, dict) else {})
    if record.failure in FAILURES:
        status, kind = FAILURES[record.failure]
        return ApiProblem(record.detail, status=status, kind=kind)
    if record.failure == "timeout":
        return ApiProblem(
            f"{record.detail} (setting GPUPLAN_TRACE_TIMEOUT_SECONDS)",
            status=504,
            kind="trace-timeout",
        )
    return ApiProblem(
        f"the job failed unexpectedly ({record.detail}); quote job {record.id} when reporting it",
        status=500,
        kind="job-failed",
    )


def view(record: JobRecord) -> JobView:
    result: TraceResult | msgspec.UnsetType = msgspec.UNSET
    problem: Problem | msgspec.UnsetType = msgspec.UNSET
    error = failure(record)
    if record.status == "succeeded":
        try:
            result = msgspec.convert(record.answer["result"], TraceResult)
        except msgspec.ValidationError:
            # A worker of another build answered (a rolling upgrade): say so, never a 500.
            error = ApiProblem(
                f"job {record.id}'s answer comes from a worker of another gpuplan build; "
                "submit it again",
                status=500,
                kind="job-failed",
            )
    if error is not None:
        problem = problem_of(error)
    return JobView(
        id=record.id,
        kind="trace",
        status="failed" if error is not None else record.status,
        priority=record.priority if record.priority in ("high", "low") else "normal",  # type: ignore[arg-type]
        submitted_at=record.submitted_at,
        started_at=record.started_at,
        finished_at=record.finished_at,
        runs=record.runs,
        result=result,
        problem=problem,
    )


def location(job_id: str) -> str:
    return f"/v1/jobs/{job_id}"


def accepted(record: JobRecord) -> Response[JobView]:
    """202 for a queued job: where to poll it, and that the preference was applied."""
    return Response(
        view(record),
        status_code=202,
        headers={
            "Location": location(record.id),
            "Preference-Applied": "respond-async",
            "Retry-After": "1",
            "Vary": "Prefer",
        },
    )


async def wait(state: Runtime, job_id: str, seconds: float) -> JobRecord:
    """Poll a job until it finishes or ``seconds`` pass (then its last record)."""
    queue = queue_of(state, job_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    pause = 0.02
    while True:
        record = await call(state, queue.get, job_id)
        if record is None:  # not ours: cannot happen for an id we made
            raise UnknownJob(f"no job {job_id}")
        if record.status in ("succeeded", "failed", "expired") or loop.time() >= deadline:
            return record
        await asyncio.sleep(min(pause, max(deadline - loop.time(), 0.0)))
        pause = min(pause * 1.5, 0.1)


def unavailable(detail: str) -> ApiProblem:
    """This server cannot trace: the `trace` extra is not installed."""
    return ApiProblem(detail, status=501, kind="trace-unavailable")


def answer_error(answer: dict[str, Any]) -> GpuplanError:
    """The error a worker's error answer stands for."""
    kind, detail = answer.get("error"), str(answer.get("detail", ""))
    if kind == "timeout":
        return ApiProblem(
            f"{detail} (setting GPUPLAN_TRACE_TIMEOUT_SECONDS) and was stopped; a smaller "
            "batch or sequence, or the analytic estimate, answers faster",
            status=504,
            kind="trace-timeout",
        )
    if kind == "missing":
        return unavailable(f"tracing needs the optional extra `trace`: {detail}")
    if kind == "invalid":
        path = str(answer.get("path") or "$.model.hf_config")
        problem = "invalid-workload" if path.startswith("$.workload") else "invalid-model"
        return InvalidRequest([(path, detail)], kind=problem)
    return ApiProblem(
        f"the model could not be traced under fake tensors: {detail}",
        status=422,
        kind="untraceable",
    )
