"""Which ASGI server should ``gpuplan serve`` run? Measured, not assumed.

Starts the real app under granian and under uvicorn (uvloop + httptools), one after
the other on the same machine, and drives each with wrk on loopback. Rounds
alternate between the servers so that drift of a shared, noisy machine hits both;
the table reports the median of the rounds and the ratio of the medians.

    python -m bench.service.asgi_servers [--seconds 10] [--rounds 3] [--connections 64]

Needs ``wrk`` (Debian package ``wrk``). Writes ``bench/results/asgi_servers.json``.
"""

import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.service import wrk

RESULTS = Path(__file__).resolve().parents[1] / "results"
APP = "gpuplan.api.asgi:app"
PATHS = ("/healthz", "/v1/version")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _commands(port: int) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "granian": [py, "-m", "granian", "--interface", "asgi", "--loop", "uvloop",
                    "--workers", "1", "--host", "127.0.0.1", "--port", str(port),
                    "--log-level", "warning", APP],
        "uvicorn": [py, "-m", "uvicorn", "--loop", "uvloop", "--http", "httptools",
                    "--workers", "1", "--host", "127.0.0.1", "--port", str(port),
                    "--log-level", "warning", "--no-access-log", APP],
    }  # fmt: skip


def _wait_ready(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server on port {port} did not come up")


def _wrk(port: int, path: str, seconds: int, connections: int) -> dict[str, float]:
    return wrk.figures(wrk.run(port, path, seconds, connections))


def main() -> None:
    args = wrk.arguments(__doc__.splitlines()[0], seconds=10, connections=64)
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: apt-get install wrk")
    samples: dict[str, dict[str, list[dict[str, float]]]] = {}
    env = {**os.environ, "GPUPLAN_LOG_LEVEL": "warning"}
    for round_ in range(args.rounds):
        order = ["granian", "uvicorn"] if round_ % 2 == 0 else ["uvicorn", "granian"]
        for server in order:
            port = _free_port()
            proc = subprocess.Popen(_commands(port)[server], env=env, stdout=subprocess.DEVNULL)
            try:
                _wait_ready(port)
                _wrk(port, "/healthz", 2, args.connections)  # warm-up
                for path in PATHS:
                    result = _wrk(port, path, args.seconds, args.connections)
                    samples.setdefault(server, {}).setdefault(path, []).append(result)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
    summary = {
        server: {
            path: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            for path, runs in by_path.items()
        }
        for server, by_path in samples.items()
    }
    report = {
        "benchmark": "asgi_servers",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "wrk": {
            "threads": 1,
            "connections": args.connections,
            "seconds": args.seconds,
            "rounds": args.rounds,
        },
        "median": summary,
        "samples": samples,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "asgi_servers.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'server':8} {'path':12} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8}")
    for server, by_path in summary.items():
        for path, m in by_path.items():
            print(f"{server:8} {path:12} {m['rps']:9.0f} {m['p50_s'] * 1e3:8.2f} "
                  f"{m['p99_s'] * 1e3:8.2f} {m['non_2xx']:8.0f}")  # fmt: skip
    for path in PATHS:
        ratio = summary["granian"][path]["rps"] / summary["uvicorn"][path]["rps"]
        print(f"granian/uvicorn throughput on {path}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
