"""Ask this CPU what a kernel allocates inside one call, by running it once.

Some CPU kernels allocate memory that no tensor shows and no fake tensor can: a
oneDNN convolution reorders its input, weights and output into blocked layouts and
takes a scratchpad; its backward adds per-thread reduction buffers; the RNN kernels
reorder weights; a 16-bit reduction may copy its input to fp32 first; a grouped GEMM
takes temporaries per group. The amounts depend on the instruction set (the block size
is 16 channels with AVX-512, 8 with AVX2), the thread count and the implementation the
kernel picks for the shape, so a formula fitted on one CPU is wrong on the next. The
tracer asks the CPU it runs on instead: a :class:`KernelProbe` runs the real kernel once
on real tensors of the call's shapes, strides and dtypes (zeros: the memory a kernel
takes does not depend on the values, the grouped GEMM's offsets aside), records the
allocator's events, and keeps the peak above the outputs, which is what the call adds
for an instant to the step's peak.

Only the kernels in :data:`PROBED` are asked; each distinct call once per trace. A
call whose inputs and outputs together exceed the budget is not run (its scratch is
then not counted, and the trace says so): the tracer must not need the memory it
predicts.
"""

from collections.abc import Hashable
from typing import Any

import torch
from torch._C._autograd import _disable_profiler_legacy, _enable_profiler_legacy
from torch._C._profiler import ProfilerConfig, ProfilerState, _ExperimentalConfig
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils._pytree import tree_flatten, tree_leaves

DEFAULT_BUDGET_BYTES = 1 << 30

PROBED = frozenset(
    {
        torch.ops.aten.convolution.default,
        torch.ops.aten.convolution_backward.default,
        torch.ops.aten.mkldnn_rnn_layer.default,
        torch.ops.aten.mkldnn_rnn_layer_backward.default,
        # A 16-bit mean or a sum accumulated in fp32 may copy its whole input to fp32
        # inside the CPU kernel first (the reduction casts its input to the output's
        # dtype): 263 kB for a 131 kB bf16 input, where the meta kernel allocates only the
        # output.
        torch.ops.aten.mean.dim,
        torch.ops.aten.sum.dim_IntList,
        # transformers' mixture-of-experts layers call the grouped GEMM, whose CPU kernel
        # works group by group through temporaries (22 kB above a 16 kB bf16 output for
        # four experts).
        torch.ops.aten._grouped_mm.default,
    }
)


