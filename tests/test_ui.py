"""The planner page and the API reference, served from the package: what a browser is
sent (the browser itself is in tests/test_ui_browser.py)."""

import hashlib
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from gpuplan.api import ui
from gpuplan.api.security import DOCS_CSP, UI_CSP

ROOT = Path(__file__).parent.parent
UI_DIR = ROOT / "service" / "gpuplan" / "api" / "ui"
_REFERENCE = re.compile(r"""(?:src|href)="([^"]+)\"""")


def test_root_redirects_to_the_planner(client: TestClient) -> None:  # type: ignore[type-arg]
    answer = client.get("/", follow_redirects=False)
    assert answer.status_code == 302
    assert answer.headers["location"] == "/ui"
    moved = client.get("/schema/swagger", follow_redirects=False)
    assert (moved.status_code, moved.headers["location"]) == (301, "/schema")


@pytest.mark.parametrize(("path", "csp"), [("/ui", UI_CSP), ("/schema", DOCS_CSP)])
def test_pages_reference_only_the_services_own_files(
    client: TestClient,  # type: ignore[type-arg]
    path: str,
    csp: bytes,
) -> None:
    page = client.get(path)
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == csp.decode()
    references = _REFERENCE.findall(page.text)
    assert references
    for reference in references:
        assert reference.startswith(("/", "#")), reference
        assert not reference.startswith("//"), reference
        if reference.startswith("/ui/assets/"):
            asset = client.get(reference)
            assert asset.status_code == 200, reference
            assert asset.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in page.text  # no inline script: the CSP would block it
    assert " style=" not in page.text  # nor inline styles


def test_the_planner_marks_its_three_pictures(client: TestClient) -> None:  # type: ignore[type-arg]
    text = client.get("/ui").text
    for marker in ("memory-chart", "gpu-table", "gpu-scatter", "mig-layout"):
        assert f'data-testid="{marker}"' in text
    # Every form control has a label.
    for control in re.findall(r"<(?:input|select|textarea)[^>]*\bid=\"([^\"]+)\"", text):
        if f'id="{control}" type="hidden"' in text or f'name="{control}" value=' in text:
            continue
        assert f'for="{control}"' in text, control


# The recommendation's fields the planner's form sets, by their path in the request.
FORM_PATHS = {
    "objective",
    "constraints.preferred_gpu",
    "constraints.include",
    "constraints.exclude",
    "constraints.max_gpus_per_job",
    "pricing.providers",
    "pricing.kind",
    "training.training_tokens",
    "training.global_batch_size",
    "training.global_batch_tokens",
    "training.evaluation.tokens",
    "training.evaluation.count",
    "inference.requests_per_second",
    "inference.prompt_tokens",
    "inference.output_tokens",
    "inference.duration_hours",
    "inference.max_time_to_first_token_s",
    "inference.max_time_per_output_token_s",
}


def _spec_at(schemas: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The schema of a dotted path of RecommendRequest, following refs and nullables."""
    spec: dict[str, Any] | None = schemas["RecommendRequest"]
    for part in path.split("."):
        assert spec is not None
        options = spec.get("anyOf", [spec])
        option = next((o for o in options if "$ref" in o or "properties" in o), options[0])
        if "$ref" in option:
            option = schemas[option["$ref"].rsplit("/", 1)[1]]
        spec = option.get("properties", {}).get(part)
        if spec is None:
            return None
    return spec


def test_the_planners_fields_are_the_apis(client: TestClient) -> None:  # type: ignore[type-arg]
    """Each field of the form names the request path it is sent at (and a 422 naming that
    path is shown under it): every path exists in the OpenAPI document, and the form has
    the global batch, the latency targets, the GPUs to include and exclude, the most GPUs
    per plan and the price basis."""
    text = client.get("/ui").text
    fields = dict(
        re.findall(r'<(?:input|select)[^>]*\bid="([^"]+)"[^>]*\bdata-path="([^"]+)"', text)
    )
    assert set(fields.values()) == FORM_PATHS
    schemas = client.get("/schema/openapi.json").json()["components"]["schemas"]
    for control, path in fields.items():
        assert _spec_at(schemas, path) is not None, path
        assert f'for="{control}"' in text, control
    # The GPUs to include or exclude and the price tables are chosen several at a time.
    for control in ("include", "exclude", "provider"):
        assert re.search(rf'<select id="{control}"[^>]*\bmultiple\b', text), control


@pytest.mark.parametrize(
    ("name", "media_type"),
    [("planner.js", "text/javascript; charset=utf-8"), ("planner.css", "text/css; charset=utf-8"),
     ("swagger-ui-bundle.js", "text/javascript; charset=utf-8"), ("icon.svg", "image/svg+xml"),
     ("swagger-ui-LICENSE.txt", "text/plain; charset=utf-8")],
)  # fmt: skip
def test_assets_have_their_media_type_and_revalidate(
    client: TestClient,  # type: ignore[type-arg]
    name: str,
    media_type: str,
) -> None:
    first = client.get(f"/ui/assets/{name}")
    assert first.status_code == 200
    assert first.headers["content-type"] == media_type
    assert first.headers["cache-control"] == "no-cache"
    assert first.content == ui.asset(name).body
    again = client.get(f"/ui/assets/{name}", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304
    assert again.content == b""
    # Every other answer stays no-store.
    assert client.get("/ui").headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    "name", ["nothing.js", "..%2F__init__.py", "static%2Fplanner.js", "%2e%2e"]
)
def test_only_listed_assets_are_served(client: TestClient, name: str) -> None:  # type: ignore[type-arg]
    answer = client.get(f"/ui/assets/{name}")
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("application/problem+json")


def test_every_asset_file_is_package_data() -> None:
    """A wheel carries exactly what pyproject.toml lists: every file the app serves is in it."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["gpuplan.api.ui"]
    listed = {p.relative_to(UI_DIR).as_posix() for pat in patterns for p in UI_DIR.glob(pat)}
    for name in ui.ASSETS:
        path, _ = ui._SOURCES[name]
        assert path in listed, name
    assert {"static/planner.html", "static/docs.html"} <= listed


def test_vendored_swagger_ui_is_the_published_files() -> None:
    vendor = UI_DIR / "vendor" / "swagger-ui"
    sums = re.findall(r"^([0-9a-f]{64})  (\S+)$", (vendor / "SOURCE.txt").read_text(), re.M)
    assert {name for _, name in sums} == {p.name for p in vendor.iterdir()} - {"SOURCE.txt"}
    for digest, name in sums:
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, name
