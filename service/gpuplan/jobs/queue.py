"""The job queue's client: submit a job, read its state, cancel it, count what waits.

Synchronous (RQ speaks redis-py's blocking client); the API calls it in a thread.

Names. Every queue is ``<prefix><kind>:<priority>`` (``gpuplan:jobs:trace:normal``), so
installs, worktrees and tests sharing one Redis never take each other's jobs; RQ keys
its registries by queue name and its job hashes by job id (``rq:job:<id>``), and our
ids are ``<kind>-<submitted ms, hex>-<64 random bits>``. A worker takes the oldest job
of the highest priority first.

States. RQ's job statuses map to five: ``queued`` (waiting, or waiting again for its
retry), ``running``, ``succeeded``, ``failed`` (the job function answered an error, the
time limit stopped it, its worker was lost twice, or it was cancelled) and ``expired``:
its record is gone and it was submitted longer ago than results are kept. A record
that is gone sooner was lost with Redis (a restart without persistence): ``failed``,
saying so, never left ``queued`` or ``running``.
"""

import contextlib
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from redis import Redis
from redis.exceptions import RedisError
from rq import Queue, Retry
from rq.command import send_stop_job_command
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from gpuplan.jobs.config import DEFAULT_PREFIX
from gpuplan.jobs.handoff import HandoffQueue

Kind = Literal["trace"]
KINDS: tuple[Kind, ...] = ("trace",)
Priority = Literal["high", "normal", "low"]
PRIORITIES: tuple[Priority, ...] = ("high", "normal", "low")
Status = Literal["queued", "running", "succeeded", "failed", "expired"]
Failure = Literal["error", "timeout", "lost", "cancelled", "vanished"]
"""Why a job failed outside its function's own answer."""

RETRIES = 1
"""A job whose worker dies under it runs once more, then fails."""

STOP_WAIT_SECONDS = 5.0
"""How long cancelling a running job waits for its worker to stop it."""

FUNCTIONS: Mapping[str, str] = {"trace": "gpuplan.jobs.tasks.trace_job"}
"""The function a worker's child runs for each kind (imported there, by name)."""

_ID = re.compile(r"^(?P<kind>[a-z]+)-(?P<ms>[0-9a-f]{11,13})-[0-9a-f]{16}$")


def queue_name(prefix: str, kind: str, priority: str) -> str:
    return f"{prefix}{kind}:{priority}"


