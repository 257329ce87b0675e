"""The speed model's corpus of published runs (bench/published/runs.toml): every run carries
its publication (``source_id``), citation, quote and measure and a request that is a
RecommendRequest; none comes from a document the issue holds out; runs of a framework the
model does not have yet are kept out of the bench; and a broken run is refused at load."""

import re
import tomllib

import msgspec
import pytest
from bench.published import runs as published

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.recommend import RecommendRequest

HELD_OUT = (
    re.compile(r"llm-foundry.*benchmarking", re.I),
    re.compile(r"torchtitan.*(benchmark|performance)", re.I),
    re.compile(r"megatron-lm.*readme", re.I),
    re.compile(r"tensorrt-llm.*(perf|performance)", re.I),
    re.compile(r"nanotron", re.I),
    re.compile(r"ultra-?scale", re.I),
    re.compile(r"olmo-core.*readme", re.I),
    re.compile(r"gpt-fast.*readme", re.I),
    re.compile(r"autoawq.*readme", re.I),
    re.compile(r"torchao.*quantization.*readme", re.I),
)
"""The documents issue 32 holds out: no run may cite one."""

TRAINING_MEASURES = {
    "tokens_per_s_per_gpu",
    "tokens_per_s",
    "model_tflops_per_gpu",
    "hardware_tflops_per_gpu",
    "mfu",
    "step_time_s",
    "samples_per_s",
}


def test_every_run_is_cited_quoted_measured_and_a_request() -> None:
    catalog = builtin_catalog()
    runs = published.load_all()
    assert len({r["id"] for r in runs}) == len(runs)
    for run in runs:
        assert published.SOURCE_ID.match(run["source_id"]), run["id"]
        for field in ("source", "quote", "measure"):
            assert run[field], (run["id"], field)
        assert catalog.get(run["gpu"]) is not None, run["id"]
        request = msgspec.convert(run["request"], RecommendRequest)
        assert request.layout == "given", run["id"]
        assert run["gpu"] in request.constraints.include, run["id"]
        if run.get("kind", "training") == "training":
            assert run["measure"].split(" ")[0] in TRAINING_MEASURES, run["id"]
            assert run["tokens_per_s_per_gpu"] > 0, run["id"]
            assert run["derivation"], run["id"]
            p = request.workload.parallelism
            assert p.tensor * p.pipeline * p.data * p.context == run["gpus"], run["id"]
        else:
            assert run["measure"] in published.SERVING_MEASURES, run["id"]


def test_no_run_cites_a_held_out_document() -> None:
    for run in published.load_all():
        cited = " ".join(str(run.get(f, "")) for f in ("source", "source_id", "quote"))
        assert not [h.pattern for h in HELD_OUT if h.search(cited)], run["id"]


def test_the_held_out_check_catches_a_held_out_citation() -> None:
    cited = "repo mosaicml/llm-foundry, scripts/train/benchmarking/README.md"
    assert [h.pattern for h in HELD_OUT if h.search(cited)]


def test_pending_runs_are_kept_out_of_the_bench() -> None:
    everything = published.load_all()
    pending = [r for r in everything if "pending" in r]
    assert pending, "the corpus records FSDP1 runs as pending"
    timed = {r["id"] for r in published.load()} | {r["id"] for r in published.load("inference")}
    assert not timed & {r["id"] for r in pending}
    assert {r["id"] for r in published.load(pending=True)} >= {
        r["id"] for r in pending if r.get("kind", "training") == "training"
    }
    assert all(r["split"] == "check" for r in pending)


def _corpus_with(change: dict[str, object]) -> str:
    text = published.RUNS.read_text(encoding="utf-8")
    first = tomllib.loads(text)["run"][0]
    broken = {**first, **change}
    return {k: v for k, v in broken.items() if v is not None}  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"source_id": None}, "missing source_id"),
        ({"source_id": "Not A Slug"}, "lowercase slug"),
        ({"split": "train"}, "split"),
        ({"pending": "fsdp3"}, "pending"),
        ({"request": {"model": {"name": "llama-2-7b"}}}, "workload"),
    ],
)
def test_a_broken_run_is_refused_at_load(change: dict[str, object], message: str) -> None:
    run = _corpus_with(change)
    with pytest.raises((published.RunsError, msgspec.ValidationError), match=message):
        published._check([run])  # type: ignore[list-item]


