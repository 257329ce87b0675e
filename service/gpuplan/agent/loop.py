"""The agent: one process, one asyncio loop, three tasks that never wait on each other.

- collect: every ``interval`` a telemetry sweep (in a worker thread, since NVML
  calls block), turned into a :class:`NodeSnapshot` and handed to the exporter and
  the publisher;
- benchmark: at start and every ``benchmark_interval``, a child process measures
  the idle GPUs (or the CPU), killed if it overruns its timeout;
- publish: writes the newest snapshot to Redis, with backoff while Redis is down.

``/metrics`` is served on the same loop from the cached state.
"""

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Sequence

from gpuplan import __version__
from gpuplan.agent.bench.runner import WORKER, BenchSizes, plan_benchmark, run_benchmark
from gpuplan.agent.config import AgentConfig
from gpuplan.agent.exporter import bound_port, registry_for, serve_metrics
from gpuplan.agent.publisher import Publisher
from gpuplan.agent.state import AgentState
from gpuplan.agent.telemetry import Sweep, TelemetryError, TelemetrySource
from gpuplan.agent.telemetry.host import cpu_info
from gpuplan.core.catalog import Catalog
from gpuplan.core.fleet import BenchmarkReport, NodeSnapshot, enrich, rate_benchmark
from gpuplan.fleet.connection import connect
from gpuplan.fleet.schema import Keys

log = logging.getLogger("gpuplan.agent")


class Agent:
    """One node's agent."""

    def __init__(
        self,
        config: AgentConfig,
        source: TelemetrySource,
        catalog: Catalog,
        bench_command: Sequence[str] = WORKER,
    ) -> None:
        self.config = config
        self.bench_command = bench_command
        self.source = source
        self.catalog = catalog
        self.cpu = cpu_info()
        self.state = AgentState(node=config.node, backend=source.vendor)
        self.registry = registry_for(self.state)
        self.sweep: Sweep | None = None
        self.report: BenchmarkReport | None = None
        self.publisher: Publisher | None = None
        self.metrics_port: int | None = None
        self.sizes = BenchSizes(
            gpu_matmul_size=config.gpu_matmul_size,
            cpu_matmul_size=config.cpu_matmul_size,
            warmup=config.matmul_warmup,
            iterations=config.matmul_iterations,
            gpu_copy_bytes=config.gpu_copy_bytes,
            cpu_copy_bytes=config.cpu_copy_bytes,
            cpu_threads=config.cpu_threads,
        )
        if config.redis_url is not None:
            self.state.redis_configured = True
            self.publisher = Publisher(
                connect(config.redis_url, config.redis_timeout_seconds),
                Keys(config.key_prefix),
                self.state,
                timeout_seconds=config.redis_timeout_seconds * 2,
            )

    # -- steps -------------------------------------------------------------------

    async def collect(self) -> NodeSnapshot | None:
        """One telemetry sweep; None (and counted) when the library failed as a whole."""
        started = time.monotonic()
        self.state.collects += 1
        try:
            sweep = await asyncio.to_thread(self.source.collect, self.config.node)
        except TelemetryError as exc:
            self.state.collect_failures += 1
            log.warning("telemetry sweep failed: %s", exc)
            return None
        finally:
            self.state.collector_errors = self.source.errors.copy()
        self.sweep = sweep
        self.state.collect_duration_seconds = time.monotonic() - started
        self.state.last_collect_ts = time.time()
        return self.snapshot()

    def snapshot(self) -> NodeSnapshot | None:
        """The newest snapshot from the last sweep and the last benchmark report."""
        if self.sweep is None:
            return None
        sweep = self.sweep
        snapshot = enrich(
            NodeSnapshot(
                node=self.config.node,
                ts=self.state.last_collect_ts or time.time(),
                agent_version=__version__,
                vendor=sweep.vendor,
                gpu_count=len(sweep.gpus),
                driver_version=sweep.driver_version,
                interval_seconds=self.config.interval_seconds,
                ttl_seconds=self.config.ttl_seconds,
                cpu=self.cpu,
                gpus=sweep.gpus,
                mig_instances=sweep.mig_instances,
                benchmark=self.report,
            ),
            self.catalog,
        )
        self.state.snapshot = snapshot
        return snapshot

    async def benchmark(self) -> BenchmarkReport | None:
        """Benchmark what is idle now; the report is kept and rated against the catalog."""
        if self.sweep is None:
            return None
        plan, skipped = plan_benchmark(self.sweep, self.cpu, self.sizes)
        report = await run_benchmark(
            plan, skipped, self.config.benchmark_timeout_seconds, self.bench_command
        )
        report = rate_benchmark(report, self.catalog)
        self.state.benchmark_runs[report.status] += 1
        if report.status in ("ok", "partial"):
            self.state.last_benchmark_success_ts = report.ts
        if report.status == "error":
            log.warning("benchmark failed: %s", report.detail)
        if report.status != "skipped" or self.report is None:
            self.report = report  # a skipped run keeps the previous measurements
        return report

    # -- modes -------------------------------------------------------------------

    async def run_once(self) -> bool:
        """Collect, benchmark and publish once; True when all of it worked."""
        if await self.collect() is None:
            return False
        ok = True
        if self.config.benchmark:
            report = await self.benchmark()
            ok = report is not None and report.status != "error"
        snapshot = self.snapshot()
        if self.publisher is not None and snapshot is not None:
            self.publisher.offer(snapshot, new_benchmark=self.report is not None)
            ok = await self.publisher.publish_now() and ok
            await self.publisher.client.aclose()
        return ok

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until ``stop`` is set (SIGTERM and SIGINT set it when not given)."""
        stop = stop or _stop_on_signals()
        server = await serve_metrics(
            self.registry, self.config.metrics_host, self.config.metrics_port
        )
        self.metrics_port = bound_port(server)
        log.info(
            "agent for node %s serving /metrics on port %d", self.config.node, self.metrics_port
        )
        tasks = [asyncio.create_task(self._collect_loop(stop), name="collect")]
        if self.config.benchmark:
            tasks.append(asyncio.create_task(self._benchmark_loop(stop), name="benchmark"))
        if self.publisher is not None:
            tasks.append(asyncio.create_task(self.publisher.run(), name="publish"))
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            server.close()
            await server.wait_closed()
            if self.publisher is not None:
                await self.publisher.client.aclose()
            self.source.close()

    async def _collect_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            snapshot = await self.collect()
            if snapshot is not None and self.publisher is not None:
                self.publisher.offer(snapshot, new_benchmark=False)
            await _sleep_until(stop, started + self.config.interval_seconds)

    async def _benchmark_loop(self, stop: asyncio.Event) -> None:
        while self.sweep is None and not stop.is_set():
            await asyncio.sleep(0.05)
        while not stop.is_set():
            started = time.monotonic()
            report = await self.benchmark()
            snapshot = self.snapshot()
            if report is not None and snapshot is not None and self.publisher is not None:
                self.publisher.offer(snapshot, new_benchmark=report is self.report)
            await _sleep_until(stop, started + self.config.benchmark_interval_seconds)


async def _sleep_until(stop: asyncio.Event, deadline: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, deadline - time.monotonic()))


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop
