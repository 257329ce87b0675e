"""``gpuplan trace``: the traced estimate of a user's own model, on this machine.

This command imports and runs the user's code (that is its purpose); the API's
trace route never does.
"""

from pathlib import Path

import click

from gpuplan.cli.context import catalog, catalog_option
from gpuplan.cli.errors import reported
from gpuplan.cli.render import trace as render
from gpuplan.cli.render.output import machine, write


@click.command("trace")
@click.argument("target")
@click.option(
    "--mode",
    type=click.Choice(["training", "inference", "train"]),
    default="training",
    show_default=True,
    help="training: forward, backward, optimizer step; inference: a no-grad forward "
    "(train: the earlier spelling of training).",
)
@click.option(
    "--optimizer",
    type=click.Choice(["adamw", "adam", "sgd", "sgd_momentum", "none"]),
    default="adamw",
    show_default=True,
)
@click.option(
    "--steps",
    type=click.IntRange(1, 8),
    default=2,
    show_default=True,
    help="Steps to run; the last one is reported (2: the steady state, with optimizer state).",
)
@click.option(
    "--new-tokens",
    "new_tokens",
    type=click.IntRange(0, 1024),
    default=0,
    show_default=True,
    help="Inference: greedy decode steps after the prefill (the model must return "
    "past_key_values and logits, as a Hugging Face causal LM with use_cache=True).",
)
@click.option(
    "--amp",
    type=click.Choice(["none", "bf16", "fp16"]),
    default="none",
    show_default=True,
    help="Autocast the forward to this type.",
)
@click.option(
    "--runtime",
    type=click.Choice(["cuda", "cpu"]),
    default="cuda",
    show_default=True,
    help="cuda: replay through the CUDA caching allocator and add the context; cpu: tensor bytes.",
)
@click.option(
    "--fsdp",
    type=click.IntRange(1, 1 << 16),
    default=1,
    show_default=True,
    help="Trace one rank of an N-way FSDP2 (fully_shard) step on a fake process group.",
)
@click.option(
    "--tensor-parallel",
    "tensor_parallel",
    type=click.IntRange(1, 1 << 16),
    default=1,
    show_default=True,
    help="Trace one rank of an N-way tensor-parallel step (Hugging Face models' TP plan).",
)
@click.option(
    "--gpu",
    help="A catalog GPU (any name form): its architecture sizes the cuBLASLt workspace "
    "(32 MiB on Hopper/Blackwell, 4 MiB on Ampere/Ada, 1 MiB otherwise).",
)
@catalog_option
@click.option(
    "--probe-budget-bytes",
    "probe_budget_bytes",
    type=click.IntRange(0),
    help="runtime cpu: kernels that allocate inside a call (oneDNN convolutions, LSTMs) are "
    "run once for real when their tensors fit in this many bytes, to measure that "
    "scratch; 0: never.  [default: 1 GiB]",
)
@click.option(
    "--format", "fmt", type=click.Choice(["json", "table"]), default="table", show_default=True
)
def trace_command(
    target: str,
    *,
    mode: str,
    optimizer: str,
    steps: int,
    new_tokens: int,
    amp: str,
    runtime: str,
    fsdp: int,
    tensor_parallel: int,
    gpu: str | None,
    catalog_file: Path | None,
    probe_budget_bytes: int | None,
    fmt: str,
) -> None:
    """Trace the peak memory of TARGET's step on fake tensors (no GPU, no real memory).

    TARGET is package.module:function or path/to/file.py:function. The function takes
    no arguments and returns (model, inputs) or (model, inputs, loss_fn); inputs is a
    tuple (positional) or a dict (keyword arguments). It runs inside torch's
    FakeTensorMode: build the model and inputs inside it (not at import time).
    """
    try:
        from gpuplan.trace.probe import DEFAULT_BUDGET_BYTES
        from gpuplan.trace.run import trace
        from gpuplan.trace.target import load_target
    except ImportError as exc:
        raise click.ClickException(
            f"gpuplan trace needs torch (pip install 'gpuplan[trace]'): {exc}"
        ) from None
    with reported("trace", target):
        architecture = catalog(catalog_file).get(gpu).architecture if gpu is not None else None
        result = trace(
            load_target(target),
            mode="inference" if mode == "inference" else "training",
            optimizer=optimizer,  # type: ignore[arg-type]
            steps=steps,
            new_tokens=new_tokens,
            amp=amp,  # type: ignore[arg-type]
            runtime=runtime,  # type: ignore[arg-type]
            fsdp=fsdp,
            tensor_parallel=tensor_parallel,
            gpu_architecture=architecture,
            probe_budget_bytes=(
                DEFAULT_BUDGET_BYTES if probe_budget_bytes is None else probe_budget_bytes
            ),
        )
    write(render.table(result) if fmt == "table" else machine(result, "json"))
