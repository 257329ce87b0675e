"""The step a trace runs, shared by the tracer and the real-tensor measurement.

One function drives both, so that a traced peak and a measured one describe the
same sequence of operations: any difference is the tracer's, not the harness's.
A training step is forward (under autocast with ``amp``), the loss, backward, the
optimizer step and ``zero_grad(set_to_none=True)``; inference is a no-grad forward.
"""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils._pytree import tree_leaves

from gpuplan.core.errors import GpuplanError
from gpuplan.core.trace.log import Phase

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class TraceError(GpuplanError):
    """The target cannot be traced as asked (bad return value, no loss, ...)."""


class Marks(Protocol):
    """Where the driver tells its observer which phase runs."""

    def __call__(self, phase: Phase, measured: bool) -> AbstractContextManager[None]: ...


@contextmanager
def _no_marks(phase: Phase, measured: bool) -> Iterator[None]:
    yield


def default_loss(output: Any) -> torch.Tensor:
    """``output.loss`` when the model computed one, else the sum of its float outputs."""
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    floats = [
        t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()
    ]
    if not floats:
        raise TraceError(
            "the model's output has no floating-point tensor to sum into a loss; "
            "return (model, inputs, loss_fn) from the target"
        )
    total = floats[0].sum()
    for tensor in floats[1:]:
        total = total + tensor.sum()
    return total


def call(model: torch.nn.Module, inputs: Any) -> Any:
    """Call ``model`` with a tuple (positional) or a dict (keyword) of inputs."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def _next_token(output: Any) -> tuple[Any, torch.Tensor]:
    """The KV cache a causal LM or an encoder-decoder returned and its greedy next token
    (one per row)."""
    cache = getattr(output, "past_key_values", None)
    logits = getattr(output, "logits", None)
    if cache is None or not isinstance(logits, torch.Tensor):
        raise TraceError(
            "decode steps need a causal LM or an encoder-decoder whose output has "
            "past_key_values and logits (a Hugging Face model called with use_cache=True)"
        )
    return cache, logits[:, -1:].argmax(-1)


def _infer(
    model: torch.nn.Module,
    inputs: Any,
    *,
    new_tokens: int,
    marks: Marks,
    measured: bool,
    autocast: Callable[[], AbstractContextManager[Any]],
) -> None:
    """One no-grad inference step: the forward (a prefill), then ``new_tokens`` greedy
    decode steps that feed the last token and the cache back, as ``generate`` does; the
    cache grows by one position each.

    An encoder-decoder's prefill runs the encoder and the decoder's first tokens; its
    output's ``encoder_last_hidden_state`` is kept, as ``generate`` keeps
    ``encoder_outputs``, and each decode step runs the decoder alone on it (the cache
    holds the cross-attention's keys and values, computed once)."""
    with torch.no_grad(), autocast():
        with marks(Phase.FORWARD, measured):
            output = call(model, inputs)
        if not new_tokens:
            del output
            return
        cache, token = _next_token(output)
        encoded = getattr(output, "encoder_last_hidden_state", None)
        del output
        with marks(Phase.DECODE, measured):
            for _ in range(new_tokens):
                if encoded is None:
                    output = model(
                        input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1
                    )
                else:
                    output = model(
                        encoder_outputs=(encoded,),
                        decoder_input_ids=token,
                        past_key_values=cache,
                        use_cache=True,
                    )
                cache, token = _next_token(output)
                del output
            del cache, token, encoded


def make_optimizer(
    name: str, model: torch.nn.Module, *, foreach: bool | None = None
) -> torch.optim.Optimizer | None:
    """The optimizer ``name`` over ``model``'s trainable parameters.

    ``foreach=True`` is what torch picks on CUDA (multi-tensor kernels, which hold a
    temporary per parameter group); on the CPU it picks the per-parameter loop.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "none" or not params:
        return None
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=foreach)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, foreach=foreach)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4, foreach=foreach)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9, foreach=foreach)
    raise TraceError(f"unknown optimizer {name!r}")


def run_steps(
    model: torch.nn.Module,
    inputs: Any,
    *,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    mode: str = "training",
    steps: int = 2,
    amp: str = "none",
    accumulation: int = 1,
    new_tokens: int = 0,
    marks: Marks = _no_marks,
    before_backward: Callable[[torch.Tensor], None] | None = None,
    keep_outputs: bool = False,
    user_step: Callable[[Any, Any, Any], Any] | None = None,
) -> None:
    """Run ``steps`` steps of ``model``; the last is the measured one.

    ``keep_outputs``: the loop holds the model's output until the optimizer has stepped
    (``out = model(...); out.loss.backward(); opt.step()``), as many hand-written loops
    do; by default it drops it once it has the loss, as Hugging Face's ``Trainer``.
    ``user_step(model, inputs, optimizer)`` replaces the loop: the user's own step runs
    as written, its phases told apart by the first ``backward`` and ``optimizer.step``.

    With ``accumulation`` > 1 a training step runs that many forward/backward passes
    (gradient accumulation) before the optimizer steps. An inference step with
    ``new_tokens`` is a prefill, then that many greedy decode steps on its KV cache.
    ``before_backward`` sees each loss before its backward runs (the tracer hooks the
    graph there).
    """
    if new_tokens and mode != "inference":
        raise TraceError("decode steps (new tokens) need mode inference")
    device = next((p.device.type for p in model.parameters()), "cpu")
    loss_of = loss_fn or default_loss

    def autocast() -> AbstractContextManager[Any]:
        if amp == "none":
            return nullcontext()
        return torch.autocast(device_type=device, dtype=AMP_DTYPES[amp])

    if mode == "inference":
        model.eval()
        for step in range(steps):
            _infer(
                model,
                inputs,
                new_tokens=new_tokens,
                marks=marks,
                measured=step == steps - 1,
                autocast=autocast,
            )
        return
    model.train()
    if user_step is not None:
        for step in range(steps):
            measured = step == steps - 1
            with marks(Phase.FORWARD, measured), _phases_of(marks, measured, before_backward):
                user_step(model, inputs, optimizer)
        return
    for step in range(steps):
        measured = step == steps - 1
        held: list[Any] = []
        for _ in range(accumulation):
            with marks(Phase.FORWARD, measured):
                with autocast():
                    output = call(model, inputs)
                    loss = loss_of(output)
                if keep_outputs:
                    held.append(output)
                del output
            with marks(Phase.BACKWARD, measured):
                if before_backward is not None:
                    before_backward(loss)
                loss.backward()  # type: ignore[no-untyped-call]
                del loss
        with marks(Phase.OPTIMIZER, measured):
            if optimizer is not None:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            else:
                model.zero_grad(set_to_none=True)
            held.clear()


@contextmanager
def _phases_of(
    marks: Marks, measured: bool, before_backward: Callable[[torch.Tensor], None] | None
) -> Iterator[None]:
    """Tell the phases of a user's step: a ``backward`` call starts the backward, an
    optimizer's ``step`` the optimizer phase (a global step pre-hook)."""
    original = torch.Tensor.backward

    def backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        marks(Phase.BACKWARD, measured).__enter__()
        if before_backward is not None:
            before_backward(self)
        return original(self, *args, **kwargs)  # type: ignore[no-untyped-call]

    def step_hook(*_: Any) -> None:
        marks(Phase.OPTIMIZER, measured).__enter__()

    torch.Tensor.backward = backward  # type: ignore[method-assign]
    handle = register_optimizer_step_pre_hook(step_hook)
    try:
        yield
    finally:
        torch.Tensor.backward = original  # type: ignore[method-assign]
        handle.remove()
