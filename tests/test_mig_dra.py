"""The DRA and device-plugin outputs of a MIG plan (``output``), for every MIG-capable GPU.

The ResourceClaimTemplates are checked the way a cluster would take them, offline: each
validates against the Kubernetes OpenAPI schemas kubernetes-validate bundles (1.36, the
release where partitionable devices are beta and on by default, and the newest), strict
like ``kubectl --validate=strict``. Then each selector is evaluated (tests/cel_subset.py,
a small evaluator of the CEL subset used) together with the ``mig.nvidia.com``
DeviceClass against the devices NVIDIA's DRA driver would publish: every profile of the
planned GPU, the whole GPU, and every MIG device of every other catalog GPU model. It
must admit the planned profile on the planned model and nothing else.

The device attributes are the driver's own, quoted below from kubernetes-sigs/
dra-driver-nvidia-gpu at release v0.4.1 (commit 764900e7833798a1528bd52a2af3e1b2d5f7a616).
"""

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.catalog import GpuSpec, builtin_catalog
from gpuplan.core.mig import PartitionRequest, PartitionResponse, builtin_tables, partition
from gpuplan.core.mig import dra as dra_module
from gpuplan.core.mig.errors import MigInputError
from gpuplan.core.mig.schema import Resource
from tests.cel_subset import CelError, Device, attributes_read, evaluate
from tests.helpers import problem

kubernetes_validate = pytest.importorskip("kubernetes_validate")

CATALOG = builtin_catalog()
TABLES = builtin_tables()
MIG_GPUS = sorted(g.id for g in CATALOG if g.mig.supported)
KUBE_VERSIONS = ("1.36.0", kubernetes_validate.latest_version())
DOMAIN = "gpu.nvidia.com"

# cmd/gpu-kubelet-plugin/mig.go at v0.4.1, CommonAttributesMig: the attribute names every
# MIG device carries, pre-created or DynamicMIG (quoted, the values' lines with them).
COMMON_ATTRIBUTES_MIG = """
		"type": {
			StringValue: ptr.To("mig"),
		"parentUUID": {
			StringValue: &parent.UUID,
		"profile": {
			StringValue: ptr.To(profileName),
		"productName": {
			StringValue: &parent.productName,
		"brand": {
			StringValue: &parent.brand,
		"architecture": {
			StringValue: &parent.architecture,
		"cudaComputeCapability": {
			VersionValue: ptr.To(semver.MustParse(parent.cudaComputeCapability).String()),
		"driverVersion": {
			VersionValue: ptr.To(semver.MustParse(parent.driverVersion).String()),
		"cudaDriverVersion": {
			VersionValue: ptr.To(semver.MustParse(parent.cudaDriverVersion).String()),
"""
MIG_ATTRIBUTES = re.findall(r'^\t\t"(\w+)": \{$', COMMON_ATTRIBUTES_MIG, re.M)

# cmd/gpu-kubelet-plugin/deviceinfo.go at v0.4.1, GpuInfo.Attributes: a whole GPU's
# attribute names (its `type` is `GpuDeviceType`), and that constant in types.go.
GPU_ATTRIBUTES = [
    "type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability",
    "driverVersion", "cudaDriverVersion",
]  # fmt: skip
GPU_TYPE_LINE = '\tGpuDeviceType = "gpu"'
GPU_TYPE = GPU_TYPE_LINE.split('"')[1]

# deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-mig.yaml at v0.4.1.
MIG_CLASS_LINE = """      expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'\""""
# demo/specs/quickstart/v1/gpu-test4.yaml at v0.4.1: the driver's own MIG request.
DEMO_SELECTOR_LINE = (
    """              expression: "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'\""""
)


def _quoted_expression(line: str) -> str:
    value = yaml.safe_load(line.strip())["expression"]
    assert isinstance(value, str)
    return value


MIG_CLASS = _quoted_expression(MIG_CLASS_LINE)


