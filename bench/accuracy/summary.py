"""Median and worst error of the estimator and the tracer against measured peaks.

    python -m bench.accuracy.summary

Reads the committed results of the accuracy grid (bench/results/accuracy.json, real CPU
steps; ``python -m bench.accuracy.run``) and of its traced column
(bench/results/accuracy_traced.json; ``python -m bench.accuracy.trace_column``). Nothing
is re-measured here: a real step of the whole grid takes minutes, so the suite reports
the committed runs and says which torch they came from.
"""

import json
from pathlib import Path
from typing import Any

from bench.accuracy.stats import error_stats

RESULTS = Path(__file__).resolve().parent.parent / "results"


def run() -> dict[str, Any]:
    grid = json.loads((RESULTS / "accuracy.json").read_text())
    rows = grid["rows"]
    analytic = error_stats([r["error"] for r in rows])
    analytic["worst_case"] = max(rows, key=lambda r: abs(r["error"]))["case"]
    by_mode: dict[str, list[float]] = {}
    from bench.accuracy.cases import GRID

    modes = {c.name: c.mode for c in GRID}
    for r in rows:
        by_mode.setdefault(modes.get(r["case"], "unknown"), []).append(r["error"])
    result: dict[str, Any] = {
        "benchmark": "accuracy",
        "torch": grid["torch"],
        "analytic": analytic,
        "analytic_by_mode": {m: error_stats(e) for m, e in sorted(by_mode.items())},
    }
    traced_file = RESULTS / "accuracy_traced.json"
    if traced_file.exists():
        traced = json.loads(traced_file.read_text())
        ok = [r for r in traced["rows"] if r["traced_error"] is not None]
        result["traced"] = error_stats([r["traced_error"] for r in ok])
        result["traced"]["worst_case"] = max(ok, key=lambda r: abs(r["traced_error"]))["case"]
        result["traced"]["not_traced"] = len(traced["rows"]) - len(ok)
        # the analytic estimator on exactly the traced cases, for a like-for-like read
        names = {r["case"] for r in ok}
        result["analytic_on_traced_cases"] = error_stats(
            [r["error"] for r in rows if r["case"] in names]
        )
    published_file = RESULTS / "published.json"
    if published_file.exists():
        result["published"] = json.loads(published_file.read_text())["summary"]
    return result


if __name__ == "__main__":
    print(json.dumps(run(), indent=1))
