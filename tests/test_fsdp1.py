"""``parallelism.framework: fsdp1``: PyTorch FSDP1 (flat parameters) in the memory estimate
and the speed model, from one declaration (``Parallelism.fsdp1``).

The byte rules are FSDP1's own (torch 2.13.0, torch/distributed/fsdp/_flat_param.py and
_runtime_utils.py; core/memory/fsdp1.py): shards padded to a multiple of the ranks, kept
in the parameters' dtype, the root unit gathered through the step, the prefetched unit
of ``BACKWARD_PRE``, each unit's flat gradient built by concatenation, ``no_sync()``'s
unsharded gradients, adapters inside a layer's flat parameter. The real CPU steps of
bench/accuracy/fsdp1.py check the totals (the slow test at the end, and the grid)."""

import json
import math
from typing import Any

import msgspec
import pytest
from bench.accuracy.cases import LLAMA, LLAMA_ACT, LLAMA_STATES
from click.testing import CliRunner
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest, EstimateResponse
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.recommend.schema import Candidate

CATALOG = builtin_catalog()


def layer_params(config: dict[str, Any]) -> int:
    """A Llama layer of ``config``: q, k, v, o, gate, up, down and two norms."""
    h, f = int(config["hidden_size"]), int(config["intermediate_size"])
    kv = h // int(config["num_attention_heads"]) * int(config["num_key_value_heads"])
    return 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h


def root_params(config: dict[str, Any]) -> int:
    """Embeddings, final norm and an untied head."""
    h = int(config["hidden_size"])
    return 2 * int(config["vocab_size"]) * h + h


def est(
    config: dict[str, Any],
    *,
    data: int,
    precision: str = "fp32",
    mode: str = "training",
    batch: int = 2,
    seq: int = 256,
    fsdp1: dict[str, Any] | None = None,
    framework: str = "fsdp1",
    init: str = "meta",
    **workload: Any,
) -> EstimateResponse:
    """A CPU estimate (no allocator cache, context or workspaces: tensors only)."""
    parallelism: dict[str, Any] = {"data": data, "framework": framework, "init": init}
    if fsdp1 is not None:
        parallelism["fsdp1"] = fsdp1
    body = {
        "model": {"hf_config": config},
        "workload": {
            "mode": mode,
            "batch_size": batch,
            "sequence_length": seq,
            "precision": precision,
            "parallelism": parallelism,
            **workload,
        },
        "runtime": "cpu",
    }
    return estimate(msgspec.convert(body, EstimateRequest), CATALOG)


# ----------------------------------------------------------------- the flat parameters


def test_each_unit_is_sharded_with_its_padding() -> None:
    """Over 3 ranks neither a layer (725,504 elements) nor the root divides: each rank
    keeps ceil(n / 3) of every unit (``_get_shard`` pads the last chunk)."""
    layer, root = layer_params(LLAMA), root_params(LLAMA)
    assert layer % 3
    assert root % 3
    r = est(LLAMA, data=3)
    shard = 4 * math.ceil(layer / 3) + math.ceil(root / 3)
    assert r.breakdown.weights_bytes == 4 * shard  # fp32
    # The original parameters' views (no padding) are what the optimizer steps.
    assert r.breakdown.optimizer_state_bytes == pytest.approx(8 * (4 * layer + root) / 3, abs=1)
    flat = est(LLAMA, data=3, fsdp1={"use_orig_params": False})
    # use_orig_params=False: the optimizer steps the padded flat shards themselves.
    assert flat.breakdown.optimizer_state_bytes == 8 * shard


def test_mixed_precision_keeps_fp32_shards_and_gathers_bf16() -> None:
    """Under ``MixedPrecision(param_dtype=bf16)`` the shard stays fp32 (it is the
    optimizer's parameter), units are gathered in bf16, and the front ends reduce in
    bf16: the assumptions say so, and FSDP2's default fp32 reduce costs more."""
    amp = est(LLAMA_ACT, data=2, precision="amp_bf16", batch=4)
    pure = est(LLAMA_ACT, data=2, precision="bf16", batch=4)
    assert amp.breakdown.weights_bytes == 2 * pure.breakdown.weights_bytes
    (note,) = [a for a in amp.assumptions if a.startswith("fsdp1:")]
    assert "units gathered in bf16, gradients reduced in bf16" in note
    # Lightning's bf16-mixed: fp32 parameters gathered, autocast casting each weight.
    lightning = est(LLAMA_ACT, data=2, precision="amp_bf16", batch=4, fsdp1={"param_dtype": "fp32"})
    assert lightning.peak_bytes > amp.peak_bytes
    fsdp2 = est(LLAMA_ACT, data=2, precision="amp_bf16", batch=4, framework="fsdp2")
    assert "gradient_reduce_dtype fp32" in fsdp2.assumptions[0]


