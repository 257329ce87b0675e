"""The GPU catalog: sourced specs of every accelerator a planner needs.

``builtin_catalog()`` is the shipped data; ``build_catalog(documents)`` merges a
user's catalog file over it. Lookups accept every name a GPU goes by
(:meth:`Catalog.get`).
"""

from gpuplan.core.catalog.build import CatalogError, build_catalog
from gpuplan.core.catalog.builtin import builtin_catalog, builtin_documents
from gpuplan.core.catalog.catalog import Catalog, UnknownGpu, fold
from gpuplan.core.catalog.model import PRECISIONS, GpuSpec, Precision
from gpuplan.core.catalog.select import GpuList, GpuQuery, select

__all__ = [
    "PRECISIONS",
    "Catalog",
    "CatalogError",
    "GpuList",
    "GpuQuery",
    "GpuSpec",
    "Precision",
    "UnknownGpu",
    "build_catalog",
    "builtin_catalog",
    "builtin_documents",
    "fold",
    "select",
]
