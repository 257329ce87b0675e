"""The LP relaxation: its bound is valid at every iteration and tight when it finishes."""

import random

from gpuplan.core.mig import lp
from gpuplan.core.mig.geometry import geometry
from gpuplan.core.mig.load import builtin_tables


def test_bound_is_valid_when_cut_short_and_exact_when_finished() -> None:
    rng = random.Random(3)
    for table in builtin_tables():
        layouts = list(geometry(table).layouts)
        n = len(table.profiles)
        classes = [
            frozenset(rng.sample(range(n), rng.randint(1, 3))) for _ in range(rng.randint(2, 6))
        ]
        eligible = [[j for j, c in enumerate(classes) if p in c] for p in range(n)]
        demand = [rng.randint(1, 40) for _ in classes]
        full = lp.solve(layouts, eligible, demand)
        assert full.value / (1 + 1e-6) <= full.bound <= full.value
        # The LP optimum covers the demand exactly with the patterns it returns.
        covered = [
            sum(x * col.cover[j] for col, x in zip(full.columns, full.x, strict=True))
            for j in range(len(classes))
        ]
        assert all(abs(c - d) < 1e-6 for c, d in zip(covered, demand, strict=True))
        for iterations in range(6):
            cut = lp.solve(layouts, eligible, demand, max_iterations=iterations)
            assert cut.bound <= full.value + 1e-9
            assert cut.value >= full.value - 1e-9
