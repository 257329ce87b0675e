"""Requests and responses of the MIG planner: one schema for the API, the CLI and OpenAPI.

Every list and count is bounded so that no request runs unbounded: at most
``MAX_WORKLOAD_ENTRIES`` workload entries and ``MAX_TOTAL_WORKLOADS`` workloads in
all (checked by the planner), ``MAX_GPUS`` GPUs.
"""

from typing import Annotated, Literal

import msgspec

from gpuplan.core.catalog.model import Source
from gpuplan.core.mig.model import Engines
from gpuplan.core.record import Record

MAX_WORKLOAD_ENTRIES = 1_000
MAX_TOTAL_WORKLOADS = 20_000
MAX_GPUS = 10_000
MAX_INSTANCES_PER_LAYOUT = 16

GpuName = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
ProfileRef = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
"""A profile name (``3g.40gb``, ``1g.10gb+me``); the Kubernetes forms
``nvidia.com/mig-1g.10gb.me`` and ``MIG 3g.40gb`` are accepted too."""
WorkloadName = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Slot = Annotated[int, msgspec.Meta(ge=0, le=7)]


# -- profiles ---------------------------------------------------------------------------


class ProfilesQuery(Record):
    gpu: GpuName
    """Catalog id, alias, NVML name, GFD label or PCI device id."""


class Placement(Record):
    """A valid placement of a profile: the run of memory slices a GPU instance created
    there occupies."""

    start: int
    """First memory slice."""
    size: int
    """Memory slices occupied."""


class ProfileInfo(Record, kw_only=True):
    """One GPU-instance profile of the GPU: its slices, usable memory, valid placements,
    engines and the sources of its figures."""

    name: str
    profile_id: int | None
    """nvidia-smi GI profile ID where a capture confirms it."""
    compute_slices: int
    memory_slices: int
    memory_bytes: int
    """Usable memory as the driver reports it; plan on this, not on the name."""
    max_count: int
    """Most GPU instances of this profile on one GPU."""
    placements: list[Placement]
    engines: Engines | None
    """Engines the GPU instance owns; null where no source gives them."""
    resource: str
    """Kubernetes resource name under the ``mixed`` strategy."""
    unverified: list[str]
    """Fields not confirmed on hardware."""
    sources: dict[str, list[Source]]
    """Field to the sources of its value (``memory_bytes``, ``placements``)."""


class ProfilesResponse(Record, kw_only=True):
    """A GPU's MIG geometry and every profile of it, as ``GET /v1/mig/profiles``
    answers."""

    gpu: str
    """Catalog id of the GPU."""
    name: str
    table: str
    """Id of the MIG table (GPUs of one geometry share it)."""
    memory_slices: int
    """Memory slices of the whole GPU."""
    compute_slices: int
    """Compute slices of the whole GPU."""
    max_instances: int
    """Most GPU instances on one GPU."""
    valid_layouts: int
    """Distinct valid multisets of profiles (placement-checked)."""
    unverified: bool
    """True when any profile has a field not confirmed on hardware."""
    profiles: list[ProfileInfo]
    sources: list[Source]
    """Where the profile rows (names, slices, engines, counts) come from."""


# -- validate -----------------------------------------------------------------------------


class LayoutInstance(Record):
    """One GPU instance of a layout to validate: its profile and, optionally, where it
    starts."""

    profile: ProfileRef
    start: Slot | None = None
    """Start slot; omit to let the planner place it."""


class ValidateRequest(Record):
    """One GPU's layout to check: the GPU model and the GPU instances (1 to 16) to put
    on it."""

    gpu: GpuName
    instances: Annotated[
        list[LayoutInstance], msgspec.Meta(min_length=1, max_length=MAX_INSTANCES_PER_LAYOUT)
    ]


LayoutProblemKind = Literal[
    "overlap",
    "no-such-placement",
    "too-many-of-profile",
    "too-many-instances",
    "compute",
    "engines",
    "no-placement",
    "stranded-compute",
]


class LayoutProblem(Record):
    """Why a layout is invalid (in ``reasons``), or what a valid one wastes
    (``stranded-compute``, in ``warnings``)."""

    kind: LayoutProblemKind
    detail: str
    instances: list[int] = []
    """Indices into the request's ``instances`` that the problem concerns."""


class PlacedInstance(Record):
    """A GPU instance of a profile at its place on the GPU."""

    profile: str
    start: int
    """First memory slice."""
    size: int
    """Memory slices occupied."""


