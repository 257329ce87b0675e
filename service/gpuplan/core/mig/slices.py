"""``GET /v1/mig/slices``: free MIG instances of the live fleet, best fit first.

A scheduler asks where a workload of so much memory and so many compute slices can
run *now*. The agents publish every MIG instance with the memory the driver reports
for it and whether a process uses it; this ranks the free ones that fit.

Fit is decided on the instance's usable memory as the driver reported it, never on
the ``gb`` in the profile name (an H200 ``1g.18gb`` holds 16 GiB). Compute slices are
the profile's (the table's row when gpuplan knows the model, else the ``Ng`` of the
name, which NVIDIA's naming makes exact). Best fit is the instance with the least
memory to spare, then the least compute to spare, so large instances stay free for
large workloads; ties go by node, GPU index and placement start, so the answer is
the same on every call.
"""

import heapq
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.core.catalog import Catalog
from gpuplan.core.fleet import MigInstance, NodeSnapshot, find_spec
from gpuplan.core.mig.load import builtin_tables
from gpuplan.core.mig.model import MigGpu, MigProfile
from gpuplan.core.mig.schema import (
    MAX_SLICES_LIMIT,
    FreeSlice,
    SlicesQuery,
    SlicesResponse,
)
from gpuplan.core.mig.tables import find_profile, resolve, resource_name
from gpuplan.core.mig.words import GiB, gib, not_live

# nvidia-smi names a GI profile `<compute slices>g.<rounded memory>gb[+attrs]`.
_COMPUTE_IN_NAME = re.compile(r"^(?:MIG )?([1-8])g\.", re.IGNORECASE)


@dataclass(frozen=True)
class _Known:
    """What gpuplan's data says of one (GPU model, profile) pair."""

    catalog_id: str | None
    profile: MigProfile | None


def _lookup(catalog: Catalog, tables: Sequence[MigGpu], model_name: str, profile: str) -> _Known:
    spec = find_spec(catalog, model_name)
    if spec is None:
        return _Known(None, None)
    table = next((t for t in tables if spec.id in t.gpus), None)
    index = None if table is None else find_profile(table, profile)
    if table is None or index is None:
        return _Known(spec.id, None)
    return _Known(spec.id, table.profiles[index])


def _compute_slices(instance: MigInstance, known: _Known) -> int | None:
    if known.profile is not None:
        return known.profile.compute_slices
    match = _COMPUTE_IN_NAME.match(instance.profile.strip())
    return None if match is None else int(match[1])


@dataclass
class _Tally:
    """What the scan saw, for the counts and notes of the answer."""

    considered: int = 0
    free: int = 0
    eligible: int = 0
    lost: int = 0
    split: int = 0
    unknown_compute: int = 0
    max_memory: int = 0
    max_compute: int = 0


def _shared_gis(node: NodeSnapshot) -> set[tuple[str, int]]:
    """GPU instances split into several compute instances on ``node``.

    Each compute instance is a MIG device of its own, all sharing the GI's memory:
    none of them offers the whole of it, so none is offered as a free slice.
    """
    seen: set[tuple[str, int]] = set()
    shared: set[tuple[str, int]] = set()
    for m in node.mig_instances:
        gi = (m.gpu_uuid, m.gpu_instance_id)
        (shared if gi in seen else seen).add(gi)
    return shared


def _slice(m: MigInstance, known: _Known, compute: int, memory: int, need: int) -> FreeSlice:
    return FreeSlice(
        node=m.node,
        gpu_index=m.gpu_index,
        gpu_uuid=m.gpu_uuid,
        gpu_model_name=m.gpu_model_name,
        catalog_id=known.catalog_id,
        mig_uuid=m.mig_uuid,
        gpu_instance_id=m.gpu_instance_id,
        profile=m.profile,
        placement_start=m.placement_start,
        placement_size=m.placement_size,
        memory_bytes=m.memory_bytes,
        compute_slices=compute,
        resource=resource_name(m.profile if known.profile is None else known.profile.name),
        surplus_memory_bytes=m.memory_bytes - memory,
        surplus_compute_slices=compute - need,
        unverified=None if known.profile is None else list(known.profile.unverified),
    )


Rank = tuple[int, int, str, int, bool, int, str]


