"""The live fleet as data: what one agent saw on one node, and what the API returns.

The agent builds a :class:`NodeSnapshot` every interval, publishes it to Redis and
the API reads it back; both sides share these Structs, so the wire format cannot
drift between writer and reader. Units are in the names and are base units: bytes,
watts, joules, hertz, seconds, FLOP/s. A field a device did not report is ``None``
(and its name is listed in ``unsupported_fields``), never a made-up zero.
"""

from typing import Annotated, Literal

import msgspec

from gpuplan.core.record import Record

Vendor = Literal["nvidia", "amd", "none"]
MatmulDtype = Literal["fp64", "fp32", "tf32", "fp16", "bf16", "fp8"]
CopyKind = Literal["h2d", "d2h", "d2d", "host_memcpy"]
CopyPath = Literal["pcie", "nvlink", "host_staged", "host_memory", "unknown"]
BenchmarkStatus = Literal["ok", "partial", "skipped", "error"]
SkipReason = Literal["busy", "mig", "lost", "unsupported", "failed", "timeout"]

Ratio = Annotated[float, msgspec.Meta(ge=0)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]
"""A share of a whole, 0 to 1 (the GPM activities: a busier-than-busy SM does not exist)."""
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]
Name = Annotated[str, msgspec.Meta(max_length=256)]


class CpuInfo(Record, kw_only=True):
    """The host: what CPU-mode benchmarks ran on, and its memory."""

    model_name: Name
    """``model name`` of /proc/cpuinfo, or the platform's processor string."""

    logical_cpus: NonNegativeInt
    """CPUs this process may run on (its affinity mask, not the machine's total)."""

    memory_total_bytes: NonNegativeInt | None = None
    """``MemTotal`` of /proc/meminfo."""


class GpuTelemetry(Record, kw_only=True):
    """One physical GPU at one instant."""

    index: NonNegativeInt
    """Index as the driver enumerates it (NVML index, amd-smi processor order)."""

    uuid: Name
    """``GPU-…`` for NVIDIA; the unique id amd-smi reports for AMD."""

    model_name: Name
    """Product name as the driver reports it, e.g. "NVIDIA H200"."""

    catalog_id: Name | None = None
    """The catalog SKU this model name resolves to, when it does."""

    up: bool = True
    """False once the driver reports the GPU lost; its other fields are then ``None``."""

    pci_bus_id: Name | None = None
    utilization_ratio: Ratio | None = None
    """Fraction of the sample period a kernel ran (NVML's coarse ``utilization.gpu``)."""

    memory_utilization_ratio: Ratio | None = None
    """Fraction of time the memory controller was busy (not capacity)."""

    sm_activity_ratio: Fraction | None = None
    """Fraction of the SMs busy, averaged since the previous sweep (NVML GPM
    ``SM_UTIL``; Hopper and newer). Unlike ``utilization_ratio``, one busy SM of 132
    reads 0.008, not 1."""

    tensor_activity_ratio: Fraction | None = None
    """Fraction of time the SMs ran tensor-core instructions of any precision, averaged
    since the previous sweep (NVML GPM ``ANY_TENSOR_UTIL``; Hopper and newer)."""

    dram_activity_ratio: Fraction | None = None
    """Fraction of the peak DRAM bandwidth used, averaged since the previous sweep (NVML
    GPM ``DRAM_BW_UTIL``; Hopper and newer)."""

    memory_total_bytes: NonNegativeInt | None = None
    memory_used_bytes: NonNegativeInt | None = None
    memory_free_bytes: NonNegativeInt | None = None
    power_watts: NonNegativeFloat | None = None
    power_limit_watts: NonNegativeFloat | None = None
    energy_joules: NonNegativeFloat | None = None
    """Energy since the driver loaded (a counter)."""

    temperature_celsius: float | None = None
    sm_clock_hertz: NonNegativeFloat | None = None
    memory_clock_hertz: NonNegativeFloat | None = None
    sm_clock_max_hertz: NonNegativeFloat | None = None
    pcie_generation: NonNegativeInt | None = None
    """Current link generation; idle GPUs often downshift, so read it under load."""

    pcie_width: NonNegativeInt | None = None
    pcie_max_generation: NonNegativeInt | None = None
    pcie_max_width: NonNegativeInt | None = None
    pcie_tx_bytes_per_second: NonNegativeFloat | None = None
    """NVML samples a byte counter over 20 ms: noisy, a hint rather than a rate."""

    pcie_rx_bytes_per_second: NonNegativeFloat | None = None
    nvlink_links_active: NonNegativeInt | None = None
    nvlink_version: NonNegativeInt | None = None
    nvlink_tx_bytes: NonNegativeInt | None = None
    """Cumulative NVLink payload bytes sent (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX)."""

    nvlink_rx_bytes: NonNegativeInt | None = None
    mig_enabled: bool | None = None
    compute_processes: NonNegativeInt | None = None
    """Processes holding a compute context; a benchmark runs only when this is 0."""

    unsupported_fields: list[Name] = []
    """Fields the device or driver does not support (skipped, not fatal)."""


