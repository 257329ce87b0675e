"""Tie-breaks once the GPU count is fixed: strand less compute.

The packer minimises GPUs; among packings with that many GPUs the plan should strand
as little compute as it can (3g.40gb + 3g.40gb fills the memory with one compute slice
no GI can use). Two local moves, applied until neither helps, each lowering the total
stranded compute, so they end:

- **upgrade**: serve a workload on a GPU with a richer eligible profile (one of two
  3-slice workloads on 4g.40gb instead of 3g.40gb);
- **swap**: exchange two workloads between two GPUs, each taking any profile eligible
  for it, or move one workload to another GPU. GPUs are compared by *signature*
  (layout and the workload classes it serves), so a fleet of identical GPUs costs one
  comparison, not thousands.

The moves are greedy: bench/mig_packing.py measures them against the lexicographic
MILP optimum.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from gpuplan.core.mig.geometry import Counts, Geometry

_MAX_ROUNDS = 500


@dataclass
class GpuPlan:
    """One GPU: its counts and, per profile, the workloads its GIs serve."""

    counts: Counts
    served: dict[int, list[str]]


def reduce_stranding(
    geo: Geometry, eligible_of: Mapping[str, frozenset[int]], plans: list[GpuPlan]
) -> None:
    """Apply upgrades and swaps in place until neither lowers the stranded compute."""
    for plan in plans:
        _upgrade(geo, eligible_of, plan)
    for _ in range(_MAX_ROUNDS):
        if not _swap_once(geo, eligible_of, plans):
            break
    # A move may have emptied a GPU (only when the packing was not minimal).
    plans[:] = [plan for plan in plans if any(plan.counts)]


def _stranded(geo: Geometry, counts: Counts) -> int:
    return geo.stranded[geo.index[counts]] if any(counts) else 0


def _upgrade(geo: Geometry, eligible_of: Mapping[str, frozenset[int]], plan: GpuPlan) -> None:
    profiles = geo.table.profiles
    improved = True
    while improved:
        improved = False
        current = _stranded(geo, plan.counts)
        for p, names in list(plan.served.items()):
            for i, name in enumerate(names):
                for q in sorted(eligible_of[name], key=lambda k: profiles[k].compute_slices):
                    if profiles[q].compute_slices <= profiles[p].compute_slices:
                        continue
                    key = _moved(plan.counts, remove=p, add=q)
                    if key in geo.index and geo.stranded[geo.index[key]] < current:
                        plan.counts = key
                        del names[i]
                        plan.served.setdefault(q, []).append(name)
                        improved = True
                        break
                if improved:
                    break
            if improved:
                break


def _moved(counts: Counts, *, remove: int | None = None, add: int | None = None) -> Counts:
    out = list(counts)
    if remove is not None:
        out[remove] -= 1
    if add is not None:
        out[add] += 1
    return tuple(out)


def _signature(plan: GpuPlan, eligible_of: Mapping[str, frozenset[int]]) -> tuple[object, ...]:
    served = sorted((p, sorted(eligible_of[n])) for p, names in plan.served.items() for n in names)
    return (plan.counts, tuple((p, tuple(c)) for p, c in served))


def _swap_once(
    geo: Geometry, eligible_of: Mapping[str, frozenset[int]], plans: list[GpuPlan]
) -> bool:
    """Find and apply one swap or move that lowers the stranded total; False if none."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, plan in enumerate(plans):
        if any(plan.counts):
            group = groups.setdefault(_signature(plan, eligible_of), [])
            if len(group) < 2:  # two of a kind are enough to try a swap within the kind
                group.append(i)
    stranded = [g[0] for g in groups.values() if _stranded(geo, plans[g[0]].counts) > 0]
    for a in stranded:
        for group in groups.values():
            b = group[0] if group[0] != a else (group[1] if len(group) > 1 else None)
            if b is not None and _try(geo, eligible_of, plans[a], plans[b]):
                return True
    return False


def _try(geo: Geometry, eligible_of: Mapping[str, frozenset[int]], a: GpuPlan, b: GpuPlan) -> bool:
    before = _stranded(geo, a.counts) + _stranded(geo, b.counts)
    a_items = [(p, n) for p, names in a.served.items() for n in names]
    b_items = [(p, n) for p, names in b.served.items() for n in names]
    for pa, na in a_items:
        rest_a = _moved(a.counts, remove=pa)
        for pa2 in sorted(eligible_of[na]):
            # move na to b
            new_b = _moved(b.counts, add=pa2)
            if _better(geo, rest_a, new_b, before):
                _apply(a, b, (pa, na), None, pa2, None, rest_a, new_b)
                return True
            for pb, nb in b_items:
                if nb == na:
                    continue
                rest_b = _moved(new_b, remove=pb)
                for pb2 in sorted(eligible_of[nb]):
                    new_a = _moved(rest_a, add=pb2)
                    if _better(geo, new_a, rest_b, before):
                        _apply(a, b, (pa, na), (pb, nb), pa2, pb2, new_a, rest_b)
                        return True
    return False


def _better(geo: Geometry, a: Counts, b: Counts, before: int) -> bool:
    if a not in geo.index and any(a):
        return False
    if b not in geo.index:
        return False
    after = (_stranded(geo, a) if any(a) else 0) + _stranded(geo, b)
    return after < before


def _apply(  # noqa: PLR0917 - private helper of _try
    a: GpuPlan,
    b: GpuPlan,
    from_a: tuple[int, str],
    from_b: tuple[int, str] | None,
    pa2: int,
    pb2: int | None,
    new_a: Counts,
    new_b: Counts,
) -> None:
    a.served[from_a[0]].remove(from_a[1])
    b.served.setdefault(pa2, []).append(from_a[1])
    if from_b is not None and pb2 is not None:
        b.served[from_b[0]].remove(from_b[1])
        a.served.setdefault(pb2, []).append(from_b[1])
    a.served = {p: names for p, names in a.served.items() if names}
    b.served = {p: names for p, names in b.served.items() if names}
    a.counts, b.counts = new_a, new_b
