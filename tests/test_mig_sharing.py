"""The tier below MIG: time-sliced and MPS clients, checked against exact solvers.

The host packing (:mod:`gpuplan.core.mig.sharing_pack`) is checked against a brute force
over every assignment of clients to host profiles under the device plugin's rule (one
replica count per profile, every client of a profile within its share); the MIG plan
around the hosts against the MILP of ``bench/mig/mig_packing.py``, as
``tests/test_mig_plan.py`` checks plans without sharing.
"""

import itertools
import math
import random
from typing import Any

import msgspec
import pytest
import yaml
from bench.mig.mig_check import check_plan

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.mig import MigInputError, PartitionRequest, builtin_tables, partition
from gpuplan.core.mig.demand import is_plain
from gpuplan.core.mig.sharing_pack import HostKind, pack_clients

GiB = 2**30
MiB = 2**20
TABLES = {t.id: t for t in builtin_tables()}
GPU_OF = {t.id: t.gpus[0] for t in TABLES.values()}


def run(body: dict[str, Any]) -> Any:
    return partition(msgspec.convert(body, PartitionRequest), builtin_catalog())


def brute_force(
    kinds: list[HostKind], sizes: list[int], counts: list[int]
) -> tuple[int, int, int] | None:
    """Least (memory slices, compute slices, hosts) over every client-to-profile assignment."""
    clients = [s for s, c in zip(sizes, counts, strict=True) for _ in range(c)]
    best = None
    for assign in itertools.product(range(len(kinds)), repeat=len(clients)):
        total = [0, 0, 0]
        for p, kind in enumerate(kinds):
            mine = [c for c, a in zip(clients, assign, strict=True) if a == p]
            if not mine:
                continue
            replicas = kind.memory_bytes // max(mine)
            if replicas < 1:
                break
            hosts = math.ceil(len(mine) / replicas)
            total = [
                total[0] + hosts * kind.memory_slices,
                total[1] + hosts * kind.compute_slices,
                total[2] + hosts,
            ]
        else:
            if best is None or tuple(total) < best:
                best = (total[0], total[1], total[2])
    return best


def plain_kinds(table: Any) -> list[HostKind]:
    return [
        HostKind(k, p.memory_bytes, p.memory_slices, p.compute_slices)
        for k, p in enumerate(table.profiles)
        if is_plain(p.name)
    ]