class ValidateResponse(Record, kw_only=True):
    """Whether a layout is valid on the GPU and why not; for a valid one, a placement and
    the creation order that yields it."""

    gpu: str
    """Catalog id of the GPU."""
    valid: bool
    reasons: list[LayoutProblem]
    """Why the layout is invalid (empty when valid)."""
    warnings: list[LayoutProblem]
    """Valid but wasteful: ``stranded-compute`` (3g+3g leaves one compute slice unusable)."""
    placement: list[PlacedInstance] | None
    """A placement of the layout: the one asked for when every start was given and it
    is valid, else the canonical one (the first-fit result of ``creation_order``)."""
    creation_order: list[str] | None
    """Create the GIs in this order on an empty GPU and the driver's first-fit
    placement yields the canonical placement."""
    memory_slices_used: int
    compute_slices_used: int
    stranded_compute_slices: int
    """Compute slices no GPU instance can use without repartitioning (0 when the layout is
    invalid)."""
    unverified: list[str]
    """Profiles in the layout with fields not confirmed on hardware."""


# -- plan ------------------------------------------------------------------------------------


SharingMode = Literal["none", "auto", "mps", "time-slicing"]
"""Sharing below MIG: none, MPS clients of a whole GPU, or time-sliced replicas of a MIG
instance (``auto`` picks time-slicing for a workload below the smallest profile)."""


class MigWorkload(Record, kw_only=True):
    """``count`` instances of one workload to place, each on the named ``profile`` or on
    any plain profile whose usable memory and compute cover ``memory_gib`` and
    ``compute_slices``."""

    name: WorkloadName
    """Unique within the request; the answer names the instances it gets by it."""
    count: Annotated[int, msgspec.Meta(ge=1, le=MAX_TOTAL_WORKLOADS)] = 1
    profile: ProfileRef | None = None
    """Run on exactly this profile; or give ``memory_gib`` (and ``compute_slices``)."""
    memory_gib: Annotated[float, msgspec.Meta(gt=0, le=4096)] | None = None
    """Memory the workload needs, in GiB, matched against each profile's usable memory."""
    compute_slices: Annotated[int, msgspec.Meta(ge=1, le=8)] | None = None
    """Compute slices it needs (default 1); only with ``memory_gib``."""
    sharing: SharingMode = "none"
    """How its instances share a GPU with other workloads' (docs/mig.md, Sharing below
    MIG): ``none`` (each gets a MIG instance of its own, the default); ``time-slicing``
    (a time-sliced replica of a MIG instance other clients share, as NVIDIA's device
    plugin's ``sharing.timeSlicing`` hands them out); ``mps`` (an MPS client of a whole GPU
    with MIG disabled, its memory and SMs capped as the device plugin's ``sharing.mps``
    caps them; the device plugin refuses MPS on MIG devices); ``auto`` (``time-slicing``
    when ``memory_gib`` is below the usable memory of the GPU's smallest plain profile,
    else ``none``). Any value but ``none`` needs ``memory_gib`` and no ``compute_slices``."""


class CurrentInstance(Record, kw_only=True):
    """A GPU instance that exists now on a GPU of ``current``."""

    profile: ProfileRef
    start: Slot
    """First memory slice, in the MIG table's slots (a profile's ``placements``)."""
    in_use: bool = True
    """An instance in use is never moved or destroyed."""
    workload: WorkloadName | None = None


class CurrentGpu(Record, kw_only=True):
    """One GPU of the fleet as it is now, with its GPU instances; a GPU with no
    instance in use may be repartitioned whole."""

    index: Annotated[int, msgspec.Meta(ge=0, le=MAX_GPUS)]
    """The GPU's index, unique within ``current``; the answer's ``gpus`` and
    ``repartition`` name the GPU by it."""
    instances: Annotated[list[CurrentInstance], msgspec.Meta(max_length=8)] = []


PlanOutput = Literal["mig-parted", "dra", "device-plugin"]
"""What a partition answer carries to apply it: the nvidia-mig-parted config
(``mig-parted``), ResourceClaim(Template)s for NVIDIA's DRA driver (``dra``), or the
extended-resource names NVIDIA's device plugin exposes under each MIG strategy
(``device-plugin``)."""


