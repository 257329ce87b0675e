"""Intervals on every predicted figure: the spread of a regime's cross-validated
residuals (core/uncertainty), each candidate's intervals and their reason, the plan
file's pessimistic check, and the residual file the bench wrote."""

import json
import math
from typing import Any

import msgspec
import pytest
from bench.published.cv import RESULTS, residuals_toml
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.ci import CiPlan, check
from gpuplan.core.perf.residuals import residual_tables
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.uncertainty import (
    ResidualGroup,
    ResidualTable,
    bounds,
    interval,
    spread,
    z_score,
)
from tests.helpers import LLAMA_TRAINING, request_body

TABLE = ResidualTable(
    measure="tokens_per_s_per_gpu",
    written_by="test",
    method="test",
    runs=20,
    sources=5,
    max_gpus=512,
    mean_log_error=0.0,
    sd_log_error=0.2,
    groups=[
        ResidualGroup(
            axis="framework", name="fsdp2", runs=16, mean_log_error=0.1, sd_log_error=0.1
        ),
        ResidualGroup(axis="scale", name="2-8 GPUs", runs=4, mean_log_error=0.0, sd_log_error=0.3),
    ],
)


def test_a_regime_is_shrunk_towards_the_pooled_residuals_and_keeps_its_widest_axis() -> None:
    s = spread(TABLE, {"framework": "fsdp2", "scale": "2-8 GPUs"})
    # fsdp2: mean (16*0.1 + 4*0)/20 = 0.08; sd sqrt((15*0.01 + 4*0.04)/19) = 0.1277
    # scale: mean 0; sd sqrt((3*0.09 + 4*0.04)/7) = 0.2478 -> the widest is kept
    assert s.mean_log_error == pytest.approx(0.04)
    assert s.sd_log_error == pytest.approx(math.sqrt((3 * 0.09 + 4 * 0.04) / 7))
    assert s.widened == []


def test_an_unmeasured_regime_takes_the_pooled_spread_and_outside_reasons_widen_it() -> None:
    alone = spread(TABLE, {"framework": "megatron"})
    assert alone.sd_log_error == pytest.approx(0.2)
    wider = spread(TABLE, {"framework": "megatron"}, ["no published run of framework megatron"])
    assert wider.sd_log_error == pytest.approx(math.sqrt(2) * 0.2)
    assert wider.widened == ["no published run of framework megatron"]


def test_an_interval_is_the_measured_figures_quantiles() -> None:
    s = spread(TABLE, {"framework": "megatron"})
    z = z_score(0.8)
    assert z == pytest.approx(1.2816, abs=1e-4)
    low, high = bounds(s, 0.8)
    # predicted / measured = exp(r), r ~ N(0, 0.2): measured = predicted * exp(-r)
    assert low == pytest.approx(math.exp(-z * 0.2))
    assert high == pytest.approx(math.exp(z * 0.2))
    rate = interval(100.0, s, 0.8)
    time = interval(10.0, s, 0.8, inverse=True)  # a time is work / rate
    assert (rate.low, rate.high) == pytest.approx((100 * low, 100 * high))
    assert (time.low, time.high) == pytest.approx((10 / high, 10 / low))
    with pytest.raises(ValueError, match="coverage"):
        z_score(1.0)


def _top(body: dict[str, Any]) -> Any:
    response = recommend(msgspec.convert(body, RecommendRequest), builtin_catalog())
    return response.recommendations


