"""The smallest MIG instance that holds the job, on every MIG-capable catalog GPU.

A MIG instance is an isolated GPU with its own memory: the job runs unsharded in it,
so it must hold the one-GPU ``required_bytes`` (sized with the parent GPU's
architecture, whose overheads it shares). Only the *usable* memory the driver
reports counts, never the number in the profile's name (``3g.40gb`` offers 39.25 GiB
on an A100 80GB). Only plain profiles are candidates, as in the MIG planner: ``+me``
and ``-c`` variants hold no more memory than their plain sibling.
"""

from collections.abc import Sequence

from gpuplan.core.catalog import Catalog, GpuSpec
from gpuplan.core.ci.schema import MigFit
from gpuplan.core.mig.model import MigGpu, MigProfile
from gpuplan.core.mig.tables import resource_name


def plain_profiles(table: MigGpu) -> list[MigProfile]:
    """Plain profiles, smallest first: by usable memory, then compute slices."""
    plain = [p for p in table.profiles if "+" not in p.name and "-" not in p.name]
    return sorted(plain, key=lambda p: (p.memory_bytes, p.compute_slices, p.name))


def smallest_holding(table: MigGpu, required_bytes: int) -> MigProfile | None:
    for p in plain_profiles(table):
        if p.memory_bytes >= required_bytes:
            return p
    return None


def mig_fit(gpu: GpuSpec, table: MigGpu, required_bytes: int) -> MigFit:
    p = smallest_holding(table, required_bytes)
    return MigFit(
        gpu=gpu.id,
        name=gpu.name,
        required_bytes=required_bytes,
        profile=p.name if p else None,
        resource=resource_name(p.name) if p else None,
        memory_bytes=p.memory_bytes if p else None,
        compute_slices=p.compute_slices if p else None,
        utilization=round(required_bytes / p.memory_bytes, 4) if p else None,
        unverified=bool(p.unverified) if p else False,
    )


def mig_capable(catalog: Catalog, tables: Sequence[MigGpu]) -> list[tuple[GpuSpec, MigGpu]]:
    """Catalog GPUs with a MIG table, in catalog id order."""
    out = []
    for table in tables:
        for gpu_id in table.gpus:
            try:
                spec = catalog.get(gpu_id)
            except LookupError:
                continue
            out.append((spec, table))
    return sorted(out, key=lambda x: x[0].id)
