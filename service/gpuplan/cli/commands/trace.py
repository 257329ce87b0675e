"""``gpuplan trace``: the traced estimate of a user's own model, on this machine.

This command imports and runs the user's code (that is its purpose); the API's
trace route never does.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import click

from gpuplan.cli.context import catalog, catalog_option
from gpuplan.cli.errors import reported
from gpuplan.cli.options import field_options, output_format, with_options
from gpuplan.cli.render import trace as render
from gpuplan.cli.render.output import machine, write
from gpuplan.core.convert import convert
from gpuplan.core.errors import InvalidRequest
from gpuplan.core.trace.schema import TraceWorkload, workload_conflicts

WORKLOAD = field_options(
    TraceWorkload,
    skip=("batch_size", "sequence_length", "dtype", "attention", "gradient_checkpointing"),
)
"""The step's options, as ``POST /v1/memory/trace`` takes them; the model and its inputs
are the user's function's (size, dtype and attention are set there)."""


@click.command("trace")
@click.argument("target")
@with_options([f.option for f in WORKLOAD])
@click.option(
    "--runtime",
    type=click.Choice(["cuda", "cpu"]),
    default="cuda",
    show_default=True,
    help="cuda: replay through the CUDA caching allocator and add the context; cpu: tensor bytes.",
)
@click.option(
    "--gpu",
    help="A catalog GPU (any name form): its architecture sizes the cuBLASLt workspace "
    "(32 MiB on Hopper/Blackwell, 4 MiB on Ampere/Ada, 1 MiB otherwise).",
)
@catalog_option
@click.option(
    "--step",
    "step_target",
    help="Your own training step, module:function or file.py:function, called as "
    "train_step(model, inputs, optimizer) for each step, in place of gpuplan's loop "
    "(forward, loss, backward, step): any loop is traced as written. Its phases start at "
    "the first backward() and optimizer step().",
)
@click.option(
    "--probe-budget-bytes",
    "probe_budget_bytes",
    type=click.IntRange(0),
    help="runtime cpu: kernels that allocate inside a call (oneDNN convolutions, LSTMs) are "
    "run once for real when their tensors fit in this many bytes, to measure that "
    "scratch; 0: never.  [default: 1 GiB]",
)
@output_format("table", "json")
def trace_command(
    target: str,
    *,
    runtime: str,
    gpu: str | None,
    catalog_file: Path | None,
    step_target: str | None,
    probe_budget_bytes: int | None,
    fmt: str,
    **options: Any,
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
        given = {f.name: options[f.name] for f in WORKLOAD if options[f.name] is not None}
        workload = convert(given, TraceWorkload)
        conflicts = workload_conflicts(workload)
        if conflicts:
            raise InvalidRequest([(f"--{name.replace('_', '-')}", why) for name, why in conflicts])
        architecture = catalog(catalog_file).lookup(gpu, "--gpu").architecture if gpu else None
        result = trace(
            load_target(target),
            mode="inference" if workload.mode == "inference" else "training",
            optimizer=workload.optimizer,
            steps=workload.steps,
            new_tokens=workload.new_tokens,
            amp=workload.amp,
            runtime="cpu" if runtime == "cpu" else "cuda",
            fsdp=workload.fsdp,
            tensor_parallel=workload.tensor_parallel,
            gpu_architecture=architecture,
            keep_outputs=workload.keep_outputs,
            user_step=cast("Callable[[Any, Any, Any], Any]", load_target(step_target))
            if step_target
            else None,
            probe_budget_bytes=(
                DEFAULT_BUDGET_BYTES if probe_budget_bytes is None else probe_budget_bytes
            ),
        )
    write(render.table(result) if fmt == "table" else machine(result, "json"))
