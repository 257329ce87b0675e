"""The built-in catalog: every entry valid, physically consistent, found by every name."""

import msgspec
import pytest

from gpuplan.core.catalog import PRECISIONS, Catalog, UnknownGpu, builtin_catalog, fold
from gpuplan.core.catalog.model import GpuSpec

GiB = 2**30
TERA = 1e12

REQUIRED_IDS = {
    "t4-16gb", "rtx-3050-8gb", "rtx-3060-12gb", "rtx-3090-24gb", "rtx-3090-ti-24gb",
    "rtx-4090-24gb", "rtx-5090-32gb", "a10-24gb", "a10g-24gb", "a40-48gb", "l4-24gb",
    "l40s-48gb", "v100-sxm2-16gb", "v100-sxm2-32gb", "a30-24gb", "a100-pcie-40gb",
    "a100-sxm4-40gb", "a100-pcie-80gb", "a100-sxm4-80gb", "h100-pcie-80gb", "h100-sxm5-80gb",
    "h100-nvl-94gb", "h200-sxm-141gb", "h200-nvl-141gb", "b200-180gb", "gb200-186gb",
    "mi250x", "mi300x-192gb", "mi325x-256gb", "mi355x-288gb",
    # MIG-capable parts of the MIG User Guide and mig-parted's default config
    "gh200-96gb", "gh200-144gb", "h20-96gb", "b300-288gb", "gb300-288gb", "rtx-pro-5000-48gb",
    "rtx-pro-6000-server-96gb", "rtx-pro-6000-workstation-96gb", "rtx-pro-6000-max-q-96gb",
}  # fmt: skip


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return builtin_catalog()


def test_every_required_sku_is_present(catalog: Catalog) -> None:
    assert {g.id for g in catalog} >= REQUIRED_IDS


def test_entries_round_trip_through_the_schema(catalog: Catalog) -> None:
    for gpu in catalog:
        assert msgspec.json.decode(msgspec.json.encode(gpu), type=GpuSpec) == gpu


def test_physical_consistency(catalog: Catalog) -> None:
    for gpu in catalog:
        assert gpu.usable_memory_bytes <= gpu.memory_bytes, gpu.id
        # The driver reserves a little, never most of it.
        assert gpu.usable_memory_bytes >= 0.9 * gpu.memory_bytes, gpu.id
        flops = gpu.peak_flops
        assert set(flops) <= set(PRECISIONS)
        if "fp8" in flops and "bf16" in flops:
            assert flops["fp8"] >= flops["bf16"], gpu.id
        if "fp4" in flops and "fp8" in flops:
            assert flops["fp4"] >= flops["fp8"], gpu.id
        if "bf16" in flops and "fp32" in flops:
            assert flops["bf16"] >= flops["fp32"], gpu.id
        assert gpu.mig.supported == (gpu.mig.max_instances > 0)
        link = gpu.interconnect.gpu_link
        if link is not None:
            assert link.per_direction_bytes_per_s * 2 == link.bidirectional_bytes_per_s
        # Every number has a source; every price a date and a source.
        for field in (
            "memory_bytes",
            "usable_memory_bytes",
            "memory_bandwidth_bytes_per_s",
            "tdp_watts",
        ):
            assert gpu.sources.get(field), (gpu.id, field)


def test_dense_not_sparse_figures(catalog: Catalog) -> None:
    h100 = catalog.get("h100-sxm5-80gb")
    assert h100.peak_flops["bf16"] == pytest.approx(989.5 * TERA)  # 1979 is the sparse figure
    assert h100.peak_flops["fp8"] == pytest.approx(1979 * TERA)
    assert catalog.get("a100-sxm4-80gb").peak_flops["bf16"] == pytest.approx(312 * TERA)
    assert catalog.get("l40s-48gb").peak_flops["fp16"] == pytest.approx(362 * TERA)
    assert catalog.get("l4-24gb").peak_flops["fp8"] == pytest.approx(242.5 * TERA)


