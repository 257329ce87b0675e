"""Record every tensor storage a step creates and frees.

A :class:`Recorder` is a ``TorchDispatchMode``: every aten operator call passes
through it, including those the autograd engine runs on its own thread during
backward. Each output storage it has not seen is logged as an allocation, and a weak
reference with a callback logs its release when the storage's last reference goes:
the same moment the real allocator would get the memory back, because fake tensors
are freed by the same reference counting as real ones. Views share their base's
storage and are counted once, as the allocator counts them.

Roles come from where a storage appears: created during a forward (a module's
forward during a checkpoint's recomputation included) it is an activation; during
backward or the optimizer step a temporary, until a parameter's post-accumulate-grad
hook names it a gradient or the optimizer's step hook names it state. The idea is
that of ``torch.distributed._tools.mem_tracker.MemTracker``; this recorder keeps a
flat log instead of per-module snapshots so that its cost per operator is constant.
"""

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_map_only

from gpuplan.core.trace.log import Category, Event, Op, Phase
from gpuplan.trace.accumulation import Accumulations
from gpuplan.trace.onednn import mkldnn_rnn_layer
from gpuplan.trace.probe import KernelProbe
from gpuplan.trace.scratch import kernel_scratch

try:  # builds without torch.distributed have no DTensor (and no sharded traces)
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover
    DTensor = None  # type: ignore[misc, assignment]

UNATTRIBUTED = "(unattributed)"


def _storages(tensor: torch.Tensor) -> list[torch.UntypedStorage]:
    if is_traceable_wrapper_subclass(tensor):
        names, _ = tensor.__tensor_flatten__()
        found: list[torch.UntypedStorage] = []
        for name in names:
            inner = getattr(tensor, name)
            if isinstance(inner, torch.Tensor):
                found.extend(_storages(inner))
        return found
    if tensor.layout != torch.strided:
        return []
    return [tensor.untyped_storage()]


def _fake(tensor: Any) -> bool:
    return isinstance(tensor, FakeTensor)


