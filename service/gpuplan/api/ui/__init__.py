"""The planner page and the API reference's viewer: files shipped inside this package.

Every script and style sheet a browser loads for ``/ui`` and ``/schema`` is one of
:data:`ASSETS`, served by ``GET /ui/assets/{name}`` from the installed package; no page
names another host, and their Content-Security-Policy (:mod:`gpuplan.api.security`)
allows only the service's own origin. Neither page loads a font file: they use the
browser's system fonts.

``vendor/swagger-ui`` holds two files of Swagger UI 5.35.0, byte for byte as published
in the npm package ``swagger-ui-dist`` (Apache-2.0; its LICENSE and NOTICE beside
them). Everything else here is the project's own (docs/ui.md says why).
"""

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

# Litestar adds "; charset=utf-8" to text/* media types.
_JS = "text/javascript"
_CSS = "text/css"
_TEXT = "text/plain"

_SOURCES: dict[str, tuple[str, str]] = {
    "planner.js": ("static/planner.js", _JS),
    "planner.css": ("static/planner.css", _CSS),
    "docs.js": ("static/docs.js", _JS),
    "docs.css": ("static/docs.css", _CSS),
    "icon.svg": ("static/icon.svg", "image/svg+xml"),
    "swagger-ui-bundle.js": ("vendor/swagger-ui/swagger-ui-bundle.js", _JS),
    "swagger-ui.css": ("vendor/swagger-ui/swagger-ui.css", _CSS),
    "swagger-ui-LICENSE.txt": ("vendor/swagger-ui/LICENSE", _TEXT),
    "swagger-ui-NOTICE.txt": ("vendor/swagger-ui/NOTICE", _TEXT),
    "swagger-ui-bundle.js.LICENSE.txt": (
        "vendor/swagger-ui/swagger-ui-bundle.js.LICENSE.txt",
        _TEXT,
    ),
}
"""The URL name of each asset: its file in this package and its media type."""

ASSETS = frozenset(_SOURCES)


@dataclass(frozen=True)
class Asset:
    """A file's bytes, media type and entity tag (a hash of the bytes)."""

    body: bytes
    media_type: str
    etag: str


def _read(path: str) -> bytes:
    return files(__name__).joinpath(path).read_bytes()


@cache
def asset(name: str) -> Asset:
    """The asset served as ``/ui/assets/{name}``; :class:`KeyError` for another name."""
    path, media_type = _SOURCES[name]
    body = _read(path)
    return Asset(body, media_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


@cache
def page(name: str) -> bytes:
    """The HTML of a page: ``planner`` (``/ui``) or ``docs`` (``/schema``)."""
    return _read(f"static/{name}.html")
