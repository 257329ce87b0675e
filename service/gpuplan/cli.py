"""The ``gpuplan`` command: a thin shell over the core and the API.

Subcommands parse their options, call one function and print its result. Each
later adapter (estimate, recommend, mig, plan, trace, agent) joins here.
"""

import json
import os
import sys
from pathlib import Path

import click

from gpuplan import __version__
from gpuplan.cli_agent import agent as agent_command
from gpuplan.cli_estimate import estimate_command
from gpuplan.cli_mig import mig as mig_command
from gpuplan.cli_plan import plan_command, plan_schema_command
from gpuplan.cli_recommend import recommend as recommend_command
from gpuplan.cli_trace import trace_command


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="gpuplan")
def main() -> None:
    """Plan GPU memory, hardware, cost and MIG layouts for ML jobs."""


@main.command()
@click.option("--host", help="Address to listen on [env GPUPLAN_HOST; default 127.0.0.1].")
@click.option("--port", type=int, help="TCP port [env GPUPLAN_PORT; default 8000].")
@click.option("--workers", type=int, help="Worker processes [env GPUPLAN_WORKERS; default 1].")
@click.option(
    "--config",
    "config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Settings file (TOML, YAML or JSON) [env GPUPLAN_CONFIG].",
)
def serve(host: str | None, port: int | None, workers: int | None, config: Path | None) -> None:
    """Run the HTTP API until SIGINT or SIGTERM.

    Options override the environment, which overrides the settings file.
    """
    from gpuplan.config.settings import SettingsError, load_settings

    # Workers read their settings from the environment: the options go there, once
    # they have been validated together with it.
    overrides = {
        f"GPUPLAN_{name}": str(value)
        for name, value in (
            ("HOST", host),
            ("PORT", port),
            ("WORKERS", workers),
            ("CONFIG", config),
        )
        if value is not None
    }
    from gpuplan.config.catalog import load_catalog
    from gpuplan.core.catalog import CatalogError

    try:
        settings = load_settings({**os.environ, **overrides})
        load_catalog(settings.catalog_file)  # refuse a bad catalog file before forking workers
    except (SettingsError, CatalogError) as exc:
        raise click.UsageError(str(exc)) from None
    os.environ.update(overrides)

    from gpuplan.api.server import serve as run

    run(settings)


@main.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="Output format.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this file instead of standard output.",
)
def openapi(fmt: str, output: Path | None) -> None:
    """Print the OpenAPI 3.1 document generated from the code.

    The document does not depend on settings; `api/openapi.yaml` is its output.
    """
    from gpuplan.api.app import create_app
    from gpuplan.api.openapi import build_openapi, to_yaml
    from gpuplan.config.settings import Settings

    document = build_openapi(create_app(Settings()))
    text = to_yaml(document) if fmt == "yaml" else json.dumps(document, indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")


@main.command()
def version() -> None:
    """Print the version."""
    click.echo(__version__)


main.add_command(estimate_command)
main.add_command(recommend_command)
main.add_command(agent_command)
main.add_command(trace_command)
main.add_command(mig_command)
main.add_command(plan_command)
main.add_command(plan_schema_command)
