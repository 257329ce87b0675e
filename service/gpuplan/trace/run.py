"""Trace a build function: build and step its model on fake tensors, then analyze.

The build function runs *inside* ``FakeTensorMode``: every tensor it creates (the
parameters, the inputs) is a fake tensor with a shape, a dtype and a device but no
memory, and every operation on them computes only the metadata of its result. So a
70B model's step runs on a laptop; what the trace measures is the storage each
operation would allocate, in the order the real run allocates it.
"""

import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map_only

from gpuplan.core.trace import TraceLog, TraceResult, analyze
from gpuplan.core.trace.log import Category, Phase
from gpuplan.core.trace.schema import Amp, TraceMode, TraceOptimizer, TraceRuntime
from gpuplan.trace.probe import DEFAULT_BUDGET_BYTES, KernelProbe
from gpuplan.trace.recorder import Recorder
from gpuplan.trace.step import TraceError, make_optimizer, run_steps
from gpuplan.trace.values import ordinary_batches


class _CopyInMode(TorchFunctionMode):
    """``copy.deepcopy`` of a fake tensor as the real one behaves: a new storage in
    the same fake mode, made by ``clone`` (so the recorder sees it allocated).

    Without this, deep-copying a fake parameter (``nn.TransformerEncoder`` clones its
    layer this way) yields a tensor of another fake mode, whose every later use is a
    fresh conversion with a storage of its own.
    """

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.Tensor.__deepcopy__ and isinstance(args[0], FakeTensor):
            tensor, memo = args
            if id(tensor) in memo:
                return memo[id(tensor)]
            with torch.no_grad():
                copied = tensor.clone()
            if isinstance(tensor, torch.nn.Parameter):
                copied = torch.nn.Parameter(copied, requires_grad=tensor.requires_grad)
            else:
                copied.requires_grad_(tensor.requires_grad)
            memo[id(tensor)] = copied
            return copied
        return func(*args, **(kwargs or {}))


@contextmanager
def _module_conversions(mode: FakeTensorMode) -> Iterator[None]:
    """Let ``module.to(torch.bfloat16)``, ``.half()`` and ``.to(memory_format=...)``
    convert fake parameters.

    ``Module._apply`` swaps a fake parameter with its converted copy
    (``torch.utils.swap_tensors``), which refuses a tensor that has weak references,
    and the fake mode's converter memo holds one to every parameter made under it.
    The memo maps real tensors to their fakes for reuse; parameters built under the
    mode never had a real tensor, so dropping their entries loses nothing.
    """
    memo = mode.fake_tensor_converter.meta_converter.tensor_memo
    original = torch.utils.swap_tensors

    def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
        for tensor in (t1, t2):
            if weakref.getweakrefcount(tensor):
                for key in [key for key, value in memo.items() if value is tensor]:
                    del memo[key]
        original(t1, t2)  # type: ignore[no-untyped-call]

    torch.utils.swap_tensors = swap_tensors
    try:
        yield
    finally:
        torch.utils.swap_tensors = original


def unpack(built: Any) -> tuple[torch.nn.Module, Any, Callable[[Any], torch.Tensor] | None]:
    """``(model, inputs)`` or ``(model, inputs, loss_fn)``, checked."""
    if not isinstance(built, (tuple, list)) or len(built) not in (2, 3):
        raise TraceError(
            "the target must return (model, inputs) or (model, inputs, loss_fn), "
            f"got {type(built).__name__}"
        )
    model, inputs, *rest = built
    if not isinstance(model, torch.nn.Module):
        raise TraceError(f"the target's model is a {type(model).__name__}, not a torch.nn.Module")
    loss_fn = rest[0] if rest else None
    if loss_fn is not None and not callable(loss_fn):
        raise TraceError("the target's loss_fn is not callable")
    return model, inputs, loss_fn


def _tag_model(recorder: Recorder, model: torch.nn.Module) -> dict[int, int]:
    """Name parameters and buffers after their modules; return param id -> owner."""
    recorder.name_modules(model)
    owners: dict[int, int] = {}
    for name, module in model.named_modules():
        owner = recorder.owner(name or type(model).__name__)
        for param in module._parameters.values():
            if param is not None and id(param) not in owners:
                owners[id(param)] = owner
                recorder.retag(param, Category.PARAMETERS, owner)
        for buffer in module._buffers.values():
            if buffer is not None:
                recorder.retag(buffer, Category.OTHER, owner)
    return owners


