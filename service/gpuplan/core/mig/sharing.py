"""The tier below MIG: workloads that share a MIG instance or a whole GPU.

A workload whose ``sharing`` is ``time-slicing`` (or ``auto`` and smaller than the
GPU's smallest plain profile) becomes a *client* of a host MIG instance that NVIDIA's
device plugin advertises as ``replicas`` copies; one that is ``mps`` becomes an MPS
client of a whole GPU with MIG disabled. What the device plugin allows fixes the shape
(NVIDIA/k8s-device-plugin v0.20.0, commit 1b826acc6af3079d8923bac395c3124b8861a9a6):

- MPS is refused on MIG devices (``internal/plugin/mps.go``: "sharing using MPS is not
  supported for MIG devices"; README: "Sharing with MPS is currently not supported on
  devices with MIG enabled"), and with ``--mig-strategy=mixed``
  (``cmd/nvidia-device-plugin/main.go``: "using --mig-strategy=mixed is not supported
  with MPS"). So MPS hosts are whole GPUs on nodes of their own.
- Time-slicing replicates any resource of the mixed strategy (README: "the only
  supported resource available for time-slicing are nvidia.com/gpu as well as any of
  the resource types that emerge from configuring a node with the mixed MIG strategy"),
  one ``replicas`` count per resource name, and "the same sharing method is applied to
  all GPUs on a node. You cannot configure sharing on a per-GPU basis" (README); the
  ``devices`` field of a sharing resource is ignored (``api/config/v1/replicas.go``:
  "Customizing the 'devices' field in sharing.%s.resources is not yet supported").
  So every instance of a host profile on such a node is replicated: the planner keeps
  host profiles (those with 2+ replicas) away from the workloads that run alone.
- MPS splits memory and SMs equally: the daemon sets each device's default pinned
  memory limit to ``totalMemory/replicas`` in MiB and the default active-thread
  percentage to ``100/replicas`` (``cmd/mps-control-daemon/mps/daemon.go``,
  ``perDevicePinnedDeviceMemoryLimits``, ``activeThreadPercentage``).

The shared workloads are replaced in the request by *host workloads* (one per host
profile, naming it), which the MIG planner packs beside the other workloads' instances.
:mod:`gpuplan.core.mig.sharing_pack` picks the hosts.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.mig.demand import GiB, is_plain
from gpuplan.core.mig.errors import MigInputError
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.mig.schema import (
    HamiRequest,
    KaiRequest,
    MigWorkload,
    PartitionRequest,
    SharedClients,
    SharedHostGroup,
    SharedMode,
    SharedWorkload,
    SharingPlan,
    TierIsolation,
    Unplaced,
)
from gpuplan.core.mig.sharing_pack import HostKind, pack_clients
from gpuplan.core.mig.tables import find_profile, resource_name

MiB = 2**20
WHOLE_GPU_RESOURCE = "nvidia.com/gpu"

_MPS_DOC = (
    "NVIDIA Multi-Process Service docs (docs.nvidia.com/deploy/mps): Volta MPS, error "
    "containment, environment variables CUDA_MPS_PINNED_DEVICE_MEM_LIMIT and "
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
)
_MIG_DOC = "NVIDIA MIG User Guide RN-08625-v2.0 (August 2024), 5.3 CUDA Concurrency Mechanisms"
_PLUGIN = (
    "NVIDIA/k8s-device-plugin v0.20.0 README.md, commit 1b826acc6af3079d8923bac395c3124b8861a9a6"
)

ISOLATION = (
    TierIsolation(
        tier="mig",
        memory="isolated: each GPU instance has its own memory slices and capacity",
        faults="isolated: a fault in one GPU instance does not reach the others",
        bandwidth="isolated: each GPU instance has its own L2 slices and memory controllers",
        compute="isolated: each GPU instance has its own SMs (its compute slices)",
        sources=[_MIG_DOC],
    ),
    TierIsolation(
        tier="mps",
        memory=(
            "capped, not partitioned: each client has its own address space (Volta and "
            "newer) and a pinned-memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)"
        ),
        faults=(
            "shared: a fatal fault in one client reaches every client sharing the GPU, and "
            "the server takes no new clients there until they have all exited (before "
            "Volta the clients also share one address space)"
        ),
        bandwidth="shared: clients contend for L2 and DRAM bandwidth",
        compute=(
            "capped: a client uses at most its active-thread percentage of the SMs "
            "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), a limit, not a reservation"
        ),
        sources=[_MPS_DOC, _PLUGIN],
    ),
    TierIsolation(
        tier="time-slicing",
        memory="none: every replica sees the whole instance's memory; the plan's limit is advice",
        faults="shared: the replicas run in one fault domain (if one crashes, they all do)",
        bandwidth="shared, in time: one context runs at a time",
        compute="time only: contexts take turns on all the instance's SMs",
        sources=[_PLUGIN],
    ),
)
"""What each tier isolates, from NVIDIA's words (docs/mig.md, Sharing below MIG)."""


