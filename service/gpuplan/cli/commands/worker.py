"""``gpuplan worker``: run the job queue's worker for trace jobs.

The options are the fields of :class:`~gpuplan.jobs.worker.WorkerConfig`, generated
as the agent's are, and each can be set as ``GPUPLAN_WORKER_<OPTION>``
(``GPUPLAN_WORKER_REDIS_URL``). The settings a worker must share with the API (its
Redis, the queue prefix, the Redis password file) fall back to the API's own variables
(``GPUPLAN_REDIS_URL``, ``GPUPLAN_JOB_QUEUE_PREFIX``, ``GPUPLAN_REDIS_PASSWORD_FILE``),
so a worker started beside a configured server needs nothing more; the log says which
one each came from. Nothing heavy is imported until the command runs.
"""

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import click
from click.core import ParameterSource

from gpuplan.cli.errors import reported
from gpuplan.cli.options import field_options, with_options
from gpuplan.jobs.config import WorkerConfig

ENV_PREFIX = "GPUPLAN_WORKER"

SHARED_WITH_API = {
    "redis_url": "GPUPLAN_REDIS_URL",
    "queue_prefix": "GPUPLAN_JOB_QUEUE_PREFIX",
    "redis_password_file": "GPUPLAN_REDIS_PASSWORD_FILE",
}
"""Worker fields and the API's setting each falls back to when neither the option nor
``GPUPLAN_WORKER_<FIELD>`` is given: one Redis setting serves both processes."""

FIELDS = field_options(WorkerConfig)
for _field in FIELDS:
    _field.option.show_envvar = True
    _field.option.envvar = [f"{ENV_PREFIX}_{_field.name.upper()}"]
    if _field.name in SHARED_WITH_API:
        _field.option.help = (
            f"{_field.option.help or ''} [else env {SHARED_WITH_API[_field.name]}, "
            "the API's setting]"
        ).strip()

log = logging.getLogger("gpuplan.worker")


@click.command("worker", context_settings={"max_content_width": 100})
@with_options([f.option for f in FIELDS])
def worker_command(**options: Any) -> None:
    """Run a worker of the job queue: traces submitted to POST /v1/memory/trace.

    It imports torch and transformers once, traces a small model to warm up, then
    runs each job in a child process of its own (killed at the job's time limit).
    SIGTERM lets the running job finish; a second SIGTERM kills it. Needs the
    `trace` extra: pip install 'gpuplan[trace]'. The API needs GPUPLAN_JOB_QUEUE=true
    and the same Redis and queue prefix.
    """
    from gpuplan.core.convert import convert

    values = {f.name: options[f.name] for f in FIELDS if options[f.name] is not None}
    origins = shared_settings(values, click.get_current_context(), os.environ)
    with reported("worker"):
        if "redis_url" not in values:
            raise click.UsageError(
                "the worker needs the job queue's Redis: --redis-url, "
                f"{ENV_PREFIX}_REDIS_URL or the API's GPUPLAN_REDIS_URL"
            )
        config = convert(values, WorkerConfig)
        password = _password(config.redis_password_file)
    logging.basicConfig(
        stream=sys.stderr,
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name, origin in origins.items():
        log.info("%s from %s", name, origin)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(
            f"gpuplan worker needs the trace extra (pip install 'gpuplan[trace]'): {exc}"
        ) from None
    from gpuplan.jobs.worker import run

    sys.exit(run(config, password))


def shared_settings(
    values: dict[str, Any], ctx: click.Context, environ: Mapping[str, str]
) -> dict[str, str]:
    """Fill the fields shared with the API from its variables where the worker's own
    option and variable are absent (in place); return where each came from.

    An empty variable counts as unset, as it does for the API (``GPUPLAN_REDIS_URL=``
    runs the API without Redis)."""
    origins: dict[str, str] = {}
    for name, fallback in SHARED_WITH_API.items():
        own = f"{ENV_PREFIX}_{name.upper()}"
        source = ctx.get_parameter_source(name)
        if name in values and source is ParameterSource.COMMANDLINE:
            origins[name] = f"--{name.replace('_', '-')}"
        elif name in values and source is ParameterSource.ENVIRONMENT:
            origins[name] = own
        elif environ.get(fallback):
            values[name] = environ[fallback]
            origins[name] = f"{fallback} (the API's setting; {own} unset)"
        elif name in values:
            origins[name] = "the default"
    return origins


def _password(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc.__class__.__name__}", param_hint="--redis-password-file"
        ) from None
