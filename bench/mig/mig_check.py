"""An independent check of MIG plans, written apart from the planner.

It shares only the *facts* (the profile tables) with ``gpuplan.core.mig``: layouts are
enumerated here by a different method (a left-to-right walk over memory slots), and a
plan is checked GI by GI against the table. The tests and ``bench/mig/mig_packing.py`` use
it to catch a planner that agrees with itself but not with the rules.
"""

import math
from collections import Counter
from typing import Any

GiB = 2**30


def _limits(table: Any) -> dict[str, int]:
    """Per-GPU engine limits: what the full-GPU profiles get, the richest of them."""
    full = [
        p.engines
        for p in table.profiles
        if p.memory_slices == table.memory_slices and p.engines is not None
    ]
    if not full:
        return {}
    return {e: max(getattr(engines, e) for engines in full) for e in table.engine_budget}


def multiset_ok(table: Any, names: list[str]) -> str | None:
    """Why the multiset breaks a per-GPU rule, or None."""
    by_name = {p.name: p for p in table.profiles}
    counts = Counter(names)
    for name, n in counts.items():
        if n > by_name[name].max_count:
            return f"{n} x {name} > max_count"
    if len(names) > table.max_instances:
        return "too many instances"
    if sum(by_name[n].compute_slices for n in names) > table.compute_slices:
        return "compute exceeded"
    for engine, limit in _limits(table).items():
        used = sum(getattr(by_name[n].engines, engine) for n in names if by_name[n].engines)
        if used > limit:
            return f"{engine} exceeded"
    return None


def layouts(table: Any) -> set[tuple[int, ...]]:
    """Every valid non-empty multiset (counts in profile order), by walking the slots."""
    found: set[tuple[int, ...]] = set()
    n = len(table.profiles)

    def walk(slot: int, counts: list[int], names: list[str]) -> None:
        if slot == table.memory_slices:
            if names and multiset_ok(table, names) is None:
                found.add(tuple(counts))
            return
        walk(slot + 1, counts, names)  # leave this slot empty
        for i, p in enumerate(table.profiles):
            if slot in p.placements and slot + p.memory_slices <= table.memory_slices:
                counts[i] += 1
                names.append(p.name)
                if multiset_ok(table, names) is None:
                    walk(slot + p.memory_slices, counts, names)
                names.pop()
                counts[i] -= 1

    walk(0, [0] * n, [])
    return found


def eligible(table: Any, workload: dict[str, Any]) -> set[str]:
    """Profiles that may serve a workload given as a /v1/mig/plan entry."""
    if workload.get("profile"):
        return {workload["profile"]}
    need = math.ceil(workload["memory_gib"] * GiB)
    compute = workload.get("compute_slices") or 1
    return {
        p.name
        for p in table.profiles
        if "+" not in p.name
        and "-" not in p.name
        and p.memory_bytes >= need
        and p.compute_slices >= compute
    }


def check_plan(table: Any, request: dict[str, Any], response: dict[str, Any]) -> list[str]:
    """Every rule a plan must keep; an empty list means the plan is valid."""
    errors = []
    by_name = {p.name: p for p in table.profiles}
    served: Counter[str] = Counter()
    workloads = {w["name"]: w for w in request["workloads"]}
    for gpu in response["gpus"]:
        occupied: set[int] = set()
        names = []
        for inst in gpu["instances"]:
            p = by_name[inst["profile"]]
            if inst["start"] not in p.placements:
                errors.append(f"GPU {gpu['index']}: {p.name} at {inst['start']} is no placement")
            slots = set(range(inst["start"], inst["start"] + p.memory_slices))
            if slots & occupied:
                errors.append(f"GPU {gpu['index']}: {p.name} at {inst['start']} overlaps")
            occupied |= slots
            if inst["size"] != p.memory_slices or inst["memory_bytes"] != p.memory_bytes:
                errors.append(f"GPU {gpu['index']}: {p.name} size or memory misreported")
            names.append(p.name)
            if inst["workload"] is not None:
                served[inst["workload"]] += 1
                if p.name not in eligible(table, workloads[inst["workload"]]):
                    errors.append(
                        f"GPU {gpu['index']}: {inst['workload']} on {p.name}, which cannot serve it"
                    )
        why = multiset_ok(table, names)
        if why:
            errors.append(f"GPU {gpu['index']}: {why}")
    unplaced = Counter({u["workload"]: u["count"] for u in response["unplaced"]})
    for name, w in workloads.items():
        if served[name] + unplaced[name] != w.get("count", 1):
            errors.append(
                f"{name}: {served[name]} served + {unplaced[name]} unplaced != {w.get('count', 1)}"
            )
    if response["gpus_used"] != len(response["gpus"]):
        errors.append("gpus_used disagrees with gpus")
    if response["gpus_used"] < response["lower_bound"]:
        errors.append("fewer GPUs than the lower bound")
    return errors
