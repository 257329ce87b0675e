"""GET /v1/fleet/*: live nodes from a real Redis, 404 for stale ones and without Redis, 503 while it is down."""

from tests.agent_fixtures import snapshot
from tests.conftest import RedisServer, free_port
from tests.helpers import (
    fleet_client,
    fleet_not_configured,
    problem,
    publish_snapshots,
    redis_outage,
)


def test_nodes_list_and_one_node(redis_url: str, key_prefix: str) -> None:
    publish_snapshots(redis_url, key_prefix, snapshot("node-b"), snapshot("node-a"))
    with fleet_client(redis_url, key_prefix) as client:
        body = client.get("/v1/fleet/nodes").json()
        assert body["count"] == 2
        assert [n["node"] for n in body["nodes"]] == ["node-a", "node-b"]
        node = client.get("/v1/fleet/nodes/node-a").json()
        assert node["gpu_count"] == 3
        assert node["gpus"][0]["catalog_id"] == "h200-sxm-141gb"
        assert node["gpus"][2]["up"] is False
        mig = node["mig_instances"][0]
        assert {"node", "gpu_index", "gpu_uuid", "gpu_model_name", "profile", "gpu_instance_id",
                "placement_start", "placement_size", "memory_bytes", "in_use"} <= set(mig)  # fmt: skip
        bf16 = next(r for r in node["benchmark"]["matmul"] if r["dtype"] == "bf16")
        assert bf16["peak_flops"] == 989.5e12


def test_measured_flops_over_the_fleet(redis_url: str, key_prefix: str) -> None:
    publish_snapshots(redis_url, key_prefix, snapshot("node-a"), snapshot("node-b"))
    with fleet_client(redis_url, key_prefix) as client:
        body = client.get("/v1/fleet/flops").json()
    by_dtype = {m["dtype"]: m for m in body["models"]}
    assert set(by_dtype) == {"bf16", "fp8", "tf32"}
    assert by_dtype["bf16"]["catalog_id"] == "h200-sxm-141gb"
    assert by_dtype["bf16"]["devices"] == 2
    assert by_dtype["bf16"]["median_flops_per_second"] == 760e12


def test_unknown_or_stale_node_is_404(redis_url: str, key_prefix: str) -> None:
    with fleet_client(redis_url, key_prefix) as client:
        assert client.get("/v1/fleet/nodes").json() == {"count": 0, "nodes": []}
        body = problem(client.get("/v1/fleet/nodes/no-such-node"), 404)
        assert body["type"] == "urn:gpuplan:problem:unknown-node"
        assert client.get("/v1/fleet/nodes/bad%7Bname%7D").status_code == 404


def test_without_redis_the_fleet_is_not_configured_404() -> None:
    with fleet_client(None) as client:
        for path in ("/v1/fleet/nodes", "/v1/fleet/nodes/x", "/v1/fleet/flops"):
            fleet_not_configured(client.get(path))
        assert client.get("/v1/gpus/h200").status_code == 200  # planning still works


def test_redis_down_is_503_and_recovers(own_redis: RedisServer) -> None:
    publish_snapshots(own_redis.url, "gpuplan:v1:", snapshot("node-a"))
    with fleet_client(own_redis.url) as client:
        assert client.get("/v1/fleet/nodes").json()["count"] == 1
        redis_outage(own_redis, client, "/v1/fleet/nodes")
        assert client.get("/v1/fleet/nodes").json() == {"count": 0, "nodes": []}


def test_unreachable_redis_is_503() -> None:
    with fleet_client(f"redis://127.0.0.1:{free_port()}/0") as client:
        assert client.get("/v1/fleet/nodes/node-a").status_code == 503
