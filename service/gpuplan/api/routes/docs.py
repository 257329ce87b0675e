"""The interactive API reference and the OpenAPI document.

Litestar's own schema generator is switched off (``openapi_config=None``): the
document served here is the one :mod:`gpuplan.api.openapi` generates, the same one
committed as ``api/openapi.yaml``. Swagger UI draws it, from the copy shipped in this
package (:mod:`gpuplan.api.ui`): the reference works where no CDN can be reached.
"""

from typing import Any

import msgspec
from litestar import Request, Response
from litestar.response import Redirect

from gpuplan.api import ui
from gpuplan.api.openapi import build_openapi, to_yaml
from gpuplan.api.routing import operation
from gpuplan.api.runtime import runtime

HTML = "text/html"  # Litestar adds the charset


def document(request: Request[Any, Any, Any]) -> dict[str, Any]:
    state = runtime(request)
    if state.openapi is None:
        state.openapi = build_openapi(request.app)
    return state.openapi


@operation("GET", "/schema/openapi.json", include_in_schema=False)
async def openapi_json(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The OpenAPI document as JSON."""
    body = msgspec.json.encode(document(request))
    return Response(body, media_type="application/vnd.oai.openapi+json")


@operation("GET", "/schema/openapi.yaml", include_in_schema=False)
async def openapi_yaml(request: Request[Any, Any, Any]) -> Response[str]:
    """The OpenAPI document as YAML."""
    return Response(to_yaml(document(request)), media_type="application/vnd.oai.openapi")


@operation("GET", "/schema", media_type=HTML, include_in_schema=False)
async def reference(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Interactive API reference (Swagger UI, served from the package)."""
    return Response(ui.page("docs"), media_type=HTML)


@operation("GET", "/schema/swagger", media_type=HTML, include_in_schema=False)
async def swagger(request: Request[Any, Any, Any]) -> Redirect:
    """The reference's former Swagger UI address: ``/schema`` is Swagger UI now."""
    return Redirect("/schema", status_code=301)