@dataclass
class Split:
    """A request with its shared workloads replaced by host workloads, and the plan of the
    tier below MIG."""

    request: PartitionRequest
    reserved: frozenset[int]
    """Host profiles the device plugin replicates: no workload runs alone on them."""
    plan: SharingPlan | None
    unplaced: list[Unplaced]


@dataclass(frozen=True)
class _Client:
    index: int
    name: str
    count: int
    need_bytes: int


def _mode(table: MigGpu, w: MigWorkload, path: str) -> SharedMode | None:
    """The tier the workload goes to (None: a MIG instance of its own)."""
    if w.sharing == "none":
        return None
    if w.memory_gib is None:
        raise MigInputError(
            f"{path}.sharing", f"`{w.sharing}` sharing needs `memory_gib`, not a `profile`"
        )
    if w.compute_slices is not None:
        raise MigInputError(
            f"{path}.compute_slices",
            "a shared workload takes a share of its host's SMs; drop `compute_slices` "
            "or set `sharing` to `none`",
        )
    if w.sharing != "auto":
        return w.sharing
    smallest = min(p.memory_bytes for p in table.profiles if is_plain(p.name))
    return "time-slicing" if math.ceil(w.memory_gib * GiB) < smallest else None


def _eligible(table: MigGpu, w: MigWorkload) -> frozenset[int]:
    """Plain profiles a memory-given workload that runs alone could take."""
    assert w.memory_gib is not None
    need = math.ceil(w.memory_gib * GiB)
    return frozenset(
        k
        for k, p in enumerate(table.profiles)
        if is_plain(p.name)
        and p.memory_bytes >= need
        and p.compute_slices >= (w.compute_slices or 1)
    )


def _unique(name: str, taken: set[str]) -> str:
    out, n = name, 1
    while out in taken:
        n += 1
        out = f"{name}-{n}"
    taken.add(out)
    return out


def split(table: MigGpu, spec: GpuSpec, request: PartitionRequest) -> Split:
    """Take the shared workloads out of ``request`` and put host workloads in their place."""
    alone: list[MigWorkload] = []
    sliced: list[_Client] = []
    mps: list[_Client] = []
    names: set[str] = set()
    for i, w in enumerate(request.workloads):
        if w.name in names:
            raise MigInputError(f"$.workloads[{i}].name", f"workload name `{w.name}` is used twice")
        names.add(w.name)
        mode = _mode(table, w, f"$.workloads[{i}]")
        if mode is None:
            alone.append(w)
            continue
        assert w.memory_gib is not None
        client = _Client(i, w.name, w.count, math.ceil(w.memory_gib * GiB))
        (mps if mode == "mps" else sliced).append(client)
    if not sliced and not mps:
        return Split(request, frozenset(), None, [])
    unplaced: list[Unplaced] = []
    # Instances in use keep their profile, and a replicated profile would share them too.
    in_use = [i.profile for g in request.current or [] for i in g.instances if i.in_use]
    groups, reserved, optimal = _time_sliced(table, alone, in_use, sliced, unplaced)
    mps_group = _mps(spec, mps, unplaced)
    taken = {w.name for w in request.workloads}
    hosts_out: list[SharedHostGroup] = []
    workloads_out: list[SharedWorkload] = []
    host_workloads: list[MigWorkload] = []
    for profile, replicas, count, served in groups:
        p = table.profiles[profile]
        name = _unique(f"time-sliced-{p.name}", taken)
        host_workloads.append(MigWorkload(name=name, count=count, profile=p.name))
        group = SharedHostGroup(
            mode="time-slicing",
            profile=p.name,
            host_workload=name,
            resource=resource_name(p.name),
            hosts=count,
            replicas=replicas,
            memory_bytes=p.memory_bytes,
            client_memory_limit_bytes=p.memory_bytes // replicas,
            active_thread_percentage=None,
            clients=[SharedClients(c.name, n) for c, n in served],
        )
        hosts_out.append(group)
        share = p.compute_slices / table.compute_slices
        workloads_out.extend(
            _workload(group, c, n, share, spec.usable_memory_bytes) for c, n in served
        )
    if mps_group is not None:
        group, served = mps_group
        hosts_out.append(group)
        workloads_out.extend(
            _workload(group, c, n, 1.0, spec.usable_memory_bytes) for c, n in served
        )
    notes = []
    if mps_group is not None:
        notes.append(
            f"MPS clients take {mps_group[0].hosts} whole GPU(s) with MIG disabled, beside the "
            "plan's MIG GPUs (`gpus_used`): the device plugin refuses MPS on MIG devices and "
            "with migStrategy mixed, so they go on nodes of their own"
        )
    if groups:
        notes.append(
            "time-slicing replicates every instance of a host profile on a node with the "
            "sharing config, so no workload that runs alone is given a host profile"
        )
    plan = SharingPlan(
        hosts=hosts_out,
        workloads=workloads_out,
        whole_gpus=mps_group[0].hosts if mps_group is not None else 0,
        host_slices_optimal=optimal,
        isolation=list(ISOLATION),
        notes=notes,
    )
    rewritten = msgspec.structs.replace(request, workloads=[*alone, *host_workloads])
    return Split(rewritten, reserved, plan, unplaced)