def queue_names(prefix: str, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """Every queue, highest priority first: the order a worker listens in."""
    return [queue_name(prefix, kind, p) for p in PRIORITIES for kind in kinds]


def new_id(kind: str, now: float | None = None) -> str:
    ms = int((time.time() if now is None else now) * 1000)
    return f"{kind}-{ms:012x}-{secrets.token_hex(8)}"


def parse_id(job_id: str) -> tuple[str, datetime] | None:
    """``(kind, submitted at)`` of a well-formed id; ``None`` otherwise."""
    match = _ID.fullmatch(job_id)
    if match is None or match["kind"] not in KINDS:
        return None
    return match["kind"], datetime.fromtimestamp(int(match["ms"], 16) / 1000, UTC)


@dataclass(frozen=True)
class JobRecord:
    """What the queue knows of one job."""

    id: str
    kind: str
    status: Status
    submitted_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    answer: Any = None
    """The job function's answer (``succeeded``, or ``failed`` by its own account)."""

    failure: Failure | None = None
    detail: str = ""
    """For ``failure``: what happened, for a person."""

    priority: str = "normal"
    runs: int = 0
    """How many times a worker started it (2 after a retry)."""


class NotCancellable(Exception):
    """The job already finished."""

    def __init__(self, record: JobRecord) -> None:
        super().__init__(record.id)
        self.record = record


class JobQueue:
    """The queues of one install, on one Redis connection."""

    def __init__(self, redis: Redis, prefix: str = DEFAULT_PREFIX, result_ttl: int = 3600) -> None:
        self.redis = redis
        self.prefix = prefix
        self.result_ttl = result_ttl

    def _queue(self, kind: str, priority: str) -> Queue:
        return HandoffQueue(
            queue_name(self.prefix, kind, priority),
            connection=self.redis,
            serializer=JSONSerializer,
        )

    def submit(
        self,
        kind: Kind,
        payload: dict[str, Any],
        *,
        timeout_seconds: float,
        priority: Priority = "normal",
        job_id: str | None = None,
    ) -> str:
        """Queue a job; its id. ``timeout_seconds`` bounds one run of it."""
        job_id = job_id or new_id(kind)
        submitted = datetime.now(UTC)
        self._queue(kind, priority).enqueue(
            FUNCTIONS[kind],
            payload,
            job_id=job_id,
            job_timeout=max(1, round(timeout_seconds)),
            result_ttl=self.result_ttl,
            failure_ttl=self.result_ttl,
            retry=Retry(max=RETRIES),
            description=f"{kind} job",
            meta={"kind": kind, "priority": priority, "submitted_at": submitted.isoformat()},
        )
        return job_id

    def _fetch(self, job_id: str) -> Job | None:
        try:
            return Job.fetch(job_id, connection=self.redis, serializer=JSONSerializer)
        except NoSuchJobError:
            return None
        except (ValueError, KeyError, TypeError):
            # A hash without the job's fields: written back by a worker after Redis
            # lost the job (a restart), it holds no job to report.
            return None

    def get(self, job_id: str) -> JobRecord | None:
        """The job's record; ``None`` for an id that is not one of ours."""
        parsed = parse_id(job_id)
        if parsed is None:
            return None
        kind, submitted = parsed
        job = self._fetch(job_id)
        if job is None:
            age = (datetime.now(UTC) - submitted).total_seconds()
            if age > self.result_ttl:
                return JobRecord(id=job_id, kind=kind, status="expired", submitted_at=submitted)
            return JobRecord(
                id=job_id,
                kind=kind,
                status="failed",
                submitted_at=submitted,
                failure="vanished",
                detail=(
                    "the job queue's Redis no longer holds this job although its answer "
                    f"would still be kept ({self.result_ttl} s after it finished): Redis "
                    "restarted without persistence or was flushed; submit it again"
                ),
            )
        return _record(job, kind, submitted)

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a queued job, or stop a running one (its child is killed).

        ``None`` when there is no such job; raises :class:`NotCancellable` when it
        already finished.
        """
        record = self.get(job_id)
        if record is None or record.status == "expired" or record.failure == "vanished":
            return None
        if record.status in ("succeeded", "failed"):
            raise NotCancellable(record)
        job = self._fetch(job_id)
        if job is None:
            return self.get(job_id)
        if record.status == "running":
            with contextlib.suppress(InvalidJobOperation):  # it finished in between
                send_stop_job_command(self.redis, job_id, serializer=JSONSerializer)
            # The worker kills the child as it hears the command: answer once it has.
            deadline = time.monotonic() + STOP_WAIT_SECONDS
            while job.get_status(refresh=True) == JobStatus.STARTED:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        else:
            with contextlib.suppress(InvalidJobOperation):
                job.cancel()
        job.meta["cancelled_at"] = datetime.now(UTC).isoformat()
        job.save_meta()  # type: ignore[no-untyped-call]
        self.redis.expire(job.key, self.result_ttl)
        return self.get(job_id)

    def depth(self) -> dict[tuple[str, str], int]:
        """Jobs waiting, by (kind, priority)."""
        pipe = self.redis.pipeline(transaction=False)
        keys = [(kind, p) for kind in KINDS for p in PRIORITIES]
        for kind, p in keys:
            pipe.llen(self._queue(kind, p).key)
        return dict(zip(keys, (int(n) for n in pipe.execute()), strict=True))

    def oldest_wait_seconds(self) -> dict[str, float]:
        """Seconds the oldest waiting job of each kind has waited (0 when none waits)."""
        now = datetime.now(UTC)
        oldest: dict[str, float] = {}
        for kind in KINDS:
            ages = [0.0]
            for p in PRIORITIES:
                head = self.redis.lindex(self._queue(kind, p).key, 0)
                if head is None:
                    continue
                parsed = parse_id(head.decode() if isinstance(head, bytes) else str(head))
                if parsed is not None:
                    ages.append((now - parsed[1]).total_seconds())
            oldest[kind] = max(ages)
        return oldest


def _when(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _record(job: Job, kind: str, submitted: datetime) -> JobRecord:
    status = job.get_status(refresh=False)
    meta = job.meta or {}
    common: dict[str, Any] = {
        "id": job.id,
        "kind": kind,
        "submitted_at": submitted,
        "priority": str(meta.get("priority", "normal")),
        "runs": int(meta.get("runs", 0)),
    }
    started, ended = _when(job.started_at), _when(job.ended_at)
    if status in (JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED, None):
        return JobRecord(status="queued", **common)
    if status == JobStatus.STARTED:
        return JobRecord(status="running", started_at=started, **common)
    if status in (JobStatus.CANCELED, JobStatus.STOPPED):
        when = meta.get("cancelled_at")
        return JobRecord(
            status="failed",
            started_at=started if status == JobStatus.STOPPED else None,
            finished_at=datetime.fromisoformat(when) if isinstance(when, str) else ended,
            failure="cancelled",
            detail="cancelled by DELETE /v1/jobs/{id}"
            + (" while it ran" if status == JobStatus.STOPPED else " before it started"),
            **common,
        )
    if status == JobStatus.FINISHED:
        answer = job.return_value()
        ok = isinstance(answer, dict) and "result" in answer
        return JobRecord(
            status="succeeded" if ok else "failed",
            started_at=started,
            finished_at=ended,
            answer=answer,
            **common,
        )
    # FAILED: the job function raised, ran past its limit, or its worker was lost.
    result = job.latest_result()
    text = (result.exc_string if result is not None else None) or ""
    retried = job.retries_left == 0
    if "AbandonedJobError" in text or "Work-horse terminated unexpectedly" in text:
        runs = max(common["runs"], RETRIES + 1 if retried else 1)
        common["runs"] = runs
        failure: Failure = "lost"
        detail = (
            f"the worker running this job stopped without finishing it ({_lost_how(text)})"
            + (
                f"; it was retried once on another worker, which was lost too: {runs} runs"
                if retried
                else ""
            )
            + "; a job that needs more memory than a worker has is killed this way"
        )
    elif "JobTimeoutException" in text:
        failure, detail = "timeout", "the job ran past its time limit and its process was killed"
    else:
        failure, detail = "error", _last_line(text)
    return JobRecord(
        status="failed",
        started_at=started,
        finished_at=ended or _when(getattr(result, "created_at", None)),
        failure=failure,
        detail=detail,
        **common,
    )


def _lost_how(text: str) -> str:
    signal = re.search(r"\(signal (\d+)\)", text)
    if signal:
        return f"its process was killed by signal {signal[1]}"
    if "AbandonedJobError" in text:
        return "its worker stopped sending heartbeats"
    return "its process died"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else "the job failed"


def connect(url: str, timeout_seconds: float, password: str | None = None) -> Redis:
    """A blocking client for the queue (RQ's connection), lazily connected."""
    extra: dict[str, Any] = {} if password is None else {"password": password}
    return Redis.from_url(
        url,
        **extra,
        socket_connect_timeout=timeout_seconds,
        socket_timeout=max(timeout_seconds, 5.0),
        health_check_interval=30,
    )


QueueError = (RedisError, OSError)
"""What a call may raise when Redis does not answer."""
