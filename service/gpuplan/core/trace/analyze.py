"""From an allocation log to a :class:`TraceResult`.

The peak is found by replaying the log: the running sum of live bytes is exact
liveness, so the peak is the true one, not a sum of per-phase maxima. Only the last
step counts (the window opens at its first phase marker): earlier steps exist to
create optimizer state and warm caches, and a first step without optimizer state
is not the steady state a job lives in.
"""

from collections import defaultdict

from gpuplan.core.memory.overhead import CUBLAS, framework_overhead
from gpuplan.core.trace.allocator import CachingAllocator, _Block
from gpuplan.core.trace.log import Category, Op, Phase, TraceLog
from gpuplan.core.trace.schema import (
    ModuleMemory,
    PhasePeaks,
    TraceBreakdown,
    TraceMode,
    TraceResult,
    TraceRuntime,
)

WORKSPACE_OWNER = "(cuBLAS workspace)"
_MEASURED = (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER)


def _block_sizes(log: TraceLog, workspaces: list[int]) -> tuple[dict[int, int], CachingAllocator]:
    """Bytes the CUDA caching allocator hands out for each storage of the log."""
    allocator = CachingAllocator()
    sizes: dict[int, int] = {}
    blocks: dict[int, _Block] = {}
    for index, nbytes in enumerate(workspaces):
        block = allocator.malloc(nbytes)
        assert block is not None
        blocks[-1 - index] = block
        sizes[-1 - index] = block.size
    for op, storage, nbytes, _, _ in log.events:
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


def analyze(
    log: TraceLog,
    *,
    runtime: TraceRuntime,
    mode: TraceMode,
    steps: int,
    seconds: float = 0.0,
    gpu_architecture: str | None = None,
    communicators: list[int] | None = None,
    top: int = 10,
) -> TraceResult:
    """Peak, breakdown, phase peaks and top modules of the last step in ``log``."""
    notes: list[str] = []
    events = list(log.events)
    context = 0
    reserved: int | None = None
    if runtime == "cuda":
        overhead = framework_overhead("cuda", gpu_architecture, communicators or [], 0)
        # One cuBLAS handle per (thread, stream): the forward runs on the caller's
        # thread, the backward on the autograd engine's device thread.
        threads = 2 if mode == "train" else 1
        workspaces = [CUBLAS, int(overhead.workspaces) - CUBLAS] * threads
        sizes, allocator = _block_sizes(log, workspaces)
        events = [
            (Op.ALLOC, -1 - i, n, Category.OTHER, -1) for i, n in enumerate(workspaces)
        ] + events
        context = int(overhead.context) + int(overhead.nccl)
        notes.append(
            "runtime cuda: allocations replayed through a model of the CUDA caching allocator "
            "(512-byte blocks; 2 MiB small-pool and 20 MiB large-pool segments; best-fit "
            "splitting); not yet validated against a real GPU"
        )
        notes.append(
            f"cuBLAS ({CUBLAS} B) and cuBLASLt ({int(overhead.workspaces) - CUBLAS} B) "
            f"workspaces for {threads} thread(s) are allocated through the caching allocator "
            "(unverified: per-thread handles)"
        )
        notes.append(
            f"CUDA context {int(overhead.context) >> 20} MiB"
            + (f" and NCCL buffers {int(overhead.nccl)} B" if overhead.nccl else "")
            + " added to total_bytes (published figures, not calibrated on a GPU for this release)"
        )
        notes.append(
            "tensors were faked on the CPU: kernels with CUDA-specific workspaces "
            "(cuDNN, flash attention) are accounted as their CPU versions"
        )
    else:
        sizes = {}
        allocator = None

    def size_of(storage: int, nbytes: int) -> int:
        return sizes.get(storage, nbytes) if runtime == "cuda" else nbytes

    live: dict[int, tuple[int, int, int]] = {}
    totals = [0] * len(Category)
    alive = 0
    phase = Phase.BUILD
    in_window = False
    peak = -1
    peak_index = 0
    peak_phase = Phase.FORWARD
    peak_totals = list(totals)
    phase_peaks: dict[Phase, int] = defaultdict(int)
    for index, (op, storage, nbytes, category, owner) in enumerate(events):
        if op == Op.ALLOC:
            size = size_of(storage, nbytes)
            live[storage] = (size, category, owner)
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
                live[storage] = (found[0], category, owner)
        else:
            phase = Phase(category)
            in_window = phase in _MEASURED if not in_window else phase != Phase.END
        if in_window and phase in _MEASURED:
            phase_peaks[phase] = max(phase_peaks[phase], alive)
            if alive > peak:
                peak, peak_index, peak_phase = alive, index, phase
                peak_totals = list(totals)
    if peak < 0:
        raise ValueError("the log has no measured step")

    owners: dict[int, int] = defaultdict(int)
    # Who holds what at the peak: replay up to it once more, keeping owners.
    live.clear()
    for op, storage, nbytes, category, owner in events[: peak_index + 1]:
        if op == Op.ALLOC:
            live[storage] = (size_of(storage, nbytes), category, owner)
        elif op == Op.FREE:
            live.pop(storage, None)
        elif op == Op.RETAG and storage in live:
            live[storage] = (live[storage][0], category, owner)
    for size, _, owner in live.values():
        owners[owner] += size
    names = [*log.owners]
    ranked = sorted(owners.items(), key=lambda item: (-item[1], item[0]))[:top]
    top_modules = [
        ModuleMemory(module=WORKSPACE_OWNER if owner < 0 else names[owner], bytes=size)
        for owner, size in ranked
        if size > 0
    ]

    if allocator is not None:
        reserved = allocator.peak_reserved
        notes.append(
            f"allocator: {allocator.segments} segments; reserved - allocated at the peak "
            f"is caching and fragmentation ({(reserved - peak) / (1 << 20):.1f} MiB)"
        )
    peak_reserved = peak if reserved is None else reserved
    return TraceResult(
        parameters=log.parameters,
        trainable_parameters=log.trainable_parameters,
        peak_bytes=peak,
        reserved_bytes=peak_reserved,
        total_bytes=peak_reserved + context,
        peak_phase=peak_phase.name.lower(),
        breakdown=TraceBreakdown(
            parameters_bytes=peak_totals[Category.PARAMETERS],
            gradients_bytes=peak_totals[Category.GRADIENTS],
            optimizer_state_bytes=peak_totals[Category.OPTIMIZER_STATE],
            activations_bytes=peak_totals[Category.ACTIVATIONS],
            temporary_bytes=peak_totals[Category.TEMPORARY],
            other_bytes=peak_totals[Category.OTHER],
        ),
        phases=PhasePeaks(
            forward_bytes=phase_peaks[Phase.FORWARD],
            backward_bytes=phase_peaks[Phase.BACKWARD],
            optimizer_bytes=phase_peaks[Phase.OPTIMIZER],
        ),
        top_modules=top_modules,
        runtime=runtime,
        mode=mode,
        steps=steps,
        device=log.device,
        seconds=seconds,
        notes=notes,
    )
