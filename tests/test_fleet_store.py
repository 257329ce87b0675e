"""The Redis schema against a real Redis: write, read back, expire, replace."""

import asyncio
import json
import time
from typing import Any

import msgspec
import redis
from redis.asyncio import Redis

from gpuplan.core.fleet import MigInstance, NodeSnapshot
from gpuplan.fleet.schema import Keys
from gpuplan.fleet.store import FleetStore
from gpuplan.fleet.writer import publish
from tests.agent_fixtures import snapshot


def _roundtrip(
    redis_url: str, prefix: str, *snaps: NodeSnapshot, new_benchmark: bool = True
) -> list[NodeSnapshot]:
    async def go() -> list[NodeSnapshot]:
        client = Redis.from_url(redis_url)
        try:
            keys = Keys(prefix)
            for snap in snaps:
                await publish(client, keys, snap, new_benchmark=new_benchmark)
            return await FleetStore(client, keys).nodes()
        finally:
            await client.aclose()

    return asyncio.run(go())


def _json_hash(r: redis.Redis, key: str) -> dict[str, Any]:
    """A hash the writer stores as JSON per field (this client answers bytes)."""
    fields = {}
    for k, v in r.hgetall(key).items():
        assert isinstance(k, bytes)
        fields[k.decode()] = json.loads(v)
    return fields


def test_a_snapshot_reads_back_equal(redis_url: str, key_prefix: str) -> None:
    snap = snapshot("node-a")
    (read,) = _roundtrip(redis_url, key_prefix, snap)
    assert msgspec.json.encode(read) == msgspec.json.encode(snap)


def test_keys_carry_the_node_hash_tag_and_a_ttl(redis_url: str, key_prefix: str) -> None:
    snap = snapshot("node-a")
    _roundtrip(redis_url, key_prefix, snap)
    r = redis.Redis.from_url(redis_url)
    keys = Keys(key_prefix)
    node_key = keys.node("node-a")
    assert node_key == f"{key_prefix}node:{{node-a}}"
    per_node = [node_key, keys.bench("node-a")]
    per_node += [keys.gpu("node-a", g.uuid) for g in snap.gpus]
    per_node += [keys.mig("node-a", m.mig_uuid) for m in snap.mig_instances]
    for key in per_node:
        assert "{node-a}" in key
        assert 0 < r.ttl(key) <= 30, key
    # One MIG hash holds what a slice query needs, as JSON per field.
    mig = snap.mig_instances[0]
    fields = _json_hash(r, keys.mig("node-a", mig.mig_uuid))
    assert fields["profile"] == "3g.71gb"
    assert (fields["placement_start"], fields["placement_size"]) == (0, 4)
    assert fields["in_use"] is True
    node = _json_hash(r, node_key)
    assert node["schema"] == 1
    assert node["gpu_count"] == 3
    assert node["gpu_uuids"] == [g.uuid for g in snap.gpus]
    assert r.zscore(keys.nodes, "node-a") == snap.ts
    assert r.xlen(keys.telemetry_stream) == 1
    assert r.xlen(keys.bench_stream) == 1
    r.close()


def test_stale_nodes_are_missing_not_empty(redis_url: str, key_prefix: str) -> None:
    a, b = snapshot("node-a"), snapshot("node-b")
    assert [n.node for n in _roundtrip(redis_url, key_prefix, a, b)] == ["node-a", "node-b"]
    r = redis.Redis.from_url(redis_url)
    r.delete(Keys(key_prefix).node("node-a"))  # what the TTL does when node-a's agent stops
    r.close()

    async def read() -> tuple[list[NodeSnapshot], NodeSnapshot | None]:
        client = Redis.from_url(redis_url)
        store = FleetStore(client, Keys(key_prefix))
        try:
            return await store.nodes(), await store.node("node-a")
        finally:
            await client.aclose()

    nodes, missing = asyncio.run(read())
    assert [n.node for n in nodes] == ["node-b"]
    assert missing is None


def test_keys_expire_after_the_ttl(redis_url: str, key_prefix: str) -> None:
    snap = msgspec.structs.replace(snapshot("node-a"), ttl_seconds=1.0)
    _roundtrip(redis_url, key_prefix, snap)
    time.sleep(1.1)
    assert _roundtrip(redis_url, key_prefix) == []


def test_a_republish_replaces_the_node(redis_url: str, key_prefix: str) -> None:
    """A destroyed MIG instance or a field that became unknown must not linger."""
    first = snapshot("node-a")
    second = msgspec.structs.replace(
        first,
        mig_instances=first.mig_instances[:1],
        gpus=[msgspec.structs.replace(first.gpus[0], power_watts=None), *first.gpus[1:]],
        benchmark=None,
    )
    (read,) = _roundtrip(redis_url, key_prefix, first, second, new_benchmark=False)
    assert len(read.mig_instances) == 1
    assert read.gpus[0].power_watts is None
    assert read.benchmark is None
    r = redis.Redis.from_url(redis_url)
    keys = Keys(key_prefix)
    assert r.exists(keys.bench("node-a")) == 0
    assert r.xlen(keys.bench_stream) == 0  # no new benchmark was announced
    r.close()


def test_unsafe_node_names_are_never_looked_up(redis_url: str, key_prefix: str) -> None:
    async def read() -> NodeSnapshot | None:
        client = Redis.from_url(redis_url)
        try:
            return await FleetStore(client, Keys(key_prefix)).node("a}:x{b")
        finally:
            await client.aclose()

    assert asyncio.run(read()) is None


def test_mig_instances_across_live_nodes(redis_url: str, key_prefix: str) -> None:
    _roundtrip(redis_url, key_prefix, snapshot("node-b"), snapshot("node-a"))

    async def read() -> list[MigInstance]:
        client = Redis.from_url(redis_url)
        try:
            return await FleetStore(client, Keys(key_prefix)).mig_instances()
        finally:
            await client.aclose()

    migs = asyncio.run(read())
    assert [(m.node, m.profile, m.placement_start) for m in migs] == [
        ("node-a", "3g.71gb", 0),
        ("node-a", "2g.35gb", 4),
        ("node-a", "1g.18gb", 6),
        ("node-b", "3g.71gb", 0),
        ("node-b", "2g.35gb", 4),
        ("node-b", "1g.18gb", 6),
    ]
    assert [m.in_use for m in migs[:3]] == [True, False, False]


def test_unknown_fields_are_tolerated_and_foreign_hashes_skipped(
    redis_url: str, key_prefix: str
) -> None:
    _roundtrip(redis_url, key_prefix, snapshot("node-a"), snapshot("node-b"))
    r = redis.Redis.from_url(redis_url)
    keys = Keys(key_prefix)
    # A newer agent adds a field within v1: older readers ignore it.
    r.hset(keys.node("node-a"), "added_in_a_later_release", "42")
    # Something else wrote garbage over node-b: it is skipped, node-a still reads.
    r.hset(keys.node("node-b"), "gpu_count", "not json")
    r.close()
    assert [n.node for n in _roundtrip(redis_url, key_prefix)] == ["node-a"]
