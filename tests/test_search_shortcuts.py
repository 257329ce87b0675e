"""The search's shortcuts rest on facts about the speed and memory models; each is checked
here, so a change to a model that breaks one fails a test rather than an answer.

tests/test_recommend_identical.py holds the answers themselves to the recorded bytes.
"""

import math
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import (
    EstimateRequest,
    ModelSpec,
    Parallelism,
    Runtime,
    Workload,
)
from gpuplan.core.perf.efficiency import efficiency_data
from gpuplan.core.perf.step import micro_batch, step_floor, training_step
from gpuplan.core.recommend import RecommendRequest
from gpuplan.core.recommend.context import gpu_context
from gpuplan.core.recommend.fit import MemoryOracle, runtime_of
from gpuplan.core.recommend.job import resolve_job
from gpuplan.core.recommend.schema import Constraints, ParallelLayout
from gpuplan.core.recommend.training import (
    HOST,
    GpuSearch,
    _link_of,
    _rungs,
    _step_links,
    describe_layout,
)

CATALOG = builtin_catalog()
GPUS = list(CATALOG)
COUNTS = (1, 2, 4, 6, 8, 16, 24, 64)

REQUESTS: dict[str, dict[str, Any]] = {
    "lora": {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "finetune_lora", "sequence_length": 4096},
        "training": {"training_tokens": 10**9},
    },
    "70b full recompute": {
        "model": {"name": "llama-2-70b"},
        "workload": {"mode": "training", "sequence_length": 4096, "gradient_checkpointing": "full"},
        "training": {"training_tokens": 10**9},
    },
    "mixtral": {
        "model": {"name": "mixtral-8x7b"},
        "workload": {"mode": "training", "sequence_length": 4096, "gradient_checkpointing": "full"},
        "training": {"training_tokens": 10**9},
    },
    "8b fp8 32k context, selective": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {
            "mode": "training",
            "sequence_length": 32768,
            "precision": "fp8",
            "gradient_checkpointing": "selective",
        },
        "training": {"training_tokens": 10**9, "global_batch_size": 64},
    },
    "7b eager attention, fp32, mfu given": {
        "model": {"name": "llama-2-7b"},
        "workload": {
            "mode": "training",
            "sequence_length": 2048,
            "precision": "fp32",
            "attention": "eager",
        },
        "training": {"training_tokens": 10**9, "global_batch_size": 96},
        "efficiency": {"mfu": 0.35},
    },
    "fsdp1 lora, no prefetch": {
        "model": {"name": "llama-2-7b"},
        "workload": {
            "mode": "finetune_lora",
            "sequence_length": 4096,
            "parallelism": {"framework": "fsdp1", "fsdp1": {"backward_prefetch": "none"}},
        },
        "training": {"training_tokens": 10**9},
    },
    "resnet-50": {
        "model": {"name": "resnet-50"},
        "workload": {"mode": "training", "batch_size": 32},
        "training": {"samples": 10**7},
    },
}


def searches(body: dict[str, Any]) -> list[tuple[GpuSearch, list[Any]]]:
    """Every GPU's search of ``body`` with the rungs of each count in COUNTS."""
    request = msgspec.convert(body, RecommendRequest)
    job = resolve_job(request, CATALOG)
    oracle = MemoryOracle(request.model, CATALOG)
    trainable = oracle.first(job.workload).trainable_parameters
    c = request.constraints
    out = []
    for gpu in GPUS:
        ctx = gpu_context(gpu, job, request.efficiency.mfu, request.efficiency.mbu, c)
        if ctx.rates is None:
            continue
        search = GpuSearch(job, ctx, oracle, c, trainable)
        rungs = [r for n in COUNTS for r in _rungs(job, oracle, c, count=n, trainable=trainable)]
        out.append((search, rungs))
    return out


