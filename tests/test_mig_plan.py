"""MIG plans: validity by the independent checker, optimality against HiGHS, and the answer's parts."""

import random
from typing import Any

import msgspec
import pytest
import yaml
from bench.mig.mig_check import check_plan, eligible

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.mig import MigInputError, PartitionRequest, builtin_tables, partition

GiB = 2**30
TABLES = {t.id: t for t in builtin_tables()}
# Every MIG table, planned through one of its catalog GPUs.
GPU_OF = {t.id: t.gpus[0] for t in TABLES.values()}


def run(body: dict[str, Any]) -> Any:
    return partition(msgspec.convert(body, PartitionRequest), builtin_catalog())


def table_of(gpu: str) -> Any:
    gpu_id = builtin_catalog().get(gpu).id
    return next(t for t in TABLES.values() if gpu_id in t.gpus)


def random_body(rng: random.Random, table_id: str, max_count: int) -> dict[str, Any]:
    table = TABLES[table_id]
    workloads = []
    for i in range(rng.randint(1, 7)):
        if rng.random() < 0.5:
            workloads.append(
                {
                    "name": f"w{i}",
                    "profile": rng.choice(table.profiles).name,
                    "count": rng.randint(1, max_count),
                }
            )
        else:
            top = max(p.memory_bytes for p in table.profiles) / GiB
            w = {"name": f"w{i}", "memory_gib": round(rng.uniform(0.5, top), 1),
                 "compute_slices": rng.choice([1, 1, 2, 3]), "count": rng.randint(1, max_count)}  # fmt: skip
            if eligible(table, w):
                workloads.append(w)
    return {
        "gpu": GPU_OF[table_id],
        "workloads": workloads or [{"name": "x", "profile": table.profiles[0].name}],
    }


@pytest.mark.parametrize("table_id", sorted(GPU_OF))
def test_random_plans_pass_the_independent_checker(table_id: str) -> None:
    rng = random.Random(f"11-{table_id}")
    for _ in range(8):
        body = random_body(rng, table_id, rng.choice([3, 20, 200]))
        response = run(body)
        assert check_plan(TABLES[table_id], body, msgspec.to_builtins(response)) == []
        assert response.lower_bound <= response.gpus_used


@pytest.mark.parametrize("table_id", sorted(GPU_OF))
def test_optimal_against_an_exact_integer_program(table_id: str) -> None:
    pytest.importorskip("scipy")
    from bench.mig.mig_packing import exact

    rng = random.Random(f"5-{table_id}")
    for _ in range(6):
        body = random_body(rng, table_id, 12)
        response = run(body)
        best, _, status = exact(TABLES[table_id], body, 30)
        assert best is not None, status
        assert response.gpus_used == best, body
        assert response.optimal


def test_exact_search_alone_finds_the_milp_optimum() -> None:
    """The bin-completion search, without the LP rounding in front of it."""
    pytest.importorskip("scipy")
    from bench.mig.mig_packing import exact

    from gpuplan.core.mig.demand import classify
    from gpuplan.core.mig.geometry import geometry
    from gpuplan.core.mig.packing import _Packer

    rng = random.Random(9)
    for _ in range(40):
        table_id = rng.choice(sorted(GPU_OF))
        body = random_body(rng, table_id, 4)
        table = TABLES[table_id]
        demand = classify(table, msgspec.convert(body, PartitionRequest))
        counts = [sum(n for _, n in m) for m in demand.members]
        packer = _Packer(geometry(table), demand.classes, 200_000)
        found = packer.minimum(tuple(counts), 0, 10_000)
        best, _, _ = exact(table, body, 30)
        assert found is not None
        assert len(found) == best, body
        served = [0] * len(counts)
        for _, assign in found:
            for j in assign:
                if j >= 0:
                    served[j] += 1
        assert served == counts


def test_memory_demand_is_matched_against_usable_memory_not_the_name() -> None:
    # 1g.10gb holds 9.50 GiB on an A100 80GB: 10 GiB needs a 2-slice profile.
    response = run(
        {"gpu": "a100-sxm4-80gb", "workloads": [{"name": "m", "memory_gib": 10, "count": 7}]}
    )
    assert {i.profile for g in response.gpus for i in g.instances} <= {"1g.20gb", "2g.20gb"}
    assert response.gpus_used == 2  # four 2-slot GIs per GPU
    response = run(
        {"gpu": "a100-sxm4-80gb", "workloads": [{"name": "m", "memory_gib": 9.5, "count": 7}]}
    )
    assert {i.profile for g in response.gpus for i in g.instances} == {"1g.10gb"}
    assert response.gpus_used == 1


