"""Serving mixture-of-experts models with expert parallelism and data-parallel attention
(core/recommend/moe_serving.py, docs/serving.md): the expected experts a step touches,
MLA's latent KV cache, the layout chosen for DeepSeek-V3 on 8 H200s, and its launch."""

from typing import Any

import msgspec
import pytest
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.hf_config import from_hf_config
from gpuplan.core.memory.presets import parameter_count, presets
from gpuplan.core.memory.schema import Workload
from gpuplan.core.perf.link import Link
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.recommend.mla import latent_kv_bytes_per_token
from gpuplan.core.recommend.moe_serving import dispatch_combine_seconds, distinct_experts
from gpuplan.core.recommend.schema import Candidate

CATALOG = builtin_catalog()
H200 = "h200-sxm-141gb"


def deepseek(rate: float | None = None, **more: Any) -> dict[str, Any]:
    inference: dict[str, Any] = {"prompt_tokens": 2048, "output_tokens": 512}
    if rate is not None:
        inference["requests_per_second"] = rate
    return {
        "model": {"name": "deepseek-v3"},
        "workload": {
            "mode": "inference",
            "sequence_length": 2048,
            "precision": "fp8",
            "weight_quantization": "fp8",
        },
        "inference": inference,
        "constraints": {"include": [H200]},
        **more,
    }


def plans(body: dict[str, Any]) -> list[Candidate]:
    return recommend(msgspec.convert(body, RecommendRequest), CATALOG).recommendations


def test_the_expected_distinct_experts() -> None:
    assert distinct_experts(1, 256, 8) == pytest.approx(8)  # one token: its k experts
    assert distinct_experts(10_000, 256, 8) == pytest.approx(256)  # a big batch: all
    few, more = distinct_experts(16, 256, 8), distinct_experts(64, 256, 8)
    assert 8 < few < more < 256
    assert few == pytest.approx(256 * (1 - (1 - 8 / 256) ** 16))


def test_dispatch_and_combine_cross_only_to_other_gpus() -> None:
    nvlink = Link(kind="nvlink", bytes_per_s=450e9, latency_s=5e-6)
    assert dispatch_combine_seconds(100, hidden=7168, per_token=8, ranks=1, link=nvlink) == 0.0
    sent = 100 * 8 * 7168 * 2 * 7 / 8
    expected = 2 * (sent / 450e9 + 5e-6)
    assert dispatch_combine_seconds(100, hidden=7168, per_token=8, ranks=8, link=nvlink) == expected


def test_the_presets_count_what_the_model_cards_say() -> None:
    p = presets()
    assert parameter_count(p["deepseek-v3"]) == pytest.approx(671e9, rel=0.001)
    assert parameter_count(p["qwen3-235b-a22b"]) == pytest.approx(235e9, rel=0.001)
    assert parameter_count(p["qwen3-30b-a3b"]) == pytest.approx(30.5e9, rel=0.002)


def test_a_paged_engine_caches_the_mla_latent() -> None:
    shape, _ = from_hf_config(presets()["deepseek-v3"].config or {})
    w = Workload(mode="inference", precision="bf16")
    # 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes.
    assert latent_kv_bytes_per_token(shape, w) == 61 * 576 * 2
    fp8 = msgspec.structs.replace(w, kv_cache_dtype="fp8")
    assert latent_kv_bytes_per_token(shape, fp8) == 61 * 576
    llama, _ = from_hf_config(presets()["llama-3.1-70b"].config or {})
    assert latent_kv_bytes_per_token(llama, w) is None


