"""A partition's answer from its GPUs' layouts: placed instances in creation order, the
mig-parted config, Kubernetes resources, utilisation and the single-strategy verdict.

Shared by fresh partitions (:mod:`gpuplan.core.mig.partition`) and incremental ones
(:mod:`gpuplan.core.mig.incremental`).
"""

from collections.abc import Sequence

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.mig import parted
from gpuplan.core.mig.demand import Demand
from gpuplan.core.mig.geometry import Counts, Geometry, creation_order
from gpuplan.core.mig.packing import pack
from gpuplan.core.mig.schema import (
    PartitionGpu,
    PartitionInstance,
    PartitionResponse,
    Resource,
    SingleStrategy,
    Unplaced,
    Utilization,
)
from gpuplan.core.mig.tables import resource_name
from gpuplan.core.mig.tiebreak import GpuPlan


def _single_alternative(geo: Geometry, demand: Demand, single: SingleStrategy) -> SingleStrategy:
    """The one profile that could serve every workload, and the GPUs it would take."""
    common = frozenset.intersection(*demand.classes) if demand.classes else frozenset()
    best: tuple[int, int] | None = None
    total = sum(n for members in demand.members for _, n in members)
    for p in sorted(common):
        gpus = len(pack(geo, [frozenset([p])], [total]).gpus)
        if best is None or gpus < best[0]:
            best = (gpus, p)
    if best is None:
        return single
    name = geo.table.profiles[best[1]].name
    return msgspec.structs.replace(
        single,
        reason=single.reason + f"; with `{name}` alone it takes {best[0]} GPU(s)",
        alternative_profile=name,
        alternative_gpus=best[0],
    )


def stranded(geo: Geometry, counts: Counts) -> int:
    return geo.stranded[geo.index[counts]]


def build_gpu(geo: Geometry, index: int, layout_name: str, plan: GpuPlan) -> PartitionGpu:
    """Place one GPU's GIs by the creation order that first-fit turns into its layout."""
    table = geo.table
    found = creation_order(table, plan.counts)
    assert found is not None, "every enumerated layout has a first-fit creation order"
    placed, order = found
    queues = {p: list(names) for p, names in plan.served.items()}
    instances = []
    for p, start in placed:  # sorted by start
        profile = table.profiles[p]
        workload = queues[p].pop(0) if queues.get(p) else None
        instances.append(
            PartitionInstance(
                profile=profile.name,
                start=start,
                size=profile.memory_slices,
                workload=workload,
                memory_bytes=profile.memory_bytes,
                compute_slices=profile.compute_slices,
            )
        )
    return PartitionGpu(
        index=index,
        layout=layout_name,
        instances=instances,
        creation_order=[table.profiles[p].name for p in order],
        stranded_compute_slices=stranded(geo, plan.counts),
    )


def assemble(
    *,
    spec: GpuSpec,
    geo: Geometry,
    gpus: list[PartitionGpu],
    counts: list[Counts],
    unplaced: list[Unplaced],
    lower_bound: int,
    optimal: bool,
    config_indices: set[int] | None = None,
    demand: Demand | None = None,
    mig_disabled: Sequence[int] = (),
) -> PartitionResponse:
    """Utilisation, mig-parted config, resources and strategy of placed GPUs;
    ``mig_disabled``: indices of the whole GPUs (MIG off) the plan adds beside them."""
    table = geo.table
    devices: dict[str, tuple[Counts, list[int]]] = {}
    for gpu, c in zip(gpus, counts, strict=True):
        if config_indices is None or gpu.index in config_indices:
            devices.setdefault(gpu.layout, (c, []))[1].append(gpu.index)
    layouts = [(name, ids, parted.counts_of(table, c)) for name, (c, ids) in devices.items()]
    config = parted.render(layouts, spec.pci_device_ids, mig_disabled)
    per: dict[tuple[str, str], int] = {}
    used_profiles: set[str] = set()
    mem_used = compute_used = 0
    for gpu in gpus:
        for inst in gpu.instances:
            used_profiles.add(inst.profile)
            mem_used += inst.size
            compute_used += inst.compute_slices
            if inst.workload is not None:
                key = (inst.workload, inst.profile)
                per[key] = per.get(key, 0) + 1
    resources = [Resource(w, p, resource_name(p), n) for (w, p), n in per.items()]
    if not gpus:
        single = SingleStrategy(possible=False, reason="no GPU is used")
    elif len(used_profiles) == 1:
        single = SingleStrategy(
            possible=True, reason=f"every GPU carries only `{next(iter(used_profiles))}`"
        )
    else:
        single = SingleStrategy(
            possible=False,
            reason=f"the plan mixes {len(used_profiles)} profiles ({', '.join(sorted(used_profiles))}); "
            "migStrategy single needs one profile type on every GPU of a node: use mixed",
        )
        if demand is not None:
            single = _single_alternative(geo, demand, single)
    unverified = sorted(p.name for p in table.profiles if p.name in used_profiles and p.unverified)
    return PartitionResponse(
        gpu=spec.id,
        table=table.id,
        gpus_used=len(gpus),
        lower_bound=lower_bound,
        optimal=optimal,
        gpus=gpus,
        unplaced=unplaced,
        utilization=Utilization(
            memory_slices_used=mem_used,
            memory_slices_total=len(gpus) * table.memory_slices,
            compute_slices_used=compute_used,
            compute_slices_total=len(gpus) * table.compute_slices,
            compute_slices_stranded=sum(g.stranded_compute_slices for g in gpus),
        ),
        mig_parted_config=config,
        resources=resources,
        single_strategy=single,
        unverified=unverified,
    )
