"""The SLO searches of a recommendation, counted in probes of the queueing model.

    python -m bench.speed.slo_search

A serving request with ``inference.slo`` asks the queueing model (``core/perf/queueing.py``)
two questions of every plan: the fewest replicas whose share of the rate keeps the p95
targets (``slo_replicas``, for every plan the search times), and the highest rate one
replica sustains within them (``max_rate``, for the candidates a response shows). Each
probe solves the replica's occupancy and its p95s; probes are most of such an answer's
time. Counts, unlike times, do not move with the shared machine's load.

For each request of ``requests.toml``'s ``slo_search`` set, over the whole catalog:

- the replica search's probes, and those of the doubling and bisection it replaced
  (reimplemented here, and held to the same counts);
- the rate within the SLO: its probes as the response computes them (after the replica
  search, whose verdicts on either side of the turn decide the probes outside them), on
  a fresh table, and those of the eight halvings of the rate it replaced (of the figures
  above 0); and how far below the turn each figure is, against a bisection of 60 steps
  on a fresh table.

Writes ``bench/results/slo_search.json``.
"""

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from bench.requests import request_set
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.perf import queueing
from gpuplan.core.perf.queueing import StepTable, saturation_rate, slo_margin
from gpuplan.core.recommend import RecommendRequest, recommend, serving
from gpuplan.core.recommend.schema import InferenceVolume

RESULTS = Path(__file__).resolve().parents[1] / "results"

Probe = Callable[[int], bool]


def doubling_then_bisection(kept: Probe, needed: int, most: int) -> int:
    """The replica search before ``fewest_servers``: double from ``needed`` until a count
    keeps the targets (the bound when none does), then bisect."""
    if kept(needed):
        return needed
    low, high = needed, needed
    while high < most:
        low, high = high, min(high * 2, most)
        if kept(high):
            break
    else:
        return high
    while high - low > 1:
        mid = (low + high) // 2
        if kept(mid):
            high = mid
        else:
            low = mid
    return high


def _bisect(kept: Callable[[float], bool], low: float, high: float, steps: int) -> float:
    """``steps`` halvings of the rate between one that keeps the targets and one that
    misses them; the keeping end."""
    for _ in range(steps):
        mid = (low + high) / 2
        if kept(mid):
            low = mid
        else:
            high = mid
    return low


def halving(kept: Callable[[float], bool], sat: float) -> float:
    """``max_rate`` before: eight halvings of the rate from a thousandth of saturation."""
    if not kept(sat * 1e-3):
        return 0.0
    return _bisect(kept, sat * 1e-3, sat, 8)


def turn(kept: Callable[[float], bool], low: float, sat: float) -> float:
    """The turn, to a bisection of 60 steps above a rate that keeps the targets."""
    return _bisect(kept, low, sat, 60)


class Counter:
    """Counts the probes of ``slo_margin`` while a recommendation runs, and keeps each
    search's table and question to replay."""

    def __init__(self) -> None:
        self.probes = 0
        self.searches: list[tuple[StepTable, float, int, InferenceVolume, int]] = []
        self.rates: list[tuple[StepTable, float | None, float | None, float, int]] = []

    def margin(
        self, steps: StepTable, rate: float, ttft: float | None, tpot: float | None
    ) -> tuple[bool, float]:
        self.probes += 1
        return slo_margin(steps, rate, ttft, tpot)

    def replicas(self, steps: StepTable, rate: float, needed: int, iv: InferenceVolume) -> int:
        before = self.probes
        n = _slo_replicas(steps, rate, needed, iv)
        self.searches.append((steps, rate, needed, iv, self.probes - before))
        assert n >= needed
        return n

    def max_rate(self, steps: StepTable, ttft: float | None, tpot: float | None) -> float:
        before = self.probes
        rate = _max_rate(steps, ttft, tpot)
        self.rates.append((steps, ttft, tpot, rate, self.probes - before))
        return rate


_slo_replicas = serving.slo_replicas
_max_rate = queueing.max_rate


