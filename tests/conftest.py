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

SHARED_REDIS = "redis://127.0.0.1:6379/0"
"""The machine's Redis, which every session on the machine (and CI) shares."""

RUN_PREFIX = f"gpuplan-test:{uuid.uuid4().hex[:12]}:"
"""The root of every key this test run writes to a shared Redis. Its own root, so the
session-end check (:func:`pytest_sessionfinish`) blames this run alone, never a run
beside it on the same Redis."""


def fresh_prefix(name: str = "") -> str:
    """A fresh key prefix under this run's root, ``name`` saying whose (``fuzz``)."""
    return f"{RUN_PREFIX}{name + ':' if name else ''}{uuid.uuid4().hex}:"


def forget_keys(url: str, prefix: str) -> None:
    """Delete every key whose name holds ``prefix`` (the test's own keys, and the job
    queue's ``rq:`` keys named after its queues), the ``rq:job`` hashes its queues and
    registries list, and its queues' entries in RQ's ``rq:queues`` set."""
    store = redis.Redis.from_url(url, decode_responses=True)
    try:
        names = [str(k) for k in store.scan_iter(match=f"*{prefix}*", count=1000)]
        ids: set[str] = set()
        for name in names:
            kind = store.type(name)
            if kind == "list":
                ids |= {str(m) for m in store.lrange(name, 0, -1)}
            elif kind == "zset":
                ids |= {str(m).split(":")[0] for m in store.zrange(name, 0, -1)}
        jobs = [f"rq:job:{i}" for i in ids] + [f"rq:results:{i}" for i in ids]
        if names or jobs:
            store.delete(*names, *jobs)
        for members in ("rq:queues", "rq:workers"):
            for member in store.smembers(members):
                if prefix in str(member):
                    store.srem(members, str(member))
    finally:
        store.close()


def left_behind(url: str, prefix: str = RUN_PREFIX) -> list[str]:
    """Keys under ``prefix`` that would stay forever: no expiry set (``TTL`` -1)."""
    store = redis.Redis.from_url(url, decode_responses=True, socket_connect_timeout=0.5)
    try:
        names = sorted(str(k) for k in store.scan_iter(match=f"*{prefix}*", count=1000))
        return [name for name in names if store.ttl(name) == -1]
    finally:
        store.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when its tests left keys without an expiry in the shared Redis.

    Every test that writes there removes its keys (``key_prefix`` does it for tests
    that take it) or gives them a TTL; a key left is a test to fix. The keys are named,
    then removed, so one failing run does not pollute the next."""
    if not _answers(SHARED_REDIS):
        return
    leaked = left_behind(SHARED_REDIS)
    if not leaked:
        return
    forget_keys(SHARED_REDIS, RUN_PREFIX)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(leaked)} Redis key(s) left behind by this run, with no expiry:"]
    lines += [f"  {name}" for name in leaked[:20]]
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
    if _answers(SHARED_REDIS):
        yield SHARED_REDIS
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
def key_prefix(request: pytest.FixtureRequest) -> Iterator[str]:
    """A Redis key prefix of this test alone, so tests sharing a Redis never collide;
    the keys under it are deleted after the test (when it used the shared Redis: one of
    its own dies with its server)."""
    prefix = fresh_prefix()
    yield prefix
    if "redis_url" in request.fixturenames:
        forget_keys(request.getfixturevalue("redis_url"), prefix)


@pytest.fixture
def client() -> Iterator[TestClient[Litestar]]:
    with TestClient(app=create_app(Settings())) as test_client:
        yield test_client
