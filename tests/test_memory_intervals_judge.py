"""How bench/accuracy/intervals.py judges intervals: the shares issue 33's targets are
stated in, and the comparison construction's leave-one-source-out rule."""

from typing import Any

import pytest
from bench.accuracy.intervals import empirical_alternative, judged, quantile


def _row(source: str, error: float, high: float) -> dict[str, Any]:
    measured = 100.0
    return {
        "source": source,
        "measure": "peak_bytes",
        "error": error,
        "measured": measured,
        "estimated": measured * (1 + error),
        "cv_interval_high": high,
        "cv_covered": high >= measured,
    }


def test_judged_counts_the_low_points_the_covered_cases_and_the_overshoot() -> None:
    rows = [_row("a", -0.10, 95.0), _row("b", 0.0, 110.0), _row("c", 0.02, 130.0)]
    j = judged(rows, "cv")
    assert j["cases"] == 3
    assert j["sources"] == 3
    assert j["point_more_than_5pct_low"] == 1
    assert j["high_at_or_above_measure"] == 2
    assert j["median_overshoot"] == pytest.approx(0.10)
    assert j["median_abs_error"] == pytest.approx(0.02)


def test_quantile_is_linear_between_order_statistics() -> None:
    assert quantile([0.0, 1.0, 2.0, 3.0], 0.5) == pytest.approx(1.5)
    assert quantile([5.0], 0.95) == 5.0


def test_the_comparison_construction_never_uses_the_cases_own_source() -> None:
    """Source "x"'s far-low residuals must not cover its own case: only the others'
    residuals (all exact) set its high end, so it stays uncovered."""
    others = [_row(f"s{i}", 0.0, 0.0) for i in range(12)]
    own = [_row("x", -0.5, 0.0) for _ in range(5)]
    a = empirical_alternative(others + own)
    assert a["cases"] == 17
    assert a["share_covered"] == pytest.approx(12 / 17)
