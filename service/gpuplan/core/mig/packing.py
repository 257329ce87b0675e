"""Fewest GPUs for a demand of MIG workloads: an LP bound, a rounded packing, an exact search.

The input is a *geometry* (every valid layout of one GPU type) and *classes* of
workloads: each class is a set of profiles any of which serves it (a workload that
names a profile has one; one that gives memory and compute has every profile with
enough usable memory and compute) and a count. The method:

1. The LP relaxation (:mod:`gpuplan.core.mig.lp`) gives the lower bound
   ``ceil(LP)`` and a fractional packing.
2. Its rounded-down part is kept, and the residual (at most one GPU's worth per
   class) is packed by the exact search below, or greedily when that runs out of
   nodes.
3. When the result exceeds the bound and the demand is small (the bound is at most
   ``exact_limit`` GPUs), an exact search proves the true minimum: depth-first
   *bin completion*, where each GPU is filled starting from the hardest remaining
   workload, only maximal fillings are tried, and a demand proven infeasible for k
   GPUs is remembered. Lower bounds cut the search.

A result equal to the bound is optimal by proof; ``proven_optimal`` says whether the
answer is known to be the minimum (bound met or search completed). The searches share
a budget of search nodes (``node_budget``, about a millisecond each in CPython), so
that no request runs unbounded: when it runs out, the best packing found so far is
returned unproven. On the random instances of ``bench/mig/mig_packing.py`` the bound was
always met, so the search is the exception, not the rule.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.core.mig import lp
from gpuplan.core.mig.geometry import Geometry

Gpu = tuple[int, tuple[int, ...]]
"""``(layout index in the geometry, class served by each GI in profile order; -1 none)``."""


@dataclass(frozen=True)
class Packing:
    gpus: tuple[Gpu, ...]
    lower_bound: int
    lp_value: float
    proven_optimal: bool
    nodes: int


Filling = tuple[tuple[int, ...], int, tuple[int, ...]]
"""``(cover per class, layout index, class per GI)`` of one GPU."""


class _Budget(Exception):
    pass


class _Packer:
    def __init__(self, geo: Geometry, eligible: Sequence[frozenset[int]], node_budget: int) -> None:
        self.geo = geo
        self.table = geo.table
        self.m = len(eligible)
        profiles = self.table.profiles
        self.by_profile: list[list[int]] = [
            [j for j in range(self.m) if p in eligible[j]] for p in range(len(profiles))
        ]
        # Only layouts whose every GI can serve some class are useful.
        # The leanest layouts first, so that of equal fillings the one taking the fewest
        # slots is kept (one small workload gets a 1g, not a 7g).
        self.useful = sorted(
            (
                k
                for k, counts in enumerate(geo.layouts)
                if all(n == 0 or self.by_profile[p] for p, n in enumerate(counts))
            ),
            key=lambda k: (
                sum(n * profiles[p].memory_slices for p, n in enumerate(geo.layouts[k])),
                geo.compute[k],
                k,
            ),
        )
        self.layouts = [geo.layouts[k] for k in self.useful]
        self.budget = node_budget
        self.nodes = 0
        self.failed: dict[tuple[int, ...], int] = {}
        self.cache: dict[tuple[tuple[int, ...], int], list[Filling]] = {}
        # Per-class figures for the cheap bounds and the order of hardness.
        self.min_mem = [min(profiles[p].memory_slices for p in eligible[j]) for j in range(self.m)]
        self.min_compute = [
            min(profiles[p].compute_slices for p in eligible[j]) for j in range(self.m)
        ]
        self.order = sorted(
            range(self.m),
            key=lambda j: (-self.min_mem[j], -self.min_compute[j], len(eligible[j]), j),
        )
        groups: list[frozenset[int]] = [frozenset([j]) for j in range(self.m)]
        for size in sorted(set(self.min_mem)):
            groups.append(frozenset(j for j in range(self.m) if self.min_mem[j] >= size))
        self.groups = []
        for group in dict.fromkeys(groups):
            cap = max(
                (
                    sum(n for p, n in enumerate(c) if any(j in group for j in self.by_profile[p]))
                    for c in self.layouts
                ),
                default=0,
            )
            if cap:
                self.groups.append((tuple(sorted(group)), cap))

    def bound(self, r: Sequence[int]) -> int:
        t = self.table
        best = math.ceil(sum(r[j] * self.min_mem[j] for j in range(self.m)) / t.memory_slices)
        best = max(
            best,
            math.ceil(sum(r[j] * self.min_compute[j] for j in range(self.m)) / t.compute_slices),
        )
        for group, cap in self.groups:
            best = max(best, -(-sum(r[j] for j in group) // cap))
        return best

    # -- fillings of one GPU --------------------------------------------------------

    def fillings(self, r: Sequence[int], must: int) -> list[Filling]:
        """Undominated ``(cover, layout, assign)`` of one GPU that serve class ``must``.

        They depend on ``r`` only up to what one GPU can hold, so they are cached by
        the demand capped at ``max_instances``.
        """
        cap = self.table.max_instances
        key = (tuple(min(x, cap) for x in r), must)
        cached = self.cache.get(key)
        if cached is None:
            cached = self._fillings(key[0], must)
            self.cache[key] = cached
        return cached

    def _fillings(self, r: Sequence[int], must: int) -> list[Filling]:
        found: dict[tuple[int, ...], tuple[int, tuple[int, ...]]] = {}
        for k, counts in zip(self.useful, self.layouts, strict=True):
            if not any(n and must in self.by_profile[p] for p, n in enumerate(counts)):
                continue
            gis = [p for p, n in enumerate(counts) for _ in range(n)]
            self._assign(
                gis=gis, at=0, cap=list(r), cover=[0] * self.m, assign=[], layout=k, found=found
            )
        covers = [c for c in found if c[must] > 0]
        covers.sort(key=lambda c: -sum(c[j] * (self.min_mem[j] + 0.1) for j in range(self.m)))
        kept: list[tuple[int, ...]] = []
        for c in covers:
            if not any(all(a <= b for a, b in zip(c, o, strict=True)) for o in kept):
                kept.append(c)
        return [(c, *found[c]) for c in kept]

    def _assign(
        self,
        *,
        gis: list[int],
        at: int,
        cap: list[int],
        cover: list[int],
        assign: list[int],
        layout: int,
        found: dict[tuple[int, ...], tuple[int, tuple[int, ...]]],
    ) -> None:
        if at == len(gis):
            key = tuple(cover)
            if key not in found and any(key):
                found[key] = (layout, tuple(assign))
            return
        p = gis[at]
        options = [j for j in self.by_profile[p] if cap[j] > 0]
        # GIs of one profile come in a row: serve classes in non-decreasing order to
        # skip permutations of the same assignment.
        if at > 0 and gis[at - 1] == p and assign and assign[-1] >= 0:
            options = [j for j in options if j >= assign[-1]]
        if not options:
            assign.append(-1)
            self._assign(
                gis=gis, at=at + 1, cap=cap, cover=cover, assign=assign, layout=layout, found=found
            )
            assign.pop()
            return
        for j in options:
            cap[j] -= 1
            cover[j] += 1
            assign.append(j)
            self._assign(
                gis=gis, at=at + 1, cap=cap, cover=cover, assign=assign, layout=layout, found=found
            )
            assign.pop()
            cover[j] -= 1
            cap[j] += 1

    # -- exact search -----------------------------------------------------------------

    def search(self, r: tuple[int, ...], k: int) -> list[Gpu] | None:
        if not any(r):
            return []
        if k <= 0 or self.bound(r) > k or self.failed.get(r, -1) >= k:
            return None
        self.nodes += 1
        if self.nodes > self.budget:
            raise _Budget
        must = next(j for j in self.order if r[j] > 0)
        for cover, layout, assign in self.fillings(r, must):
            rest = self.search(tuple(a - b for a, b in zip(r, cover, strict=True)), k - 1)
            if rest is not None:
                return [(layout, assign), *rest]
        self.failed[r] = max(self.failed.get(r, -1), k)
        return None

    def minimum(self, r: tuple[int, ...], start: int, stop: int) -> list[Gpu] | None:
        """The fewest GPUs in ``[start, stop)`` that hold ``r``, or None if none does."""
        for k in range(max(start, self.bound(r)), stop):
            found = self.search(r, k)
            if found is not None:
                return found
        return None

    # -- greedy -----------------------------------------------------------------------

    def greedy(self, r: list[int], weights: Sequence[float]) -> list[Gpu]:
        """Repeatedly take the GPU filling of greatest weight (bulk-repeated)."""
        w = [weights[j] + 1e-3 * (self.min_mem[j] + 1) for j in range(self.m)]
        out: list[Gpu] = []
        while any(r):
            best: tuple[float, int, tuple[int, ...], tuple[int, ...]] | None = None
            for k, counts in zip(self.useful, self.layouts, strict=True):
                cap = list(r)
                cover = [0] * self.m
                assign = []
                value = 0.0
                for p, n in enumerate(counts):
                    for _ in range(n):
                        options = [j for j in self.by_profile[p] if cap[j] > 0]
                        if not options:
                            assign.append(-1)
                            continue
                        j = max(options, key=lambda i: (w[i], -i))
                        cap[j] -= 1
                        cover[j] += 1
                        value += w[j]
                        assign.append(j)
                if best is None or value > best[0] + 1e-12:
                    best = (value, k, tuple(cover), tuple(assign))
            assert best is not None
            _, k, taken, served = best
            times = min(r[j] // c for j, c in enumerate(taken) if c)
            out.extend([(k, served)] * times)
            r = [a - times * b for a, b in zip(r, taken, strict=True)]
        return out


def _rounded(packer: _Packer, relaxed: lp.LpResult, demand: Sequence[int]) -> list[Gpu]:
    """The LP's columns rounded down, plus the residual packed exactly (or greedily)."""
    gpus: list[Gpu] = []
    residual = list(demand)
    for column, x in zip(relaxed.columns, relaxed.x, strict=True):
        times = math.floor(x + 1e-9)
        if times <= 0:
            continue
        times = min([times, *(residual[j] // c for j, c in enumerate(column.cover) if c)])
        gpus.extend([(packer.useful[column.layout], column.assign)] * times)
        residual = [a - times * b for a, b in zip(residual, column.cover, strict=True)]
    rest = packer.greedy(list(residual), relaxed.duals)
    try:
        exact_rest = packer.minimum(tuple(residual), 0, len(rest))
        if exact_rest is not None:
            rest = exact_rest
    except _Budget:
        pass
    return gpus + rest


def _stranding(geo: Geometry, gpus: Sequence[Gpu]) -> int:
    """Stranded compute of a packing, its idle GIs dropped."""
    total = 0
    for layout, assign in gpus:
        used = [0] * len(geo.table.profiles)
        at = 0
        for p, n in enumerate(geo.layouts[layout]):
            for _ in range(n):
                if assign[at] >= 0:
                    used[p] += 1
                at += 1
        key = tuple(used)
        total += geo.stranded[geo.index[key]] if any(key) else 0
    return total


def pack(
    geo: Geometry,
    eligible: Sequence[frozenset[int]],
    demand: Sequence[int],
    *,
    exact_limit: int = 64,
    node_budget: int = 2_000,
) -> Packing:
    """Pack ``demand[j]`` workloads of each class ``j`` into as few GPUs as possible.

    ``eligible[j]`` is the non-empty set of profile indices that serve class ``j``.
    """
    if not any(demand):
        return Packing((), 0, 0.0, True, 0)
    packer = _Packer(geo, eligible, node_budget)
    relaxed = lp.solve(packer.layouts, packer.by_profile, demand)
    bound = max(math.ceil(relaxed.bound - 1e-6), packer.bound(demand), 1)
    # The same LP with a tiny cost per stranded compute slice (at most 7e-6 a GPU, so
    # it never outweighs a GPU below 100,000 GPUs) picks, among the optimal fractional
    # packings, one that strands little; its rounding is tried first.
    penalty = [1e-6 * geo.stranded[k] for k in packer.useful]
    weighted = lp.solve(packer.layouts, packer.by_profile, demand, penalty=penalty)
    candidates = [_rounded(packer, weighted, demand), _rounded(packer, relaxed, demand)]
    # The plain greedy on the whole demand sometimes beats the rounding.
    candidates.append(packer.greedy(list(demand), relaxed.duals))
    best = min(candidates, key=lambda c: (len(c), _stranding(geo, c)))
    proven = len(best) == bound
    if not proven and bound <= exact_limit:
        packer.failed.clear()
        try:
            found = packer.minimum(tuple(demand), bound, len(best))
            best = found if found is not None else best
            proven = True
        except _Budget:
            pass
    return Packing(tuple(best), bound, relaxed.value, proven, packer.nodes)
