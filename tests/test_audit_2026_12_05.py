"""Every fact the 2026-12-05 hardware audit corrected or decided, pinned to its source.

The audit (shared/reference/hardware-audit-2026-12-05.md) found 19 wrong facts (§2) and a list
of doubtful ones (§3); docs/catalog.md and docs/mig.md ("Audit 2026-12-05") say what was
decided and why. Each row here is one value: the data file, the key, the value, the source id
that file cites for it and the words of that source the value rests on. The value is read
through the real loaders (the built catalog, the MIG tables), the source must be in the
sources file and cited for that field, and its title must carry the quoted words, so a value
and its citation cannot drift apart. On the data before the audit every row of the first
two groups fails.
"""

import tomllib
from functools import cache
from importlib import resources
from typing import Any

import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.catalog.model import Source
from gpuplan.core.mig import builtin_tables

GiB = 2**30
NVIDIA, AMD, MIG = "nvidia.toml", "amd.toml", "profiles.toml"
SOURCES = {
    NVIDIA: ("gpuplan.core.catalog.data", "sources.toml"),
    AMD: ("gpuplan.core.catalog.data", "sources.toml"),
    MIG: ("gpuplan.core.mig.data", "sources.toml"),
}


def eng(decoders: int, encoders: int, jpeg: int, ofa: int, copy: int) -> dict[str, int]:
    return {"decoders": decoders, "encoders": encoders, "jpeg": jpeg, "ofa": ofa, "copy": copy}


# (file, key, value, source id, quote). A catalog key is `gpu-id:field`, a MIG key
# `table/profile:field`.
Row = tuple[str, str, Any, str, str]

WRONG: list[Row] = [
    # §2, catalog: over-stated rates and capacities.
    (NVIDIA, "rtx-pro-6000-server-96gb:peak_flops.fp32", 120e12, "nv-rtx-pro-6000-server-page",
     "Single-Precision Performance (FP32): 120 TFLOPS"),
    (NVIDIA, "rtx-pro-6000-server-96gb:peak_flops.tf32", 234e12, "nv-rtx-pro-6000-server-page",
     "TF32 Tensor Core: 234 TFLOPS"),
    (NVIDIA, "rtx-pro-6000-max-q-96gb:peak_flops.fp4", 1755.5e12, "nv-rtx-pro-6000-max-q-datasheet",
     "3511 AI TOPS"),
    (NVIDIA, "b300-288gb:memory_bytes", 270 * GiB, "nv-blackwell-ultra-datasheet",
     "270 GB HBM3E | 7.7 TB/s"),
    (NVIDIA, "b300-288gb:peak_flops.int8", 153.5e12, "nv-blackwell-ultra-datasheet", "INT8 307 TOPS"),
    (NVIDIA, "gb300-288gb:memory_bytes", 279 * GiB, "nv-blackwell-ultra-datasheet",
     "279 GB HBM3E | 8 TB/s"),
    (NVIDIA, "gb300-288gb:peak_flops.fp64", 1.3e12, "nv-blackwell-ultra-datasheet", "FP64 1.3 TFLOPS"),
    # §2, MIG memory against NVIDIA's own nvidia-smi mig -lgip.
    (MIG, "h200-141gb/7g.141gb:memory_bytes", 139.75 * GiB, "smi-lgip-h200", "MIG 7g.141gb 0 1/1 139.75"),
    (MIG, "h200-141gb/1g.35gb:memory_bytes", 32.25 * GiB, "smi-lgip-h200", "MIG 1g.35gb 15 4/4 32.25"),
    (MIG, "h200-141gb/3g.71gb:memory_bytes", 69.5 * GiB, "smi-lgip-h200", "MIG 3g.71gb 9 2/2 69.50"),
    (MIG, "h200-141gb/4g.71gb:memory_bytes", 69.5 * GiB, "smi-lgip-h200", "MIG 4g.71gb 5 1/1 69.50"),
    (MIG, "gb200-186gb/1g.23gb:memory_bytes", 22 * GiB, "smi-lgip-gb200", "MIG 1g.23gb 19 7/7 22.00"),
    (MIG, "gb200-186gb/1g.23gb+me:memory_bytes", 22 * GiB, "smi-lgip-gb200",
     "MIG 1g.23gb+me 20 1/1 22.00"),
    (MIG, "gb200-186gb/1g.47gb:memory_bytes", 45.5 * GiB, "smi-lgip-gb200", "MIG 1g.47gb 15 4/4 45.50"),
    (MIG, "gb200-186gb/2g.47gb:memory_bytes", 45.5 * GiB, "smi-lgip-gb200", "MIG 2g.47gb 14 3/3 45.50"),
    (MIG, "gh200-144gb/1g.18gb:memory_bytes", 17.5 * GiB, "smi-lgip-gh200-144gb",
     "MIG 1g.18gb 19 7/7 17.50"),
    (MIG, "gh200-144gb/1g.18gb+me:memory_bytes", 17.5 * GiB, "smi-lgip-gh200-144gb",
     "MIG 1g.18gb+me 20 1/1 17.50"),
    (MIG, "gh200-144gb/1g.36gb:memory_bytes", 35.25 * GiB, "smi-lgip-gh200-144gb",
     "MIG 1g.36gb 15 4/4 35.25"),
    (MIG, "gh200-144gb/2g.36gb:memory_bytes", 35.25 * GiB, "smi-lgip-gh200-144gb",
     "MIG 2g.36gb 14 3/3 35.25"),
]  # fmt: skip

