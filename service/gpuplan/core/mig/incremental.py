"""Incremental plans: place new workloads on a running fleet without touching busy instances.

An instance in use is never moved or destroyed. The plan, in order:

1. Idle instances of a busy GPU (one with an instance in use) serve new workloads
   they fit, as they are.
2. Free memory slots of busy GPUs take new instances (NVIDIA creates and destroys
   GPU instances while other instances run); an idle instance that serves nothing is
   destroyed only if the new instances need its slots.
3. What is left is packed optimally (:mod:`gpuplan.core.mig.packing`) onto the GPUs
   that are entirely idle, which may be repartitioned whole (mig-parted clears a GPU
   before applying, so only these appear in ``mig_parted_config``).

Busy GPUs are filled first because their capacity is already committed. Steps 1-2 are
greedy (hardest workload first), so ``optimal`` is not claimed for incremental plans;
``lower_bound`` is a true bound on the GPUs in use afterwards (the busy ones, or the
LP bound of all workloads, old and new, whichever is larger).
"""

import math

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.mig import lp
from gpuplan.core.mig.assemble import assemble, build_gpu, stranded
from gpuplan.core.mig.demand import Demand, classify, expand, workloads_on
from gpuplan.core.mig.errors import MigInputError
from gpuplan.core.mig.geometry import Counts, Geometry, count_violations, first_fit, geometry, place
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.mig.packing import pack
from gpuplan.core.mig.schema import (
    PartitionGpu,
    PartitionInstance,
    PartitionRequest,
    PartitionResponse,
    PlacedInstance,
    Repartition,
    Unplaced,
)
from gpuplan.core.mig.tables import profile_index
from gpuplan.core.mig.tiebreak import GpuPlan

Gi = tuple[int, int, bool, str | None]
"""``(profile index, start, in use, workload)``."""


def _current(table: MigGpu, request: PartitionRequest) -> dict[int, list[Gi]]:
    assert request.current is not None
    fleet: dict[int, list[Gi]] = {}
    for g, gpu in enumerate(request.current):
        if gpu.index in fleet:
            raise MigInputError(f"$.current[{g}].index", f"GPU index {gpu.index} is listed twice")
        gis = []
        occupied = 0
        for k, inst in enumerate(gpu.instances):
            path = f"$.current[{g}].instances[{k}]"
            p = profile_index(table, inst.profile, f"{path}.profile")
            profile = table.profiles[p]
            if inst.start not in profile.placements:
                raise MigInputError(
                    f"{path}.start", f"`{profile.name}` cannot start at {inst.start}"
                )
            mask = ((1 << profile.memory_slices) - 1) << inst.start
            if occupied & mask:
                raise MigInputError(f"{path}.start", "overlaps another instance of this GPU")
            occupied |= mask
            gis.append((p, inst.start, inst.in_use, inst.workload))
        counts = [0] * len(table.profiles)
        for p, *_ in gis:
            counts[p] += 1
        problems = count_violations(table, counts)
        if problems:
            raise MigInputError(f"$.current[{g}].instances", problems[0])
        fleet[gpu.index] = gis
    return fleet


def _order_for(table: MigGpu, new: list[tuple[int, int]], occupied: int) -> list[tuple[int, int]]:
    """``new`` in an order whose first-fit placement (around ``occupied``) is exactly it."""

    def walk(rest: list[tuple[int, int]], occ: int) -> list[tuple[int, int]] | None:
        if not rest:
            return []
        for i, (p, s) in enumerate(rest):
            if first_fit(table, [p], occ) == [s]:
                mask = ((1 << table.profiles[p].memory_slices) - 1) << s
                tail = walk(rest[:i] + rest[i + 1 :], occ | mask)
                if tail is not None:
                    return [(p, s), *tail]
        return None

    return walk(new, occupied) or sorted(new, key=lambda ps: ps[1])


