"""The application factory: routes, error handlers, limits, metrics and lifespan."""

import logging
import os
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.handlers import HTTPRouteHandler
from prometheus_client import CollectorRegistry

from gpuplan.api.answer_cache import serve_repeats
from gpuplan.api.metrics import HttpMetrics
from gpuplan.api.problems import PROBLEMS, answer_problem
from gpuplan.api.routes import ci, docs, fleet, gpus, health, jobs, memory, meta, mig, ui
from gpuplan.api.routes import recommend as recommend_routes
from gpuplan.api.routes import trace as trace_route
from gpuplan.api.runtime import Runtime, runtime_of
from gpuplan.api.security import Guard
from gpuplan.config.catalog import load_catalog
from gpuplan.config.settings import Settings, api_tokens, load_settings, redis_password
from gpuplan.fleet.connection import connect
from gpuplan.jobs import queue as job_queue

ROUTES: tuple[HTTPRouteHandler, ...] = (
    health.healthz,
    health.readyz,
    meta.version,
    gpus.list_gpus,
    gpus.get_gpu,
    memory.estimate_memory,
    recommend_routes.recommendations,
    fleet.list_nodes,
    fleet.get_node,
    fleet.fleet_flops,
    fleet.fleet_placements,
    fleet.place_workload,
    memory.list_models,
    trace_route.trace_memory,
    jobs.get_job,
    jobs.cancel_job,
    mig.mig_profiles,
    mig.mig_validate,
    mig.mig_plan,
    mig.mig_slices,
    ci.plan_job,
    meta.metrics,
    docs.openapi_json,
    docs.openapi_yaml,
    docs.reference,
    docs.swagger,
    ui.root,
    ui.planner,
    ui.asset,
)


def create_app(settings: Settings | None = None) -> Litestar:
    """Build the API. Without ``settings`` they are read from the environment."""
    return assemble(settings or load_settings(os.environ), ROUTES)


@asynccontextmanager
async def _redis_lifespan(app: Litestar) -> AsyncGenerator[None, None]:
    """Open the Redis client on the app's own event loop, and close it there; and the
    job queue's (blocking) client, when there is a queue."""
    state = runtime_of(app)
    settings = state.settings
    if settings.redis_url is not None:
        password = redis_password(settings)
        state.redis = connect(settings.redis_url, settings.redis_timeout_seconds, password)
        if settings.job_queue:
            state.jobs = job_queue.JobQueue(
                job_queue.connect(settings.redis_url, settings.redis_timeout_seconds, password),
                settings.job_queue_prefix,
                settings.job_result_ttl_seconds,
            )
    try:
        yield
    finally:
        if state.redis is not None:
            await state.redis.aclose()
            state.redis = None
        if state.jobs is not None:
            state.jobs.redis.close()
            state.jobs = None


def assemble(settings: Settings, routes: Sequence[HTTPRouteHandler]) -> Litestar:
    """An app serving ``routes`` with the service's errors, limits and metrics.

    Raises :class:`~gpuplan.core.catalog.CatalogError` for an invalid catalog file.
    """
    logging.getLogger("gpuplan").setLevel(settings.log_level.upper())
    metrics = HttpMetrics(CollectorRegistry(auto_describe=True))
    app = Litestar(
        route_handlers=list(routes),
        exception_handlers=dict.fromkeys(PROBLEMS, answer_problem),
        request_max_body_size=settings.max_body_bytes,
        lifespan=[_redis_lifespan],
        openapi_config=None,  # the document comes from gpuplan.api.openapi
        logging_config=None,  # the server configures logging (gpuplan.api.server)
        debug=False,
        cors_config=_cors(settings),
    )
    state = Runtime(settings, metrics, load_catalog(settings.catalog_file))
    app.state.runtime = state
    handler = app.asgi_handler
    if settings.answer_cache_bytes > 0:
        remembered = [path for r in routes if r.opt.get("remember") for path in r.paths]
        lookups = {
            (path, result): metrics.answer_cache.labels(path, result)
            for path in remembered
            for result in ("hit", "miss")
        }
        handler = serve_repeats(
            state.answers,
            handler,
            remembered,
            settings.max_body_bytes,
            lambda route, result: lookups[route, result].inc(),
        )
    # Count at the outermost layer, where 404s and 405s are still visible.
    guard = Guard(api_tokens(settings), settings.protect_operations, cors=bool(_cors(settings)))
    app.asgi_handler = metrics.wrap(guard.wrap(handler))
    return app


def _cors(settings: Settings) -> CORSConfig | None:
    """CORS is off unless origins are configured: the API's callers are not browsers."""
    origins = (settings.cors_allow_origins or "").replace(",", " ").split()
    if not origins:
        return None
    return CORSConfig(
        allow_origins=origins,
        allow_methods=["GET", "POST", "DELETE"],
        allow_headers=["Authorization", "Content-Type", "Prefer"],
        expose_headers=["Location", "Preference-Applied", "Retry-After"],
        allow_credentials=False,
        max_age=600,
    )
