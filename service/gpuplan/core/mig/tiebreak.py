"""Tie-breaks once the GPU count is fixed: strand less compute.

The packer minimises GPUs; among packings with that many GPUs the plan should strand
as little compute as it can (3g.40gb + 3g.40gb fills the memory with one compute slice
no GI can use), then use as few distinct layouts as it can. Two local moves, applied
until neither helps, each lowering (stranded compute, distinct layouts)
lexicographically, so they end (and a budget of evaluated moves bounds them):

- **upgrade**: serve a workload on a GPU with a richer eligible profile (one of two
  3-slice workloads on 4g.40gb instead of 3g.40gb);
- **swap**: exchange two workloads between two GPUs, each taking any profile eligible
  for it, or move one workload to another GPU. GPUs are compared by *signature*
  (layout and the workload classes it serves), so a fleet of identical GPUs costs one
  comparison, not thousands.

The moves are greedy: bench/mig/mig_packing.py measures them against the lexicographic
MILP optimum.
"""

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from gpuplan.core.mig.geometry import Counts, Geometry

_MAX_ROUNDS = 500
_MAX_TRIES = 300_000
"""Candidate moves evaluated in all, so that the search is bounded on any input."""


@dataclass
class GpuPlan:
    """One GPU: its counts and, per profile, the workloads its GIs serve."""

    counts: Counts
    served: dict[int, list[str]]


def reduce_stranding(
    geo: Geometry, eligible_of: Mapping[str, frozenset[int]], plans: list[GpuPlan]
) -> None:
    """Apply upgrades, then swaps, in place until none lowers (stranded, layouts)."""
    for plan in plans:
        _upgrade(geo, eligible_of, plan)
    budget = [_MAX_TRIES]
    for _ in range(_MAX_ROUNDS):
        if not _swap_once(geo, eligible_of, plans, budget):
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
    geo: Geometry,
    eligible_of: Mapping[str, frozenset[int]],
    plans: list[GpuPlan],
    budget: list[int],
) -> bool:
    """Apply one swap or move that lowers (stranded compute, distinct layouts)."""
    groups: dict[tuple[object, ...], list[int]] = {}
    histogram: Counter[Counts] = Counter()
    for i, plan in enumerate(plans):
        if any(plan.counts):
            histogram[plan.counts] += 1
            group = groups.setdefault(_signature(plan, eligible_of), [])
            if len(group) < 2:  # two of a kind are enough to try a swap within the kind
                group.append(i)
    # Stranding GPUs first: they are where the first criterion can still improve.
    firsts = sorted((g[0] for g in groups.values()), key=lambda i: -_stranded(geo, plans[i].counts))
    for a in firsts:
        for group in groups.values():
            b = group[0] if group[0] != a else (group[1] if len(group) > 1 else None)
            if b is not None and _try(geo, eligible_of, plans[a], plans[b], histogram, budget):
                return True
            if budget[0] <= 0:
                return False
    return False


def _try(  # noqa: PLR0917 - private helper of _swap_once
    geo: Geometry,
    eligible_of: Mapping[str, frozenset[int]],
    a: GpuPlan,
    b: GpuPlan,
    histogram: Counter[Counts],
    budget: list[int],
) -> bool:
    a_items = [(p, n) for p, names in a.served.items() for n in names]
    b_items = [(p, n) for p, names in b.served.items() for n in names]
    for pa, na in a_items:
        rest_a = _moved(a.counts, remove=pa)
        for pa2 in sorted(eligible_of[na]):
            # move na to b
            new_b = _moved(b.counts, add=pa2)
            budget[0] -= 1
            if _better(geo, histogram, (a.counts, b.counts), (rest_a, new_b)):
                _apply(a, b, (pa, na), None, pa2, None, rest_a, new_b)
                return True
            for pb, nb in b_items:
                if nb == na:
                    continue
                rest_b = _moved(new_b, remove=pb)
                for pb2 in sorted(eligible_of[nb]):
                    new_a = _moved(rest_a, add=pb2)
                    budget[0] -= 1
                    if _better(geo, histogram, (a.counts, b.counts), (new_a, rest_b)):
                        _apply(a, b, (pa, na), (pb, nb), pa2, pb2, new_a, rest_b)
                        return True
            if budget[0] <= 0:
                return False
    return False


def _better(
    geo: Geometry,
    histogram: Counter[Counts],
    old: tuple[Counts, Counts],
    new: tuple[Counts, Counts],
) -> bool:
    """Whether ``new`` layouts of two GPUs lower (stranded compute, distinct layouts)."""
    for counts in new:
        if any(counts) and counts not in geo.index:
            return False
    stranded = sum(_stranded(geo, c) for c in new) - sum(_stranded(geo, c) for c in old)
    if stranded != 0:
        return stranded < 0
    change: Counter[Counts] = Counter()
    for counts in old:
        change[counts] -= 1
    for counts in new:
        if any(counts):
            change[counts] += 1
    layouts = 0
    for counts, delta in change.items():
        before, after = histogram[counts], histogram[counts] + delta
        layouts += (after > 0) - (before > 0)
    return layouts < 0


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
