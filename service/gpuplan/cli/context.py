"""What every command resolves the same way: the catalog, and reading documents.

The catalog comes from ``--catalog``, else ``GPUPLAN_CATALOG_FILE``, else the built-in
data, for every command alike. Local commands read nothing else of the server's
settings: a variable meant for the server (or for ``gpuplan plan --api``) must not stop
``gpuplan estimate``.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from gpuplan.config.catalog import load_catalog
from gpuplan.config.documents import read_document
from gpuplan.core.catalog import Catalog
from gpuplan.core.convert import convert

CATALOG_ENV = "GPUPLAN_CATALOG_FILE"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def catalog_option(command: F) -> F:
    """``--catalog FILE`` [env ``GPUPLAN_CATALOG_FILE``]; the command takes ``catalog_file``."""
    return click.option(
        "--catalog",
        "catalog_file",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar=CATALOG_ENV,
        show_envvar=True,
        help="A catalog file (TOML, YAML or JSON) merged over the built-in catalog.",
    )(command)


def catalog(catalog_file: Path | None) -> Catalog:
    """The built-in catalog, merged with ``catalog_file``; raises ``CatalogError``."""
    return load_catalog(str(catalog_file) if catalog_file is not None else None)


def read_request(path: Path, type_: type[T]) -> T:
    """A request file (YAML, JSON or TOML) as ``type_``; every bad field is named."""
    return convert(read_document(path), type_)