# The IDs and engines the same captures give (the data had none for these profiles).
IDS_AND_ENGINES: list[Row] = [
    (MIG, "h200-141gb/1g.35gb:profile_id", 15, "smi-lgip-h200", "MIG 1g.35gb 15 4/4 32.25"),
    (MIG, "h200-141gb/3g.71gb:profile_id", 9, "smi-lgip-h200", "MIG 3g.71gb 9 2/2 69.50"),
    (MIG, "h200-141gb/4g.71gb:profile_id", 5, "smi-lgip-h200", "MIG 4g.71gb 5 1/1 69.50"),
    (MIG, "gb200-186gb/1g.23gb:profile_id", 19, "smi-lgip-gb200", "MIG 1g.23gb 19 7/7 22.00"),
    (MIG, "gb200-186gb/1g.23gb+me:profile_id", 20, "smi-lgip-gb200", "MIG 1g.23gb+me 20 1/1 22.00"),
    (MIG, "gb200-186gb/1g.47gb:profile_id", 15, "smi-lgip-gb200", "MIG 1g.47gb 15 4/4 45.50"),
    (MIG, "gb200-186gb/2g.47gb:profile_id", 14, "smi-lgip-gb200", "MIG 2g.47gb 14 3/3 45.50"),
    (MIG, "gb200-186gb/1g.23gb:engines", eng(1, 0, 1, 0, 2), "smi-lgip-gb200",
     "(18 SMs, 1 DEC, 0 ENC, 2 CE, 1 JPEG, 0 OFA)"),
    (MIG, "gb200-186gb/1g.23gb+me:engines", eng(1, 0, 1, 1, 2), "smi-lgip-gb200",
     "MIG 1g.23gb+me 20 1/1 22.00\" (OFA 1)"),
    (MIG, "gb200-186gb/1g.47gb:engines", eng(1, 0, 1, 0, 2), "smi-lgip-gb200",
     "(32 SMs, 1 DEC, 0 ENC, 2 CE, 1 JPEG, 0 OFA)"),
    (MIG, "gb200-186gb/2g.47gb:engines", eng(2, 0, 2, 0, 4), "smi-lgip-gb200-preproduction",
     "38 SMs, 2 DEC, 0 ENC, 4 CE, 2 JPEG, 0 OFA"),
    (MIG, "gh200-144gb/1g.18gb:profile_id", 19, "smi-lgip-gh200-144gb", "MIG 1g.18gb 19 7/7 17.50"),
    (MIG, "gh200-144gb/1g.18gb+me:profile_id", 20, "smi-lgip-gh200-144gb",
     "MIG 1g.18gb+me 20 1/1 17.50"),
    (MIG, "gh200-144gb/1g.36gb:profile_id", 15, "smi-lgip-gh200-144gb", "MIG 1g.36gb 15 4/4 35.25"),
    (MIG, "gh200-144gb/2g.36gb:profile_id", 14, "smi-lgip-gh200-144gb", "MIG 2g.36gb 14 3/3 35.25"),
    (MIG, "gh200-144gb/1g.18gb:engines", eng(1, 0, 1, 0, 1), "smi-lgip-gh200-144gb",
     "(16 SMs, 1 DEC, 0 ENC, 1 CE, 1 JPEG, 0 OFA)"),
    (MIG, "gh200-144gb/1g.18gb+me:engines", eng(1, 0, 1, 1, 1), "smi-lgip-gh200-144gb",
     "MIG 1g.18gb+me 20 1/1 17.50\" (OFA 1)"),
    (MIG, "gh200-144gb/1g.36gb:engines", eng(1, 0, 1, 0, 1), "smi-lgip-gh200-144gb",
     "(26 SMs, 1 DEC, 1 CE, 1 JPEG)"),
    (MIG, "gh200-144gb/2g.36gb:engines", eng(2, 0, 2, 0, 2), "smi-lgip-gh200-144gb",
     "(32 SMs, 2 DEC, 0 ENC, 2 CE, 2 JPEG, 0 OFA)"),
]  # fmt: skip

