"""What is running: the version endpoint and the Prometheus exposition."""

import asyncio
import platform
from typing import Any

from litestar import Request, Response
from redis.exceptions import RedisError

from gpuplan import __version__
from gpuplan.api.metrics import METRICS_MEDIA_TYPE
from gpuplan.api.routing import operation
from gpuplan.api.runtime import runtime
from gpuplan.core.record import Record

API_VERSION = "v1"


class VersionInfo(Record):
    """The running build."""

    name: str
    """Always ``gpuplan``."""

    version: str
    """The package version (PEP 440)."""

    api_version: str
    """The major version of the HTTP API, the first segment of its paths."""

    python_version: str
    """The interpreter running the service."""


@operation("GET", "/v1/version", tags=["meta"])
async def version(request: Request[Any, Any, Any]) -> VersionInfo:
    """The version of the running service and its API."""
    return VersionInfo(
        name="gpuplan",
        version=__version__,
        api_version=API_VERSION,
        python_version=platform.python_version(),
    )


@operation("GET", "/metrics", media_type=METRICS_MEDIA_TYPE, tags=["operations"])
async def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Prometheus text exposition: request counts and latency by route template and
    status; with a job queue, its jobs and depth."""
    state = runtime(request)
    if state.jobs is not None:
        try:
            async with asyncio.timeout(state.settings.redis_timeout_seconds * 4):
                await asyncio.to_thread(state.job_metrics.refresh, state.jobs)
        except (RedisError, OSError, TimeoutError):
            pass  # Redis away: the last values stand
    body = state.metrics.exposition()
    return Response(body, media_type=METRICS_MEDIA_TYPE)
