"""The recommendation core: properties, published anchors, and the speed model's parts."""

import itertools
import time
from typing import Any

import msgspec
import pytest

from gpuplan.core.catalog import DEFAULT_PROVIDERS, Catalog, builtin_catalog, lowest
from gpuplan.core.errors import InvalidRequest
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest, ModelSpec, Parallelism, Runtime, Workload
from gpuplan.core.perf.comm import all_reduce_seconds, group_link
from gpuplan.core.perf.efficiency import efficiency_data, framework, generation
from gpuplan.core.perf.flops import token_flops
from gpuplan.core.perf.link import Link
from gpuplan.core.perf.step import micro_batch, training_step
from gpuplan.core.perf.step_records import StepLinks, StepShape
from gpuplan.core.recommend import InvalidRecommendation, RecommendRequest, recommend
from gpuplan.core.recommend.fit import MAX_ESTIMATES, MemoryOracle
from gpuplan.core.recommend.scenario import classify
from gpuplan.core.recommend.schema import Candidate, ParallelLayout, RecommendResponse, StepTime
from tests.helpers import bf16_rates

GiB = 1 << 30

CATALOG = builtin_catalog()


def req(**body: Any) -> RecommendRequest:
    return msgspec.convert(body, RecommendRequest)


def default_price(gpu: str) -> float:
    """The default basis's (AWS on-demand) price of ``gpu`` per GPU-hour."""
    quote = lowest(CATALOG.get(gpu), DEFAULT_PROVIDERS, "on_demand")
    assert quote is not None
    return quote.usd_per_gpu_hour


def by_gpu(response: RecommendResponse) -> dict[str, Candidate]:
    return {r.gpu: r for r in response.recommendations}


def layout(plan: Candidate) -> ParallelLayout:
    """A plan's layout, which every plan that fits has."""
    assert plan.layout is not None
    return plan.layout


def time_hours(plan: Candidate) -> float:
    """A plan's wall time, which every plan these tests time has."""
    assert plan.time_hours is not None
    return plan.time_hours


def llama7b_inference(batch: int, **extra: Any) -> RecommendRequest:
    # 3,840 prompt + 256 generated tokens: a 4,096-token context per sequence.
    return req(
        model={"name": "llama-2-7b"},
        workload={"mode": "inference", "sequence_length": 3840, "batch_size": batch},
        inference={"output_tokens": 256},
        objective="cheapest",
        limit=500,
        **extra,
    )


def train(
    model: str, tokens: int = 10**9, global_batch: int = 256, **workload: Any
) -> dict[str, Any]:
    """A training request: ``global_batch`` sequences of 4,096 tokens a step (1M tokens)."""
    return {
        "model": {"name": model},
        "workload": {"mode": "training", "sequence_length": 4096, **workload},
        "training": {"training_tokens": tokens, "global_batch_size": global_batch},
        "limit": 500,
    }


# ---------------------------------------------------------------- memory through the estimator


@pytest.mark.parametrize(
    "gpu", ["h100-sxm5-80gb", "a100-sxm4-80gb", "t4-16gb", "mi300x-192gb", "rtx-4090-24gb"]
)
def test_oracle_equals_the_estimator_on_each_gpu(gpu: str) -> None:
    model = ModelSpec(name="llama-2-7b")
    workload = Workload(
        mode="training",
        sequence_length=2048,
        parallelism=Parallelism(tensor=2, data=2, zero_stage=3),
    )
    spec = CATALOG.get(gpu)
    runtime: Runtime = "rocm" if spec.vendor == "amd" else "cuda"
    direct = estimate(
        EstimateRequest(model=model, workload=workload, gpu=gpu, runtime=runtime), CATALOG
    )
    assert MemoryOracle(model, CATALOG).required(workload, spec) == direct.required_bytes


# ---------------------------------------------------------------- anchors


def test_llama2_7b_4k_batch1_fits_a_24gb_card_not_a_16gb_one() -> None:
    out = by_gpu(recommend(llama7b_inference(1), CATALOG))
    for card in ("rtx-4090-24gb", "rtx-3090-24gb", "l4-24gb"):
        assert out[card].fits
        assert out[card].count == 1
        assert out[card].required_bytes_per_gpu <= CATALOG.get(card).usable_memory_bytes
    for card in ("t4-16gb", "v100-sxm2-16gb"):
        # One 16 GB card is not enough: either no plan, or a tensor-parallel pair.
        r = out[card]
        assert not r.fits or layout(r).tensor >= 2
        w = Workload(mode="inference", sequence_length=3840, max_new_tokens=256)
        one = estimate(
            EstimateRequest(model=ModelSpec(name="llama-2-7b"), workload=w, gpu=card), CATALOG
        )
        assert one.fit is not None
        assert not one.fit.fits


def test_llama2_7b_4k_batch8_needs_more_than_24gb_for_its_16gib_cache() -> None:
    w = Workload(mode="inference", sequence_length=4096, batch_size=8)
    one = estimate(EstimateRequest(model=ModelSpec(name="llama-2-7b"), workload=w), CATALOG)
    assert one.breakdown.kv_cache_bytes == 16 * GiB  # 8 x 4,096 tokens x 512 KiB
    assert one.required_bytes > 24 * GiB
    out = by_gpu(recommend(llama7b_inference(8), CATALOG))
    assert layout(out["rtx-4090-24gb"]).tensor >= 2  # a 24 GB card needs a partner
    assert layout(out["a100-sxm4-80gb"]).tensor == 1