# §3: the doubtful facts, decided (docs/catalog.md and docs/mig.md say why).
DECIDED: list[Row] = [
    # The Server Edition's tensor rates at its own clock (the page's figures read as sparse).
    (NVIDIA, "rtx-pro-6000-server-96gb:peak_flops.fp16", 480e12, "nv-rtx-pro-6000-server-page",
     "FP16 | BF16 Tensor Core: 1 PFLOP"),
    (NVIDIA, "rtx-pro-6000-server-96gb:peak_flops.bf16", 480e12, "nv-rtx-pro-6000-server-page",
     "FP16 | BF16 Tensor Core: 1 PFLOP"),
    (NVIDIA, "rtx-pro-6000-server-96gb:peak_flops.fp8", 960e12, "nv-rtx-pro-6000-server-page",
     "FP8 Tensor Core: 2 PFLOPS"),
    (NVIDIA, "rtx-pro-6000-server-96gb:peak_flops.int8", 960e12, "rtx-pro-6000-server-derived",
     "FP8 and INT8 8 x"),
    (NVIDIA, "rtx-pro-6000-server-96gb:peak_flops.fp4", 1920e12, "nv-rtx-pro-6000-server-page",
     "FP4 Tensor Core: 4 PFLOPS"),
    (NVIDIA, "rtx-pro-6000-server-96gb:peak_flops.fp64", 1.875e12, "rtx-pro-6000-server-derived",
     "FP64 FP32 / 64"),
    # The Max-Q's tensor ladder follows its datasheet's FP4.
    (NVIDIA, "rtx-pro-6000-max-q-96gb:peak_flops.fp8", 877.75e12, "rtx-pro-6000-max-q-derived",
     "FP8 and INT8 = FP4 / 2"),
    (NVIDIA, "rtx-pro-6000-max-q-96gb:peak_flops.fp16", 438.875e12, "rtx-pro-6000-max-q-derived",
     "FP16/BF16 (FP32 accumulate) = FP8 / 2"),
    (NVIDIA, "rtx-pro-6000-max-q-96gb:peak_flops.tf32", 219.4375e12, "rtx-pro-6000-max-q-derived",
     "TF32 = FP16 / 2"),
    # Blackwell Ultra: the datasheet's per-GPU figure where the HGX page's 8-GPU total differs.
    (NVIDIA, "b300-288gb:peak_flops.fp64", 1.2e12, "nv-blackwell-ultra-datasheet", "FP64 1.2 TFLOPS"),
    # PCI ids that may name another SKU stay out.
    (NVIDIA, "gb300-288gb:pci_device_ids", ["0x31c2"], "pciids", "31c3  GB110 [GB300]"),
    (AMD, "mi250x:pci_device_ids", ["0x7408"], "pciids", "740c  Aldebaran/MI200 [Instinct MI250X/MI250]"),
    # MIG memory: the lower figure where captures disagree.
    (MIG, "h200-141gb/2g.35gb:memory_bytes", 32.25 * GiB, "smi-lgip-h200", "MIG 2g.35gb 14 3/3 32.25"),
    (MIG, "rtx-pro-6000-96gb/1g.24gb:memory_bytes", 23.125 * GiB, "smi-lgip-rtx-pro-6000-vgpu-host",
     "MIG 1g.24gb 14 4/4 23.12"),
    (MIG, "rtx-pro-6000-96gb/1g.24gb+me.all:memory_bytes", 23.125 * GiB,
     "smi-lgip-rtx-pro-6000-vgpu-host", "MIG 1g.24gb 14 4/4 23.12\" (and +me, +gfx, +me.all, -me)"),
    (MIG, "rtx-pro-6000-96gb/2g.48gb:memory_bytes", 46.5 * GiB, "smi-lgip-rtx-pro-6000-vgpu-host",
     "MIG 2g.48gb 5 2/2 46.50"),
    (MIG, "rtx-pro-6000-96gb/2g.48gb-me:memory_bytes", 46.5 * GiB, "smi-lgip-rtx-pro-6000-vgpu-host",
     "MIG 2g.48gb 5 2/2 46.50\" (and +gfx, +me.all, -me)"),
    (MIG, "rtx-pro-6000-96gb/4g.96gb:memory_bytes", 95 * GiB, "smi-lgip-rtx-pro-6000-max-q",
     "4g.96gb 95.00 GiB"),
    # B200 engines as the driver reports them, not the User Guide's Table 9.
    (MIG, "b200-180gb/2g.45gb:engines", eng(2, 0, 2, 0, 4), "smi-lgip-b200-nvidia",
     "MIG 2g.45gb 14 3/3 44.25 No 36 2 0 / 4 2 0"),
    (MIG, "b200-180gb/3g.90gb:engines", eng(3, 0, 3, 0, 6), "nvidiadra-captures", "3g 3/3/6"),
    (MIG, "b200-180gb/4g.90gb:engines", eng(4, 0, 4, 0, 8), "nvidiadra-captures", "4g 4/4/8"),
    (MIG, "b200-180gb/7g.180gb:engines", eng(7, 0, 7, 1, 16), "nvidiadra-captures", "7g 7/7/16"),
]  # fmt: skip

