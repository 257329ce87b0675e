"""The memory estimate's 90% intervals and the fit at 95% confidence they give
(core/memory/intervals.py, core/memory/ratios.py): nesting, the one-sided rule, the
finite-sample order statistic, widening for an unmeasured regime, and the percentile file
the bench wrote."""

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from bench.accuracy.intervals import RESIDUALS, RESULTS, residuals_toml

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.intervals import figure_intervals, quantile_table, table_factors
from gpuplan.core.memory.ratios import (
    QuantileTable,
    Ratio,
    build_quantiles,
    order_high,
    order_low,
)
from gpuplan.core.memory.schema import EstimateRequest, EstimateResponse
from tests.helpers import request_body


def _estimate(body: dict[str, Any]) -> EstimateResponse:
    return estimate(msgspec.convert(body, EstimateRequest), builtin_catalog())


def test_an_estimate_carries_nested_intervals_and_requires_the_devices_high_end() -> None:
    r = _estimate({**request_body("llama-3.1-8b", mode="training", sequence_length=2048),
                   "gpu": "h100-sxm5-80gb"})  # fmt: skip
    i = r.intervals
    assert set(i) == {"peak_bytes", "reserved_bytes", "device_bytes"}
    assert i["peak_bytes"].low <= r.peak_bytes <= i["peak_bytes"].high
    assert i["reserved_bytes"].low <= r.reserved_bytes <= i["reserved_bytes"].high
    assert i["device_bytes"].low <= r.device_bytes <= i["device_bytes"].high
    cache = r.reserved_bytes - r.peak_bytes
    outside = r.device_bytes - r.reserved_bytes
    assert i["reserved_bytes"].high >= i["peak_bytes"].high + cache
    assert i["device_bytes"].high >= i["reserved_bytes"].high + outside
    assert r.required_bytes == i["device_bytes"].high
    assert r.headroom_fraction == round(r.required_bytes / r.device_bytes - 1, 4)
    assert r.fit is not None
    assert r.fit.required_bytes == r.required_bytes


def test_fits_means_the_high_end_fits() -> None:
    """A job whose device bytes fit a GPU but whose 95% high end does not is no fit."""
    catalog = builtin_catalog()
    base = request_body("llama-2-7b", mode="inference", precision="bf16", batch_size=1)
    for seq in range(4096, 131072, 1024):
        r = _estimate({**base, "workload": {**base["workload"], "sequence_length": seq},
                       "gpu": "l40s-48gb"})  # fmt: skip
        usable = catalog.get("l40s-48gb").usable_memory_bytes
        if r.device_bytes <= usable < r.required_bytes:
            assert r.fit is not None
            assert not r.fit.fits
            return
    pytest.fail("no sequence length put the device bytes within and the high end beyond")


def test_the_percentiles_are_the_finite_sample_order_statistics() -> None:
    """Of n = 19 ratios 1..19: the 95% end is the ceil(20 * 0.95) = 19th, the 5% end the
    floor(20 * 0.05) = 1st; of 39, the 38th and the 2nd; of 18 neither exists."""
    xs = [float(i) for i in range(19, 0, -1)]
    assert order_high(xs) == 19.0
    assert order_low(xs) == 1.0
    ys = [float(i) for i in range(1, 40)]
    assert order_high(ys) == 38.0
    assert order_low(ys) == 2.0
    assert order_high(xs[:18]) is None
    assert order_low(xs[:18]) is None


def _table(peak: list[float], training_peak: list[float] | None = None) -> QuantileTable:
    regime = {"mode": "inference", "split": "single", "quantization": "none"}
    cases = [Ratio(source=f"s{i}", measure="peak_bytes", regime=regime, ratio=r)
             for i, r in enumerate(peak)]  # fmt: skip
    cases += [
        Ratio(source="t", measure="peak_bytes", regime={**regime, "mode": "training"}, ratio=r)
        for r in training_peak or []
    ]
    return build_quantiles(cases, ["mode", "split", "quantization"], written_by="", method="")


REGIME = {"mode": "inference", "split": "single", "quantization": "none"}


def test_a_figures_order_statistics_set_its_ends_and_a_measure_no_case_has_widens() -> None:
    t = _table([1.0 + i / 100 for i in range(39)])
    low, high = table_factors(t, REGIME)["peak_bytes"]
    assert high == pytest.approx(1.37)  # the 38th of 1.00..1.38
    assert low == pytest.approx(1.0)  # the 2nd (1.01) is above the estimate: clipped to 1
    # device_bytes has no case: the pooled ends, widened once (no case of that measure).
    d_high = table_factors(t, REGIME)["device_bytes"][1]
    assert d_high > high


def test_a_regime_that_ran_high_does_not_lower_the_interval() -> None:
    """40 training cases all 30% over-estimated (ratio 0.77) beside 39 exact-to-38%-low
    inference cases: the training job's high end stays the figure's, and never below 1."""
    t = _table([1.0 + i / 100 for i in range(39)], [0.77] * 40)
    inference = table_factors(t, REGIME)["peak_bytes"][1]
    training = table_factors(t, {**REGIME, "mode": "training"})["peak_bytes"][1]
    assert training >= 1.0
    assert training == pytest.approx(order_high([1.0 + i / 100 for i in range(39)] + [0.77] * 40))
    assert inference > training  # inference ran low: its regime pushes its end up
    everything_high = _table([0.7] * 39)
    assert table_factors(everything_high, REGIME)["peak_bytes"][1] == 1.0


def test_the_intervals_nest_and_hold_the_estimate() -> None:
    f = table_factors(quantile_table(), REGIME)
    i = figure_intervals(1000, 1200, 1500, f)
    assert i["peak_bytes"][0] <= 1000 <= i["peak_bytes"][1]
    assert i["reserved_bytes"][0] <= 1200 <= i["reserved_bytes"][1]
    assert i["device_bytes"][0] <= 1500 <= i["device_bytes"][1]
    assert i["reserved_bytes"][1] >= i["peak_bytes"][1] + 200
    assert i["device_bytes"][1] >= i["reserved_bytes"][1] + 300


def test_a_quantization_no_case_measured_widens_the_interval() -> None:
    def headroom(quant: str) -> float:
        body = request_body("llama-2-7b", mode="inference", sequence_length=2048)
        body["workload"]["weight_quantization"] = quant
        return _estimate(body).headroom_fraction

    measured = {g.name for g in quantile_table().groups if g.axis == "quantization"}
    assert "int4" in measured
    assert "nf4" not in measured
    assert headroom("nf4") > headroom("int4")


def test_the_rule_of_thumb_keeps_the_flat_headroom() -> None:
    r = _estimate({"model": {"parameters": 7_000_000_000},
                   "workload": {"mode": "inference"}, "method": "rule_of_thumb"})  # fmt: skip
    assert r.headroom_fraction == 0.2
    assert r.intervals == {}


def test_the_residual_file_is_the_committed_runs() -> None:
    """core/memory/data/residuals.toml is what bench/accuracy/intervals.py writes from its
    committed results: refreshing one without the other fails here."""
    committed = json.loads(Path(RESULTS).read_text(encoding="utf-8"))
    assert Path(RESIDUALS).read_text(encoding="utf-8") == residuals_toml(committed["rows"])
    assert quantile_table().cases == committed["cases"]
    assert committed["fitted_constants"] == 0