def test_llama2_70b_full_training_needs_several_80gb_gpus_with_sharding() -> None:
    body = train("llama-2-70b", gradient_checkpointing="full", precision="bf16")
    body["constraints"] = {"include": ["h100-sxm5-80gb", "a100-sxm4-80gb"]}
    body["objective"] = "cheapest"
    response = recommend(req(**body), CATALOG)
    for r in response.recommendations:
        assert r.fits
        assert r.count > 1
        lay = layout(r)
        assert lay.zero_stage >= 1 or lay.tensor > 1 or lay.pipeline > 1
    assert response.scenario.class_ == "supercomputing_research"


def test_llama2_pretraining_speed_matches_the_published_gpu_hours() -> None:
    """Llama 2 (Touvron et al. 2023, Table 2): 7B took 184,320 and 70B 1,720,320
    A100-80GB GPU-hours for 2T tokens, i.e. about 3,014 and 323 tokens/s per GPU, at
    batches of 4M tokens (1,024 sequences of 4,096)."""
    published = {"llama-2-7b": 2e12 / 184_320 / 3600, "llama-2-70b": 2e12 / 1_720_320 / 3600}
    for model, per_gpu in published.items():
        body = train(
            model, global_batch=1024, gradient_checkpointing="full" if "70b" in model else "none"
        )
        body["constraints"] = {"include": ["a100-sxm4-80gb"], "max_gpus_per_job": 512}
        body["objective"] = "cheapest"
        r = recommend(req(**body), CATALOG).recommendations[0]
        assert r.throughput is not None
        ours = r.throughput.value / r.count
        assert 0.7 * per_gpu < ours < 1.4 * per_gpu, (model, ours, per_gpu)


def test_efficiencies_are_physical_and_sourced() -> None:
    data = efficiency_data()
    for gen in data.generations:
        for value in (
            gen.gemm_efficiency,
            gen.fp8_gemm_efficiency,
            gen.attention_efficiency,
            gen.bandwidth_efficiency,
            gen.decode_bandwidth_efficiency,
        ):
            assert 0.2 <= value <= 0.95, gen.name
        assert gen.source
    assert generation(CATALOG.get("h100-sxm5-80gb")).name == "hopper"
    assert generation(CATALOG.get("a100-sxm4-80gb")).name == "ampere-volta-datacenter"
    assert generation(CATALOG.get("b200-180gb")).name == "blackwell"
    assert generation(CATALOG.get("rtx-5090-32gb")).name == "gddr-professional-and-inference"
    assert {f.name for f in data.frameworks} == {"ddp", "fsdp1", "fsdp2", "deepspeed", "megatron"}


def test_mfu_is_a_result_that_grows_with_width_and_is_smaller_on_h100() -> None:
    """Measured MFU grows with model width (narrow GEMMs, a larger memory-bound share),
    and an H100 reaches a smaller share of its peak than an A100 on the same model."""

    def mfu(model: str, gpu: str) -> float:
        body = train(model, global_batch=8)
        body["constraints"] = {"include": [gpu], "gpu_counts": [8]}
        body["workload"]["parallelism"] = {"data": 8, "zero_stage": 3}
        body["layout"] = "given"
        body["workload"]["batch_size"] = 1
        r = recommend(req(**body), CATALOG).recommendations[0]
        assert r.mfu is not None
        return r.mfu

    a100 = [mfu(m, "a100-sxm4-80gb") for m in ("gpt2", "llama-2-7b", "llama-2-70b")]
    assert a100 == sorted(a100)
    assert mfu("llama-2-7b", "h100-sxm5-80gb") < mfu("llama-2-7b", "a100-sxm4-80gb")
    assert 0.2 < a100[0] < a100[-1] < 0.75


def test_a_requested_mfu_is_the_mfu_of_a_plan_with_nothing_else_to_wait_for() -> None:
    body = train("llama-2-7b", global_batch=32)
    body["objective"] = "cheapest"
    body["efficiency"] = {"mfu": 0.4}
    body["constraints"] = {"include": ["h200-sxm-141gb"], "power_fraction_of_tdp": 1.0}
    r = recommend(req(**body), CATALOG).recommendations[0]
    assert r.count == 1
    # The optimizer step, once per 32 sequences, is all that is added to the compute.
    assert r.mfu == pytest.approx(0.40, rel=0.02)
    gpu = CATALOG.get("h100-sxm5-80gb")
    assert r.flops_per_watt is not None
    assert r.flops_per_watt * gpu.tdp_watts / gpu.peak_flops["bf16"] == pytest.approx(
        r.mfu, rel=1e-3
    )


def test_the_global_batch_stays_the_job_on_every_count() -> None:
    body = train("llama-2-7b", global_batch=512, gradient_checkpointing="full")
    body["objective"] = "fastest"
    body["all_counts"] = True
    body["constraints"] = {"include": ["h100-sxm5-80gb"], "max_gpus_per_job": 64}
    plans = [r for r in recommend(req(**body), CATALOG).recommendations if r.fits]
    assert len(plans) >= 3
    for r in plans:
        lay = layout(r)
        assert lay.global_batch_size == 512
        assert lay.micro_batch_size is not None
        assert lay.gradient_accumulation_steps is not None
        assert lay.micro_batch_size * lay.gradient_accumulation_steps * lay.data == 512


