"""The planner page (``/ui``) and the files it and the API reference load.

The page is static HTML and script from :mod:`gpuplan.api.ui`: it calls the API's own
endpoints from the browser and draws their answers; no planning happens here. Assets are
served only by name from the package's list (no file-system path ever comes from the
URL), with an entity tag so a browser revalidates instead of downloading them again.
"""

from typing import Any

from litestar import Request, Response
from litestar.exceptions import NotFoundException
from litestar.response import Redirect

from gpuplan.api import ui
from gpuplan.api.routing import operation

HTML = "text/html"  # Litestar adds the charset


@operation("GET", "/", include_in_schema=False, media_type=HTML)
async def root(request: Request[Any, Any, Any]) -> Redirect:
    """The planner page."""
    return Redirect("/ui", status_code=302)


@operation("GET", "/ui", include_in_schema=False, media_type=HTML)
async def planner(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The planner page: memory, GPU ranking and MIG layout drawn from the API's answers."""
    return Response(ui.page("planner"), media_type=HTML)


@operation("GET", "/ui/assets/{name:str}", include_in_schema=False, problems=(404,))
async def asset(request: Request[Any, Any, Any], name: str) -> Response[bytes]:
    """A script, style sheet or licence shipped in the package."""
    if name not in ui.ASSETS:
        raise NotFoundException(f"no asset named {name!r}")
    found = ui.asset(name)
    headers = {"etag": found.etag, "cache-control": "no-cache"}
    if request.headers.get("if-none-match") == found.etag:
        return Response(b"", status_code=304, headers=headers)
    return Response(found.body, media_type=found.media_type, headers=headers)
