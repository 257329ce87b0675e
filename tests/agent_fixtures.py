"""Helpers shared by the agent tests: recorded NVML sessions and a node snapshot."""

import json
import time
from pathlib import Path
from typing import Any

import pynvml

from gpuplan.agent.telemetry.nvml import NvmlSource
from gpuplan.agent.telemetry.recording import ReplayNvml
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.fleet import (
    BenchmarkReport,
    BenchmarkSkip,
    CopyResult,
    CpuInfo,
    MatmulDtype,
    MatmulResult,
    NodeSnapshot,
    enrich,
    rate_benchmark,
)

NVML_FIXTURES = Path(__file__).parent / "fixtures" / "nvml"


def recording(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((NVML_FIXTURES / f"{name}.json").read_text())
    return data


def no_wait(seconds: float) -> None:
    """A sleep that does not: a replay has no sample refresh to wait for."""


def replay_source(name: str) -> tuple[NvmlSource, ReplayNvml]:
    replay = ReplayNvml(recording(name), pynvml)
    return NvmlSource(replay, sleep=no_wait), replay


def snapshot(
    node: str = "node-a",
    fixture: str = "hgx-h200",
    ts: float | None = None,
    bf16_flops: float = 760e12,
) -> NodeSnapshot:
    """A node snapshot built the agent's way from a recorded NVML session, with a
    benchmark report of made-up rates (test inputs, not measurements)."""
    rates: tuple[tuple[MatmulDtype, float], ...] = (
        ("bf16", bf16_flops),
        ("fp8", 1400e12),
        ("tf32", 380e12),
    )
    catalog = builtin_catalog()
    sweep = replay_source(fixture)[0].collect(node)
    gpu = sweep.gpus[0]
    report = BenchmarkReport(
        ts=ts or time.time(),
        status="partial",
        duration_seconds=42.0,
        torch_version="2.13.0",
        matmul=[
            MatmulResult(device=gpu.uuid, gpu_index=gpu.index, model_name=gpu.model_name,
                         dtype=dtype, m=8192, n=8192, k=8192, iterations=50,
                         flops_per_second=rate, max_flops_per_second=rate * 1.02)
            for dtype, rate in rates
        ],
        copy=[
            CopyResult(device=gpu.uuid, gpu_index=0, model_name=gpu.model_name, kind="h2d",
                       path="pcie", size_bytes=512 * 2**20, bytes_per_second=50e9),
        ] + [
            CopyResult(device=gpu.uuid, gpu_index=0, peer_uuid=peer.uuid, peer_index=peer.index,
                       model_name=gpu.model_name, kind="d2d", path="nvlink",
                       size_bytes=512 * 2**20, bytes_per_second=360e9)
            for peer in sweep.gpus[1:2]
        ],
        skipped=[BenchmarkSkip(device=g.uuid, reason="mig" if g.up else "lost")
                 for g in sweep.gpus[1:]],
    )  # fmt: skip
    return enrich(
        NodeSnapshot(
            node=node,
            ts=ts or time.time(),
            agent_version="test",
            vendor=sweep.vendor,
            gpu_count=len(sweep.gpus),
            driver_version=sweep.driver_version,
            interval_seconds=10.0,
            ttl_seconds=30.0,
            cpu=CpuInfo(
                model_name="Intel Xeon Platinum 8480+",
                logical_cpus=224,
                memory_total_bytes=2 * 2**40,
            ),
            gpus=sweep.gpus,
            mig_instances=sweep.mig_instances,
            benchmark=rate_benchmark(report, catalog),
        ),
        catalog,
    )
