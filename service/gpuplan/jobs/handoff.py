"""Taking a job from the queues without a moment in which Redis holds it nowhere.

RQ's worker takes a job from several queues with ``BLPOP``: the id leaves the queue
there, and only a later write (in the job's child) puts it in the started registry.
A worker killed in between, or a Redis that stops after the pop but before its reply,
leaves a job whose status says ``queued`` on no queue: no worker ever runs it and
nothing reports it lost. RQ closes that gap with ``BLMOVE`` into an intermediate list,
but only for a worker on one queue, and ours listen on one per priority.

:class:`HandoffQueue` takes the way RQ does for one queue, for any number: one script
moves the head of the first non-empty queue (highest priority first) onto that queue's
intermediate list and records when, in Redis's clock. The worker ends the handoff
(:func:`hand_over`) in the transaction that puts the job in RQ's started registry, in
the worker process before it forks: from then on RQ's own recovery owns the job (a lost
worker's heartbeat lapses, a killed child fails or retries it), so a job is never both
on an intermediate list and in the started registry. Waiting cannot be a script
(scripts do not block), so every push rings a doorbell, a short list per queue that an
idle worker blocks on with ``BLPOP``; a ring says "look again", never which job. (RQ
requeues a lost worker's job through a plain queue, which does not ring; the worker
whose maintenance requeued it looks next, and every idle worker looks again at least
once a dequeue timeout, ``maintenance_seconds``.)

A job still on an intermediate list ``lost_after_seconds`` after it was taken, and
still ``queued``, was taken by a worker that died before it registered the job (the
moments between a script and the next transaction): maintenance puts it back at the
front of its queue (:meth:`Handoff.cleanup`). It never ran, so running it is safe; RQ
itself would fail it.
"""

import math
import time
from typing import Any

from redis import Redis
from redis.client import Pipeline
from rq.exceptions import DequeueTimeout, NoSuchJobError
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job
from rq.queue import Queue
from rq.utils import as_text

MAINTENANCE_LOCK_SECONDS = 30
"""How long a worker's hold on a queue's maintenance lock lasts unless it releases it.
RQ's is 899 s (rq/queue.py ``acquire_maintenance_lock``), released after the cleaning:
a Redis that stops while a worker cleans, and keeps its keys (AOF), comes back with the
lock still held, and for a quarter of an hour no worker requeues a lost job or one taken
and never started (the CI failure of test_redis_restarted_mid_queue[aof], a job left
``queued``). Cleaning these queues takes milliseconds; a lock that outlives a lost
holder by half a minute bounds the stall, and two workers cleaning at once is safe (each
requeue is one script, :data:`_RETURN`)."""

DOORBELL_LENGTH = 64
"""Rings kept per queue. A ring wakes one idle worker; more rings than idle workers
only wake them to find nothing, so the list is cut rather than left to grow while no
worker listens."""

_TAKE = """
local now = redis.call('TIME')
for i = 1, #KEYS, 3 do
  local id = redis.call('LPOP', KEYS[i])
  if id then
    redis.call('RPUSH', KEYS[i + 1], id)
    redis.call('HSET', KEYS[i + 2], id, now[1] .. '.' .. string.format('%06d', now[2]))
    return {KEYS[i], id}
  end
end
return false
"""
"""KEYS: (queue, its intermediate list, its taken-at hash) per queue, highest priority
first. Moves one id; returns the queue's key and the id, or nothing."""

_RETURN = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 'gone'
end
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('HGET', KEYS[4], 'status') ~= 'queued' then
  return 'dropped'
end
redis.call('LPUSH', KEYS[3], ARGV[1])
redis.call('LPUSH', KEYS[5], ARGV[1])
redis.call('LTRIM', KEYS[5], 0, tonumber(ARGV[2]) - 1)
return 'requeued'
"""
"""KEYS: intermediate list, taken-at hash, queue, job hash, doorbell; ARGV: job id,
doorbell length. Puts a job that never started back at the front of its queue; drops
the entry of one that started, finished or was cancelled in between."""


def taken_key(intermediate_key: str) -> str:
    """The hash of when each job on an intermediate list was taken (Redis time, s)."""
    return f"{intermediate_key}:taken_at"


def doorbell_key(queue_key: str) -> str:
    return f"{queue_key}:wake"


class Handoff(IntermediateQueue):
    """One queue's intermediate list: jobs taken by a worker and not yet started."""

    def cleanup(self, worker: Any, queue: Queue) -> None:
        """Put back every job taken longer than the worker's ``lost_after`` ago and never
        registered (maintenance calls this for each queue, under RQ's maintenance lock)."""
        grace = float(getattr(worker, "lost_after", 60))
        taken = taken_key(self.key)
        now = _redis_time(self.connection)
        # The times before the list: a job taken in between has its time and is kept.
        recorded = {as_text(k): float(v) for k, v in self.connection.hgetall(taken).items()}
        ids = self.get_job_ids()
        for job_id in set(recorded) - set(ids):  # registered: :func:`hand_over` removed it
            self.connection.hdel(taken, job_id)
        for job_id in ids:
            since = recorded.get(job_id)
            if since is None:  # moved there by a worker that records no time: from now
                self.connection.hsetnx(taken, job_id, repr(now))
                continue
            if now - since < grace:
                continue
            outcome = self.connection.eval(
                _RETURN, 5, self.key, taken, queue.key, Job.key_for(job_id),
                doorbell_key(queue.key), job_id, DOORBELL_LENGTH,
            )  # fmt: skip
            if as_text(outcome) == "requeued":
                worker.log.warning(
                    "job %s was taken %.0f s ago by a worker that never started it: "
                    "back at the front of %s", job_id, now - since, queue.name,
                )  # fmt: skip


