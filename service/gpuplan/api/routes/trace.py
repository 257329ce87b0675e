"""``POST /v1/memory/trace``: a traced estimate of a Hugging Face model built from its config.

The server never runs code a client sends: the request carries a ``config.json``
mapping, and the model is built by transformers' own classes for its
``model_type`` (no ``auto_map``, no ``trust_remote_code``, no hub). The trace runs
on a ``gpuplan worker`` through the job queue when one is configured
(``GPUPLAN_JOB_QUEUE``; :mod:`gpuplan.api.jobs`), else in a subprocess of the server
(:mod:`gpuplan.trace.worker`): either way the event loop stays free, the time limit is
enforced by killing a process, and a process per trace cannot leak fake-mode state
into the server. Before either, the trace's cost is predicted from its config
(:mod:`gpuplan.core.trace.cost`) and one that cannot finish in time is refused. A
semaphore bounds in-process traces per server process, and results are cached in
Redis under a hash of the normalized request.
"""

import asyncio
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

import msgspec
from litestar import Request, Response
from redis.exceptions import RedisError

import gpuplan
from gpuplan.api import jobs
from gpuplan.api.problems import ApiProblem, Problem
from gpuplan.api.routing import operation
from gpuplan.api.runtime import Runtime, runtime
from gpuplan.child import run_child
from gpuplan.core.errors import InvalidRequest
from gpuplan.core.trace import cost
from gpuplan.core.trace.schema import TraceRequest, TraceResult, workload_conflicts
from gpuplan.jobs.tasks import TracePayload
from gpuplan.trace.worker import PROBE_BUDGET_ENV

log = logging.getLogger("gpuplan.api")

EXTRAS = ("torch", "transformers")
_MODEL_TYPE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_PACKAGE_ROOT = str(Path(gpuplan.__file__).resolve().parent.parent)
PROCESS_START_SECONDS = 5.0
"""What a trace subprocess of the server spends importing torch and transformers (2
cores; docs/trace.md), counted against the time limit; a warm worker spends none."""


