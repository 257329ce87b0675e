"""Latency under load: the queueing model of the engine (core/perf/queueing.py), the
SLO search it drives, and the fields that carry it through the API."""

import itertools
import json
import math
import re
from collections.abc import Callable
from typing import Any

import pytest
from bench.serving.queue_sim import simulate
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.ci import CiPlan, check
from gpuplan.core.convert import convert
from gpuplan.core.perf.queueing import (
    MAX_RATE_TOLERANCE,
    LoadPoint,
    Scheduler,
    StepTable,
    _occupancy,
    chunk_jump_share,
    keeps,
    max_rate,
    rate_at_occupancy,
    saturation_rate,
    slo_margin,
    under_load,
    within,
)
from gpuplan.core.recommend.schema import InferenceVolume
from gpuplan.core.recommend.serving import MAX_SLO_REPLICAS_FACTOR, slo_replicas
from tests.helpers import problem_at

PATH = "/v1/recommendations"


def _step(n: float, p: float) -> float:
    """A roofline-shaped step: weight reads bound it until the GEMM rows outgrow them."""
    return 0.004 + 0.00002 * n + max(0.01, 0.00003 * (n + p))


SCHED = Scheduler(cap=64, budget=2048, prompt_tokens=512, output_tokens=64)


def test_percentiles_grow_with_the_rate_and_order() -> None:
    steps = StepTable(_step, SCHED)
    sat = saturation_rate(steps)
    previous = None
    for load in (0.1, 0.5, 0.8, 0.95):
        point = under_load(steps, load * sat)
        for p in (point.ttft_s, point.tpot_s):
            assert p.p50 <= p.p95 <= p.p99
        if previous is not None:
            assert point.ttft_s.p95 >= previous.ttft_s.p95
            assert point.tpot_s.p95 >= previous.tpot_s.p95
            assert point.mean_in_flight > previous.mean_in_flight
        previous = point
    past = under_load(steps, 1.01 * sat)
    assert math.isinf(past.ttft_s.p95)
    assert past.wait_probability == 1.0


def _compute_bound(n: float, p: float) -> float:
    """A step that grows with every token it carries, decodes and prompt alike."""
    return 0.002 + 0.00005 * (n + p)


def _replica(name: str) -> tuple[Any, Scheduler]:
    from bench.serving.queue_sim import CASES, replica_of

    return replica_of(CASES[name])


STEPS: dict[str, Callable[[], tuple[Any, Scheduler]]] = {
    "weights-bound": lambda: (_step, SCHED),
    "compute-bound": lambda: (_compute_bound, SCHED),
    "8b on an l4": lambda: _replica("llama-3.1-8b, 1 x l4, 4096 in / 128 out, cap 32"),
    "8b on an h100": lambda: _replica("llama-3.1-8b, 1 x h100, 1024 in / 256 out"),
    # A prompt as long as the budget: beside any decode it takes two chunks, and each
    # sequence in flight takes a token of the room (the step function jumps there).
    "prompt fills the budget": lambda: (
        _step,
        Scheduler(cap=8, budget=512, prompt_tokens=512, output_tokens=64),
    ),
}


@pytest.mark.parametrize("name", list(STEPS))
def test_no_percentile_falls_as_the_rate_rises(name: str) -> None:
    """A work-conserving queue waits longer as more arrives, and the searches over rates
    and replicas (``max_rate``, ``slo_replicas``) bisect on it and take verdicts from
    rates on either side (``keeps``): no TTFT or TPOT percentile may fall as the rate
    rises, on a fine grid up to saturation, for toy steps, the engine steps of two plans,
    and a scheduler whose prompt fills the budget. Before the waits paired a tail with
    the other wait's mean continuously (``_quantile``), the p50 TTFT of the 8B plan on an
    L4 fell from 8.0 s to 5.3 s at 89% load; before the occupancy was solved exactly
    (``_occupancy``: to a gap of 1% of a sequence), it fell by up to 0.3% here and there
    as the rate rose."""
    step, sched = STEPS[name]()
    steps = StepTable(step, sched)
    sat = saturation_rate(steps)
    points = [under_load(steps, sat * i / 500) for i in range(1, 500)]
    for low, high in itertools.pairwise(points):
        for kind in ("ttft_s", "tpot_s"):
            before, after = getattr(low, kind), getattr(high, kind)
            for q in ("p50", "p95", "p99"):
                assert getattr(after, q) >= getattr(before, q), (kind, q, high.rate_per_s)