@pytest.mark.parametrize("table_id", sorted(GPU_OF))
def test_host_packing_matches_a_brute_force(table_id: str) -> None:
    table = TABLES[table_id]
    kinds = plain_kinds(table)
    smallest = min(k.memory_bytes for k in kinds)
    largest = max(k.memory_bytes for k in kinds)
    rng = random.Random(f"share-{table_id}")
    for _ in range(6):
        n = rng.randint(1, 3)
        # Sizes around the smallest profile, where sharing decides most; 4 clients at most
        # keep the brute force (kinds ** clients assignments) fast.
        sizes = [rng.randint(GiB // 4, min(2 * smallest, largest)) for _ in range(n)]
        counts = [1] * n
        for _ in range(rng.randint(0, 4 - n)):
            counts[rng.randrange(n)] += 1
        got = pack_clients(kinds, sizes, counts)
        assert got is not None
        assert got.proven_optimal
        assert got.cost == brute_force(kinds, sizes, counts), (sizes, counts)
        # Every client is placed, within its share.
        placed = [0] * n
        for g in got.groups:
            kind = next(k for k in kinds if k.profile == g.profile)
            assert sum(c for _, c in g.clients) <= g.hosts * g.replicas
            for i, c in g.clients:
                assert sizes[i] <= kind.memory_bytes // g.replicas
                placed[i] += c
        assert placed == counts


def test_host_packing_beyond_the_exact_budget_is_feasible_and_flagged() -> None:
    kinds = plain_kinds(TABLES["h100-80gb"])
    sizes = [GiB, 2 * GiB, 3 * GiB, 5 * GiB, 7 * GiB, 9 * GiB]
    counts = [400, 300, 200, 100, 50, 25]
    got = pack_clients(kinds, sizes, counts)
    assert got is not None
    assert not got.proven_optimal
    assert sum(c for g in got.groups for _, c in g.clients) == sum(counts)
    for g in got.groups:
        kind = next(k for k in kinds if k.profile == g.profile)
        assert all(sizes[i] <= kind.memory_bytes // g.replicas for i, _ in g.clients)


def random_shared_body(rng: random.Random, table_id: str) -> dict[str, Any]:
    table = TABLES[table_id]
    plain = [p for p in table.profiles if is_plain(p.name)]
    smallest = min(p.memory_bytes for p in plain) / GiB
    workloads: list[dict[str, Any]] = [
        {
            "name": f"s{i}",
            "memory_gib": round(rng.uniform(0.3, 2.2 * smallest), 2),
            "count": rng.randint(1, 3),
            "sharing": "time-slicing",
        }
        for i in range(rng.randint(1, 2))
    ]
    workloads += [
        {"name": f"a{i}", "profile": rng.choice(table.profiles).name, "count": rng.randint(1, 4)}
        for i in range(rng.randint(0, 3))
    ]
    return {"gpu": GPU_OF[table_id], "workloads": workloads}


@pytest.mark.parametrize("table_id", sorted(GPU_OF))
def test_shared_plans_against_brute_force_and_the_milp(table_id: str) -> None:
    """Hosts fewest by brute force; GPUs fewest for the hosts and the rest by MILP."""
    pytest.importorskip("scipy")
    from bench.mig.mig_packing import exact

    table = TABLES[table_id]
    rng = random.Random(f"shared-plan-{table_id}")
    for _ in range(4):
        body = random_shared_body(rng, table_id)
        response = run(body)
        plan = response.sharing
        assert plan is not None
        named = {w["profile"] for w in body["workloads"] if "profile" in w}
        kinds = [k for k in plain_kinds(table) if table.profiles[k.profile].name not in named]
        shared = [w for w in body["workloads"] if "sharing" in w]
        sizes = [math.ceil(w["memory_gib"] * GiB) for w in shared]
        counts = [w["count"] for w in shared]
        fits = max((k.memory_bytes for k in kinds), default=0)
        if any(s > fits for s in sizes):
            continue  # such a client is reported unplaced (tested below)
        by_name = {p.name: p for p in table.profiles}
        cost = [0, 0, 0]
        for h in plan.hosts:
            p = by_name[h.profile]
            cost = [cost[0] + h.hosts * p.memory_slices, cost[1] + h.hosts * p.compute_slices,
                    cost[2] + h.hosts]  # fmt: skip
        assert plan.host_slices_optimal
        assert tuple(cost) == brute_force(kinds, sizes, counts), body
        # The MIG plan of the hosts beside the lone workloads: valid and fewest GPUs.
        hosts = [
            {"name": h.host_workload, "profile": h.profile, "count": h.hosts} for h in plan.hosts
        ]
        rewritten = {
            "gpu": body["gpu"],
            "workloads": [w for w in body["workloads"] if "sharing" not in w] + hosts,
        }
        assert check_plan(table, rewritten, msgspec.to_builtins(response)) == []
        best, _, status = exact(table, rewritten, 30)
        assert best is not None, status
        assert response.gpus_used == best, body


def mixed_inference_body(output: list[str]) -> dict[str, Any]:
    return {
        "gpu": "h100-sxm5-80gb",
        "workloads": [
            {"name": "embed", "memory_gib": 2, "count": 4, "sharing": "auto"},
            {"name": "rerank", "memory_gib": 5, "count": 3, "sharing": "auto"},
            {"name": "chat", "memory_gib": 20, "count": 2, "sharing": "auto"},
        ],
        "output": output,
    }


def check_mixed_inference(answer: dict[str, Any]) -> None:
    """2 and 5 GiB share time-sliced instances beside the 20 GiB workload's own."""
    sharing = answer["sharing"]
    shared = {w["workload"]: w for w in sharing["workloads"]}
    assert set(shared) == {"embed", "rerank"}
    assert {w["mode"] for w in shared.values()} == {"time-slicing"}
    for w in shared.values():
        assert w["memory_request_bytes"] <= w["memory_limit_bytes"]
        assert w["hami"]["gpumem"] == w["memory_limit_bytes"] // MiB
        assert w["kai"]["gpu_memory"] == str(w["memory_limit_bytes"] // MiB)
    by_workload: dict[str, set[str]] = {}
    for g in answer["gpus"]:
        for i in g["instances"]:
            by_workload.setdefault(i["workload"], set()).add(i["profile"])
    hosts = {h["host_workload"]: h for h in sharing["hosts"]}
    # The hosts are MIG instances of the plan, and no lone workload shares their profile.
    assert set(hosts) <= set(by_workload)
    host_profiles = {h["profile"] for h in hosts.values()}
    assert not by_workload["chat"] & host_profiles
    assert sum(h["hosts"] for h in hosts.values()) == 2  # 1g.10gb x4 clients, 1g.20gb x3
    assert answer["gpus_used"] == 2
    assert answer["optimal"]
    config = yaml.safe_load(answer["device_plugin"]["sharing"][0]["config"])
    sliced = config["sharing"]["timeSlicing"]
    assert config["flags"]["migStrategy"] == "mixed"
    assert sliced["failRequestsGreaterThanOne"] is True
    assert {(r["name"], r["replicas"]) for r in sliced["resources"]} == {
        (h["resource"], h["replicas"]) for h in hosts.values()
    }
    assert all(r["replicas"] >= 2 for r in sliced["resources"])
    assert {t["tier"] for t in sharing["isolation"]} == {"mig", "mps", "time-slicing"}


def test_mixed_inference_over_http(client: Any) -> None:
    response = client.post("/v1/mig/plan", json=mixed_inference_body(["device-plugin"]))
    assert response.status_code == 200, response.text
    check_mixed_inference(response.json())


def test_mixed_inference_from_the_cli(tmp_path: Any) -> None:
    import json

    from click.testing import CliRunner

    from gpuplan.cli import main

    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(mixed_inference_body(["device-plugin"])))
    result = CliRunner().invoke(main, ["mig", "plan", str(path), "--output", "json"])
    assert result.exit_code == 0, result.output
    check_mixed_inference(json.loads(result.output))
    table = CliRunner().invoke(main, ["mig", "plan", str(path)])
    assert table.exit_code == 0, table.output
    embed = next(line.split() for line in table.output.splitlines() if line.startswith("  embed "))
    assert embed[:7] == [
        "embed",
        "time-slicing",
        "4",
        "on",
        "nvidia.com/mig-1g.10gb",
        "(replicas",
        "4),",
    ]


def test_mps_clients_take_whole_gpus_with_the_daemons_limits() -> None:
    body = {
        "gpu": "h100-sxm5-80gb",
        "workloads": [
            {"name": "small", "memory_gib": 6, "count": 10, "sharing": "mps"},
            {"name": "big", "profile": "3g.40gb", "count": 2},
        ],
        "output": ["device-plugin"],
    }
    answer = msgspec.to_builtins(run(body))
    usable = builtin_catalog().get("h100-sxm5-80gb").usable_memory_bytes
    (host,) = answer["sharing"]["hosts"]
    replicas = usable // (6 * GiB)  # 12 on 79.65 GiB
    assert (host["mode"], host["profile"], host["replicas"]) == ("mps", None, replicas)
    assert host["hosts"] == 1
    assert host["client_memory_limit_bytes"] == usable // replicas // MiB * MiB
    assert host["active_thread_percentage"] == 100 // replicas
    (w,) = answer["sharing"]["workloads"]
    assert w["env"] == {
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={usable // replicas // MiB}M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(100 // replicas),
    }
    assert answer["sharing"]["whole_gpus"] == 1
    # MPS hosts are not MIG instances: the MIG GPUs hold only the lone workload.
    assert {i["workload"] for g in answer["gpus"] for i in g["instances"]} == {"big"}
    (config,) = answer["device_plugin"]["sharing"]
    parsed = yaml.safe_load(config["config"])
    assert parsed["flags"]["migStrategy"] == "none"
    assert parsed["sharing"]["mps"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": replicas}
    ]


def test_lone_workloads_never_land_on_a_replicated_profile() -> None:
    # 9 GiB alone fits 1g.10gb (9.75 GiB usable); the 1 GiB clients replicate 1g.10gb.
    body = {
        "gpu": "h100-sxm5-80gb",
        "workloads": [
            {"name": "tiny", "memory_gib": 1, "count": 9, "sharing": "time-slicing"},
            {"name": "nine", "memory_gib": 9, "count": 3},
        ],
    }
    answer = msgspec.to_builtins(run(body))
    host_profiles = {h["profile"] for h in answer["sharing"]["hosts"] if h["replicas"] >= 2}
    nine = {i["profile"] for g in answer["gpus"] for i in g["instances"] if i["workload"] == "nine"}
    assert nine
    assert not nine & host_profiles


def test_incremental_plans_host_clients_beside_instances_in_use() -> None:
    """A profile in use on the fleet is never replicated: it would share that instance too."""
    body = {
        "gpu": "h100-sxm5-80gb",
        "workloads": [{"name": "embed", "memory_gib": 2, "count": 4, "sharing": "auto"}],
        "current": [
            {
                "index": 0,
                "instances": [
                    {"profile": "3g.40gb", "start": 0, "workload": "old"},
                    {"profile": "1g.10gb", "start": 4, "workload": "older"},
                ],
            }
        ],
    }
    answer = run(body)
    assert answer.sharing is not None
    (host,) = answer.sharing.hosts
    assert host.profile != "1g.10gb"
    assert host.replicas >= 2
    (gpu,) = answer.gpus
    placed = {(i.profile, i.workload, i.in_use) for i in gpu.instances}
    assert ("3g.40gb", "old", True) in placed
    assert ("1g.10gb", "older", True) in placed
    assert (host.profile, host.host_workload, False) in placed
    assert [r.index for r in answer.repartition] == [0]


def test_auto_keeps_workloads_at_or_above_the_smallest_profile_alone() -> None:
    answer = run(
        {"gpu": "h100-sxm5-80gb", "workloads": [{"name": "w", "memory_gib": 10, "sharing": "auto"}]}
    )
    assert answer.sharing is None
    assert answer.resources[0].workload == "w"


def test_a_client_too_big_for_any_host_is_unplaced() -> None:
    answer = run(
        {
            "gpu": "h100-sxm5-80gb",
            "workloads": [{"name": "w", "memory_gib": 85, "sharing": "time-slicing"}],
        }
    )
    assert [u.workload for u in answer.unplaced] == ["w"]


def test_a_shared_workload_cannot_reuse_a_name() -> None:
    workloads = [
        {"name": "w", "profile": "1g.10gb"},
        {"name": "w", "memory_gib": 1, "sharing": "time-slicing"},
    ]
    with pytest.raises(MigInputError) as err:
        run({"gpu": "h100-sxm5-80gb", "workloads": workloads})
    assert err.value.path == "$.workloads[1].name"


@pytest.mark.parametrize(
    ("workload", "path"),
    [
        ({"name": "w", "profile": "1g.10gb", "sharing": "mps"}, "$.workloads[0].sharing"),
        (
            {"name": "w", "memory_gib": 2, "compute_slices": 1, "sharing": "auto"},
            "$.workloads[0].compute_slices",
        ),
    ],
)
def test_sharing_needs_memory_alone(workload: dict[str, Any], path: str) -> None:
    with pytest.raises(MigInputError) as err:
        run({"gpu": "h100-sxm5-80gb", "workloads": [workload]})
    assert err.value.path == path


@pytest.mark.parametrize(
    ("workload", "path"),
    [
        ({"name": "w", "memory_gib": 2, "sharing": "vgpu"}, "$.workloads[0].sharing"),
        ({"name": "w", "profile": "1g.10gb", "sharing": "time-slicing"}, "$.workloads[0].sharing"),
    ],
)
def test_bad_sharing_is_422_naming_the_field(
    client: Any, workload: dict[str, Any], path: str
) -> None:
    response = client.post("/v1/mig/plan", json={"gpu": "h100-sxm5-80gb", "workloads": [workload]})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert path in response.text
