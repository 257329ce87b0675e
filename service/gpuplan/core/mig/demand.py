"""Workloads as demand: each becomes a *class*, the set of profiles that can serve it.

One that names a profile has exactly that one; one that gives ``memory_gib`` has every
plain profile (no ``+me``/``+gfx``/``-me`` suffix: media engines are asked for by name)
whose *usable* memory and compute slices cover it. After packing, :func:`expand` hands
the workloads' names out to the instances the packer assigned to their class.
"""

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.core.mig.errors import MigInputError
from gpuplan.core.mig.geometry import Geometry
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.mig.schema import MAX_TOTAL_WORKLOADS, PartitionRequest, Unplaced
from gpuplan.core.mig.tables import profile_index
from gpuplan.core.mig.tiebreak import GpuPlan

GiB = 2**30


@dataclass
class Demand:
    """Workloads grouped by the profiles that serve them."""

    classes: list[frozenset[int]]
    members: list[list[tuple[str, int]]]
    """Per class: ``(workload name, count)`` in request order."""
    unplaced: list[Unplaced]


def is_plain(name: str) -> bool:
    return "+" not in name and "-" not in name


def classify(
    table: MigGpu, request: PartitionRequest, reserved: frozenset[int] = frozenset()
) -> Demand:
    """Workloads as classes; ``reserved`` profiles (time-slicing hosts) serve only the
    workloads that name them."""
    total = sum(w.count for w in request.workloads)
    if total > MAX_TOTAL_WORKLOADS:
        raise MigInputError(
            "$.workloads", f"{total} workloads in all; at most {MAX_TOTAL_WORKLOADS}"
        )
    names: set[str] = set()
    by_class: dict[frozenset[int], list[tuple[str, int]]] = {}
    unplaced = []
    largest = max(
        (p for p in table.profiles if is_plain(p.name)),
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
                if is_plain(p.name)
                and k not in reserved
                and p.memory_bytes >= need
                and p.compute_slices >= compute
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


def expand(
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
