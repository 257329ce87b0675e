"""``/v1/fleet/placements``: where a new workload goes on the live fleet, fewest
disruptions first.

:func:`place` checks the query (:mod:`~gpuplan.core.mig.placement_query`), reads the
live nodes as the MIG planner sees them (:mod:`~gpuplan.core.mig.fleetview`), asks each
GPU for its least disruptive option (:mod:`~gpuplan.core.mig.placement_search`, which
says how they rank), keeps ``drain`` options only when nothing else exists, and writes
the best ``limit`` out with the instances they destroy, the layout after, the commands
to run and the reason (:mod:`~gpuplan.core.mig.placement_text`).
"""

from collections.abc import Sequence

from gpuplan.core.catalog import Catalog
from gpuplan.core.errors import Location
from gpuplan.core.fleet import NodeSnapshot
from gpuplan.core.mig.demand import is_plain
from gpuplan.core.mig.fleetview import FleetGi, fleet_gpus
from gpuplan.core.mig.load import builtin_tables
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.mig.placement_query import Demand, check_placement
from gpuplan.core.mig.placement_search import Candidate, Change, Planner, Tally
from gpuplan.core.mig.placement_text import explain, steps
from gpuplan.core.mig.schema import (
    MAX_SLICES_LIMIT,
    PlacementInstance,
    PlacementOption,
    PlacementQuery,
    PlacementResponse,
)
from gpuplan.core.mig.tables import resource_name
from gpuplan.core.mig.words import gib, not_live


def place(
    query: PlacementQuery,
    nodes: Sequence[NodeSnapshot],
    catalog: Catalog,
    tables: Sequence[MigGpu] | None = None,
    location: Location = "body",
) -> PlacementResponse:
    """Where the workload ``query`` states can go on the live ``nodes``, fewest
    disruptions first (``location``: where the query's fields came from, for errors)."""
    tables = builtin_tables() if tables is None else tables
    demand = check_placement(query, catalog, tables, location)
    live = [n for n in nodes if query.node is None or n.node == query.node]
    gpus = [
        g
        for g in fleet_gpus(live, catalog, tables)
        if demand.model is None or g.catalog_id == demand.model
    ]
    planner = Planner(demand)
    found = [c for gpu in gpus for c in planner.options(gpu)]
    if any(c.disruption != "drain" for c in found):
        found = [c for c in found if c.disruption != "drain"]
    found.sort(key=lambda c: c.key)
    shown = [option(c, demand) for c in found[: query.limit]]
    free_fit = any(c.action == "use-instance" for c in found)
    notes = _notes(query, demand, planner.tally, live=bool(live), gpus=len(gpus), free_fit=free_fit)
    if len(found) > query.limit:
        notes.append(
            f"{len(found) - query.limit} more option(s); raise `limit` (at most {MAX_SLICES_LIMIT})"
        )
    return PlacementResponse(
        memory_bytes=demand.memory_bytes,
        compute_slices=demand.compute_slices,
        profile=demand.profile,
        disruption=shown[0].disruption if shown else None,
        reason=_headline(shown, notes),
        nodes=len(live),
        gpus=len(gpus),
        matched=len(found),
        count=len(shown),
        options=shown,
        notes=notes,
    )


def _instance(gi: FleetGi) -> PlacementInstance:
    return PlacementInstance(
        profile=gi.profile,
        placement_start=gi.start,
        placement_size=gi.size,
        gpu_instance_id=gi.gpu_instance_id,
        in_use=gi.in_use,
        mig_uuids=list(gi.mig_uuids),
        memory_bytes=gi.memory_bytes,
    )


def option(candidate: Candidate, demand: Demand) -> PlacementOption:
    """A candidate written out: where, what it destroys, the layout after, what to run."""
    gpu = candidate.gpu
    if candidate.gi is not None:
        written = _use_instance(candidate, candidate.gi, demand)
    elif candidate.change is None:
        written = _use_gpu(candidate, demand)
    else:
        written = _change_option(candidate, candidate.change, demand)
    return explain(steps(written, gpu), by_memory=demand.ref is None)


def _written(
    candidate: Candidate,
    demand: Demand,
    *,
    profile: str | None,
    start: int | None,
    size: int | None,
    memory: int,
    compute: int | None,
    resource: str,
    change: Change | None = None,
    gi: FleetGi | None = None,
    destroy: list[PlacementInstance] | None = None,
    layout_after: list[PlacementInstance] | None = None,
    unverified: list[str] | None = None,
) -> PlacementOption:
    gpu = candidate.gpu
    return PlacementOption(
        disruption=candidate.disruption,
        action=candidate.action,
        drained=0 if change is None else change.drained,
        destroyed=0 if change is None else change.destroyed,
        node=gpu.node,
        gpu_index=gpu.index,
        gpu_uuid=gpu.uuid,
        gpu_model_name=gpu.model_name,
        catalog_id=gpu.catalog_id,
        profile=profile,
        placement_start=start,
        placement_size=size,
        mig_uuid=None if gi is None else gi.mig_uuids[0],
        gpu_instance_id=None if gi is None else gi.gpu_instance_id,
        memory_bytes=memory,
        compute_slices=compute,
        resource=resource,
        surplus_memory_bytes=memory - demand.memory_bytes,
        surplus_compute_slices=None if compute is None else compute - demand.compute_slices,
        destroy=destroy or [],
        layout_after=layout_after or [],
        steps=[],
        reason="",
        unverified=unverified,
    )


