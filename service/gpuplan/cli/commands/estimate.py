"""``gpuplan estimate``: the memory estimate on the command line, no server needed.

A request comes from a file (YAML, JSON or TOML, the schema of
``POST /v1/memory/estimate``), from flags that fill the same Struct, or from both (flags
override the file's fields), so the CLI and the API cannot disagree. Invalid input
prints each offending field's JSONPath and exits 2, as a CI step expects; a job that
does not fit the ``--gpu`` given exits 1, as a failing ``gpuplan plan`` target does, so a
CI step can gate on the estimate alone (:mod:`gpuplan.cli.errors`).
"""

import sys
from pathlib import Path
from typing import Any

import click

from gpuplan.cli.context import catalog, catalog_option
from gpuplan.cli.errors import EXIT_FAILED, EXIT_OK, reported
from gpuplan.cli.options import RequestOptions, output_format
from gpuplan.cli.render import estimate as render
from gpuplan.cli.render.output import MACHINE_FORMATS, machine, write
from gpuplan.core.memory.schema import EstimateRequest

OPTIONS = RequestOptions(EstimateRequest, defaults={"workload.mode": "training"})


@click.command("estimate")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@OPTIONS.options
@catalog_option
@output_format("table", *MACHINE_FORMATS)
def estimate_command(file: Path | None, fmt: str, catalog_file: Path | None, **values: Any) -> None:
    """Estimate the peak GPU memory of a job, from FILE (or -f FILE) and flags.

    FILE is YAML, JSON or TOML with the schema of POST /v1/memory/estimate; flags set
    or override single fields. Without a file the mode defaults to training.

    Exit 0 when the job fits the --gpu given (or no GPU is given), 1 when it does not
    fit, 2 on invalid input (each problem names its field).

    \b
    Examples:
      gpuplan estimate --model llama-3.1-8b --mode finetune_lora --seq-len 2048 --gpu rtx-4090
      gpuplan estimate job.yaml --format json
    """
    from gpuplan.core.memory.estimate import estimate

    if file is not None and values["request_file"] is not None:
        raise click.UsageError("give the request file once: FILE or -f FILE")
    values["request_file"] = values["request_file"] or file
    with reported("estimate", values["request_file"]):
        result = estimate(OPTIONS.request(values), catalog(catalog_file))
    write(render.table(result) if fmt == "table" else machine(result, fmt))
    sys.exit(EXIT_FAILED if result.fit is not None and not result.fit.fits else EXIT_OK)
