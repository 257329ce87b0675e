"""core.mig.place: where a new workload goes on a live fleet, fewest disruptions first.

Each tier answers first when it applies; the drain tier drains the fewest instances;
no option but a drain destroys an instance in use; and on random small fleets the
answer matches a brute force that tries every set of instances to destroy, every
profile and every start, and asks ``validate`` whether the layout after is valid.
"""

import math
import random
from collections.abc import Sequence
from itertools import combinations

import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.errors import InvalidRequest
from gpuplan.core.fleet import NodeSnapshot
from gpuplan.core.mig import PlacementQuery, PlacementResponse, check_placement, place
from gpuplan.core.mig.geometry import count_violations
from gpuplan.core.mig.schema import LayoutInstance, PlacementOption, ValidateRequest
from gpuplan.core.mig.validate import validate
from tests.agent_fixtures import snapshot
from tests.placement_fleet import A30, H100, RTX_PRO_6000, Layout, fleet_node, table_of

CATALOG = builtin_catalog()
GiB = 2**30
TIER = {"none": 0, "create": 1, "repartition-idle": 2, "drain": 3}


def _place(nodes: Sequence[NodeSnapshot], **query: object) -> PlacementResponse:
    return place(msgspec.convert(query, PlacementQuery), nodes, CATALOG)


def _where(o: PlacementOption) -> tuple[str, int, str | None, int | None]:
    return (o.node, o.gpu_index, o.profile, o.placement_start)


# GPUs of H100 80GB, each offering one tier for a 19 GiB, 1-slice workload.
FREE = [("1g.10gb", 0, True), ("3g.40gb", 4, False)]  # a free 3g.40gb fits
SLICES = [("1g.10gb", 0, True), ("3g.40gb", 4, True)]  # slots 2-3 take a 1g.20gb
IDLE = [("1g.10gb", 0, True), *[("1g.10gb", s, False) for s in (1, 2, 3)], ("3g.40gb", 4, True)]
BUSY = [("1g.10gb", 0, True), ("1g.10gb", 1, True), ("2g.20gb", 2, True), ("3g.40gb", 4, True)]


def test_each_tier_answers_first_when_it_applies() -> None:
    gpus: list[Layout] = [BUSY, IDLE, SLICES, FREE]
    expected = [
        ("drain", "drain", 0),
        ("repartition-idle", "repartition", 1),
        ("create", "create", 2),
        ("none", "use-instance", 3),
    ]
    for n in range(1, 5):
        answer = _place([fleet_node("n1", gpus[:n])], memory_gib=19)
        disruption, action, index = expected[n - 1]
        first = answer.options[0]
        assert (answer.disruption, first.action, first.gpu_index) == (disruption, action, index)
        # Fewest disruptions first, and a drain only when nothing else exists.
        tiers = [TIER[o.disruption] for o in answer.options]
        assert tiers == sorted(tiers)
        assert ("drain" in [o.disruption for o in answer.options]) == (n == 1)
    answer = _place([fleet_node("n1", gpus)], memory_gib=19)
    assert [(o.disruption, _where(o)) for o in answer.options] == [
        ("none", ("n1", 3, "3g.40gb", 4)),
        ("create", ("n1", 2, "1g.20gb", 2)),
        ("repartition-idle", ("n1", 1, "1g.20gb", 2)),
    ]
    # A 1g.20gb at 0 would drain the 1g.10gb in use there; at 2 it takes two idle ones.
    assert (answer.options[2].drained, answer.options[2].destroyed) == (0, 2)


def test_idle_repartition_destroys_only_idle_instances() -> None:
    answer = _place([fleet_node("n1", [IDLE])], memory_gib=19)
    (option,) = answer.options
    assert option.placement_start == 2
    assert [(d.profile, d.placement_start, d.in_use) for d in option.destroy] == [
        ("1g.10gb", 2, False),
        ("1g.10gb", 3, False),
    ]
    after = [(i.profile, i.placement_start, i.in_use, i.new) for i in option.layout_after]
    assert after == [
        ("1g.10gb", 0, True, False),
        ("1g.10gb", 1, False, False),
        ("1g.20gb", 2, False, True),
        ("3g.40gb", 4, True, False),
    ]
    assert option.steps[0] == (
        "on node n1: nvidia-smi mig -i 0 -gi 3 -dci, then nvidia-smi mig -i 0 -gi 3 -dgi "
        "(destroys the 1g.10gb at 2, idle)"
    )
    assert "nvidia-smi mig -i 0 -cgi 1g.20gb:2 -C" in option.steps[2]
    assert option.steps[3].startswith("request `nvidia.com/mig-1g.20gb` for the pod on node n1")
    assert "2 idle instance(s) (1g.10gb at 2, 1g.10gb at 3)" in option.reason
    assert "the 2 instance(s) in use there keep running" in option.reason


