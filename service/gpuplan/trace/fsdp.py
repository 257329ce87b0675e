"""One rank of an FSDP2 (``fully_shard``), tensor-parallel or 2-D (both) job, on a
fake process group.

torch's fake process group (``torch.testing._internal.distributed.fake_pg``) answers
every collective at once without moving data, so one process can play rank 0 of any
world size: FSDP shards the parameters, all-gathers each unit before its forward and
backward and reduce-scatters its gradients exactly as on a cluster, and the recorder
sees rank 0's allocations (unsharded buffers included, which FSDP allocates with
``UntypedStorage.resize_``). A 2-D job is torchtitan's layout: tensor parallelism
inside each group of ``tensor_parallel`` ranks, FSDP across the ``fsdp`` groups.
"""

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from gpuplan.trace.step import TraceError


def fake_process_group(world_size: int) -> None:
    """Make this process's default group a fake one of ``world_size`` ranks (this is
    rank 0): the one already there when it is such, else a new one. The group stays
    between calls (a trace reuses it); a caller that needs another starts it here."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized() and (
        dist.get_backend() != "fake" or dist.get_world_size() != world_size
    ):
        dist.destroy_process_group()
    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)


def fake_mesh(fsdp: int, tensor_parallel: int, device_type: str) -> Any:
    """A device mesh over a fake process group of ``fsdp * tensor_parallel`` ranks (this
    is rank 0): one dimension, or ``("dp", "tp")`` when both degrees exceed one.

    Made outside fake mode: a mesh is built from real tensors of rank ids.
    """
    from torch.distributed.device_mesh import init_device_mesh

    world_size = fsdp * tensor_parallel
    fake_process_group(world_size)
    if fsdp > 1 and tensor_parallel > 1:
        return init_device_mesh(device_type, (fsdp, tensor_parallel), mesh_dim_names=("dp", "tp"))
    return init_device_mesh(device_type, (world_size,))


def distribute(model: nn.Module, mesh: Any, *, fsdp: int, tensor_parallel: int) -> list[str]:
    """Shard ``model`` over ``mesh``: the TP plan first, then ``fully_shard`` (over the
    TP-sharded parameters on a 2-D mesh). Returns the TP plan entries left replicated."""
    two_d = fsdp > 1 and tensor_parallel > 1
    skipped = []
    if tensor_parallel > 1:
        skipped = apply_tensor_parallel(model, mesh["tp"] if two_d else mesh)
    if fsdp > 1:
        apply_fsdp(model, mesh["dp"] if two_d else mesh)
    return skipped


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The modules that become FSDP units: Hugging Face's ``_no_split_modules`` (the
    decoder layers) when the model names them, else the members of every ModuleList."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    if names:
        units = [m for m in model.modules() if type(m).__name__ in names]
        if units:
            return units
    return [child for m in model.modules() if isinstance(m, nn.ModuleList) for child in m]


def apply_fsdp(model: nn.Module, mesh: Any) -> None:
    """``fully_shard`` each unit, then the root (the usual FSDP2 recipe)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.fsdp import fully_shard

    try:
        # On a 2-D mesh fully_shard locates this rank in the mesh's tensor of rank ids
        # (a nonzero, which a fake mode cannot answer); the parameters stay fake, and
        # their operations still reach their own fake mode and the recorder.
        with unset_fake_temporarily():
            for unit in shard_units(model):
                fully_shard(unit, mesh=mesh)
            fully_shard(model, mesh=mesh)
    except (RuntimeError, ValueError, AssertionError) as exc:
        raise TraceError(f"fully_shard failed on this model: {exc}") from None


def sharded(tensor: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor parameter (the tensor itself otherwise)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def apply_tensor_parallel(model: nn.Module, mesh: Any) -> list[str]:
    """Megatron-style tensor parallelism from the model's Hugging Face TP plan.

    ``config.base_model_tp_plan`` names, per module pattern, how transformers shards a
    layer; ``colwise`` and ``rowwise`` linears map onto torch's ``ColwiseParallel`` and
    ``RowwiseParallel``. Entries on modules that are not ``nn.Linear`` (packed MoE
    experts) are left replicated, as are embeddings and the LM head; returns those
    skipped patterns.
    """
    from fnmatch import fnmatch

    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    config = getattr(model, "config", None)
    tp_plan = getattr(config, "base_model_tp_plan", None) or {}
    base = getattr(model, "base_model", model)
    if not tp_plan:
        raise TraceError(
            "tensor parallelism needs a plan: a Hugging Face model whose config has "
            "base_model_tp_plan (Llama, Mistral, Qwen, ...)"
        )
    linears = {name for name, m in base.named_modules() if isinstance(m, nn.Linear)}
    plan: dict[str, Any] = {}
    skipped = []
    for pattern, style in tp_plan.items():
        matched = any(fnmatch(name, pattern) for name in linears)
        if matched and style.startswith("colwise"):
            plan[pattern] = ColwiseParallel()
        elif matched and style.startswith("rowwise"):
            plan[pattern] = RowwiseParallel()
        else:
            skipped.append(f"{pattern} ({style})")
    if not plan:
        raise TraceError("the model's tensor-parallel plan has no colwise/rowwise linear")
    try:
        parallelize_module(base, mesh, plan)
    except (RuntimeError, ValueError, AssertionError) as exc:
        raise TraceError(f"parallelize_module failed on this model: {exc}") from None
    return skipped
