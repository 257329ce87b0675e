"""``POST /v1/mig/plan``: workloads in, the fewest MIG-partitioned GPUs out.

Workloads become classes of profiles (:mod:`gpuplan.core.mig.demand`); the packer
(:mod:`gpuplan.core.mig.packing`) picks layouts and serves classes; this module orders
and names the GPUs it used and hands them to :mod:`gpuplan.core.mig.assemble` for the
answer. Workloads that share a GPU below MIG are first replaced by the host instances
they share (:mod:`gpuplan.core.mig.sharing`). A request with ``current`` instances in use goes to
:mod:`gpuplan.core.mig.incremental`. Either answer then carries the outputs the request
asks for (:mod:`gpuplan.core.mig.outputs`).
"""

from collections.abc import Sequence

import msgspec

from gpuplan.core.catalog import Catalog, GpuSpec
from gpuplan.core.mig import outputs, sharing
from gpuplan.core.mig.assemble import assemble, build_gpu
from gpuplan.core.mig.demand import classify, expand, workloads_on
from gpuplan.core.mig.geometry import Counts, geometry
from gpuplan.core.mig.incremental import incremental
from gpuplan.core.mig.load import builtin_tables
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.mig.packing import pack
from gpuplan.core.mig.schema import PartitionRequest, PartitionResponse, Unplaced
from gpuplan.core.mig.tables import resolve
from gpuplan.core.mig.tiebreak import reduce_stranding


def partition(
    request: PartitionRequest, catalog: Catalog, tables: Sequence[MigGpu] | None = None
) -> PartitionResponse:
    """Partition GPUs for ``request``'s workloads (incrementally when it gives ``current``)."""
    spec, table = resolve(catalog, builtin_tables() if tables is None else tables, request.gpu)
    outputs.check(request.output)
    # Shared workloads become host workloads; the MIG planner packs those beside the rest.
    shared = sharing.split(table, spec, request)
    whole = shared.plan.whole_gpus if shared.plan is not None else 0
    if request.current is not None:
        response = incremental(shared.request, spec, table, shared.reserved, whole)
    else:
        response = _fresh(shared.request, spec, table, shared.reserved, whole)
    if shared.plan is not None:
        # The whole GPUs (MIG off) follow the plan's GPUs, as mig_parted_config lists them.
        if request.current is not None:
            first = max((g.index for g in request.current), default=-1) + 1
        else:
            first = response.gpus_used
        plan = msgspec.structs.replace(
            shared.plan, whole_gpu_indices=list(range(first, first + whole))
        )
        response = msgspec.structs.replace(
            response, sharing=plan, unplaced=[*response.unplaced, *shared.unplaced]
        )
    return outputs.attach(request.output, spec, response)


def _fresh(
    request: PartitionRequest,
    spec: GpuSpec,
    table: MigGpu,
    reserved: frozenset[int],
    whole_gpus: int = 0,
) -> PartitionResponse:
    """Pack the workloads onto empty GPUs."""
    geo = geometry(table)
    demand = classify(table, request, reserved)
    counts = [sum(n for _, n in members) for members in demand.members]
    packing = pack(geo, demand.classes, counts)
    plans = expand(demand, packing.gpus, geo)
    reduce_stranding(
        geo,
        {n: c for c, m in zip(demand.classes, demand.members, strict=True) for n, _ in m},
        plans,
    )
    unplaced = list(demand.unplaced)
    if request.max_gpus is not None and len(plans) > request.max_gpus:
        # Keep the fullest GPUs; report the workloads of the others.
        plans.sort(key=lambda pl: -sum(len(v) for v in pl.served.values()))
        dropped = workloads_on(plans[request.max_gpus :])
        plans = plans[: request.max_gpus]
        unplaced.extend(
            Unplaced(
                name, n, f"needs {packing.lower_bound}+ GPUs in all; max_gpus is {request.max_gpus}"
            )
            for name, n in dropped.items()
        )
    # Same layouts side by side, the fullest first: one mig-parted entry per layout.
    plans.sort(key=lambda pl: (-geo.compute[geo.index[pl.counts]], pl.counts))
    layout_names: dict[Counts, str] = {}
    gpus = []
    for i, pl in enumerate(plans):
        name = layout_names.setdefault(pl.counts, f"gpuplan-layout-{len(layout_names) + 1}")
        gpus.append(build_gpu(geo, i, name, pl))
    return assemble(
        spec=spec,
        geo=geo,
        gpus=gpus,
        counts=[pl.counts for pl in plans],
        unplaced=unplaced,
        lower_bound=packing.lower_bound,
        optimal=packing.proven_optimal,
        demand=demand,
        mig_disabled=range(len(plans), len(plans) + whole_gpus),
    )
