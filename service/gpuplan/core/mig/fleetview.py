"""The live fleet as the MIG planner sees it: each GPU, its mode and its GPU instances.

Agents publish GPUs and MIG devices (one per compute instance) separately; a placement
question needs them joined: which GPUs are in MIG mode, which GPU instances each holds
(a GI is in use when any of its compute instances is), and where each sits in the MIG
table's slots. A GPU whose layout cannot be read as the table's (a placement the agent
could not read, a profile the table lacks, starts the table does not allow) keeps its
free instances, which need no layout, but is left out of anything that creates or
destroys one: gpuplan cannot say what would fit beside what it cannot place.

Placements arrive in NVML's units. On most tables they are the table's slots; NVML
prints RTX PRO 6000 placements three times larger (docs/mig.md), so each GPU's *scale*
is read from its own instances (placement size over the profile's memory slices) and
slots are NVML starts divided by it. A GPU with no instance has scale 1: its new
instance's start is then given in slots, and the first-fit creation lands it there.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuplan.core.catalog import Catalog
from gpuplan.core.fleet import GpuTelemetry, MigInstance, NodeSnapshot, find_spec
from gpuplan.core.mig.geometry import count_violations
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.mig.tables import find_profile

_COMPUTE_IN_NAME = re.compile(r"^(?:MIG )?([1-8])g\.", re.IGNORECASE)


@dataclass
class FleetGi:
    """One GPU instance of a live GPU, with its MIG devices (compute instances)."""

    gpu_instance_id: int
    profile: str
    """As the agent published it."""
    index: int | None
    """Its profile's index in the GPU's MIG table; None when the table lacks it."""
    start: int | None
    """NVML placement start (None when the agent could not read it)."""
    size: int | None
    memory_bytes: int
    in_use: bool
    mig_uuids: list[str]
    compute_slices: int | None
    """The table row's, else the ``Ng`` of the name; None when neither gives it."""
    slot: int | None = None
    """Start in the table's slots (set once the GPU's layout reads as the table's)."""

    @property
    def split(self) -> bool:
        """Several compute instances share this GI: none has its memory to itself."""
        return len(self.mig_uuids) > 1


@dataclass
class FleetGpu:
    """One live GPU as the planner sees it."""

    node: str
    index: int
    uuid: str
    model_name: str
    catalog_id: str | None
    table: MigGpu | None
    up: bool
    mig: bool | None
    """MIG mode: True when enabled (or instances exist), False when off, None unknown."""
    busy_whole: bool
    """Not in MIG mode and a process holds it (or the driver did not say)."""
    free_memory_bytes: int | None
    """Memory free for a workload on the whole GPU, as the driver reports it."""
    gis: list[FleetGi] = field(default_factory=list)
    scale: int = 1
    """NVML placement units per table slot."""
    scale_known: bool = False
    """Whether ``scale`` was read from the GPU's own instances (else 1 is assumed)."""
    layout_problem: str | None = None
    """Why the GIs cannot be read as a layout of the table (None: they can)."""

    @property
    def layout_known(self) -> bool:
        return self.table is not None and self.mig is True and self.layout_problem is None


def _compute(table: MigGpu | None, index: int | None, profile: str) -> int | None:
    if table is not None and index is not None:
        return table.profiles[index].compute_slices
    match = _COMPUTE_IN_NAME.match(profile.strip())
    return None if match is None else int(match[1])


def _gis(instances: Sequence[MigInstance], table: MigGpu | None) -> list[FleetGi]:
    by_id: dict[int, FleetGi] = {}
    for m in instances:
        gi = by_id.get(m.gpu_instance_id)
        if gi is None:
            index = None if table is None else find_profile(table, m.profile)
            by_id[m.gpu_instance_id] = FleetGi(
                gpu_instance_id=m.gpu_instance_id,
                profile=m.profile,
                index=index,
                start=m.placement_start,
                size=m.placement_size,
                memory_bytes=m.memory_bytes,
                in_use=m.in_use,
                mig_uuids=[m.mig_uuid],
                compute_slices=_compute(table, index, m.profile),
            )
        else:
            gi.in_use = gi.in_use or m.in_use
            gi.mig_uuids.append(m.mig_uuid)
    return sorted(by_id.values(), key=lambda g: (g.start is None, g.start or 0, g.gpu_instance_id))


@dataclass
class _Seen:
    """What one reading of the fleet already worked out: a fleet repeats its models and
    layouts, so each model is looked up, and each layout's counts checked, once."""

    models: dict[str, tuple[str | None, MigGpu | None]] = field(default_factory=dict)
    problems: dict[tuple[str, tuple[int, ...]], list[str]] = field(default_factory=dict)


