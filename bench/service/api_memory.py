"""Memory of a running API pod's processes, for the chart's resource defaults.

Starts ``gpuplan serve`` (granian) with 1 and 2 workers, sends a mix of requests
(catalog, model presets, memory estimates, recommendations, an invalid body, /metrics),
and reads the peak resident set (VmHWM) of the granian parent and each worker from
/proc. The chart requests 256 MiB and limits 512 MiB per API pod; these figures say how
much of that one pod uses.

    python -m bench.service.api_memory [--requests 200]

Writes ``bench/results/api_memory.json``; docs/deploy.md quotes it. Linux only (/proc).
"""

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"
ROOT = Path(__file__).resolve().parents[2]

ESTIMATE = {
    "model": {"name": "llama-2-7b"},
    "workload": {"mode": "inference", "sequence_length": 4096, "precision": "bf16"},
    "gpu": "NVIDIA L4",
}
RECOMMEND = {
    "model": {"name": "llama-2-7b"},
    "workload": {"mode": "inference", "sequence_length": 3840, "batch_size": 1},
    "inference": {"output_tokens": 256, "requests_per_second": 1.5},
    "objective": "cheapest",
}
RECOMMEND_TRAIN = {
    "model": {"name": "llama-2-70b"},
    "workload": {"mode": "training", "sequence_length": 4096, "batch_size": 1},
    "training": {"training_tokens": 2_000_000_000},
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _call(base: str, path: str, body: dict[str, Any] | None = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path, data=data, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for {pid}")


def measure(workers: int, requests: int) -> dict[str, Any]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "service"), "GPUPLAN_PORT": str(port),
           "GPUPLAN_WORKERS": str(workers), "GPUPLAN_LOG_LEVEL": "warning"}  # fmt: skip
    env.pop("GPUPLAN_REDIS_URL", None)
    server = subprocess.Popen([sys.executable, "-m", "gpuplan", "serve"], env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _call(base, "/healthz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        statuses: dict[str, int] = {}
        started = time.monotonic()
        for i in range(requests):
            for path, body in (
                ("/v1/gpus", None),
                ("/v1/models", None),
                ("/v1/memory/estimate", ESTIMATE),
                ("/v1/recommendations", RECOMMEND if i % 2 else RECOMMEND_TRAIN),
                ("/v1/memory/estimate", {"model": {}}),
                ("/metrics", None),
            ):
                status = _call(base, path, body)
                statuses[f"{path} {status}"] = statuses.get(f"{path} {status}", 0) + 1
        elapsed = time.monotonic() - started
        worker_pids = _children(server.pid)
        parent = _peak_rss_mib(server.pid)
        per_worker = [_peak_rss_mib(pid) for pid in worker_pids]
    finally:
        server.terminate()
        server.wait(30)
    return {
        "workers": workers,
        "requests": sum(statuses.values()),
        "seconds": round(elapsed, 2),
        "statuses": statuses,
        "parent_peak_rss_mib": round(parent, 1),
        "worker_peak_rss_mib": [round(v, 1) for v in per_worker],
        "pod_peak_rss_mib": round(parent + sum(per_worker), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="rounds of the request mix")
    args = parser.parse_args()
    runs = [measure(workers, args.requests) for workers in (1, 2)]
    result = {
        "what": "peak RSS (VmHWM) of gpuplan serve's processes after a request mix",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "api_memory.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