def test_backward_prefetch_holds_one_more_unit() -> None:
    """``BACKWARD_PRE`` gathers the layer below before this layer's gradients: one more
    unit (padded, in param_dtype) during the layers' backward than ``BACKWARD_POST`` or
    none (measured: 10.56 MiB on this shape, bench/accuracy/cases.toml)."""
    pre = est(LLAMA_ACT, data=2, batch=4)
    post = est(LLAMA_ACT, data=2, batch=4, fsdp1={"backward_prefetch": "backward_post"})
    none = est(LLAMA_ACT, data=2, batch=4, fsdp1={"backward_prefetch": "none"})
    assert pre.peak_phase == post.peak_phase == "backward (layers)"
    assert pre.peak_bytes - post.peak_bytes == 4 * layer_params(LLAMA_ACT)
    assert post.peak_bytes == none.peak_bytes


def test_the_flat_gradient_is_built_beside_the_views_gradients() -> None:
    """At the end of a layer's backward FSDP1 concatenates the views' gradients into the
    flat one: twice the layer's gradient bytes at once, the peak of a states-heavy step
    (measured 217.58 MiB, this estimate 217.56)."""
    r = est(LLAMA_STATES, data=2, batch=1, seq=32)
    assert r.peak_phase == "backward (layers)"
    assert r.peak_bytes == pytest.approx(217.58 * 2**20, rel=0.002)


def test_no_sync_accumulates_unsharded_gradients() -> None:
    """Under ``no_sync()`` (transformers' Trainer, Lightning) the micro-batches before the
    last keep every unit's unsharded bf16 gradient: over 4 ranks that is twice the fp32
    shards' bytes (measured 146.41 against 123.78 MiB)."""
    common: dict[str, Any] = {
        "data": 4,
        "precision": "amp_bf16",
        "batch": 1,
        "seq": 64,
        "gradient_accumulation_steps": 2,
    }
    no_sync = est(LLAMA_STATES, **common)
    synced = est(LLAMA_STATES, **common, fsdp1={"accumulate_without_sync": False})
    assert no_sync.peak_bytes == pytest.approx(146.41 * 2**20, rel=0.002)
    assert synced.peak_bytes == pytest.approx(123.78 * 2**20, rel=0.002)


def test_materialized_init_flattens_a_unit_beside_the_whole_model() -> None:
    """``init: materialized`` (the model on the GPU before wrapping): FSDP1 flattens each
    unit into a new tensor and clones its chunk before freeing it, the first layer beside
    the whole model (measured at wrapping: 102.98 MiB)."""
    r = est(LLAMA_STATES, data=8, batch=1, seq=8, init="materialized")
    assert r.peak_phase == "materialization (before sharding)"
    expected = 4 * (r.parameters + layer_params(LLAMA_STATES) * (1 + 1 / 8))
    assert r.peak_bytes == pytest.approx(expected, abs=8)
    assert r.peak_bytes == pytest.approx(102.98 * 2**20, rel=0.001)


# ----------------------------------------------------------------------------- LoRA


def lora_7b(adapters: str | None, framework: str = "fsdp1") -> EstimateResponse:
    """Llama-2-7B LoRA (q, v, rank 8) on 2 GPUs, bf16, full checkpointing: the shape of
    Lightning's FSDPStrategy runs (bf16-true)."""
    parallelism: dict[str, Any] = {"data": 2, "framework": framework}
    if adapters:
        parallelism["fsdp1"] = {"adapters": adapters}
    body = {
        "model": {"name": "llama-2-7b"},
        "workload": {
            "mode": "finetune_lora",
            "sequence_length": 512,
            "batch_size": 4,
            "precision": "bf16",
            "gradient_checkpointing": "full",
            "lora": {"rank": 8, "target_modules": ["q_proj", "v_proj"]},
            "parallelism": parallelism,
        },
        "gpu": "a100-sxm4-80gb",
    }
    return estimate(msgspec.convert(body, EstimateRequest), CATALOG)