def rated(body: dict[str, Any]) -> tuple[RecommendRequest, Any, list[Any]]:
    """``body`` as a request, its job, and the context of every GPU with a matmul path
    for it (the GPUs a search plans on)."""
    request = msgspec.convert(body, RecommendRequest)
    job = resolve_job(request, CATALOG)
    contexts = [gpu_context(g, job, None, None, request.constraints) for g in GPUS]
    return request, job, [ctx for ctx in contexts if ctx.rate is not None]


def best_admissible(options: list[Any], objective: Any) -> Any:
    """What a GPU answers of ``options`` under ``objective``: its best admissible plan's
    count, layout and figures (None when none is admissible)."""
    from gpuplan.core.recommend.option import objective_key

    admissible = [o for o in options if o.admissible]
    if not admissible:
        return None
    o = min(admissible, key=lambda o: objective_key(o, objective))
    return (o.count, o.layout, o.cost_usd, o.energy_kwh, o.speed_s)


@pytest.mark.parametrize("name", REQUESTS)
def test_the_floor_never_exceeds_the_time(name: str) -> None:
    """Best-first timing skips a layout whose floor comes after the time chosen: the floor
    must be a lower bound of the step (and of the job) on every GPU, layout and
    framework, in floating point."""
    checked = 0
    for search, rungs in searches(REQUESTS[name]):
        for rung in rungs:
            assert search.floor(rung) <= search.time(rung).seconds, (search.ctx.gpu.id, rung)
            links = _step_links(rung.spans, search.link)
            micro = search.micro(rung)
            assert search.ctx.rates is not None
            for framework in efficiency_data().frameworks:
                step = training_step(
                    search.job.flops,
                    rung.shape,
                    rung.laid.parallelism,
                    rates=search.ctx.rates,
                    links=links,
                    framework=framework,
                    comm_overlap=search.job.overlap,
                    micro=micro,
                )
                assert step_floor(rung.shape, rung.laid.parallelism, micro) <= step.seconds
                checked += 1
    assert checked > 100


@pytest.mark.parametrize("name", REQUESTS)
def test_a_micro_batch_reads_only_what_its_memo_key_holds(name: str) -> None:
    """Rungs alike in ``Rung.micro`` (the shape but its accumulation, the tensor,
    pipeline, context and expert degrees, the framework's elementwise factor and whether
    it is Megatron) share a micro-batch: ``micro_batch`` must not read anything else of
    them (another framework's name on the same side of Megatron included)."""
    for search, rungs in searches(REQUESTS[name])[::7]:
        for rung in rungs:
            p = rung.laid.parallelism
            other_layout = msgspec.structs.replace(
                p,
                data=p.data * 3 + 1,
                zero_stage=(p.zero_stage + 1) % 4,
                virtual_stages=p.virtual_stages + 1,
                sequence_parallel=not p.sequence_parallel,
                framework="deepspeed" if p.framework != "deepspeed" else "ddp",
                gradient_reduce_dtype="fp32",
                cpu_offload=msgspec.structs.replace(
                    p.cpu_offload, optimizer=not p.cpu_offload.optimizer
                ),
            )
            f = rung.framework
            other_framework = msgspec.structs.replace(
                f,
                name="megatron"
                if f.name == "megatron"
                else ("ddp" if f.name != "ddp" else "fsdp2"),
                tensor_exposed=f.tensor_exposed / 2,
                data_hidden_share=f.data_hidden_share / 2,
                gather_hidden_share=f.gather_hidden_share / 2,
                pipeline_exposed=f.pipeline_exposed / 2,
                expert_exposed=f.expert_exposed / 2,
                source="another",
            )
            other_shape = msgspec.structs.replace(rung.shape, accumulation=7)
            rates = search.ctx.rates
            assert rates is not None
            assert micro_batch(search.job.flops, rung.shape, p, rates, f) == micro_batch(
                search.job.flops, other_shape, other_layout, rates, other_framework
            )


