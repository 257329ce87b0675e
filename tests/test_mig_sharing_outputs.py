"""The tier below MIG in the plan's outputs: mig-parted, the device plugin and DRA agree.

- mig-parted: the whole GPUs MPS shares are listed with ``mig-enabled: false``; the config
  passes mig-parted's rules (tests/migparted_spec.py) and ``gpuplan-all`` covers every GPU
  of the plan exactly once.
- DRA: each host is one ResourceClaim that its client pods share, with the NVIDIA DRA
  driver's opaque sharing config. The config's field names are checked against the
  driver's own, quoted below from kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 (commit
  764900e7833798a1528bd52a2af3e1b2d5f7a616), ``api/nvidia.com/resource/v1beta1``.
"""

import re
from typing import Any

import msgspec
import pytest
import yaml

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.mig import PartitionRequest, PartitionResponse, partition
from gpuplan.core.mig import dra as dra_module
from tests import migparted_spec
from tests.cel_subset import evaluate
from tests.test_mig_dra import MIG_CLASS, mig_device, whole_gpu

kubernetes_validate = pytest.importorskip("kubernetes_validate")

CATALOG = builtin_catalog()
H100 = CATALOG.get("h100-sxm5-80gb")
ALL = ["mig-parted", "device-plugin", "dra"]

# api.go: the config API's group, version and kinds.
API_GO = """
	GroupName = "resource.nvidia.com"
	Version   = "v1beta1"
	GpuConfigKind                  = "GpuConfig"
	MigDeviceConfigKind            = "MigDeviceConfig"
"""
# sharing.go: the strategies and the JSON names of the sharing structs' fields.
SHARING_GO = """
	TimeSlicingStrategy = "TimeSlicing"
	MpsStrategy         = "MPS"
type GpuSharing struct {
	Strategy          GpuSharingStrategy `json:"strategy"`
	TimeSlicingConfig *TimeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	MpsConfig         *MpsConfig         `json:"mpsConfig,omitempty"`
type MigDeviceSharing struct {
	Strategy  GpuSharingStrategy `json:"strategy"`
	MpsConfig *MpsConfig         `json:"mpsConfig,omitempty"`
type MpsConfig struct {
	DefaultActiveThreadPercentage *int `json:"defaultActiveThreadPercentage,omitempty"`
	DefaultPinnedDeviceMemoryLimit *resource.Quantity `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	DefaultPerDevicePinnedMemoryLimit MpsPerDevicePinnedMemoryLimit `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
"""
_CONST = dict(re.findall(r'^\t(\w+)\s+= "([^"]+)"$', API_GO + SHARING_GO, re.M))
_STRUCTS = {
    name: re.findall(r'json:"(\w+)', body)
    for name, body in re.findall(r"^type (\w+) struct \{\n((?:\t.*\n)+)", SHARING_GO, re.M)
}


def run(body: dict[str, Any]) -> PartitionResponse:
    return partition(msgspec.convert(body, PartitionRequest), CATALOG)


def mixed(output: list[str], mps: bool = False) -> PartitionResponse:
    """The issue's mix: 2, 5 and 20 GiB inference workloads on an H100, ``sharing: auto``
    (and an MPS workload when ``mps``)."""
    workloads: list[dict[str, Any]] = [
        {"name": "embed", "memory_gib": 2, "count": 4, "sharing": "auto"},
        {"name": "rerank", "memory_gib": 5, "count": 3, "sharing": "auto"},
        {"name": "chat", "memory_gib": 20, "count": 2, "sharing": "auto"},
    ]
    if mps:
        workloads.append({"name": "asr", "memory_gib": 6, "count": 20, "sharing": "mps"})
    return run({"gpu": "h100-sxm5-80gb", "workloads": workloads, "output": output})


def test_the_quoted_driver_source_reads_as_expected() -> None:
    assert _CONST["GroupName"] + "/" + _CONST["Version"] == dra_module.CONFIG_API_VERSION
    assert _STRUCTS["MigDeviceSharing"] == ["strategy", "mpsConfig"]
    assert "timeSlicingConfig" in _STRUCTS["GpuSharing"]
    assert _STRUCTS["MpsConfig"][:2] == [
        "defaultActiveThreadPercentage",
        "defaultPinnedDeviceMemoryLimit",
    ]


