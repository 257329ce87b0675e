"""In-process speed of the analytic estimate: median microseconds per call.

    python -m bench.estimate_speed

Each request is estimated in batches of calls; the median of the batches' per-call
times is reported (the machine is shared, medians resist the noise). The goal in
the estimator issue is < 100 µs per call. Writes bench/results/estimate_speed.json.
"""

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

RESULTS = Path(__file__).resolve().parent / "results" / "estimate_speed.json"

REQUESTS: dict[str, dict[str, Any]] = {
    "llama-3.1-8b training": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "training", "sequence_length": 4096, "batch_size": 4},
    },
    "llama-3.1-70b zero3 dp8": {
        "model": {"name": "llama-3.1-70b"},
        "workload": {
            "mode": "training",
            "sequence_length": 4096,
            "batch_size": 1,
            "gradient_checkpointing": "full",
            "parallelism": {"data": 8, "zero_stage": 3},
        },
    },
    "llama-3.1-405b training tp8 pp16": {
        "model": {"name": "llama-3.1-405b"},
        "workload": {
            "mode": "training",
            "sequence_length": 8192,
            "batch_size": 1,
            "parallelism": {"tensor": 8, "pipeline": 16},
        },
    },
    "mixtral-8x7b inference on h100": {
        "model": {"name": "mixtral-8x7b"},
        "workload": {"mode": "inference", "sequence_length": 8192, "batch_size": 8},
        "gpu": "h100-sxm5-80gb",
    },
    "resnet-50 training": {
        "model": {"name": "resnet-50"},
        "workload": {"mode": "training", "batch_size": 256},
    },
}


def measure(body: dict[str, Any], calls: int = 200, rounds: int = 15) -> float:
    request = msgspec.convert(body, EstimateRequest)
    catalog = builtin_catalog()
    estimate(request, catalog)  # warm caches (presets, catalog)
    per_call = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            estimate(request, catalog)
        per_call.append((time.perf_counter() - started) / calls)
    return statistics.median(per_call) * 1e6


def main() -> None:
    rows = {name: round(measure(body), 1) for name, body in REQUESTS.items()}
    for name, us in rows.items():
        print(f"{name:36s} {us:8.1f} µs per estimate")
    RESULTS.write_text(
        json.dumps(
            {"python": platform.python_version(), "machine": platform.machine(), "median_us": rows},
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