class Unread:
    """An attribute value no selector may look at: comparing it fails the test."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        raise AssertionError(f"a selector read `{self.name}`, which it has no value for")

    def __hash__(self) -> int:
        raise AssertionError(f"a selector read `{self.name}`, which it has no value for")


def mig_device(spec: GpuSpec, profile: str) -> Device:
    """A MIG device of ``profile`` on ``spec`` as the driver would publish it."""
    known = {
        "type": "mig",
        "profile": profile,
        "productName": spec.nvml_names[0],
        "parentUUID": f"GPU-{spec.id}",
    }
    return Device(DOMAIN, {DOMAIN: {a: known.get(a, Unread(a)) for a in MIG_ATTRIBUTES}})


def whole_gpu(spec: GpuSpec) -> Device:
    known = {"type": GPU_TYPE, "productName": spec.nvml_names[0], "uuid": f"GPU-{spec.id}"}
    return Device(DOMAIN, {DOMAIN: {a: known.get(a, Unread(a)) for a in GPU_ATTRIBUTES}})


def table_of(gpu_id: str) -> Any:
    return next(t for t in TABLES if gpu_id in t.gpus)


def run(body: dict[str, Any]) -> PartitionResponse:
    return partition(msgspec.convert(body, PartitionRequest), CATALOG)


def every_profile(gpu_id: str, output: list[str]) -> PartitionResponse:
    """A plan that uses every profile of the GPU's table over several GPUs."""
    table = table_of(gpu_id)
    workloads: list[dict[str, Any]] = [
        {"name": f"p{i}", "profile": p.name, "count": min(p.max_count, 3)}
        for i, p in enumerate(table.profiles)
    ]
    smallest = min(p.memory_bytes for p in table.profiles) / 2**30
    workloads.append({"name": "mem", "memory_gib": round(smallest / 2, 2), "count": 5})
    return run({"gpu": gpu_id, "workloads": workloads, "output": output})


def manifests(response: PartitionResponse) -> list[dict[str, Any]]:
    assert response.dra is not None
    return [doc for doc in yaml.safe_load_all(response.dra.manifests) if doc is not None]


def test_the_attribute_names_are_the_drivers() -> None:
    assert MIG_ATTRIBUTES[:4] == ["type", "parentUUID", "profile", "productName"]
    assert len(MIG_ATTRIBUTES) == 9
    mig = next(c for c in dra_module.DEVICE_CLASSES if c.name == "mig.nvidia.com")
    assert mig.expression == MIG_CLASS
    assert dra_module.DRIVER == DOMAIN
    assert GPU_TYPE == "gpu"


def test_the_evaluator_reads_the_drivers_own_example() -> None:
    """gpu-test4.yaml asks for a 1g.5gb: an A100 40GB's, of any model that has one."""
    demo = _quoted_expression(DEMO_SELECTOR_LINE)
    a100 = CATALOG.get("a100-sxm4-40gb")
    assert evaluate(demo, mig_device(a100, "1g.5gb"))
    assert not evaluate(demo, mig_device(a100, "1g.5gb+me"))
    assert not evaluate(f"{MIG_CLASS} && {demo}", whole_gpu(a100))
    with pytest.raises(CelError):  # a whole GPU has no `profile`
        evaluate(demo, whole_gpu(a100))
    with pytest.raises(CelError):
        evaluate("device.attributes['gpu.nvidia.com'].profile != '1g.5gb'", whole_gpu(a100))


@pytest.mark.parametrize("gpu_id", MIG_GPUS)
def test_dra_objects_validate_against_the_kubernetes_schemas(gpu_id: str) -> None:
    response = every_profile(gpu_id, ["dra"])
    assert response.dra is not None
    docs = manifests(response)
    assert len(docs) == len(response.dra.claim_templates) == len(response.resources) >= 2
    for doc in docs:
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    for doc, template in zip(docs, response.dra.claim_templates, strict=True):
        assert doc["apiVersion"] == "resource.k8s.io/v1"
        assert doc["kind"] == "ResourceClaimTemplate"
        assert doc["metadata"]["name"] == template.name
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", template.name)
        assert doc["metadata"]["annotations"]["gpuplan/pods"] == str(template.pods)
        (request,) = doc["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == "mig.nvidia.com"
        assert request["exactly"]["count"] == 1
        (selector,) = request["exactly"]["selectors"]
        assert selector["cel"]["expression"] == template.selector
    assert len({t.name for t in response.dra.claim_templates}) == len(docs)
    planned = {(r.workload, r.profile, r.count) for r in response.resources}
    assert {(t.workload, t.profile, t.pods) for t in response.dra.claim_templates} == planned


def test_a_misspelt_field_fails_the_schema_check() -> None:
    """The validation above can fail: strict mode refuses a field the schema lacks."""
    (doc,) = manifests(run({"gpu": "a30-24gb", "workloads": [{"name": "a", "profile": "1g.6gb"}],
                            "output": ["dra"]}))  # fmt: skip
    request = doc["spec"]["spec"]["devices"]["requests"][0]
    request["exact"] = request.pop("exactly")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, "1.36.0", strict=True)