def _config_devices(response: PartitionResponse) -> dict[int, bool]:
    """GPU index → mig-enabled, from ``gpuplan-all``, each index at most once."""
    assert response.mig_parted_config is not None
    spec = migparted_spec.validate(response.mig_parted_config, strict=True)
    seen: dict[int, bool] = {}
    for entry in migparted_spec.select_config(spec, "gpuplan-all"):
        assert isinstance(entry.devices, list)
        for d in entry.devices:
            assert d not in seen, f"GPU {d} is in gpuplan-all twice"
            seen[d] = entry.mig_enabled
    return seen


@pytest.mark.parametrize("mps", [False, True])
def test_mig_parted_covers_every_gpu_of_the_plan_once(mps: bool) -> None:
    response = mixed(["mig-parted"], mps)
    assert response.sharing is not None
    whole = response.sharing.whole_gpu_indices
    assert len(whole) == response.sharing.whole_gpus == (2 if mps else 0)
    seen = _config_devices(response)
    assert seen == {**{g.index: True for g in response.gpus}, **dict.fromkeys(whole, False)}
    assert sorted(seen) == list(range(response.gpus_used + len(whole)))
    config = yaml.safe_load(response.mig_parted_config or "")
    if mps:
        (entry,) = config["mig-configs"]["gpuplan-mig-disabled"]
        assert entry["devices"] == whole
        assert entry["mig-enabled"] is False
        assert "mig-devices" not in entry
    else:
        assert "gpuplan-mig-disabled" not in config["mig-configs"]


def test_mig_parted_refuses_mig_devices_on_a_disabled_gpu() -> None:
    """The rule the entry above must keep can fail."""
    text = "version: v1\nmig-configs:\n  c:\n  - devices: [0]\n    mig-enabled: false\n"
    migparted_spec.validate(text)
    with pytest.raises(migparted_spec.SpecError, match="MIG devices included"):
        migparted_spec.validate(text + "    mig-devices: {1g.10gb: 1}\n")


def test_an_incremental_plan_puts_whole_gpus_after_the_fleet() -> None:
    body = {
        "gpu": "h100-sxm5-80gb",
        "workloads": [{"name": "asr", "memory_gib": 6, "count": 3, "sharing": "mps"}],
        "current": [
            {"index": 0, "instances": [{"profile": "7g.80gb", "start": 0, "in_use": True}]},
            {"index": 3, "instances": []},
        ],
        "output": ["mig-parted"],
    }
    response = run(body)
    assert response.sharing is not None
    assert response.sharing.whole_gpu_indices == [4]
    assert _config_devices(response)[4] is False


def _docs(response: PartitionResponse) -> list[dict[str, Any]]:
    assert response.dra is not None
    return [d for d in yaml.safe_load_all(response.dra.manifests) if d is not None]


@pytest.mark.parametrize("mps", [False, True])
def test_the_mix_gives_consistent_outputs(mps: bool) -> None:
    response = mixed(ALL, mps)
    plan, dra, plugin = response.sharing, response.dra, response.device_plugin
    assert plan is not None
    assert dra is not None
    assert plugin is not None
    docs = _docs(response)
    for doc in docs:
        kubernetes_validate.validate(doc, "1.36.0", strict=True)
    hosts = {h.host_workload for h in plan.hosts if h.host_workload}
    # Lone workloads keep a template each; host instances are shared claims instead.
    assert {t.workload for t in dra.claim_templates} == {"chat"}
    assert not hosts & {t.workload for t in dra.claim_templates}
    claims = [d for d in docs if d["kind"] == "ResourceClaim"]
    assert [c["metadata"]["name"] for c in claims] == [c.name for c in dra.shared_claims]
    assert len(claims) == sum(h.hosts for h in plan.hosts)
    # Every client is dealt to exactly one claim, no claim over its replicas.
    for group in plan.hosts:
        mine = [c for c in dra.shared_claims if (c.mode, c.profile) == (group.mode, group.profile)]
        assert len(mine) == group.hosts
        dealt: dict[str, int] = {}
        for c in mine:
            assert 0 < sum(x.count for x in c.clients) <= group.replicas
            for x in c.clients:
                dealt[x.workload] = dealt.get(x.workload, 0) + x.count
        assert dealt == {x.workload: x.count for x in group.clients}
    # The device plugin replicates each host as many times as a claim may have clients.
    replicas: dict[str, int] = {}
    for cfg in plugin.sharing:
        body = yaml.safe_load(cfg.config)["sharing"]
        for r in (body.get("timeSlicing") or body.get("mps"))["resources"]:
            replicas[r["name"]] = r["replicas"]
    assert replicas == {h.resource: h.replicas for h in plan.hosts}
    assert dra.feature_gates == (
        ["MPSSupport", "TimeSlicingSettings"] if mps else ["TimeSlicingSettings"]
    )
    # mig-parted: the MPS claims' GPUs are exactly the ones with MIG off.
    assert sorted(i for i, on in _config_devices(response).items() if not on) == (
        plan.whole_gpu_indices
    )
    assert sum(c.mode == "mps" for c in dra.shared_claims) == len(plan.whole_gpu_indices)


