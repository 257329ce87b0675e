"""ResourceClaimTemplates for NVIDIA's DRA driver: a plan's profiles as DRA device requests.

Dynamic Resource Allocation (``resource.k8s.io/v1``, GA since Kubernetes 1.34) lets a pod
ask for a device by its attributes instead of by an extended-resource count. NVIDIA's
DRA driver (driver name ``gpu.nvidia.com``) is read here at kubernetes-sigs/
dra-driver-nvidia-gpu release v0.4.1, commit 764900e7833798a1528bd52a2af3e1b2d5f7a616:

- ``cmd/gpu-kubelet-plugin/mig.go``, ``CommonAttributesMig``: every MIG device carries,
  in the ``gpu.nvidia.com`` attribute domain, ``type`` (``mig``), ``parentUUID``,
  ``profile``, ``productName``, ``brand``, ``architecture``, ``cudaComputeCapability``,
  ``driverVersion`` and ``cudaDriverVersion`` (a pre-created device adds ``uuid``,
  ``deviceinfo.go``). ``profile`` is go-nvlib's ``MigProfileInfo.String()``, the
  nvidia-smi form this planner names profiles by (``3g.40gb``, ``1g.10gb+me``);
  ``productName`` is the parent GPU's NVML name (``nvlib.go``: ``device.GetName()``),
  the catalog's ``nvml_names``.
- The same function labels DynamicMIG's abstract MIG devices (``partitions.go``,
  ``MigSpec.Attributes``), so one template serves pre-created MIG devices (mig-parted or
  the GPU Operator made them) and devices the driver creates on allocation alike.
- ``deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-*.yaml``: the
  DeviceClasses ``gpu.nvidia.com``, ``mig.nvidia.com`` and ``vfio.gpu.nvidia.com``.
- ``demo/specs/quickstart/v1/gpu-test4.yaml``: the request shape used here,
  ``spec.spec.devices.requests[].exactly`` with ``deviceClassName: mig.nvidia.com`` and a
  CEL selector on ``profile``.

Each template asks for exactly one device of ``mig.nvidia.com`` whose ``productName`` is
the planned GPU model's and whose ``profile`` is the planned profile. The profile alone
would not do: A100 80GB and H100 80GB both have a ``1g.10gb``, with different memory
and compute. The selectors use only ``==``, ``in`` and ``&&`` over those two attributes.

Workloads that share below MIG (:mod:`gpuplan.core.mig.sharing`) get no template: a
template makes one claim per pod, so its pods never share a device. Each host gets one
``ResourceClaim`` instead, which all its client pods name (the driver's
``demo/specs/quickstart/v1/gpu-test3.yaml``: "One shared, global claim providing access to
a GPU", two pods naming it by ``resourceClaimName``). The claim carries the driver's
opaque config (``api/nvidia.com/resource/v1beta1``, group ``resource.nvidia.com``,
version ``v1beta1``, ``api.go``):

- a time-sliced MIG host: kind ``MigDeviceConfig``, ``sharing: {strategy: TimeSlicing}``.
  ``MigDeviceSharing`` (``sharing.go``) has no ``timeSlicingConfig``: "timeslicing
  settings cannot be set on MIG devices directly" (``cmd/gpu-kubelet-plugin/
  device_state.go``, ``applySharingConfig``), so the pods take turns at the driver's
  default interval;
- an MPS host (a whole GPU, MIG off, as the plan puts MPS clients for the device plugin's
  sake): kind ``GpuConfig``, ``sharing: {strategy: MPS, mpsConfig:
  {defaultActiveThreadPercentage, defaultPinnedDeviceMemoryLimit}}`` with the plan's
  active-thread percentage and per-client memory limit (a quantity the driver turns into
  whole MiB, ``Megabyte()``). Without DynamicMIG the driver publishes a whole GPU only
  when its MIG mode is off (``cmd/gpu-kubelet-plugin/nvlib.go``: "Announce physical GPU to
  be allocatable" under ``!gpuInfo.migEnabled``), which the mig-parted config's
  ``mig-enabled: false`` entry makes so.

Each strategy is refused unless its feature gate is on (``validate.go``,
``validateSharingStrategy``): ``TimeSlicingSettings`` and ``MPSSupport``, both alpha and
off by default (``pkg/featuregates/featuregates.go``), and ``MPSSupport`` "is currently
mutually exclusive with" ``DynamicMIG`` there.

The YAML is written here, not by a YAML library (the core imports none): every string
is a JSON string, which YAML reads as the same double-quoted scalar.
"""

