"""A replay of PyTorch's CUDA caching allocator over a trace's allocations.

``torch.cuda.max_memory_allocated`` is not the sum of tensor sizes, and
``max_memory_reserved`` (what ``nvidia-smi`` sees, less the context) is not
``max_memory_allocated``: the allocator rounds every request, carves requests out of
larger segments it obtained from ``cudaMalloc``, keeps freed blocks cached, and leaves
holes between live blocks (fragmentation). Replaying the exact sequence of requests
and releases through the same rules gives both numbers for the traced step.

Rules modelled, from the header comment and code of ``c10/cuda/CUDACachingAllocator.cpp``
(default configuration: no ``max_split_size_mb``, no ``roundup_power2_divisions``,
``expandable_segments:False``, one stream):

* requests round up to a multiple of 512 bytes (``kMinBlockSize``);
* requests of at most 1 MiB (``kSmallSize``) use the small pool, whose segments are
  2 MiB (``kSmallBuffer``); larger ones use the large pool, whose segments are 20 MiB
  (``kLargeBuffer``) for requests under 10 MiB (``kMinLargeAlloc``) and the request
  rounded up to 2 MiB (``kRoundLarge``) otherwise;
* a request takes the smallest cached block of its pool that is large enough
  (best fit), splitting it when the remainder is at least 512 bytes (small pool) or
  more than 1 MiB (large pool); an unsplit remainder counts as allocated;
* a freed block merges with free neighbours of its segment and returns to its pool;
  segments are never released (no ``empty_cache``, no out-of-memory retry: the
  replay describes a GPU with room for the whole step).

:class:`ExpandableAllocator` replays ``expandable_segments:True`` instead: each pool is
one segment that grows by mapping pages at its end (see its docstring).
"""

import bisect
from dataclasses import dataclass

