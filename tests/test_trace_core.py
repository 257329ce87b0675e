"""The pure half of tracing: the caching-allocator replay and the log analysis."""

import math
from collections.abc import Sequence

import msgspec
import pytest

from gpuplan.core.trace import TraceLog, analyze, simulate
from gpuplan.core.trace.allocator import (
    LARGE_BUFFER,
    SMALL_BUFFER,
    CachingAllocator,
    ExpandableAllocator,
    round_size,
    segment_size,
)
from gpuplan.core.trace.log import Category, Event, Op, Phase

MiB = 1 << 20


def test_rounding_and_segment_sizes() -> None:
    assert round_size(1) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024
    assert segment_size(512) == SMALL_BUFFER
    assert segment_size(MiB) == SMALL_BUFFER  # <= 1 MiB: small pool
    assert segment_size(MiB + 512) == LARGE_BUFFER  # 1-10 MiB: a 20 MiB segment
    assert segment_size(10 * MiB) == 10 * MiB  # >= 10 MiB: rounded to 2 MiB
    assert segment_size(11 * MiB) == 12 * MiB


def test_small_requests_share_one_segment() -> None:
    stats = simulate([(i, 1000) for i in range(100)])  # 100 x 1024 B < 2 MiB
    assert stats.segments == 1
    assert stats.peak_allocated_bytes == 100 * 1024
    assert stats.peak_reserved_bytes == SMALL_BUFFER


def test_large_pool_splits_only_remainders_over_1_mib() -> None:
    allocator = CachingAllocator()
    block = allocator.malloc(19 * MiB + 512)  # a 20 MiB segment; 1 MiB - 512 left: no split
    assert block is not None
    assert block.size == 20 * MiB  # the unsplit remainder counts as allocated
    other = allocator.malloc(2 * MiB)  # 20 MiB segment split: 2 MiB + 18 MiB free
    assert other is not None
    assert other.size == 2 * MiB
    assert allocator.reserved == 40 * MiB


def test_freed_blocks_merge_and_are_reused() -> None:
    # Two 4 MiB blocks from one 20 MiB segment, freed, then one 12 MiB block fits the
    # merged 20 MiB block: no new segment.
    stats = simulate([(1, 4 * MiB), (2, 4 * MiB), (1, -1), (2, -1), (3, 12 * MiB)])
    assert stats.segments == 1
    assert stats.peak_reserved_bytes == LARGE_BUFFER


def test_fragmentation_grows_reserved() -> None:
    # Free every other 4 MiB block: 8 MiB free in 4 MiB holes cannot serve 8 MiB.
    requests = [(i, 4 * MiB) for i in range(5)] + [(1, -1), (3, -1), (9, 8 * MiB)]
    stats = simulate(requests)
    assert stats.segments == 2
    assert stats.peak_reserved_bytes == 2 * LARGE_BUFFER


def test_expandable_segment_maps_pages_at_its_end() -> None:
    allocator = ExpandableAllocator()
    first = allocator.malloc(30 * MiB)  # two 20 MiB pages; 10 MiB split off, free
    assert first is not None
    assert (first.size, allocator.reserved) == (30 * MiB, 40 * MiB)
    second = allocator.malloc(15 * MiB)  # the free 10 MiB at the end grows by one page
    assert second is not None
    assert (second.offset, allocator.reserved) == (30 * MiB, 60 * MiB)
    assert allocator.segments == 1


def test_expandable_segment_splits_any_remainder_of_512_bytes() -> None:
    allocator = ExpandableAllocator()
    block = allocator.malloc(19 * MiB + 512)  # without expandable segments: 20 MiB taken
    assert block is not None
    assert block.size == 19 * MiB + 512
    assert allocator.allocated == 19 * MiB + 512


