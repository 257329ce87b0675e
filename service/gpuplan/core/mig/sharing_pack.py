"""The fewest host slices for time-sliced clients, under the device plugin's rules.

NVIDIA's device plugin shares a MIG device by advertising it as ``replicas`` copies of
its resource, one replica count per resource name and node (``sharing.timeSlicing``),
and any pod may land on any replica. So every instance of a host profile ``P`` holds
``N_P`` clients, whichever they are, and a plan is safe only if any ``N_P`` of them fit
its memory: each client of ``P`` must fit ``memory(P) // N_P`` (the share MPS would
enforce, and the one the plan reports as the client's limit). The cost of a plan is the
MIG capacity its hosts take: memory slices, then compute slices, then hosts.

**Exact method.** Sort the distinct client sizes, largest first (levels ``1..d``). A host
profile used in an optimal plan holds clients no larger than some level ``t``; raising
``N_P`` to ``memory(P) // size(t)`` never costs more, so each profile's choice is its
*top level* ``t_P`` (or unused). Given those, a client of level ``k`` may use exactly
the profiles with ``t_P <= k``: the eligible sets are nested, so by Hall's theorem a
choice of host counts ``h_P`` serves every client iff, for every level ``k``, the
clients of levels ``1..k`` fit the replicas of the profiles with ``t_P <= k``. A
dynamic programme over the levels, its state the spare replicas carried down (capped at
the demand still to come), finds the cheapest ``h_P`` for one choice of top levels; an
enumeration over the choices finds the optimum. :func:`pack_clients` runs it while its
work stays under a budget, else a greedy on the same choices (answer marked not
proven). ``tests/test_mig_sharing.py`` checks it against a brute force over every
assignment of clients to profiles.
"""

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

_WORK_BUDGET = 3_000_000
"""DP steps (choices × levels × states) the exact method may take; beyond it the greedy
runs on the same choices."""

_MAX_CHOICES = 5_000
"""Top-level choices enumerated; beyond it the client sizes are rounded up into fewer levels."""


@dataclass(frozen=True)
class HostKind:
    """A profile that may host clients: its usable memory and what one instance costs."""

    profile: int
    memory_bytes: int
    memory_slices: int
    compute_slices: int


@dataclass(frozen=True)
class HostGroup:
    """``hosts`` instances of ``profile``, each with ``replicas`` clients."""

    profile: int
    replicas: int
    hosts: int
    clients: tuple[tuple[int, int], ...]
    """``(client index, how many of it)`` on these hosts, largest client first."""


@dataclass(frozen=True)
class ClientPacking:
    groups: tuple[HostGroup, ...]
    cost: tuple[int, int, int]
    """(memory slices, compute slices, hosts) of all the hosts."""
    proven_optimal: bool


def _weight(kind: HostKind) -> int:
    """One host's cost as one integer: memory slices, then compute, then the host."""
    return kind.memory_slices * 10**12 + kind.compute_slices * 10**6 + 1


def _split(total: int) -> tuple[int, int, int]:
    return total // 10**12, total // 10**6 % 10**6, total % 10**6


def _levels(sizes: Sequence[int], counts: Sequence[int], most: int) -> tuple[list[int], list[int]]:
    """Distinct sizes largest first and the clients of each; more than ``most`` sizes are
    merged into ``most`` contiguous groups, each rounded up to its largest (a safe bound)."""
    by: dict[int, int] = {}
    for s, c in zip(sizes, counts, strict=True):
        by[s] = by.get(s, 0) + c
    order = sorted(by, reverse=True)
    if len(order) <= most:
        return order, [by[s] for s in order]
    step = math.ceil(len(order) / most)
    groups = [order[i : i + step] for i in range(0, len(order), step)]
    return [g[0] for g in groups], [sum(by[s] for s in g) for g in groups]


def _cheapest_counts(
    top: Sequence[int], caps: Sequence[int], weights: Sequence[int], demand: Sequence[int]
) -> tuple[int, list[int]] | None:
    """Fewest-cost host counts for one choice of top levels (``-1``: unused), or None.

    Levels are processed largest first; the state is the spare replicas carried to the
    smaller clients, capped at the demand still to come (more is never needed).
    """
    d = len(demand)
    rest = [sum(demand[k:]) for k in range(d)] + [0]
    # state -> (cost, host counts)
    states: dict[int, tuple[int, tuple[int, ...]]] = {0: (0, (0,) * len(top))}
    for k in range(d):
        cap = rest[k]
        for p, t in enumerate(top):
            if t != k:
                continue
            n, w = caps[p], weights[p]
            # Unbounded knapsack over the spare replicas: ascending, so hosts chain.
            best = [states.get(s) for s in range(cap + 1)]
            for s in range(cap):
                here = best[s]
                if here is None:
                    continue
                to = min(s + n, cap)
                cost, hosts = here[0] + w, (*here[1][:p], here[1][p] + 1, *here[1][p + 1 :])
                there = best[to]
                if there is None or cost < there[0]:
                    best[to] = (cost, hosts)
            states = {s: v for s, v in enumerate(best) if v is not None}
        carried: dict[int, tuple[int, tuple[int, ...]]] = {}
        for s, v in sorted(states.items()):
            if s >= demand[k]:
                key = min(s - demand[k], rest[k + 1])
                if key not in carried or v < carried[key]:
                    carried[key] = v
        states = carried
        if not states:
            return None
    cost, hosts = min(states.values())
    return cost, list(hosts)