class PartitionRequest(Record, kw_only=True):
    """Workloads to pack onto the fewest MIG-partitioned GPUs of one model, afresh or
    around the instances a fleet runs now (``current``)."""

    gpu: GpuName
    workloads: Annotated[
        list[MigWorkload], msgspec.Meta(min_length=1, max_length=MAX_WORKLOAD_ENTRIES)
    ]
    max_gpus: Annotated[int, msgspec.Meta(ge=1, le=MAX_GPUS)] | None = None
    """Most GPUs to use; workloads beyond them are reported in ``unplaced``."""
    current: Annotated[list[CurrentGpu], msgspec.Meta(max_length=MAX_GPUS)] | None = None
    """The fleet as it is: plan incrementally on these GPUs, keeping in-use instances."""
    output: Annotated[tuple[PlanOutput, ...], msgspec.Meta(max_length=3)] = ("mig-parted",)
    """What the answer carries to apply the plan, each at most once: ``mig-parted`` (the
    nvidia-mig-parted config that creates the layouts: GPU Operator, or DRA without
    DynamicMIG), ``dra`` (a ``resource.k8s.io/v1`` ResourceClaimTemplate per workload for
    NVIDIA's DRA driver, and a ResourceClaim per shared host), ``device-plugin`` (the resource names of NVIDIA's device plugin
    under ``migStrategy`` single and mixed). ``resources`` and ``single_strategy`` are
    always there; ``[]`` answers the placements alone."""


class PartitionInstance(Record, kw_only=True):
    """One GPU instance of a planned GPU and the workload it serves."""

    profile: str
    start: int
    """First memory slice."""
    size: int
    """Memory slices occupied."""
    workload: str | None
    """Null when it serves no workload."""
    memory_bytes: int
    """Usable memory of the profile as the driver reports it."""
    compute_slices: int
    in_use: bool = False
    """Already running (incremental plans only)."""


class PartitionGpu(Record, kw_only=True):
    """One GPU of the plan: its layout and its GPU instances by start slot."""

    index: int
    """Plan index (0, 1, …); in an incremental plan, the index the GPU has in
    ``current``."""
    layout: str
    """Name of the GPU's layout (``gpuplan-layout-N``). It names an entry of
    ``mig_parted_config`` when the plan partitions the GPU whole; in an incremental plan,
    a GPU changed in place (see ``repartition``) or left as it is has no entry there."""
    instances: list[PartitionInstance]
    creation_order: list[str] | None
    """Profiles in the order to create them on a cleared GPU so that the driver's first-fit
    placement puts them at these starts; null for a GPU an incremental plan does not
    repartition whole (its changes are in ``repartition``)."""
    stranded_compute_slices: int


class Unplaced(Record):
    """Instances of a workload the plan leaves out, and why: no profile covers its
    demand, ``max_gpus`` is reached, or (incremental plans) no idle GPU is left."""

    workload: str
    count: int
    """Instances of the workload left out."""
    reason: str


class Utilization(Record, kw_only=True):
    """Memory and compute slices the plan's GPU instances take, of the total of the GPUs
    it uses."""

    memory_slices_used: int
    memory_slices_total: int
    compute_slices_used: int
    compute_slices_total: int
    compute_slices_stranded: int
    """Compute slices no GI can use without repartitioning (3g+3g strands one)."""


class Resource(Record):
    """The Kubernetes resource a workload's instances on one profile request; a workload
    placed on two profiles has one entry per profile."""

    workload: str
    profile: str
    resource: str
    """Under the device plugin's ``mixed`` strategy: ``nvidia.com/mig-3g.40gb``."""
    count: int
    """Instances of the workload on this profile."""


class SingleStrategy(Record, kw_only=True):
    """Whether the device plugin's ``migStrategy: single`` can serve the plan and, if
    not, the one profile that could."""

    possible: bool
    """Whether every GPU of the plan carries one profile type (``migStrategy: single``)."""
    reason: str
    alternative_profile: str | None = None
    """When the plan mixes profiles but one profile serves every workload: that
    profile, the one needing the fewest GPUs."""
    alternative_gpus: int | None = None
    """GPUs a plan with only ``alternative_profile`` needs."""


class Repartition(Record, kw_only=True):
    """A GPU of ``current`` whose layout an incremental plan changes: the GPU instances to
    create and to destroy."""

    index: int
    create: list[PlacedInstance]
    """On a GPU with instances in use, in an order whose first-fit placement lands them
    at their starts (when one exists); on a whole idle GPU, by start (its
    ``creation_order`` in ``gpus`` gives the order)."""
    destroy: list[PlacedInstance]
    """Idle instances removed to make room (never an in-use one)."""
    whole_gpu_idle: bool
    """True when no instance is in use, so mig-parted may re-apply the whole GPU."""


