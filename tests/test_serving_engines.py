"""Serving engines: each engine's KV cache as its source sizes it, the launch command,
replicas and Kubernetes resources of every serving plan, ``max_model_len: auto``, and
the new fields through the API, the CLI and plan files (docs/serving.md)."""

import json
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.recommend.schema import Candidate, Launch
from tests.helpers import problem_at

CATALOG = builtin_catalog()
MIB = 1 << 20

SEVENTY_B_TP4: dict[str, Any] = {
    "model": {"name": "llama-3.1-70b"},
    "workload": {"mode": "inference", "sequence_length": 2048, "parallelism": {"tensor": 4}},
    "inference": {"prompt_tokens": 2048, "output_tokens": 512},
    "layout": "given",
    "constraints": {"include": ["h100-sxm5-80gb"]},
}
"""Llama 3.1 70B on one replica of four H100s, 2,048 in and 512 out."""


def top(body: dict[str, Any], **inference: Any) -> Candidate:
    body = {**body, "inference": {**body["inference"], **inference}}
    return recommend(msgspec.convert(body, RecommendRequest), CATALOG).recommendations[0]


def launch(c: Candidate) -> Launch:
    assert c.launch is not None
    return c.launch


def kv(body: dict[str, Any], **inference: Any) -> int:
    return launch(top(body, **inference)).kv_cache_bytes_per_gpu


USABLE = CATALOG.get("h100-sxm5-80gb").usable_memory_bytes


def test_vllm_takes_its_utilization_of_the_whole_gpu() -> None:
    # vLLM: KV = total x gpu_memory_utilization - everything else; a tenth less
    # utilization is a tenth of the GPU less cache, whatever the rest is.
    high = kv(SEVENTY_B_TP4, engine="vllm", memory_fraction=0.9)
    low = kv(SEVENTY_B_TP4, engine="vllm", memory_fraction=0.8)
    assert high - low == pytest.approx(0.1 * USABLE, abs=2)
    assert launch(top(SEVENTY_B_TP4)).memory_fraction == 0.9  # the plan's default


def test_trtllm_takes_its_fraction_of_what_the_profile_leaves_free() -> None:
    # TensorRT-LLM: KV = (total - the profile step's peak) x free_gpu_memory_fraction.
    high = kv(SEVENTY_B_TP4, engine="trtllm", memory_fraction=0.9)
    low = kv(SEVENTY_B_TP4, engine="trtllm", memory_fraction=0.8)
    assert low / high == pytest.approx(8 / 9, rel=1e-6)
    # The same share of free memory leaves more cache than vLLM's share of the whole GPU.
    assert high > kv(SEVENTY_B_TP4, engine="vllm", memory_fraction=0.9)


def test_sglang_sets_its_static_fraction_by_its_own_rule() -> None:
    # SGLang's default mem_fraction_static (memory_hook.py): the GPU less a reserve of
    # 512 MiB + 1.5 MiB per chunked-prefill token + 1 GiB per 8 TP ranks + 2 MiB per
    # decode graph batch (256 below TP 4, 512 from it), at least 10 GiB, in MiB.
    mib = USABLE / MIB
    for tp, graphs in ((4, 512), (2, 256)):
        reserved = max(512 + 1.5 * 8192 + tp / 8 * 1024 + 2 * graphs, 10240)
        body = {
            **SEVENTY_B_TP4,
            "workload": {**SEVENTY_B_TP4["workload"], "parallelism": {"tensor": tp}},
        }
        got = launch(top(body, engine="sglang")).memory_fraction
        assert got == round((mib - reserved) / mib, 3)


def test_sglang_and_vllm_leave_different_caches_on_the_same_gpu() -> None:
    vllm, sglang = (launch(top(SEVENTY_B_TP4, engine=e)) for e in ("vllm", "sglang"))
    assert sglang.memory_fraction is not None
    assert sglang.memory_fraction < 0.85 < vllm.memory_fraction  # type: ignore[operator]
    assert sglang.kv_cache_bytes_per_gpu < vllm.kv_cache_bytes_per_gpu
    # SGLang's fraction is of the memory free before the model loads (the CUDA context
    # and NCCL already taken): a tenth of it is a little under a tenth of the GPU.
    step = kv(SEVENTY_B_TP4, engine="sglang", memory_fraction=0.8) - kv(
        SEVENTY_B_TP4, engine="sglang", memory_fraction=0.7
    )
    assert 0.1 * (USABLE - 4 * 2**30) < step < 0.1 * USABLE


