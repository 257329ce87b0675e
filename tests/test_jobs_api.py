"""The job resource over HTTP with a real Redis and no worker: 202s, polling, cancelling,
expiry, refusals. Worker processes are in tests/test_jobs_workers.py (slow)."""

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
import redis
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.api.routes import trace as trace_route
from gpuplan.config.settings import Settings, SettingsError, load_settings
from gpuplan.core.trace.schema import TraceRequest
from gpuplan.jobs.queue import new_id, queue_name
from tests.helpers import TINY_LLAMA, drop_jobs, job_settings, problem, problem_at

BODY = {
    "model": {"hf_config": TINY_LLAMA},
    "workload": {"mode": "training", "batch_size": 1, "sequence_length": 32},
    "runtime": "cpu",
}
ASYNC = {"Prefer": "respond-async"}


@pytest.fixture
def client(redis_url: str, key_prefix: str) -> Iterator[TestClient[Litestar]]:
    with TestClient(app=create_app(job_settings(redis_url, key_prefix))) as test_client:
        yield test_client
    drop_jobs(redis_url, key_prefix)


def test_respond_async_answers_202_with_the_job_to_poll(
    client: TestClient[Litestar], redis_url: str, key_prefix: str
) -> None:
    response = client.post("/v1/memory/trace", json=BODY, headers=ASYNC)
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert response.headers["preference-applied"] == "respond-async"
    assert job["status"] == "queued"
    assert job["kind"] == "trace"
    assert job["runs"] == 0
    assert "result" not in job
    assert "problem" not in job
    polled = client.get(response.headers["location"])
    assert polled.status_code == 200
    assert polled.json()["status"] == "queued"
    queue = queue_name(f"{key_prefix}jobs:", "trace", "normal")
    assert redis.Redis.from_url(redis_url).llen(f"rq:queue:{queue}") == 1


def test_priority_picks_the_queue(
    client: TestClient[Litestar], redis_url: str, key_prefix: str
) -> None:
    response = client.post("/v1/memory/trace?priority=high", json=BODY, headers=ASYNC)
    assert response.status_code == 202
    assert response.json()["priority"] == "high"
    queue = queue_name(f"{key_prefix}jobs:", "trace", "high")
    assert redis.Redis.from_url(redis_url).llen(f"rq:queue:{queue}") == 1
    problem_at(client.post("/v1/memory/trace?priority=urgent", json=BODY), "$.priority")


def test_cancel_a_queued_job(client: TestClient[Litestar]) -> None:
    location = client.post("/v1/memory/trace", json=BODY, headers=ASYNC).headers["location"]
    cancelled = client.delete(location)
    assert cancelled.status_code == 200, cancelled.text
    job = cancelled.json()
    assert job["status"] == "failed"
    assert job["problem"]["type"] == "urn:gpuplan:problem:job-cancelled"
    assert job["problem"]["status"] == 409
    assert client.get(location).json()["status"] == "failed"
    problem(client.delete(location), 409, "already failed")


def test_a_cached_trace_answers_at_once_even_asynchronously(
    client: TestClient[Litestar], redis_url: str, key_prefix: str
) -> None:
    result = {
        "parameters": 1, "trainable_parameters": 1, "peak_bytes": 2, "reserved_bytes": 2,
        "device_bytes": 2, "required_bytes": 3,
        "total_bytes": 2, "peak_phase": "forward",
        "breakdown": {"parameters_bytes": 1, "gradients_bytes": 0, "optimizer_state_bytes": 0,
                      "activations_bytes": 1, "temporary_bytes": 0, "other_bytes": 0},
        "phases": {"forward_bytes": 2, "backward_bytes": 0, "optimizer_bytes": 0},
        "top_modules": [], "runtime": "cpu", "mode": "training", "steps": 2, "device": "cpu",
        "seconds": 0.1, "notes": [],
    }  # fmt: skip
    settings = job_settings(redis_url, key_prefix)
    key = trace_route.cache_key(
        msgspec.convert(BODY, TraceRequest),
        settings.trace_cache_prefix,
        settings.trace_probe_budget_bytes,
    )
    redis.Redis.from_url(redis_url).set(key, msgspec.json.encode(result), ex=60)
    response = client.post("/v1/memory/trace", json=BODY, headers=ASYNC)
    assert response.status_code == 200, response.text
    assert response.json()["peak_bytes"] == 2
    metrics = client.get("/metrics").text
    assert 'gpuplan_jobs_total{kind="trace",status="cached"} 1.0' in metrics


def test_waiting_past_the_limit_answers_504_naming_the_job(redis_url: str, key_prefix: str) -> None:
    settings = job_settings(redis_url, key_prefix, trace_timeout_seconds=1.0)
    with TestClient(app=create_app(settings)) as client:
        started = time.monotonic()
        response = client.post("/v1/memory/trace", json=BODY)
        waited = time.monotonic() - started
        body = problem(response, 504, "still queued", "/v1/jobs/trace-")
        assert body["type"] == "urn:gpuplan:problem:trace-timeout"
        assert 1.0 <= waited < 5
        metrics = client.get("/metrics").text
    drop_jobs(redis_url, key_prefix)
    assert 'gpuplan_jobs_queued{kind="trace",priority="normal"} 1.0' in metrics
    assert 'gpuplan_jobs_total{kind="trace",status="submitted"} 1.0' in metrics


