"""Run the API under granian, the ASGI server chosen by measurement (docs/asgi-server.md).

Workers import ``gpuplan.api.asgi:app``, which reads its settings from the
environment; :func:`serve` validates them first, so a bad setting stops start-up in
the parent with one clear message instead of once per worker.
"""

import os
import tempfile
from collections.abc import MutableMapping
from typing import Any

from gpuplan.config.settings import Settings

APP_TARGET = "gpuplan.api.asgi:app"

_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def logging_config(level: str) -> dict[str, Any]:
    """One format for granian's and gpuplan's logs, on standard error."""
    handler = {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": _LOG_FORMAT}},
        "handlers": {"stderr": handler},
        "loggers": {
            "_granian": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "gpuplan": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
        },
    }


def prepare_multiprocess_metrics(environ: MutableMapping[str, str], workers: int) -> None:
    """Give several workers one metrics directory, before prometheus_client is imported.

    prometheus_client picks its value store when it is first imported, and granian
    forks its workers, so this must run in the parent before anything imports it.
    """
    if workers > 1 and not environ.get("PROMETHEUS_MULTIPROC_DIR"):
        environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="gpuplan-metrics-")


def serve(settings: Settings) -> None:
    """Serve until SIGINT or SIGTERM; in-flight requests finish first."""
    prepare_multiprocess_metrics(os.environ, settings.workers)
    from granian import Granian
    from granian.constants import Interfaces, Loops
    from granian.log import LogLevels

    Granian(
        APP_TARGET,
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI,
        workers=settings.workers,
        loop=Loops.uvloop,
        log_level=LogLevels(settings.log_level),
        log_dictconfig=logging_config(settings.log_level),
        respawn_failed_workers=True,
        # Without a bound, granian waits forever for a worker that ignores the stop, as
        # one still starting up does when SIGTERM arrives (seen here with two workers).
        workers_kill_timeout=settings.shutdown_timeout_seconds,
    ).serve()
