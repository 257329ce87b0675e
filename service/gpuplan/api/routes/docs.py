"""Interactive API docs and the OpenAPI document, served by Litestar's renderers.

Litestar's own schema generator is switched off (``openapi_config=None``): the
document served here is the one :mod:`gpuplan.api.openapi` generates, the same one
committed as ``api/openapi.yaml``. Litestar's Scalar and Swagger UI renderers draw it.
"""

from typing import Any

from litestar import Request, Response
from litestar.constants import OPENAPI_JSON_HANDLER_NAME
from litestar.openapi.plugins import ScalarRenderPlugin, SwaggerRenderPlugin

from gpuplan.api.openapi import build_openapi, to_yaml
from gpuplan.api.routing import operation
from gpuplan.api.runtime import runtime

_SCALAR = ScalarRenderPlugin()
_SWAGGER = SwaggerRenderPlugin()


def document(request: Request[Any, Any, Any]) -> dict[str, Any]:
    state = runtime(request)
    if state.openapi is None:
        state.openapi = build_openapi(request.app)
    return state.openapi


# Litestar's renderers find the JSON document by this route name.
@operation("GET", "/schema/openapi.json", include_in_schema=False, name=OPENAPI_JSON_HANDLER_NAME)
async def openapi_json(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The OpenAPI document as JSON."""
    body = _SCALAR.render_json(request, document(request))
    return Response(body, media_type="application/vnd.oai.openapi+json")


@operation("GET", "/schema/openapi.yaml", include_in_schema=False)
async def openapi_yaml(request: Request[Any, Any, Any]) -> Response[str]:
    """The OpenAPI document as YAML."""
    return Response(to_yaml(document(request)), media_type="application/vnd.oai.openapi")


@operation("GET", "/schema", media_type="text/html", include_in_schema=False)
async def scalar(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Interactive API reference (Scalar)."""
    return Response(_SCALAR.render(request, document(request)), media_type="text/html")


@operation("GET", "/schema/swagger", media_type="text/html", include_in_schema=False)
async def swagger(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Swagger UI."""
    return Response(_SWAGGER.render(request, document(request)), media_type="text/html")