@pytest.mark.parametrize("global_batch", [768, 1024])
def test_any_gpu_count_can_be_planned(global_batch: int) -> None:
    # 1024 sequences do not split over 3 data-parallel ranks: the pipeline takes the 3.
    body = train("llama-2-70b", global_batch=global_batch, gradient_checkpointing="full")
    for count in (48, 96, 192, 768):
        body["constraints"] = {
            "include": ["h100-sxm5-80gb"],
            "gpu_counts": [count],
            "max_gpus_per_job": 8192,
        }
        r = recommend(req(**body), CATALOG).recommendations[0]
        assert r.fits, (count, r.reasons)
        assert r.count == count
        assert layout(r).global_batch_size == global_batch
    # Without an explicit list, whole-node counts between powers of two are reachable.
    from gpuplan.core.recommend.schema import Constraints
    from gpuplan.core.recommend.training import counts

    every = counts(Constraints(max_gpus_per_job=8192))
    assert {1, 3, 7, 8, 24, 48, 96, 192, 768, 8192} <= set(every)
    assert 9 not in every  # above a node, whole nodes only


def test_nodes_of_72_reach_thousands_of_gpus() -> None:
    body = train("llama-2-70b", global_batch=4096, gradient_checkpointing="full")
    body["objective"] = "fastest"
    body["constraints"] = {
        "include": ["gb200-186gb"],
        "gpus_per_node": 72,
        "max_gpus_per_job": 8192,
    }
    r = recommend(req(**body), CATALOG).recommendations[0]
    assert r.fits
    assert r.count >= 1000
    assert r.count % 72 == 0


def test_a_wide_bound_stays_cheap_to_search() -> None:
    # 65,536 one-GPU nodes: the grid of counts is computed, not listed.
    body = train("llama-2-7b", global_batch=4096)
    body["objective"] = "fastest"
    body["constraints"] = {
        "include": ["h100-sxm5-80gb"],
        "gpus_per_node": 1,
        "max_gpus_per_job": 65536,
    }
    answer = recommend(req(**body), CATALOG)
    assert answer.search.plans_considered < 200


def test_a_given_layout_over_the_bounds_says_so() -> None:
    body = train("llama-2-7b", global_batch=64)
    body["workload"].update(batch_size=1, parallelism={"data": 64, "zero_stage": 3})
    body["layout"] = "given"
    body["constraints"] = {
        "include": ["h100-sxm5-80gb", "rtx-4090-24gb"],
        "max_gpus_per_job": 32,
        "required_interconnect": "nvlink",
    }
    plans = by_gpu(recommend(req(**body), CATALOG))
    h100, rtx = plans["h100-sxm5-80gb"], plans["rtx-4090-24gb"]
    assert h100.score == 0
    assert [b.constraint for b in h100.breaches] == ["constraints.max_gpus_per_job"]
    assert h100.breaches[0].factor == 2
    assert "constraints.required_interconnect" in [b.constraint for b in rtx.breaches]


def _megatron_over_slow_links(precision: str, dtype: str | None) -> tuple[float, int]:
    """(exposed communication s, required bytes per GPU) of a Llama 2 7B step on 64
    data-parallel H100s joined by 1 GB/s, under Megatron, reducing in ``dtype``."""
    parallelism: dict[str, object] = {"data": 64, "zero_stage": 1, "framework": "megatron"}
    if dtype is not None:
        parallelism["gradient_reduce_dtype"] = dtype
    body = train("llama-2-7b", global_batch=64)
    body["workload"].update(batch_size=1, precision=precision, parallelism=parallelism)
    body["layout"] = "given"
    body["constraints"] = {
        "include": ["h100-sxm5-80gb"],
        "max_gpus_per_job": 64,
        "network_bytes_per_s_per_gpu": 1e9,
    }
    (r,) = recommend(req(**body), CATALOG).recommendations
    assert r.step is not None
    return r.step.exposed_comm_s, r.required_bytes_per_gpu


def test_a_named_gradient_reduce_dtype_sets_the_gradient_traffic() -> None:
    """Reducing in fp32 sends twice the bytes of bf16: over a slow network the step
    exposes more communication, and the bf16 buffer needs less memory."""
    fp32, bf16 = (_megatron_over_slow_links("bf16", d) for d in ("fp32", "bf16"))
    assert fp32[0] > bf16[0] > 0
    assert fp32[1] > bf16[1]


@pytest.mark.parametrize(("precision", "default"), [("bf16", "fp32"), ("fp16", "fp16")])
def test_megatron_reduces_in_its_default_dtype_for_time_and_memory_alike(
    precision: str, default: str
) -> None:
    """Unnamed, Megatron-LM's default holds for both answers: fp32 for bf16 (it forces
    fp32 accumulation and reduction), the parameters' own dtype for fp16."""
    assert _megatron_over_slow_links(precision, None) == _megatron_over_slow_links(
        precision, default
    )