def test_links_and_their_words_read_only_the_interconnect() -> None:
    """GPUs of one interconnect share their links (and a layout's words): every other
    field of the GPU must leave them unchanged."""
    c = Constraints()
    layouts = [
        ParallelLayout(tensor=1, pipeline=1, data=16, zero_stage=3),
        ParallelLayout(tensor=8, pipeline=2, data=4, zero_stage=1, virtual_stages=2),
        ParallelLayout(tensor=4, pipeline=1, data=2, context=2, zero_stage=0),
    ]
    for a in GPUS:
        for b in GPUS:
            mixed = msgspec.structs.replace(b, interconnect=a.interconnect)
            for size in (HOST, 1, 2, 4, 8, 9, 16, 72, 4096):
                assert _link_of(mixed, size, c) == _link_of(a, size, c), (a.id, b.id, size)
            for lay in layouts:
                assert describe_layout(lay, mixed, c) == describe_layout(lay, a, c)


WORKLOADS = [
    Workload(mode="training", sequence_length=2048),
    Workload(mode="training", sequence_length=2048, parallelism=Parallelism(data=8, zero_stage=3)),
    Workload(
        mode="training",
        sequence_length=4096,
        gradient_checkpointing="full",
        parallelism=Parallelism(tensor=2, pipeline=2, data=2, zero_stage=1),
    ),
    Workload(mode="finetune_lora", sequence_length=4096, parallelism=Parallelism(data=2)),
    Workload(
        mode="training",
        sequence_length=4096,
        parallelism=Parallelism(framework="fsdp1", data=4, zero_stage=3),
    ),
    Workload(mode="inference", sequence_length=4096, batch_size=8),
    Workload(mode="inference", sequence_length=4096, parallelism=Parallelism(tensor=4)),
]


def test_one_oracle_sizes_every_gpu_as_the_estimator_does() -> None:
    """The oracle re-prices one estimate per workload for every GPU and shares the
    measures of architectures alike in their framework overhead: on every GPU, in any
    order, it must answer what the estimator answers for that GPU."""
    model = ModelSpec(name="llama-2-7b")
    oracle = MemoryOracle(model, CATALOG)
    for gpu in GPUS:
        sizer = oracle.sizer(gpu)
        for w in WORKLOADS:
            runtime: Runtime = "rocm" if runtime_of(gpu) == "rocm" else "cuda"
            direct = estimate(
                EstimateRequest(model=model, workload=w, gpu=gpu.id, runtime=runtime), CATALOG
            )
            assert oracle.required(w, gpu) == direct.required_bytes, (gpu.id, w)
            assert sizer(w, msgspec.json.encode(w)) == direct.required_bytes
            assert oracle.total(w, gpu) == direct.device_bytes


SERVING = {
    "7b at 2 requests/s": {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "inference", "sequence_length": 3840},
        "inference": {"output_tokens": 256, "requests_per_second": 2},
    },
    "70b at 5 requests/s, TPOT 50 ms": {
        "model": {"name": "llama-3.1-70b"},
        "workload": {"mode": "inference", "sequence_length": 2048},
        "inference": {
            "output_tokens": 512,
            "requests_per_second": 5,
            "max_time_per_output_token_s": 0.05,
        },
    },
    "8b at 40 requests/s, p95 SLO": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 4096},
        "inference": {
            "output_tokens": 512,
            "requests_per_second": 40,
            "slo": {"ttft_p95_s": 0.5, "tpot_p95_s": 0.03},
        },
    },
}


