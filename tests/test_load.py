"""The short version of bench/service/load.py: a real `gpuplan serve` under concurrent mixed load.

A few seconds at concurrency 32 (the full run is 60 s at 64): every answer is the
expected one (200 for good requests, the right 4xx problem for bad ones), no transport
error, and the report carries the figures the long run publishes.
"""

from pathlib import Path

import pytest
from bench.service.load import parse, run

pytestmark = pytest.mark.slow


def test_short_load_run_has_zero_errors(tmp_path: Path) -> None:
    args = parse(["--concurrency", "32", "--seconds", "4", "--warmup", "1",
                  "--out", str(tmp_path / "load.json")])  # fmt: skip
    result = run(args)
    assert result["errors"] == 0, result["error_samples"]
    assert result["requests"] >= 100
    assert result["latency"]["p50_ms"] > 0
    assert result["latency"]["p99_ms"] >= result["latency"]["p50_ms"]
    assert {"estimate", "recommend", "bad-422", "bad-400", "unknown-404"} <= set(
        result["latency_by_kind"]
    )
    # A few seconds say little about leaks (the 60 s run checks < 10%); only gross growth fails.
    assert result["rss_growth_after_warmup"] < 0.5
