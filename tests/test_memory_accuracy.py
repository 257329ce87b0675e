"""The estimator against real PyTorch steps on this CPU (the fast subset of the grid).

Each case builds a small transformers model from a config, takes real steps with
real tensors, and reads the peak of allocated bytes from the profiler's memory
events (bench/accuracy/measure.py). The full grid is `python -m bench.accuracy.run`;
its committed results are checked against the targets here too.
"""

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.torch]

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from bench.accuracy.cases import FAST, GRID, Case  # noqa: E402
from bench.accuracy.run import request_for, run_case  # noqa: E402

from gpuplan.core.catalog import builtin_catalog  # noqa: E402
from gpuplan.core.memory.estimate import estimate  # noqa: E402

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results" / "accuracy.json"
FSDP1_LIVE_SEQ = 128
"""The sequence an FSDP1 case steps at here: two processes each step the model, and on a
host without bf16 matmul in hardware (AVX2 only) the fast FSDP1 case's bf16 step took 86 s
at the grid's 256 tokens and 45 s at 128 (2026-12-07; -0.07% from the estimate at 128).
The grid's own figures, at 256, are checked from the committed results below."""


@pytest.mark.parametrize("case", FAST, ids=[c.name for c in FAST])
def test_fast_case_within_target(case: Case) -> None:
    torch.set_num_threads(1)
    if case.framework == "fsdp1":
        case = dataclasses.replace(case, seq=min(case.seq, FSDP1_LIVE_SEQ))
    measured = run_case(case)
    estimated = estimate(request_for(case), builtin_catalog())
    adapters = estimated.trainable_parameters if case.mode == "finetune_lora" else 0
    if not case.framework:  # an FSDP1 rank's parameters are the views into its shards
        assert estimated.parameters + adapters == measured.parameters
    error = (estimated.peak_bytes - measured.peak_bytes) / measured.peak_bytes
    # An FSDP1 rank's peak is a count of its shards, gathered units and flat gradients,
    # the allocator's own blocks aside: held to 2% (tests/test_fsdp1.py's bound).
    bound = 0.02 if case.framework == "fsdp1" else 0.05
    assert abs(error) <= bound, f"{case}: {error:+.2%}"


def test_committed_grid_meets_the_targets() -> None:
    results = json.loads(RESULTS.read_text())
    errors = [abs(row["error"]) for row in results["rows"]]
    assert len(errors) >= 30
    assert statistics.median(errors) <= 0.05
    assert max(errors) <= 0.10


DROPOUT = [c for c in GRID if c.lora_dropout > 0]


@pytest.mark.parametrize("case", DROPOUT, ids=[c.name for c in DROPOUT])
def test_lora_dropout_adds_what_a_real_peft_step_adds(case: Case) -> None:
    """The same PEFT step with and without ``lora_dropout``: what the estimate adds is
    what the step's peak adds (masks, dropped copies, layer 0's inputs without grad)."""
    torch.set_num_threads(1)
    catalog = builtin_catalog()
    case = dataclasses.replace(case, seq=64)  # the grid's sequence, shorter: a quicker step
    without = dataclasses.replace(case, lora_dropout=0.0)
    measured = run_case(case).peak_bytes - run_case(without).peak_bytes
    estimated = (
        estimate(request_for(case), catalog).peak_bytes
        - estimate(request_for(without), catalog).peak_bytes
    )
    assert measured > 0
    assert estimated == pytest.approx(measured, rel=0.02)
