"""API overhead: the planning endpoints' throughput and latency against GET /healthz.

    python -m bench.service.api_overhead [--seconds 3] [--rounds 3] [--connections 32]

Starts one ``gpuplan serve`` (granian, one worker) on a free loopback port and drives
it with ``wrk`` (Debian package ``wrk``, a separate process) at the same concurrency
for every request of ``REQUESTS``, in one run: the rounds rotate the order so that the
drift of a shared machine hits every route alike, and the table reports the medians of
the rounds and each route's throughput as a share of /healthz's. The goal of the
benchmarks issue: the estimate endpoint reaches >= 80% of /healthz, i.e. the planning
work is small next to HTTP.

The request set is data, in ``bench/requests.toml``: a route the running server does
not publish in its OpenAPI document is skipped, and so is a request whose probe does not
answer 2xx (the reason is recorded). Writes ``bench/results/api_overhead.json``.
"""

import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.requests import request_set
from bench.service import wrk as bench_wrk

RESULTS = Path(__file__).resolve().parents[1] / "results"
ROOT = Path(__file__).resolve().parents[2]

_ROUTES: list[dict[str, Any]] = request_set("api_overhead")

# Repeated bodies are answered from the answer cache; the same request with
# ``Cache-Control: no-cache`` is computed every time: the cost of the planning itself.
COMPUTED = {"Cache-Control": "no-cache"}
REQUESTS: list[dict[str, Any]] = []
for _request in _ROUTES:
    REQUESTS.append(_request)
    if _request["path"] in ("/v1/memory/estimate", "/v1/recommendations", "/v1/mig/plan"):
        REQUESTS.append({**_request, "name": f"{_request['name']}, computed", "headers": COMPUTED})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _call(port: int, request: dict[str, Any]) -> tuple[int, bytes]:
    body = json.dumps(request["body"]).encode() if "body" in request else None
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{request['path']}",
        data=body,
        method=request["method"],
        headers={
            **({"content-type": "application/json"} if body else {}),
            **request.get("headers", {}),
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gpuplan serve exited with {proc.returncode}")
        try:
            if _call(port, {"method": "GET", "path": "/healthz"})[0] == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"gpuplan serve on port {port} did not come up in {timeout} s")


def _lua(request: dict[str, Any], folder: str) -> str | None:
    """A wrk script that sends ``request``'s method, body, content type and headers."""
    if "body" not in request and "headers" not in request:
        return None
    lines = [f'wrk.method = "{request["method"]}"']
    if "body" in request:
        body = json.dumps(request["body"], separators=(",", ":"))
        lines += [f"wrk.body = [==[{body}]==]", 'wrk.headers["Content-Type"] = "application/json"']
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in request.get("headers", {}).items()]
    path = Path(folder) / f"{re.sub(r'[^a-z0-9]+', '_', request['name'])}.lua"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def wrk(
    port: int, path: str, script: str | None, seconds: float, connections: int
) -> dict[str, float]:
    """One wrk run (one thread): requests/s, p50 and p99 latency, non-2xx and socket errors."""
    report = bench_wrk.run(port, path, seconds, connections, script)
    sockets = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", report
    )
    return {
        **bench_wrk.figures(report),
        "socket_errors": float(sum(int(n) for n in sockets.groups())) if sockets else 0.0,
    }


async def _asgi(app: Any, request: dict[str, Any], body: bytes) -> int:
    """One request straight into the ASGI app (no socket, no server): its status."""
    import asyncio

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": request["method"], "scheme": "http", "path": request["path"],
        "raw_path": request["path"].encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }  # fmt: skip
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # the client never disconnects
        return {"type": "http.disconnect"}

    status: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    return status[0]


