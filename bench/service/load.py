"""Load: a mixed request set at a fixed concurrency against a real `gpuplan serve`.

    python -m bench.service.load [--concurrency 64] [--seconds 60] [--warmup 10] [--max-requests 2000000]
                         [--workers 1] [--redis-url URL] [--out bench/results/load.json]

Starts ``gpuplan serve`` on a free loopback port (never anything but 127.0.0.1), then
``--concurrency`` clients loop over a mixed set (estimates, recommendations, catalog
lookups and filters, presets, CI plans, MIG plans and profiles, probes, and bad requests that must answer
4xx) until ``--seconds`` have passed or ``--max-requests`` were sent. Reported:
requests, errors (any answer other than the expected status, or a transport error),
throughput, p50/p99/max latency overall and per request kind, and the server's
resident memory (the server and its worker processes, from /proc) after the warm-up
and at the end. The run passes with zero errors and RSS growth under 10% after the
warm-up. The client shares the machine with the server (and the 1-minute load average
before and after is recorded, for a shared machine), so the throughput is a floor.
The request set is data, in ``bench/service/load.toml``.
"""

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import msgspec

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "load.json"

MIX_FILE = Path(__file__).with_name("load.toml")


class Request(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One request of the mix and the status it must answer (see load.toml)."""

    kind: str
    method: Literal["GET", "POST"]
    path: str
    body: Any = None  # sent as JSON; a string is sent as it is
    status: int = 200
    weight: int = 1


class _Sets(msgspec.Struct, forbid_unknown_fields=True):
    mix: list[Request]
    fleet: list[Request]


def _weighted(requests: list[Request]) -> list[Request]:
    return [r for r in requests for _ in range(r.weight)]


_SETS = msgspec.toml.decode(MIX_FILE.read_bytes(), type=_Sets)
MIX = _weighted(_SETS.mix)
FLEET = _weighted(_SETS.fleet)  # only with --redis-url: the fleet routes need Redis


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    sent: int = 0


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, from /proc."""
    total = 0
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
        stack.extend(int(c) for c in children)
    return total


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(port: int, workers: int, redis_url: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPLAN_", "PROMETHEUS_"))}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "service"), env.get("PYTHONPATH")) if p
    )
    env["GPUPLAN_LOG_LEVEL"] = "warning"
    if redis_url:
        env["GPUPLAN_REDIS_URL"] = redis_url
        env["GPUPLAN_FLEET_KEY_PREFIX"] = f"gpuplan-bench:{os.getpid()}:"
    return subprocess.Popen(
        [sys.executable, "-m", "gpuplan", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--workers", str(workers)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def wait_until_up(base: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("server did not come up")
        time.sleep(0.1)


async def client_loop(
    client: httpx.AsyncClient, mix: list[Request], offset: int,
    deadline: float, budget: list[int], tally: Tally, record_after: float,
) -> None:  # fmt: skip
    i = offset
    while time.monotonic() < deadline and budget[0] > 0:
        budget[0] -= 1
        request = mix[i % len(mix)]
        i += 1
        body = request.body
        content = (
            body.encode()
            if isinstance(body, str)
            else json.dumps(body).encode()
            if body is not None
            else None
        )
        headers = {"content-type": "application/json"} if content is not None else {}
        started = time.monotonic()
        try:
            response = await client.request(
                request.method, request.path, content=content, headers=headers
            )
            status = response.status_code
            ok = status == request.status and (
                status < 400
                or response.headers.get("content-type", "").startswith("application/problem+json")
            )
        except httpx.HTTPError as exc:
            ok, status = False, f"{type(exc).__name__}"  # type: ignore[assignment]
        elapsed = time.monotonic() - started
        tally.sent += 1
        if not ok:
            tally.errors.append(f"{request.kind} {request.method} {request.path}: {status}")
        if started >= record_after:
            tally.latencies.setdefault(request.kind, []).append(elapsed)


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "count": len(ordered),
        "p50_ms": round(at(0.50) * 1000, 2),
        "p99_ms": round(at(0.99) * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


async def drive(base: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    mix = MIX + (FLEET if args.redis_url else [])
    load_start = round(os.getloadavg()[0], 2)  # the machine may be shared: say how busy it was
    tally = Tally()
    budget = [args.max_requests]
    limits = httpx.Limits(
        max_connections=args.concurrency, max_keepalive_connections=args.concurrency
    )
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:
        start = time.monotonic()
        record_after = start + args.warmup
        deadline = start + args.seconds
        rss_start = rss_bytes(pid)
        rss_samples: list[tuple[float, int]] = []

        async def sample_rss() -> None:
            while time.monotonic() < deadline and budget[0] > 0:
                rss_samples.append((time.monotonic() - start, rss_bytes(pid)))
                await asyncio.sleep(1.0)

        sampler = asyncio.create_task(sample_rss())
        await asyncio.gather(*(
            client_loop(client, mix, n, deadline, budget, tally, record_after)
            for n in range(args.concurrency)
        ))  # fmt: skip
        sampler.cancel()
        elapsed = time.monotonic() - start
    rss_end = rss_bytes(pid)
    after_warmup = [r for t, r in rss_samples if t >= args.warmup] or [rss_end]
    rss_warm = after_warmup[0]
    every = [v for values in tally.latencies.values() for v in values]
    measured_seconds = max(elapsed - args.warmup, 1e-9)
    return {
        "concurrency": args.concurrency,
        "seconds": round(elapsed, 1),
        "warmup_seconds": args.warmup,
        "server_workers": args.workers,
        "requests": tally.sent,
        "errors": len(tally.errors),
        "error_samples": tally.errors[:20],
        "requests_per_second_after_warmup": round(len(every) / measured_seconds, 1),
        "latency": _quantiles(every),
        "latency_by_kind": {k: _quantiles(v) for k, v in sorted(tally.latencies.items())},
        "rss_bytes": {"start": rss_start, "after_warmup": rss_warm, "end": rss_end,
                      "max": max([r for _, r in rss_samples] + [rss_end])},
        "rss_growth_after_warmup": round((rss_end - rss_warm) / rss_warm, 4) if rss_warm else None,
        "load_average_1m": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = start_server(port, args.workers, args.redis_url)
    try:
        wait_until_up(base, process)
        result = asyncio.run(drive(base, process.pid, args))
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    growth = result["rss_growth_after_warmup"]
    result["passed"] = result["errors"] == 0 and (growth is None or growth < 0.10)
    return result


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--max-requests", type=int, default=2_000_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if not 1 <= args.concurrency <= 1024 or not 0 < args.seconds <= 3600:
        parser.error("concurrency 1-1024 and seconds up to 3600")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    result = run(args)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "latency_by_kind"}, indent=2))
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()
