"""The catalog a process runs with: the built-in data, then the user's catalog file.

The file has the shape of the built-in data (see docs/catalog.md): a ``sources``
table and ``gpu`` entries; an entry with a known id overrides the fields it names
(a negotiated price, a measured usable memory), a new id adds a SKU.
"""

from pathlib import Path

from gpuplan.config.documents import DocumentError, read_document
from gpuplan.core.catalog import (
    Catalog,
    CatalogError,
    build_catalog,
    builtin_catalog,
    builtin_documents,
    builtin_price_tables,
)


def load_catalog(catalog_file: str | None) -> Catalog:
    """The built-in catalog, merged with ``catalog_file`` when one is given.

    Raises :class:`CatalogError` naming the file, the entry and the field.
    """
    if catalog_file is None:
        return builtin_catalog()
    path = Path(catalog_file)
    try:
        document = read_document(path)
    except DocumentError as exc:
        raise CatalogError(f"catalog file {exc}") from None
    return build_catalog(
        [*builtin_documents(), (f"catalog file {path}", document)], builtin_price_tables()
    )
