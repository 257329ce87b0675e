"""The benchmark child process: ``python -m gpuplan.agent.bench.worker < plan.json``.

It runs in its own process because a benchmark can run out of memory, hang in a
driver call or crash a CUDA context, and none of that may stop telemetry: the agent
kills this process on timeout and carries on. Method (see docs/agent.md):

- matmul: ``torch.mm`` of m×k by k×n (B column-major, as cuBLAS likes), warm-up
  calls, then ``iterations`` timed calls (CUDA events on a GPU, ``perf_counter``
  on the CPU); FLOP/s = 2·m·n·k / t, the median and the best call reported;
- host↔device: pinned host buffer, ``non_blocking`` copies on one stream;
- device↔device: a copy from GPU i to GPU j, timed on the source's stream;
- CPU mode: host memory copy bandwidth of a buffer far larger than the caches.
"""

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

from gpuplan.agent.bench.protocol import BenchGpu, BenchOutput, BenchPair, BenchPlan
from gpuplan.core.fleet import BenchmarkSkip, CopyPath, CopyResult, MatmulDtype, MatmulResult


def _torch_dtype(torch: Any, dtype: MatmulDtype) -> Any:
    return {
        "fp64": torch.float64,
        "fp32": torch.float32,
        "tf32": torch.float32,
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
    }[dtype]


