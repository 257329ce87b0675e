"""The error figures every accuracy bench reports, computed one way, and written one way."""

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"


def error_stats(errors: Sequence[float]) -> dict[str, Any]:
    """Signed relative errors (estimated / measured - 1) as the benches summarize them:
    how many, the median and worst absolute error, the worst one signed, the lowest (the
    side that ends in an out-of-memory error), and how many fall within each band a goal
    names. Empty: counts of 0 and figures of None."""
    absolute = [abs(e) for e in errors]
    worst = max(range(len(errors)), key=lambda i: absolute[i]) if errors else None
    return {
        "cases": len(errors),
        "median_abs_error": statistics.median(absolute) if errors else None,
        "max_abs_error": absolute[worst] if worst is not None else None,
        "worst_signed_error": errors[worst] if worst is not None else None,
        "most_low": min(errors) if errors else None,
        "low_by_more_than_5pct": sum(e < -0.05 for e in errors),
        "within_0_5pct": sum(e <= 0.005 for e in absolute),
        "within_1pct": sum(e <= 0.01 for e in absolute),
        "within_10pct": sum(e <= 0.10 for e in absolute),
        "within_15pct": sum(e <= 0.15 for e in absolute),
    }


def write_run(file_name: str, summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """bench/results/``file_name``: the torch the rows were measured with, their summary
    and the rows."""
    import torch  # only the accuracy runs call this, and they have torch

    RESULTS.mkdir(exist_ok=True)
    document = {"torch": torch.__version__, "summary": summary, "rows": rows}
    (RESULTS / file_name).write_text(json.dumps(document, indent=2) + "\n")