class HandoffQueue(Queue):
    """RQ's queue, taken from without a gap and rung on every push."""

    def acquire_maintenance_lock(self) -> bool:
        """RQ's lock on cleaning this queue, held :data:`MAINTENANCE_LOCK_SECONDS`."""
        return bool(
            self.connection.set(self.registry_cleaning_key, 1, nx=True, ex=MAINTENANCE_LOCK_SECONDS)
        )

    @property
    def intermediate_queue(self) -> Handoff:
        return Handoff(self.key, connection=self.connection)

    def push_job_id(
        self, job_id: str, pipeline: Pipeline | None = None, at_front: bool = False
    ) -> None:
        """Push as RQ does (its enqueue, retries and requeues all come here) and ring."""
        own = pipeline is None
        pipe = self.connection.pipeline() if own else pipeline
        assert pipe is not None
        super().push_job_id(job_id, pipeline=pipe, at_front=at_front)
        ring(pipe, self.key, job_id)
        if own:
            pipe.execute()

    @classmethod
    def dequeue_any(  # noqa: PLR0917 (RQ's signature, called positionally)
        cls,
        queues: Any,
        timeout: int | None,
        connection: Redis,
        job_class: type[Job] | None = None,
        serializer: Any = None,
        death_penalty_class: Any = None,
    ) -> tuple[Job, Queue] | None:
        """The first job of the first non-empty queue, moved to its intermediate list.

        ``timeout`` ``None``: look once. Otherwise wait up to ``timeout`` seconds for a
        ring and look again; raises :class:`DequeueTimeout` when none came.
        """
        queues = list(queues)
        job_cls = job_class or cls.job_class
        keys = [
            key
            for q in queues
            for key in (q.key, q.intermediate_queue_key, taken_key(q.intermediate_queue_key))
        ]
        doorbells = [doorbell_key(q.key) for q in queues]
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            taken = connection.eval(_TAKE, len(keys), *keys)
            if taken:
                queue_key, job_id = (as_text(v) for v in taken)
                queue = cls.from_queue_key(
                    queue_key, connection=connection, job_class=job_cls,
                    serializer=serializer, death_penalty_class=death_penalty_class,
                )  # fmt: skip
                try:
                    job = job_cls.fetch(job_id, connection=connection, serializer=serializer)
                except NoSuchJobError:  # deleted while it waited: nothing to run
                    _drop(connection, queue.key, job_id)
                    continue
                except Exception:  # unreadable: RQ reports it; never taken again
                    _drop(connection, queue.key, job_id)
                    raise
                return job, queue
            if deadline is None:
                return None
            left = deadline - time.monotonic()
            if left <= 0 or connection.blpop(doorbells, max(1, math.ceil(left))) is None:
                raise DequeueTimeout(timeout, [q.key for q in queues])


def hand_over(pipe: Pipeline, job: Job) -> None:
    """End ``job``'s handoff in ``pipe`` (the transaction that registers the job as
    started)."""
    _forget(pipe, Queue.redis_queue_namespace_prefix + job.origin, job.id)


def _drop(connection: Redis, queue_key: str, job_id: str) -> None:
    """Take a job that will not run off ``queue_key``'s intermediate list."""
    pipe = connection.pipeline()
    _forget(pipe, queue_key, job_id)
    pipe.execute()


def _forget(pipe: Pipeline, queue_key: str, job_id: str) -> None:
    """Off the queue's intermediate list, with its taken-at time."""
    intermediate = IntermediateQueue.get_intermediate_queue_key(queue_key)
    pipe.lrem(intermediate, 1, job_id)
    pipe.hdel(taken_key(intermediate), job_id)


def ring(pipe: Pipeline | Redis, queue_key: str, job_id: str) -> None:
    """Wake one idle worker of ``queue_key`` (the ring names the job, for a person
    reading Redis)."""
    pipe.lpush(doorbell_key(queue_key), job_id)
    pipe.ltrim(doorbell_key(queue_key), 0, DOORBELL_LENGTH - 1)


def _redis_time(connection: Redis) -> float:
    seconds, micros = connection.time()
    return float(seconds) + micros / 1e6
