"""Filtering and sorting the catalog, as ``GET /v1/gpus`` offers it."""

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, get_args

import msgspec

from gpuplan.core.catalog.catalog import Catalog
from gpuplan.core.catalog.model import (
    PRECISIONS,
    GpuSpec,
    Precision,
    PriceKind,
    ProviderId,
    Vendor,
)
from gpuplan.core.catalog.prices import DEFAULT_PROVIDERS, lowest
from gpuplan.core.record import Record

PRICE_SORT = "price.cloud.usd_per_gpu_hour"
"""The sort by cloud price: it reads the price tables the query names (``price_provider``,
``price_kind``), and a catalog file's negotiated price where one is set."""

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
    "price.cloud.usd_per_gpu_hour",
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
assert set(get_args(SortKey)) == {"id", "name", PRICE_SORT, *_NUMERIC_PATHS}


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
    """Field to order by; SKUs without a value for it come last. ``price.cloud.usd_per_gpu_hour``
    orders by the cloud price of one basis: ``price_provider`` and ``price_kind``."""

    order: Literal["asc", "desc"] = "asc"
    price_provider: Annotated[list[ProviderId], msgspec.Meta(max_length=8)] = []
    """Price tables the price sort reads (repeat for several: each GPU at the lowest of
    them); empty: the default basis, AWS. A catalog file's negotiated price wins."""

    price_kind: PriceKind = "on_demand"
    """Which of those tables' prices the price sort reads: ``on_demand``, ``spot`` or
    ``reserved``."""


class GpuList(Record):
    """SKUs matching a query, in the asked order."""

    count: int
    gpus: list[GpuSpec]
    price_basis: str | None = None
    """Sorted by price: the prices it compared (tables and kind)."""


def basis_price(gpu: GpuSpec, providers: Sequence[ProviderId], kind: PriceKind) -> float | None:
    """``gpu``'s cloud price on one basis: a catalog file's negotiated price where one is
    set, else the lowest ``kind`` price among ``providers``' tables (default: AWS)."""
    if gpu.price.cloud_on_demand is not None:
        return gpu.price.cloud_on_demand.usd_per_gpu_hour
    quote = lowest(gpu, providers or DEFAULT_PROVIDERS, kind)
    return quote.usd_per_gpu_hour if quote else None


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
        value_of = _NUMERIC_PATHS.get(query.sort) or (
            lambda g: basis_price(g, query.price_provider, query.price_kind)
        )
        present = [g for g in kept if value_of(g) is not None]
        absent = [g for g in kept if value_of(g) is None]
        # Ties break by id ascending either way, so the order is fully determined.
        present.sort(key=lambda g: g.id)
        present.sort(key=lambda g: value_of(g) or 0, reverse=query.order == "desc")
        kept = present + absent
    basis = None
    if query.sort == PRICE_SORT:
        providers = query.price_provider or list(DEFAULT_PROVIDERS)
        basis = (
            f"{query.price_kind} prices of {', '.join(providers)} (each GPU at the lowest); "
            "a catalog file's negotiated price wins; GPUs none of them lists come last"
        )
    return GpuList(count=len(kept), gpus=kept, price_basis=basis)
