"""Prometheus exposition of the agent's state, and the small HTTP server for it.

Names follow the Prometheus guide: one ``gpuplan_agent_`` prefix, base units in the
name (bytes, watts, joules, celsius, hertz, seconds, ratios 0-1, FLOP/s), ``_total``
on counters, identity in ``_info`` metrics. GPU series carry ``node``, ``gpu``
(index), ``uuid`` and ``model_name``, which joins with dcgm-exporter after
``label_replace`` of its ``UUID``; no name collides with its ``DCGM_FI_*``. The
collector reads the cached snapshot, so a scrape never touches NVML or torch.
"""

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuplan import __version__
from gpuplan.agent.state import AgentState
from gpuplan.core.fleet import GpuTelemetry

P = "gpuplan_agent_"
GPU_LABELS = ["node", "gpu", "uuid", "model_name"]

# GPM activities (agent/telemetry/gpm.py), a field of GpuTelemetry and of MigInstance
# alike: help with the {scope} it is read for.
ACTIVITY_HELP = {
    "sm_activity_ratio": (
        "Fraction of the {scope}'s SMs busy since the previous sweep (NVML GPM SM_UTIL, "
        "Hopper and newer). Not NVML utilization.gpu, which reads 1 while a single SM "
        "runs a kernel."
    ),
    "tensor_activity_ratio": (
        "Fraction of time the {scope}'s SMs ran tensor-core instructions since the "
        "previous sweep (NVML GPM ANY_TENSOR_UTIL, Hopper and newer)."
    ),
    "dram_activity_ratio": (
        "DRAM bandwidth the {scope} used since the previous sweep, as a fraction of the "
        "peak (NVML GPM DRAM_BW_UTIL, Hopper and newer)."
    ),
}

# (field of GpuTelemetry, metric name without the prefix, help); one series per GPU.
_GPU_GAUGES: tuple[tuple[str, str, str], ...] = (
    (
        "utilization_ratio",
        "gpu_utilization_ratio",
        "Fraction of the last sample period a kernel ran (NVML utilization.gpu).",
    ),
    (
        "memory_utilization_ratio",
        "memory_utilization_ratio",
        "Fraction of the last sample period the memory controller was busy.",
    ),
    *((field, "gpu_" + field, doc.format(scope="GPU")) for field, doc in ACTIVITY_HELP.items()),
    ("memory_total_bytes", "memory_total_bytes", "GPU memory the driver reports."),
    ("memory_used_bytes", "memory_used_bytes", "GPU memory in use."),
    ("memory_free_bytes", "memory_free_bytes", "GPU memory free."),
    ("power_watts", "power_watts", "Board power draw."),
    ("power_limit_watts", "power_limit_watts", "Enforced board power limit."),
    ("temperature_celsius", "temperature_celsius", "GPU core temperature."),
    ("nvlink_links_active", "nvlink_links_active", "NVLink links in the active state."),
    ("nvlink_version", "nvlink_version", "NVLink version of the first active link."),
    ("compute_processes", "compute_processes", "Processes holding a compute context on the GPU."),
)


def _gpu_labels(node: str, gpu: GpuTelemetry) -> list[str]:
    return [node, str(gpu.index), gpu.uuid, gpu.model_name]