def _params(doc: dict[str, Any]) -> dict[str, Any]:
    (config,) = doc["spec"]["devices"]["config"]
    assert config["requests"] == [doc["spec"]["devices"]["requests"][0]["name"]]
    assert config["opaque"]["driver"] == "gpu.nvidia.com"
    params: dict[str, Any] = config["opaque"]["parameters"]
    return params


def test_shared_claims_carry_the_drivers_sharing_config() -> None:
    response = mixed(["dra"], mps=True)
    assert response.sharing is not None
    mps_group = next(h for h in response.sharing.hosts if h.mode == "mps")
    group_version = f"{_CONST['GroupName']}/{_CONST['Version']}"
    for doc in (d for d in _docs(response) if d["kind"] == "ResourceClaim"):
        params = _params(doc)
        assert params["apiVersion"] == group_version
        request = doc["spec"]["devices"]["requests"][0]["exactly"]
        expression = request["selectors"][0]["cel"]["expression"]
        profile = doc["metadata"]["annotations"].get("gpuplan/profile")
        if params["kind"] == _CONST["MigDeviceConfigKind"]:
            assert set(params["sharing"]) <= set(_STRUCTS["MigDeviceSharing"])
            assert params["sharing"] == {"strategy": _CONST["TimeSlicingStrategy"]}
            assert request["deviceClassName"] == "mig.nvidia.com"
            selection = f"{MIG_CLASS} && {expression}"
            assert evaluate(selection, mig_device(H100, profile))
            assert not evaluate(selection, mig_device(H100, "7g.80gb"))
            assert not evaluate(selection, whole_gpu(H100))
        else:
            assert params["kind"] == _CONST["GpuConfigKind"]
            sharing = params["sharing"]
            assert set(sharing) <= set(_STRUCTS["GpuSharing"])
            assert sharing["strategy"] == _CONST["MpsStrategy"]
            assert set(sharing["mpsConfig"]) <= set(_STRUCTS["MpsConfig"])
            limit_mib = mps_group.client_memory_limit_bytes // 2**20
            assert sharing["mpsConfig"] == {
                "defaultActiveThreadPercentage": mps_group.active_thread_percentage,
                "defaultPinnedDeviceMemoryLimit": f"{limit_mib}Mi",
            }
            assert request["deviceClassName"] == "gpu.nvidia.com"
            gpu_class = next(c for c in dra_module.DEVICE_CLASSES if c.name == "gpu.nvidia.com")
            selection = f"{gpu_class.expression} && {expression}"
            assert evaluate(selection, whole_gpu(H100))
            a100 = CATALOG.get("a100-sxm4-80gb")
            assert not evaluate(selection, whole_gpu(a100))
            assert not evaluate(selection, mig_device(H100, "1g.10gb"))


def test_a_claim_with_a_misspelt_field_fails_the_schema_check() -> None:
    doc = next(d for d in _docs(mixed(["dra"])) if d["kind"] == "ResourceClaim")
    kubernetes_validate.validate(doc, "1.36.0", strict=True)
    doc["spec"]["devices"]["config"][0]["opaqe"] = doc["spec"]["devices"]["config"][0].pop("opaque")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, "1.36.0", strict=True)


def test_claims_deal_clients_in_order_up_to_replicas() -> None:
    response = run(
        {
            "gpu": "h100-sxm5-80gb",
            "workloads": [
                {"name": "a", "memory_gib": 2, "count": 3, "sharing": "time-slicing"},
                {"name": "b", "memory_gib": 2, "count": 3, "sharing": "time-slicing"},
            ],
            "output": ["dra"],
        }
    )
    assert response.dra is not None
    assert response.sharing is not None
    (group,) = response.sharing.hosts
    dealt = [[(x.workload, x.count) for x in c.clients] for c in response.dra.shared_claims]
    assert sum(n for claim in dealt for _, n in claim) == 6
    flat = [w for claim in dealt for w, n in claim for _ in range(n)]
    assert flat == ["a"] * 3 + ["b"] * 3
    assert all(sum(n for _, n in claim) <= group.replicas for claim in dealt)
    names = [c.name for c in response.dra.shared_claims]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", n) for n in names)