MigStrategy = Literal["single", "mixed"]


class DevicePluginResource(Record, kw_only=True):
    """The extended resource a workload's pods request for its instances on one profile,
    under each ``migStrategy`` of NVIDIA's device plugin (one pod, one MIG device)."""

    workload: str
    profile: str
    count: int
    """Instances of the workload on this profile: pods requesting one each."""
    mixed: str
    """Under ``migStrategy: mixed``: ``nvidia.com/mig-<profile>``, ``+`` written ``.``."""
    single: str | None
    """Under ``migStrategy: single``: ``nvidia.com/gpu``; null when the plan mixes
    profiles, which ``single`` cannot serve."""


class DevicePluginSharingConfig(Record, kw_only=True):
    """One named config file of NVIDIA's device plugin that shares the plan's hosts. The
    plugin applies sharing to every GPU of a node alike, so each config is for the nodes
    whose GPUs it names: label them ``nvidia.com/device-plugin.config=<name>``."""

    name: str
    """Config name: a key of the plugin's config map and the node label's value."""
    applies_to: str
    """Which nodes take it, in words."""
    config: str
    """The plugin's ``version: v1`` config file (YAML): its ``flags.migStrategy`` and
    ``sharing`` (``timeSlicing`` or ``mps``) with a ``replicas`` count per resource."""


class DevicePluginOutput(Record, kw_only=True):
    """What NVIDIA's device plugin (and GPU Feature Discovery) need to serve the plan."""

    strategy: MigStrategy
    """The ``migStrategy`` to set: ``single`` when every GPU of the plan carries one
    profile (then each pod asks ``nvidia.com/gpu``), else ``mixed``."""
    resources: list[DevicePluginResource]
    sharing: list[DevicePluginSharingConfig] = []
    """Config files that share the plan's hosts (time-slicing on MIG nodes, MPS on nodes
    with MIG disabled); empty when no workload shares."""


class DraDeviceClass(Record, kw_only=True):
    """A DeviceClass NVIDIA's DRA driver installs, and the devices it selects."""

    name: str
    selects: str
    """What its CEL selector admits, in words."""
    expression: str
    """Its CEL selector, as the driver's Helm chart writes it."""


class DraClaimTemplate(Record, kw_only=True):
    """One ResourceClaimTemplate of the answer: each pod of the workload that names it
    gets a claim for one MIG device of the planned profile on the planned GPU model."""

    name: str
    """``metadata.name``: the workload's name as a DNS label, with the profile appended
    when the workload's instances use more than one profile."""
    workload: str
    profile: str
    pods: int
    """Instances of the workload on this profile: pods to run with this template."""
    request: str
    """Name of the template's one device request (a container's ``resources.claims``
    may name it)."""
    device_class_name: str
    """``mig.nvidia.com``."""
    selector: str
    """The CEL expression that picks the profile on this GPU model, by the driver's
    ``productName`` and ``profile`` device attributes."""


SharedMode = Literal["mps", "time-slicing"]


class SharedClients(Record):
    """Clients of one workload on a host group."""

    workload: str
    count: int


class DraSharedClaim(Record, kw_only=True):
    """One ResourceClaim of the answer: one host of the tier below MIG (a MIG device that
    time-slicing shares, or a whole GPU that MPS shares), which every client pod names in
    ``spec.resourceClaims[].resourceClaimName`` so that they all get the same device."""

    name: str
    """``metadata.name``: the host workload's name (``mps-gpu`` for MPS) and the host's
    number, as a DNS label."""
    mode: SharedMode
    profile: str | None
    """The host's MIG profile; null for a whole GPU (MPS)."""
    request: str
    """Name of the claim's one device request."""
    device_class_name: str
    """``mig.nvidia.com`` for a MIG host, ``gpu.nvidia.com`` for a whole GPU."""
    selector: str | None
    """CEL over the driver's ``productName`` (and ``profile``) attributes; null when the
    catalog knows no NVML name for a whole GPU (any GPU then)."""
    config_kind: str
    """Kind of the driver's opaque config: ``MigDeviceConfig`` or ``GpuConfig``
    (``resource.nvidia.com/v1beta1``)."""
    strategy: Literal["TimeSlicing", "MPS"]
    """The config's ``sharing.strategy``."""
    active_thread_percentage: int | None
    """MPS: ``mpsConfig.defaultActiveThreadPercentage``; null for time-slicing."""
    pinned_memory_limit: str | None
    """MPS: ``mpsConfig.defaultPinnedDeviceMemoryLimit`` (a quantity in ``Mi``); null for
    time-slicing."""
    clients: list[SharedClients]
    """Pods of each workload that name the claim (at most the host's ``replicas``)."""


