"""The agent end to end: real subprocesses, a real Redis, real torch on the CPU."""

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import pytest
from litestar.testing import TestClient
from prometheus_client import generate_latest
from redis.asyncio import Redis

from gpuplan.agent.config import AgentConfig
from gpuplan.agent.loop import Agent
from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from gpuplan.core.catalog import builtin_catalog
from gpuplan.fleet.schema import Keys
from gpuplan.fleet.store import FleetStore
from tests.agent_fixtures import NVML_FIXTURES, replay_source
from tests.conftest import RedisServer, free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# Small CPU problems and one thread: a few seconds on a shared 2-core machine.
CPU_SIZES = ["--cpu-matmul-size", "128", "--cpu-copy-bytes", str(8 * 2**20), "--cpu-threads", "1",
             "--matmul-warmup", "3"]  # fmt: skip


def _agent(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "service")}
    env.pop("NODE_NAME", None)
    return subprocess.run(
        [sys.executable, "-m", "gpuplan", "agent", "--once", *args],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )  # fmt: skip


def test_cpu_mode_once_publishes_to_redis_and_the_api_serves_it(
    redis_url: str, key_prefix: str
) -> None:
    done = _agent("--backend", "none", "--node", "cpu-node-1", "--redis-url", redis_url,
                  "--key-prefix", key_prefix, *CPU_SIZES)  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["gpu_count"] == 0
    assert printed["vendor"] == "none"
    with TestClient(
        app=create_app(Settings(redis_url=redis_url, fleet_key_prefix=key_prefix))
    ) as c:
        node = c.get("/v1/fleet/nodes/cpu-node-1").json()
        listed = c.get("/v1/fleet/nodes").json()
    assert [n["node"] for n in listed["nodes"]] == ["cpu-node-1"]
    assert node["gpu_count"] == 0
    assert node["gpus"] == []
    assert node["cpu"]["logical_cpus"] >= 1
    bench = node["benchmark"]
    assert bench["status"] == "ok", bench
    assert bench["torch_version"].startswith("2.")
    rates = {r["dtype"]: r for r in bench["matmul"]}
    assert set(rates) == {"fp64", "fp32", "bf16", "fp16"}
    for r in rates.values():
        assert r["device"] == "cpu"
        assert r["iterations"] == 50
        assert r["m"] == 128
        # Any CPU of the last decade: above 10 MFLOP/s, below 100 TFLOP/s.
        assert 1e7 < r["flops_per_second"] <= r["max_flops_per_second"] < 1e14
        assert r["ratio_to_peak"] is None  # no catalog entry for a CPU
    (memcpy,) = bench["copy"]
    assert memcpy["kind"] == "host_memcpy"
    assert memcpy["size_bytes"] == 8 * 2**20
    assert 1e8 < memcpy["bytes_per_second"] < 1e12


def test_once_with_recorded_gpus_publishes_mig_instances(redis_url: str, key_prefix: str) -> None:
    done = _agent("--nvml-recording", str(NVML_FIXTURES / "hgx-h200.json"), "--no-benchmark",
                  "--node", "gpu-node-1", "--redis-url", redis_url, "--key-prefix", key_prefix)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with TestClient(
        app=create_app(Settings(redis_url=redis_url, fleet_key_prefix=key_prefix))
    ) as c:
        node = c.get("/v1/fleet/nodes/gpu-node-1").json()
    assert node["gpu_count"] == 3
    assert node["benchmark"] is None
    assert [g["up"] for g in node["gpus"]] == [True, True, False]
    assert sorted(m["profile"] for m in node["mig_instances"]) == ["1g.18gb", "2g.35gb", "3g.71gb"]
    assert node["unsupported_field_count"] > 0


def test_once_fails_when_redis_is_down() -> None:
    done = _agent("--backend", "none", "--no-benchmark", "--node", "n",
                  "--redis-url", f"redis://127.0.0.1:{free_port()}/0")  # fmt: skip
    assert done.returncode == 1
    assert json.loads(done.stdout)["node"] == "n"  # it still collected and says what
    assert "Redis" in done.stderr


def test_bad_options_are_usage_errors() -> None:
    done = _agent("--node", "bad{name}", "--backend", "none")
    assert done.returncode == 2
    assert "node" in done.stderr
    done = _agent("--interval", "-1", "--backend", "none")
    assert done.returncode == 2
    done = _agent("--matmul-iterations", "10", "--backend", "none")  # the median needs >= 50
    assert done.returncode == 2


def test_options_come_from_the_environment(redis_url: str, key_prefix: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "service"), "NODE_NAME": "from-downward-api",
           "GPUPLAN_AGENT_REDIS_URL": redis_url, "GPUPLAN_AGENT_KEY_PREFIX": key_prefix,
           "GPUPLAN_AGENT_BACKEND": "none", "GPUPLAN_AGENT_BENCHMARK": "false"}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "gpuplan", "agent", "--once"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["node"] == "from-downward-api"


