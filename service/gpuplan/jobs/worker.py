"""``gpuplan worker``: RQ's forking worker, warm, watched and restarted.

A worker process imports torch and transformers once and traces a small model once
(:func:`warm_up`), then takes jobs: RQ forks a child per job, so each job starts from
that warm state (a small trace then takes a quarter of a second instead of seconds)
in a process of its own, which the time limit kills and which leaves no fake-mode
state behind. The parent keeps a heartbeat on the running job; when a whole worker
dies (a pod evicted, a node lost), its job's heartbeat lapses after
``lost_after_seconds`` and the next worker's maintenance puts it back on the queue,
once (:data:`gpuplan.jobs.queue.RETRIES`); a child killed under a live worker (the
kernel's out-of-memory killer) is put back at once.
"""

import logging
import os
import secrets
import signal
import threading
import time
from typing import Any

import msgspec
from prometheus_client import CollectorRegistry, start_http_server
from redis import Redis
from redis.exceptions import RedisError
from rq import Worker
from rq.exceptions import AbandonedJobError
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.serializers import JSONSerializer
from rq.worker import WorkerStatus

from gpuplan.jobs.config import WorkerConfig
from gpuplan.jobs.handoff import HandoffQueue, hand_over
from gpuplan.jobs.metrics import JobMetrics
from gpuplan.jobs.queue import FUNCTIONS, JobQueue, connect, queue_names

log = logging.getLogger("gpuplan.jobs")

WARM_CONFIG: dict[str, Any] = {
    "model_type": "llama",
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
}
"""The warm-up trace's model: it loads every module and cache a Llama-like trace uses."""

PRELOADED = (
    "LlamaModel", "MistralModel", "MixtralModel", "Qwen2Model", "Qwen2MoeModel", "Qwen3Model",
    "Qwen3MoeModel", "GemmaModel", "Gemma2Model", "Gemma3TextModel", "Phi3Model", "GPT2Model",
    "GPTNeoXModel", "FalconModel", "OPTModel", "BertModel", "MambaModel",
)  # fmt: skip
"""transformers classes whose modelling modules a worker loads before its first job (a
fixed list: a job's config never names what is imported)."""


def warm_up(preload: tuple[str, ...] = PRELOADED) -> float:
    """Import the tracer's libraries and trace a small model once; the seconds it took.

    Only fake tensors run, so no CPU thread pool starts here: the children forked
    afterwards may run real kernels (the oneDNN probes) safely.
    """
    started = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers

    from gpuplan.core.trace.schema import TraceRequest
    from gpuplan.trace.worker import answer

    for name in preload:
        try:
            getattr(transformers, name)  # transformers imports the class's module lazily
        except (AttributeError, ImportError):  # another transformers version: on first use
            log.debug("transformers has no %s", name)
    for workload in (
        {"mode": "training", "batch_size": 1, "sequence_length": 16},
        {"mode": "inference", "batch_size": 1, "sequence_length": 16, "new_tokens": 1},
    ):
        request = msgspec.convert(
            {"model": {"hf_config": WARM_CONFIG}, "workload": workload}, TraceRequest
        )
        outcome = answer(request, probe_budget_bytes=0)
        if "result" not in outcome:
            raise RuntimeError(f"the warm-up trace failed: {outcome}")
    return time.perf_counter() - started


class KnownJob(Job):
    """A job that runs only one of our job functions.

    RQ imports a job's function by the name stored with it; a writer of the Redis could
    store any importable name. A worker runs the names of
    :data:`gpuplan.jobs.queue.FUNCTIONS` and fails every other job unrun.
    """

    def perform(self) -> Any:
        if self.func_name not in FUNCTIONS.values():
            raise PermissionError(f"job {self.id} names {self.func_name!r}, not a gpuplan job")
        return super().perform()


