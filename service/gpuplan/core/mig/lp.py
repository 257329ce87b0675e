"""The LP relaxation of MIG packing, solved by column generation.

Packing demand into GPUs is a cutting-stock problem: a *pattern* is what one GPU
holds (how many workloads of each class), and the question is how few patterns
cover the demand. Its LP relaxation (Gilmore and Gomory) is the classic strong lower
bound, and its rounded-down solution is most of a good packing. The patterns are
generated on demand: given the duals ``pi`` of the demand rows, the best pattern puts
each GI of a layout on the class it serves with the highest ``pi``, so pricing is a
pass over the enumerated layouts. The master LP has one row per class (rarely more
than a dozen), so a dense revised simplex with an explicit basis inverse is exact
enough and fast in pure Python.
"""

from collections.abc import Sequence
from dataclasses import dataclass

_EPS = 1e-9


@dataclass(frozen=True)
class Column:
    layout: int
    """Index of the layout in the geometry."""

    cover: tuple[int, ...]
    """Workloads of each class this GPU holds."""

    assign: tuple[int, ...]
    """For each GI of the layout in profile order, the class it serves (-1: none)."""


@dataclass(frozen=True)
class LpResult:
    value: float
    columns: tuple[Column, ...]
    x: tuple[float, ...]
    duals: tuple[float, ...]
    bound: float
    """A proven lower bound on the LP optimum, valid even when the iterations are cut
    short: the best Farley bound ``demand·duals / max(1, best price)`` seen (the duals
    scaled down by the best pattern's price are feasible for the full LP's dual)."""


def _best_classes(
    eligible: Sequence[Sequence[int]], weights: Sequence[float]
) -> list[tuple[int, float]]:
    """For each profile, the class of greatest positive weight it serves (-1: none)."""
    best = []
    for options in eligible:
        top, top_w = -1, _EPS
        for j in options:
            if weights[j] > top_w:
                top, top_w = j, weights[j]
        best.append((top, top_w))
    return best


def price(
    layouts: Sequence[Sequence[int]],
    eligible: Sequence[Sequence[int]],
    weights: Sequence[float],
    classes: int,
    penalty: Sequence[float] | None = None,
) -> tuple[float, Column | None]:
    """The layout and assignment of greatest total weight (uncapped), with its value.

    ``eligible[p]`` lists the classes a GI of profile ``p`` can serve. With a
    ``penalty`` per layout (its extra cost), only layouts whose every GI serves a class
    are priced, so that the penalty is that of the pattern itself (the layouts are
    closed under dropping a GI, so the pattern without an idle GI is priced too).
    """
    best_class = _best_classes(eligible, weights)
    best_value, best = 0.0, None
    for k, counts in enumerate(layouts):
        value = 0.0
        for p, n in enumerate(counts):
            if n:
                if penalty is not None and best_class[p][0] < 0:
                    value = -1.0
                    break
                value += n * best_class[p][1]
        if penalty is not None and value > 0:
            value -= penalty[k]
        if value > best_value + _EPS:
            best_value, best = value, k
    if best is None:
        return 0.0, None
    cover = [0] * classes
    assign = []
    for p, n in enumerate(layouts[best]):
        for _ in range(n):
            j = best_class[p][0]
            assign.append(j)
            if j >= 0:
                cover[j] += 1
    return best_value, Column(best, tuple(cover), tuple(assign))


def solve(
    layouts: Sequence[Sequence[int]],
    eligible: Sequence[Sequence[int]],
    demand: Sequence[int],
    max_iterations: int = 2000,
    penalty: Sequence[float] | None = None,
) -> LpResult:
    """Minimise GPUs in the LP sense: min sum(x) s.t. sum(x_c * cover_c) = demand, x >= 0.

    Every class must have an eligible profile (callers drop the others first).
    Equality rows are safe because patterns are closed under dropping a workload,
    and the pricing drops workloads of classes whose dual is not positive.
    """
    m = len(demand)
    if m == 0:
        return LpResult(0.0, (), (), (), 0.0)
    # Start from single-class patterns: each class alone on its best layout.
    basis: list[Column] = []
    for j in range(m):
        weights = [1.0 if i == j else 0.0 for i in range(m)]
        _, column = price(layouts, eligible, weights, m, penalty)
        assert column is not None, "class without an eligible profile"
        # keep only class j on it
        assign = tuple(a if a == j else -1 for a in column.assign)
        cover = tuple(column.cover[j] if i == j else 0 for i in range(m))
        basis.append(Column(column.layout, cover, assign))
    inverse = [[(1.0 / basis[i].cover[i]) if i == r else 0.0 for i in range(m)] for r in range(m)]
    x = [demand[i] / basis[i].cover[i] for i in range(m)]
    duals = [0.0] * m
    bound = 0.0
    for _ in range(max_iterations):
        # duals = c_B^T B^-1; every GPU costs 1, plus its layout's penalty if any
        costs = [1.0 + (penalty[c.layout] if penalty is not None else 0.0) for c in basis]
        duals = [sum(costs[r] * inverse[r][i] for r in range(m)) for i in range(m)]
        value, column = price(layouts, eligible, duals, m, penalty)
        dual_value = sum(d * p for d, p in zip(demand, duals, strict=True))
        bound = max(bound, dual_value / max(1.0, value))
        # Rounding can make a basic column look improving by a hair: that is optimal too.
        if column is None or value <= 1.0 + 1e-7 or column in basis:
            break
        u = [sum(inverse[r][i] * column.cover[i] for i in range(m)) for r in range(m)]
        leave, ratio = -1, float("inf")
        for r in range(m):
            if u[r] > 1e-12:
                t = x[r] / u[r]
                if t < ratio - 1e-12:
                    leave, ratio = r, t
        if leave < 0:  # cannot happen: the LP is bounded below by 0
            break
        pivot = u[leave]
        row = [v / pivot for v in inverse[leave]]
        for r in range(m):
            if r != leave and u[r] != 0.0:
                factor = u[r]
                inverse[r] = [a - factor * b for a, b in zip(inverse[r], row, strict=True)]
                x[r] -= factor * ratio
        inverse[leave] = row
        x[leave] = ratio
        basis[leave] = column
    x = [max(0.0, v) for v in x]
    # The Farley bound of the last pricing is the LP value itself up to the pricing
    # tolerance (1e-7 relative), which callers' ceil(bound - 1e-6) absorbs.
    return LpResult(sum(x), tuple(basis), tuple(x), tuple(duals), bound)