def test_the_search_keeps_the_gradient_reduce_dtype_where_the_framework_takes_it() -> None:
    """The search's layouts take the request's reduce dtype under Megatron and FSDP2 (a
    13B on 8 GPUs: FSDP2, whose fp32 reduce casts a layer's gradients) and drop it under
    the frameworks that have no such choice."""
    from gpuplan.core.memory.schema import Framework as FrameworkName
    from gpuplan.core.memory.schema import Workload
    from gpuplan.core.recommend.fit import with_layout
    from gpuplan.core.recommend.schema import ParallelLayout

    w = msgspec.convert({"mode": "training", "sequence_length": 8}, Workload)
    kinds: list[tuple[FrameworkName, str | None]] = [
        ("megatron", "bf16"), ("fsdp2", "bf16"), ("deepspeed", None)
    ]  # fmt: skip
    for name, kept in kinds:
        lay = ParallelLayout(tensor=1, pipeline=1, data=8, zero_stage=1, framework=name)
        assert with_layout(w, lay, "bf16").parallelism.gradient_reduce_dtype == kept
    plans = {}
    for dtype in ("fp32", "bf16"):
        body = train("llama-2-13b", global_batch=64)
        body["workload"].update(
            precision="bf16",
            gradient_accumulation_steps=8,
            parallelism={"framework": "megatron", "zero_stage": 1, "data": 8,
                         "gradient_reduce_dtype": dtype},
        )  # fmt: skip
        # The data-parallel layout, given: with Megatron's tensor-parallel overlap the
        # search may take tensor parallelism, which has no gradient reduce to type.
        body["layout"] = "given"
        body["constraints"] = {"include": ["h100-sxm5-80gb"], "gpu_counts": [8]}
        (plans[dtype],) = recommend(req(**body), CATALOG).recommendations
    fp32, bf16 = plans["fp32"], plans["bf16"]
    assert layout(fp32) == layout(bf16)
    assert layout(bf16).framework in ("megatron", "fsdp2")  # frameworks that take the field
    assert bf16.required_bytes_per_gpu < fp32.required_bytes_per_gpu


def test_layout_given_times_exactly_the_request_and_answers_when_it_does_not_fit() -> None:
    body = train("llama-2-70b", global_batch=64, gradient_checkpointing="full")
    body["workload"].update(
        batch_size=1,
        gradient_accumulation_steps=4,
        parallelism={"tensor": 4, "pipeline": 2, "data": 16, "zero_stage": 1},
    )
    body["layout"] = "given"
    body["constraints"] = {"include": ["h100-sxm5-80gb", "a10-24gb"], "max_gpus_per_job": 128}
    plans = by_gpu(recommend(req(**body), CATALOG))
    h100, a10 = plans["h100-sxm5-80gb"], plans["a10-24gb"]
    for r in (h100, a10):
        assert r.count == 128
        lay = layout(r)
        assert (lay.tensor, lay.pipeline, lay.data, lay.gradient_accumulation_steps) == (
            4,
            2,
            16,
            4,
        )
        assert r.step is not None
        assert r.step.bubble_s > 0  # two stages idle at a step's ends
    assert h100.fits
    assert not a10.fits
    assert "does not fit" in a10.reasons[0]
    assert a10.time_hours is not None  # timed even so


# ---------------------------------------------------------------- properties


def _scaled_catalog(factor: float) -> Catalog:
    return Catalog(
        [
            msgspec.structs.replace(g, usable_memory_bytes=int(g.usable_memory_bytes * factor))
            for g in CATALOG
        ]
    )


@pytest.mark.parametrize(
    "body",
    [
        train("llama-2-7b", gradient_checkpointing="selective"),
        train("llama-2-13b", precision="amp_bf16"),
        {
            "model": {"name": "llama-2-7b"},
            "workload": {"mode": "inference", "sequence_length": 4096, "batch_size": 4},
            "limit": 500,
        },
    ],
)
def test_more_memory_never_makes_a_fitting_plan_unfit(body: dict[str, Any]) -> None:
    body = {**body, "objective": "cheapest"}
    before = by_gpu(recommend(req(**body), CATALOG))
    after = by_gpu(recommend(req(**body), _scaled_catalog(1.5)))
    for gpu, r in before.items():
        if r.fits:
            assert after[gpu].fits, gpu
            # every layout that fitted still fits, so the best plan is never worse
            assert (after[gpu].cost_usd or 0) <= (r.cost_usd or 0) * (1 + 1e-9), gpu
            after_hours = time_hours(after[gpu]) * after[gpu].count
            assert after_hours <= time_hours(r) * r.count * (1 + 1e-9)


def test_cost_rises_with_price() -> None:
    body = train("llama-2-7b")
    body["objective"] = "cheapest"
    base = by_gpu(recommend(req(**body), CATALOG))
    h100 = base["h100-sxm5-80gb"]
    assert h100.cost_usd is not None
    on_demand = default_price("h100-sxm5-80gb")
    for factor in (1.5, 3.0):
        price = on_demand * factor
        body["constraints"] = {"prices": {"H100 SXM": {"cloud_usd_per_gpu_hour": price}}}
        out = by_gpu(recommend(req(**body), CATALOG))
        assert out["h100-sxm5-80gb"].cost_usd == pytest.approx(h100.cost_usd * factor)
        assert out["h100-sxm5-80gb"].price is not None
        assert out["h100-sxm5-80gb"].price.provider == "request"
        assert out["a100-sxm4-80gb"].cost_usd == pytest.approx(base["a100-sxm4-80gb"].cost_usd)


