"""MIG packing: the planner against an exact integer program, on random instances.

For each random instance (a MIG table, workloads naming a profile or giving memory and
compute) this runs ``gpuplan.core.mig.partition`` end to end and an exact MILP (HiGHS via
``scipy.optimize.milp``, a bench/dev-only dependency) over layouts enumerated
independently (``bench/mig/mig_check.py``):

    min sum_k x_k
    s.t. sum_p y[j,p] = d_j                      for each class j
         sum_j y[j,p] <= sum_k n[k,p] * x_k      for each profile p
         x, y >= 0 integer

where x_k counts GPUs with layout k and y[j,p] the class-j workloads served by
profile p. It reports, side by side, the GPU counts (gap), the planner's lower bound,
and both run times; every plan is also checked GI by GI by the independent checker.
For optima up to 64 GPUs two more stages rate the tie-breaks: with the GPU count fixed,
the least stranded compute, then with that fixed too, the fewest distinct layouts
(binary z_k per layout, x_k <= GPUs * z_k).

Two families of instances: ``scaled`` (1-6 classes sized to about a target number of
GPUs, 1 to 2,000) and ``mixed`` (2-10 classes with small odd counts, where rounding an
LP hurts most).

    python -m bench.mig.mig_packing [--instances 400] [--seed 7] [--out bench/results/mig_packing.json]
"""

import argparse
import json
import platform
import random
import statistics
import time
from typing import Any

import msgspec
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from bench.mig.mig_check import check_plan, eligible, layouts
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.mig import PartitionRequest, builtin_tables, partition

GPUS = {
    "a100-80gb": "a100-sxm4-80gb",
    "h100-80gb": "h100-sxm5-80gb",
    "a100-40gb": "a100-sxm4-40gb",
    "h200-141gb": "h200-sxm-141gb",
    "a30-24gb": "a30-24gb",
    "rtx-pro-6000-96gb": "rtx-pro-6000-server-96gb",
}


def random_request(rng: random.Random, table: Any, gpu: str, scale: int) -> dict[str, Any]:
    """Workloads whose demand is about ``scale`` GPUs."""
    entries = rng.randint(1, 6)
    plain = [p for p in table.profiles if "+" not in p.name and "-" not in p.name]
    workloads = []
    for i in range(entries):
        kind = rng.random()
        if kind < 0.45:
            profile = rng.choice(table.profiles)
            w: dict[str, Any] = {"name": f"w{i}", "profile": profile.name}
            size = profile.memory_slices / table.memory_slices
        else:
            top = max(p.memory_bytes for p in plain) / 2**30
            gib = round(rng.uniform(0.5, top * (0.6 if kind < 0.9 else 1.0)), 1)
            w = {"name": f"w{i}", "memory_gib": gib, "compute_slices": rng.choice([1, 1, 1, 2, 3])}
            if not eligible(table, w):
                w["compute_slices"] = 1
            if not eligible(table, w):
                continue
            size = gib / top
        per_gpu = max(1, round(1 / max(size, 1 / table.max_instances)))
        w["count"] = max(1, round(rng.uniform(0.2, 1.8) * scale * per_gpu / entries))
        workloads.append(w)
    if not workloads:
        workloads.append({"name": "w0", "profile": table.profiles[0].name, "count": scale})
    return {"gpu": gpu, "workloads": workloads}


def _model(
    table: Any, request: dict[str, Any]
) -> tuple[list[tuple[int, ...]], int, int, list[Any], list[Any], list[Any]]:
    """Layouts, variable counts and the rows shared by every stage of the MILP."""
    valid = sorted(layouts(table))
    names = [p.name for p in table.profiles]
    classes = [(eligible(table, w), w.get("count", 1)) for w in request["workloads"]]
    classes = [(e, d) for e, d in classes if e]
    ys = [(j, names.index(p)) for j, (e, _) in enumerate(classes) for p in sorted(e)]
    nx, ny = len(valid), len(ys)
    rows, lo, hi = [], [], []
    for j, (_, d) in enumerate(classes):
        row = np.zeros(nx + ny)
        for v, (jj, _) in enumerate(ys):
            if jj == j:
                row[nx + v] = 1
        rows.append(row)
        lo.append(d)
        hi.append(d)
    for p in range(len(names)):
        row = np.zeros(nx + ny)
        for k, counts in enumerate(valid):
            row[k] = -counts[p]
        for v, (_, pp) in enumerate(ys):
            if pp == p:
                row[nx + v] = 1
        rows.append(row)
        lo.append(-np.inf)
        hi.append(0)
    return valid, nx, ny, rows, lo, hi


