"""``gpuplan plan FILE``: check a plan file's targets, locally or against a server.

Exit codes are the contract with CI (:mod:`gpuplan.cli.errors`): 0 when every target
passes, 1 when one fails, 2 when the input is invalid (each problem names its field's
JSONPath), 3 when the plan could not be computed at all (the ``--api`` server is
unreachable or failed). Locally and through ``--api`` the same file renders to the same
output: the server's JSON is decoded into the same Struct and rendered by the same
functions.
"""

import json
import sys
from pathlib import Path
from typing import Any

import click
import msgspec

from gpuplan.cli.context import catalog, catalog_option
from gpuplan.cli.errors import EXIT_FAILED, EXIT_OK, Unavailable, reported
from gpuplan.cli.options import output_format
from gpuplan.cli.remote import Progress, Server, check_url, token_file_option, token_from
from gpuplan.cli.render import ci as render
from gpuplan.cli.render.output import machine, write
from gpuplan.config.documents import read_document
from gpuplan.core.convert import convert
from gpuplan.core.describe import json_schema
from gpuplan.core.errors import InvalidRequest

SCHEMA_ID = "https://gpuplan.invalid/api/plan.schema.json"


def plan_file_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of a plan file, generated from the Struct the API decodes."""
    from gpuplan.core.ci import CiPlan

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "gpuplan plan file",
        **json_schema(CiPlan),
    }


def schema_text() -> str:
    return json.dumps(plan_file_schema(), indent=2, ensure_ascii=False) + "\n"


def _load(path: Path) -> dict[str, Any]:
    doc = read_document(path)
    if not isinstance(doc, dict):
        reason = f"{path} must hold a table/object (the plan), got {type(doc).__name__}"
        raise InvalidRequest([("$", reason)])
    return doc


def _remote(doc: dict[str, Any], api: str, timeout: float, token: str | None) -> Any:
    from gpuplan.core.ci import CiReport

    body = json.dumps(doc, default=str).encode()
    server = Server(api, token, timeout)
    payload = server.submit("/v1/plan", body, Progress("gpuplan plan"))
    try:
        return msgspec.json.decode(payload, type=CiReport)
    except msgspec.DecodeError as exc:
        raise Unavailable(f"{api} answered a body that is not a plan report: {exc}") from None


@click.command("plan")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--api", metavar="URL", help="Compute on a gpuplan server (e.g. http://gpuplan:8000)."
)
@output_format("table", "markdown", "json")
@catalog_option
@click.option(
    "--timeout", type=float, default=60.0, show_default=True, help="--api request timeout (s)."
)
@token_file_option
@click.pass_context
def plan_command(
    ctx: click.Context,
    file: Path,
    *,
    api: str | None,
    fmt: str,
    catalog_file: Path | None,
    timeout: float,
    token_file: Path | None,
) -> None:
    """Check the targets of a plan FILE (YAML, JSON or TOML; docs/ci.md).

    Exit 0 when every target passes, 1 when one fails, 2 on invalid input (each
    problem names its field), 3 when the --api server cannot be reached or fails.

    \b
    Examples:
      gpuplan plan examples/llm-finetune.yaml
      gpuplan plan plan.yaml --format markdown > comment.md
      gpuplan plan plan.yaml --api http://gpuplan:8000 --format json
    """
    from gpuplan.core.ci import CiPlan, check

    if api is not None:
        if ctx.get_parameter_source("catalog_file") is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError(
                "--catalog applies to local plans; the server uses its own catalog"
            )
        check_url(api)
    with reported("plan", file):
        doc = _load(file)
        if api:
            report = _remote(doc, api, timeout, token_from(token_file))
        else:
            report = check(convert(doc, CiPlan), catalog(catalog_file))
    if fmt == "json":
        write(machine(report, "json"))
    elif fmt == "markdown":
        write(render.markdown(report))
    else:
        write(render.table(report))
    sys.exit(EXIT_OK if report.passed else EXIT_FAILED)


@click.command("plan-schema")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file."
)
def plan_schema_command(output: Path | None) -> None:
    """Print the JSON Schema of plan files (committed as api/plan.schema.json)."""
    text = schema_text()
    if output is None:
        write(text)
    else:
        output.write_text(text, encoding="utf-8")
