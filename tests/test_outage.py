"""A Redis outage under load: planning carries on, the fleet answers 503, then recovers.

Planning here is every route that needs no Redis: estimates, recommendations, the CI
plan (which says in its warnings that it used catalog FLOP/s), MIG plans and profiles,
the catalog.

The test's own redis-server is stopped while a pool of clients keeps sending planning,
fleet and probe requests; it is then started again (empty: no persistence) and an
agent-style publish repopulates it. Planning never fails, fleet routes answer a 503
problem (never a hang or a 500), ``/readyz`` says degraded while ``/healthz`` stays
ok, and the fleet answers again within 5 s of Redis returning, without a restart.
"""

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from tests.agent_fixtures import snapshot
from tests.conftest import RedisServer
from tests.helpers import publish_snapshots

pytestmark = pytest.mark.slow

PLANNING: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/memory/estimate",
     {"model": {"name": "llama-2-7b"}, "workload": {"mode": "inference", "sequence_length": 2048},
      "gpu": "h100-sxm5-80gb"}),
    ("POST", "/v1/recommendations",
     {"model": {"name": "llama-2-7b"}, "workload": {"mode": "inference", "sequence_length": 2048},
      "limit": 3}),
    ("POST", "/v1/plan",
     {"model": {"name": "llama-2-7b"}, "workload": {"mode": "inference", "sequence_length": 2048},
      "targets": {"fits": {"gpu": "h100-sxm5-80gb"}}}),
    ("POST", "/v1/mig/plan",
     {"gpu": "a100-sxm4-80gb", "workloads": [{"name": "a", "profile": "1g.10gb", "count": 3}]}),
    ("GET", "/v1/mig/profiles?gpu=a100-sxm4-80gb", None),
    ("GET", "/v1/gpus?vendor=nvidia", None),
    ("GET", "/v1/gpus/h100-sxm5-80gb", None),
    ("GET", "/v1/models", None),
    ("GET", "/v1/version", None),
]  # fmt: skip


def _hammer(
    client: TestClient[Litestar], stop: threading.Event, seen: Counter[str], worst: list[float]
) -> None:
    i = 0
    while not stop.is_set():
        method, path, body = PLANNING[i % len(PLANNING)]
        i += 1
        started = time.perf_counter()
        response = client.request(method, path, json=body)
        worst[0] = max(worst[0], time.perf_counter() - started)
        seen[f"{path.split('?')[0]} {response.status_code}"] += 1


def test_redis_outage_under_load(own_redis: RedisServer) -> None:
    publish_snapshots(own_redis.url, "gpuplan:v1:", snapshot("node-a"))
    settings = Settings(redis_url=own_redis.url, redis_timeout_seconds=0.2)
    seen: Counter[str] = Counter()
    worst = [0.0]
    stop = threading.Event()
    with TestClient(app=create_app(settings)) as client, ThreadPoolExecutor(4) as pool:
        assert client.get("/v1/fleet/nodes").json()["count"] == 1
        workers = [pool.submit(_hammer, client, stop, seen, worst) for _ in range(4)]
        try:
            time.sleep(0.3)
            own_redis.stop()
            down_until = time.monotonic() + 2.0
            while time.monotonic() < down_until:
                fleet = client.get("/v1/fleet/nodes")
                assert fleet.status_code == 503, fleet.text
                assert fleet.headers["content-type"].startswith("application/problem+json")
                assert fleet.json()["type"] == "urn:gpuplan:problem:fleet-unavailable"
                assert client.get("/v1/fleet/flops").status_code == 503
                assert client.get("/v1/fleet/nodes/node-a").status_code == 503
                slices = client.get("/v1/mig/slices?memory_gib=5")
                assert slices.status_code == 503, slices.text
                assert slices.headers["content-type"].startswith("application/problem+json")
                placed = client.post("/v1/fleet/placements", json={"memory_gib": 5})
                assert placed.status_code == 503, placed.text
                assert client.get("/readyz").json() == {"status": "degraded", "redis": "down"}
                assert client.get("/healthz").json() == {"status": "ok"}
            planned = client.post("/v1/plan", json=PLANNING[2][2])
            assert planned.status_code == 200
            assert any("does not answer" in w for w in planned.json()["warnings"])
            own_redis.start()
            back = time.monotonic()
            publish_snapshots(
                own_redis.url, "gpuplan:v1:", snapshot("node-a")
            )  # the agent republishes
            while True:
                fleet = client.get("/v1/fleet/nodes")
                if fleet.status_code == 200 and fleet.json()["count"] == 1:
                    break
                assert time.monotonic() - back < 5.0, f"fleet not back within 5 s: {fleet.text}"
                time.sleep(0.05)
            assert client.get("/readyz").json() == {"status": "ready", "redis": "ok"}
            time.sleep(0.3)
        finally:
            stop.set()
            for worker in workers:
                worker.result(timeout=30)
    # Planning answered 200, every time, and never waited on the dead Redis.
    assert seen, "no planning requests were sent"
    assert all(key.endswith(" 200") for key in seen), seen
    assert sum(seen.values()) >= 20, seen
    assert worst[0] < 2.0, f"a planning request took {worst[0]:.2f} s during the outage"