def test_seed_guide_corrections(catalog: Catalog) -> None:
    # A100 NVLink is 600 GB/s total (not 200 GB/s, which is the A30 bridge).
    a100 = catalog.get("a100-sxm4-80gb").interconnect.gpu_link
    assert a100 is not None
    assert a100.bidirectional_bytes_per_s == 600e9
    a30 = catalog.get("a30-24gb").interconnect.gpu_link
    assert a30 is not None
    assert a30.bidirectional_bytes_per_s == 200e9
    # RTX 4090 dense FP16 tensor (FP32 accumulate) is 165 TFLOPS, not 61.
    assert catalog.get("rtx-4090-24gb").peak_flops["fp16"] == pytest.approx(165.2 * TERA)
    # MI300X has 192 GB (MI300A has 128).
    assert catalog.get("mi300x-192gb").memory_bytes == 192 * GiB
    # Per watt the A100 beats the RTX 4090 at dense FP16 tensor math, not the reverse.
    rtx = catalog.get("rtx-4090-24gb")
    a100_sxm = catalog.get("a100-sxm4-80gb")
    assert (
        a100_sxm.peak_flops["fp16"] / a100_sxm.tdp_watts
        > 2 * rtx.peak_flops["fp16"] / rtx.tdp_watts
    )


def test_precisions_a_part_lacks_are_absent(catalog: Catalog) -> None:
    assert "bf16" not in catalog.get("v100-sxm2-32gb").peak_flops
    assert "bf16" not in catalog.get("t4-16gb").peak_flops
    assert "fp8" not in catalog.get("a100-sxm4-80gb").peak_flops
    assert "fp4" in catalog.get("b200-180gb").peak_flops
    assert "fp4" not in catalog.get("h100-sxm5-80gb").peak_flops


def test_mig_capability(catalog: Catalog) -> None:
    expected = {"a30-24gb": 4, "a100-sxm4-40gb": 7, "a100-pcie-80gb": 7, "h100-sxm5-80gb": 7,
                "h200-sxm-141gb": 7, "b200-180gb": 7, "l40s-48gb": 0, "rtx-4090-24gb": 0,
                "h20-96gb": 7, "gh200-144gb": 7, "b300-288gb": 7, "gb300-288gb": 7,
                "rtx-pro-5000-48gb": 2, "rtx-pro-6000-max-q-96gb": 4}  # fmt: skip
    for gpu_id, count in expected.items():
        assert catalog.get(gpu_id).mig.max_instances == count


def test_scale_up_links(catalog: Catalog) -> None:
    # MI355X: 7 Infinity Fabric links of 153.6 GB/s (CDNA 4 white paper), not MI300X's 896 GB/s.
    link = catalog.get("mi355x-288gb").interconnect.gpu_link
    assert link is not None
    assert (link.links, link.bidirectional_bytes_per_s) == (7, 1_075_200_000_000)
    assert link.per_direction_bytes_per_s == 537_600_000_000
    assert "interconnect.gpu_link" not in catalog.get("mi355x-288gb").unverified
    mi300x = catalog.get("mi300x-192gb").interconnect.gpu_link
    assert mi300x is not None
    assert mi300x.bidirectional_bytes_per_s == 896_000_000_000


def test_new_mig_parts_mark_what_no_primary_source_confirms(catalog: Catalog) -> None:
    for gpu_id in ("h20-96gb", "rtx-pro-5000-48gb"):
        gpu = catalog.get(gpu_id)
        assert "peak_flops" in gpu.unverified, gpu_id
        assert "memory_bandwidth_bytes_per_s" in gpu.unverified, gpu_id
    # NVIDIA's Blackwell Ultra datasheet settles B300 and GB300 (audit 2026-12-05): nothing left
    # unverified; tests/test_audit_2026_12_05.py pins the values.
    for gpu_id in ("b300-288gb", "gb300-288gb"):
        gpu = catalog.get(gpu_id)
        assert gpu.unverified == [], gpu_id
        assert "nv-blackwell-ultra-datasheet" in {s.id for s in gpu.sources["peak_flops"]}, gpu_id
    for gpu_id in ("h20-96gb", "b300-288gb", "gb300-288gb", "rtx-pro-5000-48gb"):
        gpu = catalog.get(gpu_id)
        assert all(s.kind == "measured" for s in gpu.sources["usable_memory_bytes"]), gpu_id
    # Driver totals read on hardware; the MIG names round them up (7g.269gb, 7g.278gb, 7g.144gb).
    assert catalog.get("b300-288gb").usable_memory_bytes == 275040 * 2**20
    assert catalog.get("gb300-288gb").usable_memory_bytes == 284208 * 2**20
    assert catalog.get("gh200-144gb").usable_memory_bytes == 146831 * 2**20
    assert catalog.get("h20-96gb").usable_memory_bytes == 97871 * 2**20