import json
import re
from collections.abc import Sequence
from typing import Literal

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.mig.schema import (
    DraClaimTemplate,
    DraDeviceClass,
    DraOutput,
    DraSharedClaim,
    Resource,
    SharedClients,
    SharedHostGroup,
    SharingPlan,
)

API_VERSION = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
DRIVER_RELEASE = (
    "kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 (764900e7833798a1528bd52a2af3e1b2d5f7a616)"
)
MIG_CLASS = "mig.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
REQUEST = "mig"
GPU_REQUEST = "gpu"
CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"
TIME_SLICING_GATE = "TimeSlicingSettings"
MPS_GATE = "MPSSupport"
MiB = 2**20
DEVICE_CLASSES = (
    DraDeviceClass(
        name="gpu.nvidia.com",
        selects="whole GPUs (type gpu)",
        expression="device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'gpu'",
    ),
    DraDeviceClass(
        name=MIG_CLASS,
        selects="MIG devices (type mig), pre-created or DynamicMIG",
        expression="device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'mig'",
    ),
    DraDeviceClass(
        name="vfio.gpu.nvidia.com",
        selects="GPUs bound to vfio-pci for passthrough (type vfio)",
        expression="device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'vfio'",
    ),
)
"""As the chart's ``deviceclass-gpu.yaml``, ``deviceclass-mig.yaml`` and
``deviceclass-vfio-gpu.yaml`` write them (v0.4.1)."""

_NOT_LABEL = re.compile(r"[^a-z0-9]+")
LABEL_MAX = 63


def cel_string(text: str) -> str:
    """``text`` as a single-quoted CEL string literal."""
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def attribute(name: str) -> str:
    """A device attribute of the driver's domain, as CEL reads it."""
    return f"device.attributes[{cel_string(DRIVER)}].{name}"


def selector(product_names: Sequence[str], profile: str) -> str:
    """CEL that admits a MIG device of ``profile`` on a GPU named one of ``product_names``
    (any GPU when the catalog knows no NVML name for it)."""
    terms = []
    if len(product_names) == 1:
        terms.append(f"{attribute('productName')} == {cel_string(product_names[0])}")
    elif product_names:
        names = ", ".join(cel_string(n) for n in product_names)
        terms.append(f"{attribute('productName')} in [{names}]")
    terms.append(f"{attribute('profile')} == {cel_string(profile)}")
    return " && ".join(terms)


def gpu_selector(product_names: Sequence[str]) -> str | None:
    """CEL that admits a whole GPU named one of ``product_names`` (None: any GPU)."""
    if len(product_names) == 1:
        return f"{attribute('productName')} == {cel_string(product_names[0])}"
    if product_names:
        names = ", ".join(cel_string(n) for n in product_names)
        return f"{attribute('productName')} in [{names}]"
    return None


def dns_label(text: str) -> str:
    """``text`` as an RFC 1123 label: lower-case letters, digits and ``-``, 63 at most."""
    label = _NOT_LABEL.sub("-", text.lower()).strip("-")[:LABEL_MAX].rstrip("-")
    return label or "workload"


def _unique(base: str, taken: set[str]) -> str:
    name, n = base, 1
    while name in taken:
        n += 1
        suffix = f"-{n}"
        name = base[: LABEL_MAX - len(suffix)].rstrip("-") + suffix
    taken.add(name)
    return name


