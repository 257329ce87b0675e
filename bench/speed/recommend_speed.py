"""In-process speed of a recommendation over the whole built-in catalog.

    python -m bench.speed.recommend_speed [--repeat 30]

For each case: median and 95th-percentile wall time of ``recommend()`` (warm: the
catalog and data files are loaded once, as in a running server), the memory
estimates it ran, and the median time of one estimate of that model for context.
Writes ``bench/results/recommend_speed.json``; the goal is < 20 ms per request.
"""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import msgspec

from bench.requests import request_set
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest
from gpuplan.core.recommend import RecommendRequest, recommend

RESULTS = Path(__file__).resolve().parents[1] / "results"


CASES: dict[str, dict[str, Any]] = request_set("recommend_speed")


def _time(fn: Any, repeat: int) -> tuple[float, float, float, float]:
    """(median, p95, min) wall ms and median CPU ms of ``fn``.

    CPU time (``time.process_time``) leaves out the time the process waits for a core,
    which on a shared machine is most of the spread of the wall time.
    """
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    wall.sort()
    p95 = wall[min(len(wall) - 1, int(0.95 * len(wall)))]
    return statistics.median(wall), p95, wall[0], statistics.median(cpu)


def run(repeat: int = 30) -> dict[str, Any]:
    """Time ``recommend()`` on every case of ``CASES``, ``repeat`` times each."""
    catalog = builtin_catalog()
    rows = []
    for name, body in CASES.items():
        request = msgspec.convert(body, RecommendRequest)
        response = recommend(request, catalog)  # warm-up
        median, p95, fastest, cpu = _time(lambda r=request: recommend(r, catalog), repeat)
        one = EstimateRequest(model=request.model, workload=request.workload)
        estimate_ms = _time(lambda o=one: estimate(o, catalog), repeat)[3]
        rows.append(
            {
                "case": name,
                "gpus": response.search.gpus,
                "estimates": response.search.estimates,
                "median_ms": round(median, 2),
                "p95_ms": round(p95, 2),
                "min_ms": round(fastest, 2),
                "median_cpu_ms": round(cpu, 2),
                "one_estimate_cpu_ms": round(estimate_ms, 3),
                "estimates_share_of_cpu": round(response.search.estimates * estimate_ms / cpu, 2),
                "under_20_ms": median < 20,
            }
        )
        print(
            f"{name:<48} wall {median:6.2f} ms (p95 {p95:6.2f}, min {fastest:6.2f}) "
            f"cpu {cpu:6.2f} ms  {response.search.estimates:3d} estimates x {estimate_ms:.3f} ms"
        )
    return {
        "load_average": list(os.getloadavg()),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": "shared 2-core development VM (other jobs running)",
        "repeat": repeat,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "recommend_speed.json").write_text(json.dumps(run(args.repeat), indent=2) + "\n")


if __name__ == "__main__":
    main()
