"""Where the autograd engine adds gradients in place on a real run, and not on a trace.

When a tensor feeds several operations, the engine sums the gradients that flow
back to it (``InputBuffer::accumulate``). On plain tensors it adds into the first
one when it holds the only reference to it and to its storage and the tensor is
dense: no new memory. For tensor subclasses, and for every tensor while a
``TorchDispatchMode`` is active, it computes ``old + new`` into a fresh tensor
instead. A trace runs on fake tensors under a dispatch mode, so each such sum
allocates a third gradient-sized tensor that the real run never holds: a
recurrent loop over ``x[:, :, t]`` (Mamba's reference scan) traced 6% high.

:class:`Accumulations` finds those sums, so that the recorder can count the result
as the storage it replaces. The engine runs a node's function, then its post hooks,
then adds its outputs into the buffers of the next nodes, all while the node is
the current one; so an ``aten.add.Tensor`` that runs after a node's post hook and
under that node is such a sum. Whether the real engine would add in place is its
own test, made on the fake tensor: dense, and referenced by the buffer alone (the
reference counts a buffer-only tensor shows inside a dispatch mode are measured
once, on real tensors).
"""

import functools
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

ADD = torch.ops.aten.add.Tensor


def _dense(tensor: torch.Tensor) -> bool:
    """Non-overlapping and dense: the strides, sorted, are those of some contiguous
    layout (the engine's condition for adding into a tensor in place)."""
    expected = 1
    for stride, size in sorted(
        (s, n) for n, s in zip(tensor.shape, tensor.stride(), strict=True) if n != 1
    ):
        if stride != expected:
            return False
        expected *= size
    return True


def _counts(tensor: torch.Tensor) -> tuple[int, int]:
    """References to ``tensor`` and to its storage, as seen from a dispatch mode."""
    storage = tensor.untyped_storage()
    return tensor._use_count(), torch._C._storage_Use_Count(storage._cdata)  # type: ignore[attr-defined]


class _Calibrate(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.seen: list[tuple[int, int]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is ADD and torch._C._current_autograd_node() is not None:
            self.seen.append(_counts(args[0]))
        return func(*args, **(kwargs or {}))


@functools.cache
def buffer_only_counts() -> tuple[int, int]:
    """The counts of a gradient only the engine's buffer holds, measured: ``x`` feeds
    ``sin`` and ``cos``, and the engine sums their fresh gradients for it.

    It calls ``torch.autograd.backward``, not ``Tensor.backward``: a user's own step
    (``gpuplan trace --step``) is traced with ``Tensor.backward`` wrapped to mark the
    backward phase, and this calibration is no step's backward."""
    with _disable_current_modes():  # real tensors, unrecorded
        x = torch.ones(4, requires_grad=True)
        y = x * 2
        loss = (y.sin() + y.cos()).sum()
        mode = _Calibrate()
        with mode:
            torch.autograd.backward(loss)
    return mode.seen[0]


class Accumulations:
    """Tells the engine's gradient sums apart from the operations of the nodes."""

    def __init__(self) -> None:
        self._after_hook: Any = None  # the node whose outputs are being summed

    def watch(self, loss: torch.Tensor) -> None:
        """Hook every node of ``loss``'s graph before its backward runs."""
        root = loss.grad_fn
        if root is None:
            return
        buffer_only_counts()  # measured before the backward, outside any dispatch mode
        seen = {root}
        stack = [root]
        while stack:
            node = stack.pop()
            node.register_hook(self._node_done)
            for child, _ in node.next_functions:
                if child is not None and child not in seen:
                    seen.add(child)
                    stack.append(child)

    def _node_done(self, grad_inputs: Any, grad_outputs: Any) -> None:
        self._after_hook = torch._C._current_autograd_node()

    def clear(self) -> None:
        self._after_hook = None

    def in_place_target(self, func: Any, args: Any, kwargs: Any) -> torch.Tensor | None:
        """The tensor a real run would add into, if ``func(*args)`` is an engine sum
        that a real run makes in place; else ``None``."""
        if func is not ADD or kwargs or self._after_hook is None:
            return None
        if torch._C._current_autograd_node() is not self._after_hook:
            return None  # an operation of the next node's function
        old, new = args[0], args[1]
        return old if _summable_in_place(old, new) else None


def _summable_in_place(old: Any, new: Any) -> bool:
    """The engine's test for ``old.add_(new)``: plain tensors of one shape and dtype,
    no graph being built, ``old`` dense and held by the buffer alone."""
    return (
        isinstance(old, torch.Tensor)
        and isinstance(new, torch.Tensor)
        and old.layout == torch.strided
        and not old.is_nested
        and not torch.is_grad_enabled()
        and old.shape == new.shape
        and old.dtype == new.dtype
        and _dense(old)
        and _counts(old) == buffer_only_counts()
    )
