"""Request metrics for Prometheus, counted outside the router.

The middleware wraps the whole application, so requests that match no route (404)
or no method (405) are counted too: a scheduler hammering a wrong URL shows up on
the dashboard. Routes are labelled by their template (``/v1/gpus/{id_or_alias}``),
never by the raw path, and unmatched requests share one label, so a client cannot
grow the number of series.

Each app owns its registry, so apps built in one process (tests) stay apart. With
several server workers, ``PROMETHEUS_MULTIPROC_DIR`` (set by ``gpuplan serve``) makes
prometheus_client share values through files and ``/metrics`` adds them up.
"""

import os
import time
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)

from gpuplan import __version__

# The ``*_created`` series double the series count and no dashboard of ours reads
# them; the switch is process-wide, and this process only serves gpuplan.
disable_created_metrics()  # type: ignore[no-untyped-call]

UNMATCHED = "unmatched"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# From half a millisecond (a cached lookup) to ten seconds (a large MIG search).
LATENCY_BUCKETS_SECONDS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

ASGIApp = Any  # an ASGI callable; Litestar's types are too narrow for a wrapper


class HttpMetrics:
    """The service's metric families, registered in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "gpuplan_http_requests",
            "HTTP requests answered, by method, route template and status code.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "gpuplan_http_request_duration_seconds",
            "Time from request start to the end of the response body.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS_SECONDS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "gpuplan_http_requests_in_flight",
            "Requests being answered now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.answer_cache = Counter(
            "gpuplan_answer_cache_lookups",
            "Planning requests looked up in the answer cache, by route and result (hit, miss).",
            ["route", "result"],
            registry=registry,
        )
        build = Gauge(
            "gpuplan_build_info",
            "Always 1; the labels name the running version.",
            ["version"],
            registry=registry,
            multiprocess_mode="max",
        )
        build.labels(version=__version__).set(1)

    def exposition(self) -> bytes:
        """The text exposition of this process, or of all workers in multiprocess mode."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            merged = CollectorRegistry()
            multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
            return generate_latest(merged)
        return generate_latest(self.registry)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """Wrap an ASGI app so every HTTP request it answers is counted."""

        async def counted(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            status = 500  # what the client sees if the app dies before answering
            started = time.perf_counter()

            async def observe(message: Any) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            self.in_flight.inc()
            try:
                await app(scope, receive, observe)
            finally:
                self.in_flight.dec()
                route = scope.get("path_template") or UNMATCHED
                method = scope["method"] if scope["method"] in _METHODS else "other"
                labels = (method, route, str(status))
                self.requests.labels(*labels).inc()
                self.latency.labels(*labels).observe(time.perf_counter() - started)

        return counted


METRICS_MEDIA_TYPE = CONTENT_TYPE_LATEST
