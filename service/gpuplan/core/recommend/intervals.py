"""Each candidate's intervals: where its measured figures are 80% likely to fall.

The spread comes from the speed model's leave-one-source-out residuals in the
candidate's regimes (:mod:`gpuplan.core.perf.residuals`): its framework (``serving`` for
inference), GPU generation, scale, precision and, for serving, the measure. A regime no
published run covers, or more GPUs than the largest run, widens it. Figures that vary as
one over the throughput (time, cost, energy) take its interval inverted. The p50s under
a request rate add the queueing model's error at the replica's load (its residuals
against a simulation of the scheduler) to the step time's.
"""

from functools import cache

import msgspec

from gpuplan.core.perf.efficiency import generation
from gpuplan.core.perf.residuals import (
    QUEUE_TPOT,
    QUEUE_TTFT,
    SERVING,
    TRAINING,
    load_regime,
    queue_residual_tables,
    residual_tables,
)
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.option_record import Option
from gpuplan.core.recommend.schema import IntervalFigure
from gpuplan.core.recommend.training import default_framework
from gpuplan.core.uncertainty import (
    Interval,
    ResidualTable,
    Spread,
    combined,
    interval,
    spread,
)

COVERAGE = 0.8
"""The intervals' coverage: an 80% prediction interval (10th to 90th percentile)."""


def scale_regime(count: int) -> str:
    """The scale regime of a plan of ``count`` GPUs (``bench/published/cv.py`` groups the
    published runs' residuals by the same rule)."""
    if count <= 1:
        return "1 GPU"
    if count <= 8:
        return "2-8 GPUs"
    if count <= 128:
        return "9-128 GPUs"
    return "over 128 GPUs"


@cache
def _known(measure: str) -> frozenset[tuple[str, str]]:
    """The (axis, name) of every group of the shipped table of ``measure`` (memoized: a
    function of the data file alone, read for every candidate's every spread)."""
    return frozenset((g.axis, g.name) for g in residual_tables()[measure].groups)


def _spread(
    table: ResidualTable,
    regime: dict[str, str],
    count: int,
    spreads: dict[tuple[object, ...], Spread] | None = None,
) -> Spread:
    """The spread of ``regime`` at ``count`` GPUs. ``spreads``: the ones already computed
    for the request's candidates (a spread is a function of the table, the regime and
    what lies outside the corpus; many candidates share all three). Its figures depend
    on what lies outside only through how many reasons widen it (the reasons differ
    where the count passes the largest run), so candidates alike in that share them."""
    known = _known(table.measure) if residual_tables().get(table.measure) is table else None
    if known is None:
        known = frozenset((g.axis, g.name) for g in table.groups)
    outside = [
        f"no published run of {axis} {name}"
        for axis, name in regime.items()
        if axis in ("framework", "generation", "precision") and (axis, name) not in known
    ]
    if count > table.max_gpus:
        outside.append(f"{count} GPUs, past the largest published run ({table.max_gpus})")
    if spreads is None:
        return spread(table, regime, outside)
    key = (id(table), *regime.items(), *outside)
    hit = spreads.get(key)
    if hit is None:
        alike = ("widened", id(table), *regime.items(), len(outside))
        figures = spreads.get(alike)
        if figures is None:
            hit = spreads[alike] = spread(table, regime, outside)
        else:
            hit = msgspec.structs.replace(figures, widened=list(outside))
        spreads[key] = hit
    return hit


@cache
def _queue_spread(measure: str, load: str) -> Spread:
    """The queueing model's spread for ``measure`` at ``load`` (memoized: a function of
    the shipped data file alone)."""
    return spread(queue_residual_tables()[measure], {"load": load})


