"""``GET`` and ``DELETE /v1/jobs/{id}``: a queued trace's state, answer, cancellation."""

from typing import Any

from litestar import Request

from gpuplan.api.jobs import JobView, UnknownJob, call, queue_of, view
from gpuplan.api.problems import ApiProblem
from gpuplan.api.routing import operation
from gpuplan.api.runtime import runtime
from gpuplan.jobs.queue import NotCancellable


@operation("GET", "/v1/jobs/{id:str}", problems=(404, 503), tags=["jobs"])
async def get_job(request: Request[Any, Any, Any], id: str) -> JobView:
    """A job's state: queued, running, succeeded (with its result) or failed (with the
    problem), or expired once its answer is no longer kept.

    Poll it at the `Location` a `202 Accepted` named (`Retry-After` says how soon).
    A finished job's answer is kept `GPUPLAN_JOB_RESULT_TTL_SECONDS` (an hour by
    default); a trace's result stays in the trace cache longer, so submitting the same
    request again answers at once. A job whose worker was lost is retried once on
    another worker, then fails with a `worker-lost` problem.
    """
    state = runtime(request)
    record = await call(state, queue_of(state, id).get, id)
    if record is None:
        raise UnknownJob(f"no job {id}: job ids are as a 202's Location names them")
    return view(record)


@operation("DELETE", "/v1/jobs/{id:str}", problems=(404, 409, 503), tags=["jobs"])
async def cancel_job(request: Request[Any, Any, Any], id: str) -> JobView:
    """Cancel a job: a queued one never runs, a running one is stopped (its process
    killed). The answer is the job, now failed with a `job-cancelled` problem; a job
    that already finished answers 409.
    """
    state = runtime(request)
    queue = queue_of(state, id)
    try:
        record = await call(state, queue.cancel, id)
    except NotCancellable as exc:
        raise ApiProblem(
            f"job {id} already {exc.record.status}: only a queued or running job can be cancelled",
            status=409,
            kind="job-finished",
        ) from None
    if record is None:
        raise UnknownJob(f"no job {id} (it expired, or never existed)")
    state.job_metrics.count(record.kind, "cancelled")
    return view(record)
