"""The caching-allocator replay against an H200's runs of varying-length batches.

bench.accuracy.varlen_cuda measured the runs (bench/results/varlen_cuda.json); the
replay traces the same steps at the same lengths on fake tensors. The allocator rules
come from PyTorch's source, not from these figures, so this is a check, not a fit.
"""

import json

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.torch]

pytest.importorskip("transformers")

from bench.accuracy.varlen_replay import MEASURED, replay  # noqa: E402


@pytest.mark.parametrize("kind", ["varying", "varying_expandable"])
def test_reserved_over_a_run_of_varying_lengths(kind: str) -> None:
    """Varying lengths strand cached segments (21.15 GB reserved for 14.18 GB
    allocated); expandable segments grow one range instead (14.97 GB)."""
    run = next(r for r in json.loads(MEASURED.read_text())["runs"] if r["kind"] == kind)
    got = replay(kind, [s["length"] for s in run["steps"]])
    assert abs(got["reserved_bytes"] / run["max_reserved"] - 1) < 0.01
    last = run["steps"][-1]["max_memory_allocated"]
    assert abs(got["last_step_peak_bytes"] / last - 1) < 0.01