class TraceWorker(Worker):
    """RQ's forking worker, taking jobs without a gap (:mod:`gpuplan.jobs.handoff`),
    counting what it runs and quick to notice a lost peer."""

    def __init__(
        self, *args: Any, metrics: JobMetrics | None = None, lost_after: int = 30, **kwargs: Any
    ) -> None:
        kwargs.setdefault("job_class", KnownJob)
        kwargs.setdefault("queue_class", HandoffQueue)
        super().__init__(*args, **kwargs)
        self.metrics = metrics
        self.lost_after = lost_after
        self.push_exc_handler(self._abandoned)  # type: ignore[no-untyped-call]

    def get_heartbeat_ttl(self, job: Job) -> int:
        # RQ's own margin is a minute; ours is lost_after_seconds.
        interval = int(self.job_monitoring_interval)
        if job.timeout and job.timeout > 0:
            remaining = job.timeout - float(self.current_job_working_time or 0)
            interval = int(max(1, min(remaining, interval)))
        return interval + self.lost_after

    def prepare_execution(self, job: Job) -> Execution:
        # RQ's step in this process, before the fork, that puts the job in the started
        # registry (rq/executions.py: prepare_execution), with the job's handoff ended
        # in the same transaction: RQ's recovery owns the job from here.
        with self.connection.pipeline() as pipe:
            execution = Execution.create(
                job, self.get_heartbeat_ttl(job), pipeline=pipe, worker_name=self.name
            )
            self.set_state(WorkerStatus.BUSY, pipeline=pipe)
            hand_over(pipe, job)
            pipe.execute()
        self.execution = execution
        return execution

    def execute_job(self, job: Job, queue: Queue) -> None:
        job.meta["runs"] = int(job.meta.get("runs", 0)) + 1
        job.save_meta()  # type: ignore[no-untyped-call]
        started = time.monotonic()
        super().execute_job(job, queue)
        self._count(job, time.monotonic() - started)

    def _count(self, job: Job, seconds: float) -> None:
        if self.metrics is None:
            return
        kind = str(job.meta.get("kind", "trace"))
        try:
            status = job.get_status(refresh=True)
            answer = job.return_value() if status == JobStatus.FINISHED else None
        except Exception as exc:  # counting must not stop the worker
            log.warning("cannot read job %s after its run: %s", job.id, exc)
            return
        if status == JobStatus.FINISHED:
            outcome = "succeeded" if isinstance(answer, dict) and "result" in answer else "failed"
        elif status in (JobStatus.QUEUED, JobStatus.SCHEDULED):
            outcome = "retried"
        elif status == JobStatus.STOPPED:
            outcome = "cancelled"
        else:
            outcome = "failed"
        self.metrics.count(kind, outcome, seconds)

    def _abandoned(self, job: Job, exc_type: Any, exc_value: Any, tb: Any) -> bool:
        """RQ's handler for a failure: counts the jobs of lost workers found in
        maintenance (a child's own errors are answers, never raised)."""
        if self.metrics is not None and exc_type is AbandonedJobError:
            retried = bool(job.retries_left and job.retries_left > 0)
            self.metrics.count(
                str(job.meta.get("kind", "trace")), "retried" if retried else "failed"
            )
        return True  # and RQ handles it as usual


def _watch_queue(metrics: JobMetrics, queue: JobQueue, every: float = 5.0) -> None:
    def loop() -> None:
        while True:
            try:
                metrics.refresh(queue)
            except Exception as exc:  # Redis away: keep the last values
                log.debug("queue metrics: %s", exc)
            time.sleep(every)

    threading.Thread(target=loop, name="queue-metrics", daemon=True).start()


def _free_name(connection: Redis, name: str) -> str:
    """``name``, or it with a random suffix while a worker of that name still looks
    alive in Redis (a restarted container whose predecessor was killed)."""
    key = Worker.redis_worker_namespace_prefix + name
    try:
        taken = connection.exists(key) and not connection.hexists(key, "death")
    except (OSError, RedisError):
        taken = False  # Redis away: the work loop will wait for it
    return f"{name}-{secrets.token_hex(3)}" if taken else name


def run(config: WorkerConfig, password: str | None = None) -> int:
    """Work until stopped (SIGTERM: finish the running job first; twice: kill it)."""
    connection: Redis = connect(config.redis_url, config.redis_timeout_seconds, password)
    if config.warm:
        log.info("warm-up trace took %.2f s", warm_up())
    registry = CollectorRegistry(auto_describe=True)
    metrics = JobMetrics(registry)
    if config.metrics_port:
        start_http_server(config.metrics_port, config.metrics_host, registry=registry)
        _watch_queue(metrics, JobQueue(connection, config.queue_prefix))
    name = _free_name(connection, config.name or f"{os.uname().nodename}.{os.getpid()}")
    done = 0
    backoff = 1.0
    for attempt in range(1_000_000):
        worker = TraceWorker(
            queue_names(config.queue_prefix),
            # A restarted loop registers anew: the last one may not have said goodbye.
            name=name if attempt == 0 else _free_name(connection, f"{name}.{attempt}"),
            connection=connection,
            serializer=JSONSerializer,
            job_monitoring_interval=config.heartbeat_seconds,
            maintenance_interval=config.maintenance_seconds,
            worker_ttl=config.maintenance_seconds + 15,
            metrics=metrics,
            lost_after=config.lost_after_seconds,
            log_job_description=False,
        )
        left = None if config.max_jobs is None else config.max_jobs - done
        started = time.monotonic()
        try:
            worker.work(burst=config.burst, max_jobs=left, logging_level=config.log_level.upper())
        except (RedisError, OSError) as exc:  # Redis went away while RQ said goodbye
            log.warning("worker loop ended on a Redis error: %s", exc)
        done += worker.successful_job_count + worker.failed_job_count
        # RQ's record of a SIGTERM or SIGINT (idle: a date; busy: also the flag).
        stopped = worker._stop_requested or worker._shutdown_requested_date is not None
        if stopped or config.burst or (config.max_jobs is not None and done >= config.max_jobs):
            return 0
        # The loop ended on an error (Redis went away mid-job): start again, gently.
        backoff = 1.0 if time.monotonic() - started > 60 else min(backoff * 2, 30.0)
        log.warning("worker loop stopped; restarting in %.0f s", backoff)
        if _stopped_while_waiting(backoff):
            log.info("stop requested while restarting: exiting")
            return 0
    return 1


def _stopped_while_waiting(seconds: float) -> bool:
    """Wait ``seconds``; True if a SIGTERM or SIGINT came meanwhile.

    Between two loops the signal handlers RQ installed still belong to the worker that
    ended: a SIGTERM then only sets that dead worker's flag (it thought itself busy when
    Redis vanished mid-job), and the next loop would run on until the pod is killed. So
    the wait takes the signals itself; the next loop's ``work()`` installs RQ's again.
    """
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return stop.wait(seconds)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
