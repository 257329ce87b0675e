"""The fleet core: catalog resolution, rating against peaks, measured FLOP/s."""

import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.fleet import (
    BenchmarkReport,
    CopyResult,
    CpuInfo,
    MatmulResult,
    NodeSnapshot,
    measured_flops,
    rate_benchmark,
)
from tests.agent_fixtures import snapshot

CATALOG = builtin_catalog()


def test_enrich_resolves_gpus_by_their_nvml_name() -> None:
    snap = snapshot()
    assert [g.catalog_id for g in snap.gpus] == ["h200-sxm-141gb"] * 3
    assert snap.unsupported_field_count == sum(len(g.unsupported_fields) for g in snap.gpus)
    assert snap.unsupported_field_count > 0


def test_rating_uses_the_dense_peak_of_model_and_dtype() -> None:
    report = snapshot().benchmark
    assert report is not None
    bf16 = next(r for r in report.matmul if r.dtype == "bf16")
    assert bf16.peak_flops == 989.5e12
    assert bf16.ratio_to_peak == pytest.approx(760 / 989.5)
    fp8 = next(r for r in report.matmul if r.dtype == "fp8")
    assert fp8.peak_flops == 1979e12
    h2d, d2d = report.copy
    pcie = CATALOG.get("h200-sxm-141gb").interconnect.pcie
    assert pcie is not None
    assert h2d.peak_bytes_per_second == pcie.per_direction_bytes_per_s
    link = CATALOG.get("h200-sxm-141gb").interconnect.gpu_link
    assert link is not None
    assert d2d.peak_bytes_per_second == link.per_direction_bytes_per_s
    assert d2d.ratio_to_peak == pytest.approx(360e9 / link.per_direction_bytes_per_s)


def test_unknown_models_and_cpus_are_not_rated() -> None:
    report = BenchmarkReport(
        ts=1.0,
        status="ok",
        duration_seconds=1.0,
        matmul=[
            MatmulResult(device="cpu", model_name="AMD EPYC 9654", dtype="fp32", m=256, n=256,
                         k=256, iterations=50, flops_per_second=1e11, max_flops_per_second=1e11),
        ],
        copy=[CopyResult(device="cpu", model_name="AMD EPYC 9654", kind="host_memcpy",
                         path="host_memory", size_bytes=2**25, bytes_per_second=1e10)],
    )  # fmt: skip
    rated = rate_benchmark(report, CATALOG)
    assert rated.matmul[0].peak_flops is None
    assert rated.matmul[0].ratio_to_peak is None
    assert rated.copy[0].ratio_to_peak is None


def _node(name: str, rates: dict[str, float], model: str = "NVIDIA H200") -> NodeSnapshot:
    return NodeSnapshot(
        node=name, ts=1.0, agent_version="t", vendor="nvidia", gpu_count=len(rates),
        interval_seconds=10, ttl_seconds=30, cpu=CpuInfo(model_name="x", logical_cpus=1),
        benchmark=BenchmarkReport(ts=1.0, status="ok", duration_seconds=1.0, matmul=[
            MatmulResult(device=uuid, gpu_index=0, model_name=model, dtype="bf16", m=8192,
                         n=8192, k=8192, iterations=50, flops_per_second=rate,
                         max_flops_per_second=rate)
            for uuid, rate in rates.items()
        ]),
    )  # fmt: skip


def test_measured_flops_is_the_median_per_model_and_dtype() -> None:
    nodes = [
        _node("a", {"GPU-1": 780e12, "GPU-2": 770e12}),
        _node("b", {"GPU-3": 500e12}),  # one throttled GPU
        _node("c", {"GPU-4": 250e12}, model="NVIDIA A100-SXM4-80GB"),
        _node("d", {"GPU-5": 1e12}, model="Some Unknown GPU"),
        _node("e", {"cpu": 1e11}, model="AMD EPYC"),
    ]
    out = measured_flops(nodes, CATALOG)
    assert [(m.catalog_id, m.dtype, m.devices) for m in out] == [
        ("a100-sxm4-80gb", "bf16", 1),
        ("h200-sxm-141gb", "bf16", 3),
    ]
    h200 = out[1]
    assert h200.median_flops_per_second == 770e12
    assert (h200.min_flops_per_second, h200.max_flops_per_second) == (500e12, 780e12)
    assert h200.ratio_to_peak == pytest.approx(770 / 989.5)
    # Deterministic: the same nodes in another order give byte-identical output.
    assert msgspec.json.encode(measured_flops(nodes[::-1], CATALOG)) == msgspec.json.encode(out)


def test_measured_flops_of_an_empty_fleet() -> None:
    assert measured_flops([], CATALOG) == []
    assert measured_flops([snapshot(fixture="a100-pcie-mig")], CATALOG) != []