def test_the_profile_step_and_graphs_take_from_vllms_cache() -> None:
    # A larger step budget means a larger profile peak: less cache.
    small = kv(SEVENTY_B_TP4, max_batched_tokens=2048)
    large = kv(SEVENTY_B_TP4, max_batched_tokens=16384)
    assert large < small
    # More sequences in flight: more fp32 logits in the profile's sampler, larger graphs.
    assert kv(SEVENTY_B_TP4, max_concurrency=512) < kv(SEVENTY_B_TP4, max_concurrency=8)


@pytest.mark.parametrize(
    ("engine", "head"),
    [
        ("vllm", ["vllm", "serve", "meta-llama/Llama-3.1-70B", "--tensor-parallel-size", "4"]),
        (
            "sglang",
            ["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-70B"],
        ),
        ("trtllm", ["trtllm-serve", "meta-llama/Llama-3.1-70B", "--backend", "pytorch"]),
    ],
)
def test_each_serving_plan_carries_its_engines_command(engine: str, head: list[str]) -> None:
    c = top(SEVENTY_B_TP4, engine=engine, requests_per_second=5)
    run = launch(c)
    assert c.fits
    assert run.engine == engine
    assert run.command[: len(head)] == head
    assert run.shell.startswith(" ".join(head))
    assert c.layout is not None
    assert run.replicas == c.layout.data
    assert run.tensor_parallel == c.layout.tensor == 4
    assert run.resources.limits == {"nvidia.com/gpu": "4"}
    assert c.latency is not None
    assert run.max_concurrency == c.latency.concurrency
    assert run.max_model_len == 2048 + 512
    assert str(run.max_concurrency) in run.command
    # The cache holds the sequences in flight at their mean length (2,048 + 512 / 2), each
    # GPU its share of every token: its tokens are the replica's, not four times them.
    held = c.latency.kv_cache_sequences
    assert held is not None
    assert held * 2304 <= run.kv_cache_tokens < (held + 1) * 2304


def test_the_default_engine_is_vllm_and_changes_nothing_else() -> None:
    plain, named = top(SEVENTY_B_TP4), top(SEVENTY_B_TP4, engine="vllm")
    assert launch(plain).engine == "vllm"
    assert plain.latency == named.latency
    assert plain.launch == named.launch
    assert launch(top(SEVENTY_B_TP4, engine_version="0.34.0")).engine_version == "0.34.0"


def test_an_amd_replica_asks_for_amd_gpus() -> None:
    body = {**SEVENTY_B_TP4, "constraints": {"include": ["mi300x-192gb"]}}
    assert launch(top(body)).resources.limits == {"amd.com/gpu": "4"}


EIGHT_B_L4: dict[str, Any] = {
    "model": {"name": "llama-3.1-8b"},
    "workload": {"mode": "inference", "sequence_length": 1024},
    "inference": {"prompt_tokens": 1024, "output_tokens": 256},
    "layout": "given",
    "constraints": {"include": ["l4-24gb"]},
}
"""Llama 3.1 8B on one L4: its cache holds less than the model's 131,072-token context."""


def kv_of_one_sequence(tokens: int) -> int:
    """The estimator's KV cache of one sequence of ``tokens`` tokens of Llama 3.1 8B."""
    request = {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": tokens},
    }
    return estimate(msgspec.convert(request, EstimateRequest), CATALOG).breakdown.kv_cache_bytes


def test_auto_answers_the_longest_length_whose_sequence_fits() -> None:
    run = launch(top(EIGHT_B_L4, max_model_len="auto"))
    length, block = run.max_model_len, 64  # vLLM 0.34.0's block
    assert 1024 + 256 < length < 131_072
    assert length % block == 0
    # One sequence of it fits the cache vLLM's rule leaves; one block more does not.
    assert kv_of_one_sequence(length) <= run.kv_cache_bytes_per_gpu
    assert kv_of_one_sequence(length + block) > run.kv_cache_bytes_per_gpu
    assert run.kv_cache_tokens == length
    assert run.command[run.command.index("--max-model-len") + 1] == str(length)


def test_auto_stops_at_the_models_own_context() -> None:
    body = {**EIGHT_B_L4, "constraints": {"include": ["h200-sxm-141gb"]}}
    assert launch(top(body, max_model_len="auto")).max_model_len == 131_072


def test_a_max_model_len_the_cache_cannot_hold_does_not_fit() -> None:
    auto = launch(top(EIGHT_B_L4, max_model_len="auto")).max_model_len
    fits = top(EIGHT_B_L4, max_model_len=auto)
    assert fits.fits
    too_long = top(EIGHT_B_L4, max_model_len=auto + 64)
    assert not too_long.fits
    assert too_long.breaches[0].constraint == "memory"
    assert f"one sequence of {auto + 64} tokens" in too_long.reasons[0]


