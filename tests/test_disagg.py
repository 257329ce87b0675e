"""Aggregated against disaggregated serving (``inference.compare_disaggregated``;
docs/serving.md): the KV transfer, the xPyD sizing, which wins and why, through the API,
the CLI and plan files."""

import json
import math
from typing import Any

import pytest
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.convert import convert
from gpuplan.core.perf.kv_transfer import kv_transfer
from gpuplan.core.perf.link import Link
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.recommend.disagg import _most_within, missed_targets
from gpuplan.core.recommend.schema import InferenceVolume, RecommendResponse
from tests.helpers import problem_at

TPOT_S = 0.05
"""A TPOT target that binds an aggregated 70B replica on H100s (its steps carry prompt
chunks) but not a pure decode step at the same concurrency."""


def body(rate: float | None = None, **inference: Any) -> dict[str, Any]:
    volume: dict[str, Any] = {
        "prompt_tokens": 2048,
        "output_tokens": 512,
        "max_time_per_output_token_s": TPOT_S,
        "max_time_to_first_token_s": 2.0,
        "compare_disaggregated": True,
        **inference,
    }
    if rate is not None:
        volume["requests_per_second"] = rate
    return {
        "model": {"name": "llama-3.1-70b"},
        "workload": {"mode": "inference", "sequence_length": 2048, "precision": "bf16"},
        "inference": volume,
        "constraints": {"include": ["h100-sxm5-80gb"], "max_gpus_per_job": 1024},
    }


