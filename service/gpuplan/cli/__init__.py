"""The ``gpuplan`` command: a thin shell over the core, the config and the API.

Each command lives in :mod:`gpuplan.cli.commands` and follows one pattern: options
(generated from the request Structs, :mod:`gpuplan.cli.options`), one call, a renderer
(:mod:`gpuplan.cli.render`); the catalog is resolved by :mod:`gpuplan.cli.context` and
errors become exit codes in :mod:`gpuplan.cli.errors`.
"""

import click

from gpuplan import __version__
from gpuplan.cli.commands.agent import agent_command
from gpuplan.cli.commands.estimate import estimate_command
from gpuplan.cli.commands.fleet import fleet_command
from gpuplan.cli.commands.mig import mig_command
from gpuplan.cli.commands.openapi import openapi_command
from gpuplan.cli.commands.plan import plan_command, plan_schema_command
from gpuplan.cli.commands.recommend import recommend_command
from gpuplan.cli.commands.serve import serve_command
from gpuplan.cli.commands.trace import trace_command
from gpuplan.cli.commands.version import version_command
from gpuplan.cli.commands.worker import worker_command

COMMANDS = (
    serve_command,
    openapi_command,
    version_command,
    estimate_command,
    recommend_command,
    plan_command,
    plan_schema_command,
    mig_command,
    fleet_command,
    trace_command,
    agent_command,
    worker_command,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="gpuplan")
def main() -> None:
    """Plan GPU memory, hardware, cost and MIG layouts for ML jobs."""


for _command in COMMANDS:
    main.add_command(_command)
