"""``gpuplan openapi``: the OpenAPI document, generated from the routes and Structs."""

from pathlib import Path

import click


@click.command("openapi")
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
def openapi_command(fmt: str, output: Path | None) -> None:
    """Print the OpenAPI 3.1 document generated from the code.

    The document does not depend on settings; `api/openapi.yaml` is its output.
    """
    import json

    from gpuplan.api.app import create_app
    from gpuplan.api.openapi import build_openapi, to_yaml
    from gpuplan.cli.render.output import write
    from gpuplan.config.settings import Settings

    document = build_openapi(create_app(Settings()))
    text = to_yaml(document) if fmt == "yaml" else json.dumps(document, indent=2) + "\n"
    if output is None:
        write(text)
    else:
        output.write_text(text, encoding="utf-8")
