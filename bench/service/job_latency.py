"""A small trace end to end: through a warm ``gpuplan worker``, and in a fresh process.

    python -m bench.service.job_latency [--runs 20] [--fresh-runs 3]

The issue's small model (one Llama layer, 54k parameters, training, runtime cuda) is
sent to ``POST /v1/memory/trace`` of the real app (in process, Litestar's test client)
with a job queue on the Redis at 127.0.0.1:6379 (a key prefix of its own) and one
``gpuplan worker`` process, without the trace cache; then, for comparison, to an app
without a queue, where each trace is a fresh subprocess importing torch and
transformers. Writes bench/results/job_latency.json.
"""

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from gpuplan.jobs.worker import WARM_CONFIG

RESULTS = Path(__file__).resolve().parents[1] / "results"
REDIS = "redis://127.0.0.1:6379/0"
SMALL = {**WARM_CONFIG, "max_position_embeddings": 512, "tie_word_embeddings": True}
"""The worker's warm-up model, made another config so that no cache answers for it."""


def _body(batch: int) -> dict[str, Any]:
    workload = {"mode": "training", "batch_size": batch, "sequence_length": 16}
    return {"model": {"hf_config": SMALL}, "workload": workload, "runtime": "cuda"}


PARAMETERS: list[int] = []


def _timed(client: Any, runs: int) -> list[float]:
    seconds = []
    for i in range(runs):
        started = time.perf_counter()
        response = client.post("/v1/memory/trace", json=_body(1 + i % 8))
        seconds.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
        PARAMETERS.append(response.json()["parameters"])
    return seconds


def run(runs: int = 20, fresh_runs: int = 3) -> dict[str, Any]:
    import redis
    from litestar.testing import TestClient

    from gpuplan.api.app import create_app
    from gpuplan.config.settings import Settings

    prefix = f"gpuplan-bench:{uuid.uuid4().hex}:"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLAN_")}
    started = time.perf_counter()
    worker = subprocess.Popen(
        [sys.executable, "-m", "gpuplan", "worker", "--redis-url", REDIS,
         "--queue-prefix", f"{prefix}jobs:", "--name", f"bench-{prefix[14:22]}",
         "--metrics-port", "0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    store = redis.Redis.from_url(REDIS)
    try:
        while not store.exists(f"rq:worker:bench-{prefix[14:22]}"):
            if worker.poll() is not None or time.perf_counter() - started > 120:
                raise RuntimeError("the worker did not start")
            time.sleep(0.1)
        warm_up = time.perf_counter() - started
        queued = Settings(
            redis_url=REDIS,
            job_queue=True,
            job_queue_prefix=f"{prefix}jobs:",
            trace_cache_ttl_seconds=0,
        )
        with TestClient(app=create_app(queued)) as client:
            warm = _timed(client, runs)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
        for key in store.scan_iter(match=f"*{prefix}*"):
            store.delete(key)
    with TestClient(app=create_app(Settings())) as client:
        fresh = _timed(client, fresh_runs)
    return {
        "machine": f"{os.cpu_count()}-core {platform.machine()} shared VM",
        "load_average": list(os.getloadavg()),
        "python": platform.python_version(),
        "model": "llama, 1 layer, hidden 64, vocab 256, tied embeddings; training, batch 1-8, s16",
        "parameters": PARAMETERS[0],
        "worker_start_seconds": round(warm_up, 2),
        "warm_worker_seconds": [round(s, 3) for s in warm],
        "warm_worker_median_seconds": round(statistics.median(warm), 3),
        "warm_worker_max_seconds": round(max(warm), 3),
        "fresh_process_seconds": [round(s, 2) for s in fresh],
        "fresh_process_median_seconds": round(statistics.median(fresh), 2) if fresh else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--fresh-runs", type=int, default=3, help="0: the warm worker only")
    args = parser.parse_args()
    result = run(args.runs, args.fresh_runs)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "job_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.write(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