def _grouped_mm_any_dtype(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """``_grouped_mm`` whatever the dtype.

    Its meta kernel insists on bf16 (a CUDA kernel constraint), while the CPU kernel
    also runs fp32, which is what a Mixture-of-Experts layer of transformers calls in
    an fp32 model. The output is what the kernel allocates: shape from the bf16 meta
    kernel, dtype from the inputs. (The ops below run beneath this mode: untracked.)
    """
    mat_a, mat_b, *rest = args
    if mat_a.dtype == torch.bfloat16:
        return func(*args, **kwargs)
    shape_a = torch.empty_strided(mat_a.shape, mat_a.stride(), dtype=torch.bfloat16)
    shape_b = torch.empty_strided(mat_b.shape, mat_b.stride(), dtype=torch.bfloat16)
    probe = func(shape_a, shape_b, *rest, **{**kwargs, "out_dtype": None})
    out_dtype = kwargs.get("out_dtype") or mat_a.dtype
    return torch.empty(probe.shape, dtype=out_dtype, device=mat_a.device)


class Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Logs allocations, releases, role changes and phase markers."""

    def __init__(self, probe: KernelProbe | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.probe = probe
        self.accumulations = Accumulations()
        self.events: list[Event] = []
        self.owners: list[str] = [UNATTRIBUTED]
        self._owner_index: dict[str, int] = {UNATTRIBUTED: 0}
        self._live: dict[int, tuple[int, weakref.ref[torch.UntypedStorage], int]] = {}
        self._serial = 0
        self._phase = Phase.BUILD
        self._modules: list[int] = []
        self._names: dict[int, str] = {}
        self._hooks: list[Any] = []
        self._linear_biases: list[torch.Tensor] = []

    # -- owners -----------------------------------------------------------------
    def owner(self, name: str) -> int:
        index = self._owner_index.get(name)
        if index is None:
            index = self._owner_index[name] = len(self.owners)
            self.owners.append(name)
        return index

    def name_modules(self, root: torch.nn.Module) -> None:
        """Attribute storages to ``root``'s submodules by their qualified names."""
        for name, module in root.named_modules():
            self._names[id(module)] = name or type(root).__name__

    def _current_owner(self) -> int:
        if self._modules:
            return self._modules[-1]
        if self._phase == Phase.BACKWARD:
            return self.owner("(backward)")
        if self._phase == Phase.OPTIMIZER:
            return self.owner("(optimizer)")
        return 0

    @contextmanager
    def module_scopes(self) -> Iterator[None]:
        """Know which module's forward is running (global hooks, no graph changes)."""

        def pre(module: torch.nn.Module, args: Any) -> None:
            name = self._names.get(id(module), type(module).__name__)
            self._modules.append(self.owner(name))

        def post(module: torch.nn.Module, args: Any, output: Any) -> None:
            if self._modules:
                self._modules.pop()

        handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(pre),
            torch.nn.modules.module.register_module_forward_hook(post, always_call=True),
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    @contextmanager
    def linear_bias_in_place(self) -> Iterator[None]:
        """Count the bias add of ``F.linear`` on an input it cannot flatten as in place.

        For an input of three or more dimensions that is not contiguous, ATen's
        ``linear`` multiplies first and adds the bias after: in place (``add_``) on a real
        run, out of place (a second output-sized tensor for an instant) whenever a
        Python dispatch mode is active, which the tracer's is ("for composite compliance
        use out-of-place version of add", aten/src/ATen/native/Linear.cpp). A linear
        head over an LSTM's transposed output traced 20% high in the forward for it.
        """
        original = torch.nn.functional.linear

        def linear(input: Any, weight: Any, bias: Any = None) -> Any:
            if bias is None:
                return original(input, weight)
            self._linear_biases.append(bias)
            try:
                return original(input, weight, bias)
            finally:
                self._linear_biases.pop()

        torch.nn.functional.linear = linear
        try:
            yield
        finally:
            torch.nn.functional.linear = original

    def _linear_bias_add(self, func: Any, args: Any, kwargs: Any) -> torch.Tensor | None:
        """The product a linear's bias add would update in place on a real run."""
        if func is not torch.ops.aten.add.Tensor or not self._linear_biases or kwargs:
            return None
        bias, product = self._linear_biases[-1], args[0]
        other = args[1] if len(args) > 1 else None
        if not isinstance(other, torch.Tensor) or not isinstance(product, torch.Tensor):
            return None
        if other.untyped_storage() is not bias.untyped_storage() or product.dim() < 3:
            return None
        return product

    # -- events -----------------------------------------------------------------
    def phase(self, phase: Phase, *, measured: bool = True) -> None:
        """Enter ``phase``. In a warm-up step (``measured`` false) the phase only
        decides roles; the log marks the whole step as warm-up."""
        if measured:
            self.events.append((Op.PHASE, 0, 0, int(phase), 0))
        elif phase == Phase.FORWARD:
            self.events.append((Op.PHASE, 0, 0, int(Phase.WARMUP), 0))
        self._phase = phase
        self.accumulations.clear()

    def retag(self, tensor: torch.Tensor, category: Category, owner: int) -> None:
        """Give the storages of ``tensor`` a new role (and owner).

        A storage never seen as an operator's output was made outside the dispatcher
        (``copy.deepcopy`` of a fake parameter, ``torch.Tensor._make_subclass``); it
        exists, so it is adopted as allocated now.
        """
        for storage in _storages(tensor):
            found = self._live.get(id(storage))
            if found is not None and found[1]() is storage:
                self.events.append((Op.RETAG, found[0], 0, int(category), owner))
            else:
                self._adopt(storage, category, owner)

    def _freed(self, serial: int, key: int, ref: "weakref.ref[torch.UntypedStorage]") -> None:
        found = self._live.get(key)
        if found is not None:
            if found[1] is not ref:
                return  # superseded by a resize, which logged this release
            del self._live[key]
        self.events.append((Op.FREE, serial, 0, 0, 0))

    def _adopt(self, storage: torch.UntypedStorage, category: Category, owner: int) -> None:
        key = id(storage)
        nbytes = storage.nbytes()
        found = self._live.get(key)
        if found is not None and found[1]() is storage and found[2] > 0:
            # Resized in place (``out=`` arguments, ``resize_``): the allocator
            # allocates the new size and frees the old block.
            self.events.append((Op.FREE, found[0], 0, 0, 0))
        self._serial += 1
        serial = self._serial

        def freed(r: "weakref.ref[torch.UntypedStorage]", s: int = serial, k: int = key) -> None:
            self._freed(s, k, r)

        ref = weakref.ref(storage, freed)
        self._live[key] = (serial, ref, nbytes)
        self.events.append((Op.ALLOC, serial, nbytes, int(category), owner))

    def _inherit(self, new: torch.Tensor, old: torch.Tensor) -> None:
        """Count ``new``'s storage as ``old``'s allocation, which a real run updates in
        place (:mod:`gpuplan.trace.accumulation`). Dropping ``old``'s weak reference
        drops its callback: its release goes unlogged, ``new``'s logs the one free."""
        old_storage, new_storage = old.untyped_storage(), new.untyped_storage()
        found = self._live.get(id(old_storage))
        if found is None or found[1]() is not old_storage:
            return
        serial = found[0]
        del self._live[id(old_storage)]

        def freed(r: "weakref.ref[torch.UntypedStorage]", k: int = id(new_storage)) -> None:
            self._freed(serial, k, r)

        self._live[id(new_storage)] = (
            serial,
            weakref.ref(new_storage, freed),
            new_storage.nbytes(),
        )

    def _track(self, tensor: torch.Tensor) -> None:
        for storage in _storages(tensor):
            found = self._live.get(id(storage))
            if found is not None and found[1]() is storage and found[2] == storage.nbytes():
                continue
            self._adopt(storage, self._category(), self._current_owner())

    def _category(self) -> Category:
        if self._phase == Phase.FORWARD or (self._modules and self._phase == Phase.BACKWARD):
            return Category.ACTIVATIONS
        if self._phase in (Phase.BACKWARD, Phase.OPTIMIZER):
            return Category.TEMPORARY
        return Category.OTHER

    @contextmanager
    def storage_resizes(self) -> Iterator[None]:
        """Log ``UntypedStorage.resize_``, which FSDP uses to allocate and free its
        unsharded parameters and which bypasses the dispatcher."""
        original = torch.UntypedStorage.resize_

        def resize_(storage: torch.UntypedStorage, size: int) -> Any:
            result = original(storage, size)
            found = self._live.get(id(storage))
            if found is not None and found[1]() is storage and found[2] == storage.nbytes():
                return result
            if storage.nbytes() == 0 and found is not None and found[1]() is storage:
                self.events.append((Op.FREE, found[0], 0, 0, 0))
                self._live[id(storage)] = (found[0], found[1], 0)
                return result
            self._adopt(storage, self._category(), self._current_owner())
            return result

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign, assignment]
        try:
            yield
        finally:
            torch.UntypedStorage.resize_ = original  # type: ignore[method-assign]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if any(t is DTensor for t in types):
            # DTensor runs its local ops, which land here. The engine sums DTensor
            # gradients out of place on a real run too (a tensor subclass).
            self.accumulations.clear()
            return NotImplemented
        if func is torch.ops._c10d_functional.wait_tensor.default and _fake(args[0]):
            return args[0]  # the eager op returns its input; the meta one a new tensor
        if func is torch.ops.aten._grouped_mm.default and _fake(args[0]):
            out = _grouped_mm_any_dtype(func, args, kwargs)
        elif func is torch.ops.aten.mkldnn_rnn_layer.default and _fake(args[0]):
            out = mkldnn_rnn_layer(func, args, kwargs)
        elif (target := self.accumulations.in_place_target(func, args, kwargs)) is not None:
            out = func(*args, **kwargs)
            self._inherit(out, target)
        elif (product := self._linear_bias_add(func, args, kwargs)) is not None:
            out = func(*args, **kwargs)
            self._inherit(out, product)
        else:
            out = func(*args, **kwargs)
        tree_map_only(torch.Tensor, self._track, out)
        if not args or not _fake(args[0]):
            return out
        probed = self.probe.scratch_bytes(func, args, kwargs, out) if self.probe else None
        sizes = [n for n in (kernel_scratch(func, args) if probed is None else [probed]) if n]
        if sizes:
            # Allocated and freed inside the real kernel, beside its outputs: storages
            # that live for this instant only.
            buffers = [torch.empty(n, dtype=torch.uint8, device=args[0].device) for n in sizes]
            for buffer in buffers:
                self._track(buffer)
            del buffers, buffer
        return out