def test_captured_usable_memory_keeps_half_gpu_jobs_on_half_gpu_profiles() -> None:
    # B200 3g/4g.90gb hold 89 GiB (captured): an 85 GiB job needs no 7g.180gb, and two fit
    # one GPU. Under the old flat 90% rule they held 80.5 GiB and each job took a whole GPU.
    response = run(
        {"gpu": "b200-180gb", "workloads": [{"name": "m", "memory_gib": 85, "count": 2}]}
    )
    assert response.gpus_used == 1
    assert {i.profile for g in response.gpus for i in g.instances} <= {"3g.90gb", "4g.90gb"}
    # H100 NVL 3g/4g.47gb hold 46.125 GiB (captured), enough for 45 GiB.
    response = run(
        {"gpu": "h100-nvl-94gb", "workloads": [{"name": "m", "memory_gib": 45, "count": 2}]}
    )
    assert response.gpus_used == 1


def test_compute_demand_and_stranding_tie_break() -> None:
    # Two workloads of 3 compute slices fit 3g+3g (one slice stranded) or 4g+3g (none).
    response = run(
        {
            "gpu": "h100-sxm5-80gb",
            "workloads": [{"name": "c", "memory_gib": 30, "compute_slices": 3, "count": 2}],
        }
    )
    assert response.gpus_used == 1
    assert sorted(i.profile for i in response.gpus[0].instances) == ["3g.40gb", "4g.40gb"]
    assert response.utilization.compute_slices_stranded == 0
    # Named profiles are kept as asked, stranding and all.
    response = run(
        {"gpu": "h100-sxm5-80gb", "workloads": [{"name": "c", "profile": "3g.40gb", "count": 2}]}
    )
    assert response.utilization.compute_slices_stranded == 1


def test_unplaced_reasons_and_max_gpus() -> None:
    response = run({"gpu": "a100-sxm4-80gb", "workloads": [
        {"name": "huge", "memory_gib": 90}, {"name": "wide", "memory_gib": 5, "compute_slices": 8},
        {"name": "ok", "profile": "7g.80gb", "count": 3}], "max_gpus": 2})  # fmt: skip
    reasons = {u.workload: (u.count, u.reason) for u in response.unplaced}
    assert "79.00 GiB usable" in reasons["huge"][1]
    assert reasons["wide"][0] == 1
    assert reasons["ok"][0] == 1
    assert "max_gpus is 2" in reasons["ok"][1]
    assert response.gpus_used == 2


def test_mig_parted_config_is_valid_v1() -> None:
    response = run({"gpu": "a100-sxm4-80gb", "workloads": [
        {"name": "a", "profile": "3g.40gb", "count": 3}, {"name": "b", "profile": "1g.10gb+me", "count": 2},
        {"name": "c", "profile": "1g.10gb", "count": 9}]})  # fmt: skip
    config = yaml.safe_load(response.mig_parted_config)
    assert config["version"] == "v1"
    layouts = {g.layout for g in response.gpus}
    assert set(config["mig-configs"]) == {*layouts, "gpuplan-all"}
    seen: list[int] = []
    for name, entries in config["mig-configs"].items():
        for entry in entries:
            assert set(entry) <= {"device-filter", "devices", "mig-enabled", "mig-devices"}
            assert entry["mig-enabled"] is True
            pci = builtin_catalog().get("a100-sxm4-80gb").pci_device_ids
            assert entry["device-filter"] == [f"0x{d[2:].upper()}10DE" for d in pci]
            assert all(isinstance(d, int) for d in entry["devices"])
            for gpu in response.gpus:
                if gpu.index in entry["devices"]:
                    counts: dict[str, int] = {}
                    for inst in gpu.instances:
                        counts[inst.profile] = counts.get(inst.profile, 0) + 1
                    assert entry["mig-devices"] == counts
            if name != "gpuplan-all":
                seen.extend(entry["devices"])
    assert sorted(seen) == [g.index for g in response.gpus]


def test_resources_and_single_strategy() -> None:
    response = run(
        {"gpu": "a100-sxm4-80gb", "workloads": [{"name": "b", "profile": "1g.10gb+me", "count": 2}]}
    )
    assert {r.resource for r in response.resources} == {"nvidia.com/mig-1g.10gb.me"}
    assert response.single_strategy.possible
    response = run({"gpu": "a100-sxm4-80gb", "workloads": [
        {"name": "a", "profile": "3g.40gb"}, {"name": "c", "profile": "1g.10gb", "count": 4}]})  # fmt: skip
    assert not response.single_strategy.possible
    assert response.single_strategy.alternative_profile is None  # no profile serves both
    assert {(r.workload, r.resource, r.count) for r in response.resources} == {
        ("a", "nvidia.com/mig-3g.40gb", 1), ("c", "nvidia.com/mig-1g.10gb", 4)}  # fmt: skip


def test_single_strategy_alternative() -> None:
    response = run({"gpu": "a100-sxm4-80gb", "workloads": [
        {"name": "a", "memory_gib": 15, "count": 5}, {"name": "b", "memory_gib": 30, "count": 3}]})  # fmt: skip
    single = response.single_strategy
    assert not single.possible
    assert (single.alternative_profile, single.alternative_gpus) == ("3g.40gb", 4)