@pytest.mark.parametrize("objective", ["cheapest", "energy"])
@pytest.mark.parametrize("name", SERVING)
def test_a_serving_search_that_keeps_the_fewest_gpus_chooses_what_the_full_one_does(
    name: str, objective: str
) -> None:
    """Under cheapest and energy a GPU's plans rank by their count first, so the search
    leaves out degrees above an admissible plan's count (serving_options' ``fewest``).
    On every GPU it must choose the plan the full search chooses, and leave some out."""
    from gpuplan.core.recommend.serving import serving_options

    request, job, contexts = rated({**SERVING[name], "objective": objective})
    c = request.constraints
    left_out = 0
    for ctx in contexts:
        full, _ = serving_options(job, ctx, MemoryOracle(request.model, CATALOG), c)
        kept, _ = serving_options(job, ctx, MemoryOracle(request.model, CATALOG), c, fewest=True)
        left_out += len(full) - len(kept)
        assert [o.layout for o in kept] == [o.layout for o in full][: len(kept)]

        assert best_admissible(kept, request.objective) == best_admissible(
            full, request.objective
        ), ctx.gpu.id
    assert left_out > 0


CURVES: dict[str, Callable[[int], float]] = {
    "linear": lambda b: 0.02 + 0.0005 * b,
    "convex": lambda b: 0.02 + 0.00002 * b * b,
    "concave": lambda b: 0.02 + 0.004 * b**0.5,
    "a step at 64": lambda b: 0.02 + 0.0002 * b + (0.01 if b >= 64 else 0.0),
    "flat then steep": lambda b: 0.03 if b < 200 else 0.03 + 0.001 * (b - 199),
}


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("target", [0.021, 0.035, 0.05, 0.09, 0.2])
@pytest.mark.parametrize(("on_tpot", "cap_by_tpot"), [(True, False), (True, True), (False, False)])
def test_the_concurrency_search_ends_where_a_scan_does(
    curve: str, target: float, on_tpot: bool, cap_by_tpot: bool
) -> None:
    """choose_concurrency probes where the latencies cross their target (a secant), not
    at halves; on any latency that grows with the concurrency it must answer the largest
    concurrency that keeps the target, as a scan of every concurrency would, and the
    target that binds. ``cap_by_tpot`` (the probes' TPOT is the full timing's, as with
    chunks mixed into the decode steps): the same answer, and a cap that misses is never
    timed in full."""
    from gpuplan.core.perf.serve import Served
    from gpuplan.core.recommend.schema import InferenceVolume
    from gpuplan.core.recommend.serving import choose_concurrency

    latency = CURVES[curve]
    cap = 256
    iv = (
        InferenceVolume(max_time_per_output_token_s=target)
        if on_tpot
        else InferenceVolume(max_time_to_first_token_s=target * 10)
    )

    timed_at: list[int] = []

    def timed(batch: int) -> Served:
        timed_at.append(batch)
        value = latency(batch)
        return Served(batch, value, "memory", value * 10, value, batch / value, 1.0, 1.0)

    served, limit = choose_concurrency(
        timed, cap, "kv_cache", iv, latency if on_tpot else None, cap_by_tpot=cap_by_tpot
    )
    keeping = [b for b in range(1, cap + 1) if latency(b) <= target]
    if cap_by_tpot and len(keeping) < cap:
        assert cap not in timed_at
    if len(keeping) == cap:
        assert (served.batch, limit) == (cap, "kv_cache")
    else:
        assert served.batch == (keeping[-1] if keeping else 1)
        assert limit == ("max_time_per_output_token_s" if on_tpot else "max_time_to_first_token_s")


def test_the_concurrency_cap_is_judged_on_its_full_timing() -> None:
    """An engine that prefills apart (SGLang without mixed chunks) serves a time per
    output token above its pure step's, which the search's probes read: the cap is
    judged on the full timing, the concurrencies below it on the probes."""
    from gpuplan.core.perf.serve import Served
    from gpuplan.core.recommend.schema import InferenceVolume
    from gpuplan.core.recommend.serving import choose_concurrency

    cap, target = 128, 0.05

    def step(batch: int) -> float:  # keeps the target at every concurrency
        return 0.02 + 0.0001 * batch

    def timed(batch: int) -> Served:  # the prefills apart add 20 ms to every token
        value = step(batch) + 0.02
        return Served(batch, value, "memory", value * 10, value, batch / value, 1.0, 1.0)

    served, limit = choose_concurrency(
        timed, cap, "kv_cache", InferenceVolume(max_time_per_output_token_s=target), step
    )
    assert (served.batch, limit) == (cap - 1, "max_time_per_output_token_s")


