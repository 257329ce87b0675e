"""What one running app holds: its settings, metrics, catalog, answer cache, Redis
client, job queue and spec.

A plain class on ``app.state`` rather than typed dependencies: Litestar validates
dependency values through msgspec and would hand each request a converted copy.
"""

from typing import Any, cast

from litestar import Litestar, Request
from redis.asyncio import Redis

from gpuplan.api.answer_cache import AnswerCache
from gpuplan.api.metrics import HttpMetrics
from gpuplan.config.settings import Settings
from gpuplan.core.catalog import Catalog
from gpuplan.jobs.metrics import JobMetrics
from gpuplan.jobs.queue import JobQueue


class Runtime:
    """The state of one app, created by :func:`gpuplan.api.create_app`."""

    def __init__(self, settings: Settings, metrics: HttpMetrics, catalog: Catalog) -> None:
        self.settings = settings
        self.metrics = metrics
        self.catalog = catalog
        self.answers = AnswerCache(settings.answer_cache_bytes)
        self.redis: Redis | None = None  # opened and closed by the app's lifespan
        self.jobs: JobQueue | None = None  # the job queue (GPUPLAN_JOB_QUEUE), likewise
        self.job_metrics = JobMetrics(metrics.registry)
        self.openapi: dict[str, Any] | None = None  # built on first use


def runtime_of(app: Litestar) -> Runtime:
    return cast(Runtime, app.state.runtime)


def runtime(request: Request[Any, Any, Any]) -> Runtime:
    return runtime_of(request.app)