def in_process(calls: int = 2000) -> dict[str, Any]:
    """Where an estimate request's time goes, without sockets: µs per request through
    the ASGI app for /healthz; for the estimate route answered from the answer cache
    (a repeated body); with the cache off, for the route with the core's answer stubbed
    (the framework's floor for this POST: decode, validate, encode, metrics) and for
    the real route; and the core ``estimate`` call's own time measured inside the app."""
    import asyncio
    import gc

    import gpuplan.api.routes.memory as route
    from gpuplan.api.app import create_app
    from gpuplan.config.settings import Settings

    cached_app = create_app(Settings())
    uncached_app = create_app(Settings(answer_cache_bytes=0))
    health = next(r for r in REQUESTS if r["path"] == "/healthz")
    est = next(r for r in REQUESTS if r["name"] == "memory estimate")
    real = route.estimate  # type: ignore[attr-defined]  # the route's own name, patched below
    inside: list[float] = []

    def timed(body: Any, catalog: Any) -> Any:
        start = time.perf_counter()
        answer = real(body, catalog)
        inside.append(time.perf_counter() - start)
        return answer

    stub: list[Any] = []

    def stubbed(body: Any, catalog: Any) -> Any:
        if not stub:
            stub.append(real(body, catalog))
        return stub[0]

    async def per_request(app: Any, request: dict[str, Any]) -> float:
        body = json.dumps(request["body"]).encode() if "body" in request else b""
        for _ in range(100):  # warm-up
            assert 200 <= await _asgi(app, request, body) < 300
        start = time.perf_counter()
        for _ in range(calls):
            await _asgi(app, request, body)
        return (time.perf_counter() - start) / calls * 1e6

    async def measure() -> dict[str, Any]:
        out: dict[str, Any] = {"healthz_us": await per_request(cached_app, health)}
        out["estimate_repeated_us"] = await per_request(cached_app, est)
        route.estimate = stubbed  # type: ignore[attr-defined,assignment]
        out["estimate_core_stubbed_us"] = await per_request(uncached_app, est)
        route.estimate = timed  # type: ignore[attr-defined,assignment]
        out["estimate_us"] = await per_request(uncached_app, est)
        steady = sorted(inside[100:])
        out["core_estimate_inside_app_us"] = {
            "median": statistics.median(steady) * 1e6,
            "mean": statistics.mean(steady) * 1e6,
            "p99": steady[int(0.99 * len(steady))] * 1e6,
        }
        route.estimate = real  # type: ignore[attr-defined]
        gc.disable()  # how much of it is the cyclic garbage collector
        try:
            out["estimate_gc_disabled_us"] = await per_request(uncached_app, est)
        finally:
            gc.enable()
        out["repeated_share_of_healthz_rate"] = out["healthz_us"] / out["estimate_repeated_us"]
        out["estimate_share_of_healthz_rate"] = out["healthz_us"] / out["estimate_us"]
        out["floor_share_of_healthz_rate"] = out["healthz_us"] / out["estimate_core_stubbed_us"]
        return out

    try:
        return asyncio.run(measure())
    finally:
        route.estimate = real  # type: ignore[attr-defined]


def run(seconds: float = 3.0, rounds: int = 3, connections: int = 32) -> dict[str, Any]:
    """Serve once, probe every request, then ``rounds`` rotations of wrk runs."""
    if shutil.which("wrk") is None:
        return {"skipped": "wrk not found (Debian: apt-get install wrk)"}
    port = _free_port()
    env = {
        **os.environ,
        "GPUPLAN_LOG_LEVEL": "warning",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "service"), os.environ.get("PYTHONPATH")])
        ),
    }
    env.pop("GPUPLAN_REDIS_URL", None)  # the planning routes never touch Redis
    serve = [sys.executable, "-m", "gpuplan", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]  # fmt: skip
    proc = subprocess.Popen(serve, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    skipped: dict[str, str] = {}
    samples: dict[str, list[dict[str, float]]] = {}
    try:
        _wait_ready(port, proc)
        spec = json.loads(_call(port, {"method": "GET", "path": "/schema/openapi.json"})[1])
        live = []
        for request in REQUESTS:
            if request["path"] not in spec.get("paths", {}):
                skipped[request["name"]] = f"{request['path']} is not a route of this server"
                continue
            status, body = _call(port, request)
            if not 200 <= status < 300:
                skipped[request["name"]] = (
                    f"probe answered {status}: {body[:200].decode(errors='replace')}"
                )
                continue
            live.append(request)
        with tempfile.TemporaryDirectory(prefix="gpuplan-wrk-") as folder:
            scripts = {r["name"]: _lua(r, folder) for r in live}
            for request in live:  # warm-up: imports, caches, the JIT of nothing
                wrk(port, request["path"], scripts[request["name"]], 1, connections)
            for round_ in range(rounds):
                order = live[round_ % len(live) :] + live[: round_ % len(live)]
                for request in order:
                    result = wrk(
                        port, request["path"], scripts[request["name"]], seconds, connections
                    )
                    samples.setdefault(request["name"], []).append(result)
                    print(
                        f"round {round_ + 1} {request['name']:18s} {result['rps']:8.0f} req/s  "
                        f"p50 {result['p50_s'] * 1e3:6.2f} ms  p99 {result['p99_s'] * 1e3:6.2f} ms",
                        flush=True,
                    )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    median = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, runs in samples.items()
    }
    health = samples.get("healthz")
    for name, runs in samples.items():
        if health:
            # per round, against that round's /healthz; then the median of the ratios
            ratios = [r["rps"] / h["rps"] for r, h in zip(runs, health, strict=True)]
            median[name]["share_of_healthz"] = statistics.median(ratios)
    return {
        "benchmark": "api_overhead",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "load_average": list(os.getloadavg()),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "server": "gpuplan serve (granian, 1 worker, uvloop), loopback",
        "load": {
            "tool": "wrk",
            "threads": 1,
            "connections": connections,
            "seconds": seconds,
            "rounds": rounds,
        },
        "requests": {r["name"]: {k: r[k] for k in ("method", "path")} for r in REQUESTS},
        "skipped": skipped,
        "median": median,
        "goal": {
            "estimate_share_of_healthz": 0.8,
            "met": median.get("memory estimate", {}).get("share_of_healthz", 0) >= 0.8,
            "met_when_computed": (
                median.get("memory estimate, computed", {}).get("share_of_healthz", 0) >= 0.8
            ),
        },
        "in_process": in_process(),
        "samples": samples,
    }


def main() -> None:
    args = bench_wrk.arguments(__doc__.splitlines()[0], seconds=3.0, connections=32)
    result = run(args.seconds, args.rounds, args.connections)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "api_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result.get("median", result), indent=1))


if __name__ == "__main__":
    main()
