"""Choosing what to benchmark, and running the child process under a timeout.

Benchmarks run only on idle GPUs: the agent is not allocated the GPUs it measures
(a DaemonSet sees every GPU of its node), so a GPU holding a compute process, or
busy above 5%, belongs to a tenant and is skipped. MIG-enabled GPUs are skipped too:
a CUDA process sees one MIG instance, and a slice's rate is not the GPU's.
"""

import os
import sys
import time
from collections.abc import Sequence

import msgspec

from gpuplan.agent.bench.protocol import (
    CPU_DTYPES,
    GPU_DTYPES,
    BenchGpu,
    BenchOutput,
    BenchPair,
    BenchPlan,
)
from gpuplan.agent.telemetry import Sweep
from gpuplan.child import run_child
from gpuplan.core.fleet import BenchmarkReport, BenchmarkSkip, CpuInfo, MatmulDtype

IDLE_UTILIZATION_RATIO = 0.05
FULL_PAIR_MATRIX_MAX_GPUS = 4


class BenchSizes(msgspec.Struct, kw_only=True, frozen=True):
    """Problem sizes; the defaults measure a datacenter GPU near its peak."""

    gpu_matmul_size: int = 8192
    cpu_matmul_size: int = 256
    warmup: int = 10
    iterations: int = 50
    gpu_copy_bytes: int = 512 * 1024 * 1024
    cpu_copy_bytes: int = 32 * 1024 * 1024
    copy_iterations: int = 10
    cpu_threads: int = 0
    gpu_dtypes: tuple[MatmulDtype, ...] = GPU_DTYPES
    cpu_dtypes: tuple[MatmulDtype, ...] = CPU_DTYPES


def plan_benchmark(
    sweep: Sweep, cpu: CpuInfo, sizes: BenchSizes
) -> tuple[BenchPlan | None, list[BenchmarkSkip]]:
    """The plan for this node now, and the GPUs left out with their reasons.

    No GPUs at all: benchmark the CPU. GPUs but none idle: no plan.
    """
    if not sweep.gpus:
        return _plan(cpu, sizes, gpus=[], pairs=[]), []
    idle: list[BenchGpu] = []
    skipped: list[BenchmarkSkip] = []
    for gpu in sweep.gpus:
        reason = None
        detail = ""
        if not gpu.up:
            reason = "lost"
        elif gpu.mig_enabled:
            reason = "mig"
        elif gpu.compute_processes is None and gpu.utilization_ratio is None:
            reason, detail = "busy", "idleness unknown: processes and utilization unsupported"
        elif gpu.compute_processes:
            reason, detail = "busy", f"{gpu.compute_processes} compute processes"
        elif (gpu.utilization_ratio or 0.0) >= IDLE_UTILIZATION_RATIO:
            reason, detail = "busy", f"utilization {gpu.utilization_ratio:.0%}"
        if reason is not None:
            skipped.append(BenchmarkSkip(device=gpu.uuid, reason=reason, detail=detail))  # type: ignore[arg-type]
        else:
            idle.append(BenchGpu(index=gpu.index, uuid=gpu.uuid, model_name=gpu.model_name))
    if not idle:
        return None, skipped
    indices = [g.index for g in idle]
    if len(indices) <= FULL_PAIR_MATRIX_MAX_GPUS:
        ordered = [(i, j) for i in indices for j in indices if i != j]
    else:  # a ring bounds the run time on 8-GPU nodes
        ordered = [(i, indices[(n + 1) % len(indices)]) for n, i in enumerate(indices)]
    pairs = [
        BenchPair(src=i, dst=j, path="nvlink" if (i, j) in sweep.nvlink_pairs else "unknown")
        for i, j in ordered
    ]
    return _plan(cpu, sizes, gpus=idle, pairs=pairs), skipped


def _plan(
    cpu: CpuInfo, sizes: BenchSizes, *, gpus: list[BenchGpu], pairs: list[BenchPair]
) -> BenchPlan:
    """A run over ``gpus`` at the GPU sizes, or (no GPUs) of the CPU at the CPU sizes."""
    on_gpu = bool(gpus)
    return BenchPlan(
        mode="gpu" if on_gpu else "cpu",
        cpu_model_name=cpu.model_name,
        gpus=gpus,
        pairs=pairs,
        dtypes=list(sizes.gpu_dtypes if on_gpu else sizes.cpu_dtypes),
        matmul_size=sizes.gpu_matmul_size if on_gpu else sizes.cpu_matmul_size,
        warmup=sizes.warmup,
        iterations=sizes.iterations,
        copy_bytes=sizes.gpu_copy_bytes if on_gpu else sizes.cpu_copy_bytes,
        copy_iterations=sizes.copy_iterations,
        cpu_threads=0 if on_gpu else sizes.cpu_threads,
    )


WORKER = (sys.executable, "-m", "gpuplan.agent.bench.worker")


async def run_benchmark(
    plan: BenchPlan | None,
    skipped: list[BenchmarkSkip],
    timeout_seconds: float,
    command: Sequence[str] = WORKER,
) -> BenchmarkReport:
    """Run ``plan`` in a child process (``command``, reading the plan on stdin);
    any failure of the child (crash, OOM kill, hang past the timeout) becomes the report."""
    started = time.monotonic()

    def report(status: str, detail: str = "", output: BenchOutput | None = None) -> BenchmarkReport:
        return BenchmarkReport(
            ts=time.time(),
            status=status,  # type: ignore[arg-type]
            duration_seconds=time.monotonic() - started,
            torch_version=None if output is None else output.torch_version,
            detail=detail[-2000:],
            matmul=[] if output is None else output.matmul,
            copy=[] if output is None else output.copy,
            skipped=skipped + ([] if output is None else output.skipped),
        )

    if plan is None:
        return report("skipped", "no idle GPU")
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # CUDA indices in NVML's order
    finished = await run_child(
        command, msgspec.json.encode(plan), env=env, timeout_seconds=timeout_seconds
    )
    if finished is None:
        for gpu in plan.gpus or []:
            skipped.append(BenchmarkSkip(device=gpu.uuid, reason="timeout"))
        return report("error", f"benchmark timed out after {timeout_seconds:g} s and was killed")
    if finished.returncode != 0:
        tail = finished.stderr.decode(errors="replace").strip().splitlines()[-5:]
        return report("error", f"benchmark exited {finished.returncode}: " + " | ".join(tail))
    try:
        output = msgspec.json.decode(finished.stdout, type=BenchOutput)
    except msgspec.DecodeError as exc:
        return report("error", f"benchmark answered unreadable output: {exc}")
    measured = bool(output.matmul or output.copy)
    # Busy, MIG and lost GPUs were left out by design, and a dtype the GPU lacks (fp8
    # before Ada/Hopper) is no failure; a run or a device that broke is.
    failed = [
        s
        for s in output.skipped
        if s.reason in ("failed", "timeout") or (s.reason == "unsupported" and s.dtype is None)
    ]
    status = "ok" if measured and not failed else "partial" if measured else "error"
    everything = skipped + output.skipped
    reasons = "; ".join(f"{s.device} {s.reason} {s.detail}".strip() for s in everything)
    detail = "" if measured else f"nothing measured: {reasons}"
    return report(status, detail, output)