class DraOutput(Record, kw_only=True):
    """The plan for NVIDIA's DRA driver (``gpu.nvidia.com``): a ResourceClaimTemplate per
    workload and profile that runs alone, a ResourceClaim per shared host, and the
    DeviceClasses they rely on."""

    api_version: str
    """``resource.k8s.io/v1`` (GA since Kubernetes 1.34)."""
    driver: str
    """The DRA driver's name and the domain of its device attributes."""
    driver_release: str
    """The driver release whose device attributes and DeviceClasses this follows."""
    device_classes: list[DraDeviceClass]
    """The DeviceClasses the driver's Helm chart installs for GPUs."""
    claim_templates: list[DraClaimTemplate]
    """Workloads that run alone: each pod gets a device of its own."""
    shared_claims: list[DraSharedClaim] = []
    """The tier below MIG: one ResourceClaim per host, shared by its client pods."""
    feature_gates: list[str] = []
    """Feature gates of the driver the shared claims' configs need (empty: none)."""
    manifests: str
    """The ResourceClaimTemplates and shared ResourceClaims as one YAML stream (``kubectl
    apply -n NAMESPACE -f``); a comment alone when the plan places no workload."""


class SharedHostGroup(Record, kw_only=True):
    """Hosts of one kind that shared workloads run on: instances of one MIG profile that
    time-slicing replicates, or whole GPUs with MIG disabled that MPS shares."""

    mode: SharedMode
    profile: str | None
    """The MIG profile of the host instances; null for whole GPUs (MPS)."""
    host_workload: str | None
    """The name the host instances carry in ``gpus`` and ``resources`` (time-slicing);
    null for MPS, whose GPUs are not MIG-partitioned."""
    resource: str
    """The device plugin resource it replicates (``nvidia.com/mig-1g.10gb`` under
    ``migStrategy: mixed``, ``nvidia.com/gpu`` for a whole GPU)."""
    hosts: int
    replicas: int
    """Clients per host: the device plugin's ``replicas`` for ``resource``."""
    memory_bytes: int
    """Usable memory of one host as the driver reports it."""
    client_memory_limit_bytes: int
    """One client's share of it: ``memory_bytes / replicas`` (MPS: in whole MiB, as the
    device plugin's MPS daemon sets it); every client on the hosts needs no more."""
    active_thread_percentage: int | None
    """MPS: ``100 / replicas``, the daemon's default active-thread percentage; null for
    time-slicing, which caps no SMs."""
    clients: list[SharedClients]


class KaiRequest(Record, kw_only=True):
    """The workload's GPU share as KAI Scheduler's pod annotations take it (set one)."""

    gpu_memory: str
    """Annotation ``gpu-memory``: MiB of GPU memory (the client's memory limit)."""
    gpu_fraction: str
    """Annotation ``gpu-fraction``: the same memory as a fraction of the whole GPU's."""


class HamiRequest(Record, kw_only=True):
    """The workload's GPU share as HAMi's container resource limits take it."""

    gpu: int
    """``nvidia.com/gpu``: physical GPUs (1)."""
    gpumem: int
    """``nvidia.com/gpumem``: MiB of GPU memory (the client's memory limit)."""
    gpucores: int
    """``nvidia.com/gpucores``: percent of the GPU's SMs (the plan's SM share, at least 1)."""


class SharedWorkload(Record, kw_only=True):
    """A shared workload's clients on one host group: what each pod requests, the memory
    it may use and the share of the GPU it gets, in the forms the device plugin, MPS, KAI
    Scheduler and HAMi take."""

    workload: str
    mode: SharedMode
    count: int
    """Clients of the workload on this host group (pods)."""
    profile: str | None
    """Host MIG profile; null for a whole GPU (MPS)."""
    resource: str
    """What a pod requests (1) from the device plugin with the plan's sharing config."""
    replicas: int
    memory_request_bytes: int
    """What the workload needs: ``ceil(memory_gib · 2^30)``."""
    memory_limit_bytes: int
    """Its share of the host: the host group's ``client_memory_limit_bytes``."""
    sm_share_percent: int
    """Its share of the whole GPU's SMs: the host's compute slices over the GPU's, over
    ``replicas`` (time-slicing shares them in time, MPS in space), at least 1."""
    active_thread_percentage: int | None
    env: dict[str, str]
    """MPS: ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (per-device form ``0=<MiB>M``) and
    ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` for a client started outside the device plugin
    (which sets the same limits as daemon defaults); empty for time-slicing."""
    kai: KaiRequest
    hami: HamiRequest