from gpuplan.core.record import Record

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def round_size(nbytes: int) -> int:
    """The allocator's request size for ``nbytes``."""
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def segment_size(size: int) -> int:
    """Bytes ``cudaMalloc``'d for a new segment serving a request of ``size``."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


@dataclass(eq=False)
class _Block:
    segment: int
    offset: int
    size: int
    small: bool
    free: bool = True
    prev: "_Block | None" = None
    next: "_Block | None" = None

    def key(self) -> tuple[int, int, int]:
        return (self.size, self.segment, self.offset)


class AllocatorStats(Record):
    """What ``torch.cuda.memory_stats`` would report for the replayed requests."""

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    segments: int


class CachingAllocator:
    """The replay's state: two pools of free blocks and the blocks handed out."""

    def __init__(self) -> None:
        self._free: dict[bool, list[tuple[int, int, int]]] = {True: [], False: []}
        self._by_key: dict[tuple[int, int, int], _Block] = {}
        self.allocated = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.segments = 0

    def _insert(self, block: _Block) -> None:
        key = (block.size, block.segment, block.offset)
        bisect.insort(self._free[block.small], key)
        self._by_key[key] = block

    def _remove(self, block: _Block) -> None:
        key = (block.size, block.segment, block.offset)
        pool = self._free[block.small]
        del pool[bisect.bisect_left(pool, key)]
        del self._by_key[key]

    def malloc(self, nbytes: int) -> _Block | None:
        """Serve a request; ``None`` for an empty tensor (no memory, like CUDA's)."""
        if nbytes <= 0:
            return None
        # round_size and segment_size, inlined: the estimator replays thousands of these.
        size = MIN_BLOCK if nbytes < MIN_BLOCK else -(-nbytes // MIN_BLOCK) * MIN_BLOCK
        small = size <= SMALL_SIZE
        pool = self._free[small]
        index = bisect.bisect_left(pool, (size, -1, -1))
        if index < len(pool):
            key = pool.pop(index)
            block = self._by_key.pop(key)
        else:
            if small:
                grown = SMALL_BUFFER
            elif size < MIN_LARGE_ALLOC:
                grown = LARGE_BUFFER
            else:
                grown = -(-size // ROUND_LARGE) * ROUND_LARGE
            block = _Block(segment=self.segments, offset=0, size=grown, small=small)
            self.segments += 1
            self.reserved += grown
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        remaining = block.size - size
        if (remaining >= MIN_BLOCK) if small else (remaining > SMALL_SIZE):
            self._split(block, size)
        return self._hand_out(block)

    def _split(self, block: _Block, size: int) -> _Block:
        """Keep ``size`` bytes in ``block``; the rest becomes a free block after it."""
        rest = _Block(
            segment=block.segment,
            offset=block.offset + size,
            size=block.size - size,
            small=block.small,
            prev=block,
            next=block.next,
        )
        if block.next is not None:
            block.next.prev = rest
        block.next = rest
        block.size = size
        self._insert(rest)
        return rest

    def _hand_out(self, block: _Block) -> _Block:
        block.free = False
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def release(self, block: _Block) -> None:
        """Return ``block`` to its pool, merged with free neighbours."""
        self.allocated -= block.size
        block.free = True
        for neighbour in (block.prev, block.next):
            if neighbour is None or not neighbour.free:
                continue
            self._remove(neighbour)
            if neighbour is block.prev:
                block.offset = neighbour.offset
                block.prev = neighbour.prev
                if neighbour.prev is not None:
                    neighbour.prev.next = block
            else:
                block.next = neighbour.next
                if neighbour.next is not None:
                    neighbour.next.prev = block
            block.size += neighbour.size
        self._insert(block)

    def stats(self) -> AllocatorStats:
        return AllocatorStats(
            peak_allocated_bytes=self.peak_allocated,
            peak_reserved_bytes=self.peak_reserved,
            segments=self.segments,
        )


class ExpandableAllocator(CachingAllocator):
    """The caching allocator under ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``.

    Each pool is one segment: a virtual address range (larger than the GPU) whose pages
    are mapped as needed, 2 MiB at a time for the small pool and 20 MiB for the large
    one, and unmapped only by ``empty_cache`` or an out-of-memory retry, so reserved
    memory is the mapped high-water mark. Rules, from ``c10/cuda/CUDACachingAllocator.cpp``
    (PyTorch 2.9-2.11: ``find_expandable_block``, ``try_allocate_expandable_block``,
    ``map_block``, ``get_free_block``, ``should_split``):

    * a request takes the smallest free mapped block large enough, as without expandable
      segments, except that the free block at the end of the mapped range (which could
      grow) is passed over for the next larger one when there is one;
    * with no block large enough, the segment maps pages at its end for what the free
      block there (if any) lacks, merges them into it, and serves the request from it;
    * a remainder of at least 512 bytes is split off in both pools;
    * freed blocks merge with free neighbours, as without expandable segments.

    Requests round to 512 bytes as before. What changes is that no memory is set aside
    in a request's shape (a 20 MiB segment for a 1-10 MiB request, a segment sized to a
    large tensor): freed blocks merge across what were segments, so batches whose
    tensors change size reuse one range instead of stranding cached segments.
    """

    def __init__(self) -> None:
        super().__init__()
        self._end: dict[bool, _Block | None] = {True: None, False: None}

    def malloc(self, nbytes: int) -> _Block | None:
        if nbytes <= 0:
            return None
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self._free[small]
        index = bisect.bisect_left(pool, (size, -1, -1))
        if index < len(pool):
            block = self._by_key[pool[index]]
            if block is self._end[small] and index + 1 < len(pool):
                block = self._by_key[pool[index + 1]]
            self._remove(block)
        else:
            block = self._grow(size, small)
        if block.size - size >= MIN_BLOCK:
            rest = self._split(block, size)
            if block is self._end[small]:
                self._end[small] = rest
        return self._hand_out(block)

    def _grow(self, size: int, small: bool) -> _Block:
        """Map pages at the pool's end for ``size`` bytes; the free block there, grown."""
        page = SMALL_BUFFER if small else LARGE_BUFFER
        end = self._end[small]
        if end is not None and end.free:  # no free block fits, so this one is short
            self._remove(end)
            mapped = -(-(size - end.size) // page) * page
            end.size += mapped
            block = end
        else:
            mapped = -(-size // page) * page
            offset = 0 if end is None else end.offset + end.size
            block = _Block(segment=int(small), offset=offset, size=mapped, small=small, prev=end)
            if end is None:
                self.segments += 1
            else:
                end.next = block
            self._end[small] = block
        self.reserved += mapped
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return block

    def release(self, block: _Block) -> None:
        super().release(block)
        if block.next is None:  # it merged with the end block, or was it
            self._end[block.small] = block


def simulate(
    requests: list[tuple[int, int]], *, expandable_segments: bool = False
) -> AllocatorStats:
    """Replay ``(handle, nbytes)`` pairs: ``nbytes > 0`` allocates a block for
    ``handle``, ``nbytes == -1`` frees it. Mostly for tests; the analysis drives a
    :class:`CachingAllocator` directly."""
    allocator = ExpandableAllocator() if expandable_segments else CachingAllocator()
    live: dict[int, _Block] = {}
    for handle, nbytes in requests:
        if nbytes < 0:
            block = live.pop(handle, None)
            if block is not None:
                allocator.release(block)
        else:
            got = allocator.malloc(nbytes)
            if got is not None:
                live[handle] = got
    return allocator.stats()