def test_adapters_inside_a_layers_unit_make_every_layer_train() -> None:
    """Adapters sharing their layer's flat parameter (Lightning's ``auto_wrap_policy=
    {Block}``) make it require grad: every layer's gradient is built, reduced and kept
    as a shard. An estimate that counts the adapters' gradients only (FSDP2, or PEFT's
    policy wrapping them apart) reads about 37% low: the held-out FSDP1 LoRA pattern."""
    shared = lora_7b("in_layer_units")
    separate = lora_7b(None)
    fsdp2 = lora_7b(None, framework="fsdp2")
    assert shared.trainable_parameters == separate.trainable_parameters
    assert 1 - fsdp2.peak_bytes / shared.peak_bytes > 0.3
    assert shared.breakdown.gradients_bytes > 20 * separate.breakdown.gradients_bytes
    assert any("share their layer's flat parameter" in a for a in shared.assumptions)


# ------------------------------------------------------------------------------ speed


def given(framework: str, **extra: Any) -> Candidate:
    """Llama-3.1-8B on 16 H100 over two nodes, bf16 (both frameworks send 2-byte
    gathers and gradients), timed exactly as given."""
    mode = extra.pop("mode", "training")
    fsdp1 = extra.pop("fsdp1", None)
    parallelism: dict[str, Any] = {
        "data": 16,
        "zero_stage": extra.pop("zero_stage", 3),
        "framework": framework,
    }
    if fsdp1:
        parallelism["fsdp1"] = fsdp1
    body = {
        "model": {"name": "llama-3.1-8b"},
        "workload": {
            "mode": mode,
            "sequence_length": 4096,
            "batch_size": 1,
            "precision": "bf16",
            "gradient_checkpointing": "full",
            "parallelism": parallelism,
        },
        "training": {"training_tokens": 10**9},
        "layout": "given",
        "constraints": {"include": ["h100-sxm5-80gb"], "max_gpus_per_job": 16},
        "limit": 1,
    }
    (plan,) = recommend(msgspec.convert(body, RecommendRequest), CATALOG).recommendations
    assert plan.layout is not None
    assert plan.layout.framework == framework
    return plan


def test_fsdp1_without_backward_prefetch_exposes_the_backward_traffic() -> None:
    """With ``BACKWARD_PRE`` FSDP1 hides its traffic as FSDP2 does (and gathers the root
    once a micro-batch, not twice); without backward prefetch (transformers' Trainer
    default) the next unit's all-gather waits behind this unit's reduce-scatter and the
    backward's traffic is all exposed. Forward prefetch changes nothing here: the CPU
    issues the next forward all-gather ahead of the GPU (FSDP1: "only useful for
    CPU-bound workloads")."""
    fsdp2, pre = given("fsdp2"), given("fsdp1")
    none = given("fsdp1", fsdp1={"backward_prefetch": "none"})
    assert pre.step is not None
    assert fsdp2.step is not None
    assert none.step is not None
    assert pre.step.exposed_comm_s <= fsdp2.step.exposed_comm_s
    assert none.step.exposed_comm_s > 2 * pre.step.exposed_comm_s
    assert none.step.seconds > 1.3 * fsdp2.step.seconds


def test_zero_stage_0_is_fsdp1s_full_shard() -> None:
    """FSDP1's default sharding strategy is FULL_SHARD: a request naming fsdp1 without a
    ZeRO stage is timed and sized as stage 3."""
    plan = given("fsdp1")
    default = given("fsdp1", zero_stage=0)
    assert default.layout is not None
    assert default.layout.zero_stage == 3
    assert default.step == plan.step
    assert default.required_bytes_per_gpu == plan.required_bytes_per_gpu


def test_adapters_inside_layers_compute_and_reduce_every_weight_gradient() -> None:
    """In a layer's flat parameter the frozen weights' views require grad: their weight
    gradients are computed (6N, not LoRA's 4N) and the whole layer is reduce-scattered."""
    shared = given("fsdp1", mode="finetune_lora", fsdp1={"adapters": "in_layer_units"})
    separate = given("fsdp1", mode="finetune_lora")
    assert shared.step is not None
    assert separate.step is not None
    assert shared.step.compute_s > 1.2 * separate.step.compute_s


