"""``POST /v1/mig/plan``: workloads in, the fewest MIG-partitioned GPUs out.

Workloads become *classes*: the set of profiles that can serve them. One that names
a profile has exactly that one; one that gives ``memory_gib`` has every plain profile
(no ``+me``/``+gfx``/``-me`` suffix: media engines are asked for by name) whose
*usable* memory and compute slices cover it. The packer
(:mod:`gpuplan.core.mig.packing`) picks layouts and serves classes; this module turns
its answer into placed instances, a mig-parted config, Kubernetes resource names and
the utilisation figures.
"""

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from gpuplan.core.catalog import Catalog, GpuSpec
from gpuplan.core.mig import parted
from gpuplan.core.mig.errors import MigInputError
from gpuplan.core.mig.geometry import Counts, Geometry, creation_order, geometry
from gpuplan.core.mig.load import builtin_tables
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.mig.packing import pack
from gpuplan.core.mig.schema import (
    MAX_TOTAL_WORKLOADS,
    PlannedGpu,
    PlannedInstance,
    PlanRequest,
    PlanResponse,
    Resource,
    SingleStrategy,
    Unplaced,
    Utilization,
)
from gpuplan.core.mig.tables import profile_index, resolve, resource_name
from gpuplan.core.mig.tiebreak import GpuPlan, reduce_stranding

GiB = 2**30


@dataclass
class Demand:
    """Workloads grouped by the profiles that serve them."""

    classes: list[frozenset[int]]
    members: list[list[tuple[str, int]]]
    """Per class: ``(workload name, count)`` in request order."""
    unplaced: list[Unplaced]


def _is_plain(name: str) -> bool:
    return "+" not in name and "-" not in name


def classify(table: MigGpu, request: PlanRequest) -> Demand:
    total = sum(w.count for w in request.workloads)
    if total > MAX_TOTAL_WORKLOADS:
        raise MigInputError(
            "$.workloads", f"{total} workloads in all; at most {MAX_TOTAL_WORKLOADS}"
        )
    names: set[str] = set()
    by_class: dict[frozenset[int], list[tuple[str, int]]] = {}
    unplaced = []
    largest = max(
        (p for p in table.profiles if _is_plain(p.name)),
        key=lambda p: (p.memory_bytes, p.compute_slices),
    )
    for i, w in enumerate(request.workloads):
        path = f"$.workloads[{i}]"
        if w.name in names:
            raise MigInputError(f"{path}.name", f"workload name `{w.name}` is used twice")
        names.add(w.name)
        if (w.profile is None) == (w.memory_gib is None):
            raise MigInputError(
                path, "give either `profile` or `memory_gib` (with optional `compute_slices`)"
            )
        if w.profile is not None:
            if w.compute_slices is not None:
                raise MigInputError(
                    f"{path}.compute_slices", "only with `memory_gib`; a profile fixes its compute"
                )
            eligible = frozenset([profile_index(table, w.profile, f"{path}.profile")])
        else:
            assert w.memory_gib is not None
            need = math.ceil(w.memory_gib * GiB)
            compute = w.compute_slices or 1
            eligible = frozenset(
                k
                for k, p in enumerate(table.profiles)
                if _is_plain(p.name) and p.memory_bytes >= need and p.compute_slices >= compute
            )
            if not eligible:
                unplaced.append(
                    Unplaced(
                        w.name,
                        w.count,
                        f"needs {w.memory_gib:g} GiB and {compute} compute slice(s); no profile has both "
                        f"(largest: {largest.name}, {largest.memory_bytes / GiB:.2f} GiB usable, "
                        f"{largest.compute_slices} compute slices)",
                    )
                )
                continue
        by_class.setdefault(eligible, []).append((w.name, w.count))
    classes = list(by_class)
    return Demand(classes, [by_class[c] for c in classes], unplaced)


def _expand(
    demand: Demand, gpus: Sequence[tuple[int, tuple[int, ...]]], geo: Geometry
) -> list[GpuPlan]:
    """Hand out workload names to the GIs the packer assigned to their class."""
    queues: list[list[str]] = [
        [name for name, count in members for _ in range(count)] for members in demand.members
    ]
    heads = [0] * len(queues)
    out = []
    for layout, assign in gpus:
        counts = geo.layouts[layout]
        served: dict[int, list[str]] = defaultdict(list)
        kept = [0] * len(counts)
        gi = 0
        for p, n in enumerate(counts):
            for _ in range(n):
                j = assign[gi]
                gi += 1
                if j < 0 or heads[j] >= len(queues[j]):
                    continue  # an idle GI: dropped from the layout
                served[p].append(queues[j][heads[j]])
                heads[j] += 1
                kept[p] += 1
        if any(kept):
            out.append(GpuPlan(tuple(kept), dict(served)))
    assert all(h == len(q) for h, q in zip(heads, queues, strict=True)), "packing left demand"
    return out


def workloads_on(plans: Sequence[GpuPlan]) -> dict[str, int]:
    """How many GIs of each workload ``plans`` hold."""
    found: dict[str, int] = {}
    for pl in plans:
        for names in pl.served.values():
            for name in names:
                found[name] = found.get(name, 0) + 1
    return found


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


def _stranded(geo: Geometry, counts: Counts) -> int:
    return geo.stranded[geo.index[counts]]


def build_gpu(geo: Geometry, index: int, layout_name: str, plan: GpuPlan) -> PlannedGpu:
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
            PlannedInstance(
                profile=profile.name,
                start=start,
                size=profile.memory_slices,
                workload=workload,
                memory_bytes=profile.memory_bytes,
                compute_slices=profile.compute_slices,
            )
        )
    return PlannedGpu(
        index=index,
        layout=layout_name,
        instances=instances,
        creation_order=[table.profiles[p].name for p in order],
        stranded_compute_slices=_stranded(geo, plan.counts),
    )


def finish(
    *,
    spec: GpuSpec,
    geo: Geometry,
    gpus: list[PlannedGpu],
    counts: list[Counts],
    unplaced: list[Unplaced],
    lower_bound: int,
    optimal: bool,
    config_indices: set[int] | None = None,
    demand: Demand | None = None,
) -> PlanResponse:
    """Utilisation, mig-parted config, resources and strategy of placed GPUs."""
    table = geo.table
    devices: dict[str, tuple[Counts, list[int]]] = {}
    for gpu, c in zip(gpus, counts, strict=True):
        if config_indices is None or gpu.index in config_indices:
            devices.setdefault(gpu.layout, (c, []))[1].append(gpu.index)
    layouts = [(name, ids, parted.counts_of(table, c)) for name, (c, ids) in devices.items()]
    config = parted.render(layouts, spec.pci_device_ids)
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
    return PlanResponse(
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


def plan(
    request: PlanRequest, catalog: Catalog, tables: Sequence[MigGpu] | None = None
) -> PlanResponse:
    """Plan MIG layouts for ``request`` (incrementally when it gives ``current``)."""
    spec, table = resolve(catalog, builtin_tables() if tables is None else tables, request.gpu)
    if request.current is not None:
        from gpuplan.core.mig.incremental import plan_incremental

        return plan_incremental(request, spec, table)
    geo = geometry(table)
    demand = classify(table, request)
    counts = [sum(n for _, n in members) for members in demand.members]
    packing = pack(geo, demand.classes, counts)
    plans = _expand(demand, packing.gpus, geo)
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
    return finish(
        spec=spec,
        geo=geo,
        gpus=gpus,
        counts=[pl.counts for pl in plans],
        unplaced=unplaced,
        lower_bound=packing.lower_bound,
        optimal=packing.proven_optimal,
        demand=demand,
    )