@pytest.mark.parametrize("gpu_id", MIG_GPUS)
def test_each_selector_admits_its_profile_on_its_gpu_and_nothing_else(gpu_id: str) -> None:
    spec = CATALOG.get(gpu_id)
    response = every_profile(gpu_id, ["dra"])
    assert response.dra is not None
    others = [
        (other, p.name)
        for other in CATALOG
        if other.mig.supported and other.id != gpu_id
        for p in table_of(other.id).profiles
    ]
    own = [p.name for p in table_of(gpu_id).profiles]
    assert {t.profile for t in response.dra.claim_templates} == set(own)
    for template in response.dra.claim_templates:
        assert attributes_read(template.selector) <= {(DOMAIN, "productName"), (DOMAIN, "profile")}
        selection = f"{MIG_CLASS} && {template.selector}"
        admitted = [p for p in own if evaluate(selection, mig_device(spec, p))]
        assert admitted == [template.profile]
        assert not evaluate(selection, whole_gpu(spec))
        foreign = [(o.id, p) for o, p in others if evaluate(selection, mig_device(o, p))]
        # Another model's device of the same name is admitted only if the driver names
        # both GPUs alike (none in the catalog do).
        assert foreign == []


def test_the_same_profile_name_on_two_models_is_told_apart() -> None:
    """1g.10gb exists on A100 80GB and on H100 80GB, with different memory."""
    a100, h100 = CATALOG.get("a100-sxm4-80gb"), CATALOG.get("h100-sxm5-80gb")
    body = {"workloads": [{"name": "nb", "profile": "1g.10gb"}], "output": ["dra"]}
    (t,) = run({"gpu": "h100-sxm5-80gb", **body}).dra.claim_templates  # type: ignore[union-attr]
    assert evaluate(t.selector, mig_device(h100, "1g.10gb"))
    assert not evaluate(t.selector, mig_device(a100, "1g.10gb"))


def test_a_gpu_with_several_or_no_driver_names() -> None:
    """A catalog file may give a GPU two NVML names, or none: `in`, or the profile alone."""
    h100 = CATALOG.get("h100-sxm5-80gb")
    two = msgspec.structs.replace(h100, nvml_names=["NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5"])
    none = msgspec.structs.replace(h100, nvml_names=[])
    resources = [Resource("nb", "1g.10gb", "nvidia.com/mig-1g.10gb", 2)]
    (t,) = dra_module.claim_templates(two, resources)
    alias = msgspec.structs.replace(two, nvml_names=["NVIDIA H100 SXM5"])
    assert " in [" in t.selector
    assert evaluate(t.selector, mig_device(two, "1g.10gb"))
    assert evaluate(t.selector, mig_device(alias, "1g.10gb"))
    assert not evaluate(t.selector, mig_device(CATALOG.get("a100-sxm4-80gb"), "1g.10gb"))
    (t,) = dra_module.claim_templates(none, resources)
    assert attributes_read(t.selector) == {(DOMAIN, "profile")}


