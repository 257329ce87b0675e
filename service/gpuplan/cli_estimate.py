"""``gpuplan estimate``: the memory estimate on the command line, no server needed.

A request comes from a file (YAML, JSON or TOML, the schema of
``POST /v1/memory/estimate``) or from flags that fill the same Struct, so the CLI and
the API cannot disagree. Invalid input prints each offending field's JSONPath and
exits 2, as a CI step expects.
"""

import json
import sys
from pathlib import Path
from typing import Any, get_args

import click
import msgspec

from gpuplan.core.memory.schema import (
    Attention,
    Checkpointing,
    EstimateRequest,
    EstimateResponse,
    Method,
    Mode,
    Optimizer,
    Precision,
    Quantization,
    Runtime,
)

GiB = 1 << 30


def _choice(literal: Any) -> click.Choice[str]:
    return click.Choice(list(get_args(literal)))


def _fail(errors: list[tuple[str, str]]) -> None:
    for path, reason in errors:
        click.echo(f"error: {path}: {reason}", err=True)
    sys.exit(2)


def _from_flags(options: dict[str, Any]) -> dict[str, Any]:
    model: dict[str, Any] = {}
    if options["model"]:
        model["name"] = options["model"]
    if options["hf_config"]:
        model["hf_config"] = json.loads(Path(options["hf_config"]).read_text(encoding="utf-8"))
    if options["parameters"]:
        model["parameters"] = options["parameters"]
    workload: dict[str, Any] = {
        k: v
        for k, v in {
            "mode": options["mode"] or "training",
            "batch_size": options["batch_size"],
            "sequence_length": options["sequence_length"],
            "image_size": options["image_size"],
            "precision": options["precision"],
            "optimizer": options["optimizer"],
            "gradient_checkpointing": options["checkpointing"],
            "attention": options["attention"],
            "gradient_accumulation_steps": options["accumulation"],
            "weight_quantization": options["quantization"],
            "max_new_tokens": options["max_new_tokens"],
        }.items()
        if v is not None
    }
    parallel = {
        k: v
        for k, v in {
            "tensor": options["tensor_parallel"],
            "pipeline": options["pipeline_parallel"],
            "data": options["data_parallel"],
            "zero_stage": options["zero_stage"],
        }.items()
        if v is not None
    }
    if parallel:
        workload["parallelism"] = parallel
    if options["lora_rank"] is not None:
        workload["lora"] = {"rank": options["lora_rank"]}
    request: dict[str, Any] = {"model": model, "workload": workload}
    for key in ("runtime", "method", "gpu"):
        if options[key] is not None:
            request[key] = options[key]
    return request


def _size(n: int) -> str:
    return f"{n / GiB:9.2f} GiB  ({n / 1e9:8.2f} GB)"


def render_table(r: EstimateResponse) -> str:
    b = r.breakdown
    lines = [
        f"parameters            {r.parameters:,} ({r.trainable_parameters:,} trainable)",
        f"peak phase            {r.peak_phase}",
        *(
            f"  {name.removesuffix('_bytes'):<20s}{_size(value)}"
            for name, value in msgspec.structs.asdict(b).items()
            if value
        ),
        f"peak_bytes            {_size(r.peak_bytes)}",
        f"total_bytes           {_size(r.total_bytes)}",
        f"required_bytes        {_size(r.required_bytes)}  (+{r.headroom_fraction:.0%} headroom)",
    ]
    if r.fit is not None:
        verdict = "fits" if r.fit.fits else "does NOT fit"
        lines.append(
            f"{r.fit.gpu}: {verdict} ({r.fit.utilization:.0%} of {r.fit.usable_memory_bytes / GiB:.1f} GiB usable)"
        )
    lines += [f"warning: {w}" for w in r.warnings]
    return "\n".join(lines) + "\n"


@click.command("estimate")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--model", help="A built-in preset (see GET /v1/models), e.g. llama-3.1-8b.")
@click.option("--hf-config", type=click.Path(dir_okay=False), help="A Hugging Face config.json.")
@click.option("--parameters", type=int, help="A bare parameter count.")
@click.option("--mode", type=_choice(Mode), help="[default: training]")
@click.option("--batch-size", type=int)
@click.option("--sequence-length", type=int)
@click.option("--image-size", type=int, help="Input side in pixels, for vision presets.")
@click.option("--precision", type=_choice(Precision))
@click.option("--optimizer", type=_choice(Optimizer))
@click.option("--checkpointing", type=_choice(Checkpointing))
@click.option("--attention", type=_choice(Attention))
@click.option("--accumulation", type=int, help="Gradient accumulation steps.")
@click.option("--tensor-parallel", type=int)
@click.option("--pipeline-parallel", type=int)
@click.option("--data-parallel", type=int)
@click.option("--zero-stage", type=click.IntRange(0, 3))
@click.option("--lora-rank", type=int)
@click.option("--quantization", type=_choice(Quantization), help="Inference weight format.")
@click.option("--max-new-tokens", type=int)
@click.option("--runtime", type=_choice(Runtime))
@click.option("--method", type=_choice(Method))
@click.option("--gpu", help="A catalog GPU (any lookup form): adds a fit verdict.")
@click.option(
    "--format", "fmt", type=click.Choice(["json", "table"]), default="table", show_default=True
)
def estimate_command(file: Path | None, fmt: str, **options: Any) -> None:
    """Estimate the peak GPU memory of a job, from FILE or from flags.

    FILE is YAML, JSON or TOML with the schema of POST /v1/memory/estimate. Exits 2
    on invalid input, naming each offending field.
    """
    from gpuplan.config.catalog import load_catalog
    from gpuplan.config.documents import DocumentError, read_document
    from gpuplan.config.settings import SettingsError, load_settings
    from gpuplan.core.catalog import CatalogError
    from gpuplan.core.errors import InvalidRequest
    from gpuplan.core.memory.estimate import estimate

    flags = {k: v for k, v in options.items() if v is not None}
    if file is not None and flags:
        raise click.UsageError(f"give FILE or flags, not both (got {', '.join(sorted(flags))})")
    try:
        raw = read_document(file) if file is not None else _from_flags(options)
    except (DocumentError, OSError, json.JSONDecodeError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    try:
        request = msgspec.convert(raw, EstimateRequest)
    except msgspec.ValidationError as exc:
        from gpuplan.core.errors import field_error

        _fail([field_error(exc)])
    try:
        import os

        catalog = load_catalog(load_settings(os.environ).catalog_file)
    except (SettingsError, CatalogError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        result = estimate(request, catalog)
    except InvalidRequest as exc:
        _fail(exc.errors)
    if fmt == "json":
        sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
    else:
        sys.stdout.write(render_table(result))