def _time_sliced(
    table: MigGpu,
    alone: Sequence[MigWorkload],
    in_use: Sequence[str],
    clients: Sequence[_Client],
    unplaced: list[Unplaced],
) -> tuple[list[tuple[int, int, int, list[tuple[_Client, int]]]], frozenset[int], bool]:
    """Host groups ``(profile, replicas, hosts, clients)``, the replicated profiles, and
    whether the hosts are proven fewest.

    Host profiles are plain ones no lone workload names and no instance in use has
    (``in_use``: profiles of ``current``); when replicating a profile
    would leave a lone workload without one, that profile is taken out and the hosts
    are picked again (at most once per profile).
    """
    if not clients:
        return [], frozenset(), True
    named = {find_profile(table, w.profile) for w in alone if w.profile is not None}
    named |= {find_profile(table, ref) for ref in in_use}
    needs = [_eligible(table, w) for w in alone if w.memory_gib is not None]
    largest = max(p.memory_bytes for p in table.profiles if is_plain(p.name))
    fits = []
    for c in clients:
        if c.need_bytes > largest:
            unplaced.append(
                Unplaced(
                    c.name,
                    c.count,
                    f"needs {c.need_bytes / GiB:.2f} GiB; the largest profile holds "
                    f"{largest / GiB:.2f} GiB usable, so it cannot share one",
                )
            )
        else:
            fits.append(c)
    if not fits:
        return [], frozenset(), True
    banned = {k for k in named if k is not None}
    while True:
        kinds = [
            HostKind(k, p.memory_bytes, p.memory_slices, p.compute_slices)
            for k, p in enumerate(table.profiles)
            if is_plain(p.name) and k not in banned
        ]
        packing = pack_clients(kinds, [c.need_bytes for c in fits], [c.count for c in fits])
        if packing is None:
            # Only a banned profile was big enough: give up sharing for them.
            for c in fits:
                unplaced.append(
                    Unplaced(
                        c.name,
                        c.count,
                        "every profile large enough to host it serves a workload that runs alone",
                    )
                )
            return [], frozenset(), True
        reserved = frozenset(g.profile for g in packing.groups if g.replicas >= 2)
        starved = [e & reserved for e in needs if e and e <= reserved]
        if not starved:
            break
        banned |= set().union(*starved)
    groups = [
        (g.profile, g.replicas, g.hosts, [(fits[i], n) for i, n in g.clients])
        for g in packing.groups
    ]
    return groups, reserved, packing.proven_optimal


def _mps(
    spec: GpuSpec, clients: Sequence[_Client], unplaced: list[Unplaced]
) -> tuple[SharedHostGroup, list[tuple[_Client, int]]] | None:
    """Whole GPUs as MPS hosts: one replica count for the MPS nodes' one config."""
    total = spec.usable_memory_bytes
    fits = []
    for c in clients:
        if c.need_bytes > total:
            unplaced.append(
                Unplaced(
                    c.name,
                    c.count,
                    f"needs {c.need_bytes / GiB:.2f} GiB; the whole GPU holds {total / GiB:.2f} GiB",
                )
            )
        else:
            fits.append(c)
    if not fits:
        return None
    # The daemon's limit is total/replicas in whole MiB: the largest client must fit it.
    replicas = _mps_replicas(total, max(c.need_bytes for c in fits))
    clients_n = sum(c.count for c in fits)
    group = SharedHostGroup(
        mode="mps",
        profile=None,
        host_workload=None,
        resource=WHOLE_GPU_RESOURCE,
        hosts=math.ceil(clients_n / replicas),
        replicas=replicas,
        memory_bytes=total,
        client_memory_limit_bytes=total // replicas // MiB * MiB,
        active_thread_percentage=100 // replicas,
        clients=[SharedClients(c.name, c.count) for c in fits],
    )
    return group, [(c, c.count) for c in fits]


def _mps_replicas(total: int, largest: int) -> int:
    """Most replicas whose MiB-rounded share still holds the largest client."""
    n = max(1, total // largest)
    while n > 1 and total // n // MiB * MiB < largest:
        n -= 1
    return n


def _workload(
    group: SharedHostGroup, c: _Client, count: int, share: float, gpu_bytes: int
) -> SharedWorkload:
    """One workload's requests and limits on a host group."""
    limit = group.client_memory_limit_bytes
    limit_mib = limit // MiB
    sm = max(1, math.floor(100 * share / group.replicas))
    env = {}
    if group.mode == "mps":
        env = {
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={limit_mib}M",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(group.active_thread_percentage),
        }
    return SharedWorkload(
        workload=c.name,
        mode=group.mode,
        count=count,
        profile=group.profile,
        resource=group.resource,
        replicas=group.replicas,
        memory_request_bytes=c.need_bytes,
        memory_limit_bytes=limit,
        sm_share_percent=sm,
        active_thread_percentage=group.active_thread_percentage,
        env=env,
        kai=KaiRequest(
            gpu_memory=str(limit_mib),
            gpu_fraction=f"{max(1, math.floor(100 * limit / gpu_bytes)) / 100:.2f}",
        ),
        hami=HamiRequest(gpu=1, gpumem=limit_mib, gpucores=sm),
    )