def missing_extras() -> list[str]:
    """The tracer's libraries that cannot be imported here (without importing them)."""
    missing = []
    for name in EXTRAS:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def cache_key(request: TraceRequest, prefix: str, probe_budget_bytes: int) -> str:
    """Key of ``request``'s result: the hash of its normalized JSON and what else
    decides the answer: the versions (ours, torch's, transformers') and, on runtime
    cpu, the kernel probes' budget."""
    normalized = json.dumps(
        {
            "request": msgspec.to_builtins(request),
            "versions": [gpuplan.__version__, *(_version(name) for name in EXTRAS)],
            "probe_budget_bytes": probe_budget_bytes if request.runtime == "cpu" else None,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return prefix + hashlib.sha256(normalized.encode()).hexdigest()


def trace_gate(request: Request[Any, Any, Any]) -> asyncio.Semaphore:
    """The app's semaphore of traces in flight (made on first use, on the app's loop)."""
    state = request.app.state
    gate = state.get("trace_gate")
    if gate is None:
        gate = state["trace_gate"] = asyncio.Semaphore(
            runtime(request).settings.trace_max_concurrent
        )
    return gate


async def run_worker(
    request: TraceRequest, timeout: float, probe_budget_bytes: int
) -> dict[str, Any] | None:
    """Run one trace in a subprocess; ``None`` when it ran past ``timeout`` (killed)."""
    env = {
        **os.environ,
        PROBE_BUDGET_ENV: str(probe_budget_bytes),
        "PYTHONPATH": os.pathsep.join(
            p for p in (_PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p
        ),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    finished = await run_child(
        (sys.executable, "-m", "gpuplan.trace.worker"),
        msgspec.json.encode(request),
        env=env,
        timeout_seconds=timeout,
    )
    if finished is None:
        return None
    if finished.returncode != 0 or not finished.stdout:
        err = finished.stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"trace worker exited with {finished.returncode}: {err}")
    return msgspec.json.decode(finished.stdout)  # type: ignore[no-any-return]


@operation(
    "POST",
    "/v1/memory/trace",
    body=TraceRequest,
    query=jobs.TraceJobOptions,
    problems=(501, 503, 504),
    tags=["memory"],
    accepted=jobs.JobView,
)
async def trace_memory(
    request: Request[Any, Any, Any], body: TraceRequest, query: jobs.TraceJobOptions
) -> TraceResult:
    """Trace one step of a Hugging Face model on fake tensors: its exact tensor peak.

    The model is built from `model.hf_config` by transformers (random weights, no hub,
    no remote code) under PyTorch's FakeTensorMode: a causal LM, a masked LM, a seq2seq
    model (T5, BART, ...: encoder `input_ids`, `decoder_input_ids` of
    `workload.decoder_sequence_length`) or Whisper (30 s of `input_features`); any other
    family answers 422 naming `$.model.hf_config.model_type`. It takes `workload.steps` steps;
    every tensor storage is accounted, and the answer describes the last step: peak,
    breakdown at the peak, peak per phase, top modules. An inference step with
    `workload.new_tokens` is a prefill and that many greedy decode steps on its KV cache
    (about 1 s per decode step for a 7B model). `runtime: cuda` replays the
    allocations through a model of the CUDA caching allocator (`reserved_bytes`) and adds
    the CUDA context; `runtime: cpu` also measures oneDNN kernels' in-kernel scratch by
    running each distinct call once (`GPUPLAN_TRACE_PROBE_BUDGET_BYTES`).

    The trace's time is predicted from the config first (operator calls per layer,
    measured); one predicted past `GPUPLAN_TRACE_TIMEOUT_SECONDS` is refused at once
    (422 `trace-too-costly`, naming the fields to change and what would fit). Results
    are cached in Redis when it is configured; a cached request answers at once.

    With a job queue (`GPUPLAN_JOB_QUEUE`), traces run on `gpuplan worker` processes:
    `Prefer: respond-async` answers `202 Accepted` with the job and its `Location`
    (`/v1/jobs/{id}`) to poll; without it the route waits for the job, up to the time
    limit (504 then, naming the job). Without a job queue, traces run in a worker
    process of this server: `Prefer: respond-async` is ignored as RFC 7240 allows (the
    answer is the trace, 200, without `Preference-Applied`), at most
    `GPUPLAN_TRACE_MAX_CONCURRENT` run at once per process (503). Needs the `trace`
    extra where traces run (501 without it); one trace takes seconds (a 7B model about
    10 s), bounded by `GPUPLAN_TRACE_TIMEOUT_SECONDS` (504).
    """
    state = runtime(request)
    settings = state.settings
    model_type = body.model.hf_config.get("model_type")
    if not isinstance(model_type, str) or not _MODEL_TYPE.fullmatch(model_type):
        # Refused here, before a worker process (seconds of imports) is started for it.
        reason = f"expected a transformers model type such as 'llama', got {model_type!r}"
        raise InvalidRequest([("$.model.hf_config.model_type", reason)], kind="invalid-model")
    conflicts = workload_conflicts(body.workload, body.runtime)
    if conflicts:
        errors = [(f"$.workload.{field}", why) for field, why in conflicts]
        raise InvalidRequest(errors, kind="invalid-workload")
    queued = state.jobs is not None
    overhead = 0.0 if queued else PROCESS_START_SECONDS
    too_costly = cost.refusal(body, settings.trace_timeout_seconds, overhead)
    if too_costly:
        raise InvalidRequest(too_costly, kind="trace-too-costly")
    respond_async = jobs.prefers_async(request)
    if not queued:
        missing = missing_extras()
        if missing:
            raise jobs.unavailable(
                f"tracing needs the optional extra `trace` ({', '.join(missing)} not installed "
                "on this server); POST /v1/memory/estimate answers without it"
            )
    key = cache_key(body, settings.trace_cache_prefix, settings.trace_probe_budget_bytes)
    cached = await _cached(state, key)
    if cached is not None:
        if respond_async:
            state.job_metrics.count("trace", "cached")
        return cached
    if state.jobs is None:
        # No queue to honour `Prefer: respond-async` with: RFC 7240 §2 lets a server
        # ignore a preference it cannot honour, so the trace runs while the client
        # waits and the answer carries no `Preference-Applied` (refusing it would turn
        # a valid request into a server error).
        return await _in_process(request, state, body, key)
    return await _queued(state, body, key, query.priority, respond_async)  # type: ignore[return-value]


async def _queued(
    state: Runtime, body: TraceRequest, key: str, priority: jobs.Priority, respond_async: bool
) -> TraceResult | Response[jobs.JobView]:
    """The trace as a job: 202 at once, or its answer once a worker has run it."""
    settings = state.settings
    assert state.jobs is not None
    payload = TracePayload(
        request=body,
        probe_budget_bytes=settings.trace_probe_budget_bytes,
        cache_key=key if settings.trace_cache_ttl_seconds > 0 else None,
        cache_ttl_seconds=settings.trace_cache_ttl_seconds,
        timeout_seconds=settings.trace_timeout_seconds,
    )
    job_id = await jobs.call(
        state,
        state.jobs.submit,
        "trace",
        msgspec.to_builtins(payload),
        timeout_seconds=settings.trace_timeout_seconds,
        priority=priority,
    )
    state.job_metrics.count("trace", "submitted")
    if respond_async:
        record = await jobs.call(state, state.jobs.get, job_id)
        assert record is not None  # we just made it
        return jobs.accepted(record)
    record = await jobs.wait(state, job_id, settings.trace_timeout_seconds)
    answered = jobs.view(record)
    if isinstance(answered.result, TraceResult):
        return answered.result
    error = jobs.failure(record)  # the error itself: a refusal keeps its fields' paths
    if error is not None:
        raise error
    if isinstance(answered.problem, Problem):  # an answer another build wrote
        raise ApiProblem(answered.problem.detail, status=500, kind="job-failed")
    raise ApiProblem(
        f"the trace did not finish within {settings.trace_timeout_seconds:g} s (setting "
        f"GPUPLAN_TRACE_TIMEOUT_SECONDS); it is still {record.status} as job {job_id}: "
        f"GET {jobs.location(job_id)} answers when it is done",
        status=504,
        kind="trace-timeout",
    )


async def _cached(state: Runtime, key: str) -> TraceResult | None:
    settings = state.settings
    if state.redis is None or settings.trace_cache_ttl_seconds <= 0:
        return None
    try:
        cached = await state.redis.get(key)
    except (RedisError, OSError) as exc:
        log.warning("trace cache read failed: %s", exc)
        return None
    if cached is None:
        return None
    try:
        return msgspec.json.decode(cached, type=TraceResult)
    except msgspec.ValidationError as exc:
        # Another build under the same version wrote it (a rolling upgrade, a
        # development tree): a miss, recomputed and overwritten, never a 500.
        log.warning("trace cache entry %s does not decode, recomputing: %s", key, exc)
        return None


async def _in_process(
    request: Request[Any, Any, Any], state: Runtime, body: TraceRequest, key: str
) -> TraceResult:
    """The trace in a subprocess of this server (no job queue)."""
    settings = state.settings
    gate = trace_gate(request)
    if gate.locked():
        raise ApiProblem(
            f"{settings.trace_max_concurrent} trace(s) already running in this server "
            "process (setting GPUPLAN_TRACE_MAX_CONCURRENT); retry shortly",
            status=503,
            kind="trace-busy",
            retry_after=5,
        )
    async with gate:
        answer = await run_worker(
            body, settings.trace_timeout_seconds, settings.trace_probe_budget_bytes
        )
    if answer is None:
        raise ApiProblem(
            f"the trace ran past {settings.trace_timeout_seconds:g} s "
            "(setting GPUPLAN_TRACE_TIMEOUT_SECONDS) and was stopped; a smaller "
            "batch or sequence, or the analytic estimate, answers faster",
            status=504,
            kind="trace-timeout",
        )
    if "result" in answer:
        result = msgspec.convert(answer["result"], TraceResult)
        if state.redis is not None and settings.trace_cache_ttl_seconds > 0:
            try:
                await state.redis.set(
                    key, msgspec.json.encode(result), ex=settings.trace_cache_ttl_seconds
                )
            except (RedisError, OSError) as exc:
                log.warning("trace cache write failed: %s", exc)
        return result
    raise jobs.answer_error(answer)