def _strided(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.layout == torch.strided


def _nbytes(tensors: list[Any]) -> int:
    """Bytes of the distinct storages of ``tensors``."""
    seen: dict[int, int] = {}
    for tensor in tensors:
        if _strided(tensor):
            storage = tensor.untyped_storage()
            seen[id(storage)] = storage.nbytes()
    return sum(seen.values())


def _key(func: Any, args: Any, kwargs: Any) -> Hashable:
    leaves, spec = tree_flatten((args, kwargs))
    parts: list[Hashable] = [func, str(spec)]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            parts.append((tuple(leaf.shape), leaf.stride(), leaf.dtype, leaf.storage_offset()))
        else:
            parts.append(repr(leaf))
    return tuple(parts)


def _real(tensor: torch.Tensor) -> torch.Tensor:
    """A zero-filled CPU tensor with ``tensor``'s shape, strides and dtype."""
    real = torch.empty_strided(tuple(tensor.shape), tensor.stride(), dtype=tensor.dtype)
    return real.zero_()


def _peak_above_start(records: list[list[Any]]) -> int:
    """Highest sum of the allocator's events, in time order over all threads."""
    events = sorted(
        (record.start_us(), index, record.cpu_memory_usage())
        for thread in records
        for index, record in enumerate(thread)
        if record.kind() == "memory_alloc"
    )
    alive = peak = 0
    for _, _, delta in events:
        alive += delta
        peak = max(peak, alive)
    return peak


def measure_call(func: Any, args: Any, kwargs: Any) -> tuple[int, int]:
    """Run ``func`` for real; return (peak bytes allocated during the call, output bytes)."""
    config = ProfilerConfig(
        ProfilerState.CPU,
        report_input_shapes=False,
        profile_memory=True,
        with_stack=False,
        with_flops=False,
        with_modules=False,
        experimental_config=_ExperimentalConfig(),
    )
    _enable_profiler_legacy(config)
    records: list[list[Any]] = []
    try:
        out = func(*args, **kwargs)
        # An output that is one of the inputs was not allocated by the call.
        inputs = {id(t.untyped_storage()) for t in tree_leaves((args, kwargs)) if _strided(t)}
        outputs = _nbytes(
            [t for t in tree_leaves(out) if _strided(t) and id(t.untyped_storage()) not in inputs]
        )
        del out
    finally:
        records = _disable_profiler_legacy()
    return _peak_above_start(records), outputs


GROUPED_MM = torch.ops.aten._grouped_mm.default


def _balanced_offsets(args: Any, kwargs: Any) -> None:
    """Give a zero-filled grouped GEMM's ``offs`` (its groups' end rows) an even split.

    The grouped GEMM is the one probed kernel whose scratch depends on values: its
    temporaries follow the largest group (all-zero offsets make every group empty, and
    one group of every row takes half as much again as four equal ones). A fake tensor
    has no values, so the rows are spread evenly over the groups: balanced routing, what
    a mixture of experts' load-balancing loss aims for. Skewed routing takes more."""
    offs = args[2] if len(args) > 2 else kwargs.get("offs")
    if not isinstance(offs, torch.Tensor) or offs.dim() != 1 or offs.numel() == 0:
        return
    first, second = args[0], args[1]
    if first.dim() == 2 and second.dim() == 3:
        rows = first.shape[0]  # groups of the first operand's rows (mixture of experts)
    elif first.dim() == 3 and second.dim() == 2:
        rows = second.shape[-1]  # groups of the second operand's columns
    else:
        rows = first.shape[-1]  # two 2-D operands: groups along the shared dimension
    groups = offs.numel()
    offs.copy_(torch.tensor([(i + 1) * rows // groups for i in range(groups)], dtype=offs.dtype))


def _op_name(func: Any) -> str:
    return str(func.name()).removeprefix("aten::")


class KernelProbe:
    """In-kernel scratch of the CPU kernels in :data:`PROBED`, measured on this CPU."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._measured: dict[Hashable, int] = {}
        self._skipped: dict[Hashable, str] = {}
        self._ops: set[str] = set()

    def scratch_bytes(self, func: Any, args: Any, kwargs: Any, out: Any) -> int | None:
        """Bytes ``func(*args, **kwargs)`` allocates beyond its outputs ``out`` at its
        peak; ``None`` when the call is not probed (not in :data:`PROBED`, not on the
        CPU, over the budget, or the real kernel failed)."""
        if func not in PROBED:
            return None
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if any(t.device.type != "cpu" for t in tensors):
            return None
        key = _key(func, args, kwargs)
        found = self._measured.get(key)
        if found is not None or key in self._skipped:
            return found
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if _nbytes(tensors) + _nbytes(outputs) > self.budget_bytes:
            self._skipped[key] = (
                f"{_op_name(func)}: its tensors exceed the probe budget of "
                f"{self.budget_bytes:,} bytes"
            )
            return None
        try:
            with unset_fake_temporarily(), torch.no_grad():
                flat, spec = tree_flatten((args, kwargs))
                real = [_real(leaf) if isinstance(leaf, torch.Tensor) else leaf for leaf in flat]
                real_args, real_kwargs = spec.unflatten(real)
                del real
                if func is GROUPED_MM:
                    _balanced_offsets(real_args, real_kwargs)
                peak, output_bytes = measure_call(func, real_args, real_kwargs)
        except Exception as exc:  # the trace goes on without this call's scratch
            self._skipped[key] = f"{_op_name(func)}: {type(exc).__name__}: {exc}"[:300]
            return None
        scratch = max(0, peak - output_bytes)
        self._measured[key] = scratch
        self._ops.add(_op_name(func))
        return scratch

    def notes(self) -> list[str]:
        """What the probes measured and what they left out, for the trace's notes."""
        notes = []
        if self._measured:
            notes.append(
                f"in-kernel scratch of {len(self._measured)} distinct CPU kernel calls "
                f"({', '.join(sorted(self._ops))}) measured by running each once on this CPU"
            )
        if self._skipped:
            reasons = sorted(set(self._skipped.values()))
            notes.append(
                f"in-kernel scratch of {len(self._skipped)} distinct CPU kernel calls not "
                f"counted, so the peak may be low: {'; '.join(reasons[:3])}"
            )
        return notes