def test_template_names_are_dns_labels_and_unique() -> None:
    body = {
        "gpu": "a100-sxm4-80gb",
        "workloads": [
            {"name": "Big Model_A", "profile": "3g.40gb"},
            {"name": "big-model-a", "profile": "3g.40gb"},
            {"name": "x" * 128, "profile": "1g.10gb"},
            {"name": "___", "profile": "1g.10gb"},
            {"name": "ünïcode", "profile": "1g.10gb+me"},
        ],
        "output": ["dra"],
    }
    response = run(body)
    assert response.dra is not None
    names = {t.workload: t.name for t in response.dra.claim_templates}
    # The first of two workloads that read alike (in the answer's order) keeps the name.
    assert sorted([names["Big Model_A"], names["big-model-a"]]) == ["big-model-a", "big-model-a-2"]
    assert names["x" * 128] == "x" * 63
    assert names["___"] == "workload"
    assert names["ünïcode"] == "n-code"
    docs = manifests(response)
    for doc in docs:
        kubernetes_validate.validate(doc, "1.36.0", strict=True)
    # The annotation keeps the workload's own name, quoted for YAML.
    assert {d["metadata"]["annotations"]["gpuplan/workload"] for d in docs} == set(names)


def test_a_workload_on_two_profiles_gets_a_template_per_profile() -> None:
    response = run({"gpu": "h100-sxm5-80gb", "workloads": [{"name": "llm", "memory_gib": 35,
                    "count": 2}], "output": ["dra"]})  # fmt: skip
    assert response.dra is not None
    assert [(t.name, t.pods) for t in response.dra.claim_templates] == [
        ("llm-4g-40gb", 1),
        ("llm-3g-40gb", 1),
    ]


def test_a_plan_that_places_nothing_has_no_template() -> None:
    response = run({"gpu": "a30-24gb", "workloads": [{"name": "huge", "memory_gib": 4096}],
                    "output": ["dra"]})  # fmt: skip
    assert response.dra is not None
    assert response.dra.claim_templates == []
    assert manifests(response) == []
    assert response.dra.manifests.startswith("# ")


def test_an_incremental_plan_has_templates_for_its_workloads() -> None:
    current = [{"index": 0, "instances": [{"profile": "3g.40gb", "start": 4, "workload": "old"}]}]
    response = run({"gpu": "a100-sxm4-80gb", "current": current, "output": ["dra"],
                    "workloads": [{"name": "new", "profile": "1g.10gb", "count": 2}]})  # fmt: skip
    assert response.dra is not None
    assert {(t.workload, t.profile, t.pods) for t in response.dra.claim_templates} == {
        ("old", "3g.40gb", 1),
        ("new", "1g.10gb", 2),
    }
    assert response.mig_parted_config is None


# -- output: what the answer carries -----------------------------------------------------


def test_the_default_answer_is_todays() -> None:
    response = run({"gpu": "a30-24gb", "workloads": [{"name": "a", "profile": "1g.6gb"}]})
    assert response.mig_parted_config is not None
    assert response.mig_parted_config.startswith("version: v1\n")
    assert response.device_plugin is None
    assert response.dra is None
    assert response.resources
    assert response.single_strategy.possible


def test_output_selects_what_the_answer_carries() -> None:
    body = {"gpu": "a30-24gb", "workloads": [{"name": "a", "profile": "1g.6gb"}]}
    nothing = run({**body, "output": []})
    assert (nothing.mig_parted_config, nothing.device_plugin, nothing.dra) == (None, None, None)
    assert nothing.resources  # always answered
    both = run({**body, "output": ["dra", "device-plugin"]})
    assert both.mig_parted_config is None
    assert both.dra is not None
    assert both.device_plugin is not None


def test_output_named_twice_is_refused() -> None:
    with pytest.raises(MigInputError) as caught:
        run({"gpu": "a30-24gb", "workloads": [{"name": "a", "profile": "1g.6gb"}],
             "output": ["dra", "mig-parted", "dra"]})  # fmt: skip
    assert caught.value.path == "$.output[2]"


