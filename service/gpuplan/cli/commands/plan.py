"""``gpuplan plan FILE``: check a plan file's targets, locally or against a server.

Exit codes are the contract with CI (:mod:`gpuplan.cli.errors`): 0 when every target
passes, 1 when one fails, 2 when the input is invalid (each problem names its field's
JSONPath), 3 when the plan could not be computed at all (the ``--api`` server is
unreachable or failed). Locally and through ``--api`` the same file renders to the same
output: the server's JSON is decoded into the same Struct and rendered by the same
functions.
"""

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click
import msgspec

from gpuplan.cli.context import catalog, catalog_option
from gpuplan.cli.errors import EXIT_FAILED, EXIT_OK, Unavailable, reported
from gpuplan.cli.options import output_format
from gpuplan.cli.render import ci as render
from gpuplan.cli.render.output import machine, write
from gpuplan.config.documents import read_document
from gpuplan.core.convert import convert
from gpuplan.core.describe import json_schema
from gpuplan.core.errors import InvalidRequest

SCHEMA_ID = "https://gpuplan.invalid/api/plan.schema.json"
INVALID_STATUSES = frozenset({400, 413, 415, 422})
"""Answers that blame the plan file (malformed, too large, refused); others blame the server."""


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


def _token(token_file: Path | None) -> str | None:
    """The bearer token for ``--api``: from ``--token-file`` (a mounted secret), else
    ``GPUPLAN_API_TOKEN`` (a CI secret variable). Never from the command line, where
    other users of the machine would see it in the process list."""
    if token_file is None:
        return os.environ.get("GPUPLAN_API_TOKEN", "").strip() or None
    try:
        token = token_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read it ({exc})", param_hint="--token-file") from None
    if not token or any(c.isspace() for c in token):
        raise click.BadParameter("must hold one token (no spaces)", param_hint="--token-file")
    return token


def _remote(doc: dict[str, Any], api: str, timeout: float, token: str | None) -> Any:
    from gpuplan.core.ci import CiReport

    body = json.dumps(doc, default=str).encode()
    headers = {"content-type": "application/json", "accept": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    req = urllib.request.Request(  # noqa: S310 (the scheme is checked by the command)
        api.rstrip("/") + "/v1/plan", data=body, method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:  # noqa: S310
            payload = response.read()
    except urllib.error.HTTPError as exc:
        text = exc.read()
        if exc.code in INVALID_STATUSES:
            raise _refusal(exc.code, text) from None
        # 404/405: no such route there (a wrong URL, an older server); 5xx: it failed.
        raise Unavailable(f"{api} answered {exc.code}: {_problem_text(exc.code, text)}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Unavailable(f"cannot reach {api}: {getattr(exc, 'reason', exc)}") from None
    try:
        return msgspec.json.decode(payload, type=CiReport)
    except msgspec.DecodeError as exc:
        raise Unavailable(f"{api} answered a body that is not a plan report: {exc}") from None


def _refusal(status: int, body: bytes) -> InvalidRequest:
    """The server's refusal of the plan file, naming the fields it named."""
    try:
        problem = json.loads(body)
        errors = [(e.get("path", "$"), e.get("reason", "")) for e in problem.get("errors") or []]
    except (ValueError, AttributeError):
        errors = []
    return InvalidRequest(errors or [("$", _problem_text(status, body))])


def _problem_text(status: int, body: bytes) -> str:
    """A problem+json body's detail; raw text when it is not one."""
    try:
        problem = json.loads(body)
        return f"HTTP {status}: {problem.get('detail') or problem.get('title') or ''}"
    except (ValueError, AttributeError):
        return f"HTTP {status}: {body.decode(errors='replace')[:500]}"


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
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="GPUPLAN_API_TOKEN_FILE",
    help="--api: a file holding the server's bearer token [env GPUPLAN_API_TOKEN_FILE; "
    "or the token itself in GPUPLAN_API_TOKEN].",
)
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
        if not api.startswith(("http://", "https://")):
            raise click.BadParameter("give an http:// or https:// URL", param_hint="--api")
    with reported("plan", file):
        doc = _load(file)
        if api:
            report = _remote(doc, api, timeout, _token(token_file))
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