def exact(table: Any, request: dict[str, Any], time_limit: float) -> tuple[int | None, float, str]:
    """The MILP optimum (GPUs), its run time and HiGHS' status message."""
    _, nx, ny, rows, lo, hi = _model(table, request)
    c = np.concatenate([np.ones(nx), np.zeros(ny)])
    start = time.perf_counter()
    result = milp(
        c,
        constraints=LinearConstraint(np.array(rows), lo, hi),
        integrality=np.ones(nx + ny),
        bounds=Bounds(0, np.inf),
        options={"time_limit": time_limit, "mip_rel_gap": 0},
    )
    took = time.perf_counter() - start
    if result.x is None:
        return None, took, result.message
    return round(result.fun), took, result.message


def tie_breaks(
    table: Any, request: dict[str, Any], gpus: int, time_limit: float
) -> tuple[int | None, int | None]:
    """Least stranded compute with ``gpus`` GPUs, then fewest distinct layouts, by MILP.

    Every GI of a layout serves a workload here (supply rows are equalities), as in
    the planner's output, and stranded compute is computed independently: the
    compute slices less the compute of the richest valid layout containing it.
    """
    valid, nx, ny, rows, lo, hi = _model(table, request)
    compute = [
        sum(n * p.compute_slices for n, p in zip(k, table.profiles, strict=True)) for k in valid
    ]
    richest = [
        max(
            compute[o]
            for o, other in enumerate(valid)
            if all(a <= b for a, b in zip(k, other, strict=True))
        )
        for k in valid
    ]
    stranded = np.array([table.compute_slices - r for r in richest], dtype=float)
    n_profiles = len(table.profiles)
    lo = list(lo[: len(lo) - n_profiles]) + [0.0] * n_profiles  # supply == demand on each profile
    count_row = np.concatenate([np.ones(nx), np.zeros(ny)])
    base = [*rows, count_row]
    result = milp(
        np.concatenate([stranded, np.zeros(ny)]),
        constraints=LinearConstraint(np.array(base), [*lo, gpus], [*hi, gpus]),
        integrality=np.ones(nx + ny),
        bounds=Bounds(0, np.inf),
        options={"time_limit": time_limit, "mip_rel_gap": 0},
    )
    if result.x is None:
        return None, None
    least = round(result.fun)
    # Stage 3: binary z_k marks a used layout; x_k <= gpus * z_k.
    width = nx + ny + nx
    big = [np.concatenate([r, np.zeros(nx)]) for r in base]
    strand_row = np.concatenate([stranded, np.zeros(ny), np.zeros(nx)])
    links = []
    for k in range(nx):
        row = np.zeros(width)
        row[k] = 1
        row[nx + ny + k] = -gpus
        links.append(row)
    result = milp(
        np.concatenate([np.zeros(nx + ny), np.ones(nx)]),
        constraints=LinearConstraint(
            np.array([*big, strand_row, *links]),
            [*lo, gpus, least, *([-np.inf] * nx)],
            [*hi, gpus, least, *([0.0] * nx)],
        ),
        integrality=np.ones(width),
        bounds=Bounds(np.zeros(width), np.concatenate([np.full(nx + ny, np.inf), np.ones(nx)])),
        options={"time_limit": time_limit, "mip_rel_gap": 0},
    )
    if result.x is None or not result.success:
        return least, None
    return least, round(result.fun)


