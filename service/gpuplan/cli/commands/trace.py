"""``gpuplan trace``: the traced estimate of a user's own model, on this machine, or
of a Hugging Face config on a server.

Locally this command imports and runs the user's code (that is its purpose); the API's
trace route never does. With ``--api URL`` the TARGET is a ``config.json`` (or a
request file of ``POST /v1/memory/trace``'s schema) sent to a server, which traces it
on its workers (:mod:`gpuplan.cli.remote` waits on the job).
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import click
import msgspec

from gpuplan.cli.context import catalog, catalog_option
from gpuplan.cli.errors import reported
from gpuplan.cli.options import field_options, output_format, with_options
from gpuplan.cli.remote import Progress, Server, check_url, token_file_option, token_from
from gpuplan.cli.render import trace as render
from gpuplan.cli.render.output import machine, write
from gpuplan.config.documents import read_document
from gpuplan.core.convert import convert
from gpuplan.core.errors import InvalidRequest
from gpuplan.core.trace.schema import TraceRequest, TraceResult, TraceWorkload, workload_conflicts

WORKLOAD = field_options(
    TraceWorkload,
    skip=(
        "batch_size",
        "sequence_length",
        "decoder_sequence_length",
        "dtype",
        "attention",
        "gradient_checkpointing",
    ),
)
"""The step's options, as ``POST /v1/memory/trace`` takes them; the model and its inputs
are the user's function's (size, dtype and attention are set there)."""

REMOTE_WORKLOAD = field_options(
    TraceWorkload,
    skip=[f.path[0] for f in WORKLOAD],
)
"""What a local target sets itself and a config sent with ``--api`` needs as options."""

LOCAL_ONLY = ("gpu", "catalog_file", "probe_budget_bytes")
REMOTE_ONLY = ("priority", "token_file", *(f.name for f in REMOTE_WORKLOAD))


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
@click.option(
    "--api",
    metavar="URL",
    help="Trace on a gpuplan server (e.g. http://gpuplan:8000): TARGET is then a "
    "config.json or a request file of POST /v1/memory/trace; waits for the job.",
)
@with_options([f.option for f in REMOTE_WORKLOAD])
@click.option(
    "--priority",
    type=click.Choice(["high", "normal", "low"]),
    help="--api: the job's priority in the server's queue.  [default: normal]",
)
@click.option(
    "--timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="--api: timeout of each call (s).",
)
@token_file_option
@click.pass_context
def trace_command(
    ctx: click.Context,
    /,
    target: str,
    *,
    runtime: str,
    gpu: str | None,
    catalog_file: Path | None,
    step_target: str | None,
    probe_budget_bytes: int | None,
    fmt: str,
    api: str | None,
    priority: str | None,
    timeout: float,
    token_file: Path | None,
    **options: Any,
) -> None:
    """Trace the peak memory of TARGET's step on fake tensors (no GPU, no real memory).

    TARGET is package.module:function or path/to/file.py:function. The function takes
    no arguments and returns (model, inputs) or (model, inputs, loss_fn); inputs is a
    tuple (positional) or a dict (keyword arguments). It runs inside torch's
    FakeTensorMode: build the model and inputs inside it (not at import time).

    With --api URL, TARGET is a Hugging Face config.json (or a request file with
    `model`, `workload` and `runtime`) that the server traces on its workers; a
    progress line on a terminal follows the job (queued, running, done). Exit codes
    as locally: 2 invalid input, 1 the trace failed, 3 the server cannot be reached.
    """
    given = {
        name: ctx.params[name]
        for name in (*LOCAL_ONLY, *REMOTE_ONLY)
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    }
    if api is None:
        if set(given) & set(REMOTE_ONLY):
            flags = ", ".join(f"--{n.replace('_', '-')}" for n in given if n in REMOTE_ONLY)
            raise click.UsageError(f"{flags}: only with --api (a local target sets these itself)")
    else:
        if set(given) & set(LOCAL_ONLY):
            flags = ", ".join(f"--{n.replace('_', '-')}" for n in given if n in LOCAL_ONLY)
            raise click.UsageError(f"{flags}: local traces only; the server uses its own")
        check_url(api)
        with reported("trace", target):
            server = Server(api, token_from(token_file), timeout)
            result = _remote(server, target, runtime, priority, options)
        write(render.table(result) if fmt == "table" else machine(result, "json"))
        return
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
        conflicts = workload_conflicts(workload, "cpu" if runtime == "cpu" else "cuda")
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
            expandable_segments=workload.expandable_segments,
            user_step=cast("Callable[[Any, Any, Any], Any]", load_target(step_target))
            if step_target
            else None,
            probe_budget_bytes=(
                DEFAULT_BUDGET_BYTES if probe_budget_bytes is None else probe_budget_bytes
            ),
        )
    write(render.table(result) if fmt == "table" else machine(result, "json"))


def _remote(
    server: Server, target: str, runtime: str, priority: str | None, options: dict[str, Any]
) -> TraceResult:
    """TARGET's config traced by ``server``."""
    path = Path(target)
    if not path.is_file():
        raise InvalidRequest([("$", f"{target}: with --api, give a config.json or a request file")])
    doc = read_document(path)
    if not isinstance(doc, dict):
        raise InvalidRequest([("$", f"{target} must hold a JSON/YAML object")])
    request: dict[str, Any] = doc if "model" in doc else {"model": {"hf_config": doc}}
    workload = dict(request.get("workload") or {})
    for item in (*WORKLOAD, *REMOTE_WORKLOAD):
        if options.get(item.name) is not None:
            workload[item.path[-1]] = options[item.name]
    request["workload"] = workload
    request.setdefault("runtime", runtime)
    checked = convert(request, TraceRequest)  # refused here, naming the field, as the API would
    query = f"?priority={priority}" if priority else ""
    payload = server.submit(
        "/v1/memory/trace" + query, msgspec.json.encode(checked), Progress("gpuplan trace")
    )
    try:
        return msgspec.json.decode(payload, type=TraceResult)
    except msgspec.DecodeError as exc:
        from gpuplan.cli.errors import Unavailable

        raise Unavailable(
            f"{server.api} answered a body that is not a trace result: {exc}"
        ) from None