def test_deepseek_v3_on_8_h200_answers_an_expert_parallel_layout_that_fits(
    client: TestClient[Litestar],
) -> None:
    every = plans(deepseek(all_counts=True))
    ep = next(c for c in every if c.layout is not None and c.layout.expert > 1)
    tp = next(c for c in every if c.layout is not None and c.layout.tensor == 8)
    assert ep.latency is not None
    assert tp.latency is not None
    # Data-parallel attention: each GPU caches only its own sequences' latent, so the
    # 8 GPUs keep more sequences in flight than tensor parallelism, which copies each
    # sequence's latent to every rank.
    assert ep.latency.concurrency > tp.latency.concurrency
    # A rate one expert-parallel replica serves and one tensor-parallel replica does not.
    rate = (ep.latency.requests_per_s + tp.latency.requests_per_s) / 2
    assert tp.latency.requests_per_s < rate < ep.latency.requests_per_s
    answer = client.post("/v1/recommendations", json=deepseek(rate))
    assert answer.status_code == 200, answer.text
    top = answer.json()["recommendations"][0]
    assert top["fits"]
    assert top["count"] == 8
    assert top["layout"]["tensor"] == 1
    assert top["layout"]["expert"] == 8
    assert top["required_bytes_per_gpu"] <= top["usable_memory_bytes"]
    run = top["launch"]
    assert run["expert_parallel"] == run["data_parallel"] == 8
    assert run["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert run["command"][:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-V3"]
    for flag in ("--data-parallel-size", "--enable-expert-parallel"):
        assert flag in run["command"]
    assert "32 of the 256 experts" in " ".join(top["reasons"])


def test_qwen3_moe_gets_an_expert_parallel_plan() -> None:
    body = deepseek(all_counts=True)
    body["model"] = {"name": "qwen3-235b-a22b"}
    body["workload"] = {"mode": "inference", "sequence_length": 2048, "precision": "bf16"}
    ep = [c for c in plans(body) if c.layout is not None and c.layout.expert > 1]
    assert ep
    assert ep[0].fits
    assert ep[0].launch is not None
    assert "--enable-expert-parallel" in ep[0].launch.command
    # Each GPU holds 128 / 8 experts of each layer.
    assert "16 of the 128 experts" in " ".join(ep[0].reasons)
    # Its step reads the measured kernel tables of the H200, as the other plans do.
    assert ep[0].kernel_source == "measured"
    assert ep[0].kernel_table is not None


def test_a_dense_model_gets_no_expert_parallel_plan() -> None:
    body = deepseek(all_counts=True)
    body["model"] = {"name": "llama-3.1-70b"}
    body["workload"] = {"mode": "inference", "sequence_length": 2048}
    assert all(c.layout is None or c.layout.expert == 1 for c in plans(body))


def test_max_model_len_auto_fills_an_expert_parallel_gpus_cache() -> None:
    body = deepseek(all_counts=True)
    body["inference"]["max_model_len"] = "auto"
    ep = next(c for c in plans(body) if c.layout is not None and c.layout.expert > 1)
    assert ep.launch is not None
    # The longest sequence one GPU's cache holds, at most the model's 163,840 tokens.
    assert 2048 + 512 < ep.launch.max_model_len <= 163_840
    assert ep.launch.kv_cache_tokens >= ep.launch.max_model_len


def _expert_parallel(body: dict[str, Any]) -> Candidate:
    body = {**body, "all_counts": True}
    (ep,) = [c for c in plans(body) if c.layout is not None and c.layout.expert > 1][:1]
    return ep


def test_an_expert_parallel_plan_has_percentiles_under_load_and_keeps_an_slo() -> None:
    """Each attention rank admits and steps its own sequences: the plan's queue is one
    per rank at its share of the rate, as a tensor-parallel replica's is per replica."""
    loose = _expert_parallel(deepseek(rate=20))
    assert loose.latency is not None
    under = loose.latency.under_load
    assert under is not None
    assert loose.layout is not None
    ranks = loose.layout.expert
    replicas = loose.layout.data // ranks
    assert under.requests_per_s == pytest.approx(20 / (ranks * replicas))
    assert under.time_to_first_token_s.p95 >= under.time_to_first_token_s.p50
    assert any(r.startswith("under load") and "per attention rank" in r for r in loose.reasons)
    # A tight p95 TPOT: fewer sequences per rank, so more replicas for the same rate.
    tpot = 0.8 * loose.latency.time_per_output_token_s
    body = deepseek(rate=20)
    body["inference"]["slo"] = {"tpot_p95_s": tpot}
    tight = _expert_parallel(body)
    assert tight.latency is not None
    assert tight.layout is not None
    if tight.fits and not tight.breaches:
        assert tight.latency.concurrency < loose.latency.concurrency
        assert tight.layout.data >= loose.layout.data
        assert tight.latency.under_load is not None
        assert tight.latency.under_load.time_per_output_token_s.p95 <= tpot
        assert tight.latency.max_requests_per_s_within_slo is not None
    else:
        assert any(b.constraint.startswith("inference.slo") for b in tight.breaches)
