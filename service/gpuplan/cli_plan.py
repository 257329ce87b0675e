"""``gpuplan plan FILE``: check a plan file's targets, locally or against a server.

Exit codes are the contract with CI: 0 when every target passes, 1 when one fails,
2 when the input is invalid (the problem is printed with the field's JSONPath), 3 when
the plan could not be computed at all (the ``--api`` server is unreachable or failed).
Locally and through ``--api`` the same file renders to the same output: the server's
JSON is decoded into the same Struct and rendered by the same functions.
"""

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click
import msgspec

SCHEMA_ID = "https://gpuplan.invalid/api/plan.schema.json"
EXIT_PASS, EXIT_FAIL, EXIT_INVALID, EXIT_UNAVAILABLE = 0, 1, 2, 3
INVALID_STATUSES = frozenset({400, 413, 415, 422})
"""Answers that blame the plan file (malformed, too large, refused); others blame the server."""


def plan_file_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of a plan file, generated from the Struct the API decodes."""
    from gpuplan.api.openapi import describe_components
    from gpuplan.core.plan import PlanFile

    (root,), defs = msgspec.json.schema_components([PlanFile], ref_template="#/$defs/{name}")
    describe_components([PlanFile], defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "gpuplan plan file",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    return json.dumps(plan_file_schema(), indent=2, ensure_ascii=False) + "\n"


class _Invalid(Exception):
    """Invalid input: each line names a field."""


def _load(path: Path) -> Any:
    from gpuplan.config.documents import DocumentError, read_document

    try:
        doc = read_document(path)
    except DocumentError as exc:
        raise _Invalid(str(exc)) from None
    if not isinstance(doc, dict):
        raise _Invalid(f"$: {path} must hold a table/object (the plan), got {type(doc).__name__}")
    return doc


def _local(doc: Any, catalog_file: Path | None) -> Any:
    from gpuplan.config.catalog import load_catalog
    from gpuplan.core.catalog import CatalogError
    from gpuplan.core.errors import InvalidRequest
    from gpuplan.core.plan import PlanFile, plan

    try:
        request = msgspec.convert(doc, PlanFile)
    except msgspec.ValidationError as exc:
        from gpuplan.core.errors import field_error

        raise _Invalid("{}: {}".format(*field_error(exc))) from None
    try:
        catalog = load_catalog(str(catalog_file) if catalog_file else None)
    except CatalogError as exc:
        raise _Invalid(str(exc)) from None
    try:
        return plan(request, catalog)
    except InvalidRequest as exc:
        raise _Invalid("\n".join(f"{p}: {r}" for p, r in exc.errors)) from None


class _Unavailable(Exception):
    pass


def _token(token_file: Path | None) -> str | None:
    """The bearer token for ``--api``: from ``--token-file`` (a mounted secret), else
    ``GPUPLAN_API_TOKEN`` (a CI secret variable). Never from the command line, where
    other users of the machine would see it in the process list."""
    import os

    if token_file is None:
        return os.environ.get("GPUPLAN_API_TOKEN", "").strip() or None
    try:
        token = token_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise _Invalid(f"--token-file {token_file}: cannot read it ({exc})") from None
    if not token or any(c.isspace() for c in token):
        raise _Invalid(f"--token-file {token_file}: must hold one token (no spaces)")
    return token


def _remote(doc: Any, api: str, timeout: float, token: str | None = None) -> Any:
    from gpuplan.core.plan import PlanReport

    if not api.startswith(("http://", "https://")):
        raise _Invalid(f"--api {api}: give an http:// or https:// URL")
    body = json.dumps(doc, default=str).encode()
    headers = {"content-type": "application/json", "accept": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    req = urllib.request.Request(  # noqa: S310 (the scheme is checked above)
        api.rstrip("/") + "/v1/plan", data=body, method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:  # noqa: S310
            payload = response.read()
    except urllib.error.HTTPError as exc:
        text = exc.read()
        if exc.code in INVALID_STATUSES:
            raise _Invalid(_problem_text(exc.code, text)) from None
        # 404/405: no such route there (a wrong URL, an older server); 5xx: it failed.
        raise _Unavailable(f"{api} answered {exc.code}: {_problem_text(exc.code, text)}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise _Unavailable(f"cannot reach {api}: {getattr(exc, 'reason', exc)}") from None
    try:
        return msgspec.json.decode(payload, type=PlanReport)
    except msgspec.DecodeError as exc:
        raise _Unavailable(f"{api} answered a body that is not a plan report: {exc}") from None


def _problem_text(status: int, body: bytes) -> str:
    """A problem+json body as lines naming each field; raw text when it is not one."""
    try:
        problem = json.loads(body)
    except ValueError:
        return f"HTTP {status}: {body.decode(errors='replace')[:500]}"
    errors = problem.get("errors") or []
    if errors:
        return "\n".join(f"{e.get('path', '$')}: {e.get('reason', '')}" for e in errors)
    return f"HTTP {status}: {problem.get('detail') or problem.get('title') or ''}"


@click.command("plan")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--api", metavar="URL", help="Compute on a gpuplan server (e.g. http://gpuplan:8000)."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown", "json"]),
    default="table",
    show_default=True,
)
@click.option(
    "--catalog",
    "catalog_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Local only: a catalog file merged over the built-in catalog.",
)
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
def plan_command(
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
    from gpuplan.plan_render import markdown, table

    try:
        doc = _load(file)
        if api is not None and catalog_file is not None:
            raise _Invalid("--catalog applies to local plans; the server uses its own catalog")
        if api:
            report = _remote(doc, api, timeout, _token(token_file))
        else:
            report = _local(doc, catalog_file)
    except _Invalid as exc:
        click.echo(f"gpuplan plan: invalid input in {file}:\n{exc}", err=True)
        sys.exit(EXIT_INVALID)
    except _Unavailable as exc:
        click.echo(f"gpuplan plan: {exc}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    if fmt == "json":
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(report)).decode() + "\n")
    elif fmt == "markdown":
        sys.stdout.write(markdown(report))
    else:
        sys.stdout.write(table(report))
    sys.exit(EXIT_PASS if report.passed else EXIT_FAIL)


@click.command("plan-schema")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file."
)
def plan_schema_command(output: Path | None) -> None:
    """Print the JSON Schema of plan files (committed as api/plan.schema.json)."""
    text = schema_text()
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
