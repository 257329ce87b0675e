"""The MIG slice query's core: fit on usable memory, best-fit order, filters and notes."""

import random
from typing import get_args

import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.fleet import CpuInfo, GpuTelemetry, MigInstance, NodeSnapshot
from gpuplan.core.mig import MigInputError, SlicesQuery, SlicesResponse, slices
from gpuplan.core.mig.schema import NodeName

GiB = 2**30
CATALOG = builtin_catalog()
H200 = "NVIDIA H200"
A100 = "NVIDIA A100-SXM4-80GB"


def mig(
    node: str,
    gpu: int,
    profile: str,
    start: int | None,
    memory_gib: float,
    *,
    in_use: bool = False,
    model: str = H200,
    gi: int | None = None,
    ci: int = 0,
    size: int = 1,
) -> MigInstance:
    gi_id = gi if gi is not None else (start or 0) + 1
    return MigInstance(
        node=node,
        gpu_index=gpu,
        gpu_uuid=f"GPU-{node}-{gpu}",
        gpu_model_name=model,
        mig_uuid=f"MIG-{node}-{gpu}-{gi_id}-{ci}",
        profile=profile,
        gpu_instance_id=gi_id,
        compute_instance_id=ci,
        placement_start=start,
        placement_size=None if start is None else size,
        memory_bytes=int(memory_gib * GiB),
        in_use=in_use,
    )


def node(name: str, *instances: MigInstance, lost: tuple[int, ...] = ()) -> NodeSnapshot:
    gpus = sorted({(m.gpu_index, m.gpu_model_name) for m in instances})
    return NodeSnapshot(
        node=name,
        ts=1.0,
        agent_version="test",
        vendor="nvidia",
        gpu_count=len(gpus),
        interval_seconds=10.0,
        ttl_seconds=30.0,
        cpu=CpuInfo(model_name="cpu", logical_cpus=1),
        gpus=[
            GpuTelemetry(index=i, uuid=f"GPU-{name}-{i}", model_name=model, up=i not in lost)
            for i, model in gpus
        ],
        mig_instances=list(instances),
    )


def nodes_of(*instances: MigInstance) -> list[NodeSnapshot]:
    """The nodes that hold ``instances``, in the order they first appear."""
    names = dict.fromkeys(m.node for m in instances)
    return [node(name, *(m for m in instances if m.node == name)) for name in names]


def ask(nodes: list[NodeSnapshot], **query: object) -> SlicesResponse:
    return slices(msgspec.convert(query, SlicesQuery), nodes, CATALOG)


def picked(answer: SlicesResponse) -> list[tuple[str, int, str, int | None]]:
    return [(s.node, s.gpu_index, s.profile, s.placement_start) for s in answer.slices]


def test_memory_is_matched_against_usable_memory_never_the_name() -> None:
    # H200 1g.18gb holds 16 GiB; A100 80GB 1g.10gb holds 9.5 GiB.
    fleet = nodes_of(
        mig("n1", 0, "1g.18gb", 6, 16.0),
        mig("n1", 0, "2g.35gb", 4, 31.5),
        mig("n1", 1, "1g.10gb", 6, 9.5, model=A100),
    )
    assert picked(ask(fleet, memory_gib=16)) == [("n1", 0, "1g.18gb", 6), ("n1", 0, "2g.35gb", 4)]
    assert picked(ask(fleet, memory_gib=17)) == [("n1", 0, "2g.35gb", 4)]
    assert picked(ask(fleet, memory_gib=18)) == [("n1", 0, "2g.35gb", 4)]
    ten = ask(fleet, memory_gib=10)
    assert ("n1", 1, "1g.10gb", 6) not in picked(ten)
    assert picked(ask(fleet, memory_gib=9.5))[0] == ("n1", 1, "1g.10gb", 6)
    # A fraction of a byte over is over: memory_gib is rounded up to whole bytes.
    assert ask(fleet, memory_gib=16.000000001).slices[0].profile == "2g.35gb"


def test_best_fit_least_memory_then_compute_then_node_gpu_start() -> None:
    fleet = nodes_of(
        mig("b", 0, "2g.35gb", 0, 31.5),
        mig("b", 0, "1g.35gb", 2, 31.5),
        mig("b", 0, "3g.71gb", 4, 69.25),
        mig("a", 1, "1g.35gb", 6, 31.5),
        mig("a", 1, "1g.35gb", 2, 31.5),
        mig("a", 0, "1g.35gb", 4, 31.5),
        mig("a", 0, "1g.18gb", 0, 16.0),
    )
    answer = ask(fleet, memory_gib=20)
    assert picked(answer) == [
        ("a", 0, "1g.35gb", 4),
        ("a", 1, "1g.35gb", 2),
        ("a", 1, "1g.35gb", 6),
        ("b", 0, "1g.35gb", 2),
        ("b", 0, "2g.35gb", 0),  # as much memory to spare, one compute slice more
        ("b", 0, "3g.71gb", 4),
    ]
    first = answer.slices[0]
    assert first.surplus_memory_bytes == int(31.5 * GiB) - 20 * GiB
    assert first.surplus_compute_slices == 0
    assert answer.slices[4].surplus_compute_slices == 1
    # Compute is a hard floor: two slices rule out every 1g.
    assert picked(ask(fleet, memory_gib=20, compute_slices=2)) == [
        ("b", 0, "2g.35gb", 0),
        ("b", 0, "3g.71gb", 4),
    ]
    # Memory before compute: across models a smaller instance can have more compute.
    mixed = nodes_of(
        mig("n1", 0, "1g.35gb", 0, 31.5),
        mig("n1", 1, "3g.20gb", 4, 19.625, model="NVIDIA A100-SXM4-40GB"),
    )
    assert picked(ask(mixed, memory_gib=10)) == [("n1", 1, "3g.20gb", 4), ("n1", 0, "1g.35gb", 0)]
    # Without memory_gib: every free instance, smallest first.
    assert ask(fleet).slices[0].profile == "1g.18gb"
    assert ask(fleet).matched == 7


def test_items_name_the_resource_the_model_and_unverified_facts() -> None:
    fleet = nodes_of(
        mig("n1", 0, "1g.18gb+me", 0, 16.0),
        mig("n1", 1, "3g.40gb", 4, 39.25, model=A100),
        mig("n1", 2, "2g.20gb", 0, 19.0, model="NVIDIA Future GPU"),
    )
    by_profile = {s.profile: s for s in ask(fleet).slices}
    me = by_profile["1g.18gb+me"]
    assert me.resource == "nvidia.com/mig-1g.18gb.me"
    assert me.catalog_id == "h200-sxm-141gb"
    assert me.unverified == ["placements"]  # H200 placements are assumed from A100/H100
    assert (me.compute_slices, me.placement_start, me.placement_size) == (1, 0, 1)
    a100 = by_profile["3g.40gb"]
    assert (a100.catalog_id, a100.resource, a100.unverified) == (
        "a100-sxm4-80gb",
        "nvidia.com/mig-3g.40gb",
        [],
    )
    unknown = by_profile["2g.20gb"]  # a model gpuplan does not know: compute from the name
    assert (unknown.catalog_id, unknown.unverified, unknown.compute_slices) == (None, None, 2)


def test_taken_lost_and_shared_instances_are_never_offered() -> None:
    fleet = node(
        "n1",
        mig("n1", 0, "3g.71gb", 0, 69.25, in_use=True),
        mig("n1", 0, "1g.18gb", 6, 16.0),
        mig("n1", 1, "7g.141gb", 0, 139.0),  # GPU 1 fell off the bus
        # two compute instances of one 3g GI share its memory
        mig("n1", 2, "3g.71gb", 4, 69.25, gi=2, ci=0),
        mig("n1", 2, "3g.71gb", 4, 69.25, gi=2, ci=1),
        mig("n1", 3, "weird", 0, 10.0, model="NVIDIA Future GPU"),
        lost=(1,),
    )
    answer = ask([fleet])
    assert picked(answer) == [("n1", 0, "1g.18gb", 6)]
    assert (answer.instances, answer.free, answer.matched) == (6, 5, 1)
    text = " ".join(answer.notes)
    assert "lost" in text
    assert "compute instance(s)" in text
    assert "no compute" in text


def test_gpu_and_node_filters() -> None:
    fleet = [
        node("a", mig("a", 0, "1g.18gb", 0, 16.0), mig("a", 1, "1g.10gb", 0, 9.5, model=A100)),
        node("b", mig("b", 0, "1g.18gb", 0, 16.0)),
    ]
    assert picked(ask(fleet, gpu="h200")) == [("a", 0, "1g.18gb", 0), ("b", 0, "1g.18gb", 0)]
    assert picked(ask(fleet, gpu="NVIDIA A100-SXM4-80GB")) == [("a", 1, "1g.10gb", 0)]
    assert picked(ask(fleet, gpu="a100-sxm4-40gb")) == []
    assert ask(fleet, gpu="a100-sxm4-40gb").notes == [
        "the live nodes publish no MIG instances of model `a100-sxm4-40gb`"
    ]
    assert picked(ask(fleet, node="b")) == [("b", 0, "1g.18gb", 0)]
    gone = ask(fleet, node="c")
    assert gone.slices == []
    assert "'c' is not live" in gone.notes[0]
    with pytest.raises(MigInputError) as unknown:
        ask(fleet, gpu="h9000")
    assert unknown.value.path == "$.gpu"
    assert unknown.value.location == "query"
    with pytest.raises(MigInputError) as no_mig:
        ask(fleet, gpu="l40s")
    assert no_mig.value.kind == "mig-unsupported"


def test_empty_answers_say_why() -> None:
    assert ask([]).notes == ["no live node in the fleet: no agent has published within its TTL"]
    bare = node("n1")
    assert ask([bare]).notes == ["the live nodes publish no MIG instances"]
    busy = node("n1", mig("n1", 0, "7g.141gb", 0, 139.0, in_use=True))
    assert ask([busy]).notes == ["all 1 MIG instances are in use"]
    small = node("n1", mig("n1", 0, "1g.18gb", 0, 16.0), mig("n1", 0, "2g.35gb", 2, 31.5))
    (note,) = ask([small], memory_gib=40, compute_slices=3).notes
    assert "40.00 GiB" in note
    assert "at most 31.50 GiB and 2 compute" in note


def test_limit_cuts_the_ranked_list_and_says_so() -> None:
    fleet = [node("n1", *(mig("n1", 0, "1g.18gb", s, 16.0) for s in range(7)))]
    answer = ask(fleet, memory_gib=1, limit=3)
    assert [s.placement_start for s in answer.slices] == [0, 1, 2]
    assert (answer.count, answer.matched) == (3, 7)
    assert answer.notes == ["4 more fit; raise `limit` (at most 1000)"]


def test_random_fleets_against_a_direct_reading_of_the_rules() -> None:
    """Every free fitting instance appears once, nothing else does, and the order never
    puts a worse fit first; shuffling the input changes nothing."""
    rng = random.Random(7)
    profiles = [("1g.18gb", 16.0), ("1g.35gb", 31.5), ("2g.35gb", 31.5), ("3g.71gb", 69.25),
                ("4g.71gb", 69.25), ("7g.141gb", 139.0), ("3g.20gb", 19.625), ("2g.10gb", 9.75)]  # fmt: skip
    for _ in range(50):
        fleet = []
        for n in range(rng.randint(0, 4)):
            name = f"node-{n}"
            items = [
                mig(name, rng.randint(0, 3), p, s, gib, in_use=rng.random() < 0.3, gi=10 * s + i)
                for i, ((p, gib), s) in enumerate(
                    (rng.choice(profiles), rng.randint(0, 7)) for _ in range(rng.randint(0, 8))
                )
            ]
            fleet.append(node(name, *items))
        memory = rng.choice([None, 1.0, 16.0, 16.5, 31.5, 40.0, 139.0, 200.0])
        compute = rng.randint(1, 7)
        query: dict[str, object] = {"compute_slices": compute, "limit": 1000}
        if memory is not None:
            query["memory_gib"] = memory
        answer = ask(fleet, **query)
        need = 0 if memory is None else int(memory * GiB)
        expected = {
            m.mig_uuid
            for nd in fleet
            for m in nd.mig_instances
            if not m.in_use and m.memory_bytes >= need and int(m.profile[0]) >= compute
        }
        assert [s.mig_uuid for s in answer.slices if s.mig_uuid in expected] == [
            s.mig_uuid for s in answer.slices
        ]
        assert {s.mig_uuid for s in answer.slices} == expected
        assert len(answer.slices) == len(expected)
        fits = [(s.memory_bytes - need, s.compute_slices - compute) for s in answer.slices]
        assert fits == sorted(fits)
        shuffled = [msgspec.structs.replace(nd, mig_instances=rng.sample(nd.mig_instances,
                    len(nd.mig_instances))) for nd in reversed(fleet)]  # fmt: skip
        assert ask(shuffled, **query) == answer


def test_node_name_bound_matches_the_fleet_schema() -> None:
    from gpuplan.fleet.schema import NODE_NAME

    meta = get_args(NodeName)[1]
    assert meta.pattern == NODE_NAME.pattern