# ------------------------------------------------------------------ API, CLI, search


def test_the_api_estimates_and_searches_fsdp1(
    client: TestClient,  # type: ignore[type-arg]
) -> None:
    body = {
        "model": {"name": "llama-2-7b"},
        "workload": {
            "mode": "finetune_lora",
            "sequence_length": 512,
            "precision": "bf16",
            "parallelism": {
                "data": 2,
                "framework": "fsdp1",
                "fsdp1": {"adapters": "in_layer_units", "backward_prefetch": "backward_post"},
            },
        },
    }
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == 200, response.text
    assert any(a.startswith("fsdp1: FULL_SHARD") for a in response.json()["assumptions"])
    search = {
        "model": {"name": "llama-2-13b"},
        "workload": {"mode": "training", "sequence_length": 4096, "precision": "bf16",
                     "gradient_checkpointing": "full", "parallelism": {"framework": "fsdp1"}},
        "training": {"training_tokens": 10**9, "global_batch_size": 64},
        "constraints": {"include": ["h100-sxm5-80gb"], "gpu_counts": [8]},
        "limit": 5,
    }  # fmt: skip
    response = client.post("/v1/recommendations", json=search)
    assert response.status_code == 200, response.text
    layouts = [r["layout"] for r in response.json()["recommendations"] if r["layout"]]
    # A 13B model's states do not fit 8 replicas: the sharded layouts run FSDP1.
    assert layouts
    assert all(lay["framework"] == "fsdp1" for lay in layouts)


def test_the_cli_takes_framework_fsdp1() -> None:
    result = CliRunner().invoke(
        main,
        ["recommend", "--model", "llama-3.1-8b", "--mode", "training", "--seq-len", "4096",
         "--tokens", "1e9", "--framework", "fsdp1", "--zero-stage", "3", "--data-parallel",
         "8", "--precision", "bf16", "--checkpointing", "full", "--layout", "given",
         "--include", "h100-sxm5-80gb", "--parallelism-fsdp1-backward-prefetch", "none",
         "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (plan,) = json.loads(result.output)["recommendations"][:1]
    assert plan["layout"]["framework"] == "fsdp1"
    refused = CliRunner().invoke(
        main,
        ["estimate", "--model", "llama-2-7b", "--mode", "training", "--seq-len", "512",
         "--framework", "fsdp2", "--parallelism-fsdp1-backward-prefetch", "none"],
    )  # fmt: skip
    assert refused.exit_code == 2
    assert "$.workload.parallelism.fsdp1" in refused.output


# --------------------------------------------------------------- a real FSDP1 step


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("name", ["llama states fsdp1 amp accum2 no_sync"])
def test_a_real_fsdp1_step_on_this_cpu(name: str) -> None:
    """Rank 0 of a real FSDP1 step (bench/accuracy/fsdp1.py) against the estimate. The
    LoRA case with adapters inside their layers' units is held to the same 2% by
    tests/test_memory_accuracy.py's fast grid (it is a fast case, stepped there at 128
    tokens): one real run of it, not two (a bf16 step on a CPU without bf16 instructions
    takes minutes)."""
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from bench.accuracy.cases import GRID
    from bench.accuracy.run import request_for, run_case

    torch.set_num_threads(1)
    (case,) = [c for c in GRID if c.name == name]
    measured = run_case(case)
    estimated = estimate(request_for(case), CATALOG)
    assert estimated.peak_bytes == pytest.approx(measured.peak_bytes, rel=0.02)


@pytest.mark.slow
@pytest.mark.torch
def test_a_real_fsdp1_step_after_a_trace_in_the_same_process() -> None:
    """The tracer keeps its fake process group between traces; a real FSDP1 step after a
    trace in the same process (a test worker) starts its own group instead of failing
    with "trying to initialize the default process group twice"."""
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from bench.accuracy.cases import GRID
    from bench.accuracy.run import run_case

    from gpuplan.trace.fsdp import fake_mesh

    torch.set_num_threads(1)
    fake_mesh(4, 1, "cpu")
    assert dist.is_initialized()
    # The cheapest FSDP1 case: what is checked is the process group, not the count.
    (case,) = [c for c in GRID if c.name == "llama states fsdp1 amp accum2 no_sync"]
    assert run_case(case).peak_bytes > 0
    assert not dist.is_initialized()  # the step's group is torn down after it
