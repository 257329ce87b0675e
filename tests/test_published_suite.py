"""The published-GPU suite (bench/accuracy/published.toml): every case carries its source,
quote and measure, none comes from a held-out source, the committed results describe the
code as it is, and they meet the issue's median and worst-case targets."""

import json
import statistics
from pathlib import Path

import msgspec
from bench.accuracy.published import CASES, cases, figure

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results" / "published.json"
MEASURES = {"max_memory_allocated", "max_memory_reserved", "nvidia_smi", "allocated_plus_outside"}
HELD_OUT = (
    "perf_train_gpu_one",
    "llm_tutorial_optimization",
    "lightning-ai/litgpt",
    "torchtune/README",
    "torchtitan/docs",
    "1910.02054",
)


def test_every_case_is_cited_quoted_and_measured() -> None:
    text = CASES.read_text(encoding="utf-8").lower()
    assert not [h for h in HELD_OUT if h.lower() in text]
    for case in cases():
        assert case["source"], case["id"]
        assert case["quote"], case["id"]
        assert case["measure"] in MEASURES, case["id"]
        assert case["bytes"] > 0


def test_the_committed_results_are_current_and_meet_the_targets() -> None:
    data = json.loads(RESULTS.read_text(encoding="utf-8"))
    catalog = builtin_catalog()
    by_id = {c["id"]: c for c in cases()}
    counted = []
    for row in data["rows"]:
        case = by_id[row["id"]]
        body = {**case["request"], "gpu": case["gpu"]} if case.get("gpu") else case["request"]
        result = estimate(msgspec.convert(body, EstimateRequest), catalog)
        assert figure(result, case["measure"]) == row["estimated_bytes"], row["id"]
        if not row["excluded"]:
            counted.append(row["error"])
    assert len(counted) >= 20
    assert statistics.median(abs(e) for e in counted) <= 0.05
    assert max(abs(e) for e in counted) <= 0.15
