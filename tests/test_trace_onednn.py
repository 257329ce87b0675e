"""oneDNN's LSTM workspace: the size the tracer gives the fake op equals what the real
kernel returns, shape for shape, in fp32 and bf16."""

import random

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from gpuplan.trace.onednn import lstm_workspace_bytes


class _Workspaces(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """The real workspace of every oneDNN LSTM call, with its input's shape."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[tuple[int, ...], int, bool, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.mkldnn_rnn_layer.default:
            self.seen.append((tuple(args[0].shape), int(args[10]), bool(args[14]), out[3].numel()))
        return out


SHAPES = [(1, 1, 16, 8), (7, 3, 33, 8), (16, 4, 64, 32), (16, 4, 128, 32), (4, 16, 64, 200)]
_rng = random.Random(5)
SHAPES += [
    (_rng.randint(1, 40), _rng.randint(1, 20), _rng.randint(1, 150), _rng.randint(1, 200))
    for _ in range(25)
]


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this torch")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_workspace_size_equals_the_real_kernel_s(dtype: torch.dtype) -> None:
    checked = 0
    for i, (steps, batch, hidden, inputs) in enumerate(SHAPES):
        batch_first = i % 2 == 1
        layers, bidirectional = (2, i % 3 == 0) if i % 4 == 0 else (1, False)
        model = nn.LSTM(
            inputs, hidden, layers, batch_first=batch_first, bidirectional=bidirectional
        )
        model = model.to(dtype)
        shape = (batch, steps, inputs) if batch_first else (steps, batch, inputs)
        with _Workspaces() as log:
            model(torch.randn(shape, dtype=dtype, requires_grad=True))
        assert len(log.seen) == layers * (2 if bidirectional else 1)
        for source, hidden_size, _, real in log.seen:
            t, b = source[:2]  # sequence first, even for a batch-first module
            itemsize = torch.empty((), dtype=dtype).element_size()
            assert lstm_workspace_bytes(t, b, source[-1], hidden_size, itemsize) == real, source
            checked += 1
    assert checked >= len(SHAPES)