@pytest.mark.parametrize("name", ["lora", "70b full recompute", "8b fp8 32k context, selective"])
def test_a_count_bound_never_exceeds_the_plan_chosen_there(name: str) -> None:
    """The training search leaves out a count whose bound sorts after the best plan: the
    bound must be a lower bound of the time of the plan the count would choose, and its
    key (floor_key) of that plan's key under every objective, in floating point."""
    from gpuplan.core.recommend.option import floor_key, objective_key

    checked = 0
    for search, _ in searches(REQUESTS[name]):
        for count in COUNTS:
            option, _ = search.option_at(count)
            bound = search.bound(count)
            if option is None:
                continue
            assert option.speed_s is not None
            assert bound <= option.speed_s, (search.ctx.gpu.id, count)
            for objective in ("fastest", "balanced", "cheapest", "energy"):
                low = floor_key(objective, search.ctx, search.job, seconds=bound, count=count)
                assert low <= objective_key(option, objective), (search.ctx.gpu.id, count)
                checked += 1
    assert checked > 100


@pytest.mark.parametrize(
    "name", ["lora", "70b full recompute", "mixtral", "8b fp8 32k context, selective"]
)
def test_the_token_floor_never_exceeds_a_count_bound(name: str) -> None:
    """The walk orders the counts by ``tokens x token_floor / count`` and stops at the
    first whose key sorts after the best plan, without computing the later counts' own
    bounds: on every GPU it must be at or below each count's bound, with the margin the
    walk takes, in floating point. And it must be a bound worth the name: tight (equal
    up to the margin) at some count, so a broken floor that is far too low fails too."""
    from gpuplan.core.recommend.training import TOKEN_FLOOR_MARGIN

    checked = tight = 0
    for search, _ in searches(REQUESTS[name]):
        per_token = search.token_floor(list(COUNTS)) * (1 - TOKEN_FLOOR_MARGIN)
        ratios = []
        for count in COUNTS:
            bound = search.bound(count)
            if not math.isfinite(bound):
                continue
            low = search.job.tokens * per_token / count
            assert low <= bound, (search.ctx.gpu.id, count)
            ratios.append(low / bound)
            checked += 1
        tight += bool(ratios) and max(ratios) > 0.97
    assert checked > 100
    assert tight > 0


@pytest.mark.parametrize("objective", ["fastest", "balanced"])
@pytest.mark.parametrize("name", ["lora", "70b full recompute", "mixtral", "resnet-50"])
def test_a_training_search_that_prunes_counts_chooses_what_every_count_does(
    name: str, objective: str
) -> None:
    """Under fastest and balanced the training search visits counts best bound first and
    stops at a bound after the best plan. On every GPU it must choose the plan that
    trying every count (all_counts) chooses, and leave some counts out."""
    from gpuplan.core.recommend.training import training_options

    request, job, contexts = rated({**REQUESTS[name], "objective": objective})
    c = request.constraints
    left_out = 0
    for ctx in contexts:
        plans = {}
        for every in (False, True):
            oracle = MemoryOracle(request.model, CATALOG)
            trainable = oracle.first(job.workload).trainable_parameters
            plans[every], _ = training_options(
                job,
                ctx,
                oracle,
                c,
                objective=request.objective,
                trainable=trainable,
                all_counts=every,
            )
        left_out += len(plans[True]) - len(plans[False])

        assert best_admissible(plans[False], request.objective) == best_admissible(
            plans[True], request.objective
        ), ctx.gpu.id
    assert left_out > 0