# §3's last list: fields the catalog marked `unverified` that a source now settles (the value
# is unchanged except where a row above changed it); each is no longer listed as unverified.
SETTLED: list[Row] = [
    (NVIDIA, "b300-288gb:memory_bandwidth_bytes_per_s", 7_700_000_000_000,
     "nv-blackwell-ultra-datasheet", "270 GB HBM3E | 7.7 TB/s"),
    (NVIDIA, "b300-288gb:peak_flops.fp4", 14_000e12, "nv-blackwell-ultra-datasheet", "FP4 18 | 14 PFLOPS"),
    (NVIDIA, "b300-288gb:peak_flops.fp8", 4_500e12, "nv-blackwell-ultra-datasheet", "FP8/FP6 9"),
    (NVIDIA, "b300-288gb:peak_flops.fp16", 2_250e12, "nv-blackwell-ultra-datasheet", "FP16/BF16 4.5"),
    (NVIDIA, "b300-288gb:peak_flops.tf32", 1_100e12, "nv-blackwell-ultra-datasheet", "TF32 2.2"),
    (NVIDIA, "b300-288gb:peak_flops.fp32", 75e12, "nv-blackwell-ultra-datasheet", "FP32 75 TFLOPS"),
    (NVIDIA, "b300-288gb:tdp_watts", 1100, "nv-blackwell-ultra-datasheet", "up to 1,100W"),
    (NVIDIA, "b300-288gb:interconnect.pcie.generation", 6, "nv-blackwell-ultra-datasheet", "PCIe Gen6"),
    (NVIDIA, "b300-288gb:interconnect.gpu_link.bidirectional_bytes_per_s", 1_800_000_000_000,
     "nv-blackwell-ultra-datasheet", "NVLink 5 1.8 TB/s"),
    (NVIDIA, "gb300-288gb:memory_bandwidth_bytes_per_s", 8_000_000_000_000,
     "nv-blackwell-ultra-datasheet", "279 GB HBM3E | 8 TB/s"),
    (NVIDIA, "gb300-288gb:peak_flops.fp4", 15_000e12, "nv-blackwell-ultra-datasheet", "FP4 20 | 15 PFLOPS"),
    (NVIDIA, "gb300-288gb:peak_flops.fp8", 5_000e12, "nv-blackwell-ultra-datasheet", "FP8/FP6 10"),
    (NVIDIA, "gb300-288gb:peak_flops.fp16", 2_500e12, "nv-blackwell-ultra-datasheet", "FP16/BF16 5"),
    (NVIDIA, "gb300-288gb:peak_flops.tf32", 1_250e12, "nv-blackwell-ultra-datasheet", "TF32 2.5"),
    (NVIDIA, "gb300-288gb:peak_flops.fp32", 80e12, "nv-blackwell-ultra-datasheet", "FP32 80 TFLOPS"),
    (NVIDIA, "gb300-288gb:peak_flops.int8", 165e12, "nv-blackwell-ultra-datasheet", "INT8 330 TOPS"),
    (NVIDIA, "gb300-288gb:tdp_watts", 1400, "nv-blackwell-ultra-datasheet", "TDP up to 1,400W"),
    (NVIDIA, "gb300-288gb:interconnect.gpu_link.max_gpus", 72, "nv-gb300-nvl72-page",
     "72 Blackwell Ultra GPUs"),
    (NVIDIA, "rtx-pro-6000-server-96gb:memory_bandwidth_bytes_per_s", 1_597_000_000_000,
     "nv-rtx-pro-6000-server-page", "Memory Bandwidth: 1597 GB/s"),
    (NVIDIA, "rtx-pro-6000-max-q-96gb:memory_bandwidth_bytes_per_s", 1_792_000_000_000,
     "nv-rtx-pro-6000-max-q-datasheet", "1792 GB/s"),
    (NVIDIA, "h200-nvl-141gb:usable_memory_bytes", 143_771 * 2**20, "h200-nvl-captures", "143771MiB"),
    (NVIDIA, "b200-180gb:interconnect.pcie.generation", 5, "nv-blackwell-tech-brief", "PCIe Gen5"),
    (AMD, "mi300x-192gb:interconnect.gpu_link.bidirectional_bytes_per_s", 896_000_000_000,
     "amd-rocm-workload-7-2-4", "P2P ring aggregate BW 896 GB/s"),
    (AMD, "mi300x-192gb:interconnect.pcie.generation", 5, "amd-mi300x-page", "PCIe 5.0 x16"),
    (AMD, "mi325x-256gb:interconnect.gpu_link.bidirectional_bytes_per_s", 896_000_000_000,
     "amd-rocm-workload-7-2-4", "P2P ring aggregate BW 896 GB/s"),
    (AMD, "mi325x-256gb:peak_flops.fp64", 163.4e12, "amd-rocm-workload-7-2-4", "FP64 Matrix 163.4"),
    (AMD, "mi325x-256gb:peak_flops.fp32", 163.4e12, "amd-rocm-workload-7-2-4", "FP32 163.4"),
    (AMD, "mi325x-256gb:peak_flops.int8", 2_614.9e12, "amd-rocm-workload-7-2-4", "INT8 2.6 POPs"),
]  # fmt: skip