@pytest.mark.parametrize(
    "body",
    [
        train("llama-2-7b", mode="finetune_lora"),
        train("gpt2", sequence_length=1024, batch_size=8),
        train("mistral-7b", mode="finetune_qlora"),
        {
            "model": {"name": "llama-3.1-8b"},
            "workload": {"mode": "inference", "sequence_length": 2048},
            "limit": 500,
        },
    ],
)
def test_a_job_that_fits_one_gpu_is_never_given_more_under_cheapest(body: dict[str, Any]) -> None:
    request = req(**{**body, "objective": "cheapest"})
    oracle = MemoryOracle(request.model, CATALOG)
    one = msgspec.structs.replace(
        request.workload,
        parallelism=Parallelism(),
        max_new_tokens=256 if request.workload.mode == "inference" else 0,
    )
    checked = 0
    for r in recommend(request, CATALOG).recommendations:
        gpu = CATALOG.get(r.gpu)
        required = oracle.required(one, gpu)
        assert required is not None
        if required <= gpu.usable_memory_bytes:
            assert r.count == 1, r.gpu
            checked += 1
    assert checked >= 5


def test_more_gpus_never_lower_the_gpu_hours() -> None:
    body = train("llama-2-7b", global_batch=512, gradient_checkpointing="full")
    body["objective"] = "fastest"
    body["all_counts"] = True
    body["constraints"] = {"include": ["h100-sxm5-80gb"], "gpu_counts": [1, 2, 4, 8, 16, 32]}
    plans = sorted(recommend(req(**body), CATALOG).recommendations, key=lambda r: r.count)
    assert len(plans) >= 3
    hours = [time_hours(r) * r.count for r in plans]
    # Compute per GPU falls exactly as the count rises and communication only adds; a
    # sharded optimizer step (ZeRO) is the one thing that gets cheaper, by under 1%.
    assert all(later >= 0.99 * earlier for earlier, later in itertools.pairwise(hours))
    assert hours[-1] > hours[0]
    assert time_hours(plans[-1]) < time_hours(plans[0])


def test_the_answer_is_deterministic() -> None:
    body = train("llama-2-7b")
    one = msgspec.json.encode(recommend(req(**body), CATALOG))
    assert one == msgspec.json.encode(recommend(req(**body), CATALOG))


def test_every_request_is_bounded() -> None:
    body = train("llama-3.1-405b", gradient_checkpointing="full")
    body["objective"] = "fastest"
    body["constraints"] = {"max_gpus_per_job": 1024}
    start = time.perf_counter()
    response = recommend(req(**body), CATALOG)
    assert time.perf_counter() - start < 5
    assert response.search.estimates <= MAX_ESTIMATES
    assert any(r.fits for r in response.recommendations)


# ---------------------------------------------------------------- speed-model parts


def test_ring_all_reduce() -> None:
    link = Link(kind="nvlink", bytes_per_s=100e9, latency_s=0.0)
    assert all_reduce_seconds(1e9, 8, link) == pytest.approx(2 * 7 / 8 * 1e9 / 100e9)
    assert all_reduce_seconds(1e9, 1, link) == 0.0


def test_links_come_from_the_catalog() -> None:
    def link(gpu: str, n: int) -> Link:
        return group_link(CATALOG.get(gpu), n, gpus_per_node=8, network_bytes_per_s=50e9)

    assert link("h100-sxm5-80gb", 8).kind == "nvlink"
    assert link("h100-sxm5-80gb", 8).bytes_per_s == 450e9  # 900 GB/s both ways
    assert link("rtx-4090-24gb", 2).kind == "pcie"
    assert link("a100-pcie-80gb", 2).kind == "nvlink"  # a 2-GPU bridge
    assert link("a100-pcie-80gb", 4).kind == "pcie"
    assert link("h100-sxm5-80gb", 16).kind == "network"


def _shape(**changes: Any) -> StepShape:
    shape = StepShape(
        batch_size=1, seq=4096, accumulation=1, checkpointing="none", causal_skip=True,
        frozen_base=False, hidden_size=4096, mlp_width=11008, kv_width=4096, num_layers=32,
        num_heads=32, moe_layers=0, experts_per_token=0, activation_bytes=2,
        trainable_parameters=7_000_000_000, parameters=7_000_000_000, gradient_bytes=2,
        weight_bytes=2, gather_bytes=2, compile=False,
    )  # fmt: skip
    return msgspec.structs.replace(shape, **changes)


def _links(link: Link) -> StepLinks:
    return StepLinks(tensor=link, context=link, expert=link, pipeline=link, data=link, host=link)


NVLINK = Link(kind="nvlink", bytes_per_s=450e9, latency_s=8e-6)