def measure(name: str, body: dict[str, Any]) -> dict[str, Any]:
    counter = Counter()
    saved = (serving.slo_margin, queueing.slo_margin, serving.slo_replicas, serving.max_rate)
    serving.slo_margin = queueing.slo_margin = counter.margin
    serving.slo_replicas, serving.max_rate = counter.replicas, counter.max_rate
    try:
        recommend(msgspec.convert(body, RecommendRequest), builtin_catalog())
    finally:
        serving.slo_margin, queueing.slo_margin, serving.slo_replicas, serving.max_rate = saved
    replicas_before = 0
    for steps, rate, needed, iv, _ in counter.searches:
        slo = iv.slo
        assert slo is not None
        fresh = StepTable(steps._step, steps.sched)

        def kept(n: int, fresh: StepTable = fresh, rate: float = rate, slo: Any = slo) -> bool:
            nonlocal replicas_before
            replicas_before += 1
            return slo_margin(fresh, rate / n, slo.ttft_p95_s, slo.tpot_p95_s)[0]

        most = needed * serving.MAX_SLO_REPLICAS_FACTOR
        want = _slo_replicas(StepTable(steps._step, steps.sched), rate, needed, iv)
        assert doubling_then_bisection(kept, needed, most) == want, name
    fresh_probes, halving_probes, low_share, old_low_share = 0, 0, [], []
    for steps, ttft, tpot, rate, _ in counter.rates:
        fresh = StepTable(steps._step, steps.sched)
        before = counter.probes
        sat = saturation_rate(fresh)
        queueing.slo_margin = counter.margin
        try:
            assert _max_rate(fresh, ttft, tpot) == rate, name  # the memo changes no figure
        finally:
            queueing.slo_margin = slo_margin
        fresh_probes += counter.probes - before
        if rate <= 0:
            continue

        def within(r: float, fresh: StepTable = fresh, ttft: Any = ttft, tpot: Any = tpot) -> bool:
            return slo_margin(fresh, r, ttft, tpot)[0]

        def counted(r: float, within: Callable[[float], bool] = within) -> bool:
            nonlocal halving_probes
            halving_probes += 1
            return within(r)

        true = turn(within, rate, sat)
        low_share.append(1 - rate / true)
        old_low_share.append(1 - halving(counted, sat) / true)
    return {
        "case": name,
        "replica_searches": len(counter.searches),
        "replica_probes": sum(s[4] for s in counter.searches),
        "replica_probes_doubling_bisection": replicas_before,
        "max_rate_calls": len(counter.rates),
        "max_rate_probes": sum(r[4] for r in counter.rates),
        "max_rate_probes_fresh_table": fresh_probes,
        "halving_probes": halving_probes,
        "max_rate_worst_below_turn": round(max(low_share, default=0.0), 5),
        "halving_worst_below_turn": round(max(old_low_share, default=0.0), 5),
        "halving_over_1pct_below": sum(s > 0.01 for s in old_low_share),
        "figures": len(low_share),
    }


def run() -> dict[str, Any]:
    rows = [measure(name, body) for name, body in request_set("slo_search").items()]
    for r in rows:
        print(
            f"{r['case']:<62} replicas {r['replica_probes']:4d} probes (doubling and "
            f"bisection {r['replica_probes_doubling_bisection']:4d}); rate within the SLO "
            f"{r['max_rate_probes']:4d} (fresh {r['max_rate_probes_fresh_table']:4d}), "
            f"worst {r['max_rate_worst_below_turn']:.2%} below the turn "
            f"(halving {r['halving_worst_below_turn']:.2%})"
        )
    total = {
        key: sum(r[key] for r in rows)
        for key in (
            "replica_probes",
            "replica_probes_doubling_bisection",
            "max_rate_probes",
            "max_rate_probes_fresh_table",
            "halving_probes",
            "halving_over_1pct_below",
            "figures",
        )
    }
    total["max_rate_worst_below_turn"] = max(r["max_rate_worst_below_turn"] for r in rows)
    total["halving_worst_below_turn"] = max(r["halving_worst_below_turn"] for r in rows)
    assert math.isfinite(total["halving_worst_below_turn"])
    return {"rows": rows, "total": total}


def main() -> None:
    result = run()
    (RESULTS / "slo_search.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