class TierIsolation(Record, kw_only=True):
    """What one sharing tier isolates between its tenants, and what it does not."""

    tier: Literal["mig", "mps", "time-slicing"]
    memory: str
    faults: str
    bandwidth: str
    compute: str
    sources: list[str]


class SharingPlan(Record, kw_only=True):
    """The tier below MIG: hosts and their clients, per-workload limits, and what each
    tier isolates."""

    hosts: list[SharedHostGroup]
    workloads: list[SharedWorkload]
    whole_gpus: int
    """GPUs with MIG disabled that MPS hosts take, beside the ``gpus_used`` MIG GPUs."""
    whole_gpu_indices: list[int] = []
    """Their indices: after the plan's GPUs (after ``current``'s in an incremental plan),
    as ``mig_parted_config`` lists them with ``mig-enabled: false``."""
    host_slices_optimal: bool
    """True when the time-sliced hosts take the fewest memory slices (then compute slices,
    then hosts) any packing under the device plugin's rules takes (exact search finished)."""
    isolation: list[TierIsolation]
    notes: list[str] = []


class PartitionResponse(Record, kw_only=True):
    """A packing plan: each GPU's instances, how the GPU count compares with the lower
    bound, the workloads left out, and the mig-parted config and Kubernetes resources
    that apply it."""

    gpu: str
    """Catalog id of the GPU."""
    table: str
    """Id of the MIG table (GPUs of one geometry share it)."""
    gpus_used: int
    lower_bound: int
    """No packing of this demand uses fewer GPUs (LP relaxation and counting bounds)."""
    optimal: bool
    """True when ``gpus_used`` is proven minimal (it meets the bound, or the exact
    search finished)."""
    gpus: list[PartitionGpu]
    unplaced: list[Unplaced]
    utilization: Utilization
    mig_parted_config: str | None
    """nvidia-mig-parted ``version: v1`` YAML: one named config per distinct layout,
    with its device indices, ``gpuplan-mig-disabled`` for the whole GPUs MPS shares
    (``mig-enabled: false``), and ``gpuplan-all`` holding every GPU; null unless
    ``output`` asks for ``mig-parted``."""
    resources: list[Resource]
    single_strategy: SingleStrategy
    device_plugin: DevicePluginOutput | None = None
    """The device plugin's resource names per MIG strategy; null unless ``output`` asks
    for ``device-plugin``."""
    dra: DraOutput | None = None
    """ResourceClaimTemplates for NVIDIA's DRA driver; null unless ``output`` asks for
    ``dra``."""
    sharing: SharingPlan | None = None
    """The tier below MIG: null unless a workload's ``sharing`` puts it there."""
    repartition: list[Repartition] = []
    """Incremental plans: GPUs whose layout changes, and how."""
    unverified: list[str] = []
    """Profiles used whose data is not confirmed on hardware."""


# -- slices (the scheduler query over the live fleet) -------------------------------------

MAX_SLICES_LIMIT = 1_000

NodeName = Annotated[
    str,
    msgspec.Meta(
        min_length=1, max_length=253, pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$"
    ),
]
"""A Kubernetes node name (a DNS subdomain), as the fleet schema keys nodes."""


class SlicesQuery(Record, kw_only=True):
    memory_gib: Annotated[float, msgspec.Meta(gt=0, le=4096)] | None = None
    """Memory the workload needs, in GiB (2^30 bytes), matched against each instance's
    usable memory as the driver reports it, never the number in the profile name.
    Omitted: any free instance, smallest first."""
    compute_slices: Annotated[int, msgspec.Meta(ge=1, le=8)] = 1
    """Compute slices the workload needs (the ``Ng`` of a profile name)."""
    node: NodeName | None = None
    """Only this node."""
    gpu: GpuName | None = None
    """Only GPUs of this catalog model (any catalog lookup form; must support MIG)."""
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_SLICES_LIMIT)] = 50
    """Most instances returned, best fit first."""