def test_device_plugin_names_per_strategy() -> None:
    one = run({"gpu": "a100-sxm4-80gb", "output": ["device-plugin"],
               "workloads": [{"name": "a", "profile": "1g.10gb", "count": 9}]})  # fmt: skip
    assert one.device_plugin is not None
    assert one.device_plugin.strategy == "single"
    (r,) = one.device_plugin.resources
    assert (r.workload, r.count, r.mixed, r.single) == (
        "a",
        9,
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/gpu",
    )
    mixed = run({"gpu": "a100-sxm4-80gb", "output": ["device-plugin"], "workloads": [
        {"name": "a", "profile": "1g.10gb+me"}, {"name": "b", "profile": "3g.40gb"}]})  # fmt: skip
    assert mixed.device_plugin is not None
    assert mixed.device_plugin.strategy == "mixed"
    assert sorted((r.mixed, r.single) for r in mixed.device_plugin.resources) == [
        ("nvidia.com/mig-1g.10gb.me", None),
        ("nvidia.com/mig-3g.40gb", None),
    ]
    assert [r.mixed for r in mixed.device_plugin.resources] == [r.resource for r in mixed.resources]


# -- over HTTP and on the command line -------------------------------------------------------

PLAN = {"gpu": "h100-sxm5-80gb", "workloads": [{"name": "nb", "profile": "1g.10gb", "count": 3}]}


@pytest.mark.parametrize(
    ("output", "path"),
    [
        (["helm"], "$.output[0]"),
        (["dra", "Dra"], "$.output[1]"),
        (["dra", "device-plugin", "dra"], "$.output[2]"),
        (["dra", "device-plugin", "mig-parted", "dra"], "$.output"),
        ("dra", "$.output"),
    ],
)
def test_a_bad_output_is_422_naming_it(
    client: TestClient[Litestar], output: Any, path: str
) -> None:
    response = client.post("/v1/mig/plan", json={**PLAN, "output": output})
    body = problem(response, 422)
    assert body["errors"][0]["path"] == path, body


def test_dra_over_http(client: TestClient[Litestar]) -> None:
    response = client.post("/v1/mig/plan", json={**PLAN, "output": ["dra", "device-plugin"]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["mig_parted_config"] is None
    assert body["device_plugin"]["strategy"] == "single"
    assert [c["name"] for c in body["dra"]["device_classes"]] == [
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "vfio.gpu.nvidia.com",
    ]
    (doc,) = [d for d in yaml.safe_load_all(body["dra"]["manifests"]) if d]
    kubernetes_validate.validate(doc, "1.36.0", strict=True)
    default = client.post("/v1/mig/plan", json=PLAN).json()
    assert default["mig_parted_config"].startswith("version: v1\n")
    assert default["dra"] is None
    assert default["device_plugin"] is None


def test_cli_output_dra_prints_the_yaml_stream(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(PLAN))  # no `output`: --output dra asks for it
    result = CliRunner().invoke(main, ["mig", "plan", str(path), "--output", "dra"])
    assert result.exit_code == 0, result.output
    (doc,) = [d for d in yaml.safe_load_all(result.output) if d]
    kubernetes_validate.validate(doc, "1.36.0", strict=True)
    assert doc["metadata"]["name"] == "nb"
    written = tmp_path / "claims.yaml"
    result = CliRunner().invoke(
        main, ["mig", "plan", str(path), "--output", "dra", "--write", str(written)]
    )
    assert result.exit_code == 0, result.output
    assert written.read_text() == run({**PLAN, "output": ["dra"]}).dra.manifests  # type: ignore[union-attr]
    # --output mig-parted still prints the config, whatever else the file asks for.
    path.write_text(yaml.safe_dump({**PLAN, "output": ["dra"]}))
    result = CliRunner().invoke(main, ["mig", "plan", str(path), "--output", "mig-parted"])
    assert result.output.startswith("version: v1\n")
    body = json.loads(
        CliRunner().invoke(main, ["mig", "plan", str(path), "--output", "json"]).output
    )
    assert body["mig_parted_config"] is None
    assert body["dra"]["claim_templates"]


def test_cli_names_a_bad_output_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**PLAN, "output": ["helm"]}))
    result = CliRunner().invoke(main, ["mig", "plan", str(path)])
    assert result.exit_code == 2
    assert "$.output[0]" in result.output
    result = CliRunner().invoke(
        main, ["mig", "plan", str(path), "--write", "x", "--output", "json"]
    )
    assert result.exit_code == 2