def _hook_gradients(recorder: Recorder, model: torch.nn.Module, owners: dict[int, int]) -> None:
    for param in model.parameters():
        if param.requires_grad:
            owner = owners.get(id(param), 0)

            def tag(p: torch.Tensor, owner: int = owner) -> None:
                if p.grad is not None:
                    recorder.retag(p.grad, Category.GRADIENTS, owner)

            param.register_post_accumulate_grad_hook(tag)  # type: ignore[no-untyped-call]


def _hook_optimizer(
    recorder: Recorder, optimizer: torch.optim.Optimizer, owners: dict[int, int]
) -> None:
    def tag(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for param, state in opt.state.items():
            owner = owners.get(id(param), 0)
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    recorder.retag(value, Category.OPTIMIZER_STATE, owner)

    optimizer.register_step_post_hook(tag)


def _instrument(
    recorder: Recorder,
    model: torch.nn.Module,
    inputs: Any,
    *,
    mode: TraceMode,
    optimizer: TraceOptimizer,
    runtime: TraceRuntime,
    foreach: bool | None = None,
) -> tuple[dict[int, int], torch.optim.Optimizer | None, list[torch.nn.Parameter]]:
    """Name what the build made; hook gradients and the optimizer's state."""
    owners = _tag_model(recorder, model)
    inputs_owner = recorder.owner("(inputs)")
    tree_map_only(torch.Tensor, lambda t: recorder.retag(t, Category.OTHER, inputs_owner), inputs)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = None
    if mode == "training":
        _hook_gradients(recorder, model, owners)
        # foreach (multi-tensor) kernels are torch's default on CUDA, not on the CPU.
        if foreach is None and runtime == "cuda":
            foreach = True
        opt = make_optimizer(optimizer, model, foreach=foreach)
        if opt is not None:
            _hook_optimizer(recorder, opt, owners)
    return owners, opt, trainable


def _notes(
    *,
    skipped: list[str],
    probe: KernelProbe | None,
    fsdp: int,
    tensor_parallel: int,
    foreach: bool,
    runtime: TraceRuntime,
) -> list[str]:
    """What a reader of the result should know about how it was traced."""
    notes = []
    if tensor_parallel > 1:
        notes.append(
            f"tensor parallel: rank 0 of {tensor_parallel} (the model's Hugging Face TP plan "
            "as ColwiseParallel/RowwiseParallel; embeddings and LM head replicated"
            + (f"; left replicated: {', '.join(skipped)}" if skipped else "")
            + ")"
        )
    if fsdp > 1:
        notes.append(
            f"FSDP2: rank 0 of {fsdp} (fully_shard per unit and on the root, fake process group"
            + (
                f", over the tensor-parallel shards: a {fsdp}x{tensor_parallel} mesh)"
                if tensor_parallel > 1
                else ")"
            )
        )
    if probe is not None:
        notes.extend(probe.notes())
    if foreach and runtime == "cuda":
        notes.append("optimizer uses foreach (multi-tensor) kernels, torch's CUDA default")
    return notes


def _check(*, steps: int, fsdp: int, tensor_parallel: int, new_tokens: int, mode: str) -> None:
    if steps < 1:
        raise TraceError("steps must be at least 1")
    if new_tokens < 0 or (new_tokens and mode != "inference"):
        raise TraceError("--new-tokens (decode steps) needs --mode inference")


def trace(
    build: Callable[[], Any],
    *,
    mode: TraceMode = "training",
    optimizer: TraceOptimizer = "adamw",
    steps: int = 2,
    amp: Amp = "none",
    runtime: TraceRuntime = "cpu",
    gpu_architecture: str | None = None,
    fsdp: int = 1,
    tensor_parallel: int = 1,
    accumulation: int = 1,
    new_tokens: int = 0,
    foreach: bool | None = None,
    probe_budget_bytes: int = DEFAULT_BUDGET_BYTES,
    keep_outputs: bool = False,
    user_step: Callable[[Any, Any, Any], Any] | None = None,
    expandable_segments: bool = False,
) -> TraceResult:
    """Trace ``steps`` steps of the model ``build()`` returns; describe the last one.

    ``fsdp`` > 1 traces rank 0 of an FSDP2 job of that many ranks; ``tensor_parallel``
    > 1 rank 0 of a tensor-parallel group (Hugging Face TP plan); both, rank 0 of a 2-D
    mesh of ``fsdp * tensor_parallel`` ranks. ``foreach`` picks the
    optimizer's kernels; by default torch's choice for the runtime's device. Inference
    with ``new_tokens`` adds that many greedy decode steps after the prefill (a causal
    LM's KV cache). On runtime
    cpu, kernels that allocate inside a call are run once for real on tensors of up to
    ``probe_budget_bytes`` (:mod:`gpuplan.trace.probe`; 0: never). On runtime cuda,
    ``expandable_segments`` replays the allocator under
    ``PYTORCH_ALLOC_CONF=expandable_segments:True``.
    """
    _check(
        steps=steps, fsdp=fsdp, tensor_parallel=tensor_parallel, new_tokens=new_tokens, mode=mode
    )
    started = time.perf_counter()
    # On the CPU runtime the CPU's own kernels are the truth: ask them what they
    # allocate inside a call. A GPU runs other kernels (docs/trace.md).
    probe = KernelProbe(probe_budget_bytes) if runtime == "cpu" and probe_budget_bytes else None
    recorder = Recorder(probe)
    mesh = None
    communicators = [n for n in (fsdp, tensor_parallel) if n > 1]  # one NCCL group each
    if communicators:
        from gpuplan.trace.fsdp import fake_mesh

        mesh = fake_mesh(fsdp, tensor_parallel, "cpu")
    skipped: list[str] = []
    grads_of: list[torch.nn.Parameter] = []
    owners: dict[int, int] = {}

    @contextmanager
    def marks(phase: Phase, measured: bool) -> Iterator[None]:
        recorder.phase(phase, measured=measured)
        if phase == Phase.OPTIMIZER:
            # FSDP assigns reduce-scattered gradients without accumulation hooks.
            for param in grads_of:
                if param.grad is not None:
                    recorder.retag(param.grad, Category.GRADIENTS, owners.get(id(param), 0))
        yield

    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    with (
        fake_mode,
        _module_conversions(fake_mode),
        _CopyInMode(),
        recorder,
        recorder.module_scopes(),
        recorder.storage_resizes(),
        recorder.linear_bias_in_place(),
    ):
        recorder.phase(Phase.BUILD)
        try:
            built = build()
        except TraceError:
            raise
        except Exception as exc:
            raise TraceError(f"the target raised {type(exc).__name__}: {exc}") from exc
        model, inputs, loss_fn = unpack(built)
        if mesh is not None:
            from gpuplan.trace.fsdp import distribute

            skipped = distribute(model, mesh, fsdp=fsdp, tensor_parallel=tensor_parallel)
        owners, opt, grads_of = _instrument(
            recorder,
            model,
            inputs,
            mode=mode,
            optimizer=optimizer,
            runtime=runtime,
            foreach=foreach,
        )
        with ordinary_batches() as assumed:
            run_steps(
                model,
                inputs,
                loss_fn=loss_fn,
                optimizer=opt,
                mode=mode,
                steps=steps,
                amp=amp,
                accumulation=accumulation,
                new_tokens=new_tokens,
                marks=marks,
                before_backward=recorder.accumulations.watch,
                keep_outputs=keep_outputs,
                user_step=user_step,
            )
        recorder.phase(Phase.END)
        unique = {id(p): p for p in model.parameters()}
        parameters = sum(p.numel() for p in unique.values())  # DTensor: global numel
        trainable = sum(p.numel() for p in unique.values() if p.requires_grad)
        device = next((p.device.type for p in unique.values()), "cpu")
        log = TraceLog(
            events=recorder.events,
            owners=recorder.owners,
            parameters=parameters,
            trainable_parameters=trainable,
            device=device,
        )
    result = analyze(
        log,
        runtime=runtime,
        mode=mode,
        steps=steps,
        gpu_architecture=gpu_architecture,
        communicators=communicators,
        expandable_segments=expandable_segments,
    )
    result = msgspec.structs.replace(
        result, seconds=round(time.perf_counter() - started, 3), new_tokens=new_tokens
    )
    result.notes.extend(assumed)
    result.notes.extend(
        _notes(
            skipped=skipped,
            probe=probe,
            fsdp=fsdp,
            tensor_parallel=tensor_parallel,
            foreach=foreach is not False and optimizer != "none" and mode == "training",
            runtime=runtime,
        )
    )
    return result
