"""The memory verdict on the published training runs' own layouts (every one of them ran):
``bench/published/fits.py`` and the figures it committed."""

import json
from pathlib import Path
from typing import Any

import pytest
from bench.published import fits
from bench.published.runs import load

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "published_fits.json"


def _run(run_id: str) -> dict[str, Any]:
    return next(r for r in load() if r["id"] == run_id)


def test_a_row_compares_the_verdicts_bytes_and_the_centres() -> None:
    row = fits.row(_run("mbridge2511-qwen3-30b-a3b-h100x16-fp8cs"))
    assert row["fits"] == (row["required_over_usable"] <= 1)
    assert row["device_gib"] < row["required_gib"]  # the centre below its 95% bound
    assert row["device_over_usable"] < 1  # it ran on an 80 GB H100


@pytest.mark.slow
def test_the_committed_counts_are_what_the_estimate_says_now() -> None:
    """The committed figures (quoted in docs/benchmarks.md) drift with the estimate: rerun
    ``python -m bench published_fits --update`` after a memory change."""
    committed = json.loads(RESULTS.read_text())["summary"]
    now = fits.evaluate()["summary"]
    assert (now["runs"], now["refused"], now["refused_at_centre"]) == (
        committed["runs"],
        committed["refused"],
        committed["refused_at_centre"],
    )
