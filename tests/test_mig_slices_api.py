"""GET /v1/mig/slices end to end: instances published by the agent's writer to a real
Redis, read back by the API; 404 without Redis, 503 while it is down; 422 for bad query values."""

from typing import Any

import msgspec
import pytest

from gpuplan.core.fleet import MigInstance, NodeSnapshot
from tests.agent_fixtures import snapshot
from tests.conftest import RedisServer, free_port
from tests.helpers import (
    fleet_client,
    fleet_not_configured,
    problem,
    publish_snapshots,
    redis_outage,
)

GiB = 2**30


def _with_me(snap: NodeSnapshot) -> NodeSnapshot:
    """``snap`` plus a free 1g.18gb+me on its MIG GPU's last slot (16 GiB usable)."""
    base = snap.mig_instances[-1]
    extra: MigInstance = msgspec.structs.replace(
        base,
        mig_uuid=base.mig_uuid[:-1] + "9",
        profile="1g.18gb+me",
        gpu_instance_id=14,
        placement_start=7,
        placement_size=1,
        memory_bytes=16 * GiB,
        memory_used_bytes=0,
        in_use=False,
    )
    return msgspec.structs.replace(snap, mig_instances=[*snap.mig_instances, extra])


def _picked(body: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(s["node"], s["profile"], s["placement_start"]) for s in body["slices"]]


def test_free_instances_best_fit_first(redis_url: str, key_prefix: str) -> None:
    # The recorded H200 node: GPU 1 carries 3g.71gb (in use), 2g.35gb and 1g.18gb (free).
    publish_snapshots(
        redis_url, key_prefix, snapshot("node-b"), _with_me(snapshot("node-a")), new_benchmark=False
    )
    with fleet_client(redis_url, key_prefix) as client:
        response = client.get("/v1/mig/slices", params={"memory_gib": 10})
        assert response.status_code == 200
        body = response.json()
        assert _picked(body) == [
            ("node-a", "1g.18gb", 6),
            ("node-a", "1g.18gb+me", 7),
            ("node-b", "1g.18gb", 6),
            ("node-a", "2g.35gb", 4),
            ("node-b", "2g.35gb", 4),
        ]
        assert (body["nodes"], body["instances"], body["free"], body["matched"]) == (2, 7, 5, 5)
        first = body["slices"][0]
        assert first == {
            "node": "node-a",
            "gpu_index": 1,
            "gpu_uuid": first["gpu_uuid"],
            "gpu_model_name": "NVIDIA H200",
            "catalog_id": "h200-sxm-141gb",
            "mig_uuid": first["mig_uuid"],
            "gpu_instance_id": 13,
            "profile": "1g.18gb",
            "placement_start": 6,
            "placement_size": 1,
            "memory_bytes": 16 * GiB,
            "compute_slices": 1,
            "resource": "nvidia.com/mig-1g.18gb",
            "surplus_memory_bytes": 6 * GiB,
            "surplus_compute_slices": 0,
            "unverified": ["placements"],
        }
        assert first["mig_uuid"].startswith("MIG-")
        assert first["gpu_uuid"].startswith("GPU-")
        assert body["slices"][1]["resource"] == "nvidia.com/mig-1g.18gb.me"

        # 17 GiB: the 1g.18gb instances hold 16 GiB, whatever their name says.
        body = client.get("/v1/mig/slices?memory_gib=17").json()
        assert _picked(body) == [("node-a", "2g.35gb", 4), ("node-b", "2g.35gb", 4)]
        body = client.get("/v1/mig/slices?memory_gib=17&compute_slices=3").json()
        assert body["slices"] == []
        assert "at most 34.38 GiB and 2 compute slice(s)" in body["notes"][0]

        body = client.get("/v1/mig/slices?memory_gib=1&node=node-b&limit=1").json()
        assert _picked(body) == [("node-b", "1g.18gb", 6)]
        assert (body["nodes"], body["count"], body["matched"]) == (1, 1, 2)
        assert body["notes"] == ["1 more fit; raise `limit` (at most 1000)"]
        assert client.get("/v1/mig/slices?gpu=NVIDIA%20H200").json()["matched"] == 5
        body = client.get("/v1/mig/slices?gpu=a100-sxm4-80gb").json()
        assert body["slices"] == []
        assert "no MIG instances of model" in body["notes"][0]
        body = client.get("/v1/mig/slices?node=node-z").json()
        assert body["slices"] == []
        assert "'node-z' is not live" in body["notes"][0]


