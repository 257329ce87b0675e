"""``reserved_bytes``: the estimator's replay of the caching allocator (core/memory/reserve.py).

The committed comparison with the tracer's op-by-op replay of real Hugging Face steps
(``python -m bench.accuracy.reserve``) must describe the code as it is: each case's
estimate is recomputed here (milliseconds; the traces take minutes and need torch).
"""

import json
import statistics
from pathlib import Path
from typing import Any

import msgspec

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.reserve import Pattern, allocator_gap
from gpuplan.core.memory.schema import EstimateRequest

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results" / "reserve_replay.json"
MiB = 1 << 20


def _pattern(**changes: Any) -> Pattern:
    base = Pattern(
        outer_weights=(100 * MiB, 4096, 100 * MiB), layer_weights=(32 * MiB,) * 4, layer_loads=(),
        layers=4, layer_grads=(32 * MiB,) * 4, attention_grads=2, outer_grads=(100 * MiB, 4096, 100 * MiB),
        states_per_grad=2, state_scale=1.0, optimizer_temporaries=True,
        attention_saved=(16 * MiB,) * 4, mlp_saved=(40 * MiB,) * 3, attention_backward=(16 * MiB,) * 2,
        mlp_backward=(40 * MiB,) * 2, checkpoint_input=0, head_saved=(16 * MiB,), logits=200 * MiB,
        upcast=400 * MiB, loss_saved=400 * MiB, loss_backward=(400 * MiB,) * 2, accumulation=1,
        inference=False, kv_per_layer=(), forward_transient=(),
    )  # fmt: skip
    return base._replace(**changes)


def test_the_gap_comes_from_the_loss_buffers_the_states_displace() -> None:
    """Step 1 creates the optimizer states in blocks its loss buffers freed; step 2's
    logits-sized requests then need segments of their own."""
    gap = allocator_gap(_pattern())
    assert gap >= 400 * MiB
    # Without optimizer states nothing displaces them: the second step reuses the first's.
    assert allocator_gap(_pattern(states_per_grad=0, optimizer_temporaries=False)) < gap


def test_the_committed_replay_comparison_is_current_and_close() -> None:
    data = json.loads(RESULTS.read_text(encoding="utf-8"))
    catalog = builtin_catalog()
    errors = []
    for row in data["rows"]:
        estimated = estimate(msgspec.convert(row["request"], EstimateRequest), catalog)
        assert estimated.reserved_bytes == row["estimated_reserved_bytes"], row["case"]
        errors.append(abs(row["error"]))
    assert len(errors) >= 15
    assert statistics.median(errors) <= 0.02
