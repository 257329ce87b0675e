"""The estimate against steps measured on a real GPU (an H200; bench/gpu_session.sh).

The figures are the committed results of the prepared GPU run, read as data: the real
``max_memory_allocated`` and ``max_memory_reserved`` of each step, run in a fresh
process. The estimate is asked for the same request on the same GPU.
"""

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from bench.trace.trace_cuda_check import LLAMA_MEDIUM

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest, EstimateResponse

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def _rows(name: str, key: str) -> dict[str, dict[str, Any]]:
    data = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    assert data["gpu"] == "NVIDIA H200"
    return {row[key]: row for row in data["rows"]}


def _medium(precision: str, **workload: Any) -> EstimateResponse:
    body = {
        "model": {"hf_config": dict(LLAMA_MEDIUM)},
        "workload": {"mode": "training", "batch_size": 4, "sequence_length": 1024,
                     "precision": precision, **workload},
        "gpu": "h200-sxm-141gb",
    }  # fmt: skip
    return estimate(msgspec.convert(body, EstimateRequest), builtin_catalog())


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_grouped_query_sdpa_in_fp32_keeps_the_weights_the_gpu_kept(precision: str) -> None:
    """16 query heads on 4 key/value heads: in fp32 PyTorch's math kernel kept the s x s
    weights (2.3 GB); in bf16 flash attention kept none."""
    measured = _rows("trace_cuda.json", "target")[f"llama_medium_{precision}"]
    estimated = _medium(precision)
    error = estimated.peak_bytes / measured["max_memory_allocated"] - 1
    assert abs(error) < 0.01, error
    assert abs(estimated.reserved_bytes / measured["memory_reserved"] - 1) < 0.04


def test_the_weights_are_kept_only_where_no_fused_kernel_takes_the_call() -> None:
    fp32 = _medium("fp32")
    assert any("math kernel" in a for a in fp32.assumptions)
    assert _medium("fp32", attention="eager").peak_bytes == fp32.peak_bytes
    for other in (
        _medium("bf16"),  # flash attention
        _medium("amp_bf16"),  # autocast: the attention runs in bf16
        _medium("fp32", mode="inference"),  # not measured: left as the fused kernels
    ):
        assert not any("math kernel" in a for a in other.assumptions)
    cpu = estimate(
        msgspec.convert(
            {"model": {"hf_config": dict(LLAMA_MEDIUM)},
             "workload": {"mode": "training", "batch_size": 4, "sequence_length": 1024,
                          "precision": "fp32"}, "runtime": "cpu"},
            EstimateRequest,
        ),
        builtin_catalog(),
    )  # fmt: skip
    assert not any("math kernel" in a for a in cpu.assumptions)  # CPU flash takes it
    heads = {**LLAMA_MEDIUM, "num_key_value_heads": LLAMA_MEDIUM["num_attention_heads"]}
    mha = estimate(
        msgspec.convert(
            {"model": {"hf_config": heads},
             "workload": {"mode": "training", "batch_size": 4, "sequence_length": 1024,
                          "precision": "fp32"}, "gpu": "h200-sxm-141gb"},
            EstimateRequest,
        ),
        builtin_catalog(),
    )  # fmt: skip
    assert not any("math kernel" in a for a in mha.assumptions)


def test_peak_bytes_is_max_memory_allocated_on_the_h200_steps() -> None:
    """17 steps of bench/accuracy/reserve.toml on an H200: peak_bytes (tensors and the
    two 32 MiB cuBLAS workspaces) against the real max_memory_allocated."""
    from bench.accuracy.reserve import CASES, SHAPES, request_body

    measured = _rows("reserve_cuda.json", "case")
    errors = []
    for case in CASES:
        body = {**request_body(case, SHAPES), "gpu": "h200-sxm-141gb", "cuda_version": "13.0"}
        estimated = estimate(msgspec.convert(body, EstimateRequest), builtin_catalog())
        real = measured[case.name]["max_memory_allocated_last_step"]
        errors.append(estimated.peak_bytes / real - 1)
    assert len(errors) == 17
    assert max(abs(e) for e in errors) < 0.01, errors
    assert sorted(abs(e) for e in errors)[8] < 0.001  # the median