def test_unverified_profiles_are_reported() -> None:
    assert run(
        {"gpu": "gb200-186gb", "workloads": [{"name": "a", "profile": "1g.23gb"}]}
    ).unverified == ["1g.23gb"]
    assert (
        run(
            {"gpu": "h100-sxm5-80gb", "workloads": [{"name": "a", "profile": "1g.10gb"}]}
        ).unverified
        == []
    )


@pytest.mark.parametrize(
    ("workloads", "path"),
    [
        ([{"name": "a"}], "$.workloads[0]"),
        ([{"name": "a", "profile": "1g.10gb", "memory_gib": 3}], "$.workloads[0]"),
        (
            [{"name": "a", "profile": "1g.10gb", "compute_slices": 2}],
            "$.workloads[0].compute_slices",
        ),
        (
            [{"name": "a", "profile": "1g.10gb"}, {"name": "a", "profile": "1g.10gb"}],
            "$.workloads[1].name",
        ),
        ([{"name": "a", "profile": "1g.11gb"}], "$.workloads[0].profile"),
    ],
)
def test_bad_workloads(workloads: list[dict[str, Any]], path: str) -> None:
    with pytest.raises(MigInputError) as info:
        run({"gpu": "a100-sxm4-80gb", "workloads": workloads})
    assert info.value.path == path


def test_total_workloads_are_bounded() -> None:
    with pytest.raises(MigInputError, match="at most 20000"):
        run(
            {
                "gpu": "a100-sxm4-80gb",
                "workloads": [
                    {"name": f"w{i}", "profile": "1g.10gb", "count": 15_000} for i in range(2)
                ],
            }
        )


# -- incremental ---------------------------------------------------------------------------


def current(*gpus: list[tuple[str, int, bool]]) -> list[dict[str, Any]]:
    return [
        {"index": i, "instances": [{"profile": p, "start": s, "in_use": u} for p, s, u in gis]}
        for i, gis in enumerate(gpus)
    ]


def test_incremental_keeps_in_use_instances_and_fills_free_slots() -> None:
    fleet = current([("3g.40gb", 0, True), ("2g.20gb", 4, False)], [("7g.80gb", 0, False)], [])
    response = run(
        {
            "gpu": "a100-sxm4-80gb",
            "current": fleet,
            "workloads": [{"name": "n", "memory_gib": 8, "count": 4}],
        }
    )
    by_index = {g.index: g for g in response.gpus}
    busy = by_index[0]
    assert ("3g.40gb", 0, True) in {(i.profile, i.start, i.in_use) for i in busy.instances}
    served = sum(1 for g in response.gpus for i in g.instances if i.workload == "n")
    assert served == 4
    assert not response.unplaced
    changes = {r.index: r for r in response.repartition}
    assert changes[0].whole_gpu_idle is False
    assert all(d.profile != "3g.40gb" for d in changes[0].destroy)
    # the idle 2g at slot 4 serves a workload as it is, and a 1g goes to slot 6
    assert [(c.profile, c.start) for c in changes[0].create] == [("1g.10gb", 6)]
    # idle GPUs are repartitioned whole, and only they appear in the mig-parted config
    config = yaml.safe_load(response.mig_parted_config)
    devices = {
        d for entries in config["mig-configs"].values() for e in entries for d in e["devices"]
    }
    assert 0 not in devices
    for index in devices:
        assert changes[index].whole_gpu_idle


def test_incremental_destroys_only_idle_instances_in_the_way() -> None:
    fleet = current([("1g.10gb", 0, True), ("1g.10gb", 4, False), ("1g.10gb", 5, False)])
    response = run(
        {
            "gpu": "a100-sxm4-80gb",
            "current": fleet,
            "workloads": [{"name": "big", "profile": "3g.40gb"}],
        }
    )
    change = response.repartition[0]
    assert {(d.profile, d.start) for d in change.destroy} == {("1g.10gb", 4), ("1g.10gb", 5)}
    assert [(c.profile, c.start) for c in change.create] == [("3g.40gb", 4)]
    instances = {(i.profile, i.start, i.in_use) for i in response.gpus[0].instances}
    assert ("1g.10gb", 0, True) in instances


def test_incremental_reports_what_does_not_fit() -> None:
    fleet = current([("7g.80gb", 0, True)])
    response = run(
        {
            "gpu": "a100-sxm4-80gb",
            "current": fleet,
            "workloads": [{"name": "x", "profile": "1g.10gb", "count": 2}],
        }
    )
    assert [(u.workload, u.count) for u in response.unplaced] == [("x", 2)]
    assert response.lower_bound >= 1


def test_incremental_refuses_an_impossible_current_layout() -> None:
    with pytest.raises(MigInputError) as info:
        run({"gpu": "a100-sxm4-80gb", "current": current([("3g.40gb", 0, True), ("2g.20gb", 2, True)]),
             "workloads": [{"name": "x", "profile": "1g.10gb"}]})  # fmt: skip
    assert info.value.path == "$.current[0].instances[1].start"
