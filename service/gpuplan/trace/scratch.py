"""Memory a kernel allocates and frees inside one call, where no tensor shows it.

A tracer sees the operators that reach its dispatch mode and the storages they
return. Two kinds of kernel allocate more than that, for an instant:

* **Composite kernels** whose inner operators run below the mode. ``_safe_softmax``
  (the softmax of SDPA's math path, on every device) computes the softmax, then a
  boolean mask of the ``-inf`` inputs, the rows that are all masked, and a ``-inf``
  scalar, and zeroes those rows in place: a byte per input element beside its output.
  Falcon's prefill traced 7.5% low without it.
* **oneDNN's LSTM** on the CPU, whose scratch :mod:`gpuplan.trace.onednn` sizes.
* **A matrix product of an operand BLAS cannot read**: ``mm`` and ``addmm`` hand BLAS
  each matrix as it is, or transposed, when one of its strides is 1 and the other at
  least its row length; any other operand (the expanded, stride-0 gradient of a
  ``sum`` reaching a linear head's backward) is first copied whole into a contiguous
  tensor inside the kernel (``addmm_impl_cpu_`` in aten/src/ATen/native/LinearAlgebra.cpp,
  ``prepare_matrix_for_cublas`` in aten/src/ATen/native/cuda/Blas.cpp). An LSTM language
  model's backward traced 8% low without it.

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


_MATRIX_PRODUCTS = {
    torch.ops.aten.mm.default: (0, 1),
    torch.ops.aten.addmm.default: (1, 2),
}


def _blas_readable(matrix: torch.Tensor) -> bool:
    """Can BLAS read this 2-D operand in place, as it is or transposed?"""
    rows, columns = matrix.shape
    row_stride, column_stride = matrix.stride()
    if column_stride == 1 and (rows == 1 or row_stride >= max(1, columns)):
        return True
    return row_stride == 1 and (columns == 1 or column_stride >= max(1, rows))


def _matrix_copies(func: Any, args: Any) -> list[int]:
    """Contiguous copies a matrix product makes of operands BLAS cannot read."""
    copies = []
    for index in _MATRIX_PRODUCTS[func]:
        matrix = args[index]
        two_d = isinstance(matrix, torch.Tensor) and matrix.dim() == 2 and matrix.numel() > 1
        if two_d and not _blas_readable(matrix):
            copies.append(matrix.numel() * matrix.element_size())
    return copies


def kernel_scratch(func: Any, args: Any) -> list[int]:
    """Sizes of the buffers ``func(*args)`` holds at once inside its kernel, beside its
    outputs (each its own block, as an allocator sees them); empty when none are known."""
    if func is torch.ops.aten._safe_softmax.default:
        return _safe_softmax(args[0], int(args[1]))
    if func in _MATRIX_PRODUCTS:
        return _matrix_copies(func, args)
    lstm = kernel_scratch_bytes(func, args)
    return [lstm] if lstm else []