def test_ids_unknown_vanished_and_expired(client: TestClient[Litestar]) -> None:
    problem(client.get("/v1/jobs/not-a-job"), 404, "no job not-a-job")
    # A well-formed id the queue no longer holds, submitted a minute ago: its answer
    # would still be kept, so Redis lost it (a restart without persistence).
    recent = new_id("trace", (datetime.now(UTC) - timedelta(minutes=1)).timestamp())
    lost = client.get(f"/v1/jobs/{recent}").json()
    assert lost["status"] == "failed"
    assert lost["problem"]["type"] == "urn:gpuplan:problem:job-lost"
    assert "restarted without persistence" in lost["problem"]["detail"]
    old = new_id("trace", (datetime.now(UTC) - timedelta(days=2)).timestamp())
    expired = client.get(f"/v1/jobs/{old}").json()
    assert expired["status"] == "expired"
    assert "problem" not in expired
    problem(client.delete(f"/v1/jobs/{old}"), 404, "expired")


def test_without_a_queue_jobs_do_not_exist() -> None:
    with TestClient(app=create_app(Settings())) as client:
        problem(client.get(f"/v1/jobs/{new_id('trace')}"), 404, "GPUPLAN_JOB_QUEUE")


@pytest.mark.slow
@pytest.mark.torch
def test_without_a_queue_respond_async_is_ignored() -> None:
    """RFC 7240 §2: a preference the server cannot honour is ignored, not refused. The
    trace runs while the client waits (a worker process of this server) and answers 200
    with no `Preference-Applied`, exactly as without the header."""
    pytest.importorskip("transformers")
    with TestClient(app=create_app(Settings(trace_cache_ttl_seconds=0))) as client:
        asked = client.post("/v1/memory/trace", json=BODY, headers=ASYNC)
        plain = client.post("/v1/memory/trace", json=BODY)
    assert asked.status_code == 200, asked.text
    assert "preference-applied" not in asked.headers
    assert "location" not in asked.headers
    result, same = msgspec.json.decode(asked.content), msgspec.json.decode(plain.content)
    assert result["peak_bytes"] > 0
    del result["seconds"], same["seconds"]  # the trace's own wall time
    assert result == same


def test_a_job_queue_needs_redis() -> None:
    with pytest.raises(SettingsError, match="GPUPLAN_REDIS_URL"):
        load_settings({"GPUPLAN_JOB_QUEUE": "true"})
    settings = load_settings(
        {"GPUPLAN_JOB_QUEUE": "true", "GPUPLAN_REDIS_URL": "redis://127.0.0.1:6379/0",
         "GPUPLAN_WORKER_REDIS_URL": "redis://x", "GPUPLAN_JOB_RESULT_TTL_SECONDS": "60"}
    )  # fmt: skip
    assert settings.job_queue
    assert settings.job_result_ttl_seconds == 60


def test_queue_outage_is_503(own_redis: object, key_prefix: str) -> None:
    from tests.conftest import RedisServer

    assert isinstance(own_redis, RedisServer)
    settings = job_settings(own_redis.url, key_prefix, redis_timeout_seconds=0.2)
    with TestClient(app=create_app(settings)) as client:
        own_redis.stop()
        response = client.post("/v1/memory/trace", json=BODY, headers=ASYNC)
        body = problem(response, 503, "job queue")
        assert body["type"] == "urn:gpuplan:problem:queue-unavailable"
        assert response.headers["retry-after"] == "5"


def test_with_a_queue_the_api_needs_no_torch(redis_url: str, key_prefix: str) -> None:
    """The API image has no torch: with a job queue, traces are queued, never run here."""
    import subprocess
    import sys

    code = f"""
import sys
sys.modules["torch"] = None  # `import torch` fails, as in the API image
sys.modules["transformers"] = None
from litestar.testing import TestClient
from gpuplan.api.app import create_app
from tests.helpers import job_settings
settings = job_settings({redis_url!r}, {key_prefix!r}, trace_timeout_seconds=1.0)
with TestClient(app=create_app(settings)) as client:
    queued = client.post("/v1/memory/trace", json={BODY!r}, headers={{"Prefer": "respond-async"}})
    waited = client.post("/v1/memory/trace", json={BODY!r})
print(queued.status_code, waited.status_code, waited.json()["type"])
"""
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    finally:
        drop_jobs(redis_url, key_prefix)
    # Queued (202); waited a second for a worker that is not there (504), never 501.
    assert out.split() == ["202", "504", "urn:gpuplan:problem:trace-timeout"]


def test_a_worker_runs_only_gpuplan_job_functions(redis_url: str, key_prefix: str) -> None:
    """A job naming any other function (written straight into Redis) fails unrun."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    from gpuplan.jobs.queue import connect, queue_names
    from gpuplan.jobs.worker import TraceWorker

    connection = connect(redis_url, 5.0)
    name = queue_names(f"{key_prefix}jobs:")[1]
    job = Queue(name, connection=connection, serializer=JSONSerializer).enqueue(
        "os.getcwd", job_id=new_id("trace")
    )
    try:
        TraceWorker(
            [name], name=f"{key_prefix}worker", connection=connection, serializer=JSONSerializer
        ).work(burst=True)
        job.refresh()  # type: ignore[no-untyped-call]
        assert job.get_status() == "failed"
        result = job.latest_result()
        assert result is not None
        assert "not a gpuplan job" in (result.exc_string or "")
    finally:
        drop_jobs(redis_url, key_prefix)