def _set_tf32(torch: Any, enabled: bool) -> None:
    """TF32 on or off for fp32 matmul, through the new switch where torch has it."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "tf32" if enabled else "ieee"
    else:  # torch < 2.9
        matmul.allow_tf32 = enabled


def _median_max(flops: float, seconds: list[float]) -> tuple[float, float]:
    seconds = [s for s in seconds if s > 0]
    if not seconds:
        raise RuntimeError("timer resolution too coarse: every call took 0 s")
    return flops / statistics.median(seconds), flops / min(seconds)


def _time_cpu(fn: Callable[[], Any], warmup: int, iterations: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iterations):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def _time_cuda(torch: Any, fn: Callable[[], Any], warmup: int, iterations: int) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = []
    for _ in range(iterations):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1000 for start, end in events]


def _matmul_call(torch: Any, dtype: MatmulDtype, size: int, device: Any) -> Callable[[], Any]:
    """A closure doing one size³ matmul in ``dtype`` on ``device``."""
    m = n = k = size
    if dtype == "fp8":
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    kind = _torch_dtype(torch, dtype)
    a = torch.randn(m, k, device=device, dtype=kind)
    b = torch.randn(n, k, device=device, dtype=kind).t()
    c = torch.empty(m, n, device=device, dtype=kind)
    return lambda: torch.mm(a, b, out=c)


def _fp8_supported(torch: Any, device: Any) -> str | None:
    """Why fp8 cannot run here, or None when it can."""
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no fp8 matmul"
    if device.type != "cuda":
        return "fp8 matmul needs a GPU"
    if torch.version.hip is None and torch.cuda.get_device_capability(device) < (8, 9):
        return "fp8 needs compute capability 8.9 or newer"
    return None


def matmul(torch: Any, plan: BenchPlan, device: Any, ident: BenchGpu | None) -> BenchOutput:
    out = BenchOutput(torch_version=str(torch.__version__))
    name = plan.cpu_model_name if ident is None else ident.model_name
    label = "cpu" if ident is None else ident.uuid
    size = plan.matmul_size
    for dtype in plan.dtypes:
        if dtype == "fp8" and (why := _fp8_supported(torch, device)) is not None:
            out.skipped.append(
                BenchmarkSkip(device=label, reason="unsupported", dtype=dtype, detail=why)
            )
            continue
        try:
            if device.type == "cuda":
                _set_tf32(torch, dtype == "tf32")
            call = _matmul_call(torch, dtype, size, device)
            if device.type == "cuda":
                seconds = _time_cuda(torch, call, plan.warmup, plan.iterations)
            else:
                seconds = _time_cpu(call, plan.warmup, plan.iterations)
            median, best = _median_max(2.0 * size**3, seconds)
        except Exception as exc:
            out.skipped.append(
                BenchmarkSkip(device=label, reason="failed", dtype=dtype, detail=str(exc)[:500])
            )
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        finally:
            if device.type == "cuda":
                _set_tf32(torch, False)
        out.matmul.append(
            MatmulResult(
                device=label,
                gpu_index=None if ident is None else ident.index,
                model_name=name,
                dtype=dtype,
                m=size,
                n=size,
                k=size,
                iterations=plan.iterations,
                flops_per_second=median,
                max_flops_per_second=best,
            )
        )
    return out


def _copy_seconds(torch: Any, copy: Callable[[], Any], plan: BenchPlan, cuda: bool) -> float:
    if cuda:
        return statistics.median(_time_cuda(torch, copy, 2, plan.copy_iterations))
    return statistics.median(_time_cpu(copy, 2, plan.copy_iterations))


def host_memory(torch: Any, plan: BenchPlan) -> CopyResult:
    src = torch.ones(plan.copy_bytes, dtype=torch.uint8)
    dst = torch.empty_like(src)
    seconds = _copy_seconds(torch, lambda: dst.copy_(src), plan, cuda=False)
    return CopyResult(
        device="cpu",
        model_name=plan.cpu_model_name,
        kind="host_memcpy",
        path="host_memory",
        size_bytes=plan.copy_bytes,
        bytes_per_second=plan.copy_bytes / seconds,
    )


def host_device(torch: Any, plan: BenchPlan, device: Any, ident: BenchGpu) -> list[CopyResult]:
    host = torch.empty(plan.copy_bytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(plan.copy_bytes, dtype=torch.uint8, device=device)
    out = []
    for kind, copy in (
        ("h2d", lambda: dev.copy_(host, non_blocking=True)),
        ("d2h", lambda: host.copy_(dev, non_blocking=True)),
    ):
        seconds = _copy_seconds(torch, copy, plan, cuda=True)
        out.append(
            CopyResult(
                device=ident.uuid,
                gpu_index=ident.index,
                model_name=ident.model_name,
                kind=kind,  # type: ignore[arg-type]
                path="pcie",
                size_bytes=plan.copy_bytes,
                bytes_per_second=plan.copy_bytes / seconds,
            )
        )
    return out


def device_device(
    torch: Any, plan: BenchPlan, devices: dict[int, Any], gpus: dict[int, BenchGpu], pair: BenchPair
) -> CopyResult:
    src_dev, dst_dev = devices[pair.src], devices[pair.dst]
    path: CopyPath = pair.path
    if path == "unknown":
        peer = torch.cuda.can_device_access_peer(src_dev.index, dst_dev.index)
        path = "pcie" if peer else "host_staged"
    src = torch.ones(plan.copy_bytes, dtype=torch.uint8, device=src_dev)
    dst = torch.empty(plan.copy_bytes, dtype=torch.uint8, device=dst_dev)
    with torch.cuda.device(src_dev):
        seconds = _copy_seconds(torch, lambda: dst.copy_(src, non_blocking=True), plan, cuda=True)
    torch.cuda.synchronize(dst_dev)
    return CopyResult(
        device=gpus[pair.src].uuid,
        gpu_index=pair.src,
        peer_uuid=gpus[pair.dst].uuid,
        peer_index=pair.dst,
        model_name=gpus[pair.src].model_name,
        kind="d2d",
        path=path,
        size_bytes=plan.copy_bytes,
        bytes_per_second=plan.copy_bytes / seconds,
    )


def _cuda_devices(torch: Any, gpus: list[BenchGpu]) -> tuple[dict[int, Any], list[BenchmarkSkip]]:
    """The torch device of each planned GPU, matched by UUID where torch reports it."""
    if not torch.cuda.is_available():
        return {}, [
            BenchmarkSkip(
                device=g.uuid, reason="unsupported", detail="torch sees no CUDA/ROCm device"
            )
            for g in gpus
        ]
    by_uuid: dict[str, int] = {}
    for i in range(torch.cuda.device_count()):
        uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
        if uuid is not None:
            by_uuid[str(uuid).removeprefix("GPU-")] = i
    devices: dict[int, Any] = {}
    skipped: list[BenchmarkSkip] = []
    for gpu in gpus:
        cuda_index = by_uuid.get(gpu.uuid.removeprefix("GPU-"))
        if cuda_index is None and not by_uuid and gpu.index < torch.cuda.device_count():
            cuda_index = gpu.index  # no UUIDs from torch: trust CUDA_DEVICE_ORDER=PCI_BUS_ID
        if cuda_index is None:
            skipped.append(
                BenchmarkSkip(device=gpu.uuid, reason="unsupported", detail="not visible to torch")
            )
        else:
            devices[gpu.index] = torch.device("cuda", cuda_index)
    return devices, skipped


def run(plan: BenchPlan) -> BenchOutput:
    import torch

    result = BenchOutput(torch_version=str(torch.__version__))
    if plan.mode == "cpu":
        if plan.cpu_threads:
            torch.set_num_threads(plan.cpu_threads)
        part = matmul(torch, plan, torch.device("cpu"), None)
        result.matmul, result.skipped = part.matmul, part.skipped
        result.copy.append(host_memory(torch, plan))
        return result
    devices, result.skipped = _cuda_devices(torch, plan.gpus)
    gpus = {g.index: g for g in plan.gpus}
    for index, device in devices.items():
        torch.cuda.set_device(device)
        part = matmul(torch, plan, device, gpus[index])
        result.matmul += part.matmul
        result.skipped += part.skipped
        try:
            result.copy += host_device(torch, plan, device, gpus[index])
        except Exception as exc:
            result.skipped.append(
                BenchmarkSkip(
                    device=gpus[index].uuid,
                    reason="failed",
                    detail=f"host-device copy: {exc}"[:500],
                )
            )
        torch.cuda.empty_cache()
    for pair in plan.pairs:
        if pair.src in devices and pair.dst in devices:
            try:
                result.copy.append(device_device(torch, plan, devices, gpus, pair))
            except Exception as exc:
                result.skipped.append(
                    BenchmarkSkip(
                        device=gpus[pair.src].uuid,
                        reason="failed",
                        detail=f"copy to GPU {pair.dst}: {exc}"[:500],
                    )
                )
    return result


def main() -> None:
    plan = msgspec.json.decode(sys.stdin.buffer.read(), type=BenchPlan)
    sys.stdout.buffer.write(msgspec.json.encode(run(plan)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