def claim_templates(
    spec: GpuSpec, resources: Sequence[Resource], taken: set[str] | None = None
) -> list[DraClaimTemplate]:
    """One template per workload and profile of ``resources``, in their order."""
    profiles_of: dict[str, int] = {}
    for r in resources:
        profiles_of[r.workload] = profiles_of.get(r.workload, 0) + 1
    taken = set() if taken is None else taken
    templates = []
    for r in resources:
        base = r.workload if profiles_of[r.workload] == 1 else f"{r.workload}-{r.profile}"
        templates.append(
            DraClaimTemplate(
                name=_unique(dns_label(base), taken),
                workload=r.workload,
                profile=r.profile,
                pods=r.count,
                request=REQUEST,
                device_class_name=MIG_CLASS,
                selector=selector(spec.nvml_names, r.profile),
            )
        )
    return templates


def _deal(group: SharedHostGroup, hosts: int) -> list[list[SharedClients]]:
    """The group's clients dealt to ``hosts`` hosts in order, ``replicas`` at most each."""
    out: list[list[SharedClients]] = [[] for _ in range(hosts)]
    room = [group.replicas] * hosts
    h = 0
    for c in group.clients:
        left = c.count
        while left and h < hosts:
            n = min(left, room[h])
            out[h].append(SharedClients(c.workload, n))
            room[h] -= n
            left -= n
            if room[h] == 0:
                h += 1
    return [clients for clients in out if clients]


def shared_claims(
    spec: GpuSpec, resources: Sequence[Resource], plan: SharingPlan, taken: set[str]
) -> list[DraSharedClaim]:
    """One claim per host of ``plan``: the time-sliced MIG instances the plan placed
    (``resources`` of the host workloads) and the MPS whole GPUs."""
    placed: dict[str, int] = {}
    for r in resources:
        placed[r.workload] = placed.get(r.workload, 0) + r.count
    claims = []
    for g in plan.hosts:
        if g.mode == "time-slicing":
            assert g.host_workload is not None
            assert g.profile is not None
            hosts = min(g.hosts, placed.get(g.host_workload, 0))
            base, request, device_class = g.host_workload, REQUEST, MIG_CLASS
            chosen: str | None = selector(spec.nvml_names, g.profile)
            kind, threads, limit = "MigDeviceConfig", None, None
            strategy: Literal["TimeSlicing", "MPS"] = "TimeSlicing"
        else:
            hosts = g.hosts
            base, request, device_class = "mps-gpu", GPU_REQUEST, GPU_CLASS
            chosen = gpu_selector(spec.nvml_names)
            kind, strategy = "GpuConfig", "MPS"
            threads = g.active_thread_percentage
            limit = f"{g.client_memory_limit_bytes // MiB}Mi"
        for k, clients in enumerate(_deal(g, hosts)):
            claims.append(
                DraSharedClaim(
                    name=_unique(dns_label(f"{base}-{k + 1}"), taken),
                    mode=g.mode,
                    profile=g.profile,
                    request=request,
                    device_class_name=device_class,
                    selector=chosen,
                    config_kind=kind,
                    strategy=strategy,
                    active_thread_percentage=threads,
                    pinned_memory_limit=limit,
                    clients=clients,
                )
            )
    return claims


def _q(text: str) -> str:
    return json.dumps(text)


