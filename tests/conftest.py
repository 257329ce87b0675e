"""Shared fixtures: apps built by the real factory, and a real Redis."""

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings

REDIS_FIXTURES = frozenset({"redis_url", "own_redis"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a Redis fixture ``redis`` (``-m "not redis"`` skips them)."""
    for item in items:
        if REDIS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.redis)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


class RedisServer:
    """A redis-server of the test's own, on a free port, that a test may stop and start."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.args = ["--save", "", "--appendonly", "no"]
        """Options after the port: no persistence unless a test asks for it."""

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not _answers(self.url):
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The machine's Redis on 127.0.0.1:6379 if it answers, else one of our own."""
    shared = "redis://127.0.0.1:6379/0"
    if _answers(shared):
        yield shared
        return
    server = RedisServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def key_prefix() -> str:
    """A Redis key prefix of this test alone, so tests sharing a Redis never collide."""
    return f"gpuplan-test:{uuid.uuid4().hex}:"


@pytest.fixture
def client() -> Iterator[TestClient[Litestar]]:
    with TestClient(app=create_app(Settings())) as test_client:
        yield test_client
