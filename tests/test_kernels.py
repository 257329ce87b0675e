"""The measured kernel tables (core/perf/data/kernels, written by bench/kernels/derive.py)
and the speed model's use of them: provenance, shape of the data, interpolation exact at
the measured points, the roofline past the grid, and which model each answer names."""

import json
import math
import statistics
from pathlib import Path

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.perf.kernels import (
    Grid,
    context_attention_seconds,
    gemm_seconds,
    generation_attention_seconds,
    kernel_tables,
)

POINTS = json.loads((Path(__file__).parent / "fixtures" / "kernels_points.json").read_text("utf-8"))
"""Source rows as the parquet files of aiconfigurator-core 0.12.0 hold them (latency in
ms), recorded by bench/kernels/derive.py beside the tables it wrote."""


def test_every_table_names_its_source_and_covers_catalog_gpus() -> None:
    tables = kernel_tables()
    catalog = {g.id for g in builtin_catalog().gpus}
    assert {"a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200-180gb"} <= set(tables)
    for gpu_id, t in tables.items():
        assert gpu_id in catalog
        p = t.provenance
        assert p["package"] == "aiconfigurator-core"
        assert p["version"] == "0.12.0"
        assert p["wheel"].endswith(".whl")
        assert p["license"] == "Apache-2.0"
        assert p["gemm"]["file"].startswith("aiconfigurator_core/systems/data/")
        assert p["gemm"]["engine"]
        assert p["gemm"]["engine_version"]
        assert p["gemm"]["collection_meta"]["runtime"]["version"] == p["gemm"]["engine_version"]
        assert (
            t.id
            == f"aiconfigurator-core 0.12.0: {t.gpu} {p['gemm']['engine']} {p['gemm']['engine_version']}"
        )
        assert "bf16" in t.gemm
        assert t.context_attention is not None
        assert t.generation_attention is not None


@pytest.mark.parametrize("gpu_id", sorted(kernel_tables()))
def test_gemm_latency_grows_with_size(gpu_id: str) -> None:
    """Monotone in every dimension (the derive script's envelope: a smaller GEMM can run
    a larger one's kernel), and the largest shape takes far longer than the smallest."""
    for grid in kernel_tables()[gpu_id].gemm.values():
        ms, ns, ks = grid.axes
        lat = grid.latency_us

        def at(
            i: int,
            j: int,
            k: int,
            lat: list[float] = lat,
            width: tuple[int, int] = (len(ns), len(ks)),
        ) -> float:
            return lat[(i * width[0] + j) * width[1] + k]

        for i in range(len(ms)):
            for j in range(len(ns)):
                for k in range(len(ks)):
                    here = at(i, j, k)
                    assert i == 0 or at(i - 1, j, k) <= here
                    assert j == 0 or at(i, j - 1, k) <= here
                    assert k == 0 or at(i, j, k - 1) <= here
        assert at(len(ms) - 1, len(ns) - 1, len(ks) - 1) > 1000 * at(0, 0, 0)
    # The envelope lowers cells of the flat latency floor (small shapes, where noise
    # decides between neighbours), never most of the table.
    env = kernel_tables()[gpu_id].provenance["gemm"]["enveloped_cells"]
    assert 0 <= env < sum(len(g.latency_us) for g in kernel_tables()[gpu_id].gemm.values()) / 4


@pytest.mark.parametrize("gpu_id", sorted(POINTS))
def test_interpolation_answers_the_measured_value_at_grid_points(gpu_id: str) -> None:
    points = POINTS[gpu_id]
    assert points
    for p in points:
        if p["kind"] == "gemm":
            got = gemm_seconds(gpu_id, p["dtype"], p["m"], p["n"], p["k"])
            want = p["latency_ms"] / 1e3
        else:
            # An attention cell is the geometric mean of the heads splits measured at it.
            want = math.exp(statistics.fmean(math.log(v) for v in p["latency_ms"])) / 1e3
            if p["kind"].startswith("context"):
                got = context_attention_seconds(gpu_id, 1.0, p["second"], p["units"], 128.0)
            else:
                got = generation_attention_seconds(gpu_id, 1.0, p["second"], p["units"], 128.0)
        assert got == pytest.approx(want, rel=6e-4), p