def test_a_drain_drains_the_fewest_instances() -> None:
    # Every GPU is busy: a 2g.20gb needs two 1g.10gb drained on the first, one 2g on
    # the second, and the 4g or the 3g on the third.
    seven = [("1g.10gb", s, True) for s in range(7)]
    pairs = [("2g.20gb", 0, True), ("2g.20gb", 2, True), ("3g.40gb", 4, True)]
    halves = [("4g.40gb", 0, True), ("3g.40gb", 4, True)]
    answer = _place([fleet_node("n1", [seven, pairs, halves])], memory_gib=15, compute_slices=2)
    assert answer.disruption == "drain"
    assert [(o.gpu_index, o.drained, o.destroyed) for o in answer.options] == [
        (1, 1, 0),
        (2, 1, 0),
        (0, 2, 0),
    ]
    first = answer.options[0]
    assert (first.profile, first.placement_start) == ("2g.20gb", 0)
    assert [(d.profile, d.placement_start) for d in first.destroy] == [("2g.20gb", 0)]
    assert first.steps[0].startswith("drain the workloads on MIG-n1-1-0 (2g.20gb at 0, in use)")
    assert "no GPU needs fewer drained than this one" in answer.reason
    # The third GPU ties on drains and fit; its GPU index comes later, and of its two
    # starts the lower one (draining the 4g.40gb) is where first-fit creates it.
    second = answer.options[1]
    assert [(d.profile, d.placement_start) for d in second.destroy] == [("4g.40gb", 0)]


def test_the_counting_rules_can_force_a_drain() -> None:
    # One OFA per H100: a second `+me` instance needs the first one gone, though slot 1
    # is free.
    answer = _place([fleet_node("n1", [[("1g.10gb+me", 0, True)]])], profile="1g.10gb+me")
    (option,) = answer.options
    assert (option.disruption, option.drained) == ("drain", 1)
    idle = _place([fleet_node("n1", [[("1g.10gb+me", 0, False), ("1g.10gb", 1, True)]])],
                  profile="1g.10gb+me")  # fmt: skip
    assert idle.options[0].action == "use-instance"


def test_a_whole_free_gpu() -> None:
    nodes = [fleet_node("n1", [BUSY, "free", "busy"])]
    answer = _place(nodes, memory_gib=60)
    (option,) = answer.options
    assert (option.action, option.gpu_index, option.profile) == ("enable-mig", 1, "7g.80gb")
    assert option.steps[0] == (
        "on node n1: nvidia-smi -i 1 -mig 1 (enables MIG mode; the GPU resets, and nothing "
        "runs on it)"
    )
    assert "1 GPU(s) not in MIG mode run processes (or do not say) and are left out" in answer.notes
    whole = _place(nodes, memory_gib=60, whole_gpu=True)
    (option,) = whole.options
    assert (option.disruption, option.action, option.resource) == (
        "none",
        "use-gpu",
        "nvidia.com/gpu",
    )
    assert option.profile is None
    assert option.memory_bytes == CATALOG.get(H100).usable_memory_bytes - 2**29


def test_profiles_and_filters() -> None:
    nodes = [
        fleet_node("n1", [FREE]),
        fleet_node("n2", [SLICES]),
        fleet_node("n3", [[]], model=A30),
    ]
    answer = _place(nodes, profile="nvidia.com/mig-1g.20gb")
    assert answer.profile == "1g.20gb"
    assert [_where(o) for o in answer.options] == [("n1", 0, "1g.20gb", 2), ("n2", 0, "1g.20gb", 2)]
    assert {o.action for o in answer.options} == {"create"}
    assert "MIG table `a30-24gb` (a30-24gb) has no profile `1g.20gb`" in answer.notes
    assert [o.node for o in _place(nodes, memory_gib=5, gpu="a30").options] == ["n3"]
    assert [o.node for o in _place(nodes, memory_gib=5, node="n2").options] == ["n2"]
    assert _place(nodes, memory_gib=5, node="n9").notes[0].startswith("node 'n9' is not live")


def test_a_gpu_without_placements_offers_only_its_free_instances() -> None:
    # A recorded A100 whose GPU-instance lookups answer NoPermission: no placements.
    nodes = [snapshot("node-c", fixture="a100-pcie-mig")]
    assert _place(nodes, memory_gib=19).options[0].action == "use-instance"
    answer = _place(nodes, memory_gib=30)
    assert answer.options == []
    assert any("could not read its instances' placements" in n for n in answer.notes)
    assert answer.reason.startswith("nothing in the live fleet can take the workload")


def test_compute_instances_of_one_gpu_instance() -> None:
    # Recorded H100: a 4g.40gb split into two compute instances, one in use; a 3g.40gb
    # in use. The GI is in use, and draining it drains both of its MIG devices.
    nodes = [snapshot("node-c", fixture="h100-mig-gpm")]
    answer = _place(nodes, memory_gib=30)
    first = answer.options[0]
    assert (first.disruption, first.drained) == ("drain", 1)
    assert [len(d.mig_uuids) for d in first.destroy] in ([2], [1])
    assert all(d.in_use for d in first.destroy)


def test_nvml_placement_units_are_read_per_gpu() -> None:
    # NVML prints RTX PRO 6000 placements on a grid three times the table's slots.
    nodes = [fleet_node("n1", [[("1g.24gb", 0, True)]], model=RTX_PRO_6000, scale=3)]
    (option,) = _place(nodes, memory_gib=20).options
    assert (option.action, option.profile, option.placement_start) == ("create", "1g.24gb", 3)
    assert option.placement_size == 3
    assert "-cgi 1g.24gb:3 -C" in option.steps[0]


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ({}, "$.memory_gib"),
        ({"memory_gib": 4, "profile": "1g.10gb"}, "$.profile"),
        ({"profile": "1g.10gb", "compute_slices": 2}, "$.compute_slices"),
        ({"profile": "1g.10gb", "whole_gpu": True}, "$.whole_gpu"),
        ({"profile": "1g.10g"}, "$.profile"),
        ({"profile": "2g.47gb", "gpu": "h100-sxm5-80gb"}, "$.profile"),
        ({"memory_gib": 4, "gpu": "h2000"}, "$.gpu"),
        ({"memory_gib": 4, "gpu": "l40s"}, "$.gpu"),
    ],
)
def test_bad_queries_name_the_field(query: dict[str, object], path: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_placement(msgspec.convert(query, PlacementQuery), CATALOG, location="query")
    assert caught.value.errors[0][0] == path
    assert caught.value.location == "query"


def test_a_whole_gpu_of_any_model() -> None:
    query = PlacementQuery(memory_gib=30, gpu="l40s", whole_gpu=True)
    assert check_placement(query, CATALOG).model == "l40s-48gb"


# -- against brute force ---------------------------------------------------------------


def _random_layout(rng: random.Random, model: str) -> list[tuple[str, int, bool]]:
    table = table_of(model)
    pairs = [(p.name, s) for p in table.profiles for s in p.placements]
    rng.shuffle(pairs)
    names = [p.name for p in table.profiles]
    counts = [0] * len(names)
    occupied = 0
    layout = []
    for name, start in pairs[: rng.choice([1, 3, 6, len(pairs)])]:
        row = table.profiles[names.index(name)]
        mask = ((1 << row.memory_slices) - 1) << start
        counts[names.index(name)] += 1
        if occupied & mask or count_violations(table, counts):
            counts[names.index(name)] -= 1
            continue
        occupied |= mask
        layout.append((name, start, rng.random() < 0.6))
    return sorted(layout, key=lambda g: g[1])


def _brute_keys(
    model: str, gpus: Sequence[Layout | str], query: PlacementQuery
) -> dict[int, tuple[int, int, int, int]]:
    """Per GPU: the least (tier, drained, MIG mode change, idle destroyed) of every way
    to place the workload, by trying them all."""
    table = table_of(model)
    spec = CATALOG.get(model)
    need = 0 if query.memory_gib is None else math.ceil(query.memory_gib * GiB)
    compute = query.compute_slices or 1
    if query.profile is not None:
        wanted = [p for p in table.profiles if p.name == query.profile]
    else:
        wanted = [
            p
            for p in table.profiles
            if "+" not in p.name and "-" not in p.name
            and p.memory_bytes >= need and p.compute_slices >= compute
        ]  # fmt: skip
    best: dict[int, tuple[int, int, int, int]] = {}
    for index, gpu in enumerate(gpus):
        keys = []
        if gpu == "free":
            if query.whole_gpu and (spec.usable_memory_bytes or 0) - 2**29 >= need:
                keys.append((0, 0, 0, 0))
            if wanted:
                keys.append((2, 0, 1, 0))
        elif not isinstance(gpu, str):
            for name, _, in_use in gpu:
                row = next(p for p in table.profiles if p.name == name)
                fits = (
                    name == query.profile
                    if query.profile is not None
                    else row.memory_bytes >= need and row.compute_slices >= compute
                )
                if fits and not in_use:
                    keys.append((0, 0, 0, 0))
            for r in range(len(gpu) + 1):
                for gone in combinations(range(len(gpu)), r):
                    kept = [g for i, g in enumerate(gpu) if i not in gone]
                    drained = sum(1 for i in gone if gpu[i][2])
                    idle = len(gone) - drained
                    tier = 3 if drained else 2 if idle else 1
                    for row in wanted:
                        for start in row.placements:
                            layout = [LayoutInstance(profile=n, start=s) for n, s, _ in kept]
                            layout.append(LayoutInstance(profile=row.name, start=start))
                            request = ValidateRequest(gpu=spec.id, instances=layout)
                            if validate(request, CATALOG).valid:
                                keys.append((tier, drained, 0, idle))
        if keys:
            best[index] = min(keys)
    return best


def _key(o: PlacementOption) -> tuple[int, int, int, int]:
    return (TIER[o.disruption], o.drained, 1 if o.action == "enable-mig" else 0, o.destroyed)


@pytest.mark.parametrize("seed", range(60))
def test_exact_against_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    model = rng.choice([H100, H100, A30, RTX_PRO_6000])
    gpus: list[Layout | str] = [
        rng.choice(["free", "busy"]) if rng.random() < 0.2 else _random_layout(rng, model)
        for _ in range(rng.randint(1, 3))
    ]
    names = [p.name for p in table_of(model).profiles]
    if rng.random() < 0.3:
        query = PlacementQuery(profile=rng.choice(names))
    else:
        query = PlacementQuery(
            memory_gib=rng.choice([3, 5, 9, 10, 15, 19, 20, 30, 39, 45, 70]),
            compute_slices=rng.choice([None, 1, 2, 3, 4]),
            whole_gpu=rng.random() < 0.3,
        )
    query = msgspec.structs.replace(query, limit=100)
    node = fleet_node("n1", gpus, model=model)
    answer = place(query, [node], CATALOG)
    brute = _brute_keys(model, gpus, query)
    if not brute:
        assert answer.options == []
        return
    least = min(brute.values())
    assert answer.options, (gpus, query)
    assert _key(answer.options[0]) == least, (gpus, query)
    # Every GPU offers its own least disruptive option, and drains only when the whole
    # fleet has nothing better.
    offered = {o.gpu_index: _key(o) for o in answer.options}
    expected = {i: k for i, k in brute.items() if least[0] == 3 or k[0] < 3}
    assert offered == expected, (gpus, query)
    for o in answer.options:
        _check_option(o, gpus[o.gpu_index], model)


def _check_option(o: PlacementOption, gpu: Layout | str, model: str) -> None:
    """The option's layout after is valid, keeps every instance in use unless it drains,
    and its counts say what it destroys."""
    if isinstance(gpu, str):
        return
    in_use = {(n, s) for n, s, used in gpu if used}
    destroyed_in_use = {(d.profile, d.placement_start) for d in o.destroy if d.in_use}
    assert o.drained == len(destroyed_in_use)
    assert o.destroyed == len(o.destroy) - o.drained
    if o.disruption != "drain":
        assert not destroyed_in_use
    kept = {(i.profile, i.placement_start) for i in o.layout_after if i.in_use}
    assert kept == in_use - destroyed_in_use
    layout = [LayoutInstance(profile=i.profile, start=i.placement_start) for i in o.layout_after]
    if layout:
        assert validate(ValidateRequest(gpu=model, instances=layout), CATALOG).valid
