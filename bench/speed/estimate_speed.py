"""In-process speed of the analytic estimate: median microseconds per call.

    python -m bench.speed.estimate_speed

Each request is estimated in batches of calls; the median of the batches' per-call
times is reported (the machine is shared, medians resist the noise). The goal in
the estimator issue is < 100 µs per call. An estimate's allocator replay
(core/memory/reserve.py, milliseconds) is memoized per step pattern, so repeated
requests measure the rest; ``cold_us`` is the first estimate of a pattern, the replay
included. Writes bench/results/estimate_speed.json.
"""

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
from gpuplan.core.memory.reserve import forget
from gpuplan.core.memory.schema import EstimateRequest

RESULTS = Path(__file__).resolve().parents[1] / "results" / "estimate_speed.json"

REQUESTS: dict[str, dict[str, Any]] = request_set("estimate_speed")


def measure(body: dict[str, Any], calls: int = 200, rounds: int = 15) -> tuple[float, float]:
    """(median wall µs, median CPU µs) per call. On a shared machine the CPU time is
    the steadier figure: it excludes the time other processes hold the core."""
    request = msgspec.convert(body, EstimateRequest)
    catalog = builtin_catalog()
    estimate(request, catalog)  # warm caches (presets, catalog)
    wall, cpu = [], []
    for _ in range(rounds):
        started, started_cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            estimate(request, catalog)
        wall.append((time.perf_counter() - started) / calls)
        cpu.append((time.process_time() - started_cpu) / calls)
    return statistics.median(wall) * 1e6, statistics.median(cpu) * 1e6


def measure_cold(body: dict[str, Any], calls: int = 20) -> float:
    """Median CPU µs of an estimate whose allocator replay is not memoized."""
    request = msgspec.convert(body, EstimateRequest)
    catalog = builtin_catalog()
    estimate(request, catalog)
    cpu = []
    for _ in range(calls):
        forget()
        started = time.process_time()
        estimate(request, catalog)
        cpu.append(time.process_time() - started)
    return statistics.median(cpu) * 1e6


def run(calls: int = 200, rounds: int = 15) -> dict[str, Any]:
    """Median wall and CPU µs per estimate for every request of ``REQUESTS``."""
    rows = {}
    for name, body in REQUESTS.items():
        wall, cpu = measure(body, calls, rounds)
        cold = measure_cold(body)
        rows[name] = {"wall_us": round(wall, 1), "cpu_us": round(cpu, 1), "cold_us": round(cold, 1)}
        print(
            f"{name:36s} {wall:8.1f} µs wall  {cpu:8.1f} µs CPU per estimate, "
            f"{cold:8.1f} µs CPU cold",
            flush=True,
        )
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "load_average_1m": os.getloadavg()[0],
        "calls": calls,
        "rounds": rounds,
        "median_per_call": rows,
    }


def main() -> None:
    RESULTS.write_text(json.dumps(run(), indent=2) + "\n")


if __name__ == "__main__":
    main()
