"""Placement rules of one MIG table, and every layout they allow.

A *layout* here is a multiset of profiles, written as a tuple of counts indexed like
``table.profiles``. A layout is valid when some placement of its GIs on the memory
slots exists with no overlap, within the per-profile ``max_count``, the GPU's
``max_instances``, its compute slices and its engine budget. The tables are small (at
most 8 slots and about a dozen profiles), so every valid layout is enumerated once per
table: a few hundred at most. The planner then works over that list, and never has to
rediscover a placement.

NVIDIA's driver places a new GI at the lowest free start slot of its profile's
placement list (observed: creating 4g, 2g, 1g in that order on an A100 40GB placed them
at 0:4, 4:2, 6:1; `smi-lgip-a100-40gb` in the data's sources). mig-parted never passes a
placement: it creates the GIs in some order and lets the driver place them. So a layout
is only as good as a creation order that makes first-fit land every GI where the
layout needs it; :func:`creation_order` finds one.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache

import msgspec

from gpuplan.core.mig.model import MigGpu

Counts = tuple[int, ...]
Placed = tuple[tuple[int, int], ...]
"""``(profile index, start slot)`` pairs."""


@dataclass(frozen=True)
class Geometry:
    """A table with its enumerated layouts (built once per table by :func:`geometry`)."""

    table: MigGpu
    layouts: tuple[Counts, ...]
    """Every valid non-empty layout, largest total compute first."""

    compute: tuple[int, ...]
    """Total compute slices of each layout."""

    stranded: tuple[int, ...]
    """Compute slices of each layout that no GI can ever use without repartitioning:
    ``compute_slices`` less the compute of the richest valid layout containing it."""

    index: dict[Counts, int]

    def profile_index(self, name: str) -> int | None:
        for i, p in enumerate(self.table.profiles):
            if p.name == name:
                return i
        return None


def engine_totals(table: MigGpu) -> dict[str, int]:
    """Per-GPU engine totals: those of the richest full-GPU profile."""
    totals: dict[str, int] = {}
    for p in table.profiles:
        if p.memory_slices == table.memory_slices and p.engines is not None:
            for engine in table.engine_budget:
                totals[engine] = max(totals.get(engine, 0), getattr(p.engines, engine))
    return totals


def _mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def count_violations(table: MigGpu, counts: Sequence[int]) -> list[str]:
    """Rules on the multiset alone: counts, instances, compute, engines."""
    problems = []
    for p, n in zip(table.profiles, counts, strict=True):
        if n > p.max_count:
            problems.append(f"too many `{p.name}`: {n} requested, at most {p.max_count} per GPU")
    total = sum(counts)
    if total > table.max_instances:
        problems.append(f"{total} GPU instances; at most {table.max_instances} per GPU")
    compute = sum(p.compute_slices * n for p, n in zip(table.profiles, counts, strict=True))
    if compute > table.compute_slices:
        problems.append(f"{compute} compute slices; the GPU has {table.compute_slices}")
    for engine, limit in engine_totals(table).items():
        used = sum(
            getattr(p.engines, engine) * n
            for p, n in zip(table.profiles, counts, strict=True)
            if p.engines is not None
        )
        if used > limit:
            problems.append(f"{used} {engine} engines requested; the GPU has {limit}")
    return problems


def first_fit(table: MigGpu, order: Sequence[int], occupied: int = 0) -> list[int] | None:
    """Starts the driver gives GIs created in ``order`` on a GPU with ``occupied`` slots."""
    starts = []
    for index in order:
        profile = table.profiles[index]
        for start in profile.placements:
            mask = _mask(start, profile.memory_slices)
            if not occupied & mask:
                occupied |= mask
                starts.append(start)
                break
        else:
            return None
    return starts


def place(
    table: MigGpu, counts: Sequence[int], fixed: Placed = (), occupied: int = 0
) -> Placed | None:
    """A placement of ``counts`` (which include the ``fixed`` GIs), or None.

    Searches exhaustively (the largest GIs first, each start in order), so None means
    no placement exists.
    """
    for index, start in fixed:
        mask = _mask(start, table.profiles[index].memory_slices)
        if occupied & mask or start not in table.profiles[index].placements:
            return None
        occupied |= mask
    todo = list(counts)
    for index, _ in fixed:
        todo[index] -= 1
    if min(todo, default=0) < 0:
        return None
    order = sorted(
        (i for i, n in enumerate(todo) for _ in range(n)),
        key=lambda i: (-table.profiles[i].memory_slices, i),
    )
    found = _search(table, order, 0, occupied, -1)
    return None if found is None else tuple(sorted((*fixed, *found), key=lambda ps: ps[1]))


def _search(
    table: MigGpu, order: list[int], at: int, occupied: int, last_start: int
) -> list[tuple[int, int]] | None:
    if at == len(order):
        return []
    index = order[at]
    profile = table.profiles[index]
    same = at > 0 and order[at - 1] == index
    for start in profile.placements:
        if same and start <= last_start:
            continue  # GIs of one profile are interchangeable: place them in start order
        mask = _mask(start, profile.memory_slices)
        if occupied & mask:
            continue
        rest = _search(table, order, at + 1, occupied | mask, start)
        if rest is not None:
            return [(index, start), *rest]
    return None


def _orders(items: list[int]) -> Iterator[list[int]]:
    """Distinct permutations of ``items`` in lexicographic order of positions."""
    if not items:
        yield []
        return
    seen: set[int] = set()
    for i, item in enumerate(items):
        if item in seen:
            continue
        seen.add(item)
        for rest in _orders(items[:i] + items[i + 1 :]):
            yield [item, *rest]


def creation_order(
    table: MigGpu, counts: Counts, occupied: int = 0
) -> tuple[Placed, list[int]] | None:
    """A creation order whose first-fit placement is valid, with that placement.

    The order tried first is the largest GIs first (memory slices, then compute,
    then profile order), which succeeds for most layouts; otherwise the distinct
    permutations are tried in turn (at most 7!/… of them). None when no order works
    even though a placement may exist (it then needs explicit placements).
    """
    items = sorted(
        (i for i, n in enumerate(counts) for _ in range(n)),
        key=lambda i: (-table.profiles[i].memory_slices, -table.profiles[i].compute_slices, i),
    )
    for order in _orders(items):
        starts = first_fit(table, order, occupied)
        if starts is not None:
            placed = tuple(sorted(zip(order, starts, strict=True), key=lambda ps: ps[1]))
            return placed, order
    return None


def geometry(table: MigGpu) -> Geometry:
    """Enumerate the valid layouts of ``table`` (cached per table content)."""
    return _geometry(msgspec.json.encode(table))


@cache
def _geometry(encoded: bytes) -> Geometry:
    table = msgspec.json.decode(encoded, type=MigGpu)
    pairs = [(i, s) for i, p in enumerate(table.profiles) for s in p.placements]
    found: set[Counts] = set()
    n = len(table.profiles)

    def walk(at: int, occupied: int, counts: list[int]) -> None:
        for k in range(at, len(pairs)):
            index, start = pairs[k]
            mask = _mask(start, table.profiles[index].memory_slices)
            if occupied & mask:
                continue
            counts[index] += 1
            if not count_violations(table, counts):
                key = tuple(counts)
                found.add(key)
                walk(k + 1, occupied | mask, counts)
            counts[index] -= 1

    walk(0, 0, [0] * n)
    compute = {
        c: sum(p.compute_slices * k for p, k in zip(table.profiles, c, strict=True)) for c in found
    }
    layouts = sorted(found, key=lambda c: (-compute[c], c))
    richest = {}
    for c in layouts:
        best = compute[c]
        for other in layouts:
            if compute[other] <= best:
                break  # sorted by compute: nothing richer follows
            if all(a <= b for a, b in zip(c, other, strict=True)):
                best = compute[other]
                break
        richest[c] = best
    return Geometry(
        table=table,
        layouts=tuple(layouts),
        compute=tuple(compute[c] for c in layouts),
        stranded=tuple(table.compute_slices - richest[c] for c in layouts),
        index={c: i for i, c in enumerate(layouts)},
    )
