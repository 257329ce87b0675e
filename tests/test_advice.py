"""Advice: for the GPU asked about, each line a change that shrinks the job, said once,
ranked by what it buys and costs; and the same through the API, plan files and the CLI."""

from pathlib import Path
from typing import Any

import msgspec
import pytest
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli.render.candidates import advice_text
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.recommend.advice import rank_advice
from gpuplan.core.recommend.schema import Advice, RecommendResponse
from tests.helpers import problem_at, request_body, run_plan_file

CATALOG = builtin_catalog()
GiB = 1 << 30


def ask(body: dict[str, Any]) -> RecommendResponse:
    return recommend(msgspec.convert(body, RecommendRequest), CATALOG)


def llama70b(**constraints: Any) -> dict[str, Any]:
    """Issue 37's job: Llama-3.1-70B full training in bf16, 10B tokens, 512 a step."""
    return {
        **request_body("llama-3.1-70b", mode="training", sequence_length=4096, precision="bf16"),
        "training": {"training_tokens": 10**10, "global_batch_size": 512},
        "constraints": constraints,
    }


def lora8b(**constraints: Any) -> dict[str, Any]:
    """Llama-3.1-8B LoRA at 4k, micro-batch 8, full checkpointing: the 128,256-token
    vocabulary's fp32 logits are a large part of its peak."""
    return {
        **request_body(
            "llama-3.1-8b", mode="finetune_lora", sequence_length=4096, batch_size=8,
            gradient_checkpointing="full",
        ),
        "training": {"training_tokens": 10**9, "global_batch_size": 128},
        "constraints": constraints,
    }  # fmt: skip


# ---------------------------------------------------------------- which GPU


def test_by_default_the_advice_is_for_the_top_recommendations_gpu() -> None:
    response = ask(llama70b())
    top = response.recommendations[0].gpu
    assert response.advice_gpu == top
    assert response.advice, "a 70B job fits no one GPU: there is advice"
    assert {a.gpu for a in response.advice} == {top}
    assert top != "rtx-3090-24gb"  # the cheapest per hour, the old target
    assert any(f"advice is for {top}, the top recommendation" in a for a in response.assumptions)


def test_the_preferred_gpu_is_the_one_advised_and_said(client: TestClient[Litestar]) -> None:
    answer = client.post("/v1/recommendations", json=llama70b(preferred_gpu="H100 SXM5 80GB"))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["advice_gpu"] == "h100-sxm5-80gb"
    assert {a["gpu"] for a in body["advice"]} == {"h100-sxm5-80gb"}
    assert any("constraints.preferred_gpu" in a for a in body["assumptions"])
    problem_at(
        client.post("/v1/recommendations", json=llama70b(preferred_gpu="h1000")),
        "$.constraints.preferred_gpu",
    )


def test_a_plan_files_fits_gpu_is_advised(tmp_path: Path) -> None:
    plan = {**llama70b(), "targets": {"fits": {"gpu": "NVIDIA A100-SXM4-80GB", "count": 8}}}
    result = run_plan_file(tmp_path, plan, options=("--format", "json"))
    assert result.exit_code in (0, 1), result.output
    report = msgspec.json.decode(result.output)
    assert report["advice_gpu"] == "a100-sxm4-80gb"
    assert {a["gpu"] for a in report["advice"]} == {"a100-sxm4-80gb"}


# ---------------------------------------------------------------- what a line says


JOBS = {
    "70b-h100": llama70b(preferred_gpu="h100-sxm5-80gb"),
    "70b-top": llama70b(),
    "8b-lora-l4": lora8b(preferred_gpu="l4-24gb"),
    "7b-amp-a100": {
        **request_body(
            "llama-2-7b",
            mode="training",
            sequence_length=4096,
            precision="amp_bf16",
            gradient_checkpointing="full",
        ),
        "training": {"training_tokens": 10**8, "global_batch_size": 128},
        "constraints": {"preferred_gpu": "a100-sxm4-80gb"},
    },
}


@pytest.mark.parametrize("name", JOBS)
def test_every_line_shrinks_the_job_and_says_each_thing_once(name: str) -> None:
    advice = ask(JOBS[name]).advice
    assert advice
    for a in advice:
        # FP8 under a pure-bf16 job once read "793.6 -> 1583.8 GiB": no line grows memory.
        assert a.required_bytes_after < a.required_bytes_before, a
        # The figures are fields; the detail does not repeat them ("154.2 -> 78.4 GiB …
        # 154.2 -> 78.4 GiB per GPU").
        for figure in (a.required_bytes_before, a.required_bytes_after):
            assert f"{figure / GiB:.1f}" not in a.detail, a
        line = advice_text(a)
        assert line.count(f"{a.required_bytes_after / GiB:.1f} GiB") == 1, line
    effects = [(a.count, a.required_bytes_after, a.time_factor) for a in advice]
    assert len(effects) == len(set(effects))


