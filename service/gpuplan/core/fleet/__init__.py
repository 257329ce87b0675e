"""The live fleet as data, and the pure functions over it.

The agent fills a :class:`NodeSnapshot`; :func:`enrich` resolves its GPUs against the
catalog and rates its benchmarks; :func:`measured_flops` turns live nodes into the
measured FLOP/s per catalog model that planning uses in place of the datasheet.
"""

from gpuplan.core.fleet.model import (
    BenchmarkReport,
    BenchmarkSkip,
    CopyKind,
    CopyPath,
    CopyResult,
    CpuInfo,
    GpuTelemetry,
    MatmulDtype,
    MatmulResult,
    MeasuredFlops,
    MigInstance,
    NodeList,
    NodeSnapshot,
)
from gpuplan.core.fleet.rate import enrich, find_spec, measured_flops, rate_benchmark

__all__ = [
    "BenchmarkReport",
    "BenchmarkSkip",
    "CopyKind",
    "CopyPath",
    "CopyResult",
    "CpuInfo",
    "GpuTelemetry",
    "MatmulDtype",
    "MatmulResult",
    "MeasuredFlops",
    "MigInstance",
    "NodeList",
    "NodeSnapshot",
    "enrich",
    "find_spec",
    "measured_flops",
    "rate_benchmark",
]
