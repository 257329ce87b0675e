"""The matmul peak a job runs at: which of a GPU's datasheet peaks applies to the
workload's precision, or the fleet's measured rate in its place.

A training step is timed in :mod:`gpuplan.core.perf.step`, a serving replica in
:mod:`gpuplan.core.perf.serve`.
"""

from collections.abc import Mapping
from typing import Literal

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.catalog.model import Precision as CatalogPrecision
from gpuplan.core.memory.schema import Precision as WorkloadPrecision
from gpuplan.core.record import Record

RateSource = Literal["catalog", "measured"]


class Rate(Record, kw_only=True):
    """The matmul peak of one GPU for the workload's precision."""

    precision: str
    """The catalog precision whose peak applies (``bf16``, ``fp8``, …)."""

    peak_flops: float
    """Datasheet dense peak, or the fleet's measured rate when ``source`` is ``measured``."""

    attention_peak_flops: float
    """The peak attention runs at: the matmul peak, or the 16-bit one in an fp8 job."""

    source: RateSource
    note: str | None = None


def _paths(precision: WorkloadPrecision) -> tuple[CatalogPrecision, ...]:
    """Catalog precisions that can run the workload's matmuls, best first."""
    paths: dict[str, tuple[CatalogPrecision, ...]] = {
        "fp32": ("fp32",),
        "fp16": ("fp16",),
        "amp_fp16": ("fp16",),
        "bf16": ("bf16", "fp32"),
        "amp_bf16": ("bf16", "fp32"),
        "fp8": ("fp8", "bf16", "fp16"),
    }
    return paths[precision]


def _sixteen_bit(gpu: GpuSpec, measured: Mapping[CatalogPrecision, float]) -> float:
    for key in ("bf16", "fp16", "fp32"):
        if key in gpu.peak_flops:
            return measured.get(key) or gpu.peak_flops[key]
    return 0.0


def achieved_rate(
    gpu: GpuSpec,
    precision: WorkloadPrecision,
    measured: Mapping[CatalogPrecision, float] | None = None,
) -> Rate | None:
    """The peak for ``precision`` on ``gpu``; None when the GPU has no usable path.

    fp32 uses the fp32 peak: PyTorch leaves TF32 matmuls off by default. bf16 on a
    part without bf16 (T4, V100) falls back to the fp32 rate (emulated); fp8 on a
    part without fp8 runs in 16 bits. A measured rate replaces the datasheet peak; the
    speed model's efficiencies still apply, since a model step is not one large GEMM.
    """
    measured = measured or {}
    paths = _paths(precision)
    for index, key in enumerate(paths):
        if key not in gpu.peak_flops:
            continue
        note = None
        if index:
            note = f"{gpu.id} has no {paths[0]} matmul path; timed at its {key} rate"
        peak = measured.get(key) or gpu.peak_flops[key]
        return Rate(
            precision=key,
            peak_flops=peak,
            attention_peak_flops=_sixteen_bit(gpu, measured) if key == "fp8" else peak,
            source="measured" if key in measured else "catalog",
            note=note,
        )
    return None
