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
    semi_deviations,
    spread,
    z_score,
)
from tests.helpers import LLAMA_TRAINING, request_body


def _group(axis: str, name: str, runs: int, mean: float, below: float, above: float) -> Any:
    return ResidualGroup(
        axis=axis,
        name=name,
        runs=runs,
        mean_log_error=mean,
        sd_log_error=(below + above) / 2,
        sd_below_log_error=below,
        sd_above_log_error=above,
    )


TABLE = ResidualTable(
    measure="tokens_per_s_per_gpu",
    written_by="test",
    method="test",
    runs=20,
    sources=5,
    max_gpus=512,
    mean_log_error=0.0,
    sd_log_error=0.2,
    sd_below_log_error=0.2,
    sd_above_log_error=0.2,
    groups=[
        _group("framework", "fsdp2", 16, 0.1, 0.1, 0.1),
        _group("scale", "2-8 GPUs", 4, 0.0, 0.3, 0.1),
    ],
)


def test_a_regime_is_shrunk_towards_the_pooled_residuals_and_its_axes_combined() -> None:
    s = spread(TABLE, {"framework": "fsdp2", "scale": "2-8 GPUs"})
    # fsdp2: mean (16*0.1 + 4*0)/20 = 0.08; below sqrt((15*0.01 + 4*0.04)/19)
    # scale: mean 0; below sqrt((3*0.09 + 4*0.04)/7), above sqrt((3*0.01 + 4*0.04)/7)
    fsdp2 = (15 * 0.01 + 4 * 0.04) / 19
    scale_below, scale_above = (3 * 0.09 + 4 * 0.04) / 7, (3 * 0.01 + 4 * 0.04) / 7
    assert s.mean_log_error == pytest.approx(0.04)
    assert s.sd_below_log_error == pytest.approx(math.sqrt((fsdp2 + scale_below) / 2))
    assert s.sd_above_log_error == pytest.approx(math.sqrt((fsdp2 + scale_above) / 2))
    assert s.widened == []


def test_semi_deviations_split_the_tails() -> None:
    below, above = semi_deviations([0.0, 0.0, 0.0, 0.4])  # one run far high
    assert above > below > 0
    assert semi_deviations([0.3]) == (0.0, 0.0)
    # For a symmetric sample both equal the root mean square deviation, doubled in variance.
    assert semi_deviations([-0.1, 0.1]) == pytest.approx(
        (0.1 * math.sqrt(2) / math.sqrt(2) * math.sqrt(1), 0.1)
    )


def test_an_unmeasured_regime_takes_the_pooled_spread_and_outside_reasons_widen_it() -> None:
    alone = spread(TABLE, {"framework": "megatron"})
    assert alone.sd_below_log_error == pytest.approx(0.2)
    wider = spread(TABLE, {"framework": "megatron"}, ["no published run of framework megatron"])
    assert wider.sd_below_log_error == pytest.approx(math.sqrt(2) * 0.2)
    assert wider.sd_above_log_error == pytest.approx(math.sqrt(2) * 0.2)
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


def test_the_high_end_follows_the_model_running_low() -> None:
    """A regime whose residuals fall far below their mean (the model running low) raises
    the high end of the measured figure; one that runs far high lowers the low end."""
    runs_low = _group("framework", "ddp", 40, 0.0, 0.4, 0.05)
    table = msgspec.structs.replace(TABLE, groups=[runs_low])
    low, high = bounds(spread(table, {"framework": "ddp"}), 0.8)
    assert high - 1 > 1 - low


def _top(body: dict[str, Any]) -> Any:
    response = recommend(msgspec.convert(body, RecommendRequest), builtin_catalog())
    return response.recommendations


def _served_at_a_rate() -> Any:
    """The best plan for Llama-2-7B on H100s at 5 requests/s (1,024 tokens in, 256 out)."""
    body = request_body(
        "llama-2-7b", mode="inference", sequence_length=1024, precision="bf16", max_new_tokens=256
    )
    body["constraints"] = {"include": ["h100-sxm5-80gb"]}
    body["inference"] = {"requests_per_second": 5}
    (top, *_) = _top(body)
    return top


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
    """No published serving run is on a Blackwell part (every catalog generation has a
    training run since the MLPerf rows brought H200 and MI300X): a B200 replica's
    latency interval is widened for it, an H100's is not."""

    def served(gpu: str) -> tuple[float, list[str]]:
        body = request_body(
            "llama-2-7b",
            mode="inference",
            sequence_length=1024,
            precision="bf16",
            max_new_tokens=256,
        )
        body["constraints"] = {"include": [gpu]}
        body["inference"] = {"requests_per_second": 5}
        (c, *_) = _top(body)
        i = c.intervals["time_per_output_token_s"]
        return i.high / i.low, c.reasons

    measured, reasons = served("h100-sxm5-80gb")
    unmeasured, widened = served("b200-180gb")
    assert unmeasured > measured
    assert not any("widened: no published run of generation" in r for r in reasons)
    assert any("widened: no published run of generation blackwell" in r for r in widened)