def _greedy_counts(
    top: Sequence[int], caps: Sequence[int], weights: Sequence[int], demand: Sequence[int]
) -> tuple[int, list[int]] | None:
    """Cover each level's shortfall with the profile of least cost per replica open to it."""
    hosts = [0] * len(top)
    spare = 0
    for k, need in enumerate(demand):
        short = need - spare
        if short > 0:
            open_ = [p for p, t in enumerate(top) if 0 <= t <= k]
            if not open_:
                return None
            p = min(open_, key=lambda q: (weights[q] / caps[q], q))
            h = math.ceil(short / caps[p])
            hosts[p] += h
            spare += h * caps[p]
        spare -= need
    return sum(h * w for h, w in zip(hosts, weights, strict=True)), hosts


def _dominated(
    top: Sequence[int], kinds: Sequence[HostKind], levels: Sequence[int], weights: Sequence[int]
) -> bool:
    """Whether a kind used at level ``t`` could be replaced by another, unused or at the same
    level, with as many replicas there at no higher cost per host: the choice without it
    is then at least as good, so this one need not be solved."""
    for q, t in enumerate(top):
        if t < 0:
            continue
        cap_q = kinds[q].memory_bytes // levels[t]
        for p, u in enumerate(top):
            if p == q or u not in (-1, t):
                continue
            cap_p = kinds[p].memory_bytes // levels[t]
            if (
                cap_p >= cap_q
                and weights[p] <= weights[q]
                and (cap_p > cap_q or weights[p] < weights[q] or p < q)
            ):
                return True
    return False


def _assign(
    top: Sequence[int],
    caps: Sequence[int],
    hosts: Sequence[int],
    level_of: Sequence[int],
    counts: Sequence[int],
) -> list[list[tuple[int, int]]]:
    """Hand the clients out to the chosen hosts, largest clients to the most restrictive hosts."""
    room = [h * n for h, n in zip(hosts, caps, strict=True)]
    out: list[list[tuple[int, int]]] = [[] for _ in top]
    order = sorted(range(len(counts)), key=lambda i: (level_of[i], i))
    for i in order:
        left = counts[i]
        # Hosts whose top level is the latest still open to this client first.
        for p in sorted(
            (p for p, t in enumerate(top) if 0 <= t <= level_of[i]), key=lambda p: (-top[p], p)
        ):
            take = min(left, room[p])
            if take:
                out[p].append((i, take))
                room[p] -= take
                left -= take
            if not left:
                break
        assert left == 0, "a Hall-feasible choice serves every client"
    return out


def pack_clients(
    kinds: Sequence[HostKind],
    sizes: Sequence[int],
    counts: Sequence[int],
    *,
    work_budget: int = _WORK_BUDGET,
) -> ClientPacking | None:
    """Host ``counts[i]`` clients of ``sizes[i]`` bytes each on the fewest host slices.

    None when some client fits no kind. Deterministic: ties go to the first choice in a
    fixed order.
    """
    if not any(counts):
        return ClientPacking((), (0, 0, 0), True)
    live = [(s, c) for s, c in zip(sizes, counts, strict=True) if c]
    if max(s for s, _ in live) > max((k.memory_bytes for k in kinds), default=0):
        return None
    # (levels + 1) ** kinds choices: keep them under _MAX_CHOICES.
    most_levels = max(1, math.floor(_MAX_CHOICES ** (1 / max(len(kinds), 1)) + 1e-9) - 1)
    levels, demand = _levels([s for s, _ in live], [c for _, c in live], most_levels)
    exact = len(levels) == len({s for s, _ in live})
    # For each kind, the top levels it can take (the client fits one per host at least).
    options = [[-1, *[k for k, s in enumerate(levels) if s <= kind.memory_bytes]] for kind in kinds]
    weights = [_weight(kind) for kind in kinds]
    choices = [
        top for top in itertools.product(*options) if not _dominated(top, kinds, levels, weights)
    ]
    states = sum(demand) + 1
    solve = (
        _cheapest_counts
        if len(choices) * len(levels) * states * len(kinds) <= work_budget
        else _greedy_counts
    )
    exact = exact and solve is _cheapest_counts
    best: tuple[int, tuple[int, ...], list[int], list[int]] | None = None
    for top in choices:
        caps = [
            kind.memory_bytes // levels[t] if t >= 0 else 1
            for kind, t in zip(kinds, top, strict=True)
        ]
        found = solve(top, caps, weights, demand)
        if found is not None and (best is None or found[0] < best[0]):
            best = (found[0], top, caps, found[1])
    assert best is not None, "the largest kind holds every client alone"
    cost, top, caps, hosts = best
    # Clients by index: their level is the level their size was rounded into.
    level_of = [
        next(k for k in range(len(levels) - 1, -1, -1) if s <= levels[k]) if c else 0
        for s, c in zip(sizes, counts, strict=True)
    ]
    served = _assign(top, caps, hosts, level_of, counts)
    groups = tuple(
        HostGroup(kinds[p].profile, caps[p], hosts[p], tuple(served[p]))
        for p in sorted(range(len(kinds)), key=lambda p: (kinds[p].memory_bytes, kinds[p].profile))
        if hosts[p]
    )
    return ClientPacking(groups, _split(cost), exact)
