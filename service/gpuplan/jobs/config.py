"""A worker's settings: one validated Struct, filled from options or ``GPUPLAN_WORKER_*``.

Kept apart from the worker so that ``gpuplan --help`` builds the options without
importing RQ or prometheus_client.
"""

from typing import Annotated

import msgspec

from gpuplan.core.record import Record

DEFAULT_PREFIX = "gpuplan:jobs:"
"""Prefix of the queues' names (the API's ``GPUPLAN_JOB_QUEUE_PREFIX``)."""


class WorkerConfig(Record, kw_only=True):
    """Validated settings of one worker process."""

    redis_url: Annotated[str, msgspec.Meta(pattern=r"^(redis|rediss|unix)://")]
    """The job queue's Redis (``redis://``, ``rediss://``, ``unix://``): the API's
    ``GPUPLAN_REDIS_URL``."""

    redis_password_file: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    """A file holding the Redis password (a mounted secret), used over one in the URL."""

    redis_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=60)] = 5.0
    """Connect and command timeout for Redis."""

    queue_prefix: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9:_.-]{1,100}$")] = DEFAULT_PREFIX
    """Prefix of the queues' names; the API's ``GPUPLAN_JOB_QUEUE_PREFIX``."""

    name: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,200}$")] | None = None
    """This worker's name in Redis [default: host name and process id]."""

    metrics_host: str = "0.0.0.0"  # noqa: S104 - a pod's exporter listens on its pod IP
    """Address of ``/metrics``."""

    metrics_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 9500
    """Port of ``/metrics`` (0: none)."""

    heartbeat_seconds: Annotated[int, msgspec.Meta(ge=1, le=300)] = 5
    """Seconds between the heartbeats a worker keeps on its running job."""

    lost_after_seconds: Annotated[int, msgspec.Meta(ge=1, le=3600)] = 30
    """A running job whose heartbeat is this late belongs to a lost worker: it is put
    back on the queue (once) or failed."""

    maintenance_seconds: Annotated[int, msgspec.Meta(ge=1, le=3600)] = 10
    """Seconds between a worker's looks for lost jobs (and RQ's other housekeeping)."""

    warm: bool = True
    """Trace a small model once before the first job (each job then starts warm)."""

    burst: bool = False
    """Run the jobs waiting now, then exit (tests, one-off drains)."""

    max_jobs: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """Exit after this many jobs (a fresh process after N; unset: never)."""

    log_level: str = "info"
    """``debug``, ``info``, ``warning`` or ``error``."""