@cache
def source_titles(file: str) -> dict[str, str]:
    """The sources file next to ``file``, read as a plain TOML document: id -> title."""
    package, name = SOURCES[file]
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    return {k: v["title"] for k, v in tomllib.loads(text)["sources"].items()}


def _dig(value: Any, path: list[str]) -> Any:
    for part in path:
        value = value[part]
    return value


def read(file: str, key: str) -> tuple[Any, list[Source], list[str]]:
    """The value at ``key`` as the loaders build it, the sources its field cites, and the
    unverified list that applies to it."""
    where, field = key.split(":")
    if file == MIG:
        table_id, name = where.split("/")
        table = next(t for t in builtin_tables() if t.id == table_id)
        profile = next(p for p in table.profiles if p.name == name)
        value = msgspec.to_builtins(getattr(profile, field))
        # A profile ID is a row fact: the table's sources, like names and counts.
        cited = table.sources if field == "profile_id" else profile.sources.get(field, [])
        return value, cited, list(profile.unverified)
    gpu = builtin_catalog().get(where)
    head, *rest = field.split(".")
    value = _dig(msgspec.to_builtins(getattr(gpu, head)), rest)
    if head == "peak_flops":
        cited = gpu.sources.get(field) or gpu.sources["peak_flops"]
    else:
        cited = gpu.sources[head]
    return value, cited, list(gpu.unverified)


