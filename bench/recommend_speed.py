"""In-process speed of a recommendation over the whole built-in catalog.

    python -m bench.recommend_speed [--repeat 30]

For each case: median and 95th-percentile wall time of ``recommend()`` (warm: the
catalog and data files are loaded once, as in a running server), the memory
estimates it ran, and the median time of one estimate of that model for context.
Writes ``bench/results/recommend_speed.json``; the goal is < 20 ms per request.
"""

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import msgspec

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest
from gpuplan.core.recommend import RecommendRequest, recommend

RESULTS = Path(__file__).parent / "results"


def _train(model: str, objective: str, **workload: Any) -> dict[str, Any]:
    return {
        "model": {"name": model},
        "workload": {"mode": "training", "sequence_length": 4096, **workload},
        "training": {"training_tokens": 10**9},
        "objective": objective,
    }


CASES: dict[str, dict[str, Any]] = {
    "llama-2-7b inference 4k, 2 req/s, cheapest": {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "inference", "sequence_length": 3840},
        "inference": {"output_tokens": 256, "requests_per_second": 2},
        "objective": "cheapest",
    },
    "llama-3.1-8b inference 8k batch 16, fastest": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 8192, "batch_size": 16},
        "objective": "fastest",
    },
    "llama-2-7b LoRA, balanced": _train("llama-2-7b", "balanced", mode="finetune_lora"),
    "llama-2-7b full training, cheapest": _train("llama-2-7b", "cheapest"),
    "llama-2-7b full training, fastest": _train("llama-2-7b", "fastest"),
    "llama-2-70b training full recompute, cheapest": _train(
        "llama-2-70b", "cheapest", gradient_checkpointing="full"
    ),
    "llama-2-70b training full recompute, fastest": _train(
        "llama-2-70b", "fastest", gradient_checkpointing="full"
    ),
    "mixtral-8x7b training, balanced, hybrid": {
        **_train("mixtral-8x7b", "balanced", gradient_checkpointing="full"),
        "constraints": {"deployment": "hybrid"},
    },
}


def _time(fn: Any, repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.95 * len(samples)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    catalog = builtin_catalog()
    rows = []
    for name, body in CASES.items():
        request = msgspec.convert(body, RecommendRequest)
        response = recommend(request, catalog)  # warm-up
        median, p95 = _time(lambda r=request: recommend(r, catalog), args.repeat)
        one = EstimateRequest(model=request.model, workload=request.workload)
        estimate_ms, _ = _time(lambda o=one: estimate(o, catalog), args.repeat)
        rows.append(
            {
                "case": name,
                "gpus": response.search.gpus,
                "estimates": response.search.estimates,
                "median_ms": round(median, 2),
                "p95_ms": round(p95, 2),
                "one_estimate_ms": round(estimate_ms, 3),
                "estimates_share": round(response.search.estimates * estimate_ms / median, 2),
                "under_20_ms": median < 20,
            }
        )
        print(
            f"{name:<52} {median:7.2f} ms (p95 {p95:6.2f})  {response.search.estimates:3d} estimates x {estimate_ms:.3f} ms"
        )
    report = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": "shared 2-core development VM (other jobs running)",
        "repeat": args.repeat,
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "recommend_speed.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
