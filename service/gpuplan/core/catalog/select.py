"""Filtering and sorting the catalog, as ``GET /v1/gpus`` offers it."""

from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args

import msgspec

from gpuplan.core.catalog.catalog import Catalog
from gpuplan.core.catalog.model import PRECISIONS, GpuSpec, Precision, Vendor
from gpuplan.core.record import Record

_NUMERIC_PATHS: dict[str, Callable[[GpuSpec], float | int | None]] = {
    "memory_bytes": lambda g: g.memory_bytes,
    "usable_memory_bytes": lambda g: g.usable_memory_bytes,
    "memory_bandwidth_bytes_per_s": lambda g: g.memory_bandwidth_bytes_per_s,
    "tdp_watts": lambda g: g.tdp_watts,
    "launch_year": lambda g: g.launch_year,
    "mig.max_instances": lambda g: g.mig.max_instances,
    "interconnect.pcie.per_direction_bytes_per_s": lambda g: (
        g.interconnect.pcie.per_direction_bytes_per_s if g.interconnect.pcie else None
    ),
    "interconnect.gpu_link.per_direction_bytes_per_s": lambda g: (
        g.interconnect.gpu_link.per_direction_bytes_per_s if g.interconnect.gpu_link else None
    ),
    "price.cloud_on_demand.usd_per_gpu_hour": lambda g: (
        g.price.cloud_on_demand.usd_per_gpu_hour if g.price.cloud_on_demand else None
    ),
    "price.purchase.usd": lambda g: g.price.purchase.usd if g.price.purchase else None,
    **{f"peak_flops.{p}": (lambda g, p=p: g.peak_flops.get(p)) for p in PRECISIONS},  # type: ignore[misc]
}

SortKey = Literal[
    "id",
    "name",
    "memory_bytes",
    "usable_memory_bytes",
    "memory_bandwidth_bytes_per_s",
    "tdp_watts",
    "launch_year",
    "mig.max_instances",
    "interconnect.pcie.per_direction_bytes_per_s",
    "interconnect.gpu_link.per_direction_bytes_per_s",
    "price.cloud_on_demand.usd_per_gpu_hour",
    "price.purchase.usd",
    "peak_flops.fp64",
    "peak_flops.fp32",
    "peak_flops.tf32",
    "peak_flops.fp16",
    "peak_flops.bf16",
    "peak_flops.fp8",
    "peak_flops.int8",
    "peak_flops.fp4",
]
assert set(get_args(SortKey)) == {"id", "name", *_NUMERIC_PATHS}


class GpuQuery(Record):
    """Filters and order of ``GET /v1/gpus``; filters combine with AND."""

    vendor: Annotated[list[Vendor], msgspec.Meta(max_length=16)] = []
    """Keep these vendors (repeat the parameter for several)."""

    min_memory_bytes: Annotated[int, msgspec.Meta(ge=0, le=2**50)] = 0
    """Keep SKUs with at least this marketed memory."""

    min_usable_memory_bytes: Annotated[int, msgspec.Meta(ge=0, le=2**50)] = 0
    """Keep SKUs whose driver-reported memory is at least this."""

    mig: bool | msgspec.UnsetType = msgspec.UNSET
    """``true``: only MIG-capable SKUs; ``false``: only the others; absent: both."""

    precision: Annotated[list[Precision], msgspec.Meta(max_length=32)] = []
    """Keep SKUs with a matrix path for every one of these precisions."""

    sort: SortKey = "id"
    """Field to order by; SKUs without a value for it come last."""

    order: Literal["asc", "desc"] = "asc"


class GpuList(Record):
    """SKUs matching a query, in the asked order."""

    count: int
    gpus: list[GpuSpec]


def select(catalog: Catalog, query: GpuQuery) -> GpuList:
    """The SKUs of ``catalog`` that pass ``query``'s filters, ordered by its sort key."""
    kept = [
        g
        for g in catalog
        if (not query.vendor or g.vendor in query.vendor)
        and g.memory_bytes >= query.min_memory_bytes
        and g.usable_memory_bytes >= query.min_usable_memory_bytes
        and (query.mig is msgspec.UNSET or g.mig.supported == query.mig)
        and all(p in g.peak_flops for p in query.precision)
    ]
    if query.sort in ("id", "name"):
        text_key: Callable[[GpuSpec], Any] = (
            (lambda g: g.id) if query.sort == "id" else (lambda g: g.name.lower())
        )
        kept.sort(key=text_key, reverse=query.order == "desc")
    else:
        value_of = _NUMERIC_PATHS[query.sort]
        present = [g for g in kept if value_of(g) is not None]
        absent = [g for g in kept if value_of(g) is None]
        # Ties break by id ascending either way, so the order is fully determined.
        present.sort(key=lambda g: g.id)
        present.sort(key=lambda g: value_of(g) or 0, reverse=query.order == "desc")
        kept = present + absent
    return GpuList(count=len(kept), gpus=kept)
