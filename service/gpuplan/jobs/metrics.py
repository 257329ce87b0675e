"""The job queue's metrics, the same families on the API's and the workers' ``/metrics``.

``gpuplan_jobs_total{kind,status}`` counts each event once, where it happens: the API
counts jobs ``submitted``, answered from the trace ``cached`` at submission, and
``cancelled``; a worker counts runs that ``succeeded``, ``failed`` (the answer is an
error, the time limit, or the job was lost a second time) or were ``retried`` (lost
once: its process or its whole worker died). ``gpuplan_job_duration_seconds`` is a
run's wall time on a worker. ``gpuplan_jobs_queued`` and
``gpuplan_jobs_oldest_queued_seconds`` read the queues in Redis at scrape time: every
pod reports the same queues, so dashboards take their ``max``.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpuplan.jobs.queue import KINDS, PRIORITIES, JobQueue

DURATION_BUCKETS_SECONDS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)

STATUSES = ("submitted", "cached", "cancelled", "succeeded", "failed", "retried")
RUN_ENDS = ("succeeded", "failed", "retried", "cancelled")
"""How a run on a worker ends (the duration's ``status``)."""


class JobMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.jobs = Counter(
            "gpuplan_jobs",
            "Job events by kind and status: submitted, cached (answered from the trace "
            "cache instead), cancelled (API); succeeded, failed, retried (workers).",
            ["kind", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "gpuplan_job_duration_seconds",
            "Wall time of one run of a job on a worker, by kind and how it ended.",
            ["kind", "status"],
            buckets=DURATION_BUCKETS_SECONDS,
            registry=registry,
        )
        self.queued = _read_from_redis(
            registry,
            "gpuplan_jobs_queued",
            "Jobs waiting in the queue (Redis), by kind and priority.",
            ["kind", "priority"],
        )
        self.oldest = _read_from_redis(
            registry,
            "gpuplan_jobs_oldest_queued_seconds",
            "Seconds the oldest waiting job of each kind has waited (0: none waits).",
            ["kind"],
        )
        for kind in KINDS:
            for status in STATUSES:
                self.jobs.labels(kind, status)
            for status in RUN_ENDS:
                self.duration.labels(kind, status)
            for priority in PRIORITIES:
                self.queued.labels(kind, priority).set(0)
            self.oldest.labels(kind).set(0)

    def count(self, kind: str, status: str, seconds: float | None = None) -> None:
        self.jobs.labels(kind, status).inc()
        if seconds is not None:
            self.duration.labels(kind, status).observe(seconds)

    def refresh(self, queue: JobQueue) -> None:
        """Read the queues' depth and age (raises what Redis raises)."""
        for (kind, priority), depth in queue.depth().items():
            self.queued.labels(kind, priority).set(depth)
        for kind, seconds in queue.oldest_wait_seconds().items():
            self.oldest.labels(kind).set(seconds)


def _read_from_redis(
    registry: CollectorRegistry, name: str, documentation: str, labels: list[str]
) -> Gauge:
    """A gauge set from the queues in Redis at scrape time. Every process of a pod reads
    the same queues, so under multiprocess metrics the most recent value is the answer,
    not a sum over processes."""
    return Gauge(name, documentation, labels, registry=registry, multiprocess_mode="mostrecent")
