"""The catalog's public Structs: one :class:`GpuSpec` per accelerator SKU.

These field names are part of the API. Conventions that every consumer relies on:

- Bytes are ints. ``memory_bytes`` is the marketed capacity, which for GPU memory is
  binary: an "80 GB" HBM part carries 80 GiB (5 stacks of 16 GiB), so it is stored as
  80 * 2**30. ``usable_memory_bytes`` is what the driver reports as total
  (``nvidia-smi --query-gpu=memory.total``); allocations must fit below it.
- ``peak_flops`` is **dense** (no 2:4 sparsity) FLOP/s per precision (OP/s for int8),
  the best rate a matrix multiply can reach: tensor or matrix cores where the part has
  them. FP16/BF16 is the rate with FP32 accumulation, which is what training uses;
  GeForce parts run it at half their FP16-accumulate rate. A precision the part has
  no path for is absent.
- Link bandwidths are stored both ways: vendors quote NVLink and Infinity Fabric as
  the total of both directions, while a transfer of N bytes between two GPUs moves
  at the per-direction rate.
"""

import datetime
from typing import Annotated, Literal, get_args

import msgspec

from gpuplan.core.record import Record

Vendor = Literal["nvidia", "amd", "intel"]
Precision = Literal["fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4"]
PRECISIONS: tuple[Precision, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")
FormFactor = Literal["pcie", "sxm", "oam", "superchip"]
MemoryType = Literal["GDDR6", "GDDR6X", "GDDR7", "HBM2", "HBM2e", "HBM3", "HBM3e"]
LinkTechnology = Literal["nvlink", "infinity-fabric", "ethernet-roce"]
PriceKind = Literal["on_demand", "spot", "reserved"]
ProviderId = Literal["aws", "azure", "coreweave", "gcp", "lambda", "nebius", "runpod", "together"]
"""The price tables (``core/catalog/data/prices/<provider>.toml``); the loader refuses a
table of another name and a name without a table."""
PROVIDERS: tuple[ProviderId, ...] = get_args(ProviderId)
SourceKind = Literal[
    "primary", "reproduced-primary", "secondary", "measured", "derived", "recalled"
]

Slug = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9-]*[a-z0-9]$", max_length=64)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
PciDeviceId = Annotated[str, msgspec.Meta(pattern=r"^0x[0-9a-f]{4}$")]
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]


class Source(Record, kw_only=True):
    """Where a number comes from."""

    id: Slug
    """Key of the source in the catalog data."""

    title: Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
    """What the source is, e.g. "NVIDIA H100 Tensor Core GPU datasheet"."""

    url: str | None = None
    """Where to read it, when it is online."""

    kind: SourceKind
    """``primary``: the vendor's own document; ``reproduced-primary``: a copy of one;
    ``secondary``: a third party; ``measured``: hardware output; ``derived``: computed
    from other confirmed figures; ``recalled``: not re-read for this catalog. A field
    citing only derived or recalled sources is listed in ``unverified``."""


class Pcie(Record):
    """The host link."""

    generation: Annotated[int, msgspec.Meta(ge=1, le=6)]
    """PCIe generation (3, 4, 5, …)."""

    lanes: Literal[1, 2, 4, 8, 16]
    """Electrical lanes (an RTX 3050 has 8)."""

    per_direction_bytes_per_s: PositiveInt
    """Payload rate each way after line coding (Gen4 x16: 31.5 GB/s)."""

    bidirectional_bytes_per_s: PositiveInt
    """Both directions together, as NVIDIA quotes it ("PCIe Gen4: 64 GB/s")."""


class GpuLink(Record, kw_only=True):
    """The GPU-to-GPU scale-up link (NVLink, Infinity Fabric, on-die RoCE)."""

    technology: LinkTechnology
    """Which link."""

    generation: Annotated[int, msgspec.Meta(ge=1, le=10)] | None = None
    """Link generation (NVLink 4 on Hopper, Infinity Fabric 4 on MI300)."""

    links: PositiveInt | None = None
    """Links per GPU, where the vendor states it."""

    bidirectional_bytes_per_s: PositiveInt
    """Total of both directions per GPU, the vendor's figure (H100 SXM: 900 GB/s)."""

    per_direction_bytes_per_s: PositiveInt
    """Half of that: the rate one transfer sees."""

    max_gpus: Annotated[int, msgspec.Meta(ge=2)]
    """Most GPUs one link domain joins at that bandwidth (2 for a bridge, 8 for HGX)."""

    switched: bool
    """True behind an NVSwitch (all-to-all at full rate); false for bridges and meshes."""


class Interconnect(Record):
    """How the GPU talks to the host and to other GPUs."""

    pcie: Pcie | None = None
    """Absent where the GPU has no PCIe host link (GB200 reaches Grace over NVLink-C2C)."""

    gpu_link: GpuLink | None = None
    """Absent when GPUs only meet over PCIe (RTX 4090, L4, L40S)."""


