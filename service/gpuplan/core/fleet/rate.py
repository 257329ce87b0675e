"""Measured against promised: a benchmark result as a fraction of the catalog's peak.

The agent measures; the catalog holds the datasheet. A ratio far below 1 flags a
throttled or misconfigured GPU (or an old cuBLAS); a ratio above 1 flags a catalog
error. The lookup is by the name the driver reports, which the catalog indexes.
"""

import statistics
from collections.abc import Iterable

import msgspec

from gpuplan.core.catalog import Catalog, GpuSpec, UnknownGpu
from gpuplan.core.fleet.model import (
    BenchmarkReport,
    CopyResult,
    GpuTelemetry,
    MatmulDtype,
    MatmulResult,
    MeasuredFlops,
    NodeSnapshot,
)


def find_spec(catalog: Catalog, model_name: str) -> GpuSpec | None:
    """The catalog SKU a driver-reported model name resolves to, if any."""
    try:
        return catalog.get(model_name)
    except UnknownGpu:
        return None


def _ratio(value: float, peak: float | None) -> float | None:
    return None if peak is None or peak <= 0 else value / peak


def _rate_matmul(result: MatmulResult, spec: GpuSpec | None) -> MatmulResult:
    peak = None if spec is None else spec.peak_flops.get(result.dtype)
    return msgspec.structs.replace(
        result, peak_flops=peak, ratio_to_peak=_ratio(result.flops_per_second, peak)
    )


def _link_peak(result: CopyResult, spec: GpuSpec | None) -> float | None:
    """The per-direction rate of the link a copy used, from the catalog."""
    if spec is None:
        return None
    if result.path == "nvlink" and spec.interconnect.gpu_link is not None:
        return float(spec.interconnect.gpu_link.per_direction_bytes_per_s)
    if result.path == "pcie" and spec.interconnect.pcie is not None:
        return float(spec.interconnect.pcie.per_direction_bytes_per_s)
    return None


def _rate_copy(result: CopyResult, spec: GpuSpec | None) -> CopyResult:
    peak = _link_peak(result, spec)
    return msgspec.structs.replace(
        result, peak_bytes_per_second=peak, ratio_to_peak=_ratio(result.bytes_per_second, peak)
    )


def rate_benchmark(report: BenchmarkReport, catalog: Catalog) -> BenchmarkReport:
    """``report`` with each result's catalog peak and its ratio to it filled in."""
    return msgspec.structs.replace(
        report,
        matmul=[_rate_matmul(r, find_spec(catalog, r.model_name)) for r in report.matmul],
        copy=[_rate_copy(r, find_spec(catalog, r.model_name)) for r in report.copy],
    )


def _resolve(gpu: GpuTelemetry, catalog: Catalog) -> GpuTelemetry:
    spec = find_spec(catalog, gpu.model_name)
    return msgspec.structs.replace(gpu, catalog_id=None if spec is None else spec.id)


def enrich(snapshot: NodeSnapshot, catalog: Catalog) -> NodeSnapshot:
    """Resolve each GPU to its catalog SKU and count the unsupported fields.

    The agent's one core call per sweep; the result is what it publishes. The
    benchmark report is rated once, when it is made (:func:`rate_benchmark`).
    """
    return msgspec.structs.replace(
        snapshot,
        gpus=[_resolve(g, catalog) for g in snapshot.gpus],
        unsupported_field_count=sum(len(g.unsupported_fields) for g in snapshot.gpus),
    )


def measured_flops(nodes: Iterable[NodeSnapshot], catalog: Catalog) -> list[MeasuredFlops]:
    """Measured matmul FLOP/s per catalog GPU model and dtype across live nodes.

    What the recommendation engine uses instead of the datasheet for models present
    in the fleet. One value per GPU (its median over timed calls); the figure per
    model is the median over GPUs, so one throttled GPU does not set the fleet's
    expectation, while ``min`` shows it. CPU results and GPUs the catalog does not
    know are left out. Sorted by catalog id, then dtype, so the output is stable.
    """
    samples: dict[tuple[str, MatmulDtype], list[float]] = {}
    specs: dict[str, GpuSpec] = {}
    for node in nodes:
        if node.benchmark is None:
            continue
        for result in node.benchmark.matmul:
            if result.device == "cpu":
                continue
            spec = find_spec(catalog, result.model_name)
            if spec is None:
                continue
            specs[spec.id] = spec
            samples.setdefault((spec.id, result.dtype), []).append(result.flops_per_second)
    out: list[MeasuredFlops] = []
    for (catalog_id, dtype), values in sorted(samples.items()):
        median = statistics.median(values)
        peak = specs[catalog_id].peak_flops.get(dtype)
        out.append(
            MeasuredFlops(
                catalog_id=catalog_id,
                dtype=dtype,
                devices=len(values),
                median_flops_per_second=median,
                min_flops_per_second=min(values),
                max_flops_per_second=max(values),
                peak_flops=peak,
                ratio_to_peak=_ratio(median, peak),
            )
        )
    return out