def incremental(
    request: PartitionRequest,
    spec: GpuSpec,
    table: MigGpu,
    reserved: frozenset[int] = frozenset(),
    whole_gpus: int = 0,
) -> PartitionResponse:
    geo = geometry(table)
    fleet = _current(table, request)
    demand = classify(table, request, reserved)
    queues = [[name for name, n in members for _ in range(n)] for members in demand.members]
    busy = sorted(i for i, gis in fleet.items() if any(g[2] for g in gis))
    idle = sorted(i for i, gis in fleet.items() if not any(g[2] for g in gis))
    final, repartition = _fill_busy(geo, fleet, busy, demand, queues)
    # The entirely idle GPUs take the rest, packed afresh.
    left = [len(q) for q in queues]
    packing = pack(geo, demand.classes, left)
    rest = Demand(demand.classes, [[(n, 1) for n in q] for q in queues], [])
    plans = expand(rest, packing.gpus, geo) if any(left) else []
    unplaced = list(demand.unplaced)
    if len(plans) > len(idle):
        missing = workloads_on(plans[len(idle) :])
        unplaced.extend(
            Unplaced(n, c, f"no idle GPU left: {len(plans) - len(idle)} more GPU(s) needed")
            for n, c in missing.items()
        )
        plans = plans[: len(idle)]
    new_gpus: dict[int, GpuPlan] = dict(zip(idle, plans, strict=False))
    gpus: list[PartitionGpu] = []
    counts_out: list[Counts] = []
    layout_names: dict[Counts, str] = {}
    config_indices: set[int] = set()
    for index in sorted(fleet):
        if index in new_gpus:
            pl = new_gpus[index]
            name = layout_names.setdefault(pl.counts, f"gpuplan-layout-{len(layout_names) + 1}")
            gpu = build_gpu(geo, index, name, pl)
            change = _whole_gpu_change(table, fleet[index], gpu)
            if change is not None:
                config_indices.add(index)
                repartition.append(change)
            gpus.append(gpu)
            counts_out.append(pl.counts)
        else:
            layout = final.get(index, fleet[index])
            key = _counts(table, layout)
            name = (
                layout_names.setdefault(key, f"gpuplan-layout-{len(layout_names) + 1}")
                if any(key)
                else "empty"
            )
            gpus.append(_as_planned(geo, index, name, layout, key))
            counts_out.append(key)
    used = [(g, c) for g, c in zip(gpus, counts_out, strict=True) if g.instances]
    response = assemble(
        spec=spec,
        geo=geo,
        gpus=[g for g, _ in used],
        counts=[c for _, c in used],
        unplaced=unplaced,
        lower_bound=_bound(geo, fleet, demand),
        optimal=False,
        config_indices=config_indices,
        # Whole GPUs with MIG off (MPS hosts) are new: they follow the fleet's indices.
        mig_disabled=range(max(fleet, default=-1) + 1, max(fleet, default=-1) + 1 + whole_gpus),
    )
    return msgspec.structs.replace(response, repartition=sorted(repartition, key=lambda r: r.index))


def _counts(table: MigGpu, layout: list[Gi]) -> Counts:
    counts = [0] * len(table.profiles)
    for p, *_ in layout:
        counts[p] += 1
    return tuple(counts)


def _as_planned(
    geo: Geometry, index: int, name: str, layout: list[Gi], key: Counts
) -> PartitionGpu:
    table = geo.table
    return PartitionGpu(
        index=index,
        layout=name,
        instances=[
            PartitionInstance(
                profile=table.profiles[p].name,
                start=s,
                size=table.profiles[p].memory_slices,
                workload=w,
                memory_bytes=table.profiles[p].memory_bytes,
                compute_slices=table.profiles[p].compute_slices,
                in_use=u,
            )
            for p, s, u, w in sorted(layout, key=lambda g: g[1])
        ],
        creation_order=None,
        stranded_compute_slices=stranded(geo, key) if any(key) else 0,
    )


def _whole_gpu_change(table: MigGpu, before: list[Gi], gpu: PartitionGpu) -> Repartition | None:
    old = sorted((table.profiles[p].name, s) for p, s, *_ in before)
    new = sorted((i.profile, i.start) for i in gpu.instances)
    if old == new:
        return None
    return Repartition(
        index=gpu.index,
        create=[PlacedInstance(i.profile, i.start, i.size) for i in gpu.instances],
        destroy=[_placed(table, p, s) for p, s, *_ in before],
        whole_gpu_idle=True,
    )