def test_a_precision_no_published_run_measured_gets_a_wider_interval() -> None:
    def width(precision: str) -> tuple[float, list[str]]:
        workload = {**LLAMA_TRAINING["workload"], "precision": precision}
        body = {**LLAMA_TRAINING, "workload": workload}
        body["constraints"] = {"include": ["h100-sxm5-80gb"], "gpu_counts": [8]}
        (c, *_) = _top(body)
        i = c.intervals["time_hours"]
        return i.high / i.low, c.reasons

    measured, _ = width("bf16")
    unmeasured, reasons = width("fp32")
    assert unmeasured > measured
    assert any("widened: no published run of precision fp32" in r for r in reasons)


def test_a_serving_candidate_carries_latency_intervals() -> None:
    top = _served_at_a_rate()
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


def test_the_queue_residual_file_is_the_committed_simulation() -> None:
    """core/perf/data/queue_residuals.toml is what bench/serving/queue_sim.py writes from
    its own committed comparison (bench/results/queue_model.json)."""
    from bench.serving.queue_sim import QUEUE_RESIDUALS
    from bench.serving.queue_sim import RESULTS as QUEUE_RESULTS
    from bench.serving.queue_sim import residuals_toml as queue_toml

    from gpuplan.core.perf.residuals import QUEUE_TPOT, QUEUE_TTFT, queue_residual_tables

    rows = json.loads(QUEUE_RESULTS.read_text(encoding="utf-8"))["rows"]
    assert QUEUE_RESIDUALS.read_text(encoding="utf-8") == queue_toml(rows)
    tables = queue_residual_tables()
    assert tables[QUEUE_TTFT].runs == tables[QUEUE_TPOT].runs == len(rows)
    loads = {g.name for g in tables[QUEUE_TTFT].groups if g.axis == "load"}
    assert loads == {"up to 50%", "50-80%", "80-90%", "over 90%"}


def test_a_p50_under_load_carries_the_queueing_models_error_too() -> None:
    """A plan under a request rate gives its p50s intervals from two independent errors:
    the step time's (the published serving runs') and the queueing model's at the
    replica's load (its simulation's). Their log errors add: means add, spreads in
    quadrature, so the p50's interval is wider than the step time's alone would make it,
    and is exactly the combined spread's."""
    from gpuplan.core.perf.residuals import (
        QUEUE_TTFT,
        SERVING,
        load_regime,
        queue_residual_tables,
    )
    from gpuplan.core.recommend.intervals import COVERAGE, _spread, scale_regime
    from gpuplan.core.uncertainty import combined

    top = _served_at_a_rate()
    assert top.latency is not None
    assert top.latency.under_load is not None
    under = top.latency.under_load
    p50 = under.time_to_first_token_s.p50
    regime = {
        "generation": "hopper",
        "scale": scale_regime(top.count),
        "precision": "bf16",
        "framework": "serving",
        "measure": "ttft_s",
        "bound": "compute",
    }
    step = _spread(residual_tables()[SERVING], regime, top.count)
    queue = spread(queue_residual_tables()[QUEUE_TTFT], {"load": load_regime(under.utilization)})
    both = combined(step, queue)
    assert both.sd_below_log_error > step.sd_below_log_error
    assert both.sd_above_log_error > step.sd_above_log_error
    alone = interval(p50, step, COVERAGE)
    got = top.intervals["ttft_p50_s"]
    want = interval(p50, both, COVERAGE)
    assert got.low == pytest.approx(want.low, rel=1e-3)
    assert got.high == pytest.approx(want.high, rel=1e-3)
    assert math.log(got.high / got.low) > math.log(alone.high / alone.low)


def test_load_regimes_cut_at_the_simulated_loads() -> None:
    from gpuplan.core.perf.residuals import load_regime

    assert [load_regime(x) for x in (0.1, 0.5, 0.7, 0.8, 0.9, 0.95)] == [
        "up to 50%",
        "up to 50%",
        "50-80%",
        "50-80%",
        "80-90%",
        "over 90%",
    ]
