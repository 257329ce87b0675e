"""oneDNN's LSTM workspace, which its meta kernel reports as empty.

On the CPU, torch runs an fp32 or bf16 LSTM that needs gradients through oneDNN
(``aten.mkldnn_rnn_layer``, one call per layer and direction). The call returns a
workspace that lives until the backward has read it: the gates and hidden states of
every step and room for the gradients of the states. Its meta kernel returns an
empty tensor instead, so a fake-tensor trace would miss the largest activation of
an LSTM (four times its output, for a single-layer model).

The size is oneDNN's layout of that workspace (``cpu/rnn/rnn_utils``): each part
starts on a 4 KiB page; leading dimensions are padded to 64 bytes and kept off
multiples of 256 elements (its 4K-aliasing rule), except those of the cell states;
the states have one more step than the sequence and a second layer slot; gradients
of the states are kept in fp32 whatever the model's dtype. Checked byte for byte
against the real op on random shapes in fp32 and bf16 (tests/test_trace_onednn.py).
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
