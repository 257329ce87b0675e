"""The estimate's three measures against a real NVIDIA GPU, on reserve.toml's cases.

    PYTHONPATH=service:. python -m bench.accuracy.reserve_cuda [--budget-seconds 300]

Each case of bench/accuracy/reserve.toml (Llama-3.2-3B and Llama-2-7B shapes, 4 to 16
layers, training and LoRA, with and without checkpointing) runs for real, in a fresh
process, through the step driver the tracer and the CPU grid use (two steps, AdamW with
torch's CUDA default, foreach; the loop drops the outputs once it has the loss), and
reports the measures the estimate names:

- ``max_memory_allocated`` over the last step (reset at its forward) for ``peak_bytes``,
  and over both steps (the first builds the optimizer's states);
- ``max_memory_reserved`` at the end for ``reserved_bytes``;
- the process's memory in NVML's process list (what ``nvidia-smi`` shows) and the
  device's used memory above what it was before the process touched CUDA, for
  ``device_bytes``.

The estimate is asked for the same request on the catalog's H200 (or ``--gpu``) with
the CUDA version torch was built with. Writes bench/results/reserve_cuda.json. Needs a
CUDA torch and nvidia-ml-py; refuses to run without a GPU.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import torch

from bench.accuracy.reserve import CASES, SHAPES, _build, request_body
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest
from gpuplan.core.trace.log import Phase
from gpuplan.trace.run import unpack
from gpuplan.trace.step import make_optimizer, run_steps

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _nvml_used(pid: int) -> tuple[int | None, int]:
    """(this process's bytes in NVML's process list, the device's used bytes)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        used = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        mine = None
        for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if process.pid == pid and process.usedGpuMemory is not None:
                mine = int(process.usedGpuMemory)
        return mine, used
    finally:
        pynvml.nvmlShutdown()


def measure(name: str) -> dict[str, Any]:
    """One case for real on this process's GPU (call in a fresh process)."""
    import pynvml

    case = next(c for c in CASES if c.name == name)
    body = request_body(case, SHAPES)
    request = msgspec.convert(body, EstimateRequest)
    pynvml.nvmlInit()  # before CUDA: the device's use without this process
    before = int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used)
    pynvml.nvmlShutdown()
    build = _build(body["model"]["hf_config"], request.workload)
    first_steps: list[int] = []

    @contextmanager
    def marks(phase: Phase, measured: bool) -> Iterator[None]:
        if measured and phase == Phase.FORWARD:
            torch.cuda.synchronize()
            first_steps.append(torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
        yield

    torch.manual_seed(0)
    with torch.device("cuda"):
        model, inputs, loss_fn = unpack(build())
    opt = make_optimizer(request.workload.optimizer, model, foreach=True)
    started = time.perf_counter()
    run_steps(model, inputs, loss_fn=loss_fn, optimizer=opt, steps=2, marks=marks)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    last_step = torch.cuda.max_memory_allocated()
    process, used = _nvml_used(os.getpid())
    return {
        "max_memory_allocated_last_step": last_step,
        "max_memory_allocated_all_steps": max([last_step, *first_steps]),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "nvml_process_bytes": process,
        "nvml_device_used_above_start_bytes": used - before,
        "steps_seconds": round(seconds, 2),
    }


def _estimated(name: str, gpu: str) -> dict[str, Any]:
    case = next(c for c in CASES if c.name == name)
    body = request_body(case, SHAPES)
    cuda = ".".join((torch.version.cuda or "12.4").split(".")[:2])
    request = msgspec.convert({**body, "gpu": gpu, "cuda_version": cuda}, EstimateRequest)
    answer = estimate(request, builtin_catalog())
    return {
        "request": {**body, "gpu": gpu, "cuda_version": cuda},
        "estimated_peak_bytes": answer.peak_bytes,
        "estimated_reserved_bytes": answer.reserved_bytes,
        "estimated_device_bytes": answer.device_bytes,
    }


def _errors(row: dict[str, Any]) -> dict[str, float | None]:
    def error(estimated: str, measured: str) -> float | None:
        value = row.get(measured)
        return None if not value else round(row[estimated] / value - 1, 4)

    return {
        "peak_error": error("estimated_peak_bytes", "max_memory_allocated_last_step"),
        "reserved_error": error("estimated_reserved_bytes", "max_memory_reserved"),
        "device_error": error("estimated_device_bytes", "nvml_process_bytes"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--gpu", default="h200-sxm-141gb")
    parser.add_argument("--budget-seconds", type=float, default=300)
    parser.add_argument(
        "--only", action="append", help="cases whose name contains this (repeatable)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "reserve_cuda.json")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this check needs an NVIDIA GPU")
    deadline = time.monotonic() + args.budget_seconds
    rows: list[dict[str, Any]] = []
    for case in CASES:
        if args.only and not any(part in case.name for part in args.only):
            continue
        if time.monotonic() > deadline:
            rows.append({"case": case.name, "error": "not run: past --budget-seconds"})
            continue
        row: dict[str, Any] = {"case": case.name, **_estimated(case.name, args.gpu)}
        try:
            out = subprocess.run(
                [sys.executable, "-m", "bench.accuracy.reserve_cuda", "--one", case.name],
                capture_output=True, text=True, check=False,
                timeout=max(10.0, deadline - time.monotonic() + 60),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            row["error"] = "timed out"
        else:
            if out.returncode == 0:
                row.update(json.loads(out.stdout.strip().splitlines()[-1]))
                row.update(_errors(row))
            else:
                row["error"] = out.stderr[-2000:]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "request"}), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "gpu": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "machine": platform.machine(),
                "date": time.strftime("%Y-%m-%d", time.gmtime()),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
