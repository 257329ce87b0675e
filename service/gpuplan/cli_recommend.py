"""``gpuplan recommend``: the recommendation from flags or a YAML/JSON/TOML request file.

The file has exactly the shape of the ``POST /v1/recommendations`` body; flags set or
override single fields of it, so a CI job can keep one plan file and vary the objective
on the command line. Errors name the field (as the API's problem+json does) and exit 2.
"""

import json
import sys
from pathlib import Path
from typing import Any

import click
import msgspec

GiB = 1 << 30


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set ``a.b.c`` in a nested dict, creating the tables on the way."""
    *parents, leaf = path.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise click.UsageError(f"{path}: {key} in the request file is not a table")
    node[leaf] = value


@click.command("recommend")
@click.option(
    "-f",
    "--file",
    "request_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Request file (YAML, JSON or TOML) with the POST /v1/recommendations body.",
)
@click.option("--model", "model_name", help="Built-in model preset, e.g. llama-3.1-8b.")
@click.option(
    "--hf-config",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A Hugging Face config.json.",
)
@click.option("--parameters", type=int, help="Parameter count of a model without a config.")
@click.option(
    "--mode", type=click.Choice(["training", "finetune_lora", "finetune_qlora", "inference"])
)
@click.option("--batch-size", type=int)
@click.option(
    "--seq-len", "sequence_length", type=int, help="Tokens per sequence (the prompt for inference)."
)
@click.option(
    "--precision", type=click.Choice(["fp32", "fp16", "bf16", "amp_fp16", "amp_bf16", "fp8"])
)
@click.option("--optimizer")
@click.option("--checkpointing", type=click.Choice(["none", "full", "selective"]))
@click.option("--objective", type=click.Choice(["cheapest", "fastest", "energy", "balanced"]))
@click.option("--tokens", "training_tokens", type=int, help="Training tokens.")
@click.option(
    "--rps", "requests_per_second", type=float, help="Inference: requests per second to sustain."
)
@click.option("--output-tokens", type=int, help="Inference: generated tokens per request.")
@click.option("--deployment", type=click.Choice(["cloud", "on_prem", "hybrid"]))
@click.option("--max-gpus", "max_gpus_per_job", type=int)
@click.option("--max-usd-per-hour", type=float)
@click.option("--vendor", "vendors", multiple=True, type=click.Choice(["nvidia", "amd", "intel"]))
@click.option("--include", multiple=True, help="Only this GPU (repeatable).")
@click.option("--exclude", multiple=True, help="Never this GPU (repeatable).")
@click.option("--preferred-gpu", help="Advice explains how to fit this GPU.")
@click.option(
    "--catalog",
    "catalog_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A catalog file merged over the built-in catalog.",
)
@click.option("--limit", type=int, help="Most recommendations shown.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "yaml"]),
    default="table",
    show_default=True,
)
def recommend(
    *,
    request_file: Path | None,
    model_name: str | None,
    hf_config: Path | None,
    parameters: int | None,
    fmt: str,
    catalog_file: Path | None,
    **fields: Any,
) -> None:
    """Rank catalog GPUs and counts for a job by fit, time, cost and energy.

    \b
    Examples:
      gpuplan recommend --model llama-2-7b --mode inference --seq-len 4096 --rps 2
      gpuplan recommend --model llama-2-70b --mode training --seq-len 4096 \\
          --checkpointing full --tokens 1000000000 --objective cheapest
      gpuplan recommend -f plan.yaml --objective fastest --format json
    """
    from gpuplan.config.catalog import load_catalog
    from gpuplan.core.catalog import CatalogError
    from gpuplan.core.memory.errors import InvalidModel
    from gpuplan.core.recommend import InvalidRecommendation, RecommendRequest
    from gpuplan.core.recommend import recommend as run

    doc = _document(request_file, model_name, hf_config, parameters, fields)
    try:
        request = msgspec.convert(doc, RecommendRequest)
    except msgspec.ValidationError as exc:
        raise click.UsageError(f"invalid request: {exc}") from None
    try:
        catalog = load_catalog(str(catalog_file) if catalog_file else None)
        response = run(request, catalog)
    except (InvalidModel, InvalidRecommendation) as exc:
        raise click.UsageError("; ".join(f"{p}: {r}" for p, r in exc.errors)) from None
    except CatalogError as exc:
        raise click.UsageError(str(exc)) from None
    if fmt == "json":
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(response)).decode() + "\n")
    elif fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(msgspec.to_builtins(response), sort_keys=False))
    else:
        _table(response)


PLACES = {
    "mode": "workload.mode",
    "batch_size": "workload.batch_size",
    "sequence_length": "workload.sequence_length",
    "precision": "workload.precision",
    "optimizer": "workload.optimizer",
    "checkpointing": "workload.gradient_checkpointing",
    "objective": "objective",
    "training_tokens": "training.training_tokens",
    "requests_per_second": "inference.requests_per_second",
    "output_tokens": "inference.output_tokens",
    "deployment": "constraints.deployment",
    "max_gpus_per_job": "constraints.max_gpus_per_job",
    "max_usd_per_hour": "constraints.max_usd_per_hour",
    "vendors": "constraints.vendors",
    "include": "constraints.include",
    "exclude": "constraints.exclude",
    "preferred_gpu": "constraints.preferred_gpu",
    "limit": "limit",
}
"""Where each flag lands in the request document."""


def _document(
    request_file: Path | None,
    model_name: str | None,
    hf_config: Path | None,
    parameters: int | None,
    fields: dict[str, Any],
) -> dict[str, Any]:
    """The request file's document with the flags set over it."""
    from gpuplan.config.documents import DocumentError, read_document

    doc: dict[str, Any] = {}
    if request_file is not None:
        try:
            loaded = read_document(request_file)
        except DocumentError as exc:
            raise click.UsageError(str(exc)) from None
        if not isinstance(loaded, dict):
            raise click.UsageError(f"{request_file}: the request must be a table/object")
        doc = loaded
    if model_name or hf_config or parameters:
        model: dict[str, Any] = {}
        if model_name:
            model["name"] = model_name
        if parameters:
            model["parameters"] = parameters
        if hf_config:
            try:
                model["hf_config"] = json.loads(hf_config.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise click.UsageError(f"--hf-config {hf_config}: {exc}") from None
        doc["model"] = model
    for name, value in fields.items():
        if value is None or value == ():
            continue
        _set(doc, PLACES[name], list(value) if isinstance(value, tuple) else value)
    return doc


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _table(response: Any) -> None:
    echo = click.echo
    echo(
        f"objective: {response.objective}   scenario: {response.scenario.class_} ({response.scenario.band})"
    )
    echo(
        f"{'#':>3} {'gpu':<18} {'n':>4} {'layout':<14} {'GiB/GPU':>8} {'mem%':>5} {'tokens/s':>10} {'hours':>9} {'USD':>11} {'kWh':>9} {'score':>6}"
    )
    for i, r in enumerate(response.recommendations, 1):
        lay = r.layout
        layout = f"t{lay.tensor}p{lay.pipeline}d{lay.data}z{lay.zero_stage}" if lay else "-"
        tput = r.throughput.value if r.throughput else None
        fit = "" if r.fits else " (no fit)"
        echo(
            f"{i:>3} {r.gpu:<18} {r.count:>4} {layout:<14} {r.required_bytes_per_gpu / GiB:>8.1f} "
            f"{r.memory_utilization:>5.0%} {_num(tput, ',.0f'):>10} {_num(r.time_hours, ',.2f'):>9} "
            f"{_num(r.cost_usd, ',.2f'):>11} {_num(r.energy_kwh, ',.1f'):>9} {r.score:>6.3f}{fit}"
        )
    for a in response.advice:
        verdict = "fits" if a.fits_after else "still too big"
        factor = f", time x{a.time_factor:.2f}" if a.time_factor is not None else ""
        echo(f"advice [{a.gpu}]: {a.change}: {verdict}{factor}. {a.detail}")
    if response.hybrid is not None:
        echo(f"hybrid: {response.hybrid.detail}")
    for w in response.warnings:
        echo(f"warning: {w}")