def test_static_engines_hold_one_full_sequence_and_say_so() -> None:
    body = {**EIGHT_B_L4, "constraints": {"include": ["h100-sxm5-80gb"]}}
    c = top(body, engine="transformers")
    assert c.latency is not None
    assert c.latency.concurrency == 1
    assert c.latency.limited_by == "batch_size"
    run = launch(c)
    assert run.command == [
        "transformers", "serve", "meta-llama/Llama-3.1-8B", "--dtype", "bfloat16", "--device", "cuda",
    ]  # fmt: skip
    assert run.memory_fraction is None
    assert run.notes
    compiled = launch(top(body, engine="compiled"))
    assert compiled.command[:4] == [
        "python",
        "generate.py",
        "--checkpoint_path",
        "checkpoints/meta-llama/Llama-3.1-8B/model.pth",
    ]


def test_transformers_is_planned_on_one_gpu() -> None:
    body = {
        "model": {"name": "llama-3.1-70b"},
        "workload": {"mode": "inference", "sequence_length": 2048},
        "inference": {"prompt_tokens": 2048, "output_tokens": 512, "engine": "transformers"},
        "constraints": {"include": ["h100-sxm5-80gb"]},
    }
    c = recommend(msgspec.convert(body, RecommendRequest), CATALOG).recommendations[0]
    assert not c.fits  # 140 GB of weights on one 80 GB GPU
    assert launch(c).tensor_parallel == 1


@pytest.mark.parametrize(
    ("inference", "workload", "path"),
    [
        ({"engine": "tgi"}, {}, "$.inference.engine"),
        ({"engine_version": "0.34 beta"}, {}, "$.inference.engine_version"),
        ({"max_model_len": "longest"}, {}, "$.inference.max_model_len"),
        ({"max_model_len": 2000}, {}, "$.inference.max_model_len"),
        ({"max_model_len": 200_000}, {}, "$.inference.max_model_len"),
        ({"memory_fraction": 1.5}, {}, "$.inference.memory_fraction"),
        ({"max_batched_tokens": 8}, {}, "$.inference.max_batched_tokens"),
        ({"model_path": "my model"}, {}, "$.inference.model_path"),
        ({"engine": "transformers", "memory_fraction": 0.8}, {}, "$.inference.memory_fraction"),
        ({"engine": "compiled", "max_concurrency": 8}, {}, "$.inference.max_concurrency"),
        ({"engine": "compiled"}, {"batch_size": 2}, "$.workload.batch_size"),
        ({"engine": "vllm", "mixed_chunk": False}, {}, "$.inference.mixed_chunk"),
        (
            {"engine": "transformers"},
            {"parallelism": {"tensor": 2}},
            "$.workload.parallelism.tensor",
        ),
    ],
)
def test_a_bad_engine_value_is_422_naming_it(
    client: TestClient[Litestar], inference: dict[str, Any], workload: dict[str, Any], path: str
) -> None:
    body = json.loads(json.dumps(SEVENTY_B_TP4))
    body["inference"].update(inference)
    body["workload"].update(workload)
    problem_at(client.post("/v1/recommendations", json=body), path)


def test_the_api_and_a_plan_file_answer_the_launch(client: TestClient[Litestar]) -> None:
    body = {**SEVENTY_B_TP4, "inference": {**SEVENTY_B_TP4["inference"], "engine": "trtllm"}}
    answer = client.post("/v1/recommendations", json=body)
    assert answer.status_code == 200, answer.text
    run = answer.json()["recommendations"][0]["launch"]
    assert run["command"][0] == "trtllm-serve"
    assert run["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    plan = client.post("/v1/plan", json={**body, "targets": {"max_cost_usd": 1e9}})
    assert plan.status_code == 200, plan.text
    assert plan.json()["recommendations"][0]["launch"]["command"] == run["command"]


def test_the_cli_prints_the_command_of_the_best_plan() -> None:
    args = [
        "recommend", "--model", "llama-3.1-8b", "--mode", "inference", "--seq-len", "1024",
        "--output-tokens", "256", "--engine", "sglang", "--max-model-len", "auto",
        "--include", "h100-sxm5-80gb",
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "launch #1 h100-sxm5-80gb with sglang: 1 replica(s) of 1 GPU(s)" in result.output
    assert "nvidia.com/gpu: 1" in result.output
    assert "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B" in result.output
    assert "--context-length 131072" in result.output
    as_json = CliRunner().invoke(main, [*args, "--format", "json"])
    assert json.loads(as_json.output)["recommendations"][0]["launch"]["max_model_len"] == 131_072
    bad = CliRunner().invoke(main, [*args[:-4], "--max-model-len", "longest"])
    assert bad.exit_code != 0
