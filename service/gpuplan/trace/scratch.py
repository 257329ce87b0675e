"""Memory a kernel allocates and frees inside one call, where no tensor shows it.

A tracer sees the operators that reach its dispatch mode and the storages they
return. Two kinds of kernel allocate more than that, for an instant:

* **Composite kernels** whose inner operators run below the mode. ``_safe_softmax``
  (the softmax of SDPA's math path, on every device) computes the softmax, then a
  boolean mask of the ``-inf`` inputs, the rows that are all masked, and a ``-inf``
  scalar, and zeroes those rows in place: a byte per input element beside its output.
  Falcon's prefill traced 7.5% low without it.
* **oneDNN's LSTM** on the CPU, whose scratch :mod:`gpuplan.trace.onednn` sizes.

Each size was checked against the real kernel's allocator records
(tests/test_trace_scratch.py, tests/test_trace_onednn.py). On runtime cpu the kernel
probes (:mod:`gpuplan.trace.probe`) measure oneDNN's kernels instead.
"""

from typing import Any

import torch

from gpuplan.trace.onednn import kernel_scratch_bytes


def _safe_softmax(source: torch.Tensor, dim: int) -> list[int]:
    elements = source.numel()
    rows = elements // source.shape[dim] if source.dim() and source.shape[dim] else 0
    return [elements, rows, source.element_size()]  # mask, masked rows, -inf scalar


def kernel_scratch(func: Any, args: Any) -> list[int]:
    """Sizes of the buffers ``func(*args)`` holds at once inside its kernel, beside its
    outputs (each its own block, as an allocator sees them); empty when none are known."""
    if func is torch.ops.aten._safe_softmax.default:
        return _safe_softmax(args[0], int(args[1]))
    lstm = kernel_scratch_bytes(func, args)
    return [lstm] if lstm else []