def top(client: TestClient[Litestar], payload: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/v1/recommendations", json=payload)
    assert answer.status_code == 200, answer.text
    first: dict[str, Any] = answer.json()["recommendations"][0]
    return first


def test_the_transfer_is_the_prompt_cache_over_the_link() -> None:
    nvlink = Link(kind="nvlink", bytes_per_s=450e9, latency_s=5e-6)
    t = kv_transfer(
        prompt_tokens=2048,
        kv_bytes_per_token=327_680,  # Llama 3.1 70B, bf16: 80 layers x 8 KV heads x 128 x 2 x 2
        tp_prefill=4,
        tp_decode=2,
        link=nvlink,
        requests_per_s=10,
        prefill_gpus=8,
        decode_gpus=4,
    )
    assert t.bytes == 2048 * 327_680
    # Two lanes (the smaller side), one start-up.
    assert t.seconds == pytest.approx(t.bytes / 2 / 450e9 + 5e-6)
    assert t.utilization == pytest.approx(10 * t.bytes / (4 * 450e9))


@pytest.mark.parametrize(
    "step",
    [
        lambda b: 0.02 + 0.0001 * b,  # linear: the secant lands on the turn
        lambda b: 0.02 + 0.0001 * b + 0.004 * (b >= 37),  # a jump the secant cannot see
        lambda b: 0.01 * math.sqrt(b),  # concave
        lambda b: 0.02 + 1e-6 * b * b,  # convex
        lambda b: 0.05 + 0.0 * b,  # flat, over every target below 0.05
    ],
)
def test_a_decode_pool_takes_the_most_sequences_its_step_allows(step: Any) -> None:
    """The secant search of the decode pool's batch against every batch in turn: the
    largest whose step keeps the target, 1 when none does."""

    def timed(b: int) -> float:
        return float(step(b))

    for top in (2, 3, 64, 500):
        for target in (0.021, 0.025, 0.03, 0.045, 0.07):
            if step(top) <= target:
                continue  # the pool's caller keeps ``top`` without a search
            want = max((b for b in range(1, top) if step(b) <= target), default=1)
            assert _most_within(timed, target, 1, top) == want, (top, target)


def test_targets_are_checked_in_one_place() -> None:
    iv = InferenceVolume(max_time_to_first_token_s=0.5, max_time_per_output_token_s=0.02)
    assert missed_targets(0.4, 0.02, iv) == []
    assert missed_targets(0.6, 0.03, iv) == [
        "inference.max_time_to_first_token_s",
        "inference.max_time_per_output_token_s",
    ]
    assert missed_targets(9.0, 9.0, InferenceVolume()) == []


def test_off_unless_asked(client: TestClient[Litestar]) -> None:
    assert top(client, body(compare_disaggregated=False)).get("disaggregation") is None


def test_at_a_low_rate_one_aggregated_pool_wins(client: TestClient[Litestar]) -> None:
    one = top(client, body())  # no rate: one replica at its own rate
    replica_rate = one["latency"]["requests_per_s"]
    d = top(client, body(rate=replica_rate / 2))["disaggregation"]
    agg, dis = d["aggregated"], d["disaggregated"]
    assert d["winner"] == "aggregated"
    # Why: one aggregated replica is enough, while disaggregation needs a replica of each
    # phase, both mostly idle at this rate.
    assert agg["gpus"] == one["layout"]["tensor"]
    assert agg["meets_targets"]
    assert dis["meets_targets"]
    assert dis["gpus"] > agg["gpus"]
    assert d["prefill"]["replicas"] == d["decode"]["replicas"] == 1
    assert d["prefill"]["busy"] < 1
    assert d["decode"]["busy"] < 1
    assert dis["usd_per_hour"] > agg["usd_per_hour"]
    assert "round up to whole replicas" in d["why"]


def test_at_a_high_rate_disaggregation_wins(client: TestClient[Litestar]) -> None:
    one = top(client, body())
    # At 100 replicas' worth, rounding each pool up to whole replicas is noise (at 30
    # the pools are still a half to a third idle and rounding decides).
    rate = 100 * one["latency"]["requests_per_s"]
    c = top(client, body(rate=rate))
    d = c["disaggregation"]
    agg, dis, dec, pre = d["aggregated"], d["disaggregated"], d["decode"], d["prefill"]
    assert d["winner"] == "disaggregated", d["why"]
    assert dis["meets_targets"]
    # Why: the aggregated replica's concurrency is cut by the TPOT target because its
    # steps carry prompt chunks; a decode replica's pure decode steps keep more
    # sequences in flight within the same target, so fewer GPUs serve the same rate.
    assert c["latency"]["limited_by"] == "max_time_per_output_token_s"
    assert dec["concurrency"] > c["latency"]["concurrency"]
    assert dis["time_per_output_token_s"] <= TPOT_S
    assert dis["gpus"] < agg["gpus"]
    assert dis["usd_per_hour"] < agg["usd_per_hour"]
    assert d["ratio"] == f"{pre['replicas']}P{dec['replicas']}D"
    assert pre["replicas"] == math.ceil(rate / pre["requests_per_s"])
    assert dec["replicas"] == math.ceil(rate / dec["requests_per_s"])
    # The TTFT counts the prefill batch, the transfer and the first decode step.
    t = d["kv_transfer"]
    assert t["bytes_per_request"] == 2048 * 327_680
    # NVLink when the whole deployment fits one H100 SXM NVLink domain (8 GPUs), else
    # the network between nodes.
    assert t["link"] == ("nvlink" if dis["gpus"] <= 8 else "network")
    assert dis["time_to_first_token_s"] > t["seconds"] + dis["time_per_output_token_s"]
    assert "pure decode step" in d["why"]


def test_an_engine_without_a_disaggregated_mode_says_so(client: TestClient[Litestar]) -> None:
    payload = body(engine="transformers")
    payload["model"] = {"name": "llama-3.1-8b"}
    payload["inference"].pop("max_time_per_output_token_s")
    d = top(client, payload)["disaggregation"]
    assert d["disaggregated"] is None
    assert d["winner"] == "aggregated"
    assert "no disaggregated mode" in d["why"]


def test_a_bad_value_is_422_naming_it(client: TestClient[Litestar]) -> None:
    problem_at(
        client.post("/v1/recommendations", json=body(compare_disaggregated="yes")),
        "$.inference.compare_disaggregated",
    )


def test_a_plan_file_and_the_cli_carry_it(client: TestClient[Litestar]) -> None:
    payload = body(rate=2.0)
    plan = client.post("/v1/plan", json={**payload, "targets": {"max_cost_usd": 1e9}})
    assert plan.status_code == 200, plan.text
    assert plan.json()["recommendations"][0]["disaggregation"]["winner"] == "aggregated"
    args = [
        "recommend", "--model", "llama-3.1-70b", "--mode", "inference", "--seq-len", "2048",
        "--output-tokens", "512", "--requests-per-second", "2", "--compare-disaggregated",
        "--include", "h100-sxm5-80gb", "--format", "json",
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)["recommendations"][0]["disaggregation"]
    assert d["ratio"] is not None
    text = CliRunner().invoke(main, args[:-2])
    assert "disaggregation #1 h100-sxm5-80gb: aggregated wins" in text.output


def test_an_mla_cache_moves_once_whatever_the_tensor_parallelism(
    client: TestClient[Litestar],
) -> None:
    # DeepSeek-V3's latent is held whole by every tensor-parallel rank: a request moves
    # one copy, 61 layers x (512 + 64) values of 2 bytes per prompt token.
    payload = {
        "model": {"name": "deepseek-v3"},
        "workload": {
            "mode": "inference",
            "sequence_length": 2048,
            "precision": "fp8",
            "weight_quantization": "fp8",
        },
        "inference": {"output_tokens": 512, "compare_disaggregated": True},
        "constraints": {"include": ["h200-sxm-141gb"]},
        "all_counts": True,
    }
    answer = client.post("/v1/recommendations", json=payload)
    assert answer.status_code == 200, answer.text
    tp = [c for c in answer.json()["recommendations"] if c["layout"]["expert"] == 1]
    assert tp
    t = tp[0]["disaggregation"]["kv_transfer"]
    assert t["bytes_per_request"] == 2048 * 61 * 576 * 2


def _slo_body(rate: float, ttft_p95_s: float, tpot_p95_s: float = TPOT_S) -> dict[str, Any]:
    payload = body(rate=rate, slo={"ttft_p95_s": ttft_p95_s, "tpot_p95_s": tpot_p95_s})
    del payload["inference"]["max_time_per_output_token_s"]
    del payload["inference"]["max_time_to_first_token_s"]
    return payload


def test_under_an_slo_both_sides_are_judged_on_their_p95s(client: TestClient[Litestar]) -> None:
    """Issue 34 item 4, "for the same SLO": the aggregated side is judged on the
    candidate's percentiles under load, the disaggregated pools are sized until their
    own p95s (the prefill pool's queue, the transfer, the decode pool's admission and
    pure decode steps) keep the targets."""
    c = top(client, _slo_body(rate=40.0, ttft_p95_s=1.5))
    d = c["disaggregation"]
    agg, dis = d["aggregated"], d["disaggregated"]
    under = c["latency"]["under_load"]
    assert agg["time_to_first_token_p95_s"] == under["time_to_first_token_s"]["p95"]
    assert agg["time_per_output_token_p95_s"] == under["time_per_output_token_s"]["p95"]
    assert dis["meets_targets"], d["why"]
    assert dis["time_to_first_token_p95_s"] <= 1.5
    assert dis["time_per_output_token_p95_s"] <= TPOT_S
    # A p95 sits above the steady state: the queues add to it, never take away.
    assert dis["time_to_first_token_p95_s"] >= dis["time_to_first_token_s"]
    # Without an SLO there are no p95s to report.
    plain = top(client, body(rate=40.0))["disaggregation"]
    assert plain["disaggregated"]["time_to_first_token_p95_s"] is None


def test_a_tighter_ttft_p95_takes_more_prefill_capacity(client: TestClient[Litestar]) -> None:
    """Tighter TTFT target: the prefill pool must run further from saturation (its wait
    is M/D/1's), so its busy share falls, or smaller prefill batches are needed."""
    loose = top(client, _slo_body(rate=40.0, ttft_p95_s=3.0))["disaggregation"]
    tight = top(client, _slo_body(rate=40.0, ttft_p95_s=0.9))["disaggregation"]
    for d in (loose, tight):
        assert d["disaggregated"]["meets_targets"], d["why"]
    assert tight["disaggregated"]["time_to_first_token_p95_s"] <= 0.9
    assert tight["disaggregated"]["gpus"] >= loose["disaggregated"]["gpus"]
    assert tight["prefill"]["busy"] <= loose["prefill"]["busy"] or (
        tight["prefill"]["concurrency"] < loose["prefill"]["concurrency"]
    )
    assert loose["disaggregated"]["time_to_first_token_p95_s"] > 0.9 or (
        tight["disaggregated"]["gpus"] == loose["disaggregated"]["gpus"]
    )


def test_the_pools_queues_against_their_simulations() -> None:
    """bench/serving/disagg_queue.py is the full check (bench/results/disagg_queue.json);
    this is its mid-load point on the real step function of a 70B plan, seeded: the decode
    pool's p95 TTFT and TPOT and the prefill pool's p95 TTFT within 15% of a discrete-event
    simulation of the same replica."""
    from bench.serving import disagg_queue as dq
    from bench.serving.queue_sim import CASES, replica_of

    step, sched = replica_of(CASES[dq.CASE])
    decode = dq.decode_rows(step, sched.cap, sched.output_tokens, 6000, 3)
    prefill = dq.prefill_rows(step, sched.prompt_tokens, 6000, 3)
    for row in [*decode, *prefill]:
        if row["load"] != 0.6:
            continue
        assert abs(row["ttft_s_p95_error"]) < 0.15, row
        if row["pool"] == "decode":
            assert abs(row["tpot_s_p95_error"]) < 0.15, row


def _deepseek_answer(**inference: Any) -> RecommendResponse:
    """DeepSeek-V3 in fp8 on H200s at 40 requests/s, compared with disaggregation, every
    count kept (the expert-parallel candidate wherever it ranks)."""
    payload = {
        "model": {"name": "deepseek-v3"},
        "workload": {
            "mode": "inference",
            "sequence_length": 2048,
            "precision": "fp8",
            "weight_quantization": "fp8",
        },
        "inference": {
            "prompt_tokens": 2048,
            "output_tokens": 512,
            "requests_per_second": 40,
            "compare_disaggregated": True,
            **inference,
        },
        "constraints": {"include": ["h200-sxm-141gb"]},
        "all_counts": True,
    }
    return recommend(convert(payload, RecommendRequest), builtin_catalog())


def test_an_moe_model_gets_expert_parallel_pools() -> None:
    """DeepSeek-V3 on H200s: the expert-parallel candidate gets its comparison too, and
    the pools may be expert-parallel replicas, each attention rank with its own
    sequences: a request's cache then crosses one GPU's link (the rank that holds it)."""
    answer = _deepseek_answer(max_time_per_output_token_s=0.1)
    expert = [c for c in answer.recommendations if c.layout and c.layout.expert > 1]
    assert expert
    for c in answer.recommendations:
        assert c.disaggregation is not None
    pools = [
        pool
        for c in answer.recommendations
        if c.disaggregation is not None
        for pool in (c.disaggregation.prefill, c.disaggregation.decode)
        if pool is not None and pool.expert_parallel > 1
    ]
    assert pools, "no expert-parallel pool was chosen"
    for pool in pools:
        assert pool.tensor_parallel == 1
        assert pool.gpus == pool.replicas * pool.expert_parallel
    # The aggregated side of the expert-parallel candidate counts its replicas, not its GPUs.
    ep = expert[0]
    assert ep.disaggregation is not None
    assert ep.latency is not None
    assert ep.layout is not None
    replicas = ep.layout.data // ep.layout.expert
    assert ep.disaggregation.aggregated.requests_per_s == pytest.approx(
        ep.latency.requests_per_s * replicas
    )


def test_expert_parallel_pools_keep_an_slo_with_a_queue_per_rank() -> None:
    """Under an SLO an expert-parallel decode pool runs one queue per attention rank: it
    starts from the replicas whose ranks together outrun the rate, not from a rank's."""
    answer = _deepseek_answer(slo={"ttft_p95_s": 2.0, "tpot_p95_s": 0.1})
    sides = [c.disaggregation for c in answer.recommendations if c.disaggregation is not None]
    assert sides
    for d in sides:
        dis = d.disaggregated
        assert dis is not None
        if not dis.meets_targets:
            continue
        assert dis.time_to_first_token_p95_s is not None
        assert dis.time_to_first_token_p95_s <= 2.0
        assert dis.time_per_output_token_p95_s is not None
        assert dis.time_per_output_token_p95_s <= 0.1
        assert d.decode is not None
        # Stable queues: the rate over what the decode replicas can do stays below one.
        assert d.decode.busy < 1
