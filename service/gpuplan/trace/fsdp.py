"""One rank of an N-way FSDP2 (``fully_shard``) job, on a fake process group.

torch's fake process group (``torch.testing._internal.distributed.fake_pg``) answers
every collective at once without moving data, so one process can play rank 0 of any
world size: FSDP shards the parameters, all-gathers each unit before its forward and
backward and reduce-scatters its gradients exactly as on a cluster, and the recorder
sees rank 0's allocations (unsharded buffers included, which FSDP allocates with
``UntypedStorage.resize_``).
"""

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from gpuplan.trace.step import TraceError


def fake_mesh(world_size: int, device_type: str) -> Any:
    """A device mesh over a fake process group of ``world_size`` ranks (this is rank 0).

    Made outside fake mode: a mesh is built from real tensors of rank ids.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized() and (
        dist.get_backend() != "fake" or dist.get_world_size() != world_size
    ):
        dist.destroy_process_group()
    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    return init_device_mesh(device_type, (world_size,))


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
    from torch.distributed.fsdp import fully_shard

    try:
        for unit in shard_units(model):
            fully_shard(unit, mesh=mesh)
        fully_shard(model, mesh=mesh)
    except (RuntimeError, ValueError, AssertionError) as exc:
        raise TraceError(f"fully_shard failed on this model: {exc}") from None


def sharded(tensor: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor parameter (the tensor itself otherwise)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor
