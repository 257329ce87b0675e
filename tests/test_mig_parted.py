"""Every nvidia-mig-parted config the planner emits, replayed through the port of mig-parted's
rules (tests/migparted_spec.py): it must parse, every config it names must be selectable, and
applying it on a node of the planned GPUs must give each GPU exactly its planned layout.

Plans cover every MIG-capable catalog GPU: one that places nothing, one that uses every
profile of the GPU's table (so `+me`, `-me`, `+me.all` and `+gfx` where the table has them)
over several GPUs, and an incremental one with `current`.
"""

from collections import Counter
from typing import Any

import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.mig import PartitionRequest, builtin_tables, partition
from tests.migparted_spec import (
    DeviceID,
    Spec,
    parse_device_id,
    parse_mig_profile,
    select_config,
    validate,
    walk,
)

CATALOG = builtin_catalog()
TABLES = builtin_tables()
MIG_GPUS = sorted(g.id for g in CATALOG if g.mig.supported)
FOREIGN = DeviceID(0x1EB8, 0x10DE)  # a T4: no device filter of a MIG GPU may match it


def table_of(gpu_id: str) -> Any:
    return next(t for t in TABLES if gpu_id in t.gpus)


def run(body: dict[str, Any]) -> Any:
    return partition(msgspec.convert(body, PartitionRequest), CATALOG)


def node_of(gpu_id: str, size: int) -> list[DeviceID]:
    """A node with ``size`` GPUs of this model (its first PCI id) and a foreign GPU last."""
    pci = int(CATALOG.get(gpu_id).pci_device_ids[0], 16)
    return [DeviceID(pci, 0x10DE)] * size + [FOREIGN]


def replay(gpu_id: str, response: Any) -> Spec:
    """Check the response's config as mig-parted reads and applies it; return the Spec."""
    spec = validate(response.mig_parted_config, strict=True)
    table = table_of(gpu_id)
    names = {p.name for p in table.profiles}
    pci = {int(d, 16) for d in CATALOG.get(gpu_id).pci_device_ids}
    for entries in spec.mig_configs.values():
        for entry in entries:
            assert entry.mig_enabled is True
            assert {parse_device_id(f).device for f in entry.filters()} == pci
            assert {parse_device_id(f).vendor for f in entry.filters()} == {0x10DE}
            for profile in entry.mig_devices or {}:
                assert profile in names, (gpu_id, profile)
                info = parse_mig_profile(profile)
                assert (info.g, info.c) == (info.g, info.g)  # one full-width CI per GI
    size = 1 + max((g.index for g in response.gpus), default=0)
    node = node_of(gpu_id, size)
    expected = {g.index: Counter(i.profile for i in g.instances) for g in response.gpus}
    # gpuplan-all: each GPU of the config gets its own layout, once; no other GPU is touched.
    applied = walk(select_config(spec, "gpuplan-all"), node)
    configured = {i for i, entries in applied.items() for _ in entries}
    assert len(node) - 1 not in applied  # the foreign GPU
    for index, entries in applied.items():
        assert len(entries) == 1, (gpu_id, index)
        assert Counter(entries[0].mig_devices) == expected[index]
    # Each named layout applies that layout to exactly its GPUs.
    by_name = {g.layout: g for g in response.gpus if g.index in configured}
    for name in set(spec.mig_configs) - {"gpuplan-all"}:
        assert name in by_name, (gpu_id, name)
        layout = walk(select_config(spec, name), node)
        for index, entries in layout.items():
            assert [response.gpus[[g.index for g in response.gpus].index(index)].layout] == [name]
            assert [Counter(e.mig_devices) for e in entries] == [expected[index]]
    return spec


@pytest.mark.parametrize("gpu_id", MIG_GPUS)
def test_a_plan_that_places_nothing_is_a_valid_no_op(gpu_id: str) -> None:
    response = run({"gpu": gpu_id, "workloads": [{"name": "huge", "memory_gib": 4096, "count": 3}]})
    assert response.gpus == []
    assert [u.workload for u in response.unplaced] == ["huge"]
    spec = replay(gpu_id, response)
    assert set(spec.mig_configs) == {"gpuplan-all"}
    assert walk(select_config(spec), node_of(gpu_id, 8)) == {}  # applying it changes nothing


@pytest.mark.parametrize("gpu_id", MIG_GPUS)
def test_a_plan_using_every_profile_over_several_gpus(gpu_id: str) -> None:
    table = table_of(gpu_id)
    workloads: list[dict[str, Any]] = [
        {"name": f"p{i}", "profile": p.name, "count": min(p.max_count, 3)}
        for i, p in enumerate(table.profiles)
    ]
    smallest = min(p.memory_bytes for p in table.profiles) / 2**30
    workloads.append({"name": "mem", "memory_gib": round(smallest / 2, 2), "count": 5})
    response = run({"gpu": gpu_id, "workloads": workloads})
    assert not response.unplaced
    assert len(response.gpus) >= 2
    used = {i.profile for g in response.gpus for i in g.instances}
    assert used >= {p.name for p in table.profiles}
    spec = replay(gpu_id, response)
    assert set(spec.mig_configs) == {g.layout for g in response.gpus} | {"gpuplan-all"}


@pytest.mark.parametrize("gpu_id", MIG_GPUS)
def test_an_incremental_plan_configures_only_whole_idle_gpus(gpu_id: str) -> None:
    table = table_of(gpu_id)
    # GPU 0 busy with one small GI in use, GPU 1 holding an idle one, GPU 2 empty; the new
    # work includes a full-GPU instance, which only an idle GPU can take.
    small = min(table.profiles, key=lambda p: (p.memory_slices, p.compute_slices, p.name))
    first = small.placements[0]
    current = [
        {"index": 0, "instances": [{"profile": small.name, "start": first, "in_use": True}]},
        {"index": 1, "instances": [{"profile": small.name, "start": first, "in_use": False}]},
        {"index": 2, "instances": []},
    ]
    full = next(p for p in table.profiles if p.memory_slices == table.memory_slices)
    workloads = [
        {"name": "new", "profile": small.name, "count": 2},
        {"name": "whole", "profile": full.name, "count": 1},
    ]
    response = run({"gpu": gpu_id, "workloads": workloads, "current": current})
    spec = replay(gpu_id, response)
    configured = {i for i in walk(select_config(spec, "gpuplan-all"), node_of(gpu_id, 3)) if i < 3}
    idle = {r.index for r in response.repartition if r.whole_gpu_idle}
    assert configured == idle
    assert 0 not in configured  # the busy GPU is never in mig-parted's config
    busy = next(g for g in response.gpus if g.index == 0)
    assert (small.name, first, True) in {(i.profile, i.start, i.in_use) for i in busy.instances}


def test_a_busy_fleet_with_nothing_to_repartition_writes_a_no_op() -> None:
    response = run({"gpu": "a100-sxm4-80gb", "workloads": [{"name": "x", "profile": "7g.80gb"}],
                    "current": [{"index": 0, "instances": [{"profile": "7g.80gb", "start": 0}]}]})  # fmt: skip
    assert [u.workload for u in response.unplaced] == ["x"]
    spec = replay("a100-sxm4-80gb", response)
    assert set(spec.mig_configs) == {"gpuplan-all"}
    assert spec.mig_configs["gpuplan-all"][0].devices == []