def test_model_against_the_simulation_at_half_load() -> None:
    """The committed grid (bench/results/queue_model.json) is the full check; this is
    one point of it on a small step function, seeded."""
    steps = StepTable(_step, SCHED)
    rate = 0.5 * saturation_rate(steps)
    model = under_load(steps, rate)
    sim = simulate(_step, SCHED, rate, requests=3000, seed=3)
    ttft = sorted(sim["ttft_s"])
    tpot = sorted(sim["tpot_s"])
    assert abs(model.ttft_s.p50 / ttft[len(ttft) // 2] - 1) < 0.3
    assert abs(model.tpot_s.p50 / tpot[len(tpot) // 2] - 1) < 0.2
    assert abs(model.tpot_s.p95 / tpot[int(len(tpot) * 0.95)] - 1) < 0.3


def test_max_rate_keeps_the_targets() -> None:
    steps = StepTable(_step, SCHED)
    loose = under_load(steps, 0.5 * saturation_rate(steps))
    target = loose.ttft_s.p95
    rate = max_rate(steps, target, None)
    assert 0 < rate < saturation_rate(steps)
    assert within(under_load(steps, rate), target, None)
    assert not within(under_load(steps, rate * 1.1), target, None)
    assert max_rate(steps, 1e-6, None) == 0.0


@pytest.mark.parametrize("name", list(STEPS))
@pytest.mark.parametrize("load", [0.03, 0.3, 0.9])
def test_max_rate_is_within_its_tolerance_of_the_turn(name: str, load: float) -> None:
    """The rate within the SLO keeps the targets and one a tolerance and a half above it
    misses them, wherever the turn lies: halving the rate itself, eight times from
    saturation, left a turn at 3% of saturation known to a 256th of saturation (13% of
    the figure on a plan of the catalog)."""
    step, sched = STEPS[name]()
    steps = StepTable(step, sched)
    point = under_load(steps, load * saturation_rate(steps))
    for targets in ((point.ttft_s.p95, None), (None, point.tpot_s.p95)):
        rate = max_rate(steps, *targets)
        fresh = StepTable(step, sched)  # no verdicts remembered from the search
        assert slo_margin(fresh, rate, *targets)[0]
        assert not slo_margin(fresh, rate * (1 + 1.5 * MAX_RATE_TOLERANCE), *targets)[0]


@pytest.mark.parametrize("name", list(STEPS))
def test_the_replica_search_finds_the_fewest_that_keep_the_targets(name: str) -> None:
    """``slo_replicas`` against every count in turn, for targets that bind at many loads
    (the secant's guess is only a guide: the answer is the least count that keeps the
    targets, next to one that misses), and the verdicts it leaves behind agree with a
    fresh evaluation on both sides of the turn."""
    step, sched = STEPS[name]()
    sat = saturation_rate(StepTable(step, sched))
    rate = 40 * sat
    for load in (0.02, 0.1, 0.5, 0.8, 0.97):
        point = under_load(StepTable(step, sched), load * sat)
        iv = convert(
            {"slo": {"ttft_p95_s": point.ttft_s.p95, "tpot_p95_s": point.tpot_s.p95}},
            InferenceVolume,
        )
        fresh = StepTable(step, sched)

        def kept(n: int, fresh: StepTable = fresh, point: LoadPoint = point) -> bool:
            return slo_margin(fresh, rate / n, point.ttft_s.p95, point.tpot_s.p95)[0]

        for needed in (1, 7, 60):
            steps = StepTable(step, sched)
            n = slo_replicas(steps, rate, needed, iv)
            most = needed * MAX_SLO_REPLICAS_FACTOR
            want = next((k for k in range(needed, most + 1) if kept(k)), most)
            assert n == want, (load, needed)
            for k in (n - 1, n, n + 1, 2 * n):
                if k >= 1:
                    assert keeps(steps, rate / k, point.ttft_s.p95, point.tpot_s.p95) == kept(k)


@pytest.mark.parametrize("name", list(STEPS))
def test_the_rate_at_an_occupancy_inverts_the_occupancy(name: str) -> None:
    """``rate_at_occupancy`` solves ``m = rate x T(m + 1)`` for the rate in closed form:
    at the occupancy the queue solves for a rate (to its tolerance), it gives that rate
    back, from a trickle to near saturation."""
    step, sched = STEPS[name]()
    steps = StepTable(step, sched)
    sat = saturation_rate(steps)
    for load in (0.001, 0.03, 0.3, 0.7, 0.95):
        m = _occupancy(steps, load * sat)
        if m >= sched.cap:
            continue
        assert rate_at_occupancy(steps, m) == pytest.approx(load * sat, rel=1e-4), load


def test_the_chunk_jump_guide_lands_on_the_turn() -> None:
    """A prompt as long as the budget takes one chunk alone and two beside any decode, so
    its p95 TTFT jumps where the occupancy it is read at reaches one: a target between
    the two TTFTs turns there, flat on both sides. The guide puts the turn's count within
    one of the fewest replicas that keep it (so the search ends in a probe or two), where
    the slack's secant, which cannot see a jump, needs a bisection."""
    step, sched = STEPS["prompt fills the budget"]()
    sat = saturation_rate(StepTable(step, sched))
    rate = 200 * sat
    # One chunk at a trickle; two chunks take about twice as long.
    target = 1.5 * under_load(StepTable(step, sched), 1e-3 * sat).ttft_s.p95
    steps = StepTable(step, sched)

    def kept(n: int) -> bool:
        return slo_margin(steps, rate / n, target, None)[0]

    want = next(n for n in range(1, 100_000) if kept(n))
    low, high = max(want // 3, 1), want * 3
    assert not kept(low)
    assert kept(high)
    share = chunk_jump_share(steps, rate, high, low)
    assert share is not None
    assert abs(math.ceil(1 / share) - want) <= 1
    # Both ends a chunk apart is what the guide reads: none between ends alike.
    assert chunk_jump_share(steps, rate, high, high + 1) is None


@pytest.mark.parametrize("name", list(STEPS))
def test_the_rate_within_the_slo_is_the_same_after_a_replica_search(name: str) -> None:
    """``max_rate`` is the highest rate of a fixed grid that keeps the targets, so the
    figure is the same whether it starts from a replica search's verdicts (as a
    response's candidates do) or from a fresh table."""
    step, sched = STEPS[name]()
    sat = saturation_rate(StepTable(step, sched))
    for load in (0.05, 0.5, 0.9):
        point = under_load(StepTable(step, sched), load * sat)
        targets = (point.ttft_s.p95, point.tpot_s.p95)
        iv = convert({"slo": {"ttft_p95_s": targets[0], "tpot_p95_s": targets[1]}}, InferenceVolume)
        searched = StepTable(step, sched)
        slo_replicas(searched, 20 * sat, 3, iv)
        assert max_rate(searched, *targets) == max_rate(StepTable(step, sched), *targets)


def _body(slo: dict[str, float] | None = None, **inference: Any) -> dict[str, Any]:
    iv: dict[str, Any] = {"requests_per_second": 5, **inference}
    if slo is not None:
        iv["slo"] = slo
    return {
        "model": {"name": "llama-3.1-70b"},
        "workload": {"mode": "inference", "sequence_length": 2048, "max_new_tokens": 512},
        "inference": iv,
        "constraints": {"include": ["h100-sxm5-80gb"], "gpu_counts": [], "max_gpus_per_job": 64},
        "objective": "cheapest",
        "limit": 1,
    }


def _plan(client: TestClient[Litestar], slo: dict[str, float] | None) -> dict[str, Any]:
    response = client.post(PATH, json=_body(slo))
    assert response.status_code == 200, response.text
    plan: dict[str, Any] = response.json()["recommendations"][0]
    assert plan["fits"], plan["reasons"]
    assert plan["score"] == 1.0, plan["reasons"]
    return plan


def test_a_tighter_p95_target_means_fewer_sequences_and_more_replicas(
    client: TestClient[Litestar],
) -> None:
    loose = _plan(client, None)
    tight = _plan(client, {"ttft_p95_s": 0.6, "tpot_p95_s": 0.04})
    lat, tl = loose["latency"], tight["latency"]
    assert lat["kind"] == tl["kind"] == "steady_state"
    # Fewer sequences per replica (the cap the launch command sets, and those in flight)
    # and more GPUs, as the queue says: wider or more replicas, each with less to do.
    assert tl["concurrency"] < lat["concurrency"]
    assert tl["limited_by"] == "slo.tpot_p95_s"
    assert tl["under_load"]["mean_in_flight"] < lat["under_load"]["mean_in_flight"]

    def gpus(plan: dict[str, Any]) -> int:
        return int(plan["layout"]["tensor"] * plan["layout"]["data"])

    assert gpus(tight) > gpus(loose)
    assert tight["launch"]["max_concurrency"] == tl["concurrency"]
    under = tl["under_load"]
    assert under["time_to_first_token_s"]["p95"] <= 0.6
    assert under["time_per_output_token_s"]["p95"] <= 0.04
    assert under["requests_per_s"] * tight["layout"]["data"] == 5
    assert 0 < tl["max_requests_per_s_within_slo"] < tl["requests_per_s"]
    assert lat["max_requests_per_s_within_slo"] is None
    assert any("p50/p95/p99" in r for r in tight["reasons"])
    # The intervals cover the p50s too.
    assert tight["intervals"]["ttft_p50_s"]["low"] < under["time_to_first_token_s"]["p50"]


def test_a_static_batch_says_so(client: TestClient[Litestar]) -> None:
    body = _body()
    body["workload"]["batch_size"] = 64
    body["constraints"] = {"include": ["h200-sxm-141gb"], "gpu_counts": [2]}
    del body["inference"]["requests_per_second"]
    response = client.post(PATH, json=body)
    assert response.status_code == 200, response.text
    plan = response.json()["recommendations"][0]
    assert plan["latency"]["kind"] == "static_batch"
    assert plan["latency"]["under_load"] is None
    assert any("static batch of 64" in r for r in plan["reasons"])


def test_bad_slo_names_the_field(client: TestClient[Litestar]) -> None:
    for field, value in (("ttft_p95_s", 0), ("tpot_p95_s", -1), ("tpot_p95_s", 61)):
        response = client.post(PATH, json=_body({field: value}))
        assert response.status_code == 422
        assert f"$.inference.slo.{field}" in response.json()["detail"]
    no_rate = _body({"ttft_p95_s": 1})
    del no_rate["inference"]["requests_per_second"]
    problem_at(client.post(PATH, json=no_rate), "$.inference.slo")
    batch = _body({"ttft_p95_s": 1})
    batch["workload"]["batch_size"] = 8
    problem_at(client.post(PATH, json=batch), "$.inference.slo")


def test_the_cli_flags_and_a_plan_file_carry_the_slo() -> None:
    args = ["recommend", "--model", "llama-3.1-8b", "--mode", "inference", "--seq-len", "1024",
            "--output-tokens", "256", "--requests-per-second", "20", "--include", "h100-sxm5-80gb",
            "--format", "json"]  # fmt: skip
    loose = json.loads(CliRunner().invoke(main, args).output)["recommendations"][0]
    result = CliRunner().invoke(main, [*args, "--slo-tpot-p95-s", "0.012"])
    assert result.exit_code == 0, result.output
    tight = json.loads(result.output)["recommendations"][0]
    assert tight["latency"]["limited_by"] == "slo.tpot_p95_s"
    assert tight["latency"]["concurrency"] < loose["latency"]["concurrency"]
    assert tight["latency"]["under_load"]["time_per_output_token_s"]["p95"] <= 0.012
    table = CliRunner().invoke(main, args[:-2])
    assert re.search(
        r"\n  under load \([0-9.]+ requests/s per replica, Poisson\): TTFT p50/p95/p99 \d",
        table.output,
    )
    bad = CliRunner().invoke(main, [*args, "--slo-ttft-p95-s", "0"])
    assert bad.exit_code == 2
    assert "$.inference.slo.ttft_p95_s" in bad.output
    # A plan file is a recommendation request: the SLO sizes the plan it checks.
    plan = {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 1024, "max_new_tokens": 256},
        "inference": {"requests_per_second": 20, "slo": {"tpot_p95_s": 0.012}},
        "constraints": {"include": ["h100-sxm5-80gb"]},
        "targets": {"max_cost_usd": 1e9},
    }
    report = check(convert(plan, CiPlan), builtin_catalog())
    assert report.recommendations[0].latency is not None
    assert report.recommendations[0].latency.limited_by == "slo.tpot_p95_s"


def test_the_search_defers_the_figures_to_the_candidates_it_returns() -> None:
    """A search times ~150 serving options; the percentiles under load, the rate within
    the SLO and the launch command are computed only for the candidates returned, and
    they read the same as if computed during the search (the recorded answers of
    tests/test_recommend_identical.py hold them byte for byte)."""
    from gpuplan.core.recommend import RecommendRequest, recommend
    from gpuplan.core.recommend.context import gpu_context
    from gpuplan.core.recommend.fit import MemoryOracle
    from gpuplan.core.recommend.job import resolve_job
    from gpuplan.core.recommend.option import finished
    from gpuplan.core.recommend.serving import serving_options

    catalog = builtin_catalog()
    body = {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "inference", "sequence_length": 2048},
        "inference": {
            "output_tokens": 256,
            "requests_per_second": 4,
            "slo": {"ttft_p95_s": 2.0, "tpot_p95_s": 0.2},
        },
        "constraints": {"include": ["h100-sxm5-80gb"]},
    }
    request = convert(body, RecommendRequest)
    job = resolve_job(request, catalog)
    gpu = catalog.lookup("h100-sxm5-80gb", "$")
    ctx = gpu_context(gpu, job, request.efficiency.mfu, request.efficiency.mbu, request.constraints)
    oracle = MemoryOracle(request.model, catalog, job.given.fsdp1)
    plans, _ = serving_options(job, ctx, oracle, request.constraints)
    assert plans
    for plan in plans:
        assert plan.launch is None
        assert plan.finish is not None
        assert plan.latency is not None
        assert plan.latency.max_requests_per_s_within_slo is None
        done = finished(plan)
        assert done.finish is None
        assert done.launch is not None
        assert done.latency is not None
        assert done.latency.under_load is not None
        assert done.latency.max_requests_per_s_within_slo is not None
        line = next(i for i, r in enumerate(done.reasons) if r.startswith("under load"))
        # where the search puts the load: after the replicas line, before the breaches
        assert done.reasons[line - 1].startswith(f"{done.layout.data} replica(s)")  # type: ignore[union-attr]
        assert done.reasons[:line] + done.reasons[line + 1 :] == plan.reasons
        assert finished(done) is done
    shown = recommend(request, catalog).recommendations[0]
    assert shown.launch is not None
    assert shown.latency is not None
    assert shown.latency.under_load is not None
