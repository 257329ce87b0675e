"""Liveness, readiness against a real Redis, and the version endpoint."""

from litestar import Litestar
from litestar.testing import TestClient

from gpuplan import __version__
from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from tests.conftest import RedisServer, free_port


def test_healthz(client: TestClient[Litestar]) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_without_redis_is_ready(client: TestClient[Litestar]) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "redis": "not_configured"}


def test_readyz_with_live_redis(redis_url: str) -> None:
    with TestClient(app=create_app(Settings(redis_url=redis_url))) as client:
        assert client.get("/readyz").json() == {"status": "ready", "redis": "ok"}


def test_readyz_with_unreachable_redis_is_degraded_not_failed() -> None:
    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_timeout_seconds=0.2)
    with TestClient(app=create_app(settings)) as client:
        response = client.get("/readyz")
        assert response.status_code == 200
        assert response.json() == {"status": "degraded", "redis": "down"}
        assert client.get("/healthz").status_code == 200


def test_readyz_follows_redis_down_and_back(own_redis: RedisServer) -> None:
    with TestClient(app=create_app(Settings(redis_url=own_redis.url))) as client:
        assert client.get("/readyz").json()["redis"] == "ok"
        own_redis.stop()
        assert client.get("/readyz").json() == {"status": "degraded", "redis": "down"}
        assert client.get("/healthz").status_code == 200
        own_redis.start()
        assert client.get("/readyz").json() == {"status": "ready", "redis": "ok"}


def test_version(client: TestClient[Litestar]) -> None:
    body = client.get("/v1/version").json()
    assert body["name"] == "gpuplan"
    assert body["version"] == __version__
    assert body["api_version"] == "v1"


def test_interactive_docs_are_served(client: TestClient[Litestar]) -> None:
    page = client.get("/schema")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "/schema/openapi.json" in page.text
    assert client.get("/schema/swagger").status_code == 200
    assert client.get("/schema/openapi.json").json()["openapi"] == "3.1.0"
    assert client.get("/schema/openapi.yaml").text.startswith("openapi: 3.1.0")