def test_the_ibm_fsdp_blog_runs_say_what_its_code_ran() -> None:
    """PyTorch's 'Maximizing training throughput using PyTorch FSDP' (March 2024) trained
    with FSDP1 (fms-fsdp's ``FSDP(model, ..., use_orig_params=cfg.use_torch_compile)``,
    compile off) in bf16 mixed precision over fp32 shards; its 13B 'Selective'
    checkpointing recomputes whole blocks, one in two by its HFU/MFU ratio."""
    runs = {
        r["id"]: r
        for r in published.load()
        if r["source_id"] == "pytorch-blog-2024-03-maximizing-training"
    }
    assert len(runs) == 5
    for run in runs.values():
        work = run["request"]["workload"]
        assert work["parallelism"]["framework"] == "fsdp1"
        assert work["parallelism"]["fsdp1"] == {"use_orig_params": False}
        assert work["precision"] == "amp_bf16"
        assert not work.get("compile", False)
    thirteen = runs["fsdp-llama2-13b-a100x128-bf16"]["request"]["workload"]
    assert thirteen["gradient_checkpointing"] == "full"
    assert thirteen["checkpoint_every_n_layers"] == 2
    # 1 + p/3 with p the checkpointed share of blocks: the blog's HFU/MFU of 0.59/0.51
    assert round(3 * (0.59 / 0.51 - 1) * 2) / 2 == 0.5


def test_megatron_fsdp_runs_are_megatron_with_zero_3() -> None:
    """Megatron-Bridge's runs with a non-zero FSDP column ran Megatron-FSDP: Megatron-core's
    kernels (Transformer Engine's fused ones) with ZeRO-3 sharding, so framework megatron
    and zero stage 3, never PyTorch's fsdp2."""
    runs = [
        r
        for r in published.load()
        if r["source_id"] == "megatron-bridge-perf-summary" and "| FSDP |" in r["quote"]
    ]
    fsdp = []
    for run in runs:
        header, *rows = [line for line in run["quote"].split("\n") if line.startswith("|")]
        cells = [c.strip() for c in header.strip("|").split("|")]
        value = [c.strip() for c in rows[-1].strip("|").split("|")][cells.index("FSDP")]
        if value not in ("0", "n/a", "-", ""):
            fsdp.append(run["id"])
            parallelism = run["request"]["workload"]["parallelism"]
            assert parallelism["framework"] == "megatron", run["id"]
            assert parallelism["zero_stage"] == 3, run["id"]
            assert "Megatron-FSDP" in run["assumptions"], run["id"]
    assert "mbridge2511-llama3-8b-h100x8-fp8cs" in fsdp
    assert len(fsdp) >= 4


def test_the_corpus_reaches_issue_32s_breadth() -> None:
    """Issue 32, deliver 5: at least 120 training runs from at least 15 publications, from
    one GPU to 1,024 or more; A100, H100, H200, B200, MI300X and a GDDR part; bf16 and
    fp8; DDP, FSDP1, FSDP2, DeepSpeed and Megatron; and at least 40 serving figures."""
    catalog = builtin_catalog()
    training = published.load("training")
    assert len(training) >= 120
    assert len({r["source_id"] for r in training}) >= 15
    counts = [int(r["gpus"]) for r in training]
    assert min(counts) == 1
    assert max(counts) >= 1024
    gpus = {r["gpu"] for r in training}
    for part in (
        "a100-sxm4-80gb",
        "h100-sxm5-80gb",
        "h200-sxm-141gb",
        "b200-180gb",
        "mi300x-192gb",
    ):
        assert part in gpus, part
    assert any(catalog.get(g).memory_type.upper().startswith("GDDR") for g in gpus)
    workloads = [r["request"]["workload"] for r in training]
    precisions = {w.get("precision", "bf16") for w in workloads}
    assert "fp8" in precisions
    assert precisions & {"bf16", "amp_bf16"}
    frameworks = {w.get("parallelism", {}).get("framework", "ddp") for w in workloads}
    assert {"ddp", "fsdp1", "fsdp2", "deepspeed", "megatron"} <= frameworks
    assert len(published.load("inference")) >= 40


def test_a_samples_per_second_run_converts_at_its_own_sequence_length() -> None:
    """A run measured in samples/s (Hugging Face Trainer, MLPerf's logged throughput)
    carries tokens/s per GPU as samples/s x its sequence length / its GPUs."""
    checked = 0
    for run in published.load("training"):
        if run["measure"] != "samples_per_s":
            continue
        seq = run["request"]["workload"]["sequence_length"]
        expected = run["value"] * seq / run["gpus"]
        assert run["tokens_per_s_per_gpu"] == pytest.approx(expected, rel=1e-3), run["id"]
        checked += 1
    assert checked >= 10