def _fill_busy(
    geo: Geometry,
    fleet: dict[int, list[Gi]],
    busy: list[int],
    demand: Demand,
    queues: list[list[str]],
) -> tuple[dict[int, list[Gi]], list[Repartition]]:
    """Steps 1 and 2: reuse idle GIs of busy GPUs, then add GIs in their free slots."""
    table = geo.table
    hardest = sorted(
        range(len(demand.classes)),
        key=lambda j: -min(table.profiles[p].memory_slices for p in demand.classes[j]),
    )
    final: dict[int, list[Gi]] = {}
    repartition: list[Repartition] = []
    for index in busy:
        gis = fleet[index]
        kept: list[Gi] = [g for g in gis if g[2]]
        spare: list[Gi] = []
        for p, s, _, _ in (g for g in gis if not g[2]):
            j = next((j for j in hardest if queues[j] and p in demand.classes[j]), None)
            if j is None:
                spare.append((p, s, False, None))
            else:
                kept.append((p, s, False, queues[j].pop(0)))
        created, destroyed, layout = _fill(geo, kept, spare, demand, queues, hardest)
        final[index] = layout
        if created or destroyed:
            new = {(c[0], c[1]) for c in created}
            occupied = 0
            for p, s, *_ in layout:
                if (p, s) not in new:
                    occupied |= ((1 << table.profiles[p].memory_slices) - 1) << s
            order = _order_for(table, sorted(new, key=lambda ps: ps[1]), occupied)
            repartition.append(
                Repartition(
                    index=index,
                    create=[_placed(table, p, s) for p, s in order],
                    destroy=[_placed(table, p, s) for p, s, *_ in destroyed],
                    whole_gpu_idle=False,
                )
            )
    return final, repartition


def _placed(table: MigGpu, p: int, s: int) -> PlacedInstance:
    return PlacedInstance(table.profiles[p].name, s, table.profiles[p].memory_slices)


def _fill(  # noqa: PLR0917 - one call site, all positional state of the fill
    geo: Geometry,
    kept: list[Gi],
    spare: list[Gi],
    demand: Demand,
    queues: list[list[str]],
    hardest: list[int],
) -> tuple[list[Gi], list[Gi], list[Gi]]:
    """Add GIs for queued workloads around ``kept``; ``spare`` idle GIs go if in the way.

    Returns (created, destroyed, final layout).
    """
    table = geo.table
    created: list[Gi] = []
    for allow_destroy in (False, True):
        base = kept + ([] if allow_destroy else spare)
        for j in hardest:
            options = sorted(
                demand.classes[j],
                key=lambda p: (
                    table.profiles[p].memory_slices,
                    table.profiles[p].compute_slices,
                    p,
                ),
            )
            while queues[j]:
                for p in options:
                    trial = [*base, *created, (p, -1, False, None)]
                    counts = [0] * len(table.profiles)
                    for q, *_ in trial:
                        counts[q] += 1
                    if tuple(counts) not in geo.index:
                        continue  # breaks a count rule, or no placement at all
                    fixed = tuple((q, s) for q, s, *_ in [*base, *created])
                    found = place(table, counts, fixed)
                    if found is not None:
                        start = next(s for q, s in found if q == p and (q, s) not in fixed)
                        created.append((p, start, False, queues[j].pop(0)))
                        break
                else:
                    break
        if not allow_destroy and not any(queues):
            break
    destroyed = [g for g in spare if any(_overlaps(table, g, c) for c in created)]
    layout = [*kept, *(g for g in spare if g not in destroyed), *created]
    return created, destroyed, layout


def _overlaps(table: MigGpu, a: Gi, b: Gi) -> bool:
    ea = a[1] + table.profiles[a[0]].memory_slices
    eb = b[1] + table.profiles[b[0]].memory_slices
    return a[1] < eb and b[1] < ea


def _bound(geo: Geometry, fleet: dict[int, list[Gi]], demand: Demand) -> int:
    """GPUs in use afterwards are at least the busy ones and at least the LP bound."""
    busy = sum(1 for gis in fleet.values() if any(g[2] for g in gis))
    classes = list(demand.classes)
    counts = [sum(n for _, n in m) for m in demand.members]
    for gis in fleet.values():
        for p, _, in_use, _ in gis:
            if in_use:
                key = frozenset([p])
                if key in classes:
                    counts[classes.index(key)] += 1
                else:
                    classes.append(key)
                    counts.append(1)
    if not any(counts):
        return busy
    layouts = list(geo.layouts)
    by_profile = [
        [j for j, cls in enumerate(classes) if p in cls] for p in range(len(geo.table.profiles))
    ]
    useful = [c for c in layouts if all(n == 0 or by_profile[p] for p, n in enumerate(c))]
    relaxed = lp.solve(useful, by_profile, counts)
    return max(busy, math.ceil(relaxed.bound - 1e-6))
