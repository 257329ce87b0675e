"""``gpuplan serve``: run the HTTP API (the one command that reads the server's settings).

On start it prints where a person goes next, the planner page (``/ui``) and the API
reference (``/schema``), on standard error beside the server's log: granian's
"Listening at" names only the socket.
"""

import ipaddress
import os
from pathlib import Path

import click


@click.command("serve")
@click.option("--host", help="Address to listen on [env GPUPLAN_HOST; default 127.0.0.1].")
@click.option("--port", type=int, help="TCP port [env GPUPLAN_PORT; default 8000].")
@click.option("--workers", type=int, help="Worker processes [env GPUPLAN_WORKERS; default 1].")
@click.option(
    "--config",
    "config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Settings file (TOML, YAML or JSON) [env GPUPLAN_CONFIG].",
)
def serve_command(
    host: str | None, port: int | None, workers: int | None, config: Path | None
) -> None:
    """Run the HTTP API until SIGINT or SIGTERM.

    Options override the environment, which overrides the settings file.
    """
    from gpuplan.config.catalog import load_catalog
    from gpuplan.config.settings import load_settings
    from gpuplan.core.errors import DataError

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
    try:
        settings = load_settings({**os.environ, **overrides})
        load_catalog(settings.catalog_file)  # refuse a bad catalog file before forking workers
    except DataError as exc:
        raise click.UsageError(str(exc)) from None
    os.environ.update(overrides)

    from gpuplan.api.server import serve

    for line in addresses(settings.host, settings.port):
        click.echo(line, err=True)
    serve(settings)


def addresses(host: str, port: int) -> list[str]:
    """The lines naming the planner page and the API reference for a server on
    ``host``:``port``. A wildcard address (``0.0.0.0``, ``::``) is not one a browser
    can open: the loopback address of its family stands for it."""
    shown = host
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None  # a host name
    if ip is not None and ip.is_unspecified:
        shown = "127.0.0.1" if ip.version == 4 else "::1"
    if ":" in shown:
        shown = f"[{shown}]"
    base = f"http://{shown}:{port}"
    return [
        f"gpuplan serve: the planner page is at {base}/ui",
        f"gpuplan serve: the API reference is at {base}/schema",
    ]
