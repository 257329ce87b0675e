"""``gpuplan mig``: the MIG planner on the command line, with the API's schemas.

``plan`` and ``validate`` read a YAML, JSON or TOML file holding exactly the body the
API takes (``POST /v1/mig/plan``, ``POST /v1/mig/validate``) and print the API's
answer; ``--output mig-parted`` prints (or ``--write`` saves) the plan's nvidia-mig-parted
config instead. Exit status: 0 on success (and for ``validate``, a valid layout),
1 for an invalid layout, 2 for unusable input.
"""

import json
import os
import sys
from pathlib import Path
from typing import Any, TypeVar

import click
import msgspec

T = TypeVar("T")


def _read(path: Path, type_: type[T]) -> T:
    from gpuplan.config.documents import DocumentError, read_document

    try:
        document = read_document(path)
    except DocumentError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        return msgspec.convert(document, type_)
    except msgspec.ValidationError as exc:
        raise click.UsageError(f"{path}: {exc}") from None


def _catalog() -> Any:
    from gpuplan.config.catalog import load_catalog
    from gpuplan.core.catalog import CatalogError

    try:
        return load_catalog(os.environ.get("GPUPLAN_CATALOG_FILE") or None)
    except CatalogError as exc:
        raise click.UsageError(str(exc)) from None


def _run(fn: Any, request: Any) -> Any:
    from gpuplan.core.mig import MigInputError

    try:
        return fn(request, _catalog())
    except MigInputError as exc:
        raise click.UsageError(str(exc)) from None


def _emit(value: Any, fmt: str) -> None:
    data = msgspec.to_builtins(value)
    if fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    else:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")


@click.group()
def mig() -> None:
    """Plan and check MIG partitions (same schemas as /v1/mig/*)."""


@mig.command("plan")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--output",
    "fmt",
    type=click.Choice(["json", "yaml", "mig-parted"]),
    default="json",
    show_default=True,
    help="The plan as JSON or YAML, or only its nvidia-mig-parted config.",
)
@click.option(
    "-w",
    "--write",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --output mig-parted: write the config to this file.",
)
def plan_command(file: Path, fmt: str, write: Path | None) -> None:
    """Pack the workloads of FILE (a /v1/mig/plan body) onto the fewest GPUs."""
    from gpuplan.core.mig import PlanRequest, plan

    result = _run(plan, _read(file, PlanRequest))
    if fmt == "mig-parted":
        if write is not None:
            write.write_text(result.mig_parted_config, encoding="utf-8")
        else:
            sys.stdout.write(result.mig_parted_config)
        if result.unplaced:
            click.echo(f"{sum(u.count for u in result.unplaced)} workload(s) unplaced", err=True)
        return
    if write is not None:
        raise click.UsageError("--write goes with --output mig-parted")
    _emit(result, fmt)


@mig.command("validate")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--output", "fmt", type=click.Choice(["json", "yaml"]), default="json", show_default=True
)
def validate_command(file: Path, fmt: str) -> None:
    """Check the layout of FILE (a /v1/mig/validate body); exit 1 if it is invalid."""
    from gpuplan.core.mig import ValidateRequest, validate

    result = _run(validate, _read(file, ValidateRequest))
    _emit(result, fmt)
    if not result.valid:
        sys.exit(1)


@mig.command("profiles")
@click.argument("gpu")
@click.option(
    "--output", "fmt", type=click.Choice(["json", "yaml"]), default="json", show_default=True
)
def profiles_command(gpu: str, fmt: str) -> None:
    """List the MIG profiles of GPU (any catalog name)."""
    from gpuplan.core.mig import ProfilesQuery, profiles

    _emit(_run(profiles, ProfilesQuery(gpu=gpu)), fmt)