def test_expandable_segment_passes_over_its_growable_end() -> None:
    """The free block at the mapped end is taken only when no other block fits."""
    allocator = ExpandableAllocator()
    first, _, _ = [allocator.malloc(n * MiB) for n in (18, 2, 12)]  # at 0, 18 and 20 MiB
    assert first is not None
    assert allocator.reserved == 40 * MiB  # the end: 8 MiB free at 32 MiB
    allocator.release(first)  # an 18 MiB hole at 0
    offsets = []
    for n in (6, 8, 10):
        block = allocator.malloc(n * MiB)
        assert block is not None
        offsets.append(block.offset // MiB)
    # 6 and 8 MiB fit the 8 MiB end best but go to the hole; 10 fits only the end, grown
    assert offsets == [0, 6, 32]
    assert allocator.reserved == 60 * MiB


def test_expandable_segments_reuse_what_sizes_would_strand() -> None:
    """A freed 30 MiB tensor, then a 50 MiB one: the default allocator keeps the first
    segment and opens a second; an expandable segment grows the freed block."""
    requests = [(1, 30 * MiB), (1, -1), (2, 50 * MiB)]
    assert simulate(requests).peak_reserved_bytes == 30 * MiB + 50 * MiB
    expandable = simulate(requests, expandable_segments=True)
    assert (expandable.segments, expandable.peak_reserved_bytes) == (1, 60 * MiB)
    small = simulate([(i, 1000) for i in range(100)], expandable_segments=True)
    assert (small.segments, small.peak_reserved_bytes) == (1, SMALL_BUFFER)


def _log(events: Sequence[Event]) -> TraceLog:
    return TraceLog(
        events=list(events), owners=["(none)", "layer"], parameters=10, trainable_parameters=10
    )


A, F, R, P = Op.ALLOC, Op.FREE, Op.RETAG, Op.PHASE


def test_peak_is_live_bytes_of_the_last_step_only() -> None:
    events = [
        (A, 1, 400, Category.PARAMETERS, 1),
        (P, 0, 0, Phase.WARMUP, 0),
        (A, 2, 10_000, Category.ACTIVATIONS, 1),  # a warm-up spike: not reported
        (F, 2, 0, 0, 0),
        (A, 3, 800, Category.OPTIMIZER_STATE, 1),
        (P, 0, 0, Phase.FORWARD, 0),
        (A, 4, 300, Category.ACTIVATIONS, 1),
        (P, 0, 0, Phase.BACKWARD, 0),
        (A, 5, 400, Category.TEMPORARY, 0),
        (R, 5, 0, Category.GRADIENTS, 1),
        (F, 4, 0, 0, 0),
        (P, 0, 0, Phase.OPTIMIZER, 0),
        (A, 6, 200, Category.TEMPORARY, 0),
        (F, 6, 0, 0, 0),
        (F, 5, 0, 0, 0),
        (P, 0, 0, Phase.END, 0),
    ]
    result = analyze(_log(events), runtime="cpu", mode="training", steps=2)
    assert result.peak_bytes == 400 + 800 + 300 + 400
    assert result.peak_phase == "backward"
    assert result.breakdown.activations_bytes == 300
    assert result.breakdown.temporary_bytes == 400  # retagged after the peak
    assert result.phases.forward_bytes == 1500
    assert result.phases.optimizer_bytes == 400 + 800 + 400 + 200
    assert result.reserved_bytes == result.total_bytes == result.peak_bytes
    assert result.top_modules[0].module == "layer"


def test_cuda_runtime_rounds_caches_and_adds_context() -> None:
    events = [
        (A, 1, 1000, Category.PARAMETERS, 1),
        (P, 0, 0, Phase.FORWARD, 0),
        (A, 2, 3 * MiB, Category.ACTIVATIONS, 1),
        (P, 0, 0, Phase.END, 0),
    ]
    result = analyze(_log(events), runtime="cuda", mode="inference", steps=1)
    workspaces = 8_519_680  # one cuBLAS workspace (cuBLASLt shares it), one thread
    assert result.peak_bytes == 1024 + 3 * MiB + workspaces
    # 1024 B: a small segment; 3 MiB and the workspace: 20 MiB segments.
    assert result.reserved_bytes >= SMALL_BUFFER + LARGE_BUFFER
    # The context of a job under lazy module loading (core/memory/data/runtime.toml).
    assert result.device_bytes == result.total_bytes == result.reserved_bytes + 1_253_498_932
    assert result.required_bytes == math.ceil(result.device_bytes * 1.2)


def test_a_log_without_a_measured_step_is_refused() -> None:
    with pytest.raises(ValueError, match="no measured step"):
        analyze(_log([(A, 1, 10, 0, 0)]), runtime="cpu", mode="training", steps=1)


def test_train_is_the_deprecated_spelling_of_training() -> None:
    from gpuplan.core.trace.schema import TraceRequest

    config = {"model_type": "llama"}
    old = msgspec.convert(
        {"model": {"hf_config": config}, "workload": {"mode": "train"}}, TraceRequest
    )
    new = msgspec.convert(
        {"model": {"hf_config": config}, "workload": {"mode": "training"}}, TraceRequest
    )
    assert old.workload.mode == new.workload.mode == "training"
    assert msgspec.json.encode(old) == msgspec.json.encode(new)  # one cache key for both
