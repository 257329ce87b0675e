"""From an allocation log to a :class:`TraceResult`.

The peak is found by replaying the log: the running sum of live bytes is exact
liveness, so the peak is the true one, not a sum of per-phase maxima. Only the last
step counts (the window opens at its first phase marker): earlier steps exist to
create optimizer state and warm caches, and a first step without optimizer state
is not the steady state a job lives in.
"""

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuplan.core.memory.overhead import framework_overhead, workspace_bytes
from gpuplan.core.memory.response import HEADROOM
from gpuplan.core.trace.allocator import CachingAllocator, ExpandableAllocator, _Block
from gpuplan.core.trace.log import Category, Event, Op, Phase, TraceLog
from gpuplan.core.trace.schema import (
    ModuleMemory,
    PhasePeaks,
    TraceBreakdown,
    TraceMode,
    TraceResult,
    TraceRuntime,
)

WORKSPACE_OWNER = "(cuBLAS workspace)"
_MEASURED = (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER, Phase.DECODE)

SizeOf = Callable[[int, int], int]


@dataclass
class _Peak:
    bytes: int = -1
    index: int = 0
    phase: Phase = Phase.FORWARD
    totals: list[int] = field(default_factory=lambda: [0] * len(Category))
    phases: dict[Phase, int] = field(default_factory=lambda: defaultdict(int))


@dataclass
class _Cuda:
    """The CUDA side of a replay: block sizes, allocator, overheads, notes."""

    events: list[Event]
    sizes: dict[int, int]
    allocator: CachingAllocator
    outside_allocator: int
    notes: list[str]


def _replay_allocator(
    events: list[Event], expandable_segments: bool
) -> tuple[dict[int, int], CachingAllocator]:
    """Bytes the CUDA caching allocator hands out for each storage of ``events``."""
    allocator = ExpandableAllocator() if expandable_segments else CachingAllocator()
    sizes: dict[int, int] = {}
    blocks: dict[int, _Block] = {}
    for op, storage, nbytes, _, _ in events:
        if op == Op.ALLOC:
            got = allocator.malloc(nbytes)
            sizes[storage] = 0 if got is None else got.size
            if got is not None:
                blocks[storage] = got
        elif op == Op.FREE:
            block = blocks.pop(storage, None)
            if block is not None:
                allocator.release(block)
    return sizes, allocator


def _cuda(
    log: TraceLog,
    mode: TraceMode,
    architecture: str | None,
    communicators: list[int],
    expandable_segments: bool,
) -> _Cuda:
    # One cuBLAS handle per (thread, stream): the forward runs on the caller's thread,
    # the backward on the autograd engine's device thread.
    threads = 2 if mode == "training" else 1
    overhead = framework_overhead("cuda", architecture, communicators, handles=threads)
    workspace = workspace_bytes(architecture)
    workspaces: list[Event] = [
        (Op.ALLOC, -1 - i, workspace, Category.OTHER, -1) for i in range(threads)
    ]
    events = workspaces + list(log.events)
    sizes, allocator = _replay_allocator(events, expandable_segments)
    segments = (
        "expandable segments, one per pool, mapped in 2 MiB (small) and 20 MiB (large) pages"
        if expandable_segments
        else "2 MiB small-pool and 20 MiB large-pool segments"
    )
    notes = [
        "runtime cuda: allocations replayed through a model of the CUDA caching allocator "
        f"(512-byte blocks; {segments}; best-fit splitting; no memory limit, so no cache "
        "flushes); checked against an H200's max_memory_reserved (docs/memory.md)",
        f"cuBLAS workspaces ({workspace} B, cuBLASLt sharing them) for {threads} thread(s) are "
        "allocated through the caching allocator (one handle per thread)",
        *overhead.notes[:1],
        "tensors were faked on the CPU: kernels with CUDA-specific workspaces "
        "(cuDNN, flash attention) are accounted as their CPU versions",
    ]
    return _Cuda(events, sizes, allocator, int(overhead.outside_allocator), notes)


