"""The GPU catalog over HTTP: list with filters, and look up by any name."""

from typing import Any

from litestar import Request

from gpuplan.api.routing import operation
from gpuplan.api.runtime import runtime
from gpuplan.core.catalog import GpuList, GpuQuery, GpuSpec, select


@operation("GET", "/v1/gpus", query=GpuQuery, tags=["catalog"])
async def list_gpus(request: Request[Any, Any, Any], query: GpuQuery) -> GpuList:
    """List catalog GPUs, filtered and sorted.

    Filters combine with AND; repeat `vendor` or `precision` for several values.
    Sorting by a field a GPU lacks (a price no source gives) puts it last. Each GPU lists
    every provider's dated price under `price.cloud`; `sort=price.cloud.usd_per_gpu_hour`
    compares one basis, `price_provider` (repeatable: the lowest of them) and
    `price_kind` (default AWS on-demand), named in `price_basis`.
    """
    return select(runtime(request).catalog, query)


@operation("GET", "/v1/gpus/{id_or_alias:str}", problems=(404,), tags=["catalog"])
async def get_gpu(request: Request[Any, Any, Any], id_or_alias: str) -> GpuSpec:
    """Look up one GPU by id, alias, NVML product name, GFD label or PCI device id.

    Examples: `h100-sxm5-80gb`, `NVIDIA H100 80GB HBM3`, `NVIDIA-H100-80GB-HBM3`,
    `0x2330`, `10de:2330`. An unknown name answers 404 with the closest matches.
    """
    return runtime(request).catalog.get(id_or_alias)