def test_fp8_keeps_the_jobs_optimizer_recipe() -> None:
    # A pure-bf16 70B job: left to itself the estimator reads fp8 as Transformer
    # Engine's recipe with an fp32 master and fp32 Adam states, twice the states.
    advice = {a.change: a for a in ask(JOBS["70b-h100"]).advice}
    fp8 = advice.get("precision=fp8")
    assert fp8 is None or fp8.required_bytes_after < fp8.required_bytes_before
    # Where activations dominate, fp8's saved fp8 inputs do shrink the job, and its
    # figure is the estimator's for fp8 under the job's own (DDP) conventions.
    body = {
        **request_body("llama-2-7b", mode="training", sequence_length=4096, batch_size=4),
        "training": {"training_tokens": 10**9, "global_batch_size": 256},
        "constraints": {"preferred_gpu": "rtx-4090"},
    }
    fp8 = {a.change: a for a in ask(body).advice}["precision=fp8"]
    assert fp8.required_bytes_after < fp8.required_bytes_before
    # Ada's FP8 path doubles the GEMM peak; end to end far less (attention and
    # memory-bound kernels stay 16-bit).
    assert fp8.time_factor is not None
    assert 0.55 < fp8.time_factor < 0.85
    direct = estimate(
        msgspec.convert(
            {
                **request_body(
                    "llama-2-7b", mode="training", sequence_length=4096, batch_size=4,
                    precision="fp8", parallelism={"framework": "ddp"},
                ),
                "gpu": "rtx-4090-24gb",
            },
            EstimateRequest,
        ),
        CATALOG,
    )  # fmt: skip
    assert fp8.required_bytes_after == direct.required_bytes


def test_loss_chunks_is_advised_for_a_128k_vocabulary() -> None:
    advice = {a.change: a for a in ask(JOBS["8b-lora-l4"]).advice}
    chunks = advice["loss_chunks=8"]
    saved = chunks.required_bytes_before - chunks.required_bytes_after
    assert saved > 20 * GiB  # the fp32 logits of 8 x 4,096 tokens x 128,256
    assert chunks.time_factor == pytest.approx(1.0, abs=0.01)
    direct = estimate(
        msgspec.convert(
            {
                **request_body(
                    "llama-3.1-8b", mode="finetune_lora", sequence_length=4096, batch_size=8,
                    gradient_checkpointing="full", loss_chunks=8,
                ),
                "gpu": "l4-24gb",
            },
            EstimateRequest,
        ),
        CATALOG,
    )  # fmt: skip
    assert chunks.required_bytes_after == direct.required_bytes


# ---------------------------------------------------------------- the order


def _in_order(advice: list[Advice]) -> None:
    fitting = [a.fits_after for a in advice]
    assert fitting == sorted(fitting, reverse=True), "fitting changes first"
    for fits in (True, False):
        group = [a for a in advice if a.fits_after == fits]
        keeps = ["mode=finetune_" not in a.change for a in group]
        assert keeps == sorted(keeps, reverse=True), "the job kept before LoRA / QLoRA"
        kept = [a for a in group if "mode=finetune_" not in a.change]
        if fits:
            costs = [a.gpu_hours_factor or 0.0 for a in kept]
            assert costs == sorted(costs), "the fewest GPU-hours first"
        else:
            saved = [a.required_bytes_before - a.required_bytes_after for a in kept]
            assert saved == sorted(saved, reverse=True), "the largest saving first"


@pytest.mark.parametrize("name", JOBS)
def test_advice_is_ranked_by_fit_then_what_it_costs_and_saves(name: str) -> None:
    advice = ask(JOBS[name]).advice
    _in_order(advice)
    assert advice[0].fits_after
    assert "mode=finetune_" not in advice[0].change or name == "8b-lora-l4"


def test_the_70b_job_is_told_to_shard_with_checkpointing_first() -> None:
    advice = ask(JOBS["70b-h100"]).advice
    first = advice[0]
    assert first.fits_after
    assert first.count > 1
    assert "shard over more GPUs" in first.change
    assert first.gpu_hours_factor == pytest.approx(first.count * (first.time_factor or 0), rel=1e-3)


def test_rank_advice_drops_what_does_not_shrink_and_repeats() -> None:
    def advice(change: str, after: int, fits: bool, hours: float, count: int = 1) -> Advice:
        return Advice(
            change=change, gpu="h100-sxm5-80gb", count=count, required_bytes_before=100,
            required_bytes_after=after, fits_after=fits, time_factor=hours / count,
            gpu_hours_factor=hours, detail="",
        )  # fmt: skip

    ranked = rank_advice(
        [
            advice("precision=fp8", 200, False, 0.7),  # grows: dropped
            advice("gradient_checkpointing=selective", 100, False, 1.0),  # no change: dropped
            advice("mode=finetune_qlora", 10, True, 0.8),
            advice("optimizer=adamw_8bit", 70, False, 1.0),
            advice("cpu_offload.optimizer", 40, False, 1.2),
            advice("shard over more GPUs", 60, True, 1.1, count=2),
            advice("zero_stage=3", 60, True, 1.1, count=2),  # the same effect: dropped
            advice("bf16", 50, True, 1.0),
        ]
    )
    assert [a.change for a in ranked] == [
        "bf16",
        "shard over more GPUs",
        "mode=finetune_qlora",
        "cpu_offload.optimizer",
        "optimizer=adamw_8bit",
    ]