def _claim_lines(gpu_id: str, c: DraSharedClaim) -> list[str]:
    clients = ",".join(f"{x.workload}={x.count}" for x in c.clients)
    lines = [
        "---",
        f"apiVersion: {API_VERSION}",
        "kind: ResourceClaim",
        "metadata:",
        f"  name: {_q(c.name)}",
        "  annotations:",
        f"    gpuplan/sharing: {_q(c.mode)}",
        f"    gpuplan/clients: {_q(clients)}",
    ]
    if c.profile is not None:
        lines.append(f"    gpuplan/profile: {_q(c.profile)}")
    lines += [
        f"    gpuplan/gpu: {_q(gpu_id)}",
        "spec:",
        "  devices:",
        "    requests:",
        f"    - name: {_q(c.request)}",
        "      exactly:",
        f"        deviceClassName: {_q(c.device_class_name)}",
        '        allocationMode: "ExactCount"',
        "        count: 1",
    ]
    if c.selector is not None:
        lines += [
            "        selectors:",
            "        - cel:",
            f"            expression: {_q(c.selector)}",
        ]
    lines += [
        "    config:",
        f"    - requests: [{_q(c.request)}]",
        "      opaque:",
        f"        driver: {_q(DRIVER)}",
        "        parameters:",
        f"          apiVersion: {_q(CONFIG_API_VERSION)}",
        f"          kind: {_q(c.config_kind)}",
        "          sharing:",
        f"            strategy: {_q(c.strategy)}",
    ]
    if c.strategy == "MPS":
        lines.append("            mpsConfig:")
        if c.active_thread_percentage is not None:
            lines.append(
                f"              defaultActiveThreadPercentage: {c.active_thread_percentage}"
            )
        if c.pinned_memory_limit is not None:
            lines.append(
                f"              defaultPinnedDeviceMemoryLimit: {_q(c.pinned_memory_limit)}"
            )
    return lines


def render(
    gpu_id: str, templates: Sequence[DraClaimTemplate], claims: Sequence[DraSharedClaim] = ()
) -> str:
    """The templates and shared claims as a YAML stream, one ``---`` document each."""
    lines = [
        f"# ResourceClaimTemplates for NVIDIA's DRA driver ({DRIVER}) planned for {gpu_id}.",
        "# A pod names one in spec.resourceClaims[].resourceClaimTemplateName and gets one",
        "# MIG device of its profile; run each workload with as many pods as gpuplan/pods.",
    ]
    if claims:
        gates = sorted(
            {TIME_SLICING_GATE if c.strategy == "TimeSlicing" else MPS_GATE for c in claims}
        )
        lines += [
            "# Shared workloads: each ResourceClaim is one host; every client pod of the",
            "# workloads in gpuplan/clients names it in spec.resourceClaims[].resourceClaimName.",
            f"# Their configs need the driver's feature gates {', '.join(gates)}.",
        ]
    if not templates and not claims:
        lines.append("# No workload is placed: there is no template to apply.")
    for t in templates:
        lines += [
            "---",
            f"apiVersion: {API_VERSION}",
            "kind: ResourceClaimTemplate",
            "metadata:",
            f"  name: {_q(t.name)}",
            "  annotations:",
            f"    gpuplan/workload: {_q(t.workload)}",
            f"    gpuplan/profile: {_q(t.profile)}",
            f"    gpuplan/gpu: {_q(gpu_id)}",
            f"    gpuplan/pods: {_q(str(t.pods))}",
            "spec:",
            "  spec:",
            "    devices:",
            "      requests:",
            f"      - name: {_q(t.request)}",
            "        exactly:",
            f"          deviceClassName: {_q(t.device_class_name)}",
            '          allocationMode: "ExactCount"',
            "          count: 1",
            "          selectors:",
            "          - cel:",
            f"              expression: {_q(t.selector)}",
        ]
    for c in claims:
        lines += _claim_lines(gpu_id, c)
    return "\n".join(lines) + "\n"


def dra_output(
    spec: GpuSpec, resources: Sequence[Resource], plan: SharingPlan | None = None
) -> DraOutput:
    """The DRA objects that request a plan's instances (``resources``) on ``spec``, and
    the shared hosts of ``plan``."""
    hosts = {g.host_workload for g in plan.hosts} if plan is not None else set()
    taken: set[str] = set()
    templates = claim_templates(spec, [r for r in resources if r.workload not in hosts], taken)
    claims = shared_claims(spec, resources, plan, taken) if plan is not None else []
    gates = sorted({TIME_SLICING_GATE if c.strategy == "TimeSlicing" else MPS_GATE for c in claims})
    return DraOutput(
        api_version=API_VERSION,
        driver=DRIVER,
        driver_release=DRIVER_RELEASE,
        device_classes=list(DEVICE_CLASSES),
        claim_templates=templates,
        shared_claims=claims,
        feature_gates=gates,
        manifests=render(spec.id, templates, claims),
    )
