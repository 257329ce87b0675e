"""The job functions: what a worker's child process runs for each kind of job.

Each takes the JSON payload the API queued and returns a JSON answer; an error the
job itself can explain (a config transformers refuses, a model without fake kernels,
the time limit) is an answer too, so only a lost process is retried. A trace's
result also goes into the trace cache, so the same request answers at once later.
"""

import logging
from typing import Any

import msgspec
from rq import get_current_job
from rq.timeouts import JobTimeoutException

from gpuplan.core.trace.schema import TraceRequest

log = logging.getLogger("gpuplan.jobs")


class TracePayload(msgspec.Struct, kw_only=True):
    """A trace job: the request and what the API's settings decide about it."""

    request: TraceRequest
    probe_budget_bytes: int
    cache_key: str | None = None
    """Where the result goes in the trace cache; ``None``: no caching."""

    cache_ttl_seconds: int = 0
    timeout_seconds: float


def trace_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Trace one request: ``{"result": TraceResult}`` or ``{"error": kind, "detail": …}``."""
    from gpuplan.trace.worker import answer

    job = msgspec.convert(payload, TracePayload)
    try:
        outcome = answer(job.request, job.probe_budget_bytes, passthrough=(JobTimeoutException,))
    except JobTimeoutException:
        return {"error": "timeout", "detail": f"the trace ran past {job.timeout_seconds:g} s"}
    if "result" in outcome and job.cache_key and job.cache_ttl_seconds > 0:
        current = get_current_job()
        if current is not None:
            try:  # stored as the API stores it: the result's JSON
                current.connection.set(
                    job.cache_key, msgspec.json.encode(outcome["result"]), ex=job.cache_ttl_seconds
                )
            except Exception as exc:  # the cache is an optimization: never fail a job for it
                log.warning("trace cache write failed: %s", exc)
    return outcome