def mixed_request(rng: random.Random, table: Any, gpu: str, max_count: int) -> dict[str, Any]:
    """Many small classes with odd counts: where rounding an LP hurts most."""
    workloads: list[dict[str, Any]] = []
    top = max(p.memory_bytes for p in table.profiles) / 2**30
    for i in range(rng.randint(2, 10)):
        if rng.random() < 0.5:
            workloads.append({"name": f"w{i}", "profile": rng.choice(table.profiles).name,
                              "count": rng.randint(1, max_count)})  # fmt: skip
        else:
            w = {"name": f"w{i}", "memory_gib": round(rng.uniform(0.5, top), 1),
                 "compute_slices": rng.choice([1, 1, 2, 3, 4]), "count": rng.randint(1, max_count)}  # fmt: skip
            if eligible(table, w):
                workloads.append(w)
    if not workloads:
        workloads.append({"name": "w0", "profile": table.profiles[0].name, "count": max_count})
    return {"gpu": gpu, "workloads": workloads}


def run_instance(
    rng: random.Random, tables: dict[str, Any], scale: int, time_limit: float
) -> dict[str, Any]:
    table_id = rng.choice(sorted(GPUS))
    table = tables[table_id]
    family = "mixed" if rng.random() < 0.4 else "scaled"
    if family == "mixed":
        request = mixed_request(rng, table, GPUS[table_id], rng.choice([3, 12, 40]))
    else:
        request = random_request(rng, table, GPUS[table_id], scale)
    start = time.perf_counter()
    response = partition(msgspec.convert(request, PartitionRequest), builtin_catalog())
    ours_s = time.perf_counter() - start
    body = msgspec.to_builtins(response)
    errors = check_plan(table, request, body)
    best, milp_s, status = exact(table, request, time_limit)
    least_stranded = fewest_layouts = None
    if best is not None and best <= 64:
        least_stranded, fewest_layouts = tie_breaks(table, request, best, time_limit)
    layouts_used = len({g.layout for g in response.gpus})
    return {
        "table": table_id,
        "family": family,
        "scale": scale if family == "scaled" else None,
        "workloads": sum(w["count"] for w in request["workloads"]),
        "classes": len(request["workloads"]),
        "gpus": response.gpus_used,
        "lower_bound": response.lower_bound,
        "proven_optimal": response.optimal,
        "milp_gpus": best,
        "milp_status": status,
        "gap_gpus": None if best is None else response.gpus_used - best,
        "stranded": response.utilization.compute_slices_stranded,
        "milp_least_stranded": least_stranded,
        "layouts": layouts_used,
        "milp_fewest_layouts": fewest_layouts,
        "planner_s": round(ours_s, 5),
        "milp_s": round(milp_s, 5),
        "check_errors": errors,
    }


def scale_test(tables: dict[str, Any]) -> dict[str, Any]:
    """10,000 workloads, about 2,000 GPUs: the planner's wall time, one core."""
    rng = random.Random(2026)
    table = tables["a100-80gb"]
    workloads: list[dict[str, Any]] = []
    # Mostly small instances, so that 10,000 workloads need about 2,000 GPUs.
    profiles = ["1g.10gb", "1g.10gb", "1g.10gb", "1g.20gb", "2g.20gb", "1g.10gb+me"]
    for i in range(1000):
        if i % 2:
            workloads.append({"name": f"w{i}", "count": 10, "profile": rng.choice(profiles)})
        else:
            workloads.append(
                {"name": f"w{i}", "count": 10, "memory_gib": round(rng.uniform(1, 18), 1),
                 "compute_slices": rng.choice([1, 1, 1, 2])}
            )  # fmt: skip
    request = {"gpu": "a100-sxm4-80gb", "workloads": workloads}
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        response = partition(msgspec.convert(request, PartitionRequest), builtin_catalog())
        runs.append(time.perf_counter() - start)
    body = msgspec.to_builtins(response)
    best, milp_s, _ = exact(table, request, 120)
    return {
        "workloads": 10_000,
        "gpus": response.gpus_used,
        "lower_bound": response.lower_bound,
        "milp_gpus": best,
        "milp_s": round(milp_s, 3),
        "planner_s_runs": [round(r, 3) for r in runs],
        "check_errors": check_plan(table, request, body)[:5],
    }


