"""Benchmark planning, and a child that crashes or hangs never taking the agent down."""

import asyncio
import sys
import time

import msgspec
import pytest

from gpuplan.agent.bench.protocol import BenchOutput, BenchPlan
from gpuplan.agent.bench.runner import BenchSizes, plan_benchmark, run_benchmark
from gpuplan.agent.bench.worker import _set_tf32
from gpuplan.agent.telemetry import Sweep
from gpuplan.core.fleet import CpuInfo, MatmulResult
from tests.agent_fixtures import replay_source

pytestmark = pytest.mark.torch

CPU = CpuInfo(model_name="test cpu", logical_cpus=2)


def test_only_idle_gpus_are_planned() -> None:
    sweep = replay_source("hgx-h200")[0].collect("n")
    plan, skipped = plan_benchmark(sweep, CPU, BenchSizes())
    assert plan is not None
    assert plan.mode == "gpu"
    assert [g.index for g in plan.gpus] == [0]
    assert {(s.device[-4:], s.reason) for s in skipped} == {("1111", "mig"), ("2222", "lost")}
    assert plan.dtypes == ["fp32", "tf32", "fp16", "bf16", "fp8"]
    assert plan.matmul_size == 8192
    assert plan.iterations >= 50


def test_busy_gpus_are_skipped_and_pairs_follow_nvlink() -> None:
    sweep = replay_source("hgx-h200")[0].collect("n")
    idle = msgspec.structs.replace(sweep.gpus[0], index=1, uuid="GPU-b")
    busy = msgspec.structs.replace(sweep.gpus[0], index=2, uuid="GPU-c", utilization_ratio=0.4)
    held = msgspec.structs.replace(sweep.gpus[0], index=3, uuid="GPU-d", compute_processes=2)
    sweep = Sweep(vendor="nvidia", gpus=[sweep.gpus[0], idle, busy, held],
                  nvlink_pairs=frozenset({(0, 1), (1, 0)}))  # fmt: skip
    plan, skipped = plan_benchmark(sweep, CPU, BenchSizes())
    assert plan is not None
    assert [(p.src, p.dst, p.path) for p in plan.pairs] == [(0, 1, "nvlink"), (1, 0, "nvlink")]
    assert sorted((s.device, s.reason) for s in skipped) == [("GPU-c", "busy"), ("GPU-d", "busy")]


def test_no_idle_gpu_means_no_run() -> None:
    sweep = replay_source("a100-pcie-mig")[0].collect("n")
    plan, skipped = plan_benchmark(sweep, CPU, BenchSizes())
    assert plan is None
    report = asyncio.run(run_benchmark(plan, skipped, 5))
    assert report.status == "skipped"
    assert [s.reason for s in report.skipped] == ["mig"]


def test_no_gpus_means_a_cpu_run_that_measures() -> None:
    sizes = BenchSizes(cpu_matmul_size=64, cpu_copy_bytes=2**20, warmup=1, cpu_threads=1,
                       cpu_dtypes=("fp32", "bf16"))  # fmt: skip
    plan, skipped = plan_benchmark(Sweep(vendor="none"), CPU, sizes)
    assert plan is not None
    assert plan.mode == "cpu"
    assert skipped == []
    report = asyncio.run(run_benchmark(plan, skipped, 120))
    assert report.status == "ok", report.detail
    assert [r.dtype for r in report.matmul] == ["fp32", "bf16"]
    assert all(r.model_name == "test cpu" for r in report.matmul)
    assert report.copy[0].kind == "host_memcpy"


def _plan() -> BenchPlan:
    plan = plan_benchmark(Sweep(vendor="none"), CPU, BenchSizes())[0]
    assert plan is not None  # no GPUs: a CPU run
    return plan


def test_a_crashing_child_is_an_error_report() -> None:
    crash = [sys.executable, "-c", "import os, sys; sys.stdin.read(); os.abort()"]
    report = asyncio.run(run_benchmark(_plan(), [], 30, command=crash))
    assert report.status == "error"
    assert "exited -6" in report.detail  # SIGABRT


def test_a_hanging_child_is_killed_at_the_timeout() -> None:
    hang = [sys.executable, "-c", "import time; time.sleep(600)"]
    started = time.monotonic()
    report = asyncio.run(run_benchmark(_plan(), [], 0.5, command=hang))
    assert time.monotonic() - started < 5
    assert report.status == "error"
    assert "timed out after 0.5 s" in report.detail


def test_garbage_output_is_an_error_report() -> None:
    talk = [sys.executable, "-c", "import sys; sys.stdin.read(); print('hello')"]
    report = asyncio.run(run_benchmark(_plan(), [], 30, command=talk))
    assert report.status == "error"
    assert "unreadable" in report.detail


def test_tf32_switch() -> None:
    import torch

    matmul = torch.backends.cuda.matmul
    _set_tf32(torch, True)
    assert matmul.fp32_precision == "tf32"
    _set_tf32(torch, False)
    assert matmul.fp32_precision == "ieee"


def test_agent_help_names_the_environment_variables() -> None:
    from click.testing import CliRunner

    from gpuplan.cli import main

    result = CliRunner().invoke(main, ["agent", "--help"])
    assert result.exit_code == 0
    for name in ("GPUPLAN_AGENT_REDIS_URL", "GPUPLAN_AGENT_INTERVAL", "GPUPLAN_AGENT_ONCE"):
        assert name in result.output
    assert "--benchmark-interval" in result.output


def test_status_separates_failures_from_planned_skips() -> None:
    from gpuplan.core.fleet import BenchmarkSkip

    def status(*reasons: tuple[str, str | None]) -> str:
        # str, not SkipReason: ("none", None) below is no valid skip, and the child's
        # output that carries it fails to decode (status "error").
        skips = [BenchmarkSkip(device="GPU-x", reason=r, dtype=d) for r, d in reasons]  # type: ignore[arg-type]
        out = BenchOutput(torch_version="2", skipped=skips,
                          matmul=[] if ("none", None) in reasons else [_result()])  # fmt: skip
        script = (
            f"import sys; sys.stdin.read(); sys.stdout.buffer.write({msgspec.json.encode(out)!r})"
        )
        report = asyncio.run(run_benchmark(_plan(), [], 30, command=[sys.executable, "-c", script]))
        return report.status

    assert status() == "ok"
    assert status(("unsupported", "fp8")) == "ok"  # an A100 has no fp8
    assert status(("failed", "bf16")) == "partial"  # an OOM
    assert status(("unsupported", None)) == "partial"  # torch cannot see a GPU
    assert status(("none", None)) == "error"


def _result() -> "MatmulResult":
    return MatmulResult(device="GPU-x", model_name="m", dtype="bf16", m=1, n=1, k=1,
                        iterations=50, flops_per_second=1.0, max_flops_per_second=1.0)  # fmt: skip