def _read_layout(gpu: FleetGpu, seen: _Seen) -> None:
    """Set each GI's slot and the GPU's scale, or say why the layout cannot be read."""
    table = gpu.table
    assert table is not None
    scales = set()
    for gi in gpu.gis:
        if gi.index is None:
            gpu.layout_problem = f"profile `{gi.profile}` is not in MIG table `{table.id}`"
            return
        if gi.start is None or gi.size is None:
            gpu.layout_problem = "the agent could not read its instances' placements"
            return
        slices = table.profiles[gi.index].memory_slices
        if gi.size % slices or gi.size == 0:
            gpu.layout_problem = (
                f"`{gi.profile}` spans {gi.size} placement units, not a multiple of "
                f"its {slices} memory slice(s)"
            )
            return
        scales.add(gi.size // slices)
    if len(scales) > 1:
        gpu.layout_problem = "its instances' placements disagree on the unit of a slot"
        return
    gpu.scale = scales.pop() if scales else 1
    gpu.scale_known = bool(gpu.gis)
    occupied = 0
    counts = [0] * len(table.profiles)
    for gi in gpu.gis:
        assert gi.index is not None
        assert gi.start is not None
        profile = table.profiles[gi.index]
        if gi.start % gpu.scale or gi.start // gpu.scale not in profile.placements:
            gpu.layout_problem = (
                f"`{gi.profile}` starts at {gi.start}, not a start table `{table.id}` allows"
            )
            return
        gi.slot = gi.start // gpu.scale
        mask = ((1 << profile.memory_slices) - 1) << gi.slot
        if occupied & mask:
            gpu.layout_problem = "two of its instances overlap"
            return
        occupied |= mask
        counts[gi.index] += 1
    key = (table.id, tuple(counts))
    problems = seen.problems.get(key)
    if problems is None:
        problems = seen.problems[key] = count_violations(table, counts)
    if problems:
        gpu.layout_problem = f"its layout breaks table `{table.id}`'s rules: {problems[0]}"


def _gpu(
    node: NodeSnapshot,
    telemetry: GpuTelemetry,
    instances: Sequence[MigInstance],
    catalog: Catalog,
    tables: Sequence[MigGpu],
    *,
    seen: _Seen,
) -> FleetGpu:
    known = seen.models.get(telemetry.model_name)
    if known is None:
        spec = find_spec(catalog, telemetry.model_name)
        table = None if spec is None else next((t for t in tables if spec.id in t.gpus), None)
        known = seen.models[telemetry.model_name] = (None if spec is None else spec.id, table)
    catalog_id, table = known
    mig = True if instances else telemetry.mig_enabled
    if mig is None and table is None:
        mig = False  # a model without MIG (an AMD GPU reports no mode at all)
    free = telemetry.memory_free_bytes
    if free is None:
        free = telemetry.memory_total_bytes
    gpu = FleetGpu(
        node=node.node,
        index=telemetry.index,
        uuid=telemetry.uuid,
        model_name=telemetry.model_name,
        catalog_id=catalog_id,
        table=table,
        up=telemetry.up,
        mig=mig,
        busy_whole=mig is not True and telemetry.compute_processes != 0,
        free_memory_bytes=free,
        gis=_gis(instances, table),
    )
    if table is not None and mig is True:
        _read_layout(gpu, seen)
    return gpu


def fleet_gpus(
    nodes: Sequence[NodeSnapshot], catalog: Catalog, tables: Sequence[MigGpu]
) -> list[FleetGpu]:
    """Every GPU of ``nodes`` with its GIs, by node and GPU index.

    A MIG device whose GPU the node's hash does not list (its GPU hash expired between
    two reads) still counts, on a GPU known only from its instances.
    """
    out: list[FleetGpu] = []
    seen = _Seen()
    for node in nodes:
        by_gpu: dict[str, list[MigInstance]] = {}
        for m in node.mig_instances:
            by_gpu.setdefault(m.gpu_uuid, []).append(m)
        listed = {g.uuid for g in node.gpus}
        gpus = list(node.gpus)
        for uuid, members in by_gpu.items():
            if uuid not in listed:
                first = members[0]
                gpus.append(
                    GpuTelemetry(
                        index=first.gpu_index,
                        uuid=uuid,
                        model_name=first.gpu_model_name,
                        mig_enabled=True,
                    )
                )
        for telemetry in sorted(gpus, key=lambda g: (g.index, g.uuid)):
            members = by_gpu.get(telemetry.uuid, [])
            out.append(_gpu(node, telemetry, members, catalog, tables, seen=seen))
    return out
