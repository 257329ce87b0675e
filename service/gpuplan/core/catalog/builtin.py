"""The built-in catalog data: TOML files shipped inside the package.

Reading package data is part of loading the code, not I/O on the world: the files
are versioned with the code and the result is the same on every machine.
"""

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from gpuplan.core.catalog.build import build_catalog
from gpuplan.core.catalog.catalog import Catalog

DATA_PACKAGE = "gpuplan.core.catalog.data"
PRICES_PACKAGE = "gpuplan.core.catalog.data.prices"


def builtin_documents() -> list[tuple[str, Any]]:
    """``(origin, document)`` for each data file, sources first, then by name."""
    files = sorted(
        (f for f in resources.files(DATA_PACKAGE).iterdir() if f.name.endswith(".toml")),
        key=lambda f: (f.name != "sources.toml", f.name),
    )
    return [(f"gpuplan data {f.name}", tomllib.loads(f.read_text(encoding="utf-8"))) for f in files]


def builtin_price_tables() -> list[tuple[str, str, Any]]:
    """``(origin, provider id, table)`` for each price table, by provider: one file a
    provider, named after it."""
    files = sorted(
        (f for f in resources.files(PRICES_PACKAGE).iterdir() if f.name.endswith(".toml")),
        key=lambda f: f.name,
    )
    return [
        (
            f"gpuplan data prices/{f.name}",
            f.name.removesuffix(".toml"),
            tomllib.loads(f.read_text(encoding="utf-8")),
        )
        for f in files
    ]


@cache
def builtin_catalog() -> Catalog:
    """The catalog of the shipped data alone (cached: it never changes in a process)."""
    return build_catalog(builtin_documents(), builtin_price_tables())
