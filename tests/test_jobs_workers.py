"""The job queue with real worker processes (``gpuplan worker``) and a real Redis: a warm
trace, twenty at once in order, a worker killed mid-job, a job taken by a worker that
died before starting it, Redis restarted mid-queue, cancellation, expiry, a 7B trace byte for byte, and the CLI waiting on a job."""

import contextlib
import itertools
import json
import os
import pty
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from gpuplan.jobs.handoff import HandoffQueue
from gpuplan.jobs.queue import queue_names
from tests.conftest import RedisServer, free_port
from tests.helpers import TINY_LLAMA, drop_jobs, job_settings
from tests.test_serve import serving

pytestmark = [pytest.mark.slow, pytest.mark.torch]

pytest.importorskip("transformers")

SMALL = {**TINY_LLAMA, "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
         "tie_word_embeddings": True,
         "num_hidden_layers": 1}  # fmt: skip
"""The issue's small trace: one layer, tens of thousands of parameters."""

SLOW = {**SMALL, "num_hidden_layers": 48}
"""A trace of several seconds in a warm worker: long enough to kill a worker under it."""

ASYNC = {"Prefer": "respond-async"}

LLAMA_2_7B = {
    "model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}  # fmt: skip
"""bench/trace/trace_7b.py's Llama-2-7B."""


def body(config: dict[str, Any], **workload: Any) -> dict[str, Any]:
    shape = {"batch_size": 1, "sequence_length": 16}
    return {"model": {"hf_config": config}, "workload": {**shape, **workload}, "runtime": "cuda"}


class Pool:
    """``gpuplan worker`` processes on one queue, each in its own process group."""

    def __init__(self, redis_url: str, prefix: str, tmp: Path) -> None:
        self.redis_url = redis_url
        self.prefix = prefix
        self.tmp = tmp
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.store = redis.Redis.from_url(redis_url, decode_responses=True)
        self.tag = prefix.split(":")[2][:8]
        """Worker names carry the test's own tag: a shared Redis keeps others' names."""

    def real(self, name: str) -> str:
        return f"{name}-{self.tag}"

    def start(self, *names: str, metrics_port: int = 0) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLAN_")}
        for name in names:
            log = (self.tmp / f"{name}.log").open("wb")
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "gpuplan", "worker", "--redis-url", self.redis_url,
                 "--queue-prefix", self.prefix, "--name", self.real(name),
                 "--metrics-port", str(metrics_port), "--heartbeat-seconds", "1",
                 "--lost-after-seconds", "3", "--maintenance-seconds", "1"],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 120
        for name in names:
            while not self.store.exists(f"rq:worker:{self.real(name)}"):
                if self.processes[name].poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"worker {name} did not start:\n{self.log(name)}")
                time.sleep(0.2)

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")[-3000:]

    def kill(self, name: str) -> None:
        """SIGKILL a worker and its job's child, as a pod's cgroup dies when it is evicted
        or its node lost (RQ puts the child in a process group of its own)."""
        process = self.processes[name]
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        os.killpg(process.pid, signal.SIGKILL)
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(child), signal.SIGKILL)
        process.wait()

    def running(self, job_id: str) -> str | None:
        """The worker running ``job_id`` now, if any."""
        name = self.store.hget(f"rq:job:{job_id}", "worker_name")
        status = self.store.hget(f"rq:job:{job_id}", "status")
        if not name or status != "started":
            return None
        return str(name).removesuffix(f"-{self.tag}")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@contextmanager
def pool(redis_url: str, key_prefix: str, tmp: Path, *names: str) -> Iterator[Pool]:
    workers = Pool(redis_url, f"{key_prefix}jobs:", tmp)
    try:
        workers.start(*names)
        yield workers
    finally:
        workers.stop()


