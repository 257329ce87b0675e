"""Taking jobs without a gap (gpuplan.jobs.handoff), against a real Redis: the highest
priority first, onto an intermediate list, woken by a push, and a job that a worker took
but never started put back at the front of its queue."""

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from rq.exceptions import DequeueTimeout
from rq.job import Job
from rq.queue import Queue
from rq.serializers import JSONSerializer

from gpuplan.jobs.handoff import (
    DOORBELL_LENGTH,
    MAINTENANCE_LOCK_SECONDS,
    HandoffQueue,
    doorbell_key,
    taken_key,
)
from gpuplan.jobs.queue import JobQueue, Priority, queue_names
from gpuplan.jobs.worker import TraceWorker
from tests.helpers import drop_jobs


@pytest.fixture
def jobs(redis_url: str, key_prefix: str) -> Iterator[JobQueue]:
    yield JobQueue(redis.Redis.from_url(redis_url), f"{key_prefix}jobs:")
    drop_jobs(redis_url, key_prefix)


def queues(jobs: JobQueue) -> list[HandoffQueue]:
    return [
        HandoffQueue(name, connection=jobs.redis, serializer=JSONSerializer)
        for name in queue_names(jobs.prefix)
    ]


def worker_name(jobs: JobQueue) -> str:
    """A worker named under the test's prefix, so its ``rq:worker:`` key leaves with the
    test's keys (RQ's default name, a bare uuid, would stay behind)."""
    return f"{jobs.prefix}worker"


def submit(jobs: JobQueue, priority: Priority = "normal") -> str:
    return jobs.submit("trace", {}, timeout_seconds=60, priority=priority)


def take(jobs: JobQueue, timeout: int | None = None) -> str | None:
    taken = HandoffQueue.dequeue_any(
        queues(jobs), timeout, connection=jobs.redis, serializer=JSONSerializer
    )
    return None if taken is None else taken[0].id


def ids(connection: redis.Redis, key: str) -> list[str]:
    return [m.decode() if isinstance(m, bytes) else str(m) for m in connection.lrange(key, 0, -1)]


def sweep(jobs: JobQueue, lost_after: int) -> None:
    """One worker's maintenance of every queue's intermediate list."""
    worker = TraceWorker(
        queues(jobs), name=worker_name(jobs), connection=jobs.redis, lost_after=lost_after
    )
    for queue in worker.queues:
        queue.intermediate_queue.cleanup(worker, queue)


def test_the_highest_priority_job_moves_onto_its_queues_intermediate_list(
    jobs: JobQueue,
) -> None:
    low, normal, high = submit(jobs, "low"), submit(jobs, "normal"), submit(jobs, "high")
    assert take(jobs) == high
    first = queues(jobs)[0]
    assert ids(jobs.redis, first.key) == []
    assert ids(jobs.redis, first.intermediate_queue_key) == [high]
    assert jobs.redis.hexists(taken_key(first.intermediate_queue_key), high)
    record = jobs.get(high)
    assert record is not None
    assert record.status == "queued"  # taken, not started: still waiting
    assert [take(jobs), take(jobs), take(jobs)] == [normal, low, None]


def test_an_idle_taker_wakes_when_a_job_is_pushed(jobs: JobQueue) -> None:
    got: list[str | None] = []
    waiter = threading.Thread(target=lambda: got.append(take(jobs, timeout=60)))
    waiter.start()
    time.sleep(0.3)
    job_id = submit(jobs, "low")
    waiter.join(timeout=15)  # woken by the push, not by the 60 s timeout
    assert not waiter.is_alive()
    assert got == [job_id]


def test_a_taker_with_nothing_to_take_times_out(jobs: JobQueue) -> None:
    with pytest.raises(DequeueTimeout):
        take(jobs, timeout=1)


def test_rings_are_kept_to_a_bounded_length(jobs: JobQueue) -> None:
    for _ in range(DOORBELL_LENGTH + 5):
        submit(jobs)
    normal = queues(jobs)[1]
    assert jobs.redis.llen(doorbell_key(normal.key)) == DOORBELL_LENGTH
    assert jobs.redis.llen(normal.key) == DOORBELL_LENGTH + 5


