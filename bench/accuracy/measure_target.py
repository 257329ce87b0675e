"""Measure a trace target for real: same build function, same step driver, real tensors.

The counterpart of ``gpuplan.trace.run.trace`` for exactness checks: the profiler's
allocator events (see :mod:`bench.accuracy.measure`) give the real peak of the last
step, which the traced ``peak_bytes`` (runtime cpu) must equal.
"""

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch.profiler import ProfilerActivity, profile, record_function

from bench.accuracy.measure import Measured, _peak_between, _timeline
from gpuplan.core.trace.log import Phase
from gpuplan.trace.run import unpack
from gpuplan.trace.step import make_optimizer, run_steps


def measure_target(
    build: Callable[[], Any],
    *,
    mode: str = "training",
    optimizer: str = "adamw",
    steps: int = 2,
    amp: str = "none",
    foreach: bool | None = None,
    fsdp: int = 1,
    tensor_parallel: int = 1,
    new_tokens: int = 0,
) -> Measured:
    """Real peak of the last of ``steps`` steps of ``build()``'s model on this CPU."""
    gc.collect()
    mesh = None
    if max(fsdp, tensor_parallel) > 1:
        from gpuplan.trace.fsdp import fake_mesh

        mesh = fake_mesh(fsdp, tensor_parallel, "cpu")

    @contextmanager
    def marks(phase: Phase, measured: bool) -> Iterator[None]:
        name = f"gpuplan.{phase.name.lower()}" if measured else "gpuplan.warmup"
        with record_function(name):
            yield

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model, inputs, loss_fn = unpack(build())
        if mesh is not None:
            from gpuplan.trace.fsdp import distribute

            distribute(model, mesh, fsdp=fsdp, tensor_parallel=tensor_parallel)
        opt = make_optimizer(optimizer, model, foreach=foreach) if mode == "training" else None
        run_steps(
            model,
            inputs,
            loss_fn=loss_fn,
            optimizer=opt,
            mode=mode,
            steps=steps,
            amp=amp,
            new_tokens=new_tokens,
            marks=marks,
        )
        parameters = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
        del model, inputs, opt
    memory, spans = _timeline(prof)
    first = spans["gpuplan.forward"][0]
    last = max(end for name, (_, end) in spans.items() if name != "gpuplan.warmup")
    peak, at_start = _peak_between(memory, first, last)
    phases = {
        name.removeprefix("gpuplan."): _peak_between(memory, s, e)[0]
        for name, (s, e) in spans.items()
        if name != "gpuplan.warmup"
    }
    return Measured(peak_bytes=peak, start_bytes=at_start, phases=phases, parameters=parameters)