def _rank(m: MigInstance, compute: int, memory: int, need: int) -> Rank:
    """Best fit first: surplus memory, surplus compute, then a total order."""
    return (
        m.memory_bytes - memory,
        compute - need,
        m.node,
        m.gpu_index,
        m.placement_start is None,
        m.placement_start or 0,
        m.mig_uuid,
    )


def slices(
    query: SlicesQuery,
    nodes: Sequence[NodeSnapshot],
    catalog: Catalog,
    tables: Sequence[MigGpu] | None = None,
) -> SlicesResponse:
    """The free MIG instances on ``nodes`` that fit ``query``, best fit first.

    ``nodes`` are the live nodes as the fleet store read them. Raises
    :class:`~gpuplan.core.mig.MigInputError` for a ``gpu`` that is unknown or has no MIG.
    """
    tables = builtin_tables() if tables is None else tables
    model = (
        None
        if query.gpu is None
        else resolve(catalog, tables, query.gpu, path="$.gpu", location="query")[0].id
    )
    memory = 0 if query.memory_gib is None else math.ceil(query.memory_gib * GiB)
    need = query.compute_slices
    live = [n for n in nodes if query.node is None or n.node == query.node]

    cache: dict[tuple[str, str], _Known] = {}
    tally = _Tally()
    fits: list[tuple[Rank, MigInstance, _Known, int]] = []
    for node in live:
        down = {g.uuid for g in node.gpus if not g.up}
        shared = _shared_gis(node)
        for m in node.mig_instances:
            key = (m.gpu_model_name, m.profile)
            known = cache.get(key)
            if known is None:
                known = cache[key] = _lookup(catalog, tables, m.gpu_model_name, m.profile)
            if model is not None and known.catalog_id != model:
                continue
            tally.considered += 1
            if m.in_use:
                continue
            tally.free += 1
            compute = _compute_slices(m, known)
            if m.gpu_uuid in down:
                tally.lost += 1
            elif (m.gpu_uuid, m.gpu_instance_id) in shared:
                tally.split += 1
            elif compute is None:
                tally.unknown_compute += 1
            else:
                tally.eligible += 1
                tally.max_memory = max(tally.max_memory, m.memory_bytes)
                tally.max_compute = max(tally.max_compute, compute)
                if m.memory_bytes >= memory and compute >= need:
                    fits.append((_rank(m, compute, memory, need), m, known, compute))
    # Only the answer's items are built: a large fleet may have many more fits.
    best = heapq.nsmallest(query.limit, fits, key=lambda fit: fit[0])
    shown = [_slice(m, known, compute, memory, need) for _, m, known, compute in best]
    return SlicesResponse(
        memory_bytes=memory,
        compute_slices=need,
        nodes=len(live),
        instances=tally.considered,
        free=tally.free,
        matched=len(fits),
        count=len(shown),
        slices=shown,
        notes=_notes(query, tally, model=model, memory=memory, live=bool(live), fits=len(fits)),
    )


def _notes(
    query: SlicesQuery, tally: _Tally, *, model: str | None, memory: int, live: bool, fits: int
) -> list[str]:
    """Why the list is empty or short: said in words, so an empty answer is never mute."""
    notes: list[str] = []
    of_model = "" if model is None else f" of model `{model}`"
    if not live:
        notes.append(not_live(query.node))
    elif tally.considered == 0:
        notes.append(f"the live nodes publish no MIG instances{of_model}")
    elif tally.free == 0:
        notes.append(f"all {tally.considered} MIG instances{of_model} are in use")
    elif tally.eligible and not fits:
        notes.append(
            f"no free instance{of_model} has {gib(memory)} usable and "
            f"{query.compute_slices} compute slice(s); the free ones offer at most "
            f"{gib(tally.max_memory)} and {tally.max_compute} compute slice(s)"
        )
    if tally.lost:
        notes.append(f"{tally.lost} idle instance(s) on GPUs the driver reports lost are left out")
    if tally.split:
        notes.append(
            f"{tally.split} idle compute instance(s) sharing a GPU instance with another are "
            "left out: none has the GPU instance's memory to itself"
        )
    if tally.unknown_compute:
        notes.append(
            f"{tally.unknown_compute} idle instance(s) whose profile name gives no compute "
            "slice count are left out"
        )
    if fits > query.limit:
        notes.append(f"{fits - query.limit} more fit; raise `limit` (at most {MAX_SLICES_LIMIT})")
    return notes
