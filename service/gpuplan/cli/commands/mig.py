"""``gpuplan mig``: the MIG partitioner on the command line, with the API's schemas.

``plan`` and ``validate`` read a YAML, JSON or TOML file holding exactly the body the
API takes (``POST /v1/mig/plan``, ``POST /v1/mig/validate``). ``plan`` prints a table
(each GPU's instances, the Kubernetes resources), ``--output json`` or ``yaml`` the
API's answer, ``--output mig-parted`` the partition's nvidia-mig-parted config and
``--output dra`` its ResourceClaimTemplates for NVIDIA's DRA driver (``--write`` saves
either). The file's ``output`` list says what the answer carries; ``--output mig-parted``
and ``--output dra`` add the one they print to it. ``validate`` and ``profiles`` print
the API's answer. Exit status: 0 on success (and for ``validate``, a valid layout), 1 for
an invalid layout, 2 for unusable input.
"""

import sys
from pathlib import Path

import click
import msgspec

from gpuplan.cli.context import catalog, catalog_option, read_request
from gpuplan.cli.errors import EXIT_FAILED, reported
from gpuplan.cli.render import mig as render
from gpuplan.cli.render.output import MACHINE_FORMATS, machine, write

APPLIED = ("mig-parted", "dra")
"""``--output`` values that print one of the answer's texts to apply, not the answer."""

FORMAT = click.option(
    "--output", "fmt", type=click.Choice(MACHINE_FORMATS), default="json", show_default=True
)


@click.group("mig")
def mig_command() -> None:
    """Plan and check MIG partitions (same schemas as /v1/mig/*)."""


@mig_command.command("plan")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--output",
    "fmt",
    type=click.Choice(["table", *MACHINE_FORMATS, *APPLIED]),
    default="table",
    show_default=True,
    help="The partition as a table (GPUs, instances, Kubernetes resources), the API's "
    "answer as JSON or YAML, or only its nvidia-mig-parted config or its DRA "
    "ResourceClaimTemplates (a YAML stream).",
)
@click.option(
    "-w",
    "--write",
    "write_to",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --output mig-parted or dra: write the text to this file.",
)
@catalog_option
def partition_command(
    file: Path, fmt: str, write_to: Path | None, catalog_file: Path | None
) -> None:
    """Pack the workloads of FILE (a /v1/mig/plan body) onto the fewest GPUs.

    \b
    Examples:
      gpuplan mig plan workloads.yaml
      gpuplan mig plan workloads.yaml --output mig-parted --write config.yaml
      gpuplan mig plan workloads.yaml --output dra | kubectl apply -n ml -f -
      gpuplan mig plan workloads.yaml --output json
    """
    from gpuplan.core.mig import PartitionRequest, partition

    if write_to is not None and fmt not in APPLIED:
        raise click.UsageError("--write goes with --output mig-parted or --output dra")
    with reported("mig plan", file):
        request = read_request(file, PartitionRequest)
        if fmt in APPLIED and fmt not in request.output:
            request = msgspec.structs.replace(request, output=(*request.output, fmt))
        result = partition(request, catalog(catalog_file))
    if fmt == "table":
        write(render.table(result))
        return
    if fmt not in APPLIED:
        write(machine(result, fmt))
        return
    if fmt == "dra":
        assert result.dra is not None, "the request asks for the output it prints"
        text = result.dra.manifests
    else:
        assert result.mig_parted_config is not None, "the request asks for the output it prints"
        text = result.mig_parted_config
    if write_to is not None:
        write_to.write_text(text, encoding="utf-8")
    else:
        write(text)
    if result.unplaced:
        click.echo(f"{sum(u.count for u in result.unplaced)} workload(s) unplaced", err=True)


@mig_command.command("validate")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@FORMAT
@catalog_option
def validate_command(file: Path, fmt: str, catalog_file: Path | None) -> None:
    """Check the layout of FILE (a /v1/mig/validate body); exit 1 if it is invalid."""
    from gpuplan.core.mig import ValidateRequest, validate

    with reported("mig validate", file):
        result = validate(read_request(file, ValidateRequest), catalog(catalog_file))
    write(machine(result, fmt))
    if not result.valid:
        sys.exit(EXIT_FAILED)


@mig_command.command("profiles")
@click.argument("gpu")
@FORMAT
@catalog_option
def profiles_command(gpu: str, fmt: str, catalog_file: Path | None) -> None:
    """List the MIG profiles of GPU (any catalog name)."""
    from gpuplan.core.mig import ProfilesQuery, profiles

    with reported("mig profiles"):
        result = profiles(ProfilesQuery(gpu=gpu), catalog(catalog_file))
    write(machine(result, fmt))
