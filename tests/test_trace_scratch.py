"""Scratch of composite kernels, sized without running them, against the real kernel."""

import pytest

pytestmark = pytest.mark.torch

pytest.importorskip("torch")
import torch  # noqa: E402

from gpuplan.trace.probe import measure_call  # noqa: E402
from gpuplan.trace.scratch import kernel_scratch  # noqa: E402

SAFE_SOFTMAX = torch.ops.aten._safe_softmax.default


@pytest.mark.parametrize(
    ("shape", "dim", "dtype"),
    [
        ((4, 8, 128, 128), -1, torch.float32),
        ((2, 3, 7, 9), -1, torch.float32),
        ((2, 3, 7, 9), 1, torch.float32),
        ((5, 33, 17), -1, torch.bfloat16),
        ((3, 1000), 0, torch.float16),
        ((1, 1, 1, 1), -1, torch.float32),
    ],
)
def test_safe_softmax_scratch_equals_the_real_kernel_s(
    shape: tuple[int, ...], dim: int, dtype: torch.dtype
) -> None:
    source = torch.randn(shape, dtype=dtype)
    peak, outputs = measure_call(SAFE_SOFTMAX, (source, dim), {})
    assert sum(kernel_scratch(SAFE_SOFTMAX, (source, dim))) == peak - outputs


def test_kernels_without_known_scratch_have_none() -> None:
    a = torch.randn(8, 8)
    assert kernel_scratch(torch.ops.aten.mm.default, (a, a)) == []