class FreeSlice(Record, kw_only=True):
    """A free MIG instance of the live fleet that fits the query: where it is, what it
    holds, and how much it has to spare."""

    node: str
    gpu_index: int
    gpu_uuid: str
    gpu_model_name: str
    """The model name the driver reports."""
    catalog_id: str | None
    """The catalog SKU the model name resolves to, when it does."""
    mig_uuid: str
    """``MIG-…``: what ``CUDA_VISIBLE_DEVICES`` takes."""
    gpu_instance_id: int
    """Id of the GPU instance on its GPU, as NVML reports it (``nvmlDeviceGetGpuInstanceId``)."""
    profile: str
    placement_start: int | None
    """First memory slice (null when the agent could not read the placement)."""
    placement_size: int | None
    """Memory slices occupied."""
    memory_bytes: int
    """Usable memory of the instance as the agent read it from the driver."""
    compute_slices: int
    """The profile's compute slices: its MIG table row's, else the ``Ng`` of its name."""
    resource: str
    """Kubernetes resource name under the ``mixed`` strategy (``nvidia.com/mig-3g.40gb``)."""
    surplus_memory_bytes: int
    """Usable memory beyond the request: what best fit minimises first."""
    surplus_compute_slices: int
    """Compute slices beyond the request."""
    unverified: list[str] | None
    """Fields of the profile's table row not confirmed on hardware (``[]``: all
    confirmed); null when gpuplan has no MIG table row for this model and profile."""


class SlicesResponse(Record, kw_only=True):
    """Free MIG instances of the live fleet that fit a workload, best fit first, with the
    counts behind them and notes on what is missing."""

    memory_bytes: int
    """The request's memory in bytes (``ceil(memory_gib · 2^30)``; 0 when omitted)."""
    compute_slices: int
    nodes: int
    """Live nodes read (after the ``node`` filter)."""
    instances: int
    """MIG instances on those nodes (after the ``gpu`` filter), free or not."""
    free: int
    """Of those, instances no process uses."""
    matched: int
    """Free instances that fit, before ``limit``."""
    count: int
    """Instances returned."""
    slices: list[FreeSlice]
    """Best fit first: least surplus memory, then least surplus compute, then node, GPU
    index and placement start."""
    notes: list[str] = []
    """Why the list is empty or short, and instances left out."""


# -- placement (the fleet view: where a new workload goes, with the fewest disruptions) ---

Disruption = Literal["none", "create", "repartition-idle", "drain"]
"""What a placement disturbs, least first: ``none`` (a free instance or a free whole GPU
takes it as it is), ``create`` (a new GPU instance in free slices; nothing is destroyed),
``repartition-idle`` (idle instances are destroyed, or MIG is enabled on an idle GPU;
nothing in use is touched), ``drain`` (instances in use must be drained and destroyed)."""

PlacementAction = Literal["use-instance", "use-gpu", "create", "repartition", "enable-mig", "drain"]
"""How an option places the workload: run on a free MIG instance (``use-instance``) or a
free GPU without MIG (``use-gpu``); create a GPU instance in free slices (``create``);
destroy idle instances first (``repartition``); enable MIG on an idle GPU and create one
(``enable-mig``); drain instances in use, destroy them and create one (``drain``)."""


class PlacementQuery(Record, kw_only=True):
    """A new workload to place on the live fleet, as a MIG plan states one (a ``profile``,
    or ``memory_gib`` and ``compute_slices``), and where it may go."""

    memory_gib: Annotated[float, msgspec.Meta(gt=0, le=4096)] | None = None
    """Memory the workload needs, in GiB (2^30 bytes): matched against the usable memory
    of a free instance as its agent read it from the driver, of a profile to create as
    the MIG table gives it, or of a whole GPU as the driver reports it free. Give it or
    ``profile``."""
    compute_slices: Annotated[int, msgspec.Meta(ge=1, le=8)] | None = None
    """Compute slices it needs (default 1); only with ``memory_gib``."""
    profile: ProfileRef | None = None
    """Run on exactly this MIG profile (``3g.40gb``, ``nvidia.com/mig-1g.10gb.me``); or
    give ``memory_gib``."""
    whole_gpu: bool = False
    """Also take a whole GPU that is free and not in MIG mode (any model, its free memory
    covering ``memory_gib``); only with ``memory_gib``."""
    node: NodeName | None = None
    """Only this node."""
    gpu: GpuName | None = None
    """Only GPUs of this catalog model (any catalog lookup form; it must support MIG
    unless ``whole_gpu`` is set)."""
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_SLICES_LIMIT)] = 10
    """Most options returned, fewest disruptions first."""