def test_tensor_parallel_over_pcie_is_penalized() -> None:
    t = token_flops(None, None, 7_000_000_000)

    def step(link: Link) -> float:
        return training_step(
            t, _shape(), Parallelism(tensor=8), rates=bf16_rates("h100-sxm5-80gb"),
            links=_links(link), framework=framework("ddp"),
        ).seconds  # fmt: skip

    pcie = step(Link(kind="pcie", bytes_per_s=31.5e9, latency_s=25e-6))
    assert pcie > 1.3 * step(NVLINK)


def test_recompute_is_timed_apart_and_not_counted_in_the_mfu() -> None:
    from gpuplan.core.memory.model import resolve_model
    from gpuplan.core.memory.parameters import count_parameters

    arch = resolve_model(ModelSpec(name="llama-2-7b")).arch
    assert arch is not None
    t = token_flops(arch, count_parameters(arch), 0)

    def step(checkpointing: str) -> Any:
        return training_step(
            t, _shape(checkpointing=checkpointing), Parallelism(), rates=bf16_rates("a100-sxm4-80gb"),
            links=_links(NVLINK), framework=framework("fsdp2"),
        )  # fmt: skip

    plain, full, sel = step("none"), step("full"), step("selective")
    # A frozen base (LoRA) has no weight-gradient GEMMs: its forward is half of them.
    lora = training_step(
        t, _shape(checkpointing="full", frozen_base=True), Parallelism(),
        rates=bf16_rates("a100-sxm4-80gb"), links=_links(NVLINK), framework=framework("fsdp2"),
    )  # fmt: skip
    assert lora.recompute_s > full.recompute_s * 0.9
    assert lora.compute_s < full.compute_s * 0.8
    assert plain.recompute_s == 0
    # one more forward: a third of the GEMMs and memory passes, a quarter of the fused
    # attention (its backward recomputes the scores: three forwards)
    micro = micro_batch(
        t, _shape(checkpointing="full"), Parallelism(), bf16_rates("a100-sxm4-80gb"),
        framework("fsdp2"),
    )  # fmt: skip
    assert full.recompute_s == pytest.approx(micro.compute_s / 3 - micro.attention_s / 12)
    assert 0 < sel.recompute_s < 0.25 * full.recompute_s  # the attention core only
    assert plain.model_flops_per_token == full.model_flops_per_token == sel.model_flops_per_token
    assert full.mfu < plain.mfu  # recompute is time, not model FLOPs
    # 6N + PaLM's 12·L·H·Q·T, halved for a causal kernel
    n = t.matmul_parameters
    assert plain.model_flops_per_token == pytest.approx(6 * n + 6 * 32 * 4096 * 4096)


def test_an_interleaved_schedule_shrinks_the_bubble() -> None:
    t = token_flops(None, None, 7_000_000_000)

    def bubble(virtual: int) -> float:
        return training_step(
            t, _shape(accumulation=8), Parallelism(pipeline=4, virtual_stages=virtual),
            rates=bf16_rates("h100-sxm5-80gb"), links=_links(NVLINK), framework=framework("megatron"),
        ).bubble_s  # fmt: skip

    assert bubble(4) == pytest.approx(bubble(1) / 4, rel=0.05)


def test_fp8_is_faster_but_far_from_twice() -> None:
    """End to end, fp8 training runs 1.2-1.5x bf16 (PyTorch float8 + FSDP2 blog,
    Table 1), not the 2x of the GEMM peak: attention and memory-bound kernels stay."""
    t = token_flops(None, None, 8_000_000_000)
    gpu = CATALOG.get("h100-sxm5-80gb")

    def seconds(fp8: bool) -> float:
        rates = msgspec.structs.replace(
            bf16_rates("h100-sxm5-80gb"), fp8=fp8,
            peak_flops=gpu.peak_flops["fp8" if fp8 else "bf16"],
        )  # fmt: skip
        return training_step(
            t, _shape(), Parallelism(), rates=rates, links=_links(NVLINK),
            framework=framework("fsdp2"),
        ).seconds  # fmt: skip

    assert 1.1 < seconds(False) / seconds(True) < 1.8


def test_moe_counts_active_parameters() -> None:
    from gpuplan.core.memory.model import resolve_model
    from gpuplan.core.memory.parameters import count_parameters

    arch = resolve_model(ModelSpec(name="mixtral-8x7b")).arch
    assert arch is not None
    counts = count_parameters(arch)
    t = token_flops(arch, counts, counts.total)
    assert counts.total > 46e9
    assert 12e9 < t.matmul_parameters < 14e9  # two of eight experts per token


def test_measured_flops_replace_the_datasheet_peak() -> None:
    body = train("llama-2-7b")
    body["objective"] = "cheapest"
    body["constraints"] = {"include": ["h100-sxm5-80gb", "a100-sxm4-80gb"]}
    catalog_only = by_gpu(recommend(req(**body), CATALOG))
    body["measured_flops"] = {"NVIDIA H100 80GB HBM3": {"bf16": 4.9475e14}}  # half the peak
    measured = by_gpu(recommend(req(**body), CATALOG))
    h100 = measured["h100-sxm5-80gb"]
    assert h100.source == "measured"
    assert measured["a100-sxm4-80gb"].source == "catalog"
    # A measured rate is a GEMM timed alone, as the kernel table's are: 494.75 TFLOP/s
    # against the H100 table's 783 for the agent's 8192-cubed GEMM makes the matmuls
    # up to 1.58x slower; memory-bound kernels keep their speed, so the step slows less.
    ratio = time_hours(h100) / time_hours(catalog_only["h100-sxm5-80gb"])
    assert 1.2 < ratio < 783 / 494.75


