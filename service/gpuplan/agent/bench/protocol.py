"""What the agent asks of the benchmark subprocess, and what it answers.

The two sides talk JSON over stdin/stdout with these Structs, so the child can be
killed at any moment without leaving the parent half a result.
"""

from typing import Annotated, Literal

import msgspec

from gpuplan.core.fleet import BenchmarkSkip, CopyPath, CopyResult, MatmulDtype, MatmulResult
from gpuplan.core.record import Record

Size = Annotated[int, msgspec.Meta(ge=1)]

GPU_DTYPES: tuple[MatmulDtype, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
CPU_DTYPES: tuple[MatmulDtype, ...] = ("fp64", "fp32", "bf16", "fp16")


class BenchGpu(Record, kw_only=True):
    """An idle GPU to measure, as NVML named it. The child finds its CUDA device by
    ``uuid`` (torch's order need not be NVML's) and falls back to ``index`` only where
    torch reports no UUIDs."""

    index: int
    """NVML's index: the key pairs and results use."""

    uuid: str
    model_name: str


class BenchPair(Record, kw_only=True):
    """A device-to-device copy to time, between the GPUs of NVML index ``src`` and
    ``dst``."""

    src: int
    dst: int
    path: CopyPath
    """What NVML says joins them (``nvlink``), else ``unknown`` (the child decides)."""


class BenchPlan(Record, kw_only=True):
    """One benchmark run: the idle GPUs and pairs (or, with none, the CPU) and the sizes
    and repetitions to time them with."""

    mode: Literal["cpu", "gpu"]
    cpu_model_name: str = "cpu"
    gpus: list[BenchGpu] = []
    pairs: list[BenchPair] = []
    dtypes: list[MatmulDtype]
    matmul_size: Size
    """m = n = k of the timed matmul."""

    warmup: Annotated[int, msgspec.Meta(ge=0)]
    iterations: Annotated[int, msgspec.Meta(ge=1)]
    copy_bytes: Size
    copy_iterations: Annotated[int, msgspec.Meta(ge=1)]
    cpu_threads: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Threads of CPU-mode benchmarks; 0 leaves torch's default (every CPU it may use)."""


class BenchOutput(Record, kw_only=True):
    """The child's answer: what it measured, and each device or dtype it could not."""

    torch_version: str
    matmul: list[MatmulResult] = []
    copy: list[CopyResult] = []
    skipped: list[BenchmarkSkip] = []