def _use_instance(candidate: Candidate, gi: FleetGi, demand: Demand) -> PlacementOption:
    table = candidate.gpu.table
    row = None if table is None or gi.index is None else table.profiles[gi.index]
    return _written(
        candidate,
        demand,
        profile=gi.profile,
        start=gi.start,
        size=gi.size,
        memory=gi.memory_bytes,
        compute=gi.compute_slices,
        resource=resource_name(gi.profile if row is None else row.name),
        gi=gi,
        layout_after=[_instance(g) for g in candidate.gpu.gis],
        unverified=None if row is None else list(row.unverified),
    )


def _use_gpu(candidate: Candidate, demand: Demand) -> PlacementOption:
    return _written(
        candidate,
        demand,
        profile=None,
        start=None,
        size=None,
        memory=candidate.gpu.free_memory_bytes or 0,
        compute=None,
        resource="nvidia.com/gpu",
    )


def _change_option(candidate: Candidate, change: Change, demand: Demand) -> PlacementOption:
    gpu = candidate.gpu
    assert gpu.table is not None
    row = gpu.table.profiles[change.profile]
    new = PlacementInstance(
        profile=row.name,
        placement_start=change.slot * gpu.scale,
        placement_size=row.memory_slices * gpu.scale,
        gpu_instance_id=None,
        in_use=False,
        mig_uuids=[],
        memory_bytes=row.memory_bytes,
        new=True,
    )
    kept = [_instance(g) for i, g in enumerate(gpu.gis) if i not in change.destroy]
    return _written(
        candidate,
        demand,
        profile=row.name,
        start=new.placement_start,
        size=new.placement_size,
        memory=row.memory_bytes,
        compute=row.compute_slices,
        resource=resource_name(row.name),
        change=change,
        destroy=[_instance(gpu.gis[i]) for i in change.destroy],
        layout_after=sorted([*kept, new], key=lambda p: p.placement_start or 0),
        unverified=list(row.unverified),
    )


def _headline(shown: Sequence[PlacementOption], notes: Sequence[str]) -> str:
    """Why the first option is the least disruptive one (or why there is none)."""
    if not shown:
        why = f": {notes[0]}" if notes else ""
        return f"nothing in the live fleet can take the workload, even by draining{why}"
    first = shown[0]
    lead = {
        "none": "",
        "create": "no free instance fits; ",
        "repartition-idle": "no free instance fits and no GPU has free slices for one; ",
        "drain": "no free instance, free slices or idle instance can make room, so instances "
        "in use must go, and no GPU needs fewer drained than this one; ",
    }[first.disruption]
    return lead + first.reason


def _notes(
    query: PlacementQuery,
    demand: Demand,
    tally: Tally,
    *,
    live: bool,
    gpus: int,
    free_fit: bool,
) -> list[str]:
    notes: list[str] = []
    of_model = "" if demand.model is None else f" of model `{demand.model}`"
    if not live:
        notes.append(not_live(query.node))
    elif not gpus:
        notes.append(f"the live nodes publish no GPU{of_model}")
    for table in tally.too_small.values():
        largest = max(
            (p for p in table.profiles if is_plain(p.name)),
            key=lambda p: (p.memory_bytes, p.compute_slices),
        )
        if demand.ref is not None:
            notes.append(
                f"MIG table `{table.id}` ({', '.join(table.gpus)}) has no profile "
                f"`{demand.profile}`"
            )
        else:
            notes.append(
                f"no profile of MIG table `{table.id}` ({', '.join(table.gpus)}) has "
                f"{gib(demand.memory_bytes)} usable and {demand.compute_slices} compute "
                f"slice(s) (largest: {largest.name}, {gib(largest.memory_bytes)}, "
                f"{largest.compute_slices} compute slices)"
            )
    offered = tally.free - tally.split
    if offered and not free_fit:
        notes.append(
            f"none of the {offered} free instance(s) is a `{demand.profile}`"
            if demand.ref is not None
            else f"none of the {offered} free instance(s) fits: the largest holds "
            f"{gib(tally.largest_free)}"
        )
    if tally.lost:
        notes.append(f"{tally.lost} GPU(s) the driver reports lost are left out")
    if tally.busy_whole:
        notes.append(
            f"{tally.busy_whole} GPU(s) not in MIG mode run processes (or do not say) and "
            "are left out"
        )
    if tally.mode_unknown:
        notes.append(
            f"{tally.mode_unknown} GPU(s) of MIG-capable models do not report their MIG "
            "mode and are left out"
        )
    if tally.no_table:
        notes.append(
            f"{tally.no_table} GPU(s) in MIG mode are of models gpuplan has no MIG table for: "
            "only their free instances are offered"
        )
    notes.extend(f"{line}; only its free instances are offered" for line in tally.unreadable)
    if tally.split:
        notes.append(
            f"{tally.split} idle compute instance(s) sharing a GPU instance with another are "
            "left out: none has the GPU instance's memory to itself"
        )
    return notes