def candidate_intervals(
    p: Option, job: Job, spreads: dict[tuple[object, ...], Spread] | None = None
) -> tuple[dict[IntervalFigure, Interval], list[str]]:
    """The 80% intervals of ``p``'s predicted figures, and why they were widened.
    ``spreads``: a memo of the spreads, for the candidates of one request."""
    if not p.fits or p.throughput is None:
        return {}, []
    tables = residual_tables()
    base = {
        "generation": generation(p.gpu).name,
        "scale": scale_regime(p.count),
        "precision": job.workload.precision,
    }
    out: dict[IntervalFigure, Interval] = {}
    if job.kind == "training":
        framework = default_framework(p.layout) if p.layout is not None else "ddp"
        regime = {"measure": TRAINING, "framework": framework, **base, "bound": "compute"}
        rate = _spread(tables[TRAINING], regime, p.count, spreads)
        widened = list(rate.widened)
    else:
        table = tables[SERVING]
        serving = {**base, "framework": "serving"}
        rate = _spread(
            table,
            {**serving, "measure": "output_tokens_per_s", "bound": "memory"},
            p.count,
            spreads,
        )
        widened = list(rate.widened)
        if p.latency is not None:
            ttft = _spread(
                table, {**serving, "measure": "ttft_s", "bound": "compute"}, p.count, spreads
            )
            tpot = _spread(
                table, {**serving, "measure": "tpot_s", "bound": "memory"}, p.count, spreads
            )
            # A latency's residual is log(predicted / measured) of the latency itself.
            out["time_to_first_token_s"] = interval(p.latency.time_to_first_token_s, ttft, COVERAGE)
            out["time_per_output_token_s"] = interval(
                p.latency.time_per_output_token_s, tpot, COVERAGE
            )
            under = p.latency.under_load
            if under is not None:
                # The p50s under load carry the step time's error (the same residuals)
                # and the queueing model's, at the replica's load, from its simulation.
                load = load_regime(under.utilization)
                out["ttft_p50_s"] = interval(
                    under.time_to_first_token_s.p50,
                    combined(ttft, _queue_spread(QUEUE_TTFT, load)),
                    COVERAGE,
                )
                out["tpot_p50_s"] = interval(
                    under.time_per_output_token_s.p50,
                    combined(tpot, _queue_spread(QUEUE_TPOT, load)),
                    COVERAGE,
                )
    out["throughput"] = interval(p.throughput.value, rate, COVERAGE)
    if p.mfu is not None:
        out["mfu"] = interval(p.mfu, rate, COVERAGE)
    # Training: the time is the work over the rate. Serving: the period is fixed, and a
    # slower replica means more of them, so cost and energy grow as one over the rate.
    if job.kind == "training" and p.time_hours is not None:
        out["time_hours"] = interval(p.time_hours, rate, COVERAGE, inverse=True)
    if p.cost_usd is not None and (job.kind == "training" or job.requests_per_second):
        out["cost_usd"] = interval(p.cost_usd, rate, COVERAGE, inverse=True)
    if p.energy_kwh is not None and (job.kind == "training" or job.requests_per_second):
        out["energy_kwh"] = interval(p.energy_kwh, rate, COVERAGE, inverse=True)
    return {k: _rounded(v) for k, v in out.items()}, widened


def _rounded(i: Interval) -> Interval:
    """Four significant figures: an interval is not more precise than that."""
    return Interval(low=float(f"{i.low:.4g}"), high=float(f"{i.high:.4g}"))


def _days(hours: float) -> str:
    return f"{hours / 24:,.1f} days" if hours >= 48 else f"{hours:,.1f} h"


def interval_reason(
    p: Option, intervals: dict[IntervalFigure, Interval], widened: list[str]
) -> str | None:
    """The intervals in words: "8 x h100-sxm5-80gb: 12.3 days, 80% likely 10.9-14.1"."""
    where = f"{p.count} x {p.gpu.id}"
    if "time_hours" in intervals and p.time_hours is not None:
        t = intervals["time_hours"]
        text = (
            f"{where}: {_days(p.time_hours)}, {COVERAGE:.0%} likely "
            f"{_days(t.low)} to {_days(t.high)}"
        )
    elif "time_per_output_token_s" in intervals and p.latency is not None:
        t = intervals["time_per_output_token_s"]
        text = (
            f"{where}: {p.latency.time_per_output_token_s * 1e3:.1f} ms per output token, "
            f"{COVERAGE:.0%} likely {t.low * 1e3:.1f}-{t.high * 1e3:.1f} ms"
        )
    else:
        return None
    if widened:
        text += f" (widened: {'; '.join(widened)})"
    return text