# ---------------------------------------------------------------- scenario, advice, hybrid


@pytest.mark.parametrize(
    ("gib", "cls"),
    [
        (3, "light_inference"),
        (6, "light_inference"),
        (12, "medium_training"),
        (24, "medium_training"),
        (40, "large_distributed_training"),
        (80, "large_distributed_training"),
        (81, "supercomputing_research"),
    ],
)
def test_scenario_bands_and_the_rule_between_them(gib: float, cls: str) -> None:
    assert classify(int(gib * GiB), CATALOG).class_ == cls


def test_advice_makes_a_job_fit_the_preferred_gpu_with_computed_effects() -> None:
    body = train("llama-2-7b", precision="fp32", batch_size=4)
    body["constraints"] = {"preferred_gpu": "RTX 4090"}
    response = recommend(req(**body), CATALOG)
    advice = {a.change: a for a in response.advice if a.gpu == "rtx-4090-24gb"}
    assert "amp_bf16" in advice
    assert "gradient_checkpointing=full" in advice
    assert advice["gradient_checkpointing=full"].time_factor == pytest.approx(4 / 3, rel=0.02)
    assert advice["amp_bf16"].time_factor is not None
    # Tensor cores at twice the fp32 rate; memory-bound kernels move half the bytes.
    assert advice["amp_bf16"].time_factor <= 0.55
    combos = [a for a in advice.values() if "+" in a.change and a.count == 1]
    assert len(combos) == 1  # no single change fits 7B full training in 24 GB
    assert combos[0].fits_after
    assert "mode=finetune_lora" in combos[0].change
    # the effect is the estimator's own number
    w = Workload(
        mode="training",
        sequence_length=4096,
        batch_size=4,
        precision="fp32",
        optimizer="adamw_8bit",
    )
    direct = estimate(
        EstimateRequest(model=ModelSpec(name="llama-2-7b"), workload=w, gpu="rtx-4090-24gb"),
        CATALOG,
    )
    assert advice["optimizer=adamw_8bit"].required_bytes_after == direct.required_bytes