class MigSupport(Record):
    """Multi-Instance GPU support; the profiles live in the MIG data."""

    supported: bool
    max_instances: Annotated[int, msgspec.Meta(ge=0, le=8)]
    """Most GPU instances at once (7 on A100/H100, 4 on A30); 0 when unsupported."""


class CloudPrice(Record):
    """A negotiated cloud price per GPU-hour, set by a catalog file; volatile, so it
    always carries its date. It wins over every provider's price table."""

    usd_per_gpu_hour: PositiveFloat
    as_of: datetime.date
    source: Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
    """Who charges it, and where the figure was read."""


class CloudQuote(Record, kw_only=True):
    """One provider's published price of one GPU, from that provider's price table
    (``core/catalog/data/prices/<provider>.toml``)."""

    provider: ProviderId
    """The price table it comes from."""

    kind: PriceKind
    """``on_demand``: no commitment; ``spot``: interruptible capacity; ``reserved``: a
    commitment of ``term``."""

    usd_per_gpu_hour: PositiveFloat
    """The instance's hourly price divided by its GPUs (``usd_per_instance_hour`` /
    ``gpus``), or the provider's own per-GPU price where it quotes one."""

    as_of: datetime.date
    """The day the price was read."""

    instance: Name
    """What was priced (an instance type or the provider's product name): the cheapest
    shape the provider lists for this GPU and kind."""

    gpus: PositiveInt = 1
    """GPUs in that instance."""

    usd_per_instance_hour: PositiveFloat | None = None
    """The instance's price, where the provider prices instances rather than GPUs."""

    term: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    """The commitment of a ``reserved`` price (e.g. "91-180 days")."""

    source: Source
    """Where the price was read."""


class PriceProvider(Record, kw_only=True):
    """A price table: whose prices, where, and how its per-GPU figures were read."""

    id: ProviderId
    name: Name
    """The provider, e.g. "Amazon Web Services (EC2)"."""

    region: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] | None = None
    """The region priced, where prices vary by region."""

    method: Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
    """How a per-GPU price was taken from the provider's list (which instance shape,
    which tier)."""


class PurchasePrice(Record):
    """A purchase (list) price per GPU."""

    usd: PositiveFloat
    as_of: datetime.date
    source: Annotated[str, msgspec.Meta(min_length=1, max_length=500)]


class Price(Record):
    """Known prices; a price no source gives is absent rather than invented."""

    cloud_on_demand: CloudPrice | None = None
    """A negotiated price from a catalog file (``[gpu.price.cloud_on_demand]``); it wins
    over the price tables. The built-in data sets none."""

    purchase: PurchasePrice | None = None
    cloud: list[CloudQuote] = []
    """Every provider's published price of this GPU (from the price tables, never from a
    catalog entry), by provider and kind. A provider that does not list the GPU is
    absent."""


class GpuSpec(Record, kw_only=True):
    """One accelerator SKU."""

    id: Slug
    """Stable slug, e.g. ``h100-sxm5-80gb``."""

    vendor: Vendor
    name: Name
    """Marketing name, e.g. "NVIDIA H100 SXM5 80GB"."""

    architecture: Name
    """Architecture and die, e.g. "Hopper (GH100)"."""

    aliases: list[Name] = []
    """Other names it is looked up by (case and punctuation do not matter)."""

    nvml_names: list[Name] = []
    """Product names the driver reports (NVML, nvidia-smi, amd-smi)."""

    pci_device_ids: list[PciDeviceId] = []
    """PCI device ids, lower-case hex (the vendor id is implied by ``vendor``)."""

    memory_bytes: PositiveInt
    """Marketed memory capacity (binary: "80 GB" is 80 GiB)."""

    usable_memory_bytes: PositiveInt
    """Total memory the driver reports; allocations fit below this."""

    memory_type: MemoryType
    memory_bandwidth_bytes_per_s: PositiveInt
    """Peak DRAM bandwidth (decimal: 3.35 TB/s is 3.35e12)."""

    peak_flops: dict[Precision, PositiveFloat]
    """Dense FLOP/s (OP/s for int8) per precision; FP16/BF16 with FP32 accumulate."""

    tdp_watts: PositiveInt
    """Board power limit at the default (maximum) configuration."""

    interconnect: Interconnect
    form_factor: FormFactor
    mig: MigSupport
    launch_year: Annotated[int, msgspec.Meta(ge=2010, le=2100)]
    price: Price = msgspec.field(default_factory=Price)
    sources: dict[str, list[Source]] = {}
    """Field (or ``peak_flops.<precision>``) to the sources of its value."""

    unverified: list[str] = []
    """Fields whose values are derived or not confirmed by a primary source."""
