"""oneDNN's LSTM workspace: the size the tracer gives the fake op equals what the real
kernel returns, shape for shape, in fp32 and bf16."""

import random
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from gpuplan.trace.onednn import lstm_workspace_bytes

pytestmark = pytest.mark.torch

# torch.backends.mkldnn.is_available() has no annotations.
ONEDNN: bool = torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]


class _Workspaces(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """The real workspace of every oneDNN LSTM call, with its input's shape."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.seen: list[tuple[tuple[int, ...], int, bool, int]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
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


@pytest.mark.skipif(not ONEDNN, reason="no oneDNN in this torch")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_workspace_size_equals_the_real_kernel_s(dtype: torch.dtype) -> None:
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("this CPU has no AVX-512: torch runs a bf16 LSTM on its own kernel")
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


def _scratch_of_each_call(
    model: nn.Module, source: torch.Tensor, backward: bool
) -> list[tuple[int, int]]:
    """(bytes the real kernel allocates and frees inside the call, our figure) for each
    oneDNN LSTM call of one training forward (or backward), from the profiler."""
    from torch.profiler import ProfilerActivity, profile

    from gpuplan.trace.onednn import kernel_scratch_bytes

    class Calls(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.figures: list[int] = []

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if "mkldnn_rnn_layer" in str(func):
                self.figures.append(kernel_scratch_bytes(func, args))
            return func(*args, **(kwargs or {}))

    name = "aten::mkldnn_rnn_layer_backward" if backward else "aten::mkldnn_rnn_layer"
    output = model(source)[0]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof, Calls() as calls:
        if backward:
            output.sum().backward()
        else:
            model(source)
    events = prof.profiler.kineto_results.events()
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    spans = sorted((e.start_ns(), e.end_ns()) for e in events if e.name() == name)
    # The dispatch mode above makes the profiler see each call twice, one inside the other.
    outermost = [
        s for s in spans if not any(o != s and o[0] <= s[0] <= s[1] <= o[1] for o in spans)
    ]
    measured = []
    for start, end in outermost:
        alive = peak = 0
        for when, delta in memory:
            if start <= when <= end:
                alive += delta
                peak = max(peak, alive)
        measured.append(peak - alive)  # what was up at the peak and gone by the end
    ours = [f for f in calls.figures if f] if backward else calls.figures
    return list(zip(measured, ours, strict=True))


TRAINING_SHAPES = [(32, 4, 64, 128), (8, 2, 256, 256), (8, 2, 256, 32), (4, 2, 64, 512)]
TRAINING_SHAPES += [
    (_rng.randint(1, 40), _rng.randint(1, 16), _rng.randint(1, 200), _rng.randint(1, 200))
    for _ in range(12)
]


@pytest.mark.skipif(not ONEDNN, reason="no oneDNN in this torch")
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_fp32_training_scratch_equals_the_real_kernels(backward: bool) -> None:
    for steps, batch, hidden, inputs in TRAINING_SHAPES:
        model = nn.LSTM(inputs, hidden)
        source = torch.randn(steps, batch, inputs, requires_grad=True)
        pairs = _scratch_of_each_call(model, source, backward)
        assert len(pairs) == 1
        for measured, ours in pairs:
            assert ours == measured > 0, (steps, batch, hidden, inputs)