class AgentCollector(Collector):
    """Metric families built from :class:`AgentState` on every scrape."""

    def __init__(self, state: AgentState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        yield from self._agent()
        snapshot = self.state.snapshot
        if snapshot is None:
            return
        yield from self._gpus()
        yield from self._mig()
        yield from self._benchmark()

    def _agent(self) -> Iterator[Metric]:
        s = self.state
        snap = s.snapshot
        info = GaugeMetricFamily(
            P + "info",
            "The agent and its node; the value is 1.",
            labels=["node", "agent_version", "vendor", "driver_version", "cpu_model_name"],
        )
        info.add_metric(
            [
                s.node,
                __version__,
                snap.vendor if snap else s.backend,
                (snap.driver_version or "") if snap else "",
                snap.cpu.model_name if snap else "",
            ],
            1,
        )
        yield info
        if snap is not None:
            yield _single(P + "gpus", "GPUs on the node (0 in CPU mode).", s.node, snap.gpu_count)
        yield from _node_gauges(
            s.node,
            collect_duration_seconds=s.collect_duration_seconds,
            last_collect_timestamp_seconds=s.last_collect_ts,
        )
        yield _counter(P + "collects", "Telemetry sweeps attempted.", s.node, s.collects)
        yield _counter(
            P + "collect_failures",
            "Telemetry sweeps that failed as a whole.",
            s.node,
            s.collect_failures,
        )
        errors = CounterMetricFamily(
            P + "collector_errors",
            "Failed telemetry queries by kind (not_supported is counted once per GPU and field).",
            labels=["node", "collector", "error"],
        )
        for kind, count in sorted(s.collector_errors.items()):
            errors.add_metric([s.node, s.backend, kind], count)
        yield errors
        if s.redis_configured:
            yield _single(
                P + "redis_connected",
                "1 when the last publish to Redis succeeded.",
                s.node,
                int(s.redis_connected),
            )
            yield _counter(
                P + "redis_publishes", "Snapshots published to Redis.", s.node, s.redis_publishes
            )
            yield _counter(
                P + "redis_publish_failures",
                "Publishes to Redis that failed.",
                s.node,
                s.redis_publish_failures,
            )
        runs = CounterMetricFamily(
            P + "benchmark_runs", "Benchmark runs by outcome.", labels=["node", "status"]
        )
        for status, count in sorted(s.benchmark_runs.items()):
            runs.add_metric([s.node, status], count)
        yield runs
        yield from _node_gauges(
            s.node, benchmark_last_success_timestamp_seconds=s.last_benchmark_success_ts
        )

    def _gpus(self) -> Iterator[Metric]:
        snap = self.state.snapshot
        assert snap is not None
        node = snap.node
        info = GaugeMetricFamily(
            P + "gpu_info",
            "Identity of a GPU; the value is 1.",
            labels=[*GPU_LABELS, "pci_bus_id", "catalog_id", "vendor"],
        )
        up = GaugeMetricFamily(
            P + "gpu_up",
            "1 while the GPU answers, 0 once the driver reports it lost.",
            labels=GPU_LABELS,
        )
        gauges = {
            name: GaugeMetricFamily(P + metric, doc, labels=GPU_LABELS)
            for name, metric, doc in _GPU_GAUGES
        }
        unsupported = GaugeMetricFamily(
            P + "unsupported_fields",
            "Telemetry fields this GPU or its driver does not support.",
            labels=GPU_LABELS,
        )
        mig = GaugeMetricFamily(P + "mig_enabled", "1 when MIG mode is on.", labels=GPU_LABELS)
        energy = CounterMetricFamily(
            P + "energy_joules", "Energy used since the driver loaded.", labels=GPU_LABELS
        )
        clock = GaugeMetricFamily(
            P + "clock_hertz", "Current clock.", labels=[*GPU_LABELS, "clock"]
        )
        clock_max = GaugeMetricFamily(
            P + "clock_max_hertz", "Maximum clock.", labels=[*GPU_LABELS, "clock"]
        )
        gen = GaugeMetricFamily(
            P + "pcie_link_generation", "PCIe link generation.", labels=[*GPU_LABELS, "kind"]
        )
        width = GaugeMetricFamily(
            P + "pcie_link_width", "PCIe link width in lanes.", labels=[*GPU_LABELS, "kind"]
        )
        pcie = GaugeMetricFamily(
            P + "pcie_throughput_bytes_per_second",
            "PCIe throughput over NVML's 20 ms sample.",
            labels=[*GPU_LABELS, "direction"],
        )
        nvlink = CounterMetricFamily(
            P + "nvlink_bytes",
            "NVLink payload bytes since the driver loaded.",
            labels=[*GPU_LABELS, "direction"],
        )
        for gpu in snap.gpus:
            labels = _gpu_labels(node, gpu)
            info.add_metric([*labels, gpu.pci_bus_id or "", gpu.catalog_id or "", snap.vendor], 1)
            up.add_metric(labels, int(gpu.up))
            unsupported.add_metric(labels, len(gpu.unsupported_fields))
            for name, _, _ in _GPU_GAUGES:
                value = getattr(gpu, name)
                if value is not None:
                    gauges[name].add_metric(labels, value)
            if gpu.mig_enabled is not None:
                mig.add_metric(labels, int(gpu.mig_enabled))
            if gpu.energy_joules is not None:
                energy.add_metric(labels, gpu.energy_joules)
            for family, kind, value in (
                (clock, "sm", gpu.sm_clock_hertz),
                (clock, "memory", gpu.memory_clock_hertz),
                (clock_max, "sm", gpu.sm_clock_max_hertz),
                (gen, "current", gpu.pcie_generation),
                (gen, "max", gpu.pcie_max_generation),
                (width, "current", gpu.pcie_width),
                (width, "max", gpu.pcie_max_width),
                (pcie, "tx", gpu.pcie_tx_bytes_per_second),
                (pcie, "rx", gpu.pcie_rx_bytes_per_second),
                (nvlink, "tx", gpu.nvlink_tx_bytes),
                (nvlink, "rx", gpu.nvlink_rx_bytes),
            ):
                if value is not None:
                    family.add_metric([*labels, kind], value)
        yield from (info, up, *gauges.values(), unsupported, mig, energy, clock, clock_max)
        yield from (gen, width, pcie, nvlink)

    def _mig(self) -> Iterator[Metric]:
        snap = self.state.snapshot
        assert snap is not None
        labels = [*GPU_LABELS, "mig_uuid", "profile", "gpu_instance_id"]
        info = GaugeMetricFamily(
            P + "mig_instance_info",
            "A MIG instance and its placement; the value is 1.",
            labels=[*labels, "placement_start", "placement_size"],
        )
        memory = GaugeMetricFamily(
            P + "mig_instance_memory_bytes", "Memory of a MIG instance.", labels=labels
        )
        in_use = GaugeMetricFamily(
            P + "mig_instance_in_use",
            "1 when a process holds a compute context on the instance.",
            labels=labels,
        )
        activity = {
            field: GaugeMetricFamily(
                P + "mig_instance_" + field,
                doc.format(scope="MIG GPU instance")
                + " One value per GPU instance, on each of its compute instances.",
                labels=[*labels, "compute_instance_id"],
            )
            for field, doc in ACTIVITY_HELP.items()
        }
        for m in snap.mig_instances:
            values = [
                snap.node,
                str(m.gpu_index),
                m.gpu_uuid,
                m.gpu_model_name,
                m.mig_uuid,
                m.profile,
                str(m.gpu_instance_id),
            ]
            start = "" if m.placement_start is None else str(m.placement_start)
            size = "" if m.placement_size is None else str(m.placement_size)
            info.add_metric([*values, start, size], 1)
            memory.add_metric(values, m.memory_bytes)
            in_use.add_metric(values, int(m.in_use))
            ci = "" if m.compute_instance_id is None else str(m.compute_instance_id)
            for field, family in activity.items():
                value = getattr(m, field)
                if value is not None:  # never a made-up 0 where GPM did not answer
                    family.add_metric([*values, ci], value)
        yield from (info, memory, in_use, *activity.values())

    def _benchmark(self) -> Iterator[Metric]:
        snap = self.state.snapshot
        assert snap is not None
        report = snap.benchmark
        node = snap.node
        mm_labels = [*GPU_LABELS, "dtype"]
        median = GaugeMetricFamily(
            P + "matmul_flops_per_second",
            "Achieved dense matmul rate, median of the timed calls.",
            labels=mm_labels,
        )
        best = GaugeMetricFamily(
            P + "matmul_best_flops_per_second",
            "Achieved dense matmul rate of the fastest timed call.",
            labels=mm_labels,
        )
        peak = GaugeMetricFamily(
            P + "matmul_peak_flops_per_second",
            "The catalog's dense peak for the GPU model and dtype.",
            labels=mm_labels,
        )
        ratio = GaugeMetricFamily(
            P + "matmul_peak_ratio", "Achieved (median) over catalog peak.", labels=mm_labels
        )
        cp_labels = [*GPU_LABELS, "kind", "path", "peer_gpu"]
        copy = GaugeMetricFamily(
            P + "copy_bandwidth_bytes_per_second",
            "Achieved copy bandwidth, median of the timed copies.",
            labels=cp_labels,
        )
        copy_ratio = GaugeMetricFamily(
            P + "copy_peak_ratio",
            "Achieved copy bandwidth over the catalog's per-direction link rate.",
            labels=cp_labels,
        )
        if report is not None:
            for r in report.matmul:
                labels = [node, _gpu(r.gpu_index), r.device, r.model_name, r.dtype]
                median.add_metric(labels, r.flops_per_second)
                best.add_metric(labels, r.max_flops_per_second)
                if r.peak_flops is not None:
                    peak.add_metric(labels, r.peak_flops)
                if r.ratio_to_peak is not None:
                    ratio.add_metric(labels, r.ratio_to_peak)
            for c in report.copy:
                peer = "" if c.peer_index is None else str(c.peer_index)
                labels = [node, _gpu(c.gpu_index), c.device, c.model_name, c.kind, c.path, peer]
                copy.add_metric(labels, c.bytes_per_second)
                if c.ratio_to_peak is not None:
                    copy_ratio.add_metric(labels, c.ratio_to_peak)
            yield from _node_gauges(
                node,
                benchmark_timestamp_seconds=report.ts,
                benchmark_duration_seconds=report.duration_seconds,
            )
            skipped = GaugeMetricFamily(
                P + "benchmark_skipped_devices",
                "Devices or dtypes the last benchmark left out, by reason.",
                labels=["node", "reason"],
            )
            reasons: dict[str, int] = {}
            for s in report.skipped:
                reasons[s.reason] = reasons.get(s.reason, 0) + 1
            for reason, count in sorted(reasons.items()):
                skipped.add_metric([node, reason], count)
            yield skipped
        yield from (median, best, peak, ratio, copy, copy_ratio)


def _gpu(index: int | None) -> str:
    return "cpu" if index is None else str(index)


def _single(name: str, doc: str, node: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["node"])
    family.add_metric([node], value)
    return family


NODE_GAUGE_HELP = {
    "collect_duration_seconds": "Wall time of the last telemetry sweep.",
    "last_collect_timestamp_seconds": "Unix time of the last successful telemetry sweep.",
    "benchmark_last_success_timestamp_seconds": "Unix time of the last benchmark that measured something.",
    "benchmark_timestamp_seconds": "Unix time the last benchmark finished.",
    "benchmark_duration_seconds": "Wall time of the last benchmark.",
}
"""Help of the node-level gauges that have no value until their event first happens."""


def _node_gauges(node: str, **values: float | None) -> Iterator[Metric]:
    """One ``node``-labelled gauge per keyword (its name after the prefix); one without a
    value yet (nothing collected or benchmarked so far) is left out, not exported as 0."""
    for name, value in values.items():
        if value is not None:
            yield _single(P + name, NODE_GAUGE_HELP[name], node, value)


def _counter(name: str, doc: str, node: str, value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=["node"])
    family.add_metric([node], value)
    return family


def registry_for(state: AgentState) -> CollectorRegistry:
    """A registry of the agent's own (no process or platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(state))
    return registry


async def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> asyncio.Server:
    """Serve ``GET /metrics`` and ``GET /healthz`` on the agent's own loop."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                request = await reader.readline()
                while (await reader.readline()).strip():
                    pass  # headers are not needed
            parts = request.decode("latin-1").split()
            method, path = (parts[0], parts[1].split("?")[0]) if len(parts) >= 2 else ("", "")
            if method not in ("GET", "HEAD"):
                status, body, kind = "405 Method Not Allowed", b"method not allowed\n", "text/plain"
            elif path == "/metrics":
                status, body, kind = "200 OK", generate_latest(registry), CONTENT_TYPE_LATEST
            elif path in ("/healthz", "/health"):
                status, body, kind = "200 OK", b"ok\n", "text/plain"
            else:
                status, body, kind = "404 Not Found", b"not found; try /metrics\n", "text/plain"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ConnectionError, ValueError, asyncio.IncompleteReadError):
            pass  # a slow, broken or oversized request (a line over 64 KiB) gets no answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port)


def bound_port(server: Any) -> int:
    """The port a server listens on (when started on port 0)."""
    return int(server.sockets[0].getsockname()[1])
