"""``parallelism.expert_dispatcher``: how an MoE layer's tokens reach their experts' ranks.

Megatron-core's ``alltoall`` dispatcher sends a copy of a token for each routed expert;
the ``flex`` dispatcher's DeepEP and HybridEP backends send it once to each rank that
holds any of its experts, and across nodes once to each node over the network, forwarded
there over NVLink (DeepEP at 92fe2dea, csrc/kernels/intranode.cu and internode.cu). One
declaration (``Parallelism.expert_dispatcher``) reaches the speed model, the API, the CLI
and plan files."""

import json
import math
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.memory.schema import Parallelism
from gpuplan.core.perf.link import Link
from gpuplan.core.perf.step import _expert_exchange_seconds, routed_miss
from gpuplan.core.perf.step_records import StepLinks
from tests.helpers import run_plan_file
from tests.test_step_experts_adapters import _moe

NET = Link(kind="network", bytes_per_s=50e9, latency_s=0.0)
NVLINK = Link(kind="nvlink", bytes_per_s=450e9, latency_s=0.0)
NONE = Link(kind="none", bytes_per_s=math.inf, latency_s=0.0)


def _links(expert: Link, local: int, local_link: Link | None) -> StepLinks:
    return StepLinks(
        tensor=NONE, context=NONE, expert=expert, pipeline=NONE, data=expert, host=NONE,
        expert_local=local, expert_local_link=local_link,
    )  # fmt: skip


def test_the_chance_a_group_holds_none_of_a_tokens_experts() -> None:
    """``C(E - E/g, k) / C(E, k)``: 8 experts in 4 groups of 2, 2 per token: 15 of 28."""
    assert routed_miss(8, 2, 4) == pytest.approx(math.comb(6, 2) / math.comb(8, 2))
    assert routed_miss(128, 8, 2) == pytest.approx(math.comb(64, 8) / math.comb(128, 8))
    assert routed_miss(128, 8, 1) == 0.0  # one group holds every expert
    assert routed_miss(4, 8, 4) == 0.0  # more picks than experts outside: never missed


def test_across_two_nodes_a_token_crosses_the_network_once_not_once_per_remote_expert() -> None:
    """Qwen3-30B-A3B (128 experts, 8 per token) on EP 16 over two nodes of 8: the
    alltoall dispatcher sends the 4 copies (of 8) whose experts live on the other node
    over the network; DeepEP sends one copy to that node (when any of its 8 experts is
    there, all but 0.3% of tokens) and forwards it over NVLink."""
    lay = Parallelism(data=16, expert=16, zero_stage=1)
    links = _links(NET, 8, NVLINK)
    tokens = 4096.0
    flat = _expert_exchange_seconds(_moe(), lay, links, tokens)
    dedup = _expert_exchange_seconds(_moe(deduplicated_dispatch=True), lay, links, tokens)
    token_bytes = 2048 * 2
    assert flat == pytest.approx(8 * 8 / 16 * tokens * token_bytes / 50e9)
    assert dedup == pytest.approx((1 - routed_miss(128, 8, 2)) * tokens * token_bytes / 50e9)
    assert 3.9 < flat / dedup < 4.1


def test_inside_a_node_a_token_reaches_each_rank_once() -> None:
    """EP 8 in one node: each of the 7 other ranks gets a token when it holds one of the
    token's experts (66.7% each), 4.67 copies, not the alltoall dispatcher's 7."""
    lay = Parallelism(data=8, expert=8, zero_stage=1)
    links = _links(NVLINK, 8, NVLINK)
    flat = _expert_exchange_seconds(_moe(), lay, links, 1000.0)
    dedup = _expert_exchange_seconds(_moe(deduplicated_dispatch=True), lay, links, 1000.0)
    assert dedup / flat == pytest.approx(7 * (1 - routed_miss(128, 8, 8)) / 7)


def _skill_job(dispatcher: str | None) -> dict[str, Any]:
    """The Megatron-Bridge skill's Qwen3-30B-A3B run: EP 16 on two nodes of 8 H100."""
    parallelism: dict[str, Any] = {
        "data": 16, "expert": 16, "zero_stage": 1, "framework": "megatron",
        "gradient_reduce_dtype": "bf16",
    }  # fmt: skip
    if dispatcher is not None:
        parallelism["expert_dispatcher"] = dispatcher
    return {
        "model": {"name": "qwen3-30b-a3b"},
        "workload": {
            "mode": "training", "sequence_length": 4096, "batch_size": 1,
            "gradient_accumulation_steps": 64, "precision": "bf16",
            "gradient_checkpointing": "none", "parallelism": parallelism,
        },
        "training": {"training_tokens": 10**9},
        "layout": "given",
        "constraints": {"include": ["h100-sxm5-80gb"], "max_gpus_per_job": 16, "gpus_per_node": 8},
        "limit": 1,
    }  # fmt: skip


def test_the_api_times_the_dispatcher_and_refuses_an_unknown_one(
    client: TestClient,  # type: ignore[type-arg]
) -> None:
    def per_gpu(dispatcher: str | None) -> float:
        response = client.post("/v1/recommendations", json=_skill_job(dispatcher))
        assert response.status_code == 200, response.text
        said = [a for a in response.json()["assumptions"] if a.startswith("MoE:")]
        assert len(said) == 1
        assert f"the {dispatcher or 'alltoall'} dispatcher" in said[0]
        (plan,) = response.json()["recommendations"]
        return float(plan["throughput"]["value"]) / int(plan["count"])

    assert per_gpu(None) == per_gpu("alltoall")
    assert per_gpu("hybridep") == per_gpu("deepep") > 1.3 * per_gpu("alltoall")
    bad = client.post("/v1/recommendations", json=_skill_job("nccl"))
    assert bad.status_code == 422
    assert bad.headers["content-type"].startswith("application/problem+json")
    assert bad.json()["errors"][0]["path"] == "$.workload.parallelism.expert_dispatcher"


def test_the_cli_takes_the_dispatcher_and_names_a_bad_one() -> None:
    args = [
        "recommend", "--model", "qwen3-30b-a3b", "--mode", "training", "--seq-len", "4096",
        "--tokens", "1e9", "--framework", "megatron", "--zero-stage", "1",
        "--data-parallel", "16", "--parallelism-expert", "16", "--precision", "bf16",
        "--layout", "given", "--include", "h100-sxm5-80gb", "--format", "json",
    ]  # fmt: skip
    runs = {}
    for dispatcher in ("alltoall", "hybridep"):
        result = CliRunner().invoke(main, [*args, "--parallelism-expert-dispatcher", dispatcher])
        assert result.exit_code == 0, result.output
        (plan,) = json.loads(result.output)["recommendations"][:1]
        runs[dispatcher] = plan["time_hours"]
    assert runs["hybridep"] < runs["alltoall"]
    refused = CliRunner().invoke(main, [*args, "--parallelism-expert-dispatcher", "nccl"])
    assert refused.exit_code == 2
    assert "expert-dispatcher" in refused.output or "expert_dispatcher" in refused.output


def test_a_plan_file_with_the_dispatcher_checks_its_time(tmp_path: Path) -> None:
    """A 2-hour target: the flat dispatcher's 2.4 h fails it, HybridEP's 1.6 h passes."""

    def plan(dispatcher: str) -> int:
        doc = _skill_job(dispatcher)
        doc.pop("limit")
        doc["targets"] = {"max_time_hours": 2.0}
        return run_plan_file(tmp_path, doc, f"{dispatcher}.yaml").exit_code

    assert plan("hybridep") == 0
    assert plan("alltoall") == 1
    doc = _skill_job("nccl")
    doc.pop("limit")
    doc["targets"] = {"max_time_hours": 2.0}
    refused = run_plan_file(tmp_path, doc, "bad.yaml")
    assert refused.exit_code == 2
    assert "$.workload.parallelism.expert_dispatcher" in refused.output


def test_the_shape_carries_the_dispatcher() -> None:
    from gpuplan.core.catalog import builtin_catalog
    from gpuplan.core.recommend import RecommendRequest
    from gpuplan.core.recommend.job import resolve_job
    from gpuplan.core.recommend.training import _shape

    catalog = builtin_catalog()
    for dispatcher, dedup in (("alltoall", False), ("deepep", True), ("hybridep", True)):
        for layout in ("given", "search"):  # the search keeps the request's dispatcher
            request = msgspec.convert(
                {**_skill_job(dispatcher), "layout": layout}, RecommendRequest
            )
            job = resolve_job(request, catalog)
            assert _shape(job, job.workload, 1, False).deduplicated_dispatch is dedup