def test_zero_3_advice_names_the_fewest_gpus() -> None:
    body = train("llama-2-7b", gradient_checkpointing="full")
    body["constraints"] = {"preferred_gpu": "rtx-4090"}
    advice = {
        a.change: a for a in recommend(req(**body), CATALOG).advice if a.gpu == "rtx-4090-24gb"
    }
    zero = advice["zero_stage=3"]
    assert zero.fits_after
    assert zero.count >= 2
    oracle = MemoryOracle(ModelSpec(name="llama-2-7b"), CATALOG)
    gpu = CATALOG.get("rtx-4090-24gb")
    fewer = Workload(
        mode="training", sequence_length=4096, gradient_checkpointing="full",
        parallelism=Parallelism(data=zero.count // 2, zero_stage=3),
    )  # fmt: skip
    required = oracle.required(fewer, gpu)
    assert required is not None
    assert required > gpu.usable_memory_bytes
    assert advice["mode=finetune_lora"].fits_after


def test_a_single_change_that_fits_needs_no_combination() -> None:
    body = train("gpt2", sequence_length=1024, precision="fp32", batch_size=32)
    body["constraints"] = {"preferred_gpu": "rtx-3050-8gb"}
    advice = [a for a in recommend(req(**body), CATALOG).advice if a.gpu == "rtx-3050-8gb"]
    fitting = [a.change for a in advice if a.fits_after and a.count == 1]
    assert fitting == ["micro-batch 1 x gradient_accumulation 32"]
    assert not any("+" in a.change for a in advice if a.count == 1)


def test_inference_advice_quantization_and_kv_dtype() -> None:
    response = recommend(
        req(
            model={"name": "llama-2-13b"},
            workload={"mode": "inference", "sequence_length": 4096, "batch_size": 4},
            constraints={"preferred_gpu": "l4-24gb"},
        ),
        CATALOG,
    )
    changes = {a.change for a in response.advice if a.gpu == "l4-24gb"}
    assert {"weight_quantization=int8", "weight_quantization=int4", "kv_cache_dtype=fp8"} <= changes


def test_hybrid_comparison() -> None:
    body = train("llama-2-7b", mode="finetune_lora", tokens=2 * 10**8)
    body["constraints"] = {"deployment": "hybrid"}
    body["hybrid"] = {
        "owned_gpu": "rtx-4090-24gb",
        "owned_count": 4,
        "burst_gpu": "a100-sxm4-80gb",
        "jobs_per_month": 20,
    }
    h = recommend(req(**body), CATALOG).hybrid
    assert h is not None
    options = {o.name: o for o in h.options}
    assert set(options) == {"all_cloud", "all_on_prem", "hybrid"}
    assert h.burst_gpu_hours_per_month is not None
    price = default_price("a100-sxm4-80gb")
    assert options["all_cloud"].monthly_usd == pytest.approx(h.burst_gpu_hours_per_month * price)
    assert h.break_even_utilization is not None
    assert h.break_even_utilization > 0


# ---------------------------------------------------------------- refused input


def test_training_needs_its_volume() -> None:
    body = train("llama-2-7b")
    del body["training"]
    with pytest.raises(InvalidRecommendation) as info:
        recommend(req(**body), CATALOG)
    assert info.value.errors[0][0] == "$.training"


def test_unknown_gpu_in_constraints_names_the_field() -> None:
    body = train("llama-2-7b")
    body["constraints"] = {"include": ["h100-sxm5-80gb", "h900"]}
    with pytest.raises(InvalidRequest) as info:
        recommend(req(**body), CATALOG)
    assert info.value.errors[0][0] == "$.constraints.include[1]"


def test_the_estimate_bound_degrades_gracefully(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuplan.core.recommend.fit as fit

    monkeypatch.setattr(fit, "MAX_ESTIMATES", 5)
    response = recommend(req(**train("llama-2-70b", gradient_checkpointing="full")), CATALOG)
    assert response.search.estimates == 5
    assert any("bound" in w for w in response.warnings)
    for r in response.recommendations:  # whatever it reports as fitting does fit
        if r.fits:
            assert r.required_bytes_per_gpu <= r.usable_memory_bytes


def test_vision_speed_uses_measured_flops_per_sample() -> None:
    """ResNet-50 costs 8.2 GFLOP per 224 px image forward, not 2 x 25.6M: an A100 trains
    it at thousands of images/s (NVIDIA's published figures are 2-3k with AMP)."""
    body: dict[str, Any] = {
        "model": {"name": "resnet-50"},
        "workload": {"mode": "training", "batch_size": 256, "precision": "amp_bf16"},
        "training": {"samples": 1_281_167},
        "constraints": {"include": ["a100-sxm4-80gb"], "max_gpus_per_job": 1},
    }
    r = recommend(msgspec.convert(body, RecommendRequest), builtin_catalog())
    best = r.recommendations[0]
    assert best.throughput is not None
    assert best.throughput.unit == "samples/s"
    assert 1_500 < best.throughput.value < 4_000
    bigger = msgspec.convert(
        {**body, "workload": {**body["workload"], "image_size": 448}}, RecommendRequest
    )
    bigger_best = recommend(bigger, builtin_catalog()).recommendations[0]
    assert bigger_best.throughput is not None
    assert bigger_best.throughput.value == pytest.approx(best.throughput.value / 4, rel=0.05)


# ---------------------------------------------------------------- attention kernels

FALCON_7B = {
    "model_type": "falcon",
    "hidden_size": 4544,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "multi_query": True,
    "new_decoder_architecture": False,
    "vocab_size": 65024,
}


def _step_on_h100(model: dict[str, Any], precision: str, attention: str) -> StepTime:
    body = train("llama-2-7b", global_batch=8, precision=precision, attention=attention)
    body["model"] = model
    body["workload"].update(batch_size=1, parallelism={"data": 8, "zero_stage": 3})
    body["layout"] = "given"
    body["constraints"] = {"include": ["h100-sxm5-80gb"], "max_gpus_per_job": 8}
    (plan,) = recommend(req(**body), CATALOG).recommendations
    assert plan.step is not None
    return plan.step


@pytest.mark.parametrize(
    ("model", "precision"),
    [
        ({"name": "llama-3.1-8b"}, "fp32"),  # grouped heads in fp32: no fused kernel
        ({"hf_config": FALCON_7B}, "bf16"),  # one key/value head, not repeated
    ],
)
def test_sdpa_on_its_math_kernel_is_timed_as_eager_attention(
    model: dict[str, Any], precision: str
) -> None:
    """Where SDPA runs its math kernel, it computes every score as eager attention does:
    the speed model skips no causal half for it, as the memory estimate keeps its
    weights (one rule in core/memory/kernels.py)."""
    sdpa = _step_on_h100(model, precision, "sdpa")
    assert sdpa == _step_on_h100(model, precision, "eager")


def test_sdpa_on_a_fused_kernel_skips_the_causal_half() -> None:
    model = {"name": "llama-3.1-8b"}
    sdpa, eager = (_step_on_h100(model, "bf16", a) for a in ("sdpa", "eager"))
    assert sdpa.compute_s < eager.compute_s


def test_serving_prefill_on_the_math_kernel_is_timed_as_eager_attention() -> None:
    def served(attention: str) -> Candidate:
        body = {
            "model": {"hf_config": FALCON_7B},
            "workload": {
                "mode": "inference",
                "sequence_length": 2048,
                "batch_size": 1,
                "attention": attention,
            },
            "inference": {"output_tokens": 128, "max_concurrency": 4},
            "layout": "given",
            "constraints": {"include": ["h100-sxm5-80gb"], "max_gpus_per_job": 1},
        }
        (plan,) = recommend(req(**body), CATALOG).recommendations
        return plan

    sdpa, eager = served("sdpa"), served("eager")
    assert sdpa.latency is not None
    assert eager.latency is not None
    # The same time; only the memory left for the KV cache differs (eager attention's
    # forward holds its scores in a buffer of its own).
    timed = ("time_to_first_token_s", "time_per_output_token_s", "requests_per_s")
    assert [getattr(sdpa.latency, f) for f in timed] == [getattr(eager.latency, f) for f in timed]
