"""What oneDNN's LSTM kernels allocate that their meta kernels do not say.

On the CPU, torch runs an fp32 or bf16 LSTM through oneDNN (``aten.mkldnn_rnn_layer``
and its backward, one call per layer and direction). Two kinds of memory escape a
fake-tensor trace there:

* **The workspace** the forward returns for the backward to read (the gates and
  hidden states of every step, room for the gradients of the states): the meta
  kernel returns an empty tensor in its place, so a trace would miss the largest
  activation of an LSTM (four times its output, for one layer).
* **Scratch memory inside each call**, freed before it returns: the weights
  reordered into oneDNN's layout, padded copies of the weight gradients, the
  combined bias, the gate scratchpad, and zeros or contiguous copies of missing or
  strided incoming gradients. It adds to the peak of the step that runs the call.

The sizes follow oneDNN's layouts (``cpu/rnn/rnn_utils``): parts start on 4 KiB
pages; leading dimensions are padded to 64 bytes and kept off multiples of 256
elements (its 4K-aliasing rule), except those of the cell states; states have one
more step than the sequence and a second layer slot; gradients of the states are fp32
whatever the model's dtype. The workspace was checked byte for byte against the real
kernel in fp32 and bf16, the scratch in fp32 training (tests/test_trace_onednn.py);
the scratch of bf16 and of inference follows other kernels (packed weights) and is
not modelled.
"""

from typing import Any

import torch

PAGE_BYTES = 4096
GATES = 4  # an LSTM cell's input, forget, cell and output gates
FP32_BYTES = 4


def _padded(elements: int, itemsize: int) -> int:
    """oneDNN's leading dimension: 64-byte aligned, not a multiple of 256 elements."""
    per_line = 64 // itemsize
    ld = -(-elements // per_line) * per_line
    return ld + per_line if ld % 256 == 0 else ld


def _pages(nbytes: int) -> int:
    return -(-nbytes // PAGE_BYTES) * PAGE_BYTES


def _scratchpad(steps: int, batch: int, hidden_size: int) -> int:
    """oneDNN's fp32 LSTM scratchpad: the gates of every step, two hidden-state rows,
    and a fixed 4,664 bytes (measured, every shape alike)."""
    gates = _padded(GATES * hidden_size, FP32_BYTES)
    rows = _padded(hidden_size, FP32_BYTES)
    return _pages(steps * batch * gates * FP32_BYTES) + 2 * _pages(batch * rows * FP32_BYTES) + 4664


def _reordered_weights(input_size: int, hidden_size: int) -> int:
    gates = _padded(GATES * hidden_size, FP32_BYTES)
    return (input_size + hidden_size) * gates * FP32_BYTES


def lstm_forward_scratch_bytes(steps: int, batch: int, input_size: int, hidden_size: int) -> int:
    """Bytes an fp32 oneDNN LSTM forward that keeps a workspace allocates and frees
    inside the call: the combined bias, the reordered weights, the scratchpad."""
    bias = GATES * hidden_size * FP32_BYTES
    return (
        bias + _reordered_weights(input_size, hidden_size) + _scratchpad(steps, batch, hidden_size)
    )


def lstm_backward_scratch_bytes(
    steps: int,
    batch: int,
    input_size: int,
    hidden_size: int,
    *,
    copies_grad_output: bool,
    missing_grad_states: int,
) -> int:
    """Bytes an fp32 oneDNN LSTM backward allocates and frees inside the call: a
    contiguous copy (or zeros) of the output's gradient when it is strided (or
    absent), zeros for each absent gradient of the final hidden or cell state, the
    combined bias, padded copies of the weight gradients whose row count oneDNN pads,
    the reordered weights and the scratchpad."""
    state = batch * hidden_size * FP32_BYTES
    gate_columns = GATES * hidden_size
    padded_gradients = sum(
        _padded(rows, FP32_BYTES) * gate_columns * FP32_BYTES
        for rows in (input_size, hidden_size)
        if _padded(rows, FP32_BYTES) != rows
    )
    return (
        (steps * state if copies_grad_output else 0)
        + missing_grad_states * state
        + gate_columns * FP32_BYTES  # the combined bias
        + padded_gradients
        + _reordered_weights(input_size, hidden_size)
        + _scratchpad(steps, batch, hidden_size)
    )


def kernel_scratch_bytes(func: Any, args: Any) -> int:
    """Bytes ``func(*args)`` allocates and frees inside its kernel, where known: oneDNN's
    fp32 LSTM in training. 0 for everything else."""
    if func is torch.ops.aten.mkldnn_rnn_layer.default:
        source, train = args[0], args[15]
        if not train or source.dtype != torch.float32:
            return 0
        steps, batch, inputs = (int(n) for n in source.shape)
        return lstm_forward_scratch_bytes(steps, batch, inputs, int(args[10]))
    if func is torch.ops.aten.mkldnn_rnn_layer_backward.default:
        source, grad_output, grad_hy, grad_cy = args[0], args[10], args[11], args[12]
        if source.dtype != torch.float32:
            return 0
        steps, batch, inputs = (int(n) for n in source.shape)
        return lstm_backward_scratch_bytes(
            steps,
            batch,
            inputs,
            int(args[15]),
            copies_grad_output=grad_output is None or not grad_output.is_contiguous(),
            missing_grad_states=(grad_hy is None) + (grad_cy is None),
        )
    return 0


def lstm_workspace_bytes(
    steps: int, batch: int, input_size: int, hidden_size: int, itemsize: int
) -> int:
    """Bytes of the training workspace of one oneDNN LSTM layer and direction."""
    states_ld = max(input_size, hidden_size)
    states_rows = 2 * (steps + 1) * batch  # (layers + 1) x (steps + 1) x batch
    parts = [
        steps * batch * _padded(GATES * hidden_size, itemsize) * itemsize,  # gates
        steps * batch * _padded(hidden_size, itemsize) * itemsize,  # hidden outputs
        states_rows * _padded(states_ld, itemsize) * itemsize,  # layer states
        states_rows * _padded(states_ld, FP32_BYTES) * FP32_BYTES,  # their gradients
        states_rows * _padded(states_ld, FP32_BYTES) * FP32_BYTES,  # iteration gradients
        states_rows * hidden_size * itemsize,  # cell states
        states_rows * hidden_size * FP32_BYTES,  # their gradients
    ]
    return sum(_pages(part) for part in parts)


def mkldnn_rnn_layer(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """``aten.mkldnn_rnn_layer`` with its workspace at the size the real kernel returns.

    Arguments as the op's schema: ``input, w0..w3, hx, cx, reverse, batch_sizes, mode,
    hidden_size, num_layers, has_biases, bidirectional, batch_first, train``.
    """
    output, hy, cy, workspace = func(*args, **kwargs)
    source, train = args[0], args[15]
    if not train or source.dtype not in (torch.float32, torch.bfloat16):
        return output, hy, cy, workspace
    # torch hands the op a sequence-first input even for a batch-first module (it
    # transposes before the call), and the kernel reads it so, whatever its flag says.
    steps, batch = source.shape[:2]
    nbytes = lstm_workspace_bytes(
        int(steps), int(batch), int(source.shape[-1]), int(args[10]), source.element_size()
    )
    return output, hy, cy, torch.empty(nbytes, dtype=torch.uint8, device=source.device)