def test_an_empty_fleet_is_an_empty_list_with_a_note(redis_url: str, key_prefix: str) -> None:
    with fleet_client(redis_url, key_prefix) as client:
        response = client.get("/v1/mig/slices?memory_gib=8")
    assert response.status_code == 200
    body = response.json()
    assert (body["count"], body["slices"]) == (0, [])
    assert body["notes"] == ["no live node in the fleet: no agent has published within its TTL"]


def test_unknown_gpu_is_422_with_suggestions(redis_url: str, key_prefix: str) -> None:
    with fleet_client(redis_url, key_prefix) as client:
        for gpu, kind in (("h2000", "validation"), ("l40s", "mig-unsupported")):
            response = client.get("/v1/mig/slices", params={"gpu": gpu})
            assert response.status_code == 422, gpu
            body = response.json()
            assert body["type"] == f"urn:gpuplan:problem:{kind}"
            assert body["errors"][0]["path"] == "$.gpu"
            assert body["errors"][0]["location"] == "query"


def test_without_redis_it_is_not_configured_404() -> None:
    with fleet_client(None) as client:
        response = client.get("/v1/mig/slices?memory_gib=10")
    fleet_not_configured(response)


def test_redis_down_is_503_and_recovers(own_redis: RedisServer) -> None:
    publish_snapshots(own_redis.url, "gpuplan:v1:", snapshot("node-a"), new_benchmark=False)
    with fleet_client(own_redis.url) as client:
        assert client.get("/v1/mig/slices").json()["matched"] == 2
        redis_outage(own_redis, client, "/v1/mig/slices")
        assert client.get("/v1/mig/slices").json()["slices"] == []


def test_unreachable_redis_is_503() -> None:
    with fleet_client(f"redis://127.0.0.1:{free_port()}/0") as client:
        assert client.get("/v1/mig/slices?memory_gib=1").status_code == 503


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ("memory_gib=0", "$.memory_gib"),
        ("memory_gib=-4", "$.memory_gib"),
        ("memory_gib=lots", "$.memory_gib"),
        ("memory_gib=nan", "$.memory_gib"),
        ("memory_gib=inf", "$.memory_gib"),
        ("memory_gib=5000", "$.memory_gib"),
        ("compute_slices=0", "$.compute_slices"),
        ("compute_slices=9", "$.compute_slices"),
        ("compute_slices=1.5", "$.compute_slices"),
        ("limit=0", "$.limit"),
        ("limit=1001", "$.limit"),
        ("node=bad%7Bname%7D", "$.node"),
        ("node=", "$.node"),
        ("gpu=", "$.gpu"),
        ("memory_gib=1&memory_gib=2", "$.memory_gib"),
        ("colour=blue", "$.colour"),
    ],
)
def test_bad_query_values_are_422(query: str, path: str) -> None:
    # No Redis: a bad query is refused before the fleet is read.
    with fleet_client(None) as client:
        response = client.get(f"/v1/mig/slices?{query}")
    errors = problem(response, 422)["errors"]
    assert errors[0]["path"] == path
    assert errors[0]["location"] == "query"


def test_a_node_without_placement_rights_still_offers_its_instances(
    redis_url: str, key_prefix: str
) -> None:
    # Recorded A100 PCIe whose GPU-instance lookups answer NoPermission: the agent
    # publishes the profile (parsed from the MIG device name) but no placement.
    publish_snapshots(
        redis_url, key_prefix, snapshot("node-c", fixture="a100-pcie-mig"), new_benchmark=False
    )
    with fleet_client(redis_url, key_prefix) as client:
        body = client.get("/v1/mig/slices?memory_gib=19&compute_slices=3").json()
        (item,) = body["slices"]
        assert (item["profile"], item["placement_start"], item["placement_size"]) == (
            "3g.20gb",
            None,
            None,
        )
        assert (item["catalog_id"], item["compute_slices"], item["unverified"]) == (
            "a100-pcie-40gb",
            3,
            [],
        )
        assert item["resource"] == "nvidia.com/mig-3g.20gb"
        # 19.5 GiB usable: a 20 GiB demand does not fit the "20gb" profile.
        body = client.get("/v1/mig/slices?memory_gib=20").json()
        assert body["slices"] == []
        assert "at most 19.50 GiB and 3 compute slice(s)" in body["notes"][0]