class PlacementInstance(Record, kw_only=True):
    """A GPU instance of the chosen GPU: one destroyed by the option, or one of the
    GPU's layout after it. Starts and sizes are in NVML's units, as the agent publishes
    them."""

    profile: str
    placement_start: int | None
    """First memory slice (null where the agent could not read it)."""
    placement_size: int | None
    gpu_instance_id: int | None
    """NVML's id of the GPU instance on its GPU; null for the one the option creates."""
    in_use: bool
    """A process holds a compute context on one of its MIG devices."""
    mig_uuids: list[str]
    """Its MIG devices (one per compute instance); empty for the one to create."""
    memory_bytes: int
    """Usable memory: as the agent read it, or the MIG table's for the one to create."""
    new: bool = False
    """Created by this option (the workload's instance)."""


class PlacementOption(Record, kw_only=True):
    """One way to place the workload: where, what it disturbs, what to run, and why."""

    disruption: Disruption
    action: PlacementAction
    drained: int
    """Instances in use that must be drained and destroyed (only ``drain`` has any)."""
    destroyed: int
    """Idle instances destroyed to make room."""
    node: str
    gpu_index: int
    gpu_uuid: str
    gpu_model_name: str
    """The model name the driver reports."""
    catalog_id: str | None
    """The catalog SKU the model name resolves to, when it does."""
    profile: str | None
    """The MIG profile the workload runs on; null on a whole GPU (``use-gpu``)."""
    placement_start: int | None
    """First memory slice of its instance, in NVML's units (null: a whole GPU, or an
    instance whose placement the agent could not read)."""
    placement_size: int | None
    mig_uuid: str | None
    """``use-instance``: the free instance's ``MIG-…`` uuid (``CUDA_VISIBLE_DEVICES``)."""
    gpu_instance_id: int | None
    """``use-instance``: its GPU instance id."""
    memory_bytes: int
    """Usable memory the workload gets: the instance's as read from the driver, the
    profile's from the MIG table for a new one, the GPU's free memory for a whole GPU."""
    compute_slices: int | None
    """Compute slices it gets (null on a whole GPU)."""
    resource: str
    """The Kubernetes extended resource to request: ``nvidia.com/mig-<profile>`` under the
    device plugin's ``mixed`` strategy, ``nvidia.com/gpu`` for a whole GPU."""
    surplus_memory_bytes: int
    """Usable memory beyond the request (the fit, after the disruption)."""
    surplus_compute_slices: int | None
    destroy: list[PlacementInstance]
    """Instances destroyed, in use or idle (empty unless ``repartition`` or ``drain``)."""
    layout_after: list[PlacementInstance]
    """The GPU's instances after the option, by start (empty for a whole GPU)."""
    steps: list[str]
    """What to run, in order: the nvidia-smi (or nvidia-mig-parted) commands in words."""
    reason: str
    unverified: list[str] | None
    """Fields of the profile's MIG table row not confirmed on hardware (``[]``: all
    confirmed); null without a table row (a whole GPU, a model gpuplan has no table for)."""


class PlacementResponse(Record, kw_only=True):
    """Where a new workload can go on the live fleet, fewest disruptions first: a free
    instance, a free placement, an idle GPU to repartition and, only when nothing else
    works, the fewest instances to drain."""

    memory_bytes: int
    """The request's memory in bytes (``ceil(memory_gib · 2^30)``; 0 with ``profile``)."""
    compute_slices: int
    """Compute slices asked for (a ``profile``'s own with ``profile``)."""
    profile: str | None
    """The profile asked for, as its MIG tables name it."""
    disruption: Disruption | None
    """The first option's disruption; null when nothing can take the workload."""
    reason: str
    """Why the first option is the least disruptive one, or why there is none."""
    nodes: int
    """Live nodes read (after the ``node`` filter)."""
    gpus: int
    """GPUs on them (after the ``gpu`` filter)."""
    matched: int
    """Options found, before ``limit`` (one per GPU, except each fitting free instance)."""
    count: int
    """Options returned."""
    options: list[PlacementOption]
    """Fewest disruptions first: by disruption, instances drained, a MIG mode change,
    idle instances destroyed, then best fit (surplus memory, surplus compute), node,
    GPU index and start. ``drain`` options appear only when no other option exists."""
    notes: list[str] = []
    """GPUs left out and why (lost, busy, an unreadable layout), and what is short."""
