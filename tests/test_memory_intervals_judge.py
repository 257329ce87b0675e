"""How bench/accuracy/intervals.py judges the memory intervals: the shares issue 33's
targets are stated in, leave-one-source-out percentiles that never see the case's own
source, and the committed figures recomputed from the committed rows."""

import copy
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from bench.accuracy.intervals import RESULTS, judge, judged


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


def _case(source: str, measured: int, estimated: int) -> dict[str, Any]:
    return {
        "source": source,
        "corpus_regime": "r",
        "measure": "peak_bytes",
        "mode": "inference",
        "split": "single",
        "quantization": "none",
        "measured": measured,
        "estimated": estimated,
        "error": estimated / measured - 1,
        "figures": (estimated, estimated, estimated),
    }


def test_leave_one_source_out_never_uses_the_cases_own_source() -> None:
    """Source "x"'s five far-low cases (measured twice the estimate) would cover themselves
    in-sample (the 30th of 30 ratios is theirs), but left out, the 25 exact cases of other
    sources set their high end at the estimate, and none is covered."""
    rows = [_case(f"s{i}", 1000, 1000) for i in range(25)]
    rows += [_case("x", 2000, 1000) for _ in range(5)]
    cv = judge(rows)
    assert cv["high_at_or_above_measure"] == 25
    assert all(not r["cv_covered"] for r in rows if r["source"] == "x")
    assert all(r["cv_interval_high"] == 1000 for r in rows if r["source"] == "x")
    ins = judge(rows, in_sample=True)
    assert ins["high_at_or_above_measure"] == 30


def test_the_committed_figures_recompute_from_the_committed_rows() -> None:
    committed = json.loads(Path(RESULTS).read_text(encoding="utf-8"))
    rows = copy.deepcopy(committed["rows"])
    for r in rows:
        r["figures"] = tuple(r["figures"])
    assert judge(rows) == committed["intervals"]
    assert judge(rows, in_sample=True) == committed["in_sample_intervals"]
    for mine, theirs in zip(rows, committed["rows"], strict=True):
        assert mine["cv_interval_high"] == pytest.approx(theirs["cv_interval_high"])
    i = committed["intervals"]
    covered = [r["cv_interval_high"] >= r["measured"] for r in committed["rows"]]
    assert i["share_covered"] == sum(covered) / len(covered)
    assert i["median_overshoot"] == pytest.approx(
        statistics.median(r["cv_interval_high"] / r["measured"] - 1 for r in committed["rows"])
    )