def _find_peak(events: list[Event], size_of: SizeOf) -> _Peak:
    live: dict[int, tuple[int, int]] = {}
    totals = [0] * len(Category)
    alive = 0
    phase = Phase.BUILD
    in_window = False
    peak = _Peak()
    for index, (op, storage, nbytes, category, _) in enumerate(events):
        if op == Op.ALLOC:
            size = size_of(storage, nbytes)
            live[storage] = (size, category)
            totals[category] += size
            alive += size
        elif op == Op.FREE:
            found = live.pop(storage, None)
            if found is not None:
                totals[found[1]] -= found[0]
                alive -= found[0]
        elif op == Op.RETAG:
            found = live.get(storage)
            if found is not None:
                totals[found[1]] -= found[0]
                totals[category] += found[0]
                live[storage] = (found[0], category)
        else:
            phase = Phase(category)
            in_window = phase != Phase.END if in_window else phase in _MEASURED
        if in_window and phase in _MEASURED:
            peak.phases[phase] = max(peak.phases[phase], alive)
            if alive > peak.bytes:
                peak.bytes, peak.index, peak.phase = alive, index, phase
                peak.totals = list(totals)
    if peak.bytes < 0:
        raise ValueError("the log has no measured step")
    return peak


def _owners_at(events: list[Event], index: int, size_of: SizeOf) -> dict[int, int]:
    """Bytes per owner alive after event ``index``."""
    live: dict[int, tuple[int, int]] = {}
    for op, storage, nbytes, _, owner in events[: index + 1]:
        if op == Op.ALLOC:
            live[storage] = (size_of(storage, nbytes), owner)
        elif op == Op.FREE:
            live.pop(storage, None)
        elif op == Op.RETAG and storage in live:
            live[storage] = (live[storage][0], owner)
    owners: dict[int, int] = defaultdict(int)
    for size, owner in live.values():
        owners[owner] += size
    return owners


def analyze(
    log: TraceLog,
    *,
    runtime: TraceRuntime,
    mode: TraceMode,
    steps: int,
    seconds: float = 0.0,
    gpu_architecture: str | None = None,
    communicators: list[int] | None = None,
    expandable_segments: bool = False,
    top: int = 10,
) -> TraceResult:
    """Peak, breakdown, phase peaks and top modules of the last step in ``log``.

    ``expandable_segments`` replays the allocator as
    ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` runs it (runtime cuda)."""
    cuda = (
        _cuda(log, mode, gpu_architecture, communicators or [], expandable_segments)
        if runtime == "cuda"
        else None
    )
    if cuda is not None:
        sizes = cuda.sizes
        events = cuda.events

        def size_of(storage: int, nbytes: int) -> int:
            return sizes.get(storage, nbytes)

    else:
        events = list(log.events)

        def size_of(storage: int, nbytes: int) -> int:
            return nbytes

    peak = _find_peak(events, size_of)
    owners = _owners_at(events, peak.index, size_of)
    ranked = sorted(owners.items(), key=lambda item: (-item[1], item[0]))[:top]
    top_modules = [
        ModuleMemory(module=WORKSPACE_OWNER if owner < 0 else log.owners[owner], bytes=size)
        for owner, size in ranked
        if size > 0
    ]
    notes: list[str] = []
    reserved = peak.bytes
    outside = 0
    if cuda is not None:
        reserved = cuda.allocator.peak_reserved
        outside = cuda.outside_allocator
        notes = [
            *cuda.notes,
            f"allocator: {cuda.allocator.segments} segments; reserved - allocated at the "
            f"peak is caching and fragmentation ({(reserved - peak.bytes) / (1 << 20):.1f} MiB)",
        ]
    totals = peak.totals
    return TraceResult(
        parameters=log.parameters,
        trainable_parameters=log.trainable_parameters,
        peak_bytes=peak.bytes,
        reserved_bytes=reserved,
        device_bytes=reserved + outside,
        required_bytes=math.ceil((reserved + outside) * (1 + HEADROOM)),
        total_bytes=reserved + outside,
        peak_phase=peak.phase.name.lower(),
        breakdown=TraceBreakdown(
            parameters_bytes=totals[Category.PARAMETERS],
            gradients_bytes=totals[Category.GRADIENTS],
            optimizer_state_bytes=totals[Category.OPTIMIZER_STATE],
            activations_bytes=totals[Category.ACTIVATIONS],
            temporary_bytes=totals[Category.TEMPORARY],
            other_bytes=totals[Category.OTHER],
        ),
        phases=PhasePeaks(
            forward_bytes=peak.phases[Phase.FORWARD],
            backward_bytes=peak.phases[Phase.BACKWARD],
            optimizer_bytes=peak.phases[Phase.OPTIMIZER],
            decode_bytes=peak.phases[Phase.DECODE],
        ),
        top_modules=top_modules,
        runtime=runtime,
        mode=mode,
        steps=steps,
        device=log.device,
        seconds=seconds,
        notes=notes,
    )
