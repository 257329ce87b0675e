"""The options of each GPU of the fleet for one workload, and their ranking.

A scheduler placing one more workload on a running MIG fleet wants the option that
disturbs the least, and only then the best fit. In order of what they disturb:

1. ``none``: a free MIG instance that fits takes it as it is (best fit, as
   ``/v1/mig/slices`` ranks them), or, when the workload may run on a whole GPU
   (``whole_gpu``), a free GPU not in MIG mode.
2. ``create``: a new GPU instance in free slices of a MIG GPU, at a start its profile
   allows, beside the instances there (NVIDIA creates and destroys GPU instances while
   others run); nothing is destroyed.
3. ``repartition-idle``: idle instances are destroyed to make room (never one in use),
   or MIG is enabled on a free GPU (a GPU reset: nothing runs on it) and the instance
   created there.
4. ``drain``: only when no option above exists anywhere in the fleet, instances in use
   must go; the option drains the fewest, and among those destroys the fewest idle ones.

For each MIG GPU whose layout reads as its table's, every profile that serves the
workload is tried at every start of its placement list; the instances overlapping it
must go, and when the GPU's counting rules (``max_count``, instances, compute, engines)
still refuse the layout, the cheapest further set (fewest in use, then fewest idle) is
removed, found by trying every subset of the rest in that order (at most 7 instances).
A GPU offers its least disruptive option only (every fitting free instance in tier 1):
an option that disturbs more on the same GPU is never the better one. Among options of
one disruption, the best fit wins: least surplus memory, then compute, then node, GPU
index and start, so the answer is the same on every call. The start chosen is the
lowest one, which is where the driver's first-fit places a GPU instance created by
profile alone once the listed instances are gone: no other start is free then, or it
would have been the answer.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations

from gpuplan.core.mig.fleetview import FleetGi, FleetGpu
from gpuplan.core.mig.geometry import Geometry, geometry
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.mig.placement_query import Demand
from gpuplan.core.mig.schema import Disruption, PlacementAction

TIER: dict[Disruption, int] = {"none": 0, "create": 1, "repartition-idle": 2, "drain": 3}

Key = tuple[int, int, int, int, int, int, int, str, int, int, str]

ACTION_ORDER: dict[PlacementAction, int] = {
    "use-instance": 0,
    "use-gpu": 1,
    "create": 2,
    "repartition": 3,
    "enable-mig": 4,
    "drain": 5,
}


@dataclass(frozen=True)
class Change:
    """A new GI of profile ``profile`` at ``slot`` after destroying ``destroy`` (indices
    into the GPU's GIs)."""

    profile: int
    slot: int
    destroy: tuple[int, ...]
    drained: int
    destroyed: int


@dataclass(frozen=True)
class Candidate:
    """An option before it is written out (only the shown ones are)."""

    key: Key
    disruption: Disruption
    action: PlacementAction
    gpu: FleetGpu
    gi: FleetGi | None = None
    change: Change | None = None


@dataclass
class Tally:
    """What the scan saw, for the notes."""

    lost: int = 0
    busy_whole: int = 0
    mode_unknown: int = 0
    no_table: int = 0
    free: int = 0
    split: int = 0
    largest_free: int = 0
    unreadable: list[str] = field(default_factory=list)
    too_small: dict[str, MigGpu] = field(default_factory=dict)


class Planner:
    """Options of each GPU for one demand; identical GPUs are solved once."""

    def __init__(self, demand: Demand) -> None:
        self.demand = demand
        self.tally = Tally()
        self._eligible: dict[str, tuple[int, ...]] = {}
        self._geometry: dict[str, Geometry] = {}
        self._changes: dict[tuple[object, ...], Change] = {}

    def eligible(self, table: MigGpu) -> tuple[int, ...]:
        found = self._eligible.get(table.id)
        if found is None:
            found = self._eligible[table.id] = self.demand.eligible(table)
        if not found:
            self.tally.too_small[table.id] = table
        return found

    def options(self, gpu: FleetGpu) -> list[Candidate]:
        """The least disruptive options ``gpu`` offers (several only for free instances)."""
        tally = self.tally
        if not gpu.up:
            tally.lost += 1
            return []
        if gpu.mig is None:
            tally.mode_unknown += 1
            return []
        if gpu.mig is False:
            return self._whole(gpu)
        return self._free(gpu) or self._partitioned(gpu)

    def _partitioned(self, gpu: FleetGpu) -> list[Candidate]:
        """The one option of a MIG GPU without a free instance that fits."""
        tally = self.tally
        if gpu.table is None:
            tally.no_table += 1
            return []
        eligible = self.eligible(gpu.table)
        if not eligible:
            return []
        if gpu.layout_problem is not None:
            tally.unreadable.append(f"{gpu.node} GPU {gpu.index}: {gpu.layout_problem}")
            return []
        change = self._change(gpu, gpu.table, eligible)
        disruption: Disruption = (
            "drain" if change.drained else "repartition-idle" if change.destroyed else "create"
        )
        action: PlacementAction = (
            "drain" if change.drained else "repartition" if change.destroyed else "create"
        )
        profile = gpu.table.profiles[change.profile]
        key = _key(
            disruption,
            action,
            gpu,
            drained=change.drained,
            destroyed=change.destroyed,
            surplus_memory=profile.memory_bytes - self.demand.memory_bytes,
            surplus_compute=profile.compute_slices - self.demand.compute_slices,
            start=change.slot * gpu.scale,
        )
        return [Candidate(key, disruption, action, gpu, change=change)]

    def _whole(self, gpu: FleetGpu) -> list[Candidate]:
        demand = self.demand
        if gpu.busy_whole:
            self.tally.busy_whole += 1
            return []
        free = gpu.free_memory_bytes
        if demand.whole_gpu and free is not None and free >= demand.memory_bytes:
            key = _key("none", "use-gpu", gpu, surplus_memory=free - demand.memory_bytes)
            return [Candidate(key, "none", "use-gpu", gpu)]
        if gpu.table is None:
            return []
        table = gpu.table
        eligible = self.eligible(table)
        if not eligible:
            return []
        q = min(
            eligible,
            key=lambda k: (table.profiles[k].memory_bytes, table.profiles[k].compute_slices, k),
        )
        profile = table.profiles[q]
        change = Change(q, profile.placements[0], (), 0, 0)
        key = _key(
            "repartition-idle",
            "enable-mig",
            gpu,
            surplus_memory=profile.memory_bytes - demand.memory_bytes,
            surplus_compute=profile.compute_slices - demand.compute_slices,
            start=change.slot,
        )
        return [Candidate(key, "repartition-idle", "enable-mig", gpu, change=change)]

    def _free(self, gpu: FleetGpu) -> list[Candidate]:
        demand = self.demand
        tally = self.tally
        eligible = () if gpu.table is None or demand.ref is None else self.eligible(gpu.table)
        found = []
        for gi in gpu.gis:
            if gi.in_use:
                continue
            tally.free += 1
            if gi.split:
                tally.split += 1
                continue
            compute = gi.compute_slices
            if compute is None:
                continue
            tally.largest_free = max(tally.largest_free, gi.memory_bytes)
            if demand.ref is not None:
                fits = (
                    gi.index in eligible
                    if gpu.table is not None
                    else _plain_name(gi.profile) == demand.profile
                )
            else:
                fits = gi.memory_bytes >= demand.memory_bytes and compute >= demand.compute_slices
            if fits:
                key = _key(
                    "none",
                    "use-instance",
                    gpu,
                    surplus_memory=gi.memory_bytes - demand.memory_bytes,
                    surplus_compute=compute - demand.compute_slices,
                    start=gi.start,
                    mig_uuid=gi.mig_uuids[0],
                )
                found.append(Candidate(key, "none", "use-instance", gpu, gi=gi))
        return found

    def _change(self, gpu: FleetGpu, table: MigGpu, eligible: tuple[int, ...]) -> Change:
        layout = tuple((gi.index, gi.slot, gi.in_use) for gi in gpu.gis)
        signature = (table.id, eligible, layout)
        known = self._changes.get(signature)
        if known is None:
            geo = self._geometry.get(table.id)
            if geo is None:
                geo = self._geometry[table.id] = geometry(table)
            known = self._changes[signature] = least_change(geo, gpu.gis, eligible)
        return known


def least_change(geo: Geometry, gis: Sequence[FleetGi], eligible: Sequence[int]) -> Change:
    """The new GI (profile and start) that destroys the fewest instances in use, then the
    fewest idle ones, then fits best, on a GPU holding ``gis`` (a readable layout)."""
    table = geo.table
    masks = []
    counts = [0] * len(table.profiles)
    for gi in gis:
        assert gi.index is not None
        assert gi.slot is not None
        masks.append(((1 << table.profiles[gi.index].memory_slices) - 1) << gi.slot)
        counts[gi.index] += 1
    best: tuple[tuple[int, ...], Change] | None = None
    for q in eligible:
        profile = table.profiles[q]
        width = (1 << profile.memory_slices) - 1
        for slot in profile.placements:
            mask = width << slot
            forced = tuple(i for i, m in enumerate(masks) if m & mask)
            destroy = _least_destroy(geo, gis, counts, forced, q)
            drained = sum(1 for i in destroy if gis[i].in_use)
            change = Change(q, slot, destroy, drained, len(destroy) - drained)
            key = (drained, change.destroyed, profile.memory_bytes, profile.compute_slices, slot, q)
            if best is None or key < best[0]:
                best = (key, change)
    assert best is not None, "eligible is never empty here"
    return best[1]


def _least_destroy(
    geo: Geometry, gis: Sequence[FleetGi], counts: list[int], forced: tuple[int, ...], q: int
) -> tuple[int, ...]:
    """``forced`` and the cheapest further GIs whose removal lets a ``q`` GI in."""
    base = list(counts)
    for i in forced:
        base[gis[i].index or 0] -= 1
    base[q] += 1
    if tuple(base) in geo.index:
        return forced
    rest = [i for i in range(len(gis)) if i not in forced]
    subsets = sorted(
        (c for r in range(1, len(rest) + 1) for c in combinations(rest, r)),
        key=lambda c: (sum(1 for i in c if gis[i].in_use), len(c), c),
    )
    for extra in subsets:
        trial = list(base)
        for i in extra:
            trial[gis[i].index or 0] -= 1
        if tuple(trial) in geo.index:
            return tuple(sorted(forced + extra))
    raise AssertionError("a GI alone is always a valid layout")


def _key(
    disruption: Disruption,
    action: PlacementAction,
    gpu: FleetGpu,
    *,
    drained: int = 0,
    destroyed: int = 0,
    surplus_memory: int,
    surplus_compute: int = 0,
    start: int | None = None,
    mig_uuid: str = "",
) -> Key:
    return (
        TIER[disruption],
        drained,
        1 if action == "enable-mig" else 0,
        destroyed,
        surplus_memory,
        surplus_compute,
        ACTION_ORDER[action],
        gpu.node,
        gpu.index,
        -1 if start is None else start,
        mig_uuid,
    )


def _plain_name(profile: str) -> str:
    name = profile.strip()
    return name[4:].strip().lower() if name.upper().startswith("MIG ") else name.lower()
