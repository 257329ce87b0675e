"""The agent's CPU mode, measured: what ``gpuplan agent --once`` reports and costs here.

Runs ``python -m gpuplan.agent --once --backend none`` end to end (child
process, torch benchmark subprocess, catalog rating) for a few problem sizes and
thread counts, and records the figures it published and the wall time of the run.
The default sizes are what the test suite and a CPU-only node use; the larger size
shows how far the small default is from the CPU's matmul rate.

    python -m bench.agent.agent_cpu [--rounds 3]

Writes ``bench/results/agent_cpu.json``; docs/agent.md quotes it.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"
ROOT = Path(__file__).resolve().parents[2]
CONFIGS = (
    {"cpu_matmul_size": 256, "cpu_threads": 1},
    {"cpu_matmul_size": 256, "cpu_threads": 0},
    {"cpu_matmul_size": 1024, "cpu_threads": 1},
)


def run_once(size: int, threads: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "service")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpuplan", "agent", "--once", "--backend", "none", "--node", "bench",
         "--cpu-matmul-size", str(size), "--cpu-threads", str(threads)],
        capture_output=True, text=True, timeout=600, env=env, check=True,
    )  # fmt: skip
    wall = time.monotonic() - started
    snapshot = json.loads(done.stdout)
    bench = snapshot["benchmark"]
    return {
        "wall_seconds": wall,
        "benchmark_seconds": bench["duration_seconds"],
        "matmul_flops_per_second": {r["dtype"]: r["flops_per_second"] for r in bench["matmul"]},
        "host_memcpy_bytes_per_second": bench["copy"][0]["bytes_per_second"],
        "cpu": snapshot["cpu"],
        "torch_version": bench["torch_version"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for config in CONFIGS:
        runs = [
            run_once(config["cpu_matmul_size"], config["cpu_threads"]) for _ in range(args.rounds)
        ]
        dtypes = runs[0]["matmul_flops_per_second"]
        row = {
            **config,
            "rounds": args.rounds,
            "wall_seconds_median": statistics.median(r["wall_seconds"] for r in runs),
            "benchmark_seconds_median": statistics.median(r["benchmark_seconds"] for r in runs),
            "matmul_gflops_per_second_median": {
                d: round(statistics.median(r["matmul_flops_per_second"][d] for r in runs) / 1e9, 1)
                for d in dtypes
            },
            "host_memcpy_gb_per_second_median": round(
                statistics.median(r["host_memcpy_bytes_per_second"] for r in runs) / 1e9, 2
            ),
        }
        rows.append(row)
        print(json.dumps(row))
    result = {
        "benchmark": "agent_cpu",
        "command": "python -m bench.agent.agent_cpu",
        "machine": {
            "cpu": runs[0]["cpu"],
            "python": platform.python_version(),
            "torch": runs[0]["torch_version"],
            "note": "shared 2-core VM, other jobs running",
        },
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "agent_cpu.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
