"""The GPU catalog: sourced specs of every accelerator a planner needs.

``builtin_catalog()`` is the shipped data; ``build_catalog(documents)`` merges a
user's catalog file over it. Lookups accept every name a GPU goes by
(:meth:`Catalog.get`).
"""

from gpuplan.core.catalog.build import CatalogError, build_catalog
from gpuplan.core.catalog.builtin import (
    builtin_catalog,
    builtin_documents,
    builtin_price_tables,
)
from gpuplan.core.catalog.catalog import Catalog, UnknownGpu, fold
from gpuplan.core.catalog.model import (
    PRECISIONS,
    PROVIDERS,
    CloudQuote,
    GpuSpec,
    Precision,
    PriceKind,
    PriceProvider,
    ProviderId,
)
from gpuplan.core.catalog.prices import DEFAULT_PROVIDERS, lowest
from gpuplan.core.catalog.select import GpuList, GpuQuery, select

__all__ = [
    "DEFAULT_PROVIDERS",
    "PRECISIONS",
    "PROVIDERS",
    "Catalog",
    "CatalogError",
    "CloudQuote",
    "GpuList",
    "GpuQuery",
    "GpuSpec",
    "Precision",
    "PriceKind",
    "PriceProvider",
    "ProviderId",
    "UnknownGpu",
    "build_catalog",
    "builtin_catalog",
    "builtin_documents",
    "builtin_price_tables",
    "fold",
    "lowest",
    "select",
]
