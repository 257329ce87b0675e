"""Liveness and readiness probes for Kubernetes.

Liveness says only that the process answers; a failing liveness probe restarts the
pod, so it must never depend on Redis. Readiness reports Redis too, but an outage
of the optional fleet store leaves the pod ready ("degraded"): planning endpoints
keep working without it, and pulling every replica out of the Service because
Redis blinked would turn a partial outage into a total one.
"""

from typing import Any, Literal

from litestar import Request

from gpuplan.api.routing import operation
from gpuplan.api.runtime import runtime
from gpuplan.core.record import Record
from gpuplan.fleet.connection import RedisHealth, probe


class Liveness(Record):
    """The process is up and serving requests."""

    status: Literal["ok"] = "ok"


class Readiness(Record):
    """Whether this replica should receive traffic, and the state of its dependencies."""

    status: Literal["ready", "degraded"]
    """``degraded``: planning works, live-fleet features do not (Redis is down)."""

    redis: RedisHealth
    """``ok``, ``down``, or ``not_configured`` when no ``GPUPLAN_REDIS_URL`` is set."""


@operation("GET", "/healthz", tags=["operations"])
async def healthz(request: Request[Any, Any, Any]) -> Liveness:
    """Liveness probe: answers while the process serves requests."""
    return Liveness()


@operation("GET", "/readyz", tags=["operations"])
async def readyz(request: Request[Any, Any, Any]) -> Readiness:
    """Readiness probe: ready, or degraded when the optional Redis is down.

    Never fails for a missing optional Redis; the Redis check is bounded by
    ``GPUPLAN_REDIS_TIMEOUT_SECONDS``.
    """
    state = runtime(request)
    redis = await probe(state.redis, state.settings.redis_timeout_seconds)
    return Readiness(status="degraded" if redis == "down" else "ready", redis=redis)
