"""``gpuplan worker``: run the job queue's worker for trace jobs.

The options are the fields of :class:`~gpuplan.jobs.worker.WorkerConfig`, generated
as the agent's are, and each can be set as ``GPUPLAN_WORKER_<OPTION>``
(``GPUPLAN_WORKER_REDIS_URL``). Nothing heavy is imported until the command runs.
"""

import logging
import sys
from typing import Any

import click

from gpuplan.cli.errors import reported
from gpuplan.cli.options import field_options, with_options
from gpuplan.jobs.config import WorkerConfig

ENV_PREFIX = "GPUPLAN_WORKER"

FIELDS = field_options(WorkerConfig)
for _field in FIELDS:
    _field.option.show_envvar = True
    _field.option.envvar = [f"{ENV_PREFIX}_{_field.name.upper()}"]


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
    with reported("worker"):
        config = convert(values, WorkerConfig)
        password = _password(config.redis_password_file)
    logging.basicConfig(
        stream=sys.stderr,
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(
            f"gpuplan worker needs the trace extra (pip install 'gpuplan[trace]'): {exc}"
        ) from None
    from gpuplan.jobs.worker import run

    sys.exit(run(config, password))


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