async def _wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


def test_loop_survives_a_redis_outage_and_republishes(own_redis: RedisServer) -> None:
    config = AgentConfig(node="loop-node", redis_url=own_redis.url, metrics_host="127.0.0.1",
                         metrics_port=0, interval_seconds=0.1, benchmark=False,
                         redis_timeout_seconds=0.3)  # fmt: skip
    source, _ = replay_source("hgx-h200")
    agent = Agent(config, source, builtin_catalog())
    keys = Keys()

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        reader = Redis.from_url(own_redis.url, socket_timeout=0.5, socket_connect_timeout=0.5)
        store = FleetStore(reader, keys)

        async def published() -> bool:
            try:
                return await store.node("loop-node") is not None
            except (OSError, Exception):
                return False

        try:
            await _wait_for(published)
            assert agent.state.redis_connected
            await asyncio.to_thread(own_redis.stop)
            outage = time.time()
            collects = agent.state.collects
            await _wait_for(lambda: _true(not agent.state.redis_connected))
            # Collection and /metrics carry on while Redis is gone.
            await _wait_for(lambda: _true(agent.state.collects >= collects + 3))
            text = generate_latest(agent.registry).decode()
            assert 'gpuplan_agent_redis_connected{node="loop-node"} 0.0' in text
            assert agent.state.redis_publish_failures >= 1
            # And the HTTP /metrics a Prometheus scrapes keeps answering during the outage.
            assert agent.metrics_port
            scrape_reader, scrape_writer = await asyncio.open_connection(
                "127.0.0.1", agent.metrics_port
            )
            scrape_writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            scraped = (await asyncio.wait_for(scrape_reader.read(), 5)).decode()
            scrape_writer.close()
            assert scraped.startswith("HTTP/1.1 200 OK")
            assert 'gpuplan_agent_redis_connected{node="loop-node"} 0.0' in scraped
            await asyncio.to_thread(own_redis.start)  # an empty Redis: the node must come back
            await _wait_for(published, timeout=15)
            node = await store.node("loop-node")
            assert node is not None
            assert node.ts > outage
            assert agent.state.redis_connected
            text = generate_latest(agent.registry).decode()
            assert 'gpuplan_agent_redis_connected{node="loop-node"} 1.0' in text
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
            await reader.aclose()

    asyncio.run(scenario())


async def _true(value: bool) -> bool:
    return value


def test_loop_serves_metrics_and_benchmarks_in_the_background() -> None:
    config = AgentConfig(node="bench-node", metrics_host="127.0.0.1", metrics_port=0,
                         interval_seconds=0.2, backend="none", cpu_matmul_size=64,
                         cpu_copy_bytes=2**20, cpu_threads=1, matmul_warmup=1)  # fmt: skip
    from gpuplan.agent.telemetry import NoGpuSource

    agent = Agent(config, NoGpuSource(), builtin_catalog())

    async def scenario() -> str:
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        try:
            await _wait_for(lambda: _true(agent.state.snapshot is not None
                                          and agent.state.snapshot.benchmark is not None), 60)  # fmt: skip
            assert agent.metrics_port
            reader, writer = await asyncio.open_connection("127.0.0.1", agent.metrics_port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            body = (await reader.read()).decode()
            writer.close()
            return body
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)

    body = asyncio.run(scenario())
    assert body.startswith("HTTP/1.1 200 OK")
    assert 'gpuplan_agent_gpus{node="bench-node"} 0.0' in body
    assert 'gpuplan_agent_matmul_flops_per_second{dtype="fp32",gpu="cpu"' in body
    assert agent.state.collects >= 1
    assert msgspec.json.encode(agent.state.snapshot)


def test_a_hanging_benchmark_never_stops_telemetry() -> None:
    config = AgentConfig(node="hang-node", metrics_host="127.0.0.1", metrics_port=0,
                         interval_seconds=0.1, backend="none", benchmark_timeout_seconds=1.0)  # fmt: skip
    from gpuplan.agent.telemetry import NoGpuSource

    hang = [sys.executable, "-c", "import time; time.sleep(600)"]
    agent = Agent(config, NoGpuSource(), builtin_catalog(), bench_command=hang)

    async def scenario() -> int:
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        try:
            await _wait_for(lambda: _true(agent.state.benchmark_runs["error"] == 1), 10)
            return agent.state.collects
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)

    collects_during_hang = asyncio.run(scenario())
    assert collects_during_hang >= 5  # 0.1 s sweeps went on through the 1 s hang
    snapshot = agent.state.snapshot
    assert snapshot is not None
    assert snapshot.benchmark is not None
    assert snapshot.benchmark.status == "error"
    assert "timed out" in snapshot.benchmark.detail