def _check(file: str, key: str, expected: Any, source_id: str, quote: str) -> list[str]:
    value, cited, unverified = read(file, key)
    assert value == expected, f"{file} {key}: {value!r}, the source says {expected!r}"
    titles = source_titles(file)
    assert source_id in titles, f"{source_id} is not in the sources file of {file}"
    assert source_id in {s.id for s in cited}, f"{file} {key} does not cite {source_id}"
    assert quote in titles[source_id], f"{source_id}'s title does not carry {quote!r}"
    return unverified


def _id(row: Row) -> str:
    return row[1]


@pytest.mark.parametrize("row", WRONG, ids=_id)
def test_the_19_wrong_facts_are_corrected(row: Row) -> None:
    _check(*row)


def test_the_audit_counted_19() -> None:
    assert len(WRONG) == 19
    assert len({r[1] for r in WRONG}) == 19


@pytest.mark.parametrize("row", IDS_AND_ENGINES, ids=_id)
def test_ids_and_engines_from_the_same_captures(row: Row) -> None:
    _check(*row)


@pytest.mark.parametrize("row", DECIDED, ids=_id)
def test_the_doubtful_facts_as_decided(row: Row) -> None:
    _check(*row)


@pytest.mark.parametrize("row", SETTLED, ids=_id)
def test_unverified_fields_a_source_settles(row: Row) -> None:
    file, key = row[0], row[1]
    unverified = _check(*row)
    field = key.split(":")[1]
    assert not any(field == u or field.startswith(u + ".") for u in unverified), (file, key)


def test_what_stays_derived_is_marked() -> None:
    """The decided tensor rates of the Server Edition and the Max-Q are derived: listed in
    `unverified` per precision, while the rates NVIDIA prints are not."""
    catalog = builtin_catalog()
    server = {f"peak_flops.{p}" for p in ("fp64", "fp16", "bf16", "fp8", "int8", "fp4")}
    assert set(catalog.get("rtx-pro-6000-server-96gb").unverified) == server
    max_q = {f"peak_flops.{p}" for p in ("fp64", "tf32", "fp16", "bf16", "fp8", "int8")}
    assert set(catalog.get("rtx-pro-6000-max-q-96gb").unverified) == max_q
    gb200 = {p.name: p for p in next(t for t in builtin_tables() if t.id == "gb200-186gb").profiles}
    # 2g.47gb's CE, JPEG and OFA are the pre-production board's.
    assert "engines" in gb200["2g.47gb"].unverified
    assert "engines" not in gb200["1g.47gb"].unverified


def test_no_mig_profile_holds_more_than_its_gpu() -> None:
    """With B300 at 270 GiB and GB300 at 279 GiB, every profile (the full 7g ones included)
    still fits in the GPU's marketed and its driver-reported memory."""
    catalog = builtin_catalog()
    for table in builtin_tables():
        biggest = max(p.memory_bytes for p in table.profiles)
        for gpu_id in table.gpus:
            gpu = catalog.get(gpu_id)
            assert biggest <= gpu.usable_memory_bytes <= gpu.memory_bytes, (table.id, gpu_id)