def test_between_points_in_log_space_and_roofline_past_the_grid() -> None:
    h100 = "h100-sxm5-80gb"
    grid = kernel_tables()[h100].gemm["bf16"]
    top_m = grid.axes[0][-1]
    edge = gemm_seconds(h100, "bf16", top_m, 4096, 4096)
    # Past the largest m: time in proportion to the work.
    assert gemm_seconds(h100, "bf16", 4 * top_m, 4096, 4096) == pytest.approx(4 * edge)
    # Below the smallest: the latency floor.
    assert gemm_seconds(h100, "bf16", 0.5, 4096, 4096) == gemm_seconds(h100, "bf16", 1, 4096, 4096)
    # Half-way in log space: the geometric mean of the neighbours.
    low, high = (
        gemm_seconds(h100, "bf16", 1024, 4096, 4096),
        gemm_seconds(h100, "bf16", 2048, 4096, 4096),
    )
    mid = gemm_seconds(h100, "bf16", math.sqrt(1024 * 2048), 4096, 4096)
    assert mid == pytest.approx(math.sqrt(low * high))
    # A causal prefill past the longest prompt grows with its square; head size in proportion.
    top = kernel_tables()[h100].context_attention
    assert top is not None
    longest = top.axes[1][-1]
    one = context_attention_seconds(h100, 1.0, longest, 32.0, 128.0)
    assert context_attention_seconds(h100, 1.0, 2 * longest, 32.0, 128.0) == pytest.approx(4 * one)
    assert context_attention_seconds(h100, 1.0, longest, 32.0, 64.0) == pytest.approx(one / 2)


def test_a_malformed_grid_is_refused() -> None:
    with pytest.raises(ValueError, match="latencies"):
        Grid([[1.0, 2.0], [3.0]], [1.0])
    with pytest.raises(ValueError, match="increasing"):
        Grid([[2.0, 1.0]], [1.0, 1.0])


TRAINING = {
    "model": {"name": "llama-3.1-8b"},
    "workload": {"mode": "training", "sequence_length": 4096, "precision": "bf16"},
    "training": {"training_tokens": 10**9, "global_batch_size": 64},
    "constraints": {"include": ["h100-sxm5-80gb", "h100-pcie-80gb"], "gpu_counts": [8]},
    "limit": 5,
}


def test_each_answer_names_the_kernel_model(client: TestClient[Litestar]) -> None:
    response = client.post("/v1/recommendations", json=TRAINING)
    assert response.status_code == 200, response.text
    by_gpu = {r["gpu"]: r for r in response.json()["recommendations"]}
    sxm, pcie = by_gpu["h100-sxm5-80gb"], by_gpu["h100-pcie-80gb"]
    assert sxm["kernel_source"] == "measured"
    assert sxm["kernel_table"] == "aiconfigurator-core 0.12.0: h100_sxm trtllm 1.3.0rc20"
    # No table covers the PCIe card: the roofline and the Hopper efficiencies time it.
    assert pcie["kernel_source"] == "roofline"
    assert pcie["kernel_table"] is None
    serving = {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 2048},
        "inference": {"requests_per_second": 2, "prompt_tokens": 1024, "output_tokens": 256},
        "constraints": {"include": ["a100-sxm4-80gb", "a100-sxm4-40gb"]},
        "limit": 5,
    }
    response = client.post("/v1/recommendations", json=serving)
    assert response.status_code == 200, response.text
    sources = {r["gpu"]: r["kernel_source"] for r in response.json()["recommendations"]}
    assert sources == {"a100-sxm4-80gb": "measured", "a100-sxm4-40gb": "roofline"}


def test_a_requested_mfu_keeps_the_roofline(client: TestClient[Litestar]) -> None:
    body = {**TRAINING, "efficiency": {"mfu": 0.4}}
    response = client.post("/v1/recommendations", json=body)
    assert response.status_code == 200, response.text
    assert {r["kernel_source"] for r in response.json()["recommendations"]} == {"roofline"}
