"""The memory estimate's 90% intervals and the fit at 95% confidence they give
(core/memory/intervals.py): nesting, the one-sided rule, widening for an unmeasured
regime, and the residual file the bench wrote."""

import json
import math
from pathlib import Path
from typing import Any

import msgspec
import pytest
from bench.accuracy.intervals import RESIDUALS, RESULTS, residuals_toml

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.intervals import COVERAGE, memory_spread, residual_table
from gpuplan.core.memory.schema import EstimateRequest, EstimateResponse
from gpuplan.core.uncertainty import ResidualGroup, bounds, z_score
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


def test_a_regime_that_ran_high_does_not_lower_the_interval() -> None:
    table = residual_table()
    high = ResidualGroup(axis="mode", name="training", runs=50, mean_log_error=0.3,
                         sd_log_error=0.1, sd_below_log_error=0.1, sd_above_log_error=0.1)  # fmt: skip
    ran_high = msgspec.structs.replace(
        table, groups=[g for g in table.groups if g.axis != "mode"] + [high]
    )
    regime = {"mode": "training", "split": "single", "quantization": "none"}
    s = memory_spread(ran_high, "device_bytes", regime)
    assert s.mean_log_error == 0.0  # the corpus's over-estimates are not credited
    _, up = bounds(s, COVERAGE)
    assert up == pytest.approx(math.exp(z_score(COVERAGE) * s.sd_below_log_error))
    assert up > 1


def test_a_quantization_no_case_measured_widens_the_interval() -> None:
    def headroom(quant: str) -> float:
        body = request_body("llama-2-7b", mode="inference", sequence_length=2048)
        body["workload"]["weight_quantization"] = quant
        return _estimate(body).headroom_fraction

    measured = {g.name for g in residual_table().groups if g.axis == "quantization"}
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
    assert residual_table().runs == committed["cases"]
    assert committed["fitted_constants"] == 0