def wait_for(client: TestClient[Litestar], job_id: str, until: set[str], seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in until:
            return job
        assert time.monotonic() < deadline, f"job still {job['status']} after {seconds} s: {job}"
        time.sleep(0.1)


def submit(client: TestClient[Litestar], request: dict[str, Any], priority: str = "normal") -> str:
    response = client.post(f"/v1/memory/trace?priority={priority}", json=request, headers=ASYNC)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def test_a_warm_worker_answers_a_small_trace_in_under_two_seconds(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    metrics_port = free_port()
    settings = job_settings(redis_url, key_prefix, trace_cache_ttl_seconds=0)
    workers = Pool(redis_url, f"{key_prefix}jobs:", tmp_path)
    try:
        workers.start("warm", metrics_port=metrics_port)
        with TestClient(app=create_app(settings)) as client:
            times = []
            for batch in (1, 2, 3):
                started = time.perf_counter()
                response = client.post("/v1/memory/trace", json=body(SMALL, batch_size=batch))
                times.append(time.perf_counter() - started)
                assert response.status_code == 200, response.text
                assert response.json()["parameters"] < 100_000
            # A config transformers refuses: the worker's answer, the synchronous 422.
            refused = client.post("/v1/memory/trace", json=body({**SMALL, "vocab_size": "many"}))
            assert refused.status_code == 422, refused.text
            assert refused.json()["type"] in (
                "urn:gpuplan:problem:invalid-model", "urn:gpuplan:problem:untraceable"
            )  # fmt: skip
            api_metrics = client.get("/metrics").text
        print("end-to-end seconds", times)
        assert min(times) < 2.0, times
        # The worker counts a job once its child has exited, just after the API saw it.
        deadline = time.monotonic() + 10
        while True:
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as r:
                worker_metrics = r.read().decode()
            done = 'gpuplan_jobs_total{kind="trace",status="succeeded"} 3.0'
            if done in worker_metrics or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        workers.stop()
        drop_jobs(redis_url, key_prefix)
    assert 'gpuplan_jobs_total{kind="trace",status="submitted"} 4.0' in api_metrics
    assert 'gpuplan_jobs_total{kind="trace",status="succeeded"} 3.0' in worker_metrics
    assert 'gpuplan_job_duration_seconds_count{kind="trace",status="succeeded"} 3.0' in (
        worker_metrics
    )
    assert 'gpuplan_jobs_queued{kind="trace",priority="normal"}' in worker_metrics


def test_twenty_traces_against_two_workers_finish_in_order_of_arrival(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    settings = job_settings(redis_url, key_prefix, trace_cache_ttl_seconds=0)
    with (
        pool(redis_url, key_prefix, tmp_path, "w1", "w2"),
        TestClient(app=create_app(settings)) as client,
    ):
        # Ten low, then ten high: after the first two low ones, every high one goes first.
        ids = [
            submit(client, body(SMALL, batch_size=1 + i), "low" if i < 10 else "high")
            for i in range(20)
        ]
        jobs = [wait_for(client, i, {"succeeded", "failed"}, 120) for i in ids]
    drop_jobs(redis_url, key_prefix)
    assert [j["status"] for j in jobs] == ["succeeded"] * 20, [j.get("problem") for j in jobs]
    started = [datetime.fromisoformat(j["started_at"]).timestamp() for j in jobs]
    for priority in ("low", "high"):
        mine = [s for s, j in zip(started, jobs, strict=True) if j["priority"] == priority]
        for earlier, later in itertools.pairwise(mine):
            # Two workers take the next two jobs together: their starts may swap by
            # the moments between taking a job and recording its start.
            assert later >= earlier - 0.25, mine
    waiting_low = started[2:10]
    assert max(started[10:]) <= min(waiting_low) + 0.25


def test_a_killed_worker_s_job_is_retried_once_on_another_then_fails(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    settings = job_settings(redis_url, key_prefix, trace_cache_ttl_seconds=0)
    with (
        pool(redis_url, key_prefix, tmp_path, "k1", "k2", "k3") as workers,
        TestClient(app=create_app(settings)) as client,
    ):
        # Killed once: another worker runs it again, to the end.
        once = submit(client, body(SLOW))
        wait_for(client, once, {"running"}, 30)
        first = workers.running(once)
        assert first is not None
        workers.kill(first)
        job = wait_for(client, once, {"succeeded", "failed"}, 90)
        assert job["status"] == "succeeded", job
        assert job["runs"] == 2

        # Killed twice: it fails, saying so, and is not run a third time.
        twice = submit(client, body(SLOW, steps=1))
        killed = {first}
        for run in (1, 2):
            deadline = time.monotonic() + 60
            while True:
                job = client.get(f"/v1/jobs/{twice}").json()
                runner = workers.running(twice)
                if job["runs"] == run and runner is not None and runner not in killed:
                    break
                assert time.monotonic() < deadline, job
                time.sleep(0.1)
            workers.kill(runner)
            killed.add(runner)
        workers.start("k4")  # the pod that replaces them notices the lost job
        job = wait_for(client, twice, {"succeeded", "failed"}, 60)
        assert job["status"] == "failed", job
        assert job["runs"] == 2
        assert job["problem"]["type"] == "urn:gpuplan:problem:worker-lost"
        assert "retried once on another worker" in job["problem"]["detail"]
    drop_jobs(redis_url, key_prefix)


def test_cancel_a_queued_and_a_running_job(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    settings = job_settings(redis_url, key_prefix, trace_cache_ttl_seconds=0)
    with (
        pool(redis_url, key_prefix, tmp_path, "c1"),
        TestClient(app=create_app(settings)) as client,
    ):
        running = submit(client, body(SLOW))
        queued = submit(client, body(SMALL))
        after = submit(client, body(SMALL, batch_size=2))
        wait_for(client, running, {"running"}, 30)
        assert client.delete(f"/v1/jobs/{queued}").json()["status"] == "failed"
        stopped = client.delete(f"/v1/jobs/{running}").json()
        assert stopped["problem"]["type"] == "urn:gpuplan:problem:job-cancelled"
        assert wait_for(client, after, {"succeeded", "failed"}, 60)["status"] == "succeeded"
        never = client.get(f"/v1/jobs/{queued}").json()
        assert never["status"] == "failed"
        assert never["started_at"] is None
        assert "before it started" in never["problem"]["detail"]
        killed = client.get(f"/v1/jobs/{running}").json()
        assert killed["status"] == "failed"
        assert "while it ran" in killed["problem"]["detail"]
    drop_jobs(redis_url, key_prefix)


def test_an_answer_expires(redis_url: str, key_prefix: str, tmp_path: Path) -> None:
    settings = job_settings(
        redis_url, key_prefix, trace_cache_ttl_seconds=0, job_result_ttl_seconds=2
    )
    with (
        pool(redis_url, key_prefix, tmp_path, "e1"),
        TestClient(app=create_app(settings)) as client,
    ):
        job_id = submit(client, body(SMALL))
        assert wait_for(client, job_id, {"succeeded"}, 60)["result"]["parameters"] > 0
        time.sleep(3)
        expired = client.get(f"/v1/jobs/{job_id}").json()
    drop_jobs(redis_url, key_prefix)
    assert expired["status"] == "expired", expired
    assert "result" not in expired


def test_a_job_taken_by_a_worker_that_died_before_starting_it_runs(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """The gap RQ leaves between taking a job from several queues and starting it: the
    job must neither wait forever nor fail."""
    settings = job_settings(redis_url, key_prefix, trace_cache_ttl_seconds=0)
    prefix = f"{key_prefix}jobs:"
    connection = redis.Redis.from_url(redis_url)
    queues = [HandoffQueue(n, connection=connection) for n in queue_names(prefix)]
    with TestClient(app=create_app(settings)) as client:
        job_id = submit(client, body(SMALL))
        taken = HandoffQueue.dequeue_any(queues, None, connection=connection)
        assert taken is not None  # by a worker that is gone before it starts the job
        assert taken[0].id == job_id
        with pool(redis_url, key_prefix, tmp_path, "t1"):
            job = wait_for(client, job_id, {"succeeded", "failed"}, 60)
    left = [connection.llen(q.intermediate_queue_key) for q in queues]
    drop_jobs(redis_url, key_prefix)
    assert (job["status"], job["runs"]) == ("succeeded", 1), job
    assert left == [0, 0, 0]


@pytest.mark.parametrize("persistent", [True, False], ids=["aof", "no-persistence"])
def test_redis_restarted_mid_queue(persistent: bool, key_prefix: str, tmp_path: Path) -> None:
    """With persistence every job finishes; without, each lost job reads as failed.
    Either way none is left queued or running."""
    server = RedisServer()
    if persistent:
        server.args = ["--save", "", "--appendonly", "yes", "--appendfsync", "always",
                       "--dir", str(tmp_path)]  # fmt: skip
    server.start()
    try:
        settings = job_settings(server.url, key_prefix, trace_cache_ttl_seconds=0)
        with (
            pool(server.url, key_prefix, tmp_path, "r1", "r2") as workers,
            TestClient(app=create_app(settings)) as client,
        ):
            ids = [submit(client, body({**SMALL, "num_hidden_layers": 8}, batch_size=1 + i))
                   for i in range(8)]  # fmt: skip
            wait_for(client, ids[1], {"succeeded"}, 60)
            server.stop()
            time.sleep(1)
            server.start()
            jobs = [wait_for(client, i, {"succeeded", "failed"}, 120) for i in ids]
    finally:
        server.stop()
    # Both workers stopped on their SIGTERM (exit 0), none needed the SIGKILL that
    # Pool.stop sends after 30 s: a stop that lands while a worker waits to restart its
    # loop after the outage is a stop.
    codes = {n: p.returncode for n, p in workers.processes.items()}
    assert codes == {"r1": 0, "r2": 0}, codes
    if persistent:
        assert [j["status"] for j in jobs] == ["succeeded"] * 8, jobs
    else:
        assert jobs[0]["status"] == jobs[1]["status"] == "failed"  # lost with their answers
        for job in jobs:
            assert job["status"] in ("succeeded", "failed")
            if job["status"] == "failed":
                assert job["problem"]["type"] in (
                    "urn:gpuplan:problem:job-lost", "urn:gpuplan:problem:worker-lost"
                ), job  # fmt: skip


def test_a_7b_trace_through_the_queue_is_the_in_process_trace(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    request = {
        "model": {"hf_config": LLAMA_2_7B},
        "workload": {"mode": "training", "batch_size": 1, "sequence_length": 4096,
                     "dtype": "bf16"},
        "runtime": "cuda",
    }  # fmt: skip
    queued = job_settings(redis_url, key_prefix, trace_cache_ttl_seconds=0)
    with (
        pool(redis_url, key_prefix, tmp_path, "big"),
        TestClient(app=create_app(queued)) as client,
    ):
        through_queue = client.post("/v1/memory/trace", json=request)
    drop_jobs(redis_url, key_prefix)
    with TestClient(app=create_app(Settings())) as client:
        in_process = client.post("/v1/memory/trace", json=request)
    assert through_queue.status_code == in_process.status_code == 200, through_queue.text

    def without_time(answer: bytes) -> bytes:
        result = json.loads(answer)
        result["seconds"] = 0
        return msgspec.json.encode(result)

    assert without_time(through_queue.content) == without_time(in_process.content)
    assert through_queue.json()["peak_bytes"] > 60 * 2**30


def test_the_cli_waits_on_a_job_with_a_progress_line(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL))
    settings = {
        "GPUPLAN_REDIS_URL": redis_url,
        "GPUPLAN_JOB_QUEUE": "true",
        "GPUPLAN_JOB_QUEUE_PREFIX": f"{key_prefix}jobs:",
        "GPUPLAN_TRACE_CACHE_TTL_SECONDS": "0",
    }
    with pool(redis_url, key_prefix, tmp_path, "cli"), serving(settings=settings) as base:
        controller, terminal = pty.openpty()
        process = subprocess.run(
            [sys.executable, "-m", "gpuplan", "trace", str(config), "--api", base,
             "--batch-size", "2", "--sequence-length", "16", "--format", "json"],
            stdout=subprocess.PIPE, stderr=terminal, timeout=60, check=False,
        )  # fmt: skip
        os.close(terminal)
        progress = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:
                break
            if not chunk:
                break
            progress += chunk
        os.close(controller)
        bad = subprocess.run(
            [sys.executable, "-m", "gpuplan", "trace", str(config), "--api", base,
             "--batch-size", "0"], capture_output=True, timeout=60, check=False,
        )  # fmt: skip
    drop_jobs(redis_url, key_prefix)
    assert process.returncode == 0, progress
    assert json.loads(process.stdout)["parameters"] > 0
    text = progress.decode(errors="replace")
    assert "gpuplan trace trace-" in text, text
    assert "done" in text, text
    assert "queued" in text or "running" in text, text
    assert bad.returncode == 2
    assert b"$.workload.batch_size" in bad.stderr


def test_workers_listen_highest_priority_first() -> None:
    names = queue_names("p:")
    assert names == ["p:trace:high", "p:trace:normal", "p:trace:low"]


def test_the_cli_traces_on_a_server_without_a_queue(tmp_path: Path) -> None:
    """Such a server ignores `Prefer: respond-async` (RFC 7240) and answers when traced."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL))
    with serving() as base:
        process = subprocess.run(
            [sys.executable, "-m", "gpuplan", "trace", str(config), "--api", base,
             "--sequence-length", "16", "--format", "json"],
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
    assert process.returncode == 0, process.stderr
    assert json.loads(process.stdout)["parameters"] == 53440


def test_a_worker_beside_the_api_needs_only_the_apis_redis_setting(
    redis_url: str, key_prefix: str
) -> None:
    """`gpuplan worker` with only the API's GPUPLAN_REDIS_URL and GPUPLAN_JOB_QUEUE_PREFIX
    in its environment (no GPUPLAN_WORKER_*, no option) runs a queued trace end to end,
    and says where its Redis and prefix came from."""
    settings = job_settings(redis_url, key_prefix, trace_cache_ttl_seconds=0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLAN_")}
    env |= {"GPUPLAN_REDIS_URL": redis_url, "GPUPLAN_JOB_QUEUE_PREFIX": settings.job_queue_prefix}
    try:
        with TestClient(app=create_app(settings)) as client:
            job_id = submit(client, body(SMALL))
            ran = subprocess.run(
                [sys.executable, "-m", "gpuplan", "worker", "--burst", "--no-warm",
                 "--metrics-port", "0", "--name", f"fallback-{key_prefix.split(':')[2][:8]}"],
                capture_output=True, text=True, env=env, timeout=180, check=False,
            )  # fmt: skip
            assert ran.returncode == 0, ran.stderr[-3000:]
            job = wait_for(client, job_id, {"succeeded", "failed"}, 10)
        assert job["status"] == "succeeded", job
        assert job["result"]["parameters"] == 53440
        assert "redis_url from GPUPLAN_REDIS_URL (the API's setting" in ran.stderr
        assert "queue_prefix from GPUPLAN_JOB_QUEUE_PREFIX (the API's setting" in ran.stderr
    finally:
        drop_jobs(redis_url, key_prefix)


def test_a_worker_without_any_redis_setting_says_which_to_set() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLAN_")}
    ran = subprocess.run(
        [sys.executable, "-m", "gpuplan", "worker", "--burst"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 2
    assert "--redis-url, GPUPLAN_WORKER_REDIS_URL or the API's GPUPLAN_REDIS_URL" in ran.stderr
    assert "Object missing required field" not in ran.stderr