def test_a_job_taken_and_never_started_goes_back_to_the_front(jobs: JobQueue) -> None:
    first, second = submit(jobs), submit(jobs)
    assert take(jobs) == first  # by a worker that dies before its child starts the job
    normal = queues(jobs)[1]
    sweep(jobs, lost_after=3600)
    assert ids(jobs.redis, normal.key) == [second]  # not yet: its worker may be slow
    jobs.redis.delete(doorbell_key(normal.key))
    sweep(jobs, lost_after=0)
    assert ids(jobs.redis, normal.key) == [first, second]
    assert ids(jobs.redis, normal.intermediate_queue_key) == []
    assert not jobs.redis.exists(taken_key(normal.intermediate_queue_key))
    assert ids(jobs.redis, doorbell_key(normal.key)) == [first]  # an idle worker wakes
    assert take(jobs) == first


def test_a_taken_job_cancelled_meanwhile_is_not_put_back(jobs: JobQueue) -> None:
    job_id = submit(jobs)
    assert take(jobs) == job_id
    jobs.cancel(job_id)
    sweep(jobs, lost_after=0)
    normal = queues(jobs)[1]
    assert ids(jobs.redis, normal.key) == []
    assert ids(jobs.redis, normal.intermediate_queue_key) == []
    record = jobs.get(job_id)
    assert record is not None
    assert (record.status, record.failure) == ("failed", "cancelled")


def test_a_job_deleted_while_it_waited_is_skipped(jobs: JobQueue) -> None:
    gone, kept = submit(jobs), submit(jobs)
    jobs.redis.delete(f"rq:job:{gone}")
    assert take(jobs) == kept
    assert ids(jobs.redis, queues(jobs)[1].intermediate_queue_key) == [kept]


def taken(jobs: JobQueue) -> tuple[Job, Queue]:
    got = HandoffQueue.dequeue_any(queues(jobs), None, connection=jobs.redis)
    assert got is not None
    return got


def test_a_registered_job_is_left_to_rqs_recovery(jobs: JobQueue) -> None:
    """Once the worker has put the job in RQ's started registry, a lost worker is RQ's
    to handle (its heartbeat lapses): maintenance must not queue the job again."""
    job_id = submit(jobs)
    job, queue = taken(jobs)
    TraceWorker(queues(jobs), name=worker_name(jobs), connection=jobs.redis).prepare_execution(job)
    assert job_id in queue.started_job_registry
    assert ids(jobs.redis, queue.intermediate_queue_key) == []
    assert not jobs.redis.hexists(taken_key(queue.intermediate_queue_key), job_id)
    sweep(jobs, lost_after=0)
    assert ids(jobs.redis, queue.key) == []


def test_a_registered_job_whose_child_died_is_queued_once(jobs: JobQueue) -> None:
    """A child killed before it marked the job started: RQ retries it, and maintenance
    must not add a second copy."""
    job_id = submit(jobs)
    job, queue = taken(jobs)
    worker = TraceWorker(queues(jobs), name=worker_name(jobs), connection=jobs.redis)
    worker.prepare_execution(job)
    worker.handle_job_failure(job, queue, exc_string="Work-horse terminated unexpectedly")
    sweep(jobs, lost_after=0)
    assert ids(jobs.redis, queue.key) == [job_id]


def test_a_maintenance_lock_left_by_a_lost_cleaner_lapses_in_half_a_minute(
    jobs: JobQueue,
) -> None:
    """A Redis that stops while a worker cleans a queue, and keeps its keys (AOF), comes
    back with that worker's maintenance lock held: RQ's lasts 899 s, in which no worker
    requeues a lost job. Ours lasts MAINTENANCE_LOCK_SECONDS, and a second worker is kept
    out only for as long."""
    first, second = queues(jobs)[0], queues(jobs)[0]
    assert first.acquire_maintenance_lock()  # the cleaner, lost before it released it
    ttl = jobs.redis.ttl(first.registry_cleaning_key)
    assert 0 < ttl <= MAINTENANCE_LOCK_SECONDS
    assert not second.acquire_maintenance_lock()
    jobs.redis.expire(first.registry_cleaning_key, 1)  # half a minute on, in a second
    time.sleep(1.2)
    assert second.acquire_maintenance_lock()
    jobs.redis.delete(second.registry_cleaning_key)