def test_prices_carry_date_and_source(catalog: Catalog) -> None:
    priced = [g for g in catalog if g.price.cloud_on_demand or g.price.purchase]
    assert priced, "some SKUs have a sourced price"
    for gpu in priced:
        for quote in (gpu.price.cloud_on_demand, gpu.price.purchase):
            if quote is not None:
                assert quote.source
                assert quote.as_of.year >= 2018


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("h100-sxm5-80gb", "h100-sxm5-80gb"),
        ("H100-SXM5-80GB", "h100-sxm5-80gb"),
        ("H100 SXM", "h100-sxm5-80gb"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),  # NVML / nvidia-smi
        ("NVIDIA-H100-80GB-HBM3", "h100-sxm5-80gb"),  # GPU Feature Discovery label
        ("NVIDIA-H100-80GB-HBM3-SHARED", "h100-sxm5-80gb"),  # time-sliced node
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "a100-sxm4-80gb"),  # MIG single strategy
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090-24gb"),
        ("NVIDIA-GeForce-RTX-4090", "rtx-4090-24gb"),
        ("Tesla T4", "t4-16gb"),
        ("Tesla-T4", "t4-16gb"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
        ("NVIDIA H200", "h200-sxm-141gb"),
        ("NVIDIA H200 NVL", "h200-nvl-141gb"),
        ("NVIDIA L4", "l4-24gb"),
        ("0x2330", "h100-sxm5-80gb"),  # PCI device id
        ("10de:2330", "h100-sxm5-80gb"),
        ("0x233010DE", "h100-sxm5-80gb"),  # mig-parted device-filter form
        ("[10de:20b2]", "a100-sxm4-80gb"),  # lspci -nn
        ("0x74a1", "mi300x-192gb"),
        ("1002:74a1", "mi300x-192gb"),
        ("AMD Instinct MI300X", "mi300x-192gb"),
        ("NVIDIA H20", "h20-96gb"),
        ("0x232910DE", "h20-96gb"),
        ("NVIDIA GH200 144G HBM3e", "gh200-144gb"),
        ("NVIDIA B300 SXM6 AC", "b300-288gb"),
        ("0x318210DE", "b300-288gb"),
        ("NVIDIA GB300", "gb300-288gb"),
        ("0x31C210DE", "gb300-288gb"),
        ("NVIDIA RTX PRO 5000 Blackwell", "rtx-pro-5000-48gb"),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition", "rtx-pro-6000-max-q-96gb"),
        ("10de:2bb4", "rtx-pro-6000-max-q-96gb"),
    ],
)
def test_lookup_by_every_name_form(catalog: Catalog, query: str, expected: str) -> None:
    assert catalog.get(query).id == expected


def test_pci_vendor_must_match(catalog: Catalog) -> None:
    with pytest.raises(UnknownGpu):
        catalog.get("1002:2330")  # an NVIDIA device id under AMD's vendor id


def test_miss_suggests_closest(catalog: Catalog) -> None:
    with pytest.raises(UnknownGpu) as info:
        catalog.get("h100")
    assert {"h100-sxm5-80gb", "h100-pcie-80gb", "h100-nvl-94gb"} <= set(info.value.suggestions)
    with pytest.raises(UnknownGpu) as info:
        catalog.get("NVIDIA H100 80GB HMB3")  # a typo
    assert info.value.suggestions[0] == "h100-sxm5-80gb"


def test_names_are_unique_across_entries(catalog: Catalog) -> None:
    owner: dict[str, str] = {}
    for gpu in catalog:
        for name in {fold(n) for n in (gpu.id, gpu.name, *gpu.aliases, *gpu.nvml_names)}:
            assert owner.setdefault(name, gpu.id) == gpu.id, f"{name!r}: {owner[name]} and {gpu.id}"


def test_fold_matches_gfd_sanitising() -> None:
    # GFD deletes characters outside [A-Za-z0-9-_. ] and joins words with '-'.
    assert fold("NVIDIA-TITAN-X-Pascal") == fold("NVIDIA TITAN X (Pascal)")
    assert fold("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me") == fold("NVIDIA H100 80GB HBM3")