def test_a_training_candidate_carries_an_interval_on_each_figure() -> None:
    body = {**LLAMA_TRAINING, "constraints": {"include": ["h100-sxm5-80gb"]}}
    (top, *_) = _top(body)
    assert top.fits
    assert set(top.intervals) == {"throughput", "time_hours", "cost_usd", "energy_kwh", "mfu"}
    for name, value in (
        ("throughput", top.throughput.value),
        ("time_hours", top.time_hours),
        ("cost_usd", top.cost_usd),
        ("mfu", top.mfu),
    ):
        i = top.intervals[name]
        assert i.low < value < i.high, name
    # The time is the work over the rate: its interval is the rate's, inverted.
    rate, time = top.intervals["throughput"], top.intervals["time_hours"]
    assert time.low / top.time_hours == pytest.approx(top.throughput.value / rate.high, rel=1e-3)
    said = [r for r in top.reasons if "80% likely" in r]
    assert len(said) == 1
    assert said[0].startswith(f"{top.count} x h100-sxm5-80gb: ")


def test_a_gpu_no_published_run_measured_gets_a_wider_interval() -> None:
    def width(gpu: str) -> tuple[float, list[str]]:
        body = {**LLAMA_TRAINING, "constraints": {"include": [gpu], "gpu_counts": [8]}}
        (c, *_) = _top(body)
        i = c.intervals["time_hours"]
        return i.high / i.low, c.reasons

    measured, _ = width("h100-sxm5-80gb")
    unmeasured, reasons = width("mi300x-192gb")
    assert unmeasured > measured
    assert any("widened: no published run of generation" in r for r in reasons)


def test_a_serving_candidate_carries_latency_intervals() -> None:
    body = request_body(
        "llama-2-7b", mode="inference", sequence_length=1024, precision="bf16", max_new_tokens=256
    )
    body["constraints"] = {"include": ["h100-sxm5-80gb"]}
    body["inference"] = {"requests_per_second": 5}
    (top, *_) = _top(body)
    assert top.latency is not None
    for name, value in (
        ("time_to_first_token_s", top.latency.time_to_first_token_s),
        ("time_per_output_token_s", top.latency.time_per_output_token_s),
    ):
        assert top.intervals[name].low < value < top.intervals[name].high
    assert "time_hours" not in top.intervals  # the period is given, not predicted


def test_a_plan_can_check_its_time_at_the_pessimistic_end() -> None:
    catalog = builtin_catalog()
    base = {**LLAMA_TRAINING, "constraints": {"include": ["a100-sxm4-80gb"]}}
    probe = check(msgspec.convert({**base, "targets": {"max_time_hours": 1e6}}, CiPlan), catalog)
    rec = probe.recommendations[0]
    assert rec.time_hours is not None
    limit = (rec.time_hours + rec.intervals["time_hours"].high) / 2  # between the two
    targets = {"max_time_hours": limit}
    estimate = check(msgspec.convert({**base, "targets": targets}, CiPlan), catalog)
    pessimistic = check(
        msgspec.convert({**base, "targets": {**targets, "check_at": "pessimistic"}}, CiPlan),
        catalog,
    )
    assert estimate.verdicts[0].status == "pass"
    (verdict,) = pessimistic.verdicts
    assert verdict.status == "fail"
    assert verdict.actual == pytest.approx(rec.intervals["time_hours"].high)
    assert "pessimistic end of its 80% interval" in verdict.reason


def test_a_bad_check_at_is_refused_naming_it(client: TestClient[Litestar]) -> None:
    body = {**LLAMA_TRAINING, "targets": {"max_time_hours": 10, "check_at": "worst"}}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 422
    assert [e["path"] for e in response.json()["errors"]] == ["$.targets.check_at"]


def test_the_residual_file_is_the_committed_cross_validations() -> None:
    """core/perf/data/residuals.toml is what bench/published/cv.py writes from its own
    committed results: refreshing one without the other fails here."""
    from gpuplan.core.perf import residuals

    committed = json.loads(RESULTS.read_text(encoding="utf-8"))
    text = residuals.__file__.rsplit("/", 1)[0] + "/data/residuals.toml"
    with open(text, encoding="utf-8") as handle:
        assert handle.read() == residuals_toml(committed)
    tables = residual_tables()
    assert tables["tokens_per_s_per_gpu"].runs == sum(
        1 for r in committed["rows"] if r["kind"] == "training"
    )
