"""What a pipeline schedule holds: GPipe every micro-batch, 1F1B the depth, interleaving
Megatron's penalty on top."""

from typing import Any

import msgspec

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate, in_flight
from gpuplan.core.memory.schema import EstimateRequest, Parallelism
from tests.helpers import request_body

CATALOG = builtin_catalog()


def _activations(**parallelism: Any) -> int:
    body = request_body(
        "llama-2-13b",
        mode="training",
        sequence_length=2048,
        batch_size=1,
        gradient_accumulation_steps=16,
        precision="bf16",
        parallelism={"tensor": 2, "pipeline": 4, **parallelism},
    )
    return estimate(msgspec.convert(body, EstimateRequest), CATALOG).breakdown.activations_bytes


def test_in_flight_micro_batches_by_schedule() -> None:
    assert in_flight(Parallelism(pipeline=4), 16) == 4
    assert in_flight(Parallelism(pipeline=4, pipeline_schedule="gpipe"), 16) == 16
    # Megatron: 1 + (p - 1) / (p v) = 1 + 3/8 of 4 micro-batches: 11 chunks of half a
    # stage (6 warm-up, 4 more for the second chunk, one forward), not rounded up.
    interleaved = Parallelism(pipeline=4, virtual_stages=2, pipeline_schedule="interleaved_1f1b")
    assert in_flight(interleaved, 16) == 5.5
    # Qwen3-30B-A3B's Megatron-Bridge H100 layout: PP 2, VP 24 holds 49 one-layer chunks of
    # its 24-layer stage (rounding up held 3 stages).
    deep = Parallelism(pipeline=2, virtual_stages=24, pipeline_schedule="interleaved_1f1b")
    assert in_flight(deep, 32) == 49 / 24
    assert in_flight(deep, 1) == 1  # never more than every chunk of every micro-batch
    assert in_flight(Parallelism(pipeline=4), 2) == 2  # fewer micro-batches than stages
    assert in_flight(Parallelism(), 16) == 1


def test_the_schedule_moves_the_activations() -> None:
    one_f_one_b = _activations()
    gpipe = _activations(pipeline_schedule="gpipe")
    interleaved = _activations(virtual_stages=2, pipeline_schedule="interleaved_1f1b")
    assert gpipe > 3 * one_f_one_b
    assert one_f_one_b < interleaved < gpipe