class MigInstance(Record, kw_only=True):
    """One MIG GPU instance (with its compute instance) on one GPU of one node.

    ``placement_start``/``placement_size`` are in memory slices, as NVML reports them
    (8 slices on A100/H100/H200), which is what a slice query packs against.
    """

    node: Name
    gpu_index: NonNegativeInt
    gpu_uuid: Name
    gpu_model_name: Name
    mig_uuid: Name
    """``MIG-…``: what ``CUDA_VISIBLE_DEVICES`` accepts."""

    profile: Name
    """GPU-instance profile name, e.g. ``3g.40gb``."""

    gpu_instance_id: NonNegativeInt
    compute_instance_id: NonNegativeInt | None = None
    placement_start: NonNegativeInt | None = None
    placement_size: NonNegativeInt | None = None
    memory_bytes: NonNegativeInt
    """Memory of the instance as the driver reports it."""

    memory_used_bytes: NonNegativeInt | None = None
    in_use: bool
    """A process holds a compute context on this instance."""

    sm_activity_ratio: Fraction | None = None
    """Fraction of the SMs busy in this GPU instance, averaged since the previous sweep
    (NVML GPM ``SM_UTIL`` through ``nvmlGpmMigSampleGet``; Hopper and newer). GPM
    measures the GPU instance, so its compute instances all carry the same value.
    NVML's ``utilization.gpu`` has no per-instance reading at all."""

    tensor_activity_ratio: Fraction | None = None
    """Fraction of time this GPU instance's SMs ran tensor-core instructions of any
    precision, averaged since the previous sweep (NVML GPM ``ANY_TENSOR_UTIL``)."""

    dram_activity_ratio: Fraction | None = None
    """DRAM bandwidth this GPU instance used as a fraction of the peak, averaged since the
    previous sweep (NVML GPM ``DRAM_BW_UTIL``)."""


class MatmulResult(Record, kw_only=True):
    """Achieved dense matmul rate on one device and dtype."""

    device: Name
    """``cpu``, or the GPU's uuid."""

    gpu_index: NonNegativeInt | None = None
    model_name: Name
    dtype: MatmulDtype
    m: NonNegativeInt
    n: NonNegativeInt
    k: NonNegativeInt
    iterations: NonNegativeInt
    """Timed calls behind the median (after the warm-up)."""

    flops_per_second: NonNegativeFloat
    """Median over the timed calls of ``2·m·n·k / t``."""

    max_flops_per_second: NonNegativeFloat
    peak_flops: NonNegativeFloat | None = None
    """The catalog's dense peak for this model and dtype, when known."""

    ratio_to_peak: Ratio | None = None


class CopyResult(Record, kw_only=True):
    """Achieved copy bandwidth: host↔device, device↔device, or host memory."""

    device: Name
    """``cpu``, or the source GPU's uuid for d2d and d2h, the destination's for h2d."""

    gpu_index: NonNegativeInt | None = None
    peer_uuid: Name | None = None
    """The other GPU of a d2d copy."""

    peer_index: NonNegativeInt | None = None
    model_name: Name
    kind: CopyKind
    path: CopyPath
    size_bytes: NonNegativeInt
    bytes_per_second: NonNegativeFloat
    """Median of ``size_bytes / t`` (bytes moved once, not read plus write)."""

    peak_bytes_per_second: NonNegativeFloat | None = None
    """Catalog per-direction link rate (PCIe or NVLink) for this path, when known."""

    ratio_to_peak: Ratio | None = None


class BenchmarkSkip(Record, kw_only=True):
    """A device or dtype the benchmark did not measure, and why."""

    device: Name
    reason: SkipReason
    dtype: MatmulDtype | None = None
    detail: Annotated[str, msgspec.Meta(max_length=1000)] = ""


class BenchmarkReport(Record, kw_only=True):
    """One benchmark run of one node."""

    ts: NonNegativeFloat
    """Unix time the run finished."""

    status: BenchmarkStatus
    duration_seconds: NonNegativeFloat
    torch_version: Name | None = None
    detail: Annotated[str, msgspec.Meta(max_length=2000)] = ""
    matmul: list[MatmulResult] = []
    copy: list[CopyResult] = []
    skipped: list[BenchmarkSkip] = []


class NodeSnapshot(Record, kw_only=True):
    """Everything one agent publishes about its node."""

    node: Name
    ts: NonNegativeFloat
    """Unix time of the telemetry sweep."""

    agent_version: Name
    vendor: Vendor
    gpu_count: NonNegativeInt
    driver_version: Name | None = None
    interval_seconds: NonNegativeFloat
    ttl_seconds: NonNegativeFloat
    """The node is live until ``ts + ttl_seconds``; Redis expires it then."""

    cpu: CpuInfo
    gpus: list[GpuTelemetry] = []
    mig_instances: list[MigInstance] = []
    benchmark: BenchmarkReport | None = None
    unsupported_field_count: NonNegativeInt = 0
    """Sum over GPUs of ``len(unsupported_fields)``."""


class NodeList(Record, kw_only=True):
    """The live nodes of the fleet."""

    count: NonNegativeInt
    nodes: list[NodeSnapshot]


class MeasuredFlops(Record, kw_only=True):
    """Measured matmul FLOP/s of one catalog GPU model and dtype across the fleet."""

    catalog_id: Name
    dtype: MatmulDtype
    devices: NonNegativeInt
    """GPUs of this model with a result for this dtype."""

    median_flops_per_second: NonNegativeFloat
    """Median over those GPUs: the rate a planner should expect of one."""

    min_flops_per_second: NonNegativeFloat
    max_flops_per_second: NonNegativeFloat
    peak_flops: NonNegativeFloat | None = None
    ratio_to_peak: Ratio | None = None
