"""Kernel probes: a CPU kernel's in-kernel scratch, measured by running it once."""

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from gpuplan.trace.probe import KernelProbe  # noqa: E402

CONV = torch.ops.aten.convolution.default
CONV_BACKWARD = torch.ops.aten.convolution_backward.default


def _backward_args(batch: int, channels_last: bool = False) -> tuple[object, ...]:
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    grad = torch.randn(batch, 16, 30, 30).contiguous(memory_format=fmt)
    images = torch.randn(batch, 8, 32, 32).contiguous(memory_format=fmt)
    weight = torch.randn(16, 8, 3, 3).contiguous(memory_format=fmt)
    return (grad, images, weight, [16], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True] * 3)


def _measured_by_kineto(args: tuple[object, ...]) -> int:
    """The same call's scratch from the torch profiler's own (kineto) memory events."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = CONV_BACKWARD(*args)
        outputs: int = sum(t.untyped_storage().nbytes() for t in out)
        del out
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]"
    )
    alive = peak = 0
    for _, delta in events:
        alive += delta
        peak = max(peak, alive)
    return peak - outputs


def _probe(
    probe: KernelProbe, func: Callable[..., Any], real_args: tuple[object, ...]
) -> int | None:
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        args = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in real_args)
        out = func(*args)
        return probe.scratch_bytes(func, args, {}, out)


@pytest.mark.parametrize("channels_last", [False, True])
def test_probe_equals_the_profilers_measurement(channels_last: bool) -> None:
    args = _backward_args(4, channels_last)
    expected = _measured_by_kineto(args)
    assert expected > 0  # oneDNN's reorders and scratchpad on this CPU
    probed = _probe(KernelProbe(), CONV_BACKWARD, args)
    assert probed == expected


def test_each_distinct_call_is_probed_once() -> None:
    probe = KernelProbe()
    first = _probe(probe, CONV_BACKWARD, _backward_args(4))
    assert _probe(probe, CONV_BACKWARD, _backward_args(4)) == first
    _probe(probe, CONV_BACKWARD, _backward_args(2))
    (note,) = probe.notes()
    assert note.startswith(
        "in-kernel scratch of 2 distinct CPU kernel calls (convolution_backward)"
    )


def test_calls_over_the_budget_are_not_run_and_are_named() -> None:
    probe = KernelProbe(budget_bytes=64 * 1024)
    assert _probe(probe, CONV_BACKWARD, _backward_args(4)) is None
    (note,) = probe.notes()
    assert "not counted, so the peak may be low" in note
    assert "probe budget of 65,536 bytes" in note


def test_only_listed_cpu_kernels_are_probed() -> None:
    probe = KernelProbe()
    a = torch.randn(64, 64)
    assert _probe(probe, torch.ops.aten.mm.default, (a, a)) is None
    with FakeTensorMode() as mode:
        x = torch.empty(2, 8, 16, 16, device="meta")
        w = torch.empty(4, 8, 3, 3, device="meta")
        args = (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        assert probe.scratch_bytes(CONV, args, {}, CONV(*args)) is None
    del mode
    assert probe.notes() == []


def test_a_kernel_that_cannot_run_is_reported_not_raised() -> None:
    """A trace run under the user's own profiler cannot start another one."""
    probe = KernelProbe()
    with torch.autograd.profiler.profile():
        assert _probe(probe, CONV_BACKWARD, _backward_args(2)) is None
    (note,) = probe.notes()
    assert note.startswith("in-kernel scratch of 1 distinct CPU kernel calls not counted")
    assert "convolution_backward: RuntimeError" in note


def test_a_grouped_gemm_is_probed_with_its_rows_spread_over_the_groups() -> None:
    """A fake tensor has no offsets; zero-filled ones would make every group empty and
    the probe would find no scratch. The probe spreads the rows evenly (balanced
    routing), which is what the kernel takes for offsets 8, 16, 24, 32."""
    grouped = torch.ops.aten._grouped_mm.default
    x = torch.randn(32, 64).to(torch.bfloat16)
    w = torch.randn(4, 64, 256).to(torch.bfloat16)
    even = torch.tensor([8, 16, 24, 32], dtype=torch.int32)
    expected = _probe(KernelProbe(), grouped, (x, w, even))
    probed = _probe(KernelProbe(), grouped, (x, w, torch.zeros(4, dtype=torch.int32)))
    assert probed == expected
    assert probed is not None
