"""Measure the real peak of allocated bytes of one Hugging Face step on the CPU.

The measure is the CPU allocator's own record: torch's profiler with
``profile_memory=True`` logs every allocation and free with its size and time.
Profiling starts before the model is built, so the running sum of those events is
the number of tensor bytes alive at every instant; the peak of the measured window
is the equivalent of ``torch.cuda.max_memory_allocated`` (without CUDA's 512-byte
rounding) for that window.

Training measures the second optimizer step: the first one creates the optimizer
state, ``zero_grad(set_to_none=True)`` frees the gradients, and the second is the
steady state the estimator describes. Inference measures a no-grad prefill that
keeps its KV cache and computes logits for the last position only.
"""

import contextlib
import gc
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

WINDOW = "gpuplan.measure.window"


@dataclass
class Measured:
    peak_bytes: int
    """Most tensor bytes alive at once during the measured window."""

    start_bytes: int
    """Bytes alive when the window opened (weights, optimizer state)."""

    phases: dict[str, int] = field(default_factory=dict)
    """Peak bytes alive within each annotated phase of the window."""

    parameters: int = 0


def _timeline(prof: Any) -> tuple[list[tuple[int, int]], dict[str, tuple[int, int]]]:
    events = prof.profiler.kineto_results.events()
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    spans = {
        e.name(): (e.start_ns(), e.end_ns()) for e in events if e.name().startswith("gpuplan.")
    }
    return memory, spans


def _peak_between(memory: list[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    alive = 0
    at_start = None
    peak = 0
    for time, delta in memory:
        if time >= start and at_start is None:
            at_start = alive
            peak = alive
        alive += delta
        if start <= time <= end:
            peak = max(peak, alive)
        if time > end:
            break
    return peak, at_start if at_start is not None else alive


def _chunked_loss(logits: Any, labels: Any, chunks: int) -> Any:
    """Cross-entropy over ``chunks`` pieces of the sequence, each upcast on its own
    (torchtune's CEWithChunkedOutputLoss; the labels are taken as already shifted)."""
    loss = None
    for part, target in zip(logits.chunk(chunks, dim=1), labels.chunk(chunks, dim=1), strict=True):
        piece = torch.nn.functional.cross_entropy(
            part.float().flatten(0, 1), target.flatten(), reduction="sum"
        )
        loss = piece if loss is None else loss + piece
    return loss / labels.numel()


def _in_backward(model: Any, optimizer: Any) -> None:
    """One optimizer per parameter, stepped by its post-accumulate-grad hook, which then
    frees the gradient (PyTorch's "optimizer step in backward" recipe)."""
    for param in [p for p in model.parameters() if p.requires_grad]:
        opt = optimizer(torch.nn.ParameterList([param]))

        def step(p: Any, opt: Any = opt) -> None:
            opt.step()
            opt.zero_grad(set_to_none=True)

        param.register_post_accumulate_grad_hook(step)


def measure_training(
    build: Any,
    make_batch: Any,
    optimizer: Any,
    *,
    accumulation: int = 1,
    autocast: Any = None,
    keep_outputs: bool = False,
    loss_chunks: int = 1,
    in_backward: bool = False,
    no_sync: bool = False,
) -> Measured:
    """Peak of the second optimizer step of ``build()``'s model.

    With ``accumulation`` > 1 each step runs that many forward/backward micro-steps on
    the same batch before the optimizer steps. ``autocast`` is a dtype to run the
    forward under (AMP: fp32 weights). ``keep_outputs``: the loop holds the model's
    output through backward and the step (``out = model(...); out.loss.backward()``).
    ``loss_chunks`` > 1: the loop computes a chunked cross-entropy from the logits and
    drops them before backward. ``in_backward``: each parameter steps in its hook.
    ``no_sync``: the micro-batches before the last run under the model's ``no_sync()``
    (FSDP1 and DDP: gradients are reduced once, after the last).
    """
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = build()
        model.train()
        if in_backward:
            _in_backward(model, optimizer)
            opt = None
        else:
            opt = optimizer(model)
        batch = make_batch()
        for step in range(2):
            name = WINDOW if step == 1 else "gpuplan.warmup"
            with record_function(name):
                for micro in range(accumulation):
                    syncing = not no_sync or micro == accumulation - 1
                    skip = contextlib.nullcontext() if syncing else model.no_sync()
                    skip.__enter__()
                    with record_function("gpuplan.forward"):
                        context = (
                            torch.autocast("cpu", dtype=autocast)
                            if autocast is not None
                            else contextlib.nullcontext()
                        )
                        with context:
                            out = model(**batch)
                            if loss_chunks > 1:
                                loss = _chunked_loss(out.logits, batch["input_ids"], loss_chunks)
                            else:
                                loss = out.loss
                        if not keep_outputs:
                            del out
                    with record_function("gpuplan.backward"):
                        loss.backward()
                    del loss
                    skip.__exit__(None, None, None)
                with record_function("gpuplan.optimizer"):
                    if opt is not None:
                        opt.step()
                if opt is not None:
                    opt.zero_grad(set_to_none=True)
                if keep_outputs:
                    del out
        parameters = sum(p.numel() for p in model.parameters())
    return _result(prof, parameters)


def measure_inference(build: Any, make_batch: Any, new_tokens: int = 0) -> Measured:
    """Peak of a no-grad prefill that keeps its KV cache and last-position logits, then
    of ``new_tokens`` greedy decode steps that grow the cache."""
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = build()
        model.eval()
        batch = make_batch()
        with torch.no_grad(), record_function(WINDOW):
            with record_function("gpuplan.forward"):
                out = model(**batch, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            token = out.logits[:, -1:].argmax(-1)
            del out
            with record_function("gpuplan.decode"):
                for _ in range(new_tokens):
                    out = model(
                        input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1
                    )
                    cache = out.past_key_values
                    token = out.logits[:, -1:].argmax(-1)
                    del out
            del cache
        parameters = sum(p.numel() for p in model.parameters())
    return _result(prof, parameters)


def _result(prof: Any, parameters: int) -> Measured:
    memory, spans = _timeline(prof)
    start, end = spans[WINDOW]
    peak, at_start = _peak_between(memory, start, end)
    phases = {}
    for name, (s, e) in spans.items():
        if name.startswith("gpuplan.") and name != WINDOW and s >= start and e <= end:
            phases[name.removeprefix("gpuplan.")] = _peak_between(memory, s, e)[0]
    return Measured(peak_bytes=peak, start_bytes=at_start, phases=phases, parameters=parameters)
