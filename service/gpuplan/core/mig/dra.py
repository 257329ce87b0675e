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

The YAML is written here, not by a YAML library (the core imports none): every string
is a JSON string, which YAML reads as the same double-quoted scalar.
"""

import json
import re
from collections.abc import Sequence

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.mig.schema import DraClaimTemplate, DraDeviceClass, DraOutput, Resource

API_VERSION = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
DRIVER_RELEASE = (
    "kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 (764900e7833798a1528bd52a2af3e1b2d5f7a616)"
)
MIG_CLASS = "mig.nvidia.com"
REQUEST = "mig"
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


def claim_templates(spec: GpuSpec, resources: Sequence[Resource]) -> list[DraClaimTemplate]:
    """One template per workload and profile of ``resources``, in their order."""
    profiles_of: dict[str, int] = {}
    for r in resources:
        profiles_of[r.workload] = profiles_of.get(r.workload, 0) + 1
    taken: set[str] = set()
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


def _q(text: str) -> str:
    return json.dumps(text)


def render(gpu_id: str, templates: Sequence[DraClaimTemplate]) -> str:
    """The templates as a YAML stream, one ``---`` document each."""
    lines = [
        f"# ResourceClaimTemplates for NVIDIA's DRA driver ({DRIVER}) planned for {gpu_id}.",
        "# A pod names one in spec.resourceClaims[].resourceClaimTemplateName and gets one",
        "# MIG device of its profile; run each workload with as many pods as gpuplan/pods.",
    ]
    if not templates:
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
    return "\n".join(lines) + "\n"


def dra_output(spec: GpuSpec, resources: Sequence[Resource]) -> DraOutput:
    """The DRA objects that request a plan's instances (``resources``) on ``spec``."""
    templates = claim_templates(spec, resources)
    return DraOutput(
        api_version=API_VERSION,
        driver=DRIVER,
        driver_release=DRIVER_RELEASE,
        device_classes=list(DEVICE_CLASSES),
        claim_templates=templates,
        manifests=render(spec.id, templates),
    )
