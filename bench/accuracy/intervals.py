"""The memory estimate's residuals by regime, and how well its intervals hold.

    PYTHONPATH=service:. python -m bench.accuracy.intervals           # the table
    PYTHONPATH=service:. python -m bench.accuracy.intervals --write   # also the data file
                                                                      # and the results

Every counted published case (bench/accuracy/published.toml: not pending, not excluded)
whose figure is a peak, a reserve or what nvidia-smi shows is estimated; its residual is
log(estimated / measured). No constant of the estimator is fitted to these cases, so the
residuals are out-of-sample as they stand: the leave-one-source-out figure is the direct
one (0 fitted constants). ``--write`` puts them, grouped by regime
(:func:`gpuplan.core.memory.regime.memory_regime` and the measured figure), into
``core/memory/data/residuals.toml``, which the estimate's intervals are drawn from.

The intervals are judged honestly: each case's 90% interval is drawn from the other
sources' residuals only, and the report says how often its high end is at or above the
measure (target: 90%), by how much it overshoots (median; target at most 15%), and how
often the point estimate is more than 5% low (target: at most 10% of cases).
"""

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from bench.accuracy.published import cases, figure, request_of
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.intervals import COVERAGE, FIGURES, figure_intervals, memory_spread
from gpuplan.core.memory.regime import memory_regime
from gpuplan.core.uncertainty import Residual, ResidualTable, bounds, build_table, tables_toml

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "memory_intervals.json"
RESIDUALS = ROOT / "service" / "gpuplan" / "core" / "memory" / "data" / "residuals.toml"

FIGURE_OF = {
    "max_memory_allocated": "peak_bytes",
    "max_memory_reserved": "reserved_bytes",
    "nvidia_smi": "device_bytes",
    # optimum's allocated + outside PyTorch: the device's figure without the allocator's
    # cache, the nearest of the three.
    "allocated_plus_outside": "device_bytes",
}
"""The measures whose residuals the intervals use, and the figure each stands for
(``vllm_model_weights`` checks the weights alone, not a peak)."""

AXES = ("measure", "mode", "split", "quantization")


def rows() -> list[dict[str, Any]]:
    catalog = builtin_catalog()
    out = []
    for case in cases():
        if case.get("pending") or case.get("excluded") or case["measure"] not in FIGURE_OF:
            continue
        request = request_of(case)
        result = estimate(request, catalog)
        estimated = figure(result, case["measure"])
        p = request.workload.parallelism
        out.append(
            {
                "id": case["id"],
                "source": case["source_id"],
                "measure": FIGURE_OF[case["measure"]],
                **memory_regime(request.workload),
                "gpus": p.data * p.tensor * p.pipeline * p.context,
                "measured": case["bytes"],
                "estimated": estimated,
                "error": estimated / case["bytes"] - 1,
                # The three figures, to nest the intervals as the service does; a case
                # measured as optimum's allocated + outside compares its own figure.
                "figures": (result.peak_bytes, result.reserved_bytes, result.device_bytes),
            }
        )
    return out


def table(chosen: list[dict[str, Any]]) -> ResidualTable:
    residuals = [
        Residual(
            source=r["source"],
            gpus=r["gpus"],
            regime={a: r[a] for a in AXES},
            log_error=math.log1p(r["error"]),
        )
        for r in chosen
    ]
    return build_table(
        residuals,
        AXES,
        measure="memory",
        written_by="python -m bench.accuracy.intervals --write",
        method="the estimator's residuals on the counted published cases (none fitted to them)",
    )


def judge(chosen: list[dict[str, Any]]) -> dict[str, Any]:
    """Each case's interval from the other sources' residuals; how the intervals hold."""
    covered, overshoot, low = 0, [], 0
    for r in chosen:
        others = [o for o in chosen if o["source"] != r["source"]]
        regime = {a: r[a] for a in AXES if a != "measure"}
        t = table(others)
        f = {name: bounds(memory_spread(t, name, regime), COVERAGE) for name in FIGURES}
        peak, reserved, device = r["figures"]
        nested = figure_intervals(peak, reserved, device, f)[r["measure"]]
        # As a factor of the case's own figure (optimum's differs from device_bytes).
        index = FIGURES.index(r["measure"])
        lo, hi = (end / r["figures"][index] for end in nested)
        high = r["estimated"] * hi
        r["interval_low"], r["interval_high"] = r["estimated"] * lo, high
        r["covered"] = high >= r["measured"]
        covered += r["covered"]
        overshoot.append(high / r["measured"] - 1)
        low += r["error"] < -0.05
    n = len(chosen)
    return {
        "coverage": COVERAGE,
        "cases": n,
        "high_at_or_above_measure": covered,
        "share_covered": covered / n,
        "median_overshoot": statistics.median(overshoot),
        "point_more_than_5pct_low": low,
        "share_more_than_5pct_low": low / n,
    }


def evaluate() -> dict[str, Any]:
    chosen = rows()
    errors = [r["error"] for r in chosen]
    result = {
        "fitted_constants": 0,
        "sources": len({r["source"] for r in chosen}),
        "cases": len(chosen),
        "median_abs_error": statistics.median(abs(e) for e in errors),
        "median_error": statistics.median(errors),
        "worst_low": min(errors),
        "worst_high": max(errors),
        "intervals": judge(chosen),
        "rows": chosen,
    }
    return result


def residuals_toml(chosen: list[dict[str, Any]]) -> str:
    return tables_toml(
        [table(chosen)],
        [
            "Residuals of the memory estimate on the published real-GPU cases: what its",
            "intervals and required_bytes are drawn from (core/memory/intervals.py). Written by",
            "`python -m bench.accuracy.intervals --write`; do not edit. A residual is",
            "log(estimated / measured); no constant of the estimator is fitted to these cases.",
        ],
    )


def report(result: dict[str, Any]) -> str:
    lines = [f"{'case':<52} {'figure':<15} {'error':>7} {'90% high / measured':>20}"]
    for r in result["rows"]:
        lines.append(
            f"{r['id']:<52} {r['measure']:<15} {r['error']:>+7.1%} "
            f"{r['interval_high'] / r['measured']:>20.3f}"
        )
    i = result["intervals"]
    lines += [
        "",
        f"{result['cases']} cases, {result['sources']} sources, "
        f"{result['fitted_constants']} fitted constants (leave-one-source-out = direct)",
        f"median abs error {result['median_abs_error']:.1%}, median signed "
        f"{result['median_error']:+.1%}, worst low {result['worst_low']:+.1%}, worst high "
        f"{result['worst_high']:+.1%}",
        f"90% intervals from the other sources: high at or above the measure on "
        f"{i['high_at_or_above_measure']} of {i['cases']} ({i['share_covered']:.0%}), median "
        f"overshoot {i['median_overshoot']:+.1%}; point more than 5% low on "
        f"{i['point_more_than_5pct_low']} ({i['share_more_than_5pct_low']:.0%})",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="write the residuals and results")
    args = parser.parse_args()
    result = evaluate()
    print(report(result))
    if args.write:
        RESIDUALS.write_text(residuals_toml(result["rows"]), encoding="utf-8")
        RESULTS.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {RESIDUALS} and {RESULTS}")


if __name__ == "__main__":
    main()
