"""In-process speed of a recommendation over the whole built-in catalog.

    python -m bench.speed.recommend_speed [--repeat 30] [--rounds 5]

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


def reference_loop_ms() -> float:
    """Median CPU ms of a plain Python loop (3 million additions), timed beside the cases:
    the shared VM's speed changes from session to session (and within one), so figures of
    two runs compare only through it."""
    samples = []
    for _ in range(3):
        start, total = time.process_time(), 0
        for i in range(3_000_000):
            total += i
        samples.append((time.process_time() - start) * 1e3)
    return round(statistics.median(samples), 1)


def run(repeat: int = 30, rounds: int = 5) -> dict[str, Any]:
    """Time ``recommend()`` on every case of ``CASES``, ``repeat`` times each, in
    ``rounds`` passes over all the cases: a burst of load on the shared machine then
    falls on a few samples of every case rather than on all the samples of one."""
    catalog = builtin_catalog()
    requests = {name: msgspec.convert(body, RecommendRequest) for name, body in CASES.items()}
    responses = {name: recommend(r, catalog) for name, r in requests.items()}  # warm-up
    wall: dict[str, list[float]] = {name: [] for name in CASES}
    cpu: dict[str, list[float]] = {name: [] for name in CASES}
    per_round = max(1, repeat // rounds)
    for _ in range(rounds):
        for name, request in requests.items():
            for _ in range(per_round):
                start, start_cpu = time.perf_counter(), time.process_time()
                recommend(request, catalog)
                wall[name].append((time.perf_counter() - start) * 1e3)
                cpu[name].append((time.process_time() - start_cpu) * 1e3)
    rows = []
    for name, request in requests.items():
        response = responses[name]
        times = sorted(wall[name])
        median, fastest = statistics.median(times), times[0]
        p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
        median_cpu = statistics.median(cpu[name])
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
                "median_cpu_ms": round(median_cpu, 2),
                "one_estimate_cpu_ms": round(estimate_ms, 3),
                "estimates_share_of_cpu": round(
                    response.search.estimates * estimate_ms / median_cpu, 2
                ),
                "under_20_ms": median < 20,
            }
        )
        print(
            f"{name:<48} wall {median:6.2f} ms (p95 {p95:6.2f}, min {fastest:6.2f}) "
            f"cpu {median_cpu:6.2f} ms  {response.search.estimates:3d} estimates x {estimate_ms:.3f} ms"
        )
    return {
        "load_average": list(os.getloadavg()),
        "reference_loop_cpu_ms": reference_loop_ms(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": "shared 2-core development VM (other jobs running)",
        "repeat": repeat,
        "rounds": rounds,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    result = run(args.repeat, args.rounds)
    (RESULTS / "recommend_speed.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