def _tie_summary(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """How the greedy tie-breaks compare with the lexicographic MILP optimum."""
    rated = [c for c in cases if c["gap_gpus"] == 0 and c["milp_least_stranded"] is not None]
    with_layouts = [
        c
        for c in rated
        if c["milp_fewest_layouts"] is not None and c["stranded"] == c["milp_least_stranded"]
    ]
    return {
        "instances": len(rated),
        "stranded_equal_to_milp": sum(c["stranded"] == c["milp_least_stranded"] for c in rated),
        "stranded_excess_max": max(
            (c["stranded"] - c["milp_least_stranded"] for c in rated), default=None
        ),
        "layouts_rated": len(with_layouts),
        "layouts_equal_to_milp": sum(
            c["layouts"] == c["milp_fewest_layouts"] for c in with_layouts
        ),
        "layouts_excess_max": max(
            (c["layouts"] - c["milp_fewest_layouts"] for c in with_layouts), default=None
        ),
    }


def run(
    instances: int = 400, seed: int = 7, time_limit: float = 60.0, scale: bool = True
) -> dict[str, Any]:
    """``instances`` random instances from ``seed``, each planned and solved exactly;
    with ``scale``, the 10,000-workload run too."""
    tables = {t.id: t for t in builtin_tables()}
    rng = random.Random(seed)
    scales = [1, 2, 3, 5, 8, 12, 16, 24, 32, 48, 64, 100, 200, 500, 1000, 2000]
    small = [s for s in scales if s <= 64]
    cases = []
    for i in range(instances):
        size = rng.choice(small) if i % 4 else rng.choice(scales)
        cases.append(run_instance(rng, tables, size, time_limit))
        if (i + 1) % 50 == 0:
            print(f"{i + 1} instances", flush=True)
    solved = [c for c in cases if c["milp_gpus"] is not None]
    small_cases = [c for c in solved if c["milp_gpus"] <= 64]
    large_cases = [c for c in solved if c["milp_gpus"] > 64]
    summary = {
        "instances": len(cases),
        "milp_solved": len(solved),
        "check_errors": sum(len(c["check_errors"]) for c in cases),
        "up_to_64_gpus": {
            "instances": len(small_cases),
            "equal_to_milp": sum(c["gap_gpus"] == 0 for c in small_cases),
            "max_gap_gpus": max((c["gap_gpus"] for c in small_cases), default=None),
        },
        "over_64_gpus": {
            "instances": len(large_cases),
            "equal_to_milp": sum(c["gap_gpus"] == 0 for c in large_cases),
            "max_gap_over_lower_bound_pct": max(
                (100 * (c["gpus"] - c["lower_bound"]) / c["lower_bound"] for c in large_cases),
                default=None,
            ),
        },
        "proven_optimal": sum(c["proven_optimal"] for c in cases),
        "tie_breaks_up_to_64_gpus": _tie_summary(small_cases),
        "planner_s": {
            "median": statistics.median(c["planner_s"] for c in cases),
            "max": max(c["planner_s"] for c in cases),
        },
        "milp_s": {
            "median": statistics.median(c["milp_s"] for c in cases),
            "max": max(c["milp_s"] for c in cases),
        },
        "time_ratio_milp_over_planner_median": statistics.median(
            c["milp_s"] / c["planner_s"] for c in cases
        ),
    }
    return {
        "benchmark": "mig_packing",
        "command": f"python -m bench.mig.mig_packing --instances {instances} --seed {seed}",
        "machine": {
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
        },
        "summary": summary,
        "scale_10k_workloads": scale_test(tables) if scale else None,
        "cases": cases,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--out", default="bench/results/mig_packing.json")
    args = parser.parse_args()
    result = run(args.instances, args.seed, args.time_limit)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
        fh.write("\n")
    print(
        json.dumps({"summary": result["summary"], "scale": result["scale_10k_workloads"]}, indent=1)
    )


if __name__ == "__main__":
    main()
